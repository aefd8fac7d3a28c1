"""Pictures of a head's squares: the share square (and the score square) as an SVG heatmap.

Each cell of the n x n square is a rectangle shaded by its value, with the
value printed in it: shares as certified decimals (correctly rounded, see
:mod:`exactattn.numbers.digits`), scores as exact rationals (a certified decimal when
the divisor makes them irrational).  Queries label the rows (left), keys the
columns (top), each with its token number and text.  Every cell is a
``<g id="cell-I-J">`` (1-based query I, key J) holding a ``<title>`` (the
tooltip), a ``<path>`` (the shaded square, with its ``fill``) and a ``<text>``
(the printed value), so the picture can be read back by a program
(``xml.etree``); each query row is a ``<g class="row">`` shifted to its place,
whose own ``<title>`` names the query.

Tooltips: a cell's ``<title>`` gives the exact value when it is short, at most
:data:`CLOSED_FORM_LIMIT` (200) characters: ``1/4 exactly``, or the closed
form with its certified decimal, ``exp(25/16)/(2 + exp(3/8) + exp(25/16)) ~
0.5800 (certified)``, each exponent written as the score table writes that
scaled score (``exp(sqrt(3)/2)`` over the divisor sqrt(3)).  A longer closed
form (a row with many distinct score gaps has one exp term per gap) is
replaced by the certified decimal.  A square
of more than :data:`TOOLTIP_TOKENS` (50) tokens has tooltips per row only
(naming the query; a note under the picture says so), so a 200-token square
is about 4.3 MB at 4 places (it was 51 MB with every closed form written out);
the exact values are in the tables' json format.

Text: any string may be drawn; a character XML 1.0 cannot hold (a control
character such as ``\x01``, a lone surrogate) is written escaped, ``\x01``, as
the tables escape it, so the file is always well-formed XML.

Exactness: the printed digits are certified (read from the trace's bulk
certified path, :meth:`~exactattn.engines.trace.Trace.share_decimals`); only the shading is computed
from a float (the printed decimal read as a float), and a colour is a
picture, not a number.  Output is deterministic: the same head gives the same
bytes.

PNG: :func:`png` draws the same heatmap through matplotlib, when it is
installed (the optional extra ``exactattn[plot]``).

Reference: the share square ("attention pattern") of Vaswani et al. 2017,
sec. 3.2.1; the built-in worked example ``chronicle``.

>>> from exactattn.examples import chronicle
>>> from exactattn.present.tables import attend_example
>>> ex = chronicle()
>>> text = picture("scores", ex, attend_example(ex), 4)
>>> import xml.etree.ElementTree as ET
>>> root = ET.fromstring(text)
>>> cell = root.find(".//svg:g[@id='cell-2-1']", {"svg": SVG_NS})
>>> cell.find("svg:text", {"svg": SVG_NS}).text
'0.5800'
"""

from __future__ import annotations

import re
from typing import Sequence

from ..call.policy import divisor_text
from ..numbers.digits import check_places
from ..errors import InputError, shorten
from ..options import check_choice
from .render import printable

SVG_NS = "http://www.w3.org/2000/svg"
#: output formats that draw a picture instead of rendering tables
PICTURE_FORMATS = ("svg", "png")
#: the table modes that have a picture: scores -> the share square, square -> the score square
PICTURE_MODES = ("scores", "square")

_CELL = 76
_CHAR = 7.2  # approximate width of one label character at font-size 12
_LOW = (247, 251, 255)  # the colour of the smallest value
_HIGH = (8, 48, 107)  # the colour of the largest value


#: characters XML 1.0 allows in text and attribute values; any other is written escaped
_XML_CHARS = "\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff"


def _xml(text: str) -> str:
    """``text`` with every character XML cannot hold escaped as Python writes it (``\\x01``)."""
    if text.isprintable():          # the common case, without a regular expression
        return text
    return re.sub(f"[^{_XML_CHARS}]", lambda m: repr(m.group())[1:-1], text)


