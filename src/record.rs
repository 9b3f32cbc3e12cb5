//! The fingerprint stream, contract v1: the JSON Lines records every command reads and writes.
//!
//! Each line is one JSON object with a `kind`. Commands parse the kinds they understand into the
//! typed records below and pass every other line through byte for byte, so unknown kinds and
//! fields survive a whole pipeline. All times are integer milliseconds since the Unix epoch.

use crate::paths::Found;
use crate::severity::Severity;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::PathBuf;

/// One line of the stream, typed by its `kind`. A kind this crate does not know (or a line with
/// no `kind`) is [`Record::Other`]: a command passes its raw text on byte for byte.
///
/// Read lines with [`each_record`] (or one with [`Record::parse`]); write one with
/// `serde_json::to_string(&record)`, which puts `kind` first, or [`to_line`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Record {
    Session(Session),
    Call(Call),
    Activity(Activity),
    /// Boxed: a verdict is several times the size of the other records.
    Verdict(Box<Verdict>),
    Source(SourceRead),
    Blind(Blind),
    Tick(Tick),
    /// Follow mode's batch boundary (see [`Sweep`]).
    Sweep(Sweep),
    /// Any other kind: kept verbatim by whoever holds the raw line; never written from here.
    #[serde(other, skip_serializing)]
    Other,
}

/// A line whose `kind` is known but whose fields do not fit its record (or that is not JSON).
#[derive(Debug)]
pub struct BadRecord {
    /// The line's `kind`, when it had one.
    pub kind: Option<String>,
    pub error: serde_json::Error,
}

impl std::fmt::Display for BadRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for BadRecord {}

impl Record {
    /// Parses one line. Each known kind is read straight into its record type (no intermediate
    /// value, so a tick's thousands of calls cost one parse each plus the `kind` scan), with
    /// serde_json's own message on error.
    pub fn parse(line: &str) -> Result<Record, BadRecord> {
        let kind = kind_of(line).map_err(|error| BadRecord { kind: None, error })?;
        fn typed<T: serde::de::DeserializeOwned>(line: &str) -> serde_json::Result<T> {
            serde_json::from_str(line)
        }
        // the types with pass-through extras would keep `kind` among them: it is the tag
        fn untag(mut extra: Map<String, Value>) -> Map<String, Value> {
            extra.remove("kind");
            extra
        }
        let r = match kind.as_deref() {
            Some("session") => typed::<Session>(line).map(|mut s| {
                s.extra = untag(s.extra);
                Record::Session(s)
            }),
            Some("call") => typed(line).map(Record::Call),
            Some("activity") => typed(line).map(Record::Activity),
            Some("verdict") => typed::<Verdict>(line).map(|mut v| {
                v.extra = untag(v.extra);
                Record::Verdict(Box::new(v))
            }),
            Some("source") => typed::<SourceRead>(line).map(|mut s| {
                s.extra = untag(s.extra);
                Record::Source(s)
            }),
            Some("blind") => typed(line).map(Record::Blind),
            Some("tick") => typed(line).map(Record::Tick),
            Some("sweep") => typed(line).map(Record::Sweep),
            _ => Ok(Record::Other),
        };
        r.map_err(|error| BadRecord { kind, error })
    }
}

/// One input line as [`each_record`] hands it over.
#[derive(Debug)]
pub struct Line<'a> {
    /// `stdin` or the file's path.
    pub file: &'a str,
    /// 1-based line number.
    pub n: usize,
    /// The line's text, without its line ending.
    pub raw: &'a str,
    pub record: Result<Record, BadRecord>,
}

impl Line<'_> {
    /// `stdin:17`, the way errors name a line.
    pub fn at(&self) -> String {
        format!("{}:{}", self.file, self.n)
    }
}

/// The one reader of the stream: reads named inputs (`-` is stdin; none: stdin) line by line and
/// hands `f` each non-blank line with its record. A line that is not UTF-8 is named on stderr
/// (`command: stdin:3: not UTF-8 ...`) and skipped; the number skipped so is returned, for the
/// caller to count among its bad lines (a line that is not JSON comes as a [`BadRecord`]).
pub fn each_record(
    files: &[PathBuf],
    stdin: &mut dyn BufRead,
    mut f: impl FnMut(Line) -> anyhow::Result<()>,
) -> anyhow::Result<usize> {
    crate::cli::for_each_line(files, stdin, |file, n, raw| {
        f(Line {
            file,
            n,
            raw,
            record: Record::parse(raw),
        })
    })
}

/// `{"kind":"activity", ...}`: what oc-calls saw of a session's activity, for the liveness judge.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Activity {
    pub session: String,
    /// The latest time anything moved: a message created or completed, a part started or ended.
    pub last_progress: Option<i64>,
    /// The last assistant message has neither completed nor failed: a model request in flight.
    pub in_flight: bool,
    /// Tool calls still pending or running.
    #[serde(default)]
    pub running: Vec<Running>,
    /// The last assistant message's error class (`MessageAbortedError`, `APIError`, ...).
    pub error: Option<String>,
    /// The session's latest turn, where its agent's data tells one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<Turn>,
}

