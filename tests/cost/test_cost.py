"""The cost module: counted = derived, the seed table, crossover, doubling, extensions, CLI."""

import json
import os
import random
from fractions import Fraction as F
from pathlib import Path

import numpy as np
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from exactattn import Head, attend
from exactattn.commands.cost_tables import conventions_sections, cost_sections
from exactattn.cost import (EXTENSION_SYMBOLS, SYMBOLS, count, count_head, count_tokens,
                            crossover, decode_steps, derive, derive_at, derive_operations,
                            doubling_ratio, loop_nests, run)
from exactattn.cost.conventions import CONVENTIONS
from exactattn.errors import InputError
from exactattn.testing import assert_typed_equal as typed_equal

n, D, d_k, d_v = SYMBOLS
m, t, h, L = EXTENSION_SYMBOLS
GOLDEN = Path(__file__).parents[1] / "golden" / "cost"
UPDATE = os.environ.get("EXACTATTN_UPDATE_GOLDEN") == "1"
FORMATS = {"text": "txt", "markdown": "md", "latex": "tex", "json": "json", "csv": "csv"}


# --- the derivation from the loop nests ------------------------------------------------

def test_symbols_are_positive_integers():
    for s in SYMBOLS + EXTENSION_SYMBOLS:
        assert isinstance(s, sympy.Symbol) and s.is_positive and s.is_integer
    assert [str(s) for s in SYMBOLS] == ["n", "D", "d_k", "d_v"]


def test_derive_no_mask():
    got = derive()
    assert list(got) == ["projections", "scores", "mix", "total"]
    assert got["projections"] == 2 * n * D * d_k + n * D * d_v
    assert got["scores"] == n ** 2 * d_k
    assert got["mix"] == n ** 2 * d_v
    seed = derive(d_v=d_k)
    assert seed["projections"] == 3 * n * D * d_k
    assert seed["total"] == 3 * n * D * d_k + 2 * n ** 2 * d_k
    assert all(isinstance(v, sympy.Expr) for v in seed.values())


def test_derive_is_the_sum_of_the_nests():
    nests = loop_nests()
    assert [x.name for x in nests["projections"]] == ["queries", "keys", "values"]
    for stage, expr in derive().items():
        if stage != "total":
            assert sympy.expand(sum(x.macs() for x in nests[stage]) - expr) == 0
    # the causal bound j <= i is in the nest, not in a typed formula
    (scores,) = loop_nests(causal=True)["scores"]
    assert scores.loops[1][2] == sympy.Symbol("i", integer=True, nonnegative=True)
    assert derive(causal=True)["scores"] == sympy.expand(n * (n + 1) / 2 * d_k)
    assert derive(causal=True)["scores"] != sympy.expand(n ** 2 / 2 * d_k)


