"""--impl jax (jax.nn.dot_product_attention on the CPU) and --arrays jax, judged against the exact answer."""
import json
import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
from exactattn.call import Call, Policy  # noqa: E402
from exactattn.call.modifiers import Alibi, Rope  # noqa: E402
from exactattn.errors import InputError  # noqa: E402
from exactattn.verify import verify  # noqa: E402
from exactattn.verify.backward import verify_backward  # noqa: E402
from exactattn.verify.impls import JaxImpl, load_impl, make_call  # noqa: E402

DTYPES = ("float32", "bfloat16", "float16")

#: every policy jax.nn.dot_product_attention takes, with (L, S) so both causal alignments
#: differ; bottom_right with L > S leaves rows with no key: JAX makes them uniform
POLICIES = {
    "plain": (Policy(), 6, 9),
    "causal top_left": (Policy(causal=True), 6, 9),
    "causal bottom_right": (Policy(causal=True, alignment="bottom_right"), 6, 9),
    "bottom_right, empty rows": (Policy(causal=True, alignment="bottom_right",
                                        empty_row="uniform"), 9, 6),
    "window": (Policy(window=(2, 1)), 6, 9),
    "causal window, one side open": (Policy(causal=True, window=(None, 0)), 6, 9),
    "window bottom_right": (Policy(causal=True, alignment="bottom_right", window=(2, 0)), 6, 9),
    "query offset": (Policy(causal=True, query_offset=3), 6, 9),
    "ALiBi bias": (Policy(causal=True, alibi=Alibi(4)), 6, 9),
    "RoPE": (Policy(causal=True, rope=Rope()), 6, 9),
    "no scale": (Policy(scale="none"), 6, 9),
    "GQA tile": (Policy(causal=True, gqa="tile"), 6, 9),
}


def _call(policy, L, S, seed=3):
    return Call.random(L, 8, seed=seed, n_keys=S, heads=4, kv_heads=2, policy=policy)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(POLICIES))
def test_jax_passes_every_policy_it_takes(name, dtype):
    policy, L, S = POLICIES[name]
    rep = verify(load_impl("jax"), _call(policy, L, S), dtype)
    assert rep.passed is True and rep.raised is None
    assert rep.summary()["count"] == 4 * L * 8 and rep.summary()["hard"] == 0


def test_jax_fills_an_empty_row_uniformly_not_with_zeros():
    policy, L, S = POLICIES["bottom_right, empty rows"]
    zero = verify(load_impl("jax"), _call(policy, L, S).with_policy(
        Policy(causal=True, alignment="bottom_right", empty_row="zero")), "float32")
    # rows 0..2 see no key (j <= i + S - L = i - 3): 4 heads x 3 rows x 8 outputs, every one off
    assert zero.passed is False and zero.summary()["over"] == 4 * 3 * 8


@pytest.mark.parametrize("dtype", DTYPES)
def test_jax_mask_and_additive_mask_pass(dtype):
    rng = np.random.default_rng(0)
    q, k, v = (rng.integers(-3, 4, (2, 2, n, 4)).tolist() for n in (3, 5, 5))
    keep = rng.random((2, 2, 3, 5)) < 0.7
    keep[..., 0] = True
    for kind, mask in (("bool_keep", keep.tolist()),
                       ("additive", np.where(keep, rng.integers(-2, 3, keep.shape),
                                             None).tolist())):
        call = Call(q, k, v, mask, policy=Policy(mask_kind=kind, causal=True,
                                                 alignment="bottom_right"))
        assert verify(load_impl("jax"), call, dtype).passed is True, kind


@pytest.mark.parametrize("base", ["e", "2"])
def test_jax_lse_passes(base):
    call = _call(Policy(causal=True), 6, 9)
    for dtype in DTYPES:
        assert verify(load_impl("jax"), call, dtype, lse=base).passed is True, dtype


def test_jax_float64_is_float32_accurate_and_fails_leaving_x64_off():
    """JAX computes the softmax in float32 whatever the dtype: float64 outputs are off by
    about 10^8 ULPs (relative error about 1e-7 to 1e-5), every one over the tolerance."""
    assert jax.config.jax_enable_x64 is False
    rep = verify(load_impl("jax"), Call.random(16, 8, seed=0), "float64")
    s = rep.summary()
    assert rep.passed is False and s["over"] == s["count"] == 128 and s["hard"] == 0
    assert 1e-8 < s["max_rel"] < 1e-4
    assert jax.config.jax_enable_x64 is False     # 64-bit mode was on for that call only