/// A session's latest turn: from the message that began it (a person's prompt, `opencode run`'s
/// message) to the end of its last step. Times, counts and targets only, never content.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Turn {
    /// When the message that began it was created.
    pub start: i64,
    /// When it finished: its last step ended otherwise than in tool calls, with no error (not
    /// cut off, interrupted or stopped). `None` while it goes on or when it did not finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<i64>,
    /// Its calls that landed a change.
    #[serde(default)]
    pub landed: u64,
    /// What they landed on, each once, in order (`edit src/nav.js`, `bash git commit …`), at most
    /// [`TURN_TARGETS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
}

/// How many landed targets a turn keeps.
pub const TURN_TARGETS: usize = 8;

impl Turn {
    /// Counts one call of the turn that landed on `target`.
    pub fn land(&mut self, target: String) {
        self.landed += 1;
        if self.targets.len() < TURN_TARGETS && !self.targets.contains(&target) {
            self.targets.push(target);
        }
    }
}

/// What a tick came to, as `wd-store tick` records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TickOutcome {
    /// Sessions judged, none flagged.
    Ok,
    Flagged,
    /// No agent's source was read and no verdict came (`no_opencode` before schema 13).
    #[serde(alias = "no_opencode")]
    NoAgent,
    /// A source or an input line could not be read: never an all-clear.
    Blind,
}

impl TickOutcome {
    pub const ALL: [TickOutcome; 4] = [
        TickOutcome::Ok,
        TickOutcome::Flagged,
        TickOutcome::NoAgent,
        TickOutcome::Blind,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TickOutcome::Ok => "ok",
            TickOutcome::Flagged => "flagged",
            TickOutcome::NoAgent => "no_agent",
            TickOutcome::Blind => "blind",
        }
    }

    pub fn parse(s: &str) -> Option<TickOutcome> {
        TickOutcome::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Running {
    pub tool: String,
    pub t: i64,
    /// Declared timeout in ms (bash: its `timeout` argument, default 120000).
    pub timeout: Option<i64>,
    /// What the call may be waiting for from a person, by what the agent recorded of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asks: Option<Ask>,
}

/// What a running tool call can wait for from a person (opencode 1.18.33, in its database,
/// where a TUI's prompts are nowhere else): the `question` tool runs until the person answers;
/// a `bash` call records its output (`metadata`) as soon as its command starts, so one running
/// without any has not started: its permission is being asked (or it is about to start, which
/// the liveness rule tells apart by time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ask {
    Question,
    Permission,
}

/// `{"kind":"tick", ...}`: what wd-store recorded of one tick, written last in its stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tick {
    /// The tick's row id in the watchdog database.
    pub id: i64,
    /// When the tick started.
    pub t: i64,
    /// Null when the store could not tell.
    #[serde(default)]
    pub outcome: Option<TickOutcome>,
    /// Verdicts the tick recorded.
    #[serde(default)]
    pub sessions: usize,
    /// How many of them were flagged.
    #[serde(default)]
    pub flagged: usize,
    /// The sources read (their `source` records' `source`).
    #[serde(default)]
    pub sources: Vec<String>,
    /// Did the tick list what a timer tick lists (absence = gone)? A follow mode's partial
    /// tick (`full: false`) listed only what changed. Written only when false.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub full: bool,
    /// Which pipeline wrote it. Written only in follow mode (older lines are timer ticks).
    #[serde(default, skip_serializing_if = "TickMode::is_timer")]
    pub mode: TickMode,
    /// Follow mode: its sweep's reading of the monotonic clock ([`Sweep::mono`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mono: Option<i64>,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

impl Default for Tick {
    fn default() -> Self {
        Tick {
            id: 0,
            t: 0,
            outcome: None,
            sessions: 0,
            flagged: 0,
            sources: Vec::new(),
            full: true,
            mode: TickMode::Timer,
            mono: None,
        }
    }
}

/// Which pipeline ran a tick: the timer's batch tick (`oc-watchdog-tick`) or the follow
/// service's long-running one (`oc-watchdog-follow`, one tick per sweep).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TickMode {
    #[default]
    Timer,
    Follow,
}

impl TickMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TickMode::Timer => "timer",
            TickMode::Follow => "follow",
        }
    }
    pub fn parse(s: &str) -> Option<TickMode> {
        [TickMode::Timer, TickMode::Follow]
            .into_iter()
            .find(|m| m.as_str() == s)
    }
    fn is_timer(&self) -> bool {
        *self == TickMode::Timer
    }
}

/// `{"kind":"sweep","n":7,"t":1764756000000,"full":false}`: in follow mode (`--follow`), the end
/// of one read of the sources. `oc-sessions --follow` writes one after each read, after that
/// read's `source`, `session` and `blind` records; every later stage writes what the batch caused,
/// then passes the sweep on and flushes, so a sweep reaching the end of the pipeline means the
/// batch is done. (The timer's batch tick has none: its end of input is its one boundary.)
///
/// A `full` sweep ends a read that listed what a timer tick would list (the sessions active since
/// the previous full read and the trees of the open alerts) and named every source it read in a
/// `source` record; absence from it means what absence from a tick means (gone, if the source was
/// read). Between full sweeps, a sweep with `full: false` ends a read of only the sessions that
/// changed: a session absent from it is unchanged, not gone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sweep {
    /// 1, 2, ... within one run of `oc-sessions --follow`.
    pub n: u64,
    /// When the read began (ms since the epoch).
    pub t: i64,
    pub full: bool,
    /// When the read began on the machine's monotonic clock ([`crate::monotonic::mono_ms`]):
    /// what follow mode measures durations on. Absent in streams written before issue 42.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mono: Option<i64>,
    /// The wall clock was stepped by this much (ms, negative: back) since the previous sweep,
    /// against the monotonic clock ([`crate::monotonic::StepWatch`]); said once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_ms: Option<i64>,
}

