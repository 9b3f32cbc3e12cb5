fn main() {
    std::process::exit(oc_watchdog::calls::main())
}
