//! The detector's signals, as data: each signal is one unit in its own file (its name, the config
//! keys of its thresholds, a description, its incremental state and its tests), registered in the
//! one list at the bottom of this file. The detector loops over the list; nothing else names a
//! signal. Its thresholds ([`Key`]) are gathered from the list into [`KEYS`], which drives the
//! config file's `[detector]`, progress-detect's flags and the defaults (see `thresholds`).
//! Adding one: a file here, its line in [`registry!`] (which declares the module), and its name
//! as a variant of [`Signal`], the verdict contract's closed set of reasons (`record.rs`).
//! (`files` is no signal: the per-file tally of lines read that coverage and circling share.)
//!
//! A signal sees each call once ([`Rule::call`]), calls leaving the window ([`Rule::left`]) and
//! landed changes ([`Rule::landed`]: by default the loop, if any, is over). It answers, as often
//! as every call, whether it fires, what it reads, and which calls make its case.

mod files;
pub mod thresholds;

use super::region::{Obs, Region, RegionEntry};
use crate::record::{CallRef, Reading, Signal, Signals};
use thresholds::{DetectorConfig, Key, GENERAL};

/// What a signal may look at besides its own state.
pub struct Cx<'a> {
    /// The calls since the last landed change (at most `window`).
    pub region: &'a Region,
    /// Calls of the session so far.
    pub calls: u64,
    /// An agent that never lands changes (explore, librarian, ...).
    pub read_only: bool,
    /// The session's latest landed edit rewrote the text the edit before it had just written.
    pub rewriting: bool,
    pub cfg: &'a DetectorConfig,
}

impl<'a> Cx<'a> {
    pub fn new(region: &'a Region, calls: u64, read_only: bool, cfg: &'a DetectorConfig) -> Cx<'a> {
        Cx {
            region,
            calls,
            read_only,
            rewriting: false,
            cfg,
        }
    }
}

/// The calls that make a signal's case: where its loop started, and the repeats.
#[derive(Default, Debug, Clone, PartialEq)]
pub struct Case {
    pub start: Option<CallRef>,
    pub calls: Vec<CallRef>,
}

impl Case {
    /// A case made of these calls, starting at the first.
    pub fn of(calls: Vec<CallRef>) -> Case {
        Case {
            start: calls.first().cloned(),
            calls,
        }
    }
}

/// One signal.
pub trait Rule {
    const NAME: Signal;
    /// Its thresholds: `[detector]` keys and `--KEY` flags (read with `cx.cfg.get(key("..."))`).
    const KEYS: &'static [Key];
    /// One line for docs and `--help`.
    const ABOUT: &'static str;
    /// The key of its target in the flat `signals` object, if it names one.
    const WHAT: Option<&'static str> = None;
    /// A count (an integer on the wire) rather than a ratio.
    const COUNT: bool = true;
    /// Whether `signals` carries a reading of it (else it is only ever a reason).
    const READING: bool = true;
    type State: Default + Clone;
    /// A call that did not land a change entered the region (it is already its last entry).
    fn call(st: &mut Self::State, c: &Obs, cx: &Cx);
    /// The oldest call left the full region.
    fn left(_st: &mut Self::State, _exact: u64, _target: u64, _e: &RegionEntry, _cx: &Cx) {}
    /// A change landed: the region is empty again.
    fn landed(st: &mut Self::State) {
        *st = Self::State::default();
    }
    fn fires(st: &Self::State, cx: &Cx) -> bool;
    fn reading(st: &Self::State, cx: &Cx) -> Reading;
    fn case(st: &Self::State, cx: &Cx) -> Case;
}

/// A signal as documentation sees it.
pub struct About {
    pub name: Signal,
    pub keys: &'static [Key],
    pub about: &'static str,
}

