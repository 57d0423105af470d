"""Independent reference implementations from the spec text, in plain Python integers.

The tests compare the vectorised code against these; nothing here is imported by ldpflow.
"""

from __future__ import annotations

import math
from itertools import combinations, product

MASK64 = 2**64 - 1

#: The registry keys the specs define, by family: the one list of names written by hand in
#: the tests (docs/spec/oracles.md: its table, and CMS and HCMS in their own section;
#: docs/spec/heavy_hitters.md; docs/longitudinal.md). A new protocol joins it with its spec.
ORACLE_KEYS = ("grr", "oue", "sue", "olh", "blh", "hr", "ss", "onebit", "cms", "hcms", "pgr")
HEAVY_HITTER_KEYS = ("pem", "spm", "mcm", "treehist", "sfp")
LONGITUDINAL_KEYS = ("rappor", "loloha")
ALL_KEYS = ORACLE_KEYS + HEAVY_HITTER_KEYS + LONGITUDINAL_KEYS


def splitmix64(state: int, count: int) -> list[int]:
    out = []
    z = state
    for _ in range(count):
        z = (z + 0x9E3779B97F4A7C15) & MASK64
        t = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        t = ((t ^ (t >> 27)) * 0x94D049BB133111EB) & MASK64
        out.append(t ^ (t >> 31))
    return out


def hash_value(seed: int, value: int, value_bits: int, hash_range: int) -> int:
    """H_s(v) exactly as docs/spec/oracles.md defines it."""
    b = hash_range.bit_length() - 1
    stream = splitmix64(seed, b + 1)
    mask = (1 << value_bits) - 1
    rows = [r & mask for r in stream[:b]]
    a = stream[b] & (hash_range - 1)
    h = a
    for j, r in enumerate(rows):
        h ^= (bin(r & value).count("1") & 1) << j
    return h


def mix64(z: int) -> int:
    """SplitMix64's finaliser."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def keyed_string_hash(data: bytes, key: int) -> int:
    """S_K of docs/spec/heavy_hitters.md ("Group hash"), byte by byte."""
    h = mix64(key ^ len(data))
    for start in range(0, len(data), 8):
        word = int.from_bytes(data[start:start + 8], "little")  # the last one zero-padded
        h = (mix64(h ^ mix64((word + key) & MASK64)) * 0xFF51AFD7ED558CCD) & MASK64
    return mix64(h)


def sketch_bucket(j: int, value: int, value_bits: int, width: int) -> int:
    """h_j(v) of Apple's sketches: the hash family with seed mix(GOLDEN * (j + 1))."""
    return hash_value(mix64((0x9E3779B97F4A7C15 * (j + 1)) & MASK64), value, value_bits, width)


def hadamard(i: int, j: int) -> int:
    return -1 if bin(i & j).count("1") % 2 else 1


def output_distribution(oracle, value: int, seeds: list[int] | None = None) -> dict:
    """Exact Pr[report | value] from the spec, as {report key: probability}."""
    e = math.exp(oracle.epsilon)
    d = oracle.domain_size
    name = oracle.name
    if name == "grr":
        return {y: (e if y == value else 1.0) / (e + d - 1) for y in range(d)}
    if name in ("oue", "sue"):
        p, q = oracle.p, oracle.q
        dist = {}
        for bits in product((0, 1), repeat=d):
            prob = 1.0
            for u, bit in enumerate(bits):
                one = p if u == value else q
                prob *= one if bit else 1 - one
            dist[bits] = prob
        return dist
    if name in ("olh", "blh"):
        g = oracle.hash_range
        L = max(1, (d - 1).bit_length())
        dist = {}
        for s in seeds:
            h = hash_value(s, value, L, g)
            for y in range(g):
                dist[(s, y)] = (e if y == h else 1.0) / (e + g - 1) / len(seeds)
        return dist
    if name == "hr":
        K = 1 << d.bit_length()
        return {
            y: (e if hadamard(value + 1, y) == 1 else 1.0) * 2 / (K * (e + 1)) for y in range(K)
        }
    if name == "ss":
        w = max(1, math.floor(d / (e + 1) + 0.5))
        p = w * e / (w * e + d - w)
        dist = {}
        for subset in combinations(range(d), w):
            if value in subset:
                dist[subset] = p / math.comb(d - 1, w - 1)
            else:
                dist[subset] = (1 - p) / math.comb(d - 1, w)
        return dist
    if name == "onebit":
        K = 1 << d.bit_length()
        dist = {}
        for column in range(K):  # column uniform: users spread evenly over the K columns
            one = e / (e + 1) if hadamard(value, column) == 1 else 1 / (e + 1)
            dist[(column, 1)] = one / K
            dist[(column, 0)] = (1 - one) / K
        return dist
    if name == "cms":  # j uniform; bit h_j(v) 1, the others 0, each flipped w.p. 1/(e^(eps/2)+1)
        m, k, L = oracle.hash_range, oracle.num_hashes, max(1, (d - 1).bit_length())
        flip = 1 / (math.exp(oracle.epsilon / 2) + 1)
        dist = {}
        for j in range(k):
            h = sketch_bucket(j, value, L, m)
            for bits in product((0, 1), repeat=m):
                prob = 1 / k
                for index, bit in enumerate(bits):
                    one = 1 - flip if index == h else flip
                    prob *= one if bit else 1 - one
                dist[(j, bits)] = prob
        return dist
    if name == "hcms":  # j, l uniform; the sign H_m[h_j(v), l] kept w.p. e/(e+1)
        m, k, L = oracle.hash_range, oracle.num_hashes, max(1, (d - 1).bit_length())
        dist = {}
        for j in range(k):
            h = sketch_bucket(j, value, L, m)
            for col in range(m):
                for bit in (0, 1):
                    kept = (bit == 1) == (hadamard(h, col) == 1)
                    dist[(j, col, bit)] = (e if kept else 1.0) / (e + 1) / (k * m)
        return dist
    if name == "pgr":  # hyperplanes of P^{t-1}(F_q); weight e on those through v's point
        q, t = oracle.geometry
        vectors = [x for x in product(range(q), repeat=t) if next((c for c in x if c), 0) == 1]
        vectors.sort(key=lambda x: sum(c * q ** (t - 1 - i) for i, c in enumerate(x)))
        point = vectors[value]
        weights = [e if sum(a * b for a, b in zip(u, point, strict=True)) % q == 0 else 1.0
                   for u in vectors]
        return {y: w / sum(weights) for y, w in enumerate(weights)}
    raise KeyError(name)
