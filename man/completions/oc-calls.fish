complete -c oc-calls -l server -d 'Server to read the given session ids from (repeatable; default as for oc-sessions)' -r
complete -c oc-calls -l db -d 'Read the given session ids from opencode\'s database (default path $XDG_DATA_HOME/opencode/opencode.db)' -r -F
complete -c oc-calls -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c oc-calls -l line-buffered -d 'Flush after every record'
complete -c oc-calls -s h -l help -d 'Print help'
complete -c oc-calls -s V -l version -d 'Print version'
