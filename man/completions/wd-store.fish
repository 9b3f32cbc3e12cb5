# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_wd_store_global_optspecs
    string join \n db= config= format= now= h/help V/version
end

function __fish_wd_store_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_wd_store_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_wd_store_using_subcommand
    set -l cmd (__fish_wd_store_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c wd-store -n "__fish_wd_store_needs_command" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_needs_command" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_needs_command" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_needs_command" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_needs_command" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_needs_command" -s V -l version -d 'Print version'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "tick" -d 'Record one tick from a verdict stream on stdin, passing the stream through'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "calls" -d 'Pass a call stream (oc-calls output) through, keeping every session\'s latest calls for the operator\'s page; the next `tick` keeps those of the sessions it flags'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "last-tick" -d 'Print the time of the last tick (epoch ms; nothing before the first tick)'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "open-roots" -d 'Print the root sessions of open loop alerts, space-separated (for `oc-sessions --also`)'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "status" -d 'Last tick, its sessions and flagged verdicts, open alerts, channels. In follow mode the outcome and figures are each session\'s latest verdict since the last full tick (at `figures_at`): a partial tick judges only what changed in its second'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "loops" -d 'Open alerts (and those closed in the last --recent, with why): severity, dedup key, what the last tick made of it, agent, top target, what the loop burned'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "alerts" -d 'The history of alert episodes, closed ones included: reason, duration, calls, cost'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "verdicts" -d 'Recorded verdicts, newest first'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "rollup" -d 'Flagged sessions per model next to each model\'s share of all sessions seen; a session counts once, under the latest model (or agent) its verdicts name'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "channels" -d 'List channels (config merged with run-time settings), or change one'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "prune" -d 'Delete ticks and verdicts older than a duration; open alerts are never pruned'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "metrics" -d 'Write Prometheus metrics (text exposition format) atomically to a file, or stdout'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "report" -d 'Write the operator\'s page: one self-contained HTML file (default [report] file, i.e. $XDG_STATE_HOME/oc-watchdog/report.html), rewritten atomically; `--out -` for stdout'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "block-model" -d 'Add PROVIDER/MODEL to its provider\'s `blacklist` in your opencode config, so new opencode processes no longer offer it; comments and formatting stay, a backup is kept'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "unblock-model" -d 'Undo `block-model`: remove exactly what it added to the opencode config'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "blocks" -d 'Models blocked by `block-model`, newest first: when, by whom, why, in which file, and the command that undoes it'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "stop" -d 'Stop SESSION\'s current run, as Esc in its TUI would: an opencode session over HTTP when a server runs it, else through the oc-watchdog-stop plugin; a Claude Code session through its PreToolUse hook, at its next tool call (both installed by deploy/install --with-stop-plugin); a Codex thread by SIGINT to its `codex exec`, or turn/interrupt through Codex\'s app-server daemon for its TUI. Once per loop episode, recorded; the session stays resumable: `opencode -s SESSION` (its TUI) or `opencode run -s SESSION "continue"`, `claude --resume SESSION` or `claude -p --resume SESSION "continue"`, `codex resume ID` or `codex exec resume ID "continue"`, in its project'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "check-config" -d 'Check the config and the state: exit 0 when the config loads and a tick can be recorded. When the config does not load, the watchdog watches nothing: say why (file:line: key: problem), rewrite the page from what was last recorded with the error, and show it on the desktop once per distinct error. When the state directory\'s filesystem is full, say so and tell every enabled channel once, straight (its resolve when there is room again). The tick and follow scripts run it first'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "claude-hook" -d '`install` or `uninstall` Claude Code\'s PreToolUse stop hook (wd-claude-hook, beside wd-store) in Claude Code\'s user settings (~/.claude/settings.json; deploy/install --with-stop-plugin and --uninstall run them). Given nothing, it is the hook: it reads the hook input on stdin, refuses the call and ends the turn when `wd-store stop` asks it to, else says nothing, and exits 0. Reads neither the config nor the database'
complete -c wd-store -n "__fish_wd_store_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c wd-store -n "__fish_wd_store_using_subcommand tick" -l outcome -d 'Force the outcome (e.g. no_agent for an empty tick)' -r -f -a "ok\t''
flagged\t''
no_agent\t''
blind\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand tick" -l started -d 'When the tick started, epoch ms (default: when this command started)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand tick" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand tick" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand tick" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand tick" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand tick" -l follow -d 'Follow mode: every `sweep` record ends one tick, recorded and its `tick` record written (and flushed) in the sweep\'s place; runs until end of input'
complete -c wd-store -n "__fish_wd_store_using_subcommand tick" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand calls" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand calls" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand calls" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand calls" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand calls" -l follow -d 'Follow a live stream (oc-calls --follow): keep each session\'s latest calls across batches (a later line of a call replaces the earlier) and stage those of the sessions in each batch at its `sweep` record, before passing the sweep on'
complete -c wd-store -n "__fish_wd_store_using_subcommand calls" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand last-tick" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand last-tick" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand last-tick" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand last-tick" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand last-tick" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand open-roots" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand open-roots" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand open-roots" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand open-roots" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand open-roots" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand status" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand status" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand status" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand status" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand status" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand loops" -l recent -d 'Also list episodes resolved this long ago or less' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand loops" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand loops" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand loops" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand loops" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand loops" -l wide -d 'With --format table: every column (the default table fits the terminal: COLUMNS, else its width, else 100)'
complete -c wd-store -n "__fish_wd_store_using_subcommand loops" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand alerts" -l since -d 'Episodes open at any time since then' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand alerts" -l kind -d 'Only this kind (loop, blind, stalled, retrying, waiting, interrupted, unfinished)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand alerts" -l limit -d 'At most this many rows, newest first' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand alerts" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand alerts" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand alerts" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand alerts" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand alerts" -l wide -d 'With --format table: every column (the default table fits the terminal: COLUMNS, else its width, else 100)'
complete -c wd-store -n "__fish_wd_store_using_subcommand alerts" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand verdicts" -l since -d 'Only verdicts judged since then: a duration back from now (1h) or epoch ms' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand verdicts" -l session -d 'Only this session\'s verdicts' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand verdicts" -l limit -d 'At most this many rows' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand verdicts" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand verdicts" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand verdicts" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand verdicts" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand verdicts" -l flagged -d 'Only flagged verdicts'
complete -c wd-store -n "__fish_wd_store_using_subcommand verdicts" -l wide -d 'With --format table: every column as stored (signals, evidence and digest as JSON); the default table names what each verdict repeats and fits the terminal'
complete -c wd-store -n "__fish_wd_store_using_subcommand verdicts" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand rollup" -l by -d 'Group the sessions by model or by agent' -r -f -a "model\t''
agent\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand rollup" -l since -d 'Sessions with verdicts since then: a duration back from now (1h) or epoch ms' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand rollup" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand rollup" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand rollup" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand rollup" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand rollup" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand channels; and not __fish_seen_subcommand_from set help" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand channels; and not __fish_seen_subcommand_from set help" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand channels; and not __fish_seen_subcommand_from set help" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand channels; and not __fish_seen_subcommand_from set help" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand channels; and not __fish_seen_subcommand_from set help" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand channels; and not __fish_seen_subcommand_from set help" -f -a "set" -d 'Change a channel\'s settings; they apply at the next tick'
complete -c wd-store -n "__fish_wd_store_using_subcommand channels; and not __fish_seen_subcommand_from set help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c wd-store -n "__fish_wd_store_using_subcommand channels; and __fish_seen_subcommand_from set" -l enabled -d 'Turn the channel on (true) or off (false)' -r -f -a "true\t''
false\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand channels; and __fish_seen_subcommand_from set" -l min-severity -d 'The least severity the channel is sent' -r -f -a "info\t''
warning\t''
critical\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand channels; and __fish_seen_subcommand_from set" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand channels; and __fish_seen_subcommand_from set" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand channels; and __fish_seen_subcommand_from set" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand channels; and __fish_seen_subcommand_from set" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand channels; and __fish_seen_subcommand_from set" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand channels; and __fish_seen_subcommand_from help" -f -a "set" -d 'Change a channel\'s settings; they apply at the next tick'
complete -c wd-store -n "__fish_wd_store_using_subcommand channels; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c wd-store -n "__fish_wd_store_using_subcommand prune" -l older-than -d 'Delete what is older than this (e.g. 30d; default [store] retention_days, 30)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand prune" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand prune" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand prune" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand prune" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand prune" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand metrics" -l output -d 'The file to write (replaced atomically); default stdout' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand metrics" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand metrics" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand metrics" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand metrics" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand metrics" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand report" -l out -d 'The file to write (default [report] file); `-` for stdout' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand report" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand report" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand report" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand report" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand report" -l follow -d 'Follow mode: read wd-alert --follow\'s stream (events, then each `tick` record) and rewrite the page as it comes, at most every 2 s: at every event and full tick, and every 10 s while partial ticks flag sessions; runs until end of input'
complete -c wd-store -n "__fish_wd_store_using_subcommand report" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand block-model" -l reason -d 'Why (shown on the page)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand block-model" -l opencode-config -d 'The opencode config to edit (default: [report] opencode_config, else the global opencode.jsonc / opencode.json under $XDG_CONFIG_HOME/opencode)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand block-model" -l opencode -d 'The opencode binary asked which models exist' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand block-model" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand block-model" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand block-model" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand block-model" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand block-model" -l force -d 'Block it even when it is opencode\'s default (the config\'s `model` or `small_model`, an agent\'s or a mode\'s `model`): every new opencode starting with it then fails'
complete -c wd-store -n "__fish_wd_store_using_subcommand block-model" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand unblock-model" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand unblock-model" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand unblock-model" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand unblock-model" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand unblock-model" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand blocks" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand blocks" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand blocks" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand blocks" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand blocks" -l all -d 'Also list blocks already undone'
complete -c wd-store -n "__fish_wd_store_using_subcommand blocks" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand stop" -l wait -d 'How long to wait for the stop to be carried out' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand stop" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand stop" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand stop" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand stop" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand stop" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand check-config" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand check-config" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand check-config" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand check-config" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand check-config" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand claude-hook" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand claude-hook" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand claude-hook" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand claude-hook" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand claude-hook" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand notify-on-action" -l wait-secs -d 'How long to wait for a click' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand notify-on-action" -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand notify-on-action" -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-store -n "__fish_wd_store_using_subcommand notify-on-action" -l format -d 'Output format of the queries (default jsonl; `status` prints a key/value block on a terminal, as with `table`). A table fits COLUMNS, else the terminal, else 100 columns' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c wd-store -n "__fish_wd_store_using_subcommand notify-on-action" -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-store -n "__fish_wd_store_using_subcommand notify-on-action" -s h -l help -d 'Print help'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "tick" -d 'Record one tick from a verdict stream on stdin, passing the stream through'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "calls" -d 'Pass a call stream (oc-calls output) through, keeping every session\'s latest calls for the operator\'s page; the next `tick` keeps those of the sessions it flags'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "last-tick" -d 'Print the time of the last tick (epoch ms; nothing before the first tick)'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "open-roots" -d 'Print the root sessions of open loop alerts, space-separated (for `oc-sessions --also`)'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "status" -d 'Last tick, its sessions and flagged verdicts, open alerts, channels. In follow mode the outcome and figures are each session\'s latest verdict since the last full tick (at `figures_at`): a partial tick judges only what changed in its second'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "loops" -d 'Open alerts (and those closed in the last --recent, with why): severity, dedup key, what the last tick made of it, agent, top target, what the loop burned'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "alerts" -d 'The history of alert episodes, closed ones included: reason, duration, calls, cost'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "verdicts" -d 'Recorded verdicts, newest first'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "rollup" -d 'Flagged sessions per model next to each model\'s share of all sessions seen; a session counts once, under the latest model (or agent) its verdicts name'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "channels" -d 'List channels (config merged with run-time settings), or change one'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "prune" -d 'Delete ticks and verdicts older than a duration; open alerts are never pruned'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "metrics" -d 'Write Prometheus metrics (text exposition format) atomically to a file, or stdout'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "report" -d 'Write the operator\'s page: one self-contained HTML file (default [report] file, i.e. $XDG_STATE_HOME/oc-watchdog/report.html), rewritten atomically; `--out -` for stdout'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "block-model" -d 'Add PROVIDER/MODEL to its provider\'s `blacklist` in your opencode config, so new opencode processes no longer offer it; comments and formatting stay, a backup is kept'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "unblock-model" -d 'Undo `block-model`: remove exactly what it added to the opencode config'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "blocks" -d 'Models blocked by `block-model`, newest first: when, by whom, why, in which file, and the command that undoes it'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "stop" -d 'Stop SESSION\'s current run, as Esc in its TUI would: an opencode session over HTTP when a server runs it, else through the oc-watchdog-stop plugin; a Claude Code session through its PreToolUse hook, at its next tool call (both installed by deploy/install --with-stop-plugin); a Codex thread by SIGINT to its `codex exec`, or turn/interrupt through Codex\'s app-server daemon for its TUI. Once per loop episode, recorded; the session stays resumable: `opencode -s SESSION` (its TUI) or `opencode run -s SESSION "continue"`, `claude --resume SESSION` or `claude -p --resume SESSION "continue"`, `codex resume ID` or `codex exec resume ID "continue"`, in its project'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "check-config" -d 'Check the config and the state: exit 0 when the config loads and a tick can be recorded. When the config does not load, the watchdog watches nothing: say why (file:line: key: problem), rewrite the page from what was last recorded with the error, and show it on the desktop once per distinct error. When the state directory\'s filesystem is full, say so and tell every enabled channel once, straight (its resolve when there is room again). The tick and follow scripts run it first'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "claude-hook" -d '`install` or `uninstall` Claude Code\'s PreToolUse stop hook (wd-claude-hook, beside wd-store) in Claude Code\'s user settings (~/.claude/settings.json; deploy/install --with-stop-plugin and --uninstall run them). Given nothing, it is the hook: it reads the hook input on stdin, refuses the call and ends the turn when `wd-store stop` asks it to, else says nothing, and exits 0. Reads neither the config nor the database'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and not __fish_seen_subcommand_from tick calls last-tick open-roots status loops alerts verdicts rollup channels prune metrics report block-model unblock-model blocks stop check-config claude-hook notify-on-action help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c wd-store -n "__fish_wd_store_using_subcommand help; and __fish_seen_subcommand_from channels" -f -a "set" -d 'Change a channel\'s settings; they apply at the next tick'
