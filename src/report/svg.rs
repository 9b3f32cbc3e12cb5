//! The page's pictures, as inline SVG text: a session's calls along time, and the per-model
//! bar chart. Geometry that all marks share lives in the page's CSS (classes below), so one
//! mark costs about 25 bytes and 200 open loops still fit in well under a megabyte.

use super::html::esc;
use super::{Flagged, Mark};
use std::collections::HashMap;
use std::fmt::Write;

/// Width of a session picture, in px.
pub const W: f64 = 760.0;
const PAD: f64 = 8.0;

/// The CSS class of a tool's marks (its colour).
pub fn tool_class(tool: &str) -> &'static str {
    match tool {
        "read" => "tr",
        "edit" | "write" | "multiedit" | "patch" | "apply_patch" => "te",
        "bash" => "tb",
        "grep" | "glob" | "list" | "codesearch" => "tg",
        "task" => "tt",
        "webfetch" | "websearch" => "tw",
        _ => "to",
    }
}

/// Tool classes with the names the legend gives them.
pub const LEGEND: [(&str, &str); 7] = [
    ("tr", "read"),
    ("te", "edit / write"),
    ("tb", "bash"),
    ("tg", "grep / glob / list"),
    ("tt", "task"),
    ("tw", "web"),
    ("to", "other"),
];

/// What the picture of one session shows, worked out from its marks.
#[derive(Debug, PartialEq)]
pub struct Story {
    /// The target key of the highlighted repeats.
    pub key: Option<String>,
    /// How many marks repeat it.
    pub repeats: usize,
    /// Index (into the marks) of the loop's first call.
    pub start: Option<usize>,
    /// Index of the first call at or after the first flag.
    pub flag: Option<usize>,
    pub landed: usize,
}

/// Finds the repeated target (the verdict's `top_target`, else the most repeated target since
/// the last landed change), the loop's start (the detector's, else the first call on the target
/// after the last landed change before the flag) and the first flag.
pub fn story(
    marks: &[Mark],
    top_target: Option<&str>,
    first_flag_t: Option<i64>,
    loop_start_t: Option<i64>,
) -> Story {
    let key = top_target
        .and_then(|t| marks.iter().rev().find(|m| m.target == t))
        .map(|m| m.key.clone())
        .or_else(|| {
            let from = marks.iter().rposition(|m| m.landed).map_or(0, |i| i + 1);
            let mut n: HashMap<&str, (usize, usize)> = HashMap::new();
            for (i, m) in marks.iter().enumerate().skip(from) {
                let e = n.entry(&m.key).or_insert((0, 0));
                e.0 += 1;
                e.1 = i;
            }
            n.into_iter()
                .filter(|(_, (c, _))| *c > 1)
                .max_by_key(|(_, v)| *v)
                .map(|(k, _)| k.to_string())
        });
    let flag = first_flag_t.and_then(|t| marks.iter().position(|m| m.t >= t));
    let before = flag.map_or(marks.len(), |f| f + 1);
    let last_land = marks[..before].iter().rposition(|m| m.landed);
    let given = loop_start_t.and_then(|t| marks.iter().position(|m| m.t >= t));
    let start = given.or_else(|| {
        let k = key.as_ref()?;
        let from = last_land.map_or(0, |i| i + 1);
        marks
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, m)| &m.key == k)
            .map(|(i, _)| i)
    });
    Story {
        repeats: key
            .as_ref()
            .map_or(0, |k| marks.iter().filter(|m| &m.key == k).count()),
        key,
        start,
        flag,
        landed: marks.iter().filter(|m| m.landed).count(),
    }
}

/// A session's calls along time: one mark per call coloured by tool, repeats of the top target
/// tall and outlined, landed changes as green triangles below, the loop's start and first flag
/// as labelled lines.
pub fn session(f: &Flagged) -> String {
    let mut s = String::new();
    let marks = &f.marks;
    if marks.is_empty() {
        return s;
    }
    let (id, total_calls) = (&f.session, f.calls);
    let st = story(
        marks,
        f.top_target.as_deref(),
        f.first_flag_t,
        f.loop_start_t,
    );
    let t0 = marks[0].t;
    let t1 = marks[marks.len() - 1].t.max(t0 + 1);
    let x = |t: i64| PAD + (t - t0) as f64 / (t1 - t0) as f64 * (W - 2.0 * PAD);
    let shown = match total_calls {
        Some(n) if n as usize > marks.len() => format!("the last {} of {n} calls", marks.len()),
        _ => format!("{} calls", marks.len()),
    };
    let top = st
        .key
        .as_ref()
        .and_then(|k| marks.iter().find(|m| &m.key == k))
        .map(|m| m.target.clone());
    let _ = write!(
        s,
        "<svg class=\"pic\" viewBox=\"0 0 {W} 64\" width=\"{W}\" height=\"64\" role=\"img\" data-session=\"{}\" data-calls=\"{}\" data-repeats=\"{}\"><title>{}, {} to {}{}; {} landed change{}</title>",
        esc(id),
        marks.len(),
        st.repeats,
        shown,
        hm(t0),
        hm(marks[marks.len() - 1].t),
        top.as_deref()
            .map(|t| format!("; {} on {} (tall, outlined)", st.repeats, esc(t)))
            .unwrap_or_default(),
        st.landed,
        if st.landed == 1 { "" } else { "s" },
    );
    s += "<line class=\"ax\" x1=\"0\" y1=\"30\" x2=\"760\" y2=\"30\"/>";
    for (label, at, cls, dy) in [
        ("loop starts", st.start, "ls", 0),
        ("flagged", st.flag, "ff", 1),
    ] {
        if let Some(i) = at {
            let xi = x(marks[i].t);
            let anchor = if xi > W - 90.0 { "end" } else { "start" };
            let _ = write!(
                s,
                "<line class=\"{cls}\" x1=\"{xi:.0}\" y1=\"0\" x2=\"{xi:.0}\" y2=\"44\"/><text class=\"{cls}\" x=\"{:.0}\" y=\"{}\" text-anchor=\"{anchor}\">{label}</text>",
                if anchor == "end" { xi - 3.0 } else { xi + 3.0 },
                53 + dy * 9,
            );
        }
    }
    s += "<g class=\"marks\">";
    for m in marks {
        let rep = st.key.as_ref() == Some(&m.key);
        let _ = write!(
            s,
            "<rect x=\"{:.0}\" class=\"{}{}{}\"/>",
            x(m.t),
            tool_class(&m.tool),
            if rep { " r" } else { "" },
            if m.failed { " f" } else { "" }
        );
    }
    s += "</g><g class=\"land\">";
    for m in marks.iter().filter(|m| m.landed) {
        let xi = x(m.t);
        let _ = write!(s, "<path d=\"M{xi:.0} 33l4 7h-8z\"/>");
    }
    let _ = write!(
        s,
        "</g><text class=\"tl\" x=\"0\" y=\"62\">{}</text><text class=\"tl\" x=\"760\" y=\"62\" text-anchor=\"end\">{}</text></svg>",
        hm(t0),
        hm(marks[marks.len() - 1].t)
    );
    s
}