/// Whether `id` has the form of an opencode session id: `ses_` and then letters and digits
/// only (opencode 1.18.33 writes 26 of them). Anything else came from elsewhere (an
/// `opencode import` of an export someone sent accepts `ses_x$(...)`), and is refused when read.
pub fn is_session_id(id: &str) -> bool {
    id.strip_prefix("ses_").is_some_and(|rest| {
        !rest.is_empty() && rest.len() <= 64 && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

/// Says on stderr, once per process and id, that `prog` refused a session whose id (or its
/// parent's) is not an opencode session id; the id is written as a quoted string, so nothing in
/// it (a newline, an escape) reaches the log as it is.
pub fn refuse_session(prog: &str, id: &str, why: &str) {
    use std::sync::Mutex;
    static SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said.iter().any(|s| s == id) {
        return;
    }
    if said.len() < 1000 {
        said.push(id.to_string());
    }
    eprintln!("{prog}: session {id:?} refused: {why} is not an opencode session id (ses_ and letters or digits)");
}

/// Whether `id` is a session id another agent's wing wrote (a Claude Code session's UUID, its
/// subagent's `agent-<id>`, a Codex thread's UUID): letters, digits, `-` and `_`, at most 80.
/// Such ids reach logs, SQL parameters and file names as they are, so nothing else passes.
pub fn is_agent_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 80
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Session {
    /// Whether this session's id and its parent's have the form its agent program gives them
    /// (opencode's `ses_...`, [`is_agent_session_id`] for the others); when not, says so
    /// ([`refuse_session`]) for `prog`.
    pub fn has_opencode_ids(&self, prog: &str) -> bool {
        let ok = |id: &str| match self.program {
            None | Some(Program::Opencode) => is_session_id(id),
            Some(_) => is_agent_session_id(id),
        };
        if !ok(&self.id) {
            refuse_session(prog, &self.id, "its id");
            return false;
        }
        match &self.parent {
            Some(p) if !ok(p) => {
                refuse_session(prog, &self.id, &format!("its parent {p:?}"));
                false
            }
            _ => true,
        }
    }
}

/// `{"kind":"session", ...}`: one opencode session, as `oc-sessions` lists it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub id: String,
    #[serde(default)]
    pub parent: Option<String>,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub directory: Option<String>,
    #[serde(default)]
    pub created: Option<i64>,
    #[serde(default)]
    pub updated: Option<i64>,
    /// `busy`, `idle`, `retry`, or null when the source cannot tell (the database).
    #[serde(default)]
    pub status: Option<String>,
    /// Where the session was read from: a server URL when a server lists it (its live fields
    /// win and a nudge goes there), else the database path (or `export:FILE`).
    #[serde(default)]
    pub source: Option<String>,
    /// Every source that lists this session (servers first, then the database), when more
    /// than one does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// `provider/model`.
    #[serde(default)]
    pub model: Option<String>,
    /// The agent program that ran the session, when it is not opencode (absent: opencode, as
    /// every record before other agents were read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<Program>,
    /// Fixture label: `flag` or `no_flag`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Expect>,
    /// Fixture label: must not flag before this time, must flag after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flag_after: Option<i64>,
    /// Fixture label: must have flagged by the call starting at this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flag_by: Option<i64>,
    /// Liveness evidence and anything else a newer producer adds.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The agent program a session's records come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Program {
    Opencode,
    /// Claude Code (`claude`, npm `@anthropic-ai/claude-code`).
    ClaudeCode,
    /// Codex CLI (`codex`, npm `@openai/codex`).
    Codex,
}

impl Program {
    /// Its name on the wire and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Program::Opencode => "opencode",
            Program::ClaudeCode => "claude-code",
            Program::Codex => "codex",
        }
    }

    /// How a person stops a session of this agent by hand where it runs: `None` for opencode,
    /// whose ways depend on the process ([`stop_by_hand`]). SIGINT (Ctrl-C) ends a `claude -p`
    /// or `codex exec` turn gracefully (../shared/agents); Esc interrupts either's interactive
    /// turn. Where `wd-store stop` reaches the agent too ([`Program::watchdog_stop`]; a Claude
    /// Code session once the watchdog's hook is in its settings, with [`Program::hand_keys`]),
    /// the advice offers it beside these keys.
    pub fn stop_by_hand(self) -> Option<&'static str> {
        match self {
            Program::Opencode => None,
            Program::ClaudeCode => Some(
                "Ctrl-C in the terminal of its `claude -p`, Esc in its interactive session (wd-store stop reaches it once the watchdog's hook is installed: deploy/install --with-stop-plugin)",
            ),
            Program::Codex => Some("Ctrl-C in the terminal of its `codex exec`, Esc in its TUI"),
        }
    }

    /// For another agent whose sessions `wd-store stop` reaches: what its user then sees, in
    /// words the popup and the page add to the advice (`None`: it does not reach them; opencode's
    /// advice is its own). Seen with Codex 0.171.0: SIGINT to `codex exec` ends it with status 1,
    /// and the TUI, its turn interrupted through the app-server daemon, waits for a message.
    pub fn watchdog_stop(self) -> Option<&'static str> {
        match self {
            Program::Codex => Some(
                "the turn ends as with those keys (`codex exec` prints \"turn interrupted\" and exits with status 1, the TUI shows \"Conversation interrupted\")",
            ),
            Program::Opencode | Program::ClaudeCode => None,
        }
    }

    /// The keys alone of [`Program::stop_by_hand`], said beside `wd-store stop`.
    pub fn hand_keys(self) -> Option<&'static str> {
        match self {
            Program::Opencode => None,
            Program::ClaudeCode => {
                Some("Ctrl-C in the terminal of its `claude -p`, Esc in its interactive session")
            }
            Program::Codex => Some("Ctrl-C in the terminal of its `codex exec`, Esc in its TUI"),
        }
    }

    /// The agent named in a loop event's `details.program` (`None`: opencode's, or an event
    /// from before agents were named).
    pub fn of_details(details: &Map<String, Value>) -> Option<Program> {
        details
            .get("program")
            .and_then(|p| serde_json::from_value(p.clone()).ok())
    }

    /// Its name as people know it, in alert titles and on the page.
    pub fn display(self) -> &'static str {
        match self {
            Program::Opencode => "opencode",
            Program::ClaudeCode => "Claude Code",
            Program::Codex => "Codex",
        }
    }
}

