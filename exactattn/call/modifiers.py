"""Score modifiers of today's attention, as parts of the one call model.

Each is a field of :class:`~exactattn.call.policy.Policy`; this module holds their
types and exact rules, and computes nothing else.

ALiBi (Press, Smith and Lewis 2022, "Train short, test long", sec. 3)
    A bias ``-m * (i - j)`` added to the scaled score of query position i and
    key position j, with one slope m per head.  For h heads, a power of two,
    the slopes are ``2^(-8k/h)`` for k = 1..h; otherwise the first
    ``2^floor(log2 h)`` slopes follow that rule and the rest are every other
    slope of the rule for twice that power, as in the authors' code.  The
    slopes are exact: powers of two for up to 8 heads, ``2^(-1/2)``-type
    algebraic numbers for 12 and 16 heads, ``2^(-1/4)``-type for 24 and 32.
    Forms: ``relative`` (``-m (i - j)``, the paper's), ``absolute``
    (``+m j``, BLOOM's: the same softmax under a causal mask, since it differs
    by ``m i`` per row) and ``symmetric`` (``-m |i - j|``, encoders).
Rotary position embeddings (RoPE; Su et al. 2021, "RoFormer", sec. 3.4)
    Queries and keys rotated pairwise by angles ``pos * theta^(-2k/d)``;
    ``half`` pairs entry k with k + d/2 (GPT-NeoX, Llama in transformers),
    ``interleaved`` pairs 2k with 2k + 1 (the paper, GPT-J).  The rotated
    entries are transcendental, so the scores are certified, not exact.
    A :class:`RopeScaling` changes the frequencies as transformers'
    ``modeling_rope_utils`` does (linear, dynamic NTK, llama3, yarn, or given ones).

>>> alibi_slopes(6)
[Fraction(1, 4), Fraction(1, 16), Fraction(1, 64), Fraction(1, 256), Fraction(1, 2), Fraction(1, 8)]
>>> [s if isinstance(s, Fraction) else s.text() for s in alibi_slopes(12)[8:10]]
['1/sqrt(2)', '1/(2*sqrt(2))']
>>> Alibi(heads=8).bias(0, 5, 2)
Fraction(-3, 2)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache

from typing import Any, Sequence

from ..errors import FloatInputError, InputError, ShapeError, shorten
from ..numbers.digits import enclosure_sign, tighten, working_precision
from ..numbers.exact import fmpq_of, to_exact
from ..options import check_choice, check_whole
from ..numbers.reals import angle_ball, gain_ball, power_form, two_power

__all__ = ["Alibi", "Rope", "alibi_slopes"]

ALIBI_FORMS = ("relative", "absolute", "symmetric")
ROPE_LAYOUTS = ("half", "interleaved")


def exact_number(value: Any, name: str) -> Fraction:
    """A modifier's number read exactly (``"1/3"``, 0.5 refused as a binary float)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{name} must be finite (got {value!r}); NaN and infinities have no "
                         "exact value: write a finite number")
    if isinstance(value, float):
        raise FloatInputError(f"{name} must be exact (got the binary float {value!r}); "
                              f"write it as text, e.g. \"{Fraction(value).limit_denominator(1000)}\"")
    try:
        q = to_exact(value)
    except (InputError, ValueError, TypeError) as e:
        raise InputError(f"{name} must be a rational number (got {shorten(value, quote=True)})") from e
    if not isinstance(q, Fraction):
        raise InputError(f"{name} must be a rational number (got {shorten(value, quote=True)})")
    return q


def _echo(value: Any) -> str:
    """A value as given, for a message: text quoted (``'0'``), an exact number as written (``0``)."""
    if isinstance(value, (int, Fraction)) and not isinstance(value, bool):
        return shorten(str(value))
    return shorten(value, quote=True)


