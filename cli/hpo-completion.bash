# hpo-completion.bash - bash completion for `hpo`, the client of hpod:
# commands, subcommands and each command's flags (the command table of
# cli/main.c; tests/api/test_cli.py checks that the two agree), files for
# the arguments that are files. Load it with
#   source cli/hpo-completion.bash
# (in ~/.bashrc), or copy it to ~/.local/share/bash-completion/completions/hpo.

_hpo_flags() {
    # The flags of one command ("study create", "best", ...), besides the
    # output flags every command takes.
    case "$1" in
        "study create") echo "--load-if-exists" ;;
        "study watch") echo "--interval" ;;
        "study enqueue") echo "--param" ;;
        "study add-trial") echo "--param --value --repeats --metric --state --intermediate --error" ;;
        "study export") echo "-o --output" ;;
        "study import"|"study copy") echo "--name" ;;
        best) echo "--top" ;;
        trials) echo "--state --order --desc --limit --offset" ;;
        events) echo "--after --timeout" ;;
        tell) echo "--state --error --repeats --metric" ;;
        refit) echo "--top --trials --epochs-factor --wait" ;;
        ensemble) echo "--members --top --method --rounds --wait" ;;
        weights) echo "-o --output" ;;
        "dataset upload") echo "--format --label-column --task" ;;
    esac
}

_hpo() {
    local cur prev words cword
    if declare -F _init_completion >/dev/null 2>&1; then
        _init_completion || return
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
        prev="${COMP_WORDS[COMP_CWORD-1]}"
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
    fi
    local commands="study studies best trials trial importance events ask report tell refit ensemble models predict weights dataset"
    local common="--json --field --quiet --help"

    # the command words, after the global flags
    local i=1 cmd="" sub="" cmd_at=0
    while [ "$i" -lt "$cword" ]; do
        case "${words[i]}" in
            --url|--token|--field) i=$((i + 2)); continue ;;
            -*) i=$((i + 1)); continue ;;
        esac
        if [ -z "$cmd" ]; then
            cmd="${words[i]}"
            cmd_at=$i
        elif [ -z "$sub" ] && { [ "$cmd" = study ] || [ "$cmd" = dataset ]; }; then
            sub="${words[i]}"
        elif [ -z "$sub" ] && [ "$cmd" = trial ] && [ "$i" -eq "$((cmd_at + 1))" ]; then
            case "${words[i]}" in attr|note) sub="${words[i]}" ;; esac
        fi
        i=$((i + 1))
    done

    case "$prev" in
        --url|--token|--field|--top|--trials|--members|--rounds|--epochs-factor|--limit|--offset|--after|--timeout|--interval|--error|--label-column|--param|--value|--intermediate|--name)
            return ;;
        --state)
            if [ "$cmd" = tell ]; then COMPREPLY=($(compgen -W "failed pruned" -- "$cur"))
            elif [ "$sub" = add-trial ]; then COMPREPLY=($(compgen -W "complete pruned failed" -- "$cur"))
            else COMPREPLY=($(compgen -W "running complete pruned failed cancelled queued" -- "$cur")); fi
            return ;;
        --order) COMPREPLY=($(compgen -W "number value" -- "$cur")); return ;;
        --method) COMPREPLY=($(compgen -W "mean weighted greedy" -- "$cur")); return ;;
        --format) COMPREPLY=($(compgen -W "csv idx npy" -- "$cur")); return ;;
        --task) COMPREPLY=($(compgen -W "classification regression" -- "$cur")); return ;;
        -o|--output) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    esac

    if [ -z "$cmd" ]; then
        COMPREPLY=($(compgen -W "$commands --url --token --help --version" -- "$cur"))
        return
    fi
    if [ -z "$sub" ]; then
        case "$cmd" in
            study) COMPREPLY=($(compgen -W "create list get delete pause resume cancel watch enqueue add-trial export import copy attr note" -- "$cur")); return ;;
            trial) if [ "$cword" -eq "$((cmd_at + 1))" ] && [[ "$cur" != -* ]]; then
                       COMPREPLY=($(compgen -W "attr note" -- "$cur")); return
                   fi ;;
            dataset) COMPREPLY=($(compgen -W "list get upload delete" -- "$cur")); return ;;
        esac
    fi
    local key="$cmd${sub:+ $sub}"
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$(_hpo_flags "$key") $common" -- "$cur"))
        return
    fi
    case "$key" in
        "study create"|"study import"|predict|"dataset upload") COMPREPLY=($(compgen -f -- "$cur")) ;;
    esac
}

complete -o filenames -o bashdefault -F _hpo hpo
