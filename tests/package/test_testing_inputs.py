"""Inputs the fuzzer of ``exactattn.testing``'s helpers found (tests/package/test_fuzz_testing.py),
one regression test each: each used to raise another exception (TypeError, OverflowError) or
to run for minutes; now a pass, a failed comparison or one line."""

from __future__ import annotations

import contextlib
import io
import re
import time
from fractions import Fraction as F

import numpy as np
import pytest

from exactattn.errors import InputError
from exactattn.numbers.formats import certified_scientific
from exactattn.numbers.softmax import SoftmaxRow
from exactattn.options import check_whole_list
from exactattn.testing import assert_attention_close, assert_attention_grads_close, assert_table

SINK = ("sink must be from -65504 to 65504 to be checked against a float kernel (got "
        "1000000000000000000000000000000000000000\u2026); float16 holds no larger sink: pass "
        "one within that range")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The tiny example's walkthrough in Markdown (13 tables), as the CLI prints it."""
    from exactattn.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["walkthrough", "--example", "tiny", "--format", "markdown"])
    path = tmp_path_factory.mktemp("page") / "tiny.md"
    path.write_text(out.getvalue(), encoding="utf-8")
    return path


@pytest.mark.parametrize("options, message", [
    ({"x": 1}, "option must be one of spec, example, scores, divisor, quantity, which, rows, "
               "no_scale, ties (got 'x')"),
    ({"quantity": 1}, "quantity must be one of raw, scaled, shares, outputs, queries, keys, "
                      "values, projections (got 1)"),
    ({"which": 1}, "which must be a comma-separated list of whole numbers (got 1)"),
    ({"which": [True]}, "which must be a positive whole number (got True)"),
    ({"rows": [-1, 0]}, "rows must be a non-negative whole number (got -1)"),
    ({"rows": [1.5, 0]}, "rows must be a non-negative whole number (got 1.5)"),
    ({"no_scale": "x"}, "no_scale must be one of True, False (got 'x')"),
    ({"spec": 1, "example": None}, "spec file must be a path (got 1); pass a file name"),
    ({"scores": True, "example": None}, "scores must be table numbers from 1 to 13, the tables "
                                        "of the file (got True)"),
])
def test_assert_table_refuses_a_bad_option_in_one_line(page, options, message):
    """TypeError, IndexError or AttributeError before; ``rows=[-1, 0]`` read the last token,
    ``no_scale="x"`` dropped the divisor."""
    with pytest.raises(InputError) as e:
        assert_table(page, **{"example": "tiny", **options})
    assert str(e.value) == message
    assert assert_table(page, example="tiny").clean is True


@pytest.mark.parametrize("path", [1, None, b"tiny.md"])
def test_a_page_that_is_no_path_is_refused_in_one_line(path):
    with pytest.raises(InputError) as e:
        assert_table(path, example="tiny")
    assert str(e.value) == f"table file must be a path (got {path!r}); pass a file name"


def test_a_file_of_many_tables_none_judged_is_named_in_a_bounded_line(tmp_path):
    path = tmp_path / "none.csv"
    path.write_text("\n\n".join("t,u\n1,2" for _ in range(40)), encoding="utf-8")
    with pytest.raises(InputError) as e:
        assert_table(path, example="tiny")
    assert str(e.value) == (
        "the file must hold a table the audit can judge (got none: table 1: no quantity; table "
        "2: no quantity; table 3: no quantity; table 4: no quantity; table 5: no quantity; "
        "table 6: n\u2026); pass quantity (--quantity) and pick tables with --tables")


def test_a_whole_number_list_that_is_no_list_is_refused():
    with pytest.raises(InputError) as e:
        check_whole_list(1, "which")
    assert str(e.value) == "which must be a comma-separated list of 1 to 64 whole numbers (got 1)"


