"""Tables at any size: lazy rows, token selections and a progress bar.

A table of a head with n tokens has n rows of up to n cells; at n = 4096 that
is 16 million cells, too many to hold as strings.  :class:`LazyRows` is a
read-only sequence whose row i is built when it is read and dropped after, so
the writers of :mod:`exactattn.present.render` stream a table row by row (memory per
row, not per table) while a small table still reads like a list
(``rows[1]``, ``rows == [[...]]``).

:func:`parse_span` reads a selection of tokens such as ``1..8`` or
``1..4,10``; :func:`progress` wraps a long loop in a tqdm bar on stderr when
stderr is a terminal (and only once the loop has run for two seconds), and
:func:`busy` shows the time spent on one long step (the certified decimals of
a whole head) the same way.

>>> rows = LazyRows(3, lambda i: [str(i + 1), str((i + 1) ** 2)])
>>> rows[2], len(rows), rows == [["1", "1"], ["2", "4"], ["3", "9"]]
(['3', '9'], 3, True)
>>> parse_span("1..3, 7")
(0, 1, 2, 6)
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import groupby
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..errors import InputError, shorten

#: the widest table printed whole for people (text, Markdown, LaTeX): more columns are cut
PAGE = 16
#: what a cut table shows by default: the first CORNER rows and columns
CORNER = 8
#: the formats read by people: wide tables are cut to a readable part
PEOPLE = ("text", "markdown", "latex")
#: seconds a loop runs before its progress bar appears
PROGRESS_DELAY = 2.0


class LazyRows(Sequence):
    """A read-only sequence of ``length`` rows; row i is ``row(i)``, built each time it is read.

    Equal to any list or tuple holding the same rows.  Nothing is cached: a
    writer that reads each row once holds one row at a time.
    """

    __slots__ = ("_length", "_row")

    def __init__(self, length: int, row: Callable[[int], Any]):
        self._length, self._row = length, row

    @classmethod
    def over(cls, picked: Sequence[int], row: Callable[[int], Any]) -> "LazyRows":
        """One row per picked index (a token shown): row k is ``row(picked[k])``."""
        return cls(len(picked), lambda k: row(picked[k]))

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index):
        picked = range(self._length)[index]       # IndexError past either end
        return [self._row(i) for i in picked] if isinstance(index, slice) else self._row(picked)

    def __iter__(self) -> Iterator:
        row = self._row
        for i in range(self._length):
            yield row(i)

    def __eq__(self, other) -> bool:
        if not isinstance(other, (list, tuple, LazyRows)):
            return NotImplemented
        return len(other) == self._length and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class View:
    """What the tables show: which tokens (query rows), which keys (columns), and for whom.

    ``queries`` / ``keys``: sorted 0-based indices, None for every token.
    ``people``: a format read by people (text, Markdown, LaTeX): other wide
    axes (the numbers of a token, the columns of an output) are cut to the
    first :data:`CORNER`.  ``readers``: cells carry a second text marking
    exact values (text and Markdown print it).  ``corner``: the queries were
    cut by default, so the scores add a line per query (its sum and largest).
    """
    queries: tuple[int, ...] | None = None
    keys: tuple[int, ...] | None = None
    people: bool = False
    readers: bool = True
    corner: bool = False
    #: ``--fractions``: inputs typed as decimals shown as exact fractions too
    fractions: bool = False
    #: the tokens' texts (a real model's pieces): key columns are named by them
    names: tuple[str, ...] | None = None
    #: ``--columns N``: the first N numbers of each token, weight line and output (people
    #: formats; default 8 past 16)
    columns: int | None = None

    def key(self, j: int) -> str:
        """Key j's column name: ``key 3``, or ``3 bank`` when the tokens are named.

        >>> View().key(2), View(names=("[CLS]", "the", "bank")).key(2)
        ('key 3', '3 bank')
        """
        if self.names is None or j >= len(self.names):
            return f"key {j + 1}"
        return f"{j + 1} {self.names[j]}"

    @classmethod
    def of(cls, fmt: str, n: int, queries: Sequence[int] | None = None,
           keys: Sequence[int] | None = None) -> "View":
        """The view for format ``fmt`` of n tokens: past :data:`PAGE` keys, people get the
        first :data:`CORNER` queries and keys unless ``queries``/``keys`` say otherwise."""
        people = fmt in PEOPLE
        corner = people and n > PAGE
        q = tuple(queries) if queries is not None else tuple(range(CORNER)) if corner else None
        k = tuple(keys) if keys is not None else tuple(range(CORNER)) if corner else None
        return cls(q, k, people, fmt in PEOPLE, corner and queries is None)

    def rows(self, n: int) -> Sequence[int]:
        """The query (token) indices shown, of n."""
        return range(n) if self.queries is None else self.queries

    def cols(self, n: int) -> Sequence[int]:
        """The key indices shown, of n."""
        return range(n) if self.keys is None else self.keys

    def part(self, count: int) -> Sequence[int]:
        """Indices shown of another axis of ``count`` (slots, output columns)."""
        if self.columns is not None:
            return range(min(self.columns, count))
        return range(CORNER) if self.people and count > PAGE else range(count)

    def width(self, count: int) -> int | None:
        """How many entries of a vector of ``count`` people see (None: all): :meth:`part`'s."""
        shown = len(self.part(count))
        return None if shown == count else shown


