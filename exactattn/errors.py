"""The library's errors: one root, subclasses that are also built-in errors.

Every message follows ``<name> must be <expected> (got <actual>)``, plus the fix
when there is one, so the CLI can print it on one line and exit with status 2.
"""

from __future__ import annotations

__all__ = ["ExactAttnError", "InputError", "ShapeError", "FloatInputError", "SpecError", "shorten"]


class ExactAttnError(Exception):
    """Root of every error exactattn raises on purpose."""


class InputError(ExactAttnError, ValueError):
    """A value the user passed is not usable (not a number, not positive, ...)."""


class ShapeError(InputError):
    """A matrix or token row has the wrong size, or rows are ragged."""


class FloatInputError(InputError, TypeError):
    """A binary float was passed without saying how to read it."""


class SpecError(InputError):
    """A spec file is missing, unreadable, truncated or malformed."""


def shorten(text: str, limit: int = 40) -> str:
    """``text`` cut to ``limit`` characters plus an ellipsis, for echoing a value in a message.

    >>> shorten("9" * 50)
    '9999999999999999999999999999999999999999…'
    """
    return text if len(text) <= limit else text[:limit] + "\u2026"
