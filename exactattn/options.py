"""One vocabulary of argument checks, for every command and public function.

Every option type and argument check of exactattn lives here, so messages read
alike everywhere: ``<name> must be <expected> (got <actual>)``, plus the fix
when there is one.  The ``check_*`` functions validate Python arguments and
raise :class:`~exactattn.errors.InputError`; the option types (``whole``,
``choice``, ...) wrap them for ``argparse`` (``type=``), which turns the error
into the CLI's one-line ``exactattn: error: ...`` and exit status 2.

Words used: a *whole number* is an integer (never a bool, a float or a
string); *positive* means at least 1; *places* are decimal places after the
point, 0 to 50.

>>> check_whole(3, "n")
3
>>> check_whole(0, "n")
Traceback (most recent call last):
...
exactattn.errors.InputError: n must be a positive whole number (got 0)
>>> whole("--rows", high=10)("11")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: --rows must be a whole number from 1 to 10 (got '11')
>>> whole("--digits", low=0, high=MAX_PLACES)("4")
4
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, Sequence

from .errors import InputError, shorten

#: decimal places a table, a report or a value prints: 0 to 50 everywhere
MAX_PLACES = 50

#: what a query that sees no key gets (the policy's ``empty_row``; the softmax row's answer)
EMPTY_ROWS = ("zero", "uniform", "nan")


def _got(value: Any) -> str:
    """A value echoed in a message: long strings cut before quoting, so the quotes stay."""
    return shorten(value, quote=True)


def check_whole(value: Any, name: str, *, low: int = 1, high: int | None = None) -> int:
    """``value`` if it is an integer in ``low .. high`` (no upper bound when ``high`` is None).

    >>> check_whole(True, "heads")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: heads must be a positive whole number (got True)
    """
    ok = isinstance(value, int) and not isinstance(value, bool)
    if ok and value >= low and (high is None or value <= high):
        return value
    if high is not None:
        raise InputError(f"{name} must be a whole number from {low} to {high} (got {_got(value)})")
    if low == 1:
        raise InputError(f"{name} must be a positive whole number (got {_got(value)})")
    if low == 0:
        raise InputError(f"{name} must be a non-negative whole number (got {_got(value)})")
    raise InputError(f"{name} must be a whole number of at least {low} (got {_got(value)})")


def check_places(value: Any, name: str = "digits") -> int:
    """Decimal places: a whole number from 0 to 50."""
    return check_whole(value, name, low=0, high=MAX_PLACES)


def check_choice(value: Any, name: str, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise InputError(f"{name} must be one of {', '.join(choices)} (got {_got(value)})")
    return value


def argtype(check: Callable[[Any], Any], name: str, parse: Callable[[str], Any] | None = None,
            *, echo: bool = True, reword: Callable[[str], str] | None = None):
    """An argparse ``type=`` named ``name``: ``check`` of the value, whose InputError becomes
    argparse's one-line error (the one wrapper of a check for ``argparse``).

    ``parse`` reads the stripped text first (its ValueError or TypeError leaves the text to
    ``check``); without it ``check`` gets the text as typed.  With ``echo`` the message's
    ``(got ...)`` echoes what was typed; without, the message comes through as the check
    wrote it.  ``reword`` rewrites the message last.

    >>> argtype(lambda t: check_whole(int(t), "--n"), "--n", echo=False)("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: --n must be a positive whole number (got 0)
    """
    def convert(text: str):
        value = text
        if parse is not None:
            try:
                value = parse(text.strip())
            except (ValueError, TypeError):
                value = text
        try:
            return check(value)
        except InputError as e:
            msg = _echo(e, text) if echo else str(e)
            raise argparse.ArgumentTypeError(reword(msg) if reword else msg) from None
    convert.__name__ = name
    return convert


def _echo(error: InputError, text: str) -> str:
    """``error``'s message with its ``(got ...)`` echoing ``text``, what was typed."""
    return str(error).rsplit(" (got ", 1)[0] + f" (got {_got(text)})"


def _int(text: str) -> int:
    if len(text) > 4300 or not text.lstrip("+-").isdigit():
        raise ValueError(text)
    return int(text)


def whole(flag: str, *, low: int = 1, high: int | None = None):
    """An argparse type: a whole number in ``low .. high``, named ``flag`` in its errors."""
    return argtype(lambda v: check_whole(v, flag, low=low, high=high), flag, _int)


def choice(flag: str, choices: Sequence[str]):
    """An argparse type: one of ``choices`` (use instead of ``choices=`` for one message style)."""
    return argtype(lambda v: check_choice(v, flag, choices), flag, str)


def check_whole_list(value: Any, name: str, *, low: int = 1, high: int | None = None,
                     most: int | None = 64, once: str | None = None) -> list[int]:
    """Whole numbers in ``low .. high`` from text such as ``"4, 8,16"`` or from a sequence.

    At most ``most`` of them (no limit when None); with ``once`` (what one of them is
    called) none may repeat (:func:`check_once`).  A bad entry's message echoes it as written.

    >>> check_whole_list("4, 8,16", "rows")
    [4, 8, 16]
    >>> check_whole_list("4, x", "rows")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: rows must be a positive whole number (got 'x')
    """
    text = isinstance(value, str)
    parts = value.split(",") if text else list(value) if hasattr(value, "__iter__") else []
    if (text and not value.strip()) or not parts or (most is not None and len(parts) > most):
        count = "" if most is None else f"1 to {most} "
        raise InputError(f"{name} must be a comma-separated list of {count}whole numbers "
                         f"(got {_got(value)})")
    values = []
    for p in parts:
        if not isinstance(p, str):
            values.append(check_whole(p, name, low=low, high=high))
            continue
        try:   # a whole number, or the text as typed (stripped) echoed in its message
            values.append(whole(name, low=low, high=high)(p.strip()))
        except argparse.ArgumentTypeError as e:
            raise InputError(str(e)) from None
    if once is not None:
        check_once(values, name, once, value.strip() if text else None)
    return values


def check_once(values: Sequence, name: str, what: str, written: str | None = None) -> list:
    """``values`` as a list if none repeats; the message echoes ``written`` (the text as typed),
    else the values comma-separated.

    >>> check_once([4, 16, 4], "widths", "width")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: widths must list each width once (got 4,16,4); drop the repeats
    """
    if len(set(values)) != len(values):
        got = shorten(",".join(map(str, values))) if written is None else _got(written)
        raise InputError(f"{name} must list each {what} once (got {got}); drop the repeats")
    return list(values)


def whole_list(flag: str, *, low: int = 1, high: int | None = None, most: int = 64,
               once: str | None = None):
    """An argparse type: a comma-separated list of at most ``most`` whole numbers
    (:func:`check_whole_list`).

    >>> whole_list("--rows")("4, 8,16")
    [4, 8, 16]
    """
    return argtype(lambda v: check_whole_list(v, flag, low=low, high=high, most=most, once=once),
                   flag, echo=False)


def index_pair(flag: str):
    """An argparse type: ``I,J``, two positive whole numbers (1-based, as the tables print them).

    >>> index_pair("--explain")("2,1")
    (2, 1)
    """
    def convert(text: str) -> tuple[int, int]:
        parts = text.split(",")
        if len(parts) != 2:
            raise argparse.ArgumentTypeError(
                f"{flag} must be two positions I,J such as 2,1 (got {_got(text)})")
        return tuple(whole(flag)(p) for p in parts)
    convert.__name__ = flag
    return convert


# --------------------------------------------------------------------------- memory sizes
#: the units a memory size takes: binary (KiB, K), decimal (KB) and bytes
MEMORY_UNITS = {"": 1, "b": 1, "k": 2 ** 10, "kib": 2 ** 10, "kb": 10 ** 3, "m": 2 ** 20,
                "mib": 2 ** 20, "mb": 10 ** 6, "g": 2 ** 30, "gib": 2 ** 30, "gb": 10 ** 9,
                "t": 2 ** 40, "tib": 2 ** 40, "tb": 10 ** 12}


def check_memory(value: Any, name: str = "memory") -> int:
    """A memory size in bytes: a whole number of bytes, or text such as ``4GiB``, ``1.5 GB``.

    Units (any case): B, KiB/MiB/GiB/TiB and K/M/G/T (powers of 1024),
    KB/MB/GB/TB (powers of 1000).  Read exactly, rounded down to a byte.

    >>> check_memory("4GiB"), check_memory("1.5k"), check_memory(512)
    (4294967296, 1536, 512)
    >>> check_memory("4 parsecs")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: memory must be a size such as 4GiB, 512MiB or 2GB (got '4 parsecs')
    """
    import re
    from fractions import Fraction
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    m = re.fullmatch(r"\s*(\d{1,15}(?:\.\d{1,15})?)\s*([A-Za-z]{0,3})\s*", value) \
        if isinstance(value, str) else None
    unit = MEMORY_UNITS.get(m.group(2).lower()) if m else None
    size = int(Fraction(m.group(1)) * unit) if unit else 0
    if size < 1:
        raise InputError(f"{name} must be a size such as 4GiB, 512MiB or 2GB (got {_got(value)})")
    return size


def memory(flag: str = "--memory"):
    """An argparse type: a memory size in bytes (:func:`check_memory`).

    >>> memory()("512MiB")
    536870912
    """
    return argtype(lambda v: check_memory(v, flag), flag, str)
