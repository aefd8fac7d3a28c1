"""Masks reach a float implementation in the shape the caller built them (issue 28, item 2).

The exact reference reads the mask expanded to B x H_q x L x S; a
``module:function`` is handed it as the spec wrote it (``(B, 1, L, S)``,
``(L, S)``, ...), so model code that broadcasts its own mask runs unmodified.
"""

import json

import numpy as np
import pytest

from exactattn.call import Call, Policy
from exactattn.call.spec import load_problem, problem_text
from exactattn.cli import main
from exactattn.verify import verify
from exactattn.verify.impls import FloatCall, make_call

# model code: queries reshaped to (B, H_kv, rep, L, E), the mask broadcast by the model itself
MODEL = '''
import numpy as np
SEEN = []

def attention(query, key, value, *, attn_mask=None, scale=None, enable_gqa=False):
    SEEN.append(attn_mask.shape)
    B, H, L, E = query.shape
    G = key.shape[1]
    q = query.reshape(B, G, H // G, L, E)
    s = q @ key[:, :, None].swapaxes(-1, -2) / np.sqrt(E).astype(query.dtype)
    s = np.where(attn_mask[:, :, None], s, -np.inf)          # (B, 1, L, S) -> (B, 1, 1, L, S)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    w = w / w.sum(axis=-1, keepdims=True)
    return (w @ value[:, :, None]).reshape(B, H, L, -1)

def wrong_axis(query, key, value, *, attn_mask=None, scale=None, enable_gqa=False):
    return attention(query, key, value, attn_mask=attn_mask.swapaxes(0, 1), scale=scale)
'''

# B=2, H_q=4, H_kv=2, L=1, S=2, E=1: batch 0 sees key 0 only, batch 1 key 1 only
Q = [[[[1]], [[2]], [[3]], [[4]]], [[[1]], [[1]], [[2]], [[2]]]]
K = [[[[1], [2]], [[0], [1]]], [[[1], [1]], [[2], [0]]]]
V = [[[[1], [3]], [[5], [7]]], [[[2], [4]], [[6], [8]]]]
MASK = [[[[True, False]]], [[[False, True]]]]          # (B, 1, L, S)


