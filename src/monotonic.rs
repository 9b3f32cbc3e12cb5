//! The monotonic clock that follow mode measures its durations on, and how it notices a step
//! of the wall clock (issue 42).
//!
//! The wall clock can be stepped (NTP after a long offline spell, a person's `date -s`, a VM
//! restored from a snapshot): a duration taken as the difference of two wall readings is then
//! off by the step. Follow mode's durations (a session's silence, an alert's minutes since its
//! trigger, how long a call has settled, the tick's own time) are differences of readings of
//! the machine's `CLOCK_MONOTONIC`, which no step moves; its `sweep` records carry one
//! ([`mono_ms`], `mono`), read once by `oc-sessions --follow` at each read, so that every stage
//! after it measures on the same readings. The wall clock still stamps what is stored and shown.
//!
//! `CLOCK_MONOTONIC` is the machine's, not a process's: every process of the pipeline reads the
//! same clock, so a stage may compare a record's `mono` with its own reading. It stands still
//! while the machine is suspended, and so does every agent on it; `CLOCK_BOOTTIME`, which does
//! not, tells a suspend from a step ([`StepWatch`]).

use rustix::time::{clock_gettime, ClockId};

/// Milliseconds on the machine's monotonic clock (since boot, not counting suspends).
pub fn mono_ms() -> i64 {
    ms(clock_gettime(ClockId::Monotonic))
}

/// Milliseconds since boot, counting suspends.
fn boot_ms() -> i64 {
    ms(clock_gettime(ClockId::Boottime))
}

fn ms(t: rustix::time::Timespec) -> i64 {
    t.tv_sec.saturating_mul(1000) + t.tv_nsec / 1_000_000
}

/// How far the wall clock may move against the monotonic one between two readings before it
/// counts as a step (ms). NTP slews a clock by at most 0.5 ms a second; a reading taken late
/// (a busy machine) is late on both clocks.
pub const STEP_TOLERANCE_MS: i64 = 2000;

/// One reading of the three clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// Wall clock, ms since the epoch.
    pub wall: i64,
    /// [`mono_ms`].
    pub mono: i64,
    /// Since boot, with suspends.
    pub boot: i64,
}

impl Reading {
    pub fn now() -> Reading {
        Reading {
            wall: crate::cli::now_ms(),
            mono: mono_ms(),
            boot: boot_ms(),
        }
    }
}

/// What moved the wall clock against the monotonic one between two readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jump {
    /// The wall clock was set: by `ms` (negative: back).
    Step { ms: i64 },
    /// The machine slept for `ms`: both the wall clock and the boot clock moved on.
    Suspend { ms: i64 },
}

/// Compares each reading with the one before: a wall clock that moved more than
/// [`STEP_TOLERANCE_MS`] beyond (or short of) the monotonic clock was stepped, or the machine
/// slept. Each jump is told once, at the first reading after it.
#[derive(Debug, Default)]
pub struct StepWatch {
    last: Option<Reading>,
}

impl StepWatch {
    /// Takes reading `r`; the jump since the previous one, if any.
    pub fn take(&mut self, r: Reading) -> Option<Jump> {
        let prev = self.last.replace(r)?;
        let mono = r.mono - prev.mono;
        let off = (r.wall - prev.wall) - mono;
        if off.abs() <= STEP_TOLERANCE_MS {
            return None;
        }
        let slept = (r.boot - prev.boot) - mono;
        if off > 0 && (slept - off).abs() <= STEP_TOLERANCE_MS {
            Some(Jump::Suspend { ms: slept })
        } else {
            Some(Jump::Step { ms: off })
        }
    }
}

/// `1 h`, `1 h 5 min`, `42 s`, `800 ms`: a jump's size for people.
pub fn words(ms: i64) -> String {
    let ms = ms.unsigned_abs();
    if ms < 1000 {
        return format!("{ms} ms");
    }
    let s = ms / 1000;
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    match (h, m, s) {
        (0, 0, s) => format!("{s} s"),
        (0, m, 0) => format!("{m} min"),
        (0, m, s) => format!("{m} min {s} s"),
        (h, 0, _) => format!("{h} h"),
        (h, m, _) => format!("{h} h {m} min"),
    }
}

impl Jump {
    /// One line for the log: what happened, and what it changes (nothing the watchdog measures).
    pub fn sentence(self, at: &str) -> String {
        match self {
            Jump::Step { ms } => format!(
                "the wall clock stepped {} {} at {at}; durations are measured on the monotonic \
                 clock, so no silence, escalation or poll is stretched or cut by it",
                if ms > 0 { "forward" } else { "back" },
                words(ms)
            ),
            Jump::Suspend { ms } => format!(
                "the machine was suspended for {} (until {at}); durations are measured on the \
                 monotonic clock, which stood still with every agent",
                words(ms)
            ),
        }
    }
}

