"""Explicit masks: which keys each query may see, and what an additive mask adds.

A mask is read one of three ways (``mask_kind`` of :class:`~exactattn.call.policy.Policy`):
``bool_keep`` (True = attend: SDPA ``attn_mask``, JAX), ``bool_drop`` (True =
ignore: ``nn.MultiheadAttention`` ``key_padding_mask``) or ``additive`` (a
number added to the scaled score; ``-inf`` hides the key).  The causal rule is
not a mask: it is ``Policy(causal=True)``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Sequence

from ..errors import InputError, ShapeError, shorten
from ..options import check_choice
from ..numbers.exact import to_exact

__all__ = ["Mask"]

MASK_KINDS = ("bool_keep", "bool_drop", "additive")


def is_minus_inf(e: Any) -> bool:
    """True for None, ``"-inf"`` and a binary float (Python or numpy) equal to minus infinity."""
    if e is None:
        return True
    if isinstance(e, str):
        return e.strip().lower() in ("-inf", "-infinity")
    if isinstance(e, float) or type(e).__module__ == "numpy":
        try:
            return float(e) == float("-inf")
        except (TypeError, ValueError):
            return False
    return False


def entry_text(e) -> str:
    """An exact entry as it can be typed back: ``'-inf'`` for None (a hidden key), booleans
    and integers bare, other rationals (and an inf or nan a mask hides) as strings.

    >>> entry_text(None), entry_text(True), entry_text(Fraction(3)), entry_text(Fraction(1, 2))
    ("'-inf'", 'True', '3', "'1/2'")
    """
    if e is None:
        return "'-inf'"
    if isinstance(e, bool):
        return repr(e)
    if isinstance(e, Fraction) and e.denominator == 1:
        return str(e.numerator)
    return repr(str(e))


class Mask:
    """An explicit mask: which keys each query may see, and what an additive mask adds.

    Kinds (see :class:`Policy`): ``bool_keep`` (True = attend), ``bool_drop``
    (True = ignore), ``additive`` (a number added to the scaled score;
    ``None``, ``"-inf"`` or ``float('-inf')`` hides the key).  The causal rule
    is not a mask: it is ``Policy(causal=True)``.

    Shapes: ``rows`` is n_queries x n_keys.

    Raises:
        InputError: an unknown kind, a non-bool entry in a boolean mask.
        ShapeError: ragged or empty rows.

    >>> Mask("additive", [["0", "-inf"]]).as_form("bool_drop")
    [[False, True]]
    >>> Mask("bool_keep", [[1, 0]])
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: mask[0][0] must be True or False in a bool_keep mask (got 1)
    """

    __slots__ = ("kind", "n_queries", "n_keys", "rows")

    def __init__(self, kind: str, rows, *, floats: str | None = None):
        check_choice(kind, "kind", MASK_KINDS)
        self.kind = kind
        if hasattr(rows, "tolist") and not isinstance(rows, (list, tuple)):
            rows = rows.tolist()
        if rows is None or isinstance(rows, (str, bytes)):
            raise ShapeError(f"rows must be a list of mask rows for a {kind} mask "
                             f"(got {shorten(repr(rows))})")
        out = []
        for i, r in enumerate(rows):
            row = []
            for j, e in enumerate(r):
                where = f"mask[{i}][{j}]"
                if kind == "additive":
                    if type(e).__name__ in ("bool", "bool_"):
                        raise InputError(f"{where} must be a number or '-inf' for an additive "
                                         f"mask (got {shorten(e, quote=True)}); a boolean mask needs mask_kind "
                                         "bool_keep or bool_drop")
                    if is_minus_inf(e):
                        row.append(None)
                    else:
                        if hasattr(e, "item"):
                            e = e.item()
                        row.append(to_exact(e, name=where, floats=floats))
                else:
                    if type(e).__name__ not in ("bool", "bool_"):
                        raise InputError(
                            f"{where} must be True or False in a {kind} mask (got {shorten(e, quote=True)})")
                    row.append(bool(e))
            out.append(tuple(row))
        if not out or not out[0]:
            raise ShapeError(f"mask must have at least one row and one column "
                             f"(got {shorten(repr(rows))})")
        if len({len(r) for r in out}) != 1:
            raise ShapeError(
                f"mask must have rows of equal length (got lengths {[len(r) for r in out]})")
        self.rows = tuple(out)
        self.n_queries, self.n_keys = len(out), len(out[0])

    def keeps(self, i: int, j: int) -> bool:
        """Whether the mask lets query i see key j."""
        e = self.rows[i][j]
        if self.kind == "bool_keep":
            return e
        if self.kind == "bool_drop":
            return not e
        return e is not None

    def offset(self, i: int, j: int) -> Fraction:
        """What the mask adds to a visible scaled score: 0 except in additive masks."""
        if self.kind == "additive" and self.rows[i][j] is not None:
            return self.rows[i][j]
        return Fraction(0)

    def offsets(self, i: int) -> list[Fraction] | None:
        """Row i's additive offsets (0 at hidden keys), or None when the row adds nothing."""
        if self.kind != "additive":
            return None
        row = [Fraction(0) if e is None else e for e in self.rows[i]]
        return row if any(row) else None

    @property
    def has_offsets(self) -> bool:
        """True for an additive mask with a finite non-zero entry (not expressible as booleans)."""
        return self.kind == "additive" and any(e not in (None, 0) for r in self.rows for e in r)

    def as_form(self, form: str) -> list[list]:
        """The mask written as ``bool_keep``, ``bool_drop`` or ``additive`` (``None`` = -inf).

        Raises:
            InputError: an unknown form; an additive mask with finite
                non-zero entries asked for as booleans.
        """
        check_choice(form, "form", MASK_KINDS)
        keep = [[self.keeps(i, j) for j in range(self.n_keys)] for i in range(self.n_queries)]
        if form == "additive":
            if self.kind == "additive":
                return [list(r) for r in self.rows]
            return [[Fraction(0) if v else None for v in r] for r in keep]
        if self.has_offsets:
            raise InputError(
                f"mask_as must be 'additive' for an additive mask with finite offsets "
                f"(got {shorten(form, quote=True)}); draw inputs without them or accept additive masks")
        return keep if form == "bool_keep" else [[not v for v in r] for r in keep]

    def select(self, rows: Sequence[int], cols: Sequence[int]) -> "Mask":
        """The mask restricted to (and reordered by) the given query rows and key columns."""
        return Mask(self.kind, [[self.rows[i][j] for j in cols] for i in rows])

    def __eq__(self, other) -> bool:
        return isinstance(other, Mask) and self.kind == other.kind and self.rows == other.rows

    def __hash__(self) -> int:
        return hash((self.kind, self.rows))

    def __repr__(self) -> str:
        body = "[" + ", ".join("[" + ", ".join(entry_text(e) for e in r) + "]"
                               for r in self.rows) + "]"
        return f"Mask({self.kind!r}, {body})"

    def _repr_pretty_(self, p, cycle):  # Hypothesis's and IPython's pretty printer
        p.text(repr(self))
