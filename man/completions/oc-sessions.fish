complete -c oc-sessions -l server -d 'An opencode server to read (repeatable). Default: the serverUrl entries of $XDG_DATA_HOME/opencode/rc-servers.json, else http://127.0.0.1:4096' -r
complete -c oc-sessions -l db -d 'Read opencode\'s SQLite database instead of a server (default path $XDG_DATA_HOME/opencode/opencode.db). Strictly read-only' -r -F
complete -c oc-sessions -l since -d 'Only sessions updated since WHEN (a duration like 10m, or epoch ms), plus every session that is not idle, plus their ancestors and descendants' -r
complete -c oc-sessions -l also -d 'Also list these sessions and their trees whatever --since says (ids separated by commas or spaces; the tick passes the roots of open alerts, so they are judged again and resolve when they are gone)' -r
complete -c oc-sessions -l now -d 'The current time in epoch ms (for --since durations; default: the clock)' -r
complete -c oc-sessions -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c oc-sessions -l line-buffered -d 'Flush after every record'
complete -c oc-sessions -s h -l help -d 'Print help'
complete -c oc-sessions -s V -l version -d 'Print version'
