//! `oc-sessions --follow`: the same listing, read again and again, each read ended by a
//! `sweep` record and a flush.
//!
//! Every `[follow] poll_ms` the database is asked what changed ([`Source::changes`]: one
//! `PRAGMA data_version` while nothing did, then a range read of opencode's event log); the
//! sessions that changed are listed with their trees, as the batch lists them (the servers that
//! answered at the last full read read again for their live fields, the processes looked at
//! again for the `process` mark), then a partial sweep. Every `full_every_secs`, and first, a
//! full read: what a tick lists (sessions active since the previous full read, the trees of
//! open alerts with `--also-open`), the `source` records, then a full sweep. A full read opens
//! the database again and looks for the servers again, so a database deleted and recreated, or
//! a server started or gone, is seen within one; a database replaced between full reads is seen
//! at the next poll (its file is another). A read that fails is a `blind` record, as in the batch.
//!
//! A session whose latest change was a call that may wait for a person is listed once more a
//! few seconds after it went quiet ([`QUIET_RECHECK`]), so that a TUI's permission prompt is told
//! then.
//!
//! Each server that answered at the last full read is also followed by its event stream
//! ([`events`]): the sessions its events name are listed at the next poll, as the database's
//! changed sessions are (a server whose database the watchdog cannot read, in a container or
//! on another host, is followed within a poll, not a full read). A stream connected again after
//! it dropped (a server restarted) brings a full read at the next poll, since what the server
//! said meanwhile is lost.
//!
//! Intervals are measured on the monotonic clock (a clock jump neither stops nor floods the
//! polls); the wall clock only stamps records and picks what a full read lists. Each sweep
//! carries the monotonic reading of its read (`mono`), which the stages after this one measure
//! their durations on. A step of the wall clock between two polls is said once on stderr and
//! on the next sweep (`step_ms`), and brings a full read ([`crate::monotonic`]).

use super::{collect, open_db, write_rest, Args, FullRead, SessionSources};
use crate::cli::{now_ms, parse_when, Exit, Out};
use crate::config::{Config, Discover};
use crate::monotonic::{Jump, Reading, StepWatch};
use crate::paths::Found;
use crate::record::{to_line, Sweep};
use crate::sources;
use crate::sources::opencode::merge::{
    ended_with_their_run, note_runs, RunProcess, Seen, RUNS_KEPT_MS,
};
use crate::sources::opencode::{self, db::Db, events, Cursor, Planned, Source};
use crate::store::{episodes, Store};
use anyhow::Result;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How far before the previous full read a full read looks (ms): a session updated while that
/// read ran, or stamped by a clock a little behind ours, is listed again rather than missed.
const SLACK_MS: i64 = 2000;

/// The first read, with no tick recorded, looks back this far (as the first timer tick does).
const FIRST_LOOK_BACK: &str = "1h";
/// A session whose latest change was a call that may wait for a person (a `bash` call with no
/// output yet, a `question` call) and that then went quiet is listed once more this long after
/// that change: the bash call reads as a permission being asked only after
/// [`crate::liveness::ASK_GRACE_MS`], and a TUI's prompt changes nothing more until answered, so
/// without this it would wait for the next full read.
const QUIET_RECHECK: Duration = Duration::from_millis(crate::liveness::ASK_GRACE_MS as u64 + 500);

enum Database {
    Open(Box<Db>, Option<Cursor>),
    /// No file (no opencode history yet, or deleted): looked for at every poll.
    Missing,
    /// There but unreadable (a schema this reader does not know, not a database): opened
    /// again at every poll, quietly; one blind record per full read while it stays so.
    Broken,
    /// `--no-db`.
    Off,
}

