"""Sweeps: the divisor slider (with its two limits) and the length slider (counted MACs)."""

import json
import re
from fractions import Fraction
from pathlib import Path

import pytest
import sympy

from exactattn.errors import InputError
from exactattn.examples import Example, chronicle, example
from exactattn.engines.head import Head
from exactattn.present.sweep import (divisor_limits, divisor_sweep, length_sweep, parse_divisors,
                             parse_lengths)

F = Fraction




def causal_chronicle() -> Example:
    ex = chronicle()
    h = ex.head
    ex.head = Head(h.W_Q, h.W_K, h.W_V, layout="slots", causal=True)
    return ex


# divisor --------------------------------------------------------------
def test_chronicle_row_2_at_its_own_divisor_and_the_limits():
    sec = divisor_sweep(chronicle(), 2)[0]
    labels = [r[0] for r in sec.rows]
    assert labels[0] == "-> 0 (limit)" and labels[-1] == "-> infinity (limit)"
    assert "2 (the head's)" in labels
    row = sec.rows[labels.index("2 (the head's)")]
    assert row[1:5] == ["0.5800", "0.1216", "0.1769", "0.1216"]
    assert sec.data["limit_small"] == ["1", "0", "0", "0"]
    assert sec.data["limit_large"] == ["1/4", "1/4", "1/4", "1/4"]


def test_largest_share_falls_as_the_divisor_grows():
    sec = divisor_sweep(chronicle(), 2, divisors="1/8,1/2,1,2,8,1000")[0]
    tops = [F(r[1]) for r in sec.rows[1:-1]]
    assert tops == sorted(tops, reverse=True)
    assert F(sec.rows[1][1]) >= F(9999, 10000)  # near the max limit at 1/8
    assert abs(F(sec.rows[-2][1]) - F(1, 4)) < F(1, 1000)  # near 1/n at 1000


def test_ties_split_the_small_limit_equally():
    sec = divisor_sweep(example("bank-river"))[0]  # bank's row: (0, 1/2, 1/2, 3/8)
    assert sec.data["query"] == 3
    assert sec.rows[0] == ["-> 0 (limit)", "0", "1/2", "1/2", "0", "1/2 at key 2, 3"]
    assert "sqrt(2) (the head's)" in [r[0] for r in sec.rows]


def test_divisor_limits_exact_types():
    small, large = divisor_limits([F(2), None, F(2), F(-1)])
    assert small == [F(1, 2), F(0), F(1, 2), F(0)]
    assert large == [F(1, 3), F(0), F(1, 3), F(1, 3)]
    assert all(type(v) is Fraction for v in small + large)
    with pytest.raises(InputError, match="every key masked"):
        divisor_limits([None, None])


def test_causal_row_masks_stay_zero():
    sec = divisor_sweep(causal_chronicle(), 2, divisors="1")[0]
    assert sec.rows[0][1:5] == ["1", "0", "0", "0"]
    assert sec.rows[1][3:5] == ["0.0000", "0.0000"]          # machines: one decimal a column
    assert [c.reader for c in sec.rows[1][3:5]] == ["masked", "masked"]   # readers: exact
    assert sec.rows[-1][1:5] == ["1/2", "1/2", "0", "0"]
    # row 1 of a causal head sees key 1 alone: its share is exactly 1 at every divisor
    first = divisor_sweep(causal_chronicle(), 1, divisors="1,2")[0]
    assert [r[1] for r in first.rows[1:3]] == ["1.0000", "1.0000"]
    assert [r[1].reader for r in first.rows[1:3]] == ["1", "1"]
    assert first.rows[1][-1].reader == "1 at key 1"


def test_text_and_markdown_mark_exact_shares(cli, tmp_path):
    import json as js
    doc = js.loads((Path(__file__).parents[1] / "data" / "chronicle_slots.json").read_text())
    doc["causal"] = True
    p = tmp_path / "causal.json"
    p.write_text(js.dumps(doc))
    _, text, _ = cli("sweep", "divisor", "--spec", str(p), "--row", "1", "--divisors", "1")
    assert "\n1                    1      masked  masked  masked  1 at key 1\n" in text
    _, md, _ = cli("sweep", "divisor", "--spec", str(p), "--row", "1", "--divisors", "1",
                   "--format", "markdown")
    assert "| 1 | 1 | masked | masked | masked | 1 at key 1 |" in md
    _, csv, _ = cli("sweep", "divisor", "--spec", str(p), "--row", "1", "--divisors", "1",
                    "--format", "csv")
    assert "sweep/divisor,1,1.0000,0.0000,0.0000,0.0000,1.0000 at key 1" in csv


