"""exactattn.testing.assert_attention_close and assert_attention_grads_close: SDPA's arguments,
arrays read as their exact floats, the dtype read from the output, the worst entries named."""

from fractions import Fraction

import numpy as np
import pytest

from exactattn.errors import InputError, ShapeError
from exactattn.testing import assert_attention_close, assert_attention_grads_close
from exactattn.verify.check import Report

torch = pytest.importorskip("torch")
F = torch.nn.functional

# two queries and three keys, all scores 0: every share is 1/3 and each output is
# (1 + 1 + 2)/3 = 4/3, which float32 rounds up to 1.33333337306976318359375
Q, K, V = np.zeros((2, 1)), np.zeros((3, 1)), np.array([[1.0], [1.0], [2.0]])
F32_4_3 = np.float32(4 / 3)
ULP = 2.0 ** -23                       # float32's ULP in [1, 2)


def _row(message: str, index: str) -> list[str]:
    """The cells of the failure table's row for ``index`` (the index cell first)."""
    lines = [line for line in message.splitlines() if line.startswith(index + " ")]
    assert len(lines) == 1, message
    return [index] + lines[0][len(index):].split()


def _sdpa(shape=(1, 2, 8, 4), kv_heads=None, seed=0, dtype=torch.float32, **kw):
    g = torch.Generator().manual_seed(seed)
    b, h, n, e = shape
    hk = h if kv_heads is None else kv_heads
    q = torch.randn(b, h, n, e, generator=g, dtype=dtype)
    k, v = (torch.randn(b, hk, n, e, generator=g, dtype=dtype) for _ in range(2))
    return F.scaled_dot_product_attention(q, k, v, **kw), q, k, v


def test_a_correct_sdpa_output_passes_and_returns_the_report():
    out, q, k, v = _sdpa(is_causal=True)
    report = assert_attention_close(out, q, k, v, is_causal=True)
    assert type(report) is Report
    assert report.passed is True
    assert report.dtype == "float32"
    assert report.found.count == 1 * 2 * 8 * 4
    assert report.probes == []              # outputs the caller has: no probes run
    assert report.policy.causal is True


def test_an_entry_many_ulps_off_is_named_with_its_exact_value_float_got_and_ulps():
    actual = np.full((2, 1), F32_4_3)
    actual[1, 0] = F32_4_3 + np.float32(100 * ULP)
    with pytest.raises(AssertionError) as info:
        assert_attention_close(actual, Q, K, V)
    message = str(info.value)
    assert message.splitlines()[0].startswith(
        "actual: 1 of 2 outputs outside the tolerance in float32 (tolerance per output, the "
        "proved error of a correct float32 kernel accumulating in float32 (P rounded to "
        "float32), in ULPs at the terms: 56;")
    # index, exact value, exact in float32, got, ULPs, ULPs at the terms (|got - 4/3| is
    # 100 1/3 ULPs: the rounded value is 1/3 ULP above 4/3), relative error, status
    assert _row(message, "[1, 0]") == ["[1, 0]", "1.3333333333e+00", "1.3333334", "1.3333453",
                                       "100", "100.33", "8.97e-06", "over", "56"]
    assert "[0, 0]" not in message          # the correct entry is not listed
    assert repr(float(actual[1, 0])) == "1.3333452939987183"


def test_within_the_tolerance_passes_and_max_ulps_tightens_it():
    actual = np.full((2, 1), F32_4_3)
    actual[1, 0] = F32_4_3 + np.float32(8 * ULP)     # 8 ULPs: the default tolerance
    report = assert_attention_close(actual, Q, K, V)
    assert report.max_ulps == 8
    assert report.summary()["max_ulps"] == 8
    with pytest.raises(AssertionError, match=r"tolerance 7 ULPs"):
        assert_attention_close(actual, Q, K, V, max_ulps=7)


def test_worst_limits_the_entries_shown():
    actual = np.full((2, 1), F32_4_3 + np.float32(60 * ULP))     # the bound allows 51
    with pytest.raises(AssertionError) as info:
        assert_attention_close(actual, Q, K, V, worst=1)
    message = str(info.value)
    assert "2 of 2 outputs outside the tolerance" in message
    assert "the 1 worst entry outside the tolerance" in message
    assert sum(line.startswith("[") for line in message.splitlines()) == 1