/// The signals, each `name: module::Rule`: the module is declared, and the tables and methods
/// below are made from the rules, in list order.
macro_rules! registry {
    ($($name:ident: $module:ident :: $rule:ident),* $(,)?) => {
        $(mod $module;)*
        registry!(@rules $($name: $module::$rule),*);
    };
    (@rules $($name:ident: $rule:ty),*) => {
        /// How many thresholds there are: the general ones and every signal's.
        pub const N: usize = GENERAL.len() $(+ <$rule as Rule>::KEYS.len())*;

        /// Every threshold: the general ones, then each signal's, in list order.
        pub static KEYS: [Key; N] = {
            let groups: &[&[Key]] = &[GENERAL, $(<$rule as Rule>::KEYS),*];
            let mut a = [GENERAL[0]; N];
            let (mut n, mut g) = (0, 0);
            while g < groups.len() {
                let mut i = 0;
                while i < groups[g].len() {
                    a[n] = groups[g][i];
                    n += 1;
                    i += 1;
                }
                g += 1;
            }
            a
        };

        /// Every signal's state for one session.
        #[derive(Default, Clone)]
        pub struct States {
            $(pub $name: <$rule as Rule>::State,)*
        }

        impl States {
            /// Feeds a call to every signal; returns whether any fires then ([`States::firing`],
            /// each asked while its state is at hand).
            pub fn call(&mut self, c: &Obs, cx: &Cx) -> bool {
                let mut fires = false;
                $(
                    <$rule>::call(&mut self.$name, c, cx);
                    fires |= <$rule>::fires(&self.$name, cx);
                )*
                fires
            }
            pub fn left(&mut self, exact: u64, target: u64, e: &RegionEntry, cx: &Cx) {
                $(<$rule>::left(&mut self.$name, exact, target, e, cx);)*
            }
            pub fn landed(&mut self) {
                $(<$rule>::landed(&mut self.$name);)*
            }
            /// Whether any signal fires (cheap enough for every call).
            pub fn firing(&self, cx: &Cx) -> bool {
                false $(|| <$rule>::fires(&self.$name, cx))*
            }
            /// The signals that fire, in list order.
            pub fn reasons(&self, cx: &Cx) -> Vec<Signal> {
                let mut r = Vec::new();
                $(if <$rule>::fires(&self.$name, cx) { r.push(<$rule>::NAME); })*
                r
            }
            /// Every signal's reading.
            pub fn signals(&self, cx: &Cx) -> Signals {
                let mut s = Signals::default();
                $(if <$rule>::READING {
                    s.0.insert(<$rule>::NAME, <$rule>::reading(&self.$name, cx));
                })*
                s
            }
            /// The case one signal makes.
            pub fn case(&self, which: Signal, cx: &Cx) -> Case {
                $(if which == <$rule>::NAME { return <$rule>::case(&self.$name, cx); })*
                Case::default()
            }
        }

        impl Signal {
            /// Every signal, in list order.
            pub const ALL: &'static [Signal] = &[$(<$rule>::NAME),*];
            pub const ABOUT: &'static [About] = &[$(About {
                name: <$rule>::NAME,
                keys: <$rule>::KEYS,
                about: <$rule>::ABOUT,
            }),*];

            /// The wire name.
            pub fn name(self) -> &'static str {
                $(if self == <$rule>::NAME { return stringify!($name); })*
                "unknown"
            }
            /// The key of the signal's target in the flat `signals` object, if it names one.
            pub fn what_key(self) -> Option<&'static str> {
                $(if self == <$rule>::NAME { return <$rule>::WHAT; })*
                None
            }
            /// A count (an integer on the wire) rather than a ratio.
            pub fn is_count(self) -> bool {
                $(if self == <$rule>::NAME { return <$rule>::COUNT; })*
                true
            }
            /// Whether `signals` carries a reading of it.
            pub fn has_reading(self) -> bool {
                $(if self == <$rule>::NAME { return <$rule>::READING; })*
                false
            }
        }
    };
}

registry! {
    dup: dup::Dup,
    top: top::Top,
    slow: slow::Slow,
    coverage: coverage::Coverage,
    short_loop: short_loop::ShortLoop,
    run: run::Run,
    cycle: cycle::Cycle,
    same_failure: same_failure::SameFailure,
    failed_again: failed_again::FailedAgain,
    unmoved: unmoved::Unmoved,
    relanded: relanded::Relanded,
    circling: circling::Circling,
}

