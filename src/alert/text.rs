//! What the events say: titles, summaries and details for each step of a plan. Pure; the
//! figures and reasons come from the plan, the words from here, so every channel (desktop body,
//! webhook, PagerDuty, Alertmanager) shows the same ones.

pub use super::{burned, duration};
use super::{AlertEpisode, AlertKind, Event, Figures, Reason, Transition, Verdict};
use crate::config::Config;
use crate::record::Program;
use crate::severity::Severity;
use serde_json::{json, Map, Value};

pub fn link(cfg: &Config, root: &str) -> Option<String> {
    Some(crate::paths::page_link(
        &cfg.alert.link_base,
        &cfg.report_file(),
        root,
    ))
}

fn base(cfg: &Config, kind: AlertKind, key: String, root: &str, now: i64) -> Event {
    Event {
        dedup_key: key,
        severity: Severity::Warning,
        state: Transition::Trigger,
        title: String::new(),
        summary: String::new(),
        details: Map::new(),
        source: cfg.alert.source.clone(),
        t: now,
        alert: kind,
        root: root.to_string(),
        reason: None,
        figures: None,
        episode: None,
        agent: None,
        model: None,
        link: link(cfg, root),
    }
}

fn put_figures(d: &mut Map<String, Value>, f: &Figures) {
    d.insert("figures".into(), json!(f));
}

/// Which session, as its owner knows it: ` "its title" in ~/work/app` (what is known of it).
pub fn session_place(v: &Verdict) -> String {
    place(v.title.as_deref(), v.directory.as_deref())
}

/// ` "TITLE" in DIR` of a session, either part left out when unknown.
pub fn place(title: Option<&str>, directory: Option<&str>) -> String {
    let mut s = String::new();
    if let Some(t) = title.filter(|t| !t.is_empty()) {
        s += &format!(" \"{t}\"");
    }
    if let Some(d) = directory.filter(|d| !d.is_empty()) {
        s += &format!(" in {}", crate::paths::short(d));
    }
    s
}

/// What a loop event announces.
pub struct LoopNews {
    pub state: Transition,
    pub severity: Severity,
    pub opened: i64,
    pub figures: Figures,
    pub reason: Option<Reason>,
    /// The loop started again after an earlier episode, with nothing landed since: the figures
    /// count from there, not from the last landed change.
    pub again: bool,
    /// Follow mode's escalation: how long after the trigger (by the tick's time) and how
    /// many calls since it (it escalates by time and calls, not by ticks).
    pub since_trigger: Option<(i64, u64)>,
}

/// A loop's trigger or escalation; `tree` is its flagged verdicts, the most telling first.
pub fn loop_event(cfg: &Config, news: LoopNews, tree: &[&Verdict], now: i64) -> Event {
    let v = tree[0];
    let agent = v.agent.clone().unwrap_or_else(|| "agent".into());
    let repeats = v.repeats();
    let mut ev = base(
        cfg,
        AlertKind::Loop,
        super::loop_key(v.root()),
        v.root(),
        now,
    );
    ev.severity = news.severity;
    ev.state = news.state;
    let program = v.program.unwrap_or(Program::Opencode).display();
    ev.title = format!("{program} loop: {agent} {repeats}");
    ev.summary = loop_summary(cfg, &news, v, &repeats);
    ev.agent = v.agent.clone();
    ev.model = v.model.clone();
    ev.reason = news.reason;
    ev.figures = Some(news.figures);
    loop_details(&mut ev.details, &news, tree);
    ev
}

/// What an escalation adds before the summary, first so a person reads why it came again:
/// the loop went on past the alert, or the local model says it is looping. In follow mode it
/// says how long and how many calls after the alert, to the second (a minute's rounding hid
/// 49 s of a 1 min 49 s wait), and which of `[follow]`'s two bars it passed.
fn escalation_lead(cfg: &Config, news: &LoopNews) -> String {
    match news.reason {
        Some(Reason::StillLooping) => match news.since_trigger {
            Some((ms, c)) => {
                let f = &cfg.follow;
                let bar = if c >= f.escalate_after_calls {
                    format!("the {}-call bar", f.escalate_after_calls)
                } else {
                    format!("the {}-min bar", f.escalate_after_minutes)
                };
                format!(
                    "still looping {} and {} after the alert, past {bar}: ",
                    to_the_second(ms),
                    crate::event::calls(c)
                )
            }
            None => format!(
                "still looping after {} flagged ticks: ",
                news.figures.flagged_ticks
            ),
        },
        Some(Reason::SecondOpinion) => "the local model says it is looping: ".into(),
        _ => String::new(),
    }
}

