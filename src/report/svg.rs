//! The page's pictures, as inline SVG text: a session's calls along time, and the per-model
//! bar chart. Geometry that all marks share lives in the page's CSS (classes below), so one
//! mark costs about 25 bytes and 200 open loops still fit in well under a megabyte.

use super::esc::esc;
use super::{CallMark, Clock, Flagged};
use std::collections::HashMap;
use std::fmt::Write;

/// Width of a session picture, in px.
pub const W: f64 = 760.0;
const PAD: f64 = 8.0;

/// The CSS class of a tool's marks (its colour), by the vocabulary's kind of tool (a tool added
/// to it is coloured here or the build fails).
pub fn tool_class(tool: &str) -> &'static str {
    use crate::vocab::Tool;
    match Tool::of(tool) {
        Tool::Read => "tr",
        Tool::Edit | Tool::MultiEdit | Tool::ApplyPatch | Tool::Patch | Tool::Write => "te",
        Tool::Bash => "tb",
        Tool::Grep | Tool::Glob => "tg",
        Tool::Task => "tt",
        // tools the detector judges by their exact arguments, drawn by what they do
        Tool::TodoWrite | Tool::Other => match tool {
            "list" | "codesearch" => "tg",
            "webfetch" | "websearch" => "tw",
            _ => "to",
        },
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

/// The legend's name of a tool class.
fn class_name(cls: &str) -> &'static str {
    LEGEND.iter().find(|l| l.0 == cls).map_or("other", |l| l.1)
}

/// Path data drawing `shape` at each of `xs` (ascending): the first subpath moves to
/// `(x + dx0, y)`, each next one moves relatively from where `shape` left the pen (`end`, from
/// the subpath's start), so one mark costs its shape plus a few digits.
fn subpaths(xs: &[i64], dx0: i64, y: i64, shape: &str, end: (i64, i64)) -> String {
    let mut d = String::with_capacity(xs.len() * (shape.len() + 5));
    let mut prev = None;
    for &x in xs {
        match prev {
            None => {
                let _ = write!(d, "M{} {y}{shape}", x + dx0);
            }
            Some(p) => {
                let (dx, dy) = (x - p - end.0, -end.1);
                let sep = if dy < 0 { "" } else { " " };
                let _ = write!(d, "m{dx}{sep}{dy}{shape}");
            }
        }
        prev = Some(x);
    }
    d
}

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
    marks: &[CallMark],
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
pub fn session(f: &Flagged, clock: &Clock) -> String {
    let mut s = String::new();
    let marks = &f.marks;
    if marks.is_empty() {
        return s;
    }
    let st = story(
        marks,
        f.top_target.as_deref(),
        f.first_flag_t,
        f.loop_start_t,
    );
    let t0 = marks[0].t;
    let t1 = marks[marks.len() - 1].t.max(t0 + 1);
    let x = |t: i64| PAD + (t - t0) as f64 / (t1 - t0) as f64 * (W - 2.0 * PAD);
    // One path per kind of mark (tool colour; repeat of the top target; failed), one short
    // subpath per call in integer units and relative moves: ~9 bytes a call where a <rect> took
    // ~27, so 200 open loops stay well under 1 MB.
    let xs: Vec<i64> = marks.iter().map(|m| x(m.t).round() as i64).collect();
    let groups = groups(marks, &xs, &st);
    title(&mut s, f, clock, &st, &groups);
    s += "<path class=\"ax\" d=\"M0 30h760\"/>";
    // where this episode began, when it continues an earlier one of the same loop
    let resumed = f
        .episode_start_t
        .and_then(|t| marks.iter().position(|m| m.t >= t));
    event_lines(&mut s, &xs, &st, resumed);
    for g in &groups {
        group_path(&mut s, g);
    }
    landed(&mut s, marks, &xs);
    let _ = write!(
        s,
        "<text class=\"tl\" x=\"0\" y=\"72\">{}</text><text class=\"tl\" x=\"760\" y=\"72\" text-anchor=\"end\">{}</text></svg>",
        clock.hms(t0),
        clock.hms(marks[marks.len() - 1].t)
    );
    s
}