@pytest.mark.parametrize("kind", ["numpy", "torch", "list"])
def test_numpy_torch_and_lists_are_accepted(kind):
    make = {"numpy": np.asarray, "torch": torch.tensor, "list": lambda a: np.asarray(a).tolist()}
    conv = make[kind]
    report = assert_attention_close(np.full((2, 1), F32_4_3), conv(Q), conv(K), conv(V),
                                    max_ulps=0)
    assert (report.dtype, report.passed, report.summary()["max_ulps"]) == ("float32", True, 0)


def test_jax_arrays_are_accepted():
    jnp = pytest.importorskip("jax.numpy")
    q, k, v = (jnp.asarray(a, dtype=jnp.float32) for a in (Q, K, V))
    out = jnp.full((2, 1), F32_4_3, dtype=jnp.float32)
    report = assert_attention_close(out, q, k, v, max_ulps=0)
    assert (report.dtype, report.passed) == ("float32", True)
    with pytest.raises(AssertionError, match=r"\[0, 0\]"):
        assert_attention_close(out.at[0, 0].set(1.5), q, k, v)


def test_the_dtype_is_read_from_actual():
    f16 = np.full((2, 1), np.float16(4 / 3))        # 1.3330078125: 4/3 correctly rounded in float16
    report = assert_attention_close(f16, Q, K, V, max_ulps=0)
    assert (report.dtype, report.summary()["max_ulps"]) == ("float16", 0)
    # the same number as a float32 output is 2731 float32 ULPs from 4/3 rounded to float32
    # (11184811 * 2^-23 - 1365 * 2^-10 = (11184811 - 11182080) * 2^-23)
    with pytest.raises(AssertionError) as info:
        assert_attention_close(f16.astype(np.float32), Q, K, V)
    assert _row(str(info.value), "[0, 0]")[2:5] == ["1.3333334", "1.3330078", "2731"]
    bf16 = assert_attention_close(torch.full((2, 1), 4 / 3, dtype=torch.bfloat16), Q, K, V,
                                  max_ulps=0)
    assert bf16.dtype == "bfloat16"
    # torch's own float16 SDPA is judged in float16 with float16 inputs
    out, q, k, v = _sdpa(dtype=torch.float16)
    assert assert_attention_close(out, q, k, v).dtype == "float16"


def test_a_binary_float_is_read_as_its_exact_value_never_as_a_rational():
    v = np.array([[0.1], [0.1]])
    report = assert_attention_close(np.array([[0.1], [0.1]]), np.zeros((2, 1)), np.zeros((2, 1)),
                                    v, max_ulps=0)
    exact = report.entries[0].exact.exact()
    assert type(exact) is Fraction
    assert exact == Fraction(0.1) == Fraction(3602879701896397, 2 ** 55)
    assert exact != Fraction(1, 10)
    # a float32 input is its float32 value: 0.1f = 13421773/2^27, not float64's 0.1
    r32 = assert_attention_close(np.array([[0.1], [0.1]], np.float32), np.zeros((2, 1)),
                                 np.zeros((2, 1)), v.astype(np.float32), max_ulps=0)
    assert r32.entries[1].exact.exact() == Fraction(13421773, 2 ** 27)


def test_bool_and_additive_masks():
    keep = np.array([[True, True, False], [True, True, True]])    # row 0 hides the 2
    ones = np.array([[1.0], [F32_4_3]], np.float32)
    assert assert_attention_close(ones, Q, K, V, attn_mask=keep, max_ulps=0).passed
    assert assert_attention_close(ones, Q, K, V, attn_mask=torch.tensor(keep), max_ulps=0).passed
    additive = np.where(keep, 0.0, -np.inf)
    assert assert_attention_close(ones, Q, K, V, attn_mask=additive, max_ulps=0).passed
    with pytest.raises(AssertionError, match=r"1 of 2 outputs outside"):
        assert_attention_close(np.full((2, 1), F32_4_3), Q, K, V, attn_mask=keep)
    # an additive float mask of finite numbers, broadcast over the batch and heads
    g = torch.Generator().manual_seed(1)
    _, q, k, v = _sdpa()
    bias = torch.randn(8, 8, generator=g)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    assert assert_attention_close(out, q, k, v, attn_mask=bias).passed
    with pytest.raises(AssertionError):
        assert_attention_close(F.scaled_dot_product_attention(q, k, v), q, k, v, attn_mask=bias)


