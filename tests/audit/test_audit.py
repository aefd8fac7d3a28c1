"""``exactattn audit``: the handed cases (tests/data/cases/tables), the verdicts one by one,
the four table formats, the walkthrough's own tables, the pytest helper and bad input."""

import json
from fractions import Fraction
from pathlib import Path

import pytest

from exactattn.audit import Audit, audit, audit_text
from exactattn.audit.judge import CellVerdict, judge_number
from exactattn.audit.parse import parse_tables
from exactattn.audit.judge import exact_decimal
from exactattn.reference.logits import scaled_logit
from exactattn.numbers.reals import Surd
from exactattn.audit.printed import read_cell, read_number
from exactattn.commands.audit import DEMO_CHANGE, demo_text
from exactattn.errors import InputError
from exactattn.numbers.softmax import ExpRatio, SoftmaxRow
from exactattn.testing import assert_table

CASES = Path(__file__).parents[1] / "data" / "cases" / "tables"
HANDLED = {"two-token-head", "truncated-shares", "not-its-own-softmax"}


def expected(name):
    return json.loads((CASES / f"{name}.expected.json").read_text(encoding="utf-8"))


def printed(name):
    return CASES / f"{name}.printed.md"


def test_every_handed_case_has_a_check():
    assert {p.name.split(".")[0] for p in CASES.glob("*.expected.json")} == HANDLED


# --------------------------------------------------------------------------- handed cases
def test_two_token_head_flags_exactly_the_two_wrong_outputs():
    case = expected("two-token-head")
    result = audit(printed("two-token-head"), spec=CASES / "two-token-head.json")
    assert isinstance(result, Audit) and len(result.cells) == 8
    wrong = {c.what: c for c in result.not_right}
    assert set(wrong) == set(case["wrong_cells"])
    for what, want in case["wrong_cells"].items():
        cell = wrong[what]
        assert (cell.printed, cell.verdict, cell.right) == (want["printed"], "wrong", want["right"])
        assert type(cell.exact) is ExpRatio and cell.places == 5
        assert cell.exact.decimal(5) == want["right"]
    right = [c for c in result.cells if c.is_right]
    assert [c.what for c in right if c.what.startswith("shares")] == \
        ["shares[1][1]", "shares[1][2]", "shares[2][1]", "shares[2][2]"]
    assert {(c.what, c.printed) for c in right if c.what.startswith("outputs")} == \
        {("outputs[2][1]", "2.33952"), ("outputs[2][2]", "3.33952")}
    assert result.counts == {"right": 6, "truncated": 0, "half_up": 0, "half_even": 0,
                             "off_by_one": 0, "wrong": 2}


def test_two_token_head_on_the_command_line_prints_every_cell_and_exits_1(cli):
    rc, out, err = cli("audit", "--spec", str(CASES / "two-token-head.json"),
                       "--table", str(printed("two-token-head")))
    assert (rc, err) == (1, "")
    for what in ("shares[1][1]", "shares[1][2]", "shares[2][1]", "shares[2][2]",
                 "outputs[1][1]", "outputs[1][2]", "outputs[2][1]", "outputs[2][2]"):
        assert out.count(what) == 1, what
    assert "outputs[1][1]  1.66082  wrong    1.66048" in out
    assert "outputs[1][2]  2.66082  wrong    2.66048" in out
    assert out.rstrip().endswith("audit: 2 of 8 cells not right (2 wrong)")


def test_truncated_shares_are_named_truncated_with_the_rounded_value():
    case = expected("truncated-shares")
    result = audit(printed("truncated-shares"), example="chronicle")
    got = [f"{c.verdict} (right: {c.right})" for c in result.cells]
    assert got == case["verdicts"]
    assert [c.exact_decimal for c in result.cells] == case["exact_10_places"]
    assert [c.what for c in result.cells] == [f"shares[2][{j}]" for j in (1, 2, 3, 4)]
    assert result.tables[0].found_by == "title"
    total, = result.tables[0].row_sums
    assert (total.total, total.slack, total.within) == (Fraction(9997, 10000),
                                                         Fraction(2, 10000), False)


