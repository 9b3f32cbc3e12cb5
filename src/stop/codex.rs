//! Stopping a Codex CLI thread's turn (0.171), the way its user would: Ctrl-C to a `codex exec`,
//! Esc in the TUI. The thread stays resumable. Hooks cannot end a Codex turn in 0.171 (a
//! PreToolUse deny refuses one call and the turn goes on), so the stop reaches the process:
//! * a `codex exec` run: SIGINT to exactly the native `codex exec` process that holds the
//!   thread's lock (`thread-writer-locks/<thread>.lock`) open, pinned by a pidfd and checked by
//!   its start time before the signal, so a pid the kernel gave to another process since is
//!   never signalled. Codex ends the turn gracefully (`turn_aborted`, exit 1);
//!   A `codex exec` runs its thread's subagents (`spawn_agent`) in the same process, and SIGINT
//!   ends every turn it runs: the stop of such a subagent is a stop of its lead (the root
//!   thread), recorded, judged and resumed as that, and claimed when every thread the process
//!   runs shows its turn over;
//! * a thread of the interactive TUI, which runs inside Codex's app-server daemon (the daemon
//!   holds the lock): `turn/interrupt` of its in-progress turn over the daemon's control socket
//!   (`app-server-control/app-server-control.sock`: an HTTP/1.1 WebSocket upgrade on the Unix
//!   stream, then one JSON-RPC message per text frame), as a second client beside the TUI.
//!
//! The contract is opencode's ([`super`]): once per action id, recorded in `stops` (via
//! `sigint` or `app-server`) before anything is sent, one stop of a thread at a time, bounded
//! waits, and `stopped` claimed only when the rollout shows the turn over (its last turn event
//! no longer a start, no call started after it, still so a moment later). [`decide`] is the
//! pure rule over [`Facts`]; [`stop`] gathers them, applies the plan and records it.

use super::{StopOutcome, Via};
use crate::store::Store;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The control socket of Codex's app-server daemon, under Codex's directory.
const CONTROL_SOCKET: &str = "app-server-control/app-server-control.sock";

/// How long each exchange with the daemon may take (connect, upgrade, one call): a hung daemon
/// costs a stop this, not its whole wait.
const ASK_DAEMON: Duration = Duration::from_secs(3);

/// A Codex thread found on disk.
#[derive(Debug, Clone)]
pub struct Thread {
    /// Codex's directory (`$CODEX_HOME`, else `~/.codex`).
    pub home: PathBuf,
    pub rollout: PathBuf,
}

impl Thread {
    fn lock(&self, id: &str) -> PathBuf {
        self.home
            .join("thread-writer-locks")
            .join(format!("{id}.lock"))
    }
}

/// The Codex thread `id` (a UUID), if its rollout is under Codex's directory.
pub fn find(id: &str) -> Option<Thread> {
    let home = crate::paths::codex_dir();
    let rollout = crate::sources::codex::home::rollouts_in(&home)
        .ok()?
        .into_iter()
        .find(|(t, _, _)| t == id)?
        .1;
    Some(Thread { home, rollout })
}

/// The thread a stop of `id` is of, with its rollout's turns: a subagent of a `codex exec` runs
/// in its lead's process, where SIGINT ends every turn, and only the lead resumes the run it was
/// part of, so its stop is its root thread's; any other thread's is its own.
fn main_of(id: &str, thread: &Thread, turns: &Turns) -> Result<(String, Thread, Turns)> {
    let mut main = (id.to_string(), thread.clone(), turns.clone());
    // a bound, as a rollout names its parent and a cycle of names would never end
    for _ in 0..16 {
        let Some(parent) = main.2.parent.clone().filter(|_| main.2.in_exec) else {
            break;
        };
        let Some(t) = find(&parent) else { break };
        let turns = Turns::read(&t.rollout)?;
        main = (parent, t, turns);
    }
    Ok(main)
}

