//! `progress-detect`: fingerprints in, verdicts out; with `--check`, the backtest.
//!
//! In: contract-v1 JSONL (files or stdin). `session` and `call` records are consumed; every
//! other line (unknown kinds, `source`, `blind`) passes through unchanged. Out: one `verdict`
//! per session at the end of input (and one per flag transition with `--every`); with
//! `--follow`, at each `sweep` record the verdicts that changed (see [`follow`]).

use crate::cli::{each_line, not_utf8, now_ms, Exit, Format, Give, Out};
use crate::config::{Config, DetectorConfig, LivenessConfig};
use crate::detect::{target, thresholds, CallIn, Detector};
use crate::liveness::{self, Activity, SessionEvidence};
use crate::record::{kind_of, to_line, Expect, Session, Signal, Verdict};
use anyhow::Result;
use clap::Parser;
use serde::Deserialize;
use std::borrow::Cow;
use std::io::{BufRead, Write};
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  oc-calls ses_2b1c9d0e4ffeXyZ | progress-detect --format table
  progress-detect --check fixtures/labelled.jsonl        # the backtest
  oc-sessions --since 10m | oc-calls | progress-detect | jq 'select(.flagged)'";

/// Judge each session's tool calls: is it looping without progress?
#[derive(Parser, Debug)]
#[command(name = "progress-detect", version, after_help = EXAMPLES)]
pub struct Args {
    /// Input files (JSONL, `-` for stdin). Default: stdin.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Backtest: check the `expect`/`flag_after` labels; print one summary line and exit 1
    /// when any label fails.
    #[arg(long)]
    pub check: bool,
    /// Backtest on runs known to be productive (a corpus): print each flagged session and the
    /// share flagged; exit 1 when that share is above PCT percent.
    #[arg(long, value_name = "PCT", conflicts_with = "check")]
    pub flag_rate_max: Option<f64>,
    /// Also emit a verdict at every flag transition, as it happens.
    #[arg(long)]
    pub every: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Jsonl)]
    pub format: Format,
    /// The current time in epoch ms, for the liveness classes (default: the clock).
    #[arg(long, value_name = "MS")]
    pub now: Option<i64>,
    /// Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// One `--KEY N` flag per detector threshold (`--run-min 3`), from the signals' keys.
    #[command(flatten)]
    pub thresholds: KeyFlags,
    /// Set any detector threshold by its config key (`--set run_min=3`); may repeat, and
    /// overrides the config and the named flags.
    #[arg(long, value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Agents that never land (comma-separated; matched on the agent name, else the title).
    #[arg(long, value_delimiter = ',')]
    pub read_only_agents: Option<Vec<String>>,
    /// Flush after every record.
    #[arg(long)]
    pub line_buffered: bool,
    /// Follow a live stream (oc-sessions --follow ... | oc-calls --follow): keep every
    /// session's calls, and at each `sweep` record write the verdicts that changed (every listed
    /// session's on a full sweep), then the sweep, and flush. A later line of the same call
    /// replaces the earlier.
    #[arg(long, conflicts_with_all = ["check", "flag_rate_max", "every", "format"])]
    pub follow: bool,
}

pub fn main() -> i32 {
    crate::cli::main("progress-detect", run)
}

pub mod follow;

/// One input line, either kind, parsed once. Strings borrow from the line where they can
/// (one allocation fewer per field and call; escaped strings are copied).
/// Public for the bench, whose parse floor parses lines into it, the detector's own path.
#[derive(Deserialize, Default)]
// what a line that is not an object is told on stderr (serde would name the Rust struct)
#[serde(expecting = "struct Line")]
pub struct ParsedLine<'a> {
    #[serde(default, borrow, deserialize_with = "text")]
    kind: Option<Cow<'a, str>>,
    // call
    #[serde(default, borrow, deserialize_with = "text")]
    session: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "text")]
    id: Option<Cow<'a, str>>,
    t: Option<i64>,
    #[serde(default, borrow, deserialize_with = "text")]
    tool: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    args: target::ArgList<'a>,
    #[serde(default)]
    landed: bool,
    #[serde(default, borrow, deserialize_with = "text")]
    status: Option<Cow<'a, str>>,
    exit: Option<i64>,
    file_lines: Option<i64>,
    #[serde(default, borrow, deserialize_with = "text")]
    model: Option<Cow<'a, str>>,
    cost: Option<f64>,
    #[serde(default, borrow, deserialize_with = "text")]
    out: Option<Cow<'a, str>>,
}

