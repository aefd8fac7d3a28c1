"""Hardening 3: the kinds an independent fuzzer found, one regression test per kind.

Each test holds the minimal input that used to fail (a traceback, a refusal of valid
input, a misprinted closed form, a false alarm) and asserts the exact outcome now.
"""

from __future__ import annotations

import re

import pytest


@pytest.mark.parametrize("value", ["-1e3", "-1/2", "-2.5e-1", "-.5", "-2"])
def test_negative_numbers_in_any_form_after_a_space(cli, value):
    """``--sink -1e3`` is the value -1e3, as ``--sink=-1e3`` always was (not a missing value)."""
    rc, out, err = cli("scores", "--sink", value)
    assert (rc, err) == (0, "")
    assert (rc, out, err) == cli("scores", f"--sink={value}")
    assert out != cli("scores", "--sink=0")[1]


def test_a_matrix_or_list_starting_with_a_negative_number_is_a_value(cli):
    """``--d-out '-1,0;0,1'`` is the matrix, as ``--d-out=-1,0;0,1`` always was."""
    rc, out, err = cli("backward", "--example", "tiny", "--d-out", "-1,0;0,1")
    assert (rc, err) == (0, "") and "1      (-1, 0)" in out
    assert (rc, out, err) == cli("backward", "--example", "tiny", "--d-out=-1,0;0,1")
    for argv, message in [
            (("scores", "--window", "-1,0"), "--window must be LEFT,RIGHT, whole numbers >= 0 "
                                             "or none (got '-1,0'); e.g. 2,0"),
            (("cost", "--rows", "-1,2"), "--rows must be a whole number from 1 to "
                                         "1000000000000 (got '-1')"),
            (("scores", "--explain", "-1,2"), "--explain must be a positive whole number "
                                              "(got '-1')"),
            (("scores", "--queries", "-1..3"), "--queries must be token numbers such as 1..8, 3 "
                                               "or 1..4,10 (got '-1..3')"),
            (("verify", "--splits", "-3,5"), "--splits must be a positive whole number (got '-3')")]:
        assert cli(*argv) == (2, "", f"exactattn: error: {message}\n")


def test_a_flag_without_its_value_still_says_so(cli):
    rc, out, err = cli("scores", "--sink")
    assert (rc, out, err) == (2, "", "exactattn: error: --sink needs a value (got none)\n")


def test_tables_that_print_no_output_build_no_output(cli, tmp_path):
    """``row`` and ``project`` under dropout built every exact output (21 s on 94 tokens)."""
    import json

    from exactattn import Head, Policy, attend
    n = 6
    keep = [[(i + j) % 3 != 0 for j in range(n)] for i in range(n)]
    head = Head([[1, 0], [0, 1]], [[1, 0], [0, 1]], [[1, 2], [3, 4]]).with_policy(
        Policy(dropout="1/10"))
    x = [[i, 1 - i] for i in range(n)]
    trace = attend(head, x, engine="pencil", dropout_keep=keep)
    assert not trace.reference._groups       # nothing built yet
    assert trace.output(2, 1).decimal(4) == "-0.9604"     # mpmath at 40 digits: -0.96040335...
    assert len(trace.reference._groups) == 1
    trace.outputs
    assert len(trace.reference._groups) == n
    spec = {"layout": "slots", "tokens": [{"x": r} for r in x], "W_Q": [[1, 0], [0, 1]],
            "W_K": [[1, 0], [0, 1]],
            "W_V": [[1, 2], [3, 4]], "policy": {"dropout": {"p": "1/10", "keep": keep}}}
    path = tmp_path / "drop.json"
    path.write_text(json.dumps(spec))
    rc, out, err = cli("row", "--spec", str(path))
    assert (rc, err) == (0, "") and out