def test_is_causal_is_top_left():
    # query 0 sees key 0 only (value 1); query 1 sees keys 0 and 1 (values 1, 1)
    assert assert_attention_close(np.ones((2, 1), np.float32), Q, K, V, is_causal=True,
                                  max_ulps=0).policy.causal
    out, q, k, v = _sdpa()
    with pytest.raises(AssertionError):
        assert_attention_close(out, q, k, v, is_causal=True)


def test_scale_a_float_is_the_exact_float_handed_to_the_kernel():
    out, q, k, v = _sdpa(scale=0.3)
    report = assert_attention_close(out, q, k, v, scale=0.3)
    assert report.policy.divisor_squared == 1 / Fraction(0.3) ** 2   # the float 0.3, exactly
    with pytest.raises(AssertionError):
        assert_attention_close(out, q, k, v)          # 1/sqrt(4) = 0.5, not 0.3


def test_enable_gqa():
    out, q, k, v = _sdpa(kv_heads=1, enable_gqa=True)
    assert assert_attention_close(out, q, k, v, enable_gqa=True).passed
    with pytest.raises(ShapeError) as info:
        assert_attention_close(out, q, k, v)
    assert str(info.value) == ("key and value must have the query's 2 heads without enable_gqa "
                               "(got 1); pass enable_gqa=True for grouped query heads")


def test_policy_keywords_sink_and_softcap():
    # a sink logit 0 joins the normaliser: (1 + 1 + 2)/(3 + e^0) = 1 exactly
    assert assert_attention_close(np.ones((2, 1), np.float32), Q, K, V, sink=0,
                                  max_ulps=0).passed
    with pytest.raises(AssertionError, match="2 of 2 outputs outside"):
        assert_attention_close(np.full((2, 1), F32_4_3), Q, K, V, sink=0)
    # soft-cap 30 tanh(s/30) of the scaled scores, in float64 and rounded to float32
    _, q, k, v = _sdpa(dtype=torch.float64)
    s = (q @ k.transpose(-1, -2)) / 2
    out = (torch.softmax(30 * torch.tanh(s / 30), -1) @ v).float()
    q, k, v = q.float(), k.float(), v.float()
    assert assert_attention_close(out, q, k, v, softcap="30").passed
    with pytest.raises(AssertionError):
        assert_attention_close(out, q, k, v, softcap="3")


def test_a_bad_keyword_is_refused_in_one_line():
    with pytest.raises(InputError) as info:
        assert_attention_close(np.ones((2, 1)), Q, K, V, causal=True)
    line = str(info.value)
    assert "\n" not in line
    assert line.startswith("unknown keyword 'causal': the keywords besides SDPA's are alignment,")
    with pytest.raises(InputError, match=r"^is_causal must be True or False \(got 'yes'\)$"):
        assert_attention_close(np.ones((2, 1)), Q, K, V, is_causal="yes")
    with pytest.raises(InputError, match="worst"):
        assert_attention_close(np.ones((2, 1)), Q, K, V, worst=0)


def test_shape_and_dtype_mismatches_are_refused_in_one_line():
    with pytest.raises(ShapeError) as info:
        assert_attention_close(np.ones((3, 1), np.float32), Q, K, V)
    assert "\n" not in str(info.value) and "actual" in str(info.value)
    with pytest.raises(ShapeError) as info:
        assert_attention_close(np.ones((2, 1), np.float32), Q, np.zeros((3, 2)), V)
    assert "\n" not in str(info.value)
    with pytest.raises(InputError) as info:
        assert_attention_close(np.ones((2, 1), np.int32), Q, K, V)
    assert str(info.value).startswith("actual must be an array of float64, float32, float16 or "
                                      "bfloat16 (got dtype int32)")