/// Lines parsed at once and handed to the judge together: the parser's code and the judge's each
/// stay in the instruction cache for a batch (of 32, 256 and 1,024, 256 ran fastest).
const BATCH: usize = 256;
/// Parsed batches waiting for the judge, at most (memory stays a few batches whatever the
/// input's length).
const DEPTH: usize = 4;

/// Lines read and not yet judged: the input's name, their text one after another, and (line
/// number, span, and for a line that is not UTF-8 the column of its first invalid byte, else
/// 0) of each.
#[derive(Default)]
struct LineBatch {
    name: String,
    text: String,
    lines: Vec<(usize, std::ops::Range<usize>, usize)>,
}

/// A batch's lines parsed, each borrowing from the batch's text.
type Parses<'a> = Vec<serde_json::Result<ParsedLine<'a>>>;

self_cell::self_cell!(
    /// A batch and its lines parsed: what the reading thread hands the judging one.
    struct Parsed {
        owner: LineBatch,
        #[covariant]
        dependent: Parses,
    }
);

/// An optional string, borrowed from the input unless it has escapes.
fn text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    Ok(Option::<target::Text>::deserialize(d)?.map(|t| t.0))
}

/// The `--KEY` flags of every threshold in the registry ([`thresholds::KEYS`]): a signal's
/// keys become flags without naming them here.
#[derive(Debug, Clone, Default)]
pub struct KeyFlags(pub Vec<(usize, f64)>);

impl clap::Args for KeyFlags {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        for k in thresholds::KEYS.iter() {
            // once per process, for a dozen flags
            let long: &'static str = Box::leak(k.name.replace('_', "-").into_boxed_str());
            let value: &'static str = Box::leak(k.name.to_uppercase().into_boxed_str());
            let arg = clap::Arg::new(k.name)
                .long(long)
                .value_name(value)
                .help(k.about)
                .action(clap::ArgAction::Set);
            cmd = cmd.arg(if k.is_count() {
                arg.value_parser(clap::value_parser!(usize))
            } else {
                arg.value_parser(clap::value_parser!(f64))
            });
        }
        cmd
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for KeyFlags {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut f = KeyFlags::default();
        f.update_from_arg_matches(m)?;
        Ok(f)
    }
    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        for (i, k) in thresholds::KEYS.iter().enumerate() {
            let v = if k.is_count() {
                m.get_one::<usize>(k.name).map(|&v| v as f64)
            } else {
                m.get_one::<f64>(k.name).copied()
            };
            if let Some(v) = v {
                self.0.push((i, v));
            }
        }
        Ok(())
    }
}

/// A session's liveness evidence, from its record (parsed once: the evidence's fields other than
/// `status` are among its pass-through ones).
fn evidence_of(s: &Session) -> Option<SessionEvidence> {
    let field = |k: &str| s.extra.get(k).cloned().unwrap_or(serde_json::Value::Null);
    serde_json::from_value(serde_json::json!({
        "status": s.status,
        "retry": field("retry"),
        "pending": field("pending"),
        "todos_open": field("todos_open"),
        "process": field("process"),
        "program": s.program,
    }))
    .ok()
}

/// The config's thresholds, then the named flags, then `--set`.
fn detector_config(a: &Args, base: DetectorConfig) -> Result<DetectorConfig> {
    let mut c = base;
    for &(i, v) in &a.thresholds.0 {
        c.put(i, v);
    }
    if let Some(r) = a.read_only_agents.clone() {
        c.read_only_agents = r;
    }
    for s in &a.set {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--set {s}: give KEY=VALUE, e.g. run_min=3"))?;
        c.set(k.trim(), v.trim())
            .map_err(|e| anyhow::anyhow!("--set {s}: {e}"))?;
    }
    Ok(c)
}

