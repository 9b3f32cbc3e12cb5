//! How the command masker treats a corpus of real commands: how many commands it changes and
//! (with `--show`) each change, to check that ordinary work stays recognisable.
//!
//!   cargo run -q --example mask-corpus -- --show < ../shared/corpora/miniswe-productive-dev.jsonl

use std::io::BufRead;

fn main() {
    let show = std::env::args().any(|a| a == "--show");
    let (mut total, mut changed) = (0usize, 0usize);
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { continue };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let Some(cmd) = v["args"]["command"].as_str() else {
            continue;
        };
        total += 1;
        let masked = oc_watchdog::scrub::mask_command(cmd);
        if masked != cmd {
            changed += 1;
            if show {
                println!("- {cmd:?}\n+ {masked:?}");
            }
        }
    }
    println!("{changed} of {total} commands changed by masking");
}
