"""One generator of composed attention calls for the differential test against the mpmath oracle.

:func:`draw_case` builds one call from a ``choose(options)`` function that picks one element
of a list, so the same code serves Hypothesis (:func:`cases`: ``choose`` draws with
``st.sampled_from``, and shrinks towards the first option of every list) and the soak
script (:func:`random_case`: ``choose`` is ``rng.choice``).

A case is the oracle's dict (every number a string of an exact rational)::

    {"query": [B][H][L][E], "key": [B][Hkv][S][E], "value": [B][Hkv][S][Ev],
     "scale": "default" | "none" | {"divisor_squared": "3"},
     "causal": bool, "alignment": ..., "empty_row": ..., "gqa": ...,
     "mask": None | {"kind": ..., "rows": [B][H][L][S]}, "window": None | [l, r],
     "query_offset": None | int, "softcap": None | "5", "sink": None | "1/2",
     "alibi": None | {"heads": 16, "form": ...}, "head": 0,
     "rope": None | {"theta": ..., "layout": ..., "dims": (optional) the rotated width,
                     "scaling": (optional) transformers' rope scaling dict},
     "dropout": None | {"p": ..., "keep": [B][H][L][S]}, "d_out": None | [B][H][L][Ev],
     "d_lse": None | [B][H][L] (the upstream gradient of an LSE output),
     "notes": {...}}

``notes`` is not part of the oracle's interface (:func:`oracle_case` drops it): ``kind`` (which
family built the case) and ``ties``, a list of ``[b, h, i, j1, j2]`` whose shares are equal by
construction (mirrored RoPE keys, equal soft-capped logits), so the package must say so.

Sizes are small: B, H <= 2, L, S <= 4, E <= 4, entries in -2..2 in halves.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any, Callable

#: entries of query, key, value and d_out; the first is what Hypothesis shrinks to
NUMBERS = ["0", "1", "-1", "1/2", "-1/2", "2", "-2", "3/2", "-3/2"]
#: additive mask entries (None = -inf hides the key)
OFFSETS = ["0", "1/2", "-1", None, "1", "-1/2", "3/2"]
SCALES = ["default", "none", {"divisor_squared": "2"}, {"divisor_squared": "3"},
          {"divisor_squared": "1/8"}, {"divisor_squared": "4"}, {"divisor_squared": "6"},
          {"divisor_squared": "1/2"}]
IRRATIONAL_SCALES = [{"divisor_squared": "3"}, {"divisor_squared": "2"},
                     {"divisor_squared": "6"}, {"divisor_squared": "1/8"}]
ALIBI_HEADS = [8, 2, 6, 12, 16, 24, 32]
IRRATIONAL_ALIBI_HEADS = [16, 12, 24, 32]
ALIBI_FORMS = ["relative", "absolute", "symmetric"]
THETAS = ["10000", "100", "2", "1/2", "500000"]
#: RoPE scalings as transformers writes them (linear, dynamic NTK, llama3's bands and blend,
#: yarn's ramp and attention factor); ``inv_freq``: frequencies given as data
SCALINGS = [{"rope_type": "linear", "factor": "5/2"},
            {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
             "original_max_position_embeddings": 16},
            {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 64},
            {"rope_type": "dynamic", "factor": "2", "max_position_embeddings": 2},
            {"rope_type": "llama3", "factor": "3/2", "low_freq_factor": "1/2",
             "high_freq_factor": 2, "original_max_position_embeddings": 8},
            {"rope_type": "yarn", "factor": 16, "original_max_position_embeddings": 32,
             "beta_fast": 8, "beta_slow": "1/2", "mscale": 1, "mscale_all_dim": "1/2"},
            {"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 16,
             "attention_factor": "6/5"},
            {"rope_type": "linear", "factor": "1/2"},
            {"inv_freq": ["3/2", "1/3"]}]
SOFTCAPS = ["5", "2", "1/2", "30"]
SINKS = ["0", "1/2", "-1", "2"]
DROPOUTS = ["1/3", "1/2", "1/10"]
#: families of cases; repeated names make them likelier under rng.choice
KINDS = ["general", "general", "general", "self", "self", "self", "self", "positional",
         "positional", "three_generators", "rope_tie", "softcap_tie", "hidden_rows", "wide_rows",
         "near_boundary", "llama"]

Choose = Callable[[list], Any]


def _maybe(choose: Choose, value_fn: Callable[[], Any], odds: int = 3):
    """None, or (once in ``odds``) ``value_fn()``; None first so that Hypothesis shrinks it away."""
    return value_fn() if choose([False] * (odds - 1) + [True]) else None


def _grid(choose: Choose, shape: tuple, pick: Callable[[], Any]) -> list:
    if len(shape) == 1:
        return [pick() for _ in range(shape[0])]
    return [_grid(choose, shape[1:], pick) for _ in range(shape[0])]


def _numbers(choose: Choose, shape: tuple) -> list:
    return _grid(choose, shape, lambda: choose(NUMBERS))


def _base(B=1, H=1, Hkv=1, L=1, S=1, E=1, Ev=1, choose: Choose | None = None) -> dict:
    """A plain call of the given sizes (entries drawn when ``choose`` is given, else zeros)."""
    num = (lambda shape: _numbers(choose, shape)) if choose else \
        (lambda shape: _grid(None, shape, lambda: "0"))
    return {"query": num((B, H, L, E)), "key": num((B, Hkv, S, E)), "value": num((B, Hkv, S, Ev)),
            "scale": "default", "causal": False, "alignment": "top_left", "empty_row": "zero",
            "gqa": "interleave", "mask": None, "window": None, "query_offset": None,
            "softcap": None, "sink": None, "alibi": None, "head": 0, "rope": None,
            "dropout": None, "d_out": None, "d_lse": None, "notes": {"kind": "plain", "ties": []}}


def dims(case: dict) -> tuple:
    """``(B, H, Hkv, L, S, E, Ev)`` of a case."""
    q, k, v = case["query"], case["key"], case["value"]
    return (len(q), len(q[0]), len(k[0]), len(q[0][0]), len(k[0][0]), len(q[0][0][0]),
            len(v[0][0][0]))


def _alibi(choose: Choose, H: int, heads_from: list = ALIBI_HEADS) -> tuple[dict, int]:
    heads = choose(heads_from)
    form = choose(ALIBI_FORMS)
    head = choose(list(range(0, heads - H + 1)))
    return {"heads": heads, "form": form}, head


def _mask(choose: Choose, B: int, H: int, L: int, S: int, kind: str | None = None) -> dict:
    kind = kind or choose(["bool_keep", "bool_drop", "additive"])
    hide_all = choose([False, False, True])        # a row with every key hidden, on purpose

    def row(entries):
        if kind == "bool_keep":
            r = [choose([True, True, False]) for _ in range(S)]
            return [False] * S if entries else r
        if kind == "bool_drop":
            r = [choose([False, False, True]) for _ in range(S)]
            return [True] * S if entries else r
        r = [choose(OFFSETS) for _ in range(S)]
        return [None] * S if entries else r
    rows = [[[row(hide_all and i == L - 1 and choose([False, True])) for i in range(L)]
             for _ in range(H)] for _ in range(B)]
    return {"kind": kind, "rows": rows}


def _modifiers(choose: Choose, case: dict, *, rope_ok: bool) -> None:
    """Positions, masks and score modifiers, each on about one time in three."""
    B, H, Hkv, L, S, E, Ev = dims(case)
    case["scale"] = choose(SCALES)
    case["causal"] = choose([False, True])
    case["alignment"] = choose(["top_left", "bottom_right"])
    case["empty_row"] = choose(["zero", "uniform", "nan"])
    case["gqa"] = choose(["interleave", "tile"])
    case["window"] = _maybe(choose, lambda: [choose([None, 0, 1, 2]), choose([None, 0, 1, 2])], 4)
    case["query_offset"] = _maybe(choose, lambda: choose([0, 1, 2, 3, 5]), 4)
    case["softcap"] = _maybe(choose, lambda: choose(SOFTCAPS), 4)
    case["sink"] = _maybe(choose, lambda: choose(SINKS), 4)
    alibi = _maybe(choose, lambda: _alibi(choose, H), 3)
    if alibi:
        case["alibi"], case["head"] = alibi
    if rope_ok and E % 2 == 0:
        case["rope"] = _maybe(choose, lambda: {"theta": choose(THETAS),
                                              "layout": choose(["half", "interleaved"])}, 4)
        if case["rope"] is not None:
            _scaling(choose, case["rope"], E)
    case["dropout"] = _maybe(choose, lambda: {
        "p": choose(DROPOUTS),
        "keep": _grid(choose, (B, H, L, S), lambda: choose([True, True, False]))}, 4)
    case["d_out"] = _maybe(choose, lambda: _numbers(choose, (B, H, L, Ev)), 2)
    if case["d_out"] is not None:          # an LSE output's upstream gradient, at times
        case["d_lse"] = _maybe(choose, lambda: _numbers(choose, (B, H, L)), 3)


def _scaling(choose: Choose, rope: dict, rotated: int) -> None:
    """A scaling on about two ropes in three (dynamic NTK needs a rotated width of 4 or more;
    ``inv_freq`` gives one frequency per rotated pair)."""
    scaling = copy.deepcopy(choose([None] + SCALINGS)) if choose([False, True, True]) else None
    if scaling is None or (scaling.get("rope_type") == "dynamic" and rotated < 4):
        return
    if "inv_freq" in scaling:
        scaling["inv_freq"] = scaling["inv_freq"][:rotated // 2]
    rope["scaling"] = scaling


def _general(choose: Choose, self_attention: bool) -> dict:
    if self_attention:
        B = H = Hkv = 1
        L = S = choose([2, 1, 3, 4])
    else:
        B = choose([1, 2])
        H, Hkv = choose([(1, 1), (2, 1), (2, 2)])
        L, S = choose([1, 2, 3, 4]), choose([1, 2, 3, 4])
    E = choose([2, 1, 3, 4])
    Ev = choose([1, 2])
    case = _base(B, H, Hkv, L, S, E, Ev, choose)
    case["notes"]["kind"] = "self" if self_attention else "general"
    _modifiers(choose, case, rope_ok=True)
    if not self_attention or choose([False, False, True]):
        case["mask"] = _maybe(choose, lambda: _mask(choose, B, H, L, S), 3)
    return case


def _positional(choose: Choose) -> dict:
    """No score modifier: only the scale, positions (causal, window, offset), boolean masks,
    GQA and batches; the calls row blocks and the symbolic engine take."""
    case = _general(choose, self_attention=choose([True, False]))
    case["notes"]["kind"] = "positional"
    for f in ("softcap", "sink", "alibi", "rope", "dropout"):
        case[f] = None
    case["head"] = 0
    if case["mask"] is not None and case["mask"]["kind"] == "additive":
        case["mask"] = None
    return case


def _three_generators(choose: Choose) -> dict:
    """An irrational divisor, rational offsets (a sink or additive entries) and an irrational
    ALiBi slope in one call: three independent generators of the exponentials."""
    L = S = choose([2, 3])
    E = choose([1, 2])
    case = _base(1, 1, 1, L, S, E, 1, choose)
    case["notes"]["kind"] = "three_generators"
    case["scale"] = choose(IRRATIONAL_SCALES)
    case["alibi"], case["head"] = _alibi(choose, 1, IRRATIONAL_ALIBI_HEADS)
    if choose(["sink", "additive", "both"]) in ("sink", "both"):
        case["sink"] = choose(["1/2", "-1", "0"])
    if case["sink"] is None or choose([False, True]):
        case["mask"] = {"kind": "additive",
                        "rows": [[[[choose(["1/2", "0", "-1", "1"]) for _ in range(S)]
                                   for _ in range(L)]]]}
    case["causal"] = choose([False, True])
    case["d_out"] = _maybe(choose, lambda: _numbers(choose, (1, 1, L, 1)), 2) or \
        [[[["1"] for _ in range(L)]]]
    return case


def _llama(choose: Choose) -> dict:
    """The Llama path: rotary embeddings (the half layout, transformers' ``rotate_half``), query
    heads over fewer key/value heads (GQA), causal, and a query offset (a decode step's
    positions), no other modifier."""
    H, Hkv = choose([(2, 1), (4, 2), (4, 1)])
    S = choose([2, 3, 4])
    L = choose([1, S])
    Ev = choose([1, 2])
    E = choose([2, 4])
    case = _base(1, H, Hkv, L, S, E, Ev, choose)
    case["notes"]["kind"] = "llama"
    case["causal"] = True
    case["rope"] = {"theta": choose(["10000", "500000"]), "layout": "half"}
    if E == 4 and choose([False, True]):       # partial rotary (NeoX, Phi): entries 2, 3 unturned
        case["rope"]["dims"] = 2
    _scaling(choose, case["rope"], case["rope"].get("dims", E))
    case["gqa"] = choose(["interleave", "tile"])
    case["alignment"] = choose(["bottom_right", "top_left"])
    case["query_offset"] = _maybe(choose, lambda: choose([0, 1, S - L]), 2)
    case["d_out"] = _maybe(choose, lambda: _numbers(choose, (1, H, L, Ev)), 2)
    return case


def _rope_tie(choose: Choose) -> dict:
    """Mirrored RoPE keys: q = (1, 0) at position p, keys (1, -1) at p - 1 and (1, 1) at p + 1.

    Both rotated scores are cos(t) - sin(t) (t the pair's angle step), so the two shares are
    equal exactly; with nothing else visible each is exactly 1/2."""
    p = choose([1, 2])
    n = p + 2 + choose([0, 1])                 # keys 0 .. n-1, query row p (self-attention)
    case = _base(1, 1, 1, n, n, 2, 1, choose)
    case["notes"]["kind"] = "rope_tie"
    q = case["query"][0][0]
    k = case["key"][0][0]
    q[p] = ["1", "0"]
    k[p - 1] = ["1", "-1"]
    k[p + 1] = ["1", "1"]
    case["rope"] = {"theta": choose(THETAS), "layout": choose(["half", "interleaved"])}
    _scaling(choose, case["rope"], 2)          # the mirror holds at any frequency and gain
    case["scale"] = choose(["default", "none", {"divisor_squared": "3"}])
    how = choose(["plain", "window", "mask"])
    if how == "window":                        # keys p-1, p, p+1 only
        case["window"] = [1, 1]
        if choose([False, True]):
            case["query_offset"] = 0           # query i at position i, as without an offset
    elif how == "mask":                        # only the two mirrored keys: shares exactly 1/2
        rows = [[True] * n for _ in range(n)]
        rows[p] = [j in (p - 1, p + 1) for j in range(n)]
        case["mask"] = {"kind": "bool_keep", "rows": [[rows]]}
    case["notes"]["ties"] = [[0, 0, p, p - 1, p + 1]]
    return case


def _softcap_tie(choose: Choose) -> dict:
    """Equal soft-capped logits: softcap 5, ALiBi 8 heads head 0 (slope 1/2), the query at
    position 2; keys 0 and 1 have the same raw score 1, and an additive offset of -1/2 on
    key 1 cancels its ALiBi difference: both logits are 5 tanh(1/5) - 1.  The ``symmetric``
    variant needs no mask: keys at equal distances on both sides of the query."""
    variant = choose(["additive", "symmetric"])
    n = 3 if variant == "additive" else choose([3, 4])
    case = _base(1, 1, 1, n, n, 1, 1, choose)
    case["notes"]["kind"] = f"softcap_tie/{variant}"
    case["scale"] = "none"
    case["softcap"] = choose(["5", "2", "30"])
    case["alibi"], case["head"] = {"heads": 8, "form": "relative"}, 0
    q, k = case["query"][0][0], case["key"][0][0]
    if variant == "additive":
        q[2] = ["1"]
        k[0] = ["1"]
        k[1] = ["1"]
        rows = [[choose(["0", "1/2"]) for _ in range(n)] for _ in range(n)]
        rows[2] = ["0", "-1/2", choose(["0", "-1", None])]
        case["mask"] = {"kind": "additive", "rows": [[rows]]}
        case["notes"]["ties"] = [[0, 0, 2, 0, 1]]
    else:
        case["alibi"]["form"] = "symmetric"
        q[1] = ["1"]
        k[0] = ["1"]
        k[2] = ["1"]
        case["notes"]["ties"] = [[0, 0, 1, 0, 2]]
    case["sink"] = choose([None, "0"])
    return case


def _hidden_rows(choose: Choose) -> dict:
    """Rows that see no key: a window or offset that puts every key out of reach, a mask that
    hides all, or the causal rule with keys beyond the queries."""
    self_attention = choose([True, False])
    case = _general(choose, self_attention)
    B, H, Hkv, L, S, E, Ev = dims(case)
    case["notes"]["kind"] = "hidden_rows"
    how = choose(["window", "mask", "offset"])
    if how == "window":
        case["window"] = [0, 0]
        case["query_offset"] = choose([S, S + 1, -1, -2])
    elif how == "offset":
        case["causal"] = True
        case["query_offset"] = choose([-1, -2])
    else:
        kind = choose(["bool_keep", "bool_drop", "additive"])
        hidden = {"bool_keep": False, "bool_drop": True, "additive": None}[kind]
        m = _mask(choose, B, H, L, S, kind)
        for b in range(B):
            for h in range(H):
                if choose([True, False]):
                    m["rows"][b][h] = [[hidden] * S for _ in range(L)]
                else:
                    m["rows"][b][h][0] = [hidden] * S
        case["mask"] = m
    return case


def _wide_rows(choose: Choose) -> dict:
    """One or two queries against 540 or 600 keys, no modifier: a row sum past what the bulk
    rounding held in uint64 at 6 places (it wrapped at 537 keys and printed 0.000000)."""
    case = _base(1, 1, 1, choose([1, 2]), choose([540, 600]), 1, 1, choose)
    case["notes"]["kind"] = "wide_rows"
    return case


#: shares that sit next to a rounding boundary: at 6 places (…5 in the 7th) and at 4
BOUNDARIES = ["0.1234565", "0.5000005", "0.9999995", "0.0000005", "0.12345", "0.99995"]


def _logit_text(p: str, others: int, digits: int = 17) -> str:
    """A rational d of ``digits`` significant digits with exp(d) / (others + exp(d)) within
    about 10^-digits of ``p``: d = ln(others p / (1 - p)), rounded (mpmath at 60 digits, in
    this generator only)."""
    import mpmath
    with mpmath.workdps(60):
        d = mpmath.log(others * mpmath.mpf(p) / (1 - mpmath.mpf(p)))
        return mpmath.nstr(d, digits, min_fixed=-50, max_fixed=50)


def _near_boundary(choose: Choose) -> dict:
    """A share within about 1e-17 or 1e-21 of a rounding boundary (and an output equal to it): two
    equal queries against two keys (0 and d), or 100 against 100 keys or 14 against 600 (d
    and zeros), which reach the bulk paths' digit tables (more than 8,192 exponentials);
    L = S makes it a self-attention case, which the engines' bulk path runs too."""
    p = choose(BOUNDARIES)
    L, S = choose([(2, 2), (100, 100), (14, 600)])
    case = _base(1, 1, 1, L, S, 1, 1)
    d = _logit_text(p, S - 1, choose([17, 21]))   # within 1e-17 or 1e-21: past 2^-62 too
    case["query"] = [[[["1"]] * L]]
    case["key"] = [[[[d]] + [["0"]] * (S - 1)]]
    case["value"] = [[[["1"]] + [["0"]] * (S - 1)]]
    case["scale"] = "none"
    case["notes"]["kind"] = f"near_boundary/{p}"
    return case


def draw_case(choose: Choose) -> dict:
    """One composed call; ``choose(options)`` returns one element of the list ``options``."""
    kind = choose(KINDS)
    if kind == "general":
        return _general(choose, self_attention=False)
    if kind == "self":
        return _general(choose, self_attention=True)
    if kind == "positional":
        return _positional(choose)
    if kind == "three_generators":
        return _three_generators(choose)
    if kind == "rope_tie":
        return _rope_tie(choose)
    if kind == "llama":
        return _llama(choose)
    if kind == "softcap_tie":
        return _softcap_tie(choose)
    if kind == "wide_rows":
        return _wide_rows(choose)
    if kind == "near_boundary":
        return _near_boundary(choose)
    return _hidden_rows(choose)


def random_case(rng: random.Random) -> dict:
    """:func:`draw_case` with ``rng.choice`` (the soak script's cases)."""
    return draw_case(rng.choice)


def cases():
    """A Hypothesis strategy of cases (:func:`draw_case` drawing with ``st.sampled_from``)."""
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw):
        return draw_case(lambda options: draw(st.sampled_from(list(options))))
    return strategy()


def oracle_case(case: dict) -> dict:
    """The case as the oracle takes it (without ``notes``)."""
    return {k: v for k, v in case.items() if k != "notes"}


def case_json(case: dict) -> str:
    """The case as one line of JSON (for failure messages and the soak's failures file)."""
    return json.dumps(case, separators=(",", ":"))


def with_changes(case: dict, **changes) -> dict:
    """A deep copy of a case with some fields changed."""
    out = copy.deepcopy(case)
    out.update(changes)
    return out


# --------------------------------------------------------------------------- fixed cases
def self_case(x_q, x_k, x_v, **policy) -> dict:
    """A self-attention case (B = H = Hkv = 1) from queries, keys and values (L x E lists)."""
    case = _base(1, 1, 1, len(x_q), len(x_k), len(x_q[0]), len(x_v[0]))
    case["query"], case["key"], case["value"] = [[x_q]], [[x_k]], [[x_v]]
    case["notes"] = {"kind": "fixed", "ties": policy.pop("ties", [])}
    case.update(policy)
    return case


def known_cases() -> dict[str, dict]:
    """The four examples known wrong when this harness was written (see tests/checks/test_oracle.py)."""
    # 1. x = [1], [0] with W_Q = W_K = W_V = [[1]]: q = k = v = x.  divisor sqrt(3), sink 1/2,
    #    ALiBi 16 heads head 0: the gradients' P for query 0 was 0.402099 0.225732 0.372169
    #    where the right shares are 0.326358 0.371576 0.302066.
    x = [["1"], ["0"]]
    sink = self_case(x, x, x, scale={"divisor_squared": "3"}, sink="1/2",
                     alibi={"heads": 16, "form": "relative"}, head=0,
                     d_out=[[[["1"], ["1"]]]])
    # 1b. the same with an additive mask offset [1/2, 0] on query 0 in place of the sink
    offset = self_case(x, x, x, scale={"divisor_squared": "3"},
                       alibi={"heads": 16, "form": "relative"}, head=0,
                       mask={"kind": "additive", "rows": [[[["1/2", "0"], ["0", "0"]]]]},
                       d_out=[[[["1"], ["1"]]]])
    # 2. RoPE d=2 base 10000, q = (1, 0) at position 1, keys (1, -1) at 0 and (1, 1) at 2:
    #    both scores are cos 1 - sin 1; the package refused (not certified below 65536 bits).
    rope = self_case([["0", "0"], ["1", "0"], ["0", "0"]],
                     [["1", "-1"], ["0", "0"], ["1", "1"]], [["1"], ["0"], ["2"]],
                     rope={"theta": "10000", "layout": "half"}, ties=[[0, 0, 1, 0, 2]])
    # 3. softcap 5 + ALiBi 8 heads head 0, the query at position 2, additive offsets making two
    #    logits both 5 tanh(1/5) - 1: the equality raised.
    cap = self_case([["0"], ["0"], ["1"]], [["1"], ["1"], ["0"]], [["1"], ["2"], ["3"]],
                    scale="none", softcap="5", alibi={"heads": 8, "form": "relative"}, head=0,
                    mask={"kind": "additive",
                          "rows": [[[["0", "0", "0"], ["0", "0", "0"], ["0", "-1/2", "0"]]]]},
                    ties=[[0, 0, 2, 0, 1]])
    # 4. two equal log-sum-exps did not compare equal (two rows with the same scores)
    lse = self_case([["1"], ["1"]], [["1"], ["0"]], [["1"], ["2"]],
                    scale={"divisor_squared": "3"})
    lse["notes"]["equal_lse"] = [[0, 0, 0, 0, 0, 1]]
    return {"gradients_sink": sink, "gradients_offset": offset, "rope_mirror": rope,
            "softcap_alibi_tie": cap, "lse_equal": lse}
