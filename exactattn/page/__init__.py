"""The interactive page: one self-contained HTML file with every number certified beforehand.

``exactattn page --example bank-river -o bank.html`` writes the bank example's
page (both sentences: a bank sentence brings its companion): a sentence
switch, a divisor slider (stops from 1/8 to 128 on a log scale, sqrt(d_k)
among them, plus ``none``), the share table with its equal-share line, the
output, a picture of the word vectors, the query and the output dot, a length
slider (n = 1,000 to 16,000: the score table is n by n) and check-yourself
questions with answers.  Any head whose tokens have two numbers (d_model = 2)
gets the same page (``--spec``).

The modules, in the order data flows:

* :mod:`~exactattn.page.data`: every number, computed by exactattn and
  certified (shares and outputs through the trace's bulk certified path,
  exact raw scores and limits, the cost module's counts);
* :mod:`~exactattn.page.picture`: the SVG picture and the dot's positions;
* :mod:`~exactattn.page.questions`: the questions, answered with those numbers;
* :mod:`~exactattn.page.html`: the page; ``page.css`` and ``page.js`` are
  written into it inline.  The script only picks which precomputed value to
  show; it does no arithmetic, and the page says so.

Reference: Vaswani et al. 2017, sec. 3.2.1 (the divisor sqrt(d_k)) and sec. 4
(the n^2 cost); the built-in worked examples ``bank-river`` and ``bank-loan``.

>>> from exactattn.examples import example
>>> text = build_page([example("bank-river"), example("bank-loan")], lengths=[1000, 2000])
>>> text.startswith("<!DOCTYPE html>"), "0.2764" in text, "http://" in text.replace(
...     'xmlns="http://www.w3.org/2000/svg"', "")
(True, True, False)
"""

from __future__ import annotations

from typing import Sequence

from .data import LENGTHS, page_numbers, with_companions
from .html import page_html

__all__ = ["build_page", "page_numbers"]


def build_page(examples, *, places: int = 4, row: int | None = None,
               lengths: Sequence[int] = LENGTHS, command: str = "") -> str:
    """The page of ``examples`` (one sentence each) as HTML text.

    ``places``: decimal places of shares and outputs (certified); ``row``:
    the query row of every sentence, 1-based (default each example's focus);
    ``lengths``: the length slider's stops; ``command``: the command line that
    made the page, quoted on it.

    Raises:
        InputError: no sentence or more than 8, a head with d_model other
            than 2, over 64 tokens, ``row`` outside a sentence, ``places``
            outside 0..50.
    """
    return page_html(page_numbers(examples, places=places, row=row, lengths=lengths),
                     command=command)
