"""identify: every convention of a zoo of numpy kernels, each with one convention changed.

The zoo kernel is written here from the textbook formulas (no exactattn code): softmax of
scaled scores in float64, rounded once to the dtype, with each convention switchable.
identify must find exactly what each kernel does: the changed convention reported
(DIFFERS, with the kernel's own value), every other one ``ok``, never a convention the
kernel does not have.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from exactattn.call import Policy
from exactattn.cli import main
from exactattn.verify.identify import CONVENTIONS, identify

#: the conventions of a correct (SDPA-default) kernel, as identify names them
RIGHT = {"scale": "1/sqrt(d_k)", "alignment": "top_left", "window": "inclusive",
         "gqa": "interleave", "empty_row": "zero", "lse_base": "e", "lse_sink": "in",
         "softcap": "cap*tanh(s/cap)", "alibi": "relative, 6 heads", "rope_layout": "half",
         "rope_base": "10000"}
#: one changed convention per zoo kernel: (convention, the value identify must find)
CHANGES = [("scale", "1/d_k"), ("scale", "1"), ("alignment", "none"),
           ("alignment", "bottom_right"), ("window", "left exclusive"),
           ("window", "right exclusive"), ("window", "exclusive"), ("window", "swapped"),
           ("gqa", "tile"), ("empty_row", "nan"), ("empty_row", "uniform"), ("lse_base", "2"),
           ("lse_sink", "out"), ("softcap", "before the scale"), ("softcap", "none"),
           ("alibi", "symmetric, 6 heads"), ("alibi", "relative, first 6 of 8"),
           ("rope_layout", "interleaved"), ("rope_base", "500000"), ("rope_base", "1000000"),
           ("window", "none"), ("alibi", "none"), ("rope_layout", "none"),
           ("softcap", "tanh(s/cap)"), ("rope_layout", "keys only"), ("empty_row", "mask ignored"),
           ("empty_row", "mask inverted"), ("gqa", "h // H_kv"), ("gqa", "h % group"),
           ("window", "causal"), ("scale", "1/sqrt(d_v)"), ("lse_sink", "sink ignored"),
           ("lse_base", "log(S)"), ("scale", "2/d_k")]
NONE = "none of the candidates"
#: what identify finds where a change moves other conventions too, or is no candidate
FINDS = {("rope_layout", "none"): {"rope_base": "none"},
         ("softcap", "tanh(s/cap)"): {"softcap": NONE},
         ("scale", "2/d_k"): {"scale": NONE, "softcap": NONE, "lse_base": NONE},  # 1/2 at d_k 4
         ("rope_layout", "keys only"): {"rope_layout": NONE, "rope_base": NONE},
         ("gqa", "h // H_kv"): {"gqa": NONE}, ("lse_base", "log(S)"): {"lse_base": NONE,
                                                                       "lse_sink": "out"}, ("gqa", "h % group"): {"gqa": NONE},
         ("scale", "1/sqrt(d_v)"): dict.fromkeys(("scale", "softcap", "rope_layout", "rope_base"),
                                                NONE)}


def _finds(name, value):
    """Every convention as identify must find it in the kernel with ``name`` changed to ``value``."""
    return {**RIGHT, name: value, **FINDS.get((name, value), {})}


def _slopes(h):
    def rule(n):
        return [2.0 ** (-8 * k / n) for k in range(1, n + 1)]
    p = 1 << (h.bit_length() - 1)
    return rule(h) if p == h else rule(p) + rule(2 * p)[0::2][:h - p]


def _rotate(x, pos, theta, layout):
    d = x.shape[-1]
    pairs = [(k, k + d // 2) if layout == "half" else (2 * k, 2 * k + 1) for k in range(d // 2)]
    out = x.copy()
    for k, (a, b) in enumerate(pairs):
        ang = pos * theta ** (-2 * k / d)
        c, s = np.cos(ang)[:, None], np.sin(ang)[:, None]
        out[..., a], out[..., b] = (x[..., a] * c[:, 0] - x[..., b] * s[:, 0],
                                    x[..., a] * s[:, 0] + x[..., b] * c[:, 0])
    return out


def zoo_kernel(query, key, value, *, attn_mask=None, is_causal=False, scale=None,
               enable_gqa=False, window=None, softcap=None, sink=None, alibi_slopes=None,
               rope_theta=None, rope_layout=None, rope_dims=None, rope_scaling=None,
               return_lse=False, conv=None, heads_rule=None):
    c = dict(RIGHT, **(conv or {}))
    dt = query.dtype
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (query, key, value))
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    if q.ndim >= 3 and q.shape[-3] != k.shape[-3]:
        H, Hk = q.shape[-3], k.shape[-3]
        g = H // Hk
        idx = [{"interleave": h // g, "tile": h % Hk, "h // H_kv": min(h // Hk, Hk - 1),
                "h % group": h % g}[c["gqa"]] for h in range(H)]
        k, v = k[..., idx, :, :], v[..., idx, :, :]
    i, j = np.arange(L)[:, None], np.arange(S)[None, :]
    if rope_theta is not None and c["rope_layout"] != "none":
        theta = {"10000": rope_theta, "500000": 5e5, "1000000": 1e6}[c["rope_base"]]
        layout = c["rope_layout"] if c["rope_layout"] == "interleaved" else rope_layout
        r = rope_dims if rope_dims and c.get("rope_dims") != "ignored" else E   # partial rotary
        f = rope_scaling["factor"] if rope_scaling and c.get("rope_scaling") != "ignored" else 1
        if c["rope_layout"] != "keys only":
            q[..., :r] = _rotate(q[..., :r], np.arange(L) / f, theta, layout)
        k[..., :r] = _rotate(k[..., :r], np.arange(S) / f, theta, layout)
    if scale is None:
        scale = {"1/sqrt(d_k)": 1 / math.sqrt(E), "1/d_k": 1 / E, "1": 1.0,
                 "1/sqrt(d_v)": 1 / math.sqrt(v.shape[-1]), "2/d_k": 2 / E}[c["scale"]]
    raw = q @ np.swapaxes(k, -1, -2)
    s = raw * scale
    if softcap is not None:
        s = {"cap*tanh(s/cap)": softcap * np.tanh(s / softcap),
             "before the scale": scale * softcap * np.tanh(raw / softcap), "none": s,
             "tanh(s/cap)": np.tanh(s / softcap)}[c["softcap"]]
    if (alibi_slopes is not None or heads_rule) and c["alibi"] != "none":
        h = q.shape[-3]
        m = np.array(_slopes(8)[:h] if c["alibi"].endswith("of 8") else
                     alibi_slopes if alibi_slopes is not None else _slopes(h))
        dist = -np.abs(i - j) if c["alibi"].startswith("symmetric") else -(i - j)
        s = s + m[:, None, None] * dist
    keep = np.ones((L, S), dtype=bool)
    if is_causal and c["alignment"] != "none":
        keep &= j <= i + (S - L if c["alignment"] == "bottom_right" else 0)
    if window is not None and c["window"] != "none":
        left, right = window
        if c["window"] == "swapped":
            left, right = right, left
        right = 0 if c["window"] == "causal" else right
        lo = i - left + (c["window"] in ("left exclusive", "exclusive"))
        hi = i + right - (c["window"] in ("right exclusive", "exclusive"))
        keep &= (j >= lo) & (j <= hi)
    if attn_mask is not None and c["empty_row"] != "mask ignored":
        keep = keep & (~attn_mask if c["empty_row"] == "mask inverted" else attn_mask)
    s = np.where(keep, s, -np.inf)
    cols = s if sink is None or c["lse_sink"] == "sink ignored" else np.concatenate([s, np.full(s.shape[:-1] + (1,), sink)], -1)
    top = np.max(cols, axis=-1, keepdims=True)
    empty = ~np.isfinite(top)
    top = np.where(empty, 0, top)
    e = np.exp(cols - top)
    den = e.sum(-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        p = (e / den)[..., :S]
    fill = {"zero": 0.0, "nan": np.nan}.get(c["empty_row"], 1 / S)   # a mask misread: uniform
    p = np.where(empty, fill, p)
    out = (p @ v).astype(dt)
    if not return_lse:
        return out
    es = np.exp(s - top).sum(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        lse = (top + np.log(den if c["lse_sink"] == "in" else es))[..., 0]
    if c["lse_base"] == "log(S)":                    # the count of keys, not the scores
        lse = np.full(lse.shape, math.log(S))
    return out, (lse / math.log(2) if c["lse_base"] == "2" else lse).astype(dt)


def _kernel(conv=None):
    fn = functools.partial(zoo_kernel, conv=conv)
    if conv and "of 8" in conv.get("alibi", ""):      # derives its slopes from the head count
        def fn(query, key, value, *, attn_mask=None, is_causal=False, scale=None,
               enable_gqa=False, alibi_heads=None):
            return zoo_kernel(query, key, value, attn_mask=attn_mask, is_causal=is_causal,
                              scale=scale, enable_gqa=enable_gqa, conv=conv, heads_rule=alibi_heads is not None)
    fn.__qualname__ = "zoo"
    return fn


def test_the_zoo_kernel_without_a_change_is_found_right_in_every_convention():
    found = identify(_kernel())
    assert {r.name: (r.found, r.status) for r in found.rows} == \
        {n: (v, "ok") for n, v in RIGHT.items()}
    assert found.exit_status == 0


@pytest.mark.parametrize("name,value", CHANGES, ids=[f"{n}={v}" for n, v in CHANGES])
def test_every_zoo_kernel_has_its_one_changed_convention_found_and_nothing_else(name, value):
    """34 kernels x 11 conventions (a modifier ignored among them): the changed one DIFFERS with the kernel's own value, every
    other convention is found as the kernel has it (never one it does not have)."""
    conv = {name: value}
    found = identify(_kernel(conv))
    for r in found.rows:
        if r.status == "cannot be asked":     # the derived-slopes kernel takes ALiBi only
            assert "of 8" in value and r.name not in ("scale", "alignment", "gqa", "empty_row",
                                                     "alibi")
            continue
        truth = _finds(name, value)[r.name]
        assert (r.name, r.found) == (r.name, truth)
        assert r.status == ("DIFFERS" if truth != RIGHT[r.name] else "ok")
    assert found.exit_status == 1


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_the_zoo_in_float16_and_float64(dtype):
    """The same zoo with the probes in float16 (11-bit significands) and float64: every
    kernel's conventions found as it has them."""
    for name, value in CHANGES:
        found = identify(_kernel({name: value}), dtype=dtype)
        assert [(r.name, r.found) for r in found.rows if r.status != "cannot be asked"] == [
            (r.name, _finds(name, value)[r.name]) for r in found.rows
            if r.status != "cannot be asked"]