/// "49 s", "1 min 49 s", "5 min"; an hour and more as `duration` says it.
fn to_the_second(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match (s / 60, s % 60) {
        (0, sec) => format!("{sec} s"),
        (m, 0) if m < 60 => format!("{m} min"),
        (m, sec) if m < 60 => format!("{m} min {sec} s"),
        _ => duration(ms),
    }
}

/// A loop event's one line for people: which session, what it repeats, what it burned and
/// which signals flagged it.
fn loop_summary(cfg: &Config, news: &LoopNews, v: &Verdict, repeats: &str) -> String {
    let lead = escalation_lead(cfg, news);
    let in_tree = if v.root() != v.session {
        format!(" (in the tree of {})", v.root())
    } else {
        String::new()
    };
    let since = if news.again {
        "since it started looping again"
    } else {
        "since its last landed change"
    };
    format!(
        "{lead}session {}{}{in_tree}{}{}: {repeats}; {} {since} (flagged by {})",
        v.session,
        session_place(v),
        // an agent that names none (Claude Code's main session) is not "agent agent"
        v.agent
            .as_deref()
            .map(|a| format!(", agent {a}"))
            .unwrap_or_default(),
        v.model
            .as_deref()
            .map(|m| format!(", model {m}"))
            .unwrap_or_default(),
        burned(&news.figures),
        v.reason_names().join(", ")
    )
}

/// A loop event's details for machines (webhook, PagerDuty, Alertmanager): the most telling
/// verdict's fields, the tree's flagged sessions and the figures.
fn loop_details(d: &mut Map<String, Value>, news: &LoopNews, tree: &[&Verdict]) {
    let v = tree[0];
    d.insert("session".into(), json!(v.session));
    if let Some(p) = v.program {
        d.insert("program".into(), json!(p));
    }
    d.insert("root".into(), json!(v.root()));
    d.insert("title".into(), json!(v.title));
    d.insert("directory".into(), json!(v.directory));
    d.insert("agent".into(), json!(v.agent));
    d.insert("model".into(), json!(v.model));
    d.insert(
        "runs_in".into(),
        json!(v.liveness.as_ref().and_then(|l| l.runs_in)),
    );
    d.insert("reasons".into(), json!(v.reasons));
    d.insert("signals".into(), Value::Object(v.signals.to_map()));
    d.insert("calls".into(), json!(v.calls));
    d.insert("calls_since_landed".into(), json!(v.calls_since_landed));
    d.insert("cost_since_landed".into(), json!(v.cost_since_landed));
    d.insert(
        "flagged_sessions".into(),
        json!(tree.iter().map(|t| t.session.clone()).collect::<Vec<_>>()),
    );
    d.insert("opened".into(), json!(news.opened));
    if let Some(r) = news.reason {
        d.insert("reason".into(), json!(r));
    }
    d.insert("flagged_ticks".into(), json!(news.figures.flagged_ticks));
    put_figures(d, &news.figures);
}

/// The resolve of an episode. `counts_ticks`: the timer's ticks, whose number says how long
/// the loop went on; follow mode's come every second or so and say nothing to a person.
pub fn resolve_event(
    cfg: &Config,
    ep: &AlertEpisode,
    reason: Reason,
    why: &str,
    figures: Option<Figures>,
    counts_ticks: bool,
    now: i64,
) -> Event {
    let kind = ep.kind.unwrap_or(AlertKind::Loop);
    let mut ev = base(cfg, kind, ep.key.clone(), &ep.subject, now);
    ev.severity = Severity::Info;
    ev.state = Transition::Resolve;
    ev.title = format!("resolved ({}): {}", reason.as_str(), ep.title);
    ev.summary = match (kind, figures) {
        (AlertKind::Loop, Some(f)) if counts_ticks => format!(
            "{}{}: {why}; the loop burned {}, {} flagged tick(s)",
            ep.subject,
            ep.place,
            burned(&f),
            f.flagged_ticks
        ),
        (AlertKind::Loop, Some(f)) => {
            format!(
                "{}{}: {why}; the loop burned {}",
                ep.subject,
                ep.place,
                burned(&f)
            )
        }
        _ => format!("{}{}: {why}", ep.subject, ep.place),
    };
    ev.agent = ep.agent.clone();
    ev.model = ep.model.clone();
    ev.reason = Some(reason);
    ev.figures = figures;
    ev.episode = Some(ep.id);
    let d = &mut ev.details;
    d.insert("reason".into(), json!(reason));
    d.insert("why".into(), json!(why));
    d.insert("opened".into(), json!(ep.opened));
    d.insert("open_for_ms".into(), json!(now - ep.opened));
    if let Some(f) = &figures {
        put_figures(d, f);
    }
    if kind == AlertKind::Blind {
        ev.link = None;
    }
    let stop = ep.stop.as_ref().or(ep.stop_under_way.as_ref());
    if let (Some(stop), Some(f), Reason::Stopped) = (stop, figures, reason) {
        stopped_words(&mut ev, ep, stop, &f);
    }
    ev
}

