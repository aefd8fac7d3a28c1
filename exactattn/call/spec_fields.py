"""The modifier fields of a spec file's ``policy`` table, read for :mod:`exactattn.call.spec`.

Both kinds of spec file (a head for the tables, a problem for ``verify``)
take the same fields, each a field of :class:`~exactattn.call.policy.Policy`::

    "policy": {"window": [2, 0],                 left and right widths, null = no limit
               "query_offset": 7,                the position of query 0
               "softcap": "30",                  cap * tanh(score / cap)
               "sink": "0",                      an attention-sink logit
               "alibi": {"heads": 12, "form": "relative"},   slopes from the head count
               "head": 3,                        which head this is (ALiBi slopes)
               "rope": {"theta": "10000", "layout": "half",
                        "scaling": {"rope_type": "llama3", "factor": 8, ...}},  transformers' keys
               "dropout": {"p": "1/10", "keep": [[true, false, ...], ...]},
               "lse": true}                      also report each row's log-sum-exp ("2": base 2)

Numbers are exact: integers, or text (``"1/3"``, ``"0.1"``); a spec file
never holds a binary float (its decimals are read from their text).  This
module only reads the tables; each value is checked by its owner
(:class:`~exactattn.call.policy.Policy`, :mod:`exactattn.call.modifiers`,
:func:`exactattn.numbers.lse.check_base`; the keep-mask by
:func:`exactattn.call.modifiers.check_keep` once the call's size is known), whose
one-line error comes through as a :class:`~exactattn.errors.SpecError`
naming the field (``policy.window``, ``policy.dropout.p``).

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
from typing import Any, Callable

from .policy import MODIFIER_FIELDS, Policy
from ..errors import ExactAttnError, SpecError, shorten
from ..numbers.lse import check_base
from .modifiers import (Alibi, Rope, check_dropout, check_form, check_layout, check_rope_dims,
                        check_scaling, check_theta)
from ..options import check_whole

#: the modifier keys of a policy table: the Policy's modifier fields, and ``lse``
MODIFIER_KEYS = MODIFIER_FIELDS + ("lse",)


@dataclass
class CallFields:
    """What a policy table's modifier keys say.

    ``changes``: Policy fields (``window``, ``softcap``, ``alibi`` ... as
    their types); ``dropout_keep``: the dropout keep-mask as given (nested lists,
    checked with the call's size by :func:`~exactattn.call.modifiers.check_keep`)
    or None; ``lse``: ``"e"`` or ``"2"`` when the log-sum-exp is asked for, else None.
    """
    changes: dict = field(default_factory=dict)
    dropout_keep: list | None = None
    lse: str | None = None


def owned(where: str, check: Callable, *args):
    """``check(*args)``, its one-line error naming the policy table's field (``policy.<name>``)."""
    try:
        return check(*args)
    except ExactAttnError as e:
        raise SpecError(f"{where}: policy.{e}") from None


def check_known_keys(table: dict, keys: tuple, said: str, hints: dict | None = None, *,
                     use: str | None = None) -> None:
    """Refuse a key of a spec's ``table`` not among ``keys``, in one line: the first (sorted as
    text) after ``said``, then ``the keys are <keys>`` (or ``use``) and its entry in ``hints``.

    >>> check_known_keys({"p": 1, "q": 2, "b": 3}, ("p",), "spec: policy.dropout has unknown key")
    Traceback (most recent call last):
    ...
    exactattn.errors.SpecError: spec: policy.dropout has unknown key 'b'; the keys are p
    """
    extra = sorted(set(table) - set(keys), key=str)
    if extra:
        use = use or "the keys are " + ", ".join(keys)
        raise SpecError(f"{said} {shorten(extra[0], quote=True)}; {use}"
                        f"{(hints or {}).get(extra[0], '')}")


def _table(value: Any, where: str, name: str, keys: tuple, required: tuple) -> dict:
    shape = "{" + ", ".join(keys) + "}"
    if not isinstance(value, dict):
        raise SpecError(f"{where}: policy.{name} must be a table {shape} "
                        f"(got {shorten(value, quote=True)})")
    check_known_keys(value, keys, f"{where}: policy.{name} has unknown key")
    for key in required:
        if key not in value:
            raise SpecError(f"{where}: policy.{name}.{key} is missing; write {name} = {shape}")
    return value


def _lse(value: Any, where: str) -> str | None:
    """``true``/``"e"``/``"E"`` -> ``"e"``, ``2``/``"2"`` -> ``"2"``, ``false``/null -> None."""
    if value is True:
        return "e"
    if value is False or value is None:
        return None
    return owned(where, check_base, value.lower() if isinstance(value, str) else value, "lse")


def read_modifiers(table: dict, *, where: str = "spec") -> CallFields:
    """The modifier keys of a parsed ``policy`` table (other keys are the caller's).

    Raises:
        SpecError: a malformed or out-of-range value, naming ``policy.<field>``.
    """
    out = CallFields()
    given = {name: table[name] for name in ("window", "query_offset", "softcap", "sink", "head")
             if name in table}
    if "alibi" in table:
        t = _table(table["alibi"], where, "alibi", ("heads", "form"), ("heads",))
        given["alibi"] = Alibi(owned(where, check_whole, t["heads"], "alibi.heads"),
                               owned(where, check_form, t.get("form", "relative"), "alibi.form"))
    if "rope" in table:
        t = _table(table["rope"], where, "rope", ("theta", "layout", "dims", "scaling"), ())
        given["rope"] = Rope(owned(where, check_theta, t.get("theta", 10000), "rope.theta"),
                             owned(where, check_layout, t.get("layout", "half"), "rope.layout"),
                             None if t.get("dims") is None else
                             owned(where, check_rope_dims, t["dims"], "rope.dims"),
                             owned(where, check_scaling, t.get("scaling"), "rope.scaling"))
    if "dropout" in table:
        t = _table(table["dropout"], where, "dropout", ("p", "keep"), ("p", "keep"))
        given["dropout"] = owned(where, check_dropout, t["p"], "dropout.p")
        out.dropout_keep = t["keep"]
    if "lse" in table:
        out.lse = _lse(table["lse"], where)
    policy = owned(where, lambda: Policy(**given))   # the policy checks every field as a whole
    out.changes = {name: getattr(policy, name) for name in given}
    return out
