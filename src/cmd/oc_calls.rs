//! `oc-calls`: turn sessions into tool-call fingerprints.
//!
//! In: session ids as arguments (read from opencode's database, else a live server), sessions
//! sent for a backtest (`--export PATH...`, `-` for stdin: files `opencode export` wrote, Claude
//! Code transcripts, Codex rollouts, or folders holding transcripts), or JSONL on stdin whose
//! `session` records name their sources (a server URL or a database path); every input line is
//! passed through. Out: after each session record, its `call` records in call order and one
//! `activity` record (times and states for the liveness judge); a `blind` record (and exit 2)
//! for a session whose shape is not understood. A session listed twice is read once, and a call
//! id is written once, whatever the input repeats. Never message text, tool output or file
//! content.
//!
//! Every listed session is read one way, through its source's [`sources::Records`]: another
//! agent's directory as its kind opens it, opencode's database or server as its wing does
//! ([`opencode::records`]); each gives the session's calls and activity, converted in its wing.
//! Sessions asked for by id and opencode's exports are converted by the same function of
//! opencode's wing ([`opencode::records::calls_and_activity`]); follow mode ([`follow`]) reads
//! every source alike, from the mark of each session's last read.

mod follow;

use crate::cli::{Exit, Out};
use crate::cmd::oc_sessions::blind;
use crate::config::Config;
use crate::record::{each_record, to_line, Activity, Call, Line, Record, Session};
use crate::sources::opencode::server::Server;
use crate::sources::opencode::{self, convert, db::Db, export, Fault, Source};
use crate::sources::{self, sent, transcript, Found, SourceId};
use anyhow::{anyhow, Context, Result};
use clap::Parser;
use serde_json::Value;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, IsTerminal, Read};
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  oc-calls ses_2b1c9d0e4ffeXyZ | jq -c '[.tool, .args.filePath, .landed]'
  oc-sessions --since 10m | oc-calls | progress-detect
  opencode export ses_2b1c9d0e4ffeXyZ > s.json; oc-calls --export s.json | progress-detect
  oc-calls --export ~/.claude/projects/-home-me-src-app | progress-detect --format table
  oc-calls --export ~/.codex/sessions/2026/12/04 | progress-detect
  oc-calls --db ~/.local/share/opencode/opencode.db ses_2b1c9d0e4ffeXyZ > session.jsonl";

/// Turn opencode sessions (and Claude Code or Codex transcripts) into scrubbed tool-call
/// fingerprints (JSON Lines).
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
    /// Read sessions someone sent, for a backtest: a file `opencode export <id>` wrote (several
    /// documents may follow each other), a Claude Code transcript
    /// (`~/.claude/projects/<dir>/<session>.jsonl`, with its subagents in
    /// `<session>/subagents/` beside it), a Codex rollout
    /// (`~/.codex/sessions/Y/M/D/rollout-*.jsonl`), or a folder holding such transcripts at
    /// any depth (`-`: stdin). Each file is told by its first record.
    #[arg(long, value_name = "PATH", num_args = 1.., conflicts_with = "sessions")]
    pub export: Vec<String>,
    /// Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Flush after every record.
    #[arg(long)]
    pub line_buffered: bool,
    /// Read a stream that does not end (oc-sessions --follow): for each session record, only
    /// the messages changed since it was last read (of a Claude Code or Codex session, the lines
    /// appended to its files); write each call that is new or whose record
    /// changed (a later line of a call replaces the earlier one), and the activity when it
    /// changed; pass each sweep on and flush. Sessions unlisted for 60 full sweeps are
    /// forgotten (read whole if they come back).
    #[arg(long, conflicts_with_all = ["sessions", "export"])]
    pub follow: bool,
}

