//! `wd-store check-config`: a config that does not load stops every command, so the watchdog
//! watches nothing; this makes sure the operator learns it. The tick script runs it first and
//! the follow script until the config loads (every minute).
//!
//! On a config that does not load it rewrites the page from what the database last recorded
//! (read with the defaults) with the error in its banner, and shows a desktop notification
//! (the desktop channel's notifier, default settings) once per distinct error: the error
//! alerted last is kept in `$XDG_STATE_HOME/oc-watchdog/not-watching` and forgotten when the
//! config loads again, so a later mistake is told too.
//!
//! With a config that loads it checks that a tick can be recorded: a state directory whose
//! filesystem is full is said (exit 2, so the follow service waits and checks again every
//! minute instead of restarting its pipeline into the same wall) and told straight to every
//! enabled channel, once, with its resolve when there is room again ([`check`]).

use crate::cli::Exit;
use crate::config::Config;
use crate::event::{AlertKind, Event, Transition};
use crate::severity::Severity;
use crate::store::Store;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long the notification server is given to show the popup (the desktop channel's
/// default `timeout_secs`).
const SHOW_WAIT: Duration = Duration::from_secs(5);

/// The error alerted last.
fn sent_file() -> PathBuf {
    crate::paths::state_dir().join("not-watching")
}

/// The config loads: a later error is new again.
pub fn watching() -> Result<Exit> {
    let _ = std::fs::remove_file(sent_file());
    Ok(Exit::Ok)
}

/// The config at `config` failed with `e`: the page and (once per error) the desktop say so.
/// `db` is `--db`; `page` the page's path (`[report] file` as far as the broken config
/// says it).
pub fn not_watching(config: Option<&Path>, db: Option<PathBuf>, e: &anyhow::Error, now: i64) {
    let shown = config.map_or_else(crate::paths::config_file, Path::to_path_buf);
    let why = format!("{e:#}");
    let (page_file, db_file) = configured_paths(&shown);
    let db = db
        .or(db_file)
        .unwrap_or_else(|| crate::paths::store_db(None));
    let page_file = crate::paths::report_file(page_file.as_deref());
    let said = format!(
        "the watchdog is not watching: {why}; fix it: the follow service reads it again every minute, the timer at its next tick"
    );
    match write_page(&db, &page_file, &said, now) {
        Ok(()) => eprintln!(
            "wd-store: the watchdog is not watching until the config loads; the page says so: {}",
            page_file.display()
        ),
        Err(e) => eprintln!("wd-store: the page was not rewritten: {e:#}"),
    }
    if std::fs::read_to_string(sent_file()).is_ok_and(|s| s == why) {
        return;
    }
    let body = format!(
        "{why}\nFix it: the follow service reads it again every minute, the timer at its next tick.\nThe page: {}",
        page_file.display()
    );
    let notice = crate::notify::Notice {
        summary: "watchdog is not watching: its config does not load",
        body: &body,
        urgency: "critical",
        url: None,
        replaces: None,
        stop: None,
        // needs a person: stays until dismissed
        expire_ms: 0,
    };
    match crate::notify::show(&notice, SHOW_WAIT) {
        Ok(_) => {
            let _ = std::fs::create_dir_all(crate::paths::state_dir());
            if let Err(e) = std::fs::write(sent_file(), &why) {
                eprintln!("wd-store: {}: {e}", sent_file().display());
            }
        }
        Err(e) => eprintln!("wd-store: the desktop notification was not shown: {e}"),
    }
}

/// `[report] file` and `[store] db` as far as a config that does not load says them: a
/// mistyped key elsewhere leaves them readable.
fn configured_paths(config: &Path) -> (Option<PathBuf>, Option<PathBuf>) {
    let table: Option<toml::Table> = std::fs::read_to_string(config)
        .ok()
        .and_then(|t| t.parse().ok());
    let get = |section: &str, key: &str| {
        table
            .as_ref()?
            .get(section)?
            .get(key)?
            .as_str()
            .map(PathBuf::from)
    };
    (get("report", "file"), get("store", "db"))
}

/// The page from what the database last recorded, read with the defaults, `said` in its
/// banner; a database not made yet gives the banner alone. Nothing is created.
fn write_page(db: &Path, page_file: &Path, said: &str, now: i64) -> Result<()> {
    let cfg = Config::default();
    let mut page = if db.exists() {
        let store = Store::open_with(db, cfg.store_busy())?;
        crate::report::gather(&store, &cfg, now)?
    } else {
        crate::report::PageData {
            now,
            clock: crate::clock::Clock::system(),
            ..Default::default()
        }
    };
    page.state = Some(said.to_string());
    crate::report::write_atomic(page_file, crate::report::html::render(&page).as_bytes())
}

/// The least free space the state directory's filesystem needs for a tick to be recorded.
const FREE_MIN: u64 = 1 << 20;

/// The dedup key of "the watchdog cannot record", told outside the database (which cannot take
/// it), so its own blind alert (`watchdog-blind`) is never resolved by this one's resolve.
pub const UNRECORDED_KEY: &str = "watchdog-unrecorded";

/// Where it is kept that the channels were told, while the state directory cannot take it:
/// the runtime directory (`$XDG_RUNTIME_DIR`, a tmpfs of its own), else the state directory
/// (where the write fails on a full disk: told again each minute).
fn told_file() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(crate::paths::state_dir, PathBuf::from)
        .join("oc-watchdog-unrecorded")
}

