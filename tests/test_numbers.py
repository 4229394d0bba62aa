import math

from dlsched.numbers import is_number


def test_a_number_is_an_int_or_a_float_never_a_bool():
    assert all(is_number(v) for v in (0, -3, 2.5, math.inf, math.nan))
    assert not any(is_number(v) for v in (True, False, None, "1", [1], {"x": 1}))
