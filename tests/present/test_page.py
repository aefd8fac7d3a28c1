"""The interactive page (``exactattn page``): its numbers, its self-containment, its command.

The browser half (sliders moved in headless Chromium) is tests/present/test_browser.py.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from fractions import Fraction

import pytest

from exactattn.cli import main
from exactattn.cost import count, derive_at
from exactattn.errors import InputError
from exactattn.examples import bank_loan, bank_river, chronicle, example, tiny
from exactattn.engines.head import Head, attend
from exactattn.page import LENGTHS, build_page, page_numbers, with_companions
from exactattn.page.data import DIVISOR_SQUARES, divisor_stops, length_numbers
from exactattn.page.html import CSP, page_html, script_data
from exactattn.page.picture import frame
from exactattn.engines.spec import load
from exactattn.present.sweep import with_divisor


#: short length stops keep the fixtures quick; the real ones (1,000 .. 16,000) are checked
#: by test_length_stops_are_counted_or_derived_and_exact and test_the_command_writes_the_page
SHORT = (4, 8)


@pytest.fixture(scope="module")
def bank():
    return page_numbers([bank_river(), bank_loan()], lengths=SHORT)


@pytest.fixture(scope="module")
def bank_text(bank):
    return page_html(bank)


def embedded(text: str) -> dict:
    found = re.search(r'<script type="application/json" id="page-data">(.*?)</script>', text,
                      re.S)
    return json.loads(found.group(1).replace("<\\/", "</"))


def test_both_sentences_on_one_page(bank_text):
    assert 'id="sentence-0"' in bank_text and 'id="sentence-1"' in bank_text
    assert "the river bank flooded" in bank_text and "the bank lent money" in bank_text
    # the switch names them River and Loan, each sentence beside its label
    assert ('value="0" checked> <b>River</b>: <span class="sentence-text">the river bank '
            'flooded</span>') in bank_text
    assert 'value="1"> <b>Loan</b>: <span class="sentence-text">the bank lent money</span>' \
        in bank_text
    assert with_companions(["bank-river"]) == ["bank-river", "bank-loan"]
    assert with_companions(["bank-loan", "bank-river"]) == ["bank-loan", "bank-river"]
    assert with_companions(["tiny"]) == ["tiny"]


def test_the_command_writes_the_page(tmp_path, bank_text):
    path = tmp_path / "bank.html"
    assert main(["page", "--example", "bank-river", "-o", str(path)]) == 0
    text = path.read_text(encoding="utf-8")
    data = embedded(text)
    assert data["sentences"] == embedded(bank_text)["sentences"]
    assert [r["n"] for r in data["lengths"].values()] == ["1,000", "2,000", "4,000", "8,000",
                                                          "16,000"]
    assert "<code>exactattn page --example bank-river</code>" in text


def test_every_share_and_output_is_the_certified_value(bank):
    """Each stop's shares and output are the per-entry certified decimals of a fresh run."""
    assert len(bank.stops) == len(DIVISOR_SQUARES) + 1   # sqrt(2) is one of them, plus none
    for ex, s in zip((bank_river(), bank_loan()), bank.sentences):
        i = ex.focus
        for stop in bank.stops:
            t = attend(with_divisor(ex.head, stop.divisor_squared), ex.x)
            at = s.at[stop.key]
            assert at["decimals"] == [t.share(i, j).decimal(4) for j in range(4)]
            assert at["output"] == [t.output(i, c).decimal(4) for c in range(2)]
            assert all(type(v) is str for v in at["shares"] + at["output"])
            assert at["sums_to_one"] is True


def test_the_head_s_own_stop_is_sqrt_d_k(bank):
    own = [s for s in bank.stops if s.own]
    assert [(s.label, s.divisor_squared) for s in own] == [("sqrt(2)", Fraction(2))]
    assert own[0].words == "sqrt(d_k) = sqrt(2) ~ 1.4142 (the head's own)"
    assert bank.own_key == own[0].key == "7"
    river = bank.sentences[0].at["7"]
    assert river["shares"] == ["0.1941", "0.2764", "0.2764", "0.2530"]
    assert river["output"] == ["0.1382", "0.6044"]
    assert bank.sentences[1].at["7"]["output"] == ["0.6044", "0.1382"]   # the mirror image


