"""Read a user's head from a spec file (JSON or TOML) into an :class:`Example`.

The format (SPEC section 7)::

    {"name": "my head", "layout": "slots",
     "tokens": [{"text": "year 4", "id": 331, "x": [0, 1, 0, "1/2"]}, ...],
     "W_Q": [[...], ...], "W_K": [[...], ...], "W_V": [[...], ...],
     "divisor": "2", "causal": false}

Numbers are integers, strings (``"1/2"``, ``"-0.75"``) or bare decimal
literals, which are read from their text: ``0.1`` in the file is exactly 1/10
(the parsers are told to hand floats over as text, so no binary float is
ever formed).

>>> ex = loads('{"tokens": [{"x": [1, 0.5]}], "W_Q": [[1, 0]], "W_K": [[0, 1]], "W_V": [[1, 1]]}')
>>> ex.x
[[Fraction(1, 1), Fraction(1, 2)]]
>>> loads('{"tokens": [], "W_Q": [[1]], "W_K": [[1]], "W_V": [[1]]}')
Traceback (most recent call last):
...
exactattn.errors.SpecError: spec: tokens must be a non-empty list of {"x": [...]} (got [])
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from .errors import ExactAttnError, ShapeError, SpecError
from .examples import Example, Token
from .exact import to_row
from .head import Head

__all__ = ["KEYS", "load", "loads", "from_mapping"]

KEYS = ("name", "layout", "tokens", "W_Q", "W_K", "W_V", "divisor", "causal")


def from_mapping(doc: Any, *, where: str = "spec") -> Example:
    """Build an :class:`Example` from a parsed spec document.

    Raises:
        SpecError: a missing or unknown key, or a malformed token list.
        ShapeError, InputError: bad matrices, entries or divisor (from :class:`Head`).
    """
    if not isinstance(doc, dict):
        raise SpecError(f"{where}: the top level must be a table/object (got {type(doc).__name__})")
    unknown = sorted(set(doc) - set(KEYS))
    if unknown:
        raise SpecError(f"{where}: unknown key {unknown[0]!r}; the keys are {', '.join(KEYS)}")
    for key in ("tokens", "W_Q", "W_K", "W_V"):
        if key not in doc:
            raise SpecError(f"{where}: {key} is missing; a spec needs tokens, W_Q, W_K and W_V")
    tokens = doc["tokens"]
    if not isinstance(tokens, list) or not tokens:
        raise SpecError(f'{where}: tokens must be a non-empty list of {{"x": [...]}} (got {tokens!r})')
    labels, xs = [], []
    for i, tok in enumerate(tokens):
        if not isinstance(tok, dict) or "x" not in tok:
            raise SpecError(f'{where}: tokens[{i}] must be an object with "x" (got {tok!r})')
        extra = sorted(set(tok) - {"x", "text", "id"})
        if extra:
            raise SpecError(f"{where}: tokens[{i}] has unknown key {extra[0]!r}; use text, id, x")
        tid = tok.get("id")
        if tid is not None and (not isinstance(tid, int) or isinstance(tid, bool)):
            raise SpecError(f"{where}: tokens[{i}].id must be an integer (got {tid!r})")
        labels.append(Token(str(tok.get("text", f"token {i + 1}")), tid))
        xs.append(tok["x"])
    causal = doc.get("causal", False)
    kwargs = {"layout": doc.get("layout", "slots"), "causal": causal}
    if "divisor" in doc:
        if doc["divisor"] is None:
            raise SpecError(f'{where}: divisor must be a positive number, "sqrt(q)" or "none" '
                            '(got null); leave it out for sqrt(d_k)')
        kwargs["divisor"] = doc["divisor"]
    head = Head(doc["W_Q"], doc["W_K"], doc["W_V"], **kwargs)
    x = []
    for i, xi in enumerate(xs):  # name entries by their place in the file
        r = to_row(xi, name=f"tokens[{i}].x")
        if len(r) != head.d_model:
            raise ShapeError(f"tokens[{i}].x (token {i + 1}) must have d_model = "
                             f"{head.d_model} numbers (got {len(r)})")
        x.append(r)
    name = str(doc.get("name", "spec"))
    return Example(name=name, title="", head=head, tokens=labels, x=x,
                   focus=min(1, len(x) - 1), explain=(min(1, len(x) - 1), 0), source=where)


def loads(text: str, *, fmt: str = "json", where: str = "spec") -> Example:
    """Parse spec text (``fmt`` is ``json`` or ``toml``); floats are kept as text."""
    try:
        if fmt == "toml":
            doc = tomllib.loads(text, parse_float=_toml_float)
        else:
            doc = json.loads(text, parse_float=str, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        other = "name it .toml" if fmt == "json" else "name it .json"
        raise SpecError(f"{where}: not valid {fmt.upper()} ({e}); check the file is complete, "
                        f"or if it is {'TOML' if fmt == 'json' else 'JSON'}, {other}") from None
    except RecursionError:
        raise SpecError(f"{where}: nested too deeply to read; a spec is a few levels deep") from None
    except ValueError as e:  # e.g. an integer literal past Python's 4300-digit limit
        raise SpecError(f"{where}: a number could not be read ({e}); "
                        "write very long numbers as strings or rescale them") from None
    return from_mapping(doc, where=where)


def _refuse_constant(name: str):
    raise SpecError(f"spec: {name} is not allowed; entries must be finite exact numbers")


def _toml_float(text: str) -> str:
    """TOML floats are handed over as text (``1_000.5`` -> ``'1000.5'``), never as binary floats."""
    return text.replace("_", "")


def load(path: str | Path) -> Example:
    """Read a spec file; ``.toml`` files are TOML, everything else JSON.

    Raises:
        SpecError: the file is missing, unreadable, not UTF-8, or malformed.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"spec file {str(p)!r} does not exist; check the path") from None
    except IsADirectoryError:
        raise SpecError(f"spec file {str(p)!r} is a directory; pass a .json or .toml file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"spec file {str(p)!r} could not be read ({e.__class__.__name__})") from None
    fmt = "toml" if p.suffix.lower() == ".toml" else "json"
    try:
        return loads(text, fmt=fmt, where=str(p))
    except SpecError:
        raise
    except ExactAttnError as e:
        raise type(e)(f"{p}: {e}") from None
