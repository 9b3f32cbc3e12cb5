complete -c wd-alert -l db -d 'The watchdog database (default $XDG_STATE_HOME/oc-watchdog/watchdog.db)' -r -F
complete -c wd-alert -l config -d 'Config file (default $XDG_CONFIG_HOME/oc-watchdog/watchdog.toml if it exists)' -r -F
complete -c wd-alert -l now -d 'The current time in epoch ms (default: the clock)' -r
complete -c wd-alert -l channel -d 'With --test: only this channel (even if disabled)' -r
complete -c wd-alert -l severity -d 'With --test: the test alert\'s severity' -r -f -a "info\t''
warning\t''
critical\t''"
complete -c wd-alert -l test -d 'Send a test alert through the enabled channels (exit 1 if one fails)'
complete -c wd-alert -l follow -d 'Follow mode: every `tick` record ends one tick, decided and delivered at once; its events and then the tick record are written (and flushed) for `wd-store report --follow`. Runs until end of input'
complete -c wd-alert -s h -l help -d 'Print help'
complete -c wd-alert -s V -l version -d 'Print version'
