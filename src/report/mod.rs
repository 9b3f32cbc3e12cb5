//! The operator's page: one self-contained HTML file (no network, no scripts, inline CSS and
//! SVG) that shows, newest first, the watchdog's own health, the loops open now with a picture
//! of each flagged session, the episodes of the last 7 days, the per-model rollup and the
//! models blocked in opencode's config.
//!
//! Data enters from the watchdog database only ([`gather`] reads it into a [`PageData`]); `html`
//! renders a `PageData` to text; `svg` draws the pictures, from the calls the tick kept
//! ([`crate::store::marks`]). `wd-store report` writes the page atomically (the tick runs it after
//! every tick), and every alert links to `#<root session id>` on it ([`crate::paths::page_link`]).

pub mod esc;
pub mod html;
pub mod svg;

use crate::config::Config;
use crate::store::{ticks, Store};
use anyhow::{Context, Result};
use rusqlite::{params, Connection, OptionalExtension};
use std::path::{Path, PathBuf};

pub use crate::clock::Clock;
use crate::store::marks;
pub use crate::store::marks::CallMark;

/// Everything the page shows.
#[derive(Debug, Default)]
pub struct PageData {
    pub now: i64,
    /// The zone the page writes times in.
    pub clock: Clock,
    pub db: PathBuf,
    pub tick: Option<LastTick>,
    /// Times of the timer's recent ticks, newest first (its interval as it really is).
    pub recent_ticks: Vec<i64>,
    pub blind: Option<BlindAlert>,
    pub channels: Vec<Channel>,
    pub timer: Timer,
    /// The follow service and whether the user's systemd has either unit enabled.
    pub services: Services,
    /// Each source read lately, with the time of the last tick that read it, newest first.
    pub sources_read: Vec<(String, i64)>,
    /// `[follow] full_every_secs` in ms: a running follow service ticks fully at least this often.
    pub follow_full_ms: i64,
    pub loops: Vec<Loop>,
    pub episodes: Vec<EpisodeRow>,
    pub rollups: Vec<Rollup>,
    pub blocks: Vec<Block>,
    /// What keeps the state directory from recording ticks (full, not writable, deleted).
    pub state: Option<String>,
    /// Open alerts past the [`LOOPS_SHOWN`] drawn, and how many of them are loops.
    pub hidden: (usize, usize),
    /// Episodes of the 7 days past the [`EPISODES_SHOWN`] listed.
    pub episodes_hidden: usize,
}

/// The most episodes the page lists (the latest first).
pub const EPISODES_SHOWN: usize = 1000;

/// The most open alerts the page draws (the most severe first): past that it says how many
/// more and where to list them, so the page's size and time are bounded by what it shows.
pub const LOOPS_SHOWN: usize = 300;

#[derive(Debug, Clone)]
pub struct LastTick {
    /// When the last tick was recorded (in follow mode, the last read: a second ago or so).
    pub t: i64,
    pub outcome: String,
    pub sessions: i64,
    pub flagged: i64,
    pub duration_ms: i64,
    pub blind: Option<String>,
    /// `timer` or `follow`: which pipeline recorded it.
    pub mode: String,
    /// A follow mode's partial tick is false.
    pub full: bool,
    /// The last full tick (a timer tick is always full).
    pub last_full: Option<i64>,
    /// When the tick that `outcome`, `sessions`, `flagged` and `duration_ms` are of was
    /// recorded: the last tick, but in follow mode the last full one
    /// ([`crate::store::ticks::SHOWN_TICK`]).
    pub figures_at: i64,
    /// The latest step of the wall clock the follow service noticed in the last day: (when, by
    /// how much in ms, negative back).
    pub clock_step: Option<(i64, i64)>,
}

/// The follow service's unit as installed, and what `systemctl --user is-enabled` says of the
/// two units (`None` where there is no user manager to ask).
#[derive(Debug, Clone, Default)]
pub struct Services {
    pub follow_unit: Option<PathBuf>,
    pub follow_enabled: Option<bool>,
    /// `systemctl --user is-active` of the follow service: whether its fresh ticks come from
    /// the unit or from a pipeline started by hand.
    pub follow_active: Option<bool>,
    pub timer_enabled: Option<bool>,
}

impl Services {
    /// The user manager says neither the follow service nor the timer is enabled.
    pub fn neither_enabled(&self) -> bool {
        self.follow_enabled == Some(false) && self.timer_enabled == Some(false)
    }
}

/// An open "watchdog is blind" alert.
#[derive(Debug, Clone)]
pub struct BlindAlert {
    pub since: i64,
    pub why: String,
}

#[derive(Debug, Clone)]
pub struct Channel {
    pub name: String,
    pub kind: String,
    pub enabled: bool,
    pub min_severity: String,
    pub overridden: bool,
    /// (time, status, detail) of the channel's last delivery attempt.
    pub last: Option<(i64, String, Option<String>)>,
}

/// The systemd timer that runs the tick, as installed.
#[derive(Debug, Clone, Default)]
pub struct Timer {
    pub unit: Option<PathBuf>,
    pub interval: Option<String>,
}

