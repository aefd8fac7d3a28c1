"""The FLOP-counter audit: the derived count of each call, each counter's figure, a verdict.

For every call of :mod:`~exactattn.cost.audit_calls` the audit derives the
multiply-adds of each stage from the loop nests
(:func:`~exactattn.cost.derivation.derive_call`; checked against a counted run,
:func:`~exactattn.cost.counting.count_call`) and the operations a counter
might add besides them: the full square a dense kernel computes under a
causal or band mask, the batch of the query alone (a matmul counter that
reads the first operand's shape), and elementwise operations (the softmax,
the scaling, an additive mask, biases).  :func:`verdict` then explains a
counter's figure by the fewest departures from the exact count: ``matches``,
or a list of findings such as ``full_square``, ``omits_attention``,
``batch_factor``, ``softmax``.  A figure nothing explains is
``unexplained``.  The counters are run, and their figures judged and presented, by
:mod:`exactattn.audit.flops`.

Units: MACs; a reading in FLOPs is held against 2 x MACs.

>>> L = ledger(call("sdpa_bottom_right"))
>>> L.macs["total"], L.dense["total"], 2 * L.dense["total"]
(816, 960, 1920)
>>> verdict(L, 1920, 2).findings
('full_square',)
>>> verdict(ledger(call("matmul_broadcast_query")), 160, 1).findings
('batch_factor_scores',)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import partial
from fractions import Fraction
from itertools import combinations

from ..errors import InputError
from ..options import check_choice
from .audit_calls import AuditCall, call
from .counting import count_call
from .derivation import derive_call
from .sizes import CallShape

__all__ = ["ledger", "verdict"]

#: the elementwise operations a counter may add to the multiply-adds, in the order tried
EXTRAS = ("softmax", "bias", "bias_once", "scale", "mask")
#: findings that are errors (the rest are conventions: what else a counter chose to count)
ERRORS = ("omits_attention", "omits_linear", "batch_factor", "batch_factor_scores",
          "attention_twice", "bias_once", "scores_only", "mix_only", "one_product",
          "layout_swap", "image_layout", "kv_heads", "macs_as_flops", "unexplained", "fails")
#: how each pass weighs the scores-shaped (width E) and mix-shaped (width E_v) products:
#: the forward runs each once; a backward runs dQ = dS K and dK = dS^T Q (E) and
#: dV = P^T dO and dP = dO V^T (E_v), and a fused kernel (flash, mem_efficient) recomputes
#: the scores Q K^T first (Dao et al. 2022, alg. 4)
PASSES = {"forward": (1, 1), "backward": (3, 2), "backward_autograd": (2, 2)}


@dataclass(frozen=True)
class Ledger:
    """The derived figures of one call.

    ``macs``: MACs per stage and ``total`` (the loops over visible pairs);
    ``counted``: the same, counted by running the call; ``dense``: scores and
    mix over the full L x S square (no causal rule, no mask); ``query_batch``:
    scores and mix at the query's own batch; ``softmax_ops``: what a float
    softmax over the visible keys takes (k exponentials, k - 1 additions, k
    divisions for a row of k keys); ``extras``: the size of each elementwise
    operation of :data:`EXTRAS` the call's implementation runs (0 if none).
    """

    call: AuditCall
    macs: dict
    counted: dict
    dense: dict
    query_batch: dict
    softmax_ops: dict
    extras: dict
    swapped: dict | None = None
    kv_heads: dict | None = None

    @property
    def linear(self) -> int:
        return self.macs.get("projections", 0) + self.macs.get("out_projection", 0)

    @property
    def same(self) -> bool:
        """The derived figures equal the counted ones."""
        return self.macs == self.counted


def ledger(c: AuditCall, count_limit: int | None = None) -> Ledger:
    """Derive (and count) the figures of audit call ``c``.

    ``count_limit``: count by running the call only when its derived total is at most
    this many MACs (None: always); a call not counted has ``counted`` None.
    ``swapped``: scores and mix of the operands' (B, S, H, D) layout read as (B, H, S, D)
    (heads from the query's L, queries from its H_q, keys from the key's H_kv; full
    square, as a shape-reading formula counts), for a call of 4-dimensional operands
    without projections; ``kv_heads``: the call at H_kv query heads (GQA calls only).
    """
    s = c.shape
    macs = derive_call(s)
    dense_shape = dataclasses.replace(s, policy=s.policy.replace(causal=False), mask=None)
    dense = derive_call(dense_shape)
    ones = (1,) * len(s.key[:-3])
    query_batch = derive_call(dataclasses.replace(s, key=ones + s.key[-3:],
                                                  value=ones + s.value[-3:]))
    B, H, Hkv = s.batch_size, s.heads, s.kv_heads
    if s.mask is None:   # by rows: no L x S array for a long call
        seen = [len(s.policy.visible_keys(i, s.queries, s.keys)) for i in range(s.queries)]
        pairs, rows = B * H * sum(seen), B * H * sum(1 for k in seen if k)
    else:
        keep = s.policy.keep(s.queries, s.keys, s.mask)
        pairs, rows = B * H * int(keep.sum()), B * H * int(keep.any(axis=1).sum())
    scores = B * H * dense_shape.pairs()
    width = (H * s.d_k, Hkv * s.d_k, Hkv * s.d_v)
    out = s.d_model if s.out_projection else 0
    extras = dict.fromkeys(EXTRAS, 0)
    for op, extra, size in (("softmax", "softmax", scores), ("scale_scores", "scale", scores),
                            ("scale_queries", "scale", B * s.queries * H * s.d_k),
                            ("mask_add", "mask", scores)):
        extras[extra] = size if op in c.ops else extras[extra]
    if c.bias:
        extras["bias"] = B * (s.queries * width[0] + s.keys * (width[1] + width[2])
                              + s.queries * out)
        extras["bias_once"] = sum(width) + out
    swapped = kv = None
    if s.d_model is None and len(s.query) == len(s.key) == 4:
        q, k, v = s.query, s.key, s.value
        swapped = derive_call(CallShape(q[:1] + (q[2], q[1], q[3]), k[:1] + (q[2], k[1], k[3]),
                                        v[:1] + (q[2], v[1], v[3])))
    if Hkv != H:
        kv = derive_call(dataclasses.replace(s, query=s.query[:-3] + (Hkv,) + s.query[-2:]))
    counted = count_call(s).macs if count_limit is None or macs["total"] <= count_limit \
        else None
    return Ledger(c, macs, counted, dense, query_batch,
                  {"exp": pairs, "add": pairs - rows, "div": pairs}, extras, swapped, kv)


@dataclass(frozen=True)
class Verdict:
    """A counter's figure against the derived count.

    ``expected``: the derived total in the reading's unit (MACs, or 2 x MACs
    for FLOPs); ``findings``: ``("matches",)`` or the departures that explain
    the figure; ``factor``: the batch factor when a finding is one;
    ``alternatives``: other explanations of the same figure with as few
    departures (the figure alone cannot tell them apart).
    """

    figure: int | None
    expected: int
    findings: tuple
    factor: Fraction | None = None
    error: str | None = None
    alternatives: tuple = ()
    #: the :class:`Ledger` judged against, the pass (``forward``, or a backward of
    #: :data:`PASSES`) and the reading's unit: 2 operations per MAC (FLOPs) or 1 (MACs)
    ledger: Ledger | None = field(default=None, compare=False, repr=False)
    pass_: str = "forward"
    per_mac: int = 2

    @property
    def right(self) -> bool:
        """The figure is the exact count."""
        return self.findings == ("matches",)

    @property
    def is_error(self) -> bool:
        """Some finding is an error (not a convention)."""
        return any(f in ERRORS for f in self.findings)


def _attention(L: Ledger) -> list[tuple[str | None, int, int]]:
    """The ways of counting the scores and the mix: ``(finding, scores MACs, mix MACs)``,
    the exact count first."""
    m, d, s = L.macs, L.dense, L.call.shape
    options = [(None, m["scores"], m["mix"]), ("full_square", d["scores"], d["mix"])]
    if L.call.shape.policy.causal:   # n^2/2: half the full square (Fractions when odd)
        options.append(("causal_half", Fraction(d["scores"], 2), Fraction(d["mix"], 2)))
    options += [("batch_factor", L.query_batch["scores"], L.query_batch["mix"]),
                ("batch_factor_scores", L.query_batch["scores"], m["mix"]),
                ("attention_twice", 2 * m["scores"], 2 * m["mix"])]
    if m["scores"] == m["mix"]:   # E = E_v: the figure cannot tell which product
        options.append(("one_product", m["scores"], 0))
    else:
        options += [("scores_only", m["scores"], 0), ("mix_only", 0, m["mix"])]
    if L.swapped is not None:   # 4-d operands, also read as (B, C, H, W): L x E pixels a head
        (_, H, Lq, E), (_, Hkv, S, _), Ev, B = s.query, s.key, s.value[-1], s.batch_size
        options += [("layout_swap", L.swapped["scores"], L.swapped["mix"]),
                    ("image_layout", B * H * Lq * E * S * E, B * Hkv * Lq * E * S * Ev)]
    if L.kv_heads is not None:
        options.append(("kv_heads", L.kv_heads["scores"], L.kv_heads["mix"]))
    options.append(("omits_attention", 0, 0))
    exact, out, seen = m["scores"] + m["mix"], [], set()
    for name, a, b in options:   # a departure that changes nothing is no departure
        if (name is None or a + b != exact) and (a, b) not in seen:
            seen.add((a, b))
            out.append((name, a, b))
    return out


def _linear(L: Ledger) -> list[tuple[str | None, int]]:
    return [(None, L.linear)] + ([("omits_linear", 0)] if L.linear else [])


def _passes(backward: str | None) -> list[tuple[str | None, int, int]]:
    """The pass counted (:data:`PASSES`) and its departure: a backward without the
    recomputation of the scores (``no_recompute``, backward = 2 x forward) or with it
    (``recompute``)."""
    if backward is None:
        return [(None, *PASSES["forward"])]
    check_choice(backward, "backward", ("backward", "backward_autograd"))
    other = "backward_autograd" if backward == "backward" else "backward"
    return [(None, *PASSES[backward]),
            ("no_recompute" if backward == "backward" else "recompute", *PASSES[other])]


def explanations(L: Ledger, per_mac: int, backward: str | None = None
                 ) -> list[tuple[int, tuple]]:
    """Every total a counter could reach by departing from the derived count, with its
    findings: ``[(total, findings), ...]`` in the order :func:`verdict` tries them.

    Tried: the scores and mix exact, over the full square, half the full square
    (causal), at the query's batch (both products, or the scores only), twice,
    one product alone, the (B, S, H, D) layout read as (B, H, S, D), a (B, H, L, E)
    operand read as an image block (B, C, H, W), at the key/value heads, or left out; the linear stages as they are or left out;
    any of :data:`EXTRAS` added once; a FLOP reading (``per_mac`` 2) also as
    the MACs (``macs_as_flops``).  ``backward`` (``backward``: a fused kernel's,
    the scores recomputed; ``backward_autograd``: the math path's) judges the
    backward pass instead (its products weighed by :data:`PASSES`, no
    extras, no linear stages).  Totals are in the reading's unit (``per_mac``
    operations per MAC, the extras one each).

    Raises:
        InputError: a backward of a call with projections.
    """
    if backward is not None and L.linear:
        raise InputError("backward must be left unset for a call with projections (got "
                         f"{backward!r}); the backward counts the attention alone")
    extras = [] if backward else [(k, v) for k, v in L.extras.items() if v]
    units = [(None, per_mac)] + ([("macs_as_flops", 1)] if per_mac == 2 else [])
    out = []
    for unit, per in units:
        for pass_, ws, wm in _passes(backward):
            for att, a, m in _attention(L):
                for lin, b in _linear(L):
                    if unit and not a + m + b:
                        continue   # nothing counted: the unit changes nothing
                    for size in range(len(extras) + 1):
                        for chosen in combinations(extras, size):
                            names = tuple(e for e, _ in chosen)
                            total = per * (ws * a + wm * m + b) + sum(v for _, v in chosen)
                            if att == "attention_twice" and "softmax" in names:
                                total += L.extras["softmax"]   # the softmax went twice too
                            out.append((total, tuple(f for f in (att, pass_, lin, unit) if f)
                                        + names))
    return out


def verdict(L: Ledger, figure, per_mac: int, error: str | None = None,
            backward: str | None = None) -> Verdict:
    """Explain ``figure`` (a reading of ``per_mac`` operations per multiply-add) by the
    fewest departures from the derived count (:func:`explanations`; a doubled
    attention counts as two; ties go to the first tried, and the other
    explanations of the same figure are kept as ``alternatives``).  No figure (``error`` set) gives ``fails`` (or
    ``not_installed``); nothing that fits, ``unexplained``.

    >>> L = ledger(call("mha"))
    >>> verdict(L, 2 * 4480 + 128, 2).findings, verdict(L, 3200, 1).findings
    (('softmax',), ('omits_attention',))
    >>> verdict(L, 0, 1).findings, verdict(L, 4481, 1).findings
    (('omits_attention', 'omits_linear'), ('unexplained',))
    """
    ws, wm = PASSES[backward or "forward"]
    judged = partial(Verdict, ledger=L, pass_=backward or "forward", per_mac=per_mac)
    expected = per_mac * (ws * L.macs["scores"] + wm * L.macs["mix"] + L.linear)
    if figure is None:
        error = error or "no figure"
        return judged(None, expected, ("not_installed" if error.startswith("not installed")
                                       else "fails",), error=error)
    if figure == expected:
        return judged(figure, expected, ("matches",))
    fits = [f for total, f in explanations(L, per_mac, backward) if total == figure]
    if not fits:
        return judged(figure, expected, ("unexplained",))
    least = min(map(_cost, fits))
    best = next(f for f in fits if _cost(f) == least)
    # other stories of the same figure, up to two departures (full square as MACs-as-FLOPs
    # is n^2/2 in FLOPs, always): named, never dropped
    others = sorted((f for f in fits if f != best and _cost(f) <= max(least, 2)), key=_cost)
    alternatives: list = []
    for f in others:   # a different story, not the same count under another name
        if _kind(f, L) != _kind(best, L) and _kind(f, L) not in map(lambda a: _kind(a, L),
                                                                     alternatives):
            alternatives.append(f)
    factor = None
    if "batch_factor" in best or "batch_factor_scores" in best:
        factor = Fraction(L.query_batch["scores"], L.macs["scores"])
    if "kv_heads" in best:
        factor = Fraction(L.kv_heads["scores"], L.macs["scores"])
    return judged(figure, expected, best, factor, alternatives=tuple(alternatives))


def _cost(findings: tuple) -> int:
    """Departures, a doubled attention counting two (a hook and the calls under it)."""
    return len(findings) + ("attention_twice" in findings)


def _kind(findings: tuple, L: Ledger) -> tuple:
    """Findings with the per-score extras (softmax, scaling, mask: one per score each) told
    apart only by their size."""
    return tuple(sorted(str(L.extras[f]) if f in ("softmax", "scale", "mask") else f
                        for f in findings))
