"""Check a float attention implementation against the exact answer, in ULPs of its dtype.

One attention call ``outputs = softmax(scale * query @ key^T + mask) @ value``
(Vaswani et al. 2017, sec. 3.2.1; PyTorch ``scaled_dot_product_attention``
shapes: query B x H_q x L x E, key B x H_kv x S x E, value B x H_kv x S x E_v)
is run twice: once by the implementation under test in its float dtype, once
exactly here, under a named :class:`~exactattn.policies.Policy` (scale, causal
alignment, empty rows, mask kind, GQA map).  The report gives, for every
output, the exact value (certified), the implementation's value, the error in
ULPs of the output dtype and the relative error.

How the exact value is rounded before ULPs are counted
-------------------------------------------------------
Each exact output is transcendental or rational (:mod:`exactattn.softmax`).
It is enclosed in an ``arb`` ball; both ends of the ball are rounded to the
dtype's format (precision p bits, exponent range emin..emax: float64 53,
float32 24, float16 11, bfloat16 8) with round-to-nearest, ties-to-even,
gradual underflow (subnormals) and overflow to infinity, computed on the
exact binary value of each end with integer arithmetic (:func:`round_to_format`).
When both ends give the same float that float is the correctly rounded exact
value; otherwise the precision is doubled (Ziv's strategy) and, for a value
the balls cannot decide, the exact :class:`~exactattn.softmax.ExpRatio` is
asked whether it is rational and then rounded exactly (a rational value may sit
on a tie).  The ULP error of an output is the number of floats of the format
between the implementation's value and that correctly rounded value
(:func:`ulps_between`: 0 means correctly rounded; +0 and -0 are one float).

NaN or infinity where the exact value is finite is a hard failure, never a
skip; so is a finite value where the policy's exact answer is NaN.

Exactness: the inputs are the implementation's own inputs, floats of the
dtype, read as their exact binary values (``floats="exact"``, said out loud);
spec-file numbers that are not floats of the dtype are rounded to it first, and
the report says how many were.  Scores ``query . key`` are exact rationals
(python-flint ``fmpq_mat``); shares and outputs are exact closed forms.

Reference: Vaswani et al. 2017, sec. 3.2.1; Ziv 1991 for the rounding loop;
IEEE 754-2019 sec. 4.3.1 (roundTiesToEven).

>>> import numpy as np
>>> from exactattn.impls import NumpyImpl
>>> p = Problem.from_arrays([[0], [0]], [[0], [0]], [[1], [3]])
>>> report = verify(NumpyImpl(), p, dtype="float64")
>>> [e.exact.decimal(4) for e in report.entries]
['2.0000', '2.0000']
>>> report.summary()["max_ulps"], report.passed
(0, True)
>>> round_to_format(Fraction(1, 3), FORMATS["bfloat16"])
0.333984375
"""

from __future__ import annotations

import json
import math
import time
import tomllib
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Sequence

import numpy as np

from .digits import certify, working_precision
from .errors import InputError, ShapeError, SpecError
from .exact import to_exact
from .call import Policy
from .softmax import ExpRatio, SoftmaxRow

__all__ = ["BiasedRow", "DTYPES", "Entry", "FORMATS", "FloatFormat", "Problem", "Reference",
           "Report", "SearchResult", "certified_scientific", "default_max_ulps", "flop_counts",
           "load_spec", "random_problem", "report_sections", "round_to_format", "search",
           "shortest_repr", "spec_from_mapping", "spec_text", "ulp_index", "ulps_between",
           "verify"]


# ---------------------------------------------------------------- float formats

