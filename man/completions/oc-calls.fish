complete -c oc-calls -l server -d 'Server to read the given session ids from (repeatable; besides those configured and those found running). Without --db, the database is then not consulted' -r
complete -c oc-calls -l db -d 'opencode\'s database to read the given session ids from (default: [opencode] db, else $XDG_DATA_HOME/opencode/opencode.db)' -r -F
complete -c oc-calls -l export -d 'Read sessions someone sent, for a backtest: a file `opencode export <id>` wrote (several documents may follow each other), a Claude Code transcript (`~/.claude/projects/<dir>/<session>.jsonl`, with its subagents in `<session>/subagents/` beside it), a Codex rollout (`~/.codex/sessions/Y/M/D/rollout-*.jsonl`), or a folder holding such transcripts at any depth (`-`: stdin). Each file is told by its first record' -r
complete -c oc-calls -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c oc-calls -l line-buffered -d 'Flush after every record'
complete -c oc-calls -l follow -d 'Read a stream that does not end (oc-sessions --follow): for each session record, only the messages changed since it was last read (of a Claude Code or Codex session, the lines appended to its files); write each call that is new or whose record changed (a later line of a call replaces the earlier one), and the activity when it changed; pass each sweep on and flush. Sessions unlisted for 60 full sweeps are forgotten (read whole if they come back)'
complete -c oc-calls -s h -l help -d 'Print help'
complete -c oc-calls -s V -l version -d 'Print version'
