//! Stopping a session's current run, the way the operator would by pressing Esc in the TUI
//! (`wd-store stop SESSION`; later the stop policy). The session stays resumable.
//!
//! This module is the contract every agent's way of stopping meets, and [`stop`] hands a
//! session to the wing of the agent whose it is: opencode's ([`opencode`]: its server's abort,
//! or the companion plugin's request files), Claude Code's ([`claude_code`], through its
//! PreToolUse hook; the hook itself and its entry in Claude Code's settings:
//! [`crate::claude_hook`]) and Codex's ([`codex`]: SIGINT to a `codex exec`, or
//! `turn/interrupt` through its app-server daemon).
//!
//! Once per action id (`stop:<session>:<episode>`, the episode being the open loop episode of
//! the watchdog's store, else the session's current turn): the `stops` table records the
//! request before anything is sent, so a second request for the same episode does nothing and
//! says so. One stop of a session at a time: the request is recorded in the write transaction
//! that checks no other is under way (`claim`), and a second stop meanwhile waits for the
//! first and reports its outcome (`wait_other`). How to resume a stopped session is said here
//! for every agent ([`resume_of`]).
//!
//! The stop policy (`[stop]`, `alert::policy`) calls [`stop`] once the episode's transition is
//! committed, with `Request { session: <flagged session>, episode: Some("episode:<id>"),
//! reason: "escalated" | "cost_cap" | "calls_cap", wait: [stop] wait_secs }`. A `stopped` row
//! of an open episode, the policy's or an operator's, is the episode's stop event: the
//! lifecycle resolves it (reason `stopped`, saying who, how and how to resume). A refusal is
//! recorded by the policy as a `failed` row of the episode, which then stays an alert.

use crate::config::Config;
use crate::store::Store;
use anyhow::{bail, Context, Result};
use rusqlite::{params, OptionalExtension};
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub mod claude_code;
pub mod codex;
pub mod opencode;
/// What asks for a stop: the session, the episode it is for (the policy knows it; `None` lets
/// [`stop`] find the session's open loop episode, else its current turn) and why.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub session: &'a str,
    pub episode: Option<&'a str>,
    /// `operator` for `wd-store stop`, `popup` for the popup's stop action; the policy's trigger
    /// (`escalated`, `cost_cap`, ...).
    pub reason: &'a str,
    /// How long to wait for the plugin's acknowledgement, then for the session to go idle.
    pub wait: Duration,
}

/// How a stop reaches the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    Http,
    Plugin,
    /// SIGINT to a `codex exec` ([`codex`]).
    Sigint,
    /// `turn/interrupt` through Codex's app-server daemon ([`codex`]).
    #[serde(rename = "app-server")]
    AppServer,
}

impl Via {
    fn as_str(self) -> &'static str {
        match self {
            Via::Http => "http",
            Via::Plugin => "plugin",
            Via::Sigint => "sigint",
            Via::AppServer => "app-server",
        }
    }
}

/// An earlier request under the same action id.
#[derive(Debug, Clone, PartialEq)]
pub struct Previous {
    pub status: String,
    pub t: i64,
    pub via: Option<String>,
    pub stopped: Option<i64>,
    pub action_id: String,
}

/// The largest acknowledgement read (the plugin writes a few hundred bytes).
const ACK_MAX_BYTES: u64 = 64 << 10;

/// What a carried-out (or already recorded) stop reports.
#[derive(Debug, Clone, Serialize)]
pub struct StopOutcome {
    pub kind: &'static str,
    pub session: String,
    pub action_id: String,
    pub episode: String,
    /// `stopped`, `already` (an earlier request under this action id) or `failed`.
    pub status: String,
    pub via: Option<String>,
    /// The server it was stopped through (`http`).
    pub server: Option<String>,
    /// The opencode process whose plugin stopped it (`plugin`).
    pub pid: Option<u32>,
    /// The tool call the plugin refused, when one came before its timer saw the request.
    pub refused_call: Option<String>,
    pub requested: i64,
    pub stopped: Option<i64>,
    /// Tool calls that started between the request and the stop.
    pub calls_after_request: Option<i64>,
    pub resume: String,
    /// What the agent's user sees of the stop, where it differs by agent (Codex's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_sees: Option<String>,
    #[serde(skip)]
    pub message: String,
}