def test_derive_is_deterministic():
    """Two fresh interpreters (different hash seeds, so no shared cache and no set or
    dict order carried over) derive the same expressions, printed alike, and equal to
    this process's own; derive() caches, so calling it twice here proves nothing."""
    import subprocess
    import sys
    cases = ["derive()", "derive(causal=True, heads=h)", "derive(causal=True, keys=m)",
             "derive(decode=True, heads=h, d_v=d_k)", "derive(layers=L, d_v=d_k)"]
    code = ("import json, sys, sympy\n"
            "from exactattn.cost import EXTENSION_SYMBOLS, SYMBOLS, derive\n"
            "n, D, d_k, d_v = SYMBOLS\n"
            "m, t, h, L = EXTENSION_SYMBOLS\n"
            "print(json.dumps([[[k, str(v), sympy.srepr(v)] for k, v in eval(c).items()]\n"
            "                  for c in json.loads(sys.argv[1])]))\n")
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])
    procs = [subprocess.Popen([sys.executable, "-c", code, json.dumps(cases)], cwd=root,
                              env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": path},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for seed in ("0", "12345")]  # run side by side
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outs.append(json.loads(out))
    assert outs[0] == outs[1]
    for case, got in zip(cases, outs[0]):
        here = eval(case, {"derive": derive, "h": h, "m": m, "L": L, "d_k": d_k})
        assert [k for k, _, _ in got] == list(here), case
        for k, text, tree in got:
            assert text == str(here[k]) and tree == sympy.srepr(here[k]), (case, k)
            assert sympy.sympify(tree) == here[k], (case, k)  # rebuilt, compared by value


def test_operations_k_minus_one_additions():
    ops = derive_operations(d_v=d_k)
    assert ops["projections"] == (3 * n * D * d_k, sympy.expand(3 * n * d_k * (D - 1)))
    assert ops["scores"] == (n ** 2 * d_k, sympy.expand(n ** 2 * (d_k - 1)))
    assert ops["mix"] == (n ** 2 * d_k, sympy.expand(n * d_k * (n - 1)))


def test_extension_formulas():
    assert derive(heads=h, d_v=d_k)["out_projection"] == n * h * d_k * D
    assert derive(heads=h, d_v=d_k)["projections"] == 3 * h * n * D * d_k
    assert derive(layers=L, d_v=d_k)["total"] == sympy.expand(L * (3 * n * D * d_k +
                                                                   2 * n ** 2 * d_k))
    step = derive(decode=True, d_v=d_k)
    assert step["projections"] == 3 * D * d_k and step["scores"] == t * d_k
    summed = {k: sympy.expand(sympy.summation(v, (t, 1, n))) for k, v in
              derive(decode=True).items()}
    assert summed == derive(causal=True)
    # keys m >= n, bottom_right: query i sees i + m - n + 1 keys
    br = derive(causal=True, alignment="bottom_right", keys=n + m)["scores"]
    assert br == sympy.expand(d_k * (n * (n + 1) / 2 + n * m))
    pw = derive(causal=True, keys=m)["scores"]
    assert isinstance(pw, sympy.Piecewise)
    assert pw.subs({n: 4, m: 2, d_k: 1}) == 7 and pw.subs({n: 4, m: 6, d_k: 1}) == 10


# --- counted by running the head ----------------------------------------------------

def test_seed_count_is_the_engine_count():
    got = count(4, 4, 4)
    typed_equal(got, {"projections": 192, "scores": 64, "mix": 64, "total": 320})
    for k in got:
        assert type(got[k]) is int
    # the same figures as the pencil trace of the chronicle head
    from exactattn.examples import chronicle
    ex = chronicle()
    assert attend(ex.head, ex.x, engine="pencil").macs == \
        {k: v for k, v in got.items() if k != "total"}


@pytest.mark.parametrize("causal", [False, True])
def test_derived_equals_counted_for_every_n_up_to_64(causal):
    exprs = derive(causal=causal, d_v=d_k)
    for k in range(1, 65):
        counted = count(k, 4, 4, causal=causal)
        derived = {s: int(e.subs({n: k, D: 4, d_k: 4})) for s, e in exprs.items()}
        assert counted == derived, k


@given(st.integers(1, 9), st.integers(1, 5), st.integers(1, 4), st.integers(1, 4),
       st.booleans(), st.sampled_from([None, 1, 2]), st.sampled_from(["none", "keys",
                                                                       "decode", "layers"]),
       st.sampled_from(["top_left", "bottom_right"]), st.integers(1, 9))
def test_derived_equals_counted_drawn(k, dm, dk, dv, causal, heads, extra, align, keys):
    opts = {"causal": causal, "heads": heads}
    if extra == "keys":
        opts.update(keys=keys, alignment=align)
    elif extra == "decode":
        opts = {"decode": True, "heads": heads}
    elif extra == "layers":
        opts["layers"] = 2
        if heads is None:
            dv = dm
    counted = count(k, dm, dk, dv, **opts)
    assert counted == derive_at(k, dm, dk, dv, **opts)
    assert all(type(v) is int for v in counted.values())


def test_pencil_integer_loops_agree_with_the_symbolic_engine():
    rnd = random.Random(3)
    for _ in range(20):
        dm, dk, dv, k = (rnd.randint(1, 3) for _ in range(4))
        W = [[[F(rnd.randint(-3, 3), rnd.randint(1, 3)) for _ in range(dm)]
              for _ in range(w)] for w in (dk, dk, dv)]
        head = Head(*W, causal=rnd.random() < 0.5, divisor="sqrt(2)")
        x = [[F(rnd.randint(-2, 2), 2) for _ in range(dm)] for _ in range(k)]
        a, b = attend(head, x, engine="pencil"), attend(head, x, engine="symbolic")
        assert a.macs == b.macs
        assert [[sympy.Rational(e.numerator, e.denominator) for e in r] for r in a.queries] \
            == b.queries
        for i in range(k):
            for j in range(k):
                r = a.raw_scores[i][j]
                assert (r is None and b.raw_scores[i][j] is None) or \
                    sympy.Rational(r.numerator, r.denominator) == b.raw_scores[i][j]
            assert all(type(e) is F for e in a.keys[i] + a.values[i])


def test_count_inputs_are_the_documented_ones():
    assert count_head(4, 4, 4).W_K[2] == [F(0), F(0), F(1), F(1, 2)]
    assert count_tokens(6, 4)[5] == [F(1), F(0), F(0), F(0)]


# --- causal alignment, decoding, heads, layers --------------------------------------

@pytest.mark.parametrize("keys, align, pairs", [
    (6, "top_left", 10), (6, "bottom_right", 18), (2, "top_left", 7), (2, "bottom_right", 3),
    (4, "top_left", 10), (4, "bottom_right", 10)])
def test_alignment_pairs(keys, align, pairs):
    got = count(4, 4, 1, 1, causal=True, keys=keys, alignment=align)
    assert got["scores"] == pairs and got["mix"] == pairs
    assert got == derive_at(4, 4, 1, 1, causal=True, keys=keys, alignment=align)


def test_decode_steps_sum_to_the_causal_prefill():
    steps = decode_steps(10, 4, 4)
    assert [s["total"] for s in steps] == [48 + 8 * k for k in range(1, 11)]
    total = {k: sum(s[k] for s in steps) for k in steps[0]}
    assert total == count(10, 4, 4, causal=True) == count(10, 4, 4, decode=True)


def test_decode_outputs_equal_the_causal_prefill_outputs():
    dec = run(7, 3, 2, 2, decode=True)
    pre = run(7, 3, 2, 2, causal=True)
    for i in range(7):
        for c in range(2):
            (a,), (b,) = dec.outputs[i][c].terms, pre.outputs[i][c].terms
            assert a.numerators == b.numerators
            assert a.closed_form() == b.closed_form()


def test_heads_with_output_projection_match_a_float_reference():
    r = run(3, 4, 2, 2, heads=2)
    assert r.macs == {"projections": 2 * 3 * 4 * 6, "scores": 2 * 9 * 2, "mix": 2 * 9 * 2,
                      "out_projection": 3 * 4 * 4, "total": 144 + 72 + 48}
    x = np.array([[float(e) for e in row] for row in count_tokens(3, 4)])
    outs = []
    for a in range(2):
        hd = count_head(4, 2, 2, a)
        Wq, Wk, Wv = (np.array([[float(e) for e in row] for row in w])
                      for w in (hd.W_Q, hd.W_K, hd.W_V))
        s = (x @ Wq.T) @ (x @ Wk.T).T / np.sqrt(2.0)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        outs.append(p @ (x @ Wv.T))
    Wo = np.array([[((d + 2 * c) % 5 - 2) / 2 for c in range(4)] for d in range(4)])
    want = np.concatenate(outs, axis=1) @ Wo.T
    for i in range(3):
        for c in range(4):
            assert abs(float(r.outputs[i][c].decimal(12)) - want[i, c]) < 1e-9  # float64 ref


def test_layers_count_each_layer():
    one, two = count(5, 4, 4), count(5, 4, 4, layers=2)
    assert two == {k: 2 * v for k, v in one.items()}
    three = count(4, 4, 2, heads=2, layers=3)
    assert three["out_projection"] == 3 * 4 * 4 * 4


# --- crossover and doubling ----------------------------------------------------------

def test_crossover_seed():
    c = crossover(4)
    assert c.first == 7 and c.equal_at == 6 and c.threshold == 6
    assert c.condition == sympy.StrictGreaterThan(n, sympy.Rational(3, 2) * D)
    assert c.at(6) == (288, 288)
    counted = count(6, 4, 4)
    assert counted["scores"] + counted["mix"] == counted["projections"] == 288
    c7 = count(7, 4, 4)
    assert c7["scores"] + c7["mix"] > c7["projections"]
    assert crossover(4096).first == 6145


@pytest.mark.parametrize("opts, first, equal", [
    ({"causal": True}, 12, 11), ({"heads": 2}, 9, 8), ({"decode": True}, 7, 6),
    ({"layers": 3}, 7, 6)])
def test_crossover_extensions_against_counts(opts, first, equal):
    c = crossover(4, **opts)
    assert (c.first, c.equal_at) == (first, equal)
    copts = {k: v for k, v in opts.items() if k != "decode"}
    if opts.get("decode"):
        steps = decode_steps(first, 4, 4)
        p = [s["scores"] + s["mix"] for s in steps]
        lin = [s["projections"] for s in steps]
        assert p[equal - 1] == lin[equal - 1] and p[first - 1] > lin[first - 1]
        return
    at_eq, at_first = count(equal, 4, 4, **copts), count(first, 4, 4, **copts)
    linear = ("projections", "out_projection")
    assert sum(at_eq[k] for k in ("scores", "mix")) == sum(at_eq.get(k, 0) for k in linear)
    assert sum(at_first[k] for k in ("scores", "mix")) > \
        sum(at_first.get(k, 0) for k in linear)


def test_doubling_ratio():
    r = doubling_ratio()
    assert sympy.simplify(r.expr - (8 * n + 6 * D) / (2 * n + 3 * D)) == 0
    assert r.limit == 4
    totals = [count(k, 4, 4)["total"] for k in (4, 8, 16, 32)]
    for k, (a, b) in zip((4, 8, 16), zip(totals, totals[1:])):
        typed_equal(r.at(k, 4), F(b, a))
    typed_equal(r.at(1000, 4096), F(2036, 893))
    assert sympy.solve(r.expr - sympy.Rational(7, 2), n) == [sympy.Rational(9, 2) * D]


# --- tables and CLI ------------------------------------------------------------------

def test_seed_table():
    (s,) = cost_sections()
    assert [r[:6] for r in s.rows] == [
        ["4", "192", "128", "320", "-", "40.0%"], ["8", "384", "512", "896", "2.80", "57.1%"],
        ["16", "768", "2048", "2816", "3.14", "72.7%"],
        ["32", "1536", "8192", "9728", "3.45", "84.2%"]]
    assert all(r[6] == "counted" for r in s.rows)
    assert "  3 x n x D x d_k = 3 x 32 x 4 x 4 = 1536" in s.notes
    assert "  2 x n x n x d_k = 2 x 32 x 32 x 4 = 8192" in s.notes
    assert "  same: true" in s.notes
    assert any("from n = 7" in x and "288 and 288" in x for x in s.notes)


def test_rows_too_large_are_marked_derived():
    (s,) = cost_sections([4, 64], count_limit=1000)
    assert s.rows[0][-1] == "counted"
    assert s.rows[1][-1].startswith("derived (not run")
    assert s.rows[1][3] == str(derive_at(64, 4, 4)["total"])
    assert "check at n = 4:" in s.notes
    (s,) = cost_sections([64], count_limit=1000)
    assert any("none counted" in x for x in s.notes)


def check_golden(name, text):
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; run with EXACTATTN_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_golden_cost(cli, fmt):
    rc, out, err = cli("cost", "--format", fmt)
    assert rc == 0 and err == ""
    check_golden(f"cost.{FORMATS[fmt]}", out)


@pytest.mark.parametrize("name, argv", [
    ("cost-causal", ["--causal"]), ("cost-heads", ["--heads", "2", "--d-k", "2"]),
    ("cost-decode", ["--decode"]), ("cost-layers", ["--layers", "2"]),
    ("cost-keys", ["--causal", "--keys", "16", "--align", "bottom_right"]),
    ("cost-conventions", ["--conventions"])])
def test_golden_cost_extensions(cli, name, argv):
    rc, out, err = cli("cost", *argv)
    assert rc == 0 and err == ""
    check_golden(f"{name}.txt", out)


def test_json_carries_the_numbers(cli):
    rc, out, _ = cli("cost", "--format", "json", "--rows", "6,7")
    doc = json.loads(out)
    rows = doc["tables"][0]["data"]["rows"]
    assert [(r["tokens"], r["projections"], r["pairs"]) for r in rows] == \
        [(6, 288, 288), (7, 336, 392)]
    assert doc["tables"][0]["data"]["crossover"]["first"] == 7


def test_conventions(cli):
    rc, out, _ = cli("cost", "--conventions")
    assert rc == 0
    for text in ("FLOPs = 2 x MACs", "k - 1 additions", "n(n+1)/2", "PaLM", "Kaplan",
                 "-16 pairs", "+496 pairs"):
        assert text in out
    s = conventions_sections(7)
    assert [r[2] for r in s[0].rows] == ["49", "28", "49", "49/2", "28"]
    assert [c.key for c in CONVENTIONS] == ["full", "half", "exact"]


@pytest.mark.parametrize("argv, message", [
    (["--rows", ""], "--rows must be a comma-separated list"),
    (["--rows", "0"], "--rows must be"),
    (["--rows=-4,8"], "--rows must be"),
    (["--rows", "4,,8"], "--rows must be"),
    (["--rows", "2.5"], "--rows must be"),
    (["--rows", "four"], "--rows must be"),
    (["--d-model", "0"], "--d-model must be a whole number from 1 to 1000000000000 (got '0')"),
    (["--d-model=-3"], "--d-model must be a whole number from 1 to 1000000000000 (got '-3')"),
    (["--d-model", "1e3000"], "--d-model must be a whole number from 1 to 1000000000000 "
                              "(got '1e3000')"),
    (["--d-k", "1.5"], "--d-k must be a whole number from 1 to 1000000000000 (got '1.5')"),
    (["--d-k", "abc"], "--d-k must be a whole number from 1 to 1000000000000 (got 'abc')"),
    (["--rows", "4," + "9" * 2150], "--rows must be a whole number from 1 to 1000000000000 "
                                    "(got '9999"),
    (["--keys", "1" + "0" * 12 + "1"], "--keys must be a whole number from 1 to 1000000000000"),
    (["--causal", "--align", "top-left"],
     "--align must be one of top_left, bottom_right (got 'top-left'); write --align top_left"),
    (["--causal", "--align", "middle"],
     "--align must be one of top_left, bottom_right (got 'middle')"),
    (["--format", "yaml"], "--format must be one of text, "),
    (["--d-v", "0"], "--d-v must be"),
    (["--heads", "0"], "--heads must be"),
    (["--layers=-1"], "--layers must be"),
    (["--keys", "x"], "--keys must be"),
    (["--count-limit", "0"], "--count-limit must be"),
    (["--align", "top_left"], "--align needs --causal"),
    (["--decode", "--keys", "4"], "--keys must be left out with --decode"),
    (["--layers", "2", "--d-v", "3"],
     "--d-v must equal --d-model = 4 to stack --layers without --heads (got --d-v 3); "
     "pass --d-v 4, or --heads 1 to add W_O"),
    (["--layers", "2", "--d-k", "2"], "(got d_v = --d-k = 2)"),
    (["--layers", "2", "--keys", "4"], "--layers must be 1 with --keys (got --layers 2 and "
                                       "--keys 4)"),
    (["--decode", "--causal", "--align", "bottom_right"],
     "--align must be left out with --decode (got --align bottom_right)"),
    (["--count-limit", "1000000001"],
     "--count-limit must be a whole number from 1 to 1000000000 (got '1000000001')"),
    (["--rows", ",".join(["4"] * 101)],
     "--rows must be a comma-separated list of 1 to 100 whole numbers (got '4,4,4"),
    (["--d-k", "9" * 99 + "x"], "--d-k must be a whole number from 1 to 1000000000000 (got '"
                                + "9" * 20),
    (["--count-limit", "1000000000", "--rows", "4000"],
     "--count-limit must leave at most about 30 s of counting (got --count-limit 1000000000: "
     "128192000 MACs to count by running the head, about "),
    (["--conventions", "--count-limit", "1000000000", "--rows", "4000"],
     "--count-limit must leave at most about 30 s of counting (got --count-limit 1000000000: "
     "192400000 MACs to count by running the head, about 2 minutes); pass --count-limit "
     "128191999 (or less) to derive the exact rows instead, or fewer tokens"),
])
def test_cli_bad_input(cli, argv, message):
    rc, out, err = cli("cost", *argv)
    assert rc == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("exactattn: error: ")
    assert message in err
    assert len(err) < 400  # a long value is echoed shortened


@pytest.mark.parametrize("call, message", [
    (lambda: count(0, 4, 4), "n must be a positive whole number (got 0)"),
    (lambda: count(-2, 4, 4), "n must be a positive whole number (got -2)"),
    (lambda: count(2.5, 4, 4), "n must be a positive whole number (got 2.5)"),
    (lambda: count(True, 4, 4), "n must be a positive whole number (got True)"),
    (lambda: count("4", 4, 4), "n must be a positive whole number (got '4')"),
    (lambda: count(4, 0, 4), "d_model must be a positive whole number (got 0)"),
    (lambda: count(4, 4, 4, 0), "d_v must be a positive whole number (got 0)"),
    (lambda: count(4, 4, 4, heads=0), "heads must be a positive whole number (got 0)"),
    (lambda: count(4, 4, 4, causal="yes"), "causal must be true or false (got 'yes')"),
    (lambda: count(4, 4, 4, alignment="middle"),
     "alignment must be one of top_left, bottom_right (got 'middle')"),
    (lambda: count(4, 4, 4, alignment="top-left"),
     "alignment must be one of top_left, bottom_right (got 'top-left'); write 'top_left'"),
    (lambda: count(4, 4, 4, keys=3, layers=2), "layers must be 1 when keys is set"),
    (lambda: derive(decode=True, keys=m), "keys must be left unset with decode"),
    (lambda: cost_sections([]), "rows must be a non-empty list of token counts (got [])"),
    (lambda: cost_sections([4, 0]), "each row must be a positive whole number (got 0)"),
    (lambda: crossover(0), "D must be a positive whole number (got 0)"),
    (lambda: doubling_ratio().at(0, 4), "n must be a positive whole number (got 0)"),
    (lambda: loop_nests(causal=True, keys=m), "keys_at_least_queries must be True or False"),
])
def test_api_bad_input(call, message):
    with pytest.raises(InputError) as e:
        call()
    assert isinstance(e.value, ValueError)
    assert message in str(e.value)


# --- every option is honoured or refused (never silently ignored) ------------------

@pytest.mark.parametrize("argv, both", [
    (["--decode"], "--decode must be left out with --conventions (got both)"),
    (["--keys", "9"], "--keys must be left out with --conventions (got --keys 9)"),
    (["--causal", "--align", "bottom_right"],
     "--align must be left out with --conventions (got --align bottom_right)"),
    (["--rows", "4,8"], "--rows must be one token count with --conventions (got 4,8); "
                        "pass e.g. --rows 8"),
])
def test_conventions_refuses_options_it_would_not_use(cli, argv, both):
    rc, out, err = cli("cost", "--conventions", *argv)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("exactattn: error: " + both)
    if "drop" in err:
        assert "drop --conventions" in err


def test_conventions_honours_count_limit(cli):
    rc, counted, _ = cli("cost", "--conventions", "--rows", "8", "--format", "json")
    rc2, derived, _ = cli("cost", "--conventions", "--rows", "8", "--count-limit", "100",
                          "--format", "json")
    assert rc == rc2 == 0
    a, b = json.loads(counted)["tables"], json.loads(derived)["tables"]
    assert a[0]["data"]["source"] == "counted" and b[0]["data"]["source"] == "derived"
    # the derived figures are the counted ones (8 tokens: 64 and 36 pairs, 8 MACs a pair)
    for doc, how in ((a, "counted"), (b, "derived")):
        assert doc[0]["data"]["conventions"][:2] == [
            {"convention": f"exact, no mask ({how})", "pairs": "64", "pair_macs": "512",
             "pair_flops": "1024"},
            {"convention": f"exact, causal ({how})", "pairs": "36", "pair_macs": "288",
             "pair_flops": "576"}]
    assert a[1]["data"]["stages"] == b[1]["data"]["stages"]
    assert a[1]["data"]["softmax_ops"] == run(8, 4, 4).softmax_ops
    assert b[1]["data"]["softmax_ops"] is None
    rc, out, _ = cli("cost", "--conventions", "--rows", "8", "--count-limit", "100")
    assert "not run: 896 MACs are over the count limit of 100" in out
    assert "softmax: not counted" in out and "MACs (derived)" in out


def test_conventions_at_a_large_n_are_derived_quickly(cli):
    rc, out, _ = cli("cost", "--conventions", "--rows", "100000", "--format", "json")
    doc = json.loads(out)["tables"]
    assert rc == 0 and doc[0]["data"]["source"] == "derived"
    assert doc[0]["data"]["conventions"][1]["pairs"] == str(100000 * 100001 // 2)
    assert doc[1]["data"]["stages"]["scores"]["macs"] == 4 * 100000 ** 2


def test_conventions_honour_heads_and_layers(cli):
    _, out, _ = cli("cost", "--conventions", "--rows", "4", "--heads", "2", "--layers", "3",
                     "--d-k", "2", "--format", "json")
    doc = json.loads(out)["tables"]
    assert "h = 2 heads, L = 3 layers" in doc[0]["notes"][0]
    # pair MACs = pairs x (d_k + d_v) x h x L = 10 x 4 x 2 x 3
    assert doc[0]["data"]["conventions"][1]["pair_macs"] == "240"
    assert doc[1]["data"]["stages"]["out_projection"]["macs"] == \
        count(4, 4, 2, heads=2, layers=3)["out_projection"]


def _option_values():
    """A non-default value for every option of ``cost`` (new options must be added here)."""
    return {"--rows": ["5"], "--d-model": ["3"], "--d-k": ["2"], "--d-v": ["3"],
            "--causal": [], "--align": ["bottom_right"], "--keys": ["9"], "--heads": ["2"],
            "--layers": ["2"], "--decode": [], "--conventions": [], "--count-limit": ["1000"],
            "--format": ["json"], "--width": ["20"],
            # the audit without counters (the derived side; running counters takes a minute);
            # --counters alone is refused: it needs --audit
            "--audit": ["--counters", "none"], "--counters": ["torch"],
            # a figure judged; the judge's options alone are refused: they need --judge
            "--judge": ["12960", "--shape", "2,5,9,9,4"], "--call": ["flash"],
            "--shape": ["2,5,9,9,4"], "--kv-heads": ["2"], "--backward": [], "--unit": ["macs"]}


def test_every_option_changes_the_output_or_is_refused(cli):
    from exactattn.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    flags = [a.option_strings[0] for a in sub.choices["cost"]._actions
             if a.option_strings and a.dest not in ("help", "no_progress")]
    values = _option_values()
    assert sorted(flags) == sorted(values)
    for mode in ([], ["--conventions"]):
        for flag in flags:
            if flag in mode:
                continue
            # --align needs --causal: compare against the causal output
            base = mode + (["--causal"] if flag == "--align" else [])
            rc0, out0, _ = cli("cost", *base)
            rc, out, err = cli("cost", *base, flag, *values[flag])
            assert rc0 == 0
            assert (rc == 2 and out == "" and err.startswith(f"exactattn: error: {flag}")) \
                or (rc == 0 and out != out0), (mode, flag, err)


def test_every_pair_of_options_changes_the_output_or_is_refused(cli):
    """Adding a second option to a first one is never a no-op (nor is a flag ignored
    because another one is present), in both modes."""
    import itertools
    values = _option_values()
    flags = [f for f in values if f != "--format"]
    seen = {}

    def run(argv):
        key = tuple(argv)
        if key not in seen:
            seen[key] = cli("cost", *argv)
        return seen[key]

    for a, b in itertools.permutations(flags, 2):
        first = [a, *values[a]]
        if a == "--align" or b == "--align":
            first = ["--causal", *first]
        rc0, out0, _ = run(first)
        if rc0 != 0 or b in first:
            continue
        rc, out, err = run(first + [b, *values[b]])
        judged = (0, 1) if "--judge" in (a, b) else (0,)   # a judged figure may be wrong
        assert (rc == 2 and out == "" and err.count("\n") == 1) or \
            (rc in judged and out != out0), (a, b, err)


def test_bottom_right_formula_reads_without_minus_one(cli):
    rc, out, _ = cli("cost", "--causal", "--keys", "9", "--align", "bottom_right",
                     "--rows", "4,8")
    assert rc == 0
    assert "  n x d_k x (2 x m - n + 1) = 8 x 4 x (2 x 9 - 8 + 1) = 352\n" in out
    assert "-1 x" not in out and "+ -" not in out
    assert count(8, 4, 4, causal=True, keys=9, alignment="bottom_right")["scores"] * 2 == 352


# --- one visibility rule, one code path, light imports ---------------------------------

@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
def test_derived_pairs_follow_the_one_visibility_rule(align):
    """The loop nests' symbolic bounds give, at every small size, exactly the pairs that
    Policy.visible_keys (the one rule the engines and the counted runs use) lets through."""
    from exactattn.call.policy import Policy
    policy = Policy(causal=True, alignment=align)
    for k in range(1, 8):
        for keys in range(1, 10):
            want = sum(len(policy.visible_keys(i, k, keys)) for i in range(k))
            got = derive_at(k, 1, 1, 1, causal=True, alignment=align, keys=keys)
            assert got["scores"] == got["mix"] == want == policy.pairs(k, keys), (k, keys)
            assert count(k, 1, 1, 1, causal=True, alignment=align, keys=keys)["scores"] == want


def test_a_counted_run_is_the_pencil_engine():
    """count() and attend(engine="pencil") run the same loops: same MACs, same exact outputs."""
    for causal in (False, True):
        ref = count_head(3, 2, 2)
        head = Head(ref.W_Q, ref.W_K, ref.W_V, causal=causal)
        x = count_tokens(6, 3)
        trace = attend(head, x, engine="pencil")
        r = run(6, 3, 2, 2, causal=causal)
        typed_equal(trace.macs, {k: v for k, v in r.macs.items() if k != "total"})
        for i in range(6):
            for c in range(2):
                (value,) = r.outputs[i][c].terms
                assert value == trace.output(i, c)


def test_stage_names():
    from exactattn.cost.derivation import STAGES
    assert STAGES == ("projections", "scores", "mix", "out_projection")
    assert list(count(2, 4, 2, heads=2)) == ["projections", "scores", "mix", "out_projection",
                                             "total"]
    assert [x.name for x in loop_nests(heads=h)["out_projection"]] == ["out_projection"]


def test_the_cost_package_layout():
    """The documented names keep working from the package; presentation lives apart."""
    import exactattn.cost as cost
    from exactattn.commands import cost_tables
    from exactattn.cost import rows
    assert cost.derive is derive and cost.count is count and cost.run is run
    assert cost_tables.cost_sections is cost_sections and cost.rows.cost_rows is rows.cost_rows
    assert "cost_sections" not in cost.__all__ and not hasattr(cost, "Section")
    assert cost.sizes.ALIGNMENTS == ("top_left", "bottom_right")
    assert set(cost.__all__) <= set(dir(cost))
    with pytest.raises(AttributeError):
        cost.no_such_name  # noqa: B018


def test_counting_and_the_cost_command_load_no_sympy():
    """A counted run and `exactattn cost --help` never load sympy (it takes most of a second)."""
    import subprocess
    import sys
    code = ("import sys, argparse\n"
            "from exactattn.cost.counting import count\n"
            "assert count(4, 4, 4)['total'] == 320\n"
            "from exactattn.commands import cost\n"
            "cost.register(argparse.ArgumentParser().add_subparsers())\n"
            "print('sympy' in sys.modules)\n")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "False\n"


def test_table_sizes_stay_printable():
    """A size whose figures would have over 4300 digits is one error, not a traceback."""
    with pytest.raises(InputError) as e:
        cost_sections([10 ** 2150])
    assert str(e.value).startswith("each row must be a whole number from 1 to 1000000000000 "
                                   "(got 1000")
    with pytest.raises(InputError, match="d_model must be a whole number from 1 to"):
        conventions_sections(4, d_model=10 ** 13)
    (s,) = cost_sections([10 ** 12], count_limit=1000)
    assert s.rows[0][3] == str(derive_at(10 ** 12, 4, 4)["total"])


def test_counting_work_is_known_before_running():
    from exactattn.cost import counting_work
    from exactattn.cost.conventions import conventions_work
    work = counting_work([4, 8, 64], count_limit=1000)
    assert [macs for macs, _ in work] == [320, 896]
    assert all(type(s) is float and 0 < s < 0.01 for _, s in work)
    (big,) = counting_work([4000], count_limit=10 ** 9)
    assert big[0] == 128192000 and big[1] > 30
    # decoding also counts the causal prefill of the check
    assert counting_work([8], decode=True) == [
        (2 * count(8, 4, 4, decode=True)["total"], counting_work([8], decode=True)[0][1])]
    assert conventions_work(8, count_limit=100) == []
    assert [m for m, _ in conventions_work(8)] == [896, 672]


def test_the_refusal_is_quick(cli):
    import time
    start = time.perf_counter()
    rc, out, err = cli("cost", "--count-limit", "1000000000", "--rows", "4000")
    assert rc == 2 and out == "" and time.perf_counter() - start < 10
    assert "pass --count-limit 128191999 (or less) to derive every row instead" in err
    rc, out, err = cli("cost", "--count-limit", "1000000000", "--rows", "1000,4000")
    assert rc == 2 and "pass --count-limit 8048000 (or less) to derive the larger rows" in err


@pytest.mark.parametrize("call, message", [
    (lambda: count_tokens(0, 3), "n must be a positive whole number (got 0)"),
    (lambda: count_tokens(True, 3), "n must be a positive whole number (got True)"),
    (lambda: count_tokens(2, 0), "d_model must be a positive whole number (got 0)"),
    (lambda: count_head(2, 0, 1), "d_k must be a positive whole number (got 0)"),
])
def test_the_counting_functions_check_their_sizes_when_called_directly(call, message):
    # count_head and count_tokens are public: a direct call gets the CLI's words, not [] or a
    # ShapeError about empty weights
    with pytest.raises(InputError) as e:
        call()
    assert str(e.value) == message
