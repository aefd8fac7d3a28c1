"""``exactattn backward``: the backward walkthrough of a worked example, checked by hand."""

from __future__ import annotations

import json

import pytest

from exactattn.cli import main


def run(capsys, *argv):
    try:
        rc = main(["backward", *argv])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def test_chronicle_by_hand(capsys):
    rc, out, err = run(capsys)
    assert rc == 0 and err == ""
    # dO_i = (0, 0, 0, 1): dP_ij is v_j's last entry (1/2, 1/2, 1, 1/2), exactly
    assert "1      1/2 = 0.5  1/2 = 0.5  1      1/2 = 0.5" in out
    # D_3 = (2t^16 + 3) / (4t^16 + 4), t = exp(1/16): the shares of row 3 are (1, t^16, 1, t^16)/Z
    assert "D_3     (2*t^16 + 3)/(4*t^16 + 4)\n" in out and "where t = exp(1/16)" not in out
    assert "2      -0.0513  -0.0108  0.0728  -0.0108  0 (exact)" in out
    assert "db_K  0        0        0       0" in out and "db_V  0        0        0       4" in out
    for title in ("Shares P (forward), t = exp(1/16)", "dP = dO V^T (exact)", "dQ = scale dS K",
                  "dK = scale dS^T Q", "dV = P^T dO", "dW_Q = sum_i dQ_i x_i^T (slots layout)"):
        assert title in out
    rc2, again, _ = run(capsys)
    assert again == out                          # the same bytes on a rerun


def test_a_stated_d_out_a_sink_and_formats(capsys):
    rc, out, _ = run(capsys, "--d-out", "1,0,0,-1;0,1,0,0;0,0,1/2,0;1,1,1,1", "--sink", "0",
                     "--format", "json")
    doc = json.loads(out)
    assert rc == 0 and doc["d_out"][2] == ["0", "0", "1/2", "0"]
    tables = {t["name"]: t for t in doc["tables"]}
    assert tables["backward/dS"]["columns"][-2:] == ["sink", "row sum"]
    assert all(r[-1] == "0 (exact)" for r in tables["backward/dS"]["rows"])
    assert tables["backward/dS"]["data"]["exact"][2][0] == "-1/2/(3 + 2*exp(1))^2"
    assert "db_K is not 0: the sink's logit does not move with the key bias" in \
        tables["backward/biases"]["notes"]
    rc, md, _ = run(capsys, "--format", "markdown", "--example", "tiny", "--digits", "6")
    assert rc == 0 and md.startswith("### Upstream gradient dO") and "| 1 | (0, 1) |" in md


@pytest.mark.parametrize("argv, start", [
    (["--d-out", "1,2"], "--d-out rows must have 4 numbers like the values (got 2: '1,2')"),
    (["--d-out", "1,0,0,0;1,0,0,0"], "--d-out must have 1 or 4 rows (got 2"),
    (["--d-out", "1,0,0,x"], "--d-out"),
    (["--softcap", "2"], "--softcap must come without backward"),
    (["--rope", "10000"], "--rope must come without backward"),
])
def test_bad_arguments_are_one_line(capsys, argv, start):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("exactattn: error: " + start), err
