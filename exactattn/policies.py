"""Named policies: which answer a float attention kernel is checked against.

Libraries disagree on what the right answer of attention is in five places,
so a verifier must say which one it checks.  A :class:`Policy` names all five:

``scale``
    What the scores are multiplied by before the softmax.  ``"default"`` is
    ``1/sqrt(d_k)`` of the real, unpadded head width (the width of the
    queries handed to the kernel, never a padded width such as the next
    multiple of 8); otherwise ``1/sqrt(D)`` for an exact rational ``D`` > 0,
    stored by ``D`` (the divisor squared, as :class:`exactattn.head.Head`
    does) so ``1/sqrt(48)`` stays exact.  ``scale=1/8`` is ``D = 64``.
``causal`` and ``alignment``
    With ``causal`` on, query i (of L) sees key j (of S) when ``j <= i``
    (``top_left``: PyTorch ``is_causal``, xformers ``LowerTriangularMask``,
    JAX) or when ``j <= i + S - L`` (``bottom_right``: FlashAttention 2.1+,
    KV-cache decoding, the last query sees every key).  The two agree when
    L = S.
``empty_row``
    What a query that can see no key gets: ``zero`` (shares and output 0:
    PyTorch SDPA since 2.5, FlashAttention), ``nan`` (0/0, what a plain
    ``softmax`` of all ``-inf`` gives) or ``uniform`` (1/S on every key: what
    a finite fill value such as ``finfo.min`` gives).
``mask_kind``
    How a mask is read: ``bool_keep`` (True = attend: SDPA ``attn_mask``,
    JAX), ``bool_drop`` (True = ignore: ``nn.MultiheadAttention``
    ``key_padding_mask``/``attn_mask``) or ``additive`` (added to the scaled
    scores; ``-inf`` hides a key).
``gqa``
    Grouped-query attention, H_q query heads over H_kv key/value heads with
    group size G = H_q / H_kv: ``interleave`` (query head h reads key/value
    head ``h // G``: ``repeat_interleave``, SDPA ``enable_gqa``, FlashAttention,
    JAX) or ``tile`` (query head h reads key/value head ``h % H_kv``: ``repeat``).

Presets (``--like``) set them together; ``scale`` stays ``default``:

========  ==========  ==========  =========  ==========
like      alignment   empty_row   mask_kind  gqa
========  ==========  ==========  =========  ==========
torch     top_left    zero        bool_keep  interleave
flash     bottom_right zero       bool_keep  interleave
jax       top_left    uniform     bool_keep  interleave
xformers  top_left    zero        additive   interleave
========  ==========  ==========  =========  ==========

(JAX's ``dot_product_attention`` fills hidden scores with a large finite
negative number, hence ``uniform``; xformers' fused kernels have varied
between versions on empty rows, so set ``empty_row`` explicitly there.)

Reference: Vaswani et al. 2017, sec. 3.2.1 (the scale 1/sqrt(d_k)); the
``causal-alignment`` and ``masked-rows`` cases in ../shared/cases/.

>>> p = preset("flash")
>>> p.alignment, p.empty_row
('bottom_right', 'zero')
>>> p.describe()
'scale=1/sqrt(d_k) causal=off alignment=bottom_right empty_row=zero mask=bool_keep gqa=interleave'
>>> Policy(scale="1/8").divisor_squared(48), Policy().divisor_squared(48)
(Fraction(64, 1), Fraction(48, 1))
>>> Policy(alignment="diagonal")
Traceback (most recent call last):
...
exactattn.errors.InputError: alignment must be one of top_left, bottom_right (got 'diagonal')
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .errors import InputError
from .exact import to_exact
from .softmax import EMPTY_ROW_POLICIES

__all__ = ["ALIGNMENTS", "DEFAULT_SCALE", "EMPTY_ROW_POLICIES", "GQA_MAPS", "MASK_KINDS",
           "PRESETS", "Policy", "kv_head", "parse_scale", "preset", "visible"]

ALIGNMENTS = ("top_left", "bottom_right")
MASK_KINDS = ("bool_keep", "bool_drop", "additive")
GQA_MAPS = ("interleave", "tile")
DEFAULT_SCALE = "default"

PRESETS = {
    "torch": dict(alignment="top_left", empty_row="zero", mask_kind="bool_keep", gqa="interleave"),
    "flash": dict(alignment="bottom_right", empty_row="zero", mask_kind="bool_keep",
                  gqa="interleave"),
    "jax": dict(alignment="top_left", empty_row="uniform", mask_kind="bool_keep",
                gqa="interleave"),
    "xformers": dict(alignment="top_left", empty_row="zero", mask_kind="additive",
                     gqa="interleave"),
}


def _choice(name: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise InputError(f"{name} must be one of {', '.join(choices)} (got {value!r})")


def parse_scale(value: Any) -> str | Fraction:
    """Read a scale: ``"default"`` or the divisor squared ``D`` (scale = 1/sqrt(D)).

    Accepted: ``"default"``; ``"1/sqrt(q)"`` for a positive rational q;
    ``"none"`` (no scaling, D = 1); a positive exact number s (D = 1/s**2).

    >>> parse_scale("default"), parse_scale("1/sqrt(48)"), parse_scale("0.125"), parse_scale("none")
    ('default', Fraction(48, 1), Fraction(64, 1), Fraction(1, 1))
    >>> parse_scale("-1")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: scale must be 'default', a positive number, '1/sqrt(q)' or 'none' (got '-1')
    """
    bad = f"scale must be 'default', a positive number, '1/sqrt(q)' or 'none' (got {value!r})"
    if isinstance(value, Fraction) and not isinstance(value, bool):
        s = value
    elif isinstance(value, str):
        text = value.strip().lower()
        if text == DEFAULT_SCALE:
            return DEFAULT_SCALE
        if text == "none":
            return Fraction(1)
        m = re.match(r"^1\s*/\s*sqrt\s*\((.*)\)$", text)
        if m:
            try:
                d = to_exact(m.group(1), name="scale")
            except InputError:
                raise InputError(bad) from None
            if d <= 0:
                raise InputError(bad)
            return d
        try:
            s = to_exact(text, name="scale")
        except InputError:
            raise InputError(bad) from None
    else:
        try:
            s = to_exact(value, name="scale")
        except InputError:
            raise InputError(bad) from None
    if s <= 0:
        raise InputError(bad)
    return 1 / (s * s)


@dataclass(frozen=True)
class Policy:
    """The answer a kernel is checked against: scale, causal alignment, empty rows, masks, GQA.

    Args:
        scale: ``"default"`` (1/sqrt(d_k)), a text :func:`parse_scale` reads
            (``"1/8"``, ``"1/sqrt(48)"``), or ``D`` as a ``Fraction`` with
            scale = 1/sqrt(D); kept as ``"default"`` or ``D``.
        causal: hide keys after the query (see ``alignment``).
        alignment: ``top_left`` or ``bottom_right``.
        empty_row: ``zero``, ``nan`` or ``uniform``.
        mask_kind: ``bool_keep``, ``bool_drop`` or ``additive``.
        gqa: ``interleave`` or ``tile``.

    Raises:
        InputError: a value outside its choices, a bad scale.
    """

    scale: Any = DEFAULT_SCALE
    causal: bool = False
    alignment: str = "top_left"
    empty_row: str = "zero"
    mask_kind: str = "bool_keep"
    gqa: str = "interleave"

    def __post_init__(self):
        if isinstance(self.scale, Fraction):
            if self.scale <= 0:
                raise InputError(f"scale's divisor squared must be positive (got {self.scale})")
        elif self.scale != DEFAULT_SCALE:
            object.__setattr__(self, "scale", parse_scale(str(self.scale)))
        if not isinstance(self.causal, bool):
            raise InputError(f"causal must be true or false (got {self.causal!r})")
        _choice("alignment", self.alignment, ALIGNMENTS)
        _choice("empty_row", self.empty_row, EMPTY_ROW_POLICIES)
        _choice("mask_kind", self.mask_kind, MASK_KINDS)
        _choice("gqa", self.gqa, GQA_MAPS)

    def replace(self, **changes) -> "Policy":
        """A copy with some fields changed (checked again)."""
        return dataclasses.replace(self, **changes)

    def divisor_squared(self, d_k: int) -> Fraction:
        """``D`` with scale = 1/sqrt(D): ``d_k`` under the default scale."""
        return Fraction(d_k) if self.scale == DEFAULT_SCALE else self.scale

    def scale_text(self) -> str:
        """The scale in words: ``1/sqrt(d_k)``, ``1/8``, ``1/sqrt(48)``."""
        if self.scale == DEFAULT_SCALE:
            return "1/sqrt(d_k)"
        from math import isqrt
        d = self.scale
        a, b = isqrt(d.numerator), isqrt(d.denominator)
        if a * a == d.numerator and b * b == d.denominator:
            return str(Fraction(b, a))
        return f"1/sqrt({d})"

    def describe(self) -> str:
        """All five policies on one line."""
        return (f"scale={self.scale_text()} causal={'on' if self.causal else 'off'} "
                f"alignment={self.alignment} empty_row={self.empty_row} "
                f"mask={self.mask_kind} gqa={self.gqa}")

    def as_dict(self) -> dict:
        """The policy as JSON-ready strings (the ``policy`` table of a spec file)."""
        return {"scale": DEFAULT_SCALE if self.scale == DEFAULT_SCALE
                else f"1/sqrt({self.scale})", "causal": self.causal,
                "alignment": self.alignment, "empty_row": self.empty_row,
                "mask_kind": self.mask_kind, "gqa": self.gqa}


def preset(name: str, **changes) -> Policy:
    """The policy of one library (``torch``, ``flash``, ``jax``, ``xformers``), with changes.

    >>> preset("jax", causal=True).describe()
    'scale=1/sqrt(d_k) causal=on alignment=top_left empty_row=uniform mask=bool_keep gqa=interleave'
    >>> preset("keras")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: like must be one of torch, flash, jax, xformers (got 'keras')
    """
    _choice("like", name, tuple(PRESETS))
    return Policy(**{**PRESETS[name], **changes})


def visible(policy: Policy, i: int, j: int, n_queries: int, n_keys: int) -> bool:
    """Whether query i may see key j under the causal rule (masks aside).

    >>> [[int(visible(Policy(causal=True), i, j, 2, 3)) for j in range(3)] for i in range(2)]
    [[1, 0, 0], [1, 1, 0]]
    >>> bottom = Policy(causal=True, alignment="bottom_right")
    >>> [[int(visible(bottom, i, j, 2, 3)) for j in range(3)] for i in range(2)]
    [[1, 1, 0], [1, 1, 1]]
    """
    if not policy.causal:
        return True
    offset = 0 if policy.alignment == "top_left" else n_keys - n_queries
    return j <= i + offset


def kv_head(policy: Policy, h: int, n_query_heads: int, n_kv_heads: int) -> int:
    """The key/value head that query head h reads under the GQA map.

    Raises:
        ShapeError: H_q is not a multiple of H_kv.

    >>> [kv_head(Policy(), h, 4, 2) for h in range(4)]
    [0, 0, 1, 1]
    >>> [kv_head(Policy(gqa="tile"), h, 4, 2) for h in range(4)]
    [0, 1, 0, 1]
    """
    from .errors import ShapeError
    if n_kv_heads < 1 or n_query_heads % n_kv_heads:
        raise ShapeError(
            f"query heads must be a multiple of key/value heads ({n_query_heads} query, "
            f"{n_kv_heads} key/value heads)")
    if policy.gqa == "interleave":
        return h // (n_query_heads // n_kv_heads)
    return h % n_kv_heads
