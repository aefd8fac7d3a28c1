"""The modifier fields of a spec file's ``policy`` table, read for :mod:`exactattn.spec`.

Both kinds of spec file (a head for the tables, a problem for ``verify``)
take the same fields, each a field of :class:`~exactattn.call.Policy`::

    "policy": {"window": [2, 0],                 left and right widths, null = no limit
               "query_offset": 7,                the position of query 0
               "softcap": "30",                  cap * tanh(score / cap)
               "sink": "0",                      an attention-sink logit
               "alibi": {"heads": 12, "form": "relative"},   slopes from the head count
               "head": 3,                        which head this is (ALiBi slopes)
               "rope": {"theta": "10000", "layout": "half"},
               "dropout": {"p": "1/10", "keep": [[true, false, ...], ...]},
               "lse": true}                      also report each row's log-sum-exp ("2": base 2)

Numbers are exact: integers, or text (``"1/3"``, ``"0.1"``); a spec file
never holds a binary float (its decimals are read from their text).  A bad
value is one :class:`~exactattn.errors.SpecError` line naming the field
(``policy.window``, ``policy.dropout.keep[1][0]``).

>>> fields = read_modifiers({"sink": "0", "alibi": {"heads": 6}, "head": 2, "lse": "2"})
>>> fields.changes["alibi"], fields.changes["sink"], fields.lse
(Alibi(heads=6, form='relative'), Fraction(0, 1), '2')
>>> read_modifiers({"window": [-1, 0]})
Traceback (most recent call last):
...
exactattn.errors.SpecError: spec: policy.window must be [left, right], whole numbers >= 0 or null (got [-1, 0])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .call import Policy
from .errors import ExactAttnError, SpecError, shorten
from .modifiers import ALIBI_FORMS, ROPE_LAYOUTS, Alibi, Rope, check_window, exact_number

__all__ = ["MODIFIER_KEYS", "CallFields", "read_modifiers"]

#: the modifier keys of a policy table (besides the plain Policy fields)
MODIFIER_KEYS = ("window", "query_offset", "softcap", "sink", "alibi", "head", "rope", "dropout",
                 "lse")


@dataclass
class CallFields:
    """What a policy table's modifier keys say.

    ``changes``: Policy fields (``window``, ``softcap``, ``alibi`` ... as
    their types); ``keep``: the dropout keep-mask (nested lists of bools) or
    None; ``lse``: ``"e"`` or ``"2"`` when the log-sum-exp is asked for, else None.
    """
    changes: dict = field(default_factory=dict)
    keep: list | None = None
    lse: str | None = None


def _fail(where: str, name: str, expected: str, got: Any) -> SpecError:
    return SpecError(f"{where}: policy.{name} must be {expected} (got {shorten(got, quote=True)})")


def _whole(value: Any, where: str, name: str, low: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or (low is not None and value < low):
        raise _fail(where, name, "a whole number" + (f" >= {low}" if low is not None else ""), value)
    return value


def _number(value: Any, where: str, name: str):
    try:
        return exact_number(value, f"policy.{name}")
    except ExactAttnError as e:
        raise SpecError(f"{where}: {e}") from None


def _table(value: Any, where: str, name: str, keys: tuple, required: tuple) -> dict:
    shape = "{" + ", ".join(keys) + "}"
    if not isinstance(value, dict):
        raise _fail(where, name, f"a table {shape}", value)
    extra = sorted(set(value) - set(keys), key=str)
    if extra:
        raise SpecError(f"{where}: policy.{name} has unknown key {shorten(extra[0], quote=True)}; "
                        f"the keys are {', '.join(keys)}")
    for key in required:
        if key not in value:
            raise SpecError(f"{where}: policy.{name}.{key} is missing; write {name} = {shape}")
    return value


def _keep(value: Any, where: str) -> list:
    if not isinstance(value, list) or not value or not all(isinstance(r, list) for r in value):
        raise _fail(where, "dropout.keep", "a list of rows of true/false, one row per query",
                    value)
    for i, r in enumerate(value):
        for j, k in enumerate(r):
            if not isinstance(k, bool):
                raise _fail(where, f"dropout.keep[{i}][{j}]", "true or false", k)
    return value


def _lse(value: Any, where: str) -> str | None:
    if value is True or value in ("e", "E"):
        return "e"
    if value == 2 and not isinstance(value, bool) or value == "2":
        return "2"
    if value is False or value is None:
        return None
    raise _fail(where, "lse", 'true, "e" (natural log) or "2" (base 2)', value)


def read_modifiers(table: dict, *, where: str = "spec") -> CallFields:
    """The modifier keys of a parsed ``policy`` table (other keys are the caller's).

    Raises:
        SpecError: a malformed or out-of-range value, naming ``policy.<field>``.
    """
    out = CallFields()
    ch = out.changes
    if "window" in table:
        try:
            ch["window"] = check_window(table["window"])
        except ExactAttnError as e:
            raise SpecError(f"{where}: policy.{e}") from None
    if "query_offset" in table:
        ch["query_offset"] = _whole(table["query_offset"], where, "query_offset")
    for name in ("softcap", "sink"):
        if name in table:
            ch[name] = _number(table[name], where, name)
    if "head" in table:
        ch["head"] = _whole(table["head"], where, "head", low=0)
    if "alibi" in table:
        t = _table(table["alibi"], where, "alibi", ("heads", "form"), ("heads",))
        heads = _whole(t["heads"], where, "alibi.heads", low=1)
        form = t.get("form", "relative")
        if form not in ALIBI_FORMS:
            raise _fail(where, "alibi.form", f"one of {', '.join(ALIBI_FORMS)}", form)
        ch["alibi"] = Alibi(heads, form)
    if "rope" in table:
        t = _table(table["rope"], where, "rope", ("theta", "layout"), ())
        theta = _number(t.get("theta", 10000), where, "rope.theta")
        if theta <= 0:
            raise _fail(where, "rope.theta", "a positive number", t["theta"])
        layout = t.get("layout", "half")
        if layout not in ROPE_LAYOUTS:
            raise _fail(where, "rope.layout", f"one of {', '.join(ROPE_LAYOUTS)}", layout)
        ch["rope"] = Rope(theta, layout)
    if "dropout" in table:
        t = _table(table["dropout"], where, "dropout", ("p", "keep"), ("p", "keep"))
        ch["dropout"] = _number(t["p"], where, "dropout.p")
        if not 0 <= ch["dropout"] < 1:
            raise _fail(where, "dropout.p", "a probability from 0 up to (not including) 1",
                        t["p"])
        out.keep = _keep(t["keep"], where)
    if "lse" in table:
        out.lse = _lse(table["lse"], where)
    try:                 # ranges the policy checks: softcap > 0, 0 <= p < 1, head < alibi heads
        Policy(**ch)
    except ExactAttnError as e:
        raise SpecError(f"{where}: policy.{e}") from None
    return out