pub fn main() -> i32 {
    crate::cli::main("oc-calls", run)
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
    /// Emits the calls and the activity of one session from its messages, as opencode's wing
    /// reads them ([`opencode::records::calls_and_activity`]). Shape problems become a `blind`
    /// record.
    fn emit_messages(&mut self, source: &str, id: &str, msgs: &Value) -> Result<()> {
        match opencode::records::calls_and_activity(id, msgs, &mut self.lines) {
            Ok((calls, activity)) => self.emit_calls(&calls, id, &activity),
            Err(why) => self.blind(source, &why),
        }
    }

    /// Writes one session asked for by id and its calls, if `source` holds it.
    fn read_one(&mut self, source: &dyn Source, id: &str) -> Result<bool> {
        let name = source.id().to_string();
        match source.session(id) {
            Ok(Some(v)) => {
                match convert::session_of(&v, source.status_alone(), &name) {
                    Ok(s) => self.out.line(&to_line("session", &s)?)?,
                    Err(why) => self.blind(&name, &format!("session {id}: {why}"))?,
                }
                match source.messages(id) {
                    Ok(msgs) => self.emit_messages(&name, id, &msgs)?,
                    // deleted between listing and reading: nothing to judge, nothing wrong
                    Err(Fault::NotFound(_)) => {}
                    Err(f) => self.blind(&name, &format!("session {id}: {f}"))?,
                }
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(f) => {
                self.blind(&name, &format!("session {id}: {f}"))?;
                Ok(false)
            }
        }
    }

    /// Emits the calls and the activity of a session a wing read.
    fn emit_transcript(&mut self, t: &transcript::Transcript) -> Result<()> {
        self.emit_calls(&t.calls, &t.session.id, &t.activity)
    }

    /// Writes each call not written yet, then the session's activity if not written yet.
    fn emit_calls(&mut self, calls: &[Call], id: &str, activity: &Activity) -> Result<()> {
        for call in calls {
            if self.written.insert((call.session.clone(), call.id.clone())) {
                self.out.line(&to_line("call", call)?)?;
            }
        }
        if self.active.insert(id.to_string()) {
            self.out.line(&to_line("activity", activity)?)?;
        }
        Ok(())
    }

    fn blind(&mut self, source: &str, reason: &str) -> Result<()> {
        self.code = Exit::Error;
        blind(self.out, source, reason)
    }
}

pub fn run(args: Args, stdin: &mut dyn BufRead, out: &mut Out) -> Result<Exit> {
    out.line_buffered_if(args.line_buffered);
    let cfg = Config::load(args.config.as_deref())?;
    if args.follow {
        crate::cli::exit_quietly_on_sigterm()?;
        return follow::run(opencode::Limits::of(&cfg.opencode), stdin, out);
    }
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

    let mut stream = Stream {
        records: HashMap::new(),
        limits: opencode::Limits::of(&cfg.opencode),
        progress: Progress::new(usize::MAX),
        read: 0,
        bad: false,
    };
    let skipped = each_record(&[], stdin, |line| stream.line(&mut c, line))?;
    stream.progress.done();
    if stream.bad || skipped > 0 {
        c.code = Exit::Error;
    }
    Ok(c.code)
}

/// `oc-calls` reading a stream: every line passes, each call and activity once; each session
/// listed is read from its source (opened once).
struct Stream {
    /// The sources read, each opened once: another agent's files by its kind
    /// ([`SourceId::records`]), opencode's database or server by its wing
    /// ([`opencode::records`]).
    records: HashMap<SourceId, Box<dyn sources::Records>>,
    limits: opencode::Limits,
    progress: Progress,
    read: usize,
    /// A line could not be read.
    bad: bool,
}

impl Stream {
    fn line(&mut self, c: &mut Calls, line: Line) -> Result<()> {
        match self.pass(c, line)? {
            Some((s, at)) => self.session(c, &s, &at),
            None => Ok(()),
        }
    }

    /// Writes the line on, or drops a repeat; a session line comes back (with where it was)
    /// for its calls to be read.
    fn pass(&mut self, c: &mut Calls, line: Line) -> Result<Option<(Session, String)>> {
        // a stream fed twice, or calls already read upstream: each call and activity once
        let fresh = match line.record {
            Ok(Record::Session(s)) => {
                if !s.has_opencode_ids("oc-calls") {
                    return Ok(None);
                }
                // listed twice (two sources, two URLs of one server, a stream fed twice)
                if !c.read.insert(s.id.clone()) {
                    return Ok(None);
                }
                c.out.line(line.raw)?;
                return Ok(Some((s, format!("{}:{}", line.file, line.n))));
            }
            Ok(Record::Call(k)) => c.written.insert((k.session, k.id)),
            Ok(Record::Activity(a)) => c.active.insert(a.session),
            Ok(_) => true,
            Err(e) if e.kind.as_deref() == Some("session") || e.kind.is_none() => {
                eprintln!("oc-calls: {}:{}: {e}", line.file, line.n);
                self.bad = true;
                true
            }
            // a call or activity this version cannot read whole still passes, once per key
            Err(e) => match dedup_key(e.kind.as_deref(), line.raw) {
                Some((s, Some(id))) => c.written.insert((s, id)),
                Some((s, None)) => c.active.insert(s),
                None => true,
            },
        };
        if fresh {
            c.out.line(line.raw)?;
        }
        Ok(None)
    }

    /// Reads a listed session's calls from its source.
    fn session(&mut self, c: &mut Calls, s: &Session, at: &str) -> Result<()> {
        let Some(src) = source_to_read(s) else {
            eprintln!("oc-calls: {at}: session {} has no \"source\"", s.id);
            self.bad = true;
            return Ok(());
        };
        let records = match self.records.entry(src) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => match e.key().records() {
                Some(r) => e.insert(r),
                None => match opencode::records(e.key(), self.limits) {
                    Ok(Some(r)) => e.insert(r),
                    // read from an export upstream: its calls are in the stream already
                    Ok(None) => return Ok(()),
                    Err(why) => return c.blind(&e.key().to_string(), &why),
                },
            },
        };
        self.progress.show(self.read);
        self.read += 1;
        match records.read(&s.id) {
            Ok(Some(t)) => c.emit_transcript(&t),
            // gone since listed: nothing to judge, nothing wrong
            Ok(None) => Ok(()),
            Err(why) => c.blind(&records.id().to_string(), &why),
        }
    }
}

