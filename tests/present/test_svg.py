"""The share-square heatmap: parse the SVG and read the certified values back."""

import re
import xml.etree.ElementTree as ET

import pytest

from exactattn.errors import InputError
from exactattn.examples import chronicle, example
from exactattn.engines.head import Head
from exactattn.present.svg import SVG_NS, heatmap, picture, png
from exactattn.present.tables import attend_example

NS = {"svg": SVG_NS}




def cell(root, i, j):
    g = root.find(f".//svg:g[@id='cell-{i}-{j}']", NS)
    assert g is not None, (i, j)
    return g


def test_chronicle_share_square_has_0_5800_in_cell_2_1(cli):
    rc, out, err = cli("scores", "--format", "svg")
    assert rc == 0 and err == ""
    root = ET.fromstring(out)
    assert root.tag == f"{{{SVG_NS}}}svg"
    assert cell(root, 2, 1).find("svg:text", NS).text == "0.5800"
    row2 = [cell(root, 2, j).find("svg:text", NS).text for j in range(1, 5)]
    assert row2 == ["0.5800", "0.1216", "0.1769", "0.1216"]
    cells = [g for g in root.iter(f"{{{SVG_NS}}}g") if g.get("id", "").startswith("cell-")]
    assert len(cells) == 16
    assert [g.find("svg:title", NS).text for g in root.findall(".//svg:g[@class='row']", NS)] \
        == ["query 1 year 4", "query 2 0", "query 3 : 235 hobbs stand\u2026", "query 4 7"]
    tip = cell(root, 2, 1).find("svg:title", NS).text
    assert tip.startswith("share of key 1 for query 2: exp(25/16)/(")


def test_every_cell_matches_the_certified_shares():
    ex = chronicle()
    t = attend_example(ex)
    root = ET.fromstring(picture("scores", ex, t, 6))
    for i in range(4):
        for j in range(4):
            assert cell(root, i + 1, j + 1).find("svg:text", NS).text == t.share(i, j).decimal(6)


def test_tokens_label_both_axes():
    root = ET.fromstring(picture("scores", chronicle(), attend_example(chronicle())))
    queries = [e.text for e in root.findall(".//svg:text[@class='query-label']", NS)]
    keys = [e.text for e in root.findall(".//svg:text[@class='key-label']", NS)]
    assert queries == keys == ["1 year 4", "2 0", "3 : 235 hobbs stand\u2026", "4 7"]


def test_shading_darkens_with_the_share():
    root = ET.fromstring(picture("scores", chronicle(), attend_example(chronicle())))
    fills = [cell(root, 2, j).find("svg:path", NS).get("fill") for j in (1, 2)]
    dark, light = (sum(int(f[k:k + 2], 16) for k in (1, 3, 5)) for f in fills)
    assert dark < light


def test_same_bytes_twice(cli):
    _, a, _ = cli("scores", "--format", "svg", "--example", "bank-river")
    _, b, _ = cli("scores", "--format", "svg", "--example", "bank-river")
    assert a == b and a.startswith("<svg ")


def test_square_svg_prints_exact_scores(cli):
    rc, out, _ = cli("square", "--format", "svg")
    assert rc == 0
    root = ET.fromstring(out)
    assert cell(root, 2, 1).find("svg:text", NS).text == "25/16"
    assert cell(root, 2, 3).find("svg:text", NS).text == "3/8"
    _, raw, _ = cli("square", "--format", "svg", "--no-scale")
    assert cell(ET.fromstring(raw), 2, 1).find("svg:text", NS).text == "25/8"


def test_irrational_scores_print_certified_digits():
    ex = example("tiny")  # q1.k2 / sqrt(2) = 16 sqrt(2) / 25 = 0.905096...
    root = ET.fromstring(picture("square", ex, attend_example(ex)))
    assert cell(root, 1, 2).find("svg:text", NS).text == "0.9051"
    assert cell(root, 1, 1).find("svg:text", NS).text == "-0.9334"  # -33 sqrt(2) / 50


