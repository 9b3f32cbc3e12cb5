//! Where an event goes on each channel: the rules of rate limits, severities, quiet hours and
//! resolves, as a pure function of the channel, the event and what was sent before.

use super::{ChannelConfig, EffectiveChannel};
use crate::event::{AlertKind, Delivery, Event, Transition};

/// What has been sent for an alert on one channel before this tick.
#[derive(Debug, Clone, Copy, Default)]
pub struct SentBefore {
    /// The last time anything of this dedup key was sent here.
    pub key_last: Option<i64>,
    /// What was sent last of this dedup key here was a resolve: the operator was told it is
    /// over, so a new trigger is news, whatever the rate limit.
    pub key_resolved: bool,
    /// Something of this episode was sent (or tried: it may have shown) here.
    pub episode: bool,
}

/// Is `hour` inside the channel's quiet hours `[start, end)`?
pub fn quiet(c: &ChannelConfig, hour: Option<u8>) -> bool {
    match (c.quiet_hours, hour) {
        (Some([a, b]), Some(h)) if a != b => {
            if a < b {
                (a..b).contains(&h)
            } else {
                h >= a || h < b
            }
        }
        _ => false,
    }
}

/// Where an event goes on one channel: pending, deferred (quiet hours) or skipped (disabled,
/// below the channel's severity, rate limited), with the reason. Resolves and escalations are
/// never rate limited, nor a loop's trigger after its resolve was shown (the operator was told
/// it is over: that it loops again is news); a resolve goes only where something of its episode
/// went.
pub fn route(
    c: &EffectiveChannel,
    ev: &Event,
    sent: SentBefore,
    hour: Option<u8>,
    now: i64,
) -> (Delivery, String) {
    if !c.enabled {
        (Delivery::Skipped, "channel disabled".into())
    } else if ev.state == Transition::Resolve {
        // a resolve goes wherever the episode went, whatever the limits, and nowhere else: an
        // operator whose channel never showed the loop (rate limited, below its severity,
        // superseded before it was sent) gets no "resolved" for it either
        if sent.episode {
            (Delivery::Pending, String::new())
        } else {
            (
                Delivery::Skipped,
                "nothing was sent here for this alert".into(),
            )
        }
    } else if ev.severity < c.min {
        (
            Delivery::Skipped,
            format!("below min_severity {}", c.min.as_str()),
        )
    } else if c.cfg.unit().routes_itself() {
        // Alertmanager groups, dedups and silences by itself; every transition goes
        (Delivery::Pending, String::new())
    } else if ev.state != Transition::Escalate
        && !(ev.alert == AlertKind::Loop && sent.key_resolved)
        // each done notice is another turn's: news, however soon after the last
        && ev.alert != AlertKind::Done
        && sent.key_last.is_some_and(|t| {
            // user seconds: saturate, never wrap
            now.saturating_sub(t)
                < i64::try_from(c.cfg.rate_limit_secs)
                    .unwrap_or(i64::MAX)
                    .saturating_mul(1000)
        })
    {
        // an escalation comes once per episode and is the news: never rate limited
        (
            Delivery::Skipped,
            format!("rate limited ({}s)", c.cfg.rate_limit_secs),
        )
    } else if quiet(&c.cfg, hour) {
        (Delivery::Deferred, "quiet hours".into())
    } else {
        (Delivery::Pending, String::new())
    }
}

/// The operator's local hour, in-process (TZ, else /etc/localtime).
pub fn local_hour(now: i64) -> Option<u8> {
    let ts = jiff::Timestamp::from_millisecond(now).ok()?;
    let tz = jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC);
    Some(ts.to_zoned(tz).hour() as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::severity::Severity;

    #[test]
    fn an_escalation_and_a_trigger_after_a_shown_resolve_are_not_rate_limited_but_a_second_trigger_is(
    ) {
        let cfg: ChannelConfig = toml::from_str("name = \"d\"\ntype = \"desktop\"\n").unwrap();
        let c = EffectiveChannel {
            cfg,
            enabled: true,
            min: Severity::Warning,
            overridden: false,
        };
        let mut ev = crate::alert::text::blind_event(
            &crate::config::Config::default(),
            &[("s".into(), "r".into())],
            1_000_000,
        );
        let sent = SentBefore {
            key_last: Some(1_000_000 - 60_000),
            key_resolved: false,
            episode: true,
        };
        assert_eq!(
            route(&c, &ev, sent, None, 1_000_000),
            (Delivery::Skipped, "rate limited (300s)".into())
        );
        ev.state = Transition::Escalate;
        ev.severity = Severity::Critical;
        assert_eq!(
            route(&c, &ev, sent, None, 1_000_000),
            (Delivery::Pending, String::new())
        );
        // the operator was told it resolved a minute ago: a new trigger is news (an operator's
        // journey saw a loop resolved, then looping again for 2 min 40 s, its trigger held back)
        ev.state = Transition::Trigger;
        ev.severity = Severity::Warning;
        let after_resolve = SentBefore {
            key_resolved: true,
            ..sent
        };
        assert_eq!(
            route(&c, &ev, after_resolve, None, 1_000_000),
            (Delivery::Skipped, "rate limited (300s)".into()),
            "the blind alert keeps its limit"
        );
        ev.alert = crate::event::AlertKind::Loop;
        assert_eq!(
            route(&c, &ev, after_resolve, None, 1_000_000),
            (Delivery::Pending, String::new())
        );
    }

    #[test]
    fn a_resolve_goes_only_where_its_episode_went() {
        let cfg: ChannelConfig = toml::from_str("name = \"d\"\ntype = \"desktop\"\n").unwrap();
        let c = EffectiveChannel {
            cfg,
            enabled: true,
            min: Severity::Info,
            overridden: false,
        };
        let mut ev = crate::alert::text::blind_event(
            &crate::config::Config::default(),
            &[("s".into(), "r".into())],
            1_000_000,
        );
        ev.state = Transition::Resolve;
        ev.severity = Severity::Info;
        let never = SentBefore {
            key_last: Some(1_000_000 - 60_000),
            key_resolved: false,
            episode: false,
        };
        assert_eq!(
            route(&c, &ev, never, None, 1_000_000),
            (
                Delivery::Skipped,
                "nothing was sent here for this alert".into()
            )
        );
        let went = SentBefore {
            episode: true,
            ..never
        };
        assert_eq!(
            route(&c, &ev, went, Some(3), 1_000_000),
            (Delivery::Pending, String::new())
        );
    }

    #[test]
    fn quiet_hours_wrap_midnight() {
        let mut c: ChannelConfig =
            toml::from_str("name = \"d\"\ntype = \"desktop\"\nquiet_hours = [22, 7]\n").unwrap();
        assert!(quiet(&c, Some(23)));
        assert!(quiet(&c, Some(3)));
        assert!(!quiet(&c, Some(7)));
        assert!(!quiet(&c, Some(12)));
        c.quiet_hours = Some([9, 17]);
        assert!(quiet(&c, Some(9)));
        assert!(!quiet(&c, Some(17)));
        assert!(!quiet(&c, None));
    }
}
