"""Each concept has one owner: the shared helpers of verify, properties, cost and layer.

Empty rows and the keys a row reads (``call.inputs.empty_rows`` / ``keys_read``), the
policy a problem is read under, the scale and call an implementation is handed, SDPA's
arguments (verify's, shared with the FLOP-counter audit), the "ball first, exact on
failure" rounding step, the property statements and the modifier table's columns.
"""

from fractions import Fraction as F

import numpy as np
import pytest

from exactattn.properties import inputs as PI
from exactattn.call.policy import MODIFIER_FIELDS, Mask, Policy
from exactattn.audit.counters import AUDIT_CALLS, band_mask
from exactattn.cost import broadcast_batch
from exactattn.errors import ShapeError
from exactattn.call.modifiers import Alibi
from exactattn.properties import checks, reference
from exactattn.properties.rules import MODIFIERS, PROPERTIES, active
from exactattn.numbers.softmax import SoftmaxRow
from exactattn.verify import Reference, verify
from exactattn.call import Call
from exactattn.verify.adapter import call_scale, make_call, policy_call
from exactattn.reference.enclose import round_enclosed
from exactattn.call.inputs import empty_rows, keys_read
from exactattn.testing import assert_typed_equal as typed


KEEP = np.array([[True, False, True], [False, False, False]])


# --------------------------------------------------------------------------- empty rows
def test_a_row_is_empty_when_it_sees_no_key_and_has_no_sink():
    typed(empty_rows(Policy(), KEEP).tolist(), [False, True])
    typed(empty_rows(Policy(sink="0"), KEEP).tolist(), [False, False])
    assert empty_rows(Policy(), KEEP).dtype == bool
    typed(empty_rows(Policy(), np.zeros((2, 3, 4), dtype=bool)).shape, (2, 3))


def test_an_empty_uniform_row_reads_every_key():
    typed(keys_read(Policy(empty_row="uniform"), KEEP).tolist(),
          [[True, False, True], [True, True, True]])
    for policy in (Policy(), Policy(empty_row="nan"), Policy(empty_row="uniform", sink="-1")):
        typed(keys_read(policy, KEEP).tolist(), KEEP.tolist())


def test_the_reference_and_the_predicate_agree_on_empty_rows():
    p = Call([[1], [2]], [[1], [0], [3]], [[1], [2], [3]], KEEP.tolist())
    for policy in (Policy(), Policy(sink="1/2"), Policy(empty_row="uniform"),
                   Policy(empty_row="nan")):
        ref = Reference(p.with_policy(policy))
        empty = empty_rows(policy, ref.visible(0, 0)).tolist()
        typed(empty, [ref.row(0, 0, i).empty for i in range(2)])
    typed(Reference(p.with_policy(Policy(empty_row="uniform"))).output(0, 0, 1, 0).exact(), F(2))
    typed(Reference(p.with_policy(Policy(sink="0"))).output(0, 0, 1, 0).exact(), F(0))


def test_nonfinite_values_a_uniform_empty_row_reads_are_refused():
    p = Call([[1], [2]], [[1], [0], [3]], [[1], ["inf"], [3]], KEEP.tolist())
    p.with_policy(Policy()).check_nonfinite()
    p.with_policy(Policy(empty_row="uniform", sink="0")).check_nonfinite()
    with pytest.raises(Exception, match=r"value\[1\]\[0\] must be finite where a query sees it"):
        p.with_policy(Policy(empty_row="uniform")).check_nonfinite()


# --------------------------------------------------------------------------- the call
def test_a_problem_is_read_under_its_own_mask_kind():
    p = Call([[1]], [[1], [2]], [[1], [2]], [[0, "-inf"]], mask_kind="additive")
    typed(p.with_policy(Policy(causal=True)).policy, Policy(causal=True, mask_kind="additive"))
    typed(p.policy, Policy(mask_kind="additive"))
    plain = Call([[1]], [[1]], [[1]])
    typed(plain.with_policy(Policy(mask_kind="additive")).policy, Policy(mask_kind="additive"))
    typed(Reference(p.with_policy(Policy())).policy.mask_kind, "additive")
    typed(verify("numpy", p.with_policy(Policy()), "float64").policy.mask_kind, "additive")


def test_the_scale_an_implementation_gets():
    assert call_scale(Policy()) is None
    typed(call_scale(Policy(scale="none")), 1.0)
    typed(call_scale(Policy(scale="1/4")), 0.25)
    typed(call_scale(Policy(scale="1/sqrt(2)")), 0.7071067811865476)


def test_make_call_is_policy_call_of_the_problem():
    p = Call([[1], [2]], [[1], [0], [3]], [[1], [2], [3]])
    policy = Policy(causal=True, window=(1, 0), softcap="1/2", sink="-1", alibi=Alibi(4),
                    head=2, scale="1/3")
    a = make_call(p.with_policy(policy), "float32")
    b = policy_call(p.floats("query"), p.floats("key"), p.floats("value"), policy, "float32")
    for name in ("scale", "policy", "softcap", "sink", "dropout_p", "lse"):
        typed(getattr(a, name), getattr(b, name))
    typed(a.softcap, 0.5)
    typed(a.policy, policy)           # positions, ALiBi, RoPE, the GQA map: the policy's own