/// The rollup as bars: per model, its share of sessions and its share of flagged sessions.
pub fn bars(rows: &[(String, f64, f64)]) -> String {
    let row_h = 26.0;
    let label_w = 200.0;
    let bar_w = 300.0;
    let h = rows.len() as f64 * row_h + 22.0;
    let mut s = format!(
        "<svg class=\"bars\" viewBox=\"0 0 760 {h}\" width=\"760\" height=\"{h}\" role=\"img\"><title>share of sessions (grey) and of flagged sessions (orange) per model</title>"
    );
    for (i, (model, sess, flag)) in rows.iter().enumerate() {
        let y = i as f64 * row_h + 4.0;
        let _ = write!(
            s,
            "<text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"end\">{}</text><rect class=\"bs\" x=\"{label_w}\" y=\"{y:.0}\" width=\"{:.1}\" height=\"9\"/><rect class=\"bf\" x=\"{label_w}\" y=\"{:.0}\" width=\"{:.1}\" height=\"9\"/><text class=\"bv\" x=\"{:.0}\" y=\"{:.0}\">{:.0}% of sessions, {:.0}% of flagged</text>",
            label_w - 8.0,
            y + 14.0,
            esc(&clip(model, 30)),
            (sess * bar_w).max(1.0),
            y + 11.0,
            (flag * bar_w).max(if *flag > 0.0 { 1.0 } else { 0.0 }),
            label_w + bar_w + 8.0,
            y + 14.0,
            sess * 100.0,
            flag * 100.0,
        );
    }
    s += "</svg>";
    s
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() > n {
        s.chars().take(n - 1).collect::<String>() + "…"
    } else {
        s.to_string()
    }
}

/// `HH:MM:SS` (UTC) of epoch ms.
pub fn hm(ms: i64) -> String {
    crate::cli::iso_ms(ms)[11..19].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(seq: i64, t: i64, tool: &str, target: &str, landed: bool) -> Mark {
        Mark {
            seq,
            t,
            tool: tool.into(),
            landed,
            failed: false,
            target: target.into(),
            key: format!("k-{target}"),
        }
    }

    #[test]
    fn the_loop_starts_after_the_last_landed_change_before_the_flag() {
        let marks = vec![
            m(0, 0, "read", "read a", false),
            m(1, 10, "edit", "edit a", true),
            m(2, 20, "read", "read a", false),
            m(3, 30, "read", "read a", false),
            m(4, 40, "read", "read a", false),
        ];
        let st = story(&marks, Some("read a"), Some(35), None);
        assert_eq!(
            st,
            Story {
                key: Some("k-read a".into()),
                repeats: 4,
                start: Some(2),
                flag: Some(4),
                landed: 1,
            }
        );
        assert_eq!(
            story(&marks, Some("read a"), Some(35), Some(30)).start,
            Some(3)
        );
        let svg = session(&Flagged {
            session: "ses_x".into(),
            top_target: Some("read a".into()),
            first_flag_t: Some(35),
            calls: Some(5),
            marks,
            ..Flagged::default()
        });
        assert_eq!(svg.matches("<rect ").count(), 5);
        assert_eq!(svg.matches(" r\"").count(), 4);
        assert_eq!(svg.matches("<path ").count(), 1);
        assert!(svg.contains(">loop starts</text>") && svg.contains(">flagged</text>"));
    }

    #[test]
    fn without_a_top_target_the_most_repeated_target_since_landing_is_highlighted() {
        let marks = vec![
            m(0, 0, "bash", "bash make", false),
            m(1, 10, "bash", "bash make", false),
            m(2, 20, "grep", "grep x", false),
        ];
        assert_eq!(
            story(&marks, None, None, None).key.as_deref(),
            Some("k-bash make")
        );
    }
}
