"""The page's picture: the word vectors, the query and the output dot in the plane (SVG).

The two axes are the two numbers of a token (money and nature in the bank
sentences), drawn at the same scale so that distances look right.  Each
sentence is a ``<g class="sentence-picture" data-sentence="K">``: its word
vectors (``circle.word`` with a label), its query as a dashed arrow from the
origin when d_k = 2 (``line.query``), its values when they differ from the
word vectors and d_v = 2 (``rect.value``), the output at every divisor stop as
faint trail dots (``circle.trail``) and the orange output dot
(``circle.output-dot``), which the page's script moves by setting the
``cx``/``cy`` computed here for each stop (:func:`dot_positions`).

Positions are placed from exact rationals (the word vectors, the query, the
values) and from the outputs' certified decimals; a position is a picture, not
a number: the numbers are in the page's table, as text.

>>> from exactattn.examples import bank_river
>>> from exactattn.page.data import page_numbers
>>> nums = page_numbers([bank_river()], lengths=[1000])
>>> f = frame(nums.sentences)
>>> f.lo, f.hi, f.step
(Fraction(0, 1), Fraction(1, 1), Fraction(1, 4))
>>> f.px(Fraction(1, 2), Fraction(1, 2))
('230.0', '210.0')
"""

from __future__ import annotations

from html import escape as _e
from dataclasses import dataclass
from fractions import Fraction
from math import ceil, floor

from ..present.cells import exact_text, vector
from ..numbers.digits import format_exact, round_fraction

#: the side of the plotting square and the margins around it, in pixels
PLOT = 360
_LEFT, _TOP, _RIGHT, _BOTTOM = 50, 30, 90, 50
#: the length of a share bar at share 1, in pixels
BAR = 200
_ORANGE = "#e8710a"
#: tick steps tried, smallest first: m x 10^e for m in 1, 2.5, 5
_MANTISSAS = (Fraction(1), Fraction(5, 2), Fraction(5))


def _px(q: Fraction) -> str:
    return round_fraction(q, 1)


@dataclass(frozen=True)
class Frame:
    """The square [lo, hi]^2 drawn on PLOT x PLOT pixels, with ticks every ``step``."""

    lo: Fraction
    hi: Fraction
    step: Fraction

    def px(self, a, b) -> tuple[str, str]:
        """The pixel position (x, y) of the point (a, b), as attribute text."""
        scale = Fraction(PLOT) / (self.hi - self.lo)
        return (_px(_LEFT + (Fraction(a) - self.lo) * scale),
                _px(_TOP + (self.hi - Fraction(b)) * scale))

    def ticks(self) -> list[Fraction]:
        count = int((self.hi - self.lo) / self.step)
        return [self.lo + k * self.step for k in range(count + 1)]


def frame(sentences) -> Frame:
    """The one frame of every sentence: the origin, the word vectors, the queries and the
    values inside, on round ticks (at most 8 steps)."""
    pts = [Fraction(0)] + [p for s in sentences
                           for row in s.x + [s.query_vector or []] + (s.values or []) for p in row]
    lo, hi = min(pts), max(pts)
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    width = hi - lo
    # the smallest round step that covers the range in at most 8 steps
    e = (width.numerator.bit_length() - width.denominator.bit_length()) * 3 // 10 - 2
    while True:
        for m in _MANTISSAS:
            step = m * Fraction(10) ** e
            a, b = floor(lo / step), ceil(hi / step)
            if b - a <= 8:
                return Frame(a * step, b * step, step)
        e += 1


def _tick_text(q: Fraction) -> str:
    return format_exact(q) or exact_text(q)


def bar_width(decimal: str) -> str:
    """The length of a share's bar, ``'55.3px'``, from its certified decimal (``masked``: 0)."""
    try:
        q = Fraction(decimal)
    except ValueError:   # masked, nan
        q = Fraction(0)
    return f"{_px(q * BAR)}px"


def dot_positions(sentence, f: Frame) -> dict | None:
    """``{stop key: {"cx", "cy"}}`` of the output dot (None unless d_v = 2)."""
    if sentence.values is None:
        return None
    return {key: dict(zip(("cx", "cy"), f.px(*at["output"]))) for key, at in sentence.at.items()}


