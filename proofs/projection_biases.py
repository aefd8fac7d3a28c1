"""Which projection biases cancel out of the shares and outputs: query, key and value bias, derived.

Claim: with biases, q_i = W_Q x_i + b_Q, k_j = W_K x_j + b_K,
v_j = W_V x_j + b_V, the raw score gains
s'_ij - s_ij = b_Q . k_j + q_i . b_K + b_Q . b_K.  Derived here, one bias at a
time, for the shares and for the outputs:
  query bias b_Q: shares change, outputs change;
  key bias b_K:   shares unchanged, outputs unchanged (it cancels);
  value bias b_V: shares unchanged, every output shifted by exactly b_V.
The verdicts are not typed in: each is decided from the head's own numbers.

Assumptions: one head with symbolic projection matrices and tokens (slots
layout, d_model = d_k = d_v = 2, divisor sqrt(2), three tokens, no mask).  A bias is
carried exactly as a bias-free head sees it: every token gets a constant
third number 1 and each weight matrix a third column holding its bias
(0 for the bias-free head).

Derivation: the attention under test (exactattn's symbolic engine by
default) runs the bias-free head and the head with one symbolic bias.  For
each bias: the score change is computed and tested for dependence on the key
j; every share difference and output difference is reduced (``cancel``) or
shown nonzero at a rational point (certified); for outputs that do not
cancel, out' - out - b is tried.  The verdict words come from those results
and are then compared with the claim.

Reference: Vaswani et al. 2017, sec. 3.2.1 (the projections are linear maps;
frameworks add biases: torch.nn.MultiheadAttention bias=True); the
shift_invariance and row_sums_to_one proofs are the two facts at work.
"""

from __future__ import annotations

import sympy

from exactattn.proofs._support import Report, decide_zero, exact_attention, main

CLAIM = ("a key bias cancels out of shares and outputs, a query bias does not, "
         "a value bias only shifts every output by itself")

EXPECTED = {
    "query": ("change", "change"),
    "key": ("unchanged", "unchanged"),
    "value": ("unchanged", "shifted by exactly the bias"),
}


def _weights(prefix: str, bias: list | None) -> list[list]:
    """2 x 3 slots-layout matrix: symbols in the first two columns, the bias (or 0) in the third."""
    return [[sympy.Symbol(f"{prefix}{s + 1}{m + 1}", real=True) for m in range(2)]
            + [bias[s] if bias else 0] for s in range(2)]


def _describe(delta, queries, keys, bias, i, j) -> str:
    dot = sympy.expand
    if dot(delta) == 0:
        return "0"
    if dot(delta - sum(b * k for b, k in zip(bias, keys[j]))) == 0:
        return "b . k_j"
    if dot(delta - sum(q * b for q, b in zip(queries[i], bias))) == 0:
        return "q_i . b"
    return str(delta)


def run(attention=exact_attention, *, out=None) -> bool:
    """Derive the three verdicts for ``attention(W_Q, W_K, W_V, x)`` and compare with the claim."""
    report = Report(__file__, CLAIM, out)
    x = [[sympy.Symbol(f"x{i + 1}{m + 1}", real=True) for m in range(2)] + [1] for i in range(3)]
    base = attention(_weights("q", None), _weights("k", None), _weights("v", None), x)
    n = len(x)
    report.say("head: symbolic 2 x 2 W_Q, W_K, W_V plus a bias column; "
               "tokens x_i = (x_i1, x_i2, 1)")
    for kind, prefix in (("query", "q"), ("key", "k"), ("value", "v")):
        bias = list(sympy.symbols(f"b{prefix}1 b{prefix}2", real=True))
        mats = [_weights(p, bias if p == prefix else None) for p in ("q", "k", "v")]
        tr = attention(*mats, x)
        delta = [[sympy.expand(tr.raw_scores[i][j] - base.raw_scores[i][j]) for j in range(n)]
                 for i in range(n)]
        per_key = any(sympy.expand(delta[i][j] - delta[i][0]) != 0
                      for i in range(n) for j in range(n))
        how = _describe(delta[0][1], base.queries, base.keys, bias, 0, 1)
        report.say(f"{kind} bias b = ({bias[0]}, {bias[1]}): raw score change s'_ij - s_ij = "
                   f"{how}, {'depends on the key j' if per_key else 'the same for every key j'}")
        share_checks = [decide_zero(tr.shares[i][j] - base.shares[i][j])
                        for i in range(n) for j in range(n)]
        share_fail = next((why for ok, why in share_checks if not ok), None)
        shares = "unchanged" if share_fail is None else "change"
        d_v = len(base.outputs[0])
        out_checks = [decide_zero(tr.outputs[i][c] - base.outputs[i][c])
                      for i in range(n) for c in range(d_v)]
        out_fail = next((why for ok, why in out_checks if not ok), None)
        outputs = "unchanged" if out_fail is None else "change"
        out_note = out_fail or f"every one of the {n * d_v} residuals 0"
        if out_fail is not None:
            shifted = [decide_zero(tr.outputs[i][c] - base.outputs[i][c] - bias[c])
                       for i in range(n) for c in range(d_v)]
            if all(ok for ok, _ in shifted):
                outputs = "shifted by exactly the bias"
                out_note = f"out' - out - b: every one of the {n * d_v} residuals 0"
        report.say(f"  shares: {shares} ({share_fail or f'every one of the {n * n} residuals 0'})")
        report.say(f"  outputs: {outputs} ({out_note})")
        derived = (shares, outputs)
        report.check(f"{kind} bias verdict", derived == EXPECTED[kind],
                     f"shares {shares}, outputs {outputs}")
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
