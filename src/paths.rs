//! Where things are: the XDG base directories, every default path the watchdog reads or writes,
//! how a path or URL came to be used, the host's name, and the `file://` links into the page.
//!
//! Nothing here reads the config or any other module of the crate, so every module (the config
//! included) can take its paths from here without an import circle. A default applies only where
//! the config names no path; the config's own accessors ([`crate::config::Config::store_db`],
//! ...) pass their setting in.

use serde::Serialize;
use std::path::{Path, PathBuf};

/// `$VAR` if set and absolute, else `$HOME/<fallback>` (the XDG base directory rule).
pub fn xdg_dir(var: &str, fallback: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(v) if Path::new(&v).is_absolute() => PathBuf::from(v),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/".into())).join(fallback),
    }
}

/// A directory as people write it: under `$HOME` as `~/work/app`, else as it is.
pub fn short(dir: &str) -> String {
    short_in(dir, std::env::var_os("HOME").as_deref().map(Path::new))
}

fn short_in(dir: &str, home: Option<&Path>) -> String {
    match home.and_then(|h| Path::new(dir).strip_prefix(h).ok()) {
        Some(rest) if rest.as_os_str().is_empty() => "~".into(),
        Some(rest) if home != Some(Path::new("/")) => format!("~/{}", rest.display()),
        _ => dir.to_string(),
    }
}

/// `$XDG_CONFIG_HOME`, else `~/.config`.
pub fn config_home() -> PathBuf {
    xdg_dir("XDG_CONFIG_HOME", ".config")
}

/// `$XDG_STATE_HOME/oc-watchdog`: the watchdog's database and page.
pub fn state_dir() -> PathBuf {
    xdg_dir("XDG_STATE_HOME", ".local/state").join("oc-watchdog")
}

/// The config file read when no `--config` is given: `$XDG_CONFIG_HOME/oc-watchdog/watchdog.toml`.
pub fn config_file() -> PathBuf {
    config_home().join("oc-watchdog/watchdog.toml")
}

/// The watchdog database: `configured` (`[store] db`), else `$XDG_STATE_HOME/oc-watchdog/watchdog.db`.
pub fn store_db(configured: Option<&Path>) -> PathBuf {
    configured.map_or_else(|| state_dir().join("watchdog.db"), Path::to_path_buf)
}

/// The operator's page: `configured` (`[report] file`), else
/// `$XDG_STATE_HOME/oc-watchdog/report.html`.
pub fn report_file(configured: Option<&Path>) -> PathBuf {
    configured.map_or_else(|| state_dir().join("report.html"), Path::to_path_buf)
}

/// The directory of the user's global opencode config (`opencode.jsonc` and its kin).
pub fn opencode_config_dir() -> PathBuf {
    config_home().join("opencode")
}

/// The directory of the user's systemd units (where the watchdog's timer is installed).
pub fn systemd_user_dir() -> PathBuf {
    config_home().join("systemd/user")
}

/// The database opencode itself writes: `$XDG_DATA_HOME/opencode/opencode.db`.
pub fn opencode_db_default() -> PathBuf {
    xdg_dir("XDG_DATA_HOME", ".local/share").join("opencode/opencode.db")
}

/// How a source came to be read: named on the command line, set in the config, opencode's own
/// default path, or found running. Its serde names are the `found` of `source` records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Found {
    Argument,
    Configured,
    Default,
    Discovered,
}

impl Found {
    /// The wire name (`argument`, `configured`, `default`, `discovered`).
    pub fn as_str(self) -> &'static str {
        match self {
            Found::Argument => "argument",
            Found::Configured => "configured",
            Found::Default => "default",
            Found::Discovered => "discovered",
        }
    }
}

/// The opencode database to read and how it was named: `--db PATH` (an empty `--db` names none),
/// else `[opencode] db`, else opencode's own path. The one place this is decided.
pub fn opencode_db(arg: Option<&Path>, configured: Option<&Path>) -> (PathBuf, Found) {
    match (arg, configured) {
        (Some(p), _) if !p.as_os_str().is_empty() => (p.to_path_buf(), Found::Argument),
        (_, Some(p)) => (p.to_path_buf(), Found::Configured),
        _ => (opencode_db_default(), Found::Default),
    }
}

/// This machine's name (`/proc/sys/kernel/hostname`), `localhost` when unreadable.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// `file://` URL of an absolute path, percent-encoding what a URL cannot hold.
pub fn file_url(p: &Path) -> String {
    let mut s = String::from("file://");
    for b in p.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            s.push(b as char);
        } else {
            s += &format!("%{b:02X}");
        }
    }
    s
}

/// The link an alert for `root` carries: `link_base` + root when set (`[alert] link_base`), else
/// the anchor of `root` on the page at `report_file`, as a `file://` URL.
pub fn page_link(link_base: &str, report_file: &Path, root: &str) -> String {
    if !link_base.is_empty() {
        return format!("{link_base}{root}");
    }
    format!("{}#{}", file_url(report_file), root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_under_home_reads_as_a_tilde_path() {
        let home = Some(Path::new("/home/ann"));
        assert_eq!(short_in("/home/ann/work/app", home), "~/work/app");
        assert_eq!(short_in("/home/ann", home), "~");
        assert_eq!(short_in("/home/anna/x", home), "/home/anna/x");
        assert_eq!(short_in("/srv/app", home), "/srv/app");
        assert_eq!(short_in("/srv/app", None), "/srv/app");
    }

    #[test]
    fn the_opencode_database_is_the_argument_then_the_config_then_opencodes_own() {
        let (arg, conf) = (Path::new("/a.db"), Path::new("/c.db"));
        assert_eq!(
            opencode_db(Some(arg), Some(conf)),
            (arg.to_path_buf(), Found::Argument)
        );
        // `--db` with no value names no path
        assert_eq!(
            opencode_db(Some(Path::new("")), Some(conf)),
            (conf.to_path_buf(), Found::Configured)
        );
        assert_eq!(
            opencode_db(Some(Path::new("")), None),
            (opencode_db_default(), Found::Default)
        );
    }

    #[test]
    fn found_names_are_the_wire_names() {
        for f in [
            Found::Argument,
            Found::Configured,
            Found::Default,
            Found::Discovered,
        ] {
            assert_eq!(serde_json::to_value(f).unwrap(), f.as_str());
        }
    }

    #[test]
    fn the_page_and_the_store_keep_their_own_files() {
        assert_eq!(store_db(None).file_name().unwrap(), "watchdog.db");
        assert_eq!(report_file(None).file_name().unwrap(), "report.html");
        assert_eq!(store_db(None).parent(), report_file(None).parent());
        assert_eq!(store_db(Some(Path::new("/s.db"))), Path::new("/s.db"));
    }

    #[test]
    fn links_are_file_urls_unless_a_base_is_set() {
        assert_eq!(
            page_link("", Path::new("/home/me/my page.html"), "ses_a"),
            "file:///home/me/my%20page.html#ses_a"
        );
        assert_eq!(
            page_link("https://w/s/", Path::new("/x"), "ses_a"),
            "https://w/s/ses_a"
        );
    }
}