def test_the_declared_policy_is_what_a_kernel_is_held_to():
    """A kernel that does bottom_right agrees once bottom_right is declared; declared 1/8 and
    the ALiBi rule for 12 heads (not a power of two) are probed as declared."""
    kern = _kernel({"alignment": "bottom_right"})
    found = identify(kern, Policy(alignment="bottom_right"), conventions=("alignment",))
    assert (found.found("alignment"), found.exit_status) == ("bottom_right", 0)
    from exactattn.call.modifiers import Alibi
    found = identify("numpy", Policy(scale="1/8", alibi=Alibi(12)), conventions=("scale", "alibi"))
    assert [(r.declared, r.found, r.status) for r in found.rows] == [
        ("1/8", "1/8", "ok"), ("relative, 12 heads", "relative, 12 heads", "ok")]


def test_a_declared_scale_partial_rotary_and_scaling_are_kept_in_every_candidate():
    """A kernel that scales by 1/d_k whatever it is handed, under a declared 1/2: found 1/d_k
    (the rule, applied at each probe's d_k), its soft-cap and RoPE right.  Under a declared
    partial rotary or linear scaling the zoo kernel is right, and one that ignores rope_dims
    or rope_scaling is none of the candidates (llama3 leaves the layout probe's frequency 1
    alone; the base probe's lowest frequency is in the band it scales)."""
    def one_over_d(query, key, value, *, scale=None, softcap=None, rope_theta=None,
                   rope_layout=None):
        return zoo_kernel(query, key, value, softcap=softcap, rope_theta=rope_theta,
                          rope_layout=rope_layout, conv={"scale": "1/d_k"})
    found = identify(one_over_d, Policy(scale="1/2"),
                     conventions=("scale", "softcap", "rope_layout", "rope_base"))
    assert [(r.found, r.status) for r in found.rows] == [
        ("1/d_k", "DIFFERS"), ("cap*tanh(s/cap)", "ok"), ("half", "ok"), ("10000", "ok")]
    from exactattn.call.modifiers import Rope
    rope = ("rope_layout", "rope_base")
    for declared, field in ((Rope(dims=4), "rope_dims"), (Rope(layout="interleaved", dims=4),
                            "rope_dims"), (Rope(scaling={"rope_type": "linear", "factor": 2}),
                                           "rope_scaling")):
        P = Policy(rope=declared)
        assert [(r.found, r.status) for r in identify(_kernel(), P, conventions=rope).rows] == \
            [(declared.layout, "ok"), ("10000", "ok")]
        assert [r.found for r in identify(_kernel({field: "ignored"}), P, conventions=rope).rows
                ] == [declared.layout if declared.layout == "interleaved" else NONE, NONE]
    llama3 = Policy(rope=Rope(scaling={"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
                                       "high_freq_factor": 4,
                                       "original_max_position_embeddings": 8192}))
    assert [r.found for r in identify("numpy", llama3, conventions=rope).rows] == ["half", "10000"]
    assert [r.found for r in identify(_kernel({"rope_scaling": "ignored"}), llama3,
                                      conventions=rope).rows] == ["half", NONE]  # w = 1: unscaled