@pytest.mark.parametrize("field, policy, keep", [
    ("softcap", Policy(softcap="5"), None),
    ("sink", Policy(sink="0"), None),
    ("dropout", Policy(dropout="1/2"), [[True, False], [True, True]]),
])
def test_jax_refuses_what_it_has_no_argument_for_by_name(field, policy, keep):
    call = Call([[1], [0]], [[1], [2]], [[1], [0]], policy=policy, dropout_keep=keep)
    message = (f"call must have no softcap, sink, dropout for impl jax (got {field}); "
               "jax.nn.dot_product_attention has no argument for it, use --impl torch")
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        verify(JaxImpl(), call, "float32")
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):   # before exact gradients
        JaxImpl().backward(make_call(call, "float32"), np.ones((2, 1)))


@pytest.mark.parametrize("E, E_v", [(4, 2), (2, 4)])
def test_jax_takes_a_value_narrower_or_wider_than_the_key(E, E_v):
    """JAX takes value shaped like key: the narrower side gets zero columns, exactly."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.integers(-4, 5, shape).tolist() for shape in ((3, E), (5, E), (5, E_v)))
    call = Call(q, k, v, policy=Policy(causal=True))
    for dtype in ("float32", "bfloat16"):
        rep = verify(JaxImpl(), call, dtype)
        assert rep.passed is True and rep.summary()["count"] == 3 * E_v
        assert verify_backward(JaxImpl(), call, dtype).passed is True


@pytest.mark.parametrize("flag", [["--softcap", "1"], ["--sink", "0"]])
def test_cli_refusal_is_one_line_exit_2(cli, flag):
    rc, out, err = cli("verify", "--impl", "jax", *flag, "--n", "4", "--d-k", "4",
                       "--no-progress")
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("exactattn: error: call must have no softcap, sink, dropout for "
                          f"impl jax (got {flag[0][2:]})")


def test_cli_forward_and_backward_pass_in_every_dtype(cli):
    rc, out, err = cli("verify", "--impl", "jax", "--dtype", "float32,bfloat16,float16",
                       "--causal", "--heads", "2", "--kv-heads", "1", "--n", "6",
                       "--format", "json", "--no-progress")
    assert rc == 0 and err == ""
    doc = json.loads(out)
    assert doc["passed"] is True and doc["impl"].startswith("jax ")
    assert doc["impl"].endswith(" dot_product_attention (CPU)")
    rc, out, err = cli("verify", "--backward", "--impl", "jax", "--dtype",
                       "float32,bfloat16,float16", "--causal", "--alibi", "2", "--heads", "2",
                       "--n", "6", "--no-progress")
    assert rc == 0 and err == "" and "result: PASS" in out
    assert "dot_product_attention backward (CPU jax.vjp)" in out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["causal top_left", "window", "ALiBi bias", "GQA tile"])
def test_jax_backward_passes(name, dtype):
    policy, L, S = POLICIES[name]
    rep = verify_backward(load_impl("jax"), _call(policy, L, S), dtype, seed=1)
    assert rep.passed is True


KERNELS = '''
import jax
import jax.numpy as jnp


def _check(query, dtype):
    assert isinstance(query, jax.Array) and query.dtype == jnp.dtype(dtype), query.dtype


def right(query, key, value, *, scale=None, is_causal=False, dtype=None):
    _check(query, dtype)
    s = query @ key.swapaxes(-1, -2) / jnp.sqrt(jnp.asarray(query.shape[-1], query.dtype))
    return jax.nn.softmax(s, axis=-1) @ value


def wrong(query, key, value, *, scale=None, is_causal=False, dtype=None):
    _check(query, dtype)
    s = query @ key.swapaxes(-1, -2) / query.shape[-1]      # 1/d, not 1/sqrt(d)
    return jax.nn.softmax(s, axis=-1) @ value


def right_backward(query, key, value, grad_out, *, scale=None, is_causal=False, dtype=None):
    _check(grad_out, dtype)
    _, pull = jax.vjp(lambda q, k, v: right(q, k, v, dtype=dtype), query, key, value)
    return pull(grad_out)
'''


def test_arrays_jax_hands_jax_arrays_and_reads_jax_arrays(cli, tmp_path, monkeypatch):
    (tmp_path / "jaxkern.py").write_text(KERNELS)
    monkeypatch.chdir(tmp_path)
    base = ("verify", "--arrays", "jax", "--n", "8", "--d-k", "16", "--no-progress")
    rc, out, err = cli(*base, "--impl", "jaxkern:right", "--dtype", "all")
    assert rc == 0 and err == "" and "result: PASS" in out
    assert re.search(r"^float64 +128 ", out, re.M)      # float64 arrays: x64 for the call
    assert jax.config.jax_enable_x64 is False
    rc, out, err = cli(*base, "--impl", "jaxkern:wrong")
    assert rc == 1 and err == "" and "result: FAIL" in out
    rc, out, err = cli(*base, "--impl", "jaxkern:right_backward", "--backward",
                       "--dtype", "float32,float64")
    assert rc == 0 and err == "" and "result: PASS" in out
