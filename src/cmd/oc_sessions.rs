//! `oc-sessions`: find the agents (opencode, Claude Code, Codex) and list their sessions as JSONL.
//!
//! Reads opencode's database (`$XDG_DATA_HOME/opencode/opencode.db`, every session of every
//! project, whatever mode ran it) and every live server: those configured and those found
//! running (from `/proc`), each server's every project (`GET /project`, then `?directory=`);
//! then every other source given (`--source`) or configured (`[opencode] sources`), through
//! its [`crate::sources::opencode::Source`] alone. A session seen in several places is one record: the
//! server's live fields win, `sources` names them all. Then the other agents whose directories
//! are there ([`crate::sources::agents_to_read`]: Claude Code's, Codex's), each through its
//! [`crate::sources::Records`], unless `[agents]` turns it off.
//!
//! Out: one `source` record per source read (what it is and how it was found), a `blind` record
//! per source that could not be read (exit 2), then the `session` records. With no opencode
//! at all it prints nothing and exits 0.

mod follow;

use crate::cli::{now_ms, parse_when, Exit, Out};
use crate::config::{Config, Discover};
use crate::record::{to_line, Blind, SourceRead};
use crate::sources::opencode::merge::{
    ended_where_no_process, ended_with_their_run, idle_is_unknown_where_unasked, note_runs,
    read_db, runs_in, RunProcess, Seen, RUNS_KEPT_MS,
};
use crate::sources::opencode::server::{read_server, ServerRead};
use crate::sources::opencode::{self, db::Db};
use crate::sources::{self, Found};
use anyhow::{bail, Result};
use clap::Parser;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};

const EXAMPLES: &str = "\
Examples:
  oc-sessions | jq -c 'select(.kind==\"source\")'   # what the watchdog sees
  oc-sessions --since 10m
  oc-sessions --no-db --no-discover --server http://127.0.0.1:4096
  oc-sessions --since 1d | jq -r 'select(.kind==\"session\") | [.id, .agent, .title] | @tsv'
  oc-sessions --since \"$(wd-store last-tick)\" | oc-calls | progress-detect";

/// List opencode sessions (and their session trees) as JSON Lines, from opencode's database
/// and every live opencode server, and Claude Code's and Codex's sessions from their own
/// directories.
#[derive(Parser, Debug)]
#[command(name = "oc-sessions", version, after_help = EXAMPLES)]
pub struct Args {
    /// Also read this opencode server (repeatable), besides those configured and those found
    /// running.
    #[arg(long = "server", value_name = "URL")]
    pub servers: Vec<String>,
    /// Also read this source (repeatable), by the string the records' `source` field holds:
    /// another opencode database (a second channel's), a server URL (as --server), or any other
    /// kind of source the watchdog knows. Read at every full read.
    #[arg(long = "source", value_name = "SOURCE")]
    pub sources: Vec<String>,
    /// opencode's SQLite database (default: [opencode] db, else
    /// $XDG_DATA_HOME/opencode/opencode.db). Always read when it exists; strictly read-only.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "")]
    pub db: Option<PathBuf>,
    /// Do not read the database.
    #[arg(long)]
    pub no_db: bool,
    /// Do not look for running opencode servers (read only those given or configured).
    #[arg(long)]
    pub no_discover: bool,
    /// Only sessions updated since WHEN (a duration like 10m, or epoch ms), plus every session
    /// that is not idle, plus their ancestors and descendants.
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Also list these sessions and their trees whatever --since says (ids separated by
    /// commas or spaces; the tick passes the roots of open alerts, so they are judged again
    /// and resolve when they are gone).
    #[arg(long, value_name = "IDS")]
    pub also: Option<String>,
    /// With --follow, also list the trees of the watchdog's open alerts at every full read
    /// (the roots `wd-store open-roots` prints, asked of the store each time).
    #[arg(long, requires = "follow")]
    pub also_open: bool,
    /// Keep reading: every [follow] poll_ms, the sessions that changed (one cheap query of the
    /// database while nothing did; the sessions named by the event stream, GET /global/event, of
    /// each server read, connected again with backoff when it drops) and a partial `sweep`
    /// record; every [follow] full_every_secs, first, and after a server's stream came back, a
    /// full read as a tick's (sessions active since the previous full read, --also, the open
    /// alerts' trees with --also-open, the `source` records) and a full `sweep`. The first read
    /// looks back to --since, else the watchdog's last tick, else 1h. Output is flushed after
    /// every sweep; SIGTERM ends it with status 0.
    #[arg(long, conflicts_with = "now")]
    pub follow: bool,
    /// The current time in epoch ms (for --since durations; default: the clock).
    #[arg(long, value_name = "MS")]
    pub now: Option<i64>,
    /// Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Flush after every record.
    #[arg(long)]
    pub line_buffered: bool,
}

pub fn main() -> i32 {
    crate::cli::main("oc-sessions", run)
}

pub fn run(args: Args, _stdin: &mut dyn BufRead, out: &mut Out) -> Result<Exit> {
    out.line_buffered_if(args.line_buffered);
    let cfg = Config::load(args.config.as_deref())?;
    if args.follow {
        return follow::run(&args, &cfg, out);
    }
    let now = args.now.unwrap_or_else(now_ms);
    let since = match &args.since {
        Some(w) => parse_when(w, now)?,
        None => 0,
    };
    let also = ids_of(args.also.as_deref());
    let mut seen = Seen::default();
    let at = SessionSources::of(&args, &cfg);
    let db = if args.no_db {
        None
    } else {
        open_db(&at.db_path, at.db_found, &mut seen)?
    };
    let store_db = cfg.store_db();
    let (code, _) = at.read_all(
        out,
        db.as_ref(),
        (since, &also),
        &mut HashMap::new(),
        &mut seen,
        |procs, seen| {
            if at.discover != Discover::Off && db.is_some() {
                remember_runs(&store_db, procs, seen, now);
            }
        },
    )?;
    Ok(code)
}

/// Where sessions are read from, as the command line and the config say: what a tick reads,
/// and what each of follow mode's full reads reads again.
struct SessionSources<'a> {
    args: &'a Args,
    cfg: &'a Config,
    db_path: PathBuf,
    db_found: Found,
    discover: Discover,
    limits: opencode::Limits,
}

