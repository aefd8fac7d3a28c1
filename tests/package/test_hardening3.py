"""Hardening 3: the kinds an independent fuzzer found, one regression test per kind.

Each test holds the minimal input that used to fail (a traceback, a refusal of valid
input, a misprinted closed form, a false alarm) and asserts the exact outcome now.
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("value", ["-1e3", "-1/2", "-2.5e-1", "-.5", "-2"])
def test_negative_numbers_in_any_form_after_a_space(cli, value):
    """``--sink -1e3`` is the value -1e3, as ``--sink=-1e3`` always was (not a missing value)."""
    rc, out, err = cli("scores", "--sink", value)
    assert (rc, err) == (0, "")
    assert (rc, out, err) == cli("scores", f"--sink={value}")
    assert out != cli("scores", "--sink=0")[1]


def test_a_flag_without_its_value_still_says_so(cli):
    rc, out, err = cli("scores", "--sink")
    assert (rc, out, err) == (2, "", "exactattn: error: --sink needs a value (got none)\n")
