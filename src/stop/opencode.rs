//! Stopping an opencode session's run, in the two ways opencode 1.18 allows:
//! * a server (`opencode serve`/`web`) whose `GET /session/status?directory=` lists the session
//!   as running: `POST /session/{id}/abort?directory=`, with the HTTP client's usual bounds and
//!   credentials (`OPENCODE_SERVER_PASSWORD`);
//! * a TUI or `opencode run` session (no port): a request file for the companion plugin
//!   (`deploy/oc-watchdog-stop.js`) in `$XDG_STATE_HOME/oc-watchdog/stop/<session>.json`; the
//!   plugin aborts the session inside its own process and writes `<session>.ack.json`, which this
//!   waits for, a bounded time.
//!
//! Under the contract of [`super`] (once per action id, recorded in the `stops` table, one stop
//! of a session at a time). A stop is claimed only when opencode's database shows the session's
//! run over (no step in flight, no call started for a moment), whatever the way and whatever a
//! server says. [`decide`] is the pure rule over what was found ([`Facts`]); [`stop`] gathers the
//! facts, applies the plan and records it. What it reads of opencode (its database, its servers
//! and the processes that run them) comes from opencode's reading wing,
//! [`crate::sources::opencode`].

use super::{
    action_id, already, claim, open_episode, previous, record, requests_dir, toast_words, wait_for,
    wait_other, write_atomic, Previous, Request, StopOutcome, Via, ACK_MAX_BYTES, SETTLE, STALE_MS,
};
use crate::config::Config;
use crate::sources::opencode::{self, db::Db, Client, Source};
use crate::store::Store;
use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The plugin's file name, as `deploy/install --with-stop-plugin` installs it.
pub const PLUGIN_FILE: &str = "oc-watchdog-stop.js";

/// How to stop an opencode session by hand, which every refusal and failure says.
pub const BY_HAND: &str =
    "press Esc twice in its TUI, or Ctrl-C in the terminal of its `opencode run`";

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
/// provide a message or a command").
pub fn resume_commands(session: &str) -> [String; 2] {
    [
        format!("opencode -s {}", crate::cli::shell_word(session)),
        format!(
            "opencode run -s {} \"continue\"",
            crate::cli::shell_word(session)
        ),
    ]
}

/// How to resume a stopped opencode session, in words (each command between backquotes).
pub fn resume_hint(session: &str) -> String {
    let [tui, run] = resume_commands(session);
    format!("`{tui}` (its TUI) or `{run}`")
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

/// Stops an opencode session's current run, once per action id, and records it. Refusals (not
/// found, idle, no way to reach it) are errors that say what to do instead and record nothing;
/// an earlier request under the same action id is an `already` outcome that does nothing.
pub fn stop(store: &mut Store, cfg: &Config, req: &Request) -> Result<StopOutcome> {
    let session = req.session;
    // the calls made while this looks the session up count as calls after the request
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
            return wait_other(store, o, &p, req.wait, BY_HAND)
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
        return wait_other(store, o, &p, req.wait, BY_HAND);
    }
    let carried = carry_out(cfg, req, &db, &found, &o, via);
    let messages = db.messages(session).unwrap_or(Value::Null);
    finish(store, req, o, &found.turn, carried, &messages)
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
