//! oc-watchdog: catch opencode agent sessions that spin without progress.
//!
//! The library behind five commands that pass JSON Lines over pipes (see [`record`] for the
//! stream contract). Each command module has a `run` function; the binaries only call it.
#![forbid(unsafe_code)]

pub mod alert;
pub mod block;
pub mod channels;
pub mod check;
pub mod claude_hook;
pub mod cli;
pub mod clock;
pub mod cmd;
pub mod config;
pub mod detect;
pub mod docs;
pub mod event;
pub mod liveness;
pub mod metrics;
pub mod monotonic;
pub mod notify;
pub mod paths;
pub mod record;
pub mod report;
pub mod scrub;
pub mod severity;
pub mod sources;
pub mod stop;
pub mod store;
pub mod vocab;
