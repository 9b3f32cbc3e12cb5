//! The watchdog's configuration: one strict TOML file (`config/watchdog.toml` documents every
//! knob). An unknown key or channel type fails loading with a message naming it. Every command
//! takes `--config PATH`; without it, `$XDG_CONFIG_HOME/oc-watchdog/watchdog.toml` is read when it
//! exists, and built-in defaults apply otherwise.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `$VAR` if set and absolute, else `$HOME/<fallback>`.
pub fn xdg_dir(var: &str, fallback: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(v) if Path::new(&v).is_absolute() => PathBuf::from(v),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/".into())).join(fallback),
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub opencode: OpencodeConfig,
    pub detector: DetectorConfig,
    pub store: StoreConfig,
    pub alert: AlertConfig,
    pub second_opinion: SecondOpinionConfig,
    pub liveness: LivenessConfig,
    pub channels: Vec<ChannelConfig>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpencodeConfig {
    /// Servers to read besides those found running (opencode in a container, on another host).
    pub servers: Vec<String>,
    /// opencode's database, always read when it exists; unset means
    /// `$XDG_DATA_HOME/opencode/opencode.db`, the path opencode itself uses.
    pub db: Option<PathBuf>,
    /// Which running opencode servers to find and read (see [`Discover`]).
    pub discover: Discover,
    /// Seconds one server may take for everything a command asks of it, body reads included.
    pub server_deadline_secs: std::num::NonZeroU64,
    /// The largest response body read from a server, in MiB; a larger one is a blind record.
    pub body_cap_mib: std::num::NonZeroU64,
}

impl Default for OpencodeConfig {
    fn default() -> Self {
        OpencodeConfig {
            servers: Vec::new(),
            db: None,
            discover: Discover::Database,
            server_deadline_secs: std::num::NonZeroU64::new(10).unwrap(),
            body_cap_mib: std::num::NonZeroU64::new(256).unwrap(),
        }
    }
}

/// Which running opencode processes' servers `oc-sessions` finds (from `/proc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Discover {
    /// Those writing the database the watchdog reads: their sessions are the ones it judges.
    #[default]
    Database,
    /// Every opencode process readable in `/proc`, whatever database it writes.
    All,
    /// None: only the configured servers.
    Off,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DetectorConfig {
    pub window: usize,
    pub dup_min: f64,
    pub top_min: usize,
    pub top_min_ro: usize,
    pub cum_min: usize,
    pub cover_min: f64,
    pub min_calls: usize,
    pub short_top_min: usize,
    pub short_share_min: f64,
    /// `run`: identical calls back to back.
    pub run_min: usize,
    /// `cycle`: calls in a repeated block of 2-8 calls (at least two rounds).
    pub cycle_calls_min: usize,
    /// `same_failure`: the same failing output of one check in a row.
    pub same_failure_min: usize,
    /// `circling`: full passes over one file, in at least `circle_reads_min` reads.
    pub circle_passes_min: f64,
    pub circle_reads_min: usize,
    pub read_only_agents: Vec<String>,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        DetectorConfig {
            window: 60,
            dup_min: 0.25,
            top_min: 12,
            top_min_ro: 8,
            cum_min: 15,
            cover_min: 4.0,
            min_calls: 40,
            short_top_min: 8,
            short_share_min: 0.6,
            run_min: 5,
            cycle_calls_min: 6,
            same_failure_min: 5,
            circle_passes_min: 3.0,
            circle_reads_min: 12,
            read_only_agents: vec!["explore".into(), "librarian".into(), "oracle".into()],
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// The watchdog database; default `$XDG_STATE_HOME/oc-watchdog/watchdog.db`.
    pub db: Option<PathBuf>,
    /// Days of ticks and verdicts `wd-store prune` keeps when given no `--older-than`.
    pub retention_days: Option<u32>,
    /// How long a writer waits for another to finish, in ms.
    pub busy_timeout_ms: Option<u64>,
    /// Where `wd-store metrics` (and the tick) write Prometheus metrics; empty means nowhere.
    pub metrics_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertConfig {
    /// The flagged tick (1 at the trigger; only ticks with new calls and no landing count) on
    /// which an open loop alert escalates to critical.
    pub escalate_after_ticks: u32,
    /// Base of the "look closer" link in alerts; empty means none.
    pub link_base: String,
    /// The `source` of alert events.
    pub source: String,
}

impl Default for AlertConfig {
    fn default() -> Self {
        AlertConfig {
            escalate_after_ticks: 3,
            link_base: String::new(),
            source: "oc-watchdog".into(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecondOpinionConfig {
    pub enabled: bool,
    pub url: String,
    pub model: String,
    pub timeout_secs: u64,
    pub max_in_flight: usize,
}

impl Default for SecondOpinionConfig {
    fn default() -> Self {
        SecondOpinionConfig {
            enabled: false,
            url: "http://127.0.0.1:11434".into(),
            model: "qwen2.5-coder:7b".into(),
            timeout_secs: 20,
            max_in_flight: 3,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LivenessConfig {
    pub soft_secs: u64,
    pub hard_secs: u64,
    pub tool_grace_secs: u64,
    pub retry_attempts_max: u64,
    pub retry_secs_max: u64,
    /// Send one neutral continuation prompt into a stalled or unfinished session (off).
    pub nudge: bool,
}

impl Default for LivenessConfig {
    fn default() -> Self {
        LivenessConfig {
            soft_secs: 300,
            hard_secs: 900,
            tool_grace_secs: 60,
            retry_attempts_max: 5,
            retry_secs_max: 900,
            nudge: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    #[default]
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
    pub fn parse(s: &str) -> Result<Severity> {
        Ok(match s {
            "info" => Severity::Info,
            "warning" => Severity::Warning,
            "critical" => Severity::Critical,
            _ => bail!("unknown severity {s:?} (use info, warning or critical)"),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelType {
    Desktop,
    Webhook,
    Pagerduty,
    Alertmanager,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelConfig {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: ChannelType,
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default = "warning")]
    pub min_severity: Severity,
    /// Seconds between two notifications of one alert on this channel (resolves always go).
    #[serde(default = "rate")]
    pub rate_limit_secs: u64,
    /// Local hours `[start, end)` when nothing but resolves is sent, e.g. `[22, 7]`.
    #[serde(default)]
    pub quiet_hours: Option<[u8; 2]>,
    /// webhook: the URL; alertmanager: see `urls`.
    #[serde(default)]
    pub url: Option<String>,
    /// alertmanager: every URL is posted to.
    #[serde(default)]
    pub urls: Vec<String>,
    /// pagerduty: the environment variable holding the routing key.
    #[serde(default)]
    pub routing_key_env: Option<String>,
    /// pagerduty: the Events API endpoint.
    #[serde(default)]
    pub events_url: Option<String>,
    /// webhook: an environment variable whose value is sent as a bearer token.
    #[serde(default)]
    pub token_env: Option<String>,
    /// Seconds before a delivery attempt is given up.
    #[serde(default = "delivery_timeout")]
    pub timeout_secs: u64,
}

fn yes() -> bool {
    true
}
fn warning() -> Severity {
    Severity::Warning
}
fn rate() -> u64 {
    300
}
fn delivery_timeout() -> u64 {
    5
}

/// The default config path.
pub fn default_path() -> PathBuf {
    xdg_dir("XDG_CONFIG_HOME", ".config").join("oc-watchdog/watchdog.toml")
}

impl Config {
    /// Loads `path`, or the default path when it exists, or the defaults.
    pub fn load(path: Option<&Path>) -> Result<Config> {
        let (path, required) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (default_path(), false),
        };
        if !required && !path.exists() {
            return Ok(Config::default());
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("config {}: cannot read", path.display()))?;
        Config::parse(&text).with_context(|| format!("config {}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Config> {
        let c: Config = toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.message()))?;
        c.validate()?;
        Ok(c)
    }

    fn validate(&self) -> Result<()> {
        let d = &self.detector;
        if d.window == 0 {
            bail!("detector.window must be at least 1");
        }
        if !(0.0..=1.0).contains(&d.dup_min) {
            bail!("detector.dup_min must be between 0 and 1");
        }
        let l = &self.liveness;
        if l.hard_secs < 900 {
            bail!(
                "liveness.hard_secs must be at least 900 (got {})",
                l.hard_secs
            );
        }
        if l.soft_secs == 0 || l.soft_secs >= l.hard_secs {
            bail!("liveness.soft_secs must be above 0 and below liveness.hard_secs");
        }
        let mut names = std::collections::HashSet::new();
        for c in &self.channels {
            if !names.insert(&c.name) {
                bail!("channel {:?} is defined twice", c.name);
            }
            match c.kind {
                ChannelType::Webhook if c.url.is_none() => {
                    bail!("channel {:?}: a webhook needs url", c.name)
                }
                ChannelType::Pagerduty if c.routing_key_env.is_none() => {
                    bail!("channel {:?}: pagerduty needs routing_key_env", c.name)
                }
                ChannelType::Alertmanager if c.urls.is_empty() => {
                    bail!("channel {:?}: alertmanager needs urls", c.name)
                }
                _ => {}
            }
            if let Some([a, b]) = c.quiet_hours {
                if a > 23 || b > 23 {
                    bail!("channel {:?}: quiet_hours are hours 0-23", c.name);
                }
            }
        }
        Ok(())
    }

    /// The opencode database to read when one is wanted and none was named.
    pub fn opencode_db(&self) -> PathBuf {
        self.opencode
            .db
            .clone()
            .unwrap_or_else(crate::opencode::db::default_path)
    }

    /// The bounds of talking to one opencode server.
    pub fn opencode_limits(&self) -> crate::opencode::http::Limits {
        crate::opencode::http::Limits {
            deadline: std::time::Duration::from_secs(self.opencode.server_deadline_secs.get()),
            body_cap: self.opencode.body_cap_mib.get().saturating_mul(1 << 20),
        }
    }

    /// The watchdog database's busy timeout.
    pub fn store_busy(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.store.busy_timeout_ms.unwrap_or(5000))
    }

    /// The watchdog database.
    pub fn store_db(&self) -> PathBuf {
        self.store.db.clone().unwrap_or_else(|| {
            xdg_dir("XDG_STATE_HOME", ".local/state").join("oc-watchdog/watchdog.db")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_key_is_named() {
        let e = Config::parse("[detector]\nwindw = 3\n").unwrap_err();
        assert!(format!("{e:#}").contains("unknown field `windw`"), "{e:#}");
    }

    #[test]
    fn unknown_channel_type_is_named() {
        let e = Config::parse("[[channels]]\nname = \"x\"\ntype = \"sms\"\n").unwrap_err();
        assert!(format!("{e:#}").contains("unknown variant `sms`"), "{e:#}");
    }

    #[test]
    fn hard_threshold_is_never_below_900() {
        let e = Config::parse("[liveness]\nhard_secs = 600\n").unwrap_err();
        assert!(format!("{e:#}").contains("at least 900"), "{e:#}");
    }

    #[test]
    fn defaults_apply() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.detector.window, 60);
        assert_eq!(
            c.detector.read_only_agents,
            ["explore", "librarian", "oracle"]
        );
        assert!(!c.second_opinion.enabled);
        assert_eq!(c.opencode.discover, Discover::Database);
        assert_eq!(c.opencode_limits().deadline.as_secs(), 10);
        assert_eq!(c.opencode_limits().body_cap, 256 << 20);
    }

    #[test]
    fn opencode_bounds_are_never_zero() {
        let e = Config::parse("[opencode]\nserver_deadline_secs = 0\n").unwrap_err();
        assert!(format!("{e:#}").contains("nonzero"), "{e:#}");
        let e = Config::parse("[opencode]\ndiscover = \"some\"\n").unwrap_err();
        assert!(format!("{e:#}").contains("unknown variant `some`"), "{e:#}");
    }
}
