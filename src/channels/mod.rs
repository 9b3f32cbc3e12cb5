//! The alert channels, one file per channel type: its settings (a variant of
//! [`ChannelSettings`], tagged by the config's `type` key), its validation and its delivery,
//! behind the [`ChannelUnit`] trait and registered in one list ([`registry!`] below). Events enter
//! from `wd-alert`; what a delivery answered leaves as [`Sent`] or as the text of what went
//! wrong, never as an error raised past the caller.
//!
//! A config's `[[channels]]` table is read as one flat [`ChannelTable`] and then split into the
//! settings every channel has ([`ChannelConfig`]) and those of its type: read flat, every
//! config error keeps the key and line it is about (serde reads a tagged enum through a buffer
//! that loses toml's positions).

pub mod route;

mod http;

use crate::check::{Problems, YEAR};
use crate::event::Event;
use crate::severity::Severity;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// What one channel type is: its validation and its delivery.
pub trait ChannelUnit {
    /// Takes this type's keys out of a channel table (what is left is refused by name).
    fn take(t: &mut ChannelTable) -> Self
    where
        Self: Sized;
    /// Adds the problems of this type's keys; `key("url")` is the key path of one of them.
    fn check(&self, name: &str, key: &dyn Fn(&str) -> String, p: &mut Problems);
    /// Delivers `ev`; `left` is what the channel has left of its time in this run, for a
    /// channel with a [`ChannelUnit::run_budget`].
    fn deliver(
        &self,
        ch: &ChannelConfig,
        ev: &Event,
        now: i64,
        left: Duration,
    ) -> Result<Sent, String>;
    /// Delivers `ev` after what this channel answered for an earlier event of the same episode
    /// (`earlier`, e.g. the desktop's "notification 7"), so a receiver that can update what it
    /// showed does (one popup per episode); the others deliver anew.
    fn deliver_after(
        &self,
        ch: &ChannelConfig,
        ev: &Event,
        now: i64,
        left: Duration,
        earlier: Option<&str>,
    ) -> Result<Sent, String> {
        let _ = earlier;
        self.deliver(ch, ev, now, left)
    }
    /// Why this channel is not worth trying in this run, asked once per run within `wait`
    /// before its first delivery (a receiver that does not answer a cheap question): what it
    /// owes then stays pending, untried, for the next run. `None`: go ahead.
    fn unanswered(&self, wait: Duration) -> Option<String> {
        let _ = wait;
        None
    }
    /// Does the receiver group, dedup and silence by itself (so every transition goes, never
    /// rate limited nor held back by quiet hours)?
    fn routes_itself(&self) -> bool {
        false
    }
    /// Does the channel get its `timeout_secs` once per run over all its deliveries (a bus
    /// that accepts but never answers costs one timeout per run, not one per alert)?
    fn run_budget(&self) -> bool {
        false
    }
    /// Does the receiver resolve an alert that is not re-sent (so [`ChannelUnit::repost`] gets the
    /// open alerts on every tick)?
    fn reposts(&self) -> bool {
        false
    }
    /// Did a delivery that failed with `detail` certainly not reach the person (so it is owed
    /// again next run, up to [`ATTEMPTS`] attempts)? Not when the receiver may have shown it
    /// anyway (a bus that took the call and never answered).
    fn unsent(&self, detail: &str) -> bool {
        let _ = detail;
        false
    }
    /// Re-posts the open alerts (their latest events, as triggers).
    fn repost(&self, ch: &ChannelConfig, open: &[Event], now: i64) -> Result<Sent, String> {
        let _ = (ch, open, now);
        Err("this channel type does not re-post".into())
    }
}

/// How many times a delivery is tried that is owed again after failing (a failed resolve, a
/// trigger the receiver certainly did not show).
pub const ATTEMPTS: i64 = 5;

