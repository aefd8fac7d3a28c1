"""Judge one reported FLOP figure for one attention call: the exact count, each
convention's figure, a verdict and the departure that reproduces the figure.

The call is one of torch's SDPA entry points (:data:`JUDGE_CALLS`: the
dispatcher ``sdpa``, or a backend forced with ``sdpa_kernel``: ``flash``,
``mem_efficient``, ``math``) on operands of shape B x H x L x E (query),
B x H_kv x S x E (key) and B x H_kv x S x E_v (value).  It is built as an
:class:`~exactattn.cost.audit_calls.AuditCall` and judged by the audit's own
:func:`~exactattn.cost.audit.ledger` and :func:`~exactattn.cost.audit.verdict`
(the departures tried live there, :func:`~exactattn.cost.audit.explanations`).
The table is :func:`~exactattn.audit.flops.judge_sections`.  Only the exact count is
right (exit 0 on the command line); a figure a convention gives (the full square, n^2/2 under the causal rule) is named as a
convention, an error as an error.

Units: FLOPs = 2 x MACs.  Forward: B H P (E + E_v) MACs for P visible pairs a
head.  Backward: ``flash`` and ``mem_efficient`` (and ``sdpa``, whose fused
kernels they are) recompute the scores, then run dP, dS K, dS^T Q and P^T dO:
B H P (3E + 2E_v) MACs; ``math`` keeps P from the forward: B H P (2E + 2E_v)
(Dao et al. 2022, alg. 4; torch's registered SDPA backward formula counts the
five products).

>>> j = judge_figure(25920, "sdpa", (2, 5, 9, 9, 4))
>>> j.expected, j.findings
(12960, ('attention_twice',))
>>> judge_figure(384, "flash", (1, 2, 6, 6, 4)).findings
('layout_swap',)
"""

from __future__ import annotations

import re
from fractions import Fraction

from ..call.policy import ALIGNMENTS
from ..errors import InputError
from ..options import check_choice, check_whole
from .audit import Verdict, ledger, verdict
from .audit_calls import AuditCall
from .sizes import MAX_SIZE, CallShape, policy_of

#: the calls: (torch code, backward pass of :data:`~exactattn.cost.audit.PASSES`)
JUDGE_CALLS = {
    "sdpa": ("F.scaled_dot_product_attention(q, k, v{causal})", "backward"),
    "flash": ("with sdpa_kernel(SDPBackend.FLASH_ATTENTION): "
              "F.scaled_dot_product_attention(q, k, v{causal})", "backward"),
    "mem_efficient": ("with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION): "
                      "F.scaled_dot_product_attention(q, k, v{causal})", "backward"),
    "math": ("with sdpa_kernel(SDPBackend.MATH): F.scaled_dot_product_attention(q, k, v{causal})",
             "backward_autograd"),
}
#: the largest L or S judged (the visible keys are read row by row)
MAX_TOKENS = 10 ** 6
#: counted by running the call (not only derived) up to this many MACs
COUNT_LIMIT = 100_000


def parse_shape(text: str) -> tuple:
    """``B,H,L,S,E[,E_v]`` as whole numbers (E_v defaults to E).

    Raises:
        InputError: not five or six positive whole numbers.

    >>> parse_shape("2,5,9,9,4")
    (2, 5, 9, 9, 4, 4)
    """
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) not in (5, 6) or not all(re.fullmatch(r"[0-9]+", p) for p in parts):
        raise InputError(f"--shape must be B,H,L,S,E or B,H,L,S,E,E_v, five or six whole "
                         f"numbers such as 2,5,9,9,4 (got {text!r})")
    dims = [check_whole(int(p), f"each size of --shape {text}",
                        high=MAX_TOKENS if i in (2, 3) else MAX_SIZE)
            for i, p in enumerate(parts)]
    return tuple(dims) if len(dims) == 6 else (*dims, dims[4])


