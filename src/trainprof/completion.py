"""``trainprof completion bash|zsh|fish``: shell completion written from the parser itself, so
that a new command or option completes without anyone editing a script."""

from __future__ import annotations

import argparse

SHELLS = ("bash", "zsh", "fish")


def commands(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Each subcommand's options (long and short), and the top level's under ``""``."""
    out = {"": _options(parser)}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = _options(sub)
    return out


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted({s for a in parser._actions for s in a.option_strings
                   if a.help is not argparse.SUPPRESS})


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell``."""
    table = commands(parser)
    names = [n for n in table if n]
    if shell == "bash":
        return _bash(names, table)
    if shell == "zsh":
        return "autoload -U +X bashcompinit && bashcompinit\n" + _bash(names, table)
    return _fish(names, table)


def _bash(names: list[str], table: dict[str, list[str]]) -> str:
    cases = "\n".join(f'        {n}) opts="{" ".join(table[n])}" ;;' for n in names)
    return f"""# trainprof completion for bash: eval "$(trainprof completion bash)"
_trainprof() {{
    local cur cmd opts
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    cmd="${{COMP_WORDS[1]}}"
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=( $(compgen -W "{' '.join(names)} {' '.join(table[''])}" -- "$cur") )
        return
    fi
    case "$cmd" in
{cases}
        *) opts="" ;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=( $(compgen -W "$opts" -- "$cur") )
    else
        COMPREPLY=( $(compgen -f -- "$cur") )
    fi
}}
complete -o filenames -F _trainprof trainprof
"""


def _fish(names: list[str], table: dict[str, list[str]]) -> str:
    lines = ["# trainprof completion for fish: trainprof completion fish | source",
             "complete -c trainprof -f",
             f"complete -c trainprof -n __fish_use_subcommand -a '{' '.join(names)}'"]
    lines += [f"complete -c trainprof -n __fish_use_subcommand -l {o[2:]}"
              for o in table[""] if o.startswith("--")]
    for name in names:
        for option in table[name]:
            flag = f"-l {option[2:]}" if option.startswith("--") else f"-s {option[1:]}"
            lines.append(f"complete -c trainprof -n '__fish_seen_subcommand_from {name}' "
                         f"{flag} -F")
    return "\n".join(lines) + "\n"
