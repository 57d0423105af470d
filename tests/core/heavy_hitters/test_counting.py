"""Exact prefix counting (``ldpflow.core.heavy_hitters.counting``) against the naive grid
(``hashing.naive_support_counts``) on every branch: the full domain, batches of every size
across projection words, prefix widths that end inside a byte, ragged report chunks, one
and no reports, by either way of counting batches (the batched scatter and the sorted
segments); and against digests of the counts the previous implementation gave."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from ldpflow.core import hashing
from ldpflow.core.heavy_hitters import counting


def _reports(n, hash_range, seed):
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    buckets = rng.integers(0, hash_range, size=n)
    return seeds, buckets, rng


def _prefixes(rng, width, count):
    top = np.uint64((1 << width) - 1)
    pool = rng.integers(0, top, size=count, dtype=np.uint64, endpoint=True)
    return np.unique(np.concatenate([[np.uint64(0), top], pool]))


def _naive(seeds, buckets, prefixes, prefix_bits, eta, hash_range):
    cand = (prefixes[:, None] << np.uint64(eta)) | np.arange(1 << eta, dtype=np.uint64)
    return hashing.naive_support_counts(seeds, buckets, prefix_bits, hash_range,
                                        cand.reshape(-1)).reshape(prefixes.size, 1 << eta)


def _support(seeds, buckets, prefixes, prefix_bits, eta, hash_range):
    F = counting.prefix_scatter(seeds, buckets, prefixes, prefix_bits, eta, hash_range)
    assert F.shape == (prefixes.size, 1 << eta) and F.dtype == np.int64
    return hashing.support_counts(F, hash_range)


@pytest.mark.parametrize("n", [1, 2, 37, 1000])
@pytest.mark.parametrize("hash_range", [2, 8, 64])
@pytest.mark.parametrize("bits", [1, 5, 11])
def test_full_domain_equals_the_naive_grid(n, hash_range, bits):
    seeds, buckets, _ = _reports(n, hash_range, n + bits)
    zero = np.zeros(1, dtype=np.uint64)
    np.testing.assert_array_equal(_support(seeds, buckets, zero, bits, bits, hash_range),
                                  _naive(seeds, buckets, zero, bits, bits, hash_range))
    np.testing.assert_array_equal(
        counting.full_domain_support(seeds, buckets, bits, hash_range),
        _naive(seeds, buckets, zero, bits, bits, hash_range).reshape(-1))


# batch sizes 1..7 and 21: 64 // d * d prefixes per projection word, so 130 prefixes span
# several words and end with a short batch; widths 1, 7, 9, 17 (inside a byte), 56 (7
# whole bytes) and 63 - eta, 64 - eta (the top bit of a 64-bit value)
@pytest.mark.parametrize("batch", [1, 2, 3, 5, 7, 21])
@pytest.mark.parametrize("prefix_bits,eta", [(4, 3), (10, 3), (12, 3), (20, 3), (60, 4),
                                             (63, 5), (64, 2)])
def test_prefix_batches_equal_the_naive_grid(batch, prefix_bits, eta, monkeypatch):
    monkeypatch.setattr(counting, "batch_size", lambda *args: batch)
    seeds, buckets, rng = _reports(203, 16, batch * 100 + prefix_bits)
    prefixes = _prefixes(rng, prefix_bits - eta, 130)
    np.testing.assert_array_equal(
        _support(seeds, buckets, prefixes, prefix_bits, eta, 16),
        _naive(seeds, buckets, prefixes, prefix_bits, eta, 16))


@pytest.mark.parametrize("entries", [1, 5, 64, 1000])
def test_report_chunks_equal_one_chunk(entries, monkeypatch):
    """Ragged chunks of reports (the last one short, one report a chunk) sum to the counts
    of one chunk, for the full domain and for batches."""
    seeds, buckets, rng = _reports(333, 32, entries)
    prefixes = _prefixes(rng, 9, 40)
    whole = _support(seeds, buckets, prefixes, 15, 6, 32)
    full = _support(seeds, buckets, np.zeros(1, np.uint64), 9, 9, 32)
    monkeypatch.setattr(counting, "_SCATTER_ENTRIES", entries * 32)
    np.testing.assert_array_equal(_support(seeds, buckets, prefixes, 15, 6, 32), whole)
    np.testing.assert_array_equal(
        _support(seeds, buckets, np.zeros(1, np.uint64), 9, 9, 32), full)
    np.testing.assert_array_equal(whole, _naive(seeds, buckets, prefixes, 15, 6, 32))


def test_a_full_domain_counts_in_one_chunk_while_its_counters_outnumber_the_entries(
        monkeypatch):
    """Each chunk's bincount allocates and fills every counter: a full domain of 2**10
    counters counts 30 reports x 31 entries (more than a chunk's 64) in one bincount."""
    seeds, buckets, _ = _reports(30, 32, 3)
    monkeypatch.setattr(counting, "_SCATTER_ENTRIES", 64)
    calls = []
    real = np.bincount
    monkeypatch.setattr(np, "bincount", lambda x, **k: calls.append(x.size) or real(x, **k))
    support = _support(seeds, buckets, np.zeros(1, np.uint64), 9, 9, 32)
    assert calls == [30 * 31]
    np.testing.assert_array_equal(support,
                                  _naive(seeds, buckets, np.zeros(1, np.uint64), 9, 9, 32))


def test_no_reports_or_no_prefixes_count_zero():
    seeds, buckets, rng = _reports(0, 8, 1)
    prefixes = _prefixes(rng, 5, 3)
    assert not counting.prefix_scatter(seeds, buckets, prefixes, 9, 4, 8).any()
    seeds, buckets, _ = _reports(10, 8, 1)
    assert counting.prefix_scatter(seeds, buckets, prefixes[:0], 9, 4, 8).shape == (0, 16)


def test_projection_word_is_the_parity_of_each_prefix():
    rng = np.random.default_rng(5)
    for width in (1, 8, 13, 50, 64):
        high = rng.integers(0, 2**width, size=(3, 101), dtype=np.uint64)
        prefixes = rng.integers(0, 2**width, size=64, dtype=np.uint64)
        word = counting._projection_word(counting._byte_indices(high, width), prefixes)
        for j, c in enumerate(prefixes):
            bit = (word >> np.uint64(j)) & np.uint64(1)
            np.testing.assert_array_equal(bit, np.bitwise_count(high & c) & 1)


@pytest.mark.parametrize("d,eta", [(1, 0), (1, 3), (4, 2), (6, 1)])
def test_unit_rows_are_the_signed_sums_over_each_bit(d, eta):
    counts = np.random.default_rng(d).integers(0, 50, size=1 << (d + eta))
    z = np.arange(1 << d)
    C = counts.reshape(1 << d, 1 << eta)
    want = [((-1) ** ((z >> bit) & 1))[:, None] * C for bit in range(d)]
    np.testing.assert_array_equal(counting._unit_rows(counts.copy(), d, eta),
                                  np.array([w.sum(axis=0) for w in want]))


# (n, prefix bits, eta, hash range, prefixes, seed): SHA-256 of the int64 scatter vectors
# computed by the implementation before the sign was folded into the projected bits
# (one bincount with a separate sign bit, a pass per prefix for the projection).
FROZEN = [
    ((5000, 16, 16, 32, 1, 1),
     "afeb7b4892009827ae809c3ca90629c336fb3c892431039cb546541e41eb8cc7"),
    ((5000, 36, 14, 32, 128, 2),
     "976588de2ed7df992fb587eaf94ccfdca33d2452250466b4dda7b2032d985429"),
    ((3000, 64, 8, 32, 94, 3),
     "685d9a264fc018752c8add94f156251ece67db1e5443fdf405cdd27717fc55c8"),
    ((2000, 50, 6, 8, 300, 4),
     "6122e7703f88d86e1e4c9a87ec82ea8f29258a5cc94397ab60d801ae75e0fc80"),
]


@pytest.mark.parametrize("case,digest", FROZEN)
def test_scatter_vectors_are_bit_for_bit_the_previous_ones(case, digest):
    n, bits, eta, g, count, seed = case
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    buckets = rng.integers(0, g, size=n)
    prefixes = (np.zeros(1, np.uint64) if eta == bits else
                np.unique(rng.integers(0, 2**(bits - eta), size=count, dtype=np.uint64)))
    F = counting.prefix_scatter(seeds, buckets, prefixes, bits, eta, g)
    assert hashlib.sha256(F.astype(np.int64).tobytes()).hexdigest() == digest


def _one_thread_then(threads, count, monkeypatch):
    """``count()`` on one thread; then ``threads`` threads for what follows, from any size
    of work (``LDPFLOW_THREADS``, ``parallel.MIN_ROWS``)."""
    from ldpflow.core import parallel

    monkeypatch.setenv("LDPFLOW_THREADS", "1")
    one = count()
    monkeypatch.setenv("LDPFLOW_THREADS", str(threads))
    monkeypatch.setattr(parallel, "MIN_ROWS", 1)
    return one


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_batches_counted_in_threads_equal_one_thread(threads, monkeypatch):
    """Batches of prefixes split over threads (LDPFLOW_THREADS) write the same counts."""
    from ldpflow.core import parallel

    seeds, buckets, rng = _reports(150, 8, threads)
    prefixes = _prefixes(rng, 12, 50)
    monkeypatch.setattr(counting, "batch_size", lambda *args: 3)
    one = _one_thread_then(threads, lambda: counting.prefix_scatter(
        seeds, buckets, prefixes, 17, 5, 8), monkeypatch)
    calls = []
    real = parallel._pool
    monkeypatch.setattr(parallel, "_pool", lambda workers: calls.append(workers) or
                        real(workers))
    np.testing.assert_array_equal(counting.prefix_scatter(seeds, buckets, prefixes, 17, 5, 8),
                                  one)
    assert calls == ([] if threads == 1 else [threads])
    np.testing.assert_array_equal(hashing.support_counts(one, 8),
                                  _naive(seeds, buckets, prefixes, 17, 5, 8))



def test_a_failing_thread_ends_after_the_others(monkeypatch):
    """map_items raises a part's error only once every part has ended: no thread still
    writes when the caller sees the failure."""
    import threading
    import time

    from ldpflow.core import parallel

    monkeypatch.setenv("LDPFLOW_THREADS", "2")
    ended = []
    started = threading.Barrier(2)

    def part(run):
        started.wait(timeout=10)
        if run[0] == 0:
            raise RuntimeError("part 0 failed")
        time.sleep(0.2)
        ended.append(run[0])

    with pytest.raises(RuntimeError, match="part 0 failed"):
        parallel.map_items(part, [0, 1], 4 * parallel.MIN_ROWS)
    assert ended == [1]


def test_projection_memory_does_not_grow_with_the_prefixes(monkeypatch):
    """The projection words are made per batch group in each thread: counting 40 times
    more prefixes holds no more memory (tracemalloc peak, one thread)."""
    import tracemalloc

    monkeypatch.setenv("LDPFLOW_THREADS", "1")
    seeds, buckets, rng = _reports(20_000, 16, 7)
    peaks = []
    for count in (60, 2_400):
        prefixes = np.unique(rng.integers(0, 1 << 30, size=count, dtype=np.uint64))
        tracemalloc.start()
        counting.prefix_scatter(seeds, buckets, prefixes, 36, 6, 16)
        peaks.append(tracemalloc.get_traced_memory()[1] - prefixes.size * 8 * (1 << 6))
        tracemalloc.stop()
    assert peaks[1] < 1.25 * peaks[0], peaks


# The segment method (entries sorted by suffix index, bits summed as lanes): forced on
# every shape, against the naive grid and the batched scatter.
def _both(seeds, buckets, prefixes, prefix_bits, eta, hash_range, monkeypatch):
    monkeypatch.setattr(counting, "segments_pay", lambda *args: False)
    batched = counting.prefix_scatter(seeds, buckets, prefixes, prefix_bits, eta, hash_range)
    monkeypatch.setattr(counting, "segments_pay", lambda *args: True)
    segments = counting.prefix_scatter(seeds, buckets, prefixes, prefix_bits, eta, hash_range)
    assert segments.shape == batched.shape and segments.dtype == np.int64
    return batched, segments


# widths inside a byte and whole bytes, the top bit of a 64-bit value; 1, 63, 64, 65 and
# 130 prefixes (groups of 64 with a short last one)
@pytest.mark.parametrize("prefix_bits,eta,count", [(4, 3, 1), (10, 3, 63), (12, 2, 64),
                                                   (20, 3, 65), (60, 4, 130), (64, 2, 130),
                                                   (26, 10, 40)])
def test_segments_equal_the_naive_grid_and_the_batches(prefix_bits, eta, count, monkeypatch):
    seeds, buckets, rng = _reports(203, 16, prefix_bits * 7 + count)
    prefixes = _prefixes(rng, prefix_bits - eta, count)[:count]
    batched, segments = _both(seeds, buckets, prefixes, prefix_bits, eta, 16, monkeypatch)
    np.testing.assert_array_equal(segments, batched)
    np.testing.assert_array_equal(hashing.support_counts(segments, 16),
                                  _naive(seeds, buckets, prefixes, prefix_bits, eta, 16))


@pytest.mark.parametrize("block,n", [(1, 5), (7, 100), (64, 64), (64, 65), (4096, 1)])
def test_segment_blocks_sum_to_one_block(block, n, monkeypatch):
    """Ragged blocks of reports (one report a block, a last block of one) give the counts
    of one block."""
    seeds, buckets, rng = _reports(n, 32, block + n)
    prefixes = _prefixes(rng, 9, 70)
    monkeypatch.setattr(counting, "segments_pay", lambda *args: True)
    whole = counting.prefix_scatter(seeds, buckets, prefixes, 15, 6, 32)
    monkeypatch.setattr(counting, "_MIN_BLOCK", block)
    monkeypatch.setattr(counting, "_LANE_FILL", 0)
    np.testing.assert_array_equal(counting.prefix_scatter(seeds, buckets, prefixes, 15, 6, 32),
                                  whole)
    np.testing.assert_array_equal(hashing.support_counts(whole, 32),
                                  _naive(seeds, buckets, prefixes, 15, 6, 32))


@pytest.mark.parametrize("same_seed,eta,n,lane", [(False, 10, 300, 8), (True, 10, 300, 16),
                                                  (True, 10, 3000, 16), (True, 1, 40_000, 32)])
def test_segment_lanes_widen_with_the_longest_segment(same_seed, eta, n, lane, monkeypatch):
    """One seed for every report puts each subset's entries in one segment of n: lanes of
    8 bits while every segment is shorter than 256, then 16 and 32 bits; exact counts."""
    seeds, buckets, rng = _reports(n, 8, n + eta)
    if same_seed:
        seeds[:] = seeds[0]
    prefixes = _prefixes(rng, 5, 20)
    monkeypatch.setattr(counting, "_MIN_BLOCK", n)
    chosen = []
    real = counting._lane_bits
    monkeypatch.setattr(counting, "_lane_bits", lambda longest: chosen.append(real(longest))
                        or chosen[-1])
    batched, segments = _both(seeds, buckets, prefixes, 5 + eta, eta, 8, monkeypatch)
    assert set(chosen) == {lane}
    np.testing.assert_array_equal(segments, batched)
    np.testing.assert_array_equal(hashing.support_counts(segments, 8),
                                  _naive(seeds, buckets, prefixes, 5 + eta, eta, 8))


def test_lane_bits_hold_the_longest_segment():
    assert [counting._lane_bits(x) for x in (0, 255, 256, 65535, 65536, 2**32 - 1)] == [
        8, 8, 16, 16, 32, 32]
    with pytest.raises(ValueError, match="segment"):
        counting._lane_bits(2**32)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("count,most_sums,split", [(200, 1 << 22, "groups"),
                                                   (40, 1 << 22, "blocks"),
                                                   (40, 0, "groups")])
def test_segments_counted_in_threads_equal_one_thread(threads, count, most_sums, split,
                                                      monkeypatch):
    """Runs of 64-prefix groups, or with fewer groups than threads runs of blocks (each
    thread's own rows added at the end; not when those rows would exceed the bound), split
    over threads, give the counts of one thread."""
    from ldpflow.core import parallel

    seeds, buckets, rng = _reports(150, 8, threads + count)
    prefixes = _prefixes(rng, 12, count)[:count]
    monkeypatch.setattr(counting, "segments_pay", lambda *args: True)
    monkeypatch.setattr(counting, "_MIN_BLOCK", 16)
    monkeypatch.setattr(counting, "_LANE_FILL", 0)
    monkeypatch.setattr(counting, "_MAX_BLOCK_SUMS", most_sums)
    one = _one_thread_then(threads, lambda: counting.prefix_scatter(
        seeds, buckets, prefixes, 22, 10, 8), monkeypatch)
    runs = []
    real = parallel.map_items
    monkeypatch.setattr(parallel, "map_items", lambda f, items, work: runs.append(
        (f.__name__, len(items))) or real(f, items, work))
    np.testing.assert_array_equal(counting.prefix_scatter(seeds, buckets, prefixes, 22, 10, 8),
                                  one)
    want_split = "groups" if threads == 1 else split
    assert runs == [("run_" + want_split, -(-count // 64) if want_split == "groups" else 10)]
    np.testing.assert_array_equal(hashing.support_counts(one, 8),
                                  _naive(seeds, buckets, prefixes, 22, 10, 8))


def test_segments_are_chosen_for_wide_suffixes_and_several_batches():
    """The PEM job's passes (128 or 64 prefixes extended by 14 bits) take the segment
    method; TreeHist's 8-bit steps, one batch of prefixes and suffixes too wide for the
    sort keys keep the batched scatter."""
    assert counting.segments_pay(128, 14, 4) and counting.segments_pay(64, 10, 11)
    assert not counting.segments_pay(94, 8, 13)
    assert not counting.segments_pay(4, 14, 4)
    assert not counting.segments_pay(100, 64 - counting._POSITION_BITS + 1, 1)
