//! `oc-calls`: turn sessions into tool-call fingerprints.
//!
//! In: session ids as arguments, or JSONL on stdin whose `session` records name their source
//! (a server URL or a database path); every input line is passed through unchanged. Out: after
//! each session record, its `call` records in call order and one `activity` record (times and
//! states for the liveness judge); a `blind` record (and exit 2) for a
//! session whose shape is not understood. Never message text, tool output or file content.

use crate::cli::{for_each_line, Exit, Out};
use crate::config::Config;
use crate::opencode::{self, convert, db::Db, Client, Fault};
use crate::record::{kind_of, to_line, Session};
use crate::sessions::blind;
use anyhow::{anyhow, Result};
use clap::Parser;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  oc-calls ses_2b1c9d0e4ffeXyZ | jq -c '[.tool, .args.filePath, .landed]'
  oc-sessions --since 10m | oc-calls | progress-detect
  oc-calls --db ~/.local/share/opencode/opencode.db ses_2b1c9d0e4ffeXyZ > session.jsonl";

/// Turn opencode sessions into scrubbed tool-call fingerprints (JSON Lines).
#[derive(Parser, Debug)]
#[command(name = "oc-calls", version, after_help = EXAMPLES)]
pub struct Args {
    /// Session ids to read. Without them, session records are read from stdin.
    #[arg(value_name = "SESSION")]
    pub sessions: Vec<String>,
    /// Server to read the given session ids from (repeatable; default as for oc-sessions).
    #[arg(long = "server", value_name = "URL")]
    pub servers: Vec<String>,
    /// Read the given session ids from opencode's database (default path
    /// $XDG_DATA_HOME/opencode/opencode.db).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "")]
    pub db: Option<PathBuf>,
    /// Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Flush after every record.
    #[arg(long)]
    pub line_buffered: bool,
}

pub fn main() -> i32 {
    crate::cli::main("oc-calls", run)
}

/// Where a session's messages come from.
enum Reader {
    Http(Client),
    Db(Db),
}

impl Reader {
    fn name(&self) -> String {
        match self {
            Reader::Http(c) => c.base.clone(),
            Reader::Db(d) => d.path.display().to_string(),
        }
    }

    fn messages(&self, id: &str) -> Result<Value, Fault> {
        match self {
            Reader::Http(c) => c.get(&format!("/session/{id}/message")),
            Reader::Db(d) => d.messages(id).map_err(|e| Fault::Broken(format!("{e:#}"))),
        }
    }

    fn session(&self, id: &str) -> Result<Option<Value>, Fault> {
        match self {
            Reader::Http(c) => match c.get(&format!("/session/{id}")) {
                Ok(v) => Ok(Some(v)),
                Err(Fault::NotFound(_)) => Ok(None),
                Err(f) => Err(f),
            },
            Reader::Db(d) => d.session(id).map_err(|e| Fault::Broken(format!("{e:#}"))),
        }
    }
}

struct Calls<'a> {
    out: &'a mut Out,
    lines: convert::LineCache,
    code: Exit,
}

impl Calls<'_> {
    /// Emits the calls of one session. Shape problems become a `blind` record.
    fn emit(&mut self, reader: &Reader, id: &str) -> Result<()> {
        let msgs = match reader.messages(id) {
            Ok(m) => m,
            // Deleted between listing and reading: nothing to judge, nothing wrong.
            Err(Fault::NotFound(_)) => return Ok(()),
            Err(f) => return self.blind(&reader.name(), &format!("session {id}: {f}")),
        };
        match convert::calls_of(id, &msgs, &mut self.lines) {
            Ok(calls) => {
                for c in &calls {
                    self.out.line(&to_line("call", c)?)?;
                }
                let act = convert::activity_of(id, &msgs);
                self.out.line(&to_line("activity", &act)?)?;
                Ok(())
            }
            Err(why) => self.blind(&reader.name(), &format!("session {id}: {why}")),
        }
    }

    fn blind(&mut self, source: &str, reason: &str) -> Result<()> {
        self.code = Exit::Error;
        blind(self.out, source, reason)
    }
}