/// One open alert.
#[derive(Debug, Clone, Default)]
pub struct Loop {
    pub key: String,
    pub kind: String,
    pub root: String,
    pub severity: String,
    pub opened: i64,
    pub last_fired: i64,
    pub flagged_ticks: i64,
    pub agent: Option<String>,
    pub model: Option<String>,
    pub title: String,
    pub top_target: Option<String>,
    /// Loops: this episode's calls and cost (since the last landed change, less what an earlier
    /// episode of the same loop already counted: `base_*`).
    pub calls_since_landed: Option<i64>,
    pub cost_since_landed: Option<f64>,
    /// Calls and cost since the last landed change that an earlier episode of this loop (one
    /// that resolved as stopped, nothing landed since) already counted; 0 for a first episode.
    pub base_calls: i64,
    pub base_cost: f64,
    pub sessions: Vec<Flagged>,
    /// What its events tell of the session they are about: its id, project directory (as
    /// written, `~/work/app`) and title.
    pub session: Option<String>,
    pub project: Option<String>,
    pub session_title: Option<String>,
    /// The agent its events name (`details.program`; `None`: opencode's).
    pub program: Option<crate::record::Program>,
}

/// A flagged session of a loop's tree, at the latest tick that judged it.
#[derive(Debug, Clone, Default)]
pub struct Flagged {
    pub session: String,
    pub agent: Option<String>,
    pub reasons: String,
    pub top_target: Option<String>,
    pub calls: Option<i64>,
    pub calls_since_landed: Option<i64>,
    pub cost_since_landed: Option<f64>,
    pub first_flag_t: Option<i64>,
    /// When the loop began, as the detector's evidence says.
    pub loop_start_t: Option<i64>,
    /// When this episode began in this session, when it continues an earlier episode of the
    /// same loop (the session resumed after a `stopped` resolve): lifecycle's
    /// `episode_sessions.start`.
    pub episode_start_t: Option<i64>,
    /// Whether the page draws this session (see [`PICTURES_MAX`]).
    pub pictured: bool,
    /// Its latest calls, as many as the page's mark budget allows ([`MARKS_MAX`]).
    pub marks: Vec<CallMark>,
}

/// An alert episode of the last 7 days, open or closed (one row of lifecycle's `episodes`: a
/// key that fired again after it resolved has one episode per time).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EpisodeRow {
    pub id: i64,
    pub kind: String,
    pub root: String,
    pub state: String,
    /// The highest severity it reached (its `severity` drops to info on resolve).
    pub peak_severity: String,
    pub opened: i64,
    pub last_fired: i64,
    pub resolved: Option<i64>,
    /// Why it resolved.
    pub reason: Option<crate::event::Reason>,
    pub flagged_ticks: i64,
    pub agent: Option<String>,
    pub model: Option<String>,
    /// Loops: calls and cost since the last landed change, and the loop's start to its last
    /// call, as the last tick that judged it saw them.
    pub calls: Option<i64>,
    pub cost: Option<f64>,
    pub duration_ms: Option<i64>,
    /// Loops: its stop (issue 28) in one line, when one was asked.
    pub stop: Option<String>,
    /// Why it resolved, as its resolve said it ("the opencode process ended: ...", "the Claude Code process ended").
    pub why: Option<String>,
    /// What it was about: its alert's title, and for a loop what it repeats most.
    pub title: String,
    pub top_target: Option<String>,
    /// The session's title and project (its directory), as its latest event told them.
    pub session_title: Option<String>,
    pub project: Option<String>,
}

/// The per-model rollup over one window.
#[derive(Debug, Clone, Default)]
pub struct Rollup {
    pub label: &'static str,
    pub since: i64,
    pub rows: Vec<ModelRow>,
}

#[derive(Debug, Clone, Default)]
pub struct ModelRow {
    pub model: String,
    pub sessions: i64,
    pub share_sessions: f64,
    pub flagged: i64,
    pub share_flagged: f64,
    pub loop_cost: f64,
}

/// A model blocked by `wd-store block-model`, still blocked.
#[derive(Debug, Clone)]
pub struct Block {
    pub model: String,
    pub file: String,
    pub reason: Option<String>,
    pub who: String,
    pub t: i64,
}

/// Most flagged sessions of one tree that get a picture.
pub const PICTURES_PER_LOOP: usize = 3;

/// Pictures on the page: every open loop gets one; the second and third sessions of a tree get
/// theirs while the page has fewer than this.
pub const PICTURES_MAX: usize = 240;

/// Marks on the whole page: each picture shows at most its share of these (its session's
/// latest calls, at least [`MARKS_MIN`]), so the page stays under 1 MB however many loops are
/// open (~7 bytes a mark, ~1 KB a picture beside its marks).
pub const MARKS_MAX: usize = 30_000;
pub const MARKS_MIN: usize = 60;

/// Windows of the rollup.
pub const WINDOWS: [(&str, i64); 3] = [
    ("1 h", 3_600_000),
    ("1 d", 86_400_000),
    ("7 d", 7 * 86_400_000),
];

