fn main() {
    std::process::exit(oc_watchdog::cmd::oc_sessions::main())
}