def test_two_candidates_a_probe_cannot_separate_are_undecided_never_guessed():
    """A cap of 65504 moves a logit of 2 by about 6e-10: the three soft-cap forms are all within
    float32's tolerance of the kernel, so identify says undecided.  A kernel that answers the
    mean of the values is none of the scales; one that answers per key/value head has the
    wrong shape on the GQA probe (its failure, on that line)."""
    found = identify("numpy", Policy(softcap="65504"), conventions=("softcap",))
    assert [(r.found, r.status, r.why) for r in found.rows] == [
        ("undecided", "undecided", "cap*tanh(s/cap) or before the scale or none")]
    assert found.exit_status == 1

    def mean(query, key, value, **_):
        return np.repeat(value.mean(axis=-2, keepdims=True), query.shape[-2], axis=-2)
    found = identify(mean, conventions=("scale", "gqa"))
    assert [(r.found, r.status) for r in found.rows] == [
        ("none of the candidates", "DIFFERS"), (None, "raised")]
    assert found.rows[1].why.endswith("output must be 6 x 1 x 1 (got 3 x 1 x 1)")

    def words(query, key, value, **_):
        return "attention"
    found = identify(words, conventions=("scale",))
    assert [(r.found, r.status) for r in found.rows] == [(None, "raised")]
    assert found.rows[0].why.endswith("words's output must be an array of numbers (got str)")


