"""An independent oracle for one attention call: the ground truth of the differential tests.

It shares no code with ``exactattn`` (nothing from the package is imported, not even its
errors or constants).  It reads a call as plain data (a ``case`` dict whose numbers are strings
of exact rationals), keeps every rational step as a ``fractions.Fraction`` and does every
transcendental step (exp, log, sqrt, cos, sin, tanh, irrational powers) in mpmath's rigorous
interval arithmetic ``mpmath.iv``.  A decimal (or a float of a binary format) is returned only
when the enclosure decides it; otherwise the precision is doubled up to a cap, and past the cap
the answer is ``UNDECIDED`` (None): the oracle never guesses.

Rules, each from its textbook definition (the source is cited where the rule is used):

* attention (Vaswani et al. 2017, sec. 3.2.1): logits ``q.k / sqrt(D)``, shares ``softmax``
  row by row, outputs ``P V``;
* logit order (FlashAttention 2, Dao 2023; Gemma 2 soft-capping, Gemma Team 2024): raw score
  (RoPE first), scale, ``cap * tanh(x / cap)``, + ALiBi bias + additive mask, hidden keys
  dropped, softmax with the sink in the normaliser, dropout weights ``P * keep / (1 - p)``;
* ALiBi (Press et al. 2022, "Train Short, Test Long", sec. 3 and their reference code's
  ``get_slopes`` for head counts that are not powers of two);
* RoPE (Su et al. 2021, "RoFormer", eq. 34: angle ``m * theta^(-2(i-1)/d)``);
* attention sinks (Xiao et al. 2023; "softmax plus one": one extra term in the normaliser);
* backward (Dao et al. 2022, FlashAttention, Algorithm 4 / Appendix B.2):
  ``dV = W^T dO``, ``dP = M * (dO V^T)``, ``D_i = sum_j P_ij dP_ij``, ``dS = P * (dP - D)``,
  ``dQ = scale dS K``, ``dK = scale dS^T Q``; by the chain rule through the other steps: an
  upstream ``d_lse`` adds ``P_ij d_lse_i`` to dS (``d lse_i / d x_ij = P_ij``), a soft-cap
  multiplies dS by ``d(cap tanh(s / cap))/ds = 1 - tanh^2(s / cap)``, and RoPE's score
  ``(R_i q_i).(R_j k_j)`` gives ``dQ_i = R_i^T scale sum_j dS_ij R_j k_j`` (likewise dK);
* binary rounding (IEEE 754-2019, sec. 4.3.1 and 7.4): round to nearest, ties to even,
  gradual underflow, overflow to infinity.

Interface::

    o = Oracle(case)
    o.names(); o.shape(name)
    o.decimal(name, index, places)   # str | None | "nan"
    o.float(name, index, fmt)        # float | None | "nan"
    o.undecided                      # how many calls returned None
"""

from fractions import Fraction
import math

from mpmath import iv

UNDECIDED = None
NAN = "nan"
CAP_BITS = 4096
NEG_INF = float("-inf")

# (precision p in bits, smallest normal exponent emin, largest exponent emax)
FORMATS = {
    "float16": (11, -14, 15),
    "bfloat16": (8, -126, 127),
    "float32": (24, -126, 127),
    "float64": (53, -1022, 1023),
}

_ALIBI_FORMS = ("relative", "absolute", "symmetric")


# ----------------------------------------------------------------------------- reading the case

def _rational(x, where):
    """An exact rational from a string ("1/2", "-3", "0.75"), an int or a Fraction."""
    if isinstance(x, bool):
        raise ValueError(f"{where}: expected a number, got a boolean")
    if isinstance(x, Fraction):
        return x
    if isinstance(x, int):
        return Fraction(x)
    if isinstance(x, str):
        try:
            return Fraction(x.strip())
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"{where}: not an exact rational: {x!r}") from None
    raise ValueError(f"{where}: numbers must be strings of exact rationals, got {x!r}")


def _nested(x, depth, where, leaf):
    """Read a rectangular nested list of the given depth; returns (data, shape)."""
    if depth == 0:
        return leaf(x, where), ()
    if not isinstance(x, (list, tuple)):
        raise ValueError(f"{where}: expected a list")
    rows, shape = [], None
    for n, item in enumerate(x):
        data, sub = _nested(item, depth - 1, f"{where}[{n}]", leaf)
        if shape is None:
            shape = sub
        elif sub != shape:
            raise ValueError(f"{where}: ragged (entry {n} has shape {sub}, expected {shape})")
        rows.append(data)
    if shape is None:
        shape = (0,) * (depth - 1)
    return rows, (len(rows),) + shape


def _boolean(x, where):
    if not isinstance(x, bool):
        raise ValueError(f"{where}: expected true or false, got {x!r}")
    return x


def _additive(x, where):
    return None if x is None else _rational(x, where)


def _int(x, where, minimum=None):
    if isinstance(x, bool) or not isinstance(x, int):
        raise ValueError(f"{where}: expected an integer, got {x!r}")
    if minimum is not None and x < minimum:
        raise ValueError(f"{where}: must be at least {minimum}, got {x}")
    return x


