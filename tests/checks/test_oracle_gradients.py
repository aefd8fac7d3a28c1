"""The gradients under soft-caps, RoPE, sinks and an LSE output against the independent oracle
(issue 44): small random cases of each kind and their combinations; the package's certified
decimals (exactattn.gradients, its bulk decimals and verify's backward, at 6 and 12 places, and
the correctly rounded floats) must equal the oracle's (tests/oracle.py: the chain rule through
tanh and the rotations in mpmath intervals)."""

from __future__ import annotations

import random

import pytest

from oracle_cases import _numbers
from oracle_paths import PackageRun, compare

KINDS = {
    "softcap": dict(softcap="2"),
    "softcap+sink": dict(softcap="5", sink="1/2"),
    "rope": dict(rope={"theta": "10000", "layout": "half"}),
    "rope+causal+alibi": dict(rope={"theta": "100", "layout": "interleaved"}, causal=True,
                              alibi={"heads": 8, "form": "relative"}),
    "rope partial+softcap+window": dict(rope={"theta": "10000", "layout": "half", "dims": 2},
                                        softcap="3", window=[1, 0], query_offset=1),
    "lse": dict(lse=True),
    "lse+dropout": dict(lse=True, dropout=True),
    "lse+softcap+rope+sink": dict(lse=True, softcap="2", sink="-1",
                                  rope={"theta": "10000", "layout": "half"}),
    "irrational scale+softcap+gqa": dict(scale={"divisor_squared": "3"}, softcap="1", gqa=True),
}


def _case(kind: str, seed: int) -> dict:
    rng = random.Random(f"{kind}:{seed}")

    def choose(options):
        return rng.choice(options)
    spec = dict(KINDS[kind])
    H, Hkv = (2, 1) if spec.pop("gqa", False) else (1, 1)
    B, L, S, E, Ev = 1, 3, 3, 4, 2
    lse, dropout = spec.pop("lse", False), spec.pop("dropout", False)
    case = {"query": _numbers(choose, (B, H, L, E)), "key": _numbers(choose, (B, Hkv, S, E)),
            "value": _numbers(choose, (B, Hkv, S, Ev)), "scale": "default", "causal": False,
            "alignment": "top_left", "empty_row": "zero", "gqa": "interleave", "mask": None,
            "window": None, "query_offset": None, "softcap": None, "sink": None, "alibi": None,
            "head": 0, "rope": None, "dropout": None,
            "d_out": _numbers(choose, (B, H, L, Ev)),
            "d_lse": _numbers(choose, (B, H, L)) if lse else None,
            "notes": {"kind": f"gradients/{kind}", "ties": []}}
    if dropout:
        case["dropout"] = {"p": "1/4", "keep": [[[[rng.random() < 0.75 for _ in range(S)]
                                                  for _ in range(L)] for _ in range(H)]]}
    case.update(spec)
    return case


@pytest.mark.parametrize("kind", list(KINDS))
def test_gradients_of_every_modifier_agree_with_the_oracle(kind):
    for seed in range(2):
        case = _case(kind, seed)
        rep = compare(case, (6, 12))
        assert not rep.failed, rep.message()
        got = PackageRun(case).results(6)
        for name in ("dQ", "dK", "dV") + ("d_sink",) * (case["sink"] is not None):
            assert got["verify-backward"][name], (kind, name)
        if case["softcap"] is None and case["rope"] is None:
            assert got["gradients"]["dS"] and got["gradients"]["dQ"]
        assert rep.checked > 100


def test_the_oracle_differentiates_the_soft_cap():
    """The oracle's dQ under a soft-cap is not the uncapped chain's: the factor 1 - tanh^2 is
    there (FlashAttention's backward bug left it out)."""
    from oracle import Oracle
    from oracle_cases import oracle_case
    case = _case("softcap", 0)
    case["softcap"] = "1"
    capped = Oracle(oracle_case(case)).decimal("dQ", (0, 0, 0, 0), 12)
    plain = dict(case, softcap=None)
    assert capped != Oracle(oracle_case(plain)).decimal("dQ", (0, 0, 0, 0), 12)
