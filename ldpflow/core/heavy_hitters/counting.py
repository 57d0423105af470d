"""Exact OLH support counts of candidate sets: the one signed scatter of the package.

Local hashing's hash (``ldpflow.core.hashing``) is affine over GF(2):
``H_s(v) = M_s v XOR a``. For the candidates "prefix ``c`` x all ``2**eta`` suffixes" at
prefix length ``l``, ``H_s(c 2**eta + t) = M_lo t XOR (M_hi c XOR a)``, so the support counts
of one prefix's candidates are a signed scatter of the reports (``n g`` entries into a vector
of length ``2**eta``) followed by one Walsh-Hadamard transform. :func:`prefix_scatter`
batches ``d`` prefixes into one scatter: the reports' hash rows for the prefix bits are
projected onto the ``d`` prefixes (bit ``j`` of the projection of row ``r`` is
``parity(r & (c_j << eta))``, all prefixes at once by byte tables), giving a hash on
``d + eta`` bits whose value at ``(e_j, t)`` equals ``H_s(c_j 2**eta + t)``; the sign of
each entry is XORed into the ``d`` projected bits, so one scatter of ``n (g - 1)`` entries
into ``2**(d + eta)`` counters, a signed sum over each projected bit and one ``2**eta``
transform per prefix give the same exact counts as ``d`` separate scatters. Batches are
counted in threads (:func:`ldpflow.core.parallel.map_items`, ``LDPFLOW_THREADS``). A full
domain (:func:`full_domain_support`) is the case of the single empty prefix.

With wide suffixes (``eta >= 10``, as PEM's passes) and more prefixes than one batch, the
same vectors come cheaper from the entries sorted by suffix index (:func:`_segment_scatter`):
one sort of a block's entries, then per 64 prefixes a gather of their projection words and
segment sums of their bits as lanes of one word, sequential passes instead of one random
scatter per batch of ``d`` (:func:`segments_pay` chooses; measured in
``benchmarks/counting.py --method``).

Small candidate sets are counted by evaluating the hash (:func:`hashed_support`,
``n |C|`` evaluations); the naive users x candidates grid
(:func:`ldpflow.core.hashing.naive_support_counts`) is the tests' oracle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ldpflow.core import hashing, parallel

__all__ = [
    "prefix_scatter",
    "full_domain_support",
    "hashed_support",
    "candidate_support",
    "support_matrix",
    "scatter_cost",
    "batch_size",
]

_U64 = np.uint64
# Entries of the (2**b x reports) index matrix built per scatter chunk.
_SCATTER_ENTRIES = 1 << 22
# The widest projected index space (prefix batch bits + suffix bits) one scatter may use.
MAX_BATCH_INDEX_BITS = 21
# Entries of the (users x candidates) hash grid evaluated at once.
_GRID_ENTRIES = 1 << 23


def _subset_counts(index_rows: np.ndarray, index_bits: int,
                   work: np.ndarray | None = None) -> np.ndarray:
    """The counts ``C`` (length ``2**index_bits``) of the XORs of every subset of each report's
    rows.

    ``index_rows`` has shape ``(b, n)`` (int64): row ``j`` holds each report's row ``j``, an
    index below ``2**index_bits``. For each report and each subset ``u`` of its ``b`` rows,
    the XOR of the rows in ``u`` is counted once: the empty subset's ``n`` zeros directly,
    the others by one ``bincount`` of ``n (2**b - 1)`` entries (in chunks of about
    :data:`_SCATTER_ENTRIES`, or of the counters' number when larger: each chunk's
    ``bincount`` allocates and fills all of them). The rows are built so that the sign of
    an entry is carried by index bits (:func:`prefix_scatter`), so the counts are
    unsigned. ``work``, if given, is
    the ``(2**b - 1, m)`` intp array the subsets are written to (reused across calls: a
    fresh one costs page faults); chunks are then of ``m`` reports.
    """
    b, n = index_rows.shape
    size = 1 << index_bits
    if work is None:  # chunks up to the counters' size: a chunk more costs a bincount of them
        entries = max(_SCATTER_ENTRIES, size)
        work = np.empty(((1 << b) - 1, min(n, max(1, entries >> b))), dtype=np.intp)
    chunk = work.shape[1]
    if n <= chunk:  # one chunk: bincount's output is the total (no second pass over it)
        w = work[:, :n]
        _subset_xors(index_rows, w)
        total = np.bincount(w.reshape(-1), minlength=size)
    else:
        total = np.zeros(size, dtype=np.int64)
        for start in range(0, n, chunk):
            rows = index_rows[:, start : start + chunk]
            w = work[:, : rows.shape[1]]
            _subset_xors(rows, w)
            total += np.bincount(w.reshape(-1), minlength=size)
    total[0] += n  # the empty subsets
    return total


def _subset_xors(rows: np.ndarray, out: np.ndarray) -> None:
    """``out[u - 1] = XOR of rows[j] for j in u`` for every non-empty subset ``u`` (by
    doubling, along contiguous runs of reports)."""
    for j in range(rows.shape[0]):
        out[(1 << j) - 1] = rows[j]
        np.bitwise_xor(out[: (1 << j) - 1], rows[j][None, :], out=out[1 << j : (2 << j) - 1])


def _unit_rows(counts: np.ndarray, d: int, eta: int) -> np.ndarray:
    """``F_l[w] = sum_z C[z, w] (-1)**z_l`` for each of the top ``d`` index bits ``l``.

    ``= total[w] - 2 * (sum of C[z, w] over z with bit l)``; the bits are folded away one by
    one from the top (each sum over half of what is left), so the cost is about two passes
    over ``C``.
    """
    C = counts.reshape(1 << d, 1 << eta)
    out = np.empty((d, 1 << eta), dtype=np.int64)
    for bit in range(d - 1, -1, -1):
        half = C.shape[0] >> 1
        ones = C[half:].sum(axis=0)
        C = C[:half] + C[half:]
        out[bit] = ones
    # C is now the total per suffix index
    out *= -2
    out += C[0]
    return out


def _byte_indices(high: np.ndarray, width: int) -> list[np.ndarray]:
    """The bytes of ``high`` (values of ``width`` bits), low first, as table indices (uint8:
    one byte of memory per row entry and byte)."""
    return [((high >> _U64(8 * q)) & _U64(255)).astype(np.uint8)
            for q in range(max(1, -(-width // 8)))]


def _projection_word(byte_index: list[np.ndarray], prefixes: np.ndarray,
                     tables: list[np.ndarray] | None = None) -> np.ndarray:
    """``parity(high & c_j)`` in bit ``j`` (uint64, the shape of ``high``) for up to 64
    prefixes ``c_j``, from the bytes of ``high`` (:func:`_byte_indices`).

    All prefixes at once by byte tables (the Four Russians method): the parity of
    ``high & c`` is the XOR over the bytes of ``high`` of the parity of that byte with
    ``c``'s byte, so one table of 256 words per byte position and one lookup per byte
    replace one pass per prefix. ``tables``: those of ``prefixes``
    (:func:`_projection_tables`), when made once for several calls.
    """
    if tables is None:
        tables = _projection_tables(prefixes, len(byte_index))
    word = np.zeros(byte_index[0].shape, dtype=_U64)
    for index, table in zip(byte_index, tables, strict=True):
        word ^= np.take(table, index)
    return word


def _projection_tables(prefixes: np.ndarray, positions: int) -> list[np.ndarray]:
    """For each of ``positions`` byte positions, the 256 words whose bit ``j`` is the parity
    of that byte value with ``prefixes[j]``'s byte there (:func:`_projection_word`)."""
    values = np.arange(256, dtype=_U64)
    shifts = np.arange(prefixes.size, dtype=_U64)
    tables = []
    for q in range(positions):
        cbytes = (prefixes >> _U64(8 * q)) & _U64(255)
        parity = (np.bitwise_count(values[:, None] & cbytes[None, :]) & np.uint8(1)).astype(_U64)
        tables.append(np.bitwise_or.reduce(parity << shifts[None, :], axis=1))
    return tables


