fn main() {
    eprintln!("progress-detect: not yet built (see the issues)");
    std::process::exit(2)
}