# ----------------------------------------------------------------------------- gradients
def _grads(kv_heads=None, **kw):
    out, q, k, v = _sdpa(kv_heads=kv_heads, **kw)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, **kw)
    d_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
    out.backward(d_out)
    return (q.grad, k.grad, v.grad), (q.detach(), k.detach(), v.detach()), d_out


def test_torch_autograd_gradients_pass():
    grads, (q, k, v), d_out = _grads(is_causal=True)
    report = assert_attention_grads_close(grads, q, k, v, d_out, is_causal=True)
    assert type(report) is Report
    assert (report.passed, report.dtype, report.found.count) == (True, "float32", 3 * 64)
    assert [e.index[0] for e in report.entries[::64]] == ["dQ", "dK", "dV"]


def test_a_gqa_dv_that_forgets_the_sum_over_grouped_heads_is_named():
    grads, (q, k, v), d_out = _grads(kv_heads=1, enable_gqa=True)
    assert assert_attention_grads_close(grads, q, k, v, d_out, enable_gqa=True).passed
    # the bug: dV of the first query head of the group only (the other head's share dropped)
    ke, ve = (t.repeat_interleave(2, 1).requires_grad_() for t in (k, v))
    q2 = q.clone().requires_grad_()
    F.scaled_dot_product_attention(q2, ke, ve).backward(d_out)
    wrong = (grads[0], grads[1], ve.grad[:, :1])
    with pytest.raises(AssertionError) as info:
        assert_attention_grads_close(wrong, q, k, v, d_out, enable_gqa=True)
    message = str(info.value)              # dQ 64 and dK 32 entries right, dV 32 wrong
    assert message.startswith("gradients: 32 of 128 gradient entries outside the tolerance in "
                              "float32")
    rows = [line for line in message.splitlines() if line.startswith("d")]
    assert rows and all(line.startswith("dV[0, 0, ") for line in rows)


def test_a_wrong_dv_entry_is_named_with_its_exact_value():
    # shares 1/2, 1/2; dO = [1, 0]: dV = P^T dO = [1/2, 1/2], dQ = dK = 0
    q, k, v = np.zeros((2, 1)), np.zeros((2, 1)), np.array([[1.0], [3.0]])
    d_out = np.array([[1.0], [0.0]])
    dq, dk = np.zeros((2, 1), np.float32), np.zeros((2, 1), np.float32)
    dv = np.array([[0.5], [1.0]], np.float32)
    with pytest.raises(AssertionError) as info:
        assert_attention_grads_close((dq, dk, dv), q, k, v, d_out)
    message = str(info.value)
    assert message.splitlines()[0].startswith(
        "gradients: 1 of 6 gradient entries outside the tolerance in float32")
    assert _row(message, "dV[1, 0]")[1:6] == ["5.0000000000e-01", "0.5", "1", "8388608",
                                              "8388608.00"]
    dv[1, 0] = 0.5
    assert assert_attention_grads_close((dq, dk, dv), q, k, v, d_out, max_ulps=0).passed


def test_gradients_of_mixed_dtypes_are_refused_and_a_soft_cap_is_judged():
    grads, (q, k, v), d_out = _grads()
    with pytest.raises(InputError, match=r"^dQ, dK and dV must be of one dtype"):
        assert_attention_grads_close((grads[0].double(), grads[1], grads[2]), q, k, v, d_out)
    # a soft-cap is judged now (it was refused): gradients of the uncapped call fail under it
    with pytest.raises(AssertionError) as info:
        assert_attention_grads_close(grads, q, k, v, d_out, softcap="30")
    assert str(info.value).startswith("gradients: 192 of 192 gradient entries outside")


RAGGED = [[1.0, 2.0], [3.0]]
ROW = [[1.0, 2.0]]


def _ragged(name: str) -> str:
    return f"{name} must be rectangular: rows of equal length holding numbers (got a ragged list)"