def scatter_cost(num_prefixes: int, n: int, hash_bits: int, eta: int, d: int) -> float:
    """The cost model of counting ``num_prefixes`` prefixes in batches of ``d``.

    Per batch: ``n 2**b`` scatter entries (about three passes each), plus about ``d + 12``
    passes over the ``2**(d + eta)`` projected counters; calibrated on ``n 2**b = 2**24``,
    ``eta = 15``. In units of one pass over one entry. The configuration's cost model
    (:func:`ldpflow.core.heavy_hitters.config.pass_costs`) is built on it, so it is kept as
    it was when the sign moved into the projected bits (which halved the counters): measured
    again on the heavy-hitter job's shapes, the cost is flat around its ``d`` (4 to 6
    within 10 % at 62,500 reports, ``eta = 14``).
    """
    batches = -(-num_prefixes // d)
    return batches * (3.0 * (n << hash_bits) + (d + 12) * float(1 << (d + eta)))


def batch_size(num_prefixes: int, n: int, hash_bits: int, eta: int) -> int:
    """How many prefixes share one scatter: the ``d`` of least :func:`scatter_cost`."""
    best, best_cost = 1, math.inf
    for d in range(1, num_prefixes + 1):
        if d + eta > max(MAX_BATCH_INDEX_BITS, eta + 1):
            break
        cost = scatter_cost(num_prefixes, n, hash_bits, eta, d)
        if cost < best_cost:
            best, best_cost = d, cost
    return best


def prefix_scatter(seeds: np.ndarray, buckets: np.ndarray, prefixes: np.ndarray,
                   prefix_bits: int, eta: int, hash_range: int) -> np.ndarray:
    """The scatter vectors ``F_j`` (shape ``(len(prefixes), 2**eta)``) of a batch of reports.

    ``fwht(F_j) / g`` is the support count of every extension of ``prefixes[j]`` (of
    ``prefix_bits - eta`` bits) by ``eta`` bits; pass ``prefixes = [0]`` and
    ``eta = prefix_bits`` for a full domain.

    Notes
    -----
    The sign of an entry, ``parity(u & (y ^ a))``, is XORed into each of the ``d``
    projected bits rather than kept in a bit of its own: bit ``l`` of the XOR over a subset
    ``u`` is then ``parity(u & (y ^ a ^ M_hi c_l))``, the sign of that entry in prefix
    ``l``'s own scatter, so ``d`` projected bits index ``2**(d + eta)`` counters (half of
    a separate sign bit's). A full domain is the case ``d = 1`` with the empty prefix.
    """
    b = hash_range.bit_length() - 1
    out = np.zeros((prefixes.size, 1 << eta), dtype=np.int64)
    if seeds.size == 0 or prefixes.size == 0:
        return out
    rows, offsets = hashing.hash_rows(seeds, prefix_bits, b)
    rows = np.ascontiguousarray(rows.T)  # (b, n): long contiguous runs per hash row
    targets = buckets.astype(np.int64) ^ offsets.astype(np.int64)
    low = (rows & _U64((1 << eta) - 1)).astype(np.int64)
    # sign[j] = bit j of y ^ a: the XOR over a subset u of rows carries parity(u & (y ^ a))
    sign = (targets[None, :] >> np.arange(b)[:, None]) & 1
    if prefix_bits == eta:
        sign <<= eta
        sign |= low
        counts = _subset_counts(sign, eta + 1)
        out[0] = counts[: 1 << eta] - counts[1 << eta :]
        return out
    batch = batch_size(prefixes.size, seeds.size, b, eta)
    per = 64 // batch * batch  # prefixes per projection word: whole batches only
    sign = -sign  # all ones where the sign bit is set
    rows >>= _U64(eta)
    byte_index = _byte_indices(rows, prefix_bits - eta)
    del rows
    prefixes = np.asarray(prefixes, dtype=_U64)
    if segments_pay(prefixes.size, eta, batch):
        _segment_scatter(low, sign, byte_index, prefixes, eta, out)
        return out
    batches = [(first, min(batch, prefixes.size - first))
               for first in range(0, prefixes.size, batch)]

    def count(run: Sequence[tuple[int, int]]) -> None:
        index = np.empty(low.shape, dtype=np.int64)
        work = np.empty(((1 << b) - 1, min(seeds.size, max(1, _SCATTER_ENTRIES >> b))),
                        dtype=np.intp)
        group, word = -1, index  # the projection word of the batches' group, made when met
        for first, d in run:
            if first // per != group:  # memory: one word per thread, whatever the prefixes
                group = first // per
                word = _projection_word(byte_index, prefixes[group * per : (group + 1) * per]
                                        ).view(np.int64)
            np.right_shift(word, first % per, out=index)
            index ^= sign
            index &= (1 << d) - 1
            index <<= eta
            index |= low
            out[first : first + d] = _unit_rows(_subset_counts(index, d + eta, work), d, eta)

    # batches write disjoint rows of out: in threads when there is enough of them
    parallel.map_items(count, batches, len(batches) * (seeds.size << b))
    return out


# Sort keys of the segment method: a subset XOR's suffix index above its entry's position.
_POSITION_BITS = 22
# The least reports a block of the segment method holds (fewer: per-call overhead).
# Threads split a pass's blocks (each summing into rows of its own) only while the rows are at
# most this many entries (32 MiB); else they split its 64-prefix groups.
_MAX_BLOCK_SUMS = 1 << 22
_MIN_BLOCK = 4096
# Entries a suffix index gets on average in a block (8-bit lanes hold up to 255).
_LANE_FILL = 96


def segments_pay(num_prefixes: int, eta: int, batch: int) -> bool:
    """Whether :func:`_segment_scatter` counts these prefixes for less than the batched
    scatter (:func:`_subset_counts` per batch of ``batch``).

    The batched scatter makes ``num_prefixes / batch`` random-access passes over the
    entries into ``2**(batch + eta)`` counters (about 2 ns an entry at ``2**18``); the
    segment method one sort of the entries and, per 64 prefixes, one gather and about 24
    sequential passes (8 lanes' shift, mask and segment sum, about 0.3 ns each). Measured
    (``benchmarks/counting.py --method``, one thread): the segment method is about as fast
    at ``eta = 10`` (batches of up to 11 prefixes) and 1.3 to 1.8 times faster on the PEM
    job's shapes (``eta = 12`` to ``15``, 64 or 128 prefixes); at ``eta = 8`` (TreeHist)
    the batched scatter's counters are few and cache-resident and it batches 13 prefixes,
    and it stays faster.
    """
    return num_prefixes > batch and 10 <= eta <= 64 - _POSITION_BITS


def _lane_bits(longest: int) -> int:
    """The narrowest lane (8, 16 or 32 bits) whose sums of one bit over a segment of
    ``longest`` entries cannot carry into the next lane."""
    for bits in (8, 16, 32):
        if longest < 1 << bits:
            return bits
    raise ValueError(f"a segment of {longest} entries is too long for 32-bit lanes")


def _segment_scatter(low: np.ndarray, sign: np.ndarray, byte_index: list[np.ndarray],
                     prefixes: np.ndarray, eta: int, out: np.ndarray) -> None:
    """:func:`prefix_scatter`'s vectors ``F_j`` by sorting the entries by suffix index.

    ``F_j[w] = N_w - 2 O_j[w]`` (plus ``n`` at ``w = 0``, the empty subsets), where ``N_w``
    counts the non-empty subset XORs ``e`` whose suffix bits are ``w`` and ``O_j[w]`` those
    of them whose projected bit ``j`` (sign included) is set. A block of reports' ``(2**b -
    1) n`` entries is sorted once by suffix index (sort keys: the index above the entry's
    position), so that each ``w`` is one segment; for each 64 prefixes the entries'
    projection words are gathered into that order and ``O_j`` is a segment sum of bit
    ``j``: eight bits at a time, as lanes of 8 bits of one word (the word shifted by ``s``
    and masked to bits ``s, s + 8, ...``; a lane sums at most its segment's length, which
    chooses 8-, 16- or 32-bit lanes per block, :func:`_lane_bits`). Exact integers
    throughout; the same vectors as the batched scatter (tests). ``low``: the suffix rows
    ``(b, n)`` (int64); ``sign``: all ones where a row's sign bit is set (int64);
    ``byte_index``: the prefix rows' bytes (:func:`_byte_indices`).

    Threads (:func:`ldpflow.core.parallel.map_items`) take runs of 64-prefix groups, each
    writing its own rows of ``out``; with fewer groups than threads, runs of blocks, each
    thread summing into rows of its own (one more ``(prefixes, 2**eta)`` array a thread,
    while that is at most :data:`_MAX_BLOCK_SUMS` entries) that are added at the end.
    """
    b, n = low.shape
    m = (1 << b) - 1
    block = max(1, min((1 << _POSITION_BITS) // m, max(_MIN_BLOCK, (_LANE_FILL << eta) // m)))
    block = -(-n // -(-n // block))  # blocks of about equal reports
    blocks = [(start, min(n, start + block)) for start in range(0, n, block)]
    groups = [(first, min(first + 64, prefixes.size)) for first in range(0, prefixes.size, 64)]
    low, sign = low.view(_U64), sign.view(_U64)
    edges = np.arange((1 << eta) + 1, dtype=_U64) << _U64(_POSITION_BITS)
    entries = m * min(block, n)
    # read by every thread, written by none: the entries' positions, each group's tables
    position = np.arange(entries, dtype=_U64)
    tables = {first: _projection_tables(prefixes[first:last], len(byte_index))
              for first, last in groups}

    def count(parts: Sequence[tuple[int, int]], run: Sequence[tuple[int, int]],
              ones: np.ndarray) -> np.ndarray:
        """Add ``O_j`` of the blocks ``parts`` to ``ones`` (the rows of the groups ``run``,
        from the first one's) and return their ``N_w``."""
        key = np.empty(entries, dtype=_U64)
        words = np.empty(entries, dtype=_U64)
        ordered = np.empty(entries, dtype=_U64)
        totals = np.zeros(1 << eta, dtype=np.int64)
        base = run[0][0]
        for start, stop in parts:
            width = stop - start
            e = m * width
            k = key[:e]
            _subset_xors(low[:, start:stop], k.reshape(m, width))
            k <<= _U64(_POSITION_BITS)
            k |= position[:e]
            k.sort()
            bounds = np.searchsorted(k, edges)
            k &= _U64((1 << _POSITION_BITS) - 1)
            order = k.view(np.int64)
            counts = np.diff(bounds)
            totals += counts
            filled = np.flatnonzero(counts)
            starts = bounds[filled]
            lane = _lane_bits(int(counts.max()))
            spread = _U64(sum(1 << (lane * q) for q in range(64 // lane)))
            index = [part[:, start:stop] for part in byte_index]
            got, t = ordered[:e], words[:e]  # the words, once gathered, hold the lanes
            for first, last in run:
                word = _projection_word(index, prefixes[first:last], tables[first])
                word ^= sign[:, start:stop]
                w = words[:e].reshape(m, width)
                _subset_xors(word, w)
                np.take(w.reshape(-1), order, out=got)
                sums = np.empty((lane, filled.size), dtype=_U64)
                for shift in range(min(lane, last - first)):
                    np.right_shift(got, _U64(shift), out=t)
                    t &= spread
                    np.add.reduceat(t, starts, out=sums[shift])
                for q in range(64 // lane):  # prefix first + lane q + s: lane q of sums[s]
                    lo = first + lane * q
                    if lo >= last:
                        break
                    hi = min(last, lo + lane)
                    part = (sums[: hi - lo] >> _U64(lane * q)) & _U64((1 << lane) - 1)
                    ones[lo - base : hi - base, filled] += part.astype(np.int64)
        return totals

    by_blocks = (len(groups) < parallel.threads() and len(blocks) > 1
                 and out.size <= _MAX_BLOCK_SUMS)
    found: list[tuple[np.ndarray, np.ndarray | None]] = []  # (N_w, a thread's own rows)

    def run_groups(run: Sequence[tuple[int, int]]) -> None:
        found.append((count(blocks, run, out[run[0][0]:]), None))

    def run_blocks(run: Sequence[tuple[int, int]]) -> None:
        own = out if run[0] == blocks[0] else np.zeros_like(out)
        found.append((count(run, groups, own), None if own is out else own))

    parallel.map_items(run_blocks if by_blocks else run_groups, blocks if by_blocks else groups,
                       len(groups) * (n << b))
    if by_blocks:
        totals = np.sum([t for t, _ in found], axis=0)
        for _, own in found:
            if own is not None:
                out += own
    else:
        totals = found[0][0]  # each run of groups counted every block
    totals[0] += n  # the empty subsets
    out *= -2
    out += totals


def full_domain_support(seeds: npt.ArrayLike, buckets: npt.ArrayLike, bits: int,
                        hash_range: int) -> np.ndarray:
    """Exact support counts of all ``2**bits`` values (one scatter + one transform)."""
    F = prefix_scatter(np.asarray(seeds, dtype=_U64), np.asarray(buckets), np.zeros(1, _U64),
                       bits, bits, hash_range)
    return hashing.support_counts(F, hash_range).reshape(-1)


def hashed_support(seeds: npt.ArrayLike, buckets: npt.ArrayLike, candidates: npt.ArrayLike,
                   value_bits: int, hash_range: int) -> np.ndarray:
    """``#{i : H_{s_i}(c) = y_i}`` for each candidate ``c`` (int64), chunked over users.

    The hash-evaluation method for small candidate sets (``n |C|`` hash evaluations).
    """
    seeds = np.asarray(seeds, dtype=_U64)
    buckets = np.asarray(buckets).astype(np.int64)
    cand = np.asarray(candidates, dtype=_U64).reshape(-1)
    out = np.zeros(cand.size, dtype=np.int64)
    if cand.size == 0 or seeds.size == 0:
        return out
    step = max(1, _GRID_ENTRIES // cand.size)
    for start in range(0, seeds.size, step):
        grid = hashing.hash_grid(seeds[start : start + step], cand, value_bits, hash_range)
        out += (grid == buckets[start : start + step, None]).sum(axis=0)
    return out


def support_matrix(seeds: np.ndarray, buckets: np.ndarray, candidates: np.ndarray, bits: int,
                   hash_range: int) -> np.ndarray:
    """The boolean ``(n, |C|)`` matrix "report ``i`` supports candidate ``c``"."""
    if candidates.size == 0:
        return np.zeros((seeds.size, 0), dtype=bool)
    grid = hashing.hash_grid(seeds, candidates, bits, hash_range)
    return grid == buckets.astype(np.int64)[:, None]


def candidate_support(seeds: npt.ArrayLike, buckets: npt.ArrayLike, candidates: npt.ArrayLike,
                      value_bits: int, hash_range: int, *, suffix_bits: int = 8,
                      max_hashed: int = 64) -> np.ndarray:
    """Exact support counts of an arbitrary candidate set (int64, in the given order).

    Up to ``max_hashed`` candidates are counted by hash evaluation (:func:`hashed_support`);
    more are grouped by their ``value_bits - suffix_bits``-bit prefixes and counted by
    :func:`prefix_scatter` (every extension of every prefix, then the candidates picked), so
    the cost is that of the scatter, not ``n |C|`` hash evaluations.
    """
    cand = np.asarray(candidates, dtype=_U64).reshape(-1)
    seeds = np.asarray(seeds, dtype=_U64)
    eta = min(suffix_bits, value_bits)
    if cand.size <= max_hashed or eta == value_bits:
        if eta == value_bits and cand.size > max_hashed:
            full = full_domain_support(seeds, buckets, value_bits, hash_range)
            return full[cand.astype(np.int64)]
        return hashed_support(seeds, buckets, cand, value_bits, hash_range)
    prefixes, inverse = np.unique(cand >> _U64(eta), return_inverse=True)
    F = prefix_scatter(seeds, np.asarray(buckets), prefixes, value_bits, eta, hash_range)
    support = hashing.support_counts(F, hash_range).reshape(prefixes.size, 1 << eta)
    return support[inverse.reshape(-1), (cand & _U64((1 << eta) - 1)).astype(np.int64)]