/// `{"kind":"call", ...}`: one tool call, scrubbed. Never carries message text, tool output or
/// file content.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Call {
    pub session: String,
    /// The tool part id (`prt_...`).
    pub id: String,
    /// Tool start.
    pub t: i64,
    #[serde(default)]
    pub end: Option<i64>,
    pub tool: String,
    #[serde(default)]
    pub args: Map<String, Value>,
    /// `pending`, `running`, `completed` or `error`.
    pub status: String,
    #[serde(default)]
    pub landed: bool,
    #[serde(default)]
    pub exit: Option<i64>,
    /// For reads: the file's total lines.
    #[serde(default)]
    pub file_lines: Option<i64>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub cost: Option<f64>,
    /// `sha1:` + 12 hex of the tool's output (or of the error text of a failed call); null while
    /// the call runs or where the source kept no output. Equal outputs hash equal; the content
    /// itself never leaves `oc-calls`.
    #[serde(default)]
    pub out: Option<String>,
}

/// A fixture label: what the backtest expects of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    Flag,
    NoFlag,
}

impl Expect {
    pub fn as_str(self) -> &'static str {
        match self {
            Expect::Flag => "flag",
            Expect::NoFlag => "no_flag",
        }
    }
}

/// `{"kind":"verdict", ...}`: progress-detect's judgement of one session, as wd-store records it
/// and wd-alert acts on it. The one shape of a verdict: every command reads and writes this type.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub session: String,
    /// The top of the session's parent chain (the session itself when it has no parent).
    #[serde(default)]
    pub root: String,
    #[serde(default)]
    pub parent: Option<String>,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    /// The session's project directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    /// Judged as an agent that never lands changes (explore, librarian, ...).
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub calls: u64,
    #[serde(default)]
    pub flagged: bool,
    /// The signals over their thresholds, in signal order; empty when not flagged.
    #[serde(default)]
    pub reasons: Vec<Signal>,
    /// Every signal's reading now, flagged or not.
    #[serde(default)]
    pub signals: Signals,
    #[serde(default)]
    pub landed_in_window: bool,
    #[serde(default)]
    pub calls_since_landed: u64,
    #[serde(default)]
    pub cost_since_landed: f64,
    /// The call at which the session was first flagged.
    #[serde(default)]
    pub first_flag: Option<CallRef>,
    #[serde(default)]
    pub model: Option<String>,
    /// Time of the session's last call.
    #[serde(default)]
    pub t: Option<i64>,
    /// The agent program that ran the session, when it is not opencode (the session record's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<Program>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Every source that listed the session, when more than one did (the session record's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// The calls that make the case, on flagged verdicts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Evidence>,
    /// The last calls (at most [`DIGEST_CALLS`]), one line each (`tool target [exit n]`), for
    /// the second opinion. Targets and exit codes only, never content.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub digest: Vec<String>,
    /// Liveness class and evidence, where a session record or an activity record gave any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness: Option<Liveness>,
    /// The fixture label, echoed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Expect>,
    /// Whether the label holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// Anything a newer producer adds.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// How many recent calls a verdict's digest keeps.
pub const DIGEST_CALLS: usize = 12;

impl Verdict {
    /// The root session, falling back to the session for records that name none.
    pub fn root(&self) -> &str {
        if self.root.is_empty() {
            &self.session
        } else {
            &self.root
        }
    }
}

