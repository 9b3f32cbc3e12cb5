//! opencode servers as a source: which to read (those given, configured and found running, each
//! once), whether one answers, and what it lists: every project's sessions (`GET /project`, then
//! `?directory=`), their status and pending permission and question requests. The HTTP client
//! is [`super::http`], finding servers in `/proc` is [`super::discover`].

use super::http::{Client, Fault, Limits};
use super::{convert, discover, Changes, Cursor, IndexEntry, Source};
use crate::config::Discover;
use crate::paths::Found;
use crate::record::Session;
use crate::sources::{SourceId, SourceKind};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// A server to read, with how it was found (one server under two URLs is one entry).
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub url: String,
    pub found: Vec<Found>,
    /// The opencode processes seen listening on it.
    pub pids: Vec<u32>,
    /// The users those processes run as.
    pub uids: Vec<u32>,
}

/// What makes two URLs the same server: scheme and port, with every loopback spelling
/// (`localhost`, `127.x.x.x`, `[::1]`, `0.0.0.0`) counted as one host.
fn server_key(url: &str) -> String {
    let url = url.trim_end_matches('/').to_ascii_lowercase();
    let Some((scheme, rest)) = url.split_once("://") else {
        return url;
    };
    let hostport = rest.split('/').next().unwrap_or(rest);
    let (host, port) = match hostport.rfind(':') {
        Some(i) if !hostport[i..].contains(']') => (&hostport[..i], &hostport[i + 1..]),
        _ => (hostport, if scheme == "https" { "443" } else { "80" }),
    };
    let loopback =
        matches!(host, "localhost" | "[::1]" | "0.0.0.0" | "[::]") || host.starts_with("127.");
    let host = if loopback { "loopback" } else { host };
    format!("{scheme}://{host}:{port}{}", &rest[hostport.len()..])
}

/// The servers to read: those given as arguments, then those configured, then those found
/// running, each once (the first spelling of its URL is kept).
pub fn plan_servers(
    given: &[String],
    configured: &[String],
    found: &[discover::Listener],
) -> Vec<Planned> {
    let mut out: Vec<Planned> = Vec::new();
    let mut add = |url: &str, how: Found, pid: Option<(u32, u32)>| {
        let key = server_key(url);
        let i = match out.iter().position(|p| server_key(&p.url) == key) {
            Some(i) => i,
            None => {
                out.push(Planned {
                    url: url.trim_end_matches('/').to_string(),
                    found: Vec::new(),
                    pids: Vec::new(),
                    uids: Vec::new(),
                });
                out.len() - 1
            }
        };
        let p = &mut out[i];
        if !p.found.contains(&how) {
            p.found.push(how);
        }
        if let Some((pid, uid)) = pid.filter(|(pid, _)| !p.pids.contains(pid)) {
            p.pids.push(pid);
            if !p.uids.contains(&uid) {
                p.uids.push(uid);
            }
        }
    };
    for u in given {
        add(u, Found::Argument, None);
    }
    for u in configured {
        add(u, Found::Configured, None);
    }
    for l in found {
        add(&l.url, Found::Discovered, Some((l.pid, l.uid)));
    }
    out
}

/// The running opencode processes that matter (from `/proc`): with [`Discover::Database`],
/// those whose environment points opencode at `db`, the database being read; with
/// [`Discover::All`], every one; with [`Discover::Off`], none. Only processes of the watchdog's
/// own user and of `uids` (`[opencode] discover_uids`) are considered.
pub fn discovered(mode: Discover, db: &Path, uids: &[u32]) -> Vec<discover::Process> {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    match mode {
        Discover::Off => Vec::new(),
        mode => {
            let mine = canonical(db);
            let mut users: Vec<u32> = discover::own_uid().into_iter().collect();
            users.extend_from_slice(uids);
            discover::processes(Path::new("/proc"), &users)
                .into_iter()
                .filter(|p| {
                    mode == Discover::All || p.db.as_deref().map(canonical) == Some(mine.clone())
                })
                .collect()
        }
    }
}

/// A server that answered the health probe.
pub struct Live {
    pub client: Client,
    pub version: Option<String>,
}

/// Probes one server. `Ok(None)`: nothing there (connection refused), or, for a port found on
/// an opencode process but not configured, something that is not opencode's API (opencode
/// also listens for things like OAuth callbacks). Err: there, but unreadable.
pub fn probe(p: &Planned, limits: Limits) -> Result<Option<Live>, String> {
    let client = Client::with_limits(&p.url, limits);
    let only_found = p.found == [Found::Discovered];
    match client.get("/global/health") {
        Ok(v) => {
            if only_found && v.get("healthy").is_none() {
                return Ok(None);
            }
            Ok(Some(Live {
                version: v.get("version").and_then(Value::as_str).map(String::from),
                client,
            }))
        }
        Err(Fault::Absent(_)) => Ok(None),
        Err(Fault::NotFound(_)) if only_found => Ok(None),
        Err(Fault::Broken(why)) if only_found && why.contains(": not JSON: ") => Ok(None),
        Err(Fault::Broken(why)) | Err(Fault::NotFound(why)) => Err(why),
    }
}