/// Reads the page's data from the store.
pub fn gather(store: &Store, cfg: &Config, now: i64) -> Result<PageData> {
    let c = &store.conn;
    let tick = last_tick(c)?;
    let recent_ticks = recent_ticks(c)?;
    let sources_read = sources_read(c)?;
    let blind = blind_alert(c)?;
    let channels = channels(store, cfg)?;
    let loops = open_loops(store)?;
    let hidden = alerts_not_drawn(c, &loops)?;
    let week = now - 7 * 86_400_000;
    let episodes = episodes(store, week, now)?;
    let episodes_hidden = episodes_not_listed(c, week, episodes.len())?;
    let mut rollups = Vec::new();
    for (label, span) in WINDOWS {
        rollups.push(rollup(store, label, now - span)?);
    }
    let blocks = blocks(store)?;
    Ok(PageData {
        now,
        clock: Clock::system(),
        db: store.path.clone(),
        tick,
        recent_ticks,
        blind,
        channels,
        timer: timer(),
        services: services(),
        sources_read,
        follow_full_ms: cfg.follow.full_every_secs as i64 * 1000,
        loops,
        episodes,
        rollups,
        blocks,
        state: store.dir_problem(),
        hidden,
        episodes_hidden,
    })
}

/// The latest tick, with the figures of the tick that says how things stand
/// ([`crate::store::ticks::SHOWN_TICK`]): a follow service's partial ticks judge only what changed.
fn last_tick(c: &Connection) -> Result<Option<LastTick>> {
    Ok(c.query_row(
        &format!(
            "SELECT l.t, {outcome}, {sessions}, {flagged}, t.duration_ms, t.blind, l.mode, l.full,
                -- backwards by id: a follow service writes a full tick every minute or so
                (SELECT t FROM ticks WHERE full = 1 ORDER BY id DESC LIMIT 1), t.t
             FROM ticks l, ticks t WHERE l.id = (SELECT max(id) FROM ticks)
                AND t.id = ({shown})",
            outcome = ticks::STANDING_OUTCOME,
            sessions = ticks::STANDING_SESSIONS,
            flagged = ticks::STANDING_FLAGGED,
            shown = ticks::SHOWN_TICK
        ),
        [],
        |r| {
            Ok(LastTick {
                t: r.get(0)?,
                outcome: r.get(1)?,
                sessions: r.get(2)?,
                flagged: r.get(3)?,
                duration_ms: r.get(4)?,
                blind: r.get(5)?,
                mode: r.get(6)?,
                full: r.get(7)?,
                last_full: r.get(8)?,
                figures_at: r.get(9)?,
                clock_step: None,
            })
        },
    )
    .optional()?
    .map(|mut t| {
        t.clock_step = ticks::last_step(c, t.t - 86_400_000).ok().flatten();
        t
    }))
}

/// Times of the 12 latest timer ticks, newest first: its interval as it really is, not as configured.
fn recent_ticks(c: &Connection) -> Result<Vec<i64>> {
    // the timer's ticks: the follow service's come every second and say nothing of the timer
    // (an operator read "recent ticks 4 s apart" on the timer's row); among the recent ticks only
    Ok(c.prepare(
        "SELECT t FROM ticks WHERE mode = 'timer' AND id > (SELECT max(id) - 5000 FROM ticks)
         ORDER BY id DESC LIMIT 12",
    )?
    .query_map([], |r| r.get(0))?
    .collect::<rusqlite::Result<Vec<i64>>>()?)
}

/// Each source the recent ticks read, with when it was last read, newest first.
fn sources_read(c: &Connection) -> Result<Vec<(String, i64)>> {
    // the recent ticks only: a follow service writes one a second while sessions work
    Ok(c.prepare(
        "SELECT j.value, max(t.t) FROM ticks t, json_each(t.sources) j
         WHERE t.id > (SELECT max(id) - 5000 FROM ticks) AND j.type = 'text'
         GROUP BY j.value ORDER BY 2 DESC, 1 LIMIT 50",
    )?
    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
    .collect::<rusqlite::Result<Vec<(String, i64)>>>()?)
}

/// The open blind alert, if any: the page says first that the watchdog cannot see.
fn blind_alert(c: &Connection) -> Result<Option<BlindAlert>> {
    Ok(c.query_row(
        "SELECT opened, coalesce(top_target, title) FROM alerts WHERE kind = 'blind' AND state = 'open'",
        [],
        |r| {
            Ok(BlindAlert {
                since: r.get(0)?,
                why: r.get(1)?,
            })
        },
    )
    .optional()?)
}

/// Open alerts past the ones drawn, and how many of them are loops: the page says how many
/// more there are instead of drawing them all.
fn alerts_not_drawn(c: &Connection, drawn: &[Loop]) -> Result<(usize, usize)> {
    let open: (usize, usize) = c.query_row(
        "SELECT count(*), coalesce(sum(kind = 'loop'), 0) FROM alerts WHERE state = 'open'",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let drawn_loops = drawn.iter().filter(|l| l.kind == "loop").count();
    Ok((
        open.0.saturating_sub(drawn.len()),
        open.1.saturating_sub(drawn_loops),
    ))
}

/// Episodes since `week` past the `listed` ones: the page lists at most [`EPISODES_SHOWN`]
/// and says how many more.
fn episodes_not_listed(c: &Connection, week: i64, listed: usize) -> Result<usize> {
    let all: usize = c.query_row(
        "SELECT count(*) FROM episodes WHERE state = 'open' OR resolved >= ?1 OR opened >= ?1",
        params![week],
        |r| r.get(0),
    )?;
    Ok(all.saturating_sub(listed))
}

/// The installed timer unit and its `OnUnitActiveSec=` (a drop-in's value wins).
fn timer() -> Timer {
    let dir = crate::paths::systemd_user_dir();
    let unit = dir.join("oc-watchdog.timer");
    let mut files = vec![unit.clone()];
    if let Ok(rd) = std::fs::read_dir(dir.join("oc-watchdog.timer.d")) {
        let mut d: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "conf"))
            .collect();
        d.sort();
        files.extend(d);
    }
    let mut interval = None;
    for f in &files {
        if let Ok(text) = std::fs::read_to_string(f) {
            for l in text.lines() {
                if let Some(v) = l.trim().strip_prefix("OnUnitActiveSec=") {
                    interval = (!v.trim().is_empty()).then(|| v.trim().to_string());
                }
            }
        }
    }
    Timer {
        unit: unit.exists().then_some(unit),
        interval,
    }
}

