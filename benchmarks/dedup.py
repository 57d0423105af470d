"""Deduplication benchmark: the keyed id hash against the public one, and the exact step.

    python benchmarks/dedup.py [--ids 1000000] [--repeated 0.01]

Times, on ``--ids`` UUID-like report ids (36 bytes): the public hash (``ldpflow-idhash-1``),
the keyed hash (SipHash-1-3, what every dedup path uses), packing the full ids
(:func:`ldpflow.core.dedup.packed_ids`), and :func:`first_copies` with and without the full
ids when a fraction ``--repeated`` of the rows are copies. Best of three runs; one JSON
object on stdout.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

import numpy as np

from ldpflow.core import dedup


def best(fn, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=1_000_000)
    parser.add_argument("--repeated", type=float, default=0.01)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    distinct = [str(uuid.UUID(int=int(v))) for v in rng.integers(0, 2**62, args.ids)]
    copies = rng.integers(0, args.ids, int(args.ids * args.repeated))
    ids = distinct + [distinct[i] for i in copies.tolist()]
    encoded = [i.encode() for i in ids]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    key = dedup.new_id_key()
    hashes = dedup.string_hashes(offsets, data, key)
    packed = dedup.packed_ids(offsets, data)
    keep, _ = dedup.first_copies(hashes, (), packed)
    result = {
        "ids": len(ids),
        "repeated_fraction": args.repeated,
        "public_hash_s": round(best(lambda: dedup.string_hashes(offsets, data)), 4),
        "keyed_hash_s": round(best(lambda: dedup.string_hashes(offsets, data, key)), 4),
        "packed_ids_s": round(best(lambda: dedup.packed_ids(offsets, data)), 4),
        "first_copies_hashes_only_s": round(best(lambda: dedup.first_copies(hashes)), 4),
        "first_copies_with_ids_s": round(best(lambda: dedup.first_copies(hashes, (), packed)),
                                         4),
        "kept": int(keep.sum()),
        "distinct": len(set(ids)),
    }
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
