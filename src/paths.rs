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

/// Makes `dir` a directory private to this user: created (with its missing parents) 0700, or,
/// when it is this user's already, its mode narrowed to 0700. One that is a link, or another
/// user's (an `XDG_STATE_HOME` under /tmp made by someone else first), is refused: whoever owns
/// it could plant or read what the watchdog and the stop plugin exchange there.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let refuse = |why: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(refuse(format!("{} is not a directory", dir.display())));
    }
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    if me.is_some_and(|me| me != meta.uid()) {
        return Err(refuse(format!(
            "{} belongs to uid {}, not to this user",
            dir.display(),
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// The text of `file` when it is a regular file of this user's of at most `max` bytes; `None`
/// when there is none. Opened without following a link and without waiting (a FIFO there would
/// hold the reader, `/dev/zero` behind a link would fill its memory); anything else is an error
/// saying what it is.
pub fn read_own_small(file: &Path, max: u64) -> std::io::Result<Option<String>> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    const O_NONBLOCK: i32 = 0o4000;
    const O_NOFOLLOW: i32 = 0o400000;
    let refuse = |why: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: {why}", file.display()),
        )
    };
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK | O_NOFOLLOW)
        .open(file)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(refuse("not a regular file"));
    }
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    if me.is_some_and(|me| me != meta.uid()) {
        return Err(refuse("not this user's"));
    }
    let mut text = String::new();
    f.take(max + 1).read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(refuse("too large"));
    }
    Ok(Some(text))
}

/// Claude Code's own directory, as Claude Code finds it: `$CLAUDE_CONFIG_DIR` when set (and
/// absolute), else `~/.claude`.
pub fn claude_code_dir() -> PathBuf {
    xdg_dir("CLAUDE_CONFIG_DIR", ".claude")
}

/// Codex CLI's own directory, as Codex finds it: `$CODEX_HOME` when set (and absolute), else
/// `~/.codex`.
pub fn codex_dir() -> PathBuf {
    xdg_dir("CODEX_HOME", ".codex")
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

    fn mode(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
    }

    /// The stop directory was made with the umask's mode (0755, 0775 under a private group),
    /// and the plugin ignores a directory others can write to.
    #[test]
    fn the_state_and_stop_directories_are_made_private() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let stop = t.path().join("state/oc-watchdog/stop");
        private_dir(&stop).unwrap();
        assert_eq!(mode(&stop), 0o700);
        assert_eq!(mode(&t.path().join("state/oc-watchdog")), 0o700);
        std::fs::set_permissions(&stop, std::fs::Permissions::from_mode(0o775)).unwrap();
        private_dir(&stop).unwrap();
        assert_eq!(mode(&stop), 0o700);
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&stop, &link).unwrap();
        let e = private_dir(&link).unwrap_err();
        assert!(e.to_string().ends_with("link is not a directory"), "{e}");
    }

    /// wd-store stop read the plugin's acknowledgement with read_to_string: a FIFO there held
    /// it, /dev/zero behind a link filled its memory.
    #[test]
    fn a_small_file_is_read_only_when_it_is_a_regular_file_of_ones_own() {
        let t = tempfile::tempdir().unwrap();
        let f = |n: &str| t.path().join(n);
        assert_eq!(read_own_small(&f("none"), 10).unwrap(), None);
        std::fs::write(f("ok"), "{}\n").unwrap();
        assert_eq!(
            read_own_small(&f("ok"), 10).unwrap().as_deref(),
            Some("{}\n")
        );
        std::fs::write(f("big"), "x".repeat(11)).unwrap();
        let e = read_own_small(&f("big"), 10).unwrap_err().to_string();
        assert!(e.ends_with("big: too large"), "{e}");
        std::os::unix::fs::symlink("/dev/zero", f("zero")).unwrap();
        assert!(read_own_small(&f("zero"), 10).is_err());
        assert!(std::process::Command::new("mkfifo")
            .arg(f("fifo"))
            .status()
            .unwrap()
            .success());
        let e = read_own_small(&f("fifo"), 10).unwrap_err().to_string();
        assert!(e.ends_with("fifo: not a regular file"), "{e}");
    }

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
