"""The differential test: every package path against the independent mpmath oracle.

For each case (tests/oracle_cases.py: composed calls of every modifier, built ties, hidden
rows) every path that can take it (tests/oracle_paths.py: the verify reference, the pencil,
fast, symbolic and auto engines, row blocks, exact gradients, verify's backward, and on a few
fixed cases the command line) gives certified decimals at 6 and 12 places (3 too on the fixed
cases) and correctly rounded floats; each is compared with the oracle (tests/oracle.py) at every
index.  A mismatch is an oracle decimal that is not None (decided) and differs from the
package's.  A crash of a path fails, and so does a refusal of a call the package documents as
supported (oracle_paths.ALLOWED_REFUSALS is the commented allow-list; documented unsupported
combinations are skipped before the call, see PackageRun.skipped).  The exact ties the cases
are built with must compare equal, and a value built twice must equal itself.

The failure message prints the case as JSON and the first mismatches; paste the JSON into
``benchmarks/oracle_soak.py --replay`` or :func:`oracle_paths.compare` to rerun it.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

from oracle_cases import cases, known_cases, self_case
from oracle_paths import compare

QUICK = settings(max_examples=25, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SLOW = settings(max_examples=400, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def assert_agrees(case, places=(6, 12), *, cli=False, floats=True):
    rep = compare(case, places, cli=cli, floats=floats)
    assert not rep.failed, rep.message()
    return rep


@QUICK
@given(cases())
def test_every_path_agrees_with_the_oracle(case):
    assert_agrees(case)


@pytest.mark.slow
@SLOW
@given(cases())
def test_every_path_agrees_with_the_oracle_many(case):
    assert_agrees(case)


# ------------------------------------------------------------------ the four known examples
KNOWN = known_cases()


@pytest.mark.parametrize("name", ["gradients_sink", "gradients_offset"])
def test_gradients_shares_with_an_irrational_divisor_and_offsets(name):
    """1. divisor sqrt(3), ALiBi 16 heads (slope 2^(-1/2)) and a sink 1/2 (or an additive
    offset): three generators.  The gradients' P for query 0 must be the shares
    0.326358 0.371576 (sink 0.302066), as the scores table prints."""
    rep = assert_agrees(KNOWN[name], (3, 6, 12))
    assert rep.checked > 50


def test_gradients_shares_of_the_known_example_by_hand():
    """The same example, its digits written out (from the `scores` table)."""
    from oracle_paths import PackageRun
    run = PackageRun(KNOWN["gradients_sink"])
    got = run.results(6)
    assert not run.crashes and not run.refusals, (run.crashes, run.refusals)
    for path in ("reference", "gradients", "gradients/bulk"):
        row = [got[path]["shares"][(0, 0, 0, j)] for j in range(2)]
        assert row == ["0.326358", "0.371576"], (path, row)
    assert got["gradients"]["sink_share"][(0, 0, 0)] == "0.302066"


def test_rope_mirrored_keys_tie():
    """2. RoPE d = 2, theta 10000, q = (1, 0) at position 1, keys (1, -1) at 0 and (1, 1) at 2:
    both rotated scores are cos 1 - sin 1, so the two shares are equal (and print)."""
    assert_agrees(KNOWN["rope_mirror"], (3, 6, 12))


def test_rope_mirrored_keys_alone_give_one_half():
    """The mirrored keys alone (the query's own key masked): each share is exactly 1/2."""
    case = KNOWN["rope_mirror"]
    case = dict(case, mask={"kind": "bool_keep",
                            "rows": [[[[True] * 3, [True, False, True], [True] * 3]]]})
    rep = assert_agrees(case, (3, 6, 12))
    assert rep.checked


def test_softcap_alibi_tie():
    """3. softcap 5 + ALiBi 8 heads head 0, the query at position 2, an additive offset
    -1/2 on key 1: keys 0 and 1 both have logit 5 tanh(1/5) - 1; equality must not raise."""
    assert_agrees(KNOWN["softcap_alibi_tie"], (3, 6, 12))


def test_equal_log_sum_exps_compare_equal():
    """4. Two rows with the same scores have equal log-sum-exps, and they compare equal."""
    assert_agrees(KNOWN["lse_equal"], (3, 6, 12))


# ------------------------------------------------------------------ fixed composed cases
FIXED = {
    "plain": self_case([["1"], ["0"]], [["1"], ["0"]], [["1"], ["0"]]),
    "every_self_modifier": self_case(
        [["1", "0"], ["0", "1/2"], ["-1", "1"]], [["1", "-1"], ["1/2", "0"], ["0", "2"]],
        [["1"], ["-2"], ["3/2"]], scale={"divisor_squared": "3"}, sink="1/2",
        alibi={"heads": 12, "form": "symmetric"}, head=3, window=[1, None], query_offset=1,
        d_out=[[[["1"], ["-1"], ["1/2"]]]]),
    "softcap_rope_dropout": self_case(
        [["1", "0"], ["0", "1"]], [["1", "1"], ["-1", "1/2"]], [["2"], ["-1"]],
        softcap="5", rope={"theta": "100", "layout": "interleaved"}, causal=True,
        dropout={"p": "1/3", "keep": [[[[True, False], [True, True]]]]}),
    "empty_rows": self_case(
        [["1"], ["2"], ["-1"]], [["1"], ["0"], ["1/2"]], [["1"], ["2"], ["3"]],
        causal=True, query_offset=-1, empty_row="zero", d_out=[[[["1"], ["2"], ["-1"]]]]),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_fixed_cases(name):
    assert_agrees(FIXED[name], (3, 6, 12))


FIXED["cli_empty_uniform"] = self_case(       # window (0, 0) at positions 2, 3: no key seen
    [["1"], ["2"]], [["1"], ["0"]], [["1"], ["2"]], window=[0, 0], query_offset=2,
    empty_row="uniform", d_out=[[[["1"], ["2"]]]])
FIXED["cli_empty_nan"] = dict(FIXED["cli_empty_uniform"], empty_row="nan")
FIXED["cli_dropout_backward"] = self_case(
    [["1"], ["2"]], [["1"], ["0"]], [["1"], ["2"]], causal=True, sink="0",
    dropout={"p": "1/2", "keep": [[[[True, False], [False, True]]]]}, d_out=[[[["1"], ["2"]]]])


@pytest.mark.parametrize("name", ["plain", "every_self_modifier", "softcap_rope_dropout",
                                  "gradients_sink", "cli_empty_uniform", "cli_empty_nan",
                                  "cli_dropout_backward"])
def test_command_line_json_agrees(name):
    """`exactattn scores`, `square` and `backward` --format json on fixed self-attention cases."""
    case = FIXED.get(name) or KNOWN[name]
    rep = assert_agrees(case, (6,), cli=True, floats=False)
    assert rep.checked


def test_the_failure_message_prints_the_case_as_json():
    from oracle_paths import Report
    rep = Report(FIXED["plain"])
    rep.mismatches.append(("reference", "shares", (0, 0, 0, 0), 6, "0.1", "0.2"))
    text = rep.message()
    case = json.loads(text.splitlines()[0][len("case: "):])
    assert case["query"] == [[[["1"], ["0"]]]] and "mismatch reference shares" in text


@pytest.mark.parametrize("size", [(2, 2), pytest.param((100, 100), marks=pytest.mark.slow),
                                  pytest.param((14, 600), marks=pytest.mark.slow)], ids=str)
@pytest.mark.parametrize("boundary", __import__("oracle_cases").BOUNDARIES)
@pytest.mark.parametrize("digits", [17, 21])
def test_shares_next_to_a_rounding_boundary(boundary, size, digits):
    """A share within about 1e-17 or 1e-21 of a boundary at 4 or 6 places, on every path:
    the bulk enclosures (digit tables past 8,192 exponentials, 2^-62 fixed point) must
    round it as the oracle does."""
    from oracle_cases import _near_boundary
    picks = iter([boundary, size, digits])
    rep = assert_agrees(_near_boundary(lambda options: next(picks)), (4, 6, 7))
    assert rep.checked > 0


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_partial_rotary_passes_the_last_entries_through(layout):
    # d_k = 4, the first 2 entries turned (NeoX/Phi partial rotary), entries 3 and 4 plain:
    # every path against the oracle, causal, a query at positions 0..2
    x = [["1", "0", "1/2", "-1"], ["0", "1", "2", "1/4"], ["1", "1", "-1", "0"]]
    v = [["1"], ["-2"], ["3"]]
    case = self_case(x, x, v, causal=True, rope={"theta": "10000", "layout": layout, "dims": 2})
    rep = assert_agrees(case)
    assert rep.checked > 50 and not rep.allowed_refusals, (rep.checked, rep.skipped)
