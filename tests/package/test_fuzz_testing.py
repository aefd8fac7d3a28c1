"""The helpers of ``exactattn.testing`` on inputs a user could pass: every call passes, fails
its comparison (AssertionError) or is refused in one line (InputError), within 5 s of CPU time.

Drawn: odd ranks and sizes (0 included), ragged lists, NaN, infinities, huge and tiny floats,
every dtype (numpy, torch, Python lists, objects, text), mismatched shapes, and every keyword
each helper takes with good and bad values.  The profile decides the count (``ci``: 200 per
test); ``--hypothesis-profile=fuzz`` draws 5,000 (``EXACTATTN_FUZZ_EXAMPLES=N`` for N);
``EXACTATTN_FUZZ_STATS=FILE`` tallies the outcome and seconds of each call; the slow layer
draws 1,000 for each attention assertion.

Issue 46's run (2 cores, under load): 10,000 drawn inputs (4,000 to assert_attention_close,
4,000 to assert_attention_grads_close, 1,000 each to assert_table and assert_typed_equal), 0
tracebacks, slowest call 1.6 s (the first FlexAttention call); the inputs it found are
tests/package/test_testing_inputs.py.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import os
import time
from fractions import Fraction as F

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exactattn.call.modifiers import Alibi, Rope
from exactattn.errors import InputError
from exactattn.testing import (assert_attention_close, assert_attention_grads_close,
                               assert_table, assert_typed_equal)

torch = pytest.importorskip("torch")
# the drawn arrays' own casts (complex to float, 1e308 to float16) warn; what is judged is the cast
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning",
                                        "ignore::numpy.exceptions.ComplexWarning")

NAN, INF = math.nan, math.inf
EXTREMES = st.sampled_from([0.0, -0.0, 1.0, -1.5, 0.1, 1 / 3, 65504.0, 1e5, 1e30, -1e30, 1e308,
                            -1e308, 5e-324, 1e-300, 2.0 ** -24])
FLOATS = st.sampled_from([0.0, 1.0, -1.5, 1e308, -1e308, 5e-324, 65504.0, NAN, INF, -INF])
SMALL = st.sampled_from([0.0, 1.0, -1.0, 0.5, -0.25, 2.0, 0.125, 1.5, -3.0])
FLOAT_DTYPES = ["float64", "float32", "float16"]
ODD_DTYPES = ["int64", "int8", "bool", "complex128", "object", "<U3"]
TORCH = ["float32", "float64", "float16", "bfloat16", "float32", "bfloat16", "int32", "bool"]
ODD = [None, "abc", 1.5, [], [[]], {"a": 1}, F(1, 2), object(), (1.0, 2.0)]


def _nested(draw, shape, values):
    if not shape:
        return draw(values)
    return [_nested(draw, shape[1:], values) for _ in range(shape[0])]


def sometimes(draw, good, bad, odds: int = 6):
    """``good`` drawn, ``bad`` one time in ``odds``."""
    return draw(bad if draw(st.integers(0, odds - 1)) == odds - 1 else good)


@st.composite
def arrays(draw, shape):
    """An argument of ``shape`` as a user could hand it: mostly numpy or torch floats of small
    entries; else extreme entries (NaN, infinities, 1e308, 5e-324), a list (maybe ragged),
    another dtype, a scalar, None or text."""
    values = sometimes(draw, st.just(SMALL), st.sampled_from([EXTREMES, FLOATS]), 3)
    data = _nested(draw, shape, values)
    kind = sometimes(draw, st.sampled_from(["numpy", "numpy", "torch"]),
                     st.sampled_from(["list", "list", "odd", "numpy odd"]), 10)
    if kind == "list":
        if shape and shape[0] > 1 and draw(st.booleans()):
            data[0] = data[0][:-1] if isinstance(data[0], list) and data[0] else [data[0], 1.0]
        return data
    if kind == "odd":
        return draw(st.sampled_from(ODD))
    with np.errstate(all="ignore"):
        floats = np.asarray(data, dtype=np.float64)
        if kind == "torch":
            return torch.tensor(floats).to(getattr(torch, draw(st.sampled_from(TORCH))))
        dtype = draw(st.sampled_from(FLOAT_DTYPES if kind == "numpy" else ODD_DTYPES))
        return np.asarray(data).astype(dtype) if dtype == "<U3" else floats.astype(dtype)


@st.composite
def shapes(draw):
    """(query, key, value, output) shapes as SDPA takes them, sizes 0 to 3 (0 and 1 most
    often odd); now and then an odd rank or one size off."""
    rank = sometimes(draw, st.sampled_from([2, 3, 4]), st.sampled_from([1, 5]), 12)
    b, hq = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    hkv = sometimes(draw, st.just(hq), st.sampled_from([1, 2]), 4)
    L, S, E, Ev = (sometimes(draw, st.integers(1, 3), st.integers(0, 3), 8) for _ in range(4))
    lead_q, lead_kv = ((b, hq), (b, hkv)) if rank >= 4 else ((hq,), (hkv,)) if rank == 3 else ((), ())
    q, k, v, out = (*lead_q, L, E), (*lead_kv, S, E), (*lead_kv, S, Ev), (*lead_q, L, Ev)
    if rank in (1, 5):
        q = (E,) if rank == 1 else (1, *q)
    if draw(st.integers(0, 9)) == 9:       # one size off
        which = draw(st.integers(0, 3))
        q, k, v, out = ((*s[:-1], s[-1] + 1) if i == which else s
                        for i, s in enumerate((q, k, v, out)))
    return q, k, v, out


def _keywords(draw, L, S, heads):
    """Some of the keywords both assertions take: good values mostly, now and then a bad one."""
    mask = st.one_of(st.none(), arrays((L, S)).map(lambda m: m.astype(bool)
                                                   if isinstance(m, np.ndarray) else m),
                     arrays((L, S)), arrays((1, S)), arrays((S,)))
    good = {
        "attn_mask": mask, "dropout_p": st.just(0.0), "is_causal": st.booleans(),
        "scale": st.sampled_from([None, 0.5, 0.125, "1/sqrt(48)", F(1, 3), "none", 2.0]),
        "enable_gqa": st.booleans(), "max_ulps": st.sampled_from([None, 0, 4, 1000]),
        "worst": st.sampled_from([5, 1, 100]), "softcap": st.sampled_from(["30", "1/2", "1"]),
        "sink": st.sampled_from(["0", "-1", "1/3"]),
        "window": st.sampled_from([(1, 0), (None, 2), (0, 0), (None, None)]),
        "alibi": st.sampled_from([Alibi(2), Alibi(heads), Alibi(8, "symmetric")]),
        "rope": st.sampled_from([Rope(), Rope("500000", "interleaved"), Rope(F(1, 3)),
                                 Rope(dims=2)]),
        "query_offset": st.sampled_from([0, 3, 1000]),
        "alignment": st.sampled_from(["top_left", "bottom_right"]),
        "empty_row": st.sampled_from(["zero", "nan", "uniform"]),
        "gqa": st.sampled_from(["interleave", "tile"]), "head": st.sampled_from([0, 1]),
        "dropout": st.sampled_from(["1/10", "1/2", "0"]),
        "dropout_keep": st.sampled_from([[[True] * S] * L, [[j % 2 == 0 for j in range(S)]] * L]),
    }
    bad = {
        "attn_mask": st.sampled_from(ODD + [np.ones((L + 1, S + 2), bool)]),
        "dropout_p": st.sampled_from([0.1, "0", True, NAN, None]),
        "is_causal": st.sampled_from([1, "yes", None]),
        "scale": st.sampled_from([0.0, -1.0, NAN, INF, 1e308, 5e-324, "x", 1, True, "1e400"]),
        "enable_gqa": st.sampled_from(["x", 1]),
        "max_ulps": st.sampled_from([-1, 2 ** 70, 1.5, "x", True]),
        "worst": st.sampled_from([0, -1, "x", 10 ** 30, 2.5]),
        "softcap": st.sampled_from(["0", 30.0, "-1", "1e400", "1/10**400", "x"]),
        "sink": st.sampled_from(["1e3000", 0.5, "-1e3000", "x", "1e-3000"]),
        "window": st.sampled_from([(-1, 0), "x", (10 ** 30, 0), [0, 0, 0], (0.5, 1)]),
        "alibi": st.sampled_from([8, "x", Alibi(4096), Alibi(3)]),
        "rope": st.sampled_from(["10000", Rope("1e300"), Rope(dims=8), 1]),
        "query_offset": st.sampled_from([2 ** 53, -1, "3", 1.0, 10 ** 30]),
        "alignment": st.sampled_from(["x", None]), "empty_row": st.sampled_from(["x", 0]),
        "gqa": st.sampled_from(["x"]), "head": st.sampled_from([-1, 7, 4095, "0"]),
        "dropout": st.sampled_from([0.1, "1", "-1/2", "x"]),
        "dropout_keep": st.sampled_from(ODD + [[[1] * S] * L, [[True] * (S + 1)] * L]),
    }
    chosen = draw(st.lists(st.sampled_from(sorted(good)), max_size=4, unique=True))
    out = {name: sometimes(draw, good[name], bad[name]) for name in chosen}
    if "dropout" in out and "dropout_keep" not in out:
        out["dropout_keep"] = draw(good["dropout_keep"])
    if draw(st.integers(0, 19)) == 19:
        out[draw(st.sampled_from(["is_casual", "mask", "dropout_mask", "x"]))] = True
    return out


MODS = {"score_mod": lambda score, b, h, q_idx, kv_idx: score,
        "mask_mod": lambda b, h, q_idx, kv_idx: q_idx >= kv_idx}


def _tensor(x):
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))


def _torch_sdpa(q, k, v, keywords, grad_out=None):
    """torch's own SDPA output on these arguments, or its gradients against ``grad_out`` (what
    a user's test would have), or None where torch cannot run them."""
    sdpa = {k: v for k, v in keywords.items()
            if k in ("attn_mask", "is_causal", "scale", "enable_gqa")}
    try:
        q = _tensor(q).detach()
        q, k, v = (_tensor(x).detach().to(q.dtype).requires_grad_(grad_out is not None)
                   for x in (q, k, v))
        if sdpa.get("attn_mask") is not None:
            mask = _tensor(sdpa["attn_mask"])
            sdpa["attn_mask"] = mask if mask.dtype == torch.bool else mask.to(q.dtype)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, **sdpa)
        if grad_out is None:
            return out.detach()
        out.backward(_tensor(grad_out).to(q.dtype))
        return q.grad, k.grad, v.grad
    except Exception:
        return None


