//! Writes man/<command>.1 and man/completions/ from the clap definitions and src/docs.rs, and
//! man/oc-watchdog-tick.1 and man/oc-watchdog-follow.1 (the scripts, which have no clap
//! definition) from src/docs.rs alone.
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

/// SEE ALSO of `name`: every other page of the toolkit.
fn see_also(name: &str) -> String {
    let pages: Vec<String> = oc_watchdog::docs::PAGES
        .iter()
        .map(|p| p.name)
        .chain([oc_watchdog::docs::TICK.name, oc_watchdog::docs::FOLLOW.name])
        .filter(|n| *n != name)
        .map(|n| format!("{n}(1)"))
        .collect();
    format!("{}; the README's walk-through", pages.join(", "))
}

/// The subcommands, each under its full name (`wd-store tick`) with its own options; clap_mangen's
/// section would name a page per subcommand (`wd-store-tick(1)`), and none exists.
fn subcommands(out: &mut Vec<u8>, cmd: &clap::Command) {
    writeln!(out, ".SH COMMANDS").unwrap();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let full = format!("{} {}", cmd.get_name(), sub.get_name());
        writeln!(out, ".TP\n\\fB{}\\fR", roff_escape(&full)).unwrap();
        if let Some(about) = sub.get_long_about().or(sub.get_about()) {
            writeln!(out, "{}", roff_escape(&about.to_string())).unwrap();
        }
        let has_args = sub
            .get_arguments()
            .any(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"));
        if has_args {
            let mut opts = Vec::new();
            let sub = sub
                .clone()
                .disable_help_flag(true)
                .disable_version_flag(true);
            clap_mangen::Man::new(sub)
                .render_options_section(&mut opts)
                .unwrap();
            // the options without their section header, indented under the command
            writeln!(out, ".RS").unwrap();
            for line in String::from_utf8(opts).unwrap().lines() {
                if !line.starts_with(".SH") {
                    writeln!(out, "{line}").unwrap();
                }
            }
            writeln!(out, ".RE").unwrap();
        }
    }
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
        subcommands(&mut out, &cmd);
    }
    section(&mut out, "JSONL FIELDS", page.fields);
    section(&mut out, "EXIT STATUS", page.exit);
    section(&mut out, "EXAMPLES", page.examples);
    section(&mut out, "SEE ALSO", &see_also(page.name));
    out
}

/// The tick script's page: the same sections, written out in src/docs.rs.
fn script_page(p: &oc_watchdog::docs::Script) -> Vec<u8> {
    let mut out = Vec::new();
    let version = env!("CARGO_PKG_VERSION");
    writeln!(out, ".TH {} 1 \"{} {version}\"", p.name, p.name).unwrap();
    writeln!(
        out,
        ".SH NAME\n{} \\- {}",
        roff_escape(p.name),
        roff_escape(p.about)
    )
    .unwrap();
    section(&mut out, "SYNOPSIS", p.synopsis);
    section(&mut out, "DESCRIPTION", p.description);
    section(&mut out, "FILES", p.files);
    section(&mut out, "EXIT STATUS", p.exit);
    section(&mut out, "EXAMPLES", p.examples);
    section(&mut out, "SEE ALSO", &see_also(p.name));
    out
}

/// Mends what clap_complete 4.6 gets wrong. Its bash script walks the words to a subcommand's
/// arm with the binary's name mangled one way (`wd__store__subcmd__loops`) and names the arms
/// with it mangled another (`wd__subcmd__store__subcmd__loops`), so after a subcommand of a
/// hyphenated binary nothing was offered; and every shell offers hidden subcommands
/// (`notify-on-action`, which only the desktop channel runs).
fn mend(shell: Shell, name: &str, hidden: &[String], text: String) -> String {
    let text = match shell {
        Shell::Bash => text.replace(
            &format!("{}__subcmd__", name.replace('-', "__subcmd__")),
            &format!("{}__subcmd__", name.replace('-', "__")),
        ),
        _ => text,
    };
    let offered = |line: &str| {
        !hidden.iter().any(|h| match shell {
            Shell::Zsh => line.trim_start().starts_with(&format!("'{h}:")),
            Shell::Fish => line.contains(&format!("-a \"{h}\"")),
            _ => false,
        })
    };
    let mut out = String::new();
    for line in text.lines().filter(|l| offered(l)) {
        match line.split_once("opts=\"") {
            // bash's words offered at a place: the hidden ones go
            Some((lead, words)) if shell == Shell::Bash => {
                let words = words.trim_end_matches('"');
                let kept: Vec<&str> = words
                    .split(' ')
                    .filter(|w| !hidden.iter().any(|h| h == w))
                    .collect();
                out += &format!("{lead}opts=\"{}\"", kept.join(" "));
            }
            _ => out += line,
        }
        out.push('\n');
    }
    out
}

pub fn commands() -> Vec<clap::Command> {
    vec![
        oc_watchdog::cmd::oc_sessions::Args::command(),
        oc_watchdog::cmd::oc_calls::Args::command(),
        oc_watchdog::cmd::progress_detect::Args::command(),
        oc_watchdog::cmd::wd_store::Args::command(),
        oc_watchdog::cmd::wd_alert::Args::command(),
    ]
}

/// A page whose examples show a table's cut cells (`…`, real output) tells roff to write
/// `...` where its device has no such glyph (man in a C locale warned "can't find special
/// character 'u2026'"), after its `.TH` line.
fn ellipsis(page: Vec<u8>) -> Vec<u8> {
    let text = String::from_utf8(page).unwrap();
    if !text.contains('…') {
        return text.into_bytes();
    }
    let mut out = String::new();
    for line in text.split_inclusive('\n') {
        out += line;
        if line.starts_with(".TH ") {
            out += ".fchar \\[u2026] ...\n";
        }
    }
    out.into_bytes()
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
        std::fs::write(
            dir.join(format!("{name}.1")),
            ellipsis(page(cmd.clone(), p)),
        )
        .unwrap();
        let hidden: Vec<String> = cmd
            .get_subcommands()
            .filter(|s| s.is_hide_set())
            .map(|s| s.get_name().to_string())
            .collect();
        for (shell, file) in [
            (Shell::Bash, format!("{name}.bash")),
            (Shell::Zsh, format!("_{name}")),
            (Shell::Fish, format!("{name}.fish")),
        ] {
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut cmd, name.clone(), &mut buf);
            let text = mend(shell, &name, &hidden, String::from_utf8(buf).unwrap());
            std::fs::write(dir.join("completions").join(file), text).unwrap();
        }
    }
    for script in [&oc_watchdog::docs::TICK, &oc_watchdog::docs::FOLLOW] {
        std::fs::write(
            dir.join(format!("{}.1", script.name)),
            ellipsis(script_page(script)),
        )
        .unwrap();
    }
}
