"""One trace type: index errors, bulk decimals on every engine, causal heads with huge scores."""

import random
from fractions import Fraction as F

import pytest

from exactattn import Head, attend
from exactattn.examples import chronicle
from exactattn.engines.trace import Trace


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


# ------------------------------------------------------- astronomical magnitudes cost little
ASTRONOMICAL = {
    "divisor 1e-4000": (dict(divisor="1e-4000"), [[1], [2], [3]], [["1"]] * 3),
    "entries 6e1000": ({}, [["6e1000"], ["4e1000"]], [["1"]] * 3),
    "weight 1e4000": ({}, [[1], [2]], [["1e4000"], ["1"], ["1"]]),
    "entries 1e200": ({}, [["1e200"], ["2e200"], ["3e200"], ["-1e200"]], [["1"]] * 3),
}


@pytest.mark.parametrize("name", sorted(ASTRONOMICAL))
def test_astronomical_inputs_are_decided_from_a_bound_on_the_gap(name, monkeypatch):
    # the work is bounded by precision, not by wall time: with at most 2^13 bits allowed,
    # a gap of 10^8000 must still be decided (exp is never computed to that precision)
    from exactattn.numbers import digits
    monkeypatch.setattr(digits, "MAX_PREC", 1 << 13)
    kwargs, x, (wq, wk, wv) = ASTRONOMICAL[name]
    head = Head([wq], [wk], [wv], **kwargs)
    for engine in ("pencil", "fast"):
        t = attend(head, x, engine=engine)
        shares = t.share_decimals(4)
        assert all(row.count("1.0000") == 1 and row.count("0.0000") == len(row) - 1
                   for row in shares) or name == "entries 1e200"
        outs = t.output_decimals(4)
        assert outs == [[t.output(i, 0).decimal(4)] for i in range(t.n)]


def test_a_huge_output_prints_every_digit():
    t = attend(Head([[1]], [[1]], [[1]]), [["6e1000"], ["4e1000"]])
    assert t.output_decimals(2) == [["6" + "0" * 1000 + ".00"]] * 2


@pytest.mark.parametrize("tokens,W_V,argv,cell", [
    # one key dominates by a gap of 90,000: the outputs and shares lie within e^-90000
    # of a rounding boundary, on its known side
    ([[300], [0]], [["0.0000005"]], [], ("1", "0.0001")),
    ([[300], [300], [0]], [[1]], ["--digits", "0"], ("1", "0")),
    ([[300]] * 8 + [[0]], [[1]], ["--digits", "2"], ("1", "0.12")),
])
def test_values_within_e_to_the_minus_gap_of_a_boundary_print_from_the_cli(
        tokens, W_V, argv, cell, tmp_path, capsys):
    import json
    from exactattn.cli import main
    spec = tmp_path / "h.json"
    spec.write_text(json.dumps({"tokens": [{"x": t} for t in tokens], "W_Q": [[1]],
                                "W_K": [[1]], "W_V": W_V}))
    assert main(["scores", "--spec", str(spec), *argv]) == 0
    out = capsys.readouterr().out
    row, value = cell
    assert any(line.split()[:2] == [row, value] for line in out.splitlines()), out


@pytest.mark.parametrize("engine", ["pencil", "fast"])
@pytest.mark.parametrize("changes", [{}, {"causal": True, "sink": F(0)}, {"window": (1, 0)},
                                     {"empty_row": "uniform", "causal": True,
                                      "query_offset": -1}])
def test_a_trace_is_a_call_and_agrees_with_its_reference(engine, changes):
    """Call.of_head: the trace's head and tokens as one Call; every share, output and lse of
    the trace equals the Reference of that call, entry by entry."""
    from exactattn import Reference
    ex = chronicle()
    head = ex.head.with_policy(ex.head.policy.replace(**changes))
    t = attend(head, ex.x, engine=engine)
    c = t.call
    assert c.shape == {"B": 1, "H_q": 1, "H_kv": 1, "L": 4, "S": 4, "E": 4, "E_v": 4}
    assert c.query[0, 0].tolist() == t.queries and c.value[0, 0].tolist() == t.values
    r = Reference(c)
    for i in range(4):
        assert [r.share(0, 0, i, j) for j in range(4)] == [t.share(i, j) for j in range(4)]
        assert [r.output(0, 0, i, k) for k in range(4)] == [t.output(i, k) for k in range(4)]
        assert r.lse(0, 0, i) == t.lse(i)


def test_a_head_with_symbols_is_no_call():
    import sympy
    from exactattn.errors import InputError
    t = attend(Head([[sympy.Symbol("a")]], [[1]], [[1]], symbolic=True), [[1]])
    with pytest.raises(InputError, match=r"^head and tokens must hold numbers for a call \(got "
                                         r"symbols\); substitute numbers first$"):
        t.call
