"""The options several commands share: ``--example``/``--spec``, ``--format``, ``--digits``
and token ranges (``--queries``, ``--keys``, ``--tables``, ``--rows``).

Each is declared here once; a command passes its own wording of a help (or its own
formats) as a parameter, so every command's ``--help`` reads as it always has.  The
policy and modifier flags are :mod:`exactattn.commands.modifier_flags`'.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError, shorten
from ..options import MAX_PLACES, argtype, choice, whole
from ..present.render import FORMATS
from ..present.stream import parse_span

EXAMPLE_HELP = ("a built-in example: chronicle (the default), tiny, bank-river, bank-loan, "
                "self-match")
SPEC_HELP = "a head and tokens from a JSON or TOML spec file"


def add_source_options(p: argparse.ArgumentParser, *, example_help: str = EXAMPLE_HELP,
                       spec_help: str = SPEC_HELP, spec_first: bool = False):
    """--example / --spec: where the head and tokens come from (one of them); returns their
    mutually exclusive group, for a command's other sources."""
    src = p.add_mutually_exclusive_group()
    flags = [("--example", dict(default=None, metavar="NAME", help=example_help)),
             ("--spec", dict(metavar="FILE", help=spec_help))]
    for flag, kwargs in flags[::-1] if spec_first else flags:
        src.add_argument(flag, **kwargs)
    return src


def load_source(args):
    """The Example named by --example or --spec (chronicle by default)."""
    if args.spec is not None:
        return load_spec(args.spec)
    from ..examples import example
    return example("chronicle" if args.example is None else args.example)


def load_spec(path: str):
    """The Example of one ``--spec`` file."""
    if not path.strip():
        raise InputError("--spec must name a JSON or TOML file (got '')")
    from ..engines.spec import load
    return load(path)


def add_format_option(p, formats=FORMATS, *, type=None, default: str | None = "text",
                      metavar: str | None = "FORMAT", help: str | None = None) -> None:
    """--format, checked by :func:`exactattn.options.choice` (or ``type``)."""
    p.add_argument("--format", type=type or choice("--format", formats), default=default,
                   metavar=metavar,
                   help=help or f"output format: {', '.join(formats)} (default text)")


def add_digits_option(p, help: str, *, metavar: str | None = "N") -> None:
    """--digits: decimal places from 0 to 50 (default 4)."""
    p.add_argument("--digits", type=whole("--digits", low=0, high=MAX_PLACES), default=4,
                   metavar=metavar, help=help)


def span_type(flag: str, what: str = "token numbers"):
    """An argparse type: numbers such as ``1..8``, ``3`` or ``1..4,10``
    (:func:`~exactattn.present.stream.parse_span`), named ``flag`` (and ``what``) in its errors."""
    return argtype(parse_span, flag, echo=False,
                   reword=lambda m: flag + m[len("span"):].replace("token numbers", what))


def given(args, flags: str) -> list[str]:
    """The options of ``flags`` (space-separated, such as ``"--n --d-k"``) that were given: their
    value is neither None nor False (a word that is no option of the command never is)."""
    return [f for f in flags.split()
            if (v := getattr(args, f.lstrip("-").replace("-", "_"), None)) is not None
            and v is not False]


def refuse_rules(args, rules) -> None:
    """Refuse the first flag that breaks one of ``rules``, in order: ``(flags, needed)`` refuses
    ``FLAG must come with NEEDED`` (the first word of ``needed`` not given); ``(flags, others,
    why[, when])`` refuses the first of ``flags`` given beside one of ``others`` (when the flag
    ``when`` is given, or ``!when`` is not)."""
    for flags, others, *why in rules:
        for flag in given(args, flags):
            if not why and not given(args, others.split()[0]):
                raise InputError(f"{flag} must come with {others} (got {flag} alone)")
            if not why or (len(why) > 1 and bool(given(args, why[1].lstrip("!"))) ==
                           why[1].startswith("!")):
                continue
            if given(args, others):
                raise InputError(f"{flag} must come without {given(args, others)[0]} (got "
                                 f"both); {why[0]}")


def check_output(path: str | None) -> None:
    """``-o PATH``: refuse an empty name before any work is done."""
    if path is not None and not path.strip():
        raise InputError("-o must name a file to write (got '')")


def write_output(data, path: str | None, flag: str = "-o") -> None:
    """``data`` (text, or bytes: a PNG) to stdout (``path`` None) or to the file ``path``;
    a file that cannot be written is one line naming ``flag``."""
    binary = isinstance(data, bytes)
    if path is None:
        (getattr(sys.stdout, "buffer", sys.stdout) if binary else sys.stdout).write(data)
        return
    try:
        with open(path, "wb") as f:
            f.write(data if binary else data.encode("utf-8"))
    except OSError as e:
        raise InputError(f"{flag} must name a file that can be written (got "
                         f"{shorten(repr(path))}: {e.strerror})") from None