/// What identifies a call (`(session, Some(id))`) or an activity (`(session, None)`) that did not
/// read whole, so that even such a line is written once.
fn dedup_key(kind: Option<&str>, raw: &str) -> Option<(String, Option<String>)> {
    #[derive(serde::Deserialize)]
    struct DedupKey {
        session: String,
        id: Option<Value>,
    }
    let k: DedupKey = serde_json::from_str(raw).ok()?;
    match (kind, k.id) {
        (Some("call"), Some(Value::String(id))) => Some((k.session, Some(id))),
        (Some("activity"), _) => Some((k.session, None)),
        _ => None,
    }
}

/// Where to read a listed session's messages: its database when one lists it (local, no
/// deadline to meet, the same rows a server would serve), else its `source`.
fn source_to_read(s: &Session) -> Option<SourceId> {
    let ids = s.sources.iter().map(|x| SourceId::parse(x));
    ids.clone()
        .find(SourceId::is_database)
        .or_else(|| s.source.as_deref().map(SourceId::parse))
}

/// `oc-calls --export PATH...`: what each path holds, told by its first record: an opencode
/// export, a Claude Code transcript (with its subagents beside it), a Codex rollout, or a folder
/// holding transcripts at any depth.
fn read_export(c: &mut Calls, file: &str, stdin: &mut dyn BufRead) -> Result<()> {
    let mut bytes = Vec::new();
    if file == "-" {
        stdin
            .read_to_end(&mut bytes)
            .context("stdin: cannot read")?;
    } else {
        let path = std::path::Path::new(file);
        if path.is_dir() {
            return read_folder(c, file);
        }
        let mut f = std::fs::File::open(path).with_context(|| format!("{file}: cannot open"))?;
        f.read_to_end(&mut bytes)
            .with_context(|| format!("{file}: cannot read"))?;
    }
    let first = bytes
        .split(|&b| b == b'\n')
        .find(|l| !l.trim_ascii().is_empty());
    let agent = first.and_then(|l| sent::sniff(&String::from_utf8_lossy(l)));
    if agent.is_none() {
        return read_opencode_export(c, file, &bytes[..]);
    }
    let source = SourceId::Export(file.to_string()).to_string();
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return c.blind(&source, &format!("{file}: not UTF-8"));
    };
    let read = if file == "-" {
        sent::read_text(file, text)
    } else {
        match sent::read_file(std::path::Path::new(file), file) {
            Ok(r) => r,
            Err(why) => return c.blind(&source, &why),
        }
    };
    match read {
        Some(r) => emit_transcripts(c, &source, r),
        None => read_opencode_export(c, file, &bytes[..]),
    }
}