/// What [`SessionSources::read_all`] found besides the records it wrote.
struct FullRead {
    /// What each server read gave.
    reads: Vec<ServerRead>,
    /// The opencode processes found.
    procs: Vec<opencode::discover::Process>,
    /// The other agents read, each with its files' newest change, taken before they were read
    /// (a change made while they are read is newer than it).
    agents: Vec<(sources::SourceId, Option<i64>)>,
}

impl<'a> SessionSources<'a> {
    fn of(args: &'a Args, cfg: &'a Config) -> SessionSources<'a> {
        let (db_path, db_found) =
            crate::paths::opencode_db(args.db.as_deref(), cfg.opencode.db.as_deref());
        SessionSources {
            args,
            cfg,
            db_path,
            db_found,
            discover: if args.no_discover {
                Discover::Off
            } else {
                cfg.opencode.discover
            },
            limits: opencode::Limits::of(&cfg.opencode),
        }
    }

    /// One read of every source, the one a tick makes and each of follow mode's full reads
    /// makes again: opencode's database (`db`, opened by the caller) and its servers (given,
    /// configured and found running), then the other sources given or configured, then the
    /// other agents whose directories are here (each through its reader in `opened`, opened
    /// there the first time), their sessions picked by `pick` into `seen`. The `opencode run`
    /// processes found are handed to `runs` before the other sources are read (a tick keeps
    /// them in a file, follow mode in memory). Writes the `source` records, the blind ones and
    /// the sessions.
    fn read_all(
        &self,
        out: &mut Out,
        db: Option<&Db>,
        pick: (i64, &[String]),
        opened: &mut HashMap<sources::SourceId, Box<dyn sources::Records>>,
        seen: &mut Seen,
        runs: impl FnOnce(&[opencode::discover::Process], &mut Seen),
    ) -> Result<(Exit, FullRead)> {
        let (procs, plan) = opencode::servers_to_read(
            &self.args.given_servers(),
            self.cfg,
            self.discover,
            &self.db_path,
        );
        let reads = collect(
            db,
            &plan,
            &procs,
            self.discover != Discover::Off,
            pick,
            self.limits,
            seen,
        );
        runs(&procs, seen);
        let others = opencode::others_to_read(&self.args.sources, self.cfg, &self.db_path);
        let others = read_others(&others, pick, self.limits, seen);
        let agents: Vec<sources::SourceId> = sources::agents_to_read(self.cfg)
            .into_iter()
            .filter(|a| !others.iter().any(|(o, _)| o == a))
            .collect();
        let newest: Vec<Option<i64>> = agents.iter().map(|a| a.newest_change()).collect();
        let agents_read = read_agents(&agents, opened, pick, seen);
        if let Some(db) = db {
            let writers: Vec<u32> = procs.iter().map(|p| p.pid).collect();
            write_db_source(out, db, self.db_found, &writers, seen)?;
        }
        write_server_sources(out, &reads, seen)?;
        write_more_sources(out, &others, &agents_read, seen)?;
        let code = write_rest(out, &reads, seen)?;
        let agents = agents.into_iter().zip(newest).collect();
        Ok((
            code,
            FullRead {
                reads,
                procs,
                agents,
            },
        ))
    }
}

