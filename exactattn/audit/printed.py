"""The numbers a printed table cell holds, read exactly from their text.

A cell is read as its author typed it: ``0.5800`` is the decimal 58/100
printed at 4 places, ``3.2`` is exactly 16/5 (read by
:func:`exactattn.numbers.exact.to_exact` from the text, never through a binary float),
``1/2`` is an exact claim (a fraction is judged exactly, not at places), and
``58.00%`` is 0.58 printed at 4 places.  Markup around the number is dropped:
Markdown emphasis and code spans, LaTeX math and ``\\textbf{...}``, a Unicode
minus sign.

A cell may hold several readings of one number (``25/8 = 3.125``,
``1/3 ~ 0.3333``, ``sqrt(2)/2 ~ 0.7071``: the parts that are numbers) or a
vector of numbers (``(0, 3, 1/2, 0)``: one entry per element).  ``-inf``,
``-∞`` and ``masked`` claim a hidden key; ``exactly 1`` is an exact claim.

>>> [[(p.value, p.places) for p in entry] for entry in read_cell("25/8 = 3.125")]
[[(Fraction(25, 8), None), (Fraction(25, 8), 3)]]
>>> [(p.text, p.value, p.places) for (p,) in read_cell("(0, 1/2, 0.75)")]
[('0', Fraction(0, 1), 0), ('1/2', Fraction(1, 2), None), ('0.75', Fraction(3, 4), 2)]
>>> read_cell("**0.5800**")[0][0].places, read_cell("$-$0.25")[0][0].value
(4, Fraction(-1, 4))
>>> read_cell("0.2907 at key 3"), read_cell("masked")[0][0].hidden
([], True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from itertools import takewhile

from ..errors import InputError
from ..numbers.exact import to_exact

#: cell texts that claim a hidden key (a causal or padding mask): no number, no share
HIDDEN_WORDS = ("-inf", "-infinity", "-∞", "masked")

_DECIMAL = re.compile(r"^[+-]?(\d+)(?:\.(\d*))?(?:[eE]([+-]?\d{1,4}))?$|^[+-]?\.(\d+)$")
_FRACTION = re.compile(r"^[+-]?\d+\s*/\s*\d+$")
_SEPARATORS = re.compile(r"\s+(?:=|~|≈)\s+|\s*≈\s*|^~")
_LATEX_WORDS = {r"\textasciitilde{}": "~", r"\sim": "~", r"\approx": "≈", r"\infty": "∞",
                r"\textminus": "-", r"\%": "%", r"\_": "_", r"\&": "&", r"\times": "×"}
_LATEX_WRAPPERS = re.compile(r"\\(?:textbf|mathbf|boldsymbol|bm|emph|textit|underline|"
                             r"mathrm|text|textrm|num|mathit)\s*\{([^{}]*)\}")


@dataclass(frozen=True)
class Printed:
    """One printed number: its text, its exact value and the places it is printed at.

    ``value`` is None for a hidden-key claim (``-inf``, ``masked``);
    ``places`` is None for an exact claim (a fraction, ``exactly 1``).
    """
    text: str
    value: Fraction | None
    places: int | None

    @property
    def hidden(self) -> bool:
        return self.value is None


def clean(text: str) -> str:
    """A cell's text without markup: Markdown emphasis and code, LaTeX math and wrappers.

    >>> clean(r"\\textbf{0.58}"), clean("`-0.5`"), clean("\u22120.5"), clean(r"$-\\infty$")
    ('0.58', '-0.5', '-0.5', '-∞')
    """
    t = str(text).replace("\u2212", "-").replace("\u00a0", " ").replace("\u202f", " ")
    if "\\" in t or "$" in t:
        for word, plain in _LATEX_WORDS.items():
            t = t.replace(word, plain)
        for _ in range(4):   # nested wrappers: \textbf{\num{0.5}}
            t = _LATEX_WRAPPERS.sub(r"\1", t)
        t = re.sub(r"\\[,;:! ]|[${}]", "", t)      # thin spaces, math and braces
    t = t.strip()
    for mark in ("**", "__", "`", "*", "_"):
        while len(t) > 2 * len(mark) and t.startswith(mark) and t.endswith(mark):
            t = t[len(mark):-len(mark)].strip()
    return t


def read_number(text: str) -> Printed | None:
    """One number as printed (decimal, integer, fraction, scientific, percent), or None.

    >>> read_number("1.2e-3"), read_number("sqrt(2)/2")
    (Printed(text='1.2e-3', value=Fraction(3, 2500), places=4), None)

    A scientific number whose last digit sits left of the point (``1.2e3``)
    has no places to judge it at: None.
    """
    t = text.strip()
    if not t:
        return None
    body = t[:-1].rstrip() if t.endswith("%") else t
    shift = 2 if body is not t else 0
    fraction = _FRACTION.match(body) and not shift      # an exact claim: no places
    m = None if fraction else _DECIMAL.match(body)
    if not (fraction or m):
        return None
    places = None if fraction else shift + (len(m.group(4)) if m.group(4) is not None else
                                            len(m.group(2) or "") - int(m.group(3) or 0))
    if places is not None and places < 0:
        return None
    try:
        value = to_exact(body, name="cell")
    except InputError:          # 1/0, or more digits than exact.MAX_DIGITS
        return None
    return Printed(t, value / 100 if shift else value, places)


def _forms(text: str) -> tuple[Printed, ...]:
    """The readings of one number: ``25/8 = 3.125`` gives two, ``sqrt(2)/2 ~ 0.7071`` one."""
    low = text.lower()
    if low in HIDDEN_WORDS:
        return (Printed(text, None, None),)
    if low.startswith("exactly "):
        p = read_number(text[len("exactly "):])
        return () if p is None else (Printed(text, p.value, None),)
    parts = [p for p in _SEPARATORS.split(text) if p and p.strip()]
    return tuple(p for p in (read_number(part) for part in parts) if p is not None)


def read_cell(text: str) -> list[tuple[Printed, ...]]:
    """The entries of a cell: one per number it prints (a vector gives one per element),
    each a tuple of the readings of that number.  ``[]`` when the cell holds no number.
    """
    t = clean(text)
    if len(t) > 2 and t[0] in "([" and t[-1] in ")]" and "," in t:
        # a vector; at an element that is no number ("... +56 more") the elements shown end
        return list(takewhile(bool, (_forms(clean(part)) for part in t[1:-1].split(","))))
    forms = _forms(t)
    return [forms] if forms else []