# The checks of each modifier's value: the one place each rule is written.  ``name`` is
# how the message names the value (a Policy field, a spec field, a command-line flag).
def check_window(window: Any, name: str = "window") -> tuple:
    """``(left, right)`` of a sliding window: whole numbers >= 0, or None for no limit."""
    w = tuple(window) if isinstance(window, (list, tuple)) else None
    if w is None or len(w) != 2 or not all(
            x is None or (isinstance(x, int) and not isinstance(x, bool) and x >= 0) for x in w):
        raise InputError(f"{name} must be [left, right], whole numbers >= 0 or null "
                         f"(got {shorten(window, quote=True)})")
    return w


def check_softcap(value: Any, name: str = "softcap") -> Fraction:
    """A soft-cap: an exact positive number.

    >>> check_softcap("0", "--softcap")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: --softcap must be positive (got '0')
    """
    q = exact_number(value, name)
    if q <= 0:
        raise InputError(f"{name} must be positive (got {_echo(value)})")
    return q


def check_dropout(value: Any, name: str = "dropout") -> Fraction:
    """A dropout probability p: an exact number with ``0 <= p < 1``."""
    q = exact_number(value, name)
    if not 0 <= q < 1:
        raise InputError(f"{name} must be a probability from 0 up to (not including) 1 "
                         f"(got {_echo(value)})")
    return q


def check_theta(value: Any, name: str = "rope theta") -> Fraction:
    """A RoPE base: an exact positive number (10000 in the paper) in a float64's normal range."""
    q = exact_number(value, name)
    if q <= 0:
        raise InputError(f"{name} must be a positive number (got {_echo(value)})")
    if not Fraction(1, 2 ** 1022) <= q <= 2 ** 1024 - 2 ** 971:       # float64's normal range
        raise InputError(f"{name} must be from 2^-1022 to about 1.8e308, a float64's range (got "
                         f"{_echo(value)}); no float kernel holds this base: use one such as 10000")
    return q


def check_form(value: Any, name: str = "alibi form") -> str:
    """An ALiBi form: one of :data:`ALIBI_FORMS`."""
    return check_choice(value, name, ALIBI_FORMS)


def check_layout(value: Any, name: str = "rope layout") -> str:
    """A RoPE pairing: one of :data:`ROPE_LAYOUTS`."""
    return check_choice(value, name, ROPE_LAYOUTS)


def _power_of_two_rule(h: int) -> list:
    # start = 2^(-2^-(log2(h) - 3)) = 2^(-8/h); slope k = start^k
    return [two_power(Fraction(-8 * k, h)) for k in range(1, h + 1)]


def alibi_slopes(heads: int) -> list:
    """The exact ALiBi slope of every head (Press et al. 2022, sec. 3, and the authors' code).

    Returns ``Fraction`` slopes where they are rational and
    :class:`~exactattn.numbers.reals.Surd` slopes where they are not.

    Raises:
        InputError: heads is not a whole number from 1 to 4096.
    """
    heads = check_whole(heads, "alibi heads", low=1, high=4096)
    if heads & (heads - 1) == 0:
        return _power_of_two_rule(heads)
    closest = 1 << (heads.bit_length() - 1)
    return _power_of_two_rule(closest) + alibi_slopes(2 * closest)[0::2][:heads - closest]


