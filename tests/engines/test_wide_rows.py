"""Rows of many keys at 6 places: the bulk rounding used to wrap uint64 products.

With 537 keys or more at 6 places (about 5,400 at 5, 54,000 at 4) the bulk path of
``share_decimals`` and of row blocks multiplied uint64 exponentials by ``2 * 10^places``
and wrapped around without error, printing ``0.000000`` for shares of about 0.002.  These
tests compare the bulk digits with the independent oracle (``tests/oracle.py``) on such rows.
"""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np

from exactattn import Head, attend
from exactattn.blocks.certify import certify
from exactattn.blocks.engine import Engine
from exactattn.blocks import random_floats
from exactattn.call import Call
from oracle import Oracle

N = 600          # keys per row: past the old wrap-around at 6 places
CELLS = [(0, 0), (0, 311), (257, 5), (599, 598)]


def _case(queries, keys, values, D) -> dict:
    def text(m):
        return [[[[str(Fraction(e)) for e in r] for r in m]]]
    return {"query": text(queries), "key": text(keys), "value": text(values),
            "scale": {"divisor_squared": str(D)}}


def test_share_decimals_at_six_places_on_600_keys_match_the_oracle():
    rng = random.Random(5)
    x = [[Fraction(rng.randint(-3, 3), rng.randint(1, 4)) for _ in range(2)] for _ in range(N)]
    W = [[Fraction(rng.randint(-2, 2), 2) for _ in range(2)] for _ in range(2)]
    trace = attend(Head(W, W, W), x, engine="fast")
    got = trace.share_decimals(6)
    rows = sorted({i for i, _ in CELLS})          # the oracle reads just these query rows
    oracle = Oracle(_case([trace.queries[i] for i in rows], trace.keys, trace.values, 2))
    for i, j in CELLS:
        want = oracle.decimal("shares", (0, 0, rows.index(i), j), 6)
        assert want is not None and want != "0.000000"
        assert got[i][j] == want, (i, j)
    assert sum(row.count("0.000000") for row in got) < N * N // 100


def test_row_blocks_at_six_places_on_600_keys_match_the_oracle():
    inputs = Call.from_floats(*random_floats(4, 2, seed=3, dtype="float32", n_keys=N, d_v=1)).head()
    with Engine("none") as engine:
        blocks = list(certify(inputs, 6, engine=engine, rows=2))
    shares = [r for b in blocks for r in b.shares]
    q, k, v = random_floats(4, 2, seed=3, dtype="float32", n_keys=N, d_v=1)
    oracle = Oracle(_case([[Fraction(float(e)) for e in r] for r in q],
                          [[Fraction(float(e)) for e in r] for r in k],
                          [[Fraction(float(e)) for e in r] for r in v], 2))
    scores = q.astype("float64") @ k.astype("float64").T     # to pick cells, not to judge them
    for i in range(4):
        for j in (int(scores[i].argmax()), int(scores[i].argsort()[N // 2])):
            want = oracle.decimal("shares", (0, 0, i, j), 6)
            assert want is not None and want != "0.000000"
            assert shares[i][j] == want, (i, j)


def test_float32_entries_take_the_bulk_path_with_the_oracle_s_digits():
    """Exact float32 entries put the scores over a 100+-bit common denominator; the bulk path
    counts gaps in steps of 2^shift instead of refusing them to the per-entry path."""
    from exactattn.numbers import bulk
    rng = np.random.default_rng(7)
    n, d = 24, 4
    x = rng.standard_normal((n, d)).astype("float32")
    Ws = [(rng.standard_normal((d, d)) / 2).astype("float32") for _ in range(3)]
    exact = [[Fraction(float(v)) for v in r] for r in x]
    head = Head(*[[[Fraction(float(v)) for v in r] for r in W] for W in Ws], causal=True)
    trace = attend(head, exact, engine="fast")
    (num, den), (vnum, vden) = trace.reference.score_ints(0, 0), trace.call.numerators("value")
    vnum = vnum[0, 0]
    assert den.bit_length() > 100            # one table entry per score unit would be too many
    got = bulk.decimals(num, den, head.divisor_squared, head.policy.keep(n, n), vnum, vden, 6)
    assert got is not None
    shares, outputs, (share_cells, output_cells) = got
    assert len(share_cells) + len(output_cells) < n
    oracle = Oracle({**_case(trace.queries, trace.keys, trace.values, d), "causal": True})
    for i in range(0, n, 5):
        for j in range(i + 1):
            if (i, j) not in share_cells:
                assert shares[i][j] == oracle.decimal("shares", (0, 0, i, j), 6), (i, j)
        for c in range(d):
            if (i, c) not in output_cells:
                assert outputs[i][c] == oracle.decimal("outputs", (0, 0, i, c), 6), (i, c)
