//! Reading opencode: where it runs (discovery), what it holds (sessions and their trees), and
//! the two ways in (HTTP servers and the SQLite database).

pub mod convert;
pub mod db;
pub mod http;

use crate::record::Session;
use anyhow::Result;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

pub use http::{Client, Fault};

/// The default server when nothing else names one.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:4096";

/// Servers to probe: those given; else the `serverUrl`s of `rc-servers.json` when it exists;
/// else the default.
pub fn servers(given: &[String]) -> Result<Vec<String>> {
    if !given.is_empty() {
        return Ok(given.to_vec());
    }
    let rc = rc_servers_path();
    if rc.exists() {
        return rc_servers(&rc);
    }
    Ok(vec![DEFAULT_SERVER.to_string()])
}

/// `$XDG_DATA_HOME/opencode/rc-servers.json` (`~/.local/share/...` by default).
pub fn rc_servers_path() -> PathBuf {
    crate::config::xdg_dir("XDG_DATA_HOME", ".local/share").join("opencode/rc-servers.json")
}

/// The `serverUrl` of each entry of an rc-servers file.
pub fn rc_servers(path: &Path) -> Result<Vec<String>> {
    use anyhow::Context;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let list = v
        .as_array()
        .or_else(|| v.get("servers").and_then(Value::as_array))
        .with_context(|| {
            format!(
                "{}: expected a list of {{\"serverUrl\": ...}}",
                path.display()
            )
        })?;
    let mut out: Vec<String> = list
        .iter()
        .filter_map(|e| e.get("serverUrl").and_then(Value::as_str))
        .map(|s| s.trim_end_matches('/').to_string())
        .collect();
    out.dedup();
    Ok(out)
}

/// A server that answered the health probe.
pub struct Live {
    pub client: Client,
    pub version: Option<String>,
}

/// Probes servers concurrently. Returns those that answered and, for those that answered
/// wrongly, a fault. Servers that are simply not there are left out.
pub fn probe(urls: &[String]) -> (Vec<Live>, Vec<(String, String)>) {
    let results: Vec<(String, Result<Value, Fault>)> = std::thread::scope(|s| {
        let handles: Vec<_> = urls
            .iter()
            .map(|u| {
                s.spawn(move || {
                    let c = Client::new(u);
                    (c.base.clone(), c.get("/global/health"))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut live = Vec::new();
    let mut broken = Vec::new();
    for (url, r) in results {
        match r {
            Ok(v) => live.push(Live {
                client: Client::new(&url),
                version: v.get("version").and_then(Value::as_str).map(String::from),
            }),
            Err(Fault::Absent(_)) => {}
            Err(Fault::Broken(why)) | Err(Fault::NotFound(why)) => broken.push((url, why)),
        }
    }
    (live, broken)
}

/// Selects the sessions worth listing: those updated at or after `since`, those not idle, those
/// named in `also`, and for each of them its ancestors and descendants (so each session can be
/// judged on its own calls and a parent credited with what its subagents landed). Keeps the
/// input order.
pub fn select_trees(all: Vec<Session>, since: i64, also: &[String]) -> Vec<Session> {
    let by_id: HashMap<&str, &Session> = all.iter().map(|s| (s.id.as_str(), s)).collect();
    let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
    for s in &all {
        if let Some(p) = &s.parent {
            children.entry(p.as_str()).or_default().push(s.id.as_str());
        }
    }
    let mut keep: HashSet<&str> = HashSet::new();
    let seeds: Vec<&str> = all
        .iter()
        .filter(|s| {
            s.updated.unwrap_or(i64::MAX) >= since
                || s.status.as_deref().is_some_and(|st| st != "idle")
                || also.iter().any(|a| a == &s.id)
        })
        .map(|s| s.id.as_str())
        .collect();
    for seed in seeds {
        // ancestors
        let mut cur = Some(seed);
        let mut guard = 0;
        while let Some(id) = cur {
            if !keep.insert(id) && id != seed {
                break;
            }
            cur = by_id.get(id).and_then(|s| s.parent.as_deref());
            guard += 1;
            if guard > 10_000 {
                break;
            }
        }
        // descendants
        let mut stack = vec![seed];
        while let Some(id) = stack.pop() {
            for &c in children.get(id).into_iter().flatten() {
                if keep.insert(c) {
                    stack.push(c);
                }
            }
        }
    }
    let keep: HashSet<String> = keep.into_iter().map(String::from).collect();
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
    fn rc_servers_lists_server_urls() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rc.json");
        std::fs::write(
            &p,
            r#"[{"serverUrl":"http://127.0.0.1:4096/"},{"serverUrl":"http://127.0.0.1:5000"},{"x":1}]"#,
        )
        .unwrap();
        assert_eq!(
            rc_servers(&p).unwrap(),
            ["http://127.0.0.1:4096", "http://127.0.0.1:5000"]
        );
    }
}
