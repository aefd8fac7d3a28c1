"""The built-in worked examples, each a head plus a row of tokens.

``chronicle`` is the default: the first four tokens of one chronicle entry,
``year 40: 235 hobbs standing in The Hollow, 1773 born and 1567 gone``, cut by
a 512-token vocabulary, each given four hand-typed numbers (slots: bare digit,
carries a year, carries a count, how much of a sentence it stands for).

>>> ex = example("chronicle")
>>> [t.text for t in ex.tokens]
['year 4', '0', ': 235 hobbs standing in The Hollow, 17', '7']
>>> ex.head.divisor
2
>>> example("nope")
Traceback (most recent call last):
...
exactattn.errors.InputError: example must be one of chronicle (got 'nope')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .errors import InputError
from .head import Head

__all__ = ["EXAMPLES", "Example", "Token", "chronicle", "example"]


@dataclass(frozen=True)
class Token:
    """A token's label: its text and (optional) vocabulary id."""
    text: str
    id: int | None = None

    @property
    def nbytes(self) -> int:
        return len(self.text.encode("utf-8"))


@dataclass
class Example:
    """A named head with its tokens and their numbers (x: n x d_model)."""
    name: str
    title: str
    head: Head
    tokens: list[Token]
    x: list[list]
    slot_names: list[str] = field(default_factory=list)
    focus: int = 1  # 0-based query shown "in vs out" in the scores table
    explain: tuple[int, int] = (1, 0)  # 0-based (query, key) for --explain by default
    source: str = ""


def chronicle() -> Example:
    """The worked example of SPEC section 2 (d_model = d_k = d_v = 4, divisor 2)."""
    head = Head(
        W_Q=[[0, 0, 2, 0], [3, 0, 0, 0], ["1/2", 0, 0, 0], [0, "1/2", 0, 0]],
        W_K=[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, "1/2"], [0, 0, 0, 1]],
        W_V=[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], ["1/2", 0, 0, 1]],
        layout="slots",
    )
    tokens = [Token("year 4", 331), Token("0", 48),
              Token(": 235 hobbs standing in The Hollow, 17", 383), Token("7", 55)]
    x = [[0, 1, 0, "1/2"], [1, 0, 0, 0], [0, 0, 1, 1], [1, 0, 0, 0]]
    from .exact import to_matrix
    return Example(
        name="chronicle",
        title="year 40: 235 hobbs standing in The Hollow, 1773 born and 1567 gone",
        head=head, tokens=tokens, x=to_matrix(x, name="x"),
        slot_names=["bare digit", "carries a year", "carries a count", "sentence share"],
        focus=1, explain=(1, 0),
        source="the chronicle worked example (SPEC section 2)")


EXAMPLES: dict[str, Callable[[], Example]] = {"chronicle": chronicle}


def example(name: str) -> Example:
    """Build the built-in example called ``name``."""
    if name not in EXAMPLES:
        raise InputError(f"example must be one of {', '.join(sorted(EXAMPLES))} (got {name!r})")
    return EXAMPLES[name]()
