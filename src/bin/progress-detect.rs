fn main() {
    std::process::exit(oc_watchdog::detect::cmd::main())
}