def test_a_divisor_of_sqrt_q_says_what_q_stands_for(cli, tmp_path):
    """``"divisor": "sqrt(q)"`` was refused by a message listing ``sqrt(q)`` as allowed."""
    path = tmp_path / "dq.json"
    path.write_text('{"divisor": "sqrt(q)", "tokens": [{"x": [1]}, {"x": [2]}], '
                    '"W_Q": [[1]], "W_K": [[1]], "W_V": [[1]]}')
    assert cli("scores", "--spec", str(path)) == (2, "", (
        f"exactattn: error: {path}: divisor must be a positive number, sqrt(q) for a positive "
        "rational q (such as sqrt(2)), or 'none' (got 'sqrt(q)')\n"))
    rc, out, err = cli("verify", "--scale", "1/sqrt(q)")
    assert (rc, out) == (2, "") and err == (
        "exactattn: error: --scale must be 'default', a positive number, 1/sqrt(q) for a "
        "positive rational q (such as 1/sqrt(48)), or 'none' (got '1/sqrt(q)')\n")


CLOSED_FORM_POLICIES = [(), ("--softcap", "1/2"), ("--sink", "1/3"), ("--alibi", "3", "--head", "1"),
                        ("--rope", "10000"), ("--no-scale",), ("--softcap", "2", "--sink", "0"),
                        ("--alibi", "12", "--head", "8", "--softcap", "30")]


@pytest.mark.parametrize("flags", CLOSED_FORM_POLICIES, ids=" ".join)
def test_every_printed_closed_form_parses_back_to_its_printed_decimal(cli, flags):
    """A share's closed form (numerator / normaliser, as ``scores --format json`` prints
    them) read by sympy and evaluated at 50 digits rounds to the decimal printed beside it."""
    import json
    from decimal import ROUND_HALF_EVEN, Decimal

    import sympy
    rc, out, err = cli("scores", "--format", "json", *flags)
    assert (rc, err) == (0, "")
    table = json.loads(out)["tables"][0]["data"]
    places = table["places"]
    for i, forms in enumerate(table["closed_forms"]):
        den = sympy.sympify(forms["normaliser"])
        assert "exp(0)" not in forms["normaliser"]
        for j, num in enumerate(forms["numerators"]):
            value = Decimal(str(sympy.N(sympy.sympify(num) / den, 50)))
            want = value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN)
            assert f"{want:f}" == table["shares_decimal"][i][j], (i, j, num, forms["normaliser"])


def _rounded(expr, places: int) -> str:
    from decimal import ROUND_HALF_EVEN, Decimal

    import sympy
    value = Decimal(str(sympy.N(expr, 50)))
    return f"{value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN):f}"


@pytest.mark.parametrize("flags", CLOSED_FORM_POLICIES, ids=" ".join)
def test_printed_output_forms_parse_back_to_their_decimals(cli, flags):
    import json

    import sympy
    rc, out, err = cli("scores", "--format", "json", *flags)
    tables = json.loads(out)["tables"]
    shares, outputs = tables[0]["data"], tables[1]["data"]
    for i, row in enumerate(outputs["closed_forms"]):
        den = sympy.sympify(shares["closed_forms"][i]["normaliser"])
        for c, num in enumerate(row):
            assert _rounded(sympy.sympify(num) / den, shares["places"]) == \
                outputs["outputs_decimal"][i][c], (i, c, num)


@pytest.mark.parametrize("flags", [("--softcap", "1/2"), ("--softcap", "1/2", "--rope", "10000"),
                                   ("--softcap", "3", "--no-scale")], ids=" ".join)
def test_printed_capped_scores_parse_back_to_their_decimals(cli, flags):
    """``1/2*tanh((25/16)/1/2)`` once read as tanh(25/32) beside the decimal of tanh(25/8)."""
    import json

    import sympy
    rc, out, err = cli("square", "--format", "json", *flags)
    capped = json.loads(out)["tables"][-1]
    assert capped["name"] == "square/capped"
    data = capped["data"]
    for i, row in enumerate(data["exact"]):
        for j, form in enumerate(row):
            assert _rounded(sympy.sympify(form), 4) == data["decimal"][i][j], (i, j, form)


