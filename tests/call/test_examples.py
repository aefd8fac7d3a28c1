"""The built-in examples: exact key values, every table mode and format, the raw comparison."""

import json
import re
from fractions import Fraction

import pytest
import sympy
from flint import arb

from exactattn.numbers.digits import certify
from exactattn.examples import EXAMPLES, Example, chronicle, example
from exactattn.engines.head import attend
from exactattn.numbers.softmax import ExpRatio
from exactattn.present.tables import attend_example, raw_match

F = Fraction
NAMES = ["chronicle", "tiny", "bank-river", "bank-loan", "self-match"]
MODES = ["row", "weights", "project", "square", "scores", "walkthrough"]
FORMATS = ["text", "markdown", "latex", "json", "csv"]




def test_registry_names_and_types():
    assert sorted(EXAMPLES) == sorted(NAMES)
    for name in NAMES:
        ex = example(name)
        assert isinstance(ex, Example) and ex.name == name
        assert all(type(e) is Fraction for row in ex.x for e in row)
        assert len(ex.tokens) == len(ex.x)


def test_chronicle_is_unchanged():
    ex = chronicle()
    t = attend_example(ex)
    assert ex.compare_raw is False
    assert t.raw_scores[1] == [F(25, 8), F(0), F(3, 4), F(0)]
    assert [t.share(1, j).decimal(4) for j in range(4)] == ["0.5800", "0.1216", "0.1769",
                                                           "0.1216"]


# tiny: the two-token head -------------------------------------------------------
def test_tiny_inputs_are_exact_decimals():
    ex = example("tiny")
    assert ex.x == [[F(4, 5), F(-3, 5)], [F(1, 5), F(1)]]
    assert ex.head.layout == "rows"
    assert ex.head.weights("W_Q") == [[1, 0], [-1, 1]]
    assert ex.head.weights("W_K") == [[0, 1], [1, 0]]
    assert ex.head.weights("W_V") == [[1, 0], [0, 1]]
    assert ex.head.divisor_squared == F(2)


def test_tiny_projected_scores_favour_the_stranger():
    t = attend_example(example("tiny"))
    assert t.queries == [[F(7, 5), F(-3, 5)], [F(-4, 5), F(1)]]
    assert t.keys == [[F(-3, 5), F(4, 5)], [F(1), F(1, 5)]]
    assert t.raw_scores == [[F(-33, 25), F(32, 25)], [F(32, 25), F(-3, 5)]]
    assert all(type(v) is Fraction for r in t.raw_scores for v in r)
    # share of the stranger, 1 / (1 + exp(-(32/25 + 33/25)/sqrt(2)))
    want = 1 / (1 + sympy.exp(-sympy.Rational(13, 5) / sympy.sqrt(2)))
    assert sympy.simplify(t.share(0, 1).closed_form() - want) == 0
    assert [[t.share(i, j).decimal(4) for j in range(2)] for i in range(2)] == \
        [["0.1372", "0.8628"], ["0.7907", "0.2093"]]
    assert t.macs == {"projections": 24, "scores": 8, "mix": 8}


def test_tiny_raw_self_match_favours_itself():
    ex = example("tiny")
    raw, own = raw_match(ex, attend_example(ex))
    assert raw.data["raw_scores"] == [["1", "-11/25"], ["-11/25", "26/25"]]
    assert own.rows == [["1", "0.7346", "key 1", "0.1372", "key 2"],
                        ["2", "0.7401", "key 2", "0.2093", "key 1"]]


def test_tiny_raw_match_unscaled_follows_no_scale():
    ex = example("tiny")
    raw, _ = raw_match(ex, attend_example(ex, no_scale=True))
    assert raw.notes[0] == "divisor for the raw shares: none (unscaled)"
    # x1.x1 = 1, x1.x2 = -11/25: 1 / (1 + exp(-36/25))
    assert raw.data["raw_shares_decimal"][0] == ["0.8085", "0.1915"]