@pytest.mark.parametrize("call, message", [
    (lambda: parse_divisors("0"), "divisors must be positive numbers or sqrt(q)"),
    (lambda: parse_divisors(["1"] * 101), "divisors must list at most 100 divisors (got 101)"),
    (lambda: parse_lengths("0"), "lengths must be a comma-separated list"),
    (lambda: divisor_sweep(chronicle(), 0), "row must be a token number from 1 to 4 (got 0)"),
    (lambda: divisor_sweep(chronicle(), True), "row must be a token number from 1 to 4 "
                                               "(got True)"),
    (lambda: length_sweep(chronicle(), [4, 300]), "lengths must be"),
])
def test_api_messages_name_the_keyword(call, message):
    with pytest.raises(InputError) as e:
        call()
    assert str(e.value).startswith(message)


def mp_shares(raw, divisor, places):
    """The shares softmax(raw / divisor) by mpmath at 80 digits, rounded half-even."""
    from decimal import ROUND_HALF_EVEN, Decimal

    import mpmath
    with mpmath.workdps(80):
        d = mpmath.mpf(divisor)
        top = max(raw)
        e = [mpmath.exp((mpmath.mpf(r.numerator) / r.denominator - mpmath.mpf(top.numerator)
                         / top.denominator) / d) for r in raw]
        total = mpmath.fsum(e)
        return [format(Decimal(mpmath.nstr(v / total, 70, min_fixed=-100, max_fixed=100))
                       .quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN), "f")
                for v in e]


def test_tiny_and_huge_divisors_are_certified_and_reach_the_limits():
    sec = divisor_sweep(chronicle(), 2, divisors="1e-9,1e9", places=12)[0]
    tiny, huge = sec.rows[1], sec.rows[2]
    assert tiny[0] == "1e-9" and huge[0] == "1e9"
    raw = [F(25, 8), F(0), F(3, 4), F(0)]
    # 1e-9: every share but the largest is below exp(-2 * 10**9): the small limit (1, 0, 0, 0)
    assert tiny[1:5] == ["1.000000000000"] + ["0.000000000000"] * 3
    assert tiny[1:5] == mp_shares(raw, "1e-9", 12)
    # 1e9: within about 5e-10 of the large limit 1/4, and the digits show the difference
    assert huge[1:5] == ["0.250000000539", "0.249999999758", "0.249999999945",
                         "0.249999999758"]
    assert huge[1:5] == mp_shares(raw, "1e9", 12)
    assert sec.data["limit_small"] == ["1", "0", "0", "0"]
    assert sec.data["limit_large"] == ["1/4"] * 4
    assert sec.data["divisors"][0]["divisor_squared"] == "1/" + "1" + "0" * 18
    # the exact closed forms, e.g. key 2 (raw score 0) at 1e-9: 1/(2 + e^(3/4 10^9) + e^(25/8 10^9))
    for k, d in enumerate((sympy.Rational(1, 10 ** 9), sympy.Integer(10 ** 9))):
        scaled = [sympy.Rational(r.numerator, r.denominator) / d for r in raw]
        want = sympy.exp(scaled[1]) / sum(sympy.exp(v) for v in scaled)
        got = sec.data["divisors"][k]["shares_exact"][1]
        assert sympy.sympify(got) == want, got
    assert sec.data["divisors"][0]["shares_exact"][1] == \
        "1/(2 + exp(750000000) + exp(3125000000))"


