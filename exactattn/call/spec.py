"""Spec files (JSON or TOML): the reader, and the inputs of one attention call for ``verify``.

One reader for both kinds of spec file: the problem specs here, and the head specs
that :mod:`exactattn.engines.spec` builds into a head.  A file is read as UTF-8 (a
byte-order mark is fine), at most :data:`MAX_BYTES`; ``.toml`` files are TOML, everything else
JSON.  Numbers are integers, strings (``"1/2"``, ``"-0.75"``) or bare decimal
literals, which are read from their text: ``0.1`` in the file is exactly 1/10
(the parsers hand floats over as text, TOML's ``1_000.5`` as ``"1000.5"``, so no
binary float is ever formed).  A key given twice, ``NaN``/``Infinity``, a
document nested too deeply to read and a file past the size limit are
refused with one :class:`~exactattn.errors.SpecError` line.

A problem spec for ``exactattn verify`` (:func:`load_problem`,
:func:`loads_problem`; written by :func:`problem_text`)::

    {"name": "masked row", "dtype": "float32",
     "policy": {"scale": "none", "causal": false, "empty_row": "zero"},
     "query": [["0"], ["0"]], "key": [["0"], ["0"]], "value": [["1"], ["3"]],
     "mask": {"kind": "bool_keep", "values": [[true, false], [false, false]]}}

>>> problem, policy, dtype = loads_problem('query = [[1_000.5]]\\nkey = [[1]]\\nvalue = [[2]]',
...                                        fmt="toml")
>>> problem.query[0, 0, 0, 0], policy.divisor_squared, dtype
(Fraction(2001, 2), 'default', None)
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable


from .policy import MODIFIER_FIELDS, Policy
from ..errors import ExactAttnError, SpecError, shorten
from ..numbers.digits import fraction_text
from ..numbers.exact import MAX_DIGITS
from .spec_fields import MODIFIER_KEYS, check_known_keys, read_modifiers
from ..numbers.formats import float_format

__all__ = ["load_problem", "problem_text"]

#: the keys of a problem spec (``exactattn verify --spec``)
PROBLEM_KEYS = ("name", "dtype", "policy", "query", "key", "value", "mask", "dropout_keep")
#: the keys of a problem spec's ``policy`` table: the fields of :class:`~exactattn.call.policy.Policy`
#: (its plain fields, then its modifiers and ``lse``: :data:`~exactattn.call.spec_fields.MODIFIER_KEYS`)
#: (the scale is written as ``scale`` text, stored as ``divisor_squared``)
POLICY_KEYS = ("scale",) + tuple(f.name for f in dataclasses.fields(Policy)
                                 if f.name not in MODIFIER_FIELDS + ("divisor_squared",)) + MODIFIER_KEYS
#: the largest spec file read, in bytes (64 MiB)
MAX_BYTES = 64 * 2 ** 20


# --------------------------------------------------------------------------- reading text
def read_user_text(path: str | Path, *, what: str, kinds: str, limit: int = MAX_BYTES,
                   size_fix: str = "", error: type = SpecError) -> str:
    """The UTF-8 text of a file the user named (a BOM is dropped), read at most ``limit`` bytes.

    ``what`` names the file in messages (``spec file``), ``kinds`` what to pass instead of a
    directory (``a .json or .toml file``), ``size_fix`` what to do about a file past the limit.

    Raises:
        InputError (``error``): the file is missing, a directory, unreadable, larger than
            ``limit`` or not UTF-8; one line naming the file.
    """
    if not isinstance(path, str) and not hasattr(path, "__fspath__"):    # bytes, a number, a dict
        raise error(f"{what} must be a path (got {shorten(path)}); pass a file name")
    p = Path(path)
    name = repr(shorten(str(p), 200))
    try:
        with open(p, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise error(f"{what} {name} must exist (got no such file); check the path") from None
    except IsADirectoryError:
        raise error(f"{what} {name} must be a file (got a directory); pass {kinds}") from None
    except OSError as e:
        raise error(f"{what} {name} must be readable (got {e.__class__.__name__})") from None
    if len(data) > limit:
        raise error(f"{what} {name} must be at most {limit // 2 ** 20} MiB (got more); {size_fix}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise error(f"{what} {name} must be UTF-8 (got other bytes); save it as UTF-8") from None


def read_text(path: str | Path) -> tuple[str, str]:
    """A spec file's text and format (``json`` or ``toml``, by suffix).

    Raises:
        SpecError: the file is missing, a directory, unreadable, not UTF-8 or
            larger than :data:`MAX_BYTES`.
    """
    text = read_user_text(path, what="spec file", kinds="a .json or .toml file",
                          size_fix="a spec holds a few small matrices")
    return text, ("toml" if Path(path).suffix.lower() == ".toml" else "json")


def parse(text: str, *, fmt: str = "json", where: str = "spec") -> Any:
    """Parse spec text (``fmt`` is ``json`` or ``toml``); floats are kept as text.

    Raises:
        SpecError: malformed text, a repeated key, ``NaN``/``Infinity``, a
            number too long to read, nesting too deep to read, text past
            :data:`MAX_BYTES`.
    """
    if len(text) > MAX_BYTES:
        raise SpecError(f"{where} must be at most {MAX_BYTES // 2 ** 20} MiB (got more)")
    text = text.removeprefix("\ufeff")

    def pairs(items):
        doc = {}
        for key, value in items:
            if key in doc:
                raise SpecError(f"{where}: key {shorten(repr(key))} must appear once "
                                "(got it twice); remove one")
            doc[key] = value
        return doc

    def constant(name: str):
        raise SpecError(f"{where}: numbers must be finite (got {name}); NaN and infinities have "
                        "no exact value: write a finite number, or \"-inf\" (a string) to hide "
                        "a key in an additive mask")

    try:
        if fmt == "toml":
            # TOML floats are handed over as text (1_000.5 -> '1000.5'), never as binary floats
            return tomllib.loads(text, parse_float=lambda t: t.replace("_", ""))
        return json.loads(text, parse_float=str, parse_constant=constant,
                          object_pairs_hook=pairs)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        other = "name it .toml" if fmt == "json" else "name it .json"
        raise SpecError(f"{where}: not valid {fmt.upper()} ({e}); check the file is complete, "
                        f"or if it is {'TOML' if fmt == 'json' else 'JSON'}, {other}") from None
    except RecursionError:
        raise SpecError(f"{where}: nested too deeply to read; a spec is a few levels deep") from None
    except SpecError:        # a repeated key, NaN (raised by the hooks above)
        raise
    except ValueError:  # an integer literal past Python's 4300-digit limit
        raise SpecError(f"{where}: numbers must have at most {MAX_DIGITS} digits (got an "
                        "integer of more than 4300); rescale the inputs") from None


def convert(build: Callable[[], Any], where: str):
    """Run a conversion of a parsed document, naming the file in its errors."""
    try:
        return build()
    except SpecError:
        raise
    except ExactAttnError as e:
        raise type(e)(f"{where}: {e}") from None
    except RecursionError:
        raise SpecError(f"{where}: nested too deeply to read; a spec is a few levels deep") from None


def check_top_level(doc: Any, where: str, keys: tuple, required: tuple, kind: str, other: set,
               other_kind: str) -> None:
    """Refuse a document that is not a table of ``keys`` holding ``required``, in one line (a
    hint when it holds keys of the ``other`` kind of spec)."""
    if not isinstance(doc, dict):
        raise SpecError(f"{where}: the top level must be a table/object (got {type(doc).__name__})")
    check_known_keys(doc, keys, f"{where}: unknown key", dict.fromkeys(
        doc, f"; this looks like {other_kind}") if other & set(doc) else None)
    for key in required:
        if key not in doc:
            raise SpecError(f"{where}: {key} is missing; {kind} needs {', '.join(required[:-1])} "
                            f"and {required[-1]}")


def check_policy_table(pol: Any, where: str, keys: tuple, hints: dict | None = None) -> None:
    """Refuse a ``policy`` that is not a table of ``keys``, in one line (``hints``: an unknown
    key -> words added to the message)."""
    if not isinstance(pol, dict):
        raise SpecError(f"{where}: policy must be a table/object (got {shorten(pol, quote=True)})")
    check_known_keys(pol, keys, f"{where}: unknown policy key", hints)


# --------------------------------------------------------------------------- problem specs
def problem_from_mapping(doc: Any, *, where: str = "spec", extras: bool = False) -> tuple:
    """The ``(problem, policy, dtype)`` of a parsed problem spec document.

    With ``extras``, a fourth item: the policy table's
    :class:`~exactattn.call.spec_fields.CallFields` (the dropout keep-mask as given,
    and whether the log-sum-exp is asked for).

    Keys: ``query``, ``key``, ``value`` (required; 2, 3 or 4 dimensional
    lists of exact numbers), ``mask`` (``{"kind": ..., "values": [...]}``;
    ``"-inf"`` hides a key in an additive mask), ``dropout_keep`` (the dropout keep-mask,
    booleans as :class:`~exactattn.call.Call` takes them; or ``policy.dropout.keep``),
    ``policy`` (the fields of :class:`~exactattn.call.policy.Policy`), ``dtype`` and ``name``.

    Raises:
        SpecError: a missing or unknown key, a malformed policy or mask table.
        ShapeError, InputError: bad arrays, entries or policy values.
    """
    check_top_level(doc, where, PROBLEM_KEYS, ("query", "key", "value"), "a verify spec",
               {"tokens", "W_Q"}, "a head spec: run it with `exactattn walkthrough --spec`")
    pol = doc.get("policy", {})
    check_policy_table(pol, where, POLICY_KEYS)
    mask, kind = None, pol.get("mask_kind", "bool_keep")
    if "mask" in doc:
        m = doc["mask"]
        if not isinstance(m, dict) or "values" not in m or set(m) - {"kind", "values"}:
            raise SpecError(f'{where}: mask must be {{"kind": ..., "values": [...]}} '
                            f"(got {shorten(m, quote=True)})")
        if "kind" in m and "mask_kind" in pol and m["kind"] != pol["mask_kind"]:
            raise SpecError(f"{where}: mask.kind must agree with policy.mask_kind (got "
                            f"{shorten(m['kind'], quote=True)} and "
                            f"{shorten(pol['mask_kind'], quote=True)}); give one of them")
        kind = m.get("kind", kind)
        mask = m["values"]
    name = doc.get("name", where)
    if not isinstance(name, str):
        raise SpecError(f"{where}: name must be a string (got {shorten(name, quote=True)})")
    fields = read_modifiers({k: v for k, v in pol.items() if k in MODIFIER_KEYS}, where=where)
    if doc.get("dropout_keep") is not None:
        if fields.dropout_keep is not None:
            raise SpecError(f"{where}: dropout_keep must come without policy.dropout.keep (got "
                            "both); give the keep-mask once")
        fields.dropout_keep = doc["dropout_keep"]
    plain = {k: v for k, v in pol.items() if k not in MODIFIER_KEYS}

    def build():
        policy = Policy(**{**plain, **fields.changes, "mask_kind": kind})
        if (dtype := doc.get("dtype")) is not None:
            float_format(dtype)
        from .inputs import Call     # numpy: loaded with the first problem, not for --help
        problem = Call(doc["query"], doc["key"], doc["value"], mask, policy=policy,
                       name=name, dropout_keep=fields.dropout_keep)
        return (problem, policy, dtype, fields) if extras else (problem, policy, dtype)
    return convert(build, where)


def loads_problem(text: str, *, fmt: str = "json", where: str = "spec", extras: bool = False
                  ) -> tuple:
    """``(problem, policy, dtype)`` from problem spec text (``fmt`` is ``json`` or ``toml``);
    ``extras``: see :func:`problem_from_mapping`."""
    return problem_from_mapping(parse(text, fmt=fmt, where=where), where=where, extras=extras)


def load_problem(path: str | Path, *, extras: bool = False) -> tuple:
    """``(problem, policy, dtype)`` from a problem spec file (JSON, or TOML by suffix).

    Raises:
        SpecError: the file is missing, unreadable, not UTF-8, too large or malformed.
        ShapeError, InputError: bad arrays, entries or policy values (the message names the file).
    """
    text, fmt = read_text(path)
    return loads_problem(text, fmt=fmt, where=shorten(str(Path(path)), 200), extras=extras)


def _number_text(x) -> Any:
    if isinstance(x, bool) or x is None:
        return "-inf" if x is None else x
    text = fraction_text(x) if isinstance(x, (int, Fraction)) else str(x)
    digits = text.rstrip("0")      # past MAX_DIGITS, 9e3000 reads back as it was given
    return f"{digits}e{len(text) - len(digits)}" if len(text) > MAX_DIGITS and "/" not in text else text


def problem_text(problem: Call, dtype: str | None = None) -> str:
    """A problem spec file (JSON) for a :class:`~exactattn.call.Call`: exact numbers as strings,
    its policy, the dtype (a dropout's p without its keep-mask); :func:`load_problem` reads it
    back.

    >>> from exactattn.call import Call
    >>> doc = json.loads(problem_text(Call([["1/2"]], [[1]], [[3]]), "float32"))
    >>> doc["query"], doc["policy"]["scale"], doc["dtype"]
    ([['1/2']], 'default', 'float32')
    """
    import numpy as np
    text = np.vectorize(_number_text, otypes=[object])

    def arr(a):
        return text(a.reshape(a.shape[4 - problem.rank:]) if problem.rank < 4 else a).tolist()
    doc: dict = {"name": problem.name, **({"dtype": dtype} if dtype else {}),
                 "policy": problem.policy.as_dict()}
    if problem.policy.dropout is not None:
        doc["policy"]["dropout"] = {"p": str(problem.policy.dropout)}
    doc.update((name, arr(getattr(problem, name))) for name in ("query", "key", "value"))
    if problem.mask is not None:
        doc["mask"] = {"kind": problem.mask_kind, "values": text(problem.mask_given()).tolist()}
    return json.dumps(doc, indent=2, ensure_ascii=False)
