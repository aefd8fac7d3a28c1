"""FLOP conventions, stated: who counts attention's pairs how, against the exact counts.

Conventions (stated, never implied):

* A multiply-add (MAC) is one multiplication plus one addition into a running
  sum.  Everything is reported in MACs; FLOPs = 2 x MACs.
* A dot product of length k takes k multiplications but only k - 1 additions,
  so 2 x MACs exceeds the exact operation count by one per dot product
  (:func:`~exactattn.cost.derivation.derive_operations` gives the exact counts
  from the same loop nests).
* A causal mask leaves exactly n(n+1)/2 query-key pairs (the diagonal is
  visible), not n^2/2: the engine skips masked pairs and counts the rest.
* The softmax's exponentials, additions and divisions are counted separately
  (``softmax_ops``), never folded into MACs.

>>> shape, limit, counted, unmasked_total, pairs, stages, ops = compare_conventions(32)
>>> [str(p) for _, p, _ in pairs]
['1024', '528', '1024', '512', '528']
>>> counted, stages[-1]
(True, ('total', 9728, 9728, 8192))
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from ..call.policy import Policy
from .counting import count_call, estimate_seconds
from .derivation import EXTENSION_SYMBOLS, SYMBOLS, derive_call, derive_operations, symbol_values
from .sizes import CallShape, size


@dataclass(frozen=True)
class Convention:
    """A way of counting attention's query-key pairs, and who uses it."""
    key: str
    name: str
    used_by: str
    pairs: Any  # sympy expression in n


_n = SYMBOLS.n
CONVENTIONS = (
    Convention("full", "full n^2 rectangle",
               "PaLM (app. B), the Megatron paper (Narayanan et al. 2021), FlashAttention "
               "(non-causal), torch's registered SDPA FLOP formula", _n ** 2),
    Convention("half", "n^2/2 for causal",
               "Kaplan et al. 2020, FlashAttention (causal), Megatron-LM's code", _n ** 2 / 2),
    Convention("exact", "exact causal n(n+1)/2", "exactattn: counted, masked pairs skipped",
               _n * (_n + 1) / 2),
)

CONVENTION_NOTES = (
    "a multiply-add (MAC) is one multiplication plus one addition; FLOPs = 2 x MACs",
    "a length-k dot product takes k multiplications and k - 1 additions; exactattn reports "
    "MACs (k per dot product), so 2 x MACs counts one operation more per dot product "
    "than were done",
    "a causal mask leaves n(n+1)/2 query-key pairs (the diagonal is visible), "
    "not n^2/2: n/2 pairs more",
    "the softmax's exponentials, additions and divisions are counted separately, "
    "not in the MACs; the exact engine takes one exponential per distinct gap in a row",
)


def _both(shape: CallShape) -> dict[bool, CallShape]:
    """The call without and with the causal mask."""
    return {causal: replace(shape, policy=Policy(causal=causal)) for causal in (False, True)}


def conventions_work(n=32, d_model=4, d_k=4, d_v=None, *, heads=None, layers=1,
                     count_limit: int = 10_000_000) -> list[tuple[int, float]]:
    """What :func:`compare_conventions` would run, known before it runs: ``(MACs, seconds)``
    for the unmasked and the causal head, or nothing when they are only derived."""
    shapes = _both(CallShape.of_sizes(n, d_model, d_k, d_v, heads=heads, layers=layers))
    work = [(d["total"], estimate_seconds(d, s)) for s in shapes.values() for d in [derive_call(s)]]
    return work if max(macs for macs, _ in work) <= size(count_limit, "count_limit") else []


def compare_conventions(n=32, d_model=4, d_k=4, d_v=None, *, causal: bool = False,
                        heads=None, layers=1, count_limit: int = 10_000_000) -> tuple:
    """The exact pair counts (no mask, causal) next to each convention, and the exact
    operations of each stage, for the same head at n tokens.

    Returns ``(shape, count_limit, counted, unmasked_total, pairs, stages, softmax_ops)``:
    the call compared (n tokens, its mask, heads with W_O and layers); the count limit;
    whether the exact rows come from running the head (else derived); the MACs of the
    unmasked head (what the count limit is held against); ``(convention, pairs, pair
    MACs)`` rows: exact with no mask and exact causal (convention None), then each of
    :data:`CONVENTIONS`; ``(stage, MACs, multiplications, additions)`` per stage, then
    the total; the counted softmax operations (None when not run).

    The exact rows are counted by running the head (with and without the
    causal mask) when the derived total of the unmasked head is at most
    ``count_limit`` MACs; above it they are derived from the loop nests (and
    the softmax operations, which depend on the numbers, are not given).

    Units: pairs, MACs, FLOPs.

    Raises:
        InputError: a size or ``count_limit`` that is not a positive whole number.

    Reference: Vaswani et al. 2017, sec. 3.2.1.

    >>> compare_conventions(32, count_limit=1000)[4][1][2]
    Fraction(4224, 1)
    """
    shape = CallShape.of_sizes(n, d_model, d_k, d_v, causal=causal, heads=heads,
                               layers=layers)
    n, d_k, d_v = shape.queries, shape.d_k, shape.d_v
    limit = size(count_limit, "count_limit")
    shapes = _both(shape)
    plain, masked = derive_call(shapes[False]), derive_call(shapes[True])
    unmasked_total = plain["total"]
    counted = max(plain["total"], masked["total"]) <= limit
    softmax_ops = None
    if counted:
        runs = {c: count_call(s) for c, s in shapes.items()}
        plain, masked = runs[False].macs, runs[True].macs
        softmax_ops = runs[causal].softmax_ops
    per_pair = (d_k + d_v) * shape.heads * shape.layers
    pairs = [(None, Fraction(n * n), Fraction(plain["scores"] + plain["mix"])),
             (None, Fraction(n * (n + 1), 2), Fraction(masked["scores"] + masked["mix"]))]
    pairs += [(conv, p, p * per_pair) for conv in CONVENTIONS
              for p in [Fraction(str(conv.pairs.subs(SYMBOLS.n, n)))]]
    ops = derive_operations(causal, heads=EXTENSION_SYMBOLS.h if shape.out_projection else None,
                            layers=1 if shape.layers == 1 else EXTENSION_SYMBOLS.L)
    vals = symbol_values(shape)
    macs = masked if causal else plain
    stages = [(stage, macs[stage], int(mul.subs(vals)), int(add.subs(vals)))
              for stage, (mul, add) in ops.items() if stage != "total"]
    stages.append(("total", *(sum(s[k] for s in stages) for k in (1, 2, 3))))
    return shape, limit, counted, unmasked_total, pairs, stages, softmax_ops
