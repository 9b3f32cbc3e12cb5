//! The detector's thresholds, as data. Each signal declares its keys ([`Key`]: name, default,
//! bounds, whether it is a whole number, one line about it) beside its rule; [`GENERAL`] holds
//! the few that are not one signal's (the window, the calls a session needs before most rules
//! count). The signal registry gathers them all into one table, [`KEYS`], and everything else is
//! driven by that table: `[detector]` in the config file (read and range-checked key by key),
//! progress-detect's `--KEY` flags and `--set KEY=VALUE`, the defaults.
//!
//! Values live in one fixed array, [`DetectorConfig::t`], in table order; a signal reads its
//! threshold by an index resolved when the program is compiled ([`key`]), so a lookup on the
//! per-call path is an array read, not a hash of a name.
//!
//! The table is the signal registry's, so this module is a part of it (`detect::signals`, which
//! declares the keys with the rules and gathers them); `detect::thresholds` names it for the
//! config and the flags.

pub use super::{KEYS, N};
use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a threshold's value may be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueKind {
    /// A whole number in `[min, max]`.
    Count,
    /// A share in `[0, 1]`.
    Share,
    /// A number above `min` and at most `max`, of this unit (for the error message).
    Above(&'static str),
}

/// One threshold: a `[detector]` key, a `--KEY` flag and a `--set KEY=` name.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    pub name: &'static str,
    pub default: f64,
    pub min: f64,
    pub max: f64,
    pub kind: ValueKind,
    /// One line for `--help`, the man page and the docs.
    pub about: &'static str,
}

impl Key {
    /// A count of at least 1 (a 0 would flag every session).
    pub const fn count(name: &'static str, default: u32, about: &'static str) -> Key {
        Key {
            name,
            default: default as f64,
            min: 1.0,
            max: 1_000_000.0,
            kind: ValueKind::Count,
            about,
        }
    }
    /// A share between 0 and 1.
    pub const fn share(name: &'static str, default: f64, about: &'static str) -> Key {
        Key {
            name,
            default,
            min: 0.0,
            max: 1.0,
            kind: ValueKind::Share,
            about,
        }
    }
    /// A number above 0, in `unit`.
    pub const fn above0(
        name: &'static str,
        default: f64,
        unit: &'static str,
        about: &'static str,
    ) -> Key {
        Key {
            name,
            default,
            min: 0.0,
            max: 1e6,
            kind: ValueKind::Above(unit),
            about,
        }
    }
    /// The same key with another upper bound.
    pub const fn at_most(self, max: f64) -> Key {
        Key { max, ..self }
    }
    pub fn is_count(&self) -> bool {
        self.kind == ValueKind::Count
    }
    /// What is wrong with `v` for this key, if anything.
    pub fn problem(&self, v: f64) -> Option<String> {
        match self.kind {
            ValueKind::Count if v < self.min => {
                Some(format!("{v} is below {}, the least it can be", self.min))
            }
            ValueKind::Count if v > self.max => {
                Some(format!("{v} is above {}, the most it can be", self.max))
            }
            ValueKind::Count => None,
            ValueKind::Share if !(v.is_finite() && (0.0..=1.0).contains(&v)) => {
                Some(format!("{v} is not a share between 0 and 1"))
            }
            ValueKind::Share => None,
            ValueKind::Above(unit) if !(v.is_finite() && v > self.min && v <= self.max) => {
                Some(format!("{v} is not a number above {} ({unit})", self.min))
            }
            ValueKind::Above(_) => None,
        }
    }
    /// Reads a value as written on the command line (`--set run_min=3`).
    pub fn parse(&self, s: &str) -> Result<f64, String> {
        if self.is_count() {
            s.parse::<u64>()
                .map(|v| v as f64)
                .map_err(|_| format!("{s:?} is not a whole number"))
        } else {
            s.parse::<f64>()
                .map_err(|_| format!("{s:?} is not a number"))
        }
    }
}

