//! `wd-store`: record ticks and answer the operator's questions.
//!
//! `tick` sits in the middle of the tick pipeline: every input line passes through unchanged,
//! then one `tick` record (id, time, outcome) is appended for `wd-alert`. The queries print
//! JSONL (default), an aligned table (`--format table`) or CSV (`--format csv`).
//!
//! One file per group of subcommands: [`tick`] (the pipeline stage and what the tick script
//! asks before it), [`calls`] (the stage before progress-detect that keeps calls for the page), [`queries`] (status, loops, alerts, verdicts, rollup, blocks), [`channels`],
//! [`upkeep`] (prune, metrics, the page), [`block`] (block-model, unblock-model) and
//! [`not_watching`] (check-config: a config that does not load is told); the SQL
//! lives in [`crate::store`], by table.

mod block;
mod calls;
mod channels;
mod not_watching;
mod queries;
mod tick;
mod upkeep;

use crate::cli::{Exit, Format, Out};
use crate::config::Config;
use crate::store::Store;
use anyhow::Result;
use clap::{Parser, Subcommand};
use std::io::BufRead;
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  ... | oc-calls | wd-store calls | progress-detect | wd-store tick | wd-alert
  wd-store status --format table
  wd-store loops --format table
  wd-store alerts --since 7d --format table
  wd-store verdicts --since 1h --flagged | jq -r '[.session, .signals.top_target] | @tsv'
  wd-store rollup --by model --since 1h --format table
  wd-store channels set desktop --enabled false
  wd-store prune --older-than 30d
  wd-store report --out - > /tmp/watchdog.html
  wd-store block-model openrouter/some-model --reason \"stalls on every bash call\"
  wd-store blocks --format table
  wd-store stop ses_0123456789abcdefABCDEFGHIJ";