@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: ``precision`` bits (hidden bit included), exponents emin..emax."""

    name: str
    precision: int
    emin: int
    emax: int

    @property
    def unit_roundoff(self) -> Fraction:
        """u = 2**-p, half the gap between 1 and the next float."""
        return Fraction(1, 2 ** self.precision)

    @property
    def max_finite(self) -> float:
        return math.ldexp(2 ** self.precision - 1, self.emax - self.precision + 1)


FORMATS = {
    "float64": FloatFormat("float64", 53, -1022, 1023),
    "float32": FloatFormat("float32", 24, -126, 127),
    "float16": FloatFormat("float16", 11, -14, 15),
    "bfloat16": FloatFormat("bfloat16", 8, -126, 127),
}
DTYPES = tuple(FORMATS)


def _fmt(dtype: str | FloatFormat) -> FloatFormat:
    if isinstance(dtype, FloatFormat):
        return dtype
    if dtype not in FORMATS:
        raise InputError(f"dtype must be one of {', '.join(DTYPES)} (got {dtype!r})")
    return FORMATS[dtype]


def _round_scaled(man: int, exp: int, den: int, fmt: FloatFormat) -> float:
    """Round |man| * 2**exp / den (den odd or 1) to ``fmt``; sign from man."""
    sign = -1.0 if man < 0 else 1.0
    man = abs(man)
    if man == 0:
        return 0.0 * sign
    # e = floor(log2(man * 2**exp / den)): the bit-length estimate or one less
    e = man.bit_length() - den.bit_length() + exp
    t = exp - e
    if (man << t if t >= 0 else man) < (den if t >= 0 else den << -t):
        e -= 1
    E = max(e, fmt.emin)
    q = E - fmt.precision + 1                      # the exponent of one ULP
    # k = round(man * 2**(exp - q) / den), ties to even, exactly
    shift = exp - q
    num, dd = (man << shift, den) if shift >= 0 else (man, den << -shift)
    k, rem = divmod(num, dd)
    if 2 * rem > dd or (2 * rem == dd and k & 1):
        k += 1
    if E > fmt.emax or (k >= 2 ** fmt.precision and E + 1 > fmt.emax):
        return math.inf * sign
    return sign * math.ldexp(k, q)


def round_to_format(value, dtype: str | FloatFormat) -> float:
    """The float of ``dtype`` nearest to an exact value (ties to even), as a Python float.

    ``value`` is a ``Fraction`` (or int) or an exact ``arb`` (radius 0).  The
    result is exactly that float of the format (every float16, bfloat16 and
    float32 is also a float64); ``inf`` past the overflow threshold, signed
    zero below half the smallest subnormal.

    Raises:
        InputError: an unknown dtype.

    >>> round_to_format(Fraction(1, 10), "float32")
    0.10000000149011612
    >>> round_to_format(Fraction(65520), "float16"), round_to_format(Fraction(65519), "float16")
    (inf, 65504.0)
    >>> round_to_format(Fraction(3, 2**26), "float16")    # a subnormal tie, to even
    5.960464477539063e-08
    """
    fmt = _fmt(dtype)
    if type(value).__name__ == "arb":
        man, exp = value.mid().man_exp()
        return _round_scaled(int(man), int(exp), 1, fmt)
    q = Fraction(value)
    return _round_scaled(q.numerator, 0, q.denominator, fmt)


def ulp_index(x: float, dtype: str | FloatFormat) -> int:
    """The position of a float of ``dtype`` on the number line: ..., -1, 0 (+-0), 1 (smallest subnormal), ...

    Infinity is one past the largest finite float.

    Raises:
        InputError: NaN, or a value that is not a float of ``dtype``.

    >>> ulp_index(1.0, "bfloat16") - ulp_index(0.99609375, "bfloat16")
    1
    """
    fmt = _fmt(dtype)
    if math.isnan(x):
        raise InputError("x must not be NaN for an ULP count (got nan)")
    p = fmt.precision
    if math.isinf(x):
        idx = (fmt.emax + 1 - fmt.emin) * 2 ** (p - 1) + 2 ** (p - 1)
        return idx if x > 0 else -idx
    a = abs(x)
    if a == 0:
        return 0
    _, e = math.frexp(a)
    E = max(e - 1, fmt.emin)
    k = math.ldexp(a, p - 1 - E)
    if k != int(k) or E > fmt.emax:
        raise InputError(f"x must be a {fmt.name} value (got {x!r})")
    idx = (E - fmt.emin) * 2 ** (p - 1) + int(k)
    return idx if x > 0 else -idx


def ulps_between(a: float, b: float, dtype: str | FloatFormat) -> int:
    """How many floats of ``dtype`` lie between a and b (0 when equal).

    >>> ulps_between(1.0, 1.0 + 2**-23, "float32"), ulps_between(-0.0, 0.0, "float32")
    (1, 0)
    """
    return abs(ulp_index(a, dtype) - ulp_index(b, dtype))


def default_max_ulps(dtype: str, n_keys: int, d_k: int, max_score: float = 0.0) -> int:
    """The default tolerance: ``2 * ceil(sqrt(S + d_k)) + 4 + ceil(max |scaled score|)`` ULPs.

    Rounding errors of a dot product of length d_k and of a sum of S
    exponentials grow like sqrt(length) on average (Higham 2002, sec. 3.1,
    "Probabilistic error analysis"); the 4 covers the exponential and the
    final division.  ``exp`` has condition number |x|: a scaled score x
    computed with a relative error of one unit moves ``exp(x)`` by about
    |x| half-ULPs, hence the last term (the largest |scale * score + mask| over
    visible pairs).  It is a reading aid, not a proof of a bound; the same
    number applies to both ULP counts of :class:`Entry`.

    >>> default_max_ulps("float32", 512, 64), default_max_ulps("bfloat16", 2, 1, max_score=23.9)
    (52, 32)
    """
    _fmt(dtype)
    return 2 * (math.isqrt(n_keys + d_k - 1) + 1) + 4 + math.ceil(max_score)


# ---------------------------------------------------------------- the problem

def _as_array(data, name: str) -> np.ndarray:
    if hasattr(data, "detach"):  # a torch tensor: read its values exactly as floats
        data = data.detach().cpu().double().numpy()
    arr = np.array(data, dtype=object) if not isinstance(data, np.ndarray) else data
    if arr.ndim not in (2, 3, 4):
        raise ShapeError(f"{name} must have 2, 3 or 4 dimensions (L x E, H x L x E or "
                         f"B x H x L x E) (got {arr.ndim})")
    return arr


def _exact_array(data, name: str, floats: str | None) -> np.ndarray:
    arr = _as_array(data, name)
    flat = [to_exact(v.item() if isinstance(v, np.generic) else v, name=name, floats=floats)
            for v in arr.reshape(-1)]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    out = out.reshape(arr.shape)
    while out.ndim < 4:
        out = out[np.newaxis]
    return out


def _mask_entry(v, kind: str, name: str, floats):
    if kind in ("bool_keep", "bool_drop"):
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        raise InputError(f"{name} must be true or false for a {kind} mask (got {v!r})")
    if isinstance(v, str) and v.strip().lower() in ("-inf", "-infinity"):
        return None
    if isinstance(v, (float, np.floating)) and math.isinf(v) and v < 0:
        return None
    if isinstance(v, (bool, np.bool_)):
        raise InputError(f"{name} must be a number or '-inf' for an additive mask (got {v!r}); "
                         "a boolean mask needs mask_kind bool_keep or bool_drop")
    return to_exact(v.item() if isinstance(v, np.generic) else v, name=name, floats=floats)


@dataclass
class Problem:
    """The exact inputs of one attention call.

    Shapes: ``query`` B x H_q x L x E, ``key`` B x H_kv x S x E, ``value``
    B x H_kv x S x E_v (numpy object arrays of ``Fraction``); ``mask`` None or
    B x H_q x L x S (``bool`` for boolean kinds, ``Fraction`` or None for
    ``-inf`` in an additive mask).  ``rank`` is the number of dimensions the
    caller used (2, 3 or 4); an implementation is handed arrays of that rank.
    """

    query: np.ndarray
    key: np.ndarray
    value: np.ndarray
    mask: np.ndarray | None = None
    mask_kind: str | None = None
    rank: int = 4
    name: str = "problem"

    @classmethod
    def from_arrays(cls, query, key, value, mask=None, *, mask_kind: str = "bool_keep",
                    floats: str | None = None, name: str = "problem") -> "Problem":
        """Read query, key, value (and a mask) given as nested lists, numpy arrays or tensors.

        Entries are read by :func:`exactattn.exact.to_exact`: binary floats
        are refused unless ``floats`` says how to read them.  The mask is
        L x S or broadcastable to B x H_q x L x S.

        Raises:
            ShapeError: mismatched sizes, a bad rank, GQA heads that do not divide.
            InputError, FloatInputError: bad entries.

        >>> p = Problem.from_arrays([["1/2"]], [[1], [2]], [[3], [4]])
        >>> p.shape
        {'B': 1, 'H_q': 1, 'H_kv': 1, 'L': 1, 'S': 2, 'E': 1, 'E_v': 1}
        """
        rank = _as_array(query, "query").ndim
        q = _exact_array(query, "query", floats)
        k = _exact_array(key, "key", floats)
        v = _exact_array(value, "value", floats)
        B, Hq, L, E = q.shape
        if k.shape[0] != B or k.shape[3] != E:
            raise ShapeError(f"key must be {B} x H_kv x S x {E} like the query "
                             f"(got {' x '.join(map(str, k.shape))})")
        if v.shape[:3] != k.shape[:3]:
            raise ShapeError(f"value must have the key's batch, heads and length "
                             f"{' x '.join(map(str, k.shape[:3]))} (got "
                             f"{' x '.join(map(str, v.shape[:3]))})")
        if Hq % k.shape[1]:
            raise ShapeError(f"query heads must be a multiple of key/value heads "
                             f"(got {Hq} query, {k.shape[1]} key/value heads)")
        m = None
        if mask is not None:
            from .call import MASK_KINDS
            if mask_kind not in MASK_KINDS:
                raise InputError(f"mask_kind must be one of {', '.join(MASK_KINDS)} "
                                 f"(got {mask_kind!r})")
            if hasattr(mask, "detach"):
                mask = mask.detach().cpu().numpy()
                if mask.dtype != bool:
                    mask = mask.astype(np.float64)
            raw = np.array(mask, dtype=object)
            S = k.shape[2]
            try:
                raw = np.broadcast_to(raw, (B, Hq, L, S))
            except ValueError:
                raise ShapeError(f"mask must be L x S = {L} x {S} or broadcast to "
                                 f"{B} x {Hq} x {L} x {S} (got "
                                 f"{' x '.join(map(str, np.shape(mask)))})") from None
            flat = [_mask_entry(x, mask_kind, "mask", floats) for x in raw.reshape(-1)]
            m = np.empty(len(flat), dtype=object)
            m[:] = flat
            m = m.reshape(B, Hq, L, S)
        return cls(q, k, v, m, mask_kind if mask is not None else None, rank, name)

    @classmethod
    def from_scores(cls, scores, values=None, mask=None, *, mask_kind: str = "bool_keep",
                    name: str = "scores") -> "Problem":
        """A problem whose raw scores ``query @ key^T`` are the given L x S matrix.

        query = the scores (``-inf`` entries replaced by 0), key = the S x S
        identity, so ``query @ key^T`` is the scores exactly; ``-inf`` entries
        become hidden keys (an additive mask, or folded into a boolean one).
        ``values`` default to the identity, so the outputs are the shares; a
        single number is a one-column value row.  Check it with
        ``Policy(scale="none")``: the scores are taken as already scaled.

        >>> p = Problem.from_scores([["-inf", "0"]], ["9", "1"])
        >>> Reference(p, Policy(scale="none")).output(0, 0, 0, 0).exact()
        Fraction(1, 1)
        """
        rows = [list(r) for r in scores]
        S = len(rows[0]) if rows else 0
        hidden = [[isinstance(x, str) and x.strip().lower() in ("-inf", "-infinity") or
                   (isinstance(x, float) and x == -math.inf) for x in r] for r in rows]
        q = [[0 if h else x for x, h in zip(r, hr)] for r, hr in zip(rows, hidden)]
        k = [[int(i == j) for j in range(S)] for i in range(S)]
        if values is None:
            values = k
        v = [list(x) if isinstance(x, (list, tuple)) else [x] for x in values]
        if any(any(hr) for hr in hidden):
            if mask is None:
                mask_kind = "additive"
                mask = [["-inf" if h else 0 for h in hr] for hr in hidden]
            elif mask_kind == "additive":
                mask = [["-inf" if h else m for m, h in zip(mr, hr)] for mr, hr in zip(mask, hidden)]
            else:
                keep = mask_kind == "bool_keep"
                mask = [[(not keep) if h else m for m, h in zip(mr, hr)]
                        for mr, hr in zip(mask, hidden)]
        return cls.from_arrays(q, k, v, mask, mask_kind=mask_kind, name=name)

    @property
    def shape(self) -> dict:
        B, Hq, L, E = self.query.shape
        return {"B": B, "H_q": Hq, "H_kv": self.key.shape[1], "L": L, "S": self.key.shape[2],
                "E": E, "E_v": self.value.shape[3]}

    def rounded(self, dtype: str) -> tuple["Problem", int]:
        """The same problem with every entry rounded to ``dtype``, and how many entries moved.

        The result holds the exact values of those floats, so the exact
        reference is computed from exactly what the implementation is handed.
        """
        fmt = _fmt(dtype)
        moved = 0

        def rnd(arr):
            nonlocal moved
            flat = []
            for x in arr.reshape(-1):
                f = round_to_format(x, fmt)
                if math.isinf(f):
                    raise InputError(f"inputs must fit in {fmt.name} (got {x}, which overflows)")
                fx = Fraction(f)
                moved += fx != x
                flat.append(fx)
            out = np.empty(len(flat), dtype=object)
            out[:] = flat
            return out.reshape(arr.shape)
        mask = self.mask
        if mask is not None and self.mask_kind == "additive":
            flat = []
            for x in mask.reshape(-1):
                if x is None:
                    flat.append(None)
                    continue
                f = round_to_format(x, fmt)
                if math.isinf(f):
                    raise InputError(f"mask entries must fit in {fmt.name} (got {x}, which "
                                     "overflows); use '-inf' to hide a key")
                fx = Fraction(f)
                moved += fx != x
                flat.append(fx)
            mask = np.empty(len(flat), dtype=object)
            mask[:] = flat
            mask = mask.reshape(self.mask.shape)
        return Problem(rnd(self.query), rnd(self.key), rnd(self.value), mask, self.mask_kind,
                       self.rank, self.name), moved

    def floats(self, name: str) -> np.ndarray:
        """``query``/``key``/``value`` as float64 (exact when the entries are floats), in the caller's rank."""
        arr = getattr(self, name)
        out = np.array([float(x) for x in arr.reshape(-1)], dtype=np.float64).reshape(arr.shape)
        return out.reshape(arr.shape[4 - self.rank:]) if self.rank < 4 else out