/// The rollouts of the threads whose locks process `pid` holds: what one SIGINT to it ends.
fn rollouts_held_by(pid: u32, home: &Path) -> Vec<PathBuf> {
    let Ok(locks) = std::fs::canonicalize(home.join("thread-writer-locks")) else {
        return Vec::new();
    };
    let held: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|t| t.parent() == Some(locks.as_path()))
        .filter_map(|t| {
            let name = t.file_name()?.to_str()?;
            // `.coordination.lock` is no thread's
            (!name.starts_with('.')).then(|| name.strip_suffix(".lock").map(String::from))?
        })
        .collect();
    crate::sources::codex::home::rollouts_in(home)
        .unwrap_or_default()
        .into_iter()
        .filter(|(id, _, _)| held.contains(id))
        .map(|(_, f, _)| f)
        .collect()
}

/// What a rollout says about the thread's turns and calls.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turns {
    /// Its last turn event is a start (`task_started`): a turn is under way.
    pub open: bool,
    /// The id of the last turn started.
    pub turn: Option<String>,
    /// How its last turn ended (`turn_aborted`, `task_complete`), when it did.
    pub ended_by: Option<String>,
    /// When each tool call started (`function_call`, `custom_tool_call`), ms.
    pub calls: Vec<i64>,
    /// When its last turn ended, ms.
    pub ended: Option<i64>,
    /// The thread it is a subagent of (`session_meta`'s `source.subagent.thread_spawn`).
    pub parent: Option<String>,
    /// It runs in a `codex exec` (`session_meta`'s originator `codex_exec`, its subagents' too).
    pub in_exec: bool,
}

impl Turns {
    /// Reads a rollout's text (a line being written, cut short, is skipped).
    pub fn of(text: &str) -> Turns {
        let mut t = Turns::default();
        for line in text.lines() {
            if !(line.contains("\"event_msg\"")
                || line.contains("\"response_item\"")
                || line.contains("\"session_meta\""))
            {
                continue;
            }
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let at = crate::sources::transcript::ms(v.get("timestamp"));
            let p = &v["payload"];
            match (v["type"].as_str(), p["type"].as_str()) {
                (Some("event_msg"), Some("task_started")) => {
                    t.open = true;
                    t.ended = None;
                    t.ended_by = None;
                    t.turn = p["turn_id"]
                        .as_str()
                        .or(p["turn_attribution"]["turn_id"].as_str())
                        .map(String::from);
                }
                (Some("event_msg"), Some(e @ ("task_complete" | "turn_aborted"))) => {
                    t.open = false;
                    t.ended = at;
                    t.ended_by = Some(e.to_string());
                }
                (Some("response_item"), Some("function_call" | "custom_tool_call")) => {
                    t.calls.push(at.unwrap_or(0));
                }
                (Some("session_meta"), _) => {
                    t.parent = p["source"]["subagent"]["thread_spawn"]["parent_thread_id"]
                        .as_str()
                        .or(p["parent_thread_id"].as_str())
                        .map(String::from);
                    t.in_exec = p["originator"] == "codex_exec";
                }
                _ => {}
            }
        }
        t
    }

    fn read(rollout: &Path) -> Result<Turns> {
        let text = std::fs::read_to_string(rollout)
            .with_context(|| format!("cannot read {}", rollout.display()))?;
        Ok(Turns::of(&text))
    }

    /// Calls that started at or after `from` (and before `to`, if given).
    pub fn calls_between(&self, from: i64, to: Option<i64>) -> i64 {
        self.calls
            .iter()
            .filter(|&&t| t >= from && to.map_or(true, |to| t < to))
            .count() as i64
    }

    /// Over: no turn under way, and no call started after the last one ended.
    fn over(&self) -> bool {
        !self.open && self.calls_between(self.ended.unwrap_or(i64::MAX), None) == 0
    }
}

/// A process that holds a thread's lock open, as found in `/proc`.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat`: tells it from a later process given the same pid.
    pub start: String,
    pub argv: Vec<String>,
}

