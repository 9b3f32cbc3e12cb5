fn main() {
    std::process::exit(oc_watchdog::alert::cmd::main())
}
