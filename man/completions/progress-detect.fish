complete -c progress-detect -l flag-rate-max -d 'Backtest on runs known to be productive (a corpus): print each flagged session and the share flagged; exit 1 when that share is above PCT percent' -r
complete -c progress-detect -l format -d 'Output format' -r -f -a "jsonl\t''
table\t''
csv\t''"
complete -c progress-detect -l now -d 'The current time in epoch ms, for the liveness classes (default: the clock)' -r
complete -c progress-detect -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c progress-detect -l window -d 'Calls in the window' -r
complete -c progress-detect -l min-calls -d 'Calls a session needs before dup and coverage count' -r
complete -c progress-detect -l dup-min -d 'Share of exact repeats in the window that flags' -r
complete -c progress-detect -l top-min -d 'Count of the most-worked target that flags a normal agent' -r
complete -c progress-detect -l top-min-ro -d 'Count of the most-worked target that flags a read-only agent' -r
complete -c progress-detect -l cum-min -d 'Repeats of one exact call since the last landed change that flag' -r
complete -c progress-detect -l cover-min -d 'Coverage (lines requested from one file / its length) above which a session flags' -r
complete -c progress-detect -l short-top-min -d 'Under min_calls: repeats of one target that flag a short session ...' -r
complete -c progress-detect -l short-share-min -d '... making up this share of its calls' -r
complete -c progress-detect -l run-min -d 'Identical calls back to back that flag' -r
complete -c progress-detect -l cycle-calls-min -d 'Calls in a block of 2-12 calls repeated back to back that flag' -r
complete -c progress-detect -l same-failure-min -d 'Times in a row one check fails with the same output that flag' -r
complete -c progress-detect -l same-failure-checked-min -d '... or, each time right after a new change landed, that flag' -r
complete -c progress-detect -l failed-again-min -d 'Failing calls made again and failing the same way since the last landed change that flag' -r
complete -c progress-detect -l unmoved-min -d 'Times a check passes with the same answer while edits rework one spot that flag' -r
complete -c progress-detect -l relanded-min -d 'Times one change already landed lands again, no new change since, that flag' -r
complete -c progress-detect -l circle-passes-min -d 'Full passes over one file since the last landed change that flag ...' -r
complete -c progress-detect -l circle-reads-min -d '... in at least this many reads' -r
complete -c progress-detect -l set -d 'Set any detector threshold by its config key (`--set run_min=3`); may repeat, and overrides the config and the named flags' -r
complete -c progress-detect -l read-only-agents -d 'Agents that never land (comma-separated; matched on the agent name, else the title)' -r
complete -c progress-detect -l check -d 'Backtest: check the `expect`/`flag_after` labels; print one summary line and exit 1 when any label fails'
complete -c progress-detect -l every -d 'Also emit a verdict at every flag transition, as it happens'
complete -c progress-detect -l line-buffered -d 'Flush after every record'
complete -c progress-detect -l follow -d 'Follow a live stream (oc-sessions --follow ... | oc-calls --follow): keep every session\'s calls, and at each `sweep` record write the verdicts that changed (every listed session\'s on a full sweep), then the sweep, and flush. A later line of the same call replaces the earlier'
complete -c progress-detect -s h -l help -d 'Print help'
complete -c progress-detect -s V -l version -d 'Print version'
