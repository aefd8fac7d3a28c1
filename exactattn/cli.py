"""The command line: ``exactattn MODE [options]`` (also ``python -m exactattn``).

Each subcommand lives in a module of :mod:`exactattn.commands` that provides
``register(subparsers)`` and ``run(args)``; this module only assembles the parser and
turns a user's mistake into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
from typing import Sequence
from warnings import formatwarning as warnings_format

from . import __version__
from .errors import ExactAttnError, ExactAttnWarning, shorten

#: subcommand modules and the commands each registers, in the order --help lists them
#: (a run of one command imports its module only: the start-up of every command)
COMMAND_MODULES = {
    "exactattn.commands.tables": ("row", "weights", "project", "square", "scores",
                                  "walkthrough"),
    "exactattn.commands.cost": ("cost",),
    "exactattn.commands.scale": ("scale",),
    "exactattn.commands.sweep": ("sweep",),
    "exactattn.commands.prove": ("prove",),
    "exactattn.commands.verify": ("verify",),
    "exactattn.commands.identify": ("identify",),
    "exactattn.commands.model": ("model",),
    "exactattn.commands.page": ("page",),
    "exactattn.commands.audit": ("audit",),
    "exactattn.commands.blocks": ("blocks",),
    "exactattn.commands.backward": ("backward",),
}


class _Parser(argparse.ArgumentParser):
    """argparse with exactattn's errors: one line on stderr and exit status 2.

    A command (or a ``sweep`` kind) left out prints the usage first, with the
    list to pick from.
    """

    #: what reads as a value though it starts with '-': a negative number (``--sink -1e3``,
    #: ``--softcap -1/2``; argparse's own pattern stops at ``-2.5``) or a list or matrix that
    #: starts with one (``--d-out '-1,0;0,1'``, ``--window -1,0``), as Python 3.13's argparse
    #: reads it; no option of exactattn looks like one
    NEGATIVE = re.compile(r"^-\.?\d")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = self.NEGATIVE

    def error(self, message):
        missing = "the following arguments are required: "
        if message.startswith(missing) and self._subparsers is not None:
            what = message[len(missing):].split(",")[0]
            if what in ("COMMAND", "KIND"):
                self.print_help(sys.stderr)
                listed = "commands" if what == "COMMAND" else "kinds"
                message = f"{what} must be one of the {listed} above (got none)"
        choice = re.match(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)$",
                          message)
        if choice:
            name, bad, listed = choice.groups()
            options = [c.strip(" '") for c in listed.split(",")]
            near = difflib.get_close_matches(bad, options, n=1)
            message = (f"{name} must be one of {', '.join(options)} (got {shorten(bad, quote=True)})"
                       + (f"; did you mean {near[0]}?" if near else ""))
        needs = re.match(r"argument (\S+): expected one argument$", message)
        if needs:
            message = f"{needs.group(1)} needs a value (got none)"
        if message.startswith(missing):
            message = (f"{self.prog} needs {message[len(missing):]} (got none); "
                       f"see `{self.prog} --help`")
        # "argument --digits: --digits must be ..." says the flag once
        named, _, rest = message.partition(": ")
        if named.startswith("argument ") and \
                any(rest.startswith(f + " ") for f in named[len("argument "):].split("/")):
            message = rest
        # argparse's own messages echo a bad value whole ("invalid choice: '...'"): cut it
        message = re.sub(r"(?<=: |t )'([^']{40})[^']+'",
                         lambda m: repr(shorten(m.group(1) + "..", 40)), message)
        self.exit(2, f"exactattn: error: {message}\n")


def _unknown(args, extra: list[str]) -> str:
    """The message for arguments a command does not take (e.g. ``weights --digits 7``)."""
    cmd = " ".join(filter(None, [args.command, getattr(args, "sweep", None)]))
    what = f"option {shorten(extra[0].split('=')[0])}" if extra[0].startswith("-") else \
        f"argument {shorten(extra[0])!r}"
    return (f"{cmd} takes no {what} (got {shorten(' '.join(extra))}); see `exactattn {cmd} "
            "--help` for its options")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or, given a known ``command``, of the commands its
    module registers (the others are not imported); ``parser.command_names`` lists every
    command either way."""
    parser = _Parser(
        prog="exactattn",
        description="Attention heads evaluated in exact arithmetic: worked tables with "
                    "certified digits, cost counts and proofs.",
        epilog="Start with `exactattn walkthrough` (the built-in chronicle example).")
    parser.add_argument("--version", action="version", version=f"exactattn {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True  # a bare `exactattn` prints the usage, then one error line
    known = any(command in commands for commands in COMMAND_MODULES.values())
    for name, commands in COMMAND_MODULES.items():
        if not known or command in commands:
            module = importlib.import_module(name)
            module.register(sub)
            for c in commands:   # each command: its module's run(args), --no-progress
                sub.choices[c].set_defaults(func=module.run)
                _add_progress_flags(sub.choices[c])
    parser.command_names = tuple(c for commands in COMMAND_MODULES.values() for c in commands)
    return parser


def _add_progress_flags(p: argparse.ArgumentParser) -> None:
    """``--no-progress`` on every command (and ``--quiet``, the same, where a command gives
    ``--quiet`` no meaning of its own): no progress bar or step timer on stderr.  Bars
    appear only when stderr is a terminal and a step runs past two seconds."""
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    if subs:
        for child in subs[0].choices.values():
            _add_progress_flags(child)
        return
    words = ["--no-progress"] + (["--quiet"] if "--quiet" not in p._option_string_actions
                                  else [])
    p.add_argument(*words, dest="no_progress", action="store_true",
                   help="no progress bar on stderr (shown only on a terminal, after 2 s)")
    if "--format" in p._option_string_actions and "--width" not in p._option_string_actions:
        from .options import whole
        p.add_argument("--width", type=whole("--width", low=0), metavar="W",
                       help="text tables at most W characters a line (default 160: vectors "
                            "shorten, middle columns give way to ..., notes wrap; 0: no limit)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 a check failed, 2 bad input)."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words[0] if words else None)
    commands = set(parser.command_names)
    if words and words[0].startswith("-") and words[0] not in ("-h", "--help", "--version") \
            and not commands.intersection(words):
        parser.error(f"exactattn takes no option {shorten(words[0].split('=')[0], quote=True)} "
                     "before a command; see `exactattn --help` for the commands")
    args, extra = parser.parse_known_args(words)
    if extra:   # an option the command does not take: refused, never ignored
        parser.error(_unknown(args, extra))
    from .present.render import text_width
    from .present.stream import show_progress
    show_progress(not getattr(args, "no_progress", False))
    text_width(getattr(args, "width", None))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("once", ExactAttnWarning)
        warnings.showwarning = _show_warning
        return _run(args)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """An :class:`ExactAttnWarning` as one line on stderr; others as Python writes them."""
    if issubclass(category, ExactAttnWarning):
        print(f"exactattn: warning: {message}", file=sys.stderr)
    else:
        print(warnings_format(message, category, filename, lineno, line), end="",
              file=sys.stderr)


def _run(args) -> int:
    try:
        status = args.func(args)
        if isinstance(status, tuple):   # (sections, meta, status): written in --format
            from .present.render import write   # row by row (lists of --wrap on one line)
            sections, meta, status = status
            write(sections, args.format, sys.stdout, meta, wrap=getattr(args, "wrap", None))
        return int(status or 0)
    except ExactAttnError as e:
        print(f"exactattn: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `exactattn walkthrough | head`: ends quietly
        try:   # stdout's last buffer must not raise again at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 0
    except KeyboardInterrupt:
        print("exactattn: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