/// The transcripts in a folder, at any depth. A subagent's file beside its session's is read
/// with it; a file neither agent wrote is skipped, and said so on stderr.
fn read_folder(c: &mut Calls, dir: &str) -> Result<()> {
    let source = SourceId::Export(dir.to_string()).to_string();
    let files = match transcript::jsonl_files(std::path::Path::new(dir)) {
        Ok(f) => f,
        Err(e) => return c.blind(&source, &format!("{dir}: cannot list: {e}")),
    };
    let mut found = 0;
    for f in &files {
        if transcript::read_with_its_session(f) {
            continue;
        }
        let name = f.display().to_string();
        let src = SourceId::Export(name.clone()).to_string();
        match sent::read_file(f, &name) {
            Ok(Some(r)) => {
                found += 1;
                emit_transcripts(c, &src, r)?;
            }
            Ok(None) => eprintln!(
                "oc-calls: {name}: neither a Claude Code transcript nor a Codex rollout: skipped"
            ),
            Err(why) => c.blind(&src, &why)?,
        }
    }
    if found == 0 {
        return c.blind(
            &source,
            &format!("no Claude Code transcript or Codex rollout in {dir}"),
        );
    }
    Ok(())
}

/// Writes the sessions another agent's transcript gave, each with its calls and activity, and
/// a `blind` record for each thing in it that could not be read.
fn emit_transcripts(c: &mut Calls, source: &str, r: transcript::Read) -> Result<()> {
    for t in r.sessions {
        if !c.read.insert(t.session.id.clone()) {
            continue;
        }
        c.out.line(&to_line("session", &t.session)?)?;
        c.emit_transcript(&t)?;
    }
    for why in r.problems {
        c.blind(source, &why)?;
    }
    Ok(())
}

/// The session, calls and activity of each document of an `opencode export` file.
fn read_opencode_export(c: &mut Calls, file: &str, input: &[u8]) -> Result<()> {
    let docs = export::read(input);
    let source = SourceId::Export(file.to_string()).to_string();
    // the good documents before a bad one are kept; the bad one (or an empty input) is blind
    let export::ExportDocs { docs, bad } = docs;
    for d in docs {
        let s = match convert::session_of(&d.info, None, &source) {
            Ok(s) => s,
            Err(why) => {
                c.blind(&source, &why)?;
                continue;
            }
        };
        if !s.has_opencode_ids("oc-calls") || !c.read.insert(s.id.clone()) {
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
    let (path, how) = crate::paths::opencode_db(args.db.as_deref(), cfg.opencode.db.as_deref());
    let mut readers: Vec<Box<dyn Source>> = Vec::new();
    // `--server URL` without `--db` asks for that server: the database is not consulted
    let db = if !args.servers.is_empty() && args.db.is_none() {
        Ok(None)
    } else {
        Db::open_if_there(&path)
    };
    match db {
        Ok(Some(d)) => readers.push(Box::new(d)),
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
        if !crate::record::is_session_id(id) {
            crate::record::refuse_session("oc-calls", id, "its id");
            c.code = Exit::Error;
            continue;
        }
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
                // the servers only once the database (if any) lacks a session
                servers_probed = true;
                let (_, plan) =
                    opencode::servers_to_read(&args.servers, cfg, cfg.opencode.discover, &path);
                for p in &plan {
                    match opencode::probe(p, opencode::Limits::of(&cfg.opencode)) {
                        Ok(Some(l)) => readers.push(Box::new(Server { client: l.client })),
                        Ok(None) => {}
                        Err(why) => c.blind(&p.url, &why)?,
                    }
                }
                continue;
            }
            k += 1;
            if c.read_one(readers[k - 1].as_ref(), id)? {
                found = true;
                break;
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
