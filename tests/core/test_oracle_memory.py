"""Bounded memory of the bitmap oracles (OUE, SUE, SS): perturbation and aggregation work
in chunks of rows with bounded temporaries, and a batch whose packed reports alone exceed
the batch limit is refused with a message naming its size."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from ldpflow.core import bitvectors
from ldpflow.core.oracles import Reports, registry

BITMAP = ["oue", "sue", "ss"]
MiB = 1 << 20


def peak_bytes(function):
    """The peak of memory traced (numpy's buffers included) while ``function`` runs, above
    what was allocated when it started; and its result."""
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        result = function()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - start, result


@pytest.mark.parametrize("name", BITMAP)
def test_chunked_perturb_equals_perturbing_the_chunks_in_turn(name, monkeypatch):
    monkeypatch.setattr(bitvectors, "CHUNK_BYTES", 64 << 10)
    d, n = 1000, 2000
    oracle = registry.make(name, epsilon=1.0, domain_size=d)
    values = np.random.default_rng(1).integers(0, d, n)
    chunks = bitvectors.row_chunks(n, 8 * -(-d // 64))
    assert len(chunks) == 4
    whole = oracle.perturb(values, rng=np.random.default_rng(9))
    rng = np.random.default_rng(9)
    parts = Reports.concat([oracle.perturb(values[part], rng=rng) for part in chunks])
    np.testing.assert_array_equal(whole.bits, parts.bits)
    oracle.validate(whole)  # padding zero; ss: exactly omega members per row


@pytest.mark.parametrize("name", BITMAP)
def test_perturb_temporaries_are_bounded(name, monkeypatch):
    """The peak is the packed output plus a few chunks (bernoulli_bits holds three arrays of
    a chunk's size); drawing the batch at once would hold at least twice the output."""
    monkeypatch.setattr(bitvectors, "CHUNK_BYTES", MiB)
    d, n = 65_000, 2048  # 8125 bytes per report (not whole words: trimmed by a copy)
    oracle = registry.make(name, epsilon=4.0, domain_size=d)
    values = np.random.default_rng(2).integers(0, d, n)
    oracle.perturb(values[:1], rng=np.random.default_rng(3))  # ss: its cached fill rate
    peak, reports = peak_bytes(lambda: oracle.perturb(values, rng=np.random.default_rng(3)))
    output = reports.bits.nbytes
    assert output == n * 8125
    assert peak < output + 8 * MiB, peak / MiB


@pytest.mark.parametrize("name", BITMAP)
def test_aggregate_temporaries_are_bounded(name, monkeypatch):
    monkeypatch.setattr(bitvectors, "CHUNK_BYTES", MiB)
    d, n = 65_536, 2048
    oracle = registry.make(name, epsilon=4.0, domain_size=d)
    reports = oracle.perturb(np.random.default_rng(4).integers(0, d, n),
                             rng=np.random.default_rng(5))
    peak, acc = peak_bytes(lambda: oracle.aggregate(reports))
    assert peak < 4 * MiB, peak / MiB
    np.testing.assert_array_equal(
        acc.counts, bitvectors.unpack(reports.bits, d).sum(axis=0, dtype=np.int64))


@pytest.mark.parametrize("rows,nbits", [(1, 9), (254, 16), (255, 64), (256, 65), (1000, 13)])
def test_column_sums_and_popcounts_are_exact_across_chunks(rows, nbits, monkeypatch):
    monkeypatch.setattr(bitvectors, "CHUNK_BYTES", 64)  # many small chunks
    rng = np.random.default_rng(rows * nbits)
    dense = (rng.random((rows, nbits)) < 0.7).astype(np.uint8)
    packed = np.packbits(dense, axis=1, bitorder="little")
    np.testing.assert_array_equal(bitvectors.column_sums(packed, nbits), dense.sum(axis=0))
    np.testing.assert_array_equal(bitvectors.row_popcount(packed), dense.sum(axis=1))


def test_all_ones_column_sums_do_not_overflow():
    packed = np.full((1000, 3), 255, dtype=np.uint8)
    np.testing.assert_array_equal(bitvectors.column_sums(packed, 24), np.full(24, 1000))


@pytest.mark.parametrize("name", BITMAP)
def test_a_batch_past_the_limit_is_refused_with_its_size(name, monkeypatch):
    monkeypatch.setenv("LDPFLOW_MAX_BATCH_BYTES", str(10**6))
    oracle = registry.make(name, epsilon=1.0, domain_size=10_000)
    with pytest.raises(ValueError, match=(
            rf"1000 {name} reports of domain_size 10000 need 1250000 bytes packed .*"
            r"limit of 1000000 bytes .* chunks of at most 800 ")):
        oracle.perturb(np.zeros(1000, dtype=np.int64), rng=np.random.default_rng(0))
    assert len(oracle.perturb(np.zeros(800, dtype=np.int64), rng=np.random.default_rng(0))) == 800


def test_the_issue_size_is_refused_by_default_without_allocating():
    with pytest.raises(ValueError, match=r"1000000 oue reports of domain_size 50000 need "
                                         r"6250000000 bytes packed \(5.82 GiB\)"):
        bitvectors.check_batch_bytes(10**6, 50_000, what="oue reports")
    assert bitvectors.check_batch_bytes(1 << 16, 50_000) == (1 << 16) * 6250


@pytest.mark.parametrize("setting", ["0", "-5", "lots"])
def test_a_bad_batch_limit_setting_is_named(setting, monkeypatch):
    monkeypatch.setenv("LDPFLOW_MAX_BATCH_BYTES", setting)
    with pytest.raises(ValueError, match=f"LDPFLOW_MAX_BATCH_BYTES must be a positive "
                                         f"integer, got '{setting}'"):
        bitvectors.max_batch_bytes()
