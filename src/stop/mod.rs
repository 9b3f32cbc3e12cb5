//! Stopping a session's current run, the way the operator would by pressing Esc in the TUI
//! (`wd-store stop SESSION`; later the stop policy). The session stays resumable.
//!
//! Claude Code's sessions are stopped through its PreToolUse hook ([`claude_code`]; the hook
//! itself and its entry in Claude Code's settings: [`crate::claude_hook`]), under the
//! same contract; opencode's in two ways, as opencode 1.18 allows:
//! * a server (`opencode serve`/`web`) whose `GET /session/status?directory=` lists the session
//!   as running: `POST /session/{id}/abort?directory=`, with the HTTP client's usual bounds and
//!   credentials (`OPENCODE_SERVER_PASSWORD`);
//! * a TUI or `opencode run` session (no port): a request file for the companion plugin
//!   (`deploy/oc-watchdog-stop.js`) in `$XDG_STATE_HOME/oc-watchdog/stop/<session>.json`; the
//!   plugin aborts the session inside its own process and writes `<session>.ack.json`, which this
//!   waits for, a bounded time.
//!
//! Once per action id (`stop:<session>:<episode>`, the episode being the open loop episode of
//! the watchdog's store, else the session's current turn): the `stops` table records the
//! request before anything is sent, so a second request for the same episode does nothing and
//! says so. One stop of a session at a time: the request is recorded in the write transaction
//! that checks no other is under way, and a second stop meanwhile waits for the first and
//! reports its outcome. A stop is claimed only when opencode's database shows the session's run
//! over (no step in flight, no call started for a moment), whatever the way and whatever a
//! server says. [`decide`] is the pure rule over what was found ([`Facts`]); [`stop`] gathers the
//! facts, applies the plan and records it.
//!
//! The stop policy (`[stop]`, `alert::policy`) calls [`stop`] once the episode's transition is
//! committed, with `Request { session: <flagged session>, episode: Some("episode:<id>"),
//! reason: "escalated" | "cost_cap" | "calls_cap", wait: [stop] wait_secs }`. A `stopped` row
//! of an open episode, the policy's or an operator's, is the episode's stop event: the
//! lifecycle resolves it (reason `stopped`, saying who, how and how to resume). A refusal is
//! recorded by the policy as a `failed` row of the episode, which then stays an alert.

use crate::config::Config;
use crate::sources::opencode::{self, db::Db, Client, Source};
use crate::store::Store;
use anyhow::{anyhow, bail, Context, Result};
use rusqlite::{params, OptionalExtension};
use serde::Serialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub mod claude_code;
pub mod codex;

/// The plugin's file name, as `deploy/install --with-stop-plugin` installs it.
pub const PLUGIN_FILE: &str = "oc-watchdog-stop.js";

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

/// What was found about a session before deciding.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// The session is in opencode's database.
    pub found: bool,
    /// Its last model step or a tool call is still going, and an opencode process writing
    /// that database is alive.
    pub running: bool,
    /// Servers whose session status lists it as busy or retrying.
    pub servers: Vec<String>,
    /// Live opencode processes (of that database) that loaded the plugin.
    pub plugin_pids: Vec<u32>,
    /// The plugin file is in opencode's plugin directory.
    pub plugin_installed: bool,
    pub previous: Option<Previous>,
}

/// What [`stop`] is to do about a session.
#[derive(Debug, Clone, PartialEq)]
pub enum StopPlan {
    /// Nothing: the same action was requested before.
    Already(Previous),
    /// Nothing: why not, and what the operator can do instead.
    Refuse(String),
    Http(String),
    Plugin(Vec<u32>),
}

/// The largest acknowledgement read (the plugin writes a few hundred bytes).
const ACK_MAX_BYTES: u64 = 64 << 10;

const BY_HAND: &str = "press Esc twice in its TUI, or Ctrl-C in the terminal of its `opencode run`";

