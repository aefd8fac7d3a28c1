"""The CLI: golden output for every table in every format, and bad input -> one line, exit 2."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from exactattn.cli import main

HERE = Path(__file__).parents[1]
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
    (["scores", "--spec", "/nonexistent/x.json"], r"must exist \(got no such file\)"),
    (["scores", "--format", "yaml"], r"error: --format must be one of text, markdown, latex, "
                                     r"json, csv, jsonl, svg, png \(got 'yaml'\)$"),
    (["row", "--format", "yaml"], r"error: --format must be one of text, markdown, latex, "
                                  r"json, csv, jsonl \(got 'yaml'\)$"),
    (["scores", "--queries", "9"], r"error: --queries must name tokens from 1 to 4 \(got 9\)$"),
    (["square", "--keys", "2..9"], r"error: --keys must name tokens from 1 to 4 \(got 2..9\)$"),
    (["scores", "--queries", "x"], r"error: --queries must be token numbers such as 1..8, 3 "
                                   r"or 1..4,10 \(got 'x'\)$"),
    (["row", "--queries", "3..1"], r"error: --queries must count up from 1, as in 1..8 "
                                   r"\(got '3..1'\)$"),
    (["weights", "--queries", "1"], r"error: weights takes no option --queries"),
    (["project", "--keys", "1"], r"error: project takes no option --keys"),
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
    (["frobnicate"], "COMMAND must be one of row, weights, project, square, scores, walkthrough"),
    (["walkthru"], r"\(got 'walkthru'\); did you mean walkthrough\?"),
    (["--bogus"], "exactattn takes no option '--bogus' before a command"),
    (["walkthrough", "--spec"], r"--spec needs a value \(got none\)"),
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
    assert err == f"exactattn: error: {p}: W_K must be 1 x 2 in the slots layout, to match W_Q (got 1 x 3)\n"


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
SPEC = {"name": "other", "tokens": [{"text": "a", "x": [1, 0]}, {"text": "b", "x": ["0.5", 2]},
                                    {"text": "c", "x": [0, 1]}],
        "W_Q": [[1, 1], [0, 1]], "W_K": [[1, 0], [1, 1]], "W_V": [[2, 0], [0, "1.0"]],
        "divisor": "sqrt(3)", "causal": True, "layout": "slots"}

#: per command: (the base arguments, {option: its value}); the options of the base
#: example where it matters (tiny has an irrational divisor, so --digits shows there)
OPTIONS = {
    "row": ([], {"--example": ["tiny"], "--spec": ["SPEC"], "--format": ["json"],
                 "--queries": ["2..3"]}),
    "weights": ([], {"--example": ["tiny"], "--spec": ["SPEC"], "--format": ["csv"]}),
    "project": ([], {"--example": ["tiny"], "--spec": ["SPEC"], "--format": ["markdown"],
                     "--queries": ["1"]}),
    "square": (["--example", "tiny"],
               {"--example": ["self-match"], "--spec": ["SPEC"], "--format": ["svg"],
                "--digits": ["6"], "--no-scale": [], "--explain": ["1,2"], "-o": ["OUT"],
                "--queries": ["2"], "--keys": ["1"],
                "--sink": ["0"], "--softcap": ["1"], "--alibi": ["8"],
                "--head": ["1", "--alibi", "8"],
                "--window": ["0,0"], "--query-offset": ["1", "--window", "1,0"],
                "--rope": ["10000:interleaved"],
                "--rope-scaling": ['{"rope_type": "linear", "factor": 2}', "--rope", "10000:interleaved"]}),
    "scores": (["--example", "tiny"],
               {"--example": ["self-match"], "--spec": ["SPEC"], "--format": ["latex"],
                "--digits": ["6"], "--no-scale": [], "--explain": ["2,1"], "-o": ["OUT"],
                "--queries": ["2"], "--keys": ["2"], "--lse": [],
                "--sink": ["0"], "--softcap": ["1"], "--alibi": ["8"],
                "--head": ["1", "--alibi", "8"],
                "--window": ["0,0"], "--query-offset": ["1", "--window", "1,0"],
                "--rope": ["10000:interleaved"],
                "--rope-scaling": ['{"rope_type": "linear", "factor": 2}', "--rope", "10000:interleaved"]}),
    "walkthrough": (["--example", "tiny"],
                    {"--example": ["bank-loan"], "--spec": ["SPEC"], "--format": ["csv"],
                     "--digits": ["2"], "--no-scale": [], "--explain": ["1,1"],
                     "--queries": ["1"], "--keys": ["1"], "--lse": [],
                     "--sink": ["0"], "--softcap": ["1"], "--alibi": ["8"],
                     "--head": ["1", "--alibi", "8"],
                     "--window": ["0,0"], "--query-offset": ["1", "--window", "1,0"],
                     "--rope": ["10000:interleaved"],
                "--rope-scaling": ['{"rope_type": "linear", "factor": 2}', "--rope", "10000:interleaved"]}),
    "sweep divisor": ([], {"--example": ["tiny"], "--spec": ["SPEC"], "--row": ["1"],
                           "--divisors": ["1,3"], "--digits": ["6"], "--format": ["json"]}),
    "sweep length": (["--lengths", "2,4"], {"--example": ["tiny"], "--spec": ["SPEC"],
                                            "--lengths": ["3"], "--format": ["markdown"]}),
    "scale": (["--widths", "4", "--trials", "20"],
              {"--widths": ["4,16"], "--trials": ["30"], "--seed": ["1"], "--tokens": ["3"],
               "--digits": ["2"], "--format": ["json"], "--progress": []}),
    "prove": (["shares_positive"], {"NAME": ["row_sums_to_one"], "--list": [], "-q": []}),
    "backward": ([], {"--example": ["tiny"], "--spec": ["SPEC"], "--format": ["json"],
                      "--d-out": ["1,0,0,0"], "--digits": ["6"], "--sink": ["0"],
                      "--softcap": ["1"], "--alibi": ["8"], "--head": ["1", "--alibi", "8"],
                      "--window": ["0,0"], "--query-offset": ["1", "--window", "1,0"],
                      "--rope": ["10000"],
                      "--rope-scaling": ['{"rope_type": "linear", "factor": 2}']}),
}


#: options refused with the base arguments: -o writes pictures, and the base prints a table
REFUSED = {("square", "-o"), ("scores", "-o"), ("backward", "--softcap"), ("backward", "--rope"),
           ("backward", "--rope-scaling")}     # a scaling needs a rope


def _options_of(command: str) -> list[str]:
    """The options (first spelling) and positionals (metavar) the parser gives ``command``."""
    import argparse

    from exactattn.cli import build_parser
    parser = build_parser()
    for word in command.split():
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return [a.option_strings[0] if a.option_strings else a.metavar
            for a in parser._actions if a.dest not in ("help", "no_progress")]


@pytest.mark.parametrize("command", list(OPTIONS))
def test_every_option_changes_the_output_or_is_refused(cli, tmp_path, command):
    import json
    spec = tmp_path / "other.json"
    spec.write_text(json.dumps(SPEC))
    base, values = OPTIONS[command]
    if "--width" in _options_of(command):       # every command with --format: text width
        values = dict(values, **{"--width": ["20"]})
    if "--fractions" in _options_of(command):   # the input tables: typed decimals as fractions
        values = dict(values, **{"--fractions": []})
    if "--columns" in _options_of(command):     # the vector tables: the first N numbers
        values = dict(values, **{"--columns": ["1"]})
    assert sorted(_options_of(command)) == sorted(values), "add the new option to OPTIONS"
    for flag, value in values.items():
        value = [str(spec) if v == "SPEC" else str(tmp_path / "out.svg") if v == "OUT" else v
                 for v in value]
        # a source option is compared with the default source (chronicle); --fractions
        # with a spec whose inputs were typed as decimals
        start = [] if flag in ("--example", "--spec") else \
            ["--spec", str(spec)] if flag == "--fractions" else base
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
                                  ["sweep", "divisor", "--row", "0"], [], ["verify", "--help"],
                                  ["verify", "--impl", "jax", "--arrays", "cupy"]])
def test_help_and_option_errors_start_without_heavy_imports(argv):
    """--help and a one-line option error load neither sympy, numpy, python-flint, torch nor jax."""
    code = ("import sys\nfrom exactattn.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in ('sympy', 'numpy', 'flint', 'mpmath', 'torch', 'jax')\n"
            "               if m in sys.modules)\n"
            "sys.stderr.write('HEAVY=' + ','.join(heavy))\n")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          cwd=HERE.parent)
    assert done.stderr.rstrip().endswith("HEAVY="), done.stderr[-300:]


def test_the_command_map_names_what_each_module_registers():
    """cli.COMMAND_MODULES lists, per module, exactly the commands its register() adds, in
    order; a run of one command builds the parser of its module alone."""
    import argparse
    import importlib

    from exactattn.cli import COMMAND_MODULES, build_parser
    for name, commands in COMMAND_MODULES.items():
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(name).register(sub)
        assert tuple(sub.choices) == commands, name
    full = build_parser()
    every = tuple(c for cs in COMMAND_MODULES.values() for c in cs)
    assert tuple(next(a for a in full._actions if a.dest == "command").choices) == every
    one = build_parser("walkthrough")
    assert tuple(next(a for a in one._actions if a.dest == "command").choices) == \
        COMMAND_MODULES["exactattn.commands.tables"]
    assert one.command_names == full.command_names == every
    argv = ["walkthrough", "--digits", "6", "--queries", "2..3"]
    assert {k: v for k, v in vars(one.parse_args(argv)).items() if k != "func"} == \
        {k: v for k, v in vars(full.parse_args(argv)).items() if k != "func"}
    typo = build_parser("walkthroug")                  # a typo: every command, to suggest from
    assert tuple(next(a for a in typo._actions if a.dest == "command").choices) == every


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
    # closed forms without sympy: query 1 sees key 1 alone, its share is exp(s)/exp(s)
    forms = tables[0]["data"]["closed_forms"][0]
    assert forms["numerators"][1:] == ["0", "0", "0"]
    assert forms["normaliser"] == forms["numerators"][0]
    _, tex, _ = cli("scores", "--spec", spec, "--format", "latex")
    # LaTeX is for people too: the reader's text, numbers as math (tests/present/test_latex.py)
    assert "\n$1$ & $1$ & masked & masked & masked & exactly 1 & 1 at key 1 \\\\\n" in tex
    assert "\n$2$ & $0.1733$ & $0.8267$ & $0$ & $\\frac{1}{2} = 0.5$ \\\\\n" in tex


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
    from exactattn.engines.head import Head, attend
    from exactattn.present.tables import build
    t = attend(Head([[sympy.Symbol("a")]], [[1]], [[1]], symbolic=True), [[1], [2]])
    with pytest.raises(InputError, match=r"trace must come from a numeric engine for the scores "
                                         r"table \(got symbolic\)"):
        build("scores", chronicle(), t)
    # the other modes print a symbolic trace's exact values (a symbolic score has no decimal)
    assert build("square", chronicle(), t)[1].rows == [["1", "a", "2*a"], ["2", "2*a", "4*a"]]


# any size: closed forms without sympy, corners for people, streams for tools -----------
def _random_spec(tmp_path, n: int, d: int = 3, *, seed: int = 0, **extra) -> str:
    """n random tokens of width d, entries p/q with |p| <= 3 and 4 <= q <= 8."""
    import json
    import random
    rng = random.Random(seed)

    def entry():
        return f"{rng.randint(-3, 3)}/{rng.randint(4, 8)}"
    doc = {"layout": "slots", "tokens": [{"x": [entry() for _ in range(d)]} for _ in range(n)],
           **{w: [[entry() for _ in range(d)] for _ in range(d)] for w in ("W_Q", "W_K", "W_V")},
           **extra}
    path = tmp_path / f"random{n}-{seed}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _traces(tmp_path):
    """Traces of every shape the forms must follow: rational, irrational and no divisor,
    causal rows, equal scores (rational shares), pencil and fast engines."""
    from exactattn.examples import example
    from exactattn.engines.head import attend
    from exactattn.engines.spec import load
    out = [attend(example(name).head, example(name).x) for name in
           ("chronicle", "tiny", "bank-river", "self-match")]
    for seed, extra in enumerate([{}, {"divisor": "sqrt(3/2)", "causal": True},
                                  {"divisor": "none"}, {"divisor": "48"}]):
        ex = load(_random_spec(tmp_path, 6, seed=seed, **extra))
        out.append(attend(ex.head, ex.x))
        out.append(attend(ex.head, ex.x, engine="fast"))
    flat = load(_random_spec(tmp_path, 3, seed=9))
    flat.x = [flat.x[0]] * 3
    out.append(attend(flat.head, flat.x))
    return out


def test_closed_forms_are_the_core_texts_built_without_sympy(tmp_path):
    from exactattn.present.cells import OUTPUT_TERMS, RowForms
    for trace in _traces(tmp_path):
        forms = RowForms(trace)
        for i in range(trace.n):
            den = forms.normaliser(i)
            tops = forms.numerators(i)
            assert type(den) is str and all(type(t) is str for t in tops)
            for j, top in enumerate(tops):
                share = trace.share(i, j)
                if share.rational() is None:
                    assert share.text() == f"{top}/({den})", (trace, i, j)
                elif trace.raw_score_row(i)[j] is None:
                    assert top == "0" and share.rational() == 0
            outs = forms.output_numerators(i)
            assert outs is None if forms.terms(i) > OUTPUT_TERMS else len(outs) == trace.head.d_v
            for c, top in enumerate(outs or []):
                value = trace.output(i, c)
                if value.rational() is None:
                    assert value.text() in (f"{top}/({den})", f"({top})/({den})"), (trace, i, c)


def test_json_imports_no_sympy_and_states_each_normaliser_once(tmp_path):
    import json
    spec = _random_spec(tmp_path, 20, divisor="sqrt(2)")
    code = ("import sys\nfrom exactattn.cli import main\nmain(sys.argv[1:])\n"
            "sys.stderr.write('SYMPY=' + str('sympy' in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code, "walkthrough", "--spec", spec,
                           "--format", "json"], capture_output=True, text=True, cwd=HERE.parent)
    assert done.returncode == 0 and done.stderr.endswith("SYMPY=False"), done.stderr[-300:]
    doc = json.loads(done.stdout)
    shares = next(t for t in doc["tables"] if t["name"] == "scores/shares")
    forms = shares["data"]["closed_forms"]
    assert len(forms) == 20 and set(forms[0]) == {"normaliser", "numerators"}
    assert len(forms[0]["numerators"]) == 20 and forms[0]["normaliser"].count("exp(") >= 2
    assert len(shares["rows"]) == 20 and len(shares["rows"][0]) == 23
    # a long row of plain values is written on one line: n^2 numbers take n lines
    assert '\n        ["1", "0.' in done.stdout
    outputs = next(t for t in doc["tables"] if t["name"] == "scores/outputs")
    assert outputs["data"]["closed_forms"][0] is None            # 20 distinct scores > 16
    assert len(outputs["data"]["values"]) == 20


def test_people_get_a_corner_and_every_query_s_largest(tmp_path, cli):
    from exactattn.engines.head import attend
    from exactattn.engines.spec import load
    spec = _random_spec(tmp_path, 20)
    rc, out, err = cli("scores", "--spec", spec, "--width", "0")
    assert rc == 0 and err == ""
    shares, rows = out.split("\n\n")[:2]
    lines = shares.splitlines()
    assert lines[2].split()[:5] == ["query", "key", "1", "key", "2"]
    assert "key 8" in lines[2] and "key 9" not in lines[2] and lines[2].endswith("largest")
    assert [ln.split()[0] for ln in lines[4:12]] == [str(i) for i in range(1, 9)]
    assert "showing queries 1..8 of 20 and keys 1..8 of 20 (sum and largest read every key); " \
        "choose with --queries and --keys, or use --format csv, json or jsonl for every value" \
        in shares
    assert rows.startswith("Each query: its sum and largest share\n")
    ex = load(spec)
    trace = attend(ex.head, ex.x)
    dec = trace.share_decimals(4)
    body = rows.splitlines()[4:24]
    assert len(body) == 20
    for i, line in enumerate(body):
        top = trace.row(i).largest()
        want = f"{dec[i][top[0]]} at key " + ", ".join(str(j + 1) for j in top)
        assert line.split(None, 1) == [str(i + 1), f"exactly 1  {want}"]
    # machine formats get everything
    _, csv, _ = cli("scores", "--spec", spec, "--format", "csv")
    assert csv.count("\nscores/shares,") == 20 + 2 and "key 20,sum" in csv   # rows, notes


def test_queries_and_keys_choose_the_part_shown(tmp_path, cli):
    import json
    from exactattn.engines.head import attend
    from exactattn.engines.spec import load
    spec = _random_spec(tmp_path, 20)
    rc, out, _ = cli("scores", "--spec", spec, "--queries", "2..3,19", "--keys", "1,5",
                     "--format", "json")
    assert rc == 0
    doc = json.loads(out)
    assert (doc["queries"], doc["keys"]) == ("2..3,19", "1,5")
    shares = doc["tables"][0]
    assert shares["columns"] == ["query", "key 1", "key 5", "sum", "largest"]
    assert [r[0] for r in shares["rows"]] == ["2", "3", "19"]
    ex = load(spec)
    dec = attend(ex.head, ex.x).share_decimals(4)
    assert shares["data"]["shares_decimal"] == [[dec[i][0], dec[i][4]] for i in (1, 2, 18)]
    assert [len(f["numerators"]) for f in shares["data"]["closed_forms"]] == [2, 2, 2]
    _, text, _ = cli("square", "--spec", spec, "--queries", "20", "--keys", "20")
    assert "\n20     " in text and "showing queries 20 of 20 and keys 20 of 20" in text
    assert "Each query" not in cli("scores", "--spec", spec, "--queries", "1..20")[1]


def test_jsonl_is_one_json_object_per_line(tmp_path, cli):
    import json
    spec = _random_spec(tmp_path, 20)
    rc, out, _ = cli("walkthrough", "--spec", spec, "--format", "jsonl")
    assert rc == 0 and out.endswith("\n")
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[0]["mode"] == "walkthrough" and lines[0]["tables"][:2] == ["row", "weights/W_Q"]
    rows = [r for r in lines if r.get("table") == "scores/shares" and "row" in r]
    assert len(rows) == 20 and rows[0]["row"][0] == "1" and len(rows[0]["row"]) == 23
    forms = [r for r in lines if r.get("data") == "closed_forms" and
             r["table"] == "scores/shares"]
    assert [r["index"] for r in forms] == list(range(20))
    assert set(forms[0]["value"]) == {"normaliser", "numerators"}


@pytest.mark.parametrize("fmt", ["text", "markdown", "latex", "json", "csv", "jsonl"])
def test_every_mode_at_twenty_tokens(tmp_path, cli, fmt):
    spec = _random_spec(tmp_path, 20, divisor="sqrt(5)", causal=True)
    for mode in MODES:
        rc, out, err = cli(mode, "--spec", spec, "--format", fmt)
        assert rc == 0 and err == "" and out.endswith("\n"), (mode, err)
        if fmt in ("text", "markdown", "latex") and mode in ("square", "scores"):
            assert "showing queries 1..8 of 20 and keys 1..8 of 20" in out


def test_values_too_long_to_print_whole_print_in_scientific_form(cli):
    """Issue #19: scores of entries 1e2200 have 4401 digits, past Python's int-to-str limit."""
    import json
    import tempfile
    doc = {"tokens": [{"x": ["1e2200", 0]}, {"x": [1, "1e2200"]}, {"x": ["1/3", "-1e2200"]}],
           "W_Q": [[1, 0], [0, 1]], "W_K": [[1, 0], [0, 1]], "W_V": [[1, 0], [0, 1]]}
    with tempfile.TemporaryDirectory() as folder:
        for divisor in ("sqrt(2)", "4", "none"):
            path = Path(folder) / f"big-{divisor}.json"
            path.write_text(json.dumps(dict(doc, divisor=divisor)))
            for mode in MODES:
                for fmt in ("text", "markdown", "latex", "json", "csv", "jsonl"):
                    rc, out, err = cli(mode, "--spec", str(path), "--format", fmt)
                    assert rc == 0 and err == "", (divisor, mode, fmt, err[-300:])
                    if mode in ("square", "walkthrough"):
                        big = "1.000000000000000 \\times 10^{4400}" if fmt == "latex" else \
                            "1.000000000000000e+4400"
                        assert big in out, (divisor, mode, fmt)


