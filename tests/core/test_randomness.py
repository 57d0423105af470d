"""The random sources: exact primitives, packed Bernoulli bits, secure default."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ldpflow.core import randomness
from ldpflow.core.randomness import NumpySource, SecureSource, SplitMix64Source
from tests.core import reference

SOURCES = {
    "numpy": lambda: NumpySource(np.random.default_rng(123)),
    "secure": SecureSource,
    "splitmix": lambda: SplitMix64Source(2024),
}


@pytest.mark.parametrize("p", [0.5, 1 / (math.e + 1), 0.1, 0.999, 2**-30, 0.3 + 2**-52])
def test_binary_digits_reconstruct_p_exactly(p):
    digits = randomness._binary_digits(p)
    from fractions import Fraction

    assert sum(Fraction(b, 2 ** (i + 1)) for i, b in enumerate(digits)) == Fraction(p)


@pytest.mark.parametrize("kind", SOURCES)
@pytest.mark.parametrize("p", [0.5, 1 / (math.e + 1), 0.02, 0.97])
def test_bernoulli_bits_have_rate_p_within_k_sigma(kind, p):
    rows, nbits = 4000, 333
    bits = SOURCES[kind]().bernoulli_bits(p, rows, nbits)
    assert bits.shape == (rows, 42) and bits.dtype == np.uint8
    unpacked = np.unpackbits(bits, axis=1, bitorder="little")
    assert not unpacked[:, nbits:].any()
    m = rows * nbits
    ones = int(unpacked[:, :nbits].sum())
    assert abs(ones - m * p) <= 5 * math.sqrt(m * p * (1 - p))


def test_bernoulli_bits_decide_deep_digits_exactly():
    """p = 1/2 + 2**-12: the excess lives past the dense levels, in the recursion."""
    p = 0.5 + 2**-12
    source = NumpySource(np.random.default_rng(5))
    bits = source.bernoulli_bits(p, 20000, 4096)
    m = 20000 * 4096
    ones = int(np.bitwise_count(bits).sum(dtype=np.int64))
    sd = math.sqrt(m * p * (1 - p))
    assert abs(ones - m * p) <= 5 * sd
    assert ones - m * 0.5 > 5 * sd  # the 2**-12 excess is visible: 20000 ones vs sd 4500


def test_bernoulli_bits_of_zero_and_one():
    source = NumpySource(np.random.default_rng(0))
    assert not source.bernoulli_bits(0.0, 10, 20).any()
    ones = source.bernoulli_bits(1.0, 10, 20)
    assert (np.unpackbits(ones, axis=1, bitorder="little")[:, :20] == 1).all()
    assert not np.unpackbits(ones, axis=1, bitorder="little")[:, 20:].any()
    with pytest.raises(ValueError, match="p must be in"):
        source.bernoulli_bits(1.5, 1, 1)


def test_bernoulli_bits_are_independent_across_positions():
    """Pairs of adjacent bits (also across word boundaries) are independent."""
    p = 0.3
    bits = NumpySource(np.random.default_rng(9)).bernoulli_bits(p, 20000, 130)
    u = np.unpackbits(bits, axis=1, bitorder="little")[:, :130].astype(int)
    for a, b in [(0, 1), (63, 64), (127, 128)]:
        table = np.bincount(2 * u[:, a] + u[:, b], minlength=4)
        expected = np.array([(1 - p) ** 2, (1 - p) * p, p * (1 - p), p**2]) * 20000
        assert stats.chisquare(table, expected).pvalue > 1e-4


@pytest.mark.parametrize("kind", SOURCES)
@pytest.mark.parametrize("bound", [3, 1023, 2**32])
def test_below_is_uniform(kind, bound):
    draws = SOURCES[kind]().below(bound, 60000)
    assert draws.min() >= 0 and draws.max() < bound
    bins = min(bound, 64)
    hist = np.bincount(draws * bins // bound, minlength=bins)
    assert stats.chisquare(hist).pvalue > 1e-4


def test_below_takes_per_element_bounds():
    bounds = np.array([1, 2, 5, 7] * 5000)
    draws = SecureSource().below(bounds, bounds.size)
    assert np.all((draws >= 0) & (draws < bounds))
    assert set(draws[bounds == 7].tolist()) == set(range(7))
    with pytest.raises(ValueError, match="bound must be in"):
        SecureSource().below(0, 3)


@pytest.mark.parametrize("kind", SOURCES)
def test_uniform_lies_on_the_2_to_minus_53_grid(kind):
    u = SOURCES[kind]().uniform(10000)
    assert u.min() >= 0 and u.max() < 1
    assert np.all(u * 2**53 == np.floor(u * 2**53))
    assert stats.kstest(u, "uniform").pvalue > 1e-4


def test_splitmix_source_is_the_reference_stream():
    source = SplitMix64Source(2**64 - 5)
    got = source.words(3).tolist() + source.words(4).tolist()
    assert got == reference.splitmix64(2**64 - 5, 7)
    with pytest.raises(ValueError, match="seed must be in"):
        SplitMix64Source(-1)


def test_secure_source_is_unpredictable_between_calls():
    a, b = SecureSource().words(4), SecureSource().words(4)
    assert not np.array_equal(a, b)
