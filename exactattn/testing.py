"""Test helpers for authors' own docs: keep published attention tables honest in CI.

:func:`assert_typed_equal` is the equality the test suite means by "exact":
equal values of the same type at every level (``Fraction(1)``, ``1``,
``1.0`` and ``True`` are all told apart), with the path to the first
difference in the message.

:func:`assert_table` audits every table of a page (Markdown, CSV, LaTeX,
JSON or HTML) against what it is computed from and fails with the cell-by-cell
report when a printed digit is not the right one::

    # test_tables.py in a course repository
    from exactattn.testing import assert_table

    def test_lesson_3_tables():
        assert_table("lessons/3-attention.md", spec="lessons/3-head.json")

>>> import tempfile, os
>>> page = "Scores\\n\\n| query | k1 | k2 |\\n|---|---|---|\\n| q1 | 0 | 0 |\\n\\n" \\
...        "Shares\\n\\n| query | k1 | k2 |\\n|---|---|---|\\n| q1 | 0.5 | 0.3 |\\n"
>>> with tempfile.TemporaryDirectory() as d:
...     path = os.path.join(d, "page.md")
...     _ = open(path, "w").write(page)
...     assert_table(path)
Traceback (most recent call last):
...
AssertionError: page.md: 1 of 2 cells not right (1 wrong)
...
q1   k2      shares[1][2]  0.3      wrong    0.5 ...
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .audit import Audit, audit
from .audit.report import report_text, summary_line

__all__ = ["assert_table", "assert_typed_equal"]


def assert_table(path: str | Path, spec=None, quantity=None, **options) -> Audit:
    """Audit the tables of the file at ``path``; raise ``AssertionError`` unless every printed
    number is right.

    ``spec`` (a head spec file) or ``example=`` (a built-in example) is what
    the tables are computed from; with neither, the file's table of printed
    scores (``scores=N``, ``divisor=``).  ``quantity`` is what the tables
    print (one, or one per audited table; default: read from their titles).
    Other options: those of :func:`exactattn.audit.audit` (``which``,
    ``rows``, ``no_scale``, ``ties``, ``fmt``).

    Returns the :class:`~exactattn.audit.Audit` when every cell is right.

    Raises:
        AssertionError: a cell is not right; the message is the report of the
            cells that are not (row, column, printed, verdict, right value,
            exact value) and the count per verdict.
        InputError: the file or the spec cannot be read, or no table can be judged.
    """
    __tracebackhide__ = True      # pytest shows the report, not this frame
    result = audit(path, spec=spec, quantity=quantity, **options)
    if not result.clean:
        line = summary_line(result).replace("audit: ", "", 1)
        raise AssertionError(f"{Path(path).name}: {line}\n\n"
                             + report_text(result, only_not_right=True))
    return result


def assert_typed_equal(actual, expected, *, ordered: bool = False) -> None:
    """Raise ``AssertionError`` unless ``actual`` equals ``expected`` with the same type at
    every level.

    Lists, tuples and dicts are compared element by element: the same container
    type, the same length (or the same keys, each key of the same type), then
    every element, recursively.  ``ordered=True`` also asks for the keys of
    every dict in the same order.  Numpy arrays need the same dtype and shape
    and equal elements (an object array's elements typed-equal, one by one).
    Any other value is a leaf: ``type(a) is type(b) and a == b``, where a NaN
    float equals a NaN float of the same type.

    >>> from fractions import Fraction
    >>> assert_typed_equal({"a": [Fraction(1, 2), 3]}, {"a": [Fraction(1, 2), 3]})
    >>> assert_typed_equal([1, (Fraction(1, 2),)], [1, (0.5,)])
    Traceback (most recent call last):
    ...
    AssertionError: at [1][0]: Fraction(1, 2) (Fraction) != 0.5 (float)

    Raises:
        AssertionError: the message names the path of the first difference
            (``at [1]['k']: ...``) and both sides there, with their types.
    """
    __tracebackhide__ = True      # pytest shows the message, not the recursion
    difference = _first_difference(actual, expected, "", ordered)
    if difference is not None:
        raise AssertionError(difference)


def _show(value) -> str:
    return f"{value!r} ({type(value).__name__})"


def _at(path: str, what: str) -> str:
    return f"at {path}: {what}" if path else what


def _first_difference(a, b, path: str, ordered: bool) -> str | None:
    """The message for the first place ``a`` and ``b`` differ, or None."""
    if type(a) is not type(b):
        return _at(path, f"{_show(a)} != {_show(b)}")
    if isinstance(b, dict):
        return _dict_difference(a, b, path, ordered)
    if isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return _at(path, f"{type(a).__name__} of length {len(a)} != "
                             f"{type(b).__name__} of length {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            found = _first_difference(x, y, f"{path}[{i}]", ordered)
            if found is not None:
                return found
        return None
    if isinstance(b, np.ndarray):
        return _array_difference(a, b, path, ordered)
    if _is_nan(a) and _is_nan(b):
        return None
    if not a == b:
        return _at(path, f"{_show(a)} != {_show(b)}")
    return None


def _dict_difference(a: dict, b: dict, path: str, ordered: bool) -> str | None:
    if a.keys() != b.keys():
        missing = [k for k in b if k not in a]
        extra = [k for k in a if k not in b]
        parts = ([f"missing keys {missing!r}"] if missing else []) \
            + ([f"unexpected keys {extra!r}"] if extra else [])
        return _at(path, "dict keys differ: " + ", ".join(parts))
    if ordered and list(a) != list(b):
        return _at(path, f"dict keys in order {list(a)!r} != {list(b)!r}")
    keys_of_a = {k: k for k in a}           # each key as ``a`` has it (1 == 1.0 == True)
    for k, v in b.items():
        if type(keys_of_a[k]) is not type(k):
            return _at(path, f"key {_show(keys_of_a[k])} != key {_show(k)}")
        found = _first_difference(a[k], v, f"{path}[{k!r}]", ordered)
        if found is not None:
            return found
    return None


def _array_difference(a: np.ndarray, b: np.ndarray, path: str, ordered: bool) -> str | None:
    if a.dtype != b.dtype:
        return _at(path, f"array of dtype {a.dtype} != array of dtype {b.dtype}")
    if a.shape != b.shape:
        return _at(path, f"array of shape {a.shape} != array of shape {b.shape}")
    if a.dtype != object and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
        return None                 # the quick answer; element by element finds the place
    for index in np.ndindex(a.shape):
        where = f"{path}[{', '.join(map(str, index))}]" if index else path
        found = _first_difference(a[index], b[index], where, ordered)
        if found is not None:
            return found
    return None


def _is_nan(value) -> bool:
    return isinstance(value, (float, np.floating)) and math.isnan(value)