def test_sdpa_arguments_are_the_audits():
    torch = pytest.importorskip("torch")
    from torch.nn.attention.bias import CausalBias
    from exactattn.audit.counters import build
    want = {"sdpa_top_left": {"is_causal": True}, "sdpa_bottom_right": {"attn_mask": CausalBias},
            "sdpa_window": {"attn_mask": torch.Tensor}, "sdpa_gqa": {"enable_gqa": True}}
    for c in AUDIT_CALLS:
        if c.kind != "sdpa":
            continue
        options = build(c)[0].options
        expected = want.get(c.key, {})
        assert set(options) == set(expected), (c.key, options)
        for k, v in expected.items():
            assert options[k] is v if v is True else isinstance(options[k], v), (c.key, k)
    mask = build(next(c for c in AUDIT_CALLS if c.key == "sdpa_window"))[0].options["attn_mask"]
    typed(mask.tolist(), [list(r) for r in band_mask(6, 3).rows])


def test_one_flop_counter():
    pytest.importorskip("torch")
    from exactattn.verify import flop_counts
    from exactattn.verify.impls import count_flops
    typed(count_flops(lambda: None), 0)
    p = Call([[1, 0]] * 4, [[1, 0]] * 4, [[1, 2]] * 4)
    typed(flop_counts(p.with_policy(Policy()), "float32")["math"], 2 * 2 * 4 * 4 * 2)


# --------------------------------------------------------------------------- rounding
def test_ball_first_exact_on_failure():
    from flint import arb
    third = SoftmaxRow([F(0)] * 3, None).share(0)
    typed(round_enclosed(arb(1) / 3, "float32", 64, lambda: 1 / 0, 128)[0], 0.3333333432674408)
    f, ball = round_enclosed(arb(0, 1), "float32", 64, lambda: third, 128)
    typed(f, 0.3333333432674408)
    assert ball.overlaps(arb(1) / 3) and ball.rad() < arb(2) ** -50
    tie = SoftmaxRow([F(0)], None).combine([1 + F(1, 2 ** 24)])       # exactly between floats
    typed(round_enclosed(arb(1, 1), "float32", 64, lambda: tie, 128)[0], 1.0)


# --------------------------------------------------------------------------- visibility
def test_visibility_is_the_policys_keep():
    inp = PI.one_head([[0]] * 3, [[0]] * 3, [[1], [2], [3]],
                         Mask("bool_keep", [[True, False, True]] * 3),
                         Policy(causal=True, window=(1, 0)))
    typed(PI.keep(inp).tolist(),
          Policy(causal=True, window=(1, 0)).keep(3, 3, inp.block_mask(0, 0)).tolist())
    typed(PI.visible(inp)[2], [2])
    typed(PI.visible(inp)[1], [0])
    typed(bool(PI.keep(inp)[1, 0]), True)
    typed(bool(PI.keep(inp)[1, 1]), False)


def test_a_band_mask_is_a_causal_window():
    for n in range(1, 6):
        for w in range(1, 7):
            typed(band_mask(n, w).rows,
                  Mask("bool_keep", Policy(causal=True, window=(w - 1, 0)).keep(n, n).tolist()).rows)


def test_batch_shapes_broadcast_as_numpy_does():
    typed(broadcast_batch((2, 1), (1, 3), (3,)), (2, 3))
    typed(broadcast_batch(), ())
    with pytest.raises(ShapeError, match=r"^batch shapes must broadcast \(got \(2, 3\) and \(4,\)\)"):
        broadcast_batch((2, 3), (4,))


# --------------------------------------------------------------------------- properties
def test_every_check_says_its_propertys_one_statement():
    # one check per property of the table; its failure reads the statement from the table
    typed(set(checks.CHECKS), set(PROPERTIES))
    typed({name: check.__name__ for name, check in checks.CHECKS.items()},
          {name: "check_" + name.replace("inf/nan", "nonfinite").replace(" ", "_")
           for name in PROPERTIES})


def test_the_table_columns_are_the_policy_modifier_fields():
    typed(set(MODIFIERS), {"causal"} | set(MODIFIER_FIELDS) - {"query_offset", "head"})
    typed(active(Policy(causal=True, query_offset=2, head=1, alibi=Alibi(4), softcap="3")),
          frozenset({"causal", "alibi", "softcap"}))
    typed(active(Policy()), frozenset())


def test_a_sink_row_that_sees_nothing_is_checked_for_nonfinite_values():
    inp = PI.one_head([[0], [0]], [[0], [0]], [[1], [2]],
                         Mask("bool_keep", [[True, False], [False, False]]),
                         Policy(sink="0", empty_row="nan"))
    typed(checks.check_masked_nonfinite_ignored(reference, inp), 1)


def test_problem_head_h_is_model_head_policy_head_plus_h_everywhere():
    from exactattn.engines.layer import Layer
    from exactattn.call import Call
    policy = Policy(alibi=Alibi(12), head=8)
    p = Call.random(3, 2, heads=2)
    ref, call = Reference(p.with_policy(policy)), make_call(p.with_policy(policy), "float64")
    eye = [[1, 0], [0, 1]]
    layer = Layer([eye, eye], [eye, eye], [eye, eye], [[1, 0, 0, 0], [0, 1, 0, 0]],
                  policy=policy)
    for h in range(2):
        slope = Alibi(12).slope(8 + h)
        typed(ref.head_policy(h).head, 8 + h)
        typed(layer.heads[h].policy.head, 8 + h)
        typed(float(call.alibi_slopes()[h]), float(slope))