/// The follow service's unit, and what the user's systemd says is enabled.
fn services() -> Services {
    let unit = crate::paths::systemd_user_dir().join(FOLLOW_UNIT);
    Services {
        follow_unit: unit.exists().then_some(unit),
        follow_enabled: is_enabled(FOLLOW_UNIT),
        follow_active: is_active(FOLLOW_UNIT),
        timer_enabled: is_enabled("oc-watchdog.timer"),
    }
}

pub const FOLLOW_UNIT: &str = "oc-watchdog-follow.service";

/// `systemctl --user is-active UNIT`: `active` (or reloading), else not; `None` when there is
/// no systemctl or no user manager to answer (it then prints nothing).
fn is_active(unit: &str) -> Option<bool> {
    let out = std::process::Command::new("systemctl")
        .args(["--user", "is-active", unit])
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    let word = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!word.is_empty()).then_some(matches!(
        word.as_str(),
        "active" | "reloading" | "activating"
    ))
}

/// `systemctl --user is-enabled UNIT`: its word (`enabled`, `disabled`, ...), a unit file that
/// is not there is not enabled; `None` when there is no systemctl or no user manager to answer.
fn is_enabled(unit: &str) -> Option<bool> {
    let out = std::process::Command::new("systemctl")
        .args(["--user", "is-enabled", unit])
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    let word = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !word.is_empty() {
        return Some(matches!(word.as_str(), "enabled" | "enabled-runtime"));
    }
    String::from_utf8_lossy(&out.stderr)
        .contains("No such file")
        .then_some(false)
}

fn open_loops(store: &Store) -> Result<Vec<Loop>> {
    let c = &store.conn;
    let mut st = c.prepare(
        "SELECT dedup_key, kind, root, severity, opened, last_fired, flagged_ticks, agent, model, title, top_target,
                calls_since_landed, cost_since_landed, episode,
                (SELECT json_extract(e.body, '$.details.session') FROM events e WHERE e.episode = a.episode
                   AND json_extract(e.body, '$.details.session') IS NOT NULL ORDER BY e.id DESC LIMIT 1),
                (SELECT json_extract(e.body, '$.details.directory') FROM events e WHERE e.episode = a.episode
                   AND json_extract(e.body, '$.details.directory') IS NOT NULL ORDER BY e.id DESC LIMIT 1),
                (SELECT json_extract(e.body, '$.details.title') FROM events e WHERE e.episode = a.episode
                   AND json_extract(e.body, '$.details.title') IS NOT NULL ORDER BY e.id DESC LIMIT 1),
                (SELECT json_extract(e.body, '$.details.program') FROM events e WHERE e.episode = a.episode
                   AND json_extract(e.body, '$.details.program') IS NOT NULL ORDER BY e.id DESC LIMIT 1)
         FROM alerts a WHERE state = 'open'
         ORDER BY severity = 'critical' DESC, kind = 'loop' DESC, opened DESC, dedup_key
         LIMIT ?1",
    )?;
    let mut episodes: Vec<i64> = Vec::new();
    let mut loops = st
        .query_map([LOOPS_SHOWN as i64], |r| {
            Ok((
                r.get::<_, i64>(13)?,
                Loop {
                    key: r.get(0)?,
                    kind: r.get(1)?,
                    root: r.get(2)?,
                    severity: r.get(3)?,
                    opened: r.get(4)?,
                    last_fired: r.get(5)?,
                    flagged_ticks: r.get(6)?,
                    agent: r.get(7)?,
                    model: r.get(8)?,
                    title: r.get(9)?,
                    top_target: r.get(10)?,
                    calls_since_landed: r.get(11)?,
                    cost_since_landed: r.get(12)?,
                    session: r.get(14)?,
                    project: r
                        .get::<_, Option<String>>(15)?
                        .map(|d| crate::paths::short(&d)),
                    session_title: r.get(16)?,
                    program: r
                        .get::<_, Option<String>>(17)?
                        .and_then(|p| serde_json::from_value(p.into()).ok()),
                    ..Loop::default()
                },
            ))
        })?
        .map(|r| {
            r.map(|(e, l)| {
                episodes.push(e);
                l
            })
        })
        .collect::<rusqlite::Result<Vec<_>>>()?;
    trees(c, &mut loops, &episodes)?;
    picture(c, &mut loops)?;
    Ok(loops)
}

