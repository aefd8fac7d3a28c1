"""The built-in worked examples, each a head plus a row of tokens.

``chronicle`` is the default: the first four tokens of one chronicle entry,
``year 40: 235 hobbs standing in The Hollow, 1773 born and 1567 gone``, cut by
a 512-token vocabulary, each given four hand-typed numbers (slots: bare digit,
carries a year, carries a count, how much of a sentence it stands for).

The others are smaller worked examples:

* ``tiny``: two tokens of width two in the rows layout (``q = x @ W_Q``),
  x1 = (0.8, -0.6), x2 = (0.2, 1.0).  Compared raw (``x . x``) each token
  favours itself; after the two different projections W_Q and W_K each
  favours the other.
* ``bank-river`` and ``bank-loan``: words as two numbers (money, nature),
  "bank" at (1/2, 1/2), queries, keys and values equal to the word vectors.
  The same "bank" lands nearer nature in the river sentence and nearer money
  in the loan sentence (the two sentences are mirror images).
* ``self-match``: four rows of width 16 (orthogonal +-1 rows, so
  ``x . x = 16`` and ``x . y = 0``).  Raw, every position keeps most of its
  attention (a row dotted with itself is a sum of squares); after two
  different projections each query picks the previous token.

``tiny`` and ``self-match`` set ``compare_raw``: ``square`` and
``walkthrough`` print the raw self-match beside the projected scores
(:func:`exactattn.present.tables.raw_match`).

Exactness: every entry is an integer or a decimal read from its text
("0.8" is exactly 4/5); no binary float is involved.

>>> ex = example("chronicle")
>>> [t.text for t in ex.tokens]
['year 4', '0', ': 235 hobbs standing in The Hollow, 17', '7']
>>> ex.head.divisor
Fraction(2, 1)
>>> sorted(EXAMPLES)
['bank-loan', 'bank-river', 'chronicle', 'self-match', 'tiny']
>>> example("nope")
Traceback (most recent call last):
...
exactattn.errors.InputError: example must be one of bank-loan, bank-river, chronicle, self-match, tiny (got 'nope')
"""

from __future__ import annotations

from fractions import Fraction
from typing import Callable

from .options import check_choice
from .numbers.exact import to_matrix
from .engines.head import Head
from .engines.spec import Example, Token

__all__ = ["Example", "chronicle", "example"]


def chronicle() -> Example:
    """The built-in worked example ``chronicle`` (d_model = d_k = d_v = 4, divisor 2)."""
    head = Head(
        W_Q=[[0, 0, 2, 0], [3, 0, 0, 0], ["1/2", 0, 0, 0], [0, "1/2", 0, 0]],
        W_K=[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, "1/2"], [0, 0, 0, 1]],
        W_V=[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], ["1/2", 0, 0, 1]],
        layout="slots",
    )
    tokens = [Token("year 4", 331), Token("0", 48),
              Token(": 235 hobbs standing in The Hollow, 17", 383), Token("7", 55)]
    x = [[0, 1, 0, "1/2"], [1, 0, 0, 0], [0, 0, 1, 1], [1, 0, 0, 0]]
    return Example(
        name="chronicle",
        title="year 40: 235 hobbs standing in The Hollow, 1773 born and 1567 gone",
        head=head, tokens=tokens, x=to_matrix(x, name="x"),
        slot_names=["bare digit", "carries a year", "carries a count", "sentence share"],
        focus=1, explain=(1, 0),
        source="the chronicle worked example (chronicle)")


def _identity(n: int) -> list[list[int]]:
    return [[int(r == c) for c in range(n)] for r in range(n)]


def tiny() -> Example:
    """Two tokens of width two, rows layout; W_V is the identity.

    x1 = (0.8, -0.6), x2 = (0.2, 1.0); W_Q = [[1, 0], [-1, 1]], W_K = [[0, 1],
    [1, 0]] (``q = x @ W_Q``).  Raw, x1.x1 = 1 > x1.x2 = -0.44 and x2.x2 = 1.04
    > -0.44: each token favours itself.  Projected, q1.k2 = 1.28 > q1.k1 = -1.32
    and q2.k1 = 1.28 > q2.k2 = -0.6: each favours the other.

    >>> from exactattn.engines.head import attend
    >>> t = attend(tiny().head, tiny().x)
    >>> [[str(s) for s in row] for row in t.raw_scores]
    [['-33/25', '32/25'], ['32/25', '-3/5']]
    """
    head = Head(W_Q=[[1, 0], [-1, 1]], W_K=[[0, 1], [1, 0]], W_V=_identity(2), layout="rows")
    x = [["0.8", "-0.6"], ["0.2", "1.0"]]
    return Example(
        name="tiny", title="two tokens of width two, rows layout (x @ W)",
        head=head, tokens=[Token("x1"), Token("x2")], x=to_matrix(x, name="x"),
        slot_names=["x[1]", "x[2]"], focus=0, explain=(0, 1),
        source="the two-token, width-two head", compare_raw=True)


