//! The integration tests: every command as a process, against real opencode, real SQLite files
//! and a real D-Bus notification daemon where they can run here.

#[path = "../support/mod.rs"]
mod support;

mod agents;
mod alert;
mod block;
mod detect;
mod fixtures;
mod fleet;
mod follow;
mod follow_faults;
mod follow_sources;
mod hardening;
mod liveness;
mod man;
mod owners;
mod popups;
mod privacy;
mod proof;
mod races;
mod readers;
mod report;
mod sources;
mod stop;
mod store;
mod tick;

/// The committed man pages and completions are what the clap definitions produce.
#[test]
fn man_pages_and_completions_are_up_to_date() {
    let dir = tempfile::tempdir().unwrap();
    let st = std::process::Command::new(env!("CARGO"))
        .args(["run", "-q", "--example", "gen-docs", "--"])
        .arg(dir.path())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap();
    assert!(st.success());
    for e in std::fs::read_dir(support::repo().join("man")).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            let name = p.file_name().unwrap();
            assert_eq!(
                std::fs::read_to_string(&p).unwrap(),
                std::fs::read_to_string(dir.path().join(name)).unwrap(),
                "{} is stale: run cargo run --example gen-docs",
                p.display()
            );
        }
    }
}
