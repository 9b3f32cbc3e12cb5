fn main() {
    std::process::exit(oc_watchdog::store::cmd::main())
}
