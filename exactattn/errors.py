"""The library's errors: one root, subclasses that are also built-in errors.

Every message follows ``<name> must be <expected> (got <actual>)``, plus the fix
when there is one, so the CLI can print it on one line and exit with status 2.
"""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = ["FloatInputError", "InputError", "Undecided"]


class ExactAttnError(Exception):
    """Root of every error exactattn raises on purpose."""


class ExactAttnWarning(UserWarning):
    """Input that is read, but may not mean what was meant (a square head without a layout).
    The CLI prints each once, as one ``exactattn: warning: ...`` line on stderr."""


class InputError(ExactAttnError, ValueError):
    """A value the user passed is not usable (not a number, not positive, ...)."""


class ShapeError(InputError):
    """A matrix or token row has the wrong size, or rows are ragged."""


class FloatInputError(InputError, TypeError):
    """A binary float was passed without saying how to read it."""


class SpecError(InputError):
    """A spec file is missing, unreadable, truncated or malformed."""


class Undecided(InputError, ArithmeticError):
    """A certified value could not be told from another up to a stated precision.

    Raised instead of a guess: the value (a soft-capped form, say) may be exactly
    equal to what it is compared with, and no theorem lets exactattn decide it.
    ``what`` names the quantity, ``bits`` the precision reached.
    """

    def __init__(self, what: str, bits: int, detail: str = "could not be separated from 0"):
        self.what, self.bits = what, bits
        super().__init__(f"undecided at {bits} bits: {shorten(what, 160)} {detail} "
                         f"(no exact rule here decides it; no digit is certified)")


def too_long_to_write(x) -> bool:
    """Whether an int or Fraction has a part past 14,000 bits: near Python's 4300-digit limit
    for writing an integer, so its text is refused or slow (the one such rule)."""
    return max(x.numerator.bit_length(), x.denominator.bit_length()) > 14_000


class _Repr(reprlib.Repr):
    """``repr`` bounded in depth and length, deterministic (no addresses), safe on any value."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxtuple, self.maxdict = 3, 8, 8, 4
        self.maxstring = self.maxother = self.maxlong = 60

    def repr_int(self, x, level):
        if too_long_to_write(x):
            return f"<an integer of about {int(x.bit_length() * 0.30103)} digits>"
        return super().repr_int(x, level)

    def repr_instance(self, x, level):
        try:
            text = repr(x)
        except Exception:
            return f"<{type(x).__name__}>"
        return text if len(text) <= self.maxother else text[:self.maxother] + "..."

    def repr_Fraction(self, x, level):
        if too_long_to_write(x):
            return "<a Fraction of thousands of digits>"
        return self.repr_instance(x, level)


_REPR = _Repr()


def shorten(text: Any, limit: int = 40, *, quote: bool = False) -> str:
    """``text`` cut to ``limit`` characters plus an ellipsis, for echoing a value in a message.

    Anything that is not a ``str`` is written first as its ``repr``, bounded
    (a few levels, a few items), so a list of a million entries or one nested
    thousands deep is echoed in a few characters, never written out in full.
    ``quote=True`` writes a ``str`` as its ``repr`` too, cut before quoting so
    the quotes stay: the echo of a value that may be text or anything else.

    >>> shorten("9" * 50)
    '9999999999999999999999999999999999999999…'
    >>> shorten(list(range(200_000))), shorten([[[[[1]]]]])
    ('[0, 1, 2, 3, 4, 5, 6, 7, ...]', '[[[...]]]')
    >>> shorten("abc", quote=True), shorten(None, quote=True)
    ("'abc'", 'None')
    """
    if isinstance(text, str):
        cut = text if len(text) <= limit else text[:limit] + "\u2026"
        return repr(cut) if quote else cut
    try:
        text = _REPR.repr(text)
    except Exception:     # a repr that raises: name the type instead
        text = f"<{type(text).__name__}>"
    return text if len(text) <= limit else text[:limit] + "\u2026"