/// The element of a short list that `is`, added by `new` when there is none (the files a
/// session reads since its last landing are a handful: a scan is cheaper than a map).
pub fn find_or_add<T>(v: &mut Vec<T>, is: impl Fn(&T) -> bool, new: impl FnOnce() -> T) -> &mut T {
    let i = match v.iter().position(is) {
        Some(i) => i,
        None => {
            super::region::room(v);
            v.push(new());
            v.len() - 1
        }
    };
    &mut v[i]
}

/// Rounds a ratio for the wire.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
pub mod testing {
    //! Feeding one signal by hand, without the detector around it.
    use super::*;
    use crate::detect::region::{ReadSpan, Region};
    use crate::detect::target;
    use serde_json::{json, Value};

    /// One session's region and one signal's state.
    pub struct Bench<R: Rule> {
        pub st: R::State,
        pub region: Region,
        pub cfg: DetectorConfig,
        pub calls: u64,
        pub read_only: bool,
    }

    impl<R: Rule> Default for Bench<R> {
        fn default() -> Self {
            Bench {
                st: R::State::default(),
                region: Region::default(),
                cfg: DetectorConfig::default(),
                calls: 0,
                read_only: false,
            }
        }
    }

    /// A call for a bench: tool, arguments, output hash, failed, file length for reads.
    pub struct C {
        pub tool: &'static str,
        pub args: Value,
        pub out: Option<u64>,
        pub failed: bool,
        pub exit: Option<i64>,
        pub lines: Option<u32>,
        pub relanded: bool,
    }

    pub fn c(tool: &'static str, args: Value) -> C {
        C {
            tool,
            args,
            out: None,
            failed: false,
            exit: None,
            lines: None,
            relanded: false,
        }
    }

    pub fn read(path: &str, offset: i64, limit: i64, total: u32) -> C {
        C {
            lines: Some(total),
            ..c(
                "read",
                json!({"filePath": path, "offset": offset, "limit": limit}),
            )
        }
    }

    impl<R: Rule> Bench<R> {
        pub fn cx(&self) -> Cx<'_> {
            Cx::new(&self.region, self.calls, self.read_only, &self.cfg)
        }
        pub fn feed(&mut self, x: C) -> &mut Self {
            self.calls += 1;
            let args = x.args.as_object().unwrap().clone();
            let keys = target::keys(x.tool, &args);
            let id = format!("prt_{}", self.calls);
            let read = x.lines.map(|total| ReadSpan {
                file: target::hash_str(args["filePath"].as_str().unwrap()),
                lines: target::lines_requested(&args, total as i64) as u32,
                total,
            });
            let o = Obs {
                index: self.calls,
                t: self.calls as i64 * 1000,
                id: &id,
                tool: x.tool,
                args: target::CallArgs::of(x.tool, &args),
                exact: keys.exact,
                target: keys.target,
                worked: keys.target,
                read,
                out: x.out,
                failed: x.failed,
                exit: x.exit,
                relanded: x.relanded,
                dir: None,
            };
            if self.region.len() == self.cfg.window() {
                let (ex, tg, e) = self.region.pop().unwrap();
                let cx = Cx::new(&self.region, self.calls, self.read_only, &self.cfg);
                R::left(&mut self.st, ex, tg, &e, &cx);
            }
            self.region.push(&o);
            let cx = Cx::new(&self.region, self.calls, self.read_only, &self.cfg);
            R::call(&mut self.st, &o, &cx);
            self
        }
        pub fn times(&mut self, n: usize, x: impl Fn() -> C) -> &mut Self {
            for _ in 0..n {
                self.feed(x());
            }
            self
        }
        pub fn land(&mut self) -> &mut Self {
            self.calls += 1;
            self.region.clear();
            R::landed(&mut self.st);
            self
        }
        pub fn fires(&self) -> bool {
            R::fires(&self.st, &self.cx())
        }
        pub fn reading(&self) -> Reading {
            R::reading(&self.st, &self.cx())
        }
        pub fn case(&self) -> Case {
            R::case(&self.st, &self.cx())
        }
    }

    #[test]
    fn wire_names_are_the_serde_names() {
        for s in Signal::ALL {
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                Value::String(s.name().into())
            );
        }
    }
}