def _colour(t: float) -> str:
    t = min(max(t, 0.0), 1.0)
    rgb = [round(lo + (hi - lo) * t) for lo, hi in zip(_LOW, _HIGH)]
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def heatmap(cells: Sequence[Sequence[str]], levels: Sequence[Sequence[float | None]],
            query_labels: Sequence[str], key_labels: Sequence[str], *, title: str,
            tooltips: Sequence[Sequence[str]] | None = None, notes: Sequence[str] = ()) -> str:
    """An n x m heatmap as SVG text: ``cells[i][j]`` printed in a box shaded by ``levels[i][j]``.

    ``levels`` are in [0, 1] (0 lightest, 1 darkest; None: a grey, masked
    cell).  Rows are labelled by ``query_labels`` (left), columns by
    ``key_labels`` (top, slanted).  ``tooltips[i][j]`` (optional) becomes the
    cell's ``<title>``; None leaves that cell without one.

    Raises:
        InputError: ``cells``, ``levels`` and the labels disagree in size.

    >>> svg = heatmap([["1"]], [[1.0]], ["1 a"], ["1 a"], title="one cell")
    >>> svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"')
    True
    >>> heatmap([["1"]], [[1.0]], ["1 a", "2 b"], ["1 a"], title="bad")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: query_labels must have 1 labels, one per row of cells (got 2)
    """
    import xml.etree.ElementTree as ET
    n = len(cells)
    m = len(cells[0]) if n else 0
    if len(query_labels) != n:
        raise InputError(f"query_labels must have {n} labels, one per row of cells "
                         f"(got {len(query_labels)})")
    if len(key_labels) != m:
        raise InputError(f"key_labels must have {m} labels, one per column of cells "
                         f"(got {len(key_labels)})")
    if len(levels) != n or any(len(r) != m for r in levels) or any(len(r) != m for r in cells):
        raise InputError(f"levels must be {n} x {m} like cells")
    title, notes = _xml(title), [_xml(t) for t in notes]
    query_labels, key_labels = [_xml(t) for t in query_labels], [_xml(t) for t in key_labels]
    cells = [[_xml(c) for c in r] for r in cells]
    if tooltips is not None:
        tooltips = [[None if t is None else _xml(t) for t in r] for r in tooltips]
    left = 24 + round(_CHAR * max(len(s) for s in query_labels)) + 12
    top = 40 + round(0.72 * _CHAR * max(len(s) for s in key_labels)) + 24
    # slanted key labels run up and to the right: leave room past the last column
    right = max(24, round(0.77 * _CHAR * max(len(s) for s in key_labels)) - _CELL // 2 + 12)
    width = max([left + m * _CELL + right] + [24 + round(0.56 * _CHAR * len(t)) for t in notes])
    height = top + n * _CELL + 24 + 16 * len(notes)
    svg = ET.Element("svg", {"xmlns": SVG_NS, "width": str(width), "height": str(height),
                             "viewBox": f"0 0 {width} {height}",
                             "font-family": "DejaVu Sans, Helvetica, Arial, sans-serif"})
    ET.SubElement(svg, "title").text = title
    # a white ground: the 1-pixel gaps between the cells read as white grid lines
    ET.SubElement(svg, "rect", {"width": "100%", "height": "100%", "fill": "#ffffff"})
    ET.SubElement(svg, "text", {"x": "12", "y": "22", "font-size": "15",
                                "font-weight": "bold"}).text = title
    ET.SubElement(svg, "text", {"x": str(left + m * _CELL // 2), "y": "42", "font-size": "12",
                                "text-anchor": "middle", "fill": "#555"}).text = "keys"
    ET.SubElement(svg, "text", {"x": "12", "y": str(top - 8), "font-size": "12",
                                "fill": "#555"}).text = "queries"
    for j, lab in enumerate(key_labels):
        x = left + j * _CELL + _CELL // 2
        ET.SubElement(svg, "text", {"class": "key-label", "x": str(x), "y": str(top - 8),
                                    "font-size": "12",
                                    "transform": f"rotate(-40 {x} {top - 8})"}).text = lab
    for i, lab in enumerate(query_labels):
        y = top + i * _CELL + _CELL // 2 + 4
        ET.SubElement(svg, "text", {"class": "query-label", "x": str(left - 8), "y": str(y),
                                    "font-size": "12", "text-anchor": "end"}).text = lab
    # the cells: one group per query row (shifted down to the row), one line per cell;
    # what every cell shares (size, font, anchor) is said once, on the groups, so a
    # 200 x 200 square stays a few megabytes
    grid = ET.SubElement(svg, "g", {"class": "cells", "font-size": "13",
                                    "text-anchor": "middle"})
    grid.text = "\n"
    for i in range(n):
        row = ET.SubElement(grid, "g", {"class": "row", "transform":
                                        f"translate({left} {top + i * _CELL})"})
        ET.SubElement(row, "title").text = f"query {query_labels[i]}"
        row.text = row.tail = row[0].tail = "\n"
        for j in range(m):
            level = levels[i][j]
            g = ET.SubElement(row, "g", {"id": f"cell-{i + 1}-{j + 1}"})
            g.tail = "\n"
            if tooltips is not None and tooltips[i][j] is not None:
                ET.SubElement(g, "title").text = tooltips[i][j]
            x = j * _CELL
            # the square (a path is a dozen bytes shorter than the same <rect>)
            ET.SubElement(g, "path", {"d": f"M{x} 0h{_CELL - 1}v{_CELL - 1}h-{_CELL - 1}z",
                                      "fill": "#d9d9d9" if level is None else _colour(level)})
            attrs = {"x": str(x + _CELL // 2), "y": str(_CELL // 2 + 5)}
            if level is not None and level > 0.55:
                attrs["fill"] = "#ffffff"  # light ink on a dark cell (black is the default)
            ET.SubElement(g, "text", attrs).text = cells[i][j]
    for k, note in enumerate(notes):
        ET.SubElement(svg, "text", {"x": "12", "y": str(top + n * _CELL + 28 + 16 * k),
                                    "font-size": "11", "fill": "#555"}).text = note
    svg.text = "\n"
    for child in svg:
        if child.tail is None:
            child.tail = "\n"
    # ET writes '<x />'; '<x/>' is the same XML.  No text or attribute can hold ' />',
    # since ET escapes '>' in both
    return ET.tostring(svg, encoding="unicode").replace(" />", "/>") + "\n"


def _labels(example, n: int) -> list[str]:
    """Each token's number and text (newlines as spaces), cut to 18 characters with ``…``."""
    texts = [printable(t.text.replace("\n", " ")) for t in example.tokens[:n]]
    return [f"{i + 1} {t if len(t) <= 18 else t[:17] + '…'}".rstrip()
            for i, t in enumerate(texts + [""] * (n - len(texts)))]


#: a cell's tooltip carries the exact value when it takes at most this many characters;
#: past it (a long row: one exp term per distinct score gap) the certified decimal alone
CLOSED_FORM_LIMIT = 200
#: squares of up to this many tokens give every cell a tooltip; larger ones only each row
#: (a 200-token square has 40,000 cells: their closed forms made a 51 MB file)
TOOLTIP_TOKENS = 50


def _share_tip(share, dec: str) -> str:
    """The tooltip's value of one share: exact when it is short, else the certified decimal.

    A rational share prints exactly (``1/4 exactly``); an irrational one as its
    closed form with the certified decimal, when the form takes at most
    CLOSED_FORM_LIMIT characters (a row of k distinct score gaps has k exp
    terms of at least 9 characters each, so a long row is known long at once).
    """
    q = share.rational()
    if q is not None and len(f"{q} exactly") <= CLOSED_FORM_LIMIT:
        return f"{q} exactly"
    if q is None and 9 * len(share.row.counts) <= CLOSED_FORM_LIMIT:
        form = _spelled_form(share)
        if len(form) <= CLOSED_FORM_LIMIT:
            return f"{form} ~ {dec} (certified)"
    return f"{dec} (certified; the closed form is over {CLOSED_FORM_LIMIT} characters)"


def _spelled_form(share) -> str:
    """The share's closed form (:meth:`~exactattn.numbers.ratio.ExpRatio.text`) with each
    exponent over an irrational divisor spelled as the score table spells that scaled
    score (:func:`~exactattn.present.cells.root_text`): ``exp(sqrt(3)/2)``, not
    ``exp(3/2/sqrt(3))``."""
    from .cells import root_text
    form, row = share.text(), share.row
    for g in row.counts:
        term = row.term_text(g)
        if "sqrt(" in term:
            form = form.replace(term, f"exp({root_text(row.logit(g))})")
    return form


def _grid(trace, places: int, mode: str):
    """Cells, shading levels and tooltips of the share square (``mode`` scores: the bulk
    certified shares) or the score square (``square``: raw / divisor), checked first."""
    check_places(places)
    if trace.engine == "symbolic":
        raise InputError("trace must come from a numeric engine for a picture (got symbolic)")
    n, tip = trace.n, trace.n <= TOOLTIP_TOKENS
    cell = _share_cell(trace, places) if mode == "scores" else _score_cell(trace, places)
    got = [[cell(i, j, raw, tip) for j, raw in enumerate(trace.raw_score_row(i))]
           for i in range(n)]
    cells, levels, tips = ([[c[k] for c in r] for r in got] for k in range(3))
    if mode != "scores":    # shading from the smallest score in the square to the largest
        seen = [f for r in levels for f in r if f is not None]
        lo, hi = (min(seen), max(seen)) if seen else (0.0, 0.0)
        levels = [[None if f is None else (0.5 if hi == lo else (f - lo) / (hi - lo))
                   for f in r] for r in levels]
    return cells, levels, (tips if tip else None)


def _share_cell(trace, places: int):
    """A share's cell: (its certified decimal, the decimal as a float, its tooltip)."""
    decimals = trace.share_decimals(places)

    def cell(i: int, j: int, raw, tip: bool):
        dec, where = decimals[i][j], f"share of key {j + 1} for query {i + 1}: "
        if raw is None:
            return "masked", None, where + "0 (masked)"
        return (dec, None if dec == "nan" else float(dec),
                tip and where + _share_tip(trace.share(i, j), dec))
    return cell


def _score_cell(trace, places: int):
    """A scaled score's cell: (exact, or its certified decimal, as a float, its tooltip)."""
    from .cells import exact_text, root_text
    from ..numbers.reals import Surd
    head = trace.head
    d2 = head.divisor_squared

    def cell(i: int, j: int, raw, tip: bool):
        where = f"query {i + 1}, key {j + 1}: "
        if raw is None:
            return "-inf", None, where + "masked"
        v = head.scale(raw)                                 # a Fraction, or a Surd a/sqrt(D)
        q = v.rational() if isinstance(v, Surd) else v      # 0 / sqrt(2) is exactly 0
        text = v.decimal(places) if q is None else exact_text(q)
        if not tip:
            return text, float(text if q is None else q), None
        exact = exact_text(raw) + ("" if d2 is None else f" / {divisor_text(d2)} = {root_text(v)}")
        if len(exact) > CLOSED_FORM_LIMIT:
            exact = f"{text} (certified; the exact form is over {CLOSED_FORM_LIMIT} characters)"
        return text, float(text if q is None else q), where + exact
    return cell


def png(example, trace, places: int = 4, mode: str = "scores") -> bytes:
    """The same heatmap as the SVG picture (:func:`picture`) as PNG bytes, via matplotlib.

    Raises:
        InputError: matplotlib is not installed (install ``exactattn[plot]``).
    """
    try:
        import matplotlib
    except ImportError:
        raise InputError("format png needs matplotlib (not installed); install it with "
                         "pip install 'exactattn[plot]' or use --format svg") from None
    matplotlib.use("Agg")
    import io

    import matplotlib.pyplot as plt
    cells, levels, _ = _grid(trace, places, mode)
    n = trace.n
    labels = _labels(example, n)
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * n, 1.0 + 0.9 * n), dpi=100)
    grid = [[0.0 if v is None else v for v in r] for r in levels]
    ax.imshow(grid, cmap="Blues", vmin=0, vmax=1)
    for i in range(n):
        for j in range(n):
            lv = levels[i][j]
            ax.text(j, i, cells[i][j], ha="center", va="center", fontsize=9,
                    color="white" if lv is not None and lv > 0.55 else "black")
    ax.set_xticks(range(n), labels, rotation=40, ha="left")
    ax.set_yticks(range(n), labels)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel("keys")
    ax.set_ylabel("queries")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def picture(mode: str, example, trace, places: int = 4, fmt: str = "svg") -> str | bytes:
    """The picture of ``mode`` in ``fmt``: SVG text or PNG bytes (:func:`png`).

    ``scores``: the share square (the softmax of each row of scaled scores); cell (i, j)
    prints the certified share of key j for query i at ``places`` places and is shaded by
    it (white 0, dark blue 1).  ``square``: the score square (raw scores / divisor); a
    rational score prints exactly (``25/16``), an irrational one (divisor sqrt(2), say) as
    a certified decimal at ``places`` places; shading runs from the smallest score in the
    square (white) to the largest (dark blue); masked pairs are grey ``-inf``.

    Raises:
        InputError: a mode without a picture or an unknown picture format; ``places``
            outside 0..50; a symbolic trace.

    >>> from exactattn.examples import chronicle, tiny
    >>> from exactattn.present.tables import attend_example
    >>> "0.8628" in picture("scores", tiny(), attend_example(tiny()), 4)
    True
    >>> "25/16" in picture("square", chronicle(), attend_example(chronicle()), 4)
    True
    """
    check_choice(fmt, "format", PICTURE_FORMATS)
    if mode not in PICTURE_MODES:
        raise InputError(f"--format {fmt} must be used with scores or square (got "
                         f"{shorten(mode)}); other modes print tables: use text, markdown, "
                         "latex, json or csv")
    if fmt == "png":
        return png(example, trace, places, mode)
    cells, levels, tips = _grid(trace, places, mode)
    n, d2 = trace.n, trace.head.divisor_squared
    if mode == "scores":
        div = "no divisor" if d2 is None else f"divisor {divisor_text(d2)}"
        title, what = f"Shares: softmax(queries . keys / divisor), {example.name} ({div})", "shares"
        notes = ["each row sums to exactly 1",
                 f"shares at {places} certified places (correctly rounded); the shading is a "
                 "picture, not a number"]
    else:
        kind = "raw scores (no divisor)" if d2 is None else \
            f"scaled scores: raw / {divisor_text(d2)}"
        title, what = f"Scores: {kind}, {example.name}", "scores"
        notes = ["shading runs from the smallest score (white) to the largest (dark blue)"]
    if n > TOOLTIP_TOKENS:
        notes.append(f"{n} tokens: the tooltips name the query only (cells have their own, with "
                     f"the exact value, up to {TOOLTIP_TOKENS} tokens); the exact {what} are in "
                     "the json format")
    labels = _labels(example, n)
    return heatmap(cells, levels, labels, labels, title=title, tooltips=tips, notes=notes)
