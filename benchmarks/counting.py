"""The exact OLH prefix counting of ``ldpflow.core.heavy_hitters.counting``, per shape: JSON.

    python benchmarks/counting.py [--n 62500] [--value_bits 36] [--hash_range 32]
        [--prefixes 128] [--eta 14] [--repeat 3] [--shapes pem|treehist|one]
        [--function prefix_scatter|candidate_support|support_counts]
        [--method auto|batched|segments]

One JSON line per shape: the median wall and CPU (user + system, this process) seconds of
``--repeat`` runs (and the least CPU seconds, the figure a loaded machine distorts least)
of the function on random reports (seeds, buckets) and random distinct prefixes, with the
machine's load average beside them, and an ``exact`` digest (SHA-256 of the int64 output)
so that two versions of the code can be compared for the same result.
``--shapes pem`` runs the shapes a 10^6-user PEM job (64-bit,
k = 32, epsilon = 4, 4 groups, chunks of about 62,500 reports) counts, logged from a real
``heavy-hitters --engine local`` run: pass 0 a full domain of 22 bits, pass 1 128 prefixes
of 22 bits extended by 14, passes 2 and 3 64 prefixes of 36 and 50 bits extended by 14;
``--shapes treehist`` those of TreeHist (about 28,000 reports a chunk, 8-bit steps, 36 to
94 prefixes); ``--shapes one`` (the default) the shape of the flags. ``support_counts``
times the transform the driver applies to a pass's summed counts
(``hashing.support_counts``) on the ``(prefixes, 2**eta)`` shape. ``--method`` forces
``prefix_scatter``'s way of counting (``batched``: one scatter per batch of prefixes;
``segments``: the entries sorted by suffix index) instead of its own choice
(``counting.segments_pay``), to compare the two on the same shapes (the ``exact``
digests agree).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import time

import numpy as np

from ldpflow.core import hashing
from ldpflow.core.heavy_hitters import counting

# (n, value bits, prefixes, eta); prefixes = 1 with eta = value bits is a full domain.
SHAPES = {
    "pem": [(62500, 22, 1, 22), (62500, 36, 128, 14), (62500, 50, 64, 14),
            (62500, 64, 64, 14)],
    "treehist": [(28000, 8, 1, 8), (28000, 16, 94, 8), (28000, 32, 59, 8),
                 (28000, 64, 42, 8)],
}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _inputs(n: int, value_bits: int, prefixes: int, eta: int, hash_range: int, seed: int):
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, 2**63, size=n, dtype=np.uint64)
    buckets = rng.integers(0, hash_range, size=n).astype(np.int64)
    if prefixes == 1 and eta == value_bits:
        chosen = np.zeros(1, dtype=np.uint64)
    else:
        span = 1 << min(value_bits - eta, 62)
        chosen = np.unique(rng.integers(0, span, size=prefixes * 2, dtype=np.uint64))
        chosen = rng.permutation(chosen)[:prefixes]
    return seeds, buckets, chosen


def _digest(out: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(out, dtype=np.int64).tobytes()).hexdigest()[:16]


def _method(call, full_domain: bool) -> str:
    """How ``prefix_scatter`` counted in ``call()``: seen from the call (a full domain is
    one scatter; else the sorted segments if it used them, the batched scatter if not)."""
    if full_domain:
        return "full_domain"
    used = []
    real = counting._segment_scatter

    def spy(*args):
        used.append(True)
        return real(*args)

    counting._segment_scatter = spy
    try:
        call()
    finally:
        counting._segment_scatter = real
    return "segments" if used else "batched"


def run_shape(function: str, n: int, value_bits: int, prefixes: int, eta: int,
              hash_range: int, repeat: int, seed: int) -> dict:
    seeds, buckets, chosen = _inputs(n, value_bits, prefixes, eta, hash_range, seed)
    if function == "prefix_scatter":
        def call():
            return counting.prefix_scatter(seeds, buckets, chosen, value_bits, eta, hash_range)
    elif function == "candidate_support":
        cand = (chosen[:, None] << np.uint64(eta)) | np.arange(1 << eta, dtype=np.uint64)
        cand = cand.reshape(-1)

        def call():
            return counting.candidate_support(seeds, buckets, cand, value_bits, hash_range,
                                              suffix_bits=eta)
    else:
        F = counting.prefix_scatter(seeds, buckets, chosen, value_bits, eta, hash_range)

        def call():
            return hashing.support_counts(F, hash_range)
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        cpu, wall = _cpu(), time.perf_counter()
        out = call()
        walls.append(time.perf_counter() - wall)
        cpus.append(_cpu() - cpu)
    return {
        "function": function, "n": n, "value_bits": value_bits, "prefixes": int(chosen.size),
        "eta": eta, "hash_range": hash_range, "repeat": repeat,
        "wall_seconds": round(statistics.median(walls), 4),
        "cpu_seconds": round(statistics.median(cpus), 4),
        "cpu_min_seconds": round(min(cpus), 4),
        "method": (_method(call, eta == value_bits) if function == "prefix_scatter"
                   else None),
        "exact": _digest(out), "threads": os.environ.get("LDPFLOW_THREADS"),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=62500)
    parser.add_argument("--value_bits", type=int, default=36)
    parser.add_argument("--hash_range", type=int, default=32)
    parser.add_argument("--prefixes", type=int, default=128)
    parser.add_argument("--eta", type=int, default=14)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--shapes", choices=("one", *SHAPES), default="one")
    parser.add_argument("--function", default="prefix_scatter",
                        choices=("prefix_scatter", "candidate_support", "support_counts"))
    parser.add_argument("--method", choices=("auto", "batched", "segments"), default="auto",
                        help="prefix_scatter's way of counting (default: its own choice)")
    args = parser.parse_args(argv)
    if args.method != "auto":
        forced = args.method == "segments"
        counting.segments_pay = lambda *_: forced
    shapes = (SHAPES[args.shapes] if args.shapes != "one"
              else [(args.n, args.value_bits, args.prefixes, args.eta)])
    totals = {"wall_seconds": 0.0, "cpu_seconds": 0.0, "cpu_min_seconds": 0.0}
    for n, bits, prefixes, eta in shapes:
        row = run_shape(args.function, n, bits, prefixes, eta, args.hash_range, args.repeat,
                        args.seed)
        totals["wall_seconds"] += row["wall_seconds"]
        totals["cpu_seconds"] += row["cpu_seconds"]
        totals["cpu_min_seconds"] += row["cpu_min_seconds"]
        print(json.dumps(row), flush=True)
    if len(shapes) > 1:
        print(json.dumps({"shapes": args.shapes, "function": args.function,
                          **{k: round(v, 4) for k, v in totals.items()},
                          "load_average": [round(x, 2) for x in os.getloadavg()]}), flush=True)


if __name__ == "__main__":
    main()