def test_stops_are_log_spaced_and_the_shares_flatten(bank):
    numeric = [s for s in bank.stops if s.divisor_squared is not None]
    squares = [s.divisor_squared for s in numeric]
    assert all(b / a == 2 for a, b in zip(squares, squares[1:]))   # divisor x sqrt(2) each
    assert (numeric[0].label, numeric[-1].label) == ("1/8", "128")
    s = bank.sentences[0]
    largest = [max(Fraction(d) for d in s.at[k.key]["decimals"]) for k in numeric]
    smallest = [min(Fraction(d) for d in s.at[k.key]["decimals"]) for k in numeric]
    assert all(a > b for a, b in zip(largest, largest[1:]))
    assert all(a < b for a, b in zip(smallest, smallest[1:]))
    assert s.equal == "1/4 = 0.25" and s.visible == 4
    assert s.at[numeric[-1].key]["decimals"] == ["0.2493", "0.2503", "0.2503", "0.2501"]
    assert s.small_limit == ["0", "1/2", "1/2", "0"]


def test_none_is_divisor_one(bank):
    one = next(s for s in bank.stops if s.label == "1")
    none = bank.stops[-1]
    assert (none.key, none.divisor_squared, none.label) == ("none", None, "none")
    for s in bank.sentences:
        assert s.at["none"]["decimals"] == s.at[one.key]["decimals"]