/// The rule: once per action id; a server that runs the session first (it says so itself);
/// then the plugin in a process that runs it; else a refusal saying what to do instead.
pub fn decide(session: &str, f: &Facts) -> StopPlan {
    if let Some(p) = &f.previous {
        if p.status != "failed" {
            return StopPlan::Already(p.clone());
        }
    }
    if !f.found {
        return StopPlan::Refuse(format!(
            "no session {session} in opencode's database: check the id (`oc-sessions --since 1h` lists them)"
        ));
    }
    if let Some(url) = f.servers.first() {
        return StopPlan::Http(url.clone());
    }
    if !f.running {
        return StopPlan::Refuse(format!(
            "session {session} is idle already: its last run has ended, nothing to stop"
        ));
    }
    if !f.plugin_pids.is_empty() {
        return StopPlan::Plugin(f.plugin_pids.clone());
    }
    if f.plugin_installed {
        StopPlan::Refuse(format!(
            "session {session} runs in a TUI or `opencode run` that has not loaded the stop plugin (started before it was installed?) and no server lists it: {BY_HAND}; opencode processes started from now on load the plugin"
        ))
    } else {
        StopPlan::Refuse(format!(
            "session {session} runs in a TUI or `opencode run`, which listen on no port, and the stop plugin is not installed: {BY_HAND}, or install the plugin (deploy/install --with-stop-plugin) for the next ones"
        ))
    }
}

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

/// Where opencode would load the plugin from (its global config directory).
pub fn plugin_paths() -> Vec<PathBuf> {
    let conf = crate::paths::opencode_config_dir();
    ["plugin", "plugins"]
        .iter()
        .map(|d| conf.join(d).join(PLUGIN_FILE))
        .collect()
}

/// The commands that resume a stopped session with opencode 1.18.33, run in its project: its
/// TUI, or one more run with a message (`opencode run -s SESSION` alone answers "Error: You must
/// provide a message or a command"). A Claude Code session's: [`claude_code::resume_commands`].
pub fn resume_commands(session: &str) -> [String; 2] {
    if is_claude(session) {
        return claude_code::resume_commands(session);
    }
    [
        format!("opencode -s {}", crate::cli::shell_word(session)),
        format!(
            "opencode run -s {} \"continue\"",
            crate::cli::shell_word(session)
        ),
    ]
}

/// How to resume a stopped session, in words (each command between backquotes).
pub fn resume_hint(session: &str) -> String {
    if is_claude(session) {
        return claude_code::resume_hint(session);
    }
    let [tui, run] = resume_commands(session);
    format!("`{tui}` (its TUI) or `{run}`")
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

/// Is the session's run still going by its messages: the last assistant message neither
/// completed nor failed, or a tool call pending or running.
fn in_flight(messages: &Value) -> bool {
    let a = opencode::convert::activity_of("", messages);
    a.in_flight || !a.running.is_empty()
}

/// The id of the session's last user message: its current turn.
fn current_turn(messages: &Value) -> Option<String> {
    messages
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["info"]["role"] == "user")
        .and_then(|m| m["info"]["id"].as_str().map(String::from))
}

/// Tool calls of the session that started at or after `from` (and before `to`, if given).
fn calls_between(messages: &Value, from: i64, to: Option<i64>) -> i64 {
    let mut n = 0;
    for m in messages.as_array().into_iter().flatten() {
        for p in m["parts"].as_array().into_iter().flatten() {
            if p["type"] != "tool" {
                continue;
            }
            if let Some(t) = p["state"]["time"]["start"].as_i64() {
                if t >= from && to.map_or(true, |to| t < to) {
                    n += 1;
                }
            }
        }
    }
    n
}

fn query_dir(dir: &str) -> String {
    url::form_urlencoded::byte_serialize(dir.as_bytes()).collect()
}