/// The list of channel types: `module::Type`, one line each. The type's `type` key in the
/// config is its name in lowercase.
macro_rules! registry {
    ($($module:ident :: $ty:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// A channel's type, as the config's `type` key names it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
        #[serde(rename_all = "lowercase")]
        pub enum ChannelType {
            $($ty,)*
        }

        /// The settings of a channel's type.
        #[derive(Debug, Clone, PartialEq, Serialize)]
        #[serde(tag = "type", rename_all = "lowercase")]
        pub enum ChannelSettings {
            $($ty($module::$ty),)*
        }

        impl ChannelSettings {
            fn take(kind: ChannelType, t: &mut ChannelTable) -> ChannelSettings {
                match kind {
                    $(ChannelType::$ty => ChannelSettings::$ty($module::$ty::take(t)),)*
                }
            }
            /// Its type.
            pub fn kind(&self) -> ChannelType {
                match self {
                    $(ChannelSettings::$ty(_) => ChannelType::$ty,)*
                }
            }
            /// What its type does.
            pub fn unit(&self) -> &dyn ChannelUnit {
                match self {
                    $(ChannelSettings::$ty(c) => c,)*
                }
            }
        }
    };
}

registry! {
    desktop::Desktop,
    webhook::Webhook,
    pagerduty::Pagerduty,
    alertmanager::Alertmanager,
}

/// One `[[channels]]` table as written: the keys of every type, each type taking its own.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelTable {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: ChannelType,
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default = "warning")]
    pub min_severity: Severity,
    /// Seconds between two notifications of one alert on this channel (resolves, escalations
    /// and a loop back after its shown resolve always go).
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

impl ChannelTable {
    /// The keys of a type that are still set (no type took them).
    fn left(&self) -> Vec<&'static str> {
        [
            ("url", self.url.is_some()),
            ("urls", !self.urls.is_empty()),
            ("routing_key_env", self.routing_key_env.is_some()),
            ("events_url", self.events_url.is_some()),
            ("token_env", self.token_env.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect()
    }
}

/// A configured channel: what every channel has, and its type's settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(from = "ChannelTable")]
pub struct ChannelConfig {
    pub name: String,
    pub enabled: bool,
    pub min_severity: Severity,
    /// Seconds between two notifications of one alert on this channel (resolves, escalations
    /// and a loop back after its shown resolve always go).
    pub rate_limit_secs: u64,
    /// Local hours `[start, end)` when nothing but resolves is sent, e.g. `[22, 7]`.
    pub quiet_hours: Option<[u8; 2]>,
    /// Seconds before a delivery attempt is given up.
    pub timeout_secs: u64,
    #[serde(flatten)]
    pub settings: ChannelSettings,
    /// Keys of another type written on this channel: refused when the config is checked.
    #[serde(skip)]
    stray: Vec<&'static str>,
}

impl From<ChannelTable> for ChannelConfig {
    fn from(mut t: ChannelTable) -> ChannelConfig {
        let settings = ChannelSettings::take(t.kind, &mut t);
        ChannelConfig {
            stray: t.left(),
            name: t.name,
            enabled: t.enabled,
            min_severity: t.min_severity,
            rate_limit_secs: t.rate_limit_secs,
            quiet_hours: t.quiet_hours,
            timeout_secs: t.timeout_secs,
            settings,
        }
    }
}

impl ChannelConfig {
    pub fn kind(&self) -> ChannelType {
        self.settings.kind()
    }
    pub fn unit(&self) -> &dyn ChannelUnit {
        self.settings.unit()
    }
}

/// Adds the problems of the configured channels, each under its key path (`channels[1].url`).
pub fn check(channels: &[ChannelConfig], p: &mut Problems) {
    let mut names = std::collections::HashSet::new();
    for (i, c) in channels.iter().enumerate() {
        let k = |f: &str| format!("channels[{i}].{f}");
        if c.name.trim().is_empty() {
            p.add(&k("name"), "a channel needs a name".into());
        }
        if !names.insert(&c.name) {
            p.add(&k("name"), format!("channel {:?} is defined twice", c.name));
        }
        c.unit().check(&c.name, &k, p);
        for f in &c.stray {
            p.add(
                &k(f),
                format!(
                    "channel {:?}: a {} channel takes no {f}",
                    c.name,
                    type_key(c.kind())
                ),
            );
        }
        if let Some([a, b]) = c.quiet_hours {
            if a > 23 || b > 23 {
                p.add(&k("quiet_hours"), format!("[{a}, {b}]: hours are 0-23"));
            }
        }
        p.int(&k("rate_limit_secs"), c.rate_limit_secs, 0, YEAR);
        p.int(&k("timeout_secs"), c.timeout_secs, 1, 600);
    }
}

/// The config's `type` key of a channel type.
pub fn type_key(kind: ChannelType) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Checks that a key holds an environment variable's name.
pub(crate) fn env_name(p: &mut Problems, key: &str, v: &Option<String>) {
    if let Some(v) = v {
        let ok = !v.is_empty()
            && !v.starts_with(|c: char| c.is_ascii_digit())
            && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            p.add(key, format!("{v:?} is not an environment variable name"));
        }
    }
}