def random_problem(n: int = 8, d_k: int = 4, *, seed: int = 0, n_keys: int | None = None,
                   d_v: int | None = None, heads: int = 1, kv_heads: int | None = None,
                   batch: int = 1) -> Problem:
    """Standard-normal query, key and value (numpy ``default_rng(seed)``), read as exact floats.

    Shapes: query batch x heads x n x d_k, key/value batch x kv_heads x
    n_keys x d_k (d_v); rank 4 when batch or heads exceed 1, else n x d_k.
    Round with :meth:`Problem.rounded` (``verify`` does) to a dtype.

    Raises:
        InputError: a size below 1.

    >>> p = random_problem(3, 2, seed=1)
    >>> p.shape["L"], p.query[0, 0, 0, 0] == Fraction(np.random.default_rng(1).standard_normal())
    (3, True)
    """
    sizes = dict(n=n, d_k=d_k, n_keys=n if n_keys is None else n_keys,
                 d_v=d_k if d_v is None else d_v, heads=heads,
                 kv_heads=heads if kv_heads is None else kv_heads, batch=batch)
    for k, v in sizes.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"{k} must be a positive integer (got {v!r})")
    rng = np.random.default_rng(seed)
    B, H, Hkv = sizes["batch"], sizes["heads"], sizes["kv_heads"]
    q = rng.standard_normal((B, H, n, d_k))
    k = rng.standard_normal((B, Hkv, sizes["n_keys"], d_k))
    v = rng.standard_normal((B, Hkv, sizes["n_keys"], sizes["d_v"]))
    if B == 1 and H == 1 and Hkv == 1:
        q, k, v = q[0, 0], k[0, 0], v[0, 0]
    return Problem.from_arrays(q, k, v, floats="exact", name=f"random n={n} d_k={d_k} seed={seed}")


# ---------------------------------------------------------------- the exact reference

def _fq(x):
    from flint import fmpq
    return fmpq(x.numerator, x.denominator)


def _rational_sqrt(q: Fraction) -> Fraction | None:
    a, b = math.isqrt(q.numerator), math.isqrt(q.denominator)
    return Fraction(a, b) if a * a == q.numerator and b * b == q.denominator else None


class BiasedRow(SoftmaxRow):
    """A softmax row ``exp(s_j/sqrt(D) + m_j) / sum_k exp(s_k/sqrt(D) + m_k)`` for irrational sqrt(D).

    An additive mask ``m`` (rational) is added after the scale, so with an
    irrational divisor the exponent is not a rational multiple of 1/sqrt(D)
    and :class:`SoftmaxRow`'s gaps cannot hold it.  Here each gap is the pair
    ``(s_j - s_0, m_j - m_0)`` against a reference key; two keys share a gap
    exactly when their exponents are equal (sqrt(D) irrational), so
    :class:`ExpRatio` (and its Lindemann-Weierstrass rationality test) works
    unchanged.  ``None`` marks a hidden key.
    """

    def __init__(self, raw, bias, divisor_squared: Fraction, empty_row: str = "zero"):
        SoftmaxRow.__init__(self, [None] * len(raw), divisor_squared, empty_row)
        self.raw = list(raw)
        self.bias = list(bias)
        vis = [j for j, r in enumerate(self.raw) if r is not None]
        self.empty = not vis
        if self.empty:
            if empty_row == "uniform":
                self.raw, self.bias = [Fraction(0)] * len(raw), [Fraction(0)] * len(raw)
                vis = list(range(len(raw)))
            else:
                self.gaps = [None] * len(raw)
                self.counts, self.exps, self.adds, self.divs = {}, 0, 0, 0
                self.max_raw = None
                return
        d = float(divisor_squared) ** 0.5
        j0 = max(vis, key=lambda j: float(self.raw[j]) / d + float(self.bias[j]))
        self.ref = (self.raw[j0], self.bias[j0])
        self.max_raw = self.ref
        vis_set = set(vis)
        self.gaps = [None if j not in vis_set else
                     (self.raw[j] - self.ref[0], self.bias[j] - self.ref[1])
                     for j in range(len(raw))]
        counts: dict = {}
        for g in self.gaps:
            if g is not None:
                counts[g] = counts.get(g, 0) + 1
        self.counts = counts
        self.exps, self.adds, self.divs = len(counts), max(len(vis) - 1, 0), len(vis)

    def _exp_balls(self, prec: int) -> dict:
        from flint import arb
        scale = 1 / arb(_fq(self.divisor_squared)).sqrt()
        return {g: (arb(_fq(g[0])) * scale + arb(_fq(g[1]))).exp() for g in self.counts}

    def _exp_sym(self, g):
        import sympy
        s = sympy.Rational(g[0] + self.ref[0])
        m = sympy.Rational(g[1] + self.ref[1])
        d = sympy.Rational(self.divisor_squared)
        return sympy.exp(s / sympy.sqrt(d) + m)