/// What runs the thread, by the command line of the process holding its lock.
#[derive(Debug, Clone, PartialEq)]
pub enum Runner {
    /// A `codex exec` (the native binary; its node wrapper holds nothing).
    Exec(Holder),
    /// Codex's app-server daemon (`codex app-server ...`), where the TUI's threads run.
    Daemon(Holder),
    /// Anything else (another `codex` subcommand, or a process not Codex's).
    Other(Holder),
}

impl Runner {
    pub fn of(h: Holder) -> Runner {
        let words: Vec<&str> = h.argv.iter().skip(1).map(String::as_str).collect();
        let native = h
            .argv
            .first()
            .and_then(|a| Path::new(a).file_name())
            .is_some_and(|n| n == "codex");
        match subcommand(&words) {
            Some("exec") if native => Runner::Exec(h),
            Some("app-server") if native => Runner::Daemon(h),
            _ => Runner::Other(h),
        }
    }
}

/// The first word of a command line that is neither an option nor an option's value
/// (`codex -c k=v exec ...`: `exec`).
fn subcommand<'a>(words: &[&'a str]) -> Option<&'a str> {
    let mut after_option = false;
    for w in words {
        if w.starts_with('-') {
            after_option = !w.contains('=');
            continue;
        }
        if after_option && !matches!(*w, "exec" | "app-server") {
            after_option = false;
            continue;
        }
        return Some(w);
    }
    None
}

/// The live processes holding `lock` open (a killed process's lock is held by nobody).
fn holders(lock: &Path) -> Vec<Holder> {
    let Ok(lock) = std::fs::canonicalize(lock) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if holds(pid, &lock) {
            let (Some(start), Ok(cmd)) = (
                crate::sources::transcript::proc_start(pid),
                std::fs::read(e.path().join("cmdline")),
            ) else {
                continue;
            };
            let argv = cmd
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            out.push(Holder { pid, start, argv });
        }
    }
    out
}

/// Whether process `pid` has `lock` open.
fn holds(pid: u32, lock: &Path) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == lock))
}

/// What was found about a thread before deciding.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    pub turns: Turns,
    /// The live processes holding its lock.
    pub holders: Vec<Holder>,
    /// The daemon's control socket, where it is.
    pub socket: Option<PathBuf>,
    pub previous: Option<super::Previous>,
}

/// What [`stop`] is to do about a thread.
#[derive(Debug, Clone, PartialEq)]
pub enum ThreadPlan {
    Already(super::Previous),
    Refuse(String),
    Sigint(Holder),
    AppServer(PathBuf, Holder),
}

/// How a person stops a Codex turn by hand.
pub const BY_HAND: &str = "Ctrl-C in the terminal of its `codex exec`, Esc in its TUI";

/// The rule: once per action id; a turn under way in exactly one live process, a `codex exec`
/// (SIGINT) or the app-server daemon (`turn/interrupt`); else a refusal saying what to do.
pub fn decide(thread: &str, f: &Facts) -> ThreadPlan {
    if let Some(p) = &f.previous {
        if p.status != "failed" {
            return ThreadPlan::Already(p.clone());
        }
    }
    let holder = match f.holders.as_slice() {
        [] => {
            return ThreadPlan::Refuse(format!(
                "Codex thread {thread} runs in no process: no live process holds its lock{}",
                if f.turns.open {
                    " (its last turn never ended: the process was killed), nothing to stop"
                } else {
                    ", its last turn has ended, nothing to stop"
                }
            ))
        }
        [h] => h,
        many => {
            let pids: Vec<String> = many.iter().map(|h| h.pid.to_string()).collect();
            return ThreadPlan::Refuse(format!(
                "Codex thread {thread} has its lock held by {} processes ({}): which runs it is not known, nothing signalled; {BY_HAND}",
                many.len(),
                pids.join(", ")
            ));
        }
    };
    if !f.turns.open {
        return ThreadPlan::Refuse(format!(
            "Codex thread {thread} is idle already: its last turn has ended, nothing to stop"
        ));
    }
    match Runner::of(holder.clone()) {
        Runner::Exec(h) => ThreadPlan::Sigint(h),
        Runner::Daemon(h) => match &f.socket {
            Some(s) => ThreadPlan::AppServer(s.clone(), h),
            None => ThreadPlan::Refuse(format!(
                "Codex thread {thread} runs in the app-server daemon (process {}), whose control socket is not there: Esc in its TUI",
                h.pid
            )),
        },
        Runner::Other(h) => ThreadPlan::Refuse(format!(
            "Codex thread {thread} runs in process {} ({}), neither a `codex exec` nor Codex's app-server daemon: nothing signalled; {BY_HAND}",
            h.pid,
            h.argv.first().map_or("?", String::as_str)
        )),
    }
}