def parse_span(text: str) -> tuple[int, ...]:
    """Token numbers (1-based) as sorted 0-based indices: ``"1..8"``, ``"3"``, ``"1..4,10"``.

    Raises:
        InputError: not a list of positive numbers and ``A..B`` ranges with A <= B.
    """
    picked: set[int] = set()
    parts = [p.strip() for p in str(text).split(",")]
    for part in parts:
        low, dots, high = part.partition("..")
        ends = (low, high) if dots else (low, low)
        if not all(e.strip().isdigit() and len(e.strip()) <= 9 for e in ends):
            raise InputError(f"span must be token numbers such as 1..8, 3 or 1..4,10 "
                             f"(got {shorten(repr(text))})")
        a, b = (int(e) for e in ends)
        if a < 1 or b < a:
            raise InputError(f"span must count up from 1, as in 1..8 (got {shorten(repr(text))})")
        if b - a > 10 ** 6:
            raise InputError(f"span must name at most a million tokens (got {shorten(repr(text))})")
        picked.update(range(a - 1, b))
    return tuple(sorted(picked))


def check_span(span: Sequence[int] | None, n: int, name: str) -> None:
    """Refuse ``span`` (None: every token) unless every index is below ``n``, in one line
    naming the flag and the range."""
    if span and span[-1] >= n:
        raise InputError(f"{name} must name tokens from 1 to {n} (got {span_text(span)})")


def span_text(span: Sequence[int]) -> str:
    """0-based indices as the 1-based ranges a user types: ``(0, 1, 2, 6)`` -> ``1..3,7``."""
    runs = [[i for _, i in run] for _, run in groupby(enumerate(span), lambda p: p[1] - p[0])]
    return ",".join(str(r[0] + 1) if len(r) == 1 else f"{r[0] + 1}..{r[-1] + 1}" for r in runs)


def shown_note(hint: str | None, *cuts) -> list[str]:
    """``["showing tokens 1..8 of 1024 and keys 1..8 of 1024; <hint>, or ..."]``, or ``[]``
    when nothing is cut.  Each cut is ``(word, shown, total)`` (said when fewer than
    ``total`` indices are shown), a phrase, or a false value.

    >>> shown_note(None, ("tokens", range(2), 5), ("keys", range(5), 5), None)
    ['showing tokens 1..2 of 5; use --format csv, json or jsonl for every value']
    """
    parts = [f"{c[0]} {span_text(c[1])} of {c[2]}" if isinstance(c, tuple) else c
             for c in cuts if not isinstance(c, tuple) or len(c[1]) < c[2]]
    parts = [p for p in parts if p]
    if not parts:
        return []
    how = f"{hint}, or use" if hint else "use"
    return [f"showing {' and '.join(parts)}; {how} --format csv, json or jsonl for every value"]


class Grid:
    """The queries (rows) and keys (columns) a square table of n tokens shows under ``view``:
    its column names, its note on what is cut (``keys_note`` said after the keys), and its
    rows, built when written.  The machine formats' data read the same queries and keys."""

    def __init__(self, n: int, view: View, keys_note: str = ""):
        self.n, self.toks, self.keys = n, view.rows(n), view.cols(n)
        self.cols = ["query"] + [view.key(j) for j in self.keys]
        keys = len(self.keys) < n and f"keys {span_text(self.keys)} of {n}{keys_note}"
        self.shown = shown_note("choose with --queries and --keys", ("queries", self.toks, n), keys)

    def rows(self, row_of, cell) -> LazyRows:
        """``[query, cell(row_of(i)[j]) for each key shown]`` for each query shown."""
        data = self.data(row_of, cell)
        return LazyRows(len(self.toks), lambda k: [str(self.toks[k] + 1)] + data[k])

    def picked(self, row: Sequence) -> list:
        """The entries of a full row at the keys shown."""
        return list(row) if len(self.keys) == self.n else [row[j] for j in self.keys]

    def data(self, row_of, cell) -> LazyRows:
        """The same cells without the query number (the JSON data)."""
        def line(k: int) -> list:
            r = row_of(self.toks[k])
            return [cell(r[j]) for j in self.keys]
        return LazyRows(len(self.toks), line)