/// `oc-sessions --follow`'s state: the database and servers it reads, and what its last reads
/// found.
struct SessionsFollow<'a> {
    /// Where it reads, as a tick would.
    src: SessionSources<'a>,
    db: Database,
    /// The servers that answered at the last full read: read again when the database changed.
    live: Vec<Planned>,
    /// Sweeps written.
    n: u64,
    /// When the last full read began: monotonic, and by the wall clock.
    last_full: Option<(Instant, i64)>,
    /// The opencode processes found at the last read (pid, working directory): one that
    /// ends is noticed at the next poll, and the sessions listed in its directory are listed
    /// again then (a killed `opencode run` writes nothing more, so no change would say so).
    procs: Vec<(u32, Option<PathBuf>)>,
    /// The `opencode run` processes seen, alive or ended in the last [`RUNS_KEPT_MS`]: the
    /// session a run ran has ended with it, whatever else works in its directory.
    runs: Vec<RunProcess>,
    /// Sessions listed since the last full read, with their directories.
    listed: HashMap<String, Option<String>>,
    /// The event streams of the servers that answered at the last full read.
    streams: Vec<events::EventStream>,
    /// A stream was connected again: a full read at the next poll.
    full_soon: bool,
    /// The other agents read at the last full read (Claude Code's, Codex's directory), each
    /// with the newest modification among its session files then: a poll reads one again only
    /// when that moved.
    agents: Vec<(sources::SourceId, Option<i64>)>,
    /// The other agents' directories, kept open between reads (what they read of their files
    /// with them, so that a read after a change parses only what was appended).
    opened_agents: HashMap<sources::SourceId, Box<dyn sources::Records>>,
    /// Sessions whose latest change was a call that may wait for a person
    /// ([`opencode::Changes::asking`]), each with when to list it once more if nothing changes it
    /// before then ([`QUIET_RECHECK`]).
    recheck: HashMap<String, Instant>,
    /// The step of the wall clock noticed since the last sweep, for the next one.
    step: Option<i64>,
}

pub fn run(args: &Args, cfg: &Config, out: &mut Out) -> Result<Exit> {
    let stop = crate::cli::sigterm_flag()?;
    let src = SessionSources::of(args, cfg);
    if !args.no_db && src.db_found == Found::Argument && !src.db_path.exists() {
        anyhow::bail!("opencode database {}: no such file", src.db_path.display());
    }
    let mut f = SessionsFollow {
        src,
        db: if args.no_db {
            Database::Off
        } else {
            Database::Missing
        },
        live: Vec::new(),
        n: 0,
        last_full: None,
        procs: Vec::new(),
        runs: Vec::new(),
        listed: HashMap::new(),
        streams: Vec::new(),
        full_soon: false,
        agents: Vec::new(),
        opened_agents: HashMap::new(),
        recheck: HashMap::new(),
        step: None,
    };
    let mut watch = StepWatch::default();
    let poll = Duration::from_millis(cfg.follow.poll_ms.max(10));
    let full_every = Duration::from_secs(cfg.follow.full_every_secs.max(1));
    while !stop.load(Ordering::Relaxed) {
        let due = f
            .last_full
            .map_or(true, |(at, _)| at.elapsed() >= full_every);
        let now = Reading::now();
        if let Some(jump) = watch.take(now) {
            f.jumped(jump, now);
        }
        if due || f.full_soon || f.database_moved() {
            f.full(out, now)?;
        } else {
            f.partial(out, now)?;
        }
        std::thread::sleep(poll);
    }
    out.flush()?;
    Ok(Exit::Ok)
}