def test_truncated_shares_on_the_command_line(cli):
    rc, out, _ = cli("audit", "--table", str(printed("truncated-shares")), "--example",
                     "chronicle", "--quantity", "shares", "--rows", "2")
    assert rc == 1 and out.count(" truncated ") == 4
    assert "audit: 4 of 4 cells not right (4 truncated)" in out


def test_weights_that_are_not_the_softmax_of_the_printed_scores():
    case = expected("not-its-own-softmax")
    result = audit(printed("not-its-own-softmax"))
    assert (result.source, result.name, result.divisor_squared) == ("printed scores", "1", None)
    assert [f"{c.verdict} ({c.right})" for c in result.cells] == case["verdicts"]
    assert [c.right for c in result.cells] == case["softmax_of_printed_scores_3_places"]
    first = result.cells[0].exact
    assert type(first) is ExpRatio          # 3.2 is read as 16/5, never as a float
    assert first == SoftmaxRow([Fraction(16, 5), Fraction(4, 5), Fraction(1, 2),
                                Fraction(3, 10)], None).share(0)
    assert result.tables[0].skipped == "source"
    total, = result.tables[1].row_sums
    assert (total.total, total.within) == (Fraction(999, 1000), True)


def test_not_its_own_softmax_on_the_command_line(cli):
    rc, out, _ = cli("audit", "--table", str(printed("not-its-own-softmax")))
    assert rc == 1 and "audit: 4 of 4 cells not right (4 wrong)" in out
    assert "printed shares add up to 0.999" in out


# --------------------------------------------------------------------------- verdicts
@pytest.mark.parametrize("value, text, verdict, right", [
    (Fraction(1, 8), "0.12", "right", "0.12"),            # an exact tie: to even
    (Fraction(1, 8), "0.13", "half_up", "0.12"),
    (Fraction(-1, 8), "-0.13", "half_up", "-0.12"),       # half up = away from zero
    (Fraction(3, 8), "0.38", "right", "0.38"),            # both rules agree: 0.375 -> 0.38
    (Fraction(2, 3), "0.666", "truncated", "0.667"),
    (Fraction(-2, 3), "-0.666", "truncated", "-0.667"),
    (Fraction(2, 3), "0.668", "off_by_one", "0.667"),
    (Fraction(2, 3), "0.665", "wrong", "0.667"),
    (Fraction(1, 3), "1/3", "right", "1/3"),               # a fraction is an exact claim
    (Fraction(1, 3), "0.3333", "right", "0.3333"),
    (Fraction(1, 4), "1/3", "wrong", "1/4"),
    (Fraction(1, 2), "50.0%", "right", "0.500"),
    (Fraction(3), "3", "right", "3"),
])
def test_verdicts_on_rationals(value, text, verdict, right):
    got = judge_number(value, read_number(text))
    assert got == (verdict, right) and type(got[1]) is str


def test_the_reverse_rule_is_named_too():
    assert judge_number(Fraction(1, 8), read_number("0.12"), ties="half_up") == \
        ("half_even", "0.13")
    assert judge_number(Fraction(1, 8), read_number("0.13"), ties="half_up") == ("right", "0.13")


def test_verdicts_on_a_transcendental_share_are_exact():
    share = SoftmaxRow([Fraction(25, 8), Fraction(0), Fraction(3, 4), Fraction(0)],
                       Fraction(4)).share(0)                          # 0.57997725...
    for text, want in (("0.5800", "right"), ("0.5799", "truncated"), ("0.5801", "off_by_one"),
                       ("0.5798", "wrong"), ("0.58", "right"), ("0.57997", "truncated"),
                       ("0.5799773", "right"), ("0.5799772", "truncated"), ("1/2", "wrong")):
        assert judge_number(share, read_number(text))[0] == want, text