def test_a_sink_past_float16_is_refused_before_the_float64_enclosure():
    """The bulk judge read the sink as a float first (OverflowError for 1e3000)."""
    q, k, v = np.zeros((1, 1)), np.zeros((2, 1)), np.array([[1.0], [2.0]])
    for sink in ("1e3000", "1e300"):
        with pytest.raises(InputError) as e:
            assert_attention_close(np.full((1, 1), 1.5, np.float32), q, k, v, sink=sink)
        assert str(e.value) == SINK
    assert assert_attention_close(np.full((1, 1), 1.5, np.float32), q, k, v).passed is True


def test_bfloat16_masks_and_keep_masks_are_read():
    """A bfloat16 attn_mask or dropout_keep raised TypeError (numpy has no bfloat16)."""
    torch = pytest.importorskip("torch")
    q, k = torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 3, 2)
    v = torch.arange(6.0).reshape(1, 1, 3, 2)
    mask = torch.tensor([[0.5, 0.5, 2.0], [-3.0, 0.0, 0.125]], dtype=torch.bfloat16)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask.float())
    assert assert_attention_close(out, q, k, v, attn_mask=mask).passed is True
    keep = torch.tensor([[True, False, True]] * 2).to(torch.bfloat16)
    with pytest.raises(InputError) as e:
        assert_attention_close(out, q, k, v, dropout="1/2", dropout_keep=keep)
    assert str(e.value) == "dropout_keep must hold true/false entries (True = kept) (got 1.0)"


def test_a_value_below_every_enclosure_prints_the_bound_it_has():
    """exp(-10^400) has no digit within MAX_PREC bits: its certified bound, at once (the
    precision doubled without end, then OverflowError)."""
    assert certified_scientific(SoftmaxRow([F(0), F(-10 ** 400)], None).share(1), 5) == \
        "|x|<1e-19747"
    assert certified_scientific(SoftmaxRow([F(0), F(-3)], None).share(1), 5) == "4.7426e-02"


def test_scores_astronomically_apart_fail_in_a_second_with_the_bounds():
    """Scores of about 2e308: the failure table's exact values took 80 s, then OverflowError."""
    q = np.array([[[[-3.0, 0.5], [0.125, 1.0], [0.125, 1.0]]]])
    k = np.array([[[[-1e308, -1e30], [0.0, 65504.0], [1e30, 2.0 ** -24]]]])
    v = np.array([[[[-0.0, 1.0, 0.0], [1e5, 0.0, 65504.0], [1e30, 0.1, 0.0]]]], np.float32)
    actual = np.full((1, 1, 3, 3), np.nan)
    start = time.perf_counter()
    with pytest.raises(AssertionError) as e:
        assert_attention_close(actual, q, k, v)
    assert time.perf_counter() - start < 5
    rows = {line.split("  ")[0]: re.split(r"\s{2,}", line)[1:]
            for line in str(e.value).splitlines() if line.startswith("[0, 0, 0, ")}
    assert rows == {"[0, 0, 0, 0]": ["|x|<1e-19717", "0", "nan", "-", "-", "-", "hard"],
                    "[0, 0, 0, 1]": ["1.000000000000000000e+00", "1", "nan", "-", "-", "-", "hard"],
                    "[0, 0, 0, 2]": ["|x|<1e-19742", "0", "nan", "-", "-", "-", "hard"]}


def test_a_gradient_astronomically_small_has_its_exact_sign_at_once():
    """Scores of about 1e616: a gradient entry below every enclosure rounds to a zero of its
    exact sign, from its exponential polynomial (enclosures doubled without end)."""
    torch = pytest.importorskip("torch")
    q = np.array([[[-1e308], [2.0 ** -24], [-1e308]]])
    k = torch.tensor([[[0.0], [1.0], [1.0]]], dtype=torch.bfloat16)
    v = np.array([[[0.0], [-1.0], [0.125]]], dtype=np.float16)
    grads = (np.array([[[0.0], [-0.25], [0.0]]]), np.array([[[1 / 3], [1e308], [2.0 ** -24]]]),
             np.array([[[0.0], [0.0], [1.0]]]))
    start = time.perf_counter()
    report = assert_attention_grads_close(grads, q, k, v, np.array([[[1.0], [-1.0], [0.0]]]))
    assert report.passed is True and time.perf_counter() - start < 5
