//! `oc-calls`: turn sessions into tool-call fingerprints.
//!
//! In: session ids as arguments (read from opencode's database, else a live server), files
//! `opencode export` wrote (`--export FILE...`, `-` for stdin), or JSONL on stdin whose
//! `session` records name their sources (a server URL or a database path); every input line is
//! passed through. Out: after each session record, its `call` records in call order and one
//! `activity` record (times and states for the liveness judge); a `blind` record (and exit 2)
//! for a session whose shape is not understood. A session listed twice is read once, and a call
//! id is written once, whatever the input repeats. Never message text, tool output or file
//! content.

use crate::cli::{for_each_line, Exit, Out};
use crate::config::Config;
use crate::opencode::{self, convert, db::Db, export, Client, Fault, Found};
use crate::record::{kind_of, to_line, Session};
use crate::sessions::blind;
use anyhow::{anyhow, Context, Result};
use clap::Parser;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  oc-calls ses_2b1c9d0e4ffeXyZ | jq -c '[.tool, .args.filePath, .landed]'
  oc-sessions --since 10m | oc-calls | progress-detect
  opencode export ses_2b1c9d0e4ffeXyZ > s.json; oc-calls --export s.json | progress-detect
  oc-calls --db ~/.local/share/opencode/opencode.db ses_2b1c9d0e4ffeXyZ > session.jsonl";