/// The configured channels as in effect, each with its last delivery attempt.
fn channels(store: &Store, cfg: &Config) -> Result<Vec<Channel>> {
    let c = &store.conn;
    let mut channels = Vec::new();
    for ch in crate::store::channels::effective(store, cfg)? {
        let last = c
            .query_row(
                "SELECT t, status, detail FROM deliveries WHERE channel = ?1 AND t IS NOT NULL ORDER BY t DESC LIMIT 1",
                params![ch.name],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        channels.push(Channel {
            kind: ch.type_name(),
            enabled: ch.enabled,
            min_severity: ch.min_severity,
            overridden: ch.overridden,
            name: ch.name,
            last,
        });
    }
    Ok(channels)
}

/// The models blocked now, newest first.
fn blocks(store: &Store) -> Result<Vec<Block>> {
    let c = &store.conn;
    let blocks = c
        .prepare(
            "SELECT model, file, reason, who, t FROM blocks WHERE unblocked IS NULL ORDER BY t DESC",
        )?
        .query_map([], |r| {
            Ok(Block {
                model: r.get(0)?,
                file: r.get(1)?,
                reason: r.get(2)?,
                who: r.get(3)?,
                t: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(blocks)
}

/// Each open loop's figures from its earlier episodes and its flagged sessions at the latest
/// tick that flagged its tree; `episodes[i]` is `loops[i]`'s episode.
fn trees(c: &Connection, loops: &mut [Loop], episodes: &[i64]) -> Result<()> {
    let mut base = c.prepare(
        "SELECT coalesce(sum(base_calls), 0), coalesce(sum(base_cost), 0) FROM episode_sessions
         WHERE episode = ?1 AND flagged = 1",
    )?;
    let mut start = c.prepare(
        "SELECT start FROM episode_sessions WHERE episode = ?1 AND session = ?2 AND base_calls > 0",
    )?;
    // by root and tick (`verdicts_root`), both: SQLite otherwise takes the primary key's tick
    // and filters that tick's verdicts by root, once per loop, so the page grew with the square
    // of the open loops (2,000 took 8 s, 20,000 some 15 min); the latest flagged tick is the
    // first met walking the root's ticks down
    let mut flagged = c.prepare(
        "SELECT session, agent, reasons, json_extract(signals, '$.top_target'), calls, calls_since_landed,
                cost_since_landed, first_flag_t, json_extract(evidence, '$.loop_start.t')
         FROM verdicts INDEXED BY verdicts_root WHERE root = ?1 AND flagged = 1
           AND tick = (SELECT tick FROM verdicts INDEXED BY verdicts_root WHERE root = ?1 AND flagged = 1
                       ORDER BY tick DESC LIMIT 1)
         ORDER BY calls_since_landed DESC, session",
    )?;
    for (l, &ep) in loops.iter_mut().zip(episodes) {
        if l.kind != "loop" {
            continue;
        }
        (l.base_calls, l.base_cost) =
            base.query_row(params![ep], |r| Ok((r.get(0)?, r.get(1)?)))?;
        l.sessions = flagged
            .query_map(params![l.root], |r| {
                Ok(Flagged {
                    session: r.get(0)?,
                    agent: r.get(1)?,
                    reasons: r.get(2)?,
                    top_target: r.get(3)?,
                    calls: r.get(4)?,
                    calls_since_landed: r.get(5)?,
                    cost_since_landed: r.get(6)?,
                    first_flag_t: r.get(7)?,
                    loop_start_t: r.get(8)?,
                    ..Flagged::default()
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        for f in &mut l.sessions {
            f.episode_start_t = start
                .query_row(params![ep, f.session], |r| r.get(0))
                .optional()?
                .flatten();
        }
    }
    Ok(())
}

/// Picks the sessions that get a picture (each loop's first, then the others in page order, see
/// [`PICTURES_MAX`]) and loads their latest calls within the page's mark budget.
fn picture(c: &Connection, loops: &mut [Loop]) -> Result<()> {
    let mut pictures = loops.iter().filter(|l| !l.sessions.is_empty()).count();
    let mut take = Vec::with_capacity(loops.len());
    for l in loops.iter() {
        let extra = l.sessions.len().min(PICTURES_PER_LOOP).saturating_sub(1);
        let extra = extra.min(PICTURES_MAX.saturating_sub(pictures));
        pictures += extra;
        take.push(if l.sessions.is_empty() { 0 } else { 1 + extra });
    }
    let cap = (MARKS_MAX / pictures.max(1)).clamp(MARKS_MIN, marks::KEEP);
    for (l, n) in loops.iter_mut().zip(take) {
        for f in l.sessions.iter_mut().take(n) {
            f.pictured = true;
            let mut m = marks::load(c, &f.session)?;
            f.marks = m.split_off(m.len().saturating_sub(cap));
        }
    }
    Ok(())
}

/// Episodes open now, or opened or resolved since `since`, newest first.
fn episodes(store: &Store, since: i64, now: i64) -> Result<Vec<EpisodeRow>> {
    let mut st = store.conn.prepare(&format!(
        "SELECT id, kind, root, state, peak_severity, opened, last_fired, resolved, reason, flagged_ticks,
                agent, model, calls, cost, {} AS duration_ms, {} AS stop,
                (SELECT json_extract(e.body, '$.details.why') FROM events e
                  WHERE e.episode = q.id AND e.state = 'resolve' ORDER BY e.id DESC LIMIT 1) AS why,
                title, top_target,
                (SELECT json_extract(e.body, '$.details.title') FROM events e WHERE e.episode = q.id
                   AND json_extract(e.body, '$.details.title') IS NOT NULL ORDER BY e.id DESC LIMIT 1),
                (SELECT json_extract(e.body, '$.details.directory') FROM events e WHERE e.episode = q.id
                   AND json_extract(e.body, '$.details.directory') IS NOT NULL ORDER BY e.id DESC LIMIT 1)
         FROM episodes q WHERE state = 'open' OR resolved >= ?1 OR opened >= ?1
         ORDER BY coalesce(resolved, last_fired) DESC, id DESC
         LIMIT ?3",
        crate::store::episodes::so_far("?2"),
        crate::store::episodes::STOP.replace("p.id", "q.id")
    ))?;
    let rows = st.query_map(params![since, now, EPISODES_SHOWN as i64], |r| {
        Ok(EpisodeRow {
            id: r.get(0)?,
            kind: r.get(1)?,
            root: r.get(2)?,
            state: r.get(3)?,
            peak_severity: r.get(4)?,
            opened: r.get(5)?,
            last_fired: r.get(6)?,
            resolved: r.get(7)?,
            reason: r
                .get::<_, Option<String>>(8)?
                .as_deref()
                .and_then(crate::event::Reason::parse),
            flagged_ticks: r.get(9)?,
            agent: r.get(10)?,
            model: r.get(11)?,
            calls: r.get(12)?,
            cost: r.get(13)?,
            duration_ms: r.get(14)?,
            stop: r.get(15)?,
            why: r.get(16)?,
            title: r.get(17)?,
            top_target: r.get(18)?,
            session_title: r.get(19)?,
            project: r.get(20)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

fn rollup(store: &Store, label: &'static str, since: i64) -> Result<Rollup> {
    let c = &store.conn;
    let mut st = c.prepare(
        &format!(
            "WITH {s},
              total AS (SELECT count(*) AS n, coalesce(sum(f), 0) AS nf FROM s),
              burned AS (SELECT coalesce(model, '(unknown)') AS k, sum(coalesce(cost_since_landed, 0)) AS cost
                         FROM alerts WHERE kind = 'loop' AND last_fired >= ?1 GROUP BY k)
         SELECT s.k, count(*), 1.0 * count(*) / (SELECT n FROM total), sum(s.f),
                1.0 * sum(s.f) / max(1, (SELECT nf FROM total)), coalesce((SELECT cost FROM burned b WHERE b.k = s.k), 0)
         FROM s GROUP BY s.k ORDER BY sum(s.f) DESC, count(*) DESC, s.k",
            s = crate::store::verdicts::sessions_by("model")
        ),
    )?;
    let rows = st
        .query_map(params![since], |r| {
            Ok(ModelRow {
                model: r.get(0)?,
                sessions: r.get(1)?,
                share_sessions: r.get(2)?,
                flagged: r.get(3)?,
                share_flagged: r.get(4)?,
                loop_cost: r.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Rollup { label, since, rows })
}

/// Writes `text` to `path` atomically: a temp file in the same directory, renamed over it.
pub fn write_atomic(path: &Path, text: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".report.")
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a temp file in {}", dir.display()))?;
    std::io::Write::write_all(&mut tmp, text)
        .with_context(|| format!("cannot write {}", tmp.path().display()))?;
    tmp.as_file().sync_all().ok();
    // the page names sessions, directories and commands: the user's alone, like the database
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o600)).ok();
    tmp.persist(path)
        .with_context(|| format!("cannot rename into {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Reason;

    /// The page's rollup counts a session once, under the model its latest verdicts name, as
    /// `wd-store rollup` does (one CTE).
    #[test]
    fn the_pages_rollup_counts_a_session_first_judged_without_a_model_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("w.db")).unwrap();
        crate::store::verdicts::tests::judged(
            &mut store,
            &[
                (1, "ses_run", None, false),
                (2, "ses_run", Some("sim/m"), true),
                (2, "ses_tui", Some("sim/m"), false),
            ],
        );
        let r = rollup(&store, "today", 0).unwrap();
        let rows: Vec<_> = r
            .rows
            .iter()
            .map(|m| (m.model.as_str(), m.sessions, m.flagged))
            .collect();
        assert_eq!(rows, [("sim/m", 2, 1)]);
    }

    /// Issue 30, point 5: the page names sessions and commands; it is the user's alone.
    #[test]
    fn the_page_is_written_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("report.html");
        write_atomic(&p, b"<p>x</p>").unwrap();
        let m = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(m, 0o600);
        assert_eq!(std::fs::read(&p).unwrap(), b"<p>x</p>");
    }

    #[test]
    fn episodes_come_from_the_episodes_table_closed_ones_and_repeats_of_a_key_included() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("w.db")).unwrap();
        let day = 86_400_000;
        let now = 1_796_000_000_000;
        let ins = |key: &str,
                   state: &str,
                   opened: i64,
                   resolved: Option<i64>,
                   reason: Option<&str>,
                   dur: Option<i64>| {
            store
                .conn
                .execute(
                    "INSERT INTO episodes (dedup_key, kind, root, state, severity, peak_severity, opened, last_fired,
                        resolved, reason, agent, model, calls, cost, duration_ms)
                     VALUES (?1, 'loop', ?2, ?3, 'info', 'critical', ?4, ?4, ?5, ?6, 'build', 'sim/m', 41, 0.37, ?7)",
                    params![key, key.trim_start_matches("loop:"), state, opened, resolved, reason, dur],
                )
                .unwrap();
        };
        // one tree looped, stopped, and loops again: two episodes of one key
        ins(
            "loop:ses_a",
            "resolved",
            now - 2 * day,
            Some(now - 2 * day + 600_000),
            Some("stopped"),
            Some(540_000),
        );
        ins("loop:ses_a", "open", now - 3_600_000, None, None, None);
        // closed 8 days ago: not on the page
        ins(
            "loop:ses_b",
            "resolved",
            now - 9 * day,
            Some(now - 8 * day),
            Some("progress"),
            None,
        );
        // opened 10 days ago, resolved 6 days ago by progress: on the page
        ins(
            "loop:ses_c",
            "resolved",
            now - 10 * day,
            Some(now - 6 * day),
            Some("progress"),
            None,
        );
        let eps = episodes(&store, now - 7 * day, now).unwrap();
        let got: Vec<(&str, &str, Option<Reason>, Option<i64>)> = eps
            .iter()
            .map(|e| (e.root.as_str(), e.state.as_str(), e.reason, e.duration_ms))
            .collect();
        assert_eq!(
            got,
            vec![
                // open: its duration runs until now
                ("ses_a", "open", None, Some(3_600_000)),
                ("ses_a", "resolved", Some(Reason::Stopped), Some(540_000)),
                ("ses_c", "resolved", Some(Reason::Progress), None),
            ]
        );
        assert_eq!(eps[1].peak_severity, "critical");
        let page = PageData {
            now,
            episodes: eps,
            ..PageData::default()
        };
        let html = html::render(&page);
        assert!(html.contains("(1 open, 2 closed)"), "{html}");
        // the loop's own length where the tick measured it, else how long the alert was open
        assert!(
            html.contains("<td>stopped: its sessions went idle <small>11-28 "),
            "{html}"
        );
        assert!(
            html.contains("</td><td>9 min</td><td>41</td><td>$0.37</td></tr>"),
            "{html}"
        );
        assert!(html.contains("</td><td>4 d 0 h</td><td>41</td>"), "{html}");
        assert!(
            html.contains("<b>open</b></td><td>1 h 0 min</td>"),
            "{html}"
        );
    }

    /// Regression (#30, point 6): every open alert was drawn, so the page grew without bound
    /// (20,000 open loops: some 15 minutes, inside every tick).
    #[test]
    fn past_loops_shown_the_page_says_how_many_more_and_draws_none_of_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("w.db")).unwrap();
        let tx = store.write().unwrap();
        for a in 0..LOOPS_SHOWN + 5 {
            let root = format!("ses_{a:04}");
            tx.execute(
                "INSERT INTO episodes (dedup_key, kind, root, state, severity, peak_severity, opened, last_fired)
                 VALUES (?1, ?2, ?3, 'open', 'warning', 'warning', ?4, ?4)",
                params![
                    format!("loop:{root}"),
                    if a % 2 == 0 { "loop" } else { "stalled" },
                    root,
                    1_000 + a as i64
                ],
            )
            .unwrap();
        }
        tx.commit().unwrap();
        let page = gather(&store, &Config::default(), 10_000).unwrap();
        assert_eq!(page.loops.len(), LOOPS_SHOWN);
        // the loops first, then the newest: the 5 oldest stalled alerts are left out
        assert_eq!(page.hidden, (5, 0));
        let html = html::render(&page);
        assert!(
            html.contains("Loops now <small>(153 loops open)</small>"),
            "{html}"
        );
        assert!(
            html.contains("Sessions that need a look <small>(147 alerts open, not loops)</small>"),
            "{html}"
        );
        assert!(html.contains(
            "The 300 most severe open alerts are drawn here; 5 more are open (0 of them loops): <code>wd-store loops</code> lists them all."
        ));
    }

    /// Regression (#41): an open "unfinished todos" alert was drawn under "Loops now (1 open
    /// alert)" with no "Nothing is looping", as if the session looped.
    #[test]
    fn an_unfinished_todos_alert_is_not_listed_as_a_loop() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("w.db")).unwrap();
        let tx = store.write().unwrap();
        tx.execute(
            "INSERT INTO episodes (dedup_key, kind, root, state, severity, peak_severity, opened, last_fired, title)
             VALUES ('unfinished:ses_u', 'unfinished', 'ses_u', 'open', 'info', 'info', 1000, 1000,
                     'opencode build session stopped with its own list unfinished')",
            [],
        )
        .unwrap();
        tx.commit().unwrap();
        let page = gather(&store, &Config::default(), 10_000).unwrap();
        let html = html::render(&page);
        let (loops, others) = html.split_once("<h2 id=\"others\">").expect(&html);
        let loops = &loops[loops.find("<section id=\"loops\">").unwrap()..];
        assert_eq!(
            loops,
            "<section id=\"loops\"><h2>Loops now <small>(0 loops open)</small></h2><p class=\"ok\">Nothing is looping.</p>"
        );
        assert!(
            others.starts_with(
                "Sessions that need a look <small>(1 alert open, not loops)</small></h2><article id=\"ses_u\" class=\"info\" data-kind=\"unfinished\"><h3><span class=\"sev\">info</span>opencode build session stopped with its own list unfinished</h3>"
            ),
            "{others}"
        );
        assert!(
            html.contains(
                "<a href=\"#loops\">Loops now (0)</a><a href=\"#others\">Need a look (1)</a>"
            ),
            "{html}"
        );
    }

    #[test]
    fn a_page_with_many_loops_draws_each_pictures_latest_calls_within_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("w.db")).unwrap();
        let tx = store.write().unwrap();
        tx.execute(
            "INSERT INTO ticks (id, t, duration_ms, sessions, flagged, outcome) VALUES (1, 1, 1, 251, 251, 'flagged')",
            [],
        )
        .unwrap();
        // 250 open loops of 200 kept calls each; the first tree has a second flagged session
        for a in 0..250 {
            let root = format!("ses_{a:03}");
            tx.execute(
                "INSERT INTO episodes (dedup_key, kind, root, state, severity, peak_severity, opened, last_fired)
                 VALUES (?1, 'loop', ?2, 'open', 'warning', 'warning', ?3, ?3)",
                params![format!("loop:{root}"), root, 1_000 + a],
            )
            .unwrap();
            let sessions = if a == 249 {
                vec![root.clone(), format!("{root}_sub")]
            } else {
                vec![root.clone()]
            };
            for (k, s) in sessions.iter().enumerate() {
                tx.execute(
                    "INSERT INTO verdicts (tick, t, session, root, flagged, reasons, calls, calls_since_landed)
                     VALUES (1, 1, ?1, ?2, 1, 'top', 200, ?3)",
                    params![s, root, 100 - k as i64],
                )
                .unwrap();
                for i in 0..200 {
                    tx.execute(
                        "INSERT INTO call_marks (session, seq, t, tool, landed, failed, target, target_key)
                         VALUES (?1, ?2, ?2, 'read', 0, 0, 'read a', 'k')",
                        params![s, i],
                    )
                    .unwrap();
                }
            }
        }
        tx.commit().unwrap();
        let loops = open_loops(&store).unwrap();
        assert_eq!(loops.len(), 250);
        // 250 pictures share 30,000 marks: 120 each, the latest ones
        for l in &loops {
            let f = &l.sessions[0];
            assert!(f.pictured);
            assert_eq!(f.marks.len(), 120, "{}", l.root);
            assert_eq!((f.marks[0].seq, f.marks[119].seq), (80, 199));
        }
        // no room for a second picture of a tree: the page says so
        let last = loops.iter().find(|l| l.root == "ses_249").unwrap();
        assert_eq!(last.sessions.len(), 2);
        assert!(!last.sessions[1].pictured && last.sessions[1].marks.is_empty());
        let html = html::render(&PageData {
            loops,
            ..PageData::default()
        });
        assert_eq!(html.matches("<svg class=\"pic\"").count(), 250);
        assert!(
            html.contains("1 more flagged session without a picture"),
            "{html}"
        );
        assert!(
            !html.contains("dotted blue"),
            "no resumed loop, no legend for it"
        );
        assert_eq!(
            html.matches("<title>the last 120 of 200 calls (read 120)")
                .count(),
            250
        );
    }

    #[test]
    fn a_loop_that_resumed_after_a_stopped_resolve_shows_its_own_figures_and_where_it_resumed() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("w.db")).unwrap();
        let t = 1_796_000_000_000;
        let tx = store.write().unwrap();
        tx.execute_batch(&format!(
            "INSERT INTO ticks (id, t, duration_ms, sessions, flagged, outcome) VALUES (1, {t}, 1, 1, 1, 'flagged');
             INSERT INTO episodes (id, dedup_key, kind, root, state, severity, peak_severity, opened, last_fired, calls, cost)
               VALUES (7, 'loop:ses_r', 'loop', 'ses_r', 'open', 'warning', 'warning', {t}, {t}, 18, 0.18);
             INSERT INTO verdicts (tick, t, session, root, flagged, reasons, calls, calls_since_landed, cost_since_landed)
               VALUES (1, {t}, 'ses_r', 'ses_r', 1, 'top', 90, 70, 0.70);
             INSERT INTO episode_sessions (episode, session, calls, calls_since_landed, cost_since_landed, flagged,
                 base_calls, base_cost, start)
               VALUES (7, 'ses_r', 90, 70, 0.70, 1, 52, 0.52, {});",
            t - 60_000
        ))
        .unwrap();
        tx.commit().unwrap();
        let loops = open_loops(&store).unwrap();
        assert_eq!((loops[0].base_calls, loops[0].base_cost), (52, 0.52));
        assert_eq!(loops[0].calls_since_landed, Some(18));
        assert_eq!(loops[0].sessions[0].episode_start_t, Some(t - 60_000));
        let html = html::render(&PageData {
            now: t,
            loops,
            ..PageData::default()
        });
        assert!(
            html.contains("<span>dotted blue \"resumed\": where the loop took up again"),
            "the legend explains the line: {html}"
        );
        assert!(
            html.contains("<tr><td>this episode</td><td>18 calls, $0.18 <small>(since it resumed; with the 52 calls, $0.52 an earlier episode of this loop counted: 70 calls, $0.70 since the last landed change)</small>"),
            "{html}"
        );
    }
}
