"""Partial rotary (GPT-NeoX, Phi, StableLM): RoPE turns the first ``dims`` entries of each
query and key; the rest pass through.  The exact path is compared with the independent oracle
in tests/checks/test_oracle.py; here: the float kernels, the flag, the spec field."""

import json
from fractions import Fraction

import pytest

from exactattn.call import Call
from exactattn.call.modifiers import Rope
from exactattn.call.policy import Policy
from exactattn.cli import main
from exactattn.errors import InputError
from exactattn.reference.reference import Reference
from exactattn.verify import verify


def test_pairs_cover_only_the_rotated_width():
    assert Rope(dims=4).pairs(8) == [(0, 2, Fraction(0)), (1, 3, Fraction(-1, 2))]
    assert Rope(layout="interleaved", dims=4).pairs(8) == [(0, 1, Fraction(0)), (2, 3, Fraction(-1, 2))]
    assert Rope(dims=4).text() == "rope(theta=10000, half, dims=4)"
    assert Policy(rope=Rope(dims=4)).modifiers()["rope"] == {"theta": "10000", "layout": "half", "dims": 4}
    with pytest.raises(InputError, match=r"rope dims must be at most the head width d_k = 2 \(got 4\)"):
        Rope(dims=4).pairs(2)
    for bad in (3, 0, True, "4"):
        with pytest.raises(InputError, match="rope dims must be an even whole number >= 2"):
            Rope(dims=bad)


def test_the_unturned_entries_add_plainly():
    # d_k = 4, dims = 2: query 2 (position 1) is (0, 0, 1, 0), key 1 (position 0) is
    # (0, 0, 2, 0): the score is exactly 2, as no angle reaches entries 3 and 4; with all
    # four turned, entry 3 pairs with entry 1 and the score is 2 cos(1)
    q = [[0, 0, 0, 0], [0, 0, 1, 0]]
    k = [[0, 0, 2, 0], [0, 0, 0, 0]]
    v = [[1], [0]]
    part = Reference(Call(q, k, v, policy=Policy(rope=Rope(dims=2), scale="none")))
    full = Reference(Call(q, k, v, policy=Policy(rope=Rope(), scale="none")))
    assert part.raw_row(0, 0, 1)[0] == 2 and type(part.raw_row(0, 0, 1)[0]) is Fraction
    assert full.raw_row(0, 0, 1)[0].text() == "2*cos(1)"


@pytest.mark.parametrize("impl", ["numpy", "torch"])
def test_float_kernels_pass_under_partial_rotary(impl):
    if impl == "torch":
        pytest.importorskip("torch")
    call = Call([[1, 2, 3, 4], [0, 1, 0, -1]], [[1, 0, 2, 1], [2, 1, 0, 3], [1, 1, 1, 1]],
                [[1, 2], [3, 4], [5, 6]], policy=Policy(rope=Rope(dims=2), causal=True))
    assert verify(impl, call, "float32").passed


def test_a_kernel_that_turns_every_entry_fails(tmp_path, monkeypatch, capsys):
    (tmp_path / "fullrope.py").write_text('''
import numpy as np
def attention(query, key, value, *, attn_mask=None, scale=None, enable_gqa=False,
              rope_theta=10000.0, rope_layout="half", rope_dims=None):   # rope_dims ignored
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (query, key, value))
    d = q.shape[-1]
    def turn(x):
        pos = np.arange(x.shape[-2])[:, None]
        ang = pos * 10000.0 ** (-np.arange(0, d, 2) / d)
        a, b = x[..., : d // 2], x[..., d // 2:]
        return np.concatenate([a * np.cos(ang) - b * np.sin(ang), a * np.sin(ang) + b * np.cos(ang)], -1)
    s = turn(q) @ np.swapaxes(turn(k), -1, -2) / np.sqrt(d)
    w = np.exp(s - s.max(-1, keepdims=True))
    return ((w / w.sum(-1, keepdims=True)) @ v).astype(query.dtype)
''')
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["verify", "--impl", "fullrope:attention", "--n", "6", "--d-k", "8", "--dtype", "float64"]
    assert main(argv + ["--rope", "10000"]) == 0
    assert main(argv + ["--rope", "10000:half:4"]) == 1
    assert "result: FAIL" in capsys.readouterr().out


@pytest.mark.parametrize("value, message", [
    ("10000:half:3", "--rope DIMS must be an even whole number >= 2 (got 3)"),
    ("10000:half:x", "--rope DIMS must be an even whole number (got 'x')"),
])
def test_the_flag_refuses_a_bad_width_in_one_line(capsys, value, message):
    try:
        code = main(["verify", "--rope", value])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_spec_file_reads_rope_dims(tmp_path, capsys):
    spec = {"query": [[1, 0, 1, 0], [0, 1, 0, 1]], "key": [[1, 0, 1, 0], [0, 1, 0, 1]],
            "value": [[1], [2]], "policy": {"rope": {"theta": "10000", "dims": 2}}, "dtype": "float64"}
    (tmp_path / "s.json").write_text(json.dumps(spec))
    assert main(["verify", "--spec", str(tmp_path / "s.json")]) == 0
    assert "rope={theta: 10000, layout: half, dims: 2}" in capsys.readouterr().out
    spec["policy"]["rope"]["dims"] = 6
    (tmp_path / "s.json").write_text(json.dumps(spec))
    assert main(["verify", "--spec", str(tmp_path / "s.json")]) == 2
    assert "rope dims must be at most the head width d_k = 4 (got 6)" in capsys.readouterr().err
