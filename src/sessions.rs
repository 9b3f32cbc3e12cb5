//! `oc-sessions`: find opencode and list its sessions as JSONL.
//!
//! Reads opencode's database (`$XDG_DATA_HOME/opencode/opencode.db`, every session of every
//! project, whatever mode ran it) and every live server: those configured and those found
//! running (from `/proc`), each server's every project (`GET /project`, then `?directory=`).
//! A session seen in several places is one record: the server's live fields win, `sources`
//! names them all.
//!
//! Out: one `source` record per source read (what it is and how it was found), a `blind` record
//! per source that could not be read (exit 2), then the `session` records. With no opencode
//! at all it prints nothing and exits 0.

use crate::cli::{now_ms, parse_when, Exit, Out};
use crate::config::{Config, Discover};
use crate::record::{to_line, Blind, Session, SourceRead};
use crate::sources::server::{read_server, ServerRead};
use crate::sources::{self, db::Db, Found, Source};
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
/// and every live opencode server.
#[derive(Parser, Debug)]
#[command(name = "oc-sessions", version, after_help = EXAMPLES)]
pub struct Args {
    /// Also read this opencode server (repeatable), besides those configured and those found
    /// running.
    #[arg(long = "server", value_name = "URL")]
    pub servers: Vec<String>,
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
    let now = args.now.unwrap_or_else(now_ms);
    let since = match &args.since {
        Some(w) => parse_when(w, now)?,
        None => 0,
    };
    let also: Vec<String> = args
        .also
        .as_deref()
        .unwrap_or("")
        .split([',', ' ', '\n'])
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let mut seen = Seen::default();

    // the database
    let (db_path, db_found) =
        crate::paths::opencode_db(args.db.as_deref(), cfg.opencode.db.as_deref());
    let db = if args.no_db {
        None
    } else {
        match Db::open_if_there(&db_path) {
            Ok(Some(db)) => Some(db),
            Ok(None) if db_found == Found::Argument => {
                bail!("opencode database {}: no such file", db_path.display())
            }
            Ok(None) if db_found == Found::Configured => {
                seen.blind(
                    &db_path.display().to_string(),
                    "no such file ([opencode] db)",
                );
                None
            }
            // no opencode history on this machine yet
            Ok(None) => None,
            Err(why) => {
                seen.blind(&db_path.display().to_string(), &why);
                None
            }
        }
    };

