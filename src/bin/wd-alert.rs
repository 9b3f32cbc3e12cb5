fn main() {
    std::process::exit(oc_watchdog::cmd::wd_alert::main())
}