@pytest.mark.parametrize("args, name", [
    ((np.float32(ROW), RAGGED, ROW, ROW), "query"),
    ((np.float32(ROW), ROW, RAGGED, ROW), "key"),
    ((np.float32(ROW), ROW, ROW, RAGGED), "value"),
    ((RAGGED, ROW, ROW, ROW), "actual's output"),
])
def test_a_ragged_list_is_refused_in_one_line_naming_the_argument(args, name):
    with pytest.raises(ShapeError) as info:
        assert_attention_close(*args)
    assert str(info.value) == _ragged(name)
    with pytest.raises(ShapeError) as info:
        assert_attention_close(np.float32(ROW), ROW, ROW, ROW, attn_mask=[[True], [True, False]])
    assert str(info.value) == _ragged("attn_mask")


@pytest.mark.parametrize("grads, q, grad_out, name", [
    ((ROW, ROW, ROW), RAGGED, ROW, "query"),
    ((RAGGED, ROW, ROW), ROW, ROW, "dQ's output"),
    ((ROW, ROW, ROW), ROW, RAGGED, "grad_out"),
])
def test_a_ragged_list_is_refused_by_the_gradients_assertion(grads, q, grad_out, name):
    with pytest.raises(ShapeError) as info:
        assert_attention_grads_close(grads, q, ROW, ROW, grad_out)
    assert str(info.value) == _ragged(name)