/// What the alert lifecycle, the store and the page read of a verdict.
impl Verdict {
    /// What it repeats, in words, for alert titles: the file it pages through or re-reads, else
    /// what the flagging signals name (the most-worked target, the repeated call, the failing
    /// check), else the slow call.
    pub fn repeats(&self) -> String {
        let has = |s: Signal| self.reasons.contains(&s);
        if !has(Signal::Top) && !has(Signal::Dup) {
            if let Some(f) = self
                .signals
                .what(Signal::Circling)
                .filter(|_| has(Signal::Circling))
            {
                let n = self.signals.value(Signal::Circling);
                return format!("pages through {f} ({n:.1} passes)");
            }
            if let Some(f) = self
                .signals
                .what(Signal::Coverage)
                .filter(|_| has(Signal::Coverage))
            {
                let c = self.signals.value(Signal::Coverage);
                return format!("re-reads {f} ({c:.1}x its length)");
            }
            if let Some(t) = self
                .signals
                .what(Signal::Relanded)
                .filter(|_| has(Signal::Relanded))
            {
                let n = self.signals.value(Signal::Relanded);
                return format!("makes one change again: {t} ({n} more times, nothing new)");
            }
            if let Some(t) = self
                .signals
                .what(Signal::FailedAgain)
                .filter(|_| has(Signal::FailedAgain))
            {
                let n = self.signals.value(Signal::FailedAgain);
                return format!(
                    "fails again as before: {t} ({n} returns of failed calls, nothing landed)"
                );
            }
        }
        match self.top_target().or(self.signals.what(Signal::Slow)) {
            Some(t) => format!("repeats {t}"),
            None => "loops".into(),
        }
    }
    /// What the loop works over and over, for the alerts' `top_target` column and the tables:
    /// what the first flagging signal that names one names (the most-worked target, the repeated
    /// call, the circled or re-read file, the failing check), else the most-worked target. A
    /// circling loop's verdict named its file while its alert said "-".
    pub fn top_target(&self) -> Option<&str> {
        self.reasons
            .iter()
            .find_map(|&s| self.signals.what(s))
            .or(self.signals.what(Signal::Top))
    }
    pub fn liveness_class(&self) -> Option<LivenessClass> {
        self.liveness.as_ref().map(|l| l.class)
    }
    pub fn liveness_evidence(&self) -> &str {
        self.liveness.as_ref().map_or("", |l| l.evidence.as_str())
    }
    /// When the loop began: the detector's loop start, else its first flag.
    pub fn loop_start(&self) -> Option<i64> {
        self.evidence
            .as_ref()
            .and_then(|e| e.loop_start.as_ref())
            .or(self.first_flag.as_ref())
            .map(|c| c.t)
    }
    /// The signals that flagged it, as words.
    pub fn reason_names(&self) -> Vec<&'static str> {
        self.reasons.iter().map(|s| s.name()).collect()
    }
    /// Where the session was listed: its source, then the others that listed it.
    pub fn seen_in(&self) -> impl Iterator<Item = &String> {
        self.source.iter().chain(&self.sources)
    }
    /// Its first call after call number `after` (the detector numbers calls from 1), as far as
    /// the verdict tells: the loop start or a repeat past it, else its last call if that is.
    pub fn first_call_after(&self, after: u64) -> Option<i64> {
        let e = self.evidence.as_ref();
        let seen = e
            .and_then(|e| e.loop_start.as_ref())
            .into_iter()
            .chain(e.into_iter().flat_map(|e| e.calls.iter()))
            .filter(|c| c.index > after)
            .map(|c| c.t)
            .min();
        seen.or(self.t.filter(|_| self.calls > after))
    }
}

/// One call of a session, by position and id.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallRef {
    /// 1-based number of the call within its session.
    pub index: u64,
    pub t: i64,
    pub id: String,
}

/// Why a verdict flagged: where the loop began, the last change that landed before it, and the
/// calls the deciding signals counted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The first call of the loop: the first call after the last landed change that the deciding
    /// signals count.
    #[serde(default)]
    pub loop_start: Option<CallRef>,
    /// The last landed change before the loop, if the session ever landed one.
    #[serde(default)]
    pub last_landed: Option<CallRef>,
    /// The calls that make the case (the repeats), oldest first, at most the last 12.
    #[serde(default)]
    pub calls: Vec<CallRef>,
}

/// The detector's signals. A flagged verdict names the ones over their thresholds. Each is one
/// unit in `detect::signals` (its name, thresholds, state and tests), which also gives the enum
/// its methods (`ALL`, `name`, `what_key`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    Dup,
    Top,
    Slow,
    Coverage,
    ShortLoop,
    Run,
    Cycle,
    SameFailure,
    FailedAgain,
    Unmoved,
    Relanded,
    Circling,
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One signal's reading: its value and what it points at (a target, a call, a file).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    pub value: f64,
    pub what: Option<String>,
}

/// Every signal's reading. On the wire one flat object, as contract v1 has it:
/// `{"dup":0.8,"top":31,"top_target":"read src/a.js","slow":30,"slow_call":...}`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Signals(pub BTreeMap<Signal, Reading>);

