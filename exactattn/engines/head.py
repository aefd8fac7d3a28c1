"""One attention head, and ``attend``: tokens -> projections -> scores -> shares -> outputs.

Scaled dot-product attention (Vaswani et al. 2017, sec. 3.2.1), evaluated exactly:

    queries = x W_Q,  keys = x W_K,  values = x W_V          (n x d_k, n x d_k, n x d_v)
    raw scores[i][j] = queries[i] . keys[j]                   (n x n)
    scaled scores    = raw scores / divisor                   (divisor = sqrt(d_k) by default)
    shares[i]        = softmax(scaled scores[i])              (n x n, each row sums to 1)
    outputs[i]       = sum_j shares[i][j] values[j]           (n x d_v)

Two weight layouts give the same numbers: ``slots`` (each matrix is d_k lists
of d_model numbers, one per output slot, ``q = W_Q x``, as in the worked
example) and ``rows`` (d_model lists of d_k numbers, ``q = x @ W_Q``).  PyTorch's
``nn.Linear.weight`` is out x in and computes ``x @ W.T``: the slots layout.
GPT-2's ``Conv1D`` weight is in x out: the rows layout.  For a square head a
transposed load passes every shape check, so say which layout you mean.

Three engines, agreeing exactly wherever two can run:

* ``pencil``: the ``fast`` engine's call and its exact
  :class:`~exactattn.reference.reference.Reference`, with every multiply-add
  (MAC) each stage runs (:meth:`Reference.counts
  <exactattn.reference.reference.Reference.counts>`: per visible pair, per kept
  key) and the softmax's operations.  Tables and :mod:`exactattn.cost` read these counts.
* ``symbolic``: the same loops over sympy expressions; any entry of x or a
  weight may be a symbol.  Scores are polynomials, shares ``exp`` ratios.
* ``fast``: the head's :class:`~exactattn.call.Call` (:meth:`Call.of_head
  <exactattn.call.Call.of_head>`: projections as python-flint ``fmpq_mat``
  products, held as integer numerators over one denominator each); the raw
  scores are their integer product, turned into ``Fraction`` rows only on
  first access, and ``trace.share_decimals(places)`` certifies every share at
  once from integer enclosures (:mod:`exactattn.numbers.bulk`).  No counters
  run (``trace.macs`` is None): nothing is counted that did not run.  A sink,
  ALiBi and soft-capping are applied exactly by the trace's rows (decimals
  then certified entry by entry); RoPE and dropout have no fast path.

Every engine returns the same :class:`~exactattn.engines.trace.Trace`.  Which keys a
query sees, the divisor and the empty-row answer come from the head's
:class:`~exactattn.call.policy.Policy`.

>>> from exactattn.examples import chronicle
>>> trace = attend(chronicle().head, chronicle().x)
>>> trace.queries[1]
[Fraction(0, 1), Fraction(3, 1), Fraction(1, 2), Fraction(0, 1)]
>>> trace.raw_scores[1]
[Fraction(25, 8), Fraction(0, 1), Fraction(3, 4), Fraction(0, 1)]
>>> [trace.share(1, j).decimal(4) for j in range(4)]
['0.5800', '0.1216', '0.1769', '0.1216']
>>> trace.macs
{'projections': 192, 'scores': 64, 'mix': 64}
>>> fast = attend(chronicle().head, chronicle().x, engine="fast")
>>> fast.queries[1], fast.share_decimals(4)[1]
([Fraction(0, 1), Fraction(3, 1), Fraction(1, 2), Fraction(0, 1)], ['0.5800', '0.1216', '0.1769', '0.1216'])
>>> t = attend(Head([[1, 0], [0, 1]], [[1, 0], [0, 1]], [[1, 0], [0, 1]], divisor="none"),
...            [[0, 0], [1, 0]], engine="fast")
>>> t.raw_scores
[[Fraction(0, 1), Fraction(0, 1)], [Fraction(0, 1), Fraction(1, 1)]]
>>> t.share_decimals(4)         # row 1: exactly 1/2 each; row 2: 1/(1+e), e/(1+e)
[['0.5000', '0.5000'], ['0.2689', '0.7311']]
>>> t.output_decimals(4)
[['0.5000', '0.0000'], ['0.7311', '0.0000']]
>>> t.share(1, 1).text(), t.macs
('exp(1)/(1 + exp(1))', None)
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Sequence

from ..call.policy import DEFAULT_SCALE, Policy, divisor_text, parse_divisor
from ..errors import InputError, shorten
from ..options import check_choice
from ..numbers.exact import is_symbolic, rational_sqrt, to_matrix, to_row
from ..reference.kernels import project, score
from ..reference.logits import scaled_logit
from ..call.modifiers import check_keep
from ..numbers.reals import Surd
from .trace import Trace

__all__ = ["Head", "attend"]

LAYOUTS = ("slots", "rows")
ENGINES = ("auto", "pencil", "symbolic", "fast")
_DEFAULT = object()


def _transpose(m: list[list]) -> list[list]:
    return [list(col) for col in zip(*m)]


class Head:
    """A single attention head: ``W_Q``, ``W_K``, ``W_V``, a divisor and a causal flag.

    Shapes:
        ``slots`` layout: W_Q, W_K are d_k x d_model, W_V is d_v x d_model.
        ``rows`` layout:  W_Q, W_K are d_model x d_k, W_V is d_model x d_v.

    Args:
        divisor: default ``sqrt(d_k)``; any positive exact number, ``"sqrt(q)"``,
            or ``None``/``"none"`` for no scaling.  Stored by its square
            (``divisor_squared``) so every divisor stays exact.
        causal: when True, query i sees keys 0..i only (top_left aligned).
        floats: how a binary float entry is read: None (refuse), ``"exact"``
            (its binary value) or ``"decimal"`` (its shortest repr).
        symbolic: allow sympy symbols and expressions as entries.

    The divisor and the causal rule live in ``head.policy``
    (:class:`~exactattn.call.policy.Policy`), the one description every engine reads.

    Raises:
        ShapeError: a matrix of the wrong shape, ragged rows, empty matrices.
        InputError: an unknown layout, a bad entry or divisor.
        FloatInputError: a binary float with ``floats`` unset.

    >>> h = Head([[1, 0]], [[0, 1]], [[1, 1]], layout="slots")
    >>> (h.d_model, h.d_k, h.d_v, h.divisor_squared)
    (2, 1, 1, Fraction(1, 1))
    >>> Head([[1, 0]], [[0, 1, 2]], [[1, 1]])
    Traceback (most recent call last):
    ...
    exactattn.errors.ShapeError: W_K must be 1 x 2 in the slots layout, to match W_Q (got 1 x 3)
    """

    def __init__(self, W_Q, W_K, W_V, *, b_Q=None, b_K=None, b_V=None, layout: str = "slots",
                 divisor: Any = _DEFAULT, causal: bool = False, floats: str | None = None,
                 symbolic: bool = False):
        if layout not in LAYOUTS:
            raise InputError(f"layout must be 'slots' or 'rows' (got {shorten(layout, quote=True)})")
        if not isinstance(causal, bool):
            raise InputError(f"causal must be true or false (got {shorten(causal, quote=True)})")
        self.layout = layout
        hint = f" in the {layout} layout, to match W_Q"
        q = to_matrix(W_Q, name="W_Q", floats=floats, symbolic=symbolic)
        step = 1 if layout == "slots" else -1          # the rows layout: each shape transposed
        d_k, d_model = (len(q), len(q[0]))[::step]
        k, v = (to_matrix(w, name=name, shape=(rows, d_model)[::step], floats=floats,
                          symbolic=symbolic, hint=hint)
                for w, name, rows in ((W_K, "W_K", d_k), (W_V, "W_V", None)))
        slots = (q, k, v) if step == 1 else tuple(_transpose(m) for m in (q, k, v))
        self.d_model = d_model
        self.d_k = d_k
        self.d_v = len(slots[2])
        # Internally every matrix is kept in the slots layout: row s = output slot s.
        self.W_Q, self.W_K, self.W_V = slots
        self.b_Q, self.b_K, self.b_V = (
            None if b is None else to_row(b, name=name, width=width, floats=floats,
                                          symbolic=symbolic)
            for b, name, width in ((b_Q, "b_Q", d_k), (b_K, "b_K", d_k), (b_V, "b_V", self.d_v)))
        self.symbolic = any(is_symbolic(e) for m in slots + (self.biases,) for r in m for e in r)
        d2 = Fraction(d_k) if divisor is _DEFAULT else parse_divisor(divisor, floats=floats)
        self.policy = Policy(divisor_squared=d2, causal=causal)

    @property
    def biases(self) -> tuple:
        """The biases given (``b_Q``, ``b_K``, ``b_V`` that are not None), as rows."""
        return tuple(b for b in (self.b_Q, self.b_K, self.b_V) if b is not None)

    def bias(self, name: str) -> list | None:
        """``b_Q``/``b_K``/``b_V`` (a list of d_k or d_v exact numbers), or None."""
        if name not in ("b_Q", "b_K", "b_V"):
            raise InputError(f"name must be b_Q, b_K or b_V (got {shorten(name, quote=True)})")
        return getattr(self, name)

    @property
    def divisor_squared(self) -> Fraction | None:
        """``D``: the scores are divided by sqrt(D); None for no scaling."""
        return self.policy.divisor_squared

    @property
    def causal(self) -> bool:
        return self.policy.causal

    def with_policy(self, policy: Policy) -> "Head":
        """The same projection matrices under another policy (divisor, causal rule, ...).

        >>> Head([[1]], [[1]], [[1]]).with_policy(Policy(scale=None, causal=True)).causal
        True
        """
        if policy.divisor_squared == DEFAULT_SCALE:
            policy = policy.replace(divisor_squared=Fraction(self.d_k))
        other = object.__new__(Head)
        other.__dict__.update(self.__dict__)
        other.policy = policy
        return other

    def weights(self, name: str, layout: str | None = None) -> list[list]:
        """``W_Q``/``W_K``/``W_V`` in ``layout`` (default: the layout it was given in)."""
        layout = layout or self.layout
        if name not in ("W_Q", "W_K", "W_V"):
            raise InputError(f"name must be W_Q, W_K or W_V (got {shorten(name, quote=True)})")
        m = getattr(self, name)
        return [list(r) for r in m] if layout == "slots" else _transpose(m)

    @property
    def divisor(self):
        """The divisor sqrt(D), exactly: a ``Fraction`` when rational (``sqrt(4)`` -> 2), else a
        :class:`~exactattn.numbers.reals.Surd` (``sqrt(2)`` = 2 * 1/sqrt(2)); None for no scaling."""
        d = self.divisor_squared
        if d is None:
            return None
        root = rational_sqrt(d)
        return root if root is not None else Surd(0, ((d, d),))

    def scale(self, raw):
        """``raw / divisor`` exactly (:func:`scaled_score` with this head's divisor).

        >>> Head([[1]], [[1]], [[1]], divisor="2").scale(Fraction(3))
        Fraction(3, 2)
        >>> Head([[1]], [[1]], [[1]], divisor="sqrt(2)").scale(Fraction(1))
        Surd(1/sqrt(2))
        """
        return scaled_score(raw, self.divisor_squared)

    def __repr__(self) -> str:
        return (f"Head(d_model={self.d_model}, d_k={self.d_k}, d_v={self.d_v}, "
                f"layout={self.layout!r}, divisor={divisor_text(self.divisor_squared)}, "
                f"causal={self.causal})")


def scaled_score(raw, divisor_squared: Fraction | None):
    """A raw score divided by sqrt(D), exactly; None (a hidden key) stays None.

    A rational score gives :func:`~exactattn.reference.logits.scaled_logit`'s value: a
    ``Fraction`` when sqrt(D) is rational, else a :class:`~exactattn.numbers.reals.Surd`
    ``a/sqrt(D)``.  A sympy score (the symbolic engine) gives sympy.

    >>> scaled_score(Fraction(-33, 25), Fraction(2)).text()
    '-(33/25)/sqrt(2)'
    """
    if raw is None or not type(raw).__module__.startswith("sympy"):
        return scaled_logit(raw, divisor_squared)
    if divisor_squared is None:
        return raw
    import sympy
    D = sympy.Rational(divisor_squared.numerator, divisor_squared.denominator)
    return sympy.expand(raw / sympy.sqrt(D))


def pencil(head: Head, x: list[list], keep=None) -> Trace:
    """The pencil engine: the head's :class:`~exactattn.call.Call` and its
    :class:`~exactattn.reference.reference.Reference`, with the multiply-adds each stage runs
    (a projection one per token and weight entry, then :meth:`Reference.counts
    <exactattn.reference.reference.Reference.counts>`) and the bias additions."""
    from ..call.inputs import Call
    n = len(x)
    trace = Trace(head, "pencil", x, call=Call.of_head(head, x, dropout_keep=keep),
                  bias_adds=n * sum(map(len, head.biases)), dropout_keep=keep)
    macs, trace.softmax_ops = trace.reference.counts()
    trace.macs = {"projections": n * head.d_model * (2 * head.d_k + head.d_v), **macs}
    return trace


def _symbolic(head: Head, x: list[list]) -> Trace:
    """The same counted loops over sympy entries; shares and outputs as sympy closed forms."""
    import sympy

    def s(e):
        return sympy.Rational(e.numerator, e.denominator) if isinstance(e, Fraction) else e
    xs = [[s(e) for e in r] for r in x]
    projections, macs, adds = [], 0, 0
    for W, b in ((head.W_Q, head.b_Q), (head.W_K, head.b_K), (head.W_V, head.b_V)):
        out, m = project([[s(e) for e in r] for r in W], xs)
        if b is not None:       # the bias, added after the counted loop (not a MAC)
            out = [[e + s(c) for e, c in zip(r, b)] for r in out]
            adds += len(out) * len(b)
        projections.append([[sympy.expand(e) for e in r] for r in out])
        macs += m
    queries, keys, values = projections
    n = len(x)
    raw, score_macs = score(queries, keys, lambda i: head.policy.visible_keys(i, n, n))
    raw = [[None if r is None else sympy.expand(r) for r in row] for row in raw]
    div = head.divisor
    div = div.sympy() if isinstance(div, Surd) else div
    rows, outputs, mix_macs = [], [], 0
    share = head.policy.empty_share(n)       # a key's share in a row that sees none (None: NaN)
    for i in range(n):
        seen = [j for j in range(n) if raw[i][j] is not None]
        if not seen and share:                # 1/n each: every key at score 0
            seen, raw[i] = list(range(n)), [sympy.Integer(0)] * n
        if not seen:
            fill = sympy.nan if share is None else sympy.Integer(0)
            rows.append([fill] * n)
            outputs.append([fill] * head.d_v)
            continue
        ex = {j: sympy.exp(raw[i][j] if div is None else raw[i][j] / div) for j in seen}
        den = sympy.Add(*ex.values())
        rows.append([ex[j] / den if j in ex else sympy.Integer(0) for j in range(n)])
        outputs.append([sympy.Add(*[ex[j] * values[j][c] for j in seen]) / den
                        for c in range(head.d_v)])
        mix_macs += len(seen) * head.d_v           # one MAC per seen key and value column
    return Trace(head, "symbolic", xs, rows=rows, outputs=outputs,
                 parts=dict(queries=queries, keys=keys, values=values, raw_scores=raw),
                 macs={"projections": macs, "scores": score_macs, "mix": mix_macs},
                 bias_adds=adds)


def attend(head: Head, x: Sequence[Sequence[Any]], *, engine: str = "auto",
           floats: str | None = None, dropout_keep=None) -> Trace:
    """Run ``head`` over the token rows ``x`` and record every intermediate.

    Shapes: ``x`` is n x d_model (one row of numbers per token).

    Args:
        engine: ``"auto"`` (symbolic when any entry is a sympy symbol or
            expression, pencil up to 64 tokens, fast above), ``"pencil"``,
            ``"symbolic"`` or ``"fast"``.
        floats: how binary floats in ``x`` are read (see :mod:`exactattn.numbers.exact`).
        dropout_keep: the dropout keep-mask (n x n bools; True = kept), with
            ``head.policy.dropout`` set.

    The head's policy may carry today's modifiers (a sink, ALiBi, soft-capping,
    a window, a query offset, RoPE, dropout; see :class:`~exactattn.call.policy.Policy`):
    the rows then come from :func:`exactattn.reference.logits.softmax_row`.  The pencil
    engine runs every modifier; the fast engine runs all but RoPE and dropout
    (``auto`` hands those to the pencil engine; ``fast`` refuses them); the
    symbolic engine runs none.

    Raises:
        ShapeError: no tokens, ragged rows, a token of the wrong width, a
            keep-mask of the wrong shape.
        FloatInputError: a binary float with ``floats`` unset.
        InputError: an unknown engine; symbols with a numeric engine; a
            modifier the engine cannot run exactly.

    Reference: Vaswani et al. 2017, sec. 3.2.1; the built-in worked example ``chronicle``.

    >>> h = Head([[1]], [[1]], [[1]], divisor=None)
    >>> t = attend(h, [[0], [1]])
    >>> t.raw_scores
    [[Fraction(0, 1), Fraction(0, 1)], [Fraction(0, 1), Fraction(1, 1)]]
    >>> t.shares[0]
    [Fraction(1, 2), Fraction(1, 2)]
    >>> t.shares[1][1]
    E/(1 + E)
    """
    check_choice(engine, "engine", ENGINES)
    from ..call.inputs import head_tokens
    xs = head_tokens(head, x, floats)
    symbolic = head.symbolic or any(is_symbolic(e) for r in xs for e in r)
    policy = head.policy
    keep = check_keep(dropout_keep, policy, len(xs), len(xs), "dropout_keep")
    engine = _engine(policy, engine, symbolic, len(xs))
    if engine == "symbolic":
        return _symbolic(head, xs)
    if engine == "fast":
        from ..call.inputs import Call
        return Trace(head, "fast", xs, call=Call.of_head(head, xs))
    return pencil(head, xs, keep)


def _engine(policy: Policy, engine: str, symbolic: bool, n: int) -> str:
    """The engine that runs a head: ``engine`` as asked, ``auto`` resolved (symbolic for
    symbols, else pencil up to 64 tokens or under RoPE or dropout, fast above); ``symbolic``:
    the entries hold symbols, n: the tokens.  Every engine but the symbolic one runs sinks,
    ALiBi and soft-capping; RoPE and dropout only the pencil engine.

    Raises:
        InputError: symbols on a numeric engine; modifiers on the symbolic engine or
            symbolic entries; RoPE or dropout on the fast engine.
    """
    names = policy.unsupported("fast")
    if policy.modified and (symbolic or engine == "symbolic"):
        got = "symbolic entries" if symbolic else "engine 'symbolic'"
        fix = "substitute numbers for the symbols" if symbolic else "use engine 'auto'"
        raise InputError(f"a head with modifiers ({', '.join(policy.modifiers())}) must run on "
                         f"the pencil or fast engine, with rational entries (got {got}); {fix}")
    if engine == "fast" and names:
        raise InputError(f"engine must be 'pencil' or 'auto' for {' and '.join(names)} (got "
                         "'fast'); the fast engine has no exact path for them")
    if engine == "auto":
        return "symbolic" if symbolic else "pencil" if names or n <= 64 else "fast"
    if engine != "symbolic" and symbolic:
        raise InputError(f"engine must be 'symbolic' or 'auto' for symbolic entries (got "
                         f"{shorten(engine, quote=True)})")
    return engine

