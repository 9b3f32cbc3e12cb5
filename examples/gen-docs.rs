//! Writes man/<command>.1 and man/completions/ from the clap definitions and src/docs.rs.
//!
//!     cargo run --example gen-docs
//!
//! A test checks that the committed pages match what this writes.

use clap::CommandFactory;
use clap_complete::Shell;
use std::io::Write;
use std::path::Path;

fn roff_escape(s: &str) -> String {
    s.replace('\\', "\\e").replace('-', "\\-")
}

fn section(out: &mut Vec<u8>, title: &str, body: &str) {
    writeln!(out, ".SH \"{title}\"\n.nf").unwrap();
    for line in body.lines() {
        let l = roff_escape(line);
        // a line starting with . or ' would be a roff request
        if l.starts_with('.') || l.starts_with('\'') {
            writeln!(out, "\\&{l}").unwrap();
        } else {
            writeln!(out, "{l}").unwrap();
        }
    }
    writeln!(out, ".fi").unwrap();
}

pub fn page(cmd: clap::Command, page: &oc_watchdog::docs::Page) -> Vec<u8> {
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    man.render_title(&mut out).unwrap();
    man.render_name_section(&mut out).unwrap();
    man.render_synopsis_section(&mut out).unwrap();
    man.render_description_section(&mut out).unwrap();
    man.render_options_section(&mut out).unwrap();
    if cmd.has_subcommands() {
        man.render_subcommands_section(&mut out).unwrap();
    }
    section(&mut out, "JSONL FIELDS", page.fields);
    section(&mut out, "EXIT STATUS", page.exit);
    section(&mut out, "EXAMPLES", page.examples);
    section(
        &mut out,
        "SEE ALSO",
        "oc-sessions(1), oc-calls(1), progress-detect(1), wd-store(1), wd-alert(1); the README's walk-through",
    );
    out
}

pub fn commands() -> Vec<clap::Command> {
    vec![
        oc_watchdog::sessions::Args::command(),
        oc_watchdog::calls::Args::command(),
        oc_watchdog::detect::cmd::Args::command(),
        oc_watchdog::cmd::wd_store::Args::command(),
        oc_watchdog::alert::cmd::Args::command(),
    ]
}

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "man".into());
    let dir = Path::new(&dir);
    std::fs::create_dir_all(dir.join("completions")).unwrap();
    for mut cmd in commands() {
        let name = cmd.get_name().to_string();
        let p = oc_watchdog::docs::PAGES
            .iter()
            .find(|p| p.name == name)
            .unwrap();
        std::fs::write(dir.join(format!("{name}.1")), page(cmd.clone(), p)).unwrap();
        for (shell, file) in [
            (Shell::Bash, format!("{name}.bash")),
            (Shell::Zsh, format!("_{name}")),
            (Shell::Fish, format!("{name}.fish")),
        ] {
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut cmd, name.clone(), &mut buf);
            std::fs::write(dir.join("completions").join(file), buf).unwrap();
        }
    }
}