impl StopOutcome {
    /// A stop of `session` just requested at `requested` (ms) under `action_id`, before any agent
    /// was asked: how it went is filled in as it goes.
    pub fn requested(
        session: &str,
        action_id: String,
        episode: String,
        requested: i64,
        resume: String,
    ) -> StopOutcome {
        StopOutcome {
            kind: "stop",
            session: session.to_string(),
            action_id,
            episode,
            status: "requested".into(),
            via: None,
            server: None,
            pid: None,
            refused_call: None,
            requested,
            stopped: None,
            calls_after_request: None,
            resume,
            user_sees: None,
            message: String::new(),
        }
    }
}

/// The directory of stop requests and acknowledgements.
pub fn requests_dir() -> PathBuf {
    crate::paths::state_dir().join("stop")
}

/// The commands that resume a stopped session, run in its project: an opencode session's
/// ([`opencode::resume_commands`]: its TUI, or one more run with a message), a Claude Code
/// session's ([`claude_code::resume_commands`]).
pub fn resume_commands(session: &str) -> [String; 2] {
    if is_claude(session) {
        return claude_code::resume_commands(session);
    }
    opencode::resume_commands(session)
}

/// How to resume a stopped session, in words (each command between backquotes).
pub fn resume_hint(session: &str) -> String {
    if is_claude(session) {
        return claude_code::resume_hint(session);
    }
    opencode::resume_hint(session)
}

/// How to resume a session stopped the way `via` says: in words (each command between
/// backquotes), and the one command to run.
pub fn resume_of(session: &str, via: Option<&str>) -> (String, String) {
    match via {
        Some("sigint" | "app-server") => codex::resume(session, via),
        _ => {
            let [_, run] = resume_commands(session);
            (resume_hint(session), run)
        }
    }
}

fn action_id(session: &str, episode: &str) -> String {
    format!("stop:{session}:{episode}")
}

/// The open loop episode the session belongs to (as root or as a flagged member).
fn open_episode(store: &Store, session: &str) -> Result<Option<i64>> {
    Ok(store
        .conn
        .query_row(
            "SELECT e.id FROM episodes e WHERE e.state = 'open' AND e.kind = 'loop'
               AND (e.root = ?1 OR EXISTS (SELECT 1 FROM episode_sessions s
                                           WHERE s.episode = e.id AND s.session = ?1))
             ORDER BY e.id DESC LIMIT 1",
            [session],
            |r| r.get(0),
        )
        .optional()?)
}

/// An earlier stop under this action id, or of the same turn of the session (its episode
/// may have closed since: the stopped loop resolves at the next tick), a carried-out one first.
fn previous(store: &Store, action: &str, session: &str, turn: &str) -> Result<Option<Previous>> {
    Ok(store
        .conn
        .query_row(
            "SELECT status, t, via, stopped, action_id FROM stops
              WHERE action_id = ?1 OR (session = ?2 AND turn = ?3 AND status <> 'failed')
              ORDER BY status = 'failed', t DESC LIMIT 1",
            params![action, session, turn],
            |r| {
                Ok(Previous {
                    status: r.get(0)?,
                    t: r.get(1)?,
                    via: r.get(2)?,
                    stopped: r.get(3)?,
                    action_id: r.get(4)?,
                })
            },
        )
        .optional()?)
}

fn record(
    store: &mut Store,
    o: &StopOutcome,
    turn: &str,
    reason: &str,
    detail: Option<&str>,
) -> Result<()> {
    let tx = store.write()?;
    put(&tx, o, turn, reason, detail)?;
    tx.commit()?;
    Ok(())
}