def _choice(case, key, options):
    value = case.get(key, options[0])
    if value not in options:
        raise ValueError(f"{key}: expected one of {options}, got {value!r}")
    return value


def _exact_sqrt(q):
    """sqrt(q) as a Fraction when q is the square of a rational, else None."""
    a, b = math.isqrt(q.numerator), math.isqrt(q.denominator)
    if a * a == q.numerator and b * b == q.denominator:
        return Fraction(a, b)
    return None


def alibi_exponents(heads):
    """ALiBi slopes as exponents e (slope = 2^-e), Press et al. 2022, sec. 3: for h a power of
    two the slopes are 2^(-8k/h), k = 1..h; otherwise the slopes of the closest lower power of
    two P, then every other slope (0th, 2nd, ...) of the rule for 2P (their ``get_slopes``)."""
    def rule(h):
        return [Fraction(8 * k, h) for k in range(1, h + 1)]
    if heads & (heads - 1) == 0:
        return rule(heads)
    p = 1 << (heads.bit_length() - 1)
    return rule(p) + rule(2 * p)[0::2][:heads - p]


# ----------------------------------------------------------------------------- interval helpers

def _iv(x):
    """An enclosure of a Fraction (or an interval unchanged) at the current precision."""
    if isinstance(x, Fraction):
        if x.denominator == 1:
            return iv.mpf(x.numerator)
        return iv.mpf(x.numerator) / iv.mpf(x.denominator)
    return x


def _hull(xs):
    """The smallest interval holding every interval of ``xs`` (ends compared exactly)."""
    lo, hi = xs[0].a, xs[0].b
    for x in xs[1:]:
        lo, hi = (x.a if x.a < lo else lo), (x.b if x.b > hi else hi)
    return iv.mpf([lo, hi])


def _is_nan(x):
    return isinstance(x, str) and x == NAN


def _add(a, b):
    """a + b, exact when both are Fractions; NaN propagates."""
    if _is_nan(a) or _is_nan(b):
        return NAN
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        return a + b
    if isinstance(a, Fraction) and a == 0:
        return b
    if isinstance(b, Fraction) and b == 0:
        return a
    return _iv(a) + _iv(b)


def _mul(a, b):
    """a * b, exact when both are Fractions or either is an exact 0 (and not NaN)."""
    if _is_nan(a) or _is_nan(b):
        return NAN
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        return a * b
    if (isinstance(a, Fraction) and a == 0) or (isinstance(b, Fraction) and b == 0):
        return Fraction(0)
    return _iv(a) * _iv(b)


def _sum(items):
    total = Fraction(0)
    for x in items:
        total = _add(total, x)
    return total


def _raw_fraction(raw):
    """The exact value of an mpmath raw mpf tuple (sign, man, exp, bc); None if not finite."""
    sign, man, exp, bc = raw
    if man == 0:
        return Fraction(0) if bc == 0 else None   # (0, 0, 0, 0) is zero; the rest inf / nan
    value = Fraction(man) * (Fraction(2) ** exp)
    return -value if sign else value


def _ends(x):
    """The two ends of an interval as Fractions (None for an infinite end)."""
    lo, hi = x._mpi_
    return _raw_fraction(lo), _raw_fraction(hi)


def _tanh(z):
    """tanh(z) = 1 - 2 / (exp(2z) + 1): z occurs once, so the enclosure is rigorous and tight."""
    return 1 - 2 / (iv.exp(2 * z) + 1)


# ----------------------------------------------------------------------------- rounding

def _decimal_text(k, places):
    if places == 0:
        return str(k)
    digits = str(abs(k)).rjust(places + 1, "0")
    text = digits[:-places] + "." + digits[-places:]
    return ("-" + text) if k < 0 else text


def _round_places(fr, places):
    """(nearest integer to fr * 10^places with ties to even, whether it was a tie)."""
    scaled = fr * 10 ** places
    tie = (scaled - math.floor(scaled)) == Fraction(1, 2)
    return round(scaled), tie


def _round_format(fr, fmt):
    """fr rounded to the binary format (IEEE 754 round to nearest, ties to even, gradual
    underflow, overflow to infinity): (float, whether fr was a tie of the format)."""
    p, emin, emax = FORMATS[fmt]
    if fr == 0:
        return 0.0, False
    negative = fr < 0
    a = -fr if negative else fr
    e = a.numerator.bit_length() - a.denominator.bit_length()   # 2^e <= a < 2^(e+2)
    if Fraction(2) ** e > a:
        e -= 1
    elif Fraction(2) ** (e + 1) <= a:
        e += 1
    quantum = max(e, emin) - (p - 1)                              # exponent of one ulp
    scaled = a / (Fraction(2) ** quantum)
    tie = (scaled - math.floor(scaled)) == Fraction(1, 2)
    n = round(scaled)                                             # ties to even
    value = n * Fraction(2) ** quantum
    if value >= Fraction(2) ** (emax + 1):
        result = math.inf
    else:
        result = float(value)                                     # exact: value is a double
    return (-result if negative else result), tie


# ----------------------------------------------------------------------------- the oracle

