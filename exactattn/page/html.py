"""The page as one self-contained HTML file: inline CSS, inline script, the numbers as data.

:func:`page_html` lays out what :func:`~exactattn.page.data.page_numbers`
computed: the sentence switch, the divisor slider (plus ``none``), the share
table with its equal-share line, the output, the picture
(:mod:`exactattn.page.picture`), the length slider and the check-yourself
questions (:mod:`exactattn.page.questions`).  Every number is written into
the page as text: the tables hold the first state, and a
``<script type="application/json" id="page-data">`` holds the values of every
other state, keyed by the sliders' values.  The script (``page.js``) only
picks which of them to show; it does no arithmetic.  A Content-Security-Policy
forbids any network request (``default-src 'none'``), so the page works from
``file://`` and fetches nothing.

Element ids the browser test reads: ``sentence-K`` (the switch),
``divisor`` and ``divisor-none``, ``divisor-value``, ``length``, ``length-*``,
``shares-K`` (the table of sentence K; cells ``td.share``), ``output-K``,
``equal-K``, ``picture`` (``circle.output-dot``), ``questions``.
"""

from __future__ import annotations

import json
from html import escape as _e
from importlib import resources

from .. import __version__
from .data import SQUARE
from .picture import BAR, bar_width, dot_positions, frame, picture_svg
from ..present.cells import vector
from .questions import join, questions

#: no network request of any kind; inline script and style only; images from data: URLs
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "img-src data:; base-uri 'none'; form-action 'none'")


def _asset(name: str) -> str:
    return resources.files("exactattn.page").joinpath(name).read_text(encoding="utf-8")


def script_data(nums, initial: str) -> dict:
    """The values of every state, as the script reads them (all text, keyed by text)."""
    f = frame(nums.sentences)
    sentences = {}
    for k, s in enumerate(nums.sentences):
        dots = dot_positions(s, f)
        sentences[str(k)] = {"at": {
            key: {"shares": at["shares"], "bars": [bar_width(d) for d in at["decimals"]],
                  "output": vector(at["output"]),
                  "largest": ", ".join(s.words[j] for j in at["largest"]),
                  "dot": None if dots is None else dots[key]}
            for key, at in s.at.items()}}
    lengths = {str(k): {name: r[name] for name in ("n", "scores", "score_macs", "mix_macs",
                                                   "projection_macs", "total", "ratio",
                                                   "score_ratio", "side")}
               | {"how": "counted" if r["counted"] else "derived"}
               for k, r in enumerate(nums.lengths)}
    stops = {s.key: {"label": s.label, "words": s.words} for s in nums.stops}
    return {"initial": {"sentence": "0", "stop": initial, "length": "0"},
            "stops": stops, "sentences": sentences, "lengths": lengths}


def _switch(nums) -> str:
    if len(nums.sentences) == 1:
        s = nums.sentences[0]
        return (f'<p class="only-sentence">Sentence: <b>{_e(s.label)}</b> '
                f'<span class="sentence-text">{_e(s.title)}</span></p>')
    out = ['<fieldset id="sentence" class="switch"><legend>Sentence</legend>']
    for k, s in enumerate(nums.sentences):
        checked = " checked" if k == 0 else ""
        out.append(f'<label><input type="radio" name="sentence" id="sentence-{k}" '
                   f'value="{k}"{checked}> <b>{_e(s.label)}</b>: '
                   f'<span class="sentence-text">{_e(s.title)}</span></label>')
    out.append("</fieldset>")
    return "\n".join(out)