def _bank(name: str, words: list[tuple[str, str, str]], title: str, label: str) -> Example:
    head = Head(W_Q=_identity(2), W_K=_identity(2), W_V=_identity(2), layout="rows")
    bank = [w for w, _, _ in words].index("bank")
    other = next(i for i, (w, _, _) in enumerate(words) if w in ("river", "money"))
    return Example(
        name=name, title=title, head=head, tokens=[Token(w) for w, _, _ in words],
        x=to_matrix([[m, n] for _, m, n in words], name="x"), slot_names=["money", "nature"],
        focus=bank, explain=(bank, other), label=label,
        source="words as two numbers (money, nature), 'bank' at (1/2, 1/2)")


def bank_river() -> Example:
    """"the river bank flooded": where "bank" (1/2, 1/2) lands among nature words.

    Queries, keys and values equal the word vectors (W_Q = W_K = W_V = I);
    (money, nature): the (0, 0), river (0, 1), bank (1/2, 1/2), flooded (0, 3/4).

    >>> ex = bank_river()
    >>> ex.tokens[ex.focus].text, [str(v) for v in ex.x[ex.focus]]
    ('bank', ['1/2', '1/2'])
    """
    return _bank("bank-river", [("the", "0", "0"), ("river", "0", "1"),
                                ("bank", "1/2", "1/2"), ("flooded", "0", "3/4")],
                 "the river bank flooded", "River")


def bank_loan() -> Example:
    """"the bank lent money": the same "bank" (1/2, 1/2) among money words.

    The mirror image of :func:`bank_river` (money and nature swapped):
    the (0, 0), bank (1/2, 1/2), lent (3/4, 0), money (1, 0).

    >>> [t.text for t in bank_loan().tokens]
    ['the', 'bank', 'lent', 'money']
    """
    return _bank("bank-loan", [("the", "0", "0"), ("bank", "1/2", "1/2"),
                               ("lent", "3/4", "0"), ("money", "1", "0")],
                 "the bank lent money", "Loan")


def self_match() -> Example:
    """Four rows of width 16, raw against two different projections.

    Token t (t = 1..4) is the +-1 row that flips sign every 2^(t-1) places
    (Walsh-Hadamard rows 1, 2, 4, 8): ``x_t . x_t = 16`` (a sum of squares)
    and ``x_s . x_t = 0``.  Raw, with divisor sqrt(16) = 4, every position
    keeps e^4/(e^4 + 3) = 0.9479 of its attention.  Rows layout, d_k = 4:
    W_Q reads token c into slot c (``q_t = 4 e_t``), W_K reads token c - 1
    into slot c (``k_t = 4 e_(t+1)``, cyclically), W_V reads token c as 1
    (``v_t = e_t``, so an output row is the shares of that query).  After the
    projections each query picks the previous token (token 1 the last).

    >>> from exactattn.engines.head import attend
    >>> t = attend(self_match().head, self_match().x)
    >>> [[int(s) for s in row] for row in t.raw_scores]
    [[0, 0, 0, 16], [16, 0, 0, 0], [0, 16, 0, 0], [0, 0, 16, 0]]
    """
    # rows 1, 2, 4, 8 of the Sylvester-Hadamard matrix of width 16: (-1)^popcount(row & m)
    rows = [[-1 if bin(r & m).count("1") % 2 else 1 for m in range(16)] for r in (1, 2, 4, 8)]
    n, d_model = len(rows), len(rows[0])
    W_Q = [[Fraction(rows[c][m], 4) for c in range(n)] for m in range(d_model)]
    W_K = [[Fraction(rows[(c - 1) % n][m], 4) for c in range(n)] for m in range(d_model)]
    W_V = [[Fraction(rows[c][m], 16) for c in range(n)] for m in range(d_model)]
    head = Head(W_Q=W_Q, W_K=W_K, W_V=W_V, layout="rows")
    return Example(
        name="self-match", title="the cat sat down (four orthogonal rows of width 16)",
        head=head, tokens=[Token(w) for w in ("the", "cat", "sat", "down")],
        x=to_matrix(rows, name="x"), focus=1, explain=(1, 0),
        source="the self-matching failure", compare_raw=True)


EXAMPLES: dict[str, Callable[[], Example]] = {
    "chronicle": chronicle, "tiny": tiny, "bank-river": bank_river, "bank-loan": bank_loan,
    "self-match": self_match}


def example(name: str) -> Example:
    """Build the built-in example called ``name``."""
    return EXAMPLES[check_choice(name, "example", sorted(EXAMPLES))]()