@pytest.mark.parametrize("fmt", ["json", "jsonl", "text", "csv", "markdown", "latex"])
@pytest.mark.parametrize("mode", ["walkthrough", "scores"])
def test_a_lone_surrogate_in_a_spec_text_is_written_in_every_format(cli, tmp_path, mode, fmt):
    """A spec's name or token text holding a lone surrogate made JSON output a traceback."""
    import json
    path = tmp_path / "s.json"
    path.write_text('{"name": "a\\ud800b", "layout": "slots", "tokens": [{"x": [1, 0], "text": "t\\udc00"}, '
                    '{"x": [0, 1]}], "W_Q": [[1, 0], [0, 1]], "W_K": [[1, 0], [0, 1]], '
                    '"W_V": [[1, 0], [0, 1]]}')
    rc, out, err = cli(mode, "--spec", str(path), "--format", fmt)
    assert (rc, err) == (0, "")
    out.encode("utf-8")                             # what stdout will have to write
    if fmt == "json":
        assert json.loads(out)["mode"] == mode
    if fmt == "jsonl":
        assert all(json.loads(line) for line in out.splitlines())


_FORM_CELL = re.compile(
    r"(?<![\w.)(/*^])(-?(?:\d|sqrt\()[0-9/*()sqrt.+-]*) (=|~) (-?\d+(?:\.\d+)?)(?![\d./])")


def _form_cells(text: str) -> list:
    """Every ``closed form = decimal`` / ``closed form ~ decimal`` cell of a text or markdown
    table."""
    return _FORM_CELL.findall(text)


# LaTeX prints these forms as math via sympy, its decimals verbatim: tests/present/test_latex.py
@pytest.mark.parametrize("fmt", ["text", "markdown"])
@pytest.mark.parametrize("args", [("walkthrough",), ("walkthrough", "--example", "tiny"),
                                  ("walkthrough", "--example", "bank-river", "--digits", "6"),
                                  ("square", "--example", "tiny", "--softcap", "2"),
                                  ("walkthrough", "--no-scale", "--sink", "1/3"),
                                  ("square", "--alibi", "3", "--head", "2"),
                                  ("backward",), ("backward", "--example", "tiny")],
                         ids=" ".join)
def test_closed_forms_in_text_tables_parse_back_to_their_decimals(cli, fmt, args):
    """Each cell a table prints as ``form = decimal`` (exact) or ``form ~ decimal`` (rounded),
    read back by sympy at 50 digits: ``=`` is the exact value, ``~`` its rounding to the
    printed places (ties to even) and not the exact value."""
    from decimal import ROUND_HALF_EVEN, Decimal

    import sympy
    rc, out, err = cli(*args, "--format", fmt)
    assert rc == 0, err
    cells = _form_cells(out)
    assert cells, "no closed form in this table"
    for form, how, dec in cells:
        value = sympy.sympify(form)
        assert value.is_real, form
        if how == "=":
            assert value == sympy.Rational(dec), (form, dec)
            continue
        places = len(dec.split(".")[1]) if "." in dec else 0
        got = Decimal(str(sympy.N(value, 50)))
        assert f"{got.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN):f}" == dec, \
            (form, dec)
        assert value != sympy.Rational(dec), (form, dec)


def test_a_square_head_without_a_layout_warns_once(cli, tmp_path):
    """Both readings of a square head pass every shape check: without ``layout`` the CLI says
    which one it took, once per file, on one stderr line; an explicit layout, or matrices
    that read the same both ways, get no warning."""
    import json
    doc = {"tokens": [{"x": [1, 0]}, {"x": [0, 1]}], "W_Q": [[1, 2], [0, 1]],
           "W_K": [[1, 0], [0, 1]], "W_V": [[1, 0], [0, 1]]}
    path = tmp_path / "square.json"
    path.write_text(json.dumps(doc))
    rc, out, err = cli("walkthrough", "--spec", str(path))
    assert rc == 0 and out and err == (
        f'exactattn: warning: {path}: a square head without "layout" is read as "slots" '
        '(q = W_Q x, nn.Linear); both readings pass every shape check: write "layout": '
        '"slots" or "rows" (q = x @ W_Q)\n')
    for changed in ({"layout": "rows"}, {"layout": "slots"}, {"W_Q": [[1, 2], [2, 1]]}):
        path.write_text(json.dumps(dict(doc, **changed)))
        assert cli("walkthrough", "--spec", str(path))[2] == ""