impl Signals {
    pub fn set(&mut self, s: Signal, value: f64, what: Option<String>) {
        self.0.insert(s, Reading { value, what });
    }
    pub fn value(&self, s: Signal) -> f64 {
        self.0.get(&s).map_or(0.0, |r| r.value)
    }
    pub fn what(&self, s: Signal) -> Option<&str> {
        self.0.get(&s).and_then(|r| r.what.as_deref())
    }
    /// The flat object, as the wire has it.
    pub fn to_map(&self) -> Map<String, Value> {
        let mut m = Map::new();
        for (s, r) in &self.0 {
            let v = if s.is_count() && r.value.fract() == 0.0 && r.value.abs() < 9e15 {
                Value::from(r.value as i64)
            } else {
                serde_json::Number::from_f64(r.value).map_or(Value::Null, Value::Number)
            };
            m.insert(s.name().into(), v);
            if let Some(k) = s.what_key() {
                m.insert(k.into(), r.what.clone().map_or(Value::Null, Value::String));
            }
        }
        m
    }
    /// Reads the flat object; keys it does not know are ignored.
    pub fn from_map(m: &Map<String, Value>) -> Signals {
        let mut out = Signals::default();
        for &s in Signal::ALL.iter().filter(|s| s.has_reading()) {
            let Some(v) = m.get(s.name()).and_then(Value::as_f64) else {
                continue;
            };
            let what = s
                .what_key()
                .and_then(|k| m.get(k))
                .and_then(Value::as_str)
                .map(String::from);
            out.set(s, v, what);
        }
        out
    }
}

impl Serialize for Signals {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        self.to_map().serialize(ser)
    }
}

impl<'de> Deserialize<'de> for Signals {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let m = Map::<String, Value>::deserialize(de)?;
        Ok(Signals::from_map(&m))
    }
}

/// A session's liveness class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LivenessClass {
    Active,
    Suspect,
    Stalled,
    LongTool,
    Retrying,
    AwaitingUser,
    Interrupted,
    NeedsFinalization,
    /// The opencode process that ran it is gone (a killed `opencode run`): nothing runs it,
    /// whatever reply the database still shows in progress.
    Ended,
    Idle,
    #[default]
    Unknown,
}

impl LivenessClass {
    pub fn as_str(self) -> &'static str {
        match self {
            LivenessClass::Active => "active",
            LivenessClass::Suspect => "suspect",
            LivenessClass::Stalled => "stalled",
            LivenessClass::LongTool => "long_tool",
            LivenessClass::Retrying => "retrying",
            LivenessClass::AwaitingUser => "awaiting_user",
            LivenessClass::Interrupted => "interrupted",
            LivenessClass::NeedsFinalization => "needs_finalization",
            LivenessClass::Ended => "ended",
            LivenessClass::Idle => "idle",
            LivenessClass::Unknown => "unknown",
        }
    }
}

/// What runs a session, as a person would stop it: a TUI (Esc twice), an `opencode run` (Ctrl-C
/// in its terminal) or a server (`opencode serve`, `web`: aborted over HTTP). oc-sessions says
/// it in the session record's `process` (beside `ended`, when nothing runs it any more).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunsIn {
    Tui,
    Run,
    Server,
}

impl RunsIn {
    pub fn as_str(self) -> &'static str {
        match self {
            RunsIn::Tui => "tui",
            RunsIn::Run => "run",
            RunsIn::Server => "server",
        }
    }

    /// The `process` of a session record ("tui", "run", "server"; not "ended").
    pub fn of(process: Option<&str>) -> Option<RunsIn> {
        [RunsIn::Tui, RunsIn::Run, RunsIn::Server]
            .into_iter()
            .find(|r| Some(r.as_str()) == process)
    }
}

/// How a person stops a session by hand where it runs (opencode 1.18.33: the TUI's first Esc
/// only asks "esc again to interrupt"; one Ctrl-C ends an `opencode run`, exit 130, in a
/// terminal as in 7 timed runs of 7). `None` for a server's session: no key reaches it, and
/// `wd-store stop` aborts it over HTTP. Unknown: every way.
pub fn stop_by_hand(runs_in: Option<RunsIn>) -> Option<&'static str> {
    match runs_in {
        Some(RunsIn::Tui) => Some("Esc twice in its TUI"),
        Some(RunsIn::Run) => Some("Ctrl-C in the terminal of its `opencode run`"),
        Some(RunsIn::Server) => None,
        None => Some("Esc twice in its TUI, Ctrl-C in the terminal of its `opencode run`"),
    }
}

/// What a liveness class asks of the watchdog before anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LivenessAction {
    /// Suspicion asks for a read-only second look.
    Probe,
}

/// The liveness class of a session with the evidence that decided it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Liveness {
    pub class: LivenessClass,
    /// Seconds since the last progress, when known.
    #[serde(default)]
    pub silence_s: Option<i64>,
    #[serde(default)]
    pub status: Option<String>,
    /// One line saying what was observed.
    #[serde(default)]
    pub evidence: String,
    /// The alert this class asks for, if any.
    #[serde(default)]
    pub alert: Option<Severity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<LivenessAction>,
    /// What runs the session, where oc-sessions could tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_in: Option<RunsIn>,
    /// Its latest turn (the activity record's), for the done notice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<Turn>,
}

/// `{"kind":"blind", ...}`: a reader met a shape it cannot interpret. Never read as "no calls".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Blind {
    pub source: String,
    pub reason: String,
}

impl Blind {
    /// Reads a `blind` line leniently: a missing field reads `?`, because a blind record that is
    /// itself malformed still means the tick could not see.
    pub fn read(line: &str) -> Blind {
        let v: Value = serde_json::from_str(line).unwrap_or_default();
        let field = |k: &str| v[k].as_str().unwrap_or("?").to_string();
        Blind {
            source: field("source"),
            reason: field("reason"),
        }
    }
}

