//! The parts of each man page that clap does not know: exit status, the JSONL fields a command
//! reads and writes, and examples with real output. `examples/gen-docs.rs` renders them with the
//! clap definitions into `man/`, so help, man pages and completions share one source. The tick
//! and follow scripts (`deploy/oc-watchdog-tick`, `deploy/oc-watchdog-follow`) have no clap
//! definition: their pages are [`TICK`] and [`FOLLOW`], whole.

/// (command, exit status, fields, examples)
pub struct Page {
    pub name: &'static str,
    pub exit: &'static str,
    pub fields: &'static str,
    pub examples: &'static str,
}

/// A man page written out whole, for a command that is a script rather than a clap definition.
pub struct Script {
    pub name: &'static str,
    pub about: &'static str,
    pub synopsis: &'static str,
    pub description: &'static str,
    pub files: &'static str,
    pub exit: &'static str,
    pub examples: &'static str,
}

/// `oc-watchdog-tick(1)`. Its `--help` (in the script) is the synopsis and first paragraph.
pub const TICK: Script = Script {
    name: "oc-watchdog-tick",
    about: "one oc-watchdog tick: find the agents, judge their recent sessions, record, alert",
    synopsis: "\
oc-watchdog-tick
oc-watchdog-tick --help",
    description: "\
One watchdog tick. Finds the agents (opencode's database and every server running, Claude
Code's and Codex's sessions in the home directory), fingerprints the sessions active since the
last tick (and the trees of open alerts), judges them, records the tick, alerts on changes and
rewrites the operator's page. oc-watchdog.timer runs it every 5 minutes; it is safe to run by
hand at any time. It takes no options: the config file says
everything (see FILES).

It is this pipeline, each stage a plain command reading and writing JSON Lines:
  oc-sessions --since LAST_TICK --also OPEN_ROOTS | oc-calls | wd-store calls |
  progress-detect | wd-store tick | wd-alert;  wd-store report
wd-store calls keeps each session's latest calls for the page (which says \"No calls recorded\"
without it).
A stage that fails without saying why in the stream blinds the tick (a blind record): the
tick never reads as an all-clear then. A config that does not load ends the tick before it
(wd-store check-config): the page says why, with the file, line and key, and so does a desktop
notification, once per distinct error. One tick runs at a time; an overlapping one leaves at
once. Log lines (one per alert transition) go to stderr, the journal under systemd; where no
journal takes stderr (no journald, no systemd, cron, run by hand) each is also appended, with
its time, to tick.log in the state directory.

To look closer, rerun the stages by hand:
  oc-sessions --since 1h > /tmp/s.jsonl            # which sessions, from where
  oc-calls < /tmp/s.jsonl > /tmp/c.jsonl           # their tool calls, scrubbed
  progress-detect --format table < /tmp/c.jsonl    # the verdicts
  wd-store loops --format table                    # what is alerting now",
    files: "\
$XDG_CONFIG_HOME/oc-watchdog/watchdog.toml      the config (every knob commented)
$XDG_STATE_HOME/oc-watchdog/watchdog.db         the record of ticks, verdicts and alerts
$XDG_STATE_HOME/oc-watchdog/tick.lock           held while a tick runs
$XDG_STATE_HOME/oc-watchdog/runs.json           the `opencode run` processes the last ticks saw
$XDG_STATE_HOME/oc-watchdog/tick.log            its log where no journal takes it (the last
                                                MiB; the one before in tick.log.1)
~/.config/systemd/user/oc-watchdog.{service,timer}   the units that run it",
    exit: "\
0  the tick ran, however many alerts it fired (also when another tick held the lock)
2  it could not run: the config did not load, or the state directory or the database could
   not be used",
    examples: "\
$ systemctl --user enable --now oc-watchdog.timer
$ journalctl --user -u oc-watchdog.service
$ oc-watchdog-tick && wd-store status",
};

