//! Merging what the sources list into one record per session: which sessions are worth listing
//! (the selection graph: recent, active or asked-for sessions with their whole trees), and how
//! a session a server and the database both list becomes one record (the server's live fields,
//! the database's parent and model, both named in `sources`).

use super::db::Db;
use super::discover;
use super::server::ServerRead;
use super::{IndexEntry, Source};
use crate::record::{RunsIn, Session};
use anyhow::Result;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// A session in the selection graph: enough to pick what to list without reading it all.
pub struct SessionNode<'a> {
    pub id: &'a str,
    pub parent: Option<&'a str>,
    pub updated: Option<i64>,
    /// A server says it is busy or retrying.
    pub active: bool,
}

impl<'a> SessionNode<'a> {
    pub fn of(s: &'a Session) -> SessionNode<'a> {
        SessionNode {
            id: &s.id,
            parent: s.parent.as_deref(),
            updated: s.updated,
            active: s.status.as_deref().is_some_and(|st| st != "idle"),
        }
    }
}

/// The ids of a source's index worth listing, as [`select`] picks them.
pub fn pick<'a>(index: &'a [IndexEntry], since: i64, also: &[String]) -> Vec<&'a str> {
    let nodes: Vec<SessionNode> = index
        .iter()
        .map(|e| SessionNode {
            id: &e.id,
            parent: e.parent.as_deref(),
            updated: e.updated,
            active: e.active,
        })
        .collect();
    select(&nodes, since, also).into_iter().collect()
}

/// The ids worth listing: sessions updated at or after `since`, those not idle, those named in
/// `also`, and for each of them its ancestors and descendants (so each session can be judged
/// on its own calls and a parent credited with what its subagents landed).
pub fn select<'a>(nodes: &[SessionNode<'a>], since: i64, also: &[String]) -> HashSet<&'a str> {
    let by_id: HashMap<&str, &SessionNode> = nodes.iter().map(|n| (n.id, n)).collect();
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
        let nodes: Vec<SessionNode> = all.iter().map(SessionNode::of).collect();
        select(&nodes, since, also)
            .into_iter()
            .map(String::from)
            .collect()
    };
    all.into_iter().filter(|s| keep.contains(&s.id)).collect()
}

/// The merged picture: one record per session, and the sources that could not be read.
#[derive(Default)]
pub struct Seen {
    pub sessions: Vec<Session>,
    pub blind: Vec<(String, String)>,
}

impl Seen {
    pub fn blind(&mut self, source: &str, why: &str) {
        self.blind.push((source.to_string(), why.to_string()));
    }

    /// Drops the sessions whose id (or parent's) is not of opencode's form, each said once on
    /// stderr: such an id came in through `opencode import`, and would reach the commands
    /// printed for a person to paste.
    pub fn refuse_strange_ids(&mut self) {
        self.sessions.retain(|s| s.has_opencode_ids("oc-sessions"));
    }

    /// Sessions listed that this source saw.
    pub fn count(&self, source: &str) -> usize {
        self.sessions
            .iter()
            .filter(|s| {
                s.source.as_deref() == Some(source) || s.sources.iter().any(|x| x == source)
            })
            .count()
    }