/// `{"kind":"source", ...}`: one source that was read (opencode's database or a server, another
/// agent's directory), and how it was found. Lets later stages tell "no agent" from "an agent
/// with nothing to judge", and an operator see what the watchdog sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceRead {
    pub source: String,
    /// `database` or `server`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader: Option<String>,
    /// `argument`, `configured`, `default` (the database at opencode's own path), `discovered`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub found: Vec<Found>,
    #[serde(default)]
    pub version: Option<String>,
    /// Sessions listed from this source.
    #[serde(default)]
    pub sessions: usize,
    /// The rest: `schema` (a database's newest migration), `pids` and `projects` (a server's).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Serialises `value` as one compact JSON object with `kind` first.
pub fn to_line<T: Serialize>(kind: &str, value: &T) -> serde_json::Result<String> {
    let body = serde_json::to_string(value)?;
    let rest = body.strip_prefix('{').unwrap_or(&body);
    if rest == "}" {
        Ok(format!("{{\"kind\":\"{kind}\"}}"))
    } else {
        Ok(format!("{{\"kind\":\"{kind}\",{rest}"))
    }
}

/// Only the `kind` of a line, for routing before a full parse.
#[derive(Deserialize)]
pub struct KindOnly {
    pub kind: Option<String>,
}