def test_matches_sweep_divisor_at_every_shared_stop(bank, capsys):
    assert main(["sweep", "divisor", "--example", "bank-river", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["tables"][0]["rows"]
    by_label = {s.label: s.key for s in bank.stops}
    shared = 0
    for row in rows:
        label = row[0].split(" (")[0]
        if label in by_label:
            assert row[1:5] == bank.sentences[0].at[by_label[label]]["decimals"], label
            shared += 1
    assert shared == 10   # 1/8 .. 128 and sqrt(2): every stop of the sweep


def test_length_stops_are_counted_or_derived_and_exact():
    rows, note = length_numbers(bank_river().head)
    assert [r["n"] for r in rows] == ["1,000", "2,000", "4,000", "8,000", "16,000"]
    assert [r["scores"] for r in rows] == ["1,000,000", "4,000,000", "16,000,000",
                                           "64,000,000", "256,000,000"]
    assert [r["counted"] for r in rows] == [False] * 5
    assert rows[0]["total"] == f"{count(1000, 2, 2)['total']:,}" == "4,012,000"
    assert rows[-1]["score_macs"] == f"{derive_at(16000, 2, 2)['scores']:,}" == "512,000,000"
    assert [r["score_ratio"] for r in rows] == ["", "4", "4", "4", "4"]
    assert [r["ratio"] for r in rows] == ["", "3.9940", "3.9970", "3.9985", "3.9993"]
    assert note.startswith("counted at n = 16 by running a head of these sizes")
    assert "the formula checked equal to the count at n = 16 (the same)" in note
    assert tuple(LENGTHS) == (1000, 2000, 4000, 8000, 16000)


def test_the_page_is_self_contained(bank_text):
    assert bank_text.startswith("<!DOCTYPE html>")
    assert f'content="{CSP}"' in bank_text and "default-src 'none'" in CSP
    outside = bank_text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert not re.search(r"https?://|//cdn|\bsrc=|<link\b|@import|url\((?!#)", outside)
    assert "does no\narithmetic" in bank_text or "does no arithmetic" in bank_text


def test_the_tags_are_balanced(bank_text):
    from html.parser import HTMLParser
    void = {"meta", "input"}

    class Balance(HTMLParser):
        def __init__(self):
            super().__init__()
            self.open, self.bad = [], []

        def handle_starttag(self, tag, attrs):
            if tag not in void:
                self.open.append(tag)

        def handle_endtag(self, tag):
            if self.open and self.open[-1] == tag:
                self.open.pop()
            else:
                self.bad.append((tag, self.getpos()))

    b = Balance()
    b.feed(bank_text)
    assert (b.open, b.bad) == ([], [])


def test_the_script_only_chooses():
    """page.js reads values and sets them; it has no arithmetic operator or number parsing."""
    from importlib import resources
    js = resources.files("exactattn.page").joinpath("page.js").read_text()
    for banned in ("Math.", "parseFloat", "parseInt", "Number(", "toFixed", "toPrecision",
                   " + ", " - ", " * ", " / ", "++", "--", "+=", "-=", "*=", "/=", "%"):
        assert banned not in js, banned


def test_the_embedded_data_is_the_certified_numbers(bank_text, bank):
    data = embedded(bank_text)
    assert data == json.loads(json.dumps(script_data(bank, bank.own_key)))
    river = data["sentences"]["0"]["at"]
    assert river["7"]["shares"] == ["0.1941", "0.2764", "0.2764", "0.2530"]
    assert river["7"]["output"] == "(0.1382, 0.6044)"
    assert river["7"]["bars"] == ["38.8px", "55.3px", "55.3px", "50.6px"]
    assert data["lengths"]["1"]["scores"] == "64"
    assert set(river) == {str(k) for k in range(21)} | {"none"}


def test_the_picture_places_words_and_moves_the_dot(bank_text, bank):
    svg = re.search(r'<svg id="picture".*?</svg>', bank_text, re.S).group(0)
    root = ET.fromstring(svg)
    ns = {"s": "http://www.w3.org/2000/svg"}
    groups = root.findall("s:g[@class='sentence-picture']", ns)
    assert [g.get("display") for g in groups] == [None, "none"]
    f = frame(bank.sentences)
    assert (f.lo, f.hi, f.step) == (0, 1, Fraction(1, 4))
    dots = [g.find("s:circle[@class='output-dot']", ns) for g in groups]
    data = embedded(bank_text)["sentences"]
    for k, dot in enumerate(dots):
        assert {"cx": dot.get("cx"), "cy": dot.get("cy")} == data[str(k)]["at"]["7"]["dot"]
    assert data["0"]["at"]["7"]["dot"] == {"cx": "99.8", "cy": "172.4"}   # 0.1382, 0.6044
    assert data["1"]["at"]["7"]["dot"] == {"cx": "267.6", "cy": "340.2"}  # mirrored
    words = [c.find("s:title", ns).text for c in groups[0].findall("s:circle", ns)
             if c.get("class", "").startswith("word")]
    assert words == ["the: (0, 0)", "river: (0, 1)", "bank: (1/2, 1/2)", "flooded: (0, 3/4)"]
    assert groups[0].find("s:line[@class='query']", ns) is not None


def test_questions_have_answers_from_the_numbers(bank_text):
    q = re.findall(r"<summary>(.*?)</summary><p>(.*?)</p>", bank_text, re.S)
    assert len(q) == 6
    assert "0.2764 each" in q[0][1] and "1/4 = 0.25" in q[1][1]
    assert "(0.1382, 0.6044) to (0.6044, 0.1382)" in q[3][1]
    assert q[4][1].startswith("4 times as much") and "16 scores at n = 4 and 64 at" in q[4][1]
    assert "0.1738, 0.2866, 0.2866, 0.2529" in q[5][1]


def test_the_page_is_deterministic():
    a = build_page([tiny()], lengths=[4, 8])
    b = build_page([tiny()], lengths=[4, 8])
    assert a == b and isinstance(a, str)


def test_digits_and_row(tmp_path):
    out = tmp_path / "tiny.html"
    assert main(["page", "--example", "tiny", "--row", "2", "--digits", "6", "-o",
                 str(out)]) == 0
    data = embedded(out.read_text(encoding="utf-8"))
    t = attend(tiny().head, tiny().x)
    own = next(k for k, v in data["stops"].items() if "the head's own" in v["words"])
    assert data["sentences"]["0"]["at"][own]["shares"] == [t.share(1, j).decimal(6)
                                                           for j in range(2)]
    assert list(data["sentences"]) == ["0"]


def test_a_spec_with_two_numbers_per_token(tmp_path):
    spec = tmp_path / "three.json"
    spec.write_text(json.dumps({
        "name": "three",
        "tokens": [{"text": "a", "x": [1, 0]}, {"text": "b", "x": [0, 1]},
                   {"text": "c", "x": [-1, 2]}],
        "W_Q": [[1, 0], [0, 1], [1, 1]], "W_K": [[1, 0], [0, 2], [1, -1]],
        "W_V": [[2, 0], [1, 1]]}))
    out = tmp_path / "three.html"
    assert main(["page", "--spec", str(spec), "--row", "1", "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    data = embedded(text)
    own = next(k for k, v in data["stops"].items() if "the head's own" in v["words"])
    assert data["stops"][own]["label"] == "sqrt(3)"   # d_k = 3 gets its own stop
    t = attend(with_divisor(load(spec).head, Fraction(3)), load(spec).x)
    assert data["sentences"]["0"]["at"][own]["shares"] == [t.share(0, j).decimal(4)
                                                           for j in range(3)]
    assert 'class="query"' not in text    # d_k = 3: no query arrow in the plane
    assert 'class="value"' in text        # W_V is not the identity: the values are drawn


def test_a_causal_head_counts_the_visible_pairs():
    head = Head([[1, 0], [0, 1]], [[1, 0], [0, 1]], [[1, 0], [0, 1]], causal=True)
    rows, note = length_numbers(head, [4, 8])
    assert [(r["scores"], r["score_macs"], r["counted"]) for r in rows] == [
        ("10", "20", True), ("36", "72", True)]           # n(n+1)/2 pairs, d_k = 2
    assert rows[1]["score_ratio"] == "18/5 = 3.6"
    assert "checked equal to the count at n = 16 (the same)" in note
    assert note.startswith("counted at n = 4, 8, 16 by")


@pytest.mark.parametrize("argv, message", [
    (["--example", "chronicle"],
     "sentence 'chronicle' must have d_model = 2 for the page's picture (got 4)"),
    (["--example", "tiny", "--row", "3"], "--row must be a token number from 1 to 2 (got 3)"),
    (["--example", "nope"], "example must be one of"),
    (["-o", ""], "-o must name a file to write (got '')"),
    (["--spec", " "], "--spec must name a JSON or TOML file (got '')"),
    (["--digits", "51"], "--digits must be a whole number from 0 to 50"),
])
def test_bad_input_is_one_line_and_status_2(argv, message, capsys):
    try:
        status = main(["page"] + argv)
    except SystemExit as e:   # argparse's own checks (--digits) exit from the parser
        status = e.code
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_unwritable_output(tmp_path, capsys):
    assert main(["page", "-o", str(tmp_path / "missing" / "bank.html")]) == 2
    assert "-o must name a file that can be written" in capsys.readouterr().err


def test_api_errors():
    with pytest.raises(InputError, match="must have 1 to 8 sentences"):
        page_numbers([])
    with pytest.raises(InputError, match="d_model = 2"):
        page_numbers([chronicle()])
    with pytest.raises(InputError, match="digits must be"):
        page_numbers([tiny()], places=-1)
    stops = divisor_stops([example("tiny")])
    assert [s.key for s in stops][-1] == "none" and sum(s.own for s in stops) == 1


def test_the_length_rows_leave_the_crossover_unsolved():
    from exactattn.cost.rows import cost_rows
    solved, unsolved = cost_rows([4, 8], 2, 2), cost_rows([4, 8], 2, 2, solve=False)
    assert solved.crossover is not None and solved.doubling is not None
    assert unsolved.crossover is None and unsolved.doubling is None
    assert [r.figures for r in unsolved.rows] == [r.figures for r in solved.rows]
    assert unsolved.check == solved.check
