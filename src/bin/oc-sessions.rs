fn main() {
    std::process::exit(oc_watchdog::sessions::main())
}
