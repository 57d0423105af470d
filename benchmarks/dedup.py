"""Deduplication benchmark: the keyed id hash against the public one, and the exact step.

    python benchmarks/dedup.py [--ids 1000000] [--repeated 0.01]
    python benchmarks/dedup.py --input DIR [--spill DIR]

Times, on ``--ids`` UUID-like report ids (36 bytes): the public hash (``ldpflow-idhash-1``),
the keyed hash (SipHash-1-3, what every dedup path uses), packing the full ids
(:func:`ldpflow.core.dedup.packed_ids`), and :func:`first_copies` with and without the full
ids when a fraction ``--repeated`` of the rows are copies. Best of three runs; one JSON
object on stdout.

With ``--input DIR`` (Parquet reports, e.g. ``ldpflow simulate --format parquet``), the
breakdown of what the local engine's dedup adds to a ``--dedup none`` job instead, summed
over the row groups of every file, in one thread: CPU seconds (``process_time``) and wall
seconds of reading the payload columns (what ``--dedup none`` reads), reading the
``report_id`` column, its UTF-8 check, the keyed hash, the split by id-hash bucket
(``plan.steps.bucket_parts``), the spill of the hashes to disk (``plan.steps.spill_ids``),
the per-bucket resolution (``plan.steps.repeated_ids``), and the public hash of the user
ids that a contribution cap adds.
"""

from __future__ import annotations

import argparse
import json
import os
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


PAYLOAD = ["oracle", "epsilon", "domain_size", "hash_range", "seed", "bucket"]


def breakdown(folder: str, spill_root: str | None) -> dict:
    """The dedup's parts on the Parquet reports in ``folder`` (see the module notes)."""
    import glob
    import shutil
    import tempfile

    import pyarrow.parquet as pq

    from ldpflow.plan import steps
    from ldpflow.wire.buffers import offsets_and_data

    files = sorted(glob.glob(os.path.join(folder, "reports-*")))
    if not files:
        raise SystemExit(f"no reports-* files in {folder}")
    cpu: dict[str, float] = {}
    wall: dict[str, float] = {}

    class timed:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            self.cpu, self.wall = time.process_time(), time.perf_counter()

        def __exit__(self, *exc):
            cpu[self.name] = cpu.get(self.name, 0.0) + time.process_time() - self.cpu
            wall[self.name] = wall.get(self.name, 0.0) + time.perf_counter() - self.wall

    key = dedup.new_id_key()
    spill = tempfile.mkdtemp(prefix="dedup-bench-", dir=spill_root)
    pieces = []
    n = 0
    try:
        for f, path in enumerate(files):
            parquet = pq.ParquetFile(path)
            for group in range(parquet.metadata.num_row_groups):
                index = 1000 * f + group
                with timed("read_payload"):
                    parquet.read_row_group(group, columns=PAYLOAD, use_threads=False)
                with timed("read_report_id"):
                    ids = parquet.read_row_group(group, columns=["report_id"],
                                                 use_threads=False).column(0).combine_chunks()
                n += len(ids)
                with timed("check_utf8"):
                    ids.validate(full=True)
                with timed("keyed_hash"):
                    hashes = dedup.string_hashes(*offsets_and_data(ids), key)
                with timed("sort_and_spill"):  # one sorted run, cut at the bucket edges
                    pieces.extend((index, b, piece) for b, piece
                                  in steps.spill_ids(spill, index, ("olh",), [hashes]))
                with timed("user_hash"):
                    users = parquet.read_row_group(group, columns=["user_id"],
                                                   use_threads=False).column(0).combine_chunks()
                    dedup.string_hashes(*offsets_and_data(users))
        with timed("resolve_buckets"):
            for b in range(1 << steps.ID_BUCKET_BITS):
                steps.repeated_ids([(("olh",), bb, r, piece) for r, bb, piece in pieces
                                    if bb == b])
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    dedup_parts = ("read_report_id", "check_utf8", "keyed_hash", "sort_and_spill",
                   "resolve_buckets")
    return {"input": folder, "reports": n, "files": len(files),
            "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
            "wall_s": {k: round(v, 3) for k, v in wall.items()},
            "keyed_hash_ns_per_id": round(1e9 * cpu["keyed_hash"] / n, 1),
            "dedup_cpu_s": round(sum(cpu[k] for k in dedup_parts), 3),
            "load": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=1_000_000)
    parser.add_argument("--repeated", type=float, default=0.01)
    parser.add_argument("--input", default=None,
                        help="a folder of Parquet reports: the breakdown of the dedup instead")
    parser.add_argument("--spill", default=None, help="where --input's spill goes (a temp "
                                                      "folder by default)")
    args = parser.parse_args()
    if args.input:
        print(json.dumps(breakdown(args.input, args.spill), sort_keys=True))
        return
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