    // the servers
    let discover_mode = if args.no_discover {
        Discover::Off
    } else {
        cfg.opencode.discover
    };
    let procs = sources::discovered(discover_mode, &db_path);
    let found = sources::discover::listeners(&procs);
    let plan = sources::plan_servers(&args.servers, &cfg.opencode.servers, &found);
    let limits = cfg.opencode_limits();
    let reads: Vec<ServerRead> = std::thread::scope(|s| {
        let handles: Vec<_> = plan
            .iter()
            .map(|p| s.spawn(move || read_server(p, limits)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

    if let Some(db) = &db {
        if let Err(e) = read_db(db, since, &also, &reads, &mut seen) {
            seen.blind(&db.path.display().to_string(), &format!("{e:#}"));
        }
    } else {
        seen.merge_servers(&reads, since, &also);
    }

    let asked: HashSet<u32> = reads
        .iter()
        .filter(|r| r.live.is_some())
        .flat_map(|r| r.plan.pids.iter().copied())
        .collect();
    idle_is_unknown_where_unasked(&mut seen.sessions, &procs, &asked);

    // open todos of sessions only servers list (the database's were read with them)
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

    // out: sources, blind records, sessions
    if let Some(db) = &db {
        let name = db.path.display().to_string();
        let mut extra = Map::new();
        let writers: Vec<u32> = procs.iter().map(|p| p.pid).collect();
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
                found: vec![db_found],
                version: db.newest_version(),
                extra,
            },
        )?)?;
    }
    for r in &reads {
        if let Some(live) = &r.live {
            let mut extra = Map::new();
            if !r.plan.pids.is_empty() {
                extra.insert("pids".into(), json!(r.plan.pids));
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
    let mut code = Exit::Ok;
    for r in &reads {
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

/// The merged picture: one record per session, and the sources that could not be read.
#[derive(Default)]
struct Seen {
    sessions: Vec<Session>,
    blind: Vec<(String, String)>,
}

impl Seen {
    fn blind(&mut self, source: &str, why: &str) {
        self.blind.push((source.to_string(), why.to_string()));
    }

    /// Sessions listed that this source saw.
    fn count(&self, source: &str) -> usize {
        self.sessions
            .iter()
            .filter(|s| {
                s.source.as_deref() == Some(source) || s.sources.iter().any(|x| x == source)
            })
            .count()
    }

    /// One record per session id from the servers' lists: a busy or retrying status beats
    /// idle, the first server otherwise.
    fn by_id(reads: &[ServerRead]) -> HashMap<String, Session> {
        let mut m: HashMap<String, Session> = HashMap::new();
        for r in reads {
            for s in &r.sessions {
                match m.get_mut(&s.id) {
                    None => {
                        m.insert(s.id.clone(), s.clone());
                    }
                    Some(have) => {
                        let url = s.source.clone().unwrap_or_default();
                        let active = s.status.as_deref().is_some_and(|st| st != "idle");
                        let had = have.status.as_deref().is_some_and(|st| st != "idle");
                        let mut srcs = std::mem::take(&mut have.sources);
                        if srcs.is_empty() {
                            srcs.extend(have.source.clone());
                        }
                        if !srcs.contains(&url) {
                            srcs.push(url);
                        }
                        if active && !had {
                            *have = s.clone();
                            // the live source first
                            srcs.sort_by_key(|x| Some(x) != s.source.as_ref());
                        }
                        have.sources = srcs;
                    }
                }
            }
        }
        m
    }

    /// Without a database: the servers' sessions, selected.
    fn merge_servers(&mut self, reads: &[ServerRead], since: i64, also: &[String]) {
        let all: Vec<Session> = {
            let m = Seen::by_id(reads);
            let mut v: Vec<Session> = m.into_values().collect();
            v.sort_by(|a, b| b.updated.cmp(&a.updated).then(a.id.cmp(&b.id)));
            v
        };
        self.sessions = sources::select_trees(all, since, also);
    }
}

/// The database's sessions merged with the servers': the database's cheap index (id, parent,
/// last update) picks what to list; only those rows are read whole. A session a server also
/// lists takes the server's fields (live status, pending requests) and names both sources.
fn read_db(
    db: &Db,
    since: i64,
    also: &[String],
    reads: &[ServerRead],
    seen: &mut Seen,
) -> Result<()> {
    let name = db.path.display().to_string();
    let index = db.index().map_err(|f| anyhow::anyhow!("{f}"))?;
    let live = Seen::by_id(reads);
    let in_db: HashSet<&str> = index.iter().map(|e| e.id.as_str()).collect();
    let mut nodes: Vec<sources::Node> = index
        .iter()
        .map(|e| {
            let srv = live.get(&e.id);
            let srv_updated = srv.and_then(|s| s.updated);
            sources::Node {
                id: &e.id,
                parent: e.parent.as_deref(),
                // the later of the two
                updated: e
                    .updated
                    .map(|u| srv_updated.unwrap_or(u).max(u))
                    .or(srv_updated),
                active: e.active
                    || srv
                        .and_then(|s| s.status.as_deref())
                        .is_some_and(|st| st != "idle"),
            }
        })
        .collect();
    // sessions only a server knows (a server on another machine, or not yet written)
    nodes.extend(
        live.values()
            .filter(|s| !in_db.contains(s.id.as_str()))
            .map(|s| sources::Node {
                id: &s.id,
                parent: s.parent.as_deref(),
                updated: s.updated,
                active: s.status.as_deref().is_some_and(|st| st != "idle"),
            }),
    );
    let keep = sources::select(&nodes, since, also);
    let from_db: Vec<&str> = keep
        .iter()
        .copied()
        .filter(|id| in_db.contains(id))
        .collect();
    let rows = db.sessions(&from_db).map_err(|f| anyhow::anyhow!("{f}"))?;
    let mut out: Vec<Session> = Vec::new();
    for mut s in rows {
        if let Some(srv) = live.get(&s.id) {
            let mut merged = srv.clone();
            let mut srcs = std::mem::take(&mut merged.sources);
            if srcs.is_empty() {
                srcs.extend(merged.source.clone());
            }
            srcs.push(name.clone());
            merged.sources = srcs;
            // what only the database has
            merged.parent = merged.parent.or(s.parent.take());
            merged.model = merged.model.or(s.model.take());
            s = merged;
        }
        if let Ok(n) = db.open_todos(&s.id) {
            s.extra.insert("todos_open".into(), Value::from(n));
        }
        out.push(s);
    }
    for s in live.values() {
        if !in_db.contains(s.id.as_str()) && keep.contains(s.id.as_str()) {
            out.push(s.clone());
        }
    }
    out.sort_by(|a, b| b.updated.cmp(&a.updated).then(a.id.cmp(&b.id)));
    seen.sessions = out;
    Ok(())
}

/// A server knows the status of the sessions it runs; it reports every other one as idle.
/// Where an opencode process the watchdog did not ask (a TUI, an `opencode run`: no server)
/// works in a session's directory, that "idle" is a guess: say unknown, as the database would.
fn idle_is_unknown_where_unasked(
    sessions: &mut [Session],
    procs: &[sources::discover::Process],
    asked: &HashSet<u32>,
) {
    let unasked: Vec<&Path> = procs
        .iter()
        .filter(|p| !asked.contains(&p.pid))
        .filter_map(|p| p.cwd.as_deref())
        .collect();
    for s in sessions.iter_mut() {
        let dir = s.directory.as_deref().map(Path::new);
        if s.status.as_deref() == Some("idle")
            && dir.is_some_and(|d| unasked.iter().any(|c| d.starts_with(c)))
        {
            s.status = None;
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_idle_is_unknown_where_an_opencode_without_a_server_works() {
        let sess = |id: &str, dir: &str, st: &str| Session {
            id: id.into(),
            directory: Some(dir.into()),
            status: Some(st.into()),
            ..Session::default()
        };
        let mut all = vec![
            sess("ses_run", "/w/a", "idle"),
            sess("ses_sub", "/w/a/sub", "idle"),
            sess("ses_busy", "/w/a", "busy"),
            sess("ses_served", "/w/b", "idle"),
        ];
        let procs = vec![
            sources::discover::Process {
                pid: 1,
                cwd: Some("/w/a".into()),
                db: None,
                urls: vec![],
                ppid: 0,
            },
            sources::discover::Process {
                pid: 2,
                cwd: Some("/w/b".into()),
                db: None,
                urls: vec![(4096, "http://127.0.0.1:4096".into())],
                ppid: 0,
            },
        ];
        idle_is_unknown_where_unasked(&mut all, &procs, &HashSet::from([2]));
        let got: Vec<Option<&str>> = all.iter().map(|s| s.status.as_deref()).collect();
        assert_eq!(got, [None, None, Some("busy"), Some("idle")]);
    }
}
