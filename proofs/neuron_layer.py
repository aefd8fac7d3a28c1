"""The projection is a row of bias-free neurons: the same flat weights give the same numbers.

Claim: projecting a token with W (d_k x d_model, slots layout) is the same
as feeding the token to d_k neurons, neuron s computing
sum_m w[s d_model + m] x[m] + 0 from the flat list of W's numbers read row by
row; in the rows layout (W stored d_model x d_k, q = x @ W) the same flat
list gives the same numbers.  (The slots layout is how ``torch.nn.Linear``
stores its weight, out x in; the rows layout is GPT-2's ``Conv1D``, in x out.)

Assumptions: W_Q, W_K, W_V and the tokens are free real symbols
(d_model = 3, d_k = d_v = 2, two tokens); then the chronicle example's own
numbers.

Derivation: exactattn's symbolic engine projects the tokens (queries, keys,
values) in the slots layout and again in the rows layout; the neuron layer
under test (``exactattn.present.tables.neuron_layer``, the one the project table's
cross-check uses) is fed the flat weights; every difference must expand to
0.  On the chronicle example the pencil engine's exact ``Fraction``
projections must equal the neurons' outputs, type and value.

Reference: the line under the projections table of ``exactattn project`` on
the built-in example ``chronicle`` ("the projection equals a row of bias-free
neurons fed the same flat weights: the same numbers: true"); Vaswani et al.
2017, sec. 3.2.2 (the projections W^Q_i, W^K_i, W^V_i).
"""

from __future__ import annotations

from fractions import Fraction

import sympy

from exactattn import Head, attend
from exactattn.examples import chronicle
from exactattn.proofs._support import Report, main, symbols_matrix
from exactattn.present.tables import neuron_layer

CLAIM = "the projection is a row of bias-free neurons: the same flat weights give the same numbers"


def _transpose(m):
    return [list(r) for r in zip(*m)]


def run(neurons=neuron_layer, *, out=None) -> bool:
    """Prove the claim for ``neurons(flat_weights, inputs, width)``."""
    report = Report(__file__, CLAIM, out)
    mats = [symbols_matrix(p, 2, 3) for p in ("a", "b", "c")]
    x = symbols_matrix("x", 2, 3)
    slots = attend(Head(*mats, symbolic=True), x, engine="symbolic")
    rows = attend(Head(*[_transpose(m) for m in mats], layout="rows", symbolic=True), x,
                  engine="symbolic")
    report.say("W_Q = a, W_K = b, W_V = c: 2 x 3 real symbols (slots layout); "
               "tokens x_i: 3 symbols")
    flat_q = [e for line in mats[0] for e in line]
    report.say(f"token 1, W_Q: neurons {neurons(flat_q, x[0], 2)}, projection {slots.queries[0]}")
    for label, got_slots, got_rows, m in (("queries", slots.queries, rows.queries, mats[0]),
                                          ("keys", slots.keys, rows.keys, mats[1]),
                                          ("values", slots.values, rows.values, mats[2])):
        flat = [e for line in m for e in line]
        residuals = [sympy.expand(a - b) for i, xs in enumerate(x)
                     for a, b in zip(neurons(flat, xs, len(m)), got_slots[i])]
        layouts = [sympy.expand(a - b) for r1, r2 in zip(got_slots, got_rows)
                   for a, b in zip(r1, r2)]
        report.check(label, all(r == 0 for r in residuals) and all(r == 0 for r in layouts),
                     f"neurons - slots projection: {residuals}; slots - rows layout: {layouts}")
    ex = chronicle()
    tr = attend(ex.head, ex.x, engine="pencil")
    same = True
    for name, got in (("W_Q", tr.queries), ("W_K", tr.keys), ("W_V", tr.values)):
        m = ex.head.weights(name, "slots")
        flat = [e for line in m for e in line]
        for i, xs in enumerate(tr.x):
            outs = neurons(flat, xs, len(m))
            same &= outs == list(got[i]) and all(type(o) is Fraction for o in outs)
    flat_q = [e for line in ex.head.weights("W_Q", "slots") for e in line]
    report.check("chronicle", same,
                 f"query of token 2 {[str(v) for v in tr.queries[1]]}, neurons "
                 f"{[str(v) for v in neurons(flat_q, tr.x[1], 4)]}; "
                 f"all 12 projections: the same numbers: {'true' if same else 'false'}")
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
