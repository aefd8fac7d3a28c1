"""Head spec files (JSON or TOML): a user's head, its tokens and their numbers.

A head spec is read by :mod:`exactattn.call.spec`'s reader (UTF-8, at most
:data:`~exactattn.call.spec.MAX_BYTES`, ``.toml`` files TOML and everything else JSON,
numbers read exactly from their text) and built into a
:class:`~exactattn.engines.head.Head` here (:func:`load`, :func:`loads`)::

    {"name": "my head", "layout": "slots",
     "tokens": [{"text": "year 4", "id": 331, "x": [0, 1, 0, "1/2"]}, ...],
     "W_Q": [[...], ...], "W_K": [[...], ...], "W_V": [[...], ...],
     "b_Q": [...], "b_K": [...], "b_V": [...],
     "divisor": "2", "causal": false}

The biases ``b_Q``, ``b_K`` (d_k numbers each) and ``b_V`` (d_v numbers) are
optional and read exactly like the matrices, in either layout.  A head spec is
read into an :class:`Example` (its head, :class:`Token` labels and token rows),
the type of the built-in examples too (:mod:`exactattn.examples`).

>>> ex = loads('{"tokens": [{"x": [1, 0.5]}], "W_Q": [[1, 0]], "W_K": [[0, 1]], "W_V": [[1, 1]]}')
>>> ex.x
[[Fraction(1, 1), Fraction(1, 2)]]
>>> loads('{"tokens": [], "W_Q": [[1]], "W_K": [[1]], "W_V": [[1]]}')
Traceback (most recent call last):
...
exactattn.errors.SpecError: spec: tokens must be a non-empty list of {"x": [...]} (got [])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..call.modifiers import check_keep
from ..call.spec import check_policy_table, check_top_level, convert, parse, read_text
from ..call.spec_fields import MODIFIER_KEYS, CallFields, check_known_keys, owned, read_modifiers
from ..errors import ShapeError, SpecError, shorten
from ..numbers.exact import to_row
from .head import Head

#: the keys of a head spec
KEYS = ("name", "layout", "tokens", "W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "divisor",
        "causal", "policy")
#: the optional keys that may not be null: what each must be instead
OPTIONAL = {**dict.fromkeys(("b_Q", "b_K", "b_V"), "a list of numbers (got null); leave it out "
                            "for no bias"),
            "divisor": 'a positive number, "sqrt(q)" for a positive rational q or "none" (got '
                       "null); leave it out for sqrt(d_k)"}
#: a head spec's ``policy`` table: its keys (causal and the divisor stay top-level keys)
HEAD_POLICY_KEYS = ("alignment", "empty_row") + MODIFIER_KEYS


# --------------------------------------------------------------------------- head specs' values
@dataclass(frozen=True)
class Token:
    """A token's label: its text and (optional) vocabulary id."""
    text: str
    id: int | None = None

    @property
    def nbytes(self) -> int:
        """Its UTF-8 length (a lone surrogate, which UTF-8 cannot hold, counts 3 bytes)."""
        return len(self.text.encode("utf-8", "surrogatepass"))


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
    #: ``square`` and ``walkthrough`` also print the raw self-match x[i] . x[j] (no
    #: projections) beside the projected scores (:func:`exactattn.present.tables.raw_match`)
    compare_raw: bool = False
    #: a short name for a switch or a legend (``River``; the title is the sentence itself)
    label: str = ""
    #: the entries as the user typed them (``{"x": rows, "W_Q": rows, ...}``, a spec file's
    #: texts): the tables show a typed decimal as typed (``-0.731``), never another number
    typed: dict = field(default_factory=dict)



