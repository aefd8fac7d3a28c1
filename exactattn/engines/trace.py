"""The trace of one run of a head: every intermediate, one type for every engine.

A :class:`Trace` records ``x``, ``queries``, ``keys``, ``values``, the raw and
scaled scores, the exact softmax rows, the shares and the outputs, plus the
multiply-adds counted while they were computed (None when nothing was
counted).  Every engine returns this one type; the numeric engines hand their
projections over as integer numerators over one denominator, converted to
``Fraction`` rows on first access (the raw scores are their integer product unless
the engine counted them), so nothing converts what nobody reads.

Shares and outputs are exact values (:class:`~exactattn.numbers.softmax.ExpRatio` for
the numeric engines, :class:`SymbolicValue` for the symbolic one); both
answer ``.decimal(places)``, ``.exact()`` and ``.closed_form()``.
:meth:`Trace.share_decimals` and :meth:`Trace.output_decimals` certify every
entry at once (:mod:`exactattn.numbers.bulk`), falling back to the per-entry path only
for the few entries the bulk intervals leave undecided.

Under the modifiers of :class:`~exactattn.call.policy.Policy` (sinks, ALiBi,
soft-capping, RoPE, dropout) the rows come from the one composition,
:func:`exactattn.reference.logits.softmax_row`, and the trace adds each row's
log-sum-exp (:meth:`Trace.lse`), the sink's share (:meth:`Trace.sink_share`),
the logits after each stage (:meth:`Trace.logit_row`), the ALiBi biases
(:meth:`Trace.alibi_bias`), the RoPE-rotated scores
(:meth:`Trace.rotated_score`) and, with dropout, the weights after dropout
(:meth:`Trace.weight`); decimals of such heads are certified entry by entry.

>>> from exactattn.call.policy import Policy
>>> from exactattn.engines.head import Head, attend
>>> h = Head([[1]], [[1]], [[1]], divisor=None)
>>> t = attend(h.with_policy(h.policy.replace(sink=Fraction(0))), [[0], [1]])
>>> t.sink_share(1).text(), t.lse(1).text(), t.lse(0).decimal(4)
('1/(2 + exp(1))', 'log(2 + exp(1))', '1.0986')
"""

from __future__ import annotations

from fractions import Fraction
from math import gcd
from typing import Any

from ..numbers.digits import certify, check_places
from ..errors import InputError, shorten
from ..reference.logits import logit_row
from ..call.modifiers import dropout_factors
from ..numbers.lse import LogSumExp
from ..numbers.real import Real
from ..numbers.reals import sympy_ball
from ..numbers.exact import fraction_of

__all__ = ["Trace"]

#: a trace's projections by the names of the call's tensors
_CALL_NAMES = {"queries": "query", "keys": "key", "values": "value"}