def judge_figure(figure: int, call: str, shape: tuple, *, causal: bool = False,
                 alignment: str = "top_left", kv_heads: int | None = None,
                 backward: bool = False, unit: str = "flops") -> Verdict:
    """Judge ``figure`` (FLOPs, or MACs with ``unit="macs"``: 1 MAC = 2 FLOPs) for ``call``
    on ``shape`` = (B, H, L, S, E[, E_v]).

    Raises:
        InputError: a figure that is not a whole number from 0, an unknown call, a
            bad size; ShapeError: H not a multiple of ``kv_heads``.
    """
    if isinstance(figure, bool) or not isinstance(figure, int) or figure < 0:
        raise InputError(f"the FLOP figure must be a whole number from 0 (got {figure!r})")
    check_choice(call, "--call", tuple(JUDGE_CALLS))
    per_mac = 2 if check_choice(unit, "--unit", ("flops", "macs")) == "flops" else 1
    B, H, L, S, E, *rest = shape
    Ev = rest[0] if rest else E
    Hkv = H if kv_heads is None else check_whole(kv_heads, "--kv-heads", high=MAX_SIZE)
    if H % Hkv:
        fits = [k for k in range(1, H + 1) if H % k == 0]
        raise InputError(f"--kv-heads must divide the query heads H = {H} (got {Hkv}); pass "
                         f"one of {', '.join(map(str, fits[:8]))}")
    policy = policy_of(causal, alignment)
    s = CallShape((B, H, L, E), (B, Hkv, S, E), (B, Hkv, S, Ev), policy)
    code, bwd = JUDGE_CALLS[call]
    flag = "" if not causal else ", is_causal=True" if alignment == ALIGNMENTS[0] else \
        f", attn_mask=causal_lower_right({L}, {S})"
    ops = ("softmax", "scale_scores") if call == "math" else ("softmax",)
    c = AuditCall("judge", f"{call}, q {B}x{H}x{L}x{E}, k {B}x{Hkv}x{S}x{E}, "
                  f"v {B}x{Hkv}x{S}x{Ev}", "sdpa", s, code.format(causal=flag), ops=ops)
    return verdict(ledger(c, count_limit=COUNT_LIMIT), figure, per_mac,
                   backward=bwd if backward else None)


_WIDTH = {"forward": ("E", "E_v"), "backward": ("3 x E", "2 x E_v"),
          "backward_autograd": ("2 x E", "2 x E_v")}


def formula(j: Verdict, findings: tuple) -> tuple[str, str, Fraction]:
    """The figure of ``findings`` (in the judged unit) as a formula in the sizes, with the numbers, and its value.

    >>> formula(judge_figure(384, "flash", (1, 2, 6, 6, 4)), ("layout_swap",))[:2]
    ('2 x B x L x H x H_kv x (E + E_v)', '2 x 1 x 6 x 2 x 2 x (4 + 4)')
    """
    pass_ = j.pass_
    if "no_recompute" in findings or "recompute" in findings:
        pass_ = "backward_autograd" if pass_ == "backward" else "backward"
    we, wv = _WIDTH[pass_]
    width = {"scores_only": we, "mix_only": wv, "one_product": we}
    w = next((width[f] for f in findings if f in width), f"{we} + {wv}")
    w = w if " " not in w or w.count(" ") == 2 and "+" not in w else f"({w})"
    heads = "H_kv" if "kv_heads" in findings else "H"
    pairs = "P" if j.ledger.call.shape.policy.causal else "L x S"
    if "full_square" in findings:
        pairs = "L x S"
    if "causal_half" in findings:
        pairs = "(L x S / 2)"
    body = f"B x {heads} x {pairs} x {w}"
    if "layout_swap" in findings:
        body = f"B x L x H x H_kv x {w}"
    if "image_layout" in findings:   # each product over its own operands' channels
        body = f"B x L x E x S x ({we.replace('E', 'H x E')} + {wv.replace('E_v', 'H_kv x E_v')})"
    if "attention_twice" in findings:
        body = "2 x " + body
    unit = "1 x " if "macs_as_flops" in findings else "2 x " * (j.per_mac == 2)
    text = "0" if "omits_attention" in findings else f"{unit}{body}"
    for f in ("softmax", "scale"):   # a doubled attention ran its softmax twice too
        if f in findings:
            text += " + 2 x B x H x L x S" if f == "softmax" and "attention_twice" in findings \
                else " + B x H x L x S"
    sz = j.ledger.call.shape.shape
    values = {"B": sz["B"], "H_kv": sz["H_kv"], "H": sz["H_q"], "L": sz["L"], "S": sz["S"],
              "E_v": sz["E_v"], "E": sz["E"],
              "P": j.ledger.call.shape.pairs()}
    numbers = re.sub(r"\b(H_kv|E_v|B|H|L|S|E|P)\b", lambda m: str(values[m.group(1)]), text)
    value = eval(numbers.replace(" x ", " * ").replace("/ 2", "/ Fraction(2)"),
                 {"Fraction": Fraction, "__builtins__": {}})
    return text, numbers, Fraction(value)
