//! Reading opencode: where it runs (discovery), what it holds (sessions and their trees), and
//! the two ways in (HTTP servers and the SQLite database).

pub mod convert;
pub mod db;
pub mod discover;
pub mod export;
pub mod http;

use crate::record::Session;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

pub use http::{Client, Fault, Limits};

pub use crate::paths::Found;

/// A server to read, with how it was found (one server under two URLs is one entry).
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub url: String,
    pub found: Vec<Found>,
    /// The opencode processes seen listening on it.
    pub pids: Vec<u32>,
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
    let mut add = |url: &str, how: Found, pid: Option<u32>| {
        let key = server_key(url);
        let i = match out.iter().position(|p| server_key(&p.url) == key) {
            Some(i) => i,
            None => {
                out.push(Planned {
                    url: url.trim_end_matches('/').to_string(),
                    found: Vec::new(),
                    pids: Vec::new(),
                });
                out.len() - 1
            }
        };
        let p = &mut out[i];
        if !p.found.contains(&how) {
            p.found.push(how);
        }
        if let Some(pid) = pid.filter(|pid| !p.pids.contains(pid)) {
            p.pids.push(pid);
        }
    };
    for u in given {
        add(u, Found::Argument, None);
    }
    for u in configured {
        add(u, Found::Configured, None);
    }
    for l in found {
        add(&l.url, Found::Discovered, Some(l.pid));
    }
    out
}

/// The running opencode processes that matter (from `/proc`): with [`Discover::Database`],
/// those whose environment points opencode at `db`, the database being read; with
/// [`Discover::All`], every one; with [`Discover::Off`], none.
pub fn discovered(mode: crate::config::Discover, db: &std::path::Path) -> Vec<discover::Process> {
    use crate::config::Discover;
    let canonical =
        |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    match mode {
        Discover::Off => Vec::new(),
        mode => {
            let mine = canonical(db);
            discover::processes(std::path::Path::new("/proc"))
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

/// A session in the selection graph: enough to pick what to list without reading it all.
pub struct Node<'a> {
    pub id: &'a str,
    pub parent: Option<&'a str>,
    pub updated: Option<i64>,
    /// A server says it is busy or retrying.
    pub active: bool,
}

/// The ids worth listing: sessions updated at or after `since`, those not idle, those named in
/// `also`, and for each of them its ancestors and descendants (so each session can be judged
/// on its own calls and a parent credited with what its subagents landed).
pub fn select<'a>(nodes: &[Node<'a>], since: i64, also: &[String]) -> HashSet<&'a str> {
    let by_id: HashMap<&str, &Node> = nodes.iter().map(|n| (n.id, n)).collect();
    let mut children: HashMap<&str, Vec<&'a str>> = HashMap::new();
    for n in nodes {
        if let Some(p) = n.parent {
            children.entry(p).or_default().push(n.id);
        }
    }
    let mut keep: HashSet<&'a str> = HashSet::new();
    let seeds = nodes
        .iter()
        .filter(|n| {
            n.updated.unwrap_or(i64::MAX) >= since || n.active || also.iter().any(|a| a == n.id)
        })
        .map(|n| n.id);
    for seed in seeds {
        let mut cur = Some(seed);
        let mut guard = 0;
        while let Some(id) = cur {
            if !keep.insert(id) && id != seed {
                break;
            }
            cur = by_id.get(id).and_then(|n| n.parent);
            guard += 1;
            if guard > 10_000 {
                break;
            }
        }
        let mut stack = vec![seed];
        while let Some(id) = stack.pop() {
            for &c in children.get(id).into_iter().flatten() {
                if keep.insert(c) {
                    stack.push(c);
                }
            }
        }
    }
    keep
}

/// [`select`] over session records, keeping the input order.
pub fn select_trees(all: Vec<Session>, since: i64, also: &[String]) -> Vec<Session> {
    let keep: HashSet<String> = {
        let nodes: Vec<Node> = all
            .iter()
            .map(|s| Node {
                id: &s.id,
                parent: s.parent.as_deref(),
                updated: s.updated,
                active: s.status.as_deref().is_some_and(|st| st != "idle"),
            })
            .collect();
        select(&nodes, since, also)
            .into_iter()
            .map(String::from)
            .collect()
    };
    all.into_iter().filter(|s| keep.contains(&s.id)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(id: &str, parent: Option<&str>, updated: i64) -> Session {
        Session {
            id: id.into(),
            parent: parent.map(String::from),
            updated: Some(updated),
            status: Some("idle".into()),
            ..Session::default()
        }
    }

    #[test]
    fn trees_bring_ancestors_and_descendants() {
        let all = vec![
            s("root", None, 10),
            s("child", Some("root"), 50),
            s("grandchild", Some("child"), 20),
            s("sibling", Some("root"), 5),
            s("other", None, 5),
        ];
        let got: Vec<String> = select_trees(all, 40, &[])
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(got, ["root", "child", "grandchild"]);
    }

    #[test]
    fn busy_sessions_are_listed_whatever_their_age() {
        let mut old = s("old", None, 1);
        old.status = Some("busy".into());
        let got = select_trees(vec![old, s("idle", None, 1)], 100, &[]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, "old");
        let got = select_trees(
            vec![s("quiet", None, 1), s("x", None, 1)],
            100,
            &["quiet".into()],
        );
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, "quiet");
    }

    #[test]
    fn one_server_under_two_urls_is_read_once_and_says_how_it_was_found() {
        let found = vec![
            discover::Listener {
                pid: 7,
                port: 4096,
                url: "http://127.0.0.1:4096".into(),
                db: None,
            },
            discover::Listener {
                pid: 8,
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
}