# bank: where "bank" lands --------------------------------------------------
def test_bank_river_and_loan_values():
    river, loan = example("bank-river"), example("bank-loan")
    assert [t.text for t in river.tokens] == ["the", "river", "bank", "flooded"]
    assert [t.text for t in loan.tokens] == ["the", "bank", "lent", "money"]
    assert river.x[river.focus] == loan.x[loan.focus] == [F(1, 2), F(1, 2)]
    tr, tl = attend_example(river), attend_example(loan)
    assert tr.raw_scores[2] == [F(0), F(1, 2), F(1, 2), F(3, 8)]
    assert tl.raw_scores[1] == [F(0), F(1, 2), F(3, 8), F(1, 2)]
    assert [tr.output(2, c).decimal(4) for c in range(2)] == ["0.1382", "0.6044"]
    assert [tl.output(1, c).decimal(4) for c in range(2)] == ["0.6044", "0.1382"]
    # bank leans to nature in the river sentence, to money in the loan sentence
    assert tr.output(2, 1).ball(64) > tr.output(2, 0).ball(64)
    assert tl.output(1, 0).ball(64) > tl.output(1, 1).ball(64)


def test_bank_sentences_are_exact_mirror_images():
    tr, tl = attend_example(example("bank-river")), attend_example(example("bank-loan"))
    for c in range(2):
        a, b = tr.output(2, c), tl.output(1, 1 - c)
        assert isinstance(a, ExpRatio)
        assert a.numerators == b.numerators and a.row.counts == b.row.counts
    # exact closed form of bank's nature coordinate in the river sentence
    e = lambda r: sympy.exp(r / sympy.sqrt(2))  # noqa: E731
    half, three8 = sympy.Rational(1, 2), sympy.Rational(3, 8)
    want = (e(half) * (1 + half) + e(three8) * sympy.Rational(3, 4)) / \
        (1 + 2 * e(half) + e(three8))
    assert sympy.simplify(tr.output(2, 1).closed_form() - want) == 0


# self-match ----------------------------------------------------------------
def test_self_match_rows_are_orthogonal_sums_of_squares():
    ex = example("self-match")
    assert ex.head.d_model == 16 and ex.head.d_k == 4
    assert all(e in (F(1), F(-1)) for r in ex.x for e in r)
    gram = [[sum(a * b for a, b in zip(u, v)) for v in ex.x] for u in ex.x]
    assert gram == [[16 if i == j else 0 for j in range(4)] for i in range(4)]


def test_self_match_raw_vs_projected():
    ex = example("self-match")
    t = attend_example(ex)
    assert t.queries == [[F(4) if c == i else F(0) for c in range(4)] for i in range(4)]
    assert t.values == [[F(1) if c == i else F(0) for c in range(4)] for i in range(4)]
    assert t.raw_scores == [[F(16) if j == (i - 1) % 4 else F(0) for j in range(4)]
                            for i in range(4)]
    raw, own = raw_match(ex, t)
    e8 = sympy.exp(8)
    assert [r[1] for r in own.rows] == ["0.9479"] * 4  # e^4 / (e^4 + 3)
    assert certify(lambda prec: arb(4).exp() / (arb(4).exp() + 3), 4) == "0.9479"
    assert [r[2] for r in own.rows] == ["key 1", "key 2", "key 3", "key 4"]
    assert [r[4] for r in own.rows] == ["key 4", "key 1", "key 2", "key 3"]
    assert [r[3] for r in own.rows] == ["0.0003"] * 4
    assert sympy.simplify(t.share(1, 0).closed_form() - e8 / (e8 + 3)) == 0
    assert t.share(1, 0).decimal(4) == "0.9990"
    # outputs are the shares themselves (v_t = e_t)
    assert [t.output(1, c).decimal(4) for c in range(4)] == ["0.9990", "0.0003", "0.0003",
                                                             "0.0003"]
    assert raw.data["raw_scores"][0] == ["16", "0", "0", "0"]


# every mode, every format -------------------------------------------------------
@pytest.mark.parametrize("name", NAMES[1:])
@pytest.mark.parametrize("fmt", FORMATS)
def test_walkthrough_every_format(cli, name, fmt):
    rc, out, err = cli("walkthrough", "--example", name, "--format", fmt)
    assert rc == 0 and err == "" and out.endswith("\n")
    if fmt == "json":
        doc = json.loads(out)
        assert doc["example"] == name
        names = [t["name"] for t in doc["tables"]]
        assert names[:2] == ["row", "weights/W_Q"]
        assert ("compare/own" in names) == (name in ("tiny", "self-match"))


@pytest.mark.parametrize("name", NAMES[1:])
@pytest.mark.parametrize("mode", MODES[:-1])
def test_every_mode(cli, name, mode):
    rc, out, err = cli(mode, "--example", name)
    assert rc == 0 and err == "" and out


