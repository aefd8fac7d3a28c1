"""Which conventions a float attention kernel implements, decided exactly on small probes.

:func:`identify` runs the kernel on one small exact input per convention (the
*probe*), built so that every candidate convention gives a different answer,
by far more than any float error.  Each candidate is a
:class:`~exactattn.call.policy.Policy` (or a log-sum-exp base), so its answer
is the certified exact answer of :class:`~exactattn.reference.reference.Reference`;
the kernel's outputs are judged against each candidate by :func:`verify` (the
proved tolerance of ``exactattn verify``, every entry decided with certified
enclosures).  A candidate is *found* only when the kernel is within the
tolerance of it and provably outside it for every other candidate; two
candidates that both pass are reported ``undecided``, never guessed, and a
kernel that passes none is reported as implementing none of them.

The conventions, in the order they are probed (a scale found first is used
by the later probes whose scores it moves):

=============  ===========================================================================
scale          ``1/sqrt(d_k)``, ``1/d_k``, ``1`` or the declared number
alignment      causal with L != S: ``none`` (causal ignored), ``top_left``, ``bottom_right``
window         window (3, 2): each bound inclusive or exclusive, the two swapped, ``causal``
               (the right bound taken as 0) or ``none`` (the window ignored)
gqa            6 query heads over 3: ``interleave`` (h // 2) or ``tile`` (h % 3)
empty_row      a row whose mask hides every key: ``zero``, ``nan`` or ``uniform`` (the other
               row hides one key: ``mask ignored`` and ``mask inverted`` are neither)
lse_base       the log-sum-exp returned: base ``e`` or ``2``
lse_sink       whether a sink enters the log-sum-exp: ``in`` or ``out`` (the outputs judged
               too: ``sink ignored``, in neither)
softcap        ``cap*tanh(s/cap)`` on the scaled scores, on the raw scores, or not at all
alibi          the bias's form (``relative``, ``symmetric``) and slopes: the paper's rule for
               h heads (6 unless declared), or the first h of the next power of two's;
               or ``none`` (no bias added)
rope_layout    ``half`` or ``interleaved`` pairs, or ``none`` (the rotation not applied)
rope_base      the declared base, 10000, 500000 or 1000000, or ``none``
=============  ===========================================================================

A convention the kernel cannot be asked about (no ``attn_mask``, ``window``,
``enable_gqa`` or ``sink`` argument, no log-sum-exp returned, a modifier the
library refuses) is reported as such, not as a difference.

>>> found = identify("numpy", conventions=("scale", "alignment"))
>>> print(found.text())
identify: numpy in float32, each convention decided exactly (within the proved tolerance of one candidate's certified answer, outside every other's)
scale      declared 1/sqrt(d_k)  found 1/sqrt(d_k)  ok
alignment  declared top_left     found top_left     ok
>>> found.exit_status
0
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction

from ..call.inputs import Call
from ..call.modifiers import ROPE_LAYOUTS, Alibi, Rope
from ..call.policy import Policy
from ..errors import InputError, Undecided, shorten
from ..numbers.exact import rational_sqrt
from ..numbers.lse import check_base
from .adapter import Impl, ask, check_dtype, make_call
from .check import verify
from .impls import load_impl

CONVENTIONS = ("scale", "alignment", "window", "gqa", "empty_row", "lse_base", "lse_sink",
               "softcap", "alibi", "rope_layout", "rope_base")


@dataclass
class Found:
    """One convention's answer: ``status`` is ``ok``, ``DIFFERS``, ``undecided``, ``raised``
    or ``cannot be asked``; ``passed`` lists the candidates the kernel matched."""

    name: str
    declared: str
    found: str | None
    status: str
    why: str = ""
    passed: list = field(default_factory=list)


@dataclass
class Identification:
    """What :func:`identify` found: one :class:`Found` per convention probed."""

    impl: str
    dtype: str
    rows: list
    #: the declared values the probes use (``sink 1/2, softcap 30``), "" when none is given
    values: str = ""

    @property
    def exit_status(self) -> int:
        """0 when every convention that could be asked is the declared one, else 1."""
        return 0 if all(r.status in ("ok", "cannot be asked") for r in self.rows) else 1

    def found(self, name: str) -> str | None:
        """The candidate found for the convention ``name`` (None: none decided)."""
        return next(r.found for r in self.rows if r.name == name)

    def text(self) -> str:
        """One line per convention: ``NAME  declared X  found Y  ok|DIFFERS``."""
        w = [max(len(getattr(r, a) or "") for r in self.rows) for a in ("name", "declared")]
        wf = max(len(r.found or "") for r in self.rows)
        given = f" with {self.values}" if self.values else ""
        lines = [f"identify: {self.impl} in {self.dtype}{given}, each convention decided exactly "
                 "(within the proved tolerance of one candidate's certified answer, outside "
                 "every other's)"]
        for r in self.rows:
            head = f"{r.name:<{w[0]}}  declared {r.declared:<{w[1]}}"
            tail = f"found {r.found or '-':<{wf}}  {r.status}" if r.status != \
                "cannot be asked" else r.status
            lines.append(f"{head}  {tail}" + (f" ({r.why})" if r.why else ""))
        return "\n".join(lines)


def _call(q, k, v, policy: Policy, mask=None, kind="bool_keep") -> Call:
    return Call(q, k, v, mask, policy=policy.replace(mask_kind=kind), name="probe")


def _at(rule, d: int):
    """A scale rule found (``default``, ``1/d_k``, a divisor squared, None) at d_k = d."""
    return Fraction(d * d) if rule == "1/d_k" else rule


def _probes(P: Policy, lse: str, found: dict):
    """Each probe: ``(name, declared label, kernel call, kernel lse, candidates, judged part)``,
    candidates ``[(label, exact call, lse base, value)]`` (a pair of calls: the outputs judged
    against the first, the log-sum-exp against the second); ``found`` (filled as probes
    decide) carries the scale (as a rule, applied at each probe's d_k) and the log-sum-exp
    base into the later probes."""
    def scaled(pol, d):                     # the exact side under the scale found
        return pol if "scale" not in found else pol.replace(divisor_squared=_at(found["scale"], d))
    d_k = next(d for d in (9, 4) if P.divisor_squared not in (d, d * d))   # 2/4 = 1/sqrt(4)
    rules = {"1/sqrt(d_k)": "default", "1/d_k": "1/d_k", "1": None}
    declared = P.scale_text().replace("none", "1")
    rules.setdefault(declared, P.divisor_squared)
    base = P.replace(causal=False, window=None, query_offset=None, alibi=None, rope=None,
                     softcap=None, sink=None, alignment="top_left")
    ones = [[1] * d_k]
    call = _call(ones, [[0] * d_k, [1] * d_k], [[0, 0], [1, 1]], base)   # d_v = 2, not d_k
    yield ("scale", declared, call, None, [(lab, call.with_policy(base.replace(
        divisor_squared=_at(d, d_k))), None, d) for lab, d in rules.items()], "outputs")
    zero = [[0]] * 6
    call = _call(zero[:2], zero[:4], [[1], [2], [4], [8]],
                 base.replace(causal=True, alignment=P.alignment))
    cands = [("none", base)] + [(a, base.replace(causal=True, alignment=a))
                                for a in ("top_left", "bottom_right")]
    yield ("alignment", P.alignment, call, None, [(lab, call.with_policy(p), None, lab)
                                                 for lab, p in cands], "outputs")
    call = _call(zero, zero, [[2 ** j] for j in range(6)], base.replace(window=(3, 2)))
    cands = {"inclusive": (3, 2), "left exclusive": (2, 2), "right exclusive": (3, 1),
             "exclusive": (2, 1), "swapped": (2, 3), "causal": (3, 0), "none": None}
    yield ("window", "inclusive", call, None, [(lab, call.with_policy(base.replace(window=w)),
                                                None, lab) for lab, w in cands.items()],
           "outputs")
    call = _call([[[0]]] * 6, [[[0]]] * 3, [[[1]], [[2]], [[4]]], base.replace(gqa=P.gqa))
    yield ("gqa", P.gqa, call, None, [(g, call.with_policy(base.replace(gqa=g)), None, g)
                                      for g in ("interleave", "tile")], "outputs")
    qkv = [[0], [0]], [[0]] * 3, [[1], [3], [9]]
    mask = [[False] * 3, [True, True, False]]      # row 0 sees no key, row 1 two of three
    call = _call(*qkv, base.replace(empty_row=P.empty_row), mask=mask)
    yield ("empty_row", P.empty_row, call, None, [(e, call.with_policy(base.replace(
        empty_row=e)), None, e) for e in ("zero", "nan", "uniform")] + [
        ("mask ignored", _call(*qkv, base), None, None),
        ("mask inverted", _call(*qkv, base, mask, "bool_drop"), None, None)], "outputs")
    call = _call([[1]], [[0], [1]], [[1], [2]], base)    # scores 0 and 1: log(S) is neither
    yield ("lse_base", lse, call, lse, [(b, call.with_policy(scaled(base, 1)), b, b)
                                        for b in ("e", "2")], "lse")
    sink = base.replace(sink=P.sink if P.sink is not None else Fraction(0))
    call = _call([[0]], [[0], [0]], [[1], [2]], sink)
    out = call.with_policy(base)            # "out": the outputs with the sink, the lse without
    yield ("lse_sink", "in", call, lse, [(lab, c, found.get("lse_base", lse), lab) for lab, c in (
        ("in", call), ("out", (call, out)), ("sink ignored", out))], "both")
    cap = P.softcap if P.softcap is not None else Fraction(2)    # at 1, tanh(s) = 1*tanh(s/1)
    pol = scaled(base.replace(softcap=cap), d_k)
    call = _call(ones, [[0] * d_k, [1] * d_k], [[0], [1]], base.replace(softcap=cap))
    cands = [("cap*tanh(s/cap)", pol), ("none", pol.replace(softcap=None))]
    root = rational_sqrt(pol.divisor_squared_for(d_k) or Fraction(1))
    if root not in (None, 1):               # scale * cap * tanh(q.k / cap): a cap of cap * scale
        cands.insert(1, ("before the scale", pol.replace(softcap=cap / root)))
    yield ("softcap", "cap*tanh(s/cap)", call, None,
           [(lab, call.with_policy(p), None, lab) for lab, p in cands], "outputs")
    a = P.alibi or Alibi(6)
    h, form = a.heads, a.form
    other = "symmetric" if form != "symmetric" else "relative"
    n = 1 << h.bit_length()
    rules = [(f"{h} heads", h)] + ([] if h & (h - 1) == 0 else [(f"first {h} of {n}", n)])
    call = _call([[[0]] * 3] * h, [[[0]] * 3] * h, [[[1], [2], [4]]] * h,
                 base.replace(alibi=Alibi(h, form)))
    yield ("alibi", f"{form}, {h} heads", call, None, [(f"{f}, {r}", call.with_policy(
        base.replace(alibi=Alibi(m, f))), None, (f, m)) for r, m in rules for f in (form, other)]
        + [("none", call.with_policy(base), None, None)], "outputs")
    # RoPE: the query at position 1, the key at 2 (8): rotating the query matters; under
    # partial rotary the head is twice the rotated width, so a kernel turning all of it differs;
    # under a scaling 16 wide, its lowest frequency in the band llama3 scales
    r = P.rope or Rope()
    d = max(4, 2 * (r.dims or 0), 16 if r.scaling else 0)
    w = r.dims or d
    q, k, z = [0] * d, [0] * d, [0] * d
    q[1], q[w // 2], k[0] = -1, 2, 2        # scores 4 sin(1) (half), -2 sin(1) (interleaved), 0
    q[d // 2] += 1 if r.dims else 0         # an entry the declared rope leaves unturned
    call = _call([z, q, z], [z, z, k], [[0], [0], [1]], base.replace(rope=r))
    yield ("rope_layout", r.layout, call, None,
           [(lay, call.with_policy(scaled(base.replace(rope=replace(r, layout=lay)), d)), None,
             lay) for lay in ("half", "interleaved")] + [("none", call.with_policy(scaled(
               base, d)), None, None)], "outputs")
    lay = replace(r, layout=found.get("rope_layout") if found.get("rope_layout") in
                  ROPE_LAYOUTS else r.layout)
    i, j, _ = lay.pairs(d)[-1 if r.scaling else min(1, w // 2 - 1)]   # a scaled band: the lowest
    q, k = [0] * d, [0] * d
    q[j] = k[i] = 32 if r.scaling else 8    # the score 64 sin(7 theta^(-2/w)) unscaled
    if r.dims:                              # turned only by a kernel that ignores dims
        q[i + d // 2] = 1
    thetas = dict.fromkeys((r.theta, Fraction(10000), Fraction(500000), Fraction(10 ** 6)))
    call = _call([z, q] + [z] * 7, [z] * 8 + [k], [[0]] * 8 + [[1]], base.replace(rope=lay))
    yield ("rope_base", str(r.theta), call, None,
           [(str(t), call.with_policy(scaled(base.replace(rope=replace(lay, theta=t)), d)),
             None, t) for t in thetas] + [("none", call.with_policy(scaled(base, d)), None,
                                           None)], "outputs")


class _Replay(Impl):
    """The kernel's one answer, handed to :func:`verify` under each candidate."""

    def __init__(self, answer, name: str):
        self.stored, self.name = answer, name

    def answer(self, call):
        return self.stored


def identify(impl, policy: Policy | None = None, *, dtype: str = "float32", lse: str = "e",
             conventions=CONVENTIONS, arrays: str = "numpy") -> Identification:
    """Find which conventions ``impl`` implements (see the module), declared ``policy``'s.

    Args:
        impl: a kernel as :func:`~exactattn.verify.impls.load_impl` takes it: ``numpy``,
            ``torch``, ``jax``, ``flex``, ``module:function`` or a callable in SDPA's
            convention (``f(query, key, value, *, attn_mask=None, is_causal=False,
            scale=None, enable_gqa=False, ...)``, handed ``window``, ``sink``,
            ``softcap``, ``alibi_slopes``, ``rope_theta``, ``rope_layout`` and
            ``return_lse`` as :class:`~exactattn.verify.adapter.FunctionImpl` does).
        policy: the declared conventions (default: SDPA's, ``Policy()``); its ``scale``,
            ``alignment``, ``gqa``, ``empty_row``, ``softcap``, ``sink``, ``alibi`` and
            ``rope`` are what the kernel is handed and what it is expected to do.
        lse: the declared log-sum-exp base (``e`` or ``2``).
        conventions: the names to probe (default all, :data:`CONVENTIONS`).

    Raises:
        InputError: an unknown convention or ``lse``, a dtype the kernel does not run.
    """
    P = policy or Policy()
    impl = load_impl(impl, arrays=arrays)
    check_dtype(impl, dtype)
    lse = check_base(lse, "lse")
    bad = [c for c in conventions if c not in CONVENTIONS]
    if bad or not conventions:
        raise InputError(f"conventions must name some of {', '.join(CONVENTIONS)} (got "
                         f"{shorten(bad[0] if bad else 'none', quote=True)})")
    rows, found = [], {}
    for name, declared, call, want, cands, part in _probes(P, lse, found):
        if name not in conventions:
            continue
        answer, status, why, _ = ask(impl.answer, make_call(call, dtype, want), asking=True)
        if status:
            rows.append(Found(name, declared, None, status, why))
            continue
        passed, wrong = [], None
        for label, exact, base, value in cands:
            try:
                two = exact if isinstance(exact, tuple) else (exact, exact)
                reps = [(a, verify(_Replay(answer, impl.name), two[a == "lse_found"], dtype,
                                   lse=base, probes=())) for a in
                        {"outputs": ["found"], "lse": ["lse_found"]}.get(part, ["found", "lse_found"])]
                ok = all(getattr(rep, a).passed for a, rep in reps)
            except Undecided:           # not provably outside this candidate: not separated
                ok, reps = True, []
            wrong = next((rep.raised for _, rep in reps if rep.raised), None)
            if wrong is not None:       # an output of the wrong shape: the kernel's failure
                break
            if ok:
                passed.append((label, value))
        if wrong is not None:
            rows.append(Found(name, declared, None, "raised", wrong))
        elif len(passed) == 1:
            found[name] = passed[0][1]
            rows.append(Found(name, declared, passed[0][0],
                              "ok" if passed[0][0] == declared else "DIFFERS", passed=passed))
        elif passed:
            rows.append(Found(name, declared, "undecided", "undecided",
                              " or ".join(p[0] for p in passed), passed))
        else:
            rows.append(Found(name, declared, "none of the candidates", "DIFFERS",
                              "; ".join(c[0] for c in cands)))
    return Identification(impl.name, dtype, rows, ", ".join(
        f"{k} {v}" for k, v in P.modifiers().items() if k in ("sink", "softcap")))