@dataclass(frozen=True)
class Alibi:
    """ALiBi biases for a model of ``heads`` heads.

    Args:
        heads: the model's number of heads (it sets the slopes).
        form: ``relative`` (``-m (i - j)``), ``absolute`` (``m j``) or
            ``symmetric`` (``-m |i - j|``).

    Which head a call is comes from ``Policy.head``; positions come from
    ``Policy.query_position`` (so a decode step's query sits at position p).
    """

    heads: int
    form: str = "relative"

    def __post_init__(self):
        object.__setattr__(self, "heads", check_whole(self.heads, "alibi heads", low=1))
        check_form(self.form)

    def slope(self, head: int):
        if not 0 <= head < self.heads:
            raise InputError(f"head must be from 0 to {self.heads - 1} for ALiBi with "
                             f"{self.heads} heads (got {head})")
        return alibi_slopes(self.heads)[head]

    def distance(self, query_position: int, key_position: int) -> int:
        """The whole number the slope multiplies: ``-(i - j)``, ``j`` or ``-|i - j|`` by form.

        >>> Alibi(8).distance(5, 2), Alibi(8, "absolute").distance(5, 2), Alibi(8, "symmetric").distance(2, 5)
        (-3, 2, -3)
        """
        if self.form == "absolute":
            return key_position
        d = query_position - key_position
        return -abs(d) if self.form == "symmetric" else -d

    def formula(self, query: str = "i", key: str = "j") -> str:
        """The bias in words, as :meth:`distance` computes it: ``-m (i - j)``, ``m j``, ``-m |i - j|``.

        >>> Alibi(8).formula("p_i"), Alibi(8, "absolute").formula(), Alibi(8, "symmetric").formula()
        ('-m (p_i - j)', 'm j', '-m |i - j|')
        """
        if self.form == "absolute":
            return f"m {key}"
        return f"-m |{query} - {key}|" if self.form == "symmetric" else f"-m ({query} - {key})"

    def bias(self, head: int, query_position: int, key_position: int):
        """The exact bias added to the scaled score (a ``Fraction`` or a ``Surd``)."""
        return self.slope(head) * self.distance(query_position, key_position)

    def text(self) -> str:
        return f"alibi({self.heads} heads, {self.form})"


