_progress__detect() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="progress__detect"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        progress__detect)
            opts="-h -V --check --flag-rate-max --every --format --now --config --window --min-calls --dup-min --top-min --top-min-ro --cum-min --cover-min --short-top-min --short-share-min --run-min --cycle-calls-min --same-failure-min --same-failure-checked-min --failed-again-min --unmoved-min --relanded-min --circle-passes-min --circle-reads-min --set --read-only-agents --line-buffered --follow --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --flag-rate-max)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --format)
                    COMPREPLY=($(compgen -W "jsonl table csv" -- "${cur}"))
                    return 0
                    ;;
                --now)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --window)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --min-calls)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --dup-min)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --top-min)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --top-min-ro)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cum-min)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cover-min)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --short-top-min)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --short-share-min)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --run-min)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cycle-calls-min)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --same-failure-min)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --same-failure-checked-min)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --failed-again-min)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --unmoved-min)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --relanded-min)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --circle-passes-min)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --circle-reads-min)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --set)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --read-only-agents)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _progress__detect -o nosort -o bashdefault -o default progress-detect
else
    complete -F _progress__detect -o bashdefault -o default progress-detect
fi
