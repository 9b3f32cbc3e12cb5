// mimalloc: measured on the 200,000-session bench, glibc's allocator kept 20% more resident than
// the heap held (parse temporaries between long-lived session state); see benches/detect.rs
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(oc_watchdog::cmd::progress_detect::main())
}