/// The live pids that registered the plugin (`stop/loaded/<pid>.json`), among `procs`.
fn plugin_pids(dir: &Path, procs: &[opencode::discover::Process]) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir(dir.join("loaded"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            name.to_str()?.strip_suffix(".json")?.parse().ok()
        })
        .filter(|pid| {
            // a process that has exited leaves its marker behind: tidy it away
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_file(dir.join("loaded").join(format!("{pid}.json")));
            }
            procs.iter().any(|p| p.pid == *pid)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// How long a stop asks the servers whether they run the session, all at once: one hung server
/// took each stop its whole deadline (10.6 s instead of 0.26), one stop after another inside
/// wd-alert. A server that answers no health check within this is not the one running a loop.
const ASK_SERVERS: Duration = Duration::from_secs(2);

/// Servers (among those running on this database, and those configured) whose status lists
/// the session, asked at once, each within [`ASK_SERVERS`].
fn servers_running(
    procs: &[opencode::discover::Process],
    cfg: &Config,
    session: &str,
    dir: &str,
) -> Vec<String> {
    let found = opencode::discover::listeners(procs);
    let planned = opencode::plan_servers(&[], &cfg.opencode.servers, &found);
    let mut limits = opencode::Limits::of(&cfg.opencode);
    limits.deadline = limits.deadline.min(ASK_SERVERS);
    let path = format!("/session/status?directory={}", query_dir(dir));
    std::thread::scope(|s| {
        let asks: Vec<_> = planned
            .iter()
            .map(|p| {
                let path = &path;
                s.spawn(move || {
                    // the probe's client, and its deadline, ask for the status too
                    let live = opencode::probe(p, limits).ok()??;
                    let st = live.client.get(path).ok()?;
                    st.get(session).is_some().then(|| p.url.clone())
                })
            })
            .collect();
        asks.into_iter()
            .filter_map(|a| a.join().ok().flatten())
            .collect()
    })
}

fn server_lists(cfg: &Config, url: &str, session: &str, dir: &str) -> bool {
    Client::with_limits(url, opencode::Limits::of(&cfg.opencode))
        .get(&format!("/session/status?directory={}", query_dir(dir)))
        .is_ok_and(|v| v.get(session).is_some())
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
/// reports its outcome as this one's (`already`); an error if it failed or did not end.
fn wait_other(store: &Store, o: StopOutcome, p: &Previous, wait: Duration) -> Result<StopOutcome> {
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
            "stop: session {session}: a stop of it at the same time ({}) failed: {}; {BY_HAND}",
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

/// Waits (at least 2 s, else what is left of the stop's wait) until opencode's database shows the
/// session's run over, its turn ended (no step in flight, no tool call pending or running), and
/// still over, with no call started, a moment later. What it saw instead is the error: how many
/// calls started after `requested`, the stop's request.
fn ended(db: &Db, session: &str, requested: i64, wait: Duration) -> Result<()> {
    let over = |since: i64| {
        let m = db.messages(session).ok()?;
        (!in_flight(&m) && calls_between(&m, since, None) == 0).then_some(())
    };
    let settled = wait_for(wait.max(Duration::from_secs(2)), || {
        let seen = crate::cli::now_ms();
        over(seen)?;
        std::thread::sleep(SETTLE);
        over(seen)
    });
    if settled.is_some() {
        return Ok(());
    }
    let m = db.messages(session).unwrap_or(Value::Null);
    Err(anyhow!(
        "opencode's database shows its run going on: {} call(s) started after the request, {}",
        calls_between(&m, requested, None),
        if in_flight(&m) {
            "a step still in flight"
        } else {
            "none in flight at the last look"
        }
    ))
}

/// Stops the session's current run, once per action id, and records it. Refusals (not found,
/// idle, no way to reach it) are errors that say what to do instead and record nothing; an
/// earlier request under the same action id is an `already` outcome that does nothing.
pub fn stop(store: &mut Store, cfg: &Config, req: &Request) -> Result<StopOutcome> {
    // the calls made while this looks the session up count as calls after the request
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
    let asked = crate::cli::now_ms();
    check_id(session)?;
    let (db_path, _) = crate::paths::opencode_db(None, cfg.opencode.db.as_deref());
    let db = Db::open(&db_path)?;
    let found = look_up(store, cfg, req, &db, &db_path)?;
    let mut o = StopOutcome::requested(
        session,
        found.action.clone(),
        found.episode.clone(),
        asked,
        resume_hint(session),
    );
    let via = match decide(session, &found.facts) {
        StopPlan::Already(p) if p.status == "requested" => {
            return wait_other(store, o, &p, req.wait)
        }
        StopPlan::Already(p) => return Ok(already(o, &p)),
        StopPlan::Refuse(why) => bail!("stop: {why}"),
        StopPlan::Http(url) => {
            o.server = Some(url.clone());
            (Via::Http, url)
        }
        StopPlan::Plugin(_) => (Via::Plugin, String::new()),
    };
    o.via = Some(via.0.as_str().into());
    if let Some(p) = claim(store, &o, &found.turn, req.reason)? {
        return wait_other(store, o, &p, req.wait);
    }
    let carried = carry_out(cfg, req, &db, &found, &o, via);
    let messages = db.messages(session).unwrap_or(Value::Null);
    finish(store, req, o, &found.turn, carried, &messages)
}

/// Whether `session` names a Claude Code session (not an opencode one): stopped through its hook.
fn is_claude(session: &str) -> bool {
    !crate::record::is_session_id(session) && claude_code::is_claude_id(session)
}

/// Refuses anything but an opencode session id ([`crate::record::is_session_id`]).
fn check_id(session: &str) -> Result<()> {
    if !crate::record::is_session_id(session) {
        bail!("stop: {session:?} is not an opencode session id (ses_...)");
    }
    Ok(())
}

/// What [`stop`] found about a session before deciding.
struct StopTarget {
    /// The session's working directory (opencode's server asks for it).
    directory: String,
    turn: String,
    /// What the stop is of: `episode:ID`, `turn:ID`, or the one asked for.
    episode: String,
    action: String,
    /// The directory of stop requests and acknowledgements.
    dir: PathBuf,
    facts: Facts,
}

/// Looks the session up: in opencode's database, in the store (its episode, an earlier request)
/// and, unless that request stands, among the servers and processes that could stop it.
fn look_up(
    store: &Store,
    cfg: &Config,
    req: &Request,
    db: &Db,
    db_path: &Path,
) -> Result<StopTarget> {
    let session = req.session;
    let info = db.session(session)?;
    let messages = match &info {
        Some(_) => db.messages(session)?,
        None => Value::Array(Vec::new()),
    };
    let directory = info
        .as_ref()
        .and_then(|s| s["directory"].as_str())
        .unwrap_or("")
        .to_string();
    let turn = current_turn(&messages).unwrap_or_else(|| "none".into());
    let episode = match req.episode {
        Some(e) => e.to_string(),
        None => match open_episode(store, session)? {
            Some(id) => format!("episode:{id}"),
            None => format!("turn:{turn}"),
        },
    };
    let action = action_id(session, &episode);
    let procs = opencode::discovered(
        crate::config::Discover::Database,
        db_path,
        &cfg.opencode.discover_uids,
    );
    let dir = requests_dir();
    let stale = crate::cli::now_ms() - STALE_MS;
    let mut facts = Facts {
        found: info.is_some(),
        previous: previous(store, &action, session, &turn)?
            .filter(|p| p.status != "requested" || p.t > stale),
        plugin_installed: plugin_paths().iter().any(|p| p.is_file()),
        ..Facts::default()
    };
    if facts.found
        && facts
            .previous
            .as_ref()
            .map_or(true, |p| p.status == "failed")
    {
        facts.servers = servers_running(&procs, cfg, session, &directory);
        // between two steps of a loop the last step has completed and the next has not begun:
        // look again for a moment before calling it idle
        facts.running = !procs.is_empty()
            && wait_for(Duration::from_millis(1500), || {
                let m = db.messages(session).ok()?;
                in_flight(&m).then_some(())
            })
            .is_some();
        facts.plugin_pids = plugin_pids(&dir, &procs);
    }
    Ok(StopTarget {
        directory,
        turn,
        episode,
        action,
        dir,
        facts,
    })
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

/// Carries the stop out the way decided, within the request's wait: the server's abort, then
/// until the server no longer lists the session as running and opencode's database shows its
/// run over; or the plugin's way. Gives the
/// plugin's process and the tool call it refused, if any.
fn carry_out(
    cfg: &Config,
    req: &Request,
    db: &Db,
    found: &StopTarget,
    o: &StopOutcome,
    via: (Via, String),
) -> Result<Option<(u32, Option<String>)>> {
    let session = req.session;
    let directory = &found.directory;
    let t0 = Instant::now();
    let left = || req.wait.saturating_sub(t0.elapsed());
    match via {
        (Via::Http, url) => {
            let path = format!(
                "/session/{session}/abort?directory={}",
                query_dir(directory)
            );
            Client::with_limits(&url, opencode::Limits::of(&cfg.opencode))
                .post(&path, &json!({}))?;
            wait_for(left(), || {
                (!server_lists(cfg, &url, session, directory)).then_some(())
            })
            .ok_or_else(|| {
                anyhow!(
                    "{url} still lists {session} as running {}s after the abort",
                    req.wait.as_secs()
                )
            })?;
            // a server's word is not the session's: one that lists a session another process
            // runs (an `opencode run`, a TUI) takes the abort and stops listing it while the
            // run goes on
            ended(db, session, o.requested, left()).map_err(|e| {
                anyhow!(
                    "{url} took the abort and no longer lists the session as running, but {e}: \
                     the server does not run it"
                )
            })?;
            Ok(None)
        }
        (Via::Plugin, _) => plugin_stop(&found.dir, o, left(), db, (session, req.reason)),
        (Via::Sigint | Via::AppServer, _) => bail!("opencode's sessions are not stopped that way"),
    }
}

/// Records how the stop ended: `stopped`, with the calls made after the request, or `failed`,
/// an error that says what to do by hand.
fn finish(
    store: &mut Store,
    req: &Request,
    mut o: StopOutcome,
    turn: &str,
    carried: Result<Option<(u32, Option<String>)>>,
    messages: &Value,
) -> Result<StopOutcome> {
    let session = req.session;
    match carried {
        Ok(by) => {
            let stopped = crate::cli::now_ms();
            o.status = "stopped".into();
            let pid = by.as_ref().map(|b| b.0);
            o.pid = pid;
            o.refused_call = by.and_then(|b| b.1);
            o.stopped = Some(stopped);
            o.calls_after_request = Some(calls_between(messages, o.requested, Some(stopped)));
            let how = match pid {
                Some(pid) => format!("through the plugin in opencode process {pid}"),
                None => format!("over HTTP at {}", o.server.as_deref().unwrap_or("")),
            };
            o.message = format!(
                "stopped session {session} {how}, {} call(s) after the request; resume with {}",
                o.calls_after_request.unwrap_or(0),
                o.resume
            );
            record(store, &o, turn, req.reason, None)?;
            Ok(o)
        }
        Err(e) => {
            o.status = "failed".into();
            o.calls_after_request = Some(calls_between(messages, o.requested, None));
            let detail = format!("{e:#}");
            record(store, &o, turn, req.reason, Some(&detail))?;
            bail!("stop: session {session}: {detail}; {BY_HAND} (the request is recorded as failed, a new `wd-store stop` may try again)")
        }
    }
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

/// The plugin's way: write the request, wait for its acknowledgement, then for the session to
/// go idle in the database. The request and acknowledgement files are removed either way.
fn plugin_stop(
    dir: &Path,
    o: &StopOutcome,
    wait: Duration,
    db: &Db,
    (session, reason): (&str, &str),
) -> Result<Option<(u32, Option<String>)>> {
    let file = dir.join(format!("{session}.json"));
    let ack_file = dir.join(format!("{session}.ack.json"));
    let _ = std::fs::remove_file(&ack_file);
    // from now, not from the request: the look-up before (the servers asked, the run watched)
    // took seconds of it, and with a hung server all of it, so the plugin found the request
    // expired when it came
    let expires = crate::cli::now_ms() + wait.as_millis() as i64;
    // one id per attempt: a plugin that failed an earlier attempt of this action acts again
    let id = format!("{}@{}", o.action_id, o.requested);
    write_atomic(
        &file,
        &json!({"id": id, "session": session, "episode": o.episode, "expires": expires,
                "why": toast_words(reason)}),
    )?;
    let t0 = Instant::now();
    let ack = wait_for(wait, || {
        let text = crate::paths::read_own_small(&ack_file, ACK_MAX_BYTES).ok()??;
        let v: Value = serde_json::from_str(&text).ok()?;
        (v["id"] == id.as_str()).then_some(v)
    });
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&ack_file);
    let Some(ack) = ack else {
        bail!(
            "no acknowledgement from the stop plugin within {}s",
            wait.as_secs()
        );
    };
    let pid = ack["pid"].as_u64().unwrap_or(0) as u32;
    let refused = ack["refused_call"].as_str().map(String::from);
    if ack["aborted"] != true {
        bail!(
            "the plugin in process {pid} could not abort it: {}",
            ack["error"].as_str().unwrap_or("no reason given")
        );
    }
    ended(db, session, o.requested, wait.saturating_sub(t0.elapsed()))
        .map_err(|e| anyhow!("the plugin in process {pid} aborted it, but {e}"))?;
    Ok(Some((pid, refused)))
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

    fn running() -> Facts {
        Facts {
            found: true,
            running: true,
            plugin_installed: true,
            plugin_pids: vec![42],
            ..Facts::default()
        }
    }

    /// The words for stopping by hand name what reaches the session: one Ctrl-C ends an
    /// `opencode run` (it said "twice"), and no key reaches a server's session.
    #[test]
    fn the_way_to_stop_by_hand_is_the_one_that_reaches_the_session() {
        use crate::record::{stop_by_hand as by_hand, RunsIn};
        assert_eq!(by_hand(Some(RunsIn::Tui)), Some("Esc twice in its TUI"));
        assert_eq!(
            by_hand(Some(RunsIn::Run)),
            Some("Ctrl-C in the terminal of its `opencode run`")
        );
        assert_eq!(by_hand(Some(RunsIn::Server)), None);
        assert_eq!(
            by_hand(None),
            Some("Esc twice in its TUI, Ctrl-C in the terminal of its `opencode run`")
        );
    }

    #[test]
    fn a_second_request_for_the_same_episode_does_nothing() {
        let prev = Previous {
            status: "stopped".into(),
            t: 1,
            via: Some("plugin".into()),
            stopped: Some(2),
            action_id: "stop:ses_a:episode:1".into(),
        };
        let f = Facts {
            previous: Some(prev.clone()),
            ..running()
        };
        assert_eq!(decide("ses_a", &f), StopPlan::Already(prev.clone()));
        // even once the session is gone or idle
        let f = Facts {
            previous: Some(prev.clone()),
            ..Facts::default()
        };
        assert_eq!(decide("ses_a", &f), StopPlan::Already(prev));
    }

    #[test]
    fn a_failed_request_may_be_tried_again() {
        let f = Facts {
            previous: Some(Previous {
                status: "failed".into(),
                t: 1,
                via: Some("plugin".into()),
                stopped: None,
                action_id: "stop:ses_a:episode:1".into(),
            }),
            ..running()
        };
        assert_eq!(decide("ses_a", &f), StopPlan::Plugin(vec![42]));
    }

    #[test]
    fn a_server_that_runs_it_comes_before_the_plugin() {
        let f = Facts {
            servers: vec!["http://127.0.0.1:4096".into()],
            ..running()
        };
        assert_eq!(
            decide("ses_a", &f),
            StopPlan::Http("http://127.0.0.1:4096".into())
        );
    }

    #[test]
    fn refusals_say_why_and_what_to_do_instead() {
        let refusal = |f: &Facts| match decide("ses_a", f) {
            StopPlan::Refuse(why) => why,
            other => panic!("{other:?}"),
        };
        assert!(refusal(&Facts::default()).starts_with("no session ses_a in opencode's database"));
        let idle = Facts {
            running: false,
            ..running()
        };
        assert_eq!(
            refusal(&idle),
            "session ses_a is idle already: its last run has ended, nothing to stop"
        );
        let not_installed = Facts {
            plugin_installed: false,
            plugin_pids: vec![],
            ..running()
        };
        let why = refusal(&not_installed);
        assert!(why.contains("the stop plugin is not installed: press Esc twice in its TUI, or Ctrl-C in the terminal of its `opencode run`"), "{why}");
        assert!(why.contains("deploy/install --with-stop-plugin"), "{why}");
        let not_loaded = Facts {
            plugin_pids: vec![],
            ..running()
        };
        assert!(refusal(&not_loaded).contains("has not loaded the stop plugin"));
    }

    #[test]
    fn calls_are_counted_from_the_request_to_the_stop() {
        let part = |t: i64| json!({"type": "tool", "state": {"time": {"start": t}}});
        let msgs = json!([{"info": {"role": "assistant"}, "parts": [part(10), part(20), part(30),
                          {"type": "text"}]}]);
        assert_eq!(calls_between(&msgs, 20, Some(30)), 1);
        assert_eq!(calls_between(&msgs, 20, None), 2);
        assert_eq!(calls_between(&msgs, 31, None), 0);
    }

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
        let o = wait_other(&store, second, &under, Duration::from_secs(1)).unwrap();
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

    #[test]
    fn the_turn_is_the_last_user_message() {
        let msgs = json!([{"info": {"role": "user", "id": "msg_1"}},
                          {"info": {"role": "assistant", "id": "msg_2"}},
                          {"info": {"role": "user", "id": "msg_3"}},
                          {"info": {"role": "assistant", "id": "msg_4"}}]);
        assert_eq!(current_turn(&msgs).as_deref(), Some("msg_3"));
        assert_eq!(current_turn(&json!([])), None);
    }
}