/// Turn opencode sessions into scrubbed tool-call fingerprints (JSON Lines).
#[derive(Parser, Debug)]
#[command(name = "oc-calls", version, after_help = EXAMPLES)]
pub struct Args {
    /// Session ids to read. Without them (and without --export), session records are read
    /// from stdin.
    #[arg(value_name = "SESSION")]
    pub sessions: Vec<String>,
    /// Server to read the given session ids from (repeatable; besides those configured and
    /// those found running). Without --db, the database is then not consulted.
    #[arg(long = "server", value_name = "URL")]
    pub servers: Vec<String>,
    /// opencode's database to read the given session ids from (default: [opencode] db, else
    /// $XDG_DATA_HOME/opencode/opencode.db).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "")]
    pub db: Option<PathBuf>,
    /// Read sessions from files `opencode export <id>` wrote (`-`: stdin; several documents
    /// may follow each other).
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with = "sessions")]
    pub export: Vec<String>,
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
    /// Sessions already read, and `(session, call id)` already written.
    read: HashSet<String>,
    written: HashSet<(String, String)>,
    /// Sessions whose `activity` record is written.
    active: HashSet<String>,
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
        self.emit_messages(&reader.name(), id, &msgs)
    }

    /// Emits the calls and the activity of one session from its messages.
    fn emit_messages(&mut self, source: &str, id: &str, msgs: &Value) -> Result<()> {
        match convert::calls_of(id, msgs, &mut self.lines) {
            Ok(calls) => {
                for c in &calls {
                    if self.written.insert((c.session.clone(), c.id.clone())) {
                        self.out.line(&to_line("call", c)?)?;
                    }
                }
                if self.active.insert(id.to_string()) {
                    let act = convert::activity_of(id, msgs);
                    self.out.line(&to_line("activity", &act)?)?;
                }
                Ok(())
            }
            Err(why) => self.blind(source, &format!("session {id}: {why}")),
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
        read: HashSet::new(),
        written: HashSet::new(),
        active: HashSet::new(),
    };
    if !args.export.is_empty() {
        for file in &args.export {
            read_export(&mut c, file, stdin)?;
        }
        return Ok(c.code);
    }
    if !args.sessions.is_empty() {
        by_id(&mut c, &args, &cfg)?;
        return Ok(c.code);
    }

    let mut http: HashMap<String, Reader> = HashMap::new();
    let mut dbs: HashMap<String, Reader> = HashMap::new();
    let mut bad = false;
    let limits = cfg.opencode_limits();
    let progress = Progress::new(usize::MAX);
    let mut read = 0usize;
    let skipped = for_each_line(&[], stdin, |name, n, line| {
        let kind = match kind_of(line) {
            Ok(k) => k,
            Err(e) => {
                c.out.line(line)?;
                eprintln!("oc-calls: {name}:{n}: {e}");
                bad = true;
                return Ok(());
            }
        };
        match kind.as_deref() {
            Some("session") => {}
            Some("call") => {
                // a stream fed twice, or calls already read upstream: each call once
                #[derive(serde::Deserialize)]
                struct Key {
                    session: String,
                    id: String,
                }
                if let Ok(k) = serde_json::from_str::<Key>(line) {
                    if !c.written.insert((k.session, k.id)) {
                        return Ok(());
                    }
                }
                return c.out.line(line).map_err(Into::into);
            }
            Some("activity") => {
                #[derive(serde::Deserialize)]
                struct Key {
                    session: String,
                }
                if let Ok(k) = serde_json::from_str::<Key>(line) {
                    if !c.active.insert(k.session) {
                        return Ok(());
                    }
                }
                return c.out.line(line).map_err(Into::into);
            }
            _ => return c.out.line(line).map_err(Into::into),
        }
        let s: Session = match serde_json::from_str(line) {
            Ok(s) => s,
            Err(e) => {
                c.out.line(line)?;
                eprintln!("oc-calls: {name}:{n}: {e}");
                bad = true;
                return Ok(());
            }
        };
        if !c.read.insert(s.id.clone()) {
            // listed twice (two sources, two URLs of one server, a stream fed twice)
            return Ok(());
        }
        c.out.line(line)?;
        let Some(src) = source_to_read(&s) else {
            eprintln!("oc-calls: {name}:{n}: session {} has no \"source\"", s.id);
            bad = true;
            return Ok(());
        };
        if src.starts_with("export:") {
            // read from an export upstream: its calls are in the stream already
            return Ok(());
        }
        let reader = if src.starts_with("http://") || src.starts_with("https://") {
            http.entry(src.clone())
                .or_insert_with(|| Reader::Http(Client::with_limits(&src, limits)))
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
    bad |= skipped > 0;
    progress.done();
    if bad {
        c.code = Exit::Error;
    }
    Ok(c.code)
}

/// Where to read a listed session's messages: its database when one lists it (local, no
/// deadline to meet, the same rows a server would serve), else its `source`.
fn source_to_read(s: &Session) -> Option<String> {
    let is_db = |x: &&String| {
        !x.starts_with("http://") && !x.starts_with("https://") && !x.starts_with("export:")
    };
    s.sources.iter().find(is_db).or(s.source.as_ref()).cloned()
}

/// `oc-calls --export FILE...`: the session, calls and activity of each exported session.
fn read_export(c: &mut Calls, file: &str, stdin: &mut dyn BufRead) -> Result<()> {
    let docs = if file == "-" {
        export::read(stdin)
    } else {
        let f = std::fs::File::open(file).with_context(|| format!("{file}: cannot open"))?;
        export::read(f)
    };
    let source = export::source_name(file);
    // the good documents before a bad one are kept; the bad one (or an empty input) is blind
    let export::Read { docs, bad } = docs;
    for d in docs {
        let s = match convert::session_of(&d.info, None, &source) {
            Ok(s) => s,
            Err(why) => {
                c.blind(&source, &why)?;
                continue;
            }
        };
        if !c.read.insert(s.id.clone()) {
            continue;
        }
        c.out.line(&to_line("session", &s)?)?;
        c.emit_messages(&source, &s.id, &d.messages)?;
    }
    match bad {
        Some(why) => c.blind(&source, &why),
        None => Ok(()),
    }
}

/// `oc-calls SESSION...`: each from the database when it holds it, else from a server
/// (given, configured, or found running); with `--server` and no `--db`, from servers only.
fn by_id(c: &mut Calls, args: &Args, cfg: &Config) -> Result<()> {
    let (path, how) = match (&args.db, &cfg.opencode.db) {
        (Some(p), _) if !p.as_os_str().is_empty() => (p.clone(), Found::Argument),
        (_, Some(p)) => (p.clone(), Found::Configured),
        _ => (opencode::db::default_path(), Found::Default),
    };
    let mut readers: Vec<Reader> = Vec::new();
    // `--server URL` without `--db` asks for that server: the database is not consulted
    let db = if !args.servers.is_empty() && args.db.is_none() {
        Ok(None)
    } else {
        Db::open_if_there(&path)
    };
    match db {
        Ok(Some(d)) => readers.push(Reader::Db(d)),
        Ok(None) if how == Found::Argument => {
            return Err(anyhow!(
                "opencode database {}: no such file",
                path.display()
            ))
        }
        Ok(None) => {}
        Err(why) => c.blind(&path.display().to_string(), &why)?,
    }
    let mut servers_probed = false;
    let progress = Progress::new(args.sessions.len());
    for (i, id) in args.sessions.iter().enumerate() {
        progress.show(i);
        if !c.read.insert(id.clone()) {
            continue;
        }
        let mut found = false;
        let mut k = 0;
        loop {
            if k == readers.len() {
                if servers_probed {
                    break;
                }
                servers_probed = true;
                let plan = opencode::plan_servers(
                    &args.servers,
                    &cfg.opencode.servers,
                    &opencode::discover::listeners(&opencode::discovered(
                        cfg.opencode.discover,
                        &path,
                    )),
                );
                for p in &plan {
                    match opencode::probe(p, cfg.opencode_limits()) {
                        Ok(Some(l)) => readers.push(Reader::Http(l.client)),
                        Ok(None) => {}
                        Err(why) => c.blind(&p.url, &why)?,
                    }
                }
                continue;
            }
            let r = &readers[k];
            k += 1;
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
            if readers.is_empty() {
                progress.done();
                return Err(anyhow!(
                    "no opencode database at {} and no opencode server answered",
                    path.display()
                ));
            }
            eprintln!("oc-calls: session {id}: not found");
            c.code = Exit::Error;
        }
    }
    progress.done();
    Ok(())
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