def _dropout_attention(keep_scale):
    """Attention with dropout p = 1/4 on float32 inputs, computed in float64 through autograd;
    ``keep_scale`` is what the kept weights are multiplied by (4/3 right)."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g).double().requires_grad_() for _ in range(3))
    keep = torch.rand(1, 2, 6, 6, generator=g) > 0.25
    out = (torch.softmax(q @ k.transpose(-1, -2) / 2, -1) * keep * keep_scale) @ v
    d_out = torch.randn(out.shape, generator=g).float()
    out.backward(d_out.double())
    grads = tuple(t.grad.float() for t in (q, k, v))
    return out.detach().float(), (q.detach(), k.detach(), v.detach()), keep, d_out, grads


def test_a_tolerance_past_int64_judges_the_exact_path():
    """max_ulps past 2^63 on the exact path (a dropout keep-mask) is capped, not an
    OverflowError (a fuzz find)."""
    q, k, v = np.zeros((2, 2, 2)), np.zeros((2, 3, 2)), np.zeros((2, 3, 1))
    report = assert_attention_close(np.zeros((2, 2, 1)), q, k, v, dropout="1/10",
                                    dropout_keep=[[True] * 3] * 2, max_ulps=2 ** 70)
    assert (report.passed, report.found.count, report.found.over, report.max_ulps) == \
        (True, 4, 0, 2 ** 70)


def test_dropout_with_the_kernels_keep_mask():
    out, (q, k, v), keep, d_out, grads = _dropout_attention(4 / 3)
    assert assert_attention_close(out, q, k, v, dropout="1/4", dropout_keep=keep).passed
    assert assert_attention_grads_close(grads, q, k, v, d_out, dropout="1/4",
                                        dropout_keep=keep).passed
    with pytest.raises(AssertionError):
        assert_attention_close(out, q, k, v)            # the same output without the dropout


def test_a_dv_that_misses_the_dropout_scale_is_named():
    _, (q, k, v), keep, d_out, right = _dropout_attention(4 / 3)
    _, _, _, _, wrong = _dropout_attention(1.0)          # kept weights not scaled by 1/(1 - p)
    grads = (right[0], right[1], wrong[2])
    with pytest.raises(AssertionError) as info:
        assert_attention_grads_close(grads, q, k, v, d_out, dropout="1/4", dropout_keep=keep)
    message = str(info.value)
    assert message.startswith("gradients: 48 of 144 gradient entries outside the tolerance")
    rows = [line.split() for line in message.splitlines() if line.startswith("d")]
    assert len(rows) == 5 and all(r[0] == "dV[0," for r in rows)
    assert {r[-2] for r in rows} == {"0.25"}            # each off by the missing factor 3/4


def test_sdpa_dropout_p_zero_is_taken_and_a_random_dropout_refused():
    out, q, k, v = _sdpa()
    assert assert_attention_close(out, q, k, v, dropout_p=0.0).passed
    with pytest.raises(InputError, match=r"^dropout_p must be 0 \(got 0\.1\): SDPA draws its "
                                         r"keep-mask at random; pass dropout=p"):
        assert_attention_close(out, q, k, v, dropout_p=0.1)


def test_a_list_of_python_floats_is_a_float64_output():
    report = assert_attention_close([[4 / 3], [4 / 3]], Q, K, V, max_ulps=0)
    assert report.dtype == "float64"
    with pytest.raises(AssertionError, match="in float64"):
        assert_attention_close(np.full((2, 1), F32_4_3).tolist(), Q, K, V)


# ---------------------------------------------------------------- FlexAttention score_mod/mask_mod
def _capped(cap):
    import torch

    def right(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    def wrong(score, b, h, q_idx, kv_idx):          # caps without dividing
        return cap * torch.tanh(score)
    return right, wrong


def test_a_score_mod_is_judged_against_the_exact_policy():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g) * 3 for _ in range(3))
    right, wrong = _capped(2.0)
    rep = assert_attention_close(None, q, k, v, softcap="2", score_mod=right)
    assert rep.passed and rep.dtype == "float32" and "score_mod right" in rep.impl
    with pytest.raises(AssertionError, match=r"outputs outside the tolerance in float32"):
        assert_attention_close(None, q, k, v, softcap="2", score_mod=wrong)


def test_a_score_mod_is_judged_under_the_callers_accumulation():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g).to(torch.bfloat16) for _ in range(3))
    plain = assert_attention_close(None, q, k, v, score_mod=lambda s, b, h, i, j: s)
    coarse = assert_attention_close(None, q, k, v, score_mod=lambda s, b, h, i, j: s,
                                    accumulation="bfloat16")
    assert "accumulating in float32" in plain.bound
    assert "storing its scores and weights in bfloat16" in coarse.bound


def test_a_mask_mod_is_judged_against_the_exact_causal_rule():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, 5, 4, generator=g) for _ in range(3))
    assert assert_attention_close(None, q, k, v, is_causal=True,
                                  mask_mod=lambda b, h, i, j: i >= j).passed
    with pytest.raises(AssertionError, match="outside the tolerance"):    # the next key leaks
        assert_attention_close(None, q, k, v, is_causal=True, mask_mod=lambda b, h, i, j: i >= j - 1)


def test_score_mod_wants_no_actual_and_actual_none_wants_a_mod():
    pytest.importorskip("torch")
    q = k = v = np.zeros((2, 1), dtype=np.float32)
    with pytest.raises(InputError, match=r"actual must be None with score_mod or mask_mod \(got an output\)"):
        assert_attention_close(np.zeros((2, 1), np.float32), q, k, v, score_mod=lambda s, b, h, i, j: s)
    with pytest.raises(InputError, match=r"actual must be the kernel's output \(got None\)"):
        assert_attention_close(None, q, k, v)


def test_a_soft_capped_gradient_that_is_exactly_zero_prints_0():
    """Under a soft-cap the gradients are certified from enclosures; dQ of a row with one key is
    exactly 0, its enclosure is exactly 0, and the report prints 0 (it raised ValueError)."""
    import numpy as np
    from exactattn.testing import assert_attention_grads_close
    q, k, v = np.zeros((3, 1)), np.array([[1.0]]), np.array([[0.1, 65504.0]])
    grads = (np.array([[0.0], [0.0], [1.0]]), np.array([[0.0]]), np.array([[0.0, 0.0]]))
    with pytest.raises(AssertionError) as e:
        assert_attention_grads_close(grads, q, k, v, np.array([[0, 0], [0, 0], [1, 1.0]]),
                                     softcap="30")
    row = next(r for r in str(e.value).splitlines() if r.startswith("dQ[2, 0]"))
    assert row.split()[2:5] == ["0", "0", "1"]
