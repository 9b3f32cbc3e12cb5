//! The commands, one file each: its clap `Args` and a short `run(args, stdin, out)`; the
//! binaries in `src/bin/` only call it.

pub mod wd_alert;