impl Args {
    /// The servers named on the command line: `--server`, and servers among `--source`.
    fn given_servers(&self) -> Vec<String> {
        let named = self
            .sources
            .iter()
            .filter(|w| matches!(sources::SourceId::parse(w), sources::SourceId::Server(_)));
        self.servers.iter().chain(named).cloned().collect()
    }
}

/// Reads the sources besides the database and the servers ([`opencode::others_to_read`]) into
/// `seen`, each picked by `pick` as [`collect`] picks; one that cannot be opened or read is a
/// blind record. Returns those read, with how each was found.
fn read_others(
    others: &[(sources::SourceId, Found)],
    pick: (i64, &[String]),
    limits: opencode::Limits,
    seen: &mut Seen,
) -> Vec<(sources::SourceId, Found)> {
    let mut read = Vec::new();
    for (id, found) in others {
        if let Some(records) = id.records() {
            merge_records(records.as_ref(), pick, seen);
            read.push((id.clone(), *found));
            continue;
        }
        let opened = match opencode::open(id, limits) {
            Ok(Some(src)) => src,
            Ok(None) => {
                let why = format!(
                    "{} cannot be listed: read it with oc-calls",
                    id.kind_phrase()
                );
                seen.blind(&id.to_string(), &why);
                continue;
            }
            Err(why) => {
                seen.blind(&id.to_string(), &why);
                continue;
            }
        };
        match seen.merge_source(opened.as_ref(), pick.0, pick.1) {
            Ok(()) => read.push((id.clone(), *found)),
            Err(f) => seen.blind(&id.to_string(), &f.to_string()),
        }
    }
    seen.refuse_strange_ids();
    read
}

/// Lists the sessions of a source of records into `seen`, picked as [`collect`] picks; what it
/// could not read is a blind record naming it. Returns what its `source` record says.
fn merge_records(
    records: &dyn sources::Records,
    pick: (i64, &[String]),
    seen: &mut Seen,
) -> Map<String, Value> {
    let name = records.id().to_string();
    let listing = records.list(pick.0, pick.1);
    for why in &listing.problems {
        seen.blind(&name, why);
    }
    seen.sessions.extend(listing.sessions);
    listing.facts
}

/// Reads the other agents found on this machine ([`sources::agents_to_read`]) into `seen`,
/// each through its directory in `opened` (opened there the first time, refreshed after).
/// Returns each read with what its `source` record says.
fn read_agents(
    agents: &[sources::SourceId],
    opened: &mut HashMap<sources::SourceId, Box<dyn sources::Records>>,
    pick: (i64, &[String]),
    seen: &mut Seen,
) -> Vec<(sources::SourceId, Map<String, Value>)> {
    let mut read = Vec::new();
    for id in agents {
        if let Some(records) = open_agent(opened, id) {
            let facts = merge_records(&*records, pick, seen);
            read.push((id.clone(), facts));
        }
    }
    seen.refuse_strange_ids();
    read
}

/// Another agent's directory from `opened`: opened the first time, refreshed after (which
/// processes run, which files there are; what was read of its files is kept).
fn open_agent<'a>(
    opened: &'a mut HashMap<sources::SourceId, Box<dyn sources::Records>>,
    id: &sources::SourceId,
) -> Option<&'a mut dyn sources::Records> {
    use std::collections::hash_map::Entry;
    match opened.entry(id.clone()) {
        Entry::Occupied(e) => {
            let r = e.into_mut();
            r.refresh();
            Some(r.as_mut())
        }
        Entry::Vacant(e) => Some(e.insert(id.records()?).as_mut()),
    }
}

/// The `source` records of the sources read besides opencode's database and servers: the
/// `--source` and `[opencode] sources` ones (`others`, found as they say), then the other agents
/// found on this machine (found by default, with what their reader found there). Each says its
/// reader and how many sessions it listed.
fn write_more_sources(
    out: &mut Out,
    others: &[(sources::SourceId, Found)],
    agents: &[(sources::SourceId, Map<String, Value>)],
    seen: &Seen,
) -> Result<()> {
    let others = others.iter().map(|(id, found)| (id, *found, None));
    let agents = agents
        .iter()
        .map(|(id, facts)| (id, Found::Default, Some(facts)));
    for (id, found, facts) in others.chain(agents) {
        let name = id.to_string();
        out.line(&to_line(
            "source",
            &SourceRead {
                sessions: seen.count(&name),
                source: name,
                reader: Some(id.reader().into()),
                found: vec![found],
                version: None,
                extra: facts.cloned().unwrap_or_default(),
            },
        )?)?;
    }
    Ok(())
}