/// The marks grouped by kind (repeat of the top target, tool, failed), each group with its
/// marks' x positions; ordinary marks first, so that repeats are drawn over them.
fn groups(marks: &[CallMark], xs: &[i64], st: &Story) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (m, &xi) in marks.iter().zip(xs) {
        let g = Group {
            repeat: st.key.as_ref() == Some(&m.key),
            tool: tool_class(&m.tool),
            failed: m.failed,
            xs: Vec::new(),
        };
        match groups.iter_mut().find(|o| o.same(&g)) {
            Some(o) => o.xs.push(xi),
            None => groups.push(Group { xs: vec![xi], ..g }),
        }
    }
    // ordinary marks first, repeats drawn over them
    groups.sort_by_key(|g| (g.repeat, g.tool, g.failed));
    groups
}

/// The picture's opening tag and its title: how many calls of which tools, from when to when,
/// the repeats of the top target and the landed changes.
fn title(s: &mut String, f: &Flagged, clock: &Clock, st: &Story, groups: &[Group]) {
    let marks = &f.marks;
    let (id, total_calls) = (&f.session, f.calls);
    let t0 = marks[0].t;
    let mut per_tool: Vec<(&str, usize)> = Vec::new();
    for (cls, _) in LEGEND {
        let n: usize = groups
            .iter()
            .filter(|g| g.tool == cls)
            .map(|g| g.xs.len())
            .sum();
        if n > 0 {
            per_tool.push((class_name(cls), n));
        }
    }
    per_tool.sort_by_key(|p| std::cmp::Reverse(p.1));
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
        "<svg class=\"pic\" viewBox=\"0 0 {W} 74\" width=\"{W}\" height=\"74\" role=\"img\" data-session=\"{}\" data-calls=\"{}\" data-repeats=\"{}\"><title>{} ({}), {} to {} {}{}; {} landed change{}</title>",
        esc(id),
        marks.len(),
        st.repeats,
        shown,
        per_tool
            .iter()
            .map(|(name, n)| format!("{name} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        clock.hms(t0),
        clock.hms(marks[marks.len() - 1].t),
        clock.abbr(t0),
        top.as_deref()
            .map(|t| format!("; {} on {} (tall, outlined)", st.repeats, esc(t)))
            .unwrap_or_default(),
        st.landed,
        if st.landed == 1 { "" } else { "s" },
    );
}

/// The labelled lines where the loop starts, where it resumed and where it was flagged.
fn event_lines(s: &mut String, xs: &[i64], st: &Story, resumed: Option<usize>) {
    // labels share the first row unless they would run into each other
    let mut rows: [Vec<i64>; 2] = [Vec::new(), Vec::new()];
    for (label, at, cls) in [
        ("loop starts", st.start, "ls"),
        ("resumed", resumed, "es"),
        ("flagged", st.flag, "ff"),
    ] {
        if let Some(i) = at {
            let xi = xs[i];
            let dy = if rows[0].iter().all(|&o| (o - xi).abs() >= 90) {
                0
            } else {
                1
            };
            rows[dy].push(xi);
            let anchor = if xi > W as i64 - 90 { "end" } else { "start" };
            let _ = write!(
                s,
                "<path class=\"{cls}\" d=\"M{xi} 0v44\"/><text class=\"{cls}\" x=\"{}\" y=\"{}\" text-anchor=\"{anchor}\">{label}</text>",
                if anchor == "end" { xi - 3 } else { xi + 3 },
                52 + dy as i64 * 9,
            );
        }
    }
}

/// One group's marks as one path, with a title that counts them.
fn group_path(s: &mut String, g: &Group) {
    let _ = write!(
        s,
        "<path class=\"{} {}{}\" d=\"{}\"><title>{}{} {}{}</title></path>",
        if g.repeat { "r" } else { "c" },
        g.tool,
        if g.failed { " f" } else { "" },
        // a 3 px long stretch of a 14 px wide stroke is a 3 x 14 bar (22 px for a repeat,
        // outlined by the page's CSS)
        subpaths(&g.xs, -1, if g.repeat { 15 } else { 17 }, "h3", (3, 0)),
        g.xs.len(),
        if g.repeat {
            " repeats of the top target,"
        } else {
            ""
        },
        class_name(g.tool),
        if g.failed { ", failed" } else { "" },
    );
}

/// The landed changes, as green triangles below the marks.
fn landed(s: &mut String, marks: &[CallMark], xs: &[i64]) {
    let land: Vec<i64> = marks
        .iter()
        .zip(xs)
        .filter(|(m, _)| m.landed)
        .map(|(_, &xi)| xi)
        .collect();
    if !land.is_empty() {
        let _ = write!(
            s,
            "<path class=\"land\" d=\"{}\"><title>{} landed change{}</title></path>",
            subpaths(&land, 0, 33, "l4 7h-8z", (0, 0)),
            land.len(),
            if land.len() == 1 { "" } else { "s" }
        );
    }
}

/// The marks of one kind in a picture, drawn as one path.
struct Group {
    repeat: bool,
    tool: &'static str,
    failed: bool,
    xs: Vec<i64>,
}

impl Group {
    fn same(&self, o: &Group) -> bool {
        (self.repeat, self.tool, self.failed) == (o.repeat, o.tool, o.failed)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn m(seq: i64, t: i64, tool: &str, target: &str, landed: bool) -> CallMark {
        CallMark {
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
        let svg = session(
            &Flagged {
                session: "ses_x".into(),
                top_target: Some("read a".into()),
                first_flag_t: Some(35),
                calls: Some(5),
                marks,
                ..Flagged::default()
            },
            &Clock::default(),
        );
        // one subpath per call: the edit, and the 4 reads of "read a" as repeats
        assert_eq!(
            subpath_counts(&svg),
            vec![("c te", 1), ("r tr", 4), ("land", 1)]
        );
        assert!(
            svg.contains(
                r#"<path class="r tr" d="M7 15h3m369 0h3m183 0h3m183 0h3"><title>4 repeats"#
            ),
            "{svg}"
        );
        assert!(
            svg.contains("<title>5 calls (read 4, edit / write 1), "),
            "{svg}"
        );
        assert!(svg.contains(">loop starts</text>") && svg.contains(">flagged</text>"));
    }

    /// (class, number of subpaths) of each mark path of a picture, in drawing order.
    fn subpath_counts(svg: &str) -> Vec<(&str, usize)> {
        svg.split("<path class=\"")
            .skip(1)
            .filter_map(|p| {
                let (cls, rest) = p.split_once('"')?;
                let d = rest.strip_prefix(" d=\"")?.split('"').next()?;
                (!matches!(cls, "ax" | "ls" | "ff")).then(|| (cls, d.matches(['M', 'm']).count()))
            })
            .collect()
    }

    #[test]
    fn marks_are_one_subpath_each_in_relative_integer_units() {
        // bars: the pen ends 3 to the right of where each began; overlapping calls move back
        assert_eq!(
            subpaths(&[10, 13, 13, 40], -1, 17, "h3", (3, 0)),
            "M9 17h3m0 0h3m-3 0h3m24 0h3"
        );
        assert_eq!(
            subpaths(&[5, 9], -1, 4, "h3v22h-3z", (0, 0)),
            "M4 4h3v22h-3zm4 0h3v22h-3z"
        );
        assert_eq!(subpaths(&[7, 8], 0, 10, "v14", (0, 14)), "M7 10v14m1-14v14");
        assert_eq!(subpaths(&[], -1, 17, "h3", (3, 0)), "");
    }

    #[test]
    fn an_episode_that_resumed_the_loop_is_marked_where_it_began() {
        let marks: Vec<CallMark> = (0..30)
            .map(|i| m(i, i * 10, "read", "read a", false))
            .collect();
        let f = |start| Flagged {
            session: "ses_x".into(),
            top_target: Some("read a".into()),
            first_flag_t: Some(20),
            loop_start_t: Some(0),
            episode_start_t: start,
            marks: marks.clone(),
            ..Flagged::default()
        };
        let svg = session(&f(Some(195)), &Clock::default());
        // the first call at or after the episode's start: t = 200 of 0..290
        let x = (8.0 + 200.0 * 744.0 / 290.0_f64).round() as i64;
        assert!(
            svg.contains(&format!("<path class=\"es\" d=\"M{x} 0v44\"/>")),
            "{svg}"
        );
        // "loop starts" and "flagged" are close: flagged takes the second row
        assert!(
            svg.contains(&format!(r#"<text class="es" x="{}" y="52""#, x + 3)),
            "{svg}"
        );
        assert!(svg.contains(r#"<text class="ff" x="62" y="61""#), "{svg}");
        assert!(svg.contains(">resumed</text>"), "{svg}");
        assert!(!session(&f(None), &Clock::default()).contains("resumed"));
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