/// A delivery that went out: what answered, and the peers that failed when only some did
/// (an Alertmanager HA pair with one peer down).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sent {
    pub detail: String,
    pub peer_failures: Vec<String>,
}

impl From<String> for Sent {
    fn from(detail: String) -> Sent {
        Sent {
            detail,
            peer_failures: Vec::new(),
        }
    }
}

/// How long a channel with a run budget may spend in one run, over all its deliveries.
pub struct Deadline {
    until: Instant,
}

impl Deadline {
    pub fn after(d: Duration) -> Deadline {
        Deadline {
            until: Instant::now() + d,
        }
    }
    pub fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }
}

/// Delivers `ev` through `ch`, its human-readable fields [`readable`]; `Err` carries what went
/// wrong, for the log and the database. `left` bounds the time of a channel with a run budget
/// in this run.
/// Delivers `ev` on `ch` with nothing raw in what a person reads ([`readable`]), after what the
/// channel answered for an earlier event of its episode (`earlier`; see
/// [`ChannelUnit::deliver_after`]).
pub fn deliver(
    ch: &ChannelConfig,
    ev: &Event,
    now: i64,
    left: Duration,
    earlier: Option<&str>,
) -> Result<Sent, String> {
    ch.unit()
        .deliver_after(ch, &readable(ev), now, left, earlier)
}

/// `ev` with nothing raw in the fields a person reads wherever it lands (a chat room fed by a
/// webhook, PagerDuty's incident, Alertmanager's annotations and labels): the title, summary,
/// agent, model and every text in `details` go through the popup's
/// [`crate::notify::plain::visible`] (control characters and bidi controls shown as
/// `<U+XXXX>`, lengths capped with an ellipsis). Identifiers we made (dedup key, root, source,
/// link) are left as they are.
pub fn readable(ev: &Event) -> Event {
    use crate::notify::plain::{visible, visible_lines, LINE_CAP, SUMMARY_CAP};
    fn texts(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::String(s) => *s = visible(s, LINE_CAP, false),
            serde_json::Value::Array(a) => a.iter_mut().for_each(texts),
            serde_json::Value::Object(m) => m.values_mut().for_each(texts),
            _ => {}
        }
    }
    let mut ev = ev.clone();
    ev.title = visible(&ev.title, SUMMARY_CAP, false);
    ev.summary = visible_lines(&ev.summary, LINE_CAP);
    for f in [&mut ev.agent, &mut ev.model].into_iter().flatten() {
        *f = visible(f, SUMMARY_CAP, false);
    }
    ev.details.values_mut().for_each(texts);
    ev
}

/// A channel with its run-time settings (`wd-store channels set`) applied.
#[derive(Debug, Clone)]
pub struct EffectiveChannel {
    pub cfg: ChannelConfig,
    pub enabled: bool,
    pub min: Severity,
    /// A run-time setting differs from the config's.
    pub overridden: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_of_another_channel_type_is_refused_naming_it() {
        let t =
            "[[channels]]\nname = \"d\"\ntype = \"desktop\"\nurl = \"https://example.invalid/\"\n";
        let e = crate::config::Config::parse(t).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "config:4: channels[0].url: channel \"d\": a desktop channel takes no url"
        );
    }

    #[test]
    fn each_type_takes_its_own_keys() {
        let c: ChannelConfig = toml::from_str(
            "name = \"p\"\ntype = \"pagerduty\"\nrouting_key_env = \"PD\"\nrate_limit_secs = 60\n",
        )
        .unwrap();
        assert_eq!(c.kind(), ChannelType::Pagerduty);
        assert_eq!(c.rate_limit_secs, 60);
        assert_eq!(
            c.settings,
            ChannelSettings::Pagerduty(pagerduty::Pagerduty {
                routing_key_env: Some("PD".into()),
                events_url: None,
            })
        );
        assert!(c.stray.is_empty());
        assert_eq!(type_key(ChannelType::Alertmanager), "alertmanager");
    }
}