/// `oc-watchdog-follow(1)`. Its `--help` (in the script) is the synopsis and first paragraph.
pub const FOLLOW: Script = Script {
    name: "oc-watchdog-follow",
    about: "oc-watchdog's follow mode: alert within seconds of a loop, idle at next to no cost",
    synopsis: "\
oc-watchdog-follow
oc-watchdog-follow --help",
    description: "\
The tick's pipeline in follow mode, for as long as it runs: reads the agents as they write (what
changed every [follow] poll_ms, one PRAGMA data_version while nothing did; a full read, as a
timer tick lists, every full_every_secs), judges the sessions that changed, records each batch
as a tick (mode follow, full or partial), alerts on changes and keeps the operator's page
current (rewritten at most every 2 s). oc-watchdog-follow.service runs it and restarts it when
it fails. It takes no options: the config file says everything (see FILES).

It is this pipeline, each stage a plain command reading and writing JSON Lines, a sweep record
ending each batch (a tick record after wd-store tick):
  oc-sessions --follow --also-open | oc-calls --follow | wd-store calls --follow |
  progress-detect --follow | wd-store tick --follow | wd-alert --follow |
  wd-store report --follow
Its first read looks back as the first tick does (to the last tick, else 1 hour). A stage that
fails without saying why in the stream blinds the tick (a blind record) and ends the pipeline.
A config that does not load starts no pipeline: it stays up, reading the config again every
minute (wd-store check-config), while the page says why, with the file, line and key, and a
desktop notification does, once per distinct error.

A loop triggers at the first tick that flags it, within seconds of its flagging call. It
escalates when it goes on (new calls, nothing landed) escalate_after_minutes (default 5) or
escalate_after_calls (default 100) after the trigger, whichever comes first: the timer's 3
ticks at 5 minutes are 10 minutes, and 100 calls of a loop at 0.4 calls a second are 4 minutes.
It resolves as a timer tick resolves it; a partial tick, which lists only what changed, never
calls a session gone.

Every duration it acts on is measured on the machine's monotonic clock, which each sweep
carries: the polls' pacing, the minutes before an escalation, and a session's silence, counted
from when the watchdog saw the session's newest time change. A step of the wall clock (NTP after
an offline spell, date -s, a restored VM) stretches or cuts none of them; it is said once on
stderr (\"the wall clock stepped forward 1 h at ...\") and on the page, and times shown and
stored stay the wall clock's.

The timer stays as the fallback: this holds the tick lock for its whole life, so a timer tick
exits at once while it runs, and ticks again when it stops. Log lines (one per alert
transition) go to stderr, the journal under systemd; where no journal takes stderr (no
journald, no systemd, started by hand) each is also appended, with its time, to follow.log in
the state directory.",
    files: "\
$XDG_CONFIG_HOME/oc-watchdog/watchdog.toml      the config ([follow] for this mode)
$XDG_STATE_HOME/oc-watchdog/watchdog.db         the record of ticks, verdicts and alerts
$XDG_STATE_HOME/oc-watchdog/tick.lock           held for as long as it runs
$XDG_STATE_HOME/oc-watchdog/follow.log          its log where no journal takes it (the last
                                                MiB; the one before in follow.log.1)
~/.config/systemd/user/oc-watchdog-follow.service   the unit that runs it",
    exit: "\
1  the pipeline ended by itself (a stage failed); systemd starts it again
2  it could not start: the state directory could not be used",
    examples: "\
$ systemctl --user enable --now oc-watchdog-follow.service
$ journalctl --user -u oc-watchdog-follow -f
$ wd-store status --format table",
};