class Trace:
    """Every intermediate of one run of :func:`~exactattn.engines.head.attend`.

    Shapes: x n x d_model; queries, keys n x d_k; values n x d_v; raw_scores
    n x n (``None`` at hidden pairs, which no engine computes); shares n x n;
    outputs n x d_v.  ``macs`` counts multiply-adds by stage (``projections``,
    ``scores``, ``mix``), counted inside the loops (None for the fast
    engine: nothing is counted that did not run).  ``softmax_ops`` counts the
    softmax's exponentials, additions and divisions separately; ``bias_adds``
    the additions of projection biases (not MACs; None when not counted).

    Indices are 0-based, as the shapes say; an index outside them raises
    ``IndexError`` naming the bad index and the shape.
    """

    def __init__(self, head, engine: str, x: list[list], *, parts: dict | None = None, call=None,
                 rows=None, outputs=None, macs: dict | None = None,
                 softmax_ops: dict | None = None, bias_adds: int | None = None,
                 dropout_keep: list | None = None):
        self._call = call
        self.head = head
        self.engine = engine
        self.x = x
        #: the call's policy (the head's: :func:`~exactattn.engines.head.attend` puts this run's
        #: empty-row answer in it)
        self.policy = head.policy
        #: the dropout keep-mask (n x n bools), None without dropout
        self.dropout_keep = dropout_keep
        self.macs = macs
        self.softmax_ops = softmax_ops
        self.bias_adds = bias_adds
        # the symbolic engine's queries, keys, values and raw scores; a numeric engine's are its
        # call's integer numerators, read as Fraction rows on first access (for a 1024 x 64
        # matrix that alone costs a second), the raw scores their product
        self._parts: dict[str, Any] = dict(parts or {})
        self._rows = rows           # the symbolic engine's; a numeric engine's are its reference's
        self._outputs = outputs
        self._reference = None
        #: the RoPE-rotated scores the logit stages read: the reference's raw rows (RoPE runs on
        #: the pencil engine only, which has a call)
        self._rotated = None if self.policy.rope is None else \
            [self.reference.raw_row(0, 0, i) for i in range(self.n)]
        self._decimals: dict = {}
        #: entries the bulk intervals left undecided, decided by the exact per-entry path
        self.fallbacks = 0

    def __repr__(self) -> str:
        return f"Trace(engine={self.engine!r}, n={self.n}, {self.head!r})"

    def _part(self, name: str):
        if name not in self._parts:
            self._parts[name] = [self.raw_score_row(i) for i in range(self.n)] \
                if name == "raw_scores" else [self.vector(name, i) for i in range(self.n)]
        return self._parts[name]

    queries = property(lambda self: self._part("queries"),
                       doc="n x d_k exact queries (``Fraction``, sympy in the symbolic engine)")
    keys = property(lambda self: self._part("keys"), doc="n x d_k exact keys")
    values = property(lambda self: self._part("values"), doc="n x d_v exact values")
    raw_scores = property(lambda self: self._part("raw_scores"),
                          doc="n x n exact raw scores queries[i] . keys[j] (None where hidden)")

    def vector(self, name: str, i: int) -> list:
        """Row i of ``queries``, ``keys`` or ``values`` (by that name), without converting
        the other rows (the fast engine keeps them as one integer matrix).

        Raises:
            InputError: ``name`` is not one of the three.
            IndexError: ``i`` is outside 0 to n - 1.

        >>> from exactattn.examples import chronicle
        >>> from exactattn.engines.head import attend
        >>> ex = chronicle()
        >>> attend(ex.head, ex.x, engine="fast").vector("queries", 1)
        [Fraction(0, 1), Fraction(3, 1), Fraction(1, 2), Fraction(0, 1)]
        """
        if name not in _CALL_NAMES:
            raise InputError(f"name must be 'queries', 'keys' or 'values' (got "
                             f"{shorten(name, quote=True)})")
        self._check(i)
        if name in self._parts:
            return list(self._parts[name][i])
        num, den = self.call.numerators(_CALL_NAMES[name])
        return [Fraction(v, den) for v in num[0, 0, i].tolist()]

    @property
    def reference(self):
        """The :class:`~exactattn.reference.reference.Reference` of :attr:`call`: the rows,
        outputs and raw scores a numeric engine did not count are read from it."""
        if self._reference is None:
            from ..reference.reference import Reference
            self._reference = Reference(self.call)
        return self._reference

    @property
    def call(self):
        """This run as a :class:`~exactattn.call.Call` (:meth:`Call.of_head
        <exactattn.call.Call.of_head>`: the head's projections of ``x`` under this run's
        policy, with its dropout keep-mask): what :class:`~exactattn.reference.reference.Reference`,
        ``verify`` and the gradients read.  Numeric engines only (a call holds numbers).

        >>> from exactattn import Head, Reference, attend
        >>> t = attend(Head([[1]], [[1]], [[1]], divisor=None), [[0], [1]])
        >>> Reference(t.call).share(0, 0, 1, 1) == t.share(1, 1)
        True
        """
        if self._call is None:
            from ..call.inputs import Call
            self._call = Call.of_head(self.head.with_policy(self.policy), self.x,
                                      dropout_keep=self.dropout_keep)
        return self._call

    @property
    def n(self) -> int:
        return len(self.x)

    def _check(self, i: int, j: int | None = None, width: int = 0, what: str = "") -> None:
        checks = [("query index", i, self.n)] + ([(what, j, width)] if j is not None else [])
        for name, v, size in checks:
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < size:
                raise IndexError(f"{name} must be from 0 to {size - 1} (got "
                                 f"{shorten(v, quote=True)}); indices are 0-based")

    # -- scores ----------------------------------------------------------
    def raw_score_row(self, i: int) -> list:
        """Row i of the raw scores, without converting the others."""
        self._check(i)
        if "raw_scores" in self._parts:
            return self._parts["raw_scores"][i]
        ints, den = self._score_ints(i)
        return [None if v is None else Fraction(v, den) for v in ints]

    def _score_ints(self, i: int) -> tuple[list, int]:
        num, den = self.reference.score_ints(0, 0)    # hidden pairs hold their products too
        return [int(v) if seen else None for v, seen in
                zip(num[i].tolist(), self.reference.visible(0, 0)[i].tolist())], den

    def raw_score_ints(self, i: int) -> tuple[list, int]:
        """Row i of the raw scores as ``(ints, den)``: score j is ``ints[j] / den`` (None
        where hidden), ``den`` the least common denominator of the row's scores.

        Numeric engines only (``TypeError`` otherwise): the row comes straight from the
        integer matmul of the queries' and keys' numerators, without a ``Fraction`` per entry.

        >>> from exactattn import Head, attend
        >>> attend(Head([[1, 0], [0, 1]], [[1, 0], [0, 1]], [[1, 0], [0, 1]]),
        ...        [[1, "1/2"], [0, 3]], engine="fast").raw_score_ints(0)
        ([5, 6], 4)
        """
        self._check(i)
        if self.engine == "symbolic":
            raise TypeError("score rows must be rational (a numeric engine's trace)")
        ints, den = self._score_ints(i)
        g = gcd(den, *[v for v in ints if v is not None])
        return ([None if v is None else v // g for v in ints], den // g) if g > 1 \
            else (ints, den)

    def scaled_score(self, i: int, j: int):
        """raw / divisor: a ``Fraction`` when the divisor is rational, else an exact
        :class:`~exactattn.numbers.reals.Surd` ``a/sqrt(D)`` (sympy in the symbolic engine); None if hidden."""
        self._check(i, j, self.n, "key index")
        r = self.raw_score_row(i)[j]
        return None if r is None else self.head.scale(r)

    @property
    def scaled_scores(self) -> list[list]:
        return [[self.scaled_score(i, j) for j in range(self.n)] for i in range(self.n)]

    # -- softmax rows, shares, outputs ------------------------------------
    @property
    def rows(self) -> list:
        """The exact softmax row of every query (:class:`SoftmaxRow`; sympy rows when symbolic)."""
        return [self.row(i) for i in range(self.n)]

    def row(self, i: int):
        self._check(i)
        return self._rows[i] if self.engine == "symbolic" else self.reference.row(0, 0, i)

    def share(self, i: int, j: int):
        """The exact share of key j for query i (an :class:`ExpRatio` or :class:`SymbolicValue`)."""
        self._check(i, j, self.n, "key index")
        if self.engine == "symbolic":
            return SymbolicValue(self.row(i)[j])
        return self.row(i).share(j)

    @property
    def shares(self) -> list[list]:
        """Exact shares: ``Fraction`` where rational, sympy closed forms elsewhere."""
        if self.engine == "symbolic":
            return [list(r) for r in self.rows]
        return [[self.row(i).share(j).exact() for j in range(self.n)] for i in range(self.n)]

    def output(self, i: int, c: int):
        """Output column c of query i (an :class:`ExpRatio` or :class:`SymbolicValue`)."""
        self._check(i, c, self.head.d_v, "value column")
        if self.engine == "symbolic":
            return SymbolicValue(self._outputs[i][c])
        return self.reference.output(0, 0, i, c)

    @property
    def outputs(self) -> list[list]:
        if self.engine == "symbolic":
            return [list(r) for r in self._outputs]
        return [[self.output(i, c).exact() for c in range(self.head.d_v)]
                for i in range(self.n)]

    def row_sums_to_one(self, i: int) -> bool:
        if self.engine == "symbolic":
            import sympy
            return sympy.cancel(sympy.together(sum(self.row(i)))) == 1
        return self.row(i).sum_is_one()

    # -- modifiers (sinks, ALiBi, soft-capping, RoPE, dropout, log-sum-exp) ---
    def _logit_source(self, i: int) -> list:
        """Row i's scores as the composition reads them: RoPE-rotated, else raw."""
        return self._rotated[i] if self._rotated is not None else self.raw_score_row(i)

    def rotated_score(self, i: int, j: int):
        """The RoPE-rotated raw score of query i and key j (the raw score without RoPE).

        A ``Fraction`` where the rotation angle is 0 (the query's own
        position), else a rotary :class:`~exactattn.numbers.reals.Surd` (over cosine and sine atoms); None if hidden.
        """
        self._check(i, j, self.n, "key index")
        return self._logit_source(i)[j]

    def logit_row(self, i: int, stage: str = "logit") -> list:
        """Row i after a stage of the one composition (:func:`~exactattn.reference.logits.logit_row`):
        ``scaled``, ``capped`` (soft-cap) or ``logit`` (+ ALiBi bias): what the softmax reads.

        Values are ``Fraction`` or ``Surd`` (exact algebraic, or over cosine, sine, tanh atoms); None if hidden.
        """
        self._check(i)
        return logit_row(self._logit_source(i), self.head.divisor_squared, self.policy, i,
                         self.n, self.n, stage=stage)

    def alibi_bias(self, i: int, j: int):
        """The exact ALiBi bias added to query i's logit for key j (a ``Fraction`` or
        ``Surd``); None if the key is hidden or the policy has no ALiBi."""
        self._check(i, j, self.n, "key index")
        alibi = self.policy.alibi
        if alibi is None or self.raw_score_row(i)[j] is None:
            return None
        return alibi.bias(self.policy.head, self.policy.query_position(i, self.n, self.n), j)

    def sink_share(self, i: int):
        """The share row i's attention sink takes (exactly 0 without a sink)."""
        self._check(i)
        return self.row(i).sink_share()

    def lse(self, i: int, base: str = "e") -> LogSumExp:
        """Row i's log-sum-exp (sink included), natural log or ``base="2"``; -inf if empty.

        Raises:
            InputError: a symbolic trace, or a base other than e and 2.
        """
        self._check(i)
        if self.engine == "symbolic":
            raise InputError("trace must come from a numeric engine for the log-sum-exp (got "
                             "symbolic); run attend with engine='pencil' or 'fast'")
        return LogSumExp(self.row(i), base)

    def dropped_share(self, i: int, j: int):
        """Query i's weight on key j after dropout: ``share * keep / (1 - p)`` (the share
        itself without dropout)."""
        self._check(i, j, self.n, "key index")
        if self.dropout_keep is None:
            return self.share(i, j)
        return self.row(i).share(j, dropout_factors(self.policy.dropout, self.dropout_keep[i])[j])

    def dropped_sum(self, i: int):
        """The sum of row i's weights after dropout: ``(sum of kept shares) / (1 - p)``,
        in general not 1 (the row's share sum without dropout): the row combined with its
        factors (:func:`~exactattn.call.modifiers.dropout_factors`)."""
        self._check(i)
        keep = self.dropout_keep
        return self.row(i).combine([1] * self.n if keep is None else
                                   dropout_factors(self.policy.dropout, keep[i]))

    def dropped_decimals(self, places: int) -> list[list[str]]:
        """Every weight after dropout, correctly rounded (n x n strings; the shares without
        dropout)."""
        if self.dropout_keep is None:
            return self.share_decimals(places)
        check_places(places)
        return [[self.dropped_share(i, j).decimal(places) for j in range(self.n)]
                for i in range(self.n)]

    # -- bulk certified decimals -------------------------------------------
    def share_decimals(self, places: int) -> list[list[str]]:
        """Every share, correctly rounded to ``places`` decimals (n x n strings).

        The same strings as ``trace.share(i, j).decimal(places)`` for every
        entry, decided in bulk from integer enclosures where the scores allow.

        Raises:
            InputError: ``places`` is not a whole number from 0 to 50.
        """
        return [list(r) for r in self._bulk(places)[0]]

    def output_decimals(self, places: int) -> list[list[str]]:
        """Every output, correctly rounded to ``places`` decimals (n x d_v strings).

        Raises:
            InputError: ``places`` is not a whole number from 0 to 50.
        """
        return [list(r) for r in self._bulk(places)[1]]

    def _bulk(self, places: int):
        check_places(places)
        if places in self._decimals:
            return self._decimals[places]
        n, d_v = self.n, self.head.d_v
        result = None
        if self.engine != "symbolic" and not self.policy.replace(dropout=None).modified:
            from ..numbers.bulk import decimals
            vnum, vden = self.call.numerators("value")
            result = decimals(*self.reference.score_ints(0, 0), self.head.divisor_squared,
                              self.head.policy.keep(n, n), vnum[0, 0], vden, places)

        def every(width: int):          # a grid to fill and all its cells, entry by entry
            return [[None] * width for _ in range(n)], [(i, c) for i in range(n)
                                                          for c in range(width)]
        if result is None:
            (shares, share_cells), (outputs, output_cells) = every(n), every(d_v)
        else:
            shares, outputs, (share_cells, output_cells) = result
            dropout = self.dropout_keep is not None     # the shares stay the softmax's; the outputs do not
            self.fallbacks += len(share_cells) + (0 if dropout else len(output_cells))
            if dropout:
                outputs, output_cells = every(d_v)
        for i, j in share_cells:
            shares[i][j] = self.share(i, j).decimal(places)
        for i, c in output_cells:
            outputs[i][c] = self.output(i, c).decimal(places)
        self._decimals[places] = (shares, outputs)
        return shares, outputs


class SymbolicValue(Real):
    """An entry of the symbolic engine: a sympy expression with the numeric views of ExpRatio.

    ``decimal(places)`` is certified (ball arithmetic on the expression tree,
    precision doubled until the rounding is decided); an expression with free
    symbols has no decimal.

    >>> import sympy
    >>> SymbolicValue(sympy.E / (1 + sympy.E)).decimal(4)
    '0.7311'
    """

    __slots__ = ("expr",)

    def __init__(self, expr):
        self.expr = expr

    def closed_form(self):
        return self.expr

    def rational(self) -> Fraction | None:
        """The value as a ``Fraction`` when sympy holds it as a rational, else None."""
        e = self.expr
        return fraction_of(e) if getattr(e, "is_Rational", False) else None

    def _text(self) -> str:
        return str(self.expr)

    def ball(self, prec: int):
        return sympy_ball(self.expr)

    def decimal(self, places: int) -> str:
        """Correctly rounded decimal at ``places`` places (``nan`` for an empty row under
        ``empty_row="nan"``, as the pencil prints it).

        Raises:
            InputError: the expression has free symbols.
        """
        check_places(places)
        e = self.expr
        if getattr(e, "free_symbols", None):
            names = ", ".join(sorted(str(s) for s in e.free_symbols))
            raise InputError(f"value must be a number to print decimals (got {e}, with "
                             f"symbols {names}); substitute values for them first")
        if self.rational() is not None or self._nan():
            return super().decimal(places)
        return certify(self.ball, places)

    def _order(self, other):
        return NotImplemented          # symbolic entries have equality, not order

    def _nan(self) -> bool:
        import sympy
        return isinstance(self.expr, sympy.Basic) and self.expr.has(sympy.nan)

    def _equals(self, other):
        import sympy
        other = other.expr if isinstance(other, SymbolicValue) else other
        return sympy.simplify(self.expr - other) == 0

    def _hash_value(self) -> int:
        # consistent with simplify-equality: a form with symbols may simplify to a number
        import sympy
        e = self.expr
        if isinstance(e, sympy.Basic) and not e.is_Rational:
            e = sympy.simplify(e)      # sin(1)**2 + cos(1)**2 is 1, and hashes as 1
            if e.free_symbols:
                return hash("symbolic value")
        if getattr(e, "is_Rational", False):
            return hash(fraction_of(e))
        return hash(("real", SymbolicValue(e).decimal(30)))

    def __repr__(self) -> str:
        return f"SymbolicValue({self.expr})"
