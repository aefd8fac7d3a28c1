"""exactattn.testing.assert_typed_equal: equal values of the same type at every level."""

import re
from fractions import Fraction as F

import numpy as np
import pytest

from exactattn.testing import assert_typed_equal


def fails(actual, expected, message, **options):
    with pytest.raises(AssertionError, match=f"^{re.escape(message)}$"):
        assert_typed_equal(actual, expected, **options)


def test_nested_equal_values_of_the_same_types_pass():
    value = {"rows": [(F(1, 2), 3), (0.25, np.float32(1.5))], 1: {"x": [None, "s", True]}}
    copy = {"rows": [(F(1, 2), 3), (0.25, np.float32(1.5))], 1: {"x": [None, "s", True]}}
    assert assert_typed_equal(value, copy) is None
    assert_typed_equal([], [])
    assert_typed_equal({}, {})


def test_a_type_mismatch_at_depth_names_its_path():
    fails([1, [F(1, 2)]], [1, [0.5]], "at [1][0]: Fraction(1, 2) (Fraction) != 0.5 (float)")
    fails({"a": [1, 2]}, {"a": [1, 2.0]}, "at ['a'][1]: 2 (int) != 2.0 (float)")
    fails([np.float64(1.0)], [1.0], f"at [0]: {np.float64(1.0)!r} (float64) != 1.0 (float)")
    fails(1, True, "1 (int) != True (bool)")                  # the top level has no path


def test_equal_values_of_the_same_type_that_differ_fail_with_both_sides():
    fails((1, (2, 3)), (1, (2, 4)), "at [1][1]: 3 (int) != 4 (int)")


def test_a_container_of_another_type_fails_even_when_equal_inside():
    fails([(1,)], [[1]], "at [0]: (1,) (tuple) != [1] (list)")


def test_a_length_mismatch_names_the_container():
    fails([1, [1, 2, 3]], [1, [1, 2]], "at [1]: list of length 3 != list of length 2")
    fails((), (0,), "tuple of length 0 != tuple of length 1")


def test_a_dict_key_mismatch_names_the_missing_and_unexpected_keys():
    fails([{"a": 1, "c": 2}], [{"a": 1, "b": 2}],
          "at [0]: dict keys differ: missing keys ['b'], unexpected keys ['c']")
    fails({"a": 1}, {"a": 1, "b": 2}, "dict keys differ: missing keys ['b']")


def test_a_key_of_another_type_fails_though_the_dicts_are_equal():
    assert {1: "x"} == {True: "x"}
    fails({"d": {1: "x"}}, {"d": {True: "x"}}, "at ['d']: key 1 (int) != key True (bool)")


def test_key_order_counts_only_when_asked():
    assert_typed_equal({"a": 1, "b": 2}, {"b": 2, "a": 1})
    fails({"a": 1, "b": 2}, {"b": 2, "a": 1}, "dict keys in order ['a', 'b'] != ['b', 'a']",
          ordered=True)


def test_nan_equals_nan_of_the_same_type_only():
    nan = float("nan")
    assert_typed_equal([nan, {"x": nan}], [float("nan"), {"x": float("nan")}])
    assert_typed_equal(np.float32("nan"), np.float32("nan"))
    fails([np.float32("nan")], [nan], f"at [0]: {np.float32('nan')!r} (float32) != nan (float)")
    fails([nan], [1.0], "at [0]: nan (float) != 1.0 (float)")


def test_numpy_arrays_need_the_same_dtype_shape_and_elements():
    assert_typed_equal(np.array([[1.0, np.nan]]), np.array([[1.0, np.nan]]))
    assert_typed_equal(np.array([F(1, 2), 3], dtype=object), np.array([F(1, 2), 3], dtype=object))
    fails([np.array([1, 2], dtype=np.int32)], [np.array([1, 2], dtype=np.int64)],
          "at [0]: array of dtype int32 != array of dtype int64")
    fails(np.zeros((2, 2)), np.zeros(4), "array of shape (2, 2) != array of shape (4,)")
    fails(np.array([[1.0, 2.0]]), np.array([[1.0, 3.0]]),
          f"at [0, 1]: {np.float64(2.0)!r} (float64) != {np.float64(3.0)!r} (float64)")
    fails(np.array([F(1), 2], dtype=object), np.array([F(1), F(2)], dtype=object),
          "at [1]: 2 (int) != Fraction(2, 1) (Fraction)")
    fails(np.array([1.0]), [1.0], "array([1.]) (ndarray) != [1.0] (list)")
