"""``exactattn audit`` on HTML tables: the walkthrough's tables as HTML agree with their
Markdown twin cell by cell, a saved page with scripts and styles, inline tags and entities,
header rows and spans, malformed HTML, and bad input in one line."""

from fractions import Fraction

import pytest

from exactattn.audit import Audit, audit, audit_text
from exactattn.audit.parse import detect_format, parse_tables
from exactattn.audit.report import report_text
from exactattn.commands.audit import DEMO_CHANGE, demo_sections, demo_text
from exactattn.errors import InputError
from exactattn.notebook import tables_html
from exactattn.testing import assert_table


def _cells(result: Audit) -> list[tuple]:
    return [(c.table, c.row, c.column, c.element, c.row_label, c.column_label, c.what,
             c.printed, c.places, c.verdict, c.right, c.exact_decimal, c.exactly)
            for c in result.cells]


def _html_row(markdown_row: str) -> str:
    """``| 1 | 0.4528 |`` as the HTML row tables_html writes: ``<tr><td>1</td>...</tr>``."""
    cells = [c.strip() for c in markdown_row.strip("|").split("|")]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def demo_html() -> tuple[str, str]:
    """The worked example's tables as HTML tables, and the copy with the demo's cell changed."""
    text = tables_html(demo_sections())
    old, new = (_html_row(r) for r in DEMO_CHANGE)
    assert text.count(old) == 1
    return text, text.replace(old, new)


# --------------------------------------------------------------------------- the twins
def test_the_walkthrough_tables_as_html_read_as_their_markdown_twin():
    html_tables = parse_tables(demo_html()[0], "html")
    md_tables = parse_tables(demo_text()[0], "markdown")
    assert len(html_tables) == len(md_tables) == 11
    for h, m in zip(html_tables, md_tables):
        assert (h.number, h.title, h.header, h.rows) == (m.number, m.title, m.header, m.rows)
    assert html_tables[8].title == "Outputs: sum_j shares[i][j] * values[j]"


def test_the_walkthrough_tables_as_html_audit_clean():
    result = audit_text(demo_html()[0], fmt="html", example="chronicle")
    assert result.clean and len(result.cells) == 116
    judged = {t.table.number: (t.quantity, len(t.cells)) for t in result.tables if t.cells}
    assert judged == {5: ("projections", 48), 6: ("raw", 16), 7: ("scaled", 16),
                      8: ("shares", 20), 9: ("outputs", 16)}


def test_one_wrong_digit_gets_the_verdict_of_its_markdown_twin_cell_by_cell():
    html_result = audit_text(demo_html()[1], example="chronicle")     # detected: html
    md_result = audit_text(demo_text()[1], example="chronicle")
    assert _cells(html_result) == _cells(md_result) and len(html_result.cells) == 116
    cell, = html_result.not_right
    assert (cell.table, cell.row_label, cell.column_label, cell.what) == \
        (9, "1", "out 4", "outputs[1][4]")
    assert (cell.printed, cell.verdict, cell.right) == ("0.6543", "wrong", "0.6453")
    assert report_text(html_result) == report_text(md_result)
    assert report_text(html_result, "json") == report_text(md_result, "json")


def test_the_twins_on_the_command_line(cli, tmp_path):
    (tmp_path / "page.html").write_text(demo_html()[1], encoding="utf-8")
    (tmp_path / "page.md").write_text(demo_text()[1], encoding="utf-8")
    rc_h, out_h, err_h = cli("audit", "--table", str(tmp_path / "page.html"), "--example",
                             "chronicle", "--not-right")
    rc_m, out_m, _ = cli("audit", "--table", str(tmp_path / "page.md"), "--example",
                         "chronicle", "--not-right")
    assert (rc_h, err_h) == (1, "") and (rc_h, out_h) == (rc_m, out_m)
    assert "outputs[1][4]  0.6543   wrong    0.6453" in out_h
    assert out_h.rstrip().endswith("audit: 1 of 116 cells not right (1 wrong)")


# --------------------------------------------------------------------------- a saved page
PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Raw scores, shares and outputs</title>
<style>table { border-collapse: collapse } td.x::after { content: "0.9999" }</style>
<script>
  document.write("<h3>Outputs</h3><table><tr><td>q</td><td>9.999</td></tr></table>");
  if (a < b && c > d) { var t = "</td></tr>"; }