/// Why a tick could not be recorded in `db` now, if it could not: its filesystem is full (less
/// than [`FREE_MIN`] free for this user). A directory not made yet is looked at where it would be.
fn unrecordable(db: &Path) -> Option<String> {
    let mut dir = db.parent()?;
    while !dir.exists() {
        dir = dir.parent()?;
    }
    let st = rustix::fs::statvfs(dir).ok()?;
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    (free < FREE_MIN).then(|| {
        format!(
            "state directory {}: full ({} KiB free): ticks cannot be recorded",
            dir.display(),
            free >> 10
        )
    })
}

/// `wd-store check-config` with a config that loads: can a tick be recorded? When the state
/// directory's filesystem is full, the pipeline would end at its first write, over and over,
/// and nothing would be told (the outbox is in the database): this says why (exit 2, which the
/// scripts take as "not watching": the follow service waits and checks again every minute) and
/// tells every enabled channel once, straight, with no database. When there is room again, the
/// channels told hear the resolve.
pub fn check(cfg: &Config, db: &Path, now: i64) -> Result<Exit> {
    let told = std::fs::read_to_string(told_file()).ok();
    let Some(why) = unrecordable(db) else {
        if told.is_some() {
            let summary = format!(
                "the watchdog records and watches again: {} has room",
                db.display()
            );
            tell(cfg, Transition::Resolve, Severity::Info, &summary, now);
            let _ = std::fs::remove_file(told_file());
        }
        return watching();
    };
    eprintln!(
        "wd-store: {why}; the watchdog is not watching until there is room: the follow service checks again every minute, the timer at its next tick"
    );
    // told once a channel took it; none did (none enabled, or none answered): again next time
    if told.as_deref() != Some(why.as_str())
        && tell(cfg, Transition::Trigger, Severity::Critical, &why, now)
    {
        if let Err(e) = std::fs::write(told_file(), &why) {
            eprintln!("wd-store: {}: {e}", told_file().display());
        }
    }
    Ok(Exit::Error)
}

/// Delivers "the watchdog cannot record" (or its resolve) straight to every enabled channel;
/// true when one took it.
fn tell(cfg: &Config, state: Transition, severity: Severity, summary: &str, now: i64) -> bool {
    let resolve = state == Transition::Resolve;
    let mut told = false;
    for ch in cfg.channels.iter().filter(|c| c.enabled) {
        let ev = Event {
            dedup_key: UNRECORDED_KEY.into(),
            severity,
            state,
            title: if resolve {
                "watchdog records again".into()
            } else {
                "watchdog is blind: it cannot record".into()
            },
            summary: summary.to_string(),
            details: serde_json::Map::new(),
            source: cfg.alert.source.clone(),
            t: now,
            alert: AlertKind::Blind,
            root: UNRECORDED_KEY.into(),
            reason: None,
            figures: None,
            episode: None,
            agent: None,
            model: None,
            link: None,
        };
        let wait = Duration::from_secs(ch.timeout_secs.max(1));
        match crate::channels::deliver(ch, &ev, now, wait, None) {
            Ok(s) => {
                told = true;
                eprintln!(
                    "wd-store: channel {}: told ({}) that the watchdog {}",
                    ch.name,
                    s.detail,
                    if resolve {
                        "records again"
                    } else {
                        "cannot record"
                    }
                )
            }
            Err(e) => eprintln!("wd-store: channel {}: not told: {e}", ch.name),
        }
    }
    told
}