/// The stop of a loop as its resolve tells it: who stopped it after how much, and how to resume.
fn stopped_words(ev: &mut Event, ep: &AlertEpisode, stop: &super::StopSeen, f: &Figures) {
    let (words, resume) = crate::stop::resume_of(&stop.session, stop.via.as_deref());
    ev.title = format!("stopped by {}: {}", stop.who(), ep.title);
    ev.summary = format!(
        "session {}{} stopped by {}{} after {} and ${:.2}; resume with {}",
        stop.session,
        ep.place,
        stop.who(),
        super::decide::stopped::reason_words(&stop.by),
        crate::event::calls(f.calls),
        f.cost,
        words
    );
    ev.details.insert(
        "stop".into(),
        json!({
            "action_id": stop.action_id,
            "session": stop.session,
            "by": stop.by,
            "stopped": stop.stopped,
            "via": stop.via,
            "pid": stop.pid,
            "calls_after_request": stop.calls_after_request,
            "resume": resume,
        }),
    );
}

/// A liveness alert's trigger.
pub fn live_event(cfg: &Config, kind: AlertKind, sev: Severity, v: &Verdict, now: i64) -> Event {
    let what = match kind {
        AlertKind::Stalled => "stalled",
        AlertKind::Retrying => "keeps retrying its provider",
        AlertKind::Waiting => "needs a person",
        AlertKind::Interrupted => "was interrupted",
        AlertKind::Done => "finished its work",
        _ => "stopped with its own list unfinished",
    };
    let evidence = match (kind, super::finished(v)) {
        (AlertKind::Done, Some(turn)) => done_words(turn, v.directory.as_deref()),
        _ => v.liveness_evidence().to_string(),
    };
    let mut ev = base(cfg, kind, kind.key(&v.session), &v.session, now);
    ev.severity = sev;
    let program = v.program.unwrap_or(Program::Opencode).display();
    // an agent that names none (Claude Code's main session) is not "agent agent"
    let agent = v.agent.as_deref();
    ev.title = format!(
        "{program} {}session {what}",
        agent.map(|a| format!("{a} ")).unwrap_or_default()
    );
    ev.summary = format!(
        "session {}{}{}: {evidence}",
        v.session,
        session_place(v),
        agent.map(|a| format!(" (agent {a})")).unwrap_or_default()
    );
    ev.agent = v.agent.clone();
    ev.model = v.model.clone();
    let d = &mut ev.details;
    d.insert("session".into(), json!(v.session));
    if let Some(p) = v.program {
        d.insert("program".into(), json!(p));
    }
    d.insert("root".into(), json!(v.root()));
    // where it is, as a loop's details say it: the page's project column and the resolve read it
    d.insert("title".into(), json!(v.title));
    d.insert("directory".into(), json!(v.directory));
    d.insert("agent".into(), json!(v.agent));
    d.insert("model".into(), json!(v.model));
    d.insert("liveness".into(), json!(v.liveness));
    d.insert("opened".into(), json!(now));
    ev
}

/// What a finished turn landed, in words: `its turn ended; it landed 3 changes: edit
/// src/nav.js, write src/footer.js, bash git commit …`, the paths within `dir` shortened.
pub fn done_words(turn: &crate::record::Turn, dir: Option<&str>) -> String {
    if turn.landed == 0 {
        return "its turn ended; it landed no change".into();
    }
    let within = dir.map(|d| format!("{}/", d.trim_end_matches('/')));
    let targets: Vec<String> = turn
        .targets
        .iter()
        .map(|t| match &within {
            Some(d) => t.replace(d.as_str(), ""),
            None => t.clone(),
        })
        .collect();
    let more = if (turn.targets.len() as u64) < turn.landed
        && turn.targets.len() >= crate::record::TURN_TARGETS
    {
        ", …"
    } else {
        ""
    };
    format!(
        "its turn ended; it landed {} change{}: {}{more}",
        turn.landed,
        if turn.landed == 1 { "" } else { "s" },
        targets.join(", ")
    )
}

