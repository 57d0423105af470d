"""Parameter and input validation with one error-message format.

Every check raises ``TypeError`` for a wrong type and ``ValueError`` for a bad value; the
message names the parameter, the constraint, and the value received. Checks run once, at
construction or at the boundary of a batch call, never per element.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "InvalidReportError",
    "MAX_EPSILON",
    "MIN_EPSILON",
    "as_exact_array",
    "check_epsilon",
    "check_domain_size",
    "check_positive_int",
    "check_value_bits",
    "check_power_of_two",
    "check_probability",
    "check_values",
    "is_integer",
    "is_real",
    "check_integer",
    "check_real",
    "check_limit",
]


class InvalidReportError(ValueError):
    """A report (or a batch of reports) that no conforming client could have produced."""


#: The smallest epsilon accepted: ``2**-36``. Oracles compute their probabilities from
#: ``e**epsilon`` or ``e**(epsilon / 2)``, whose distance to 1 must be representable: at
#: ``epsilon = 2**-36`` the relative rounding error of ``e**(epsilon / 2) - 1`` is at most
#: ``2**-53 / 2**-37 = 2**-16``; below about ``2**-53`` it is 0 (``p == q``: a division by
#: zero), and a subnormal epsilon (``5e-324``) is far below that.
MIN_EPSILON = 2.0**-36
#: The largest epsilon accepted: ``e**700`` (about 1e304) is finite, and so are
#: ``e**epsilon + d - 1`` for any 64-bit domain and its reciprocal, a normal float.
MAX_EPSILON = 700.0


def is_integer(value: Any) -> bool:
    """Whether ``value`` is an integer (Python or NumPy), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_real(value: Any) -> bool:
    """Whether ``value`` is a real number (Python or NumPy), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def check_integer(value: Any, *, name: str) -> int:
    """Return ``value`` as an int, or raise TypeError if it is not an integer."""
    if not is_integer(value):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} ({value!r})")
    return int(value)


def check_real(value: Any, *, name: str) -> float:
    """Return ``value`` as a float, or raise TypeError if it is not a real number."""
    if not is_real(value):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} ({value!r})")
    return float(value)


def check_limit(value: Any, *, name: str) -> int:
    """A cap or limit (``cap``, ``--max_keys``): a positive integer. ValueError for any other
    value, of any type, with the message every such flag shares."""
    if not is_integer(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_epsilon(epsilon: float, *, name: str = "epsilon") -> float:
    """Return ``epsilon`` as a float, or raise if it is not a real number in
    ``[MIN_EPSILON, MAX_EPSILON]``: every epsilon that passes gives every oracle finite
    probabilities ``p > q > 0`` that are normal floats."""
    value = check_real(epsilon, name=name)
    if not 0 < value < math.inf:  # also rejects NaN
        raise ValueError(f"{name} must be in (0, inf), got {epsilon!r}")
    if not MIN_EPSILON <= value <= MAX_EPSILON:
        raise ValueError(f"{name} must be in [2**-36, {MAX_EPSILON:g}] (its probabilities must "
                         f"be representable as floats), got {epsilon!r}")
    return value


def check_positive_int(value: int, *, name: str, minimum: int = 1) -> int:
    """Return ``value`` as an int, or raise if it is not an integer >= ``minimum``."""
    check_integer(value, name=name)
    if int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def check_domain_size(domain_size: int, *, name: str = "domain_size") -> int:
    """A domain holds the values ``0 .. domain_size - 1``; at least two of them."""
    return check_positive_int(domain_size, name=name, minimum=2)


def check_value_bits(value: int, *, name: str = "value_bits") -> int:
    """Return ``value`` as an int, or raise if it is no bit width in ``[1, 64]`` (the width
    of a heavy-hitter value, a codec's integers)."""
    bits = check_positive_int(value, name=name)
    if bits > 64:
        raise ValueError(f"{name} must be in [1, 64], got {bits!r}")
    return bits


def check_power_of_two(value: int, *, name: str, minimum: int = 2) -> int:
    """Return ``value`` if it is an integer power of two >= ``minimum``."""
    value = check_positive_int(value, name=name, minimum=minimum)
    if value & (value - 1):
        raise ValueError(f"{name} must be a power of two, got {value!r}")
    return value


def check_probability(value: float, *, name: str, open_interval: bool = False) -> float:
    """Return ``value`` as a float in [0, 1] (or (0, 1) when ``open_interval``)."""
    value = check_real(value, name=name)
    ok = 0 < value < 1 if open_interval else 0 <= value <= 1
    if not ok:
        bounds = "(0, 1)" if open_interval else "[0, 1]"
        raise ValueError(f"{name} must be in {bounds}, got {value!r}")
    return value


def as_exact_array(values: npt.ArrayLike) -> np.ndarray:
    """``numpy.asarray``, but a list of Python ints too wide for int64 stays exact (object
    dtype) instead of being mixed into float64, which would round values past 2**53."""
    if isinstance(values, np.ndarray):
        return values
    arr = np.asarray(values)
    if arr.dtype.kind == "f" and arr.size:
        exact = np.asarray(values, dtype=object)
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
               for v in exact.ravel()):
            return exact
    return arr


def check_values(values: npt.ArrayLike, domain_size: int, *, name: str = "values") -> np.ndarray:
    """Return ``values`` as a 1-d integer array of values in ``[0, domain_size)``.

    The result is int64, or uint64 when ``domain_size > 2**63`` (64-bit values, as in
    heavy-hitter prefixes).

    Raises
    ------
    TypeError
        If the values are not integers (floats with integral values are accepted).
    ValueError
        If the array is not one-dimensional or a value lies outside the domain; the message
        names the first offending value and its position.
    """
    wide = domain_size >= 2**63  # values past 2**63 - 1 need uint64
    arr = as_exact_array(values)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.uint64 if wide else np.int64)
    kind = arr.dtype.kind
    if kind == "b":
        raise TypeError(f"{name} must be integers, got booleans")
    if kind == "f":
        integral = np.isfinite(arr) & (arr == np.floor(arr))
        if not integral.all():
            bad = int(np.flatnonzero(~integral)[0])
            raise TypeError(f"{name} must be integers, got {arr[bad].item()!r} at position {bad}")
    elif kind == "O":
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in arr):
            raise TypeError(f"{name} must be integers, got objects of other types")
        ints = [int(v) for v in arr]
        for i, v in enumerate(ints):
            if not 0 <= v < domain_size:
                raise ValueError(f"{name} must lie in [0, {domain_size}), got {v} at position {i}")
        return np.array(ints, dtype=np.uint64 if wide else np.int64)
    elif kind not in "iu":
        raise TypeError(f"{name} must be integers, got dtype {arr.dtype}")
    if kind == "i" or kind == "f":
        negative = arr < 0
        if negative.any():
            bad = int(np.flatnonzero(negative)[0])
            raise ValueError(
                f"{name} must lie in [0, {domain_size}), got {arr[bad].item()!r} at position {bad}"
            )
    out = arr.astype(np.uint64 if wide else np.int64)
    if not wide or domain_size < 2**64:
        too_big = out >= np.array(domain_size, dtype=out.dtype)
        if too_big.any():
            bad = int(np.flatnonzero(too_big)[0])
            raise ValueError(
                f"{name} must lie in [0, {domain_size}), got {int(out[bad])} at position {bad}"
            )
    return out