def progress(items: Iterable, total: int, what: str, unit: str = "row") -> Iterable:
    """``items`` with a tqdm bar on stderr when stderr is a terminal (after two seconds).

    A pipe or a file on stderr gets no bar: logs stay clean.
    """
    if total < 2 or not progress_shown():
        return items
    from tqdm import tqdm     # a dependency, imported only when a bar is shown
    return tqdm(items, total=total, desc=what, unit=unit, delay=PROGRESS_DELAY, leave=False,
                file=sys.stderr, dynamic_ncols=True)


#: progress bars on (the default); ``--quiet`` / ``--no-progress`` turn them off
_SHOW = [True]


def show_progress(on: bool) -> None:
    """Turn every progress bar and step timer on or off (the CLI's ``--no-progress``)."""
    _SHOW[0] = bool(on)


def progress_shown(always: bool = False) -> bool:
    """Whether a bar goes to stderr: when it is a terminal (or ``always``); with
    ``--no-progress`` (:func:`show_progress`) never."""
    return _SHOW[0] and (always or getattr(sys.stderr, "isatty", lambda: False)())


@contextmanager
def busy(what: str):
    """A tqdm line on stderr with the time spent on one step, shown once the step has run
    for two seconds, when stderr is a terminal; nothing otherwise."""
    if not progress_shown():
        yield
        return
    from tqdm import tqdm
    done = threading.Event()

    def show() -> None:
        if done.wait(PROGRESS_DELAY):
            return
        bar = tqdm(total=None, desc=what, bar_format="{desc}: {elapsed}", file=sys.stderr,
                   leave=False)
        while not done.wait(0.5):
            bar.refresh()
        bar.close()
    worker = threading.Thread(target=show, daemon=True)
    worker.start()
    try:
        yield
    finally:
        done.set()
        worker.join()


class WorkBar:
    """A one-line bar on ``stream`` (stderr, never stdout), filled by the work done.

    The divisor experiment's: a row of width d_k costs d_k (tokens + 1) draws, so
    the bar advances by work (``draws``), not by rows (a row at d_k = 256 takes 64
    times one at d_k = 4); the text counts rows.  Redrawn about 100 times in all.
    Shown where :func:`progress_shown` says.
    """

    def __init__(self, what: str, rows: int, draws: int, stream, width: int = 30):
        self.what, self.rows, self.draws, self.stream, self.width = what, rows, draws, stream, width
        self.done_rows = self.done_draws = self.next_at = 0

    def advance(self, label: str, rows: int, draws: int) -> None:
        self.done_rows += rows
        self.done_draws += draws
        if self.done_draws < self.next_at and self.done_rows != self.rows:
            return
        self.next_at = self.done_draws + max(1, self.draws // 100)
        filled = self.width * self.done_draws // self.draws
        self.stream.write(f"\r{self.what} [{'#' * filled}{'.' * (self.width - filled)}] "
                          f"{self.done_rows}/{self.rows} {label}")
        if self.done_rows == self.rows:
            self.stream.write("\n")
        self.stream.flush()

    def abandon(self) -> None:
        """End the bar's line (an interrupted run), so what follows starts a new line."""
        if self.done_rows != self.rows:
            self.stream.write("\n")
            self.stream.flush()


def forked_map(fn: Callable, items: Sequence, jobs: int | None = None) -> Iterator:
    """``map(fn, items)``, in order, in ``jobs`` forked processes (default one a core, at most
    one an item); one after another here where processes cannot be forked or ``jobs`` <= 1.

    Workers are forks: they inherit what this process has imported and set, and ``fn`` is
    a module-level function (sent by name).  Where a multithreaded runtime is loaded (JAX,
    torch), forking is unsafe: a caller passes ``jobs=1`` there.
    """
    import multiprocessing
    import os
    jobs = min(len(items), (os.cpu_count() or 1) if jobs is None else jobs)
    if jobs <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        yield from map(fn, items)
        return
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        yield from pool.imap(fn, items)
