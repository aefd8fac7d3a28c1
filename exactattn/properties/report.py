"""How a property failure reads: :class:`PropertyFailure` and the text of its report.

The presentation layer of :mod:`exactattn.properties`: it formats, it does
not compute.  A report names the property, the function (and its tolerance),
the input (typed back as Python) and one line per entry that broke the
property.  An exact value prints as itself when it is rational and otherwise
as its float followed by its closed form (``0.73105857863 (exactly
exp(1)/(1 + exp(1)))``).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Sequence

from ..call.masks import entry_text
from ..call.policy import DEFAULT_SCALE, Policy
from ..numbers.softmax import ExpRatio
from .inputs import dropout_keep, matrices

_DEFAULT_POLICY = Policy()


class PropertyFailure(AssertionError):
    """A property of attention does not hold for one function on one input."""


PropertyFailure.__module__ = "exactattn.properties"   # where users import it from


def matrix_text(m: Sequence[Sequence]) -> str:
    return "[" + ", ".join("[" + ", ".join(entry_text(e) for e in r) + "]" for r in m) + "]"


def policy_text(policy: Policy) -> str:
    """``Policy(...)`` with the fields that differ from the defaults, as Python that builds it.

    The scale as text (``scale='1/8'``), exact numbers as text (``sink='1/2'``,
    after the other fields), every other field as its ``repr``.

    >>> from exactattn.call.policy import Alibi
    >>> policy_text(Policy(scale="1/8", causal=True, sink="1/2", alibi=Alibi(8), head=3))
    "Policy(scale='1/8', causal=True, alibi=Alibi(heads=8, form='relative'), head=3, sink='1/2')"
    """
    parts = [f"scale={policy.scale_text()!r}"] if policy.divisor_squared != DEFAULT_SCALE else []
    numbers = []
    for f in dataclasses.fields(policy):
        value = getattr(policy, f.name)
        if f.name == "divisor_squared" or value == getattr(_DEFAULT_POLICY, f.name):
            continue
        if isinstance(value, Fraction):
            numbers.append(f"{f.name}={str(value)!r}")
        else:
            parts.append(f"{f.name}={value!r}")
    return f"Policy({', '.join(parts + numbers)})"


def input_text(inp) -> str:
    """A one-head :class:`~exactattn.call.Call` as the Python that builds it again
    (:func:`~exactattn.properties.AttentionInput`; the mask carries its own kind)."""
    q, k, v = matrices(inp)
    keep = dropout_keep(inp)
    keep = "" if keep is None else f", dropout_keep={keep!r}"
    policy = inp.policy.replace(mask_kind=_DEFAULT_POLICY.mask_kind)
    return (f"AttentionInput(queries={matrix_text(q)}, keys={matrix_text(k)}, "
            f"values={matrix_text(v)}, mask={inp.block_mask(0, 0)!r}, "
            f"policy={policy_text(policy)}{keep})")


def value_text(x) -> str:
    """A result entry: an exact rational as itself, an irrational with its closed form, a float's repr."""
    if isinstance(x, ExpRatio):
        if x.row.nan:
            return "nan"
        q = x.rational()
        return str(q) if q is not None else f"{float(x):.12g} (exactly {x.text()})"
    if isinstance(x, Fraction):
        return str(x)
    return repr(x)


def row_text(row: Sequence) -> str:
    return "[" + ", ".join(value_text(x) for x in row) + "]"


def failure(prop: str, function: str, inp, lines: list[str]) -> PropertyFailure:
    """The :class:`PropertyFailure` of a function check: the property, the function, the input, the lines."""
    text = [f"property failed: {prop}", f"  function: {function}", f"  input: {input_text(inp)}"]
    return PropertyFailure("\n".join(text + [f"  {line}" for line in lines]))


def fail(prop: str, function: str, inp, lines: list[str]):
    """Raise the :class:`PropertyFailure` for a function check."""
    raise failure(prop, function, inp, lines)


def head_fail(prop: str, head, x, lines: list[str]):
    """Raise the :class:`PropertyFailure` for a check of exactattn's own head engine."""
    text = [f"property failed: {prop}", "  function: exactattn.attend (exact)",
            f"  head: {head!r}", f"  x: {matrix_text(x)}"]
    raise PropertyFailure("\n".join(text + [f"  {line}" for line in lines]))
