"""The message helpers the notebooks' tests are built on say what is wrong."""
import pytest
import torch

from course_testkit.testing import assert_close, assert_raises_value_error, check_tensor, same_random_numbers, substituted


def test_assert_close_accepts_a_match_within_tolerance():
    assert_close(torch.ones(3) + 1e-7, torch.ones(3, dtype=torch.float64), "f()")


def test_assert_close_names_a_known_mistake():
    expected = torch.arange(6.0).reshape(2, 3)
    with pytest.raises(AssertionError, match="it looks like the rows are reversed"):
        assert_close(expected.flip(0), expected, "f()", mistakes={"the rows are reversed": lambda: expected.flip(0)})


def test_assert_close_locates_the_worst_value():
    expected = torch.zeros(2, 3)
    actual = expected.clone()
    actual[1, 2] = 5.0
    with pytest.raises(AssertionError, match=r"at index \(1, 2\) it gives 5, expected 0 .*1 of 6 values off"):
        assert_close(actual, expected, "f()")


def test_assert_close_reports_nan():
    with pytest.raises(AssertionError, match="NaN or inf"):
        assert_close(torch.tensor([0.0, float("nan")]), torch.zeros(2), "f()")


@pytest.mark.parametrize("actual, hint", [
    (torch.zeros(1, 4, 5), "extra leading dimension of size 1"),
    (torch.zeros(5, 4), "dimensions transposed"),
])
def test_check_tensor_explains_shape_mistakes(actual, hint):
    with pytest.raises(AssertionError, match=hint):
        check_tensor(actual, "f()", shape=[4, 5])


def test_check_tensor_rejects_other_types_and_dtypes():
    with pytest.raises(AssertionError, match="should return a torch.Tensor, got list"):
        check_tensor([1, 2], "f()")
    with pytest.raises(AssertionError, match="dtype torch.float64, expected torch.float32"):
        check_tensor(torch.zeros(2, dtype=torch.float64), "f()", dtype=torch.float32)


def test_assert_raises_value_error():
    def raises(kind):
        raise kind("no")

    assert_raises_value_error(lambda: raises(ValueError), "f()", "why")
    with pytest.raises(AssertionError, match="but raised TypeError"):
        assert_raises_value_error(lambda: raises(TypeError), "f()", "why")
    with pytest.raises(AssertionError, match="but returned int"):
        assert_raises_value_error(lambda: 3, "f()", "why")


def test_same_random_numbers_repeats_draws_and_restores_the_generator():
    torch.manual_seed(0)
    with same_random_numbers(5):
        first = torch.rand(3)
    after = torch.rand(3)
    with same_random_numbers(5):
        second = torch.rand(3)
    torch.manual_seed(0)
    assert torch.equal(first, second) and torch.equal(after, torch.rand(3))


def test_substituted_restores_the_namespace():
    namespace = {"a": 1}
    with substituted(namespace, a=2, b=3):
        assert namespace == {"a": 2, "b": 3}
    assert namespace == {"a": 1}
