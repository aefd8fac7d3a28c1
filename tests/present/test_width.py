"""Text for a terminal: no line over 160 characters by default, as numpy's print options cut."""

import json
import random

from exactattn.present.render import Section, Vector, render


def _spec(tmp_path, n=20, d=64) -> str:
    rng = random.Random(0)

    def entry():
        return f"{rng.randint(-9, 9)}/{rng.randint(7, 99)}"
    doc = {"layout": "slots", "tokens": [{"x": [entry() for _ in range(d)]} for _ in range(n)],
           **{w: [[entry() for _ in range(d)] for _ in range(d)] for w in ("W_Q", "W_K", "W_V")}}
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_64_wide_head_fits_160_characters_and_says_what_it_cut(cli, tmp_path):
    spec = _spec(tmp_path)
    rc, out, err = cli("walkthrough", "--spec", spec)
    assert (rc, err) == (0, "")
    assert max(map(len, out.splitlines())) <= 160
    joined = out.replace("\n  ", " ")
    assert "vectors show their first 2 entries (~: long exact values rounded to 4 significant " \
           "digits) to fit 160 characters a line: --width 0 shows everything" in joined
    assert "long exact values shown by their decimal (~: correctly rounded)" in joined
    rc, wide, _ = cli("walkthrough", "--spec", spec, "--width", "0")
    assert rc == 0 and max(map(len, wide.splitlines())) > 300
    rc, md, _ = cli("walkthrough", "--spec", spec, "--format", "markdown")
    assert max(map(len, md.splitlines())) > 300          # markdown keeps every column


def test_middle_columns_give_way_to_one_ellipsis_column():
    cols = ["row"] + [f"column {c}" for c in range(30)]
    rows = [[str(r)] + [f"{r}.{c:04d}" for c in range(30)] for r in range(3)]
    text = render([Section("t", "T", cols, rows, [], {})], "text")
    lines = text.splitlines()
    assert max(map(len, lines)) <= 160
    head = lines[2].split()
    assert head[:3] == ["row", "column", "0"] and "..." in head and head[-2:] == ["column", "29"]
    assert "of 30 columns left out (shown as ...)" in text.replace("\n  ", " ")
    assert render([Section("t", "T", cols, rows, [], {})], "csv").count("column 15") == 1


def test_a_vector_shows_fewer_entries_and_counts_the_rest():
    v = Vector("(1, 2, 3, ... +5 more)", "(1, 2, 3, ... +5 more)", ["1", "2", "3"], 5)
    assert v.shown(2) == "(1, 2, ... +6 more)" and v.shown(3) == v.reader


def test_decimals_the_user_typed_are_shown_as_typed(cli, tmp_path):
    """``-0.731`` stays ``-0.731`` in text tables (JSON keeps the exact fraction); --fractions
    shows fractions; a typed text that is not the entry's exact value is never shown."""
    path = tmp_path / "dec.json"
    path.write_text('{"layout": "rows", "tokens": [{"x": [0.8, "-0.731"]}, {"x": ["1/3", 2]}], '
                    '"W_Q": [[1, "0.5"], [0, 1]], "W_K": [[0, 1], [1, 0]], '
                    '"W_V": [[1, 0], [0, 1]]}')
    rc, out, _ = cli("row", "--spec", str(path))
    assert rc == 0 and "1      7      token 1  0.8  -0.731" in out
    assert "2      7      token 2  1/3  2" in out
    rc, out, _ = cli("row", "--spec", str(path), "--fractions")
    assert "4/5  -731/1000" in out
    rc, out, _ = cli("weights", "--spec", str(path))
    assert "1      1       0.5" in out
    rc, out, _ = cli("row", "--spec", str(path), "--format", "json")
    assert '"-731/1000"' in out and '"-0.731"' not in out