@dataclass(frozen=True)
class Rope:
    """Rotary position embeddings: base ``theta``, the pairing ``layout`` and the rotated width.

    Args:
        theta: the base (10000 in the paper; 500000 in Llama 3), a positive exact number
            (:func:`check_theta`; text such as ``"10000"`` is read exactly).
        layout: ``half`` (entry k with k + r/2) or ``interleaved`` (2k with 2k + 1).
        dims: the rotated width r, an even whole number (None: the whole head, r = d_k).
            Partial rotary (GPT-NeoX, Phi, StableLM: ``rotary_ndims = head_dim *
            partial_rotary_factor``) turns the first r entries of each query and key with
            frequencies ``theta^(-2k/r)`` and passes the other ``d_k - r`` through unturned.
    """

    theta: Fraction = Fraction(10000)
    layout: str = "half"
    dims: int | None = None
    #: the frequencies' scaling: a :class:`RopeScaling` or transformers' dict (None: plain)
    scaling: Any = None

    def __post_init__(self):
        object.__setattr__(self, "theta", check_theta(self.theta))
        check_layout(self.layout)
        if self.dims is not None:
            check_rope_dims(self.dims)
        object.__setattr__(self, "scaling", check_scaling(self.scaling))

    @lru_cache(maxsize=256)     # once per rope and width (llama3's bands, yarn's range)
    def frequencies(self, d: int) -> list[tuple[int, int, tuple]]:
        """``(a, b, w)``: entries a and b turn by ``pos * w``, w exact in the form
        ``(r, radical)`` of :func:`~exactattn.numbers.reals.power_form` (``r * prod p^f``), or
        ``(r, radical, (r2, radical2))`` adding ``r2 * prod p2^f2 / pi`` (llama3's blend).

        >>> Rope(scaling={"rope_type": "linear", "factor": 4}).frequencies(4)
        [(0, 2, (Fraction(1, 4), ())), (1, 3, (Fraction(1, 400), ()))]
        """
        pairs, s = self.pairs(d), self.scaling
        base = [power_form(self.theta, e) for _, _, e in pairs]
        kind, get = (s and s.rope_type), (dict(s.params) if s else {}).get
        f, r = get("factor"), 2 * len(pairs)
        if kind == "linear":
            base = [(w / f, rad) for w, rad in base]
        elif kind == "inv_freq":
            if len(get("inv_freq")) != len(pairs):
                raise InputError(f"rope scaling inv_freq must give one frequency per rotated pair "
                                 f"({len(pairs)} here; got {len(get('inv_freq'))})")
            base = [(w, ()) for w in get("inv_freq")]
        elif kind == "dynamic":
            if s.length is None or r == 2:
                raise InputError("rope scaling dynamic needs a rotated width of 4 or more and the "
                                 "call's length (a Call binds it: build one)")
            m = get("max_position_embeddings")
            x = f * max(s.length, m) / m - (f - 1)
            base = [power_form(self.theta, e, x, Fraction(-2 * k, r - 2))
                    for k, (_, _, e) in enumerate(pairs)]
        elif kind == "llama3":
            lf, hf, L = get("low_freq_factor"), get("high_freq_factor"), \
                get("original_max_position_embeddings")
            a, b = 1 / f - (1 - 1 / f) * lf / (hf - lf), (1 - 1 / f) * L / (2 * (hf - lf))
            for k, (w, (_, _, e)) in enumerate(zip(base, pairs)):
                if _band(w, L / hf) < 0:
                    continue                              # the high band: unchanged
                if _band(w, L / lf) > 0:
                    base[k] = (w[0] / f, w[1])            # the low band: divided by factor
                else:                                     # the blend: a w + b w^2 / pi
                    r2, rad2 = power_form(self.theta, 2 * e)
                    base[k] = (a * w[0], w[1], (b * r2, rad2) if b else ())
        elif kind == "yarn":
            if self.theta == 1:
                raise InputError("rope scaling yarn needs theta other than 1 (its range divides by "
                                 "log(theta))")
            omp = get("original_max_position_embeddings")
            low = max(_correction(get("beta_fast", 32), r, self.theta, omp, False), 0)
            high = min(_correction(get("beta_slow", 1), r, self.theta, omp, True), r - 1)
            for k, (w, rad) in enumerate(base):
                ramp = Fraction(k > low) if low == high else \
                    min(max(Fraction(k - low, high - low), Fraction(0)), Fraction(1))
                base[k] = ((ramp / f + 1 - ramp) * w, rad)
        return [(a, b, w) for (a, b, _), w in zip(pairs, base)]

    @property
    def gain(self):
        """What the rotated part of each score is multiplied by: yarn's attention factor
        squared, a ``Fraction`` or ``(f, m, m2)`` for ``((1 + m ln(f)/10)/(1 + m2 ln(f)/10))^2``
        (:func:`~exactattn.numbers.reals.gain_ball`); 1 for every other rope."""
        s = self.scaling
        get = dict(s.params).get if s is not None and s.rope_type == "yarn" else {}.get
        if get("attention_factor") is not None:
            return get("attention_factor") ** 2
        f, m, m2 = get("factor", 1), get("mscale"), get("mscale_all_dim")
        if f <= 1 or (m and m2 and m == m2):
            return Fraction(1)
        return (f, m, m2) if m and m2 else (f, Fraction(1), Fraction(0))

    def for_call(self, policy, n_queries: int, n_keys: int) -> "Rope":
        """This rope in one call: a dynamic scaling's sequence length bound to the call's
        (its largest position + 1, as transformers reads ``max(position_ids) + 1``)."""
        last = policy.query_position(n_queries - 1, n_queries, n_keys) + 1 if n_queries else 0
        return self.at_length(max(n_keys, last))

    def at_length(self, n: int) -> "Rope":
        """This rope at sequence length n (only a dynamic scaling reads it)."""
        if self.scaling is None or self.scaling.rope_type != "dynamic":
            return self
        return replace(self, scaling=replace(self.scaling, length=n))

    def float_frequencies(self, d: int) -> list[float]:
        """The frequencies in float64 (a float kernel's ``inv_freq``): ``theta ** e`` in floats
        as a kernel computes them, or under a scaling the exact ones rounded (from enclosures)."""
        if self.scaling is None:
            return [float(self.theta) ** float(e) for _, _, e in self.pairs(d)]
        with working_precision(128):
            return [float(angle_ball(*w).mid()) for _, _, w in self.frequencies(d)]

    def float_gain(self) -> float:
        """The factor of cos and sin in float64: yarn's attention factor (1 otherwise)."""
        with working_precision(128):
            return float(gain_ball(self.gain).sqrt().mid())

    def pairs(self, d: int) -> list[tuple[int, int, Fraction]]:
        """``(a, b, e)``: entries a and b rotate together by ``pos * theta^e`` (e = -2k/r, r the
        rotated width); entries in no pair pass through.

        Raises:
            InputError: the rotated width is odd, or wider than d.

        >>> Rope(layout="interleaved").pairs(4)
        [(0, 1, Fraction(0, 1)), (2, 3, Fraction(-1, 2))]
        >>> Rope(dims=2).pairs(4)                  # entries 2 and 3 pass through
        [(0, 1, Fraction(0, 1))]
        """
        r = d if self.dims is None else self.dims
        if r > d:
            raise InputError(f"rope dims must be at most the head width d_k = {d} (got {r}); "
                             "rotate fewer entries or leave dims out")
        if r % 2:
            raise InputError(f"rope needs an even head width (got d_k = {d})")
        half = r // 2
        if self.layout == "half":
            return [(k, k + half, Fraction(-2 * k, r)) for k in range(half)]
        return [(2 * k, 2 * k + 1, Fraction(-2 * k, r)) for k in range(half)]

    def text(self) -> str:
        dims = "" if self.dims is None else f", dims={self.dims}"
        scaled = "" if self.scaling is None else ", " + self.scaling.text()
        return f"rope(theta={self.theta}, {self.layout}{dims}{scaled})"


