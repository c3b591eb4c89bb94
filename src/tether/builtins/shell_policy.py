"""Which shell command lines only read: the ones a confined shell runs without asking.

A command line is read-only here when the whole of it is simple (one command, or a pipe of
them), every command in it is on the list (``ls``, ``cat``, ``head``, ``tail``, ``wc``,
``grep``, ``rg``, ``find``, ``pwd``, ``git status|diff|log|show``, and what ``[tools.shell]
allow`` adds), and none of them is given an option that writes or runs something
(``find -exec``/``-delete``, ``rg --pre``, ``git diff --output``). Anything the standard
library's shell lexer cannot split, and anything the shell would read as more than that
(``;``, ``&&``, ``||``, ``&``, a redirection, a subshell, command or process substitution,
a new line), is not read-only, and asks as before. The rule errs one way only: a line it
does not recognise is asked about, never run unasked.

It is the shell's second line, not its first: the sandbox (``tether.sandbox``) is what keeps
a command from the user's secrets and the network; this only spares a person a prompt for
a line that cannot change the workspace.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

READ_ONLY_COMMANDS = frozenset({"ls", "cat", "head", "tail", "wc", "grep", "rg", "find", "pwd",
                                "git"})
GIT_READS = frozenset({"status", "diff", "log", "show"})

# What the shell would run or expand beyond the words a lexer sees: command substitution
# (backticks, ``$(``), process substitution, and a new line (a second command). Checked on
# the raw line, quoted or not: a quoted ``$(`` is still run inside double quotes.
_EXPANDS = re.compile(r"[`\n\r\x00]|\$\(|[<>]\(")
# Options that make a listed command write a file or run another program.
_FIND_ACTS = frozenset({"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint",
                        "-fprint0", "-fprintf", "-fls"})
_WORD = re.compile(r"[A-Za-z0-9_.+-]+")


def read_only_command(command: str, allow: Iterable[str] = ()) -> bool:
    """Whether ``command`` (a ``/bin/sh -c`` line) only reads, by the rule above; ``allow``
    adds command names to the list."""
    if _EXPANDS.search(command):
        return False
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""  # a "#" is a word here: the shell then runs less than was read
    try:
        words = list(lexer)
    except ValueError:  # an unclosed quote, a trailing escape
        return False
    listed = READ_ONLY_COMMANDS | {name for name in allow if _WORD.fullmatch(name)}
    pipeline: list[list[str]] = [[]]
    for word in words:
        if word == "|":
            pipeline.append([])
        elif word and all(c in "();<>|&" for c in word):
            return False  # another command, a redirection, backgrounding, a subshell
        else:
            pipeline[-1].append(word)
    return all(_reads(argv, listed) for argv in pipeline)


def _reads(argv: list[str], listed: frozenset[str]) -> bool:
    """Whether one command of a pipeline is listed and given nothing that writes or runs."""
    if not argv or argv[0] not in listed:
        return False
    name, args = argv[0], argv[1:]
    if name == "find":
        return not any(a in _FIND_ACTS for a in args)
    if name == "rg":
        return not any(a.startswith("--pre") for a in args)
    if name == "git":
        # The subcommand first (no global option: ``-c`` sets configuration, ``-C`` moves),
        # and no option that writes its output to a file or runs an external diff.
        return bool(args) and args[0] in GIT_READS and not any(
            a.startswith("--output") or a == "--ext-diff" for a in args[1:])
    return True


__all__ = ["GIT_READS", "READ_ONLY_COMMANDS", "read_only_command"]