def test_extreme_divisors_finish_quickly_at_50_places(cli):
    import time
    start = time.process_time()
    rc, out, err = cli("sweep", "divisor", "--divisors", "1e-1000,sqrt(1e-2000),1e1000",
                       "--digits", "50", "--format", "json")
    assert time.process_time() - start < 10  # a few tenths of a second here
    assert rc == 0 and err == ""
    rows = json.loads(out)["tables"][0]["data"]["divisors"]
    assert [r["divisor"] for r in rows] == ["1e-1000", "1e1000"]  # sqrt(1e-2000) repeats 1e-1000
    zero, one, quarter = ("0." + "0" * 50), ("1." + "0" * 50), ("0.25" + "0" * 48)
    assert rows[0]["shares_decimal"] == [one, zero, zero, zero]
    assert rows[1]["shares_decimal"] == [quarter] * 4
    # key 2 (raw 0) at 1e-1000: 1/(2 + exp(3/4 x 10^1000) + exp(25/8 x 10^1000)), exactly
    assert rows[0]["shares_exact"][1] == \
        "1/(2 + exp(75" + "0" * 998 + ") + exp(3125" + "0" * 997 + "))"


def test_long_divisor_labels_are_shortened_in_the_table():
    label = "1." + "0" * 60 + "1"
    sec = divisor_sweep(chronicle(), 2, divisors=[label])[0]
    assert sec.rows[1][0] == label[:40] + "\u2026"
    assert sec.data["divisors"][0]["divisor"] == label


def test_parse_divisors_sorted_and_exact():
    assert parse_divisors("sqrt(16),2,1/2") == [("1/2", F(1, 4)), ("2", F(4)), ("sqrt(16)", F(16))]
    assert parse_divisors("sqrt(4),2") == [("sqrt(4)", F(4))]  # the same divisor once
    for bad in ["0", "-1", "none", "x", "", "1,,2", "1e-1001", "1e1001", "sqrt(1e-2001)"]:
        with pytest.raises(InputError, match="divisors must be"):
            parse_divisors(bad)


# length ------------------------------------------------------------------
def test_length_counts_match_the_cost_formula_and_spec_ratios():
    sec = length_sweep(chronicle(), "4,8,16,32")[0]
    D = d_k = 4
    for row in sec.rows:
        n = int(row[0])
        assert int(row[1]) == 3 * n * D * d_k  # linear
        assert int(row[2]) == int(row[3]) == n * n * d_k  # quadratic
        assert int(row[4]) == 3 * n * D * d_k + 2 * n * n * d_k
    assert [r[7] for r in sec.rows] == ["", "2.80", "3.14", "3.45"]  # 8/4, 16/8, 32/16 at D = d_k = 4
    assert sec.rows[0][4] == "320"
    assert "48 MACs per token at every n" in sec.notes[1]
    assert "8 MACs per pair at every n" in sec.notes[2]
    assert sec.notes[3].endswith("n = 8")


def test_length_counts_causal_pairs():
    sec = length_sweep(causal_chronicle(), [4, 8])[0]
    assert [d["visible_pairs"] for d in sec.data["rows"]] == [10, 36]  # n(n+1)/2
    assert [d["scores"] for d in sec.data["rows"]] == [40, 144]
    assert "8 MACs per pair at every n" in sec.notes[2]


def test_length_self_match_has_a_wider_linear_part():
    sec = length_sweep(example("self-match"), [4, 32])[0]
    assert sec.rows[0][5] == "192" and sec.rows[1][5] == "192"  # 3 * 16 * 4
    assert sec.notes[3].endswith("n = 32")


def test_parse_lengths():
    assert parse_lengths([8, 4, 8]) == [4, 8]
    for bad in ["0", "257", "x", "", [True], "9" * 5000]:
        with pytest.raises(InputError, match="lengths must be"):
            parse_lengths(bad)


# CLI ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["divisor", "length"])
@pytest.mark.parametrize("fmt", ["text", "markdown", "latex", "json", "csv"])
def test_both_sweeps_print_every_format(cli, kind, fmt):
    rc, out, err = cli("sweep", kind, "--format", fmt)
    assert rc == 0 and err == "" and out
    if fmt == "json":
        doc = json.loads(out)
        assert doc["mode"] == f"sweep {kind}" and doc["tables"][0]["name"] == f"sweep/{kind}"


@pytest.mark.parametrize("name", ["tiny", "bank-river", "bank-loan", "self-match"])
def test_sweeps_on_every_example(cli, name):
    assert cli("sweep", "divisor", "--example", name)[0] == 0
    assert cli("sweep", "length", "--example", name, "--lengths", "2,4")[0] == 0