/// How to resume a thread stopped the way `via` says: in words, and the one command.
pub fn resume(thread: &str, via: Option<&str>) -> (String, String) {
    let id = crate::cli::shell_word(thread);
    let exec = format!("codex exec resume {id} \"continue\"");
    let tui = format!("codex resume {id}");
    match via {
        Some("app-server") => (
            format!("a new message in its TUI, which stays open, or `{tui}`"),
            tui,
        ),
        _ => (
            format!("`{exec}` in its project, or `{tui}` (the TUI)"),
            exec,
        ),
    }
}

/// What the agent's user sees when the turn is stopped this way.
fn user_sees(via: Via) -> &'static str {
    match via {
        Via::AppServer => "its TUI shows \"Conversation interrupted\" and waits for a message",
        _ => "codex exec prints \"turn interrupted\" and exits with status 1, as on Ctrl-C",
    }
}

/// Stops the thread's turn, once per action id, and records it.
pub fn stop(store: &mut Store, req: &super::Request, thread: &Thread) -> Result<StopOutcome> {
    let asked = crate::cli::now_ms();
    let session = req.session;
    let turns = Turns::read(&thread.rollout)?;
    let (main, main_thread, main_turns) = main_of(session, thread, &turns)?;
    let turn = main_turns.turn.clone().unwrap_or_else(|| "none".into());
    let episode = match req.episode {
        Some(e) => e.to_string(),
        None => match super::open_episode(store, session)? {
            Some(id) => format!("episode:{id}"),
            None => format!("turn:{turn}"),
        },
    };
    let action = super::action_id(&main, &episode);
    let stale = crate::cli::now_ms() - super::STALE_MS;
    let previous = super::previous(store, &action, &main, &turn)?
        .filter(|p| p.status != "requested" || p.t > stale);
    let look = previous.as_ref().map_or(true, |p| p.status == "failed");
    let socket = thread.home.join(CONTROL_SOCKET);
    let facts = Facts {
        holders: if look {
            holders(&thread.lock(session))
        } else {
            Vec::new()
        },
        socket: socket.exists().then_some(socket),
        turns,
        previous,
    };
    let mut o = StopOutcome::requested(&main, action, episode, asked, resume(&main, None).0);
    let (via, holder, socket) = match decide(session, &facts) {
        ThreadPlan::Already(p) if p.status == "requested" => {
            return super::wait_other(store, o, &p, req.wait, BY_HAND)
        }
        ThreadPlan::Already(p) => {
            o.resume = resume(&main, p.via.as_deref()).0;
            return Ok(super::already(o, &p));
        }
        ThreadPlan::Refuse(why) => bail!("stop: {why}"),
        ThreadPlan::Sigint(h) => (Via::Sigint, h, None),
        ThreadPlan::AppServer(s, h) => (Via::AppServer, h, Some(s)),
    };
    o.via = Some(via.as_str().into());
    o.pid = Some(holder.pid);
    o.resume = resume(&main, o.via.as_deref()).0;
    if let Some(p) = super::claim(store, &o, &turn, req.reason)? {
        return super::wait_other(store, o, &p, req.wait, BY_HAND);
    }
    // what the stop ends: every thread of a `codex exec`; one thread of the daemon, which runs
    // others' too
    let mut watched = vec![thread.rollout.clone(), main_thread.rollout.clone()];
    if socket.is_none() {
        watched.extend(rollouts_held_by(holder.pid, &thread.home));
    }
    watched.sort();
    watched.dedup();
    let t0 = Instant::now();
    let lock = thread.lock(session);
    let sent = match &socket {
        None => sigint(&holder, &lock),
        Some(s) => interrupt(s, session, t0 + req.wait.min(ASK_DAEMON * 3)),
    };
    let carried = sent.and_then(|()| ended(&watched, req.wait.saturating_sub(t0.elapsed())));
    let calls_between = |from: i64, to: Option<i64>| -> i64 {
        watched
            .iter()
            .map(|f| Turns::read(f).unwrap_or_default().calls_between(from, to))
            .sum()
    };
    match carried {
        Ok(()) => {
            let stopped = crate::cli::now_ms();
            o.status = "stopped".into();
            o.stopped = Some(stopped);
            o.calls_after_request = Some(calls_between(o.requested, Some(stopped)));
            o.user_sees = Some(user_sees(via).into());
            let how = match via {
                Via::AppServer => format!(
                    "through Codex's app-server daemon (process {}, turn/interrupt)",
                    holder.pid
                ),
                _ => format!("by SIGINT to its codex exec (process {})", holder.pid),
            };
            o.message = format!(
                "stopped Codex thread {main}{} {how}, {} call(s) after the request; {}; resume with {}",
                if main == session {
                    String::new()
                } else {
                    format!(" (for its subagent {session})")
                },
                o.calls_after_request.unwrap_or(0),
                user_sees(via),
                o.resume
            );
            super::record(store, &o, &turn, req.reason, None)?;
            Ok(o)
        }
        Err(e) => {
            o.status = "failed".into();
            o.calls_after_request = Some(calls_between(o.requested, None));
            let detail = format!("{e:#}");
            super::record(store, &o, &turn, req.reason, Some(&detail))?;
            bail!("stop: Codex thread {session}: {detail}; {BY_HAND} (the request is recorded as failed, a new `wd-store stop` may try again)")
        }
    }
}