/// The "watchdog is blind" trigger.
pub fn blind_event(cfg: &Config, reasons: &[(String, String)], now: i64) -> Event {
    let text: Vec<String> = reasons.iter().map(|(s, r)| format!("{s}: {r}")).collect();
    let mut ev = base(
        cfg,
        AlertKind::Blind,
        super::BLIND_KEY.into(),
        &reasons[0].0,
        now,
    );
    ev.title = "watchdog is blind: cannot read an agent's sessions".into();
    ev.summary = format!(
        "the watchdog cannot see the sessions of a source, so it cannot tell their loops: {}",
        text.join("; ")
    );
    ev.link = None;
    let d = &mut ev.details;
    d.insert(
        "sources".into(),
        json!(reasons.iter().map(|r| &r.0).collect::<Vec<_>>()),
    );
    d.insert("reasons".into(), json!(text));
    d.insert("opened".into(), json!(now));
    ev
}

/// The blind reasons as one line, for the episode's evidence.
pub fn blind_evidence(reasons: &[(String, String)]) -> String {
    reasons
        .iter()
        .map(|(s, r)| format!("{s}: {r}"))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_alert_names_the_agent_program_and_opencodes_reads_as_before() {
        let cfg = Config::default();
        let title = |program: Option<Program>| {
            let v = Verdict {
                session: "s".into(),
                agent: Some("build".into()),
                program,
                ..Verdict::default()
            };
            let news = LoopNews {
                state: Transition::Trigger,
                severity: Severity::Warning,
                opened: 0,
                figures: Figures::default(),
                reason: None,
                again: false,
                since_trigger: None,
            };
            let ev = loop_event(&cfg, news, &[&v], 0);
            (ev.title, ev.details.get("program").cloned())
        };
        assert_eq!(title(None).0, "opencode loop: build loops");
        assert_eq!(title(None).1, None);
        let (t, p) = title(Some(Program::ClaudeCode));
        assert_eq!(t, "Claude Code loop: build loops");
        assert_eq!(p, Some(json!("claude-code")));
        assert_eq!(title(Some(Program::Codex)).0, "Codex loop: build loops");
    }

    /// Issue 41, done: what a turn landed, its paths within the project shortened, a long list
    /// cut with "…", none said so.
    #[test]
    fn a_done_notice_says_what_the_turn_landed() {
        use crate::record::Turn;
        let mut t = Turn {
            start: 0,
            end: Some(1),
            ..Turn::default()
        };
        assert_eq!(done_words(&t, None), "its turn ended; it landed no change");
        t.land("edit /w/app/src/a.py".into());
        t.land("edit /w/app/src/a.py".into());
        assert_eq!(
            done_words(&t, Some("/w/app/")),
            "its turn ended; it landed 2 changes: edit src/a.py"
        );
        for i in 0..10 {
            t.land(format!("write /w/app/f{i}.md"));
        }
        assert_eq!(t.targets.len(), crate::record::TURN_TARGETS);
        assert!(done_words(&t, Some("/w/app"))
            .starts_with("its turn ended; it landed 12 changes: edit src/a.py, write f0.md, "));
        assert!(done_words(&t, Some("/w/app")).ends_with(", write f6.md, …"));
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(duration(40_000), "40 s");
        assert_eq!(duration(12 * 60_000 + 5_000), "12 min");
        assert_eq!(duration(2 * 3_600_000 + 5 * 60_000), "2 h 05 min");
        assert_eq!(to_the_second(49_999), "49 s");
        assert_eq!(to_the_second(109_000), "1 min 49 s");
        assert_eq!(to_the_second(300_000), "5 min");
        assert_eq!(to_the_second(3_660_000), "1 h 01 min");
        assert_eq!(
            burned(&Figures {
                calls: 41,
                cost: 0.3712,
                duration_ms: 600_000,
                flagged_ticks: 2
            }),
            "41 calls and $0.37 over 10 min"
        );
    }
}