def test_walkthrough_key_lines(cli):
    _, out, _ = cli("walkthrough", "--example", "tiny")
    for line in ["1      -33/25 = -1.32  32/25 = 1.28",
                 "1      0.1372  0.8628  exactly 1  0.8628 at key 2",
                 "1      1               -11/25 = -0.44",
                 "1      0.7346         key 1          0.1372               key 2"]:
        assert line in out, line
    _, out, _ = cli("scores", "--example", "bank-river")
    assert "Token 3 in and out" in out and "out     (0.1382, 0.6044)" in out
    _, out, _ = cli("scores", "--example", "bank-loan")
    assert "Token 2 in and out" in out and "out     (0.6044, 0.1382)" in out


def test_compare_sections_follow_the_square(cli):
    _, out, _ = cli("walkthrough", "--example", "self-match", "--format", "json")
    names = [t["name"] for t in json.loads(out)["tables"]]
    assert names.index("compare/raw") == names.index("square/scaled") + 1
    assert names[-1] == "scores/macs"


def test_irrational_divisor_is_named_once(cli):
    _, out, _ = cli("square", "--example", "tiny")
    assert "divisor: sqrt(d_k) = sqrt(2) ~ 1.4142 (irrational: scaled scores stay exact)" in out
    assert "sqrt(2) = sqrt(2)" not in out
    # a zero raw score over an irrational divisor is exactly 0, not 0 ~ 0.000000
    _, out, _ = cli("square", "--example", "bank-river")
    assert re.search(r"\n1 +0 +0 +0 +0\n", out.split("Scaled scores")[1])
    assert "~ 0.0000" not in out and "0 ~" not in out


def test_digits_set_the_places_of_inexact_scores(cli):
    _, four, _ = cli("square", "--example", "tiny")
    _, six, _ = cli("square", "--example", "tiny", "--digits", "6")
    assert "-33*sqrt(2)/50 ~ -0.9334" in four and "-33*sqrt(2)/50 ~ -0.933381" in six


def test_compare_sections_only_in_square_and_walkthrough(cli):
    _, sq, _ = cli("square", "--example", "tiny")
    _, sc, _ = cli("scores", "--example", "tiny")
    assert "Raw self-match" in sq and "Raw self-match" not in sc
    _, ch, _ = cli("walkthrough")
    assert "Raw self-match" not in ch


def test_tiny_no_scale_and_explain(cli):
    rc, out, _ = cli("square", "--example", "tiny", "--no-scale", "--explain", "1,2")
    assert rc == 0
    assert "7/5×1 + (-3/5)×1/5 = 32/25 = 1.28" in out
    assert "divisor for the raw shares: none (unscaled)" in out


def test_bad_example_lists_all_names(cli):
    rc, _, err = cli("scores", "--example", "banks")
    assert rc == 2
    assert err == ("exactattn: error: example must be one of bank-loan, bank-river, chronicle, "
                   "self-match, tiny (got 'banks')\n")


def test_examples_are_fresh_objects():
    a, b = example("tiny"), example("tiny")
    assert a is not b and a.x == b.x
    a.x[0][0] = F(9)
    assert example("tiny").x[0][0] == F(4, 5)


def test_fast_engine_agrees_on_self_match():
    ex = example("self-match")
    pencil = attend(ex.head, ex.x, engine="pencil")
    fast = attend(ex.head, ex.x, engine="fast")
    assert fast.raw_scores == pencil.raw_scores
    assert [fast.share(1, j).decimal(6) for j in range(4)] == \
        [pencil.share(1, j).decimal(6) for j in range(4)]


@pytest.mark.parametrize("layout, W_Q, message", [
    ("rows", [[1, 0, 1]], "W_Q must be 2 x 3 in the rows layout, to match the tokens' "
                          "d_model = 2 (got 1 x 3)"),
    ("slots", [[1, 0, 1], [0, 1, 0]], "W_Q must be 2 x 2 in the slots layout, to match the "
                                      "tokens' d_model = 2 (got 2 x 3)"),
])
def test_a_w_q_that_does_not_fit_the_tokens_is_the_one_named(layout, W_Q, message):
    from exactattn.engines.spec import from_mapping
    from exactattn.errors import ShapeError
    doc = {"layout": layout, "tokens": [{"x": [1, 2]}, {"x": [0, 1]}], "W_Q": W_Q,
           "W_K": [[1, 0], [0, 1]], "W_V": [[1, 0], [0, 1]]}
    with pytest.raises(ShapeError) as e:
        from_mapping(doc)
    assert str(e.value).endswith(message)