    /// One record per session id from the servers' lists: a busy or retrying status beats
    /// idle, the first server otherwise.
    pub fn by_id(reads: &[ServerRead]) -> HashMap<String, Session> {
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

    /// The sessions of one more source, picked by its own index as the database's are (updated
    /// since, active, named, with their trees): a session already listed names this source
    /// too; one only this source knows is added.
    pub fn merge_source(
        &mut self,
        src: &dyn Source,
        since: i64,
        also: &[String],
    ) -> Result<(), super::Fault> {
        let index = src.index()?;
        let mut ids = pick(&index, since, also);
        ids.sort_unstable();
        let name = src.id().to_string();
        for s in src.sessions(&ids)? {
            match self.sessions.iter_mut().find(|have| have.id == s.id) {
                Some(have) => {
                    if have.sources.is_empty() {
                        have.sources.extend(have.source.clone());
                    }
                    if !have.sources.contains(&name) {
                        have.sources.push(name.clone());
                    }
                }
                None => self.sessions.push(s),
            }
        }
        self.sessions
            .sort_by(|a, b| b.updated.cmp(&a.updated).then(a.id.cmp(&b.id)));
        Ok(())
    }

    /// Without a database: the servers' sessions, selected.
    pub fn merge_servers(&mut self, reads: &[ServerRead], since: i64, also: &[String]) {
        let all: Vec<Session> = {
            let m = Seen::by_id(reads);
            let mut v: Vec<Session> = m.into_values().collect();
            v.sort_by(|a, b| b.updated.cmp(&a.updated).then(a.id.cmp(&b.id)));
            v
        };
        self.sessions = select_trees(all, since, also);
    }
}

/// The database's sessions merged with the servers': the database's cheap index (id, parent,
/// last update) picks what to list; only those rows are read whole. A session a server also
/// lists takes the server's fields (live status, pending requests) and names both sources.
pub fn read_db(
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
    let mut nodes: Vec<SessionNode> = index
        .iter()
        .map(|e| {
            let srv = live.get(&e.id);
            let srv_updated = srv.and_then(|s| s.updated);
            SessionNode {
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
            .map(|s| SessionNode {
                id: &s.id,
                parent: s.parent.as_deref(),
                updated: s.updated,
                active: s.status.as_deref().is_some_and(|st| st != "idle"),
            }),
    );
    let keep = select(&nodes, since, also);
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
pub fn idle_is_unknown_where_unasked(
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

/// A session the database lists with no status (it cannot tell busy from idle) whose
/// directory no opencode process works in has nothing running it: a killed `opencode run`
/// leaves its last reply "in progress" in the database for good. Marked `process: ended`, so
/// that liveness calls it ended, never busy or stalled. Said only when the processes were
/// looked for (`looked`) and every one of them could be read: a process whose directory is
/// unreadable, or a server that was not read, could be running it.
pub fn ended_where_no_process(
    sessions: &mut [Session],
    procs: &[discover::Process],
    asked: &HashSet<u32>,
    looked: bool,
) {
    let unsure = procs
        .iter()
        .any(|p| p.cwd.is_none() || (!p.urls.is_empty() && !asked.contains(&p.pid)));
    if !looked || unsure {
        return;
    }
    for s in sessions.iter_mut() {
        let Some(dir) = s.directory.as_deref().map(Path::new) else {
            continue;
        };
        let runs = procs
            .iter()
            .filter_map(|p| p.cwd.as_deref())
            .any(|c| dir.starts_with(c));
        if s.status.is_none() && !runs {
            s.extra.insert("process".into(), Value::from("ended"));
        }
    }
}

/// How long an `opencode run` that ended is remembered: its session is listed again at the next
/// poll and full read of follow mode, and at the next timer tick, and marked ended then.
pub const RUNS_KEPT_MS: i64 = 600_000;

/// Adds the `opencode run`s among `procs` not seen before.
pub fn note_runs(runs: &mut Vec<RunProcess>, procs: &[discover::Process]) {
    for p in procs {
        let (Some(session), Some(cwd), Some(started)) = (&p.run, &p.cwd, p.started) else {
            continue;
        };
        if !runs.iter().any(|r| r.pid == p.pid && r.started == started) {
            runs.push(RunProcess {
                pid: p.pid,
                cwd: cwd.clone(),
                started,
                session: session.clone(),
                ended: None,
            });
        }
    }
}

/// An `opencode run` process seen working, alive or since ended: where and when it started,
/// the session it was told to continue (`-s ID`), and when it was seen gone.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunProcess {
    pub pid: u32,
    pub cwd: PathBuf,
    pub started: i64,
    pub session: Option<String>,
    pub ended: Option<i64>,
}

/// How long after it starts an `opencode run` creates its session, at most (it does at once;
/// two minutes allow for a loaded machine).
const RUN_CREATES_WITHIN_MS: i64 = 120_000;
/// A write racing the process's exit, and the poll that saw it gone.
const SLACK_MS: i64 = 2_000;

/// The sessions whose `opencode run` has ended, whatever other opencode processes work in their
/// directory (a TUI open on the same project kept a Ctrl-C'd run "busy and silent" for six
/// minutes, until the TUI quit): marked `process: ended`, as [`ended_where_no_process`] marks
/// them. A run runs the session it names (`-s ID`), else the first one created in its directory
/// after it started (runs in turn, each taking the first not yet taken), and that session's
/// subagents. Only a session with no live status and no write since its run ended.
pub fn ended_with_their_run(sessions: &mut [Session], runs: &[RunProcess]) {
    let run_of = run_owners(sessions, runs);
    for s in sessions.iter_mut() {
        let Some(ended) = run_of(&s.id).and_then(|r| r.ended) else {
            continue;
        };
        if s.status.is_none() && !matches!(s.updated, Some(u) if u > ended + SLACK_MS) {
            s.extra.insert("process".into(), Value::from("ended"));
        }
    }
}

/// The run that runs each session, by the rule of [`ended_with_their_run`]: a run runs the
/// session it names, else the first one created in its directory after it started, and that
/// session's subagents.
fn run_owners<'a>(
    sessions: &[Session],
    runs: &'a [RunProcess],
) -> impl Fn(&str) -> Option<&'a RunProcess> {
    let mut by_start: Vec<&RunProcess> = runs.iter().collect();
    by_start.sort_by_key(|r| (r.started, r.pid));
    let mut owner: HashMap<String, &RunProcess> = HashMap::new();
    for r in by_start {
        let own = match &r.session {
            Some(id) => Some(id.clone()),
            None => sessions
                .iter()
                .filter(|s| {
                    s.parent.is_none()
                        && s.directory.as_deref().map(Path::new) == Some(r.cwd.as_path())
                        // `started` is at most a second early (the boot time is in seconds)
                        && s.created.is_some_and(|c| {
                            c >= r.started && c <= r.started + RUN_CREATES_WITHIN_MS
                        })
                        && !owner.contains_key(&s.id)
                })
                .min_by_key(|s| (s.created, s.id.clone()))
                .map(|s| s.id.clone()),
        };
        if let Some(id) = own {
            owner.entry(id).or_insert(r);
        }
    }
    // subagents run in their root's process
    let parents: HashMap<String, String> = sessions
        .iter()
        .filter_map(|s| Some((s.id.clone(), s.parent.clone()?)))
        .collect();
    move |id: &str| -> Option<&'a RunProcess> {
        let mut cur = id.to_string();
        for _ in 0..64 {
            if let Some(r) = owner.get(&cur) {
                return Some(*r);
            }
            cur = parents.get(&cur)?.clone();
        }
        None
    }
}

/// What runs each session not marked `ended`, as a person would stop it, in its `process`:
/// `server` when a server lists it (its source is the server's URL), `run` when a running
/// `opencode run` runs it (the rule of [`run_owners`]), `tui` when none does and an opencode
/// process that neither runs nor listens (a TUI) works in its directory. Nothing when none of
/// these holds: the words then name every way.
pub fn runs_in(sessions: &mut [Session], procs: &[discover::Process]) {
    let runs: Vec<RunProcess> = procs
        .iter()
        .filter_map(|p| {
            Some(RunProcess {
                pid: p.pid,
                cwd: p.cwd.clone()?,
                started: p.started?,
                session: p.run.clone()?,
                ended: None,
            })
        })
        .collect();
    let tuis: Vec<&Path> = procs
        .iter()
        .filter(|p| p.run.is_none() && p.urls.is_empty())
        .filter_map(|p| p.cwd.as_deref())
        .collect();
    let run_of = run_owners(sessions, &runs);
    let said: Vec<Option<RunsIn>> = sessions
        .iter()
        .map(|s| {
            if s.extra.contains_key("process") {
                None
            } else if s.source.as_deref().is_some_and(|u| u.starts_with("http"))
                && s.status.is_some()
            {
                // a server's status, which no process it was not asked about could contradict
                // (`idle_is_unknown_where_unasked`)
                Some(RunsIn::Server)
            } else if run_of(&s.id).is_some() {
                Some(RunsIn::Run)
            } else {
                let dir = s.directory.as_deref().map(Path::new)?;
                tuis.iter()
                    .any(|c| dir.starts_with(c))
                    .then_some(RunsIn::Tui)
            }
        })
        .collect();
    for (s, r) in sessions.iter_mut().zip(said) {
        if let Some(r) = r {
            s.extra.insert("process".into(), Value::from(r.as_str()));
        }
    }
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
                uid: 1000,
                cwd: Some("/w/a".into()),
                db: None,
                urls: vec![],
                ppid: 0,
                started: None,
                run: None,
                db_deleted: false,
            },
            discover::Process {
                pid: 2,
                uid: 1000,
                cwd: Some("/w/b".into()),
                db: None,
                urls: vec![(4096, "http://127.0.0.1:4096".into())],
                ppid: 0,
                started: None,
                run: None,
                db_deleted: false,
            },
        ];
        idle_is_unknown_where_unasked(&mut all, &procs, &HashSet::from([2]));
        let got: Vec<Option<&str>> = all.iter().map(|s| s.status.as_deref()).collect();
        assert_eq!(got, [None, None, Some("busy"), Some("idle")]);
    }

    /// An operator's journey: a Ctrl-C'd `opencode run` stayed "busy and silent" for six
    /// minutes because a TUI was open on the same project. Its run is known: the first session
    /// created in its directory after it started.
    #[test]
    fn a_session_whose_run_ended_has_ended_whatever_else_works_in_its_directory() {
        let sess = |id: &str, parent: Option<&str>, created: i64, updated: i64| Session {
            id: id.into(),
            parent: parent.map(Into::into),
            directory: Some("/w/a".into()),
            created: Some(created),
            updated: Some(updated),
            ..Session::default()
        };
        let run = |pid: u32, started: i64, session: Option<&str>, ended: Option<i64>| RunProcess {
            pid,
            cwd: "/w/a".into(),
            started,
            session: session.map(Into::into),
            ended,
        };
        let mut all = vec![
            // the killed run's session, and its subagent
            sess("ses_run1", None, 1_000, 5_000),
            sess("ses_run1_sub", Some("ses_run1"), 2_000, 4_000),
            // the TUI's, created while the run went on
            sess("ses_tui", None, 3_000, 9_000),
            // a second run's, which goes on
            sess("ses_run2", None, 4_000, 9_500),
            // an old session a run continued with -s, and one a TUI took over after its run
            sess("ses_old", None, -50_000, 5_500),
            sess("ses_taken", None, 7_000, 20_000),
            // a server says this one is busy
            Session {
                status: Some("busy".into()),
                ..sess("ses_live", None, 7_100, 7_200)
            },
        ];
        let runs = [
            run(10, 900, None, Some(6_000)),
            run(11, 3_900, None, None),
            run(12, 5_000, Some("ses_old"), Some(6_000)),
            run(13, 6_900, None, Some(10_000)),
            run(14, 7_050, None, Some(10_000)),
        ];
        ended_with_their_run(&mut all, &runs);
        let ended: Vec<&str> = all
            .iter()
            .filter(|s| s.extra.get("process") == Some(&Value::from("ended")))
            .map(|s| s.id.as_str())
            .collect();
        assert_eq!(ended, ["ses_run1", "ses_run1_sub", "ses_old"]);
        // the second run ends too: its own session ends with it, not the TUI's
        let mut runs = runs.to_vec();
        runs[1].ended = Some(10_000);
        ended_with_their_run(&mut all, &runs);
        let ended: Vec<&str> = all
            .iter()
            .filter(|s| s.extra.get("process") == Some(&Value::from("ended")))
            .map(|s| s.id.as_str())
            .collect();
        assert_eq!(ended, ["ses_run1", "ses_run1_sub", "ses_run2", "ses_old"]);
    }

    #[test]
    fn a_database_session_no_process_works_in_has_ended() {
        let db = |id: &str, dir: &str| Session {
            id: id.into(),
            directory: Some(dir.into()),
            ..Session::default()
        };
        let proc_in = |pid: u32, cwd: Option<&str>| discover::Process {
            pid,
            uid: 0,
            cwd: cwd.map(Into::into),
            db: None,
            urls: vec![],
            ppid: 0,
            started: None,
            run: None,
            db_deleted: false,
        };
        let ended = |procs: &[discover::Process], looked: bool| -> Vec<String> {
            let mut all = vec![db("ses_tui", "/w/a/sub"), db("ses_killed", "/w/b")];
            ended_where_no_process(&mut all, procs, &HashSet::new(), looked);
            all.iter()
                .filter(|s| s.extra.get("process") == Some(&Value::from("ended")))
                .map(|s| s.id.clone())
                .collect()
        };
        assert_eq!(ended(&[proc_in(1, Some("/w/a"))], true), ["ses_killed"]);
        assert_eq!(ended(&[], true), ["ses_tui", "ses_killed"]);
        // not looked for, or a process whose directory cannot be read: nothing is said
        assert!(ended(&[], false).is_empty());
        assert!(ended(&[proc_in(1, Some("/w/a")), proc_in(2, None)], true).is_empty());
    }

    /// A server's popup said "Esc twice in its TUI, Ctrl-C twice for `opencode run`", neither
    /// of which reaches it: what runs each session is told, for the words to say.
    #[test]
    fn what_runs_a_session_is_a_server_a_run_or_a_tui() {
        let sess =
            |id: &str, dir: &str, source: &str, status: Option<&str>, created: i64| Session {
                id: id.into(),
                directory: Some(dir.into()),
                source: Some(source.into()),
                status: status.map(String::from),
                created: Some(created),
                ..Session::default()
            };
        let db = "/h/.local/share/opencode/opencode.db";
        let mut all = vec![
            sess(
                "ses_served",
                "/w/s",
                "http://127.0.0.1:4096",
                Some("busy"),
                10,
            ),
            sess("ses_run", "/w/r", db, None, 1_005),
            sess("ses_named", "/w/r", db, None, 5),
            sess("ses_tui", "/w/t/sub", db, None, 10),
            sess("ses_nobody", "/w/x", db, None, 10),
            sess("ses_gone", "/w/t", db, None, 10),
        ];
        all[5].extra.insert("process".into(), Value::from("ended"));
        let mut sub = sess("ses_sub", "/w/r", db, None, 1_010);
        sub.parent = Some("ses_run".into());
        all.push(sub);
        let proc_ =
            |pid: u32, cwd: &str, run: Option<Option<&str>>, urls: bool| discover::Process {
                pid,
                uid: 0,
                cwd: Some(cwd.into()),
                db: None,
                urls: if urls {
                    vec![(4096, "http://127.0.0.1:4096".into())]
                } else {
                    vec![]
                },
                ppid: 0,
                started: Some(1_000),
                run: run.map(|r| r.map(String::from)),
                db_deleted: false,
            };
        let procs = [
            proc_(1, "/w/s", None, true),
            proc_(2, "/w/r", Some(None), false),
            proc_(3, "/w/r", Some(Some("ses_named")), false),
            proc_(4, "/w/t", None, false),
        ];
        runs_in(&mut all, &procs);
        let got: Vec<(&str, Option<&str>)> = all
            .iter()
            .map(|s| {
                (
                    s.id.as_str(),
                    s.extra.get("process").and_then(|p| p.as_str()),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("ses_served", Some("server")),
                ("ses_run", Some("run")),
                ("ses_named", Some("run")),
                ("ses_tui", Some("tui")),
                ("ses_nobody", None),
                ("ses_gone", Some("ended")),
                ("ses_sub", Some("run")),
            ]
        );
    }
}
