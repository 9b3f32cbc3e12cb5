fn main() {
    std::process::exit(oc_watchdog::cmd::wd_store::main())
}