def _check(helper, *args, **kwargs):
    start = time.process_time()             # this process's CPU: a loaded machine does not count
    outcome = "pass"
    try:
        helper(*args, **kwargs)
    except AssertionError:
        outcome = "fail"
    except InputError as e:
        outcome = "refused"
        assert "\n" not in str(e) and len(str(e)) <= 400, str(e)[:2000]
    seconds = time.process_time() - start
    stats = os.environ.get("EXACTATTN_FUZZ_STATS")
    if stats:
        with open(stats, "a", encoding="utf-8") as f:
            f.write(f"{helper.__name__}\t{outcome}\t{seconds:.4f}"
                    f"{chr(9) + ascii((args, kwargs))[:3000] if seconds > 1 else ''}\n")
    assert seconds < 5, (seconds, args, kwargs)


SETTINGS = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                    deadline=None)


def _sizes(qs, ks):
    return (qs[-2] if len(qs) > 1 else 1, ks[-2] if len(ks) > 1 else 1,
            qs[-3] if len(qs) > 2 else 1)


def _close_case(data):
    qs, ks, vs, outs = data.draw(shapes())
    q, k, v = data.draw(arrays(qs)), data.draw(arrays(ks)), data.draw(arrays(vs))
    keywords = _keywords(data.draw, *_sizes(qs, ks))
    how = data.draw(st.sampled_from(["sdpa"] * 4 + ["drawn"] * 3 + ["none", "flex"]))
    actual = _torch_sdpa(q, k, v, keywords) if how == "sdpa" else None
    if actual is None and how != "none":
        actual = data.draw(arrays(outs))
    if how == "flex":         # FlexAttention runs the functions: yours, a typo, one that raises
        name = data.draw(st.sampled_from(["score_mod", "mask_mod"]))
        keywords[name] = data.draw(st.sampled_from(
            [MODS[name], MODS[name], "nope:fn", "os.path:join", 3, lambda *a: 1 / 0]))
        actual = sometimes(data.draw, st.none(), st.just(actual))
    if data.draw(st.booleans()):
        keywords["accumulation"] = sometimes(data.draw, st.sampled_from(
            ["float32", "float16", "bfloat16", "float64"]), st.sampled_from(["float8", None, 3]))
    _check(assert_attention_close, actual, q, k, v, **keywords)