/// SIGINT to the `codex exec` found holding `lock`, once, only if it is still that process: a
/// pidfd pins the pid first, so the process whose start time is checked after is the one the
/// signal reaches (a pid reused in between fails the check; one reused after cannot be reached
/// through the pidfd).
fn sigint(h: &Holder, lock: &Path) -> Result<()> {
    use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
    let pid = i32::try_from(h.pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| anyhow!("{} is not a pid", h.pid))?;
    let fd = pidfd_open(pid, PidfdFlags::empty())
        .with_context(|| format!("codex exec process {} is gone", h.pid))?;
    let lock = std::fs::canonicalize(lock).unwrap_or_else(|_| lock.to_path_buf());
    if crate::sources::transcript::proc_start(h.pid).as_deref() != Some(h.start.as_str())
        || !holds(h.pid, &lock)
    {
        bail!(
            "process {} is no longer the codex exec that held the thread's lock: nothing signalled",
            h.pid
        );
    }
    pidfd_send_signal(&fd, Signal::INT)
        .with_context(|| format!("cannot signal codex exec process {}", h.pid))?;
    Ok(())
}

/// The in-progress turn of `thread` interrupted through the daemon's control socket, by
/// `deadline`.
fn interrupt(socket: &Path, thread: &str, deadline: Instant) -> Result<()> {
    let mut d = AppServer::connect(socket, deadline)?;
    let turns = d.call("thread/turns/list", json!({"threadId": thread}))?;
    let turn = turns["data"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["status"] == "inProgress")
        .and_then(|t| t["id"].as_str())
        .ok_or_else(|| anyhow!("the app-server daemon runs no turn of the thread"))?
        .to_string();
    d.call(
        "turn/interrupt",
        json!({"threadId": thread, "turnId": turn}),
    )?;
    Ok(())
}

/// How long the rollout must go on showing the turn over, with no call started, before the
/// stop is believed.
const SETTLE: Duration = Duration::from_millis(500);

