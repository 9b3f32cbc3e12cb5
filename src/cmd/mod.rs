//! The five commands, one module each: its clap `Args` and a short `run(args, stdin, out)`
//! that the binary in `src/bin/` calls.

pub mod wd_store;