def _axes(f: Frame, names: list[str]) -> list[str]:
    out = []
    x0, y_top = f.px(f.lo, f.hi)
    x1, y_bottom = f.px(f.hi, f.lo)
    for t in f.ticks():
        x, y = f.px(t, t)
        zero = " axis" if t == 0 else ""
        out.append(f'<line class="grid{zero}" x1="{x}" y1="{y_top}" x2="{x}" y2="{y_bottom}"/>')
        out.append(f'<line class="grid{zero}" x1="{x0}" y1="{y}" x2="{x1}" y2="{y}"/>')
        out.append(f'<text class="tick" x="{x}" y="{_px(Fraction(y_bottom) + 16)}" '
                   f'text-anchor="middle">{_e(_tick_text(t))}</text>')
        out.append(f'<text class="tick" x="{_px(Fraction(x0) - 6)}" y="{_px(Fraction(y) + 4)}" '
                   f'text-anchor="end">{_e(_tick_text(t))}</text>')
    mid_x = _px((Fraction(x0) + Fraction(x1)) / 2)
    mid_y = _px((Fraction(y_top) + Fraction(y_bottom)) / 2)
    out.append(f'<text class="axis-name" x="{mid_x}" y="{_px(Fraction(y_bottom) + 36)}" '
               f'text-anchor="middle">{_e(names[0])} &#8594;</text>')
    out.append(f'<text class="axis-name" x="14" y="{mid_y}" text-anchor="middle" '
               f'transform="rotate(-90 14 {mid_y})">{_e(names[1])} &#8594;</text>')
    return out


def _sentence_group(k: int, s, f: Frame, own_key: str, hidden: bool) -> list[str]:
    out = [f'<g class="sentence-picture" data-sentence="{k}"' + (' display="none"' if hidden
                                                                else "") + ">"]
    ox, oy = f.px(0, 0)
    if s.query_vector is not None:
        qx, qy = f.px(*s.query_vector)
        out.append(f'<line class="query" x1="{ox}" y1="{oy}" x2="{qx}" y2="{qy}" '
                   f'marker-end="url(#arrow)"><title>query of {_e(s.words[s.query])}: '
                   f'{_e(vector(s.query_vector))}</title></line>')
        out.append(f'<text class="query-label" x="{_px(Fraction(qx) + 8)}" '
                   f'y="{_px(Fraction(qy) + 16)}">query</text>')
    if s.values is not None and s.values != s.x:
        for j, v in enumerate(s.values):
            vx, vy = f.px(*v)
            out.append(f'<rect class="value" x="{_px(Fraction(vx) - 4)}" '
                       f'y="{_px(Fraction(vy) - 4)}" width="8" height="8"><title>value of '
                       f'{_e(s.words[j])}: {_e(vector(v))}</title>'
                       "</rect>")
    for j, (w, x) in enumerate(zip(s.words, s.x)):
        wx, wy = f.px(*x)
        focus = " focus" if j == s.query else ""
        out.append(f'<circle class="word{focus}" cx="{wx}" cy="{wy}" r="5"><title>'
                   f'{_e(w)}: {_e(vector(x))}</title></circle>')
        out.append(f'<text class="word-label{focus}" x="{_px(Fraction(wx) + 8)}" '
                   f'y="{_px(Fraction(wy) - 8)}">{_e(w)}</text>')
    dots = dot_positions(s, f)
    if dots is not None:
        for key, p in dots.items():
            if key != "none":
                out.append(f'<circle class="trail" cx="{p["cx"]}" cy="{p["cy"]}" r="2"/>')
        p = dots[own_key]
        out.append(f'<circle class="output-dot" cx="{p["cx"]}" cy="{p["cy"]}" r="7" '
                   f'fill="{_ORANGE}"><title>output of {_e(s.words[s.query])}</title></circle>')
    out.append("</g>")
    return out


def picture_svg(numbers) -> str:
    """The picture of every sentence (the first shown), as inline SVG text."""
    f = frame(numbers.sentences)
    width, height = _LEFT + PLOT + _RIGHT, _TOP + PLOT + _BOTTOM
    out = [f'<svg id="picture" xmlns="http://www.w3.org/2000/svg" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
           'aria-label="the word vectors, the query and the output in the plane">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
           'markerHeight="7" orient="auto-start-reverse"><path d="M0 0L10 5L0 10z" '
           'class="arrow-head"/></marker></defs>',
           f'<rect class="ground" width="{width}" height="{height}"/>']
    out += _axes(f, numbers.sentences[0].slot_names)
    for k, s in enumerate(numbers.sentences):
        out += _sentence_group(k, s, f, numbers.own_key, hidden=k > 0)
    out.append("</svg>")
    return "\n".join(out)
