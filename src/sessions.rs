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
use crate::opencode::{self, convert, db::Db, discover, Fault, Found, Limits, Planned};
use crate::record::{to_line, Blind, Session, Source};
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
    let procs = opencode::discovered(discover_mode, &db_path);
    let found = discover::listeners(&procs);
    let plan = opencode::plan_servers(&args.servers, &cfg.opencode.servers, &found);
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
            &Source {
                sessions: seen.count(&name),
                source: name,
                reader: Some("database".into()),
                found: vec![found_name(db_found)],
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
                &Source {
                    source: r.plan.url.clone(),
                    reader: Some("server".into()),
                    found: r.plan.found.iter().map(|f| found_name(*f)).collect(),
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

fn found_name(f: Found) -> String {
    f.as_str().to_string()
}

/// What one server gave: its sessions (with live status and pending requests), or why not.
struct ServerRead {
    plan: Planned,
    live: Option<opencode::Live>,
    projects: usize,
    sessions: Vec<Session>,
    error: Option<String>,
}

/// Reads one server within its deadline: health, projects, and per project its sessions,
/// their status and pending permission and question requests.
fn read_server(p: &Planned, limits: Limits) -> ServerRead {
    let mut r = ServerRead {
        plan: p.clone(),
        live: None,
        projects: 0,
        sessions: Vec::new(),
        error: None,
    };
    let live = match opencode::probe(p, limits) {
        Ok(Some(l)) => l,
        Ok(None) => return r,
        Err(why) => {
            r.error = Some(why);
            return r;
        }
    };
    match list_server(&live.client, &p.url) {
        Ok((projects, sessions)) => {
            r.projects = projects;
            r.sessions = sessions;
        }
        Err(why) => {
            r.error = Some(why);
            return r;
        }
    }
    r.live = Some(live);
    r
}

/// `?directory=` for a project's worktree.
fn directory_query(dir: &str) -> String {
    let mut q = String::from("directory=");
    for b in dir.bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            q.push(b as char);
        } else {
            q.push_str(&format!("%{b:02X}"));
        }
    }
    q
}

fn list_server(c: &opencode::Client, url: &str) -> Result<(usize, Vec<Session>), String> {
    // every project the server knows; an older server without /project: its own directory
    let dirs: Vec<Option<String>> = match c.get("/project") {
        Ok(v) => v
            .as_array()
            .ok_or("GET /project did not return a list")?
            .iter()
            .map(|p| {
                p.get("worktree")
                    .and_then(Value::as_str)
                    .map(|w| Some(w.to_string()))
                    .ok_or_else(|| format!("a project of GET /project has no \"worktree\": {p}"))
            })
            .collect::<Result<_, String>>()?,
        Err(Fault::NotFound(_)) => vec![None],
        Err(f) => return Err(f.to_string()),
    };
    let mut out: Vec<Session> = Vec::new();
    let mut ids: HashSet<String> = HashSet::new();
    for dir in &dirs {
        let (sep, q) = match dir {
            Some(d) => ("?", directory_query(d)),
            None => ("", String::new()),
        };
        let get = |path: &str| c.get(&format!("{path}{sep}{q}"));
        let list = get("/session").map_err(|f| f.to_string())?;
        let status = get("/session/status").map_err(|f| f.to_string())?;
        let list = list
            .as_array()
            .ok_or("GET /session did not return a list")?;
        let status = status
            .as_object()
            .ok_or("GET /session/status did not return an object")?;
        // best effort: a failed request leaves `pending` out (the liveness judge knows less)
        let count = |path: &str| -> Option<HashMap<String, i64>> {
            let v = get(path).ok()?;
            let mut m = HashMap::new();
            for item in v.as_array()? {
                if let Some(s) = item.get("sessionID").and_then(Value::as_str) {
                    *m.entry(s.to_string()).or_insert(0) += 1;
                }
            }
            Some(m)
        };
        let pending = if list.is_empty() {
            None
        } else {
            count("/permission").zip(count("/question"))
        };
        for v in list {
            let id = v.get("id").and_then(Value::as_str).unwrap_or("");
            if !ids.insert(id.to_string()) {
                continue;
            }
            let st = match status.get(id) {
                Some(s) => s
                    .get("type")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("status of {id} has no \"type\""))?,
                None => "idle",
            };
            let mut sess = convert::session_of(v, Some(st), url)?;
            if let Some(r) = status.get(id).filter(|s| s["type"] == "retry") {
                let mut r = r.clone();
                if let Some(m) = r.get("message").and_then(Value::as_str) {
                    r["message"] = Value::from(m.chars().take(200).collect::<String>());
                }
                sess.extra.insert("retry".into(), r);
            }
            if let Some((p, q)) = &pending {
                sess.extra.insert(
                    "pending".into(),
                    json!({"permissions": p.get(id).copied().unwrap_or(0),
                           "questions": q.get(id).copied().unwrap_or(0)}),
                );
            }
            out.push(sess);
        }
    }
    Ok((dirs.len(), out))
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
        self.sessions = opencode::select_trees(all, since, also);
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
    let index = db.index()?;
    let live = Seen::by_id(reads);
    let in_db: HashSet<&str> = index.iter().map(|r| r.0.as_str()).collect();
    let mut nodes: Vec<opencode::Node> = index
        .iter()
        .map(|(id, parent, updated)| {
            let srv = live.get(id);
            opencode::Node {
                id,
                parent: parent.as_deref(),
                updated: Some(
                    srv.and_then(|s| s.updated)
                        .unwrap_or(*updated)
                        .max(*updated),
                ),
                active: srv
                    .and_then(|s| s.status.as_deref())
                    .is_some_and(|st| st != "idle"),
            }
        })
        .collect();
    // sessions only a server knows (a server on another machine, or not yet written)
    nodes.extend(
        live.values()
            .filter(|s| !in_db.contains(s.id.as_str()))
            .map(|s| opencode::Node {
                id: &s.id,
                parent: s.parent.as_deref(),
                updated: s.updated,
                active: s.status.as_deref().is_some_and(|st| st != "idle"),
            }),
    );
    let keep = opencode::select(&nodes, since, also);
    let from_db: Vec<&str> = keep
        .iter()
        .copied()
        .filter(|id| in_db.contains(id))
        .collect();
    let rows = db.sessions_by_id(&from_db)?;
    let mut out: Vec<Session> = Vec::new();
    for v in &rows {
        let mut s = convert::session_of(v, None, &name).map_err(|why| anyhow::anyhow!(why))?;
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
    procs: &[discover::Process],
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
            discover::Process {
                pid: 1,
                cwd: Some("/w/a".into()),
                db: None,
                urls: vec![],
                ppid: 0,
            },
            discover::Process {
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

    #[test]
    fn project_directories_are_percent_encoded() {
        assert_eq!(
            directory_query("/home/me/my proj/ü&x"),
            "directory=/home/me/my%20proj/%C3%BC%26x"
        );
    }
}