impl SessionsFollow<'_> {
    /// The database file changed under the open connection, appeared, or can be read now
    /// (one half made when it was opened, a schema put right): read it anew now.
    fn database_moved(&self) -> bool {
        match &self.db {
            Database::Open(db, _) => !db.is_current(),
            Database::Missing => self.src.db_path.exists(),
            Database::Broken => matches!(Db::open_if_there(&self.src.db_path), Ok(Some(_))),
            Database::Off => false,
        }
    }

    /// Says a jump of the wall clock once, and reads in full at once: what a full read lists
    /// is chosen by the wall clock.
    fn jumped(&mut self, jump: Jump, now: Reading) {
        let at = crate::clock::Clock::system().full(now.wall);
        eprintln!("oc-sessions: {}", jump.sentence(&at));
        if let Jump::Step { ms } = jump {
            self.step = Some(self.step.unwrap_or(0) + ms);
            self.full_soon = true;
        }
    }

    fn sweep(&mut self, out: &mut Out, now: Reading, full: bool) -> Result<()> {
        self.n += 1;
        let sweep = Sweep {
            n: self.n,
            t: now.wall,
            full,
            mono: Some(now.mono),
            step_ms: self.step.take(),
        };
        out.line(&to_line("sweep", &sweep)?)?;
        out.flush()?;
        Ok(())
    }

    /// What the first full read looks back to: `--since`, else the last tick, else an hour.
    fn first_since(&self, now: i64, seen: &mut Seen) -> Result<i64> {
        if let Some(w) = &self.src.args.since {
            return parse_when(w, now);
        }
        let last = self.with_store(seen, |s| s.last_tick(now)).flatten();
        match last {
            Some(t) => Ok(t),
            None => parse_when(FIRST_LOOK_BACK, now),
        }
    }

    /// Asks the watchdog's store, if there is one; a store that cannot be read is a blind
    /// record (open alerts not read again could be taken for gone).
    fn with_store<T>(&self, seen: &mut Seen, q: impl FnOnce(&Store) -> Result<T>) -> Option<T> {
        let path = self.src.cfg.store_db();
        if !path.exists() {
            return None;
        }
        match Store::open(&path).and_then(|s| q(&s)) {
            Ok(v) => Some(v),
            Err(e) => {
                seen.blind(&path.display().to_string(), &format!("{e:#}"));
                None
            }
        }
    }

    /// A full read: the database opened anew, the servers looked for again, what a tick lists.
    fn full(&mut self, out: &mut Out, now: Reading) -> Result<()> {
        let started = Instant::now();
        let t = now.wall;
        let mut seen = Seen::default();
        self.full_soon = false;
        let since = match self.last_full {
            None => self.first_since(t, &mut seen)?,
            // by both clocks, the earlier: a clock set back or a suspend loses nothing
            Some((at, wall)) => {
                let ran = at.elapsed().as_millis() as i64;
                wall.min(t - ran) - SLACK_MS
            }
        };
        let mut also: Vec<String> = super::ids_of(self.src.args.also.as_deref());
        if self.src.args.also_open {
            also.extend(
                self.with_store(&mut seen, episodes::open_roots)
                    .unwrap_or_default(),
            );
        }
        if !matches!(self.db, Database::Off) {
            // a fresh connection: the cursor of the old one means nothing to it
            let before = seen.blind.len();
            self.db = match open_db(&self.src.db_path, self.src.db_found, &mut seen) {
                Ok(Some(db)) => match db.cursor() {
                    Ok(c) => Database::Open(Box::new(db), Some(c)),
                    Err(e) => {
                        seen.blind(&self.src.db_path.display().to_string(), &format!("{e:#}"));
                        Database::Broken
                    }
                },
                Ok(None) if seen.blind.len() == before => Database::Missing,
                Ok(None) => Database::Broken,
                // `--db` named a file that is gone: say so each full read, follow on
                Err(e) => {
                    seen.blind(&self.src.db_path.display().to_string(), &format!("{e:#}"));
                    Database::Missing
                }
            };
        }
        let db = match &self.db {
            Database::Open(db, _) => Some(&**db),
            _ => None,
        };
        let runs = &mut self.runs;
        let (_, full) = self.src.read_all(
            out,
            db,
            (since, &also),
            &mut self.opened_agents,
            &mut seen,
            |procs, seen| {
                note_runs(runs, procs);
                ended_with_their_run(&mut seen.sessions, runs);
            },
        )?;
        let FullRead {
            reads,
            procs,
            agents,
        } = full;
        self.agents = agents;
        self.procs = procs.iter().map(|p| (p.pid, p.cwd.clone())).collect();
        self.listed.clear();
        self.note_listed(&seen);
        self.follow_streams(&reads);
        self.live = reads
            .into_iter()
            .filter(|r| r.live.is_some())
            .map(|r| r.plan)
            .collect();
        self.last_full = Some((started, t));
        self.sweep(out, now, true)
    }

    /// A poll: nothing while the database did not change; else the sessions that did, with
    /// their trees, and a partial sweep.
    fn partial(&mut self, out: &mut Out, now: Reading) -> Result<()> {
        let ended = self.where_a_process_ended();
        let heard = self.heard();
        let mut seen = Seen::default();
        let mut changed = Vec::new();
        let mut asking = Vec::new();
        if let Database::Open(db, cursor) = &mut self.db {
            match db.changes(cursor.as_ref()) {
                Ok(Some(ch)) => {
                    *cursor = Some(ch.cursor);
                    changed = ch.sessions;
                    asking = ch.asking;
                }
                Ok(None) => {}
                Err(f) => {
                    // read again (one blind record each time) at the next full read
                    let name = db.path.display().to_string();
                    self.db = Database::Broken;
                    seen.blind(&name, &f.to_string());
                    write_rest(out, &[], &seen)?;
                    return self.sweep(out, now, false);
                }
            }
        }
        let at = Instant::now();
        for id in &changed {
            if asking.contains(id) {
                self.recheck.insert(id.clone(), at + QUIET_RECHECK);
            } else {
                self.recheck.remove(id);
            }
        }
        let quiet: Vec<String> = self
            .recheck
            .iter()
            .filter(|(_, when)| **when <= at)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &quiet {
            self.recheck.remove(id);
        }
        for id in ended.into_iter().chain(heard).chain(quiet) {
            if !changed.contains(&id) {
                changed.push(id);
            }
        }
        let agents_moved = self.poll_agents(&mut seen);
        if changed.is_empty() {
            if !agents_moved {
                return Ok(());
            }
            self.note_listed(&seen);
            write_rest(out, &[], &seen)?;
            return self.sweep(out, now, false);
        }
        let db = match &self.db {
            Database::Open(db, _) => Some(&**db),
            _ => None,
        };
        // a process started since the last full read runs some of these: look again
        let procs = opencode::discovered(
            self.src.discover,
            &self.src.db_path,
            &self.src.cfg.opencode.discover_uids,
        );
        let reads = collect(
            db,
            &self.live,
            &procs,
            self.src.discover != Discover::Off,
            (i64::MAX, &changed),
            self.src.limits,
            &mut seen,
        );
        note_runs(&mut self.runs, &procs);
        ended_with_their_run(&mut seen.sessions, &self.runs);
        self.procs = procs.iter().map(|p| (p.pid, p.cwd.clone())).collect();
        self.note_listed(&seen);
        // a server gone since the last full read: one blind record, then left to the next one
        self.live.retain(|p| {
            !reads
                .iter()
                .any(|r| r.plan.url == p.url && r.error.is_some())
        });
        write_rest(out, &reads, &seen)?;
        self.sweep(out, now, false)
    }
}