/// Waits (at least 2 s, else what is left of the stop's wait) until every rollout shows its
/// turn over, and still over a moment later.
fn ended(rollouts: &[PathBuf], wait: Duration) -> Result<()> {
    // the calls of each, when all are over
    let over = || -> Option<Vec<usize>> {
        rollouts
            .iter()
            .map(|f| {
                Turns::read(f)
                    .ok()
                    .filter(Turns::over)
                    .map(|t| t.calls.len())
            })
            .collect()
    };
    let settled = super::wait_for(wait.max(Duration::from_secs(2)), || {
        let seen = over()?;
        std::thread::sleep(SETTLE);
        over().filter(|calls| *calls == seen)
    });
    if settled.is_some() {
        return Ok(());
    }
    let (rollout, t) = rollouts
        .iter()
        .map(|f| Turns::read(f).map(|t| (f, t)))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .find(|(_, t)| !t.over())
        .ok_or_else(|| anyhow!("its rollouts showed the turns going on until the last look"))?;
    Err(anyhow!(
        "its rollout{} shows the turn going on: {}",
        if rollouts.len() > 1 {
            format!(" {}", rollout.display())
        } else {
            String::new()
        },
        if t.open {
            "no turn_aborted after the signal".to_string()
        } else {
            format!(
                "{} call(s) started after its turn ended",
                t.calls_between(t.ended.unwrap_or(i64::MAX), None)
            )
        }
    ))
}

/// A client of Codex's app-server daemon over its control socket: JSON-RPC, one message per
/// WebSocket text frame, every read and write bounded by the deadline given at connect.
/// `tungstenite` does the upgrade and the framing (masking, fragments, pings) over the Unix
/// stream.
pub struct AppServer {
    ws: tungstenite::WebSocket<UnixStream>,
    next: u64,
    deadline: Instant,
}

impl AppServer {
    /// Connects, upgrades and says `initialize` and `initialized`.
    pub fn connect(socket: &Path, deadline: Instant) -> Result<AppServer> {
        let stream = UnixStream::connect(socket).with_context(|| {
            format!(
                "cannot connect to Codex's app-server daemon at {}",
                socket.display()
            )
        })?;
        let left = remaining(deadline)?;
        stream.set_read_timeout(Some(left))?;
        stream.set_write_timeout(Some(left))?;
        let (ws, _) = tungstenite::client::client("ws://localhost/", stream).map_err(|e| {
            anyhow!(
                "Codex's app-server daemon at {} refused the upgrade: {}",
                socket.display(),
                match e {
                    tungstenite::HandshakeError::Interrupted(_) => "no answer in time".to_string(),
                    tungstenite::HandshakeError::Failure(e) => e.to_string(),
                }
            )
        })?;
        let mut d = AppServer {
            ws,
            next: 1,
            deadline,
        };
        d.call(
            "initialize",
            json!({"clientInfo": {"name": "oc-watchdog", "version": env!("CARGO_PKG_VERSION")}}),
        )?;
        d.send(&json!({"method": "initialized"}))?;
        Ok(d)
    }

    fn send(&mut self, v: &Value) -> Result<()> {
        let left = remaining(self.deadline)?;
        self.ws.get_mut().set_write_timeout(Some(left))?;
        self.ws
            .send(tungstenite::Message::text(v.to_string()))
            .map_err(|e| anyhow!("Codex's app-server daemon: cannot send: {e}"))
    }

    /// Moves the deadline of every exchange from now on.
    pub fn until(&mut self, deadline: Instant) {
        self.deadline = deadline;
    }

    /// The next JSON message the daemon sends (an answer or a notification), by the deadline.
    pub fn read(&mut self, what: &str) -> Result<Value> {
        loop {
            let left = remaining(self.deadline)
                .map_err(|_| anyhow!("Codex's app-server daemon did not answer {what} in time"))?;
            self.ws.get_mut().set_read_timeout(Some(left))?;
            let msg = self.ws.read().map_err(|e| match e {
                tungstenite::Error::Io(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    anyhow!("Codex's app-server daemon did not answer {what} in time")
                }
                e => anyhow!("Codex's app-server daemon: {what}: {e}"),
            })?;
            if let tungstenite::Message::Text(text) = msg {
                if let Ok(v) = serde_json::from_str::<Value>(text.as_str()) {
                    return Ok(v);
                }
            }
        }
    }