#: transformers' rope scalings (``ROPE_INIT_FUNCTIONS``) with their (required, optional) keys;
#: ``inv_freq``: the frequencies given as data, one per rotated pair
ROPE_SCALINGS = {
    "linear": (("factor",), ()),
    "dynamic": (("factor", "max_position_embeddings"), ()),
    "llama3": (("factor", "low_freq_factor", "high_freq_factor",
                "original_max_position_embeddings"), ()),
    "yarn": (("factor", "original_max_position_embeddings"),
             ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate")),
    "inv_freq": (("inv_freq",), ()),
}


@dataclass(frozen=True)
class RopeScaling:
    """A RoPE scaling as transformers' ``rope_scaling`` (``rope_parameters``) defines it.

    ``rope_type``: a key of :data:`ROPE_SCALINGS`; ``params``: its keys and exact values,
    sorted; ``length``: a dynamic scaling's sequence length, bound per call
    (:meth:`Rope.for_call`).  Build it from transformers' dict with :func:`check_scaling`.
    """

    rope_type: str
    params: tuple = ()
    length: int | None = None

    def to_dict(self, number: Any = str) -> dict:
        """transformers' dict, numbers as exact text (a spec file's ``rope.scaling``) or as
        ``number`` makes them (a float kernel's ``rope_scaling``)."""
        return {"rope_type": self.rope_type, **{k: [number(x) for x in v] if k == "inv_freq"
                                                else number(v) for k, v in self.params}}

    def text(self) -> str:
        return self.rope_type + "".join(
            f" {k}={'[...]' if k == 'inv_freq' else v}" for k, v in self.params)


def check_scaling(value: Any, name: str = "rope scaling") -> RopeScaling | None:
    """transformers' scaling dict (``{"rope_type": "llama3", "factor": 8, ...}``; the old key
    ``type`` too; null values left out) as a :class:`RopeScaling`; ``default``: None.

    >>> check_scaling({"rope_type": "llama3", "factor": 8})
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: rope scaling llama3 needs low_freq_factor; add it (its keys: factor, low_freq_factor, high_freq_factor, original_max_position_embeddings)
    """
    if value is None or isinstance(value, RopeScaling):
        return value
    if not isinstance(value, dict):
        raise InputError(f"{name} must be a table such as {{\"rope_type\": \"linear\", "
                         f"\"factor\": 2}} (got {shorten(value, quote=True)})")
    t = {k: v for k, v in value.items() if v is not None and k not in ("rope_type", "type")}
    kind = value.get("rope_type") or value.get("type") or ("inv_freq" if "inv_freq" in t else None)
    kind = check_choice(kind, f"{name} rope_type", ("default",) + tuple(ROPE_SCALINGS))
    keys = ROPE_SCALINGS.get(kind, ((), ()))
    for key in t:
        if key not in keys[0] + keys[1]:
            raise InputError(f"{name} {kind} has unknown key {shorten(key, quote=True)}; its "
                             f"keys are {', '.join(keys[0] + keys[1]) or 'none'}")
    for key in keys[0]:
        if key not in t:
            raise InputError(f"{name} {kind} needs {key}; add it (its keys: "
                             f"{', '.join(keys[0] + keys[1])})")
    if kind == "default":
        return None
    params = {}
    for key, v in t.items():
        if key == "truncate":
            if v is not True:
                raise InputError(f"{name} yarn truncate must be true (got {_echo(v)}): without "
                                 "it the ramp's ends are logarithms, not exact; leave it out")
            continue
        given = v if key == "inv_freq" else [v]
        if not isinstance(given, list) or not given:
            raise InputError(f"{name} inv_freq must be a list of exact numbers, one per rotated "
                             f"pair (got {shorten(v, quote=True)})")
        qs = [exact_number(x, f"{name} {key}") for x in given]
        if any(q <= 0 for q in qs) and not (key.startswith("mscale") and qs == [0]):
            raise InputError(f"{name} {key} must be positive (got {_echo(v)})")
        params[key] = tuple(qs) if key == "inv_freq" else qs[0]
    if kind == "llama3" and params["low_freq_factor"] >= params["high_freq_factor"]:
        raise InputError(f"{name} llama3 needs low_freq_factor < high_freq_factor (got "
                         f"{params['low_freq_factor']} and {params['high_freq_factor']})")
    return RopeScaling(kind, tuple(sorted(params.items())))


def _band(w: tuple, wavelength: Fraction) -> int:
    """The sign of ``2 pi / w - wavelength``, certified (never 0: pi is transcendental)."""
    from flint import arb
    return enclosure_sign(lambda prec: 2 * arb.pi() / angle_ball(*w) - arb(fmpq_of(wavelength)),
                          lambda: f"a rotary wavelength against {wavelength}")


def _correction(n: Fraction, r: int, theta: Fraction, omp: Fraction, up: bool) -> int:
    """yarn's ``floor`` (``ceil`` when up) of ``r ln(omp / (2 pi n)) / (2 ln theta)``, certified."""
    from flint import arb

    def step(prec):
        x = r * (arb(fmpq_of(omp / n)) / (2 * arb.pi())).log() / (2 * arb(fmpq_of(theta)).log())
        x = x.ceil() if up else x.floor()
        return int(x.unique_fmpz()) if x.rad() == 0 else None
    got = tighten(step, 64, max_prec=1 << 16)
    if got is None:
        raise InputError(f"rope scaling yarn: the correction range of beta {n} is not decided "
                         "up to 65536 bits; exactattn does not guess it")
    return got


def check_rope_dims(value: Any, name: str = "rope dims") -> int:
    """A rotated width: an even whole number >= 2.

    >>> check_rope_dims(3)
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: rope dims must be an even whole number >= 2 (got 3); rotary pairs take two entries each
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 2 or value % 2:
        raise InputError(f"{name} must be an even whole number >= 2 (got {_echo(value)}); "
                         "rotary pairs take two entries each")
    return value


def dropout_factors(p: Fraction | None, keep: Sequence[bool] | None) -> list | None:
    """The factor each key's weight is multiplied by under dropout: ``keep / (1 - p)``.

    None when there is no dropout.  The weights of a row then sum to
    ``(sum of kept shares) / (1 - p)``, not 1.

    Raises:
        InputError: a keep-mask without p, or p without a keep-mask.
    """
    if p is None and keep is None:
        return None
    if p is None or keep is None:
        raise InputError("dropout needs both p and a keep-mask (got "
                         f"{'a keep-mask without p' if p is None else 'p without a keep-mask'})")
    scale = 1 / (1 - Fraction(p))
    return [scale if k else Fraction(0) for k in keep]


def check_keep(keep: Any, policy, n_queries: int, n_keys: int,
               name: str = "keep") -> list[list[bool]] | None:
    """A dropout keep-mask as n_queries x n_keys lists of bools (None without dropout).

    The one check of a keep-mask; ``name`` is how messages name it (a spec
    file's ``dropout.keep``), the keyword that passes it.

    Raises:
        InputError: a keep-mask without ``policy.dropout``, dropout without a
            keep-mask, an entry that is not true/false.
        ShapeError: a keep-mask of the wrong shape.

    >>> from exactattn.call.policy import Policy
    >>> check_keep([[1, 0]], Policy(dropout="1/2"), 1, 2)
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: keep[0][0] must be true or false (got 1)
    """
    if keep is None:
        if policy.dropout is not None:
            raise InputError(f"{name} must be a keep-mask of {n_queries} x {n_keys} for dropout "
                             f"p = {policy.dropout} (got none); pass {name}=[[True, False, ...]]")
        return None
    if policy.dropout is None:
        raise InputError(f"{name} must come with dropout (got a keep-mask without p); set "
                         "Policy(dropout=...) or drop the keep-mask")
    if hasattr(keep, "tolist") and not isinstance(keep, (list, tuple)):
        keep = keep.tolist()
    if not isinstance(keep, (list, tuple)) or len(keep) != n_queries or not all(
            isinstance(r, (list, tuple)) and len(r) == n_keys for r in keep):
        raise ShapeError(f"{name} must be {n_queries} x {n_keys} (one row per query, one entry "
                         f"per key; got {shorten(keep, quote=True)})")
    rows = []
    for i, r in enumerate(keep):
        for j, k in enumerate(r):
            if not isinstance(k, bool) and not (type(k).__module__ == "numpy" and
                                                type(k).__name__ in ("bool", "bool_")):
                raise InputError(f"{name}[{i}][{j}] must be true or false (got "
                                 f"{shorten(k, quote=True)})")
        rows.append([bool(k) for k in r])
    return rows


def row_offsets(policy, i: int, n_queries: int, n_keys: int,
                offsets: Sequence | None = None) -> list | None:
    """What is added to row i's scaled (and soft-capped) scores: the ALiBi bias of each key
    plus the additive mask's offset (``offsets``, None or 0 where none), exactly; None when
    neither is set.

    >>> from exactattn.call.policy import Policy
    >>> row_offsets(Policy(alibi=Alibi(2), causal=True), 1, 2, 2, [Fraction(1, 2), None])
    [Fraction(7, 16), Fraction(0, 1)]
    """
    if policy.alibi is None:
        return None if offsets is None else [Fraction(m) if m else Fraction(0) for m in offsets]
    p = policy.query_position(i, n_queries, n_keys)
    biases: dict = {}
    row = []
    for j in range(n_keys):
        d = policy.alibi.distance(p, j)
        if d not in biases:
            biases[d] = policy.alibi.bias(policy.head, p, j)
        m = None if offsets is None else offsets[j]
        row.append(biases[d] + Fraction(m) if m else biases[d])
    return row