</script>
</head>
<body>
<!-- <table><tr><td>1</td><td>0.1</td></tr></table> -->
<header><h1>Lesson 3: one head, four tokens</h1></header>
<svg width="10" height="10"><title>Outputs</title><text x="1" y="1">0.5</text></svg>
<h2>Shares (attention weights)</h2>
<table class="weights">
<thead><tr><th rowspan="2">query</th><th colspan="4">keys</th></tr>
<tr><th>key&nbsp;1</th><th>key 2</th><th>key 3</th><th>key&#160;4</th></tr></thead>
<tbody>
<tr><th scope="row">2</th><td><b>0.5800</b></td><td><code>0.1216</code></td>
    <td><span class="x">0.1769</span></td><td><em>0.1216</em><br></td></tr>
</tbody>
<tfoot><tr><td colspan="5">Each row adds up to 1 = 0.5800 + ... (rounded)</td></tr></tfoot>
</table>
<p>The outputs mix the values with these shares.</p>
<figure>
<table>
<tr><th>token</th><th>out<sub>1</sub></th><th>out<sub>2</sub></th><th>out<sub>3</sub></th>
<th>out<sub>4</sub></th></tr>
<tr><td>t<sub>3</sub></td><td>0.7311</td><td>0.1345</td><td>0.1345</td><td>0.5672</td></tr>
</table>
<figcaption>Outputs of token 3</figcaption>
</figure>
<h3>Shares, in words</h3>
<table><tr><th>word</th><th>meaning</th></tr><tr><td>share</td><td>a softmax weight</td></tr>
</table>
</body></html>
"""


def test_a_saved_page_reads_its_tables_and_nothing_of_its_scripts():
    assert detect_format(PAGE) == "html"
    first, second, third = parse_tables(PAGE)
    assert (first.title, first.header) == ("Shares (attention weights)",
                                           ("query", "key 1", "key 2", "key 3", "key 4"))
    assert first.rows == (("2", "0.5800", "0.1216", "0.1769", "0.1216"),)   # no tfoot note
    assert (first.line, second.line, third.line) == (15, 26, 34)
    assert (second.title, second.header) == ("Outputs of token 3",
                                             ("token", "out_1", "out_2", "out_3", "out_4"))
    assert second.rows == (("t_3", "0.7311", "0.1345", "0.1345", "0.5672"),)
    assert (third.title, third.rows) == ("Shares, in words", (("share", "a softmax weight"),))


def test_a_saved_page_audits_clean_and_names_its_table_without_numbers(tmp_path):
    page = tmp_path / "lesson.html"
    page.write_text(PAGE, encoding="utf-8")
    result = audit(page, example="chronicle")
    shares, outputs, glossary = result.tables
    assert (shares.quantity, shares.found_by, len(shares.cells)) == ("shares", "title", 4)
    assert (outputs.quantity, outputs.found_by, len(outputs.cells)) == ("outputs", "title", 4)
    assert [c.what for c in outputs.cells] == [f"outputs[3][{j}]" for j in (1, 2, 3, 4)]
    assert (glossary.skipped, glossary.cells) == ("no numbers", [])
    assert result.clean and [c.printed for c in shares.cells] == \
        ["0.5800", "0.1216", "0.1769", "0.1216"]
    assert assert_table(page, example="chronicle").clean


def test_a_wrong_digit_on_a_saved_page_fails_assert_table_with_the_report(tmp_path):
    page = tmp_path / "lesson.htm"
    page.write_text(PAGE.replace("<code>0.1216</code>", "<code>0.1215</code>"),
                    encoding="utf-8")
    with pytest.raises(AssertionError) as e:
        assert_table(page, example="chronicle")
    message = str(e.value)
    assert message.startswith("lesson.htm: 1 of 8 cells not right (1 truncated)")   # 0.12159..
    assert "key 2   shares[2][2]  0.1215   truncated  0.1216" in message


MINUS = """<h3>Scores</h3>
<table><tr><th>query</th><th>k1</th><th>k2</th><th>k3</th></tr>
<tr><td>q1</td><td>&minus;1</td><td>0</td><td>&#8722;0.5</td></tr></table>
<h3>Attention weights</h3>
<table><tr><th>query</th><th>k1</th><th>k2</th><th>k3</th></tr>
<tr><td>q1</td><td>0.1863</td><td>0.5065</td><td>0.3071</td></tr></table>
"""


def test_entities_for_the_minus_sign_read_as_the_markdown_path_reads_u2212():
    result = audit_text(MINUS)
    source = result.tables[0].table
    assert source.rows == (("q1", "\u22121", "0", "\u22120.5"),)
    assert [(c.printed, c.verdict, c.right) for c in result.cells] == [
        ("0.1863", "right", "0.1863"), ("0.5065", "right", "0.5065"),
        ("0.3071", "truncated", "0.3072")]
    twin = ("Scores\n\n| query | k1 | k2 | k3 |\n|---|---|---|---|\n| q1 | \u22121 | 0 | "
            "\u22120.5 |\n\nAttention weights\n\n| query | k1 | k2 | k3 |\n|---|---|---|---|\n"
            "| q1 | 0.1863 | 0.5065 | 0.3071 |\n")
    assert _cells(audit_text(twin)) == _cells(result)
    assert result.cells[0].exact.decimal(6) == "0.186324"      # e^-1 / (e^-1 + 1 + e^-1/2)


# --------------------------------------------------------------------------- spans, malformed
def test_a_spanning_cell_that_holds_a_number_is_refused_by_name():
    text = ("<table><tr><th>query</th><th>k1</th><th>k2</th></tr>"
            "<tr><td>1</td><td colspan='2'>0.50</td></tr></table>")
    with pytest.raises(InputError, match=r"^table text: the table on line 1, row 2: a cell "
                       r"with colspan=2 must not hold a number \(got '0.50'\); which column"):
        parse_tables(text, "html")
    rows = ("<table><tr><th>query</th><th>k1</th></tr><tr><td rowspan=2>1/2</td><td>0.5</td>"
            "</tr><tr><td>0.5</td></tr></table>")
    with pytest.raises(InputError, match="a cell with rowspan=2 must not hold a number "
                                         r"\(got '1/2'\); which row"):
        parse_tables(rows, "html")


def test_row_and_column_spans_of_text_fill_their_cells():
    text = ("<table><tr><th>query</th><th>head</th><th>k1</th><th>k2</th></tr>"
            "<tr><td rowspan='2'>layer 1</td><td>h1</td><td>0.5</td><td>0.5</td></tr>"
            "<tr><td>h2</td><td>0.25</td><td>0.75</td></tr>"
            "<tr><td colspan=\"3\">note: no divisor</td><td></td></tr>"
            "<tr><td colspan=\"4\">a note across the table is no row</td></tr></table>")
    t, = parse_tables(text, "html")
    assert t.rows == (("layer 1", "h1", "0.5", "0.5"), ("", "h2", "0.25", "0.75"),
                      ("note: no divisor", "", "", ""))


def test_malformed_html_is_read_as_a_browser_reads_it():
    unclosed = ("<h3>Shares for the query 2</h3><table><tr><th>query<th>key 1<th>key 2<th>key 3"
                "<th>key 4<tr><td>2<td><b>0.5800<td>0.1216<td>0.1769<td>0.1216")
    t, = parse_tables(unclosed, "html")
    assert (t.title, t.header, t.rows) == (
        "Shares for the query 2", ("query", "key 1", "key 2", "key 3", "key 4"),
        (("2", "0.5800", "0.1216", "0.1769", "0.1216"),))
    assert audit_text(unclosed, fmt="html", example="chronicle").clean
    stray = "</td></tr></table><p>Shares</p><table><td>1<td>0.5</tr></table></table>"
    t, = parse_tables(stray, "html")
    assert (t.title, t.header, t.rows) == ("Shares", ("1", "0.5"), ())


def test_a_table_nested_in_a_cell_is_a_table_of_its_own():
    text = ("<table><tr><td>layout</td><td><table><caption>Shares</caption><tr><th>q</th>"
            "<th>k1</th></tr><tr><td>1</td><td>1</td></tr></table> after</td></tr></table>")
    outer, inner = parse_tables(text, "html")
    assert (outer.title, outer.header, outer.rows) == ("", ("layout", "after"), ())
    assert (inner.title, inner.header, inner.rows) == ("Shares", ("q", "k1"), (("1", "1"),))


def test_the_format_is_picked_by_suffix_by_content_or_by_the_option(cli, tmp_path):
    for name in ("a.html", "a.htm", "a.txt"):
        (tmp_path / name).write_text(MINUS, encoding="utf-8")
        rc, out, _ = cli("audit", "--table", str(tmp_path / name))
        assert rc == 1 and "audit: 1 of 3 cells not right (1 truncated)" in out, name
    (tmp_path / "a.md").write_text(MINUS, encoding="utf-8")
    rc, out, err = cli("audit", "--table", str(tmp_path / "a.md"))
    assert rc == 2 and "must hold at least one markdown table" in err
    rc, out, _ = cli("audit", "--table", str(tmp_path / "a.md"), "--table-format", "html")
    assert rc == 1 and "audit: 1 of 3 cells not right (1 truncated)" in out
    assert detect_format("<p>see below</p>\n<TABLE><tr><td>1</td></tr></TABLE>") == "html"
    assert detect_format("Weights\n\n| a |\n|---|\n| <table> |\n") == "markdown"


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("page, pattern", [
    ("<!DOCTYPE html><html><body><h1>Shares</h1><p>0.5800</p></body></html>",
     "must hold at least one html table (got none); an HTML table is a <table> with <tr> rows"),
    ("<h3>Shares</h3><script>var t = 1;<table><tr><td>q</td><td>0.5</td></tr></table>",
     "must hold at least one html table (got none)"),
    ("<h3>Shares</h3><table></table><table><tr></tr></table>",
     "must hold at least one html table (got none)"),
    ("<h3>Shares</h3><table><tr><th>word</th><th>meaning</th></tr>"
     "<tr><td>share</td><td>a weight</td></tr></table>",
     "must hold a table the audit can judge (got none: table 1: no numbers)"),
    ("<h3>Shares</h3><table><tr><th>q</th><th>k1</th><th>k2</th></tr>"
     "<tr><td>2</td><td colspan=2>0.5</td></tr></table>",
     "row 2: a cell with colspan=2 must not hold a number (got '0.5')"),
])
def test_bad_html_is_one_line_and_exit_2(cli, tmp_path, page, pattern):
    path = tmp_path / "page.html"
    path.write_text(page, encoding="utf-8")
    rc, out, err = cli("audit", "--table", str(path), "--example", "chronicle")
    assert rc == 2 and out == ""
    assert err.startswith("exactattn: error: ") and err.count("\n") == 1 and pattern in err, err


def test_a_page_in_another_encoding_is_refused_in_one_line(cli, tmp_path):
    path = tmp_path / "page.html"
    path.write_bytes(MINUS.replace("&minus;", "\u2212").encode("utf-16"))
    rc, out, err = cli("audit", "--table", str(path))
    assert (rc, out) == (2, "") and "must be UTF-8 (got other bytes)" in err


def test_spans_past_the_table_add_no_columns():
    text = ("<table><tr><th colspan='99999999999'>Shares</th></tr>"
            "<tr><th>q</th><th>k1</th><th>k2</th></tr>"
            "<tr><td>1</td><td rowspan=0>x</td><td>0.5</td></tr><tr><td>2</td>"
            "<td colspan=9>0.5</td></tr></table>")
    with pytest.raises(InputError, match="row 4: a cell with colspan=9 must not hold"):
        parse_tables(text, "html")
    t, = parse_tables(text.replace("<td colspan=9>0.5</td>", "<td colspan=9>-</td>"), "html")
    assert (t.header, t.rows) == (("q", "k1", "k2"), (("1", "x", "0.5"), ("2", "", "-")))
    assert Fraction(t.rows[0][2]) == Fraction(1, 2)


def test_a_row_per_key_of_one_query_is_not_judged_as_a_row_per_query(cli, tmp_path):
    # the layout of `exactattn page`: rows are keys, columns are quantities; judged in order
    # as keys it would report right shares as wrong, so it is listed as not judged
    text = ("<table><caption>How \"bank\" (query 3) shares its attention</caption>"
            "<thead><tr><th>word</th><th>raw score</th><th>share</th></tr></thead><tbody>"
            "<tr><td>the</td><td>0</td><td>0.1941</td></tr>"
            "<tr><td>river</td><td>1/2</td><td>0.2764</td></tr>"
            "<tr><td>bank</td><td>1/2</td><td>0.2764</td></tr>"
            "<tr><td>flooded</td><td>3/8</td><td>0.2530</td></tr></tbody></table>")
    with pytest.raises(InputError, match=r"\(got none: table 1: quantity columns\)"):
        audit_text(text, example="bank-river")
    page = tmp_path / "page.html"
    page.write_text(MINUS + text, encoding="utf-8")         # against the printed scores
    rc, out, _ = cli("audit", "--table", str(page))
    assert rc == 1 and "its columns are headed by quantities (a row per key" in out
    assert "audit: 1 of 3 cells not right (1 truncated)" in out