def test_scores_divided_by_an_irrational_divisor_compare_exactly():
    s = scaled_logit(Fraction(1), Fraction(2))              # 1/sqrt(2) = 0.70710678...
    assert judge_number(s, read_number("0.7071")) == ("right", "0.7071")
    assert judge_number(s, read_number("0.70710")) == ("truncated", "0.70711")
    assert judge_number(s, read_number("0.70712")) == ("off_by_one", "0.70711")
    assert judge_number(scaled_logit(Fraction(-1), Fraction(2)), read_number("-0.7071"))[0] == "right"
    assert exact_decimal(s, 10) == ("0.7071067812", False)


def test_hidden_keys():
    assert judge_number(None, read_cell("-inf")[0][0]) == ("right", "-inf")
    assert judge_number(None, read_number("0")) == ("wrong", "-inf")
    assert judge_number(Fraction(0), read_cell("masked")[0][0], hidden=True) == ("right", "masked")
    assert judge_number(Fraction(1, 2), read_cell("masked")[0][0]) == ("wrong", "1/2")


def test_cells_are_read_exactly_as_printed():
    (p,), = read_cell("3.2")
    assert (p.value, p.places, type(p.value)) == (Fraction(16, 5), 1, Fraction)
    assert [(q.value, q.places) for (q,) in read_cell("(0, 3, 1/2, ... +5 more)")] == \
        [(Fraction(0), 0), (Fraction(3), 0), (Fraction(1, 2), None)]
    assert [(q.value, q.places) for q in read_cell("sqrt(2)/2 ~ 0.7071")[0]] == \
        [(Fraction(7071, 10000), 4)]
    assert [(q.value, q.places) for q in read_cell("exactly 1")[0]] == [(Fraction(1), None)]
    assert read_cell(r"\textbf{$-$0.50}")[0][0].value == Fraction(-1, 2)
    assert read_number("1.5e3") is None and read_number("1e-2").places == 2
    assert read_cell("0.2907 at key 3") == [] and read_cell("") == []


# --------------------------------------------------------------------------- row sums
SUMS = """Scores

| query | k1 | k2 | k3 |
|---|---|---|---|
| q1 | 1 | 0 | 0 |

Weights

| query | k1 | k2 | k3 | sum |
|---|---|---|---|---|
| q1 | 0.5761 | 0.2119 | 0.2119 | {total} |
"""


@pytest.mark.parametrize("total, verdict, right", [
    ("0.9999", "right", "0.9999"),       # the sum of the printed cells, as printed
    ("1.0000", "off_by_one", "0.9999"),
    ("1", "right", "1"),                 # at 0 places the printed cells round to 1
    ("exactly 1", "right", "1"),         # the exact shares add up to 1
    ("exactly 0.9999", "wrong", "1"),
])
def test_row_sums_are_judged_as_printed(total, verdict, right):
    result = audit_text(SUMS.format(total=total))
    cell = result.cells[-1]
    assert cell.what.startswith("sum of shares row 1")
    assert (cell.verdict, cell.right) == (verdict, right)
    assert [c.verdict for c in result.cells[:-1]] == ["right"] * 3


# --------------------------------------------------------------------------- formats
def test_markdown_tables_keep_escaped_pipes_and_skip_code_fences():
    text = ("# Shares\n\n```\n| a | b |\n|---|---|\n| 1 | 2 |\n```\n\n"
            "Table: **Scores**\n\n|q|a \\| b|`x|y`|\n|:--|--:|:-:|\n|1|2|3|\n")
    t, = parse_tables(text, "markdown")
    assert (t.title, t.header, t.rows) == ("Table: Scores", ("q", "a | b", "`x|y`"),
                                            (("1", "2", "3"),))