/// One read of the sources: the database (if open) and the servers `plan`ned, merged into
/// `seen`, the sessions picked by `pick` (updated since, and these ids, with their trees),
/// with the marks the processes (`procs`, looked for when `looked`) give them. Returns what
/// each server gave.
fn collect(
    db: Option<&Db>,
    plan: &[opencode::Planned],
    procs: &[opencode::discover::Process],
    looked: bool,
    pick: (i64, &[String]),
    limits: opencode::Limits,
    seen: &mut Seen,
) -> Vec<ServerRead> {
    let (since, also) = pick;
    let reads: Vec<ServerRead> = std::thread::scope(|s| {
        let handles: Vec<_> = plan
            .iter()
            .map(|p| s.spawn(move || read_server(p, limits)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    if let Some(db) = db {
        if let Err(e) = read_db(db, since, also, &reads, seen) {
            seen.blind(&db.path.display().to_string(), &format!("{e:#}"));
        }
    } else {
        seen.merge_servers(&reads, since, also);
    }
    let asked: HashSet<u32> = reads
        .iter()
        .filter(|r| r.live.is_some())
        .flat_map(|r| r.plan.pids.iter().copied())
        .collect();
    idle_is_unknown_where_unasked(&mut seen.sessions, procs, &asked);
    if db.is_some() {
        ended_where_no_process(&mut seen.sessions, procs, &asked, looked);
    }
    runs_in(&mut seen.sessions, procs);
    server_todos(seen, &reads);
    seen.refuse_strange_ids();
    written_where_nobody_reads(procs, seen);
    reads
}

/// The file, beside the watchdog's database, where the timer's ticks keep the `opencode run`
/// processes they saw.
const RUNS_FILE: &str = "runs.json";

/// The timer's ticks are separate processes, so the `opencode run` processes one saw are kept
/// in the state directory ([`RUNS_FILE`]; follow mode keeps them in memory): a run killed
/// between two ticks ends its session at the next one ([`ended_with_their_run`]), though a TUI
/// or another run works in its directory. Only where the watchdog's state directory exists (it
/// is installed); a file that cannot be read or written is said on stderr and costs only this.
fn remember_runs(
    store_db: &Path,
    procs: &[opencode::discover::Process],
    seen: &mut Seen,
    now: i64,
) {
    let Some(dir) = store_db.parent().filter(|d| d.is_dir()) else {
        return;
    };
    let file = dir.join(RUNS_FILE);
    let mut runs: Vec<RunProcess> = match std::fs::read(&file) {
        Ok(b) => serde_json::from_slice(&b).unwrap_or_else(|e| {
            eprintln!(
                "oc-sessions: {}: {e}; the runs seen before are forgotten",
                file.display()
            );
            Vec::new()
        }),
        Err(_) => Vec::new(),
    };
    for r in runs.iter_mut().filter(|r| r.ended.is_none()) {
        if !procs
            .iter()
            .any(|p| p.pid == r.pid && p.started == Some(r.started))
        {
            r.ended = Some(now);
        }
    }
    runs.retain(|r| !matches!(r.ended, Some(e) if now - e >= RUNS_KEPT_MS));
    note_runs(&mut runs, procs);
    ended_with_their_run(&mut seen.sessions, &runs);
    let tmp = dir.join(format!(".{RUNS_FILE}.{}", std::process::id()));
    let saved = serde_json::to_vec(&runs)
        .map_err(anyhow::Error::from)
        .and_then(|b| Ok(std::fs::write(&tmp, b)?))
        .and_then(|()| Ok(std::fs::rename(&tmp, &file)?));
    if let Err(e) = saved {
        let _ = std::fs::remove_file(&tmp);
        eprintln!("oc-sessions: {}: {e:#}", file.display());
    }
}

/// An opencode process whose database was deleted or replaced under it goes on writing the
/// file it holds, which nobody else can open: its sessions are out of sight (no list would say
/// so, and its loops would read as gone). Blind, naming the process.
fn written_where_nobody_reads(procs: &[opencode::discover::Process], seen: &mut Seen) {
    for p in procs.iter().filter(|p| p.db_deleted) {
        let db = p.db.as_deref().unwrap_or(Path::new("opencode.db"));
        let place = p
            .cwd
            .as_deref()
            .map(|c| format!(" in {}", c.display()))
            .unwrap_or_default();
        seen.blind(
            &db.display().to_string(),
            &format!(
                "opencode (pid {}{place}) writes a database that was deleted or replaced at this path \
                 since it started: its sessions cannot be read until that opencode is restarted",
                p.pid
            ),
        );
    }
}

/// Session ids separated by commas, spaces or newlines (`--also`).
fn ids_of(list: Option<&str>) -> Vec<String> {
    list.unwrap_or("")
        .split([',', ' ', '\n'])
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// Opens the database to read: `None` when there is none yet (or none where the config says,
/// which is a blind record); an error when `--db` names a file that is not there.
fn open_db(path: &Path, found: Found, seen: &mut Seen) -> Result<Option<Db>> {
    Ok(match Db::open_if_there(path) {
        Ok(Some(db)) => Some(db),
        // opencode is making it at its first start: no history yet
        Ok(None) if path.exists() => None,
        Ok(None) if found == Found::Argument => {
            bail!("opencode database {}: no such file", path.display())
        }
        Ok(None) if found == Found::Configured => {
            seen.blind(&path.display().to_string(), "no such file ([opencode] db)");
            None
        }
        // no opencode history on this machine yet
        Ok(None) => None,
        Err(why) => {
            seen.blind(&path.display().to_string(), &why);
            None
        }
    })
}

/// Open todos of the sessions only servers list (the database's were read with them).
fn server_todos(seen: &mut Seen, reads: &[ServerRead]) {
    for sess in seen.sessions.iter_mut() {
        if sess.extra.contains_key("todos_open") {
            continue;
        }
        let client = reads
            .iter()
            .filter_map(|r| r.live.as_ref())
            .find(|l| Some(&l.client.base) == sess.source.as_ref());
        if let Some(Ok(todos)) = client.map(|l| l.client.get(&format!("/session/{}/todo", sess.id)))
        {
            if let Some(list) = todos.as_array() {
                let open = list
                    .iter()
                    .filter(|t| matches!(t["status"].as_str(), Some("pending" | "in_progress")))
                    .count();
                sess.extra.insert("todos_open".into(), Value::from(open));
            }
        }
    }
}

/// The database's `source` record.
fn write_db_source(
    out: &mut Out,
    db: &Db,
    found: Found,
    writers: &[u32],
    seen: &Seen,
) -> Result<()> {
    let name = db.path.display().to_string();
    let mut extra = Map::new();
    if !writers.is_empty() {
        extra.insert("pids".into(), json!(writers));
    }
    if let Some(schema) = db.schema() {
        extra.insert("schema".into(), json!(schema));
    }
    out.line(&to_line(
        "source",
        &SourceRead {
            sessions: seen.count(&name),
            source: name,
            reader: Some("database".into()),
            found: vec![found],
            version: db.newest_version(),
            extra,
        },
    )?)?;
    Ok(())
}

/// The servers' `source` records.
fn write_server_sources(out: &mut Out, reads: &[ServerRead], seen: &Seen) -> Result<()> {
    for r in reads {
        if let Some(live) = &r.live {
            let mut extra = Map::new();
            if !r.plan.pids.is_empty() {
                extra.insert("pids".into(), json!(r.plan.pids));
            }
            if let [uid] = r.plan.uids[..] {
                extra.insert("uid".into(), json!(uid));
            } else if !r.plan.uids.is_empty() {
                extra.insert("uids".into(), json!(r.plan.uids));
            }
            extra.insert("projects".into(), json!(r.projects));
            out.line(&to_line(
                "source",
                &SourceRead {
                    source: r.plan.url.clone(),
                    reader: Some("server".into()),
                    found: r.plan.found.clone(),
                    version: live.version.clone(),
                    sessions: seen.count(&r.plan.url),
                    extra,
                },
            )?)?;
        }
    }
    Ok(())
}

/// The blind records (of the servers, then of the rest), then the sessions.
fn write_rest(out: &mut Out, reads: &[ServerRead], seen: &Seen) -> Result<Exit> {
    let mut code = Exit::Ok;
    for r in reads {
        if let Some(why) = &r.error {
            blind(out, &r.plan.url, why)?;
            code = Exit::Error;
        }
    }
    for (src, why) in &seen.blind {
        blind(out, src, why)?;
        code = Exit::Error;
    }
    for s in &seen.sessions {
        out.line(&to_line("session", s)?)?;
    }
    Ok(code)
}

pub(crate) fn blind(out: &mut Out, source: &str, reason: &str) -> Result<()> {
    out.line(&to_line(
        "blind",
        &Blind {
            source: source.to_string(),
            reason: reason.to_string(),
        },
    )?)?;
    Ok(())
}
