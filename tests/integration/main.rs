//! The integration tests: every command as a process, against real opencode, real SQLite files
//! and a real D-Bus notification daemon where they can run here.

#[path = "../support/mod.rs"]
mod support;

mod alert;
mod detect;
mod fixtures;
mod readers;
mod store;