/// The watchdog's SQLite record: ticks, verdicts, alerts, channel settings.
#[derive(Parser, Debug)]
#[command(name = "wd-store", version, after_help = EXAMPLES)]
pub struct Args {
    /// The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db).
    #[arg(long, global = true, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Output format of the queries (default jsonl; `status` prints a key/value block on a
    /// terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns.
    #[arg(long, global = true, value_enum)]
    pub format: Option<Format>,
    /// The current time in epoch ms (default: the clock).
    #[arg(long, global = true, value_name = "MS")]
    pub now: Option<i64>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Record one tick from a verdict stream on stdin, passing the stream through.
    Tick {
        /// Force the outcome (e.g. no_agent for an empty tick).
        #[arg(long, value_parser = ["ok", "flagged", "no_agent", "blind"])]
        outcome: Option<String>,
        /// When the tick started, epoch ms (default: when this command started).
        #[arg(long, value_name = "MS", conflicts_with = "follow")]
        started: Option<i64>,
        /// Follow mode: every `sweep` record ends one tick, recorded and its `tick` record
        /// written (and flushed) in the sweep's place; runs until end of input.
        #[arg(long, conflicts_with = "outcome")]
        follow: bool,
    },
    /// Pass a call stream (oc-calls output) through, keeping every session's latest calls for
    /// the operator's page; the next `tick` keeps those of the sessions it flags.
    Calls {
        /// Follow a live stream (oc-calls --follow): keep each session's latest calls across
        /// batches (a later line of a call replaces the earlier) and stage those of the
        /// sessions in each batch at its `sweep` record, before passing the sweep on.
        #[arg(long)]
        follow: bool,
    },
    /// Print the time of the last tick (epoch ms; nothing before the first tick).
    LastTick,
    /// Print the root sessions of open loop alerts, space-separated (for `oc-sessions --also`).
    OpenRoots,
    /// Last tick, its sessions and flagged verdicts, open alerts, channels. In follow mode the
    /// outcome and figures are each session's latest verdict since the last full tick (at
    /// `figures_at`): a partial tick judges only what changed in its second.
    Status,
    /// Open alerts (and those closed in the last --recent, with why): severity, dedup key,
    /// what the last tick made of it, agent, top target, what the loop burned.
    Loops {
        /// Also list episodes resolved this long ago or less.
        #[arg(long, value_name = "DURATION", default_value = "1h")]
        recent: String,
        /// With --format table: every column (the default table fits the terminal: COLUMNS, else its
        /// width, else 100).
        #[arg(long)]
        wide: bool,
    },
    /// The history of alert episodes, closed ones included: reason, duration, calls, cost.
    Alerts {
        /// Episodes open at any time since then.
        #[arg(long, value_name = "WHEN", default_value = "7d")]
        since: String,
        /// Only this kind (loop, blind, stalled, retrying, waiting, interrupted, unfinished).
        #[arg(long, value_name = "KIND")]
        kind: Option<String>,
        /// At most this many rows, newest first.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// With --format table: every column (the default table fits the terminal: COLUMNS, else its
        /// width, else 100).
        #[arg(long)]
        wide: bool,
    },
    /// Recorded verdicts, newest first.
    Verdicts {
        /// Only verdicts judged since then: a duration back from now (1h) or epoch ms.
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Only this session's verdicts.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Only flagged verdicts.
        #[arg(long)]
        flagged: bool,
        /// At most this many rows.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// With --format table: every column as stored (signals, evidence and digest as JSON);
        /// the default table names what each verdict repeats and fits the terminal.
        #[arg(long)]
        wide: bool,
    },
    /// Flagged sessions per model next to each model's share of all sessions seen; a session counts once, under the latest model (or agent) its verdicts name.
    Rollup {
        /// Group the sessions by model or by agent.
        #[arg(long, value_parser = ["model", "agent"], default_value = "model")]
        by: String,
        /// Sessions with verdicts since then: a duration back from now (1h) or epoch ms.
        #[arg(long, value_name = "WHEN", default_value = "1h")]
        since: String,
    },
    /// List channels (config merged with run-time settings), or change one.
    Channels {
        #[command(subcommand)]
        set: Option<ChannelCmd>,
    },
    /// Delete ticks and verdicts older than a duration; open alerts are never pruned.
    Prune {
        /// Delete what is older than this (e.g. 30d; default [store] retention_days, 30).
        #[arg(long, value_name = "DURATION")]
        older_than: Option<String>,
    },
    /// Write Prometheus metrics (text exposition format) atomically to a file, or stdout.
    Metrics {
        /// The file to write (replaced atomically); default stdout.
        #[arg(long, value_name = "PATH")]
        output: Option<PathBuf>,
    },
    /// Write the operator's page: one self-contained HTML file (default [report] file, i.e.
    /// $XDG_STATE_HOME/oc-watchdog/report.html), rewritten atomically; `--out -` for stdout.
    Report {
        /// The file to write (default [report] file); `-` for stdout.
        #[arg(long, value_name = "PATH")]
        out: Option<PathBuf>,
        /// Follow mode: read wd-alert --follow's stream (events, then each `tick` record) and
        /// rewrite the page as it comes, at most every 2 s: at every event and full tick, and
        /// every 10 s while partial ticks flag sessions; runs until end of input.
        #[arg(long)]
        follow: bool,
    },
    /// Add PROVIDER/MODEL to its provider's `blacklist` in your opencode config, so new opencode
    /// processes no longer offer it; comments and formatting stay, a backup is kept.
    BlockModel {
        /// The model as `opencode models` lists it.
        model: String,
        /// Why (shown on the page).
        #[arg(long)]
        reason: Option<String>,
        /// The opencode config to edit (default: [report] opencode_config, else the global
        /// opencode.jsonc / opencode.json under $XDG_CONFIG_HOME/opencode).
        #[arg(long, value_name = "PATH")]
        opencode_config: Option<PathBuf>,
        /// The opencode binary asked which models exist.
        #[arg(
            long,
            value_name = "PATH",
            env = "OPENCODE_BIN",
            default_value = "opencode"
        )]
        opencode: String,
        /// Block it even when it is opencode's default (the config's `model` or `small_model`,
        /// an agent's or a mode's `model`): every new opencode starting with it then fails.
        #[arg(long)]
        force: bool,
    },
    /// Undo `block-model`: remove exactly what it added to the opencode config.
    UnblockModel {
        /// The model as `block-model` was given it (PROVIDER/MODEL).
        model: String,
    },
    /// Models blocked by `block-model`, newest first: when, by whom, why, in which file, and the
    /// command that undoes it.
    Blocks {
        /// Also list blocks already undone.
        #[arg(long)]
        all: bool,
    },
    /// Stop SESSION's current run, as Esc in its TUI would: an opencode session over HTTP when a
    /// server runs it, else through the oc-watchdog-stop plugin; a Claude Code session through
    /// its PreToolUse hook, at its next tool call (both installed by deploy/install
    /// --with-stop-plugin); a Codex thread by SIGINT to its `codex exec`, or turn/interrupt
    /// through Codex's app-server daemon for its TUI. Once per loop episode, recorded; the
    /// session stays resumable: `opencode -s SESSION` (its TUI) or `opencode run -s SESSION
    /// "continue"`, `claude --resume SESSION` or `claude -p --resume SESSION "continue"`, `codex
    /// resume ID` or `codex exec resume ID "continue"`, in its project.
    Stop {
        /// The session to stop (its id: ses_... for opencode, a UUID for Claude Code and Codex).
        session: String,
        /// How long to wait for the stop to be carried out.
        #[arg(long, value_name = "DURATION", default_value = "15s")]
        wait: String,
    },
    /// Check the config and the state: exit 0 when the config loads and a tick can be
    /// recorded. When the config does not load, the watchdog watches nothing: say why
    /// (file:line: key: problem), rewrite the page from what was last recorded with the error,
    /// and show it on the desktop once per distinct error. When the state directory's
    /// filesystem is full, say so and tell every enabled channel once, straight (its resolve
    /// when there is room again). The tick and follow scripts run it first.
    CheckConfig,
    /// `install` or `uninstall` Claude Code's PreToolUse stop hook (wd-claude-hook, beside
    /// wd-store) in Claude Code's user settings (~/.claude/settings.json; deploy/install
    /// --with-stop-plugin and --uninstall run them). Given nothing, it is the hook: it reads the
    /// hook input on stdin, refuses the call and ends the turn when `wd-store stop` asks it to,
    /// else says nothing, and exits 0. Reads neither the config nor the database.
    ClaudeHook {
        /// `install` or `uninstall`; none: run as the hook.
        #[arg(value_parser = ["install", "uninstall"])]
        action: Option<String>,
    },
    /// Show the desktop notification read from stdin, print its id, then wait for a click on it
    /// and open its URL with [report] open_with (started by the desktop channel).
    #[command(hide = true)]
    NotifyOnAction {
        /// How long to wait for a click.
        #[arg(long, default_value_t = 3600)]
        wait_secs: u64,
    },
}