impl SessionsFollow<'_> {
    /// Follows the event stream of each server that answered this full read, and no other.
    fn follow_streams(&mut self, reads: &[opencode::server::ServerRead]) {
        let clients: Vec<&opencode::Client> = reads
            .iter()
            .filter_map(|r| r.live.as_ref().map(|l| &l.client))
            .collect();
        self.streams
            .retain(|s| clients.iter().any(|c| c.base == s.url));
        for c in clients {
            if !self.streams.iter().any(|s| s.url == c.base) {
                self.streams.push(events::EventStream::follow(c.clone()));
            }
        }
    }

    /// The sessions the servers' streams named since the last poll; a stream connected again
    /// after a drop, or one that named more sessions than a poll reads, asks for a full read.
    fn heard(&mut self) -> Vec<String> {
        let mut ids = Vec::new();
        for s in &self.streams {
            let h = s.take();
            self.full_soon |= h.resumed || h.flooded;
            ids.extend(h.sessions);
        }
        ids
    }

    /// The other agents' sessions whose files changed since the last look: one `stat` a
    /// session file while nothing moved; when something did, that agent's directory is read
    /// (its running sessions with it) and the sessions updated since are listed. Returns
    /// whether it listed anything or found something it could not read.
    fn poll_agents(&mut self, seen: &mut Seen) -> bool {
        // an agent whose directory appeared since the last full read (its first run on this
        // machine, after the service started) is followed from this poll on, not from the next
        // full read a minute later (a `stat` of each agent's directory)
        let others =
            opencode::others_to_read(&self.src.args.sources, self.src.cfg, &self.src.db_path);
        for id in sources::agents_to_read(self.src.cfg) {
            let known =
                self.agents.iter().any(|(a, _)| *a == id) || others.iter().any(|(o, _)| *o == id);
            if !known {
                self.agents.push((id, None));
            }
        }
        let mut any = false;
        for (id, last) in &mut self.agents {
            let newest = id.newest_change();
            if newest <= *last {
                continue;
            }
            let since = last.map_or(i64::MIN, |l| l - SLACK_MS);
            *last = newest;
            let Some(records) = super::open_agent(&mut self.opened_agents, id) else {
                continue;
            };
            let listing = records.list(since, &[]);
            let name = id.to_string();
            for why in &listing.problems {
                seen.blind(&name, why);
            }
            any |= !listing.problems.is_empty();
            // a running session comes with every listing: only those whose files moved
            let before = seen.sessions.len();
            seen.sessions.extend(
                listing
                    .sessions
                    .into_iter()
                    .filter(|s| s.updated.map_or(true, |u| u >= since)),
            );
            any |= seen.sessions.len() > before;
        }
        seen.refuse_strange_ids();
        any
    }

    fn note_listed(&mut self, seen: &Seen) {
        for x in &seen.sessions {
            self.listed.insert(x.id.clone(), x.directory.clone());
        }
    }

    /// The sessions to list again because an opencode process found at the last read has
    /// ended: those listed since the last full read in its directory (all of them, when it
    /// had none readable). One `stat` of `/proc/PID` per process and poll.
    fn where_a_process_ended(&mut self) -> Vec<String> {
        let gone: Vec<Option<PathBuf>> = self
            .procs
            .iter()
            .filter(|(pid, _)| !alive(*pid))
            .map(|(_, cwd)| cwd.clone())
            .collect();
        let now = now_ms();
        for r in self.runs.iter_mut().filter(|r| r.ended.is_none()) {
            if !alive(r.pid) {
                r.ended = Some(now);
            }
        }
        self.runs
            .retain(|r| !matches!(r.ended, Some(e) if now - e >= RUNS_KEPT_MS));
        if gone.is_empty() {
            return Vec::new();
        }
        self.procs.retain(|(pid, _)| alive(*pid));
        let mut ids: Vec<String> = self
            .listed
            .iter()
            .filter(|(_, dir)| {
                gone.iter().any(|cwd| match (cwd, dir) {
                    (Some(c), Some(d)) => Path::new(d).starts_with(c),
                    _ => true,
                })
            })
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }
}

/// Whether process `pid` still runs: a zombie (exited, its parent has not reaped it yet) has
/// ended too. An `opencode run` whose parent waits for it late stays a zombie for as long.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
        // the state is the first field after the command name's closing parenthesis
        let state = st
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.bytes().next());
        !matches!(state, Some(b'Z' | b'X'))
    })
}

#[cfg(test)]
mod tests {
    use super::alive;
    use std::process::Command;
    use std::time::{Duration, Instant};

    /// A process that exited but is not reaped yet (a zombie) has ended; one that runs has not.
    #[test]
    fn a_zombie_has_ended_and_a_running_process_has_not() {
        let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
        let mut done = Command::new("true").spawn().unwrap();
        let t0 = Instant::now();
        while alive(done.id()) {
            assert!(t0.elapsed() < Duration::from_secs(10), "true never ended");
            std::thread::sleep(Duration::from_millis(20));
        }
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", done.id())).unwrap();
        assert!(stat.contains(") Z "), "not reaped yet, a zombie: {stat}");
        assert!(alive(sleeper.id()));
        assert!(!alive(u32::MAX));
        done.wait().unwrap();
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
    }
}