def test_sweep_cli_values(cli):
    _, out, _ = cli("sweep", "divisor", "--row", "2", "--divisors", "2")
    assert re.search(r"\n2 \(the head's\) +0.5800  0.1216  0.1769  0.1216  0.5800 at key 1\n", out)
    _, out, _ = cli("sweep", "length", "--lengths", "4,8")
    assert "8  384          256     256     896    48               8" in out


@pytest.mark.parametrize("argv, pattern", [
    (["sweep", "slider"], r"KIND must be one of divisor, length \(got 'slider'\)"),
    (["sweep", "divisor", "--row", "0"], r"error: --row must be a positive whole number "
                                         r"\(got '0'\)$"),
    (["sweep", "divisor", "--row", "5"], r"error: --row must be a token number from 1 to 4 "
                                         r"\(got 5\)$"),
    (["sweep", "divisor", "--row", "x"], r"error: --row must be a positive whole number "
                                         r"\(got 'x'\)$"),
    (["sweep", "divisor", "--row", "9" * 60], r"error: --row must be a token number from 1 to 4 "
                                              r"\(got 9{40}\u2026\)$"),
    (["sweep", "divisor", "--digits", "51"], r"error: --digits must be a whole number from 0 "
                                             r"to 50 \(got '51'\)$"),
    (["sweep", "divisor", "--format", "svg"], r"error: --format must be one of text, markdown, "
                                              r"latex, json, csv \(got 'svg'\)$"),
    (["sweep", "length", "--digits", "2"], r"error: sweep length takes no option --digits"),
    (["sweep", "length", "--row", "2"], r"error: sweep length takes no option --row"),
    (["sweep", "divisor", "--lengths", "4"], r"error: sweep divisor takes no option --lengths"),
    (["sweep", "divisor", "--divisors", "0,1"],
     r"error: --divisors must be positive numbers or sqrt\(q\) from 1e-1000 to 1e1000, "
     r"comma-separated, such as 1/2,1,2,4 \(got '0'\)$"),
    (["sweep", "divisor", "--divisors", "1e-1001"], r"error: --divisors must be .*\(got '1e-1001'\)$"),
    (["sweep", "divisor", "--divisors", "sqrt(1e2001)"], r"error: --divisors must be .*1e1000"),
    (["sweep", "divisor", "--divisors", "1e-99999999999"], r"error: --divisors must be "),
    (["sweep", "divisor", "--divisors", "1" * 60 + "x"],
     r"error: --divisors must be .*\(got '1{40}\u2026'\)$"),
    (["sweep", "divisor", "--divisors", "1,,2"], r"error: --divisors must be a comma-separated "
                                                 r"list such as 1/2,1,2,4 \(got '1,,2'\)$"),
    (["sweep", "divisor", "--divisors", ",".join(["1"] * 101)],
     r"error: --divisors must list at most 100 divisors \(got 101\)"),
    (["sweep", "divisor", "--example", "nope"], "example must be one of"),
    (["sweep", "length", "--lengths", "4,0"], r"error: --lengths must be a whole number from 1 "
                                              r"to 256 \(got '0'\)$"),
    (["sweep", "length", "--lengths", "1000"], r"error: --lengths must be .*\(got '1000'\)$"),
    (["sweep", "length", "--lengths", "4," + "9" * 60],
     r"error: --lengths must be .*\(got '9{40}\u2026'\)$"),
    (["sweep", "length", "--lengths", ""], r"error: --lengths must be a comma-separated list of "
                                           r"1 to 256 whole numbers \(got ''\)$"),
])
def test_bad_arguments_exit_2_with_one_line(cli, argv, pattern):
    rc, out, err = cli(*argv)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("exactattn: error: ")
    assert re.search(pattern, lines[0]), lines[0]


def test_spec_source(tmp_path, cli):
    p = tmp_path / "h.json"
    p.write_text('{"tokens": [{"text": "a", "x": [1, 0]}, {"text": "b", "x": [0, 1]}], '
                 '"W_Q": [[1, 0], [0, 1]], "W_K": [[1, 0], [0, 1]], "W_V": [[1, 0], [0, 1]], '
                 '"divisor": "none"}')
    rc, out, _ = cli("sweep", "divisor", "--spec", str(p), "--row", "1",
                     "--divisors", "1")
    assert rc == 0 and "the head itself has no divisor" in out
    assert "1                    0.7311  0.2689" in out  # e / (e + 1)
