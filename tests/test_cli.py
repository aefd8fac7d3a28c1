"""The CLI: golden output for every table in every format, and bad input -> one line, exit 2."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from exactattn.cli import main

HERE = Path(__file__).parent
GOLDEN = HERE / "golden" / "tables"
DATA = HERE / "data"
MODES = ["row", "weights", "project", "square", "scores", "walkthrough"]
FORMATS = {"text": "txt", "markdown": "md", "latex": "tex", "json": "json", "csv": "csv"}
UPDATE = os.environ.get("EXACTATTN_UPDATE_GOLDEN") == "1"




def check_golden(name: str, text: str):
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; run with EXACTATTN_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_golden_chronicle(cli, mode, fmt):
    rc, out, err = cli(mode, "--format", fmt)
    assert rc == 0 and err == ""
    check_golden(f"chronicle-{mode}.{FORMATS[fmt]}", out)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_golden_spec_rows_layout(cli, fmt):
    rc, out, _ = cli("walkthrough", "--spec", str(DATA / "chronicle_rows.toml"),
                     "--format", fmt)
    assert rc == 0
    check_golden(f"rows-walkthrough.{FORMATS[fmt]}", out)


def test_both_layouts_print_the_same_numbers(cli):
    _, slots, _ = cli("scores", "--spec", str(DATA / "chronicle_slots.json"))
    _, rows, _ = cli("scores", "--spec", str(DATA / "chronicle_rows.toml"))
    assert slots == rows
    assert "2      0.5800  0.1216  0.1769  0.1216  exactly 1" in slots


def test_golden_no_scale_and_explain(cli):
    rc, out, _ = cli("square", "--no-scale", "--explain", "2,1")
    assert rc == 0
    check_golden("chronicle-square-no-scale-explain.txt", out)
    assert "0×0 + 3×1 + 1/2×1/4 + 0×1/2 = 25/8 = 3.125" in out


def test_walkthrough_checkpoints(cli):
    rc, out, _ = cli("walkthrough", "--digits", "4")
    assert rc == 0
    for line in ["2      (0, 3, 1/2, 0)  (1, 0, 0, 0)", "the same numbers: true",
                 "2      25/8 = 3.125  0      3/4 = 0.75  0",
                 "2      25/16 = 1.5625  0      3/8 = 0.375  0",
                 "total        320", "rows 2 and 4 are identical"]:
        assert line in out, line


@pytest.mark.parametrize("argv, pattern", [
    (["scores", "--example", "nope"], "example must be one of"),
    (["scores", "--spec", "/nonexistent/x.json"], "does not exist"),
    (["scores", "--format", "yaml"], r"error: --format must be one of text, markdown, latex, "
                                     r"json, csv, svg, png \(got 'yaml'\)$"),
    (["row", "--format", "yaml"], r"error: --format must be one of text, markdown, latex, "
                                  r"json, csv \(got 'yaml'\)$"),
    (["scores", "--digits", "-1"], r"error: --digits must be a whole number from 0 to 50 "
                                   r"\(got '-1'\)$"),
    (["walkthrough", "--digits", "x"], r"error: --digits must be a whole number from 0 to 50 "
                                       r"\(got 'x'\)$"),
    (["scores", "--explain", "2"], r"error: --explain must be two positions I,J such as 2,1 "
                                   r"\(got '2'\)$"),
    (["scores", "--explain", "9,1"], r"error: --explain must name two tokens from 1 to 4 "
                                     r"\(got 9,1\)$"),
    (["scores", "--explain", "0,1"], r"error: --explain must be a positive whole number "
                                     r"\(got '0'\)$"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["scores", "--format", "svg", "--explain", "1,1"], "--explain must be used with a table"),
    (["scores", "--spec", ""], r"--spec must name a JSON or TOML file \(got ''\)"),
    (["scores", "--example", ""], r"example must be one of .* \(got ''\)"),
    (["scores", "--example", "chronicle", "--spec", "x.json"], "not allowed with argument"),
    (["weights", "--digits", "7"], r"error: weights takes no option --digits \(got --digits 7\); "
                                   r"see `exactattn weights --help` for its options$"),
    (["row", "--no-scale"], r"error: row takes no option --no-scale"),
    (["project", "--explain", "1,1"], r"error: project takes no option --explain"),
    (["scores", "extra"], r"error: scores takes no argument 'extra' \(got extra\)"),
    (["prove", "--list", "--quiet"], r"error: --quiet must be used without --list \(got both\)"),
])
def test_bad_arguments_exit_2_with_one_line(capsys, argv, pattern):
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors exit directly, also with 2
        code = e.code
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("exactattn: error: ")
    assert re.search(pattern, lines[0])


def test_bare_command_prints_the_usage_and_exits_2(capsys):
    for argv, listed in (([], ["walkthrough", "scores", "cost", "scale", "sweep", "prove",
                               "verify"]), (["sweep"], ["divisor", "length"])):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
        out, err = capsys.readouterr()
        assert code == 2 and out == ""
        assert err.startswith("usage: exactattn")
        assert all(f"\n    {name}" in err for name in listed), err
        what = "COMMAND must be one of the commands" if not argv else \
            "KIND must be one of the kinds"
        assert err.endswith(f"exactattn: error: {what} above (got none)\n")


def test_bad_spec_file_exit_2(tmp_path, cli):
    p = tmp_path / "bad.json"
    p.write_text('{"tokens": [{"x": [1, 2]}], "W_Q": [[1, 0]], "W_K": [[1, 0, 1]], "W_V": [[1, 0]]}')
    rc, out, err = cli("walkthrough", "--spec", str(p))
    assert rc == 2 and out == ""
    assert err == f"exactattn: error: {p}: W_K must be 1 x 2 in the slots layout (got 1 x 3)\n"


def test_python_dash_m_and_no_traceback(tmp_path):
    p = tmp_path / "t.json"
    p.write_text('{"tokens": [')
    r = subprocess.run([sys.executable, "-m", "exactattn", "scores", "--spec", str(p)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("exactattn: error: ") and r.stderr.count("\n") == 1
    ok = subprocess.run([sys.executable, "-m", "exactattn", "scores"], capture_output=True,
                        text=True)
    assert ok.returncode == 0 and "0.5800" in ok.stdout


def test_explain_a_masked_pair_divides_the_raw_score(tmp_path, cli):
    import json
    doc = json.loads((DATA / "chronicle_slots.json").read_text())
    doc["causal"] = True
    p = tmp_path / "causal.json"
    p.write_text(json.dumps(doc))
    rc, out, _ = cli("square", "--spec", str(p), "--explain", "1,3")
    assert rc == 0
    assert "0×0 + 0×0 + 0×3/2 + 1/2×1 = 1/2 = 0.5" in out
    assert "divided by 2: 1/4 = 0.25" in out
    assert "this pair is masked (causal)" in out


# every option of every table, sweep, scale and prove command does something ----------
SPEC = {"name": "other", "tokens": [{"text": "a", "x": [1, 0]}, {"text": "b", "x": ["1/2", 2]},
                                    {"text": "c", "x": [0, 1]}],
        "W_Q": [[1, 1], [0, 1]], "W_K": [[1, 0], [1, 1]], "W_V": [[2, 0], [0, 1]],
        "divisor": "sqrt(3)", "causal": True}

#: per command: (the base arguments, {option: its value}); the options of the base
#: example where it matters (tiny has an irrational divisor, so --digits shows there)
OPTIONS = {
    "row": ([], {"--example": ["tiny"], "--spec": ["SPEC"], "--format": ["json"]}),
    "weights": ([], {"--example": ["tiny"], "--spec": ["SPEC"], "--format": ["csv"]}),
    "project": ([], {"--example": ["tiny"], "--spec": ["SPEC"], "--format": ["markdown"]}),
    "square": (["--example", "tiny"],
               {"--example": ["self-match"], "--spec": ["SPEC"], "--format": ["svg"],
                "--digits": ["6"], "--no-scale": [], "--explain": ["1,2"], "-o": ["OUT"]}),
    "scores": (["--example", "tiny"],
               {"--example": ["self-match"], "--spec": ["SPEC"], "--format": ["latex"],
                "--digits": ["6"], "--no-scale": [], "--explain": ["2,1"], "-o": ["OUT"]}),
    "walkthrough": (["--example", "tiny"],
                    {"--example": ["bank-loan"], "--spec": ["SPEC"], "--format": ["csv"],
                     "--digits": ["2"], "--no-scale": [], "--explain": ["1,1"]}),
    "sweep divisor": ([], {"--example": ["tiny"], "--spec": ["SPEC"], "--row": ["1"],
                           "--divisors": ["1,3"], "--digits": ["6"], "--format": ["json"]}),
    "sweep length": (["--lengths", "2,4"], {"--example": ["tiny"], "--spec": ["SPEC"],
                                            "--lengths": ["3"], "--format": ["markdown"]}),
    "scale": (["--widths", "4", "--trials", "20"],
              {"--widths": ["4,16"], "--trials": ["30"], "--seed": ["1"], "--tokens": ["3"],
               "--digits": ["2"], "--format": ["json"], "--progress": []}),
    "prove": (["shares_positive"], {"NAME": ["row_sums_to_one"], "--list": [], "-q": []}),
}


#: options refused with the base arguments: -o writes pictures, and the base prints a table
REFUSED = {("square", "-o"), ("scores", "-o")}


def _options_of(command: str) -> list[str]:
    """The options (first spelling) and positionals (metavar) the parser gives ``command``."""
    import argparse

    from exactattn.cli import build_parser
    parser = build_parser()
    for word in command.split():
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return [a.option_strings[0] if a.option_strings else a.metavar
            for a in parser._actions if a.dest != "help"]


@pytest.mark.parametrize("command", list(OPTIONS))
def test_every_option_changes_the_output_or_is_refused(cli, tmp_path, command):
    import json
    spec = tmp_path / "other.json"
    spec.write_text(json.dumps(SPEC))
    base, values = OPTIONS[command]
    assert sorted(_options_of(command)) == sorted(values), "add the new option to OPTIONS"
    for flag, value in values.items():
        value = [str(spec) if v == "SPEC" else str(tmp_path / "out.svg") if v == "OUT" else v
                 for v in value]
        # a source option is compared with the default source (chronicle)
        start = [] if flag in ("--example", "--spec") else base
        rc0, out0, err0 = cli(*command.split(), *start)
        args = value if flag == "NAME" else [flag, *value]
        if flag == "NAME":
            start = []
        rc, out, err = cli(*command.split(), *start, *args)
        assert rc0 in (0, 1), (command, err0)
        refused = rc == 2 and out == "" and err.count("\n") == 1 and \
            err.startswith("exactattn: error: ") and flag in err
        changed = rc in (0, 1) and (out, err) != (out0, err0)
        assert (refused if (command, flag) in REFUSED else changed), (command, flag, err)


@pytest.mark.parametrize("argv", [["--help"], ["walkthrough", "--digits", "x"], ["scale", "--help"],
                                  ["sweep", "divisor", "--row", "0"], []])
def test_help_and_option_errors_start_without_heavy_imports(argv):
    """--help and a one-line option error load neither sympy, numpy nor python-flint."""
    code = ("import sys\nfrom exactattn.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in ('sympy', 'numpy', 'flint', 'mpmath') if m in sys.modules)\n"
            "sys.stderr.write('HEAVY=' + ','.join(heavy))\n")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          cwd=HERE.parent)
    assert done.stderr.rstrip().endswith("HEAVY="), done.stderr[-300:]


def _causal_spec(tmp_path) -> str:
    import json
    doc = json.loads((DATA / "chronicle_slots.json").read_text())
    doc["causal"] = True
    p = tmp_path / "causal.json"
    p.write_text(json.dumps(doc))
    return str(p)


def test_text_and_markdown_mark_exact_values_as_exact(cli, tmp_path):
    spec = _causal_spec(tmp_path)
    _, text, _ = cli("scores", "--spec", spec)
    # query 1 sees key 1 alone: its share is exactly 1, the others are masked (exactly 0)
    assert "\n1      1       masked  masked  masked  exactly 1  1 at key 1\n" in text
    assert "a masked key (one the query does not see) gets a share of exactly 0" in text
    # its output is the value of token 1 exactly; query 2's third output is exactly 0
    assert "\n1      0       1       0       1/2 = 0.5\n" in text
    assert "\n2      0.1733  0.8267  0       1/2 = 0.5\n" in text
    assert "out     (0.1733, 0.8267, 0, 1/2)\n" in text
    _, md, _ = cli("scores", "--spec", spec, "--format", "markdown")
    assert "| 1 | 1 | masked | masked | masked | exactly 1 | 1 at key 1 |" in md
    assert "| 2 | 0.1733 | 0.8267 | 0 | 1/2 = 0.5 |" in md
    # machine formats keep one decimal per cell, as every other cell of the column
    _, csv, _ = cli("scores", "--spec", spec, "--format", "csv")
    assert "scores/shares,1,1.0000,0.0000,0.0000,0.0000,exactly 1,1.0000 at key 1\n" in csv
    assert "scores/outputs,2,0.1733,0.8267,0.0000,0.5000\n" in csv
    import json
    _, js, _ = cli("scores", "--spec", spec, "--format", "json")
    tables = json.loads(js)["tables"]
    assert tables[0]["rows"][0] == ["1", "1.0000", "0.0000", "0.0000", "0.0000", "exactly 1",
                                    "1.0000 at key 1"]
    assert tables[0]["data"]["shares_exact"][0] == ["1", "0", "0", "0"]
    _, tex, _ = cli("scores", "--spec", spec, "--format", "latex")
    assert "1 & 1.0000 & 0.0000 & 0.0000 & 0.0000 & exactly 1 & 1.0000 at key 1 \\\\" in tex


def test_equal_scores_give_exact_rational_shares(cli, tmp_path):
    import json
    p = tmp_path / "flat.json"
    p.write_text(json.dumps({"tokens": [{"x": [1, 0]}, {"x": [1, 0]}, {"x": [1, 0]}],
                             "W_Q": [[1, 0]], "W_K": [[1, 0]], "W_V": [[1, 0]]}))
    _, text, _ = cli("scores", "--spec", str(p))
    assert "\n1      1/3 ~ 0.3333  1/3 ~ 0.3333  1/3 ~ 0.3333  exactly 1  1/3 ~ 0.3333 at key " \
        "1, 2, 3\n" in text
    _, csv, _ = cli("scores", "--spec", str(p), "--format", "csv")
    assert 'scores/shares,1,0.3333,0.3333,0.3333,exactly 1,"0.3333 at key 1, 2, 3"' in csv


def test_counts_read_in_the_singular(cli, tmp_path):
    import json
    p = tmp_path / "one.json"
    p.write_text(json.dumps({"tokens": [{"x": [1, 2]}], "W_Q": [[1, 0]], "W_K": [[1, 1]],
                             "W_V": [[1, 0]]}))
    _, out, _ = cli("walkthrough", "--spec", str(p))
    assert "1 token, each with d_model = 2 numbers" in out
    assert "one projection of one token: 2 multiplications and 1 addition (2 multiply-adds)" \
        in out


def test_png_to_a_terminal_is_refused(cli, monkeypatch):
    import sys as system
    monkeypatch.setattr(system.stdout, "isatty", lambda: True)
    rc, out, err = cli("scores", "--format", "png")
    assert rc == 2 and out == ""
    assert err == ("exactattn: error: -o must name a file for --format png (got a terminal on "
                   "stdout); pass -o shares.png or redirect stdout to a file\n")


def test_symbolic_trace_has_no_scores_table():
    import sympy

    from exactattn.examples import chronicle
    from exactattn.errors import InputError
    from exactattn.head import Head, attend
    from exactattn.tables import build
    t = attend(Head([[sympy.Symbol("a")]], [[1]], [[1]], symbolic=True), [[1], [2]])
    with pytest.raises(InputError, match=r"trace must come from a numeric engine for the scores "
                                         r"table \(got symbolic\)"):
        build("scores", chronicle(), t)
    # the other modes print a symbolic trace's exact values (a symbolic score has no decimal)
    assert build("square", chronicle(), t)[1].rows == [["1", "a", "2*a"], ["2", "2*a", "4*a"]]
