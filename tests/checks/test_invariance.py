"""verify --invariance: the same rows rerun inside other batches, paddings and KV splits.

The kernels are written here in numpy float32: one invariant, one whose key sum runs in
another order when the batch holds more than two entries (batch-variant), one that takes
``num_splits`` and merges its key blocks (split-variant), one that is wrong in large batches.
"""

from __future__ import annotations

import numpy as np
import pytest

from exactattn.call import Call, Policy
from exactattn.cli import main
from exactattn.testing import assert_attention_close
from exactattn.verify.invariance import check_invariance


def _scores(q, k, scale, attn_mask=None):
    s = (q @ np.swapaxes(k, -1, -2)) * np.float32(scale or 1 / np.sqrt(q.shape[-1]))
    return s if attn_mask is None else np.where(attn_mask, s, np.float32(-np.inf))


def invariant(query, key, value, *, attn_mask=None, is_causal=False, scale=None):
    assert not is_causal
    s = _scores(query, key, scale, attn_mask)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ value


def variant(query, key, value, *, attn_mask=None, is_causal=False, scale=None):
    """The normaliser summed left to right (cumsum) in batches of more than two entries."""
    s = _scores(query, key, scale, attn_mask)
    e = np.exp(s - s.max(-1, keepdims=True))
    big = query.ndim == 4 and query.shape[0] > 2
    den = np.cumsum(e, -1)[..., -1:] if big else e.sum(-1, keepdims=True)
    return (e / den) @ value


def wrong_in_batches(query, key, value, *, scale=None):
    out = invariant(query, key, value, scale=scale)
    return out + np.float32(1e-3) * (query.ndim == 4 and query.shape[0] > 2)


def splits(query, key, value, *, num_splits=1, scale=None):
    """Split-KV: the keys in num_splits blocks, each block's weighted sum merged in order."""
    s = _scores(query, key, scale)
    e = np.exp(s - s.max(-1, keepdims=True))
    parts = np.array_split(np.arange(key.shape[-2]), num_splits)
    den = sum(e[..., p].sum(-1, keepdims=True) for p in parts)
    return sum(e[..., p] @ value[..., p, :] for p in parts) / den


def global_max(query, key, value, *, attn_mask=None, scale=None):
    """Subtracts the largest score of the whole tensor, not of each row."""
    s = _scores(query, key, scale, attn_mask)
    e = np.exp(s - s.max())
    return (e / e.sum(-1, keepdims=True)) @ value


def tensor_grid(query, key, value, *, attn_mask=None, scale=None):
    """Rounds the queries to a grid set by the tensor-wide largest |query|."""
    top = np.abs(query).max()
    return invariant((np.round(query / top * 2**20) * top / 2**20).astype(query.dtype), key,
                     value, attn_mask=attn_mask, scale=scale)


CALL = Call.random(16, 8, seed=0, n_keys=64)


@pytest.mark.parametrize("kernel", [global_max, tensor_grid])
def test_a_kernel_reading_a_tensor_wide_maximum_moves_among_larger_rows(kernel):
    rep = check_invariance(kernel, CALL, kinds=("batch", "pad"))
    assert [(r.label, r.same) for r in rep.runs] == [
        ("as given", True), ("among other rows (batch 4, from 1)", False),
        ("among other rows (batch 16, from 5)", False), ("keys padded by 5 (masked)", True),
        ("queries padded by 5", False)]
    assert rep.verdict().startswith("invariance: differs by up to ")


def test_an_invariant_kernel_is_bitwise_identical_in_every_run():
    rep = check_invariance(invariant, CALL)
    assert [(r.label, r.same, r.ulps, r.why) for r in rep.runs] == [
        ("as given", True, 0, ""), ("among other rows (batch 4, from 1)", True, 0, ""),
        ("among other rows (batch 16, from 5)", True, 0, ""),
        ("num_splits 1, 2, 4", False, None, "invariant takes no num_splits="),
        ("keys padded by 5 (masked)", True, 0, ""), ("queries padded by 5", True, 0, "")]
    assert rep.verdict() == "invariance: bitwise identical" and rep.passed
    assert all(r.report.passed for r in rep.done)


def test_a_batch_variant_kernel_differs_in_the_batches_and_not_in_the_padding():
    rep = check_invariance(variant, CALL)
    same = {r.label: r.same for r in rep.done}
    assert same == {"as given": True, "among other rows (batch 4, from 1)": False,
                    "among other rows (batch 16, from 5)": False,
                    "keys padded by 5 (masked)": True, "queries padded by 5": True}
    n = max(r.ulps for r in rep.done)
    assert n > 0 and rep.spread() == n
    assert rep.verdict() == f"invariance: differs by up to {n} ULPs (within the tolerance)"
    assert not rep.passed and rep.within


def test_a_kernel_wrong_in_large_batches_is_past_the_tolerance():
    rep = check_invariance(wrong_in_batches, CALL, kinds=("batch",))
    assert rep.verdict().endswith("(past the tolerance)")
    assert [r.report.passed for r in rep.done] == [True, False, False]