class Reference:
    """The exact shares and outputs of a :class:`Problem` under a :class:`Policy`.

    ``share(b, h, i, j)`` and ``output(b, h, i, c)`` are exact
    :class:`~exactattn.softmax.ExpRatio` values (certified decimals, closed
    forms, rationality); :meth:`rounded_outputs` gives every output correctly
    rounded to a float format, computed with ``fmpq_mat`` scores and ``arb_mat``
    products and falling back to the exact ratios only where a ball cannot
    decide.  ``macs`` counts the multiply-adds over visible pairs only:
    ``scores`` = pairs x E and ``mix`` = pairs x E_v (a causal mask sees
    n(n+1)/2 pairs, not n^2/2).

    >>> p = Problem.from_arrays([[0], [0]], [[0]] * 5, [[1], [2], [3], [4], [5]])
    >>> ref = Reference(p, Policy(causal=True))
    >>> ref.output(0, 0, 1, 0).exact()
    Fraction(3, 2)
    >>> Reference(p, Policy(causal=True, alignment="bottom_right")).output(0, 0, 1, 0).exact()
    Fraction(3, 1)
    """

    def __init__(self, problem: Problem, policy: Policy | None = None):
        self.problem = problem
        self.policy = policy = policy or Policy()
        if problem.mask is not None and problem.mask_kind is not None \
                and problem.mask_kind != policy.mask_kind:
            self.policy = policy = policy.replace(mask_kind=problem.mask_kind)
        sh = problem.shape
        self.B, self.Hq, self.Hkv, self.L, self.S = sh["B"], sh["H_q"], sh["H_kv"], sh["L"], sh["S"]
        self.E, self.Ev = sh["E"], sh["E_v"]
        d2 = policy.divisor_squared(self.E)
        self.divisor_squared = None if d2 == 1 else d2
        self._scores: dict = {}
        self._rows: dict = {}
        self._kv: dict = {}
        self._visible: dict = {}
        pairs = sum(int(self.visible(b, h).sum()) for b in range(self.B) for h in range(self.Hq))
        self.pairs = pairs
        self.macs = {"scores": pairs * self.E, "mix": pairs * self.Ev}

    # -- structure ------------------------------------------------------
    def kv(self, h: int) -> int:
        return self.policy.kv_head(h, self.Hq, self.Hkv)

    def visible(self, b: int, h: int) -> np.ndarray:
        """L x S booleans: which keys each query sees (causal rule and mask)."""
        if (b, h) in self._visible:
            return self._visible[(b, h)]
        L, S = self.L, self.S
        vis = np.ones((L, S), dtype=bool)
        if self.policy.causal:   # the rule of policies.visible, for the whole block at once
            offset = 0 if self.policy.alignment == "top_left" else S - L
            vis = np.arange(S)[np.newaxis, :] <= np.arange(L)[:, np.newaxis] + offset
        m = self.problem.mask
        if m is not None:
            blk = m[b, h]
            kind = self.policy.mask_kind
            if kind == "bool_keep":
                vis &= blk.astype(bool)
            elif kind == "bool_drop":
                vis &= ~blk.astype(bool)
            else:
                vis &= np.vectorize(lambda x: x is not None, otypes=[bool])(blk)
        self._visible[(b, h)] = vis
        return vis

    def bias(self, b: int, h: int, i: int) -> list | None:
        """The additive mask of row i (``Fraction``, None where -inf), or None when there is none."""
        m = self.problem.mask
        if m is None or self.policy.mask_kind != "additive":
            return None
        return list(m[b, h, i])

    def scores(self, b: int, h: int):
        """The exact raw scores ``query @ key^T`` of one head as an L x S ``fmpq_mat``."""
        key = (b, h)
        if key not in self._scores:
            from flint import fmpq_mat
            Q = fmpq_mat(self.L, self.E, [_fq(x) for x in self.problem.query[b, h].reshape(-1)])
            K = self._kv_mats(b, self.kv(h))[0]
            self._scores[key] = Q * K.transpose()
        return self._scores[key]

    def _kv_mats(self, b: int, g: int):
        if (b, g) not in self._kv:
            from flint import fmpq_mat
            K = fmpq_mat(self.S, self.E, [_fq(x) for x in self.problem.key[b, g].reshape(-1)])
            V = fmpq_mat(self.S, self.Ev, [_fq(x) for x in self.problem.value[b, g].reshape(-1)])
            self._kv[(b, g)] = (K, V)
        return self._kv[(b, g)]

    # -- exact rows -----------------------------------------------------
    def row(self, b: int, h: int, i: int) -> SoftmaxRow:
        """The exact softmax row of query i (a :class:`SoftmaxRow` or :class:`BiasedRow`)."""
        key = (b, h, i)
        if key in self._rows:
            return self._rows[key]
        S_mat = self.scores(b, h)
        vis = self.visible(b, h)[i]
        raw = [Fraction(int(S_mat[i, j].p), int(S_mat[i, j].q)) if vis[j] else None
               for j in range(self.S)]
        bias = self.bias(b, h, i)
        d2 = self.divisor_squared
        if bias is None or all(m == 0 for m, r in zip(bias, raw) if r is not None):
            row = SoftmaxRow(raw, d2, self.policy.empty_row)
        else:
            root = Fraction(1) if d2 is None else _rational_sqrt(d2)
            if root is not None:   # s/r + m = (s + m r)/r: still a rational gap over sqrt(D)
                row = SoftmaxRow([None if r is None else r + m * root for r, m in zip(raw, bias)],
                                 d2, self.policy.empty_row)
            else:
                row = BiasedRow(raw, [Fraction(0) if m is None else m for m in bias], d2,
                                self.policy.empty_row)
        self._rows[key] = row
        return row

    def share(self, b: int, h: int, i: int, j: int) -> ExpRatio:
        """The exact share of key j for query i of head h."""
        return self.row(b, h, i).share(j)

    def output(self, b: int, h: int, i: int, c: int) -> ExpRatio:
        """The exact output column c of query i of head h: ``sum_j shares[i][j] value[j][c]``."""
        vals = self.problem.value[b, self.kv(h), :, c]
        return self.row(b, h, i).combine(list(vals))

    def max_abs_exponent(self) -> float:
        """The largest |scale * score + mask| over visible pairs (a float, a few digits)."""
        top = 0.0
        d2 = self.divisor_squared
        scale = 1.0 if d2 is None else 1 / math.sqrt(float(d2))
        for b in range(self.B):
            for h in range(self.Hq):
                vis = self.visible(b, h)
                if not vis.any():
                    continue
                S_mat = self.scores(b, h)
                ents = S_mat.entries()
                m = self.problem.mask
                additive = m is not None and self.policy.mask_kind == "additive"
                for i, j in zip(*np.nonzero(vis)):
                    x = float(ents[i * self.S + j]) * scale
                    if additive:
                        x += float(m[b, h, i, j])
                    top = max(top, abs(x))
        return top

    def magnitude_row(self, b: int, h: int, i: int, c: int) -> ExpRatio:
        """``sum_j shares[i][j] |value[j][c]|``: the size of the terms an output adds up."""
        vals = self.problem.value[b, self.kv(h), :, c]
        return self.row(b, h, i).combine([abs(v) for v in vals])

    # -- numeric --------------------------------------------------------
    def _block_balls(self, b: int, h: int, prec: int, magnitudes: bool = False):
        """L x E_v ``arb`` balls of one head's outputs at ``prec`` bits (None for NaN rows).

        With ``magnitudes`` also the L x E_v floats ``sum_j shares_ij |value_jc|``
        (to a few digits; 0 for empty rows).
        """
        from flint import arb, arb_mat, fmpq_mat
        L, S = self.L, self.S
        vis = self.visible(b, h)
        V = self._kv_mats(b, self.kv(h))[1]
        with working_precision(prec):
            A = arb_mat(self.scores(b, h))
            if self.divisor_squared is not None:
                A = A * (1 / arb(_fq(self.divisor_squared)).sqrt())
            ents = A.entries()
            E = [arb(0)] * (L * S)
            empty = []
            for i in range(L):
                row_vis = np.flatnonzero(vis[i])
                if len(row_vis) == 0:
                    empty.append(i)
                    if self.policy.empty_row == "uniform":
                        for j in range(S):
                            E[i * S + j] = arb(1)
                    continue
                bias = self.bias(b, h, i)
                if bias is not None:
                    top = max(bias[j] for j in row_vis)
                    for j in row_vis:
                        E[i * S + j] = (ents[i * S + j] + arb(_fq(bias[j] - top))).exp()
                else:
                    for j in row_vis:
                        E[i * S + j] = ents[i * S + j].exp()
            Em = arb_mat(L, S, E)
            N = Em * arb_mat(V)
            den = Em * arb_mat(S, 1, [1] * S)
            out = [[None] * self.Ev for _ in range(L)]
            for i in range(L):
                if i in empty and self.policy.empty_row == "nan":
                    continue
                if i in empty and self.policy.empty_row == "zero":
                    out[i] = [arb(0)] * self.Ev
                    continue
                d = den[i, 0]
                out[i] = [N[i, c] / d for c in range(self.Ev)]
            if not magnitudes:
                return out
            Va = fmpq_mat(S, self.Ev, [abs(x) for x in V.entries()])
            M = Em * arb_mat(Va)
            mags = np.zeros((L, self.Ev))
            for i in range(L):
                if out[i][0] is None or (i in empty and self.policy.empty_row == "zero"):
                    continue
                d = den[i, 0]
                mags[i] = [float((M[i, c] / d).mid()) for c in range(self.Ev)]
        return out, mags

    def rounded_outputs(self, dtype: str, *, prec: int = 96):
        """Every output correctly rounded to ``dtype``, with its final enclosure.

        Returns ``(rounded, balls, magnitudes)``: ``rounded`` a float64 array
        of the problem's output shape (B x H_q x L x E_v) holding floats of the
        dtype (NaN where the policy's answer is NaN); ``balls`` the ``arb`` ball
        (or ``None`` for NaN) each was decided from, for the relative error;
        ``magnitudes`` the size of the terms each output adds up,
        ``sum_j shares_ij |value_jc|`` (a float, a few digits).
        """
        fmt = _fmt(dtype)
        prec = max(prec, fmt.precision + 64)
        shape = (self.B, self.Hq, self.L, self.Ev)
        rounded = np.empty(shape, dtype=np.float64)
        balls = np.empty(shape, dtype=object)
        mags = np.zeros(shape)
        for b in range(self.B):
            for h in range(self.Hq):
                todo = [(i, c) for i in range(self.L) for c in range(self.Ev)]
                p = prec
                for attempt in range(3):   # the whole block at p, 2p, 4p bits
                    if attempt == 0:
                        blk, mags[b, h] = self._block_balls(b, h, p, magnitudes=True)
                    else:
                        blk = self._block_balls(b, h, p)
                    left = []
                    for i, c in todo:
                        ball = blk[i][c]
                        if ball is None:   # the policy's NaN row
                            rounded[b, h, i, c] = math.nan
                            continue
                        f = _decide(ball, fmt, p)
                        if f is None:
                            left.append((i, c))
                            continue
                        rounded[b, h, i, c] = f
                        balls[b, h, i, c] = ball
                    todo = left
                    if len(todo) <= 8:
                        break
                    p *= 2
                for i, c in todo:          # rational ties and stragglers, one by one
                    f, ball = self._round_exact(self.output(b, h, i, c), fmt, 2 * p)
                    rounded[b, h, i, c] = f
                    balls[b, h, i, c] = ball
        return rounded, balls, mags

    @staticmethod
    def _round_exact(value: ExpRatio, fmt: FloatFormat, prec: int):
        """Round one exact ratio to ``fmt`` by tightening its enclosure; exactly if it is rational."""
        from flint import arb
        q = value.rational()
        if q is not None:
            return round_to_format(q, fmt), arb(_fq(q))
        while True:  # transcendental: never on a rounding boundary, so this ends
            with working_precision(prec):
                ball = value.ball(prec)
                f = _decide(ball, fmt, prec)
            if f is not None:
                return f, ball
            prec *= 2