fn put(
    tx: &rusqlite::Connection,
    o: &StopOutcome,
    turn: &str,
    reason: &str,
    detail: Option<&str>,
) -> Result<()> {
    tx.execute(
        "INSERT INTO stops (action_id, session, episode, reason, t, status, via, pid, stopped,
                            calls_after_request, detail, turn, resume)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
         ON CONFLICT (action_id) DO UPDATE SET t = ?5, status = ?6, via = ?7, pid = ?8,
             stopped = ?9, calls_after_request = ?10, detail = ?11, resume = ?13",
        params![
            o.action_id,
            o.session,
            o.episode,
            reason,
            o.requested,
            o.status,
            o.via,
            o.pid,
            o.stopped,
            o.calls_after_request,
            detail,
            turn,
            o.resume
        ],
    )?;
    Ok(())
}

/// A `requested` stop older than this was left by a stop that died on the way (a stop waits at
/// most `[stop] wait_secs`, 60 s, or `wd-store stop --wait`): it neither stands nor is waited for.
const STALE_MS: i64 = 10 * 60 * 1000;

/// A stop of the session under way elsewhere: its `requested` row, younger than [`STALE_MS`].
fn under_way(conn: &rusqlite::Connection, session: &str, now: i64) -> Result<Option<Previous>> {
    Ok(conn
        .query_row(
            "SELECT status, t, via, stopped, action_id FROM stops
              WHERE session = ?1 AND status = 'requested' AND t > ?2 ORDER BY t LIMIT 1",
            params![session, now - STALE_MS],
            |r| {
                Ok(Previous {
                    status: r.get(0)?,
                    t: r.get(1)?,
                    via: r.get(2)?,
                    stopped: r.get(3)?,
                    action_id: r.get(4)?,
                })
            },
        )
        .optional()?)
}

/// Records the request, in one write transaction with the check that no other stop of the
/// session is under way: two stops at once (the policy's and the operator's, a popup's click)
/// each wrote their request for the plugin over the other's, and the one whose request was lost
/// waited its whole wait and recorded `failed` over the other's `stopped`. The stop under way,
/// if there is one, comes back instead.
fn claim(store: &mut Store, o: &StopOutcome, turn: &str, reason: &str) -> Result<Option<Previous>> {
    let tx = store.write()?;
    if let Some(p) = under_way(&tx, &o.session, crate::cli::now_ms())? {
        return Ok(Some(p));
    }
    put(&tx, o, turn, reason, None)?;
    tx.commit()?;
    Ok(None)
}

/// Waits, within `wait` and a few seconds more, for the stop under way (`p`) to end, and
/// reports its outcome as this one's (`already`); an error if it failed or did not end, which
/// says how to stop the session by hand (`by_hand`: its agent's keys).
fn wait_other(
    store: &Store,
    o: StopOutcome,
    p: &Previous,
    wait: Duration,
    by_hand: &str,
) -> Result<StopOutcome> {
    let row = |conn: &rusqlite::Connection| {
        conn.query_row(
            "SELECT status, t, via, stopped, action_id, detail FROM stops WHERE action_id = ?1",
            [&p.action_id],
            |r| {
                Ok((
                    Previous {
                        status: r.get(0)?,
                        t: r.get(1)?,
                        via: r.get(2)?,
                        stopped: r.get(3)?,
                        action_id: r.get(4)?,
                    },
                    r.get::<_, Option<String>>(5)?,
                ))
            },
        )
    };
    let ended = wait_for(wait + Duration::from_secs(5), || {
        row(&store.conn)
            .ok()
            .filter(|(q, _)| q.status != "requested")
    });
    let session = &o.session;
    match ended {
        Some((q, _)) if q.status == "stopped" => Ok(already(o, &q)),
        Some((_, detail)) => bail!(
            "stop: session {session}: a stop of it at the same time ({}) failed: {}; {by_hand}",
            p.action_id,
            detail.as_deref().unwrap_or("no reason recorded")
        ),
        None => bail!(
            "stop: session {session}: a stop of it requested at {} ({}) is still under way; its outcome will be recorded (`wd-store alerts`), a new `wd-store stop` says it",
            crate::cli::iso_ms(p.t),
            p.action_id
        ),
    }
}