    /// Calls `method` and gives its result; notifications meanwhile are passed over.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.next;
        self.next += 1;
        self.send(&json!({"id": id, "method": method, "params": params}))?;
        loop {
            let v = self.read(method)?;
            if v.get("method").is_some() || v["id"] != id {
                continue;
            }
            if let Some(e) = v.get("error") {
                bail!(
                    "Codex's app-server daemon refused {method}: {}",
                    e["message"].as_str().unwrap_or("no reason given")
                );
            }
            return Ok(v["result"].clone());
        }
    }
}

fn remaining(deadline: Instant) -> Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        bail!("Codex's app-server daemon did not answer in time");
    }
    Ok(left)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(argv: &[&str]) -> Holder {
        Holder {
            pid: 42,
            start: "100".into(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
        }
    }

    const NATIVE: &str = "/usr/lib/node_modules/@openai/codex/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/codex/codex";

    #[test]
    fn only_the_native_codex_exec_or_the_daemon_is_reached() {
        let exec = holder(&[NATIVE, "exec", "--json", "fix the tests"]);
        assert_eq!(Runner::of(exec.clone()), Runner::Exec(exec));
        let opts = holder(&[NATIVE, "-c", "model=\"o3\"", "exec", "x"]);
        assert_eq!(Runner::of(opts.clone()), Runner::Exec(opts));
        let daemon = holder(&[
            "/h/.codex/packages/app-server-daemon/releases/0.171.0-x86_64-unknown-linux-musl/bin/codex",
            "app-server",
            "--listen",
            "unix://",
            "--managed-daemon",
        ]);
        assert_eq!(Runner::of(daemon.clone()), Runner::Daemon(daemon));
        // the node wrapper, a TUI whose prompt says exec, another program
        for argv in [
            &["node", "/usr/bin/codex", "exec", "x"][..],
            &[NATIVE, "fix the exec path"],
            &[NATIVE, "resume", "exec"],
            &["/usr/bin/python3", "exec"],
        ] {
            assert!(
                matches!(Runner::of(holder(argv)), Runner::Other(_)),
                "{argv:?}"
            );
        }
    }

    fn rec(t: &str, ty: &str, payload: Value) -> String {
        json!({"timestamp": t, "type": ty, "payload": payload}).to_string()
    }

    #[test]
    fn a_turn_is_over_when_it_ended_and_no_call_started_after() {
        let started = rec(
            "2026-12-05T02:32:17.000Z",
            "event_msg",
            json!({"type": "task_started", "turn_id": "tu1"}),
        );
        let call = |t: &str| {
            rec(
                t,
                "response_item",
                json!({"type": "function_call", "name": "exec_command", "call_id": "c"}),
            )
        };
        let aborted = rec(
            "2026-12-05T02:32:23.666Z",
            "event_msg",
            json!({"type": "turn_aborted", "turn_id": "tu1", "reason": "interrupted"}),
        );
        let running = Turns::of(&[started.clone(), call("2026-12-05T02:32:18.000Z")].join("\n"));
        assert!(running.open && !running.over());
        assert_eq!(running.turn.as_deref(), Some("tu1"));
        let stopped = Turns::of(
            &[
                started.clone(),
                call("2026-12-05T02:32:18.000Z"),
                aborted.clone(),
            ]
            .join("\n"),
        );
        assert!(stopped.over());
        assert_eq!(stopped.ended_by.as_deref(), Some("turn_aborted"));
        assert_eq!(stopped.calls_between(1_796_437_938_000, None), 1);
        assert_eq!(stopped.calls_between(1_796_437_938_001, None), 0);
        // a call after the turn's end: not over
        let late = Turns::of(&[started, aborted, call("2026-12-05T02:32:24.000Z")].join("\n"));
        assert!(!late.over());
    }

    /// A subagent's rollout names its lead; a `codex exec`'s threads, lead and subagent, say so.
    #[test]
    fn a_rollout_says_whose_subagent_it_is_and_that_a_codex_exec_runs_it() {
        let read = |f: &str| {
            let p = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("fixtures/agents/codex")
                .join(f);
            Turns::of(&std::fs::read_to_string(p).unwrap())
        };
        let (lead, sub) = (
            read("rollout-subagent-parent.jsonl"),
            read("rollout-subagent-child.jsonl"),
        );
        assert_eq!((lead.parent, lead.in_exec), (None, true));
        assert_eq!(
            (sub.parent.as_deref(), sub.in_exec),
            (Some("01a2424e-e19c-70f2-b22c-4baea65c4482"), true)
        );
        assert_eq!(
            (sub.calls.len(), sub.ended_by.as_deref()),
            (4, Some("task_complete"))
        );
        let tui = Turns::of(
            &json!({"timestamp": "2026-12-05T02:32:17.000Z", "type": "session_meta",
                    "payload": {"id": "t", "originator": "codex_tui"}})
            .to_string(),
        );
        assert!(!tui.in_exec);
    }

    fn facts(holders: Vec<Holder>, open: bool) -> Facts {
        Facts {
            turns: Turns {
                open,
                ..Turns::default()
            },
            holders,
            socket: Some(PathBuf::from(
                "/h/.codex/app-server-control/app-server-control.sock",
            )),
            previous: None,
        }
    }

    #[test]
    fn a_thread_is_stopped_only_through_the_one_process_that_runs_it() {
        let exec = holder(&[NATIVE, "exec", "x"]);
        assert_eq!(
            decide("t", &facts(vec![exec.clone()], true)),
            ThreadPlan::Sigint(exec.clone())
        );
        let daemon = holder(&["/d/codex", "app-server", "--listen", "unix://"]);
        assert!(matches!(
            decide("t", &facts(vec![daemon.clone()], true)),
            ThreadPlan::AppServer(_, _)
        ));
        let refusal = |f: &Facts| match decide("t", f) {
            ThreadPlan::Refuse(why) => why,
            other => panic!("{other:?}"),
        };
        // a stale lock (SIGKILL): held by nobody
        assert_eq!(
            refusal(&facts(vec![], true)),
            "Codex thread t runs in no process: no live process holds its lock (its last turn never ended: the process was killed), nothing to stop"
        );
        assert_eq!(
            refusal(&facts(vec![exec.clone()], false)),
            "Codex thread t is idle already: its last turn has ended, nothing to stop"
        );
        assert!(refusal(&facts(vec![exec.clone(), daemon.clone()], true))
            .contains("held by 2 processes (42, 42)"));
        let mut no_socket = facts(vec![daemon], true);
        no_socket.socket = None;
        assert!(refusal(&no_socket).ends_with("whose control socket is not there: Esc in its TUI"));
        let other = holder(&["/usr/bin/python3", "x.py"]);
        assert!(refusal(&facts(vec![other], true))
            .contains("neither a `codex exec` nor Codex's app-server daemon: nothing signalled"));
    }

    #[test]
    fn resuming_says_the_real_clis_commands() {
        let id = "01a2440b-8dcb-76b3-9f8c-27e1fd6461c8";
        assert_eq!(
            resume(id, Some("sigint")),
            (
                format!("`codex exec resume {id} \"continue\"` in its project, or `codex resume {id}` (the TUI)"),
                format!("codex exec resume {id} \"continue\"")
            )
        );
        assert_eq!(
            resume(id, Some("app-server")).1,
            format!("codex resume {id}")
        );
    }

    /// A pid whose process is not the one found (reused, or its start time differs) is never
    /// signalled.
    #[test]
    fn a_process_whose_start_time_differs_is_not_signalled() {
        let me = std::process::id();
        let h = Holder {
            pid: me,
            start: "1".into(),
            argv: vec![],
        };
        let err = sigint(&h, Path::new("/nonexistent.lock")).unwrap_err();
        assert!(
            err.to_string().contains("is no longer the codex exec"),
            "{err:#}"
        );
    }
}