/// Reads the `kind` of a line. Errors name the problem, as serde_json reports it.
pub fn kind_of(line: &str) -> Result<Option<String>, serde_json::Error> {
    let k: KindOnly = serde_json::from_str(line)?;
    Ok(k.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_line_puts_kind_first() {
        let b = Blind {
            source: "http://x".into(),
            reason: "r".into(),
        };
        assert_eq!(
            to_line("blind", &b).unwrap(),
            r#"{"kind":"blind","source":"http://x","reason":"r"}"#
        );
    }

    #[test]
    fn a_circling_loop_names_its_file_in_the_title_and_the_top_target() {
        // "opencode loop: build loops" with top target "-", though the verdict named the file
        let line = r#"{"kind":"verdict","session":"ses_a","root":"ses_a","flagged":true,
            "reasons":["circling"],"signals":{"top":1,"top_target":null,"circling":3.07,
            "circling_file":"docs/spec.md"},"calls":21}"#;
        let v: Verdict = serde_json::from_str(line).unwrap();
        assert_eq!(v.repeats(), "pages through docs/spec.md (3.1 passes)");
        assert_eq!(v.top_target(), Some("docs/spec.md"));
        // a failing check names the check; the most-worked target stays first when top flags
        let line = r#"{"kind":"verdict","session":"ses_b","root":"ses_b","flagged":true,
            "reasons":["same_failure"],"signals":{"top":2,"top_target":"read a.py",
            "same_failure":4,"same_failure_call":"bash python3 tools/check.py"},"calls":9}"#;
        let v: Verdict = serde_json::from_str(line).unwrap();
        assert_eq!(v.repeats(), "repeats bash python3 tools/check.py");
        let line = r#"{"kind":"verdict","session":"ses_c","root":"ses_c","flagged":true,
            "reasons":["top","same_failure"],"signals":{"top":12,"top_target":"read a.py",
            "same_failure":4,"same_failure_call":"bash python3 tools/check.py"},"calls":30}"#;
        let v: Verdict = serde_json::from_str(line).unwrap();
        assert_eq!(v.top_target(), Some("read a.py"));
        // a fix re-sent that lands again and again says so, not "repeats"
        let line = r#"{"kind":"verdict","session":"ses_d","root":"ses_d","flagged":true,
            "reasons":["relanded"],"signals":{"top":9,"top_target":"edit src/cli.py",
            "relanded":3,"relanded_call":"edit src/cli.py"},"calls":20}"#;
        let v: Verdict = serde_json::from_str(line).unwrap();
        assert_eq!(
            v.repeats(),
            "makes one change again: edit src/cli.py (3 more times, nothing new)"
        );
        assert_eq!(v.top_target(), Some("edit src/cli.py"));
        // rejected fixes sent again say what fails again, not the most-worked target
        let line = r#"{"kind":"verdict","session":"ses_e","root":"ses_e","flagged":true,
            "reasons":["failed_again"],"signals":{"top":9,"top_target":"edit Types.java",
            "failed_again":5,"failed_again_call":"edit Types.java"},"calls":20}"#;
        let v: Verdict = serde_json::from_str(line).unwrap();
        assert_eq!(
            v.repeats(),
            "fails again as before: edit Types.java (5 returns of failed calls, nothing landed)"
        );
    }

    #[test]
    fn a_contract_v1_verdict_reads_and_writes_back_the_same_signals() {
        let line = r#"{"kind":"verdict","session":"ses_a","root":"ses_a","flagged":true,"reasons":["top","slow"],
            "signals":{"dup":0.8,"top":31,"top_target":"read src/a.js","slow":30,"slow_call":"read src/a.js",
            "coverage":0.0,"coverage_file":null},"calls":40,"first_flag":{"index":12,"t":5,"id":"prt_1"},
            "liveness":{"class":"stalled","silence_s":901,"status":"busy","evidence":"busy and silent","alert":"warning"},
            "opinion":{"answer":"yes"}}"#;
        let v: Verdict = serde_json::from_str(line).unwrap();
        assert_eq!(v.reasons, [Signal::Top, Signal::Slow]);
        assert_eq!(v.signals.value(Signal::Top), 31.0);
        assert_eq!(v.signals.what(Signal::Slow), Some("read src/a.js"));
        assert_eq!(v.signals.what(Signal::Coverage), None);
        assert_eq!(v.first_flag.as_ref().unwrap().index, 12);
        let l = v.liveness.as_ref().unwrap();
        assert_eq!(
            (l.class, l.alert),
            (LivenessClass::Stalled, Some(Severity::Warning))
        );
        assert_eq!(v.extra["opinion"]["answer"], "yes");
        let back: Value = serde_json::from_str(&to_line("verdict", &v).unwrap()).unwrap();
        assert_eq!(
            back["signals"],
            serde_json::json!({"dup": 0.8, "top": 31, "top_target": "read src/a.js", "slow": 30,
                               "slow_call": "read src/a.js", "coverage": 0.0, "coverage_file": null})
        );
        assert_eq!(back["reasons"], serde_json::json!(["top", "slow"]));
        assert_eq!(back["opinion"]["answer"], "yes");
        assert!(back.get("evidence").is_none() && back.get("digest").is_none());
    }

    #[test]
    fn a_verdict_naming_no_root_is_its_own_root() {
        let v: Verdict = serde_json::from_str(r#"{"session":"ses_b"}"#).unwrap();
        assert_eq!(v.root(), "ses_b");
        assert!(serde_json::from_str::<Verdict>(r#"{"session":"s","reasons":["dupe"]}"#).is_err());
    }

    #[test]
    fn each_kind_reads_into_its_record_and_writes_back_the_same_bytes() {
        let lines = [
            r#"{"kind":"session","id":"ses_a","parent":null,"agent":"build","title":"t","directory":"/w","created":1,"updated":2,"status":"idle","source":"/o.db","model":"p/m","todos_open":0}"#,
            r#"{"kind":"call","session":"ses_a","id":"prt_1","t":5,"end":6,"tool":"read","args":{"filePath":"a"},"status":"completed","landed":false,"exit":null,"file_lines":3,"model":"p/m","cost":0.5,"out":"sha1:0123456789ab"}"#,
            r#"{"kind":"activity","session":"ses_a","last_progress":6,"in_flight":false,"running":[],"error":null}"#,
            r#"{"kind":"blind","source":"http://x","reason":"r"}"#,
            r#"{"kind":"source","source":"/o.db","reader":"database","found":["default"],"version":"1.18.33","sessions":1,"schema":"m7"}"#,
            r#"{"kind":"tick","id":4,"t":9,"outcome":"flagged","sessions":2,"flagged":1,"sources":["/o.db"]}"#,
        ];
        for line in lines {
            let r = Record::parse(line).unwrap();
            assert_eq!(serde_json::to_string(&r).unwrap(), line);
            // the derived, tagged reading agrees with the fast one
            assert_eq!(serde_json::from_str::<Record>(line).unwrap(), r, "{line}");
        }
        match Record::parse(lines[4]).unwrap() {
            Record::Source(s) => {
                assert_eq!(s.found, [Found::Default]);
                assert_eq!(s.extra.keys().collect::<Vec<_>>(), ["schema"]);
            }
            other => panic!("{other:?}"),
        }
        match Record::parse(lines[5]).unwrap() {
            Record::Tick(t) => {
                assert_eq!((t.id, t.sessions, t.flagged), (4, 2, 1));
                assert_eq!(t.outcome, Some(TickOutcome::Flagged));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_kinds_and_lines_without_a_kind_pass_as_other() {
        assert_eq!(
            Record::parse(r#"{"kind":"zzz","a":1}"#).unwrap(),
            Record::Other
        );
        assert_eq!(Record::parse(r#"{"a":1}"#).unwrap(), Record::Other);
        let e = Record::parse(r#"{"kind":"call","session":"s"}"#).unwrap_err();
        assert_eq!(e.kind.as_deref(), Some("call"));
        assert_eq!(e.to_string(), "missing field `id` at line 1 column 29");
        let e = Record::parse("not json").unwrap_err();
        assert_eq!(
            (e.kind, e.error.to_string()),
            (None, "expected ident at line 1 column 2".into())
        );
    }

    #[test]
    fn the_reader_names_file_and_line_and_skips_what_is_not_utf8() {
        let mut input: &[u8] =
            b"{\"kind\":\"blind\",\"source\":\"s\",\"reason\":\"r\"}\n\n\xff\n{\"kind\":\"x\"}\n";
        let mut seen = Vec::new();
        let skipped = each_record(&[], &mut input, |l| {
            seen.push((l.at(), l.raw.to_string(), l.record.unwrap()));
            Ok(())
        })
        .unwrap();
        assert_eq!(skipped, 1);
        assert_eq!(
            seen,
            [
                (
                    "stdin:1".to_string(),
                    r#"{"kind":"blind","source":"s","reason":"r"}"#.to_string(),
                    Record::Blind(Blind {
                        source: "s".into(),
                        reason: "r".into()
                    })
                ),
                ("stdin:4".into(), r#"{"kind":"x"}"#.into(), Record::Other),
            ]
        );
    }

    #[test]
    fn session_keeps_unknown_fields() {
        let s: Session = serde_json::from_str(r#"{"id":"ses_a","future":{"x":1}}"#).unwrap();
        assert_eq!(s.extra["future"]["x"], 1);
        let back = to_line("session", &s).unwrap();
        assert!(back.contains(r#""future":{"x":1}"#), "{back}");
    }
}