/// The keys that are not one signal's.
pub const GENERAL: &[Key] = &[
    Key::count("window", 60, "Calls in the window").at_most(100_000.0),
    Key::count(
        "min_calls",
        40,
        "Calls a session needs before dup and coverage count",
    ),
];

/// The index of key `name` in [`KEYS`]; a name that is not there fails the build.
pub const fn key(name: &str) -> usize {
    let mut i = 0;
    while i < N {
        if eq(KEYS[i].name, name) {
            return i;
        }
        i += 1;
    }
    panic!("no such detector key")
}

const fn eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The index of key `name`, at run time (config, flags).
pub fn find(name: &str) -> Option<usize> {
    KEYS.iter().position(|k| k.name == name)
}

const WINDOW: usize = key("window");

/// Every name `[detector]` takes, for the unknown-key message.
static FIELDS: [&str; N + 1] = {
    let mut a = ["read_only_agents"; N + 1];
    let mut i = 0;
    while i < N {
        a[i] = KEYS[i].name;
        i += 1;
    }
    a
};

/// `[detector]`: every threshold (one array, in [`KEYS`] order) and the read-only agents.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectorConfig {
    /// Set with [`DetectorConfig::put`], which keeps `n` with it.
    t: [f64; N],
    /// `t` as counts, made once: the conversion is a dozen instructions, and the signals read
    /// a threshold about fifteen times a call.
    n: [usize; N],
    /// Agents that never land (matched on the agent name, else the session title).
    pub read_only_agents: Vec<String>,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        let mut t = [0.0; N];
        for (v, k) in t.iter_mut().zip(KEYS.iter()) {
            *v = k.default;
        }
        DetectorConfig {
            t,
            n: t.map(|v| v as usize),
            read_only_agents: vec!["explore".into(), "librarian".into(), "oracle".into()],
        }
    }
}

impl DetectorConfig {
    /// Threshold `i` (an index from [`key`]).
    #[inline]
    pub fn get(&self, i: usize) -> f64 {
        self.t[i]
    }
    /// Threshold `i` as a count.
    #[inline]
    pub fn count(&self, i: usize) -> usize {
        self.n[i]
    }
    /// Sets threshold `i`.
    pub fn put(&mut self, i: usize, v: f64) {
        self.t[i] = v;
        self.n[i] = v as usize;
    }
    /// Calls in the window.
    #[inline]
    pub fn window(&self) -> usize {
        self.count(WINDOW)
    }
    /// Sets key `name` from its text; the value is range-checked later, with the rest.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        let i = find(name).ok_or_else(|| {
            let names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
            format!(
                "{name:?} is not a detector threshold (one of {})",
                names.join(", ")
            )
        })?;
        self.put(i, KEYS[i].parse(value)?);
        Ok(())
    }
    /// Every value out of its key's range: (`detector.KEY`, what is wrong), in table order.
    pub fn problems(&self) -> Vec<(String, String)> {
        KEYS.iter()
            .zip(self.t.iter())
            .filter_map(|(k, &v)| k.problem(v).map(|m| (format!("detector.{}", k.name), m)))
            .collect()
    }
}

impl Serialize for DetectorConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(N + 1))?;
        for (k, &v) in KEYS.iter().zip(self.t.iter()) {
            if k.is_count() {
                m.serialize_entry(k.name, &(v as u64))?;
            } else {
                m.serialize_entry(k.name, &v)?;
            }
        }
        m.serialize_entry("read_only_agents", &self.read_only_agents)?;
        m.end()
    }
}

/// A `[detector]` key, checked as the key is read, so an unknown one is reported at its line.
enum Field {
    Key(usize),
    ReadOnlyAgents,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FieldVisitor;
        impl Visitor<'_> for FieldVisitor {
            type Value = Field;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a [detector] key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
                match find(v) {
                    Some(i) => Ok(Field::Key(i)),
                    None if v == "read_only_agents" => Ok(Field::ReadOnlyAgents),
                    None => Err(de::Error::unknown_field(v, &FIELDS)),
                }
            }
        }
        d.deserialize_identifier(FieldVisitor)
    }
}