/// Writes `file` whole or not at all (a temp file beside it, renamed).
fn write_atomic(file: &Path, v: &Value) -> Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    // the state directory and the stop directory, private: the plugin ignores any other
    for d in dir.parent().into_iter().chain([dir]) {
        crate::paths::private_dir(d).with_context(|| format!("cannot use {}", d.display()))?;
    }
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    use std::io::Write;
    writeln!(tmp, "{v}")?;
    tmp.persist(file)
        .with_context(|| format!("cannot write {}", file.display()))?;
    Ok(())
}

/// Waits until `done` says yes or `wait` passes, checking every 100 ms.
fn wait_for<T>(wait: Duration, mut done: impl FnMut() -> Option<T>) -> Option<T> {
    let t0 = Instant::now();
    loop {
        if let Some(v) = done() {
            return Some(v);
        }
        if t0.elapsed() >= wait {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How long the session's record must go on showing its run over, with no call started, before
/// the stop is believed.
const SETTLE: Duration = Duration::from_millis(500);

/// Stops the session's current run, once per action id, and records it, through the wing of the
/// agent whose session it is ([`codex`], [`claude_code`], else [`opencode`]). Refusals (not
/// found, idle, no way to reach it) are errors that say what to do instead and record nothing;
/// an earlier request under the same action id is an `already` outcome that does nothing.
pub fn stop(store: &mut Store, cfg: &Config, req: &Request) -> Result<StopOutcome> {
    let session = req.session;
    if !crate::record::is_session_id(session) && crate::record::is_agent_session_id(session) {
        // another agent's session: the wing whose files hold it stops it
        if let Some(thread) = codex::find(session) {
            return codex::stop(store, req, &thread);
        }
    }
    if is_claude(session) {
        return claude_code::stop(store, req);
    }
    opencode::stop(store, cfg, req)
}

/// Whether `session` names a Claude Code session (not an opencode one): stopped through its hook.
fn is_claude(session: &str) -> bool {
    !crate::record::is_session_id(session) && claude_code::is_claude_id(session)
}

/// The `already` outcome: the earlier request's, and nothing done.
fn already(mut o: StopOutcome, p: &Previous) -> StopOutcome {
    o.status = "already".into();
    o.action_id = p.action_id.clone();
    o.requested = p.t;
    o.via = p.via.clone();
    let when = match p.stopped {
        Some(t) => format!("carried out at {}", crate::cli::iso_ms(t)),
        None => format!("requested at {}", crate::cli::iso_ms(p.t)),
    };
    o.stopped = p.stopped;
    o.message = format!(
        "session {}: the stop of this run was already {when} (action {}): nothing done; resume with {}",
        o.session, p.action_id, o.resume
    );
    o
}

/// Who stopped the session, as the plugin's toast in its TUI says it (`why` of the request).
pub fn toast_words(reason: &str) -> &'static str {
    match reason {
        "operator" => "The operator stopped this session (wd-store stop)",
        "popup" => "The operator stopped this session (the popup's stop action)",
        "escalated" => "The watchdog stopped this session's loop at its escalation ([stop] policy)",
        "calls_cap" => "The watchdog stopped this session's loop: its calls since the alert reached [stop] after_calls",
        "cost_cap" => "The watchdog stopped this session's loop: its cost since the alert reached [stop] after_cost",
        _ => "The watchdog stopped this session's loop",
    }
}

/// `wd-store stop SESSION`: the operator's stop; the outcome as one JSONL record, the story
/// on stderr.
pub fn command(
    store: &mut Store,
    cfg: &Config,
    session: &str,
    wait: &str,
    by: &str,
    out: &mut crate::cli::Out,
) -> Result<crate::cli::Exit> {
    let wait = crate::cli::parse_duration_ms(wait)?;
    let o = stop(
        store,
        cfg,
        &Request {
            session,
            episode: None,
            reason: by,
            wait: Duration::from_millis(wait.max(0) as u64),
        },
    )?;
    eprintln!("wd-store: {}", o.message);
    out.line(&serde_json::to_string(&o)?)?;
    Ok(crate::cli::Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(session: &str, action: &str, t: i64) -> StopOutcome {
        StopOutcome {
            kind: "stop",
            session: session.into(),
            action_id: action.into(),
            episode: "turn:msg_1".into(),
            status: "requested".into(),
            via: Some("plugin".into()),
            server: None,
            pid: None,
            refused_call: None,
            requested: t,
            stopped: None,
            calls_after_request: None,
            resume: String::new(),
            user_sees: None,
            message: String::new(),
        }
    }

    /// A stop that waited for another of the same session, which failed, says how to stop
    /// that session by hand in its own agent's keys (it said opencode's for every agent).
    #[test]
    fn a_second_stop_after_a_failed_first_says_its_agents_keys() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("w.db")).unwrap();
        let now = crate::cli::now_ms();
        let first = outcome("019b-thread", "stop:019b-thread:episode:1", now);
        assert_eq!(claim(&mut store, &first, "t1", "operator").unwrap(), None);
        let second = outcome("019b-thread", "stop:019b-thread:episode:1", now + 10);
        let under = claim(&mut store, &second, "t1", "operator")
            .unwrap()
            .expect("the first is under way");
        let failed = StopOutcome {
            status: "failed".into(),
            ..first.clone()
        };
        record(&mut store, &failed, "t1", "operator", Some("no process")).unwrap();
        let e = wait_other(
            &store,
            second,
            &under,
            Duration::from_secs(1),
            codex::BY_HAND,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "stop: session 019b-thread: a stop of it at the same time (stop:019b-thread:episode:1) failed: no process; Ctrl-C in the terminal of its `codex exec`, Esc in its TUI"
        );
    }

    /// Two stops of one session at once: the second finds the first under way and takes its
    /// outcome; the record stays the first's. A `requested` row left long ago stands for
    /// nothing.
    #[test]
    fn a_second_stop_meanwhile_waits_for_the_first_and_reports_its_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("w.db")).unwrap();
        let now = crate::cli::now_ms();
        let first = outcome("ses_a", "stop:ses_a:episode:1", now);
        assert_eq!(
            claim(&mut store, &first, "msg_1", "escalated").unwrap(),
            None
        );
        // the operator's, under another action id, while the policy's runs
        let second = outcome("ses_a", "stop:ses_a:turn:msg_1", now + 5);
        let under = claim(&mut store, &second, "msg_1", "operator")
            .unwrap()
            .expect("the first is under way");
        assert_eq!(under.action_id, "stop:ses_a:episode:1");
        let stopped = StopOutcome {
            status: "stopped".into(),
            stopped: Some(now + 900),
            ..first.clone()
        };
        record(&mut store, &stopped, "msg_1", "escalated", None).unwrap();
        let o = wait_other(&store, second, &under, Duration::from_secs(1), "keys").unwrap();
        assert_eq!(o.status, "already");
        assert_eq!(o.stopped, Some(now + 900));
        assert_eq!(o.action_id, "stop:ses_a:episode:1");
        let rows: i64 = store
            .conn
            .query_row("SELECT count(*) FROM stops", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1);
        // another session is not held by it; a request left 11 minutes ago holds nothing
        let stale = outcome("ses_b", "stop:ses_b:turn:msg_1", now - 11 * 60 * 1000);
        assert_eq!(
            claim(&mut store, &stale, "msg_1", "operator").unwrap(),
            None
        );
        let fresh = outcome("ses_b", "stop:ses_b:turn:msg_2", now);
        assert_eq!(
            claim(&mut store, &fresh, "msg_2", "operator").unwrap(),
            None
        );
    }
}