impl Cmd {
    /// Does this command record (and so create the database when there is none)? The queries
    /// do not: on a missing database they fail, naming it. `last-tick` and `open-roots` are
    /// the tick script's first steps, and `report --follow` a stage of the follow pipeline
    /// started beside the stages that record.
    fn records(&self) -> bool {
        match self {
            Cmd::Tick { .. }
            | Cmd::LastTick
            | Cmd::OpenRoots
            | Cmd::Calls { .. }
            | Cmd::Channels { set: Some(_) }
            | Cmd::Stop { .. }
            | Cmd::BlockModel { .. }
            | Cmd::UnblockModel { .. }
            | Cmd::NotifyOnAction { .. }
            | Cmd::Report { follow: true, .. } => true,
            Cmd::Status
            | Cmd::Loops { .. }
            | Cmd::Alerts { .. }
            | Cmd::Verdicts { .. }
            | Cmd::Rollup { .. }
            | Cmd::Channels { set: None }
            | Cmd::Prune { .. }
            | Cmd::Metrics { .. }
            | Cmd::Report { follow: false, .. }
            | Cmd::Blocks { .. }
            | Cmd::ClaudeHook { .. }
            | Cmd::CheckConfig => false,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum ChannelCmd {
    /// Change a channel's settings; they apply at the next tick.
    Set {
        /// The channel's name in the config.
        name: String,
        /// Turn the channel on (true) or off (false).
        #[arg(long, value_name = "BOOL")]
        enabled: Option<bool>,
        /// The least severity the channel is sent.
        #[arg(long, value_name = "SEVERITY", value_parser = ["info", "warning", "critical"])]
        min_severity: Option<String>,
    },
}

pub fn main() -> i32 {
    // the hook (as wd-claude-hook) and its install answer before the arguments are parsed, the
    // config loaded or the database opened; the hook exits 0 whatever happens
    let mut args = std::env::args_os().skip(1);
    if args
        .next()
        .is_some_and(|a| a == crate::claude_hook::SUBCOMMAND)
    {
        return match args.next() {
            None => crate::claude_hook::main(),
            Some(a) if args.next().is_none() => {
                crate::claude_hook::settings::command(&a.to_string_lossy())
            }
            Some(_) => crate::cli::main("wd-store", run),
        };
    }
    crate::cli::main("wd-store", run)
}

/// What every subcommand gets: the config, the open store, the time and the output format.
pub struct Ctx {
    pub cfg: Config,
    pub store: Store,
    /// `--now`, else when this command started.
    pub now: i64,
    /// `--now` as given (a follow stage reads the clock at each tick without it).
    pub fixed_now: Option<i64>,
    pub format: Format,
    /// `--format` was given (else `status` picks a table for a terminal).
    pub format_given: bool,
}

pub fn run(args: Args, stdin: &mut dyn BufRead, out: &mut Out) -> Result<Exit> {
    let started = crate::cli::now_ms();
    let now = args.now.unwrap_or(started);
    let cfg = match Config::load(args.config.as_deref()) {
        Ok(cfg) if matches!(args.cmd, Cmd::CheckConfig) => {
            let db = args.db.clone().unwrap_or_else(|| cfg.store_db());
            return not_watching::check(&cfg, &db, now);
        }
        Ok(cfg) => cfg,
        Err(e) => {
            if matches!(args.cmd, Cmd::CheckConfig) {
                not_watching::not_watching(args.config.as_deref(), args.db.clone(), &e, now);
            }
            return Err(e);
        }
    };
    let path = args.db.clone().unwrap_or_else(|| cfg.store_db());
    // a query never makes the database it asks: a mistyped --db, or a state directory removed,
    // is said, not answered with an empty record that looks like a quiet watchdog
    if !args.cmd.records() && !path.exists() {
        anyhow::bail!(
            "watchdog database {}: not found (the first tick or `wd-store tick` creates it; --db names another)",
            path.display()
        );
    }
    let store = match Store::open_with(&path, cfg.store_busy()) {
        Ok(s) => s,
        // a full or unwritable state directory cannot even be read (SQLite's WAL index lives
        // there): every command says why, and the page, where it can be written, too
        Err(e) => {
            // a read-only directory is said in SQLite's words already (Store::explain)
            let why = crate::store::dir_problem(&path)
                .filter(|_| !format!("{e:#}").contains("read-only"));
            let Some(why) = why else {
                return Err(e);
            };
            if let Cmd::Report { out: page, .. } = &args.cmd {
                upkeep::unreadable_page(&cfg, page.clone(), &why, now, out);
            }
            return Err(e.context(why));
        }
    };
    let mut cx = Ctx {
        cfg,
        store,
        now,
        fixed_now: args.now,
        format: args.format.unwrap_or_default(),
        format_given: args.format.is_some(),
    };
    let r = dispatch(&mut cx, args.cmd, stdin, out);
    r.map_err(|e| cx.store.explain(e))
}

fn dispatch(cx: &mut Ctx, cmd: Cmd, stdin: &mut dyn BufRead, out: &mut Out) -> Result<Exit> {
    match cmd {
        Cmd::Tick { follow: true, .. } => tick::follow(cx, stdin, out),
        Cmd::Tick {
            outcome, started, ..
        } => tick::tick(cx, stdin, out, outcome, started),
        Cmd::Calls { follow: false } => calls::run(cx, stdin, out),
        Cmd::Calls { follow: true } => calls::follow(cx, stdin, out),
        Cmd::LastTick => tick::last_tick(cx, out),
        Cmd::OpenRoots => tick::open_roots(cx, out),
        Cmd::Status => queries::status(cx, out),
        Cmd::Loops { recent, wide } => queries::loops(cx, &recent, wide, out),
        Cmd::Alerts {
            since,
            kind,
            limit,
            wide,
        } => queries::alerts(cx, &since, kind, limit, wide, out),
        Cmd::Verdicts {
            since,
            session,
            flagged,
            limit,
            wide,
        } => queries::verdicts(cx, since, session, flagged, (limit, wide), out),
        Cmd::Rollup { by, since } => queries::rollup(cx, &by, &since, out),
        Cmd::Blocks { all } => queries::blocks(cx, all, out),
        Cmd::Stop { session, wait } => {
            crate::stop::command(&mut cx.store, &cx.cfg, &session, &wait, "operator", out)
        }
        Cmd::ClaudeHook { .. } => {
            anyhow::bail!("claude-hook takes `install`, `uninstall` or nothing")
        }
        Cmd::Channels { set } => channels::run(cx, set, out),
        Cmd::Prune { older_than } => upkeep::prune(cx, older_than, out),
        Cmd::Metrics { output } => upkeep::metrics(cx, output.as_deref(), out),
        Cmd::Report {
            out: path,
            follow: true,
        } => upkeep::report_follow(cx, path, stdin, out),
        Cmd::Report { out: path, .. } => upkeep::report(cx, path, out),
        Cmd::BlockModel {
            model,
            reason,
            opencode_config,
            opencode,
            force,
        } => block::block_model(cx, &model, reason, opencode_config, &opencode, force, out),
        Cmd::UnblockModel { model } => block::unblock_model(cx, &model, out),
        Cmd::NotifyOnAction { wait_secs } => notify_on_action(cx, wait_secs, stdin, out),
        Cmd::CheckConfig => not_watching::watching(),
    }
}

/// The desktop notification's click helper (see `crate::notify::click`).
fn notify_on_action(
    cx: &mut Ctx,
    wait_secs: u64,
    stdin: &mut dyn BufRead,
    out: &mut Out,
) -> Result<Exit> {
    use crate::notify::click;
    let with = cx
        .cfg
        .report
        .open_with
        .clone()
        .filter(|w| !w.trim().is_empty());
    let lock = click::lock_path(&cx.store.path);
    // the stop is recorded like the operator's command; its words go to the log, as the
    // alerter that reads this helper's first line is gone by then
    let mut stop = |session: &str| -> Result<()> {
        let mut said = Out::new(Box::new(std::io::stderr()), false);
        crate::stop::command(&mut cx.store, &cx.cfg, session, "15s", "popup", &mut said)?;
        Ok(said.flush()?)
    };
    click::notify_and_wait(
        stdin,
        out,
        &lock,
        click::OnAction {
            open_with: with.as_deref().unwrap_or("xdg-open"),
            stop: &mut stop,
        },
        std::time::Duration::from_secs(wait_secs),
    )?;
    Ok(Exit::Ok)
}