def _decide(ball, fmt: FloatFormat, prec: int) -> float | None:
    """The float both ends of ``ball`` round to, or None if they differ.

    The ends are taken at ``prec`` bits (rounded outwards), so ``prec`` must
    be the precision the ball was computed at.
    """
    if not ball.is_finite():
        return None
    if ball.rad() == 0:
        return round_to_format(ball, fmt)
    with working_precision(prec):
        lo_m, lo_e = ball.lower().man_exp()
        hi_m, hi_e = ball.upper().man_exp()
    lo = _round_scaled(int(lo_m), int(lo_e), 1, fmt)
    hi = _round_scaled(int(hi_m), int(hi_e), 1, fmt)
    if lo == hi and (lo != 0 or math.copysign(1, lo) == math.copysign(1, hi)):
        return lo
    return None


# ---------------------------------------------------------------- the check and its report

def certified_scientific(value: ExpRatio, digits: int = 9) -> str:
    """The value to ``digits`` significant digits, correctly rounded (``d.ddde+-XX``).

    >>> from exactattn.softmax import SoftmaxRow
    >>> certified_scientific(SoftmaxRow([Fraction(100), Fraction(99)], None).share(0), 10)
    '7.310585786e-01'
    """
    if value.row.nan:
        return "nan"
    q = value.rational()
    if q == 0:
        return "0"
    from flint import arb
    if q is not None:
        def ball(prec):
            return arb(_fq(q))
    else:
        ball = value.ball
    with working_precision(64):
        approx = ball(64)
        lo = abs(float(approx.mid()))
    k = math.floor(math.log10(lo))
    for _ in range(3):
        shift = digits - 1 - k
        text = certify(lambda prec: ball(prec) * arb(10) ** shift, 0,
                       exact=None if q is None else (lambda: q * Fraction(10) ** shift))
        mant = text.lstrip("-")
        if len(mant) == digits:
            sign = "-" if text.startswith("-") else ""
            return f"{sign}{mant[0]}.{mant[1:]}e{k:+03d}" if digits > 1 else f"{sign}{mant}e{k:+03d}"
        k += 1 if len(mant) > digits else -1
    raise InputError(f"digits could not be placed for {value}")  # pragma: no cover


@dataclass
class Entry:
    """One output compared: where, the correctly rounded exact value, the implementation's, the error.

    ``ulps`` counts floats between ``got`` and the correctly rounded exact
    value; ``terms_ulps`` measures ``|got - exact|`` in ULPs at the size of
    the terms the output adds up, ``sum_j shares_ij |value_jc|`` (they agree
    unless values of both signs cancel).  ``status`` is ``ok`` (either count
    within the tolerance), ``over`` or ``hard``
    (NaN or infinity where the exact value is finite and rounds to a finite
    float, or a number where the policy's exact answer is NaN).
    """

    index: tuple
    rounded: float
    got: float
    ulps: int | None
    rel: float | None
    status: str
    reference: "Reference" = field(repr=False, default=None)
    terms_ulps: float | None = None

    @property
    def exact(self) -> ExpRatio:
        """The exact output as an :class:`ExpRatio` (closed form, certified decimals)."""
        b, h, i, c = self.index
        return self.reference.output(b, h, i, c)


