"""Feeds: a cast to the placeholder's dtype never changes a value silently; an empty batch never reaches
the updates."""
import warnings

import numpy as np
import pytest

import staticgrad as sg


def _identity(dtype):
    x = sg.placeholder((None,), dtype=dtype, name="labels")
    return sg.compile(x * 1, inputs=[x])


@pytest.mark.parametrize("dtype, value, shown", [
    (np.int32, np.array([3, 2**32 + 1], np.int64), r"int64 value 4294967297 at index \(1,\) is outside int32's range"),
    (np.int64, np.array([2**63 + 5], np.uint64), r"uint64 value 9223372036854775813 at index \(0,\) is outside int64"),
    (np.float32, np.array([1.0, 1e300]), r"float64 value 1e\+300 at index \(1,\) is beyond float32's largest"),
    (np.int8, np.array([[1, -129]], np.int16).ravel(), r"int16 value -129 at index \(1,\) is outside int8's range"),
], ids=["int64-wraps-in-int32", "uint64-turns-negative", "float-overflows-to-inf", "int16-into-int8"])
def test_a_narrowing_cast_that_changes_a_value_is_refused(dtype, value, shown):
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # (and no RuntimeWarning from inside the library)
        with pytest.raises(sg.FeedError, match=r"placeholder 'labels': the fed " + shown):
            _identity(dtype)(value)


def test_a_narrowing_cast_that_keeps_every_value_is_taken():
    np.testing.assert_array_equal(_identity(np.int32)(np.array([1, -5], np.int64)), [1, -5])
    np.testing.assert_array_equal(_identity(np.float32)(np.array([0.1, 3e38])), np.float32([0.1, 3e38]))
    assert np.isinf(_identity(np.float32)(np.array([np.inf]))).all()      # infinite before: not a change


def test_a_negative_into_an_unsigned_placeholder_is_refused():
    with pytest.raises(sg.FeedError, match=r"placeholder 'labels'.*cannot cast int64 to uint8"):
        _identity(np.uint8)(np.array([-1]))


def test_an_empty_batch_into_a_function_with_updates_is_refused_before_anything_is_assigned():
    x = sg.placeholder((None, 2), name="x")
    W = sg.parameter(np.ones(2), name="W")
    loss = sg.mean(x @ W)
    (gW,) = sg.grad(loss, [W])
    step = sg.compile(loss, inputs=[x], updates=[(W, W - 0.1 * gW)])
    with pytest.raises(sg.FeedError, match=r"placeholder 'x': an empty batch \(shape \(0, 2\)\) into a function "
                       "that updates parameters"):
        step(np.zeros((0, 2)))
    np.testing.assert_array_equal(W.value, [1.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert np.isnan(sg.compile(loss, inputs=[x])(np.zeros((0, 2))))    # without updates: numpy's mean


def test_updates_are_all_checked_before_any_is_assigned():
    """The second update's size is known only from the feed: the plan refuses it, and p keeps its value."""
    x = sg.placeholder((None,), name="x")
    p = sg.parameter(np.zeros(3), name="p")
    q = sg.parameter(np.zeros(3), name="q")
    fn = sg.compile([], inputs=[x], updates=[(p, p + 1.0), (q, x)])
    with pytest.raises(sg.ExecutionError, match=r"parameter .q.: the new value \(built at test_feeds.py:\d+\) "
                       r"has shape \(4,\) with these feeds, expected \(3,\)"):
        fn(np.ones(4))
    np.testing.assert_array_equal(p.value, np.zeros(3))
    fn(np.ones(3))
    np.testing.assert_array_equal(p.value, np.ones(3))
    np.testing.assert_array_equal(q.value, np.ones(3))