def test_latex_tabular_with_rules_caption_and_multicolumn():
    text = r"""\begin{table}\centering
\caption{Attention weights}
\begin{tabular}{l|rr} \toprule
query & k1 & k2 \\ \midrule
q1 & $0.6698$ & \textbf{0.3302} \\ % a comment & 9
\multicolumn{3}{c}{note} \\
\bottomrule
\end{tabular}\end{table}"""
    t, = parse_tables(text)
    assert (t.title, t.header) == ("Attention weights", ("query", "k1", "k2"))
    assert t.rows == (("q1", "$0.6698$", r"\textbf{0.3302}"), ("note", "", ""))


def test_csv_and_json_hold_several_tables():
    csv_text = "query,k1,k2\nq1,0.5,0.5\n\nquery,k1\nq1,1\n"
    assert [t.header for t in parse_tables(csv_text, "csv")] == [("query", "k1", "k2"),
                                                                  ("query", "k1")]
    rows = '[[["query", "k1"], ["q1", 0.5800]], [{"query": "q2", "k1": 1e-1}]]'
    first, second = parse_tables(rows)
    assert first.rows == (("q1", "0.5800"),) and second.rows == (("q2", "1e-1"),)
    assert second.header == ("query", "k1")
    result = audit_text('[{"token": "2", "query": [0, 3, 0.50, 0]}]', example="chronicle",
                        quantity="queries")        # a JSON array is a vector cell
    assert [(c.what, c.printed, c.places, c.verdict) for c in result.cells] == [
        ("queries[2][1]", "0", 0, "right"), ("queries[2][2]", "3", 0, "right"),
        ("queries[2][3]", "0.50", 2, "right"), ("queries[2][4]", "0", 0, "right")]


@pytest.mark.parametrize("fmt", ["markdown", "csv", "latex", "json"])
def test_the_walkthrough_tables_audit_clean_in_every_format(cli, fmt):
    rc, out, _ = cli("walkthrough", "--format", fmt)
    assert rc == 0
    result = audit_text(out, example="chronicle")
    assert result.clean and len(result.cells) == 116
    judged = {t.table.number: (t.quantity, len(t.cells)) for t in result.tables if t.cells}
    assert judged == {5: ("projections", 48), 6: ("raw", 16), 7: ("scaled", 16),
                      8: ("shares", 20), 9: ("outputs", 16)}


def test_an_irrational_divisor_and_a_causal_head_audit_clean(cli, tmp_path):
    causal = tmp_path / "causal.json"
    causal.write_text(json.dumps({
        "layout": "rows", "tokens": [{"x": [1, 0]}, {"x": [0, 1]}, {"x": [1, 1]}],
        "W_Q": [[1, 0], [0, 1]], "W_K": [[1, 0], [0, 1]], "W_V": [[1, 2], [3, 4]],
        "divisor": "3", "causal": True}))
    for spec, cells in ((CASES / "two-token-head.json", 30), (causal, 54)):
        for fmt in ("markdown", "csv"):
            rc, out, _ = cli("walkthrough", "--spec", str(spec), "--format", fmt, "--digits", "6")
            result = audit_text(out, spec=spec)
            assert rc == 0 and result.clean and len(result.cells) == cells, (spec, fmt)
            hidden = [c for c in result.cells if c.exact is None]
            assert len(hidden) == (6 if spec == causal else 0)     # -inf above the diagonal


def test_the_scaled_scores_of_an_irrational_divisor_are_exact_surds(cli):
    rc, out, _ = cli("square", "--spec", str(CASES / "two-token-head.json"), "--format",
                     "markdown")
    result = audit_text(out, spec=CASES / "two-token-head.json")
    exact = [c.exact for c in result.cells if c.what.startswith("scaled")]
    assert [type(v) for v in exact] == [Surd, Fraction, Fraction, Surd]
    assert [c.printed for c in result.cells if c.what == "scaled[1][1]"] == ["sqrt(2)/2 ~ 0.7071"]
    assert [c.places for c in result.cells if c.what == "scaled[1][1]"] == [4]