pub fn run(args: Args, stdin: &mut dyn BufRead, out: &mut Out) -> Result<Exit> {
    out.line_buffered_if(args.line_buffered);
    let cfg = Config::load(args.config.as_deref())?;
    let dcfg = detector_config(&args, cfg.detector.clone())?;
    // flags override the config: check them the way the config is checked
    crate::config::check_detector(&dcfg)
        .map_err(|e| anyhow::anyhow!("{e} (from the flag or the config)"))?;
    if args.follow {
        return follow::run(&args, &cfg, dcfg, stdin, out);
    }
    let now = args.now.unwrap_or_else(now_ms);
    let mut d = Detector::new(dcfg);
    let mut intake = Intake {
        quiet: args.check || args.flag_rate_max.is_some() || args.format != Format::Jsonl,
        every: args.every,
        ..Intake::default()
    };
    read_and_judge(&args, stdin, &mut d, &mut intake, out)?;
    if d.repeated > 0 {
        eprintln!(
            "progress-detect: {} call(s) seen before (same session and id) were skipped",
            d.repeated
        );
    }
    write_verdicts(&args, &cfg, now, &d, &intake, out)
}

/// What the judge keeps beside the detector while it reads: the sessions' liveness evidence, the
/// lines it could not take, and what it writes as it goes.
#[derive(Default)]
struct Intake {
    /// Liveness evidence by session number (the detector keeps only what verdicts need).
    evidence: Vec<Option<SessionEvidence>>,
    activity: std::collections::HashMap<String, Activity>,
    /// Lines reported as bad.
    bad: usize,
    /// Nothing is written while reading (a backtest, a flag rate or a table).
    quiet: bool,
    /// `--every`: a verdict at each flag transition.
    every: bool,
}

impl Intake {
    /// Judges one line: a session, a call or an activity record goes to the detector's side, any
    /// other kind passes through.
    fn line(
        &mut self,
        d: &mut Detector,
        out: &mut Out,
        name: &str,
        n: usize,
        line: &str,
        parsed: &serde_json::Result<ParsedLine>,
    ) -> Result<()> {
        match input(line, parsed) {
            Input::Session(s) => self.session(d, s),
            Input::Call(c) => {
                if d.call(&c) && self.every && !self.quiet {
                    if let Some(v) = d.verdict(c.session) {
                        out.line(&to_line("verdict", &v)?)?;
                    }
                }
            }
            Input::Activity(a) => {
                self.activity.insert(a.session.clone(), a);
            }
            Input::Other(_) => {
                if !self.quiet {
                    out.line(line)?;
                }
            }
            Input::Bad(why) => self.bad(name, n, why),
        }
        Ok(())
    }

    /// Says why line `n` of `name` is not taken, and counts it.
    fn bad(&mut self, name: &str, n: usize, why: impl std::fmt::Display) {
        eprintln!("progress-detect: {name}:{n}: {why}");
        self.bad += 1;
    }

    /// A session record: to the detector, and its liveness evidence kept by session number.
    fn session(&mut self, d: &mut Detector, s: Session) {
        let ev = evidence_of(&s);
        let i = d.session(s);
        if self.evidence.len() <= i {
            self.evidence.resize_with(i + 1, || None);
        }
        if ev.is_some() {
            self.evidence[i] = ev;
        }
    }
}

/// One input line, as both ways of reading take it.
enum Input<'p> {
    Session(Session),
    /// A call with every field a call needs, borrowing from the line's parse.
    Call(CallIn<'p>),
    Activity(Activity),
    /// Any other kind (its name, if the line parsed): passed on, or acted on (a `sweep`).
    Other(Option<&'p str>),
    /// Why the line is not taken.
    Bad(String),
}

/// Reads one line (`parsed`, its parse into [`ParsedLine`]) into what it is.
fn input<'p>(line: &str, parsed: &'p serde_json::Result<ParsedLine>) -> Input<'p> {
    let parsed: &ParsedLine = match parsed {
        Ok(l) => l,
        // a line of another kind may use our field names differently: pass it on
        Err(e) => {
            return match kind_of(line) {
                Ok(Some(k)) if k != "call" && k != "session" => Input::Other(None),
                _ => Input::Bad(e.to_string()),
            }
        }
    };
    match parsed.kind.as_deref() {
        Some("session") => match serde_json::from_str::<Session>(line) {
            Ok(s) => Input::Session(s),
            Err(e) => Input::Bad(e.to_string()),
        },
        Some("call") => match call_in(parsed) {
            Ok(c) => Input::Call(c),
            Err(field) => Input::Bad(format!("call without {field:?}")),
        },
        Some("activity") => match serde_json::from_str::<Activity>(line) {
            Ok(a) => Input::Activity(a),
            Err(e) => Input::Bad(e.to_string()),
        },
        Some(k) => Input::Other(Some(k)),
        None => Input::Bad("no \"kind\"".into()),
    }
}

