//! How the page and the tables write times: in the local time zone of the machine that writes
//! them, with the zone's abbreviation, because they are read at that desktop next to its clock
//! and its desktop alerts; the `<time datetime>` attribute keeps the instant in UTC. When the zone
//! cannot be found (no `TZ`, no `/etc/localtime`), times are UTC and say so.

use jiff::tz::TimeZone;
use jiff::Timestamp;

#[derive(Debug, Clone)]
pub struct Clock {
    tz: TimeZone,
}

impl Default for Clock {
    fn default() -> Self {
        Clock { tz: TimeZone::UTC }
    }
}

impl Clock {
    /// The system's zone (`TZ`, else `/etc/localtime`), else UTC.
    pub fn system() -> Clock {
        Clock {
            tz: TimeZone::try_system().unwrap_or(TimeZone::UTC),
        }
    }

    pub fn zone(tz: TimeZone) -> Clock {
        Clock { tz }
    }

    fn fmt(&self, ms: i64, f: &str) -> String {
        match Timestamp::from_millisecond(ms) {
            Ok(ts) => ts.to_zoned(self.tz.clone()).strftime(f).to_string(),
            Err(_) => format!("@{ms}"),
        }
    }

    /// `2026-11-30 14:43:20 CET`
    pub fn full(&self, ms: i64) -> String {
        self.fmt(ms, "%Y-%m-%d %H:%M:%S %Z")
    }

    /// `11-30 14:43` (the zone is named once, in the page's header)
    pub fn short(&self, ms: i64) -> String {
        self.fmt(ms, "%m-%d %H:%M")
    }

    /// `14:43:20`
    pub fn hms(&self, ms: i64) -> String {
        self.fmt(ms, "%H:%M:%S")
    }

    /// `CET`, `UTC`: the zone's abbreviation at `ms`.
    pub fn abbr(&self, ms: i64) -> String {
        self.fmt(ms, "%Z")
    }

    /// What the header says about the times: `local time, Europe/Berlin (UTC+01:00)`.
    pub fn label(&self, ms: i64) -> String {
        let utc = matches!(
            self.tz.iana_name(),
            Some(
                "UTC" | "Etc/UTC" | "Etc/UCT" | "Etc/Universal" | "Etc/Zulu" | "Universal" | "Zulu"
            )
        );
        if self.tz == TimeZone::UTC || utc {
            return "UTC".into();
        }
        let off = self.fmt(ms, "%:z");
        match self.tz.iana_name() {
            Some(n) => format!("local time, {n} (UTC{off})"),
            None => format!("local time (UTC{off})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_local_with_the_zone_named() {
        // Central European rules as a POSIX TZ string: no tzdata needed
        let c = Clock::zone(TimeZone::posix("CET-1CEST,M3.5.0,M10.5.0/3").unwrap());
        // 2026-11-30T23:43:20Z is past midnight in Berlin
        let t = 1_796_082_200_000;
        assert_eq!(c.full(t), "2026-12-01 00:43:20 CET");
        assert_eq!(c.short(t), "12-01 00:43");
        assert_eq!(c.hms(t), "00:43:20");
        assert_eq!(c.label(t), "local time (UTC+01:00)");
        // summer time
        assert_eq!(c.full(1_782_000_000_000), "2026-06-21 02:00:00 CEST");
        let u = Clock::default();
        assert_eq!(u.full(t), "2026-11-30 23:43:20 UTC");
        assert_eq!(u.label(t), "UTC");
    }
}