pub fn run(args: Args, stdin: &mut dyn BufRead, out: &mut Out) -> Result<Exit> {
    out.line_buffered(args.line_buffered);
    let cfg = Config::load(args.config.as_deref())?;
    let mut c = Calls {
        out,
        lines: convert::LineCache::default(),
        code: Exit::Ok,
    };
    if !args.sessions.is_empty() {
        let readers: Vec<Reader> = match &args.db {
            Some(p) => {
                let path = if p.as_os_str().is_empty() {
                    cfg.opencode_db()
                } else {
                    p.clone()
                };
                vec![Reader::Db(Db::open(&path)?)]
            }
            None => {
                let given = if args.servers.is_empty() {
                    cfg.opencode.servers.clone()
                } else {
                    args.servers.clone()
                };
                let (live, broken) = opencode::probe(&opencode::servers(&given)?);
                for (url, why) in broken {
                    c.blind(&url, &why)?;
                }
                live.into_iter().map(|l| Reader::Http(l.client)).collect()
            }
        };
        if readers.is_empty() {
            return Err(anyhow!("no opencode server answered and no --db was given"));
        }
        let progress = Progress::new(args.sessions.len());
        for (i, id) in args.sessions.iter().enumerate() {
            progress.show(i);
            let mut found = false;
            for r in &readers {
                match r.session(id) {
                    Ok(Some(v)) => {
                        let st = matches!(r, Reader::Http(_)).then_some("idle");
                        match convert::session_of(&v, st, &r.name()) {
                            Ok(s) => c.out.line(&to_line("session", &s)?)?,
                            Err(why) => c.blind(&r.name(), &format!("session {id}: {why}"))?,
                        }
                        c.emit(r, id)?;
                        found = true;
                        break;
                    }
                    Ok(None) => {}
                    Err(f) => c.blind(&r.name(), &format!("session {id}: {f}"))?,
                }
            }
            if !found {
                eprintln!("oc-calls: session {id}: not found");
                c.code = Exit::Error;
            }
        }
        progress.done();
        return Ok(c.code);
    }

    let mut http: HashMap<String, Reader> = HashMap::new();
    let mut dbs: HashMap<String, Reader> = HashMap::new();
    let mut bad = false;
    let progress = Progress::new(usize::MAX);
    let mut read = 0usize;
    for_each_line(&[], stdin, |name, n, line| {
        c.out.line(line)?;
        let kind = match kind_of(line) {
            Ok(k) => k,
            Err(e) => {
                eprintln!("oc-calls: {name}:{n}: {e}");
                bad = true;
                return Ok(());
            }
        };
        if kind.as_deref() != Some("session") {
            return Ok(());
        }
        let s: Session = match serde_json::from_str(line) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("oc-calls: {name}:{n}: {e}");
                bad = true;
                return Ok(());
            }
        };
        let Some(src) = s.source.clone() else {
            eprintln!("oc-calls: {name}:{n}: session {} has no \"source\"", s.id);
            bad = true;
            return Ok(());
        };
        let reader = if src.starts_with("http://") || src.starts_with("https://") {
            http.entry(src.clone())
                .or_insert_with(|| Reader::Http(Client::new(&src)))
        } else {
            if !dbs.contains_key(&src) {
                match Db::open(std::path::Path::new(&src)) {
                    Ok(d) => {
                        dbs.insert(src.clone(), Reader::Db(d));
                    }
                    Err(e) => return c.blind(&src, &format!("{e:#}")),
                }
            }
            &dbs[&src]
        };
        progress.show(read);
        read += 1;
        c.emit(reader, &s.id)
    })?;
    progress.done();
    if bad {
        c.code = Exit::Error;
    }
    Ok(c.code)
}

/// `oc-calls: 12/50 sessions` on stderr, only when stderr is a terminal and there are many
/// (`usize::MAX` for "unknown": sessions from stdin are counted as they come).
struct Progress {
    total: usize,
    on: bool,
}

impl Progress {
    fn new(total: usize) -> Progress {
        Progress {
            total,
            on: total > 3 && std::io::stderr().is_terminal(),
        }
    }
    fn show(&self, i: usize) {
        if self.on && self.total == usize::MAX {
            eprint!("\roc-calls: {} sessions", i + 1);
        } else if self.on {
            eprint!("\roc-calls: {}/{} sessions", i + 1, self.total);
        }
    }
    fn done(&self) {
        if self.on {
            eprintln!();
        }
    }
}