@pytest.fixture
def model(tmp_path, monkeypatch):
    (tmp_path / "model_attn.py").write_text(MODEL)
    (tmp_path / "gqa.json").write_text(json.dumps(
        {"query": Q, "key": K, "value": V, "mask": {"kind": "bool_keep", "values": MASK},
         "dtype": "float64"}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    import model_attn
    importlib.reload(model_attn)
    return model_attn


def test_model_code_that_broadcasts_its_own_mask_passes_unmodified(model, capsys):
    assert main(["verify", "--impl", "model_attn:attention", "--spec", "gqa.json"]) == 0
    out = capsys.readouterr().out
    assert "result: PASS" in out and "B=2 H_q=4 H_kv=2 L=1 S=2" in out
    # the main run and four probes (ones, identity keys 1 and 2, positive) each see
    # the spec's mask shape, not 2 x 4 x 1 x 2
    assert model.SEEN == [(2, 1, 1, 2)] * 5


def test_a_mask_broadcast_over_the_wrong_axis_fails(model, capsys):
    assert main(["verify", "--impl", "model_attn:wrong_axis", "--spec", "gqa.json"]) == 1
    out = capsys.readouterr().out
    assert "result: FAIL" in out
    # batch 0's second kv head read batch 1's mask: outputs b=0, heads 2 and 3 are wrong
    rep = verify(model.wrong_axis, load_problem("gqa.json")[0], "float64")
    assert [e.index for e in rep.entries if e.status != "ok"] == \
        [(0, 2, 0, 0), (0, 3, 0, 0), (1, 0, 0, 0), (1, 1, 0, 0)]


def test_the_call_keeps_the_shape_the_mask_was_given_in():
    c = Call(Q, K, V, MASK)
    assert c.mask.shape == (2, 4, 1, 2) and c.mask_shape == (2, 1, 1, 2)
    assert c.mask_given().tolist() == MASK
    assert make_call(c, "float64").attn_mask.tolist() == MASK
    flat = Call(Q, K, V, [[True, False]])                # an L x S mask for every batch and head
    assert flat.mask_shape == (1, 2) and make_call(flat, "float64").attn_mask.tolist() == \
        [[True, False]]
    keys = Call(Q, K, V, [False, True], mask_kind="bool_drop")   # one row of S, SDPA-style
    assert keys.mask_shape == (2,) and make_call(keys, "float64").attn_mask.tolist() == \
        [True, False]                                     # in SDPA's convention, shape kept


def test_a_spec_file_keeps_its_mask_shape(tmp_path):
    c = Call([[1], [2]], [[1], [2]], [[3], [4]], [[[[True, False], [True, True]]]])
    doc = json.loads(problem_text(c, "float32"))
    assert doc["mask"]["values"] == [[[[True, False], [True, True]]]]   # 1 x 1 x L x S as given
    (tmp_path / "p.json").write_text(problem_text(c, "float32"))
    again = load_problem(tmp_path / "p.json")[0]
    assert again.mask_shape == (1, 1, 2, 2) and again.key_of() == c.key_of()
    assert Call([[1], [2]], [[1], [2]], [[3], [4]], [[True, False], [True, True]]).key_of() != \
        c.key_of()                                        # the shape is part of the input


def test_a_mask_broadcast_over_the_queries_folds_to_l_x_s():
    call = FloatCall(np.zeros((2, 1)), np.zeros((2, 1)), np.zeros((2, 1)), "float64",
                     Policy(causal=True), attn_mask=np.array([[False, True]]))   # 1 x S
    assert call.mask_in("bool_keep", fold=True).tolist() == [[False, False], [False, True]]
    assert call.mask_in().tolist() == [[False, True]]     # unfolded: as given


@pytest.mark.parametrize("empty_row, want", [("zero", 0.0), ("uniform", 1.0), ("nan", None)])
@pytest.mark.parametrize("impl", ["numpy"])
def test_the_numpy_kernel_gives_a_query_that_sees_no_key_the_policy_s_empty_row(
        impl, empty_row, want):
    import math

    import numpy as np

    from exactattn.call import Call
    from exactattn.verify.check import verify
    q = np.array([[[[0.5], [1.0]]]])
    k = np.array([[[[1.0], [3.0]]]])
    v = np.array([[[[2.0], [0.0]]]])
    call = Call.from_sdpa(q, k, v, attn_mask=np.array([[True, True], [False, False]]))
    call = call.with_policy(call.policy.replace(empty_row=empty_row))
    report = verify(impl, call, "float32", probes="none", lse="e")
    got = {e.index: e.got for e in report.found.kept}[(0, 0, 1, 0)]
    assert report.passed, report.summary()
    assert math.isnan(got) if want is None else got == want


@pytest.mark.parametrize("bad,text", [(float("nan"), "nan"), (float("inf"), "inf")])
def test_a_rewritten_additive_mask_refuses_nan_and_plus_inf(bad, text):
    """Folding the causal rule into an additive mask, or asking for it as booleans, refuses a NaN
    or +inf offset (as a Mask does) instead of handing it to the kernel; -0.0 comes out 0.0."""
    from exactattn.errors import InputError
    from exactattn.verify.adapter import policy_call
    q = np.zeros((1, 1, 3, 2))
    m = np.array([[0.0, bad, -np.inf, -0.0]])
    call = policy_call(q, np.zeros((1, 1, 4, 2)), np.zeros((1, 1, 4, 2)), Policy(causal=True),
                       "float64", attn_mask=m)
    for form in (None, "additive", "bool_keep"):
        with pytest.raises(InputError, match=rf"^mask\[0\]\[1\] must be finite \(got {text}\)$"):
            call.mask_in(form, fold=True)
    m[0, 1] = 0.5
    call = policy_call(q, np.zeros((1, 1, 4, 2)), np.zeros((1, 1, 4, 2)),
                       Policy(causal=True, alignment="bottom_right"), "float64", attn_mask=m)
    assert str(call.mask_in("additive", fold=True).tolist()) == (
        "[[0.0, 0.5, -inf, -inf], [0.0, 0.5, -inf, -inf], [0.0, 0.5, -inf, 0.0]]")


def test_finite_offsets_the_causal_rule_hides_still_go_as_booleans():
    """An additive mask whose non-zero offsets sit only on keys the causal rule hides loses
    nothing as booleans once the rule is folded in: handed over, not refused."""
    from exactattn.verify.adapter import policy_call
    m = np.array([[0.0, 0.0, -np.inf, 1.5]] * 3)
    call = policy_call(np.zeros((1, 1, 3, 2)), np.zeros((1, 1, 4, 2)), np.zeros((1, 1, 4, 2)),
                       Policy(causal=True), "float64", attn_mask=m)
    assert call.mask_in("bool_keep", fold=True).tolist() == [
        [True, False, False, False], [True, True, False, False], [True, True, False, False]]