def test_the_command_prints_one_line_per_convention_and_exits_by_agreement(capsys):
    rc = main(["identify", "--conventions", "scale,alignment", "--alignment", "bottom_right"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0 and out[1:] == ["scale      declared 1/sqrt(d_k)   found 1/sqrt(d_k)   ok",
                                   "alignment  declared bottom_right  found bottom_right  ok"]
    assert main(["identify", "--impl", "numpy-naive", "--conventions", "empty_row"]) == 1
    assert capsys.readouterr().out.splitlines()[1:] == [
        "empty_row  declared zero  found nan  DIFFERS"]


@pytest.mark.slow
@pytest.mark.jax
def test_jax_has_uniform_empty_rows_and_cannot_be_asked_about_a_softcap(capsys):
    pytest.importorskip("jax")
    assert main(["identify", "--impl", "jax", "--conventions", "empty_row,softcap"]) == 1
    assert capsys.readouterr().out.splitlines()[1:] == [
        "empty_row  declared zero             found uniform  DIFFERS",
        "softcap    declared cap*tanh(s/cap)  cannot be asked (call must have no softcap, sink, "
        "dropout for impl jax)"]


@pytest.mark.slow
def test_torch_sdpa_has_its_own_conventions_and_differs_from_a_declared_jax():
    pytest.importorskip("torch")
    found = identify("torch")
    assert {r.name: (r.found, r.status) for r in found.rows} == \
        {n: (v, "ok") for n, v in RIGHT.items()}
    found = identify("torch", Policy(empty_row="uniform"), conventions=("empty_row",))
    assert [(r.declared, r.found, r.status) for r in found.rows] == [
        ("uniform", "zero", "DIFFERS")]


@pytest.mark.parametrize("argv,message", [
    (["--conventions", "scale,colour"], "--conventions must be a comma list of scale, "),
    (["--impl", "nope"], "impl must be numpy, numpy-naive, torch, flex, flash-attn, jax or "),
    (["--dtype", "bfloat16"], "dtype must be one of float64, float32, float16 for numpy"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    try:
        rc = main(["identify", *argv])
    except SystemExit as e:       # argparse's own refusals exit from the parser
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith(f"exactattn: error: {message}") and err.count("\n") == 1


#: every identify option: the arguments that give it a value (after ``--conventions scale``)
OPTIONS = {"--impl": ["numpy-naive"], "--arrays": ["torch"], "--device": ["cpu"],
           "--backend": ["math"], "--dtype": ["float64"], "--conventions": ["gqa"],
           "--like": ["flash"], "--scale": ["1/8"], "--alignment": ["bottom_right"],
           "--empty-row": ["nan"], "--gqa": ["tile"], "--sink": ["1/2"], "--alibi": ["12"],
           "--softcap": ["30"], "--rope": ["500000"], "--lse": ["2"],
           "--rope-scaling": ['{"rope_type": "linear", "factor": 2}']}


def test_every_identify_option_changes_the_output_or_is_refused(capsys):
    from exactattn.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    flags = {s for a in sub.choices["identify"]._actions if a.dest not in ("help", "no_progress")
             for s in a.option_strings}
    assert flags == set(OPTIONS)
    every = ["--conventions", "scale,alignment,empty_row,gqa,lse_base,lse_sink,softcap,alibi,"
             "rope_base"]
    assert main(["identify", *every]) == 0
    out0 = capsys.readouterr().out
    for flag, value in OPTIONS.items():
        try:
            rc = main(["identify", *every, flag, *value])
        except SystemExit as e:
            rc = e.code
        out, err = capsys.readouterr()
        assert (rc == 2 and out == "" and err.count("\n") == 1) or \
            (rc in (0, 1) and out != out0), (flag, rc, err)

