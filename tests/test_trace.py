"""One trace type: index errors, bulk decimals on every engine, causal heads with huge scores."""

import random
from fractions import Fraction as F

import pytest

from exactattn import Head, attend
from exactattn.examples import chronicle
from exactattn.trace import Trace


@pytest.mark.parametrize("engine", ["pencil", "fast", "symbolic"])
def test_every_engine_returns_one_trace_type(engine):
    ex = chronicle()
    t = attend(ex.head, ex.x, engine=engine)
    assert type(t) is Trace
    assert t.share_decimals(4)[1] == ["0.5800", "0.1216", "0.1769", "0.1216"]
    assert t.share(1, 0).decimal(4) == "0.5800"


@pytest.mark.parametrize("i,j", [(4, 0), (0, 4), (-1, 0), (0, -1), (True, 0), (0, 1.0)])
def test_indices_outside_the_shape_are_named(i, j):
    t = attend(chronicle().head, chronicle().x)
    with pytest.raises(IndexError, match="must be from 0 to 3"):
        t.share(i, j)


def test_output_index_names_the_value_column():
    t = attend(chronicle().head, chronicle().x)
    with pytest.raises(IndexError, match=r"value column must be from 0 to 3 \(got 4\)"):
        t.output(0, 4)


def test_causal_head_with_huge_scores_in_bulk():
    # the bulk path once overflowed on hidden entries above the row maximum
    t = attend(Head([[1]], [[1]], [[1]], causal=True), [[1], [10 ** 20]], engine="fast")
    assert t.share_decimals(4) == [["1.0000", "0.0000"], ["0.0000", "1.0000"]]
    assert t.output_decimals(2) == [["1.00"], ["100000000000000000000.00"]]


@pytest.mark.parametrize("seed", range(40))
def test_pencil_and_fast_agree_on_large_causal_scores(seed):
    rng = random.Random(seed)
    d = rng.randint(1, 3)
    causal = rng.random() < 0.7
    W = [[[F(rng.randint(-3, 3)) for _ in range(d)] for _ in range(d)] for _ in range(3)]
    head = Head(*W, causal=causal, divisor=rng.choice(["1", "2", "sqrt(3)", "none"]))
    n = rng.randint(1, 6)
    x = [[F(rng.randint(-10 ** 10, 10 ** 10)) for _ in range(d)] for _ in range(n)]
    pencil, fast = attend(head, x, engine="pencil"), attend(head, x, engine="fast")
    for places in (0, 4):
        assert fast.share_decimals(places) == pencil.share_decimals(places) == \
            [[pencil.share(i, j).decimal(places) for j in range(n)] for i in range(n)]
        assert fast.output_decimals(places) == pencil.output_decimals(places) == \
            [[pencil.output(i, c).decimal(places) for c in range(d)] for i in range(n)]