# --------------------------------------------------------------------------- demos
def test_a_copy_with_one_cell_changed_names_that_cell():
    clean, changed = demo_text()
    assert audit_text(clean, example="chronicle").clean
    result = audit_text(changed, example="chronicle")
    cell, = result.not_right
    assert isinstance(cell, CellVerdict)
    assert (cell.table, cell.row_label, cell.column_label, cell.what) == \
        (9, "1", "out 4", "outputs[1][4]")
    assert (cell.printed, cell.verdict, cell.right) == ("0.6543", "wrong", "0.6453")
    assert DEMO_CHANGE[1].endswith("0.6543 |")


def test_the_demo_command(cli):
    rc, out, err = cli("audit", "--demo")
    assert (rc, err) == (0, "")
    assert "all 116 cells right" in out and "1 of 116 cells not right (1 wrong)" in out
    assert "outputs[1][4]  0.6543   wrong    0.6453" in out


# --------------------------------------------------------------------------- pytest helper
def test_assert_table_passes_a_clean_page_and_returns_the_audit(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(demo_text()[0], encoding="utf-8")
    assert assert_table(page, example="chronicle").clean


def test_assert_table_fails_with_the_cell_by_cell_report():
    with pytest.raises(AssertionError) as e:
        assert_table(printed("two-token-head"), spec=CASES / "two-token-head.json")
    message = str(e.value)
    assert message.startswith("two-token-head.printed.md: 2 of 8 cells not right (2 wrong)")
    assert "outputs[1][1]  1.66082  wrong    1.66048" in message
    assert "outputs[2][1]" not in message           # right cells are only counted


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("argv, pattern", [
    ([], "audit needs --table FILE"),
    (["--table", "/no/such.md"], "table file '/no/such.md' must exist"),
    (["--table", str(CASES / "two-token-head.printed.md")], "got no head and no table titled"),
    (["--table", str(CASES / "two-token-head.printed.md"), "--example", "tiny", "--quantity",
      "shares,outputs,raw"], "quantity must be one quantity or one per audited table"),
    (["--table", str(CASES / "two-token-head.printed.md"), "--example", "tiny", "--quantity",
      "share"], "--quantity must be one of raw, scaled, shares"),
    (["--table", str(CASES / "two-token-head.printed.md"), "--example", "tiny", "--tables",
      "3"], "tables must be table numbers from 1 to 2"),
    (["--table", str(CASES / "two-token-head.printed.md"), "--example", "tiny", "--rows",
      "1..3"], "rows must name one token per printed row of table 1"),
    (["--table", str(CASES / "two-token-head.printed.md"), "--example", "tiny", "--divisor",
      "2"], "--divisor must come with printed scores"),
    (["--table", str(CASES / "README.md")], "must hold at least one markdown table"),
    (["--table", str(CASES / "truncated-shares.printed.md"), "--example", "tiny"],
     "table 1 must have at most 2 value columns"),
    (["--demo", "--example", "tiny"], "--demo must come alone"),
    (["--table", str(CASES / "not-its-own-softmax.printed.md"), "--no-scale"],
     "--no-scale must come with --spec or --example"),
])
def test_bad_input_is_one_line_and_exit_2(cli, argv, pattern):
    rc, out, err = cli("audit", *argv)
    assert rc == 2 and out == ""
    assert err.startswith("exactattn: error: ") and err.count("\n") == 1 and pattern in err, err


def test_bad_input_from_python_raises_input_error():
    with pytest.raises(InputError, match="spec and example must not both be given"):
        audit(printed("two-token-head"), spec=CASES / "two-token-head.json", example="tiny")
    with pytest.raises(InputError, match="table format must be one of"):
        audit_text("a,b", fmt="xml")
    with pytest.raises(InputError, match="must be valid JSON"):
        audit_text("[1, ", fmt="json")


# --------------------------------------------------------------------------- more of the CLI
def test_a_tie_rounded_half_up_is_named_with_its_rule(cli, tmp_path):
    spec = tmp_path / "flat.json"        # eight equal tokens: every share is exactly 1/8
    spec.write_text(json.dumps({"tokens": [{"x": [1]}] * 8, "W_Q": [[1]], "W_K": [[1]],
                                "W_V": [[1]]}))
    page = tmp_path / "page.csv"
    page.write_text("query," + ",".join(f"k{j}" for j in range(1, 9)) + "\n"
                    "1," + ",".join(["0.13"] + ["0.12"] * 7) + "\n")
    rc, out, _ = cli("audit", "--spec", str(spec), "--table", str(page), "--quantity", "shares",
                     "--not-right")
    assert rc == 1 and "1    k1      shares[1][1]  0.13     rounded half up where half-even " \
        "differs  0.12         1/8 = 0.125" in out
    assert "audit: 1 of 8 cells not right" in out
    rc, out, _ = cli("audit", "--spec", str(spec), "--table", str(page), "--quantity", "shares",
                     "--ties", "half_up")
    assert rc == 1 and "audit: 7 of 8 cells not right (7 rounded half even where half-up " \
        "differs)" in out


def test_json_report_and_closed_forms(cli):
    rc, out, _ = cli("audit", "--table", str(printed("not-its-own-softmax")), "--format",
                     "json", "--closed-forms", "--not-right")
    doc = json.loads(out)
    assert rc == 1 and doc["clean"] is False and doc["source"] == "printed scores"
    table, summary = doc["tables"]
    assert table["columns"][-1] == "closed form"
    first = table["data"]["cells"][0]
    assert (first["printed"], first["verdict"], first["right"], first["places"]) == \
        ("0.539", "wrong", "0.824", 3)
    assert first["exact"] == "exp(16/5)/(exp(3/10) + exp(1/2) + exp(4/5) + exp(16/5))"
    assert summary["data"]["counts"]["wrong"] == 4


def test_outputs_are_found_by_their_headers_and_unknown_tables_are_skipped():
    text = ("| token | out 1 | out 2 |\n|---|---|---|\n| t1 | 1.6605 | 2.6605 |\n\n"
            "Something else\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    result = audit_text(text, spec=CASES / "two-token-head.json")
    outputs, other = result.tables
    assert (outputs.quantity, outputs.found_by, len(outputs.cells)) == ("outputs", "headers", 2)
    assert (other.quantity, other.skipped, other.cells) == (None, "no quantity", [])
    assert result.clean


LATEX_PAGE = r"""\section{Results}
\begin{table}[h]
\begin{tabular}{lrrr} \toprule
Query & $k_1$ & $k_2$ & $k_3$ \\ \midrule
$q_1$ & 2.0 & $-\infty$ & 1.0 \\ \bottomrule
\end{tabular}
\caption{Raw scores}
\end{table}
\begin{table}
\begin{tabular}{lrrr} \hline
Query & $k_1$ & $k_2$ & $k_3$ \\ \hline
$q_1$ & \textbf{0.731} & masked & 0.268 \\ \hline
\end{tabular}
\caption{Attention weights (softmax)}
\end{table}
"""


def test_a_latex_page_with_a_hidden_key_against_its_printed_scores():
    result = audit_text(LATEX_PAGE)
    assert [t.table.title for t in result.tables] == ["Raw scores", "Attention weights (softmax)"]
    assert [(c.row_label, c.column_label, c.printed, c.verdict, c.right) for c in result.cells] \
        == [("q_1", "k_1", "0.731", "right", "0.731"), ("q_1", "k_2", "masked", "right", "masked"),
            ("q_1", "k_3", "0.268", "truncated", "0.269")]
    total, = result.tables[1].row_sums
    assert (total.total, total.slack) == (Fraction(999, 1000), Fraction(1, 1000))


def test_help_lists_audit_and_its_options(cli):
    rc, out, _ = cli("--help")
    assert rc == 0 and "audit" in out
    rc, out, _ = cli("audit", "--help")
    assert rc == 0 and all(flag in out for flag in ("--table", "--spec", "--scores", "--quantity",
                                                    "--ties", "--demo"))