impl<'de> Deserialize<'de> for DetectorConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct DetectorConfigVisitor;
        impl<'de> Visitor<'de> for DetectorConfigVisitor {
            type Value = DetectorConfig;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("the [detector] table")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<DetectorConfig, A::Error> {
                let mut c = DetectorConfig::default();
                while let Some(field) = m.next_key::<Field>()? {
                    match field {
                        Field::ReadOnlyAgents => c.read_only_agents = m.next_value()?,
                        // counts read as usize, so `2.5` or `-1` is refused as before
                        Field::Key(i) if KEYS[i].is_count() => {
                            c.put(i, m.next_value::<usize>()? as f64)
                        }
                        Field::Key(i) => c.put(i, m.next_value::<f64>()?),
                    }
                }
                Ok(c)
            }
        }
        d.deserialize_map(DetectorConfigVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_defaults_in_range() {
        for (i, k) in KEYS.iter().enumerate() {
            assert_eq!(find(k.name), Some(i), "{} is declared twice", k.name);
            assert_eq!(k.problem(k.default), None, "{}", k.name);
        }
    }

    #[test]
    fn every_key_is_taken_by_the_config_and_by_set() {
        for k in KEYS {
            // a value other than the default, in range
            let v = if k.is_count() {
                k.default + 1.0
            } else {
                k.default / 2.0
            };
            let text = if k.is_count() {
                format!("{}", v as u64)
            } else {
                format!("{v:?}")
            };
            let c = crate::config::Config::parse(&format!("[detector]\n{} = {text}\n", k.name))
                .unwrap_or_else(|e| panic!("{}: {e:#}", k.name));
            assert_eq!(c.detector.get(find(k.name).unwrap()), v, "{}", k.name);
            let mut s = DetectorConfig::default();
            s.set(k.name, &text).unwrap();
            assert_eq!(s, c.detector, "{}", k.name);
            // and a value out of range is refused by both, naming the key
            let bad = if k.is_count() { "0" } else { "-1" };
            let e = crate::config::Config::parse(&format!("[detector]\n{} = {bad}\n", k.name))
                .unwrap_err();
            assert!(
                format!("{e:#}").starts_with(&format!("config:2: detector.{}: ", k.name)),
                "{e:#}"
            );
            let mut s = DetectorConfig::default();
            s.set(k.name, bad).unwrap();
            assert_eq!(s.problems()[0].0, format!("detector.{}", k.name));
        }
    }

    #[test]
    fn defaults_are_the_shipped_config() {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/watchdog.toml"),
        )
        .unwrap();
        let shipped = crate::config::Config::parse(&text).unwrap().detector;
        assert_eq!(shipped, DetectorConfig::default());
        // and the file sets every key, so each one is documented there
        let doc: toml::Table = toml::from_str(&text).unwrap();
        let written = doc["detector"].as_table().unwrap();
        for k in KEYS {
            assert!(
                written.contains_key(k.name),
                "config/watchdog.toml lacks {}",
                k.name
            );
        }
    }

    #[test]
    fn an_unknown_key_is_reported_at_its_line() {
        let e = crate::config::Config::parse("[detector]\nrun_min = 3\nrun_mni = 3\n").unwrap_err();
        let e = format!("{e:#}");
        assert!(e.starts_with("config:3: "), "{e}");
        assert!(
            e.contains("unknown field `run_mni`, expected one of `window`"),
            "{e}"
        );
    }

    #[test]
    fn set_refuses_what_is_not_a_threshold() {
        let mut c = DetectorConfig::default();
        assert!(c
            .set("run_mni", "3")
            .unwrap_err()
            .contains("not a detector threshold"));
        assert_eq!(
            c.set("run_min", "2.5").unwrap_err(),
            "\"2.5\" is not a whole number"
        );
        c.set("cover_min", "2.5").unwrap();
        assert_eq!(c.get(key("cover_min")), 2.5);
    }
}
