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
    (["scores", "--format", "yaml"], "invalid choice: 'yaml'"),
    (["scores", "--digits", "-1"], "--digits must be an integer from 0 to 50"),
    (["scores", "--explain", "2"], "--explain must be two token numbers"),
    (["scores", "--explain", "9,1"], r"query must be a token number from 1 to 4 \(got 9\)"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["scores", "--format", "svg", "--explain", "1,1"], "--explain must be used with a table"),
    (["scores", "--spec", ""], r"--spec must name a JSON or TOML file \(got ''\)"),
    (["scores", "--example", ""], r"example must be one of .* \(got ''\)"),
    ([], "the following arguments are required: COMMAND"),
    (["scores", "--example", "chronicle", "--spec", "x.json"], "not allowed with argument"),
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
