//! `wd-store check-config`: a config that does not load stops every command, so the watchdog
//! watches nothing; this makes sure the operator learns it. The tick script runs it first and
//! the follow script until the config loads (every minute).
//!
//! On a config that does not load it rewrites the page from what the database last recorded
//! (read with the defaults) with the error in its banner, and shows a desktop notification
//! (the desktop channel's notifier, default settings) once per distinct error: the error
//! alerted last is kept in `$XDG_STATE_HOME/oc-watchdog/not-watching` and forgotten when the
//! config loads again, so a later mistake is told too.

use crate::cli::Exit;
use crate::config::Config;
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