/// A call line as the detector takes it, once it has every field a call needs (else the first
/// one missing).
fn call_in<'p>(parsed: &'p ParsedLine) -> std::result::Result<CallIn<'p>, &'static str> {
    let (Some(session), Some(id), Some(t), Some(tool)) = (
        parsed.session.as_deref(),
        parsed.id.as_deref(),
        parsed.t,
        parsed.tool.as_deref(),
    ) else {
        let missing = [
            ("session", parsed.session.is_none()),
            ("id", parsed.id.is_none()),
            ("t", parsed.t.is_none()),
            ("tool", parsed.tool.is_none()),
        ];
        return Err(missing.into_iter().find(|(_, m)| *m).map_or("", |(f, _)| f));
    };
    Ok(CallIn {
        session,
        id,
        t,
        tool,
        args: &parsed.args,
        status: parsed.status.as_deref().unwrap_or(""),
        landed: parsed.landed,
        exit: parsed.exit,
        file_lines: parsed.file_lines,
        model: parsed.model.as_deref(),
        cost: parsed.cost,
        out: parsed.out.as_deref(),
    })
}

/// A verdict with its session's liveness class at `now`, judged only on evidence: fixtures and
/// hand-made streams without any get no class.
fn with_liveness(
    mut v: Verdict,
    ev: Option<&SessionEvidence>,
    act: Option<&Activity>,
    now: i64,
    cfg: &LivenessConfig,
) -> Verdict {
    if act.is_some() || ev.is_some_and(|e| e.status.is_some()) {
        v.liveness = Some(liveness::classify(
            &ev.cloned().unwrap_or_default(),
            act,
            now,
            cfg,
        ));
    }
    v
}