# --------------------------------------------------------------------------- head specs
def from_mapping(doc: Any, *, where: str = "spec") -> Example:
    """Build an :class:`Example` from a parsed head spec document.

    Raises:
        SpecError: a missing or unknown key, or a malformed token list.
        ShapeError, InputError: bad matrices, entries or divisor (from :class:`Head`).
    """
    check_top_level(doc, where, KEYS, ("tokens", "W_Q", "W_K", "W_V"), "a spec",
               {"query", "key", "value"}, "a verify spec: run it with `exactattn verify --spec`")
    tokens = doc["tokens"]
    if not isinstance(tokens, list) or not tokens:
        raise SpecError(f'{where}: tokens must be a non-empty list of {{"x": [...]}} '
                        f"(got {shorten(tokens, quote=True)})")
    labels, xs = [], []
    for i, tok in enumerate(tokens):
        if not isinstance(tok, dict) or "x" not in tok:
            raise SpecError(f'{where}: tokens[{i}] must be an object with "x" '
                            f"(got {shorten(tok, quote=True)})")
        check_known_keys(tok, ("x", "text", "id"), f"{where}: tokens[{i}] has unknown key",
                         use="use text, id, x")
        tid = tok.get("id")
        if tid is not None and (not isinstance(tid, int) or isinstance(tid, bool)):
            raise SpecError(f"{where}: tokens[{i}].id must be an integer "
                            f"(got {shorten(tid, quote=True)})")
        labels.append(Token(str(tok.get("text", f"token {i + 1}")), tid))
        xs.append(tok["x"])
    kwargs = {"layout": doc.get("layout", "slots"), "causal": doc.get("causal", False)}
    for key, want in OPTIONAL.items():     # optional biases (exact like the matrices), divisor
        if key in doc:
            if doc[key] is None:
                raise SpecError(f"{where}: {key} must be {want}")
            kwargs[key] = doc[key]
    _check_w_q(doc, xs, kwargs["layout"])
    head = Head(doc["W_Q"], doc["W_K"], doc["W_V"], **kwargs)
    if "layout" not in doc and head.d_model == head.d_k == head.d_v > 1 and \
            any(m != [list(r) for r in zip(*m)] for m in (head.W_Q, head.W_K, head.W_V)):
        import warnings
        from ..errors import ExactAttnWarning
        warnings.warn(f'{where}: a square head without "layout" is read as "slots" (q = W_Q x, '
                      'nn.Linear); both readings pass every shape check: write "layout": '
                      '"slots" or "rows" (q = x @ W_Q)', ExactAttnWarning, stacklevel=2)
    x = []
    for i, xi in enumerate(xs):  # name entries by their place in the file
        r = to_row(xi, name=f"tokens[{i}].x")
        if len(r) != head.d_model:
            raise ShapeError(f"tokens[{i}].x (token {i + 1}) must have d_model = "
                             f"{head.d_model} numbers, the weights' d_model (got {len(r)})")
        x.append(r)
    name = str(doc.get("name", "spec"))
    typed = {"x": [_typed(r) for r in xs], **{w: [_typed(r) for r in doc[w]]
                                              for w in ("W_Q", "W_K", "W_V")}}
    common = dict(name=name, title="", tokens=labels, x=x, focus=min(1, len(x) - 1),
                  explain=(min(1, len(x) - 1), 0), source=where, typed=typed)
    if "policy" in doc:            # today's modifiers: a sink, ALiBi, soft-capping, RoPE, ...
        head, fields = _head_policy(doc["policy"], head, len(x), where)
        return HeadSpec(head=head, dropout_keep=fields.dropout_keep, lse=fields.lse, **common)
    return Example(head=head, **common)


def _check_w_q(doc: dict, xs: list, layout: str) -> None:
    """Refuse a W_Q whose d_model differs from the tokens' when W_K and W_V agree with the
    tokens (the Head would blame W_K for not matching W_Q)."""
    def d_model(m):
        if not isinstance(m, list) or not m or not all(isinstance(r, list) for r in m):
            return None
        widths = {len(r) for r in m}
        return None if len(widths) != 1 else (widths.pop() if layout == "slots" else len(m))
    widths = {len(x) for x in xs if isinstance(x, list)}
    if len(widths) != 1 or len(xs) == 0:
        return
    w = widths.pop()
    q = d_model(doc["W_Q"])
    if q is not None and q != w and d_model(doc["W_K"]) == d_model(doc["W_V"]) == w:
        m = doc["W_Q"]
        shape = f"{len(m)} x {len(m[0])}"
        want = f"{len(m)} x {w}" if layout == "slots" else f"{w} x {len(m[0])}"
        raise ShapeError(f"W_Q must be {want} in the {layout} layout, to match the tokens' "
                         f"d_model = {w} (got {shape})")


def _typed(row) -> list[str]:
    """A row's entries as typed: text stripped, integers as written (JSON numbers arrive as
    their text)."""
    return [v.strip() if isinstance(v, str) else str(v) for v in row]


@dataclass
class HeadSpec(Example):
    """A head spec with a ``policy`` table: the example, and what the call adds to it.

    ``dropout_keep``: the dropout keep-mask (n x n bools; ``policy.dropout``), None
    without dropout; ``lse``: ``"e"`` or ``"2"`` when the spec asks for each
    row's log-sum-exp, else None.  The modifiers themselves are on
    ``head.policy``.
    """
    dropout_keep: list | None = None
    lse: str | None = None


def _head_policy(pol: Any, head: Head, n: int, where: str) -> tuple[Head, CallFields]:
    """The head under a head spec's ``policy`` table, and the table's call fields."""
    check_policy_table(pol, where, HEAD_POLICY_KEYS, dict.fromkeys(
        ("causal", "scale", "divisor"), "; causal and divisor are top-level keys of a head spec"))
    fields = read_modifiers(pol, where=where)
    plain = {k: pol[k] for k in ("alignment", "empty_row") if k in pol}
    policy = owned(where, lambda: head.policy.replace(**plain, **fields.changes))
    if fields.dropout_keep is not None:
        fields.dropout_keep = owned(where, check_keep, fields.dropout_keep, policy, n, n, "dropout.keep")
    return head.with_policy(policy), fields


def loads(text: str, *, fmt: str = "json", where: str = "spec") -> Example:
    """A head from spec text (``fmt`` is ``json`` or ``toml``); errors name ``where``."""
    doc = parse(text, fmt=fmt, where=where)
    return convert(lambda: from_mapping(doc, where=where), where)


def load(path: str | Path) -> Example:
    """A head from a spec file; ``.toml`` files are TOML, everything else JSON.

    Raises:
        SpecError: the file is missing, unreadable, not UTF-8, too large or malformed.
    """
    text, fmt = read_text(path)
    return loads(text, fmt=fmt, where=shorten(str(Path(path)), 200))
