"""One model of an attention call: the scale, which keys a query sees, masks, empty rows, GQA.

Everything exactattn computes or checks is one call (Vaswani et al. 2017,
sec. 3.2.1), per head::

    outputs = softmax(scale * queries keys^T  [+ additive mask], over visible keys) values

This module describes such a call; it computes nothing but the visibility
rule.  :class:`Policy` holds what libraries disagree on, and every engine,
the float-kernel checks, the property checks, the cost counts and the command
line read it:

``divisor_squared`` (given as ``scale=`` or as ``divisor_squared=``)
    The scale is stored one way, as the divisor squared ``D`` (the scores are
    divided by ``sqrt(D)``), so ``1/sqrt(48)`` and ``sqrt(2)`` stay exact.  ``"default"``
    is ``D = d_k`` (of the real, unpadded head width); None means no scaling.
    :func:`parse_divisor` reads a divisor (``"2"``, ``"sqrt(2)"``, ``"none"``),
    :func:`parse_scale` a scale (``"1/8"``, ``"1/sqrt(48)"``, ``"none"``); both
    return ``D``.
``causal`` and ``alignment``
    With ``causal`` on, query i (of L) sees key j (of S) when ``j <= i``
    (``top_left``: PyTorch ``is_causal``, xformers ``LowerTriangularMask``,
    JAX) or when ``j <= i + S - L`` (``bottom_right``: FlashAttention 2.1+,
    KV-cache decoding: the last query sees every key).  The two agree when
    L = S.  One spelling, with an underscore, everywhere.
``empty_row``
    What a query that sees no key gets: ``zero`` (shares and output 0:
    PyTorch SDPA since 2.5, FlashAttention), ``nan`` (0/0, what a plain
    softmax of all ``-inf`` gives) or ``uniform`` (1/S on every key: what a
    finite fill value such as ``finfo.min`` gives).
``mask_kind``
    How an explicit :class:`Mask` is read: ``bool_keep`` (True = attend: SDPA,
    JAX), ``bool_drop`` (True = ignore: ``key_padding_mask``) or ``additive``.
``gqa``
    H_q query heads over H_kv key/value heads, G = H_q / H_kv: ``interleave``
    (head h reads ``h // G``: SDPA ``enable_gqa``, FlashAttention, JAX) or
    ``tile`` (``h % H_kv``: ``repeat``).
modifiers
    Sliding windows, query offsets, soft-capping, sinks, ALiBi, RoPE and
    dropout (:mod:`exactattn.call.modifiers`; applied by :mod:`exactattn.reference.logits`).

Exactly one function decides which keys a query sees:
:meth:`Policy.visible_keys`.  Masks narrow what it returns; nothing else
re-derives the rule.

Presets (``like``) set alignment, empty rows, mask kind and GQA together:

========  ============  =========  =========  ==========
like      alignment     empty_row  mask_kind  gqa
========  ============  =========  =========  ==========
torch     top_left      zero       bool_keep  interleave
flash     bottom_right  zero       bool_keep  interleave
jax       top_left      uniform    bool_keep  interleave
xformers  top_left      zero       additive   interleave
========  ============  =========  =========  ==========

>>> p = Policy(causal=True, alignment="bottom_right")
>>> [list(p.visible_keys(i, 2, 3)) for i in range(2)]
[[0, 1], [0, 1, 2]]
>>> p.describe()
'scale=1/sqrt(d_k) causal=on alignment=bottom_right empty_row=zero mask=bool_keep gqa=interleave'
>>> Policy(scale="1/8").divisor_squared_for(48), Policy().divisor_squared_for(48)
(Fraction(64, 1), Fraction(48, 1))
>>> Policy(scale=Fraction(1, 8)) == Policy(scale="1/8") == Policy(divisor_squared=Fraction(64))
True
>>> Policy(alignment="top-left")
Traceback (most recent call last):
...
exactattn.errors.InputError: alignment must be one of top_left, bottom_right (got 'top-left')
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from functools import cached_property
from fractions import Fraction
from typing import Any

from ..errors import FloatInputError, InputError, ShapeError, shorten
from ..numbers.exact import fraction_of, is_symbolic, rational_sqrt, to_exact
from .masks import MASK_KINDS, Mask
from .modifiers import Alibi, Rope, check_dropout, check_softcap, check_window, exact_number
from ..options import EMPTY_ROWS, check_choice

__all__ = ["Policy", "UNSUPPORTED", "preset"]

ALIGNMENTS = ("top_left", "bottom_right")
GQA_MAPS = ("interleave", "tile")
DEFAULT_SCALE = "default"
#: the modifier fields of a Policy, in the order of the one composition (see exactattn.reference.logits);
#: POSITION_FIELDS only move or hide keys, SCORE_FIELDS change the numbers
POSITION_FIELDS = ("window", "query_offset")
SCORE_FIELDS = ("rope", "softcap", "alibi", "sink", "dropout")
MODIFIER_FIELDS = POSITION_FIELDS + SCORE_FIELDS + ("head",)

#: the one capability table: the policy fields each path does not run (set ones are refused);
#: the paths not listed (the gradients, row blocks, the numpy float backward) run every field
UNSUPPORTED = {
    "fast": ("rope", "dropout"),                       # the fast engine: the pencil engine runs them
    "sdpa": SCORE_FIELDS,                              # a blocked check: positions, plain scores
    "flex": ("sink", "dropout"),                       # torch's flex_attention: no extra column, no keep-mask
    "split": ("alibi", "rope", "dropout"),             # split-merge: a block's keys come without positions
    "flash_attn": ("window", "query_offset", "alibi", "sink", "dropout"),  # exactattn's flash-attn adapter
    "jax": ("softcap", "sink", "dropout"),             # jax.nn.dot_product_attention has no such argument
    "enclose": ("rope", "softcap", "alibi", "dropout"),  # the float64 enclosure (reference.bound)
}

PRESETS = {
    "torch": dict(alignment="top_left", empty_row="zero", mask_kind="bool_keep", gqa="interleave"),
    "flash": dict(alignment="bottom_right", empty_row="zero", mask_kind="bool_keep",
                  gqa="interleave"),
    "jax": dict(alignment="top_left", empty_row="uniform", mask_kind="bool_keep",
                gqa="interleave"),
    "xformers": dict(alignment="top_left", empty_row="zero", mask_kind="additive",
                     gqa="interleave"),
}


# --------------------------------------------------------------------------- the scale
def _positive(value: Any, name: str, bad: str, floats: str | None) -> Fraction:
    try:
        d = to_exact(value, name=name, floats=floats)
    except FloatInputError:
        raise
    except InputError:
        raise InputError(bad) from None
    if d <= 0:
        raise InputError(bad)
    return d


def parse_divisor(value: Any, *, name: str = "divisor", floats: str | None = None
                  ) -> Fraction | None:
    """Read a divisor and return its square ``D`` as a positive ``Fraction``, or None.

    Accepted: a positive number (any form :func:`~exactattn.numbers.exact.to_exact`
    reads), ``"sqrt(q)"`` for a positive rational q, a sympy ``sqrt(q)``, or
    ``None``/``"none"`` (no scaling).

    >>> parse_divisor("2"), parse_divisor("sqrt(2)"), parse_divisor("none")
    (Fraction(4, 1), Fraction(2, 1), None)
    >>> parse_divisor("0")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: divisor must be a positive number, sqrt(q) for a positive rational q (such as sqrt(2)), or 'none' (got '0')
    """
    bad = (f"{name} must be a positive number, sqrt(q) for a positive rational q (such as "
           f"sqrt(2)), or 'none' (got {shorten(repr(value))})")
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    if isinstance(value, str):
        m = re.match(r"^\s*sqrt\s*\((.*)\)\s*$", value)
        if m:
            return _positive(m.group(1), name, bad, floats)
    return _square(value, name, bad, floats)


def _square(value: Any, name: str, bad: str, floats: str | None = None) -> Fraction:
    """The square of a positive exact number, or of a sympy number whose square is rational
    (a ``Fraction``)."""
    if is_symbolic(value):
        import sympy
        if isinstance(value, sympy.Basic) and value.has(sympy.Float):
            raise FloatInputError(
                f"{name} holds a binary Float ({value}); pass a string such as '0.3' "
                "or sympy.Rational so it stays exact")
        sq = sympy.expand(value ** 2) if getattr(value, "is_number", False) else None
        if sq is None or not sq.is_Rational or value.is_positive is not True:
            raise InputError(
                f"{name} must be a positive rational or the square root of one (got {shorten(value, quote=True)})")
        return fraction_of(sq)
    d = _positive(value, name, bad, floats)
    return d * d


def parse_scale(value: Any, *, name: str = "scale") -> Fraction | None | str:
    """Read a scale and return ``"default"`` or the divisor squared ``D`` (scale = 1/sqrt(D)).

    Accepted: ``"default"`` (1/sqrt(d_k)); ``"1/sqrt(q)"`` for a positive
    rational q (D = q); ``"none"`` (no scaling: None); a positive exact
    number s (D = 1/s**2); a ``Fraction`` is taken as that number s.

    >>> parse_scale("default"), parse_scale("1/sqrt(48)"), parse_scale("0.125"), parse_scale("none")
    ('default', Fraction(48, 1), Fraction(64, 1), None)
    >>> parse_scale("-1")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: scale must be 'default', a positive number, 1/sqrt(q) for a positive rational q (such as 1/sqrt(48)), or 'none' (got '-1')
    """
    bad = (f"{name} must be 'default', a positive number, 1/sqrt(q) for a positive rational q "
           f"(such as 1/sqrt(48)), or 'none' (got {shorten(repr(value))})")
    if isinstance(value, str):
        text = value.strip().lower()
        if text == DEFAULT_SCALE:
            return DEFAULT_SCALE
        if text == "none":
            return None
        m = re.match(r"^1\s*/\s*sqrt\s*\((.*)\)$", text)
        if m:
            return _positive(m.group(1), name, bad, None)
    elif value is None:
        return None
    return 1 / _square(value, name, bad)


def float_scale(divisor_squared: Fraction | None) -> float:
    """The binary64 float nearest the scale ``1/sqrt(D)`` (1.0 with no scaling).

    From a 128-bit integer square root, then one correctly rounded
    conversion; 1/sqrt(D) is irrational or exact, never a float midpoint.

    >>> float_scale(Fraction(4)), float_scale(Fraction(2)), float_scale(None)
    (0.5, 0.7071067811865476, 1.0)
    """
    if divisor_squared is None:
        return 1.0
    root = rational_sqrt(divisor_squared)
    if root is not None:
        return float(1 / root)
    n, d = divisor_squared.numerator, divisor_squared.denominator
    bits = 128 + max(0, n.bit_length() - d.bit_length()) // 2 + 1   # 128 significant bits
    return float(Fraction(math.isqrt((d << 2 * bits) // n), 1 << bits))


def divisor_text(divisor_squared: Fraction | None) -> str:
    """The divisor ``sqrt(D)`` in words: ``2``, ``sqrt(2)``, ``none``.

    >>> divisor_text(Fraction(4)), divisor_text(Fraction(3)), divisor_text(None)
    ('2', 'sqrt(3)', 'none')
    """
    root = None if divisor_squared is None else rational_sqrt(divisor_squared)
    return "none" if divisor_squared is None else str(root) if root is not None else \
        f"sqrt({divisor_squared})"


# --------------------------------------------------------------------------- the policy
_UNSET = object()


@dataclass(frozen=True)
class Policy:
    """What an attention call computes besides its numbers: scale, visibility, masks, GQA.

    Args:
        divisor_squared: what is stored: ``"default"`` (D = d_k), a positive
            ``Fraction`` D (the scores are divided by sqrt(D)), or None (no scaling).
        scale: the scale instead, read by :func:`parse_scale` (``"1/8"``,
            ``Fraction(1, 8)``, ``"1/sqrt(48)"``, ``"none"``, ``"default"``) into
            ``divisor_squared``; given, it wins over ``divisor_squared``.
        causal: hide keys after the query (see ``alignment``).
        alignment: ``top_left`` or ``bottom_right``.
        empty_row: ``zero``, ``nan`` or ``uniform``.
        mask_kind: ``bool_keep``, ``bool_drop`` or ``additive``.
        gqa: ``interleave`` or ``tile``.
        window: ``(left, right)``: position p sees keys ``p - left .. p + right``, its own key
            counted (None side: no limit; FlashAttention's ``window_size``).
        query_offset: the position of query 0 (decode over keys 0..p: p); None: from
            ``alignment``; at most 2^53 in size.  Causal, window and ALiBi read :meth:`query_position`.
        softcap: ``cap`` of ``cap * tanh(score / cap)`` on the scaled scores, before biases and masks.
        sink: an attention-sink logit that joins each row's normaliser and
            carries no value (0 = "softmax plus one"), counted once per row.
        alibi: an :class:`~exactattn.call.modifiers.Alibi` (slopes from the head
            count); ``head`` says which head this call is.
        rope: a :class:`~exactattn.call.modifiers.Rope` rotating queries and keys.
        dropout: p; kept weights are scaled by 1/(1 - p) (the keep-mask is data, passed with the call).
        head: the index of this call's head in its layer (ALiBi slopes).

    Raises:
        InputError: a value outside its choices, a bad scale.
    """

    divisor_squared: Any = DEFAULT_SCALE
    causal: bool = False
    alignment: str = "top_left"
    empty_row: str = "zero"
    mask_kind: str = "bool_keep"
    gqa: str = "interleave"
    window: tuple | None = None
    query_offset: int | None = None
    softcap: Fraction | None = None
    sink: Fraction | None = None
    alibi: Alibi | None = None
    rope: Rope | None = None
    dropout: Fraction | None = None
    head: int = 0
    scale: dataclasses.InitVar[Any] = _UNSET

    def __post_init__(self, scale):
        if scale is not _UNSET:     # a spec file's number arrives as int or float: read its text
            text = str(scale) if isinstance(scale, (int, float)) and not isinstance(scale, bool) \
                else scale
            object.__setattr__(self, "divisor_squared", parse_scale(text))
        s = self.divisor_squared
        if isinstance(s, int) and not isinstance(s, bool):
            s = Fraction(s)
            object.__setattr__(self, "divisor_squared", s)
        if isinstance(s, Fraction):
            if s <= 0:
                raise InputError(f"divisor_squared must be positive (got {s})")
        elif s is not None and s != DEFAULT_SCALE:
            raise InputError(f"divisor_squared must be 'default', a positive Fraction D (the "
                             f"scores are divided by sqrt(D)) or None (got {shorten(s, quote=True)}); "
                             "pass scale= to give the scale instead")
        if not isinstance(self.causal, bool):
            raise InputError(f"causal must be true or false (got {shorten(self.causal, quote=True)})")
        for name, choices in (("alignment", ALIGNMENTS), ("empty_row", EMPTY_ROWS),
                              ("mask_kind", MASK_KINDS), ("gqa", GQA_MAPS)):
            check_choice(getattr(self, name), name, choices)
        if self.window is not None:
            object.__setattr__(self, "window", check_window(self.window))
        if self.query_offset is not None and not (
                isinstance(self.query_offset, int) and not isinstance(self.query_offset, bool)):
            raise InputError(f"query_offset must be a whole number (got "
                             f"{shorten(self.query_offset, quote=True)})")
        if self.query_offset is not None and abs(self.query_offset) > 2 ** 53:
            raise InputError(f"query_offset must be from -2^53 to 2^53 (got {shorten(str(self.query_offset))}"
                             "); a float64 holds no position past 2^53: give a smaller one")
        for name, check in (("softcap", check_softcap), ("sink", exact_number),
                            ("dropout", check_dropout)):      # the modifiers' own checks
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check(getattr(self, name), name))
        if self.alibi is not None and not isinstance(self.alibi, Alibi):
            raise InputError(f"alibi must be an Alibi(heads=...) (got {shorten(self.alibi)})")
        if self.rope is not None and not isinstance(self.rope, Rope):
            raise InputError(f"rope must be a Rope(theta=..., layout=...) (got {shorten(self.rope)})")
        if not isinstance(self.head, int) or isinstance(self.head, bool) or self.head < 0:
            raise InputError(f"head must be a whole number >= 0 (got {shorten(self.head, quote=True)})")
        if self.alibi is not None:
            self.alibi.slope(self.head)

    def replace(self, **changes) -> "Policy":
        """A copy with some fields changed (checked again)."""
        return dataclasses.replace(self, **changes)

    # -- the scale ------------------------------------------------------
    def empty_share(self, n_keys: int) -> Fraction | None:
        """The share each of ``n_keys`` keys gets in a row that sees none of them (and has no
        sink): 0 under ``empty_row=zero``, ``1/n_keys`` under ``uniform``, None (NaN) under
        ``nan``.  The row's output is the same weighted sum of values as any row's.

        >>> Policy(empty_row="uniform").empty_share(4), Policy(empty_row="nan").empty_share(4)
        (Fraction(1, 4), None)
        """
        if self.empty_row == "nan":
            return None
        return Fraction(1, n_keys) if self.empty_row == "uniform" else Fraction(0)

    def divisor_squared_for(self, d_k: int) -> Fraction | None:
        """``D`` with scores divided by sqrt(D): ``d_k`` under the default scale, None for none."""
        return Fraction(d_k) if self.divisor_squared == DEFAULT_SCALE else self.divisor_squared

    def scale_text(self) -> str:
        """The scale in words: ``1/sqrt(d_k)``, ``1/8``, ``1/sqrt(48)``, ``none``."""
        d2 = self.divisor_squared
        if d2 == DEFAULT_SCALE:
            return "1/sqrt(d_k)"
        if d2 is None:
            return "none"
        root = rational_sqrt(d2)
        return str(1 / root) if root is not None else f"1/sqrt({d2})"

    # -- visibility -------------------------------------------------------
    def causal_shift(self, n_queries, n_keys):
        """How far right of the diagonal the last visible key lies: 0 (top_left) or S - L.

        Works on integers and on sympy symbols alike (the cost module derives
        loop bounds from it).

        >>> Policy(causal=True, alignment="bottom_right").causal_shift(2, 5)
        3
        """
        return 0 if self.alignment == "top_left" else n_keys - n_queries

    def query_position(self, i: int, n_queries: int, n_keys: int) -> int:
        """The position of query i among the key positions 0 .. n_keys - 1.

        ``query_offset + i`` when set, else ``i + causal_shift`` (the alignment).

        >>> Policy(alignment="bottom_right").query_position(0, 1, 5), Policy(query_offset=3).query_position(0, 1, 5)
        (4, 3)
        """
        if self.query_offset is not None:
            return self.query_offset + i
        return i + self.causal_shift(n_queries, n_keys)

    def visible_keys(self, i: int, n_queries: int, n_keys: int) -> range:
        """The keys query i sees by position (explicit masks aside): the one visibility rule.

        Shapes: ``0 <= i < n_queries``; the result is a range of key indices
        in ``0 .. n_keys - 1``.  With p = :meth:`query_position`: causal
        keeps ``j <= p`` (``top_left``: ``j <= i``; ``bottom_right``:
        ``j <= i + n_keys - n_queries``); a window ``(left, right)`` keeps
        ``p - left <= j <= p + right``.

        >>> list(Policy(causal=True).visible_keys(0, 2, 3)), list(Policy().visible_keys(0, 2, 3))
        ([0], [0, 1, 2])
        >>> [list(Policy(causal=True, window=(2, 0)).visible_keys(i, 5, 5)) for i in (0, 4)]
        [[0], [2, 3, 4]]
        """
        if not self.causal and self.window is None and self.query_offset is None:
            return range(n_keys)
        p = self.query_position(i, n_queries, n_keys)
        lo, hi = 0, n_keys
        if self.causal:
            hi = min(hi, p + 1)
        if self.window is not None:
            left, right = self.window
            if left is not None:
                lo = max(lo, p - left)
            if right is not None:
                hi = min(hi, p + right + 1)
        return range(max(0, min(lo, n_keys)), max(0, min(lo, n_keys), hi))

    def keep(self, n_queries: int, n_keys: int, mask: "Mask | None" = None):
        """An n_queries x n_keys numpy bool array, True where query i sees key j.

        Built row by row from :meth:`visible_keys` (and the mask's ``keeps``).

        >>> Policy(causal=True).keep(2, 2).tolist()
        [[True, False], [True, True]]
        """
        import numpy as np
        out = np.zeros((n_queries, n_keys), dtype=bool)
        for i in range(n_queries):
            r = self.visible_keys(i, n_queries, n_keys)
            out[i, r.start:r.stop] = True
        if mask is not None:
            out &= np.array([[mask.keeps(i, j) for j in range(n_keys)]
                             for i in range(n_queries)], dtype=bool)
        return out

    def pairs(self, n_queries: int, n_keys: int, mask: "Mask | None" = None) -> int:
        """How many (query, key) pairs are visible: n(n+1)/2 for a causal square."""
        if mask is None:
            return sum(len(self.visible_keys(i, n_queries, n_keys)) for i in range(n_queries))
        return int(self.keep(n_queries, n_keys, mask).sum())

    def fold(self, mask: "Mask | None", n_queries: int, n_keys: int) -> "Mask | None":
        """The explicit mask with the causal rule folded in (None: every key visible).

        An additive mask stays additive (its offsets kept, ``-inf`` where the
        causal rule hides); otherwise the result is a ``bool_keep`` mask.  What
        a function that takes only a mask must be handed.

        >>> Policy(causal=True).fold(None, 2, 2)
        Mask('bool_keep', [[True, False], [True, True]])
        """
        if not self.positional:
            return mask
        keep = self.keep(n_queries, n_keys, mask).tolist()
        if mask is not None and mask.kind == "additive":
            return Mask("additive", [[e if k else None for e, k in zip(r, kr)]
                                     for r, kr in zip(mask.rows, keep)])
        return Mask("bool_keep", keep)

    def kv_head(self, h: int, n_query_heads: int, n_kv_heads: int) -> int:
        """The key/value head that query head h reads under the GQA map.

        Raises:
            ShapeError: H_q is not a multiple of H_kv.

        >>> [Policy().kv_head(h, 4, 2) for h in range(4)], [Policy(gqa="tile").kv_head(h, 4, 2) for h in range(4)]
        ([0, 0, 1, 1], [0, 1, 0, 1])
        """
        if n_kv_heads < 1 or n_query_heads % n_kv_heads:
            raise ShapeError(
                f"query heads must be a multiple of key/value heads ({n_query_heads} query, "
                f"{n_kv_heads} key/value heads)")
        if self.gqa == "interleave":
            return h // (n_query_heads // n_kv_heads)
        return h % n_kv_heads

    def query_heads(self, g: int, n_query_heads: int, n_kv_heads: int) -> list[int]:
        """The query heads that read key/value head g under the GQA map (:meth:`kv_head`), in order.

        Raises:
            ShapeError: H_q is not a multiple of H_kv.

        >>> Policy().query_heads(1, 4, 2), Policy(gqa="tile").query_heads(1, 4, 2)
        ([2, 3], [1, 3])
        """
        return [h for h in range(n_query_heads) if self.kv_head(h, n_query_heads, n_kv_heads) == g]

    def for_head(self, h: int) -> "Policy":
        """The policy of query head h of a call: under ALiBi ``head`` moves to ``self.head + h``
        (the model head whose slope it takes); without ALiBi this policy itself.

        >>> from .modifiers import Alibi
        >>> Policy(alibi=Alibi(8), head=2).for_head(3).head, Policy(head=2).for_head(3).head
        (5, 2)
        """
        return self if self.alibi is None else self.replace(head=self.head + h)

    def unsupported(self, path: str) -> list[str]:
        """The fields set on this policy that ``path`` does not run (:data:`UNSUPPORTED`), in the
        table's order; empty when the path runs the whole policy.

        >>> Policy(rope=Rope(), sink="0").unsupported("fast"), Policy(sink="0").unsupported("sdpa")
        (['rope'], ['sink'])
        """
        check_choice(path, "path", tuple(UNSUPPORTED))
        return [f for f in UNSUPPORTED[path] if getattr(self, f) is not None]

    @property
    def positional(self) -> bool:
        """True when positions hide keys (causal, a window or a query offset)."""
        return self.causal or any(getattr(self, f) is not None for f in POSITION_FIELDS)

    @cached_property
    def modified(self) -> bool:
        """True when a score modifier (soft-cap, sink, ALiBi, RoPE, dropout) is on (asked
        once per row by the tables: kept)."""
        return any(getattr(self, f) is not None for f in SCORE_FIELDS)

    def modifiers(self) -> dict:
        """The modifier fields that are set, as JSON-ready values (empty for a plain call)."""
        out: dict = {}
        if self.window is not None:
            out["window"] = list(self.window)
        if self.query_offset is not None:
            out["query_offset"] = self.query_offset
        for name in ("softcap", "sink", "dropout"):
            if getattr(self, name) is not None:
                out[name] = str(getattr(self, name))
        if self.alibi is not None:
            out["alibi"] = {"heads": self.alibi.heads, "form": self.alibi.form}
        if self.rope is not None:
            out["rope"] = {"theta": str(self.rope.theta), "layout": self.rope.layout}
            if self.rope.dims is not None:
                out["rope"]["dims"] = self.rope.dims
            if self.rope.scaling is not None:      # transformers' dict: a spec file reads it back
                out["rope"]["scaling"] = self.rope.scaling.to_dict()
        if self.head:
            out["head"] = self.head
        return out

    # -- words ------------------------------------------------------------
    def describe(self) -> str:
        """Every field on one line (modifiers only when set)."""
        extra = "".join(f" {k}={v}" for k, v in self.modifiers().items())
        return (f"scale={self.scale_text()} causal={'on' if self.causal else 'off'} "
                f"alignment={self.alignment} empty_row={self.empty_row} "
                f"mask={self.mask_kind} gqa={self.gqa}" + extra.replace("'", ""))

    def as_dict(self) -> dict:
        """The policy as JSON-ready values (the ``policy`` table of a spec file)."""
        d2 = self.divisor_squared
        scale = DEFAULT_SCALE if d2 == DEFAULT_SCALE else "none" if d2 is None else f"1/sqrt({d2})"
        return {"scale": scale, "causal": self.causal, "alignment": self.alignment,
                "empty_row": self.empty_row, "mask_kind": self.mask_kind, "gqa": self.gqa,
                **self.modifiers()}


def preset(name: str, **changes) -> Policy:
    """The policy of one library (``torch``, ``flash``, ``jax``, ``xformers``), with changes.

    >>> preset("jax", causal=True).describe()
    'scale=1/sqrt(d_k) causal=on alignment=top_left empty_row=uniform mask=bool_keep gqa=interleave'
    >>> preset("keras")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: like must be one of torch, flash, jax, xformers (got 'keras')
    """
    check_choice(name, "like", tuple(PRESETS))
    return Policy(**{**PRESETS[name], **changes})