def test_masked_cells_are_grey():
    ex = chronicle()
    h = ex.head
    ex.head = Head(h.W_Q, h.W_K, h.W_V, causal=True)
    t = attend_example(ex)
    root = ET.fromstring(picture("scores", ex, t))
    masked = cell(root, 1, 2)
    assert masked.find("svg:text", NS).text == "masked"
    assert masked.find("svg:path", NS).get("fill") == "#d9d9d9"
    assert masked.find("svg:title", NS).text == "share of key 2 for query 1: 0 (masked)"
    assert cell(root, 1, 1).find("svg:text", NS).text == "1.0000"
    assert cell(ET.fromstring(picture("square", ex, t)), 1, 2).find("svg:text", NS).text == "-inf"


@pytest.mark.parametrize("mode", ["row", "weights", "project", "walkthrough"])
@pytest.mark.parametrize("fmt", ["svg", "png"])
def test_picture_formats_only_for_scores_and_square(cli, mode, fmt):
    rc, out, err = cli(mode, "--format", fmt)
    assert rc == 2 and out == ""
    assert err == (f"exactattn: error: --format {fmt} must be used with scores or square "
                   f"(got {mode}); other modes print tables: use text, markdown, latex, json, "
                   "jsonl or csv\n")


def test_png_without_matplotlib_is_a_clean_error(cli):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        rc, out, err = cli("scores", "--format", "png")
        assert rc == 2 and out == ""
        assert re.fullmatch(r"exactattn: error: format png needs matplotlib .*exactattn\[plot\].*\n",
                            err)
    else:
        pytest.skip("matplotlib is installed; see test_png_with_matplotlib")


def test_png_with_matplotlib():
    pytest.importorskip("matplotlib")
    ex = chronicle()
    data = png(ex, attend_example(ex))
    assert data[:8] == b"\x89PNG\r\n\x1a\n"


def test_heatmap_checks_sizes():
    with pytest.raises(InputError, match=r"key_labels must have 2 labels"):
        heatmap([["a", "b"]], [[0.0, 1.0]], ["q"], ["k"], title="t")
    with pytest.raises(InputError, match=r"levels must be 1 x 1"):
        heatmap([["a"]], [[0.0, 1.0]], ["q"], ["k"], title="t")


def test_special_characters_are_escaped():
    root = ET.fromstring(heatmap([["<&>"]], [[0.2]], ['1 "a" & <b>'], ["1 k"], title="x < y"))
    assert cell(root, 1, 1).find("svg:text", NS).text == "<&>"
    assert root.find("svg:title", NS).text == "x < y"


def test_picture_rejects_unknown_format():
    with pytest.raises(InputError, match="format must be one of svg, png"):
        picture("scores", chronicle(), attend_example(chronicle()), 4, "gif")


def test_picture_returns_text_or_bytes():
    ex = chronicle()
    svg = picture("square", ex, attend_example(ex), 4, "svg")
    assert type(svg) is str and svg == picture("square", ex, attend_example(ex))


@pytest.mark.parametrize("text, shown", [("a\u0001", "a\\x01"), ("tab\there", "tab\\there"),
                                         ("esc\x1b", "esc\\x1b"), ("nul\x00", "nul\\x00"),
                                         ("lone\ud800", "lone\\ud800")])
def test_control_characters_give_well_formed_xml(cli, tmp_path, text, shown):
    """A token's text is escaped in the picture as in the tables (text, CSV, LaTeX)."""
    import json
    from exactattn.examples import Token
    ex = chronicle()
    ex.tokens = [Token(text)] + ex.tokens[1:]
    for out in (picture("scores", ex, attend_example(ex)), picture("square", ex, attend_example(ex))):
        root = ET.fromstring(out.encode("utf-8"))      # encodable and well-formed
        labels = root.findall(".//svg:text[@class='query-label']", NS)
        assert labels[0].text == "1 " + shown
    spec = tmp_path / "h.json"
    spec.write_text(json.dumps({"tokens": [{"text": text, "x": [1, 0]}, {"x": [0, 1]}],
                                "W_Q": [[1, 0]], "W_K": [[1, 0]], "W_V": [[1, 0]]}))
    rc, out, err = cli("scores", "--spec", str(spec), "--format", "svg")
    assert rc == 0 and err == ""
    assert ET.fromstring(out.encode("utf-8")).findall(
        ".//svg:text[@class='query-label']", NS)[0].text == "1 " + shown
    _, table, _ = cli("row", "--spec", str(spec))
    assert f"  {shown}  " in table