def _grads_case(data):
    qs, ks, vs, outs = data.draw(shapes())
    q, k, v = data.draw(arrays(qs)), data.draw(arrays(ks)), data.draw(arrays(vs))
    keywords = _keywords(data.draw, *_sizes(qs, ks))
    grad_out = data.draw(arrays(outs))
    grads = _torch_sdpa(q, k, v, keywords, grad_out) if data.draw(st.booleans()) else None
    if grads is None:                # drawn, of one dtype as a backward pass gives them
        grads = [data.draw(arrays(s)) for s in (qs, ks, vs)]
        try:                         # the three as the first is (a torch or numpy dtype)
            grads = [_tensor(g).to(grads[0].dtype) if isinstance(grads[0], torch.Tensor)
                     else np.asarray(g, dtype=grads[0].dtype) for g in grads]
        except Exception:
            pass
        grads = sometimes(data.draw, st.just(tuple(grads)),
                          st.sampled_from([grads, tuple(grads[:2]), None, grads[0]]))
    _check(assert_attention_grads_close, grads, q, k, v, grad_out, **keywords)


@SETTINGS
@given(data=st.data())
def test_assert_attention_close_passes_fails_or_refuses_in_one_line(data):
    _close_case(data)


@SETTINGS
@given(data=st.data())
def test_assert_attention_grads_close_passes_fails_or_refuses_in_one_line(data):
    _grads_case(data)