/// An estimate of "now" on the clock a session's own times were written by (its agent's, on
/// this machine or another), carried forward on the monotonic clock between the moments the
/// watchdog saw the session change.
///
/// Comparing an agent's time of last progress with the watchdog's wall clock counts a step of
/// either clock as silence (a step forward: every busy session an hour silent) or takes silence
/// away (a step back). Instead, when the watchdog sees a session's newest time `a` change, it
/// knows the change happened since it last looked at the session, `since_ms` ago by the
/// monotonic clock: the session's clock then reads between `a` and `a + since_ms`, and the wall
/// clock's reading is taken only within those bounds. Between changes the estimate runs on
/// with the monotonic clock. A session seen for the first time has no bound: the wall clock
/// decides, as a timer tick does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Frame {
    /// (the session's clock, the monotonic clock) at the last estimate.
    at: Option<(i64, i64)>,
    /// The session's newest time when last seen.
    newest: Option<i64>,
}

impl Frame {
    /// The session's clock now, seen at wall `wall` and monotonic `mono`, its newest time
    /// being `newest`.
    pub fn now(&mut self, newest: Option<i64>, wall: i64, mono: i64) -> i64 {
        let est = match (self.at, newest) {
            (None, _) => wall,
            // a change since the last look: it happened within the time since then
            (Some((_, m)), Some(a)) if Some(a) != self.newest => {
                wall.clamp(a, a.saturating_add((mono - m).max(0)))
            }
            (Some((t, m)), _) => t + (mono - m).max(0),
        };
        self.at = Some((est, mono));
        self.newest = newest;
        est
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;

    fn r(wall: i64, mono: i64, boot: i64) -> Reading {
        Reading { wall, mono, boot }
    }

    #[test]
    fn a_step_either_way_is_told_once_and_a_suspend_is_told_as_one() {
        let mut w = StepWatch::default();
        assert_eq!(w.take(r(10 * H, 1000, 1000)), None);
        // a second later on both clocks, a little late: nothing
        assert_eq!(w.take(r(10 * H + 2500, 2500, 2500)), None);
        // stepped forward an hour between two polls a second apart
        assert_eq!(
            w.take(r(11 * H + 3500, 3500, 3500)),
            Some(Jump::Step { ms: H })
        );
        assert_eq!(w.take(r(11 * H + 4500, 4500, 4500)), None);
        // and back
        assert_eq!(
            w.take(r(10 * H + 5500, 5500, 5500)),
            Some(Jump::Step { ms: -H })
        );
        // a lid closed for an hour: the monotonic clock stood still, the boot clock did not
        assert_eq!(
            w.take(r(11 * H + 6500, 6500, 6500 + H)),
            Some(Jump::Suspend { ms: H })
        );
        assert_eq!(words(H), "1 h");
        assert_eq!(words(-H - 5 * 60_000), "1 h 5 min");
        assert_eq!(words(42_000), "42 s");
        assert!(Jump::Step { ms: -H }
            .sentence("05:00:00 UTC")
            .starts_with("the wall clock stepped back 1 h at 05:00:00 UTC; "));
    }

    /// A busy session whose agent writes a change every second, while the watchdog's wall
    /// clock (or the machine's, the agent's with it) steps an hour either way: its silence
    /// stays a second or so.
    #[test]
    fn a_sessions_clock_runs_on_the_monotonic_clock_between_its_changes() {
        let mut f = Frame::default();
        let t0 = 10 * H;
        // first seen: the wall clock decides
        assert_eq!(f.now(Some(t0 - 400), t0, 0), t0);
        // the watchdog's clock steps forward, the agent's does not: a change it saw within the
        // last second is at most a second old
        assert_eq!(f.now(Some(t0 + 600), t0 + H + 1000, 1000), t0 + 1600);
        // no change: an hour's wall step is no silence; 2 s on the monotonic clock are
        assert_eq!(f.now(Some(t0 + 600), t0 + H + 3000, 3000), t0 + 3600);
        // the machine's clock steps back, the agent's with it: its next change reads an hour
        // earlier, and is seen a moment after it was made
        let back = t0 + 4000 - H;
        assert_eq!(f.now(Some(back - 200), back, 4000), back);
        assert_eq!(f.now(Some(back - 200), back + 1000, 5000), back + 1000);
        // a session quiet for real grows silent on the monotonic clock alone
        assert_eq!(f.now(Some(back - 200), back + H, 905_000), back + 901_000);
    }
}
