//! The watchdog's configuration: one strict TOML file (`config/watchdog.toml` documents every
//! knob). An unknown key or channel type fails loading with a message naming it. Every command
//! takes `--config PATH`; without it, `$XDG_CONFIG_HOME/oc-watchdog/watchdog.toml` is read when it
//! exists, and built-in defaults apply otherwise.

use crate::check::{Problems, YEAR};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub opencode: OpencodeConfig,
    pub detector: DetectorConfig,
    pub store: StoreConfig,
    pub alert: AlertConfig,
    pub second_opinion: SecondOpinionConfig,
    pub liveness: LivenessConfig,
    pub stop: StopConfig,
    pub report: ReportConfig,
    pub follow: FollowConfig,
    pub agents: AgentsConfig,
    pub channels: Vec<crate::channels::ChannelConfig>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReportConfig {
    /// The operator's page the tick rewrites; default `$XDG_STATE_HOME/oc-watchdog/report.html`.
    pub file: Option<PathBuf>,
    /// What a click on a desktop alert runs with the page's URL; empty means `xdg-open`.
    pub open_with: Option<String>,
    /// The user's opencode config that `wd-store block-model` edits; default
    /// `$XDG_CONFIG_HOME/opencode/opencode.jsonc`, else `opencode.json` there.
    pub opencode_config: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpencodeConfig {
    /// Servers to read besides those found running (opencode in a container, on another host).
    pub servers: Vec<String>,
    /// More sources to read, by the `source` strings the records carry: another opencode
    /// database (a second channel's, one named by `OPENCODE_DB`), a server URL (as `servers`),
    /// or any kind of source registered in `crate::sources`.
    pub sources: Vec<String>,
    /// opencode's database, always read when it exists; unset means
    /// `$XDG_DATA_HOME/opencode/opencode.db`, the path opencode itself uses.
    pub db: Option<PathBuf>,
    /// Which running opencode servers to find and read (see [`Discover`]).
    pub discover: Discover,
    /// Users (by uid) besides the watchdog's own whose running opencode processes discovery
    /// considers; by default none: another user's process is neither read nor sent credentials.
    pub discover_uids: Vec<u32>,
    /// Seconds one server may take for everything a command asks of it, body reads included.
    pub server_deadline_secs: std::num::NonZeroU64,
    /// The largest response body read from a server, in MiB; a larger one is a blind record.
    pub body_cap_mib: std::num::NonZeroU64,
    /// The most memory one response may take once parsed, in MiB (estimated as it streams in);
    /// a larger one is a blind record.
    pub parsed_cap_mib: std::num::NonZeroU64,
}

impl Default for OpencodeConfig {
    fn default() -> Self {
        OpencodeConfig {
            servers: Vec::new(),
            sources: Vec::new(),
            db: None,
            discover: Discover::Database,
            discover_uids: Vec::new(),
            server_deadline_secs: std::num::NonZeroU64::new(10).unwrap(),
            body_cap_mib: std::num::NonZeroU64::new(256).unwrap(),
            parsed_cap_mib: std::num::NonZeroU64::new(40).unwrap(),
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

/// `[detector]`: its keys are the detector's registry of thresholds (`detect::thresholds`).
pub use crate::detect::thresholds::DetectorConfig;

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
    /// Tell, as an info notice, each turn a root session finished (not stopped, interrupted,
    /// looping, stalled or waiting for a person), with what it landed. Off by default.
    pub notify_done: bool,
}

impl Default for AlertConfig {
    fn default() -> Self {
        AlertConfig {
            escalate_after_ticks: 3,
            link_base: String::new(),
            source: "oc-watchdog".into(),
            notify_done: false,
        }
    }
}

/// `[agents]`: which other agents' sessions `oc-sessions` reads besides opencode's, each only
/// where its data is (an agent not installed costs a `stat`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentsConfig {
    /// Claude Code's sessions, in `$CLAUDE_CONFIG_DIR` (else `~/.claude`).
    pub claude_code: bool,
    /// Codex CLI's sessions, in `$CODEX_HOME` (else `~/.codex`).
    pub codex: bool,
}

impl Default for AgentsConfig {
    fn default() -> Self {
        AgentsConfig {
            claude_code: true,
            codex: true,
        }
    }
}

/// `[follow]`: the live follow mode (`oc-watchdog-follow`, the `oc-watchdog-follow.service`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FollowConfig {
    /// How often the sources are asked what changed, in ms (a database answers from one
    /// `PRAGMA data_version` while nothing did).
    pub poll_ms: u64,
    /// Seconds between full reads (what a timer tick reads: liveness, gone sessions, time).
    pub full_every_secs: u64,
    /// An open loop alert escalates when the loop has gone on (new calls, nothing landed) this
    /// many minutes after its trigger...
    pub escalate_after_minutes: u64,
    /// ...or this many calls after it, whichever comes first.
    pub escalate_after_calls: u64,
}

impl Default for FollowConfig {
    fn default() -> Self {
        FollowConfig {
            poll_ms: 1000,
            full_every_secs: 60,
            escalate_after_minutes: 5,
            escalate_after_calls: 100,
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

/// `[stop]`: the opt-in stop policy (issue 28). Off unless a key below turns it on: the
/// watchdog then stops a loop's run itself (`crate::stop`), once per episode, never a loop whose
/// tree landed a change since its trigger, and never a session that is stalled, waiting on a
/// person or of unknown liveness (those stay alerts).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StopConfig {
    /// Stop a loop when its episode escalates (or is critical and goes on).
    pub at_escalation: bool,
    /// Stop a loop once it has spent this many dollars since its trigger; 0 is off.
    pub after_cost: f64,
    /// Stop a loop once it has made this many calls since its trigger; 0 is off.
    pub after_calls: u64,
    /// Seconds a tick waits for one stop to be carried out (the plugin's acknowledgement, the
    /// server's abort); a tick never hangs on a stop longer than this and a few seconds.
    pub wait_secs: u64,
}

impl Default for StopConfig {
    fn default() -> Self {
        StopConfig {
            at_escalation: false,
            after_cost: 0.0,
            after_calls: 0,
            wait_secs: 5,
        }
    }
}

impl StopConfig {
    /// Is any part of the policy on?
    pub fn on(&self) -> bool {
        self.at_escalation || self.after_cost > 0.0 || self.after_calls > 0
    }
}

pub use crate::severity::Severity;

/// Checks detector thresholds (from the config or from progress-detect's flags).
pub fn check_detector(d: &DetectorConfig) -> Result<()> {
    let mut p = Problems::default();
    detector_problems(d, &mut p);
    match p.0.into_iter().next() {
        Some((k, m)) => bail!("{k}: {m}"),
        None => Ok(()),
    }
}

fn detector_problems(d: &DetectorConfig, p: &mut Problems) {
    // every threshold against its key's bounds, as the signals declare them
    p.0.extend(d.problems());
}

/// `[follow]`: the poll, the full read and the escalation, each within its bounds.
fn follow_problems(f: &FollowConfig, p: &mut Problems) {
    p.int("follow.poll_ms", f.poll_ms, 100, 60_000);
    p.int("follow.full_every_secs", f.full_every_secs, 5, 3_600);
    p.int(
        "follow.escalate_after_minutes",
        f.escalate_after_minutes,
        1,
        10_080,
    );
    p.int(
        "follow.escalate_after_calls",
        f.escalate_after_calls,
        1,
        1_000_000,
    );
}

/// `[liveness]`: the hard threshold never below 900 s and the soft one below it, so elapsed
/// time alone never alerts early.
fn liveness_problems(l: &LivenessConfig, p: &mut Problems) {
    p.int("liveness.hard_secs", l.hard_secs, 900, YEAR);
    p.int("liveness.soft_secs", l.soft_secs, 1, YEAR);
    if l.soft_secs >= l.hard_secs && l.hard_secs >= 900 {
        p.add(
            "liveness.soft_secs",
            format!(
                "{} must be below liveness.hard_secs ({})",
                l.soft_secs, l.hard_secs
            ),
        );
    }
    p.int("liveness.tool_grace_secs", l.tool_grace_secs, 0, YEAR);
    p.int(
        "liveness.retry_attempts_max",
        l.retry_attempts_max,
        1,
        1_000_000,
    );
    p.int("liveness.retry_secs_max", l.retry_secs_max, 1, YEAR);
}

/// `[stop]`: a cost in dollars (0 is off), and the call and wait limits within their bounds.
fn stop_problems(st: &StopConfig, p: &mut Problems) {
    if !st.after_cost.is_finite() || st.after_cost < 0.0 {
        p.add(
            "stop.after_cost",
            format!(
                "{} is not a cost in dollars: give 0 (off) or more, e.g. 2.00",
                st.after_cost
            ),
        );
    }
    p.int("stop.after_calls", st.after_calls, 0, 1_000_000);
    p.int("stop.wait_secs", st.wait_secs, 1, 60);
}

/// Checks that need the text as written, not the typed values (`[1, 2, 3]` reads as a pair).
fn raw_checks(root: &toml_edit::Table) -> Vec<(String, String)> {
    let mut p = Vec::new();
    if let Some(chans) = root.get("channels").and_then(|c| c.as_array_of_tables()) {
        for (i, t) in chans.iter().enumerate() {
            if let Some(a) = t.get("quiet_hours").and_then(|q| q.as_array()) {
                if a.len() != 2 {
                    p.push((
                        format!("channels[{i}].quiet_hours"),
                        format!("{} hours given; give [start, end], e.g. [22, 7]", a.len()),
                    ));
                }
            }
        }
    }
    p
}

/// The 1-based line of byte `offset`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

/// Splits `channels[1].urls[0]` into `channels`, `1`, `urls`, `0`.
fn key_parts(key: &str) -> Vec<String> {
    key.split(['.', '[', ']'])
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The line of the key path in the document (where the key is written; else the table it
/// belongs to), if it is written at all.
fn line_of_key(root: &toml_edit::Table, key: &str, text: &str) -> Option<usize> {
    span_of(root, &key_parts(key)).map(|s| line_of(text, s.start))
}

fn span_of(t: &dyn toml_edit::TableLike, parts: &[String]) -> Option<std::ops::Range<usize>> {
    let (first, rest) = parts.split_first()?;
    let (k, v) = t.get_key_value(first)?;
    let here = k.span().or(v.span());
    let Some(next) = rest.first() else {
        return here;
    };
    if let Ok(i) = next.parse::<usize>() {
        if let Some(aot) = v.as_array_of_tables() {
            let tab = aot.get(i)?;
            return span_of(tab, &rest[1..]).or(tab.span()).or(here);
        }
        return v
            .as_array()
            .and_then(|a| a.get(i))
            .and_then(|x| x.span())
            .or(here);
    }
    match v.as_table_like() {
        Some(tl) => span_of(tl, rest).or(here),
        None => here,
    }
}

/// The key path of what is written at byte `offset` (for errors the parser gives by position).
fn key_at(t: &dyn toml_edit::TableLike, offset: usize, prefix: &str) -> Option<String> {
    let contains = |s: Option<std::ops::Range<usize>>| s.is_some_and(|s| s.contains(&offset));
    for (name, item) in t.iter() {
        let path = if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}.{name}")
        };
        let (k, _) = t.get_key_value(name)?;
        if let Some(aot) = item.as_array_of_tables() {
            for (i, tab) in aot.iter().enumerate() {
                if let Some(p) = key_at(tab, offset, &format!("{path}[{i}]")) {
                    return Some(p);
                }
            }
            continue;
        }
        if let Some(sub) = item.as_table_like() {
            if let Some(p) = key_at(sub, offset, &path) {
                return Some(p);
            }
        }
        if contains(k.span()) || contains(item.span()) {
            return Some(path);
        }
    }
    None
}

impl Config {
    /// Loads `path`, or the default path when it exists, or the defaults.
    pub fn load(path: Option<&Path>) -> Result<Config> {
        let (path, required) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (crate::paths::config_file(), false),
        };
        if !required && !path.exists() {
            return Ok(Config::default());
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("config {}: cannot read", path.display()))?;
        Config::parse_named(&text, &format!("config {}", path.display()))
    }

    /// Parses and checks a config text (messages name the key and its line).
    pub fn parse(text: &str) -> Result<Config> {
        Config::parse_named(text, "config")
    }

    /// Parses and checks a config text; `shown` starts every message (`config PATH`), which
    /// then reads `config PATH:LINE: KEY: what is wrong`.
    pub fn parse_named(text: &str, shown: &str) -> Result<Config> {
        let doc = toml_edit::ImDocument::parse(text).ok();
        let at = |key: Option<String>, line: Option<usize>, msg: &str| -> anyhow::Error {
            let place = match line {
                Some(l) => format!("{shown}:{l}"),
                None => shown.to_string(),
            };
            match key {
                Some(k) if !k.is_empty() => anyhow::anyhow!("{place}: {k}: {msg}"),
                _ => anyhow::anyhow!("{place}: {msg}"),
            }
        };
        let c: Config = match toml::from_str(text) {
            Ok(c) => c,
            Err(e) => {
                let offset = e.span().map(|s| s.start);
                let line = offset.map(|o| line_of(text, o));
                let key = match (&doc, offset) {
                    (Some(d), Some(o)) => key_at(d.as_table(), o, ""),
                    _ => None,
                };
                return Err(at(key, line, &e.message().trim().replace('\n', "; ")));
            }
        };
        let mut problems = c.check();
        if let Some(d) = &doc {
            problems.extend(raw_checks(d.as_table()));
        }
        if let Some((key, msg)) = problems.into_iter().next() {
            let line = doc
                .as_ref()
                .and_then(|d| line_of_key(d.as_table(), &key, text));
            return Err(at(Some(key), line, &msg));
        }
        Ok(c)
    }

    /// Every problem with the values: (key path, what is wrong), in the order of the sections
    /// (the first is the one reported).
    fn check(&self) -> Vec<(String, String)> {
        let mut p = Problems::default();
        detector_problems(&self.detector, &mut p);
        let st = &self.store;
        if let Some(ms) = st.busy_timeout_ms {
            p.int("store.busy_timeout_ms", ms, 0, 600_000);
        }
        if let Some(days) = st.retention_days {
            p.int("store.retention_days", days as u64, 1, 36_500);
        }
        p.int(
            "alert.escalate_after_ticks",
            self.alert.escalate_after_ticks as u64,
            1,
            1_000_000,
        );
        follow_problems(&self.follow, &mut p);
        if !self.alert.link_base.is_empty() {
            p.url("alert.link_base", &self.alert.link_base);
        }
        let so = &self.second_opinion;
        p.url("second_opinion.url", &so.url);
        p.int("second_opinion.timeout_secs", so.timeout_secs, 1, 600);
        p.int(
            "second_opinion.max_in_flight",
            so.max_in_flight as u64,
            1,
            64,
        );
        for (i, s) in self.opencode.servers.iter().enumerate() {
            p.url(&format!("opencode.servers[{i}]"), s);
        }
        // added to an `Instant`, a deadline of centuries overflows; ten minutes is already far
        // beyond a tick
        p.int(
            "opencode.server_deadline_secs",
            self.opencode.server_deadline_secs.get(),
            1,
            600,
        );
        liveness_problems(&self.liveness, &mut p);
        stop_problems(&self.stop, &mut p);
        crate::channels::check(&self.channels, &mut p);
        p.0
    }

    /// The watchdog database's busy timeout.
    pub fn store_busy(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.store.busy_timeout_ms.unwrap_or(5000))
    }

    /// The operator's page (`[report] file`, else its default in [`crate::paths`]).
    pub fn report_file(&self) -> PathBuf {
        crate::paths::report_file(self.report.file.as_deref())
    }

    /// The watchdog database (`[store] db`, else its default in [`crate::paths`]).
    pub fn store_db(&self) -> PathBuf {
        crate::paths::store_db(self.store.db.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_file_is_the_page_and_store_db_the_database() {
        let c = Config::parse("[report]\nfile = \"/p.html\"\n[store]\ndb = \"/w.db\"\n").unwrap();
        assert_eq!(c.report_file(), Path::new("/p.html"));
        assert_eq!(c.store_db(), Path::new("/w.db"));
        let d = Config::default();
        assert_eq!(d.report_file(), crate::paths::report_file(None));
        assert_eq!(d.store_db().file_name().unwrap(), "watchdog.db");
    }

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
        assert_eq!(
            format!("{e:#}"),
            "config:2: liveness.hard_secs: 600 is below 900, the least it can be"
        );
    }

    /// Values that crashed a command or were taken silently: each is refused at load, naming
    /// the key and the line it is on.
    #[test]
    fn bad_values_are_refused_naming_key_and_line() {
        for (text, want) in [
            ("[detector]\nwindow = \"sixty\"\n", "config:2: detector.window: invalid type: string \"sixty\", expected usize"),
            ("[store]\nbusy_timeout_ms = 2147483648\n", "config:2: store.busy_timeout_ms: 2147483648 is above 600000, the most it can be"),
            ("[detector]\nwindow = 1000000000000\n", "config:2: detector.window: 1000000000000 is above 100000, the most it can be"),
            ("# thresholds\n[detector]\ntop_min = 0\n", "config:3: detector.top_min: 0 is below 1, the least it can be"),
            ("[detector]\ncum_min = 0\n", "config:2: detector.cum_min: 0 is below 1, the least it can be"),
            ("[detector]\ncover_min = -1\n", "config:2: detector.cover_min: -1 is not a number above 0 (times a file's length)"),
            ("[detector]\ncover_min = nan\n", "config:2: detector.cover_min: NaN is not a number above 0 (times a file's length)"),
            ("[detector]\nshort_share_min = -0.5\n", "config:2: detector.short_share_min: -0.5 is not a share between 0 and 1"),
            ("[detector]\nrun_min = 0\n", "config:2: detector.run_min: 0 is below 1, the least it can be"),
            ("[detector]\nsame_failure_min = 0\n", "config:2: detector.same_failure_min: 0 is below 1, the least it can be"),
            ("[detector]\ncircle_passes_min = 0\n", "config:2: detector.circle_passes_min: 0 is not a number above 0 (full passes over a file)"),
            ("[[channels]]\nname = \"d\"\ntype = \"desktop\"\nquiet_hours = [1, 2, 3]\n", "config:4: channels[0].quiet_hours: 3 hours given; give [start, end], e.g. [22, 7]"),
            ("[[channels]]\nname = \"d\"\ntype = \"desktop\"\n\n[[channels]]\nname = \"w\"\ntype = \"webhook\"\nurl = \"not a url\"\n", "config:8: channels[1].url: \"not a url\" is not a URL (relative URL without a base)"),
            ("[[channels]]\nname = \"w\"\ntype = \"webhook\"\nurl = \"file:///etc/passwd\"\n", "config:4: channels[0].url: \"file:///etc/passwd\" is not an http(s) URL (scheme \"file\")"),
            ("[liveness]\ntool_grace_secs = 9223372036854775\n", "config:2: liveness.tool_grace_secs: 9223372036854775 is above 31536000, the most it can be"),
            ("[opencode]\nserver_deadline_secs = 9223372036854775807\n", "config:2: opencode.server_deadline_secs: 9223372036854775807 is above 600, the most it can be"),
            ("[liveness]\nsoft_secs = 1000\n", "config:2: liveness.soft_secs: 1000 must be below liveness.hard_secs (900)"),
            ("[second_opinion]\nurl = \"localhost:11434\"\n", "config:2: second_opinion.url: \"localhost:11434\" is not an http(s) URL (scheme \"localhost\")"),
            ("[[channels]]\nname = \"p\"\ntype = \"pagerduty\"\nrouting_key_env = \"PD KEY\"\n", "config:4: channels[0].routing_key_env: \"PD KEY\" is not an environment variable name"),
            ("[[channels]]\nname = \"a\"\ntype = \"desktop\"\n[[channels]]\nname = \"a\"\ntype = \"desktop\"\n", "config:5: channels[1].name: channel \"a\" is defined twice"),
            ("[detector\n", "config:1: invalid table header; expected `.`, `]`"),
            ("[store]\nretention_days = -3\n", "config:2: store.retention_days: invalid value: integer `-3`, expected u32"),
        ] {
            let e = Config::parse(text).unwrap_err();
            assert_eq!(format!("{e:#}"), want, "{text}");
        }
    }

    #[test]
    fn a_config_file_error_names_the_path_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("watchdog.toml");
        std::fs::write(&p, "[detector]\nwindow = \"sixty\"\n").unwrap();
        let e = Config::load(Some(&p)).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            format!(
                "config {}:2: detector.window: invalid type: string \"sixty\", expected usize",
                p.display()
            )
        );
    }

    #[test]
    fn the_shipped_config_loads() {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/watchdog.toml"))
                .unwrap();
        Config::parse(&text).unwrap();
    }

    #[test]
    fn the_stop_policy_is_off_unless_asked_and_bad_values_name_their_key() {
        let shipped = Config::parse(
            &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/watchdog.toml"))
                .unwrap(),
        )
        .unwrap();
        assert!(!shipped.stop.on());
        assert!(!Config::default().stop.on());
        let c = Config::parse("[stop]\nafter_cost = 2.00\n").unwrap();
        assert!(c.stop.on());
        assert_eq!((c.stop.after_cost, c.stop.wait_secs), (2.0, 5));
        let bad = |t: &str| Config::parse(t).unwrap_err().to_string();
        assert_eq!(
            bad("[stop]\nat_escalation = true\nafter_cost = -1.0\n"),
            "config:3: stop.after_cost: -1 is not a cost in dollars: give 0 (off) or more, e.g. 2.00"
        );
        assert!(bad("[stop]\nwait_secs = 0\n").starts_with("config:2: stop.wait_secs: "));
        assert!(bad("[stop]\nafter = 3\n").contains("unknown field `after`"));
    }

    #[test]
    fn defaults_apply() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.detector.window(), 60);
        assert_eq!(
            c.detector.read_only_agents,
            ["explore", "librarian", "oracle"]
        );
        assert!(!c.second_opinion.enabled);
        assert_eq!(c.opencode.discover, Discover::Database);
        assert_eq!(c.opencode.server_deadline_secs.get(), 10);
        assert_eq!(c.opencode.body_cap_mib.get(), 256);
        assert_eq!(c.opencode.parsed_cap_mib.get(), 40);
    }

    #[test]
    fn opencode_bounds_are_never_zero() {
        let e = Config::parse("[opencode]\nserver_deadline_secs = 0\n").unwrap_err();
        assert!(format!("{e:#}").contains("nonzero"), "{e:#}");
        let e = Config::parse("[opencode]\ndiscover = \"some\"\n").unwrap_err();
        assert!(format!("{e:#}").contains("unknown variant `some`"), "{e:#}");
    }
}