def _divisor_controls(nums, first: str) -> str:
    numeric = [s for s in nums.stops if s.divisor_squared is not None]
    none_first = first == "none"
    start = numeric[len(numeric) // 2].key if none_first else first
    ticks = "".join(f'<option value="{s.key}" label="{_e(s.label)}"></option>' for s in numeric)
    stated = ", ".join(s.label + (" (the head's own)" if s.own else "") for s in numeric)
    words = nums.stops[-1].words if none_first else \
        next(s.words for s in nums.stops if s.key == first)
    return f"""<div class="control">
<label for="divisor">Divisor</label>
<input type="range" id="divisor" min="0" max="{len(numeric) - 1}" step="1" value="{start}"
 list="divisor-stops"{' disabled' if none_first else ''}>
<datalist id="divisor-stops">{ticks}</datalist>
<label class="none"><input type="checkbox" id="divisor-none"{' checked' if none_first else ''}>
 none</label>
<output id="divisor-value">{_e(words)}</output>
<p class="small">Stops: {_e(stated)}; each is sqrt(2) times the one before (evenly spaced on a
log scale), plus <i>none</i> (the scores are not divided). Drag it up and the shares flatten
toward an equal share; down, and the largest score takes almost everything.</p>
</div>"""


def _share_table(k: int, s, at: dict, hidden: bool) -> str:
    """Sentence k's share table in the state ``at`` (its :func:`script_data`)."""
    rows = []
    for j, w in enumerate(s.words):
        focus = ' class="focus"' if j == s.query else ""
        rows.append(f'<tr{focus}><td class="word">{_e(w)}</td><td class="raw">'
                    f'{_e(s.raw[j])}</td><td class="share">{_e(at["shares"][j])}</td>'
                    f'<td class="bar-cell"><span class="bar"><span class="fill" '
                    f'style="width: {at["bars"][j]}"></span></span></td></tr>')
    equal_at = bar_width(s.equal_decimal)
    word = s.words[s.query]
    return f"""<section class="sentence" data-sentence="{k}"{' hidden' if hidden else ''}>
<table id="shares-{k}" class="shares" style="--equal: {equal_at}; --bar: {BAR}px">
<caption>How "{_e(word)}" (query {s.query + 1}) shares its attention</caption>
<thead><tr><th>word</th><th>raw score</th><th>share</th><th>share as a bar
 <span class="legend-equal">| equal share</span></th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody>
<tfoot><tr><td colspan="4" id="equal-{k}">Equal share: {_e(s.equal)} for each of the
 {s.visible} words "{_e(word)}" sees (the dashed line): where the shares go as the divisor
 grows.</td></tr></tfoot>
</table>
<p class="output">Output of "{_e(word)}": <b id="output-{k}">{_e(at["output"])}</b>
 <span class="small">(the values weighted by the shares, summed; the orange dot)</span></p>
<p class="small">Largest share: <span id="largest-{k}">{_e(at["largest"])}</span>.
 Each row of shares sums to exactly 1 (checked exactly, not from the decimals).</p>
</section>"""


def _length_section(nums, rows: list[dict]) -> str:
    """The length slider and its table, from the stops' :func:`script_data`."""
    first = rows[0]
    causal = nums.sentences[0].causal
    table = "\n".join("<tr>" + "".join(f"<td>{r[name]}</td>" for name in (
        "n", "scores", "score_macs", "mix_macs", "projection_macs", "total", "ratio", "how"))
        + "</tr>" for r in rows)
    return f"""<section id="lengths">
<h2>The score table is n by n</h2>
<div class="control">
<label for="length">Length</label>
<input type="range" id="length" min="0" max="{len(rows) - 1}" step="1" value="0">
<output id="length-n">{first['n']}</output> tokens
</div>
<div class="length-view">
<svg width="{SQUARE + 2}" height="{SQUARE + 2}" viewBox="0 0 {SQUARE + 2} {SQUARE + 2}"
 aria-label="the score table drawn to scale"><rect class="square-frame" x="1" y="1"
 width="{SQUARE}" height="{SQUARE}"/><rect id="score-square" x="1" y="1" width="{first['side']}"
 height="{first['side']}"/></svg>
<dl>
<dt>{'scores (the visible pairs of the n &#215; n table)' if causal else 'scores in the n &#215; n table'}</dt><dd id="length-scores">{first['scores']}</dd>
<dt>multiply-adds for the scores</dt><dd id="length-score-macs">{first['score_macs']}</dd>
<dt>multiply-adds for mixing the values</dt><dd id="length-mix-macs">{first['mix_macs']}</dd>
<dt>multiply-adds for the projections</dt><dd id="length-projection-macs">{first['projection_macs']}</dd>
<dt>all multiply-adds</dt><dd id="length-total">{first['total']}</dd>
<dt>scores against the stop before</dt><dd id="length-score-ratio">{first['score_ratio'] or '&#8212;'}</dd>
<dt>how the figures were obtained</dt><dd id="length-how">{first['how']}</dd>
</dl>
</div>
<p class="small">Double the context and the score work is {'about ' if causal else ''}four times as big. Stops: n =
{', '.join(r['n'] for r in rows)}. The figures: {_e(nums.length_note)}.</p>
<table class="costs"><thead><tr><th>n</th><th>scores</th><th>score MACs</th><th>mixing MACs</th>
<th>projection MACs</th><th>total MACs</th><th>total / row above</th><th>how</th></tr></thead>
<tbody>
{table}
</tbody></table>
</section>"""


def _caption(nums) -> str:
    """What the picture draws: the query only at d_k = 2, the output only at d_v = 2."""
    parts = ["the word vectors (dots)"]
    if any(s.query_vector is not None for s in nums.sentences):
        parts.append("the query (dashed arrow)")
    if any(s.values is not None and s.values != s.x for s in nums.sentences):
        parts.append("the values where they differ from the word vectors (squares)")
    if any(s.values is not None for s in nums.sentences):
        parts.append("the output (orange dot; the faint dots: the output at every divisor stop)")
    else:
        parts.append("(the values have d_v other than 2: the output is in the table only)")
    text = join(parts)
    return text[0].upper() + text[1:] + "."


def _questions(nums) -> str:
    items = "\n".join(f"<li><details><summary>{_e(q)}</summary><p>{_e(a)}</p></details></li>"
                      for q, a in questions(nums))
    return f"""<section id="questions">
<h2>Check yourself</h2>
<p class="small">Try each one on the sliders first, then open the answer.</p>
<ol>
{items}
</ol>
</section>"""


def page_html(nums, *, command: str = "") -> str:
    """The whole page as HTML text (deterministic: the same numbers give the same bytes)."""
    first = nums.own_key
    s0 = nums.sentences[0]
    states = script_data(nums, first)
    data = json.dumps(states, ensure_ascii=True, sort_keys=True,
                      separators=(",", ":")).replace("</", "<\\/").replace("<!--", "<\\!--")
    tables = "\n".join(_share_table(k, s, states["sentences"][str(k)]["at"][first], k > 0)
                       for k, s in enumerate(nums.sentences))
    word = s0.words[s0.query]
    made = f" with <code>{_e(command)}</code>" if command else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="exactattn {__version__}">
<title>Where does "{_e(word)}" land? Attention with certified numbers</title>
<style>
{_asset("page.css")}</style>
</head>
<body>
<header>
<h1>Where does "{_e(word)}" land?</h1>
<p>One attention head, one word: its query is compared with every word's key, the raw scores
are divided by the divisor, the softmax turns them into shares, and the output is the words'
values weighted by the shares. Switch the sentence, drag the divisor and the length.</p>
<p class="certified" id="certified">Every number on this page was computed by exactattn
{__version__} before the page was written{made}: shares and outputs are certified decimals at
{nums.places} places (the correctly rounded values of the exact numbers), raw scores and the
equal share are exact, and the counts are whole numbers. The page's script does no
arithmetic: it only picks which precomputed value to show. Positions in the picture and the
lengths of the bars are drawn from those numbers; a position is a picture, not a number.</p>
</header>
<main>
<section id="controls">
{_switch(nums)}
{_divisor_controls(nums, first)}
</section>
<div class="grid">
<figure>
{picture_svg(nums)}
<figcaption>{_e(_caption(nums))}</figcaption>
</figure>
<div class="tables">
{tables}
</div>
</div>
{_length_section(nums, list(states["lengths"].values()))}
{_questions(nums)}
</main>
<footer><p class="small">Made by exactattn {__version__} (exact-arithmetic attention).
This file is self-contained: it makes no network request.</p></footer>
<script type="application/json" id="page-data">{data}</script>
<script>
{_asset("page.js")}</script>
</body>
</html>
"""