def test_the_split_counts_of_a_kernel_that_takes_them():
    rep = check_invariance(splits, CALL, kinds=("split", "pad"))
    assert [(r.label, r.same) for r in rep.runs] == [
        ("as given", True), ("num_splits=1", True), ("num_splits=2", False),
        ("num_splits=4", False), ("keys padded by 5 (masked)", False),
        ("queries padded by 5", False)]
    assert [r.why for r in rep.runs[4:]] == ["splits takes no mask"] * 2
    assert rep.within and not rep.identical


def test_each_batch_entry_alone_and_padding_under_bottom_right_cannot_be_asked():
    call = Call.random(3, 2, seed=1, n_keys=5, batch=2,
                       policy=Policy(causal=True, alignment="bottom_right"))
    rep = check_invariance("numpy", call)
    assert [(r.label, r.same, r.why) for r in rep.runs] == [
        ("as given", True, ""), ("each of the 2 batch entries alone", True, ""),
        ("among other rows (batch 5, from 1)", True, ""),
        ("among other rows (batch 17, from 5)", True, ""),
        ("num_splits 1, 2, 4", False, "numpy takes no num_splits="),
        ("keys padded by 5 (masked)", False,
         "bottom_right moves the queries with the lengths"),
        ("queries padded by 5", False,
         "bottom_right moves the queries with the lengths")]


def test_the_assertion_keyword_fails_a_batch_variant_kernel():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, 16, 8)).astype(np.float32) for _ in range(3))
    out = invariant(q, k, v)
    assert assert_attention_close(out, q, k, v, invariance=invariant).passed
    with pytest.raises(AssertionError, match=r"^variant: invariance: differs by up to \d+ ULPs "
                       r"\(within the tolerance\); among other rows \(batch 4, from 1\): \d+ "
                       "ULPs from the first run; among"):
        assert_attention_close(out, q, k, v, invariance=variant)


def off(query, key, value, *, scale=None):
    """Invariant but 2^-12 off: past the default tolerance, within 10^6 ULPs."""
    return invariant(query, key, value, scale=scale) + np.float32(2 ** -12)


def test_the_assertion_keyword_takes_the_callers_tolerance():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, 16, 8)).astype(np.float32) for _ in range(3))
    out = off(q, k, v)
    assert assert_attention_close(out, q, k, v, max_ulps=10 ** 6, invariance=off).passed
    assert assert_attention_close(out, q, k, v, accumulation="float64", max_ulps=10 ** 6,
                                  invariance=off).passed
    with pytest.raises(AssertionError, match=r"^actual: \d+ of 128"):
        assert_attention_close(out, q, k, v, invariance=off)
    rep = check_invariance(off, CALL, kinds=("batch",))
    assert rep.verdict() == "invariance: bitwise identical (past the tolerance)"
    assert check_invariance(off, CALL, kinds=("batch",), max_ulps=10 ** 6).verdict() == \
        "invariance: bitwise identical"


def test_verify_invariance_prints_the_runs_and_the_verdict(capsys):
    rc = main(["verify", "--impl", "test_invariance:variant", "--n-keys", "64",
               "--invariance", "batch,pad"])
    out = capsys.readouterr().out
    assert rc == 1
    lines = out.splitlines()
    assert lines[0] == "test_invariance:variant in float32: the call's rows rerun"
    assert lines[-1].startswith("invariance: differs by up to ") and \
        lines[-1].endswith(" ULPs (within the tolerance)")
    assert [ln.split("  ")[0] for ln in lines[4:9]] == [
        "as given", "among other rows (batch 4, from 1)", "among other rows (batch 16, from 5)",
        "keys padded by 5 (masked)", "queries padded by 5"]
    assert main(["verify", "--invariance", "batch,split,pad"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "invariance: bitwise identical"
    assert "num_splits 1, 2, 4                   -          -" in out


@pytest.mark.parametrize("argv,message", [
    (["--invariance", "batch,colour"], "--invariance must be a comma list of batch, split, pad "
                                       "(got 'colour')"),
    (["--invariance", "batch", "--backward"], "--invariance must come without --backward (got "
                                              "both); the invariance check reruns the forward's "
                                              "outputs"),
])
def test_bad_invariance_flags_are_one_line_and_exit_2(capsys, argv, message):
    try:
        rc = main(["verify", *argv])
    except SystemExit as e:
        rc = e.code
    assert rc == 2 and capsys.readouterr().err == f"exactattn: error: {message}\n"


def test_a_kernel_that_raises_or_answers_nan_in_other_batches():
    def raises(query, key, value, *, scale=None):
        if query.shape[0] > 2:
            raise ValueError("too many\nentries")
        return invariant(query, key, value, scale=scale)

    def nan_row(query, key, value, *, scale=None):
        out = invariant(query, key, value, scale=scale)
        return np.where(query.shape[0] > 2, np.float32(np.nan), out)

    rep = check_invariance(raises, CALL, kinds=("batch",))
    assert [r.why for r in rep.runs] == ["", "raised ValueError: too many entries",
                                         "raised ValueError: too many entries"]
    assert rep.verdict() == "invariance: bitwise identical"
    rep = check_invariance(nan_row, CALL, kinds=("batch",))
    assert rep.spread() is None and [r.ulps for r in rep.runs] == [0, None, None]
    assert rep.verdict() == "invariance: differs by NaN beside a number (past the tolerance)"