/// What one server gave: its sessions (with live status and pending requests), or why not.
pub struct ServerRead {
    pub plan: Planned,
    pub live: Option<Live>,
    pub projects: usize,
    pub sessions: Vec<Session>,
    pub error: Option<String>,
}

/// Reads one server within its deadline: health, projects, and per project its sessions,
/// their status and pending permission and question requests.
pub fn read_server(p: &Planned, limits: Limits) -> ServerRead {
    let mut r = ServerRead {
        plan: p.clone(),
        live: None,
        projects: 0,
        sessions: Vec::new(),
        error: None,
    };
    let live = match probe(p, limits) {
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

/// How many items of a list (`GET /permission`, `GET /question`) each session has.
fn per_session(v: &Value) -> Option<HashMap<String, i64>> {
    let mut m = HashMap::new();
    for item in v.as_array()? {
        if let Some(s) = item.get("sessionID").and_then(Value::as_str) {
            *m.entry(s.to_string()).or_insert(0) += 1;
        }
    }
    Some(m)
}

fn list_server(c: &Client, url: &str) -> Result<(usize, Vec<Session>), String> {
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
        let count = |path: &str| get(path).ok().as_ref().and_then(per_session);
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

/// One live server as a [`Source`]: what oc-calls reads a session's messages from, and where a
/// nudge goes.
pub struct Server {
    pub client: Client,
}

impl SourceKind for Server {
    type Name = String;
    const PHRASE: &'static str = "a server";
    const READER: &'static str = "server";
    fn claim(wire: &str) -> Option<String> {
        (wire.starts_with("http://") || wire.starts_with("https://")).then(|| wire.to_string())
    }
    fn write(url: &String, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(url)
    }
}

impl Source for Server {
    fn id(&self) -> SourceId {
        SourceId::Server(self.client.base.clone())
    }

    /// Every session of every project the server knows; servers report no time of the last
    /// change cheaper than the whole list.
    fn index(&self) -> Result<Vec<IndexEntry>, Fault> {
        let (_, sessions) = list_server(&self.client, &self.client.base).map_err(Fault::Broken)?;
        Ok(sessions.iter().map(IndexEntry::of).collect())
    }

    fn sessions(&self, ids: &[&str]) -> Result<Vec<Session>, Fault> {
        let (_, sessions) = list_server(&self.client, &self.client.base).map_err(Fault::Broken)?;
        Ok(sessions
            .into_iter()
            .filter(|s| ids.contains(&s.id.as_str()))
            .collect())
    }

    /// A session asked for alone is idle unless listed otherwise: `GET /session/status` names
    /// only the sessions that are not.
    fn status_alone(&self) -> Option<&'static str> {
        Some("idle")
    }

    fn session(&self, id: &str) -> Result<Option<Value>, Fault> {
        match self.client.get(&format!("/session/{id}")) {
            Ok(v) => Ok(Some(v)),
            Err(Fault::NotFound(_)) => Ok(None),
            Err(f) => Err(f),
        }
    }

    fn messages(&self, id: &str) -> Result<Value, Fault> {
        self.client.get(&format!("/session/{id}/message"))
    }

    /// Not implemented yet: a server's changes come from its event stream (`GET /event`), which
    /// the live follow mode will hold open.
    fn changes(&self, _since: Option<&Cursor>) -> Result<Option<Changes>, Fault> {
        Ok(None)
    }

    /// `POST /session/{id}/prompt_async` with `text` as the user's message.
    fn nudge(&self, session: &str, text: &str) -> Result<String, String> {
        self.client
            .post(
                &format!("/session/{session}/prompt_async"),
                &json!({"parts": [{"type": "text", "text": text}]}),
            )
            .map(|code| format!("HTTP {code}"))
            .map_err(|e| format!("{e:#}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_server_under_two_urls_is_read_once_and_says_how_it_was_found() {
        let found = vec![
            discover::Listener {
                pid: 7,
                uid: 1000,
                port: 4096,
                url: "http://127.0.0.1:4096".into(),
                db: None,
            },
            discover::Listener {
                pid: 8,
                uid: 1000,
                port: 5000,
                url: "http://127.0.0.1:5000".into(),
                db: None,
            },
        ];
        let plan = plan_servers(
            &[],
            &[
                "http://localhost:4096/".into(),
                "http://10.0.0.5:4096".into(),
            ],
            &found,
        );
        let got: Vec<(&str, &[Found], &[u32])> = plan
            .iter()
            .map(|p| (p.url.as_str(), p.found.as_slice(), p.pids.as_slice()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "http://localhost:4096",
                    &[Found::Configured, Found::Discovered][..],
                    &[7][..]
                ),
                ("http://10.0.0.5:4096", &[Found::Configured][..], &[][..]),
                ("http://127.0.0.1:5000", &[Found::Discovered][..], &[8][..]),
            ]
        );
    }

    #[test]
    fn project_directories_are_percent_encoded() {
        assert_eq!(
            directory_query("/home/me/my proj/ü&x"),
            "directory=/home/me/my%20proj/%C3%BC%26x"
        );
    }
}