const STREAM: &str = "\
session  {kind, id, parent, agent, title, directory, created, updated, status, source, sources, model,
         program}
         source: the server URL when a server lists it, else the database path (export:FILE
         from an export; claude-code:DIR or codex:DIR from another agent's own directory);
         sources: every source listing it, when more than one does
         program: claude-code or codex for a session another agent ran (absent: opencode)
         fixture labels: expect (flag|no_flag), flag_after (ms), flag_by (ms)
call     {kind, session, id, t, end, tool, args, status, landed, exit, file_lines, model, cost, out}
         out: sha1: + 12 hex of the tool's output or error text (null while running)
blind    {kind, source, reason}      a source that could not be read (hung, too big, locked,
         corrupt, a shape this reader does not know)
source   {kind, source, reader, found, version, sessions, ...}   one per source read:
         reader database (schema, pids of opencode processes writing it), server (pids,
         projects), claude-code (transcripts, pids of running sessions) or codex (rollouts,
         pids); found: argument, configured, default, discovered
activity {kind, session, last_progress, in_flight, running [{tool, t, timeout, asks}], error}
         after each session's calls: times and states for the liveness judge, no content
sweep    {kind, n, t, full}   --follow: the end of one read (full: what a tick lists, with the
         source records; else only the sessions that changed); every stage passes it on, flushed
session records from a server also carry retry {attempt, message, next},
pending {permissions, questions} and todos_open
Times are integer milliseconds since the epoch. Filters pass unknown kinds and fields through.";

pub const PAGES: &[Page] = &[
    Page {
        name: "oc-sessions",
        exit: "0  success, also when no opencode was found (nothing is printed); --follow: ended by SIGTERM or a closed stdout\n\
               2  an error, or an opencode answered in a shape not understood (a blind record was printed; --follow goes on)",
        fields: STREAM,
        examples: "\
$ oc-sessions --since 1h | head -3
{\"kind\":\"source\",\"source\":\"/tmp/src-exp/home/.local/share/opencode/opencode.db\",\"reader\":\"database\",\"found\":[\"default\"],\"version\":\"1.18.33\",\"sessions\":2,\"pids\":[9456],\"schema\":\"20260622202450_simplify_session_input\"}
{\"kind\":\"source\",\"source\":\"http://127.0.0.1:4096\",\"reader\":\"server\",\"found\":[\"discovered\"],\"version\":\"1.18.33\",\"sessions\":2,\"pids\":[9456],\"projects\":3}
{\"kind\":\"session\",\"id\":\"ses_dcf4bcacbffeKejLmVcyEV1gtb\",\"parent\":null,\"agent\":\"build\",\"title\":\"Scripted session\",\"directory\":\"/tmp/src-exp/proj\",\"created\":1796113446196,\"updated\":1796113547590,\"status\":\"idle\",\"source\":\"http://127.0.0.1:4096\",\"sources\":[\"http://127.0.0.1:4096\",\"/tmp/src-exp/home/.local/share/opencode/opencode.db\"],\"model\":\"sim/sim-model\",\"pending\":{\"permissions\":0,\"questions\":0},\"todos_open\":0}",
    },
    Page {
        name: "oc-calls",
        exit: "0  success; --follow: its input ended (or SIGTERM)\n\
               2  an error, a bad input line (named by its number), or a session in a shape not understood (a blind record was printed)",
        fields: STREAM,
        examples: "\
$ oc-calls ses_dd1a890f4ffeTdYqgKB1x4Bej0 | jq -c 'select(.kind==\"call\") | [.tool, .landed, .exit]'
[\"todowrite\",false,null]
[\"glob\",false,null]
[\"grep\",false,null]
[\"read\",false,null]
[\"edit\",true,null]
[\"write\",true,null]
[\"bash\",false,0]
[\"bash\",true,0]
[\"todowrite\",false,null]
Arguments keep verbatim only filePath, path, offset, limit, command (secrets masked), pattern,
include, subagent_type, timeout and workdir; other strings become sha1:<12 hex>:
{\"kind\":\"call\",...,\"tool\":\"edit\",\"args\":{\"filePath\":\"/tmp/walk/proj/src/navbar.js\",\"newString\":\"sha1:cd925d3cedda\",\"oldString\":\"sha1:b1aa5079bbbe\"},\"status\":\"completed\",\"landed\":true,...}
A Claude Code or Codex session someone sent, backtested (a transcript, or a folder of them):
$ oc-calls --export sent/ | progress-detect --format table
Their tools read as opencode's: Read read, Edit and MultiEdit edit, Write write, Bash bash,
Grep grep, Glob glob, Agent (Task) task, TodoWrite todowrite; Codex's exec_command and shell
bash, apply_patch edit (write when it only adds a file), spawn_agent task, update_plan
todowrite. Exit codes come from Claude Code's result text (\"Exit code N\") and Codex's
exit_code; Codex outputs are hashed without their chunk id and wall time lines.",
    },
    Page {
        name: "progress-detect",
        exit: "0  success, also when sessions were flagged\n\
               1  --check: a label of the backtest does not hold, or the input holds no labelled session;\n\
               \x20  --flag-rate-max: more productive runs flagged than allowed, or no session at all\n\
               2  an error, or a bad input line (named by its number and skipped; the rest is judged,\n\
               \x20  and a backtest's figures are printed, but it fails: it did not judge every run)\n\
               --follow: 0 at the end of input; a bad line is named on stderr and in the stream as a\n\
               blind record (source progress-detect), and the rest is judged",
        fields: "\
reads    session and call records (see oc-calls(1)); other kinds pass through
         --follow: also sweep records; at each, the verdicts of the sessions of its batch that
         changed (of each one on a full sweep), judged at the sweep's t, then the sweep
writes   verdict {kind, session, root, parent, agent, title, read_only, calls, flagged, reasons,
         signals {dup, top, top_target, slow, slow_call, coverage, coverage_file, run, run_call,
         cycle, same_failure, same_failure_call, failed_again, failed_again_call, unmoved, unmoved_call,
         relanded, relanded_call, circling, circling_file},
         landed_in_window, calls_since_landed, cost_since_landed, first_flag {index, t, id} | null,
         model, t, program (claude-code or codex; absent for opencode), source,
         evidence {loop_start, last_landed, calls [{index, t, id}]} and digest
         [\"tool target [exit n]\"] (flagged verdicts), liveness {class, silence_s, status,
         evidence, alert, action}};
         with labels also expect and ok; liveness only where a session record or an activity
         record gave evidence (--now sets the clock it is judged at)",
        examples: "\
$ grep -h -e ses_dcf2b97b7ffeI31AERUGiKZ1bf -e ses_dcf2ea35effevcMFGQUxL5QRtk fixtures/labelled.jsonl | progress-detect --format table
session                         agent  calls  flag  reasons     label       top target
ses_dcf2ea35effevcMFGQUxL5QRtk  build  28     -                 no_flag ok
ses_dcf2b97b7ffeI31AERUGiKZ1bf  build  16     FLAG  top,run,s…  flag ok     bash python3 tools/chec…
$ grep -h -e ses_dcf2b97b7ffeI31AERUGiKZ1bf -e ses_dcf2ea35effevcMFGQUxL5QRtk fixtures/labelled.jsonl | COLUMNS=150 progress-detect --format table
session                         agent  calls  flag  reasons               dup   top  slow  cover  loop  first  label       top target
ses_dcf2ea35effevcMFGQUxL5QRtk  build  28     -                           0.00  0    0     0.0                 no_flag ok
ses_dcf2b97b7ffeI31AERUGiKZ1bf  build  16     FLAG  top,run,same_failur…  0.81  14   14    0.1    3     6      flag ok     bash python3 tools/check.py
$ progress-detect --check fixtures/labelled.jsonl | tail -1
backtest: 35/35 labels hold",
    },
    Page {
        name: "wd-store",
        exit: "0  success\n\
               2  an error: the database is missing (a query creates none: tick and the commands that\n   \
               record do), locked past the busy timeout, read-only, full, not a watchdog database or\n   \
               of a newer schema (each named with its path); or a bad input line to tick",
        fields: "\
tick reads   verdict, source and blind records; passes every line through, then appends
             tick {kind, id, t, outcome (ok|flagged|no_agent|blind), sessions, flagged, sources}
calls reads  session and call records; passes every line through, then keeps each session's
             latest calls (tool, time, landed, failed, target) until tick keeps its flagged ones;
             --follow: keeps them across batches and stages the batch's at each sweep record
queries      status, loop, episode, verdict_row, rollup, channel, block records (JSONL), or
             --format table|csv",
        examples: "\
$ wd-store loops --format table
status   session                         opened UTC   burned            project        session_title
warning  ses_dcf2b97b7ffeI31AERUGiKZ1bf  12-01 09:00  16 calls, $0.05…  …pIZ3Cp8/proj  check fixer
$ COLUMNS=80 wd-store loops --format table
status   session                         project               session_title
warning  ses_dcf2b97b7ffeI31AERUGiKZ1bf  /tmp/.tmpIZ3Cp8/proj  check fixer
$ wd-store rollup --by model --since 1h --format table
model          sessions  share_of_sessions  flagged_sessions  share_of_flagged
sim/sim-model  5         1.0                2                 1.0",
    },
    Page {
        name: "wd-alert",
        exit: "0  the tick's transitions were decided and recorded (delivery failures are logged and\n   \
               recorded, never raised); --test: every channel accepted the test alert\n\
               1  --test: a channel failed\n\
               2  an error (config, database), or a bad input line",
        fields: "\
reads    verdict, blind, source and tick records (from wd-store tick)
writes   one event per transition: {dedup_key, severity (info|warning|critical), state
         (trigger|escalate|resolve), title, summary, details, source, t, alert, root, reason,
         figures {calls, cost, duration_ms, flagged_ticks}, episode, agent, model, link}; it maps
         one to one onto PagerDuty Events v2
         reason: escalate still_looping|second_opinion; resolve progress|stopped|gone (loops),
         readable (blind), recovered|stopped|changed|gone (liveness); done (a done notice,
         closed as it opens)
         dedup_key: loop:ROOT, stalled|retrying|waiting|interrupted|unfinished|done:SESSION,
         watchdog-blind, whichever agent program runs the session (opencode-loop:ROOT and the
         like before schema 13; an alert open across the upgrade goes on reaching PagerDuty and
         webhooks under its old key, Alertmanager under its old alertname, until it resolves)
rules    a tick counts toward escalation only when the tree's flagged sessions made new calls
         since the previous tick and landed nothing; flagged_ticks is 1 at the trigger and the
         alert escalates when it reaches escalate_after_ticks (default 3); a busy session that
         makes no call neither counts nor resolves; stopped: every flagged session idle and no
         call since the previous tick; gone: the root no longer in a source that listed it,
         read this tick; done ([alert] notify_done, off by default): one info notice per turn
         a root session finished (idle, or its process ended, after its last step ended the
         turn; not stopped, interrupted, looping, stalled or waiting), with what it landed,
         told once and only within 15 min of the turn's end; its popup goes after 20 s
figures  this episode's calls and cost since the last landed change (a loop that starts again
         with nothing landed since counts from where its previous episode stopped) and its
         first call to its last
logs     oc-watchdog: dedup=... state=... severity=... [reason=...] title=... on stderr, per transition",
        examples: "\
$ ... | wd-store tick | wd-alert 2>&1 >/dev/null
oc-watchdog: dedup=loop:ses_dd1a863eeffeaX5bvn47BhPUH2 state=trigger severity=warning title=\"opencode loop: build repeats bash python3 tools/check.py\"
$ wd-alert --test --channel desktop
wd-alert: channel desktop: sent (notification 2)",
    },
];