class Oracle:
    """The exact answer of one attention call, read from a plain-data ``case``."""

    def __init__(self, case):
        if not isinstance(case, dict):
            raise ValueError("case must be a dict")
        self.undecided = 0
        self._cache = {}
        self._read(case)

    # ------------------------------------------------------------------ parsing

    def _read(self, case):
        for key in ("query", "key", "value"):
            if key not in case:
                raise ValueError(f"case has no {key!r}")
        self.q, (B, H, L, E) = _nested(case["query"], 4, "query", _rational)
        self.k, (Bk, Hkv, S, Ek) = _nested(case["key"], 4, "key", _rational)
        self.v, (Bv, Hv, Sv, Ev) = _nested(case["value"], 4, "value", _rational)
        if min(B, H, L, E, Hkv, S, Ev) < 1:
            raise ValueError("every dimension of query, key and value must be at least 1")
        if (Bk, Ek) != (B, E):
            raise ValueError(f"key shape {(Bk, Hkv, S, Ek)} does not fit query {(B, H, L, E)}")
        if (Bv, Hv, Sv) != (B, Hkv, S):
            raise ValueError(f"value shape {(Bv, Hv, Sv, Ev)} does not fit key {(Bk, Hkv, S, Ek)}")
        if H % Hkv:
            raise ValueError(f"{H} query heads cannot share {Hkv} key/value heads")
        self.B, self.H, self.L, self.E, self.Hkv, self.S, self.Ev = B, H, L, E, Hkv, S, Ev
        G = H // Hkv

        self.causal = case.get("causal", False)
        if not isinstance(self.causal, bool):
            raise ValueError("causal must be true or false")
        alignment = _choice(case, "alignment", ("top_left", "bottom_right"))
        self.empty_row = _choice(case, "empty_row", ("zero", "uniform", "nan"))
        gqa = _choice(case, "gqa", ("interleave", "tile"))
        # GQA: interleave = repeat_interleave (h // G), tile = repeat (h % Hkv)
        self.kv = [h // G if gqa == "interleave" else h % Hkv for h in range(H)]

        # scale: logits divided by sqrt(D)
        scale = case.get("scale", "default")
        if scale == "default":
            D = Fraction(E)
        elif scale == "none":
            D = Fraction(1)
        elif isinstance(scale, dict) and "divisor_squared" in scale:
            D = _rational(scale["divisor_squared"], "scale.divisor_squared")
            if D <= 0:
                raise ValueError("scale.divisor_squared must be positive")
        else:
            raise ValueError(f"scale: expected 'default', 'none' or {{'divisor_squared': ...}}, got {scale!r}")
        self.D = D
        root = _exact_sqrt(D)
        self.scale_exact = None if root is None else 1 / root

        offset = case.get("query_offset")
        if offset is not None:
            offset = _int(offset, "query_offset")
        if offset is not None:
            self.pos = [offset + i for i in range(L)]
        elif alignment == "bottom_right":
            self.pos = [i + S - L for i in range(L)]
        else:
            self.pos = list(range(L))

        window = case.get("window")
        if window is not None:
            if not isinstance(window, (list, tuple)) or len(window) != 2:
                raise ValueError("window must be [left, right]")
            window = tuple(None if w is None else _int(w, "window", 0) for w in window)
        self.window = window

        mask = case.get("mask")
        self.mask_kind, self.mask = None, None
        if mask is not None:
            if not isinstance(mask, dict) or "rows" not in mask:
                raise ValueError("mask must be {'kind': ..., 'rows': [B][H][L][S]}")
            kind = mask.get("kind")
            if kind not in ("bool_keep", "bool_drop", "additive"):
                raise ValueError(f"mask.kind: unknown {kind!r}")
            leaf = _additive if kind == "additive" else _boolean
            rows, shape = _nested(mask["rows"], 4, "mask.rows", leaf)
            if shape != (B, H, L, S):
                raise ValueError(f"mask.rows has shape {shape}, expected {(B, H, L, S)}")
            self.mask_kind, self.mask = kind, rows

        self.softcap = None
        if case.get("softcap") is not None:
            self.softcap = _rational(case["softcap"], "softcap")
            if self.softcap <= 0:
                raise ValueError("softcap must be positive")
        self.sink = None if case.get("sink") is None else _rational(case["sink"], "sink")

        self.head = _int(case.get("head", 0), "head", 0)
        alibi = case.get("alibi")
        self.alibi_form, self.alibi_exp = None, None
        if alibi is not None:
            if not isinstance(alibi, dict) or "heads" not in alibi:
                raise ValueError("alibi must be {'heads': n, 'form': ...}")
            heads = _int(alibi["heads"], "alibi.heads", 1)
            form = alibi.get("form", "relative")
            if form not in _ALIBI_FORMS:
                raise ValueError(f"alibi.form: unknown {form!r}")
            if self.head + H > heads:
                raise ValueError(f"model heads {self.head}..{self.head + H - 1} exceed alibi.heads = {heads}")
            exps = alibi_exponents(heads)
            self.alibi_form = form
            self.alibi_exp = [exps[self.head + h] for h in range(H)]

        rope = case.get("rope")
        self.rope_theta, self.rope_layout, self.rope_dims = None, None, None
        self.rope_scaling = None if rope is None else rope.get("scaling")
        if rope is not None:
            if not isinstance(rope, dict) or "theta" not in rope:
                raise ValueError("rope must be {'theta': ..., 'layout': ...}")
            self.rope_theta = _rational(rope["theta"], "rope.theta")
            if self.rope_theta <= 0:
                raise ValueError("rope.theta must be positive")
            self.rope_layout = rope.get("layout", "half")
            if self.rope_layout not in ("half", "interleaved"):
                raise ValueError(f"rope.layout: unknown {self.rope_layout!r}")
            self.rope_dims = rope.get("dims") or E      # partial rotary: the first dims entries
            if self.rope_dims % 2 or self.rope_dims > E:
                raise ValueError("rope needs an even rotated width within the query width")

        dropout = case.get("dropout")
        self.dropout_p, self.keep = None, None
        if dropout is not None:
            if not isinstance(dropout, dict) or "p" not in dropout or "keep" not in dropout:
                raise ValueError("dropout must be {'p': ..., 'keep': [B][H][L][S]}")
            p = _rational(dropout["p"], "dropout.p")
            if not 0 <= p < 1:
                raise ValueError("dropout.p must be in [0, 1)")
            keep, shape = _nested(dropout["keep"], 4, "dropout.keep", _boolean)
            if shape != (B, H, L, S):
                raise ValueError(f"dropout.keep has shape {shape}, expected {(B, H, L, S)}")
            self.dropout_p, self.keep = p, keep

        self.d_out = None
        if case.get("d_out") is not None:
            self.d_out, shape = _nested(case["d_out"], 4, "d_out", _rational)
            if shape != (B, H, L, Ev):
                raise ValueError(f"d_out has shape {shape}, expected {(B, H, L, Ev)}")
        self.d_lse = None
        if case.get("d_lse") is not None:
            self.d_lse, shape = _nested(case["d_lse"], 3, "d_lse", _rational)
            if shape != (B, H, L):
                raise ValueError(f"d_lse has shape {shape}, expected {(B, H, L)}")
        self.backward = self.d_out is not None
        self._exact_parts()

    def _exact_parts(self):
        """Everything rational, once: visibility, raw scores, offsets, dropout factors."""
        B, H, L, S = self.B, self.H, self.L, self.S
        self.vis, self.raw, self.offset, self.M = [], [], [], []
        for b in range(B):
            vb, rb, ob, mb = [], [], [], []
            for h in range(H):
                kvh = self.kv[h]
                vh, rh, oh, mh = [], [], [], []
                for i in range(L):
                    p = self.pos[i]
                    vi, ri, oi, mi = [], [], [], []
                    for j in range(S):
                        seen = True
                        if self.causal and j > p:
                            seen = False
                        if self.window is not None:
                            left, right = self.window
                            if left is not None and j < p - left:
                                seen = False
                            if right is not None and j > p + right:
                                seen = False
                        off = Fraction(0)
                        if self.mask is not None:
                            m = self.mask[b][h][i][j]
                            if self.mask_kind == "bool_keep":
                                seen = seen and m
                            elif self.mask_kind == "bool_drop":
                                seen = seen and not m
                            elif m is None:
                                seen = False
                            else:
                                off = m
                        vi.append(seen)
                        oi.append(off)
                        if self.rope_theta is None:
                            ri.append(sum((a * c for a, c in zip(self.q[b][h][i], self.k[b][kvh][j])),
                                          Fraction(0)))
                        if self.keep is None:
                            mi.append(Fraction(1))
                        else:
                            mi.append(Fraction(1) / (1 - self.dropout_p) if self.keep[b][h][i][j]
                                      else Fraction(0))
                    vh.append(vi); rh.append(ri); oh.append(oi); mh.append(mi)
                vb.append(vh); rb.append(rh); ob.append(oh); mb.append(mh)
            self.vis.append(vb); self.raw.append(rb); self.offset.append(ob); self.M.append(mb)

        # magnitudes, for the starting precision: bits of the largest logit and entry
        big = Fraction(1)
        for t in (self.q, self.k, self.v) + ((self.d_out,) if self.d_out is not None else ()):
            for x in _flatten(t):
                big = max(big, abs(x))
        qn = max((sum(abs(x) for x in row) for row in _rows(self.q)), default=Fraction(0))
        kn = max((sum(abs(x) for x in row) for row in _rows(self.k)), default=Fraction(0))
        logit = qn * kn + abs(self.sink or 0) + max(self.pos + [self.S]) + self.S
        logit += max((abs(o) for o in _flatten(self.offset)), default=0)
        self.mag_bits = (math.ceil(logit).bit_length() + 2 * math.ceil(big).bit_length()
                         + max(self.S, self.L).bit_length() + 8)

    # ------------------------------------------------------------------ names and shapes

    def names(self):
        out = ["scores", "logits", "shares"]
        if self.sink is not None:
            out.append("sink_share")
        if self.dropout_p is not None:
            out.append("weights")
        out += ["outputs", "lse"]
        if self.backward:
            out += ["dP", "D", "dS", "dQ", "dK", "dV"]
            if self.sink is not None:
                out.append("d_sink")
        return out

    def shape(self, name):
        B, H, L, S, E, Ev, Hkv = self.B, self.H, self.L, self.S, self.E, self.Ev, self.Hkv
        shapes = {
            "scores": (B, H, L, S), "logits": (B, H, L, S),
            "shares": (B, H, L, S), "sink_share": (B, H, L), "weights": (B, H, L, S),
            "outputs": (B, H, L, Ev), "lse": (B, H, L),
            "dP": (B, H, L, S), "D": (B, H, L), "dS": (B, H, L, S), "dQ": (B, H, L, E),
            "dK": (B, Hkv, S, E), "dV": (B, Hkv, S, Ev), "d_sink": (B, H),
        }
        self._check_name(name)
        return shapes[name]

    def _check_name(self, name):
        if name not in self.names():
            raise ValueError(f"this case has no quantity {name!r} (it has {', '.join(self.names())})")

    def _entry(self, name, index, prec):
        tables = self._tables(prec, name in ("dP", "D", "dS", "dQ", "dK", "dV", "d_sink"))
        x = tables[name]
        index = tuple(index)
        shape = self.shape(name)
        if len(index) != len(shape) or any(not 0 <= n < m for n, m in zip(index, shape)):
            raise IndexError(f"{name}{list(index)} is outside the shape {shape}")
        for n in index:
            x = x[n]
        return x

    # ------------------------------------------------------------------ answers

    def _ladder(self, start):
        prec = 128
        while prec < start:
            prec *= 2
        cap = max(CAP_BITS, prec)
        while prec <= cap:
            yield prec
            prec *= 2

    def decimal(self, name, index, places):
        """The value correctly rounded to ``places`` digits after the point (ties to even),
        "nan", "-inf"/"inf", or None when intervals cannot decide it."""
        self._check_name(name)
        if not isinstance(places, int) or places < 0:
            raise ValueError("places must be a non-negative integer")
        for prec in self._ladder(64 + 4 * places + self.mag_bits):
            x = self._entry(name, index, prec)
            if _is_nan(x):
                return NAN
            if isinstance(x, float):
                return "-inf" if x < 0 else "inf"
            if isinstance(x, Fraction):
                k, _ = _round_places(x, places)
                return _decimal_text(k, places)
            lo, hi = _ends(x)
            if lo is None or hi is None:
                continue
            (klo, tlo), (khi, thi) = _round_places(lo, places), _round_places(hi, places)
            if klo == khi and not tlo and not thi:
                return _decimal_text(klo, places)
        self.undecided += 1
        return UNDECIDED

    def float(self, name, index, fmt):
        """The value rounded to nearest-even in ``fmt`` (float16, bfloat16, float32, float64),
        "nan", or None when intervals cannot decide it."""
        self._check_name(name)
        if fmt not in FORMATS:
            raise ValueError(f"fmt: expected one of {tuple(FORMATS)}, got {fmt!r}")
        p = FORMATS[fmt][0]
        for prec in self._ladder(64 + 2 * p + self.mag_bits):
            x = self._entry(name, index, prec)
            if _is_nan(x):
                return NAN
            if isinstance(x, float):
                return x
            if isinstance(x, Fraction):
                return _round_format(x, fmt)[0]
            lo, hi = _ends(x)
            if lo is None or hi is None:
                continue
            (flo, tlo), (fhi, thi) = _round_format(lo, fmt), _round_format(hi, fmt)
            if flo == fhi and not tlo and not thi:
                return flo
        self.undecided += 1
        return UNDECIDED

    # ------------------------------------------------------------------ evaluation

    def _tables(self, prec, grads):
        key = (prec, grads)
        if key not in self._cache:
            saved = iv.prec
            iv.prec = prec
            try:
                tables = dict(self._tables(prec, False)) if grads else self._forward()
                if grads:
                    tables.update(self._backward(tables))
            finally:
                iv.prec = saved
            self._cache[key] = tables
        return self._cache[key]

    def _rotated(self):
        """RoPE (Su et al. 2021, eq. 34): pair k turns by pos * theta^(-2k/E); ``half`` pairs
        entry k with k + E/2 (GPT-NeoX), ``interleaved`` pairs 2k with 2k + 1 (the paper).
        Returns rotated queries [b][h][i][e] and keys [b][hkv][j][e] as intervals."""
        E, R = self.E, self.rope_dims
        half = R // 2
        freq, gain = self._rope_frequencies()
        self._gain = gain       # the angle-0 shortcut below multiplies the turned part by gain^2
        pairs = ([(k, k + half) for k in range(half)] if self.rope_layout == "half"
                 else [(2 * k, 2 * k + 1) for k in range(half)])

        def turn(vec, pos):
            out = [_iv(vec[a]) for a in range(E)]       # entries past R pass through
            for a in range(R):
                out[a] = None
            for k, (a, b) in enumerate(pairs):
                phi = iv.mpf(pos) * freq[k]
                c, s = _mul(gain, iv.cos(phi)), _mul(gain, iv.sin(phi))
                x, y = _iv(vec[a]), _iv(vec[b])
                out[a] = x * c - y * s
                out[b] = x * s + y * c
            return out
        self._turn = turn       # the backward turns back by -pos: R^T

        qr = [[[turn(self.q[b][h][i], self.pos[i]) for i in range(self.L)]
               for h in range(self.H)] for b in range(self.B)]
        kr = [[[turn(self.k[b][g][j], j) for j in range(self.S)]
               for g in range(self.Hkv)] for b in range(self.B)]
        return qr, kr

    def _rope_frequencies(self):
        """Each rotated pair's inverse frequency and the factor of cos and sin, as transformers'
        ``modeling_rope_utils`` defines them (``ROPE_INIT_FUNCTIONS``: linear, dynamic NTK at
        ``max(position_ids) + 1``, llama3, yarn with its attention factor; ``inv_freq`` given as
        data).  A band or a floor the intervals do not decide yet takes the hull of both answers,
        so the enclosure stays true and the ladder's next precision narrows it."""
        R, sc = self.rope_dims, dict(self.rope_scaling or {})
        kind = sc.pop("rope_type", None) or sc.pop("type", None) or \
            ("inv_freq" if "inv_freq" in sc else "default")
        num = {k: _rational(v, "rope.scaling." + k) for k, v in sc.items()
               if k not in ("inv_freq", "truncate") and v is not None}
        theta, f = _iv(self.rope_theta), _iv(num.get("factor", Fraction(1)))

        def inverse(base):                 # base^(-2k/R), k = 0 .. R/2 - 1
            return [iv.exp(-_iv(Fraction(2 * k, R)) * iv.log(base)) for k in range(R // 2)]
        inv, gain = inverse(theta), Fraction(1)
        if kind == "linear":
            inv = [w / f for w in inv]
        elif kind == "inv_freq":
            inv = [_iv(_rational(x, "rope.scaling.inv_freq")) for x in sc["inv_freq"]]
        elif kind == "dynamic":
            m = num["max_position_embeddings"]
            seq = max(max(self.S, max(self.pos) + 1 if self.L else 0), m)
            x = num["factor"] * seq / m - (num["factor"] - 1)
            inv = inverse(theta * iv.exp(_iv(Fraction(R, R - 2)) * iv.log(_iv(x))))
        elif kind == "llama3":
            lf, hf, old = (num[k] for k in ("low_freq_factor", "high_freq_factor",
                                            "original_max_position_embeddings"))
            out = []
            for w in inv:
                wave = 2 * iv.pi / w
                smooth = (_iv(old) / wave - _iv(lf)) / _iv(hf - lf)
                options = {"high": w, "low": w / f, "mid": (1 - smooth) * w / f + smooth * w}
                above_low, below_high = wave > _iv(old / lf), wave < _iv(old / hf)
                # where(wave > old/lf, w/f, w), then the blend where neither wave < old/hf
                # nor wave > old/lf; True, False or None (not decided at this precision)
                picks = [p for p, ok in (("low", above_low is not False),
                                         ("high", above_low is not True and below_high is not False),
                                         ("mid", above_low is not True and below_high is not True))
                         if ok]
                out.append(_hull([options[p] for p in picks]))
            inv = out
        elif kind == "yarn":
            omp = num["original_max_position_embeddings"]
            fast, slow = num.get("beta_fast") or 32, num.get("beta_slow") or 1

            def corr(n):                  # find_correction_dim
                return _iv(R) * iv.log(_iv(omp) / (_iv(n) * 2 * iv.pi)) / (2 * iv.log(theta))
            lows = {max(math.floor(e), 0) for e in _ends(corr(fast))}
            highs = {min(math.ceil(e), R - 1) for e in _ends(corr(slow))}
            rows = []
            for low in lows:
                for high in highs:
                    ramp = [Fraction(k > low) if low == high else
                            min(max(Fraction(k - low, high - low), Fraction(0)), Fraction(1))
                            for k in range(R // 2)]
                    rows.append([w / f * _iv(r) + w * _iv(1 - r) for w, r in zip(inv, ramp)])
            inv = [_hull(list(col)) for col in zip(*rows)]
            if num.get("attention_factor") is not None:
                gain = num["attention_factor"]
            elif num.get("factor", 1) > 1:
                def mscale(m):            # yarn_get_mscale
                    return 1 + _iv(Fraction(m) / 10) * iv.log(f)
                m, m2 = num.get("mscale"), num.get("mscale_all_dim")
                gain = mscale(m) / mscale(m2) if m and m2 else mscale(1)
        elif kind != "default":
            raise ValueError(f"rope.scaling: unknown rope_type {kind!r}")
        return inv, gain

    def _scale_value(self):
        """1/sqrt(D): a Fraction when D is a rational square, else an interval."""
        if self.scale_exact is not None:
            return self.scale_exact
        return 1 / iv.sqrt(_iv(self.D))

    def _forward(self):
        B, H, L, S, Ev = self.B, self.H, self.L, self.S, self.Ev
        scale = self._scale_value()
        rot = self._rotated() if self.rope_theta is not None else None
        slopes = None
        if self.alibi_exp is not None:
            ln2 = iv.log(iv.mpf(2))
            # slope 2^-e: exact for integer e, else exp(-e ln 2)
            slopes = [Fraction(1, 2 ** int(e)) if e.denominator == 1
                      else iv.exp(-_iv(e) * ln2) for e in self.alibi_exp]

        shares, sink_share, weights, outputs, lse = [], [], [], [], []
        scores, all_logits = [], []
        for b in range(B):
            sb, kb, wb, ob, lb, cb, gb = [], [], [], [], [], [], []
            for h in range(H):
                g = self.kv[h]
                sh, kh, wh, oh, lh, ch, gh = [], [], [], [], [], [], []
                for i in range(L):
                    p = self.pos[i]
                    vis = self.vis[b][h][i]
                    logits = {}
                    for j in range(S):
                        if not vis[j]:
                            continue
                        if rot is not None:
                            x = _sum(a * c for a, c in zip(rot[0][b][h][i], rot[1][b][g][j]))
                            if p == j and isinstance(self._gain, Fraction):   # angle 0: exact
                                x = sum((a * c * (self._gain ** 2 if e < self.rope_dims else 1)
                                         for e, (a, c) in enumerate(zip(self.q[b][h][i],
                                                                        self.k[b][g][j]))),
                                        Fraction(0))
                        else:
                            x = self.raw[b][h][i][j]
                        logits[("raw", j)] = x
                        x = _mul(x, scale)
                        if self.softcap is not None and not (isinstance(x, Fraction) and x == 0):
                            cap = _iv(self.softcap)           # Gemma 2: cap * tanh(x / cap)
                            x = cap * _tanh(_iv(x) / cap)
                        if slopes is not None:                # Press et al. 2022
                            if self.alibi_form == "relative":
                                dist = -(p - j)
                            elif self.alibi_form == "absolute":
                                dist = j
                            else:
                                dist = -abs(p - j)
                            x = _add(x, _mul(slopes[h], Fraction(dist)))
                        x = _add(x, self.offset[b][h][i][j])
                        logits[j] = x
                    ch.append([logits.pop(("raw", j), NEG_INF) for j in range(S)])
                    gh.append([logits.get(j, NEG_INF) for j in range(S)])
                    row_sh, row_sink, row_lse = self._softmax_row(logits)
                    M = self.M[b][h][i]
                    row_w = [_mul(row_sh[j], M[j]) for j in range(S)]
                    row_out = [_sum(_mul(row_w[j], self.v[b][g][j][c]) for j in range(S))
                               for c in range(Ev)]
                    sh.append(row_sh); kh.append(row_sink); wh.append(row_w)
                    oh.append(row_out); lh.append(row_lse)
                sb.append(sh); kb.append(kh); wb.append(wh); ob.append(oh); lb.append(lh)
                cb.append(ch); gb.append(gh)
            shares.append(sb); sink_share.append(kb); weights.append(wb)
            outputs.append(ob); lse.append(lb); scores.append(cb); all_logits.append(gb)
        # "scores": q.k of every visible pair (rotated first under RoPE); "logits": what the
        # softmax reads (scaled, capped, + ALiBi + offsets); -inf where the key is hidden
        tables = {"scores": scores, "logits": all_logits, "shares": shares, "outputs": outputs,
                  "lse": lse}
        if self.sink is not None:
            tables["sink_share"] = sink_share
        if self.dropout_p is not None:
            tables["weights"] = weights
        return tables

    def _softmax_row(self, logits):
        """Shares over the visible keys (exact 0 elsewhere), the sink's share and the
        log-sum-exp.  The sink is one more term exp(sink) of the normaliser, without a value."""
        S = self.S
        if not logits and self.sink is None:                 # an empty row
            if self.empty_row == "zero":
                return [Fraction(0)] * S, None, NEG_INF
            if self.empty_row == "nan":
                return [NAN] * S, None, NEG_INF
            return [Fraction(1, S)] * S, None, NEG_INF       # a finite fill value: 1/S each
        if not logits:                                       # only the sink: it takes it all
            return [Fraction(0)] * S, Fraction(1), self.sink
        if len(logits) == 1 and self.sink is None:
            (j, x), = logits.items()
            row = [Fraction(0)] * S
            row[j] = Fraction(1)
            return row, None, x
        terms = {j: _iv(x) for j, x in logits.items()}
        if self.sink is not None:
            terms["sink"] = _iv(self.sink)
        # any shift works (softmax is shift-invariant); the largest upper end keeps exp <= ~1
        top = max(terms.values(), key=lambda t: _raw_fraction(t._mpi_[1]))
        shift = iv.make_mpf((top._mpi_[1], top._mpi_[1]))
        exps = {j: iv.exp(t - shift) for j, t in terms.items()}
        Z = _sum(exps.values())
        row = [Fraction(0)] * S
        for j in logits:
            row[j] = exps[j] / Z
        sink_share = exps["sink"] / Z if self.sink is not None else None
        return row, sink_share, iv.log(Z) + shift

    def _backward(self, fw):
        """Dao et al. 2022, Algorithm 4, with the dropout factors M kept from the forward pass:
        dV = W^T dO, dP = M * (dO V^T), D_i = sum_j P_ij dP_ij, dS = P * (dP - D + d_lse),
        dQ = scale dS K, dK = scale dS^T Q; the sink's column has dP = 0, so dS_sink =
        P_sink (d_lse - D) and d_sink = sum_i dS_i,sink.  GQA: dK and dV of a kv head add over
        its query heads.  Through a soft-cap, dQ and dK read dS_ij (1 - tanh^2(s_ij / cap)),
        s the scaled score; under RoPE they are sums of rotated keys and queries, turned
        back (R^T) at the query's and the key's positions."""
        B, H, L, S, E, Ev, Hkv = self.B, self.H, self.L, self.S, self.E, self.Ev, self.Hkv
        scale = self._scale_value()
        rot = self._rotated() if self.rope_theta is not None else None
        dKr = [[[[Fraction(0)] * E for _ in range(S)] for _ in range(Hkv)] for _ in range(B)]

        def capped(row_dS, raw):     # dS times 1 - tanh^2(s / cap) at every visible key
            if self.softcap is None:
                return row_dS
            out = []
            for d, r in zip(row_dS, raw):
                s = _mul(r, scale) if r != NEG_INF else Fraction(0)
                t = Fraction(0) if isinstance(s, Fraction) and s == 0 else \
                    _tanh(_iv(s) / _iv(self.softcap))
                out.append(_mul(d, _add(Fraction(1), _mul(Fraction(-1), _mul(t, t)))))
            return out
        shares, weights = fw["shares"], fw.get("weights")
        sink_share = fw.get("sink_share")
        dP, Dt, dS, dQ, d_sink = [], [], [], [], []
        dK = [[[[Fraction(0)] * E for _ in range(S)] for _ in range(Hkv)] for _ in range(B)]
        dV = [[[[Fraction(0)] * Ev for _ in range(S)] for _ in range(Hkv)] for _ in range(B)]
        for b in range(B):
            pb, db, sb, qb, kb = [], [], [], [], []
            for h in range(H):
                g = self.kv[h]
                ph, dh, sh, qh = [], [], [], []
                total_sink = Fraction(0)
                for i in range(L):
                    dO = self.d_out[b][h][i]
                    M = self.M[b][h][i]
                    P = shares[b][h][i]
                    W = weights[b][h][i] if weights is not None else P
                    vis = self.vis[b][h][i]
                    row_dP = [M[j] * sum((x * y for x, y in zip(dO, self.v[b][g][j])), Fraction(0))
                              for j in range(S)]
                    g_lse = Fraction(0) if self.d_lse is None else self.d_lse[b][h][i]
                    empty = not any(vis) and self.sink is None
                    if empty and self.empty_row == "nan":
                        row_D, row_dS = NAN, [NAN] * S
                    elif empty:
                        # zero: nothing; uniform: constant shares, so no dS (docs/gradients.md)
                        row_D = _sum(_mul(P[j], row_dP[j]) for j in range(S))
                        row_dS = [Fraction(0)] * S
                    else:
                        row_D = _sum(_mul(P[j], row_dP[j]) for j in range(S) if vis[j])
                        row_dS = [_mul(P[j], _add(_add(row_dP[j], g_lse), _mul(Fraction(-1), row_D)))
                                  if vis[j] else Fraction(0) for j in range(S)]
                    if self.sink is not None:
                        total_sink = _add(total_sink, _mul(sink_share[b][h][i],
                                                           _add(g_lse, _mul(Fraction(-1), row_D))))
                    row_dT = capped(row_dS, fw["scores"][b][h][i])
                    keys = self.k[b][g] if rot is None else rot[1][b][g]
                    query = self.q[b][h][i] if rot is None else rot[0][b][h][i]
                    row_dQ = [_mul(scale, _sum(_mul(row_dT[j], keys[j][e]) for j in range(S)))
                              for e in range(E)]
                    if rot is not None and not any(_is_nan(x) for x in row_dQ):
                        row_dQ = self._turn(row_dQ, -self.pos[i])
                    for j in range(S):
                        for e in range(E):
                            dKr[b][g][j][e] = _add(dKr[b][g][j][e],
                                                   _mul(scale, _mul(row_dT[j], query[e])))
                        for c in range(Ev):
                            dV[b][g][j][c] = _add(dV[b][g][j][c], _mul(W[j], dO[c]))
                    ph.append(row_dP); dh.append(row_D); sh.append(row_dS); qh.append(row_dQ)
                pb.append(ph); db.append(dh); sb.append(sh); qb.append(qh); kb.append(total_sink)
            dP.append(pb); Dt.append(db); dS.append(sb); dQ.append(qb); d_sink.append(kb)
        for b in range(B):
            for g in range(Hkv):
                for j in range(S):
                    nan = any(_is_nan(x) for x in dKr[b][g][j])
                    dK[b][g][j] = dKr[b][g][j] if rot is None or nan else \
                        self._turn(dKr[b][g][j], -j)
        out = {"dP": dP, "D": Dt, "dS": dS, "dQ": dQ, "dK": dK, "dV": dV}
        if self.sink is not None:
            out["d_sink"] = d_sink
        return out


def _flatten(t):
    if isinstance(t, list):
        for x in t:
            yield from _flatten(x)
    else:
        yield t


def _rows(t):
    """The innermost lists of a nested list."""
    if t and isinstance(t[0], list):
        for x in t:
            yield from _rows(x)
    else:
        yield t