def test_scientific_forms_are_exact_roundings():
    from fractions import Fraction as F

    from exactattn.present.cells import exact_text, is_long, sci_root_text, sci_text, with_decimal
    big = F(10) ** 4400
    assert (is_long(big), is_long(F(10) ** 4000), is_long(F(1, 10 ** 4400))) == (True, False, True)
    assert exact_text(big) == "~1.000000000000000e+4400"
    assert exact_text(-big / 3) == "~-3.333333333333333e+4399"
    assert exact_text(F(2, 3) * F(10) ** -4400) == "~6.666666666666667e-4401"
    assert with_decimal(big + F(1, 3), 4) == "~1.000000000000000e+4400"
    assert exact_text(int(big) * 25 // 10) == "~2.500000000000000e+4400"
    assert sci_text(F(25, 100), 1) == "~2e-1"                # a tie: to even
    assert sci_text(F(35, 100), 1) == "~4e-1"
    assert sci_text(F(9999, 1000), 2) == "~1.0e+1"           # carries into the exponent
    assert sci_root_text(big, 2) == "~1.414213562373095e+4400"
    assert sci_root_text(-F(1, 3), 3, 6) == "~-5.77350e-1"
    assert type(exact_text(big)) is str


def test_outputs_past_the_int_to_str_limit_print_every_digit(tmp_path, cli):
    import json
    p = tmp_path / "huge-values.json"
    p.write_text(json.dumps({"tokens": [{"x": ["1e4000", 0]}, {"x": [1, "1"]}],
                             "W_Q": [[1, 0], [0, 1]], "W_K": [[1, 0], [0, 1]],
                             "W_V": [["1e4000", 0], [0, 1]], "divisor": "3"}))
    rc, out, err = cli("scores", "--spec", str(p))
    assert rc == 0, err
    outputs = out.split("Outputs:")[1].splitlines()
    assert outputs[4].split()[:2] == ["1", "1" + "0" * 8000 + ".0000"]


def test_row_texts_match_the_cell_texts():
    import random
    from fractions import Fraction as F

    from exactattn.present.cells import Scaler, exact_text, fraction_texts, with_decimal
    rng = random.Random(1)
    for _ in range(200):
        den = rng.choice([1, 2, 3, 8, 40, 705600, 497871360000])
        ints = [None if rng.random() < 0.1 else rng.randint(-10 ** 9, 10 ** 9)
                for _ in range(rng.choice([6, 40]))]           # 40: the numpy path
        places = rng.randint(0, 8)
        want = [None if v is None else with_decimal(F(v, den), places) for v in ints]
        assert fraction_texts(ints, den, places) == want
        assert fraction_texts(ints, den, None) == [None if v is None else exact_text(F(v, den))
                                                   for v in ints]
        for d2 in (None, F(4), F(9, 4), F(2), F(48), F(3, 2)):
            scale = Scaler(d2)
            assert scale.row(ints, den, places) == \
                [None if v is None else scale.text(F(v, den), places) for v in ints]


@pytest.mark.parametrize("d2", ["2", "3/2", "48", "12", "1/8", "50", "1000003"])
def test_irrational_scaled_scores_are_spelled_as_sympy_spells_them(d2):
    import sympy
    from fractions import Fraction as F

    from exactattn.present.cells import Scaler
    scale = Scaler(F(d2))
    root = sympy.sqrt(sympy.Rational(d2))
    for raw in (F(1), F(-1), F(3), F(-33, 25), F(1, 7), F(-1, 2), F(0), F(10 ** 12, 7)):
        want = sympy.expand(sympy.Rational(raw.numerator, raw.denominator) / root)
        assert scale.exact(raw) == str(want)
        if raw:
            assert scale.text(raw, 6) == f"{want} ~ {sympy.N(want, 30):.6f}"


def test_largest_share_from_certified_decimals_matches_the_core(tmp_path):
    from exactattn.present.score_tables import largest
    for trace in _traces(tmp_path):
        for places in (0, 1, 4):
            dec = trace.share_decimals(places)
            for i in range(trace.n):
                assert largest(trace, i, dec[i]) == trace.row(i).largest()


def test_json_writer_writes_what_json_dumps_writes():
    import json

    from exactattn.present.render import Cell, Section, render
    from exactattn.present.stream import LazyRows
    data = {"a": [1, 2.5, None, True], "b": {}, "c": [], "d": {"e": [[1, "x"], []]},
            "f": "é ünïcode", "g": LazyRows(2, lambda i: {"row": i, "cells": [i] * 3})}
    s = Section("t", "T", ["x", "y"], LazyRows(2, lambda i: [str(i), Cell("0.5", "1/2")]),
                ["a note"], data)
    meta = {"example": "e", "digits": 4}
    want = dict(meta, tables=[{"name": "t", "title": "T", "columns": ["x", "y"],
                               "rows": [["0", "0.5"], ["1", "0.5"]], "notes": ["a note"],
                               "data": dict(data, g=list(data["g"]))}])
    assert render([s], "json", meta) == json.dumps(want, indent=2, ensure_ascii=False) + "\n"
    assert render([], "json", meta) == json.dumps(dict(meta, tables=[]), indent=2) + "\n"
    wrapped = render([s], "json", meta, wrap=2)
    assert json.loads(wrapped) == want and '"a": [1, 2.5, null, true]' in wrapped


def test_progress_bar_only_on_a_terminal(monkeypatch):
    import sys as system

    from exactattn.present.stream import progress
    items = [1, 2, 3]
    assert progress(items, 3, "rows") is items          # stderr is captured: no bar
    monkeypatch.setattr(system.stderr, "isatty", lambda: True, raising=False)
    bar = progress(items, 3, "rows")
    assert bar is not items and list(bar) == items


def test_a_long_step_shows_its_time_on_a_terminal(monkeypatch, capsys):
    import sys as system
    import time

    from exactattn.present import stream
    with stream.busy("quick"):
        pass
    assert capsys.readouterr().err == ""                  # not a terminal: nothing
    monkeypatch.setattr(system.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(stream, "PROGRESS_DELAY", 0.05)
    with stream.busy("certifying shares"):
        time.sleep(0.3)
    assert "certifying shares: 00:0" in capsys.readouterr().err


def test_a_closed_pipe_ends_quietly(tmp_path):
    spec = _random_spec(tmp_path, 200)
    done = subprocess.run(f"{sys.executable} -m exactattn scores --spec {spec} --format csv "
                          "| head -c 100 > /dev/null", shell=True, capture_output=True,
                          text=True, cwd=HERE.parent)
    assert done.returncode == 0 and done.stderr == ""


def test_shared_options_have_one_owner():
    """--digits and --format are declared in commands/flags.py, the policy group's flags in
    commands/modifier_flags.py, and a check's InputError becomes argparse's error only in
    options.argtype: every command's parser reuses them."""
    package = Path(__file__).parents[2] / "exactattn"
    wrap = re.compile(r"except InputError as \w+:\s*\n\s*raise argparse\.ArgumentTypeError")
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert path.name == "options.py" or not wrap.search(text), path
        if path.parent.name == "commands" and path.name != "flags.py":
            assert not re.search(r"add_argument\(\"--(digits|format)\"", text), path
        if path.parent.name == "commands" and path.name not in ("modifier_flags.py", "cost.py"):
            assert not re.search(r"add_argument\(\"--(scale|causal|alignment|window|empty-row|"
                                 r"mask-kind|gqa|like)\"", text), path


def test_the_gradients_take_every_modifier():
    """``verify --backward`` refuses no modifier flag (modifier_flags.refuse has no such
    branch): the gradients have no row in the capability table and run every modifier."""
    from fractions import Fraction as F
    from exactattn.call.modifiers import Alibi, Rope
    from exactattn.call.policy import UNSUPPORTED, Policy
    from exactattn.gradients import gradients
    assert "gradients" not in UNSUPPORTED
    policy = Policy(rope=Rope(), softcap=F(5), sink=F(0), alibi=Alibi(2), window=(1, 0),
                    query_offset=1, dropout=F(1, 2))
    assert gradients([[1], [0]], [[1], [2]], [[1], [0]], [[1], [1]], policy,
                     dropout_keep=[[True, False], [True, True]]).dQ[0][0] is not None
