//! What `wd-alert --follow` keeps between ticks: the latest verdict of every session seen, so
//! that a partial tick (only the sessions that changed) is decided on whole trees.
//!
//! In: each tick as read ([`TickView`]). Out: the tick the lifecycle decides on. A full tick is
//! decided as it came, exactly as a timer tick; a partial one gets, besides its own verdicts,
//! the cached verdicts of the other sessions of the trees it touched, and keeps no `sources`,
//! so that absence never resolves anything as gone. Sessions not seen for [`FORGET_AFTER_MS`]
//! and in no open alert's tree are forgotten, so memory stays flat over hours of sessions.
//!
//! It also measures how long each open episode has been open on the monotonic clock the ticks
//! carry (`mono`, issue 42), for the escalation's `escalate_after_minutes`: from the tick that
//! opened it, or, for one opened before this process started, from its first tick here less
//! what the wall clock said it had been open then.

use super::TickView;
use crate::record::Verdict;
use std::collections::{HashMap, HashSet};

/// A session neither seen nor in an open alert's tree for this long is forgotten.
pub const FORGET_AFTER_MS: i64 = 3_600_000;

/// The latest verdict of every session seen, and when it was last seen (the tick's monotonic
/// reading, else its time).
#[derive(Debug, Default)]
pub struct Cache {
    latest: HashMap<String, (Verdict, i64)>,
    /// Open episodes by id: when each opened on the monotonic clock.
    opened: HashMap<i64, i64>,
}

impl Cache {
    pub fn len(&self) -> usize {
        self.latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    /// Keeps the tick's verdicts and returns the tick to decide on (see the module docs).
    pub fn view(&mut self, mut tick: TickView) -> TickView {
        for v in &tick.verdicts {
            self.latest
                .insert(v.session.clone(), (v.clone(), tick.mono.unwrap_or(tick.t)));
        }
        if !tick.partial {
            return tick;
        }
        let roots: HashSet<&str> = tick.verdicts.iter().map(|v| v.root()).collect();
        let here: HashSet<&str> = tick.verdicts.iter().map(|v| v.session.as_str()).collect();
        let mut rest: Vec<Verdict> = self
            .latest
            .values()
            .map(|(v, _)| v)
            .filter(|v| roots.contains(v.root()) && !here.contains(v.session.as_str()))
            .cloned()
            .collect();
        rest.sort_by(|a, b| a.session.cmp(&b.session));
        tick.verdicts.extend(rest);
        tick.sources.clear();
        tick
    }

    /// Episode `id` opened at the tick read at monotonic `mono`.
    pub fn opened(&mut self, id: i64, mono: i64) {
        self.opened.insert(id, mono);
    }

    /// Fills `tick.open_for` for the episodes open now (`open`: id, wall time it opened), when
    /// the tick carries a monotonic reading.
    pub fn measure(&mut self, tick: &mut TickView, open: &[(i64, i64)]) {
        let Some(mono) = tick.mono else {
            return;
        };
        self.opened
            .retain(|id, _| open.iter().any(|(o, _)| o == id));
        for &(id, wall) in open {
            let at = *self
                .opened
                .entry(id)
                .or_insert_with(|| mono - (tick.t - wall).max(0));
            tick.open_for.insert(id, (mono - at).max(0));
        }
    }

    /// Forgets the sessions last seen before `now - FORGET_AFTER_MS` whose tree has no open
    /// alert (`open_roots`); returns how many. `now`: the tick's monotonic reading where it
    /// has one, else its time.
    pub fn forget(&mut self, now: i64, open_roots: &HashSet<String>) -> usize {
        let before = self.latest.len();
        self.latest
            .retain(|_, (v, seen)| *seen >= now - FORGET_AFTER_MS || open_roots.contains(v.root()));
        before - self.latest.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::TickMode;

    fn v(session: &str, root: &str, calls: u64) -> Verdict {
        Verdict {
            session: session.into(),
            root: root.into(),
            calls,
            ..Verdict::default()
        }
    }

    fn tick(t: i64, partial: bool, vs: Vec<Verdict>) -> TickView {
        TickView {
            verdicts: vs,
            sources: vec!["/o.db".into()],
            t,
            mode: TickMode::Follow,
            partial,
            ..TickView::default()
        }
    }

    /// Issue 42: an episode's time open is measured on the ticks' monotonic clock, from the tick
    /// that opened it, or for one opened before this process, from its first tick here less
    /// what the wall clock said then; a step of the wall clock changes neither.
    #[test]
    fn an_episodes_time_open_runs_on_the_monotonic_clock() {
        const H: i64 = 3_600_000;
        let mut c = Cache::default();
        let at = |t: i64, mono: i64| TickView {
            mono: Some(mono),
            ..tick(t, true, vec![])
        };
        // episode 7 opened 2 minutes before this process's first tick; 8 opens at it
        let mut first = at(10 * H, 5000);
        c.measure(&mut first, &[(7, 10 * H - 120_000)]);
        assert_eq!(first.open_for, HashMap::from([(7, 120_000)]));
        c.opened(8, 5000);
        // a minute on, the wall clock an hour forward
        let mut later = at(11 * H + 60_000, 65_000);
        c.measure(&mut later, &[(7, 10 * H - 120_000), (8, 10 * H)]);
        assert_eq!(later.open_for, HashMap::from([(7, 180_000), (8, 60_000)]));
        // a stream without monotonic readings is measured by its time, as before
        let mut old = tick(11 * H, true, vec![]);
        c.measure(&mut old, &[(8, 10 * H)]);
        assert!(old.open_for.is_empty());
    }

    fn sessions(t: &TickView) -> Vec<(&str, u64)> {
        t.verdicts
            .iter()
            .map(|v| (v.session.as_str(), v.calls))
            .collect()
    }

    /// A partial tick is decided on its sessions' whole trees, from the cache, with no source
    /// read; a full tick as it came.
    #[test]
    fn a_partial_tick_gets_the_rest_of_its_trees_and_no_sources() {
        let mut c = Cache::default();
        let full = c.view(tick(
            1000,
            false,
            vec![v("r", "r", 5), v("c1", "r", 9), v("x", "x", 3)],
        ));
        assert_eq!(sessions(&full), [("r", 5), ("c1", 9), ("x", 3)]);
        assert_eq!(full.sources, ["/o.db"]);
        let p = c.view(tick(2000, true, vec![v("c1", "r", 12)]));
        assert_eq!(sessions(&p), [("c1", 12), ("r", 5)]);
        assert!(p.sources.is_empty());
        // the cache took the newer verdict
        let p = c.view(tick(3000, true, vec![v("r", "r", 6)]));
        assert_eq!(sessions(&p), [("r", 6), ("c1", 12)]);
        // a full tick is not filled in: what it does not list is absent
        let full = c.view(tick(4000, false, vec![v("x", "x", 3)]));
        assert_eq!(sessions(&full), [("x", 3)]);
    }

    /// Sessions quiet for an hour go, unless their tree has an open alert.
    #[test]
    fn quiet_sessions_are_forgotten_unless_their_tree_is_alerting() {
        let mut c = Cache::default();
        c.view(tick(0, false, vec![v("r", "r", 5), v("x", "x", 3)]));
        c.view(tick(FORGET_AFTER_MS, true, vec![v("y", "y", 1)]));
        let open = HashSet::from(["r".to_string()]);
        assert_eq!(c.forget(FORGET_AFTER_MS + 1, &open), 1);
        assert_eq!(c.len(), 2);
        assert_eq!(c.forget(FORGET_AFTER_MS + 1, &HashSet::new()), 1);
        assert_eq!(c.len(), 1);
    }
}
