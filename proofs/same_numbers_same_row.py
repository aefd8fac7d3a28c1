"""Two tokens with the same numbers get identical rows and identical outputs, wherever they sit.

Claim: if x_a = x_b then raw scores, shares and outputs of query a equal
those of query b, every query gives keys a and b equal shares, and the
token's output does not depend on where the pair sits in the row: attention
without a positional encoding cannot tell positions apart.

Assumptions: one head with symbolic projection matrices (slots layout,
d_model = d_k = d_v = 2, divisor sqrt(2)), three tokens: two copies of u = (u1, u2) and one
w = (w1, w2), in all three arrangements; no mask and no positional encoding.

Derivation: the attention under test (exactattn's symbolic engine by
default) computes every intermediate; for the two copies the differences of
raw-score rows, share rows, share columns and outputs must vanish
(``cancel``; a nonvanishing one is certified by a rational counterexample),
and u's output must be the same in every arrangement.  Then the chronicle
example (pencil engine): tokens 2 and 4 carry the same numbers (1, 0, 0, 0),
and their raw rows, exact shares and outputs coincide.

Reference: Vaswani et al. 2017, sec. 3.5 ("since our model contains no
recurrence and no convolution ... we must inject some information about the
relative or absolute position"); the built-in example ``chronicle``
(``exactattn scores``: "rows 2 and 4 are identical").
"""

from __future__ import annotations

import sympy

from exactattn import attend
from exactattn.examples import chronicle
from exactattn.proofs._support import (Report, decide_zero, exact_attention, main,
                                       symbols_matrix)

CLAIM = ("two tokens with the same numbers get identical rows and identical outputs, "
         "wherever they sit")


def _first_failure(pairs) -> str | None:
    for label, a, b in pairs:
        ok, why = decide_zero(a - b)
        if not ok:
            return f"{label}: {why}"
    return None


def run(attention=exact_attention, *, out=None) -> bool:
    """Prove the claim for ``attention(W_Q, W_K, W_V, x)`` (returns raw_scores, shares, outputs)."""
    report = Report(__file__, CLAIM, out)
    W_Q, W_K, W_V = (symbols_matrix(p, 2, 2) for p in ("q", "k", "v"))
    u = list(sympy.symbols("u1 u2", real=True))
    w = list(sympy.symbols("w1 w2", real=True))
    report.say("head: symbolic 2 x 2 W_Q, W_K, W_V; tokens: two copies of u = (u1, u2), "
               "one w = (w1, w2)")
    outputs_of_u = []
    for arrangement in ("uuw", "uwu", "wuu"):
        x = [u if c == "u" else w for c in arrangement]
        a, b = (i for i, c in enumerate(arrangement) if c == "u")
        tr = attention(W_Q, W_K, W_V, x)
        n = len(x)
        pairs = [(f"raw score ({a + 1},{j + 1}) vs ({b + 1},{j + 1})",
                  tr.raw_scores[a][j], tr.raw_scores[b][j]) for j in range(n)]
        pairs += [(f"share ({a + 1},{j + 1}) vs ({b + 1},{j + 1})",
                   tr.shares[a][j], tr.shares[b][j]) for j in range(n)]
        pairs += [(f"share ({i + 1},{a + 1}) vs ({i + 1},{b + 1})",
                   tr.shares[i][a], tr.shares[i][b]) for i in range(n)]
        pairs += [(f"output {a + 1} vs {b + 1}, column {c + 1}",
                   tr.outputs[a][c], tr.outputs[b][c]) for c in range(len(tr.outputs[a]))]
        failure = _first_failure(pairs)
        report.check(f"tokens {arrangement}", failure is None,
                     failure or f"rows {a + 1} and {b + 1} identical (raw scores, shares, "
                     f"outputs), columns {a + 1} and {b + 1} equal")
        outputs_of_u.append(tr.outputs[a])
    failure = _first_failure([(f"output of u, {arr} vs uuw, column {c + 1}", o[c],
                               outputs_of_u[0][c])
                              for arr, o in zip(("uwu", "wuu"), outputs_of_u[1:])
                              for c in range(len(o))])
    report.check("wherever they sit", failure is None,
                 failure or "u's output is the same in all three arrangements")
    ex = chronicle()
    tr = attend(ex.head, ex.x, engine="pencil")
    same_x = tr.x[1] == tr.x[3]
    same_raw = tr.raw_scores[1] == tr.raw_scores[3]
    same_shares = all(tr.share(1, j).closed_form() == tr.share(3, j).closed_form()
                      for j in range(tr.n))
    same_out = all(tr.output(1, c).closed_form() == tr.output(3, c).closed_form()
                   for c in range(tr.head.d_v))
    report.check("chronicle tokens 2 and 4", same_x and same_raw and same_shares and same_out,
                 f"x = {[str(v) for v in tr.x[1]]} for both; raw rows "
                 f"{[str(v) for v in tr.raw_scores[1]]} and {[str(v) for v in tr.raw_scores[3]]}; "
                 f"shares {'identical' if same_shares else 'differ'}, "
                 f"outputs {'identical' if same_out else 'differ'}")
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
