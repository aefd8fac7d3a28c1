"""What a cost question asks besides the widths, checked once: mask, keys, heads, layers, decoding.

Every route of the cost package (derived, counted, solved) reads one
:class:`Setup`.  Which keys a query sees comes from its
:class:`~exactattn.call.policy.Policy` (``setup.policy.visible_keys``), the one
visibility rule of the package.  No sympy here: a counted run never loads it.

>>> s = Setup.make(causal=True, alignment="bottom_right", keys=6, symbolic=False)
>>> list(s.policy.visible_keys(0, 4, 6)), s.keys
([0, 1, 2], 6)
>>> Setup.make(alignment="top-left")
Traceback (most recent call last):
...
exactattn.errors.InputError: alignment must be one of top_left, bottom_right (got 'top-left'); write 'top_left'
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

from ..call.policy import ALIGNMENTS, Policy
from ..errors import InputError
from ..options import check_whole

__all__ = ["MAX_SIZE", "Setup", "printable_size", "size", "size_or_expr", "policy_of"]

#: the largest size (tokens, keys, a width, heads, layers) a cost table prints: its figures
#: stay far below the 4300 digits Python turns into text
MAX_SIZE = 10 ** 12


def size(value: Any, name: str) -> int:
    """``value`` as a positive whole number (bool, float and text refused; numpy and
    sympy integers accepted).

    >>> size(3, "n")
    3
    """
    if not isinstance(value, (bool, float, str)):
        try:
            value = operator.index(value)
        except TypeError:
            pass
    return check_whole(value, name)


def printable_size(value: Any, name: str) -> int:
    """A positive whole number of at most :data:`MAX_SIZE` (a size a table can print)."""
    return check_whole(size(value, name), name, high=MAX_SIZE)


def size_or_expr(value: Any, name: str):
    """A positive whole number (as a sympy ``Integer``) or a sympy expression not known
    to be non-positive: a size of the symbolic routes."""
    import sympy
    if isinstance(value, sympy.Basic) and not value.is_Integer:
        if value.is_positive is False:
            raise InputError(f"{name} must be positive (got {value})")
        return value
    return sympy.Integer(size(value, name))


def policy_of(causal: Any, alignment: Any) -> Policy:
    """The call's :class:`~exactattn.call.policy.Policy` (its one check of ``causal`` and
    ``alignment``), with the fix for the retired spelling ``top-left``."""
    try:
        return Policy(causal=causal, alignment=alignment)
    except InputError as e:
        fixed = alignment.strip().replace("-", "_") if isinstance(alignment, str) else None
        if fixed in ALIGNMENTS and fixed != alignment:
            raise InputError(f"{e}; write {fixed!r}") from None
        raise


@dataclass(frozen=True)
class Setup:
    """The options of one cost question (hashable: derivations are cached by it).

    ``policy`` holds the causal flag and the alignment; ``keys`` is the key
    length m (None: the row length n); ``heads`` h heads plus W_O (None: one
    head, no W_O); ``layers`` L; ``decode`` one token at a time with a KV cache.
    Sizes are ints, or sympy expressions on the symbolic routes.
    """

    policy: Policy = Policy()
    keys: Any = None
    heads: Any = None
    layers: Any = 1
    decode: bool = False

    @property
    def causal(self) -> bool:
        return self.policy.causal

    @property
    def alignment(self) -> str:
        return self.policy.alignment

    @classmethod
    def make(cls, causal=False, alignment="top_left", keys=None, heads=None, layers=1,
             decode=False, symbolic=True) -> "Setup":
        """Check every option; sizes become sympy numbers when ``symbolic``, else ints.

        Raises:
            InputError: a bad flag, alignment or size; keys with decode.
        """
        policy = policy_of(causal, alignment)
        if not isinstance(decode, bool):
            raise InputError(f"decode must be true or false (got {decode!r})")
        conv = size_or_expr if symbolic else size
        if keys is not None:
            keys = conv(keys, "keys")
            if decode:
                raise InputError("keys must be left unset with decode (got "
                                 f"{keys}); decoding sets its own key length t")
        if heads is not None:
            heads = conv(heads, "heads")
        layers = conv(layers, "layers")
        return cls(policy, keys, heads, layers, decode)
