complete -c oc-sessions -l server -d 'Also read this opencode server (repeatable), besides those configured and those found running' -r
complete -c oc-sessions -l source -d 'Also read this source (repeatable), by the string the records\' `source` field holds: another opencode database (a second channel\'s), a server URL (as --server), or any other kind of source the watchdog knows. Read at every full read' -r
complete -c oc-sessions -l db -d 'opencode\'s SQLite database (default: [opencode] db, else $XDG_DATA_HOME/opencode/opencode.db). Always read when it exists; strictly read-only' -r -F
complete -c oc-sessions -l since -d 'Only sessions updated since WHEN (a duration like 10m, or epoch ms), plus every session that is not idle, plus their ancestors and descendants' -r
complete -c oc-sessions -l also -d 'Also list these sessions and their trees whatever --since says (ids separated by commas or spaces; the tick passes the roots of open alerts, so they are judged again and resolve when they are gone)' -r
complete -c oc-sessions -l now -d 'The current time in epoch ms (for --since durations; default: the clock)' -r
complete -c oc-sessions -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c oc-sessions -l no-db -d 'Do not read the database'
complete -c oc-sessions -l no-discover -d 'Do not look for running opencode servers (read only those given or configured)'
complete -c oc-sessions -l also-open -d 'With --follow, also list the trees of the watchdog\'s open alerts at every full read (the roots `wd-store open-roots` prints, asked of the store each time)'
complete -c oc-sessions -l follow -d 'Keep reading: every [follow] poll_ms, the sessions that changed (one cheap query of the database while nothing did; the sessions named by the event stream, GET /global/event, of each server read, connected again with backoff when it drops) and a partial `sweep` record; every [follow] full_every_secs, first, and after a server\'s stream came back, a full read as a tick\'s (sessions active since the previous full read, --also, the open alerts\' trees with --also-open, the `source` records) and a full `sweep`. The first read looks back to --since, else the watchdog\'s last tick, else 1h. Output is flushed after every sweep; SIGTERM ends it with status 0'
complete -c oc-sessions -l line-buffered -d 'Flush after every record'
complete -c oc-sessions -s h -l help -d 'Print help'
complete -c oc-sessions -s V -l version -d 'Print version'
