//! The commands, one file each with its clap `Args` and a short `run(args, stdin, out)`; the
//! binaries in `src/bin/` only call their `main`.

pub mod oc_calls;
pub mod oc_sessions;
pub mod progress_detect;
pub mod wd_alert;
pub mod wd_store;