/// Reads every input line and judges it, in order: this thread reads and parses, another judges.
///
/// Lines are parsed a batch at a time, then judged in order: the parser's code and the
/// detector's each stay in the instruction cache for a batch, not one line (cachegrind, 200,000
/// calls of the bench's corpus: 63 million instruction-cache misses line by line, 8 million
/// in batches of 32). A stream read as it comes (`--line-buffered`) is judged line by line.
///
/// This thread reads and parses; another judges, in the order read, while the next batch
/// is parsed. Judging is mostly waiting on memory (each call finds its session's state out
/// of the cache: in session order the same calls take a third less time), parsing is the
/// floor, and the two take about as long: on two cores the wall time is about the parse's
/// (benches/detect.rs). Batches come back to the reader, which frees their parse (mimalloc
/// frees a block from another thread by way of a queue) and fills them again.
fn read_and_judge(
    args: &Args,
    stdin: &mut dyn BufRead,
    d: &mut Detector,
    intake: &mut Intake,
    out: &mut Out,
) -> Result<()> {
    let size = if args.line_buffered { 1 } else { BATCH };
    std::thread::scope(|s| -> Result<()> {
        let (to_judge, batches) = std::sync::mpsc::sync_channel::<Parsed>(DEPTH);
        let (give_back, returned) = std::sync::mpsc::channel::<Parsed>();
        let judge = s.spawn(move || -> Result<()> {
            for p in batches {
                p.with_dependent(|b, parsed| -> Result<()> {
                    for ((n, r, _), l) in b.lines.iter().zip(parsed) {
                        intake.line(d, out, &b.name, *n, &b.text[r.clone()], l)?;
                    }
                    Ok(())
                })?;
                // the reader may be done already
                let _ = give_back.send(p);
            }
            Ok(())
        });
        let mut batch = LineBatch::default();
        // parses the batch and hands it on, leaving an empty one (of the same input) in its place
        let send = |b: &mut LineBatch| -> Result<()> {
            if b.lines.is_empty() {
                return Ok(());
            }
            let next = returned.try_recv().map(reuse).unwrap_or_default();
            let p = parse(std::mem::replace(b, next.named(&b.name)));
            // fails only when the judge has stopped, on an error it returns below
            to_judge
                .send(p)
                .map_err(|_| anyhow::anyhow!("the judging thread stopped"))
        };
        let read = each_line(&args.files, stdin, |name, n, line| {
            if batch.name != name {
                send(&mut batch)?;
                batch.name.clear();
                batch.name.push_str(name);
            }
            batch.push(n, line);
            if batch.lines.len() >= size {
                send(&mut batch)?;
            }
            Ok(())
        })
        .and_then(|()| send(&mut batch));
        // the judge ends once it has judged every batch sent
        drop(to_judge);
        match judge.join() {
            // the judge's error comes first: the reader's is then only that the judge stopped
            Ok(judged) => judged.and(read),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

impl LineBatch {
    /// Adds line `n`: its text, or for a line that is not UTF-8 the column of its first invalid byte.
    fn push(&mut self, n: usize, line: std::result::Result<&str, usize>) {
        let at = self.text.len();
        let bad = match line {
            Ok(line) => {
                self.text.push_str(line);
                0
            }
            Err(col) => col,
        };
        self.lines.push((n, at..self.text.len(), bad));
    }

    /// The batch, empty, for input `name`.
    fn named(mut self, name: &str) -> LineBatch {
        self.name.clear();
        self.name.push_str(name);
        self
    }
}

/// A batch the judge gave back, emptied for the reader to fill again (its buffers kept).
fn reuse(p: Parsed) -> LineBatch {
    let mut b = p.into_owner();
    b.text.clear();
    b.lines.clear();
    b
}

/// Parses every line of a batch; a line that is not UTF-8 gets its error here, said by the judge
/// in its turn among the other lines' errors.
fn parse(full: LineBatch) -> Parsed {
    Parsed::new(full, |b| {
        b.lines
            .iter()
            .map(|(_, r, bad)| match bad {
                0 => serde_json::from_str(&b.text[r.clone()]),
                &col => Err(serde::de::Error::custom(not_utf8(col))),
            })
            .collect()
    })
}

/// Writes the verdict of every session at the end of input, in the form asked for: the backtest's
/// report, the flag rate's, a table, CSV rows or JSONL; without a check of its own, the exit
/// says whether every line was taken.
fn write_verdicts(
    args: &Args,
    cfg: &Config,
    now: i64,
    d: &Detector,
    intake: &Intake,
    out: &mut Out,
) -> Result<Exit> {
    // each verdict is written as it is made: 200,000 sessions' verdicts never sit in memory at
    // once (the backtests keep the few they report on, a table its rows)
    let mut labelled = Vec::new();
    let (mut flagged, mut judged) = (Vec::new(), 0usize);
    let mut rows = Vec::new();
    let csv = args.format == Format::Csv && !args.check && args.flag_rate_max.is_none();
    if csv {
        csv_row(&HEAD, out)?;
    }
    for (i, v) in d.verdicts() {
        let ev = intake.evidence.get(i).and_then(Option::as_ref);
        let act = intake.activity.get(&v.session);
        let v = with_liveness(v, ev, act, now, &cfg.liveness);
        if args.check {
            if v.expect.is_some() {
                let from = d.labelled_start(&v.session);
                labelled.push((v, from));
            }
        } else if args.flag_rate_max.is_some() {
            judged += 1;
            if v.first_flag.is_some() {
                flagged.push(v);
            }
        } else if csv {
            csv_row(&row(&v), out)?;
        } else if args.format == Format::Table {
            rows.push(row(&v));
        } else {
            out.line(&to_line("verdict", &v)?)?;
        }
    }
    // a backtest over a damaged corpus fails as an error, whatever its figures say: the lines
    // it could not take are runs it did not judge
    let damaged = |exit: Exit| {
        if intake.bad > 0 {
            eprintln!(
                "progress-detect: {} line(s) could not be read: the backtest is incomplete",
                intake.bad
            );
            Exit::Error
        } else {
            exit
        }
    };
    if args.check {
        if labelled.is_empty() {
            eprintln!("progress-detect: --check: no labelled session (expect) in the input");
            return Ok(damaged(Exit::Check));
        }
        return check(&labelled, args.format, out).map(damaged);
    }
    if let Some(max) = args.flag_rate_max {
        if judged == 0 {
            eprintln!("progress-detect: --flag-rate-max: no session in the input");
            return Ok(damaged(Exit::Check));
        }
        return flag_rate(&flagged, judged, max, args.format, out).map(damaged);
    }
    if args.format == Format::Table {
        write_table(&rows, out)?;
    }
    Ok(if intake.bad > 0 {
        Exit::Error
    } else {
        Exit::Ok
    })
}

/// Where a session's loop started and where it was first flagged, in calls: (start, first flag,
/// first flag's position within the loop).
fn loop_points(v: &Verdict) -> Option<(u64, u64, u64)> {
    // a verdict flagged now has the evidence of its current loop; the first flag's loop is
    // the one that evidence names unless a landing came between
    let f = v.first_flag.as_ref()?;
    let start = v
        .evidence
        .as_ref()
        .and_then(|e| e.loop_start.as_ref())
        .map_or(f.index, |s| s.index.min(f.index));
    Some((start, f.index, f.index - start + 1))
}

/// What `--check` says of one labelled session: whether its label held and what it got.
fn got(v: &Verdict) -> &'static str {
    // a session that flagged and then cleared did flag: say so
    match (v.flagged, &v.first_flag) {
        (true, _) => "flag",
        (false, Some(_)) => "flag, then cleared",
        (false, None) => "no_flag",
    }
}

/// The backtest: one line per labelled session (a row with `--format csv`, the table with
/// `--format table`), then the first flags' median position in their loops and the labels
/// held (on stderr with csv, so that stdout stays one table).
/// `verdicts`: each labelled session's, with the call its labelled loop starts at, if the label
/// says (`flag_after`); a first flag's position is counted from there, else from the loop's
/// start as the evidence has it.
fn check(verdicts: &[(Verdict, Option<u64>)], format: Format, out: &mut Out) -> Result<Exit> {
    let labelled: Vec<&Verdict> = verdicts.iter().map(|(v, _)| v).collect();
    if format == Format::Table {
        let owned: Vec<Verdict> = labelled.iter().map(|v| (*v).clone()).collect();
        table(&owned, out)?;
    }
    if format == Format::Csv {
        csv_row(&CHECK_HEAD, out)?;
    }
    let held = labelled.iter().filter(|v| v.ok == Some(true)).count();
    let mut positions = Vec::new();
    for (v, from) in verdicts {
        let good = v.ok == Some(true);
        let points = loop_points(v).map(|(start, first, pos)| match from {
            Some(f) if *f <= first => (*f, first, first - f + 1),
            _ => (start, first, pos),
        });
        if let (Some((_, _, pos)), Some(Expect::Flag)) = (points, v.expect) {
            positions.push(pos);
        }
        let expect = v.expect.map_or("", |e| e.as_str());
        if format == Format::Csv {
            let n = |i: Option<u64>| i.map(|i| i.to_string()).unwrap_or_default();
            csv_row(
                &[
                    v.session.clone(),
                    v.title.clone().unwrap_or_default(),
                    expect.to_string(),
                    got(v).to_string(),
                    if good { "ok" } else { "FAIL" }.to_string(),
                    n(points.map(|p| p.0)),
                    n(points.map(|p| p.1)),
                    n(points.map(|p| p.2)),
                ],
                out,
            )?;
            continue;
        }
        let when = match points {
            Some((start, first, pos)) => format!(
                ": loop from call {start}, first flag at call {first} (call {pos} of the loop)"
            ),
            None => String::new(),
        };
        writeln!(
            out,
            "{} {} {:?}: expect {expect} got {}{when}",
            if good { "ok  " } else { "FAIL" },
            v.session,
            v.title.as_deref().unwrap_or(""),
            got(v),
        )?;
    }
    let mut summary = String::new();
    positions.sort_unstable();
    if !positions.is_empty() {
        let n = positions.len();
        let median = if n % 2 == 1 {
            positions[n / 2] as f64
        } else {
            (positions[n / 2 - 1] + positions[n / 2]) as f64 / 2.0
        };
        summary += &format!(
            "first flag over {n} loops: median call {median} of the loop (from {} to {})\n",
            positions[0],
            positions[n - 1]
        );
    }
    summary += &format!("backtest: {held}/{} labels hold\n", labelled.len());
    if format == Format::Csv {
        eprint!("{summary}");
    } else {
        write!(out, "{summary}")?;
    }
    Ok(if held == labelled.len() {
        Exit::Ok
    } else {
        Exit::Check
    })
}

const CHECK_HEAD: [&str; 8] = [
    "session", "title", "expect", "got", "held", "loop", "first", "of_loop",
];

/// `flagged`: the verdicts of the `judged` sessions that were ever flagged. One line each (a
/// row with `--format csv`), then the share flagged (on stderr with csv).
fn flag_rate(
    flagged: &[Verdict],
    judged: usize,
    max: f64,
    format: Format,
    out: &mut Out,
) -> Result<Exit> {
    if format == Format::Csv {
        csv_row(&RATE_HEAD, out)?;
    }
    for v in flagged {
        let reasons: Vec<&str> = v.reasons.iter().map(|r| r.name()).collect();
        let reasons = if reasons.is_empty() {
            "no longer flagged".to_string()
        } else {
            reasons.join(",")
        };
        let (start, first, _) = loop_points(v).unwrap_or_default();
        if format == Format::Csv {
            csv_row(
                &[
                    v.session.clone(),
                    v.title.clone().unwrap_or_default(),
                    reasons,
                    start.to_string(),
                    first.to_string(),
                    v.calls.to_string(),
                ],
                out,
            )?;
            continue;
        }
        writeln!(
            out,
            "flagged {} {:?}: {reasons} (loop from call {start}, first flag at call {first} of {})",
            v.session,
            v.title.as_deref().unwrap_or(""),
            v.calls
        )?;
    }
    let rate = 100.0 * flagged.len() as f64 / judged.max(1) as f64;
    let summary = format!(
        "productive runs: {}/{judged} flagged ({rate:.1}%), at most {max}% allowed\n",
        flagged.len(),
    );
    if format == Format::Csv {
        eprint!("{summary}");
    } else {
        write!(out, "{summary}")?;
    }
    Ok(if rate > max { Exit::Check } else { Exit::Ok })
}

const RATE_HEAD: [&str; 6] = ["session", "title", "reasons", "loop", "first", "calls"];

fn row(v: &Verdict) -> Vec<String> {
    vec![
        v.session.clone(),
        v.agent.clone().unwrap_or_default(),
        v.calls.to_string(),
        if v.flagged { "FLAG".into() } else { "-".into() },
        v.reasons
            .iter()
            .map(|r| r.name())
            .collect::<Vec<_>>()
            .join(","),
        format!("{:.2}", v.signals.value(Signal::Dup)),
        v.signals.value(Signal::Top).to_string(),
        v.signals.value(Signal::Slow).to_string(),
        format!("{:.1}", v.signals.value(Signal::Coverage)),
        loop_points(v).map(|p| p.0.to_string()).unwrap_or_default(),
        v.first_flag
            .as_ref()
            .map(|f| f.index.to_string())
            .unwrap_or_default(),
        v.expect
            .map(|e| {
                let held = if v.ok == Some(true) { "ok" } else { "FAIL" };
                format!("{} {held}", e.as_str())
            })
            .unwrap_or_default(),
        v.signals.what(Signal::Top).unwrap_or_default().to_string(),
    ]
}

/// One CSV record, written as it comes.
fn csv_row<S: AsRef<[u8]>>(r: &[S], out: &mut Out) -> Result<()> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(r)?;
    out.write_all(
        &w.into_inner()
            .map_err(|e| anyhow::anyhow!("{}", e.error()))?,
    )?;
    Ok(())
}

const HEAD: [&str; 13] = [
    "session",
    "agent",
    "calls",
    "flag",
    "reasons",
    "dup",
    "top",
    "slow",
    "cover",
    "loop",
    "first",
    "label",
    "top target",
];

/// How [`HEAD`]'s columns give way on a narrow terminal: the signals' figures go first (the
/// JSONL has them), then the agent and the reasons; the reasons and the top target are cut, the
/// session, its calls, the flag and the label never.
const GIVE: [Give; 13] = [
    Give::KEEP,
    Give::drop(7),
    Give::KEEP,
    Give::KEEP,
    Give::cut(10).or_drop(8),
    Give::drop(3),
    Give::drop(4),
    Give::drop(2),
    Give::drop(1),
    Give::drop(5),
    Give::drop(6),
    Give::KEEP,
    Give::cut(20),
];

fn table(verdicts: &[Verdict], out: &mut Out) -> Result<()> {
    let rows: Vec<Vec<String>> = verdicts.iter().map(row).collect();
    write_table(&rows, out)
}

/// The table of `rows`, fit to the terminal (`out.width`).
fn write_table(rows: &[Vec<String>], out: &mut Out) -> Result<()> {
    let width = out.width;
    crate::cli::write_fitted(out, &HEAD, &GIVE, rows, width)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that fails once it has taken `left` bytes.
    struct Fails {
        left: usize,
    }

    impl Write for Fails {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if b.len() > self.left {
                return Err(std::io::Error::other("disk full"));
            }
            self.left -= b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// 2,000 sessions that each flag at their 5th identical call, interleaved: `rounds` calls
    /// of each (6 rounds: 12,000 lines, 47 batches).
    fn looping_sessions(rounds: usize) -> String {
        let mut input = String::new();
        for i in 0..rounds {
            for s in 0..2000 {
                input += &format!(
                    r#"{{"kind":"call","session":"s{s}","id":"p{i}","t":{i},"tool":"bash","args":{{"command":"make test"}}}}"#
                );
                input.push('\n');
            }
        }
        input
    }

    fn args(extra: &[&str]) -> (tempfile::TempDir, Args) {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("watchdog.toml");
        std::fs::write(&config, "").unwrap();
        let mut argv = vec!["progress-detect", "--config", config.to_str().unwrap()];
        argv.extend_from_slice(extra);
        let a = Args::parse_from(argv);
        (dir, a)
    }

    #[test]
    fn a_write_error_while_judging_stops_the_reader_and_is_the_error_returned() {
        // `--every` writes 2,000 verdicts as the sessions flag, from line 8,001 (batch 32) on:
        // the output fails within the first hundred of them, with 50 of the 94 batches still to
        // read; the reader, blocked on a full queue, must stop rather than wait, and the error
        // is the write's
        let (_dir, a) = args(&["--every"]);
        let mut out = Out::new(Box::new(Fails { left: 70_000 }), false);
        let input = looping_sessions(12);
        let e = run(a, &mut std::io::Cursor::new(input), &mut out).unwrap_err();
        assert_eq!(format!("{e:#}"), "disk full");
    }

    #[test]
    fn judged_on_its_own_thread_each_verdict_is_the_same_as_line_by_line() {
        // batches of 256 handed to the judge against lines judged one at a time as they come
        let input = looping_sessions(6);
        let verdicts = |extra: &[&str]| {
            let (_dir, a) = args(&[&["--every", "--now", "1796000000000"], extra].concat());
            let (mut out, buf) = Out::buffer();
            let code = run(a, &mut std::io::Cursor::new(input.clone()), &mut out).unwrap();
            out.flush().unwrap();
            assert_eq!(code, Exit::Ok);
            buf.text()
        };
        let (batched, one_by_one) = (verdicts(&[]), verdicts(&["--line-buffered"]));
        // a verdict at each session's first flag, then one per session at the end
        assert_eq!(batched.lines().count(), 4000);
        let first: serde_json::Value =
            serde_json::from_str(batched.lines().next().unwrap()).unwrap();
        assert_eq!(first["session"], "s0");
        assert_eq!(first["first_flag"]["index"], 5);
        assert_eq!(batched, one_by_one);
    }

    #[test]
    fn a_line_that_is_not_an_object_is_told_it_is_not_a_line() {
        // the message reaches stderr; it names `Line`, as it did before the parse's type was
        // renamed `ParsedLine` (#25)
        let e = serde_json::from_str::<ParsedLine>(r#""foo""#)
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            r#"invalid type: string "foo", expected struct Line at line 1 column 5"#
        );
    }

    #[test]
    fn a_backtest_over_bad_lines_or_no_labels_fails_instead_of_passing() {
        // `echo garbage | progress-detect --check` said "backtest: 0/0 labels hold", exit 0: a
        // damaged corpus passed the backtest in CI
        let code = |extra: &[&str], input: &str| {
            let (_dir, a) = args(extra);
            let (mut out, buf) = Out::buffer();
            let code = run(a, &mut std::io::Cursor::new(input.to_string()), &mut out).unwrap();
            out.flush().unwrap();
            (code, buf.text())
        };
        assert_eq!(code(&["--check"], "garbage\n").0, Exit::Error);
        assert_eq!(code(&["--flag-rate-max", "1"], "garbage\n").0, Exit::Error);
        // nothing to check is a failed check, not a pass
        assert_eq!(code(&["--check"], "").0, Exit::Check);
        assert_eq!(code(&["--flag-rate-max", "1"], "").0, Exit::Check);
        // one good labelled session and one bad line: the figures are printed, the exit is 2
        let labelled = r#"{"kind":"session","id":"ses_a","expect":"no_flag"}"#;
        let (c, text) = code(&["--check"], &format!("{labelled}\n{{\"kind\":\n"));
        assert_eq!(c, Exit::Error);
        assert!(text.ends_with("backtest: 1/1 labels hold\n"), "{text}");
        assert_eq!(code(&["--check"], &format!("{labelled}\n")).0, Exit::Ok);
    }
}