def test_heatmap_escapes_what_xml_cannot_hold():
    root = ET.fromstring(heatmap([["a\u0001"]], [[0.5]], ["1 q\x02"], ["1 k"], title="t\x1b",
                                 tooltips=[["tip\x03"]], notes=["note\x04"]))
    assert cell(root, 1, 1).find("svg:text", NS).text == "a\\x01"
    assert cell(root, 1, 1).find("svg:title", NS).text == "tip\\x03"
    assert root.find("svg:title", NS).text == "t\\x1b"


def test_output_option_writes_the_picture(cli, tmp_path):
    path = tmp_path / "shares.svg"
    rc, out, err = cli("scores", "--format", "svg", "-o", str(path))
    assert rc == 0 and out == "" and err == ""
    _, direct, _ = cli("scores", "--format", "svg")
    assert path.read_text(encoding="utf-8") == direct


@pytest.mark.parametrize("argv, message", [
    (["scores", "-o", "x.svg"], "-o must be used with --format svg or png (got --format text); "
                                "tables go to stdout: redirect them with >"),
    (["square", "--format", "svg", "-o", "/nonexistent/dir/x.svg"],
     "-o must name a file that can be written (got '/nonexistent/dir/x.svg': "),
    (["scores", "--format", "svg", "-o", ""], "-o must name a file to write (got '')"),
])
def test_output_option_errors(cli, argv, message):
    rc, out, err = cli(*argv)
    assert rc == 2 and out == ""
    assert err.startswith("exactattn: error: " + message) and err.count("\n") == 1


# --- tooltips and size ------------------------------------------------------------

I4 = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]


def square(n, distinct=None, causal=False):
    """An n-token head of identity weights (divisor 2) whose tokens have many distinct
    rational entries, so a row has up to n distinct score gaps (long closed forms);
    ``distinct`` repeats the first few tokens instead (short closed forms)."""
    from fractions import Fraction as F

    from exactattn.examples import Example, Token
    rows = [[F((7 * i) % 13 - 6, 1 + i % 3), F((5 * i) % 11 - 5, 2), F((3 * i) % 7 - 3),
             F(i % 5 - 2, 3)] for i in range(distinct or n)]
    return Example(name=f"square-{n}", title="", head=Head(I4, I4, I4, divisor="2",
                                                           causal=causal),
                   tokens=[Token(f"t{i}") for i in range(n)],
                   x=[rows[i % len(rows)] for i in range(n)])


def test_tooltips_keep_short_closed_forms_and_else_the_certified_decimal():
    from exactattn.present.svg import CLOSED_FORM_LIMIT
    ex = square(30)
    t = attend_example(ex)
    root = ET.fromstring(picture("scores", ex, t))
    kinds = set()
    for i in range(30):
        for j in range(30):
            share = t.share(i, j)
            form, dec = share.text(), share.decimal(4)
            tip = cell(root, i + 1, j + 1).find("svg:title", NS).text
            head = f"share of key {j + 1} for query {i + 1}: "
            if len(form) <= CLOSED_FORM_LIMIT:
                assert tip == f"{head}{form} ~ {dec} (certified)"
                kinds.add("closed form")
            else:
                assert tip == f"{head}{dec} (certified; the closed form is over 200 characters)"
                kinds.add("decimal")
            assert cell(root, i + 1, j + 1).find("svg:text", NS).text == dec
    assert kinds == {"closed form", "decimal"}  # this head has both kinds of rows