@pytest.mark.slow
@pytest.mark.parametrize("case", [_close_case], ids=["close"])
def test_a_thousand_inputs_to_each_attention_assertion(case):
    """The slow layer's count: 1,000 drawn inputs (or the profile's, when larger).  The
    gradients' assertion keeps the quick layer's count: at 1,000 it draws gradients near
    1e308 whose exact rounding (ExpRatio.ball, precision doubled per step) ran past ten
    minutes in CI; that path has no precision limit yet."""
    count = max(1000, settings.default.max_examples)
    given(data=st.data())(settings(SETTINGS, max_examples=count)(case))()


LEAVES = st.one_of(st.integers(-3, 3), st.booleans(), st.none(), FLOATS, st.text(max_size=3),
                   st.fractions(max_denominator=5), st.sampled_from([np.float32(1), np.int64(1),
                                                                     np.float64(NAN)]))
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=3)
                      | st.lists(inner, max_size=3).map(tuple)
                      | st.dictionaries(st.one_of(st.text(max_size=2), st.integers(0, 2)),
                                        inner, max_size=3)
                      | st.lists(st.floats(), max_size=3).map(np.array)
                      | st.lists(st.integers(-2, 2), max_size=3).map(
                          lambda x: np.array(x, dtype=object)),
                      max_leaves=8)


@SETTINGS
@given(a=VALUES, b=VALUES, ordered=st.booleans())
def test_assert_typed_equal_passes_or_fails(a, b, ordered):
    _check(assert_typed_equal, a, b, ordered=ordered)
    _check(assert_typed_equal, a, a, ordered=ordered)


@functools.lru_cache(maxsize=None)
def _pages() -> tuple:
    """The tiny example's walkthrough in each format the audit reads, as the CLI prints it."""
    from exactattn.cli import main
    pages = []
    for fmt in ("markdown", "csv", "latex", "json"):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main(["walkthrough", "--example", "tiny", "--format", fmt])
        pages.append((fmt, out.getvalue()))
    return tuple(pages)


@st.composite
def pages(draw):
    """A printed page of tables (``suffix``, text): the tiny example's, some lines changed
    (a digit, nan, 1e400, a long number), dropped or cut short."""
    fmt, text = draw(st.sampled_from(_pages()))
    lines = text.splitlines()
    for _ in range(draw(st.integers(0, 3)) if lines else 0):
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        change = draw(st.sampled_from(["digit", "drop", "cut"]))
        if change == "drop" and len(lines) > 1:
            del lines[i]
        elif change == "cut":
            lines = lines[:i + 1]
        else:
            digits = [k for k, c in enumerate(lines[i]) if c.isdigit()]
            if digits:
                k = draw(st.sampled_from(digits))
                lines[i] = lines[i][:k] + draw(st.sampled_from(
                    ["0", "7", "-", "nan", "inf", "1e400", "9" * 60, "", "x", "1/0"])) + lines[i][k + 1:]
    suffix = draw(st.sampled_from([{"markdown": ".md", "latex": ".tex"}.get(fmt, "." + fmt),
                                   ".txt", ".html"]))
    return suffix, "\n".join(lines)


TABLE_OPTIONS = {
    "spec": [None, "no-such-file.json", 1, "x"], "example": ["tiny", "chronicle", "x", 1],
    "scores": [1, 0, -1, "x", 10 ** 9], "divisor": ["2", "sqrt(2)", "0", -1, "x", 2.5],
    "quantity": ["shares", "raw", "outputs", ["shares"], 1, "x"],
    "which": [[1, 2], [7, 8], 1, [0], ["x"], "1,2", [10 ** 30]],
    "rows": [[0, 1], [1, 0], [-1, 0], 1, "x", [1.5, 0], [0, 10 ** 30]],
    "no_scale": [True, False, "x"], "ties": ["half_even", "half_up", "x", 1],
    "fmt": ["markdown", "csv", "latex", "json", "html", "x", 1, None], "typo": [1],
    "x": list(range(len(ODD)))}          # the page itself: no path


@SETTINGS
@given(page=pages(), keywords=st.dictionaries(st.sampled_from(sorted(TABLE_OPTIONS)),
                                              st.integers(0, 7), max_size=3))
def test_assert_table_passes_fails_or_refuses_in_one_line(page, keywords, tmp_path_factory):
    suffix, text = page
    path = tmp_path_factory.mktemp("page") / f"page{suffix}"
    path.write_text(text, encoding="utf-8")
    keywords = {k: TABLE_OPTIONS[k][i % len(TABLE_OPTIONS[k])] for k, i in keywords.items()}
    if "spec" not in keywords and "scores" not in keywords and "example" not in keywords:
        keywords["example"] = "tiny"
    _check(assert_table, ODD[keywords.pop("x") % len(ODD)] if "x" in keywords else path, **keywords)
