"""The command line: ``exactattn MODE [options]`` (also ``python -m exactattn``).

Each subcommand lives in a module of :mod:`exactattn.commands` that provides
``register(subparsers)``; this module only assembles the parser and turns a
user's mistake into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from . import __version__
from .errors import ExactAttnError

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

#: subcommand modules, in the order their commands are listed in --help
COMMAND_MODULES = (
    "exactattn.commands.tables",
    "exactattn.commands.cost",
    "exactattn.commands.scale",
    "exactattn.commands.sweep",
    "exactattn.commands.prove",
    "exactattn.commands.verify",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's own convention)
        self.exit(2, f"exactattn: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="exactattn",
        description="Attention heads evaluated in exact arithmetic: worked tables with "
                    "certified digits, cost counts and proofs.",
        epilog="Start with `exactattn walkthrough` (the built-in chronicle example).")
    parser.add_argument("--version", action="version", version=f"exactattn {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True  # a bare `exactattn` is one error line naming the commands
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 a check failed, 2 bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ExactAttnError as e:
        print(f"exactattn: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `exactattn walkthrough | head`
        return 0
    except KeyboardInterrupt:
        print("exactattn: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