@dataclass
class Report:
    """The result of :func:`verify`: every output compared, a summary, the cost and timings."""

    impl: str
    dtype: str
    policy: Policy
    problem: Problem
    entries: list
    max_ulps: int
    moved_inputs: int
    reference: Reference
    seconds: dict
    notes: list = field(default_factory=list)
    flops: dict | None = None

    @property
    def passed(self) -> bool:
        return all(e.status == "ok" for e in self.entries)

    def failures(self) -> list:
        return [e for e in self.entries if e.status != "ok"]

    def summary(self) -> dict:
        """count, max/mean/median ULPs, max ULPs at the terms, max relative error, over, hard."""
        ulps = [e.ulps for e in self.entries if e.ulps is not None]
        rels = [e.rel for e in self.entries if e.rel is not None]
        terms = [e.terms_ulps for e in self.entries if e.terms_ulps is not None
                 and e.status != "hard"]
        return {"dtype": self.dtype, "count": len(self.entries),
                "max_ulps": max(ulps) if ulps else None,
                "mean_ulps": (sum(ulps) / len(ulps)) if ulps else None,
                "median_ulps": sorted(ulps)[(len(ulps) - 1) // 2] if ulps else None,
                "max_terms_ulps": max(terms) if terms else None,
                "max_rel": max(rels) if rels else None,
                "over": sum(e.status == "over" for e in self.entries),
                "hard": sum(e.status == "hard" for e in self.entries)}

    def worst(self, k: int = 5) -> list:
        """Hard failures first, then the k largest ULP errors (ties in index order)."""
        def key(e):
            return (e.status != "hard", -(e.ulps if e.ulps is not None else 0))
        return sorted(self.entries, key=key)[:k]


def _terms_ulps(got: float, ball, magnitude: float, fmt: FloatFormat) -> float:
    """``|got - exact|`` in ULPs of the dtype at the terms' magnitude ``sum_j shares |values|``.

    Equal to the plain ULP error, up to rounding, when no cancellation
    happens (all values of one sign); smaller when the output is a small
    difference of large terms, where the plain count says nothing about the kernel.
    """
    from flint import arb
    if ball is None or not math.isfinite(got):
        return math.inf
    if magnitude <= 0:
        return 0.0 if got == float(ball.mid()) else math.inf
    with working_precision(96):
        err = float(abs(arb(got) - ball).mid())
    e = max(math.frexp(magnitude)[1] - 1, fmt.emin)
    return err / math.ldexp(1.0, e - fmt.precision + 1)


def _rel_error(got: float, ball) -> float | None:
    from flint import arb
    if ball is None or math.isnan(got):
        return None
    if math.isinf(got):
        return math.inf
    if ball.rad() == 0 and ball.mid() == 0:
        return 0.0 if got == 0 else math.inf
    with working_precision(96):
        r = abs((arb(got) - ball) / ball)
    return float(r.mid())


def verify(impl, problem: Problem, policy: Policy | None = None, dtype: str = "float32", *,
           max_ulps: int | None = None, prec: int = 96) -> Report:
    """Run ``impl`` on ``problem`` in ``dtype`` and compare every output with the exact one.

    The problem's entries are first rounded to ``dtype`` (counted in
    ``report.moved_inputs``); the implementation and the exact reference both
    see those floats.  An output passes when it is a number within
    ``max_ulps`` ULPs (default :func:`default_max_ulps`) of the correctly
    rounded exact value; NaN or infinity where the exact value is finite is a
    hard failure.

    Args:
        impl: an :class:`exactattn.impls.Impl`, a callable, or a name
            (``numpy``, ``numpy-naive``, ``torch``, ``module:function``).
        policy: the answer checked against (default :class:`Policy`, PyTorch's).
        dtype: ``float64``, ``float32``, ``float16`` or ``bfloat16``.

    Raises:
        InputError: an unknown dtype, a dtype the implementation does not
            run, inputs that overflow the dtype.
        ShapeError: the implementation returned the wrong shape.

    Reference: Vaswani et al. 2017, sec. 3.2.1.
    """
    from .impls import load_impl, make_call
    impl = load_impl(impl)
    fmt = _fmt(dtype)
    policy = policy or Policy()
    if problem.mask_kind is not None and problem.mask_kind != policy.mask_kind:
        policy = policy.replace(mask_kind=problem.mask_kind)
    if dtype not in impl.dtypes:
        raise InputError(f"dtype must be one of {', '.join(impl.dtypes)} for {impl.name} "
                         f"(got {dtype!r})")
    rounded_problem, moved = problem.rounded(dtype)
    sh = rounded_problem.shape
    if max_ulps is not None and (isinstance(max_ulps, bool) or not isinstance(max_ulps, int)
                                 or max_ulps < 0):
        raise InputError(f"max_ulps must be a non-negative integer (got {max_ulps!r})")
    call = make_call(rounded_problem, policy, dtype)
    t0 = time.perf_counter()
    got = np.asarray(impl(call), dtype=np.float64)
    t1 = time.perf_counter()
    want = (sh["B"], sh["H_q"], sh["L"], sh["E_v"])
    if got.size != math.prod(want) or got.shape[-2:] != want[-2:]:
        raise ShapeError(f"{impl.name}'s output must be {' x '.join(map(str, want[4 - problem.rank:]))}"
                         f" (got {' x '.join(map(str, got.shape))})")
    got = got.reshape(want)
    ref = Reference(rounded_problem, policy)
    tol = default_max_ulps(dtype, sh["S"], sh["E"], ref.max_abs_exponent()) \
        if max_ulps is None else max_ulps
    rounded, balls, mags = ref.rounded_outputs(dtype, prec=prec)
    t2 = time.perf_counter()
    entries, off_format = [], 0
    for idx in np.ndindex(*want):
        g, r = float(got[idx]), float(rounded[idx])
        if math.isnan(r):
            status = "ok" if math.isnan(g) else "hard"
            entries.append(Entry(idx, r, g, None, None, status, ref))
            continue
        if math.isnan(g) or (math.isinf(g) and g != r):
            entries.append(Entry(idx, r, g, None, math.inf if math.isinf(g) else None,
                                 "hard", ref))
            continue
        gf = round_to_format(Fraction(g), fmt) if math.isfinite(g) else g
        if gf != g:
            off_format += 1
        u = ulps_between(gf, r, fmt)
        t = _terms_ulps(g, balls[idx], float(mags[idx]), fmt)
        entries.append(Entry(idx, r, g, u, _rel_error(g, balls[idx]),
                             "ok" if u <= tol or t <= tol else "over", ref, t))
    notes = []
    if off_format:
        notes.append(f"{off_format} outputs were not {dtype} values; they were rounded to "
                     f"{dtype} before counting ULPs")
    t3 = time.perf_counter()
    return Report(impl.name, dtype, policy, rounded_problem, entries, tol, moved, ref,
                  {"impl": t1 - t0, "exact": t2 - t1, "compare": t3 - t2}, notes)


# ---------------------------------------------------------------- spec files

SPEC_KEYS = ("name", "dtype", "policy", "query", "key", "value", "mask")


def _fraction_text(q: Fraction) -> str:
    return str(q)


def spec_text(problem: Problem, policy: Policy | None = None, dtype: str | None = None) -> str:
    """A verify spec file (JSON) for ``problem``: exact numbers as strings, the policy, the dtype.

    >>> p = Problem.from_arrays([["1/2"]], [[1]], [[3]])
    >>> print(spec_text(p, Policy(), "float32"))
    {
      "name": "problem",
      "dtype": "float32",
      "policy": {"scale": "default", "causal": false, "alignment": "top_left", "empty_row": "zero", "mask_kind": "bool_keep", "gqa": "interleave"},
      "query": [["1/2"]],
      "key": [["1"]],
      "value": [["3"]]
    }
    """
    def arr(a):
        a = a.reshape(a.shape[4 - problem.rank:]) if problem.rank < 4 else a
        return json.dumps(np.vectorize(_fraction_text, otypes=[object])(a).tolist())
    policy = policy or Policy()
    lines = [f'  "name": {json.dumps(problem.name)}']
    if dtype:
        lines.append(f'  "dtype": {json.dumps(dtype)}')
    lines.append(f'  "policy": {json.dumps(policy.as_dict())}')
    for name in ("query", "key", "value"):
        lines.append(f'  "{name}": {arr(getattr(problem, name))}')
    if problem.mask is not None:
        m = problem.mask
        vals = np.vectorize(lambda x: x if isinstance(x, bool) else
                            ("-inf" if x is None else str(x)), otypes=[object])(m)
        lines.append(f'  "mask": {{"kind": {json.dumps(problem.mask_kind)}, '
                     f'"values": {json.dumps(vals.tolist())}}}')
    return "{\n" + ",\n".join(lines) + "\n}"


def load_spec(path: str | Path) -> tuple[Problem, Policy, str | None]:
    """Read a verify spec file (JSON, or TOML by suffix): ``(problem, policy, dtype)``.

    Keys: ``query``, ``key``, ``value`` (required; 2, 3 or 4 dimensional
    lists of exact numbers: integers, strings ``"1/2"``, decimals read from
    their text), ``mask`` (``{"kind": ..., "values": [...]}``; ``"-inf"`` hides
    a key in an additive mask), ``policy`` (the fields of :class:`Policy`),
    ``dtype`` and ``name``.

    Raises:
        SpecError: a missing, unreadable or malformed file, an unknown key.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"spec file {str(p)!r} does not exist; check the path") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"spec file {str(p)!r} could not be read ({e.__class__.__name__})") from None
    try:
        if p.suffix.lower() == ".toml":
            doc = tomllib.loads(text, parse_float=str)
        else:
            doc = json.loads(text, parse_float=str)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        raise SpecError(f"{p}: not valid {'TOML' if p.suffix.lower() == '.toml' else 'JSON'} "
                        f"({e}); check the file is complete") from None
    return spec_from_mapping(doc, where=str(p))


def spec_from_mapping(doc, *, where: str = "spec") -> tuple[Problem, Policy, str | None]:
    """The ``(problem, policy, dtype)`` of a parsed spec document (see :func:`load_spec`)."""
    if not isinstance(doc, dict):
        raise SpecError(f"{where}: the top level must be an object (got {type(doc).__name__})")
    unknown = sorted(set(doc) - set(SPEC_KEYS))
    if unknown:
        raise SpecError(f"{where}: unknown key {unknown[0]!r}; the keys are {', '.join(SPEC_KEYS)}")
    for key in ("query", "key", "value"):
        if key not in doc:
            raise SpecError(f"{where}: {key} is missing; a verify spec needs query, key and value")
    pol = doc.get("policy", {})
    if not isinstance(pol, dict):
        raise SpecError(f"{where}: policy must be an object (got {pol!r})")
    fields = ("scale", "causal", "alignment", "empty_row", "mask_kind", "gqa")
    bad = sorted(set(pol) - set(fields))
    if bad:
        raise SpecError(f"{where}: unknown policy key {bad[0]!r}; the keys are {', '.join(fields)}")
    mask, kind = None, pol.get("mask_kind", "bool_keep")
    if "mask" in doc:
        m = doc["mask"]
        if not isinstance(m, dict) or "values" not in m:
            raise SpecError(f'{where}: mask must be {{"kind": ..., "values": [...]}} (got {m!r})')
        kind = m.get("kind", kind)
        mask = m["values"]
    policy = Policy(**{**pol, "mask_kind": kind})
    dtype = doc.get("dtype")
    if dtype is not None:
        _fmt(dtype)
    problem = Problem.from_arrays(doc["query"], doc["key"], doc["value"], mask, mask_kind=kind,
                                  name=str(doc.get("name", where)))
    return problem, policy, dtype


# ---------------------------------------------------------------- rendering

def shortest_repr(x: float, dtype: str | FloatFormat) -> str:
    """The shortest decimal that rounds back to the float ``x`` of ``dtype``.

    >>> shortest_repr(0.7310585975646973, "float32"), shortest_repr(0.333984375, "bfloat16")
    ('0.7310586', '0.334')
    """
    fmt = _fmt(dtype)
    if not math.isfinite(x):
        return repr(x)
    for k in range(1, 18):
        text = f"{x:.{k}g}"
        if round_to_format(Fraction(text), fmt) == x:
            return text
    return repr(x)  # pragma: no cover


def _g(x, spec: str = ".3g") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return format(x, spec)


def report_sections(reports: Sequence[Report], *, worst: int = 5, digits: int = 12) -> list:
    """The tables of one or more reports: the worst outputs of each, a summary per dtype, the cost.

    Exact values are printed with ``digits`` significant digits, certified
    (correctly rounded); "exact in <dtype>" is the correctly rounded float
    the ULPs are counted from.
    """
    from .tables import Section
    sections = []
    for r in reports:
        rows = []
        for e in r.worst(worst):
            exact = certified_scientific(e.exact, digits)
            rows.append([",".join(map(str, e.index)), exact, shortest_repr(e.rounded, r.dtype),
                         shortest_repr(e.got, r.dtype), _g(e.ulps, "d"),
                         _g(e.terms_ulps, ".2f"), _g(e.rel), e.status])
        sh = r.problem.shape
        notes = [
            f"problem: {r.problem.name}; B={sh['B']} H_q={sh['H_q']} H_kv={sh['H_kv']} "
            f"L={sh['L']} S={sh['S']} E={sh['E']} E_v={sh['E_v']}; inputs rounded to "
            f"{r.dtype}: {r.moved_inputs} of {sum(getattr(r.problem, n).size for n in ('query', 'key', 'value'))}",
            f"policy: {r.policy.describe()}",
            f"exact: certified to {digits} significant digits; 'exact in {r.dtype}' is the exact "
            f"value correctly rounded to {r.dtype} (arb enclosures, round-to-nearest-even, "
            "subnormals, overflow to inf)",
            f"ULPs: {r.dtype} floats between the implementation's value and 'exact in "
            f"{r.dtype}'; at terms: |error| in ULPs at sum_j shares |values| (cancellation)",
            f"tolerance: {r.max_ulps} ULPs by either count (2*ceil(sqrt(S + d_k)) + 4 + "
            "ceil(max |scaled score|) unless set); NaN/inf where the exact value is "
            "finite is a hard failure",
        ] + r.notes
        sections.append(Section(
            f"verify-{r.dtype}", f"{r.impl} in {r.dtype}: the {min(worst, len(r.entries))} "
            "worst outputs against the exact answer",
            ["output b,h,i,c", "exact (certified)", f"exact in {r.dtype}", r.impl.split(" ")[0],
             "ULPs", "at terms", "rel. error", "status"], rows, notes,
            data={"summary": r.summary()}))
    rows = []
    for r in reports:
        s = r.summary()
        rows.append([s["dtype"], str(s["count"]), _g(s["max_ulps"], "d"), _g(s["mean_ulps"], ".2f"),
                     _g(s["median_ulps"], "d"), _g(s["max_terms_ulps"], ".2f"),
                     _g(s["max_rel"]), str(s["over"]), str(s["hard"]),
                     f"{r.seconds['impl']:.2f}/{r.seconds['exact']:.2f}"])
    verdict = "PASS" if all(r.passed for r in reports) else "FAIL"
    sections.append(Section(
        "verify-summary", "Summary per dtype",
        ["dtype", "outputs", "max ULPs", "mean ULPs", "median ULPs", "max at terms",
         "max rel. error", "over tolerance", "hard failures", "seconds impl/exact"], rows,
        [f"result: {verdict}"]))
    r = reports[0]
    macs = r.reference.macs
    cost_rows = [["exactattn (visible pairs, counted)", f"{macs['scores']}", f"{macs['mix']}",
                  f"{macs['scores'] + macs['mix']}", f"{2 * (macs['scores'] + macs['mix'])}"]]
    notes = [f"visible pairs: {r.reference.pairs}; MACs = pairs x E (scores) + pairs x E_v "
             "(mix); FLOPs = 2 per MAC"]
    sh = r.problem.shape
    derived = _derived_macs(r)
    if derived is not None:
        cost_rows.append(["exactattn.cost.derive_at (from the loop bounds)", str(derived[0]),
                          str(derived[1]), str(sum(derived)), str(2 * sum(derived))])
    rect = 2 * sh["B"] * sh["H_q"] * sh["L"] * sh["S"] * (sh["E"] + sh["E_v"])
    for rr in reports:
        if not rr.flops:
            continue
        for label, fl in rr.flops.items():
            cost_rows.append([f"FlopCounterMode, {label} path ({rr.dtype})", "-", "-", "-", str(fl)])
        for label, fl in rr.flops.items():
            if fl == 0:
                notes.append(f"FlopCounterMode counted 0 FLOPs on the {label} path: the kernel "
                             "that ran has no registered FLOP formula")
            elif fl == rect:
                notes.append(f"FlopCounterMode's {label} path counts the full L x S rectangle "
                             f"({rect} FLOPs): no causal or mask discount; exactattn counts "
                             f"{r.reference.pairs} visible pairs of {sh['B'] * sh['H_q'] * sh['L'] * sh['S']}")
            else:
                notes.append(f"FlopCounterMode's {label} path counts {fl} FLOPs; the full "
                             f"rectangle is {rect}")
        break
    sections.append(Section("verify-cost", "Cost of the call", [
        "count", "scores MACs", "mix MACs", "MACs", "FLOPs"], cost_rows, notes))
    return sections


def _derived_macs(report: Report) -> tuple[int, int] | None:
    """Scores and mix MACs from :func:`exactattn.cost.derive_at` (no mask only), else None."""
    if report.problem.mask is not None:
        return None
    try:
        from .cost import derive_at
        sh, pol = report.problem.shape, report.policy
        got = derive_at(sh["L"], 1, sh["E"], sh["E_v"], causal=pol.causal,
                        alignment=pol.alignment.replace("_", "-"), keys=sh["S"],
                        heads=sh["H_q"])
    except (ImportError, AttributeError, TypeError, InputError):
        return None
    return sh["B"] * got["scores"], sh["B"] * got["mix"]


def flop_counts(problem: Problem, policy: Policy, dtype: str) -> dict:
    """FLOPs ``torch.utils.flop_counter.FlopCounterMode`` reports for the SDPA call of ``problem``.

    Returns ``{"fused": ..., "math": ...}``: the default CPU kernel and the
    decomposed math backend (``sdpa_kernel(SDPBackend.MATH)``).

    Raises:
        InputError: torch is not installed.
    """
    from .impls import TorchImpl, make_call
    impl = TorchImpl(lower_right_bias=False)
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    rounded, _ = problem.rounded(dtype)
    call = make_call(rounded, policy, dtype)
    out = {}
    with FlopCounterMode(display=False) as fc:
        impl(call)
    out["fused"] = int(fc.get_total_flops())
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        impl(call)
    out["math"] = int(fc.get_total_flops())
    del torch
    return out


# ---------------------------------------------------------------- the search

@dataclass
class SearchResult:
    """The worst input a search found, shrunk: the problem, its report, and the score searched on."""

    problem: Problem
    report: Report
    score: float
    measure: str
    examples: int
    unshrunk_score: float


def _score(report: Report, measure: str) -> float:
    if any(e.status == "hard" for e in report.entries):
        return float(2 ** 63)
    vals = [(e.ulps if measure == "ulps" else e.terms_ulps) for e in report.entries]
    vals = [v for v in vals if v is not None]
    return float(max(vals)) if vals else 0.0


def search(impl, dtype: str = "float32", policy: Policy | None = None, *, examples: int = 100,
           seed: int = 0, max_size: int = 4, measure: str = "ulps",
           max_ulps: int | None = None) -> SearchResult:
    """Search with Hypothesis for the input with the largest error, and shrink it to a small reproducer.

    Inputs: L, S, E in 1..max_size, E_v in 1..2, entries k/8 for integers
    |k| <= 64 (floats of every dtype, so nothing is rounded).  A first run
    of ``examples`` inputs steers towards large errors with
    ``hypothesis.target`` (score: the largest ULP error, ``measure="ulps"``,
    or the largest error at the terms' magnitude, ``"terms"``; a hard failure
    scores 2**63); a second run with the same seed fails on any input scoring
    at least that much, so Hypothesis shrinks it (fewer tokens, narrower
    heads, smaller numbers).  Print the result with :func:`spec_text`.

    Raises:
        InputError: a bad ``examples``, ``max_size`` or ``measure``.
    """
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings, target
    from hypothesis import seed as hseed
    from hypothesis import strategies as st
    from .impls import load_impl
    for name, v in (("examples", examples), ("max_size", max_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"{name} must be a positive integer (got {v!r})")
    if measure not in ("ulps", "terms"):
        raise InputError(f"measure must be ulps or terms (got {measure!r})")
    impl = load_impl(impl)
    _fmt(dtype)
    policy = policy or Policy()
    entry = st.integers(-64, 64).map(lambda k: Fraction(k, 8))

    def matrix(draw, rows, cols):
        return draw(st.lists(st.lists(entry, min_size=cols, max_size=cols),
                             min_size=rows, max_size=rows))

    @st.composite
    def problems(draw):
        L, S, E = (draw(st.integers(1, max_size)) for _ in range(3))
        Ev = draw(st.integers(1, 2))
        return Problem.from_arrays(matrix(draw, L, E), matrix(draw, S, E), matrix(draw, S, Ev),
                                   name=f"search worst case ({impl.name.split(' ')[0]}, {dtype})")

    cache: dict = {}

    def score(p: Problem):
        key = spec_text(p)
        if key not in cache:
            r = verify(impl, p, policy, dtype, max_ulps=max_ulps)
            cache[key] = (_score(r, measure), r)
        return cache[key]

    common = dict(database=None, deadline=None, derandomize=False, verbosity=Verbosity.quiet,
                  suppress_health_check=list(HealthCheck), max_examples=examples)
    best = {"score": -1.0, "problem": None}

    @hseed(seed)
    @settings(phases=[Phase.generate, Phase.target], **common)
    @given(problems())
    def explore(p):
        s = score(p)[0]
        target(s, label=measure)
        if s > best["score"]:
            best.update(score=s, problem=p)

    explore()

    class _Found(Exception):
        pass
    last: dict = {}

    @hseed(seed)
    @settings(phases=[Phase.generate, Phase.target, Phase.shrink], **common)
    @given(problems())
    def shrink(p):
        s = score(p)[0]
        target(s, label=measure)
        if s >= best["score"]:
            last["problem"] = p
            raise _Found()

    try:
        shrink()
    except _Found:
        pass
    except BaseExceptionGroup as group:  # several distinct failures: still ours
        if group.subgroup(_Found) is None or group.subgroup(lambda e: not isinstance(e, _Found)):
            raise
    final = last.get("problem") or best["problem"]
    s, report = score(final)
    return SearchResult(final, report, s, measure, examples, best["score"])