def test_rational_shares_say_exactly():
    ex = square(3, distinct=1)  # three equal tokens: every share is 1/3
    root = ET.fromstring(picture("scores", ex, attend_example(ex)))
    assert cell(root, 2, 3).find("svg:title", NS).text == "share of key 3 for query 2: 1/3 exactly"
    assert cell(root, 2, 3).find("svg:text", NS).text == "0.3333"


@pytest.mark.parametrize("distinct", [None, 4])
def test_a_200_token_square_stays_a_few_megabytes(distinct):
    ex = square(200, distinct)
    t = attend_example(ex)
    text = picture("scores", ex, t)
    assert len(text.encode("utf-8")) < 5_000_000  # 51 MB when every closed form was written
    root = ET.fromstring(text)
    cells = [g for g in root.iter(f"{{{SVG_NS}}}g") if g.get("id", "").startswith("cell-")]
    assert len(cells) == 40_000
    for i, j in ((1, 1), (150, 37), (200, 200)):
        g = cell(root, i, j)
        assert g.find("svg:text", NS).text == t.share(i - 1, j - 1).decimal(4)
        assert g.find("svg:title", NS) is None
    rows = root.findall(".//svg:g[@class='row']", NS)
    assert len(rows) == 200 and rows[149].find("svg:title", NS).text == "query 150 t149"
    assert "200 tokens: the tooltips name the query only" in text


def test_a_200_token_score_square_stays_a_few_megabytes():
    ex = square(200, 4, causal=True)
    text = picture("square", ex, attend_example(ex))
    assert len(text.encode("utf-8")) < 5_000_000
    root = ET.fromstring(text)
    assert cell(root, 150, 37).find("svg:title", NS) is None
    assert cell(root, 1, 2).find("svg:text", NS).text == "-inf"


def test_score_tooltips_up_to_50_tokens():
    ex = square(50, 4)
    root = ET.fromstring(picture("square", ex, attend_example(ex)))
    # token 2 = (1/2, 0, 0, -1/3), token 1 = (-6, -5/2, -3, -2/3): raw -3 + 2/9 = -25/9
    assert cell(root, 2, 1).find("svg:title", NS).text == "query 2, key 1: -25/9 / 2 = -25/18"
    assert cell(root, 2, 1).find("svg:text", NS).text == "-25/18"


def test_tooltips_spell_exponents_as_the_score_table_spells_the_scaled_scores():
    """Over the divisor sqrt(3) a raw score 3/2 is the scaled score sqrt(3)/2 in the score
    square; the share's tooltip said exp(3/2/sqrt(3))."""
    from fractions import Fraction as F

    from exactattn.examples import Example, Token
    ex = Example(name="three", title="", head=Head([[1]], [[1]], [[1]], divisor="sqrt(3)"),
                 tokens=[Token("a"), Token("b")], x=[[F(1)], [F(3, 2)]])
    t = attend_example(ex)
    shares, scores = ET.fromstring(picture("scores", ex, t)), ET.fromstring(picture("square", ex, t))
    assert cell(scores, 1, 2).find("svg:title", NS).text == \
        "query 1, key 2: 3/2 / sqrt(3) = sqrt(3)/2"
    assert cell(shares, 1, 2).find("svg:title", NS).text == (
        "share of key 2 for query 1: exp(sqrt(3)/2)/(exp(sqrt(3)/3) + exp(sqrt(3)/2)) "
        "~ 0.5717 (certified)")
    tiny = example("tiny")
    tip = cell(ET.fromstring(picture("scores", tiny, attend_example(tiny))), 1, 1).find("svg:title", NS)
    assert tip.text == ("share of key 1 for query 1: exp(-33*sqrt(2)/50)/(exp(-33*sqrt(2)/50) "
                        "+ exp(16*sqrt(2)/25)) ~ 0.1372 (certified)")
