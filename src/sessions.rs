//! `oc-sessions`: find opencode and list its sessions as JSONL.
//!
//! Out: one `source` record per opencode that answered, then its `session` records; a `blind`
//! record for an opencode that answered in a shape this reader does not know (exit 2). With no
//! opencode found it prints nothing and exits 0.

use crate::cli::{now_ms, parse_when, Exit, Out};
use crate::config::Config;
use crate::opencode::{self, convert, db::Db, Fault};
use crate::record::{to_line, Blind, Session, Source};
use anyhow::Result;
use clap::Parser;
use serde_json::Value;
use std::io::BufRead;
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  oc-sessions                                  # every server in rc-servers.json, or :4096
  oc-sessions --server http://127.0.0.1:4096 --since 10m
  oc-sessions --db --since 1d | jq -r '[.id, .agent, .title] | @tsv'
  oc-sessions --since \"$(wd-store last-tick)\" | oc-calls | progress-detect";

/// List opencode sessions (and their session trees) as JSON Lines.
#[derive(Parser, Debug)]
#[command(name = "oc-sessions", version, after_help = EXAMPLES)]
pub struct Args {
    /// An opencode server to read (repeatable). Default: the serverUrl entries of
    /// $XDG_DATA_HOME/opencode/rc-servers.json, else http://127.0.0.1:4096.
    #[arg(long = "server", value_name = "URL")]
    pub servers: Vec<String>,
    /// Read opencode's SQLite database instead of a server (default path
    /// $XDG_DATA_HOME/opencode/opencode.db). Strictly read-only.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "")]
    pub db: Option<PathBuf>,
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
    out.line_buffered(args.line_buffered);
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
    let sel = Selection { since, also: &also };
    let mut code = Exit::Ok;
    if let Some(p) = &args.db {
        let path = if p.as_os_str().is_empty() {
            cfg.opencode_db()
        } else {
            p.clone()
        };
        return list_db(&path, &sel, out);
    }
    let given = if args.servers.is_empty() {
        cfg.opencode.servers.clone()
    } else {
        args.servers.clone()
    };
    let urls = opencode::servers(&given)?;
    let (live, broken) = opencode::probe(&urls);
    for (url, why) in &broken {
        blind(out, url, why)?;
        code = Exit::Error;
    }
    for srv in &live {
        if list_server(srv, &sel, out)? == Exit::Error {
            code = Exit::Error;
        }
    }
    if live.is_empty() && broken.is_empty() {
        if let Some(db) = &cfg.opencode.db {
            if db.exists() {
                return list_db(db, &sel, out);
            }
        }
    }
    Ok(code)
}

/// Which sessions to list.
struct Selection<'a> {
    since: i64,
    also: &'a [String],
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

fn emit(
    out: &mut Out,
    source: &str,
    version: Option<String>,
    sessions: Vec<Session>,
) -> Result<()> {
    out.line(&to_line(
        "source",
        &Source {
            source: source.to_string(),
            version,
            sessions: sessions.len(),
        },
    )?)?;
    for s in &sessions {
        out.line(&to_line("session", s)?)?;
    }
    Ok(())
}

fn list_server(srv: &opencode::Live, sel: &Selection, out: &mut Out) -> Result<Exit> {
    let url = srv.client.base.clone();
    let fetched = (|| -> Result<(Value, Value), Fault> {
        Ok((
            srv.client.get("/session")?,
            srv.client.get("/session/status")?,
        ))
    })();
    let (list, status) = match fetched {
        Ok(x) => x,
        Err(f) => {
            blind(out, &url, &f.to_string())?;
            return Ok(Exit::Error);
        }
    };
    let parsed = (|| -> Result<Vec<Session>, String> {
        let list = list
            .as_array()
            .ok_or("GET /session did not return a list")?;
        let status = status
            .as_object()
            .ok_or("GET /session/status did not return an object")?;
        list.iter()
            .map(|v| {
                let id = v.get("id").and_then(Value::as_str).unwrap_or("");
                let st = match status.get(id) {
                    Some(s) => Some(
                        s.get("type")
                            .and_then(Value::as_str)
                            .ok_or_else(|| format!("status of {id} has no \"type\""))?,
                    ),
                    None => Some("idle"),
                };
                let mut sess = convert::session_of(v, st, &url)?;
                if let Some(r) = status.get(id).filter(|s| s["type"] == "retry") {
                    let mut r = r.clone();
                    if let Some(m) = r.get("message").and_then(Value::as_str) {
                        r["message"] = Value::from(m.chars().take(200).collect::<String>());
                    }
                    sess.extra.insert("retry".into(), r);
                }
                Ok(sess)
            })
            .collect()
    })();
    match parsed {
        Ok(all) => {
            let mut listed = opencode::select_trees(all, sel.since, sel.also);
            add_evidence(&srv.client, &mut listed);
            emit(out, &url, srv.version.clone(), listed)?;
            Ok(Exit::Ok)
        }
        Err(why) => {
            blind(out, &url, &why)?;
            Ok(Exit::Error)
        }
    }
}

/// Liveness evidence the server holds outside the session objects: pending permission and
/// question requests, and open todos. Best effort: a request that fails leaves the field out
/// (the liveness judge then knows less, and says so), it never blinds the session list.
fn add_evidence(c: &opencode::Client, sessions: &mut [Session]) {
    let count = |path: &str| -> Option<std::collections::HashMap<String, i64>> {
        let v = c.get(path).ok()?;
        let mut m = std::collections::HashMap::new();
        for item in v.as_array()? {
            if let Some(s) = item.get("sessionID").and_then(Value::as_str) {
                *m.entry(s.to_string()).or_insert(0) += 1;
            }
        }
        Some(m)
    };
    let perms = count("/permission");
    let questions = count("/question");
    for s in sessions.iter_mut() {
        if let (Some(p), Some(q)) = (&perms, &questions) {
            s.extra.insert(
                "pending".into(),
                serde_json::json!({"permissions": p.get(&s.id).copied().unwrap_or(0),
                                   "questions": q.get(&s.id).copied().unwrap_or(0)}),
            );
        }
        if let Ok(todos) = c.get(&format!("/session/{}/todo", s.id)) {
            if let Some(list) = todos.as_array() {
                let open = list
                    .iter()
                    .filter(|t| matches!(t["status"].as_str(), Some("pending" | "in_progress")))
                    .count();
                s.extra.insert("todos_open".into(), Value::from(open));
            }
        }
    }
}

fn list_db(path: &std::path::Path, sel: &Selection, out: &mut Out) -> Result<Exit> {
    let db = Db::open(path)?;
    let source = path.display().to_string();
    let rows = db.sessions()?;
    let version = rows
        .first()
        .and_then(|s| s.get("version"))
        .and_then(Value::as_str)
        .map(String::from);
    let all: Result<Vec<Session>, String> = rows
        .iter()
        .map(|v| convert::session_of(v, None, &source))
        .collect();
    match all {
        Ok(all) => {
            let mut listed = opencode::select_trees(all, sel.since, sel.also);
            for s in listed.iter_mut() {
                if let Ok(n) = db.open_todos(&s.id) {
                    s.extra.insert("todos_open".into(), Value::from(n));
                }
            }
            emit(out, &source, version, listed)?;
            Ok(Exit::Ok)
        }
        Err(why) => {
            blind(out, &source, &why)?;
            Ok(Exit::Error)
        }
    }
}
