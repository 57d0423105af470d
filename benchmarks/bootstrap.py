"""Bootstrap intervals benchmark: the cost of each method's intervals per key.

    python benchmarks/bootstrap.py [--users 200000] [--domain_sizes 1024,16384]
                                   [--oracle olh] [--epsilon 1.0]

For each domain size, ``--users`` Zipf(1.1) values are perturbed and aggregated (seeded),
and :func:`ldpflow.core.intervals.bootstrap_intervals` is timed once per method of
:data:`~ldpflow.core.intervals.BOOTSTRAP_METHODS` with the jobs' replicate count
(:func:`~ldpflow.core.intervals.default_replicates`), next to the method's own single call
(best of 5) and the raw normal intervals. It also reports the share of the true frequencies
inside each method's intervals (one run: a figure, not a coverage test; the tests measure
coverage). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import ldpflow
from ldpflow.core import intervals, postprocess
from ldpflow.core.simulation import parse_distribution


def _best(call, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=200_000)
    parser.add_argument("--domain_sizes", default="1024,16384")
    parser.add_argument("--oracle", default="olh")
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    rows = []
    for d in (int(x) for x in args.domain_sizes.split(",")):
        oracle = ldpflow.oracle(args.oracle, epsilon=args.epsilon, domain_size=d)
        rng = np.random.default_rng(1)
        values = parse_distribution("zipf:1.1").sample(d, args.users, rng)
        truth = np.bincount(values, minlength=d) / args.users
        est = oracle.estimate(oracle.aggregate(oracle.perturb(values, rng=rng)))
        raw = intervals.confidence_intervals(est)
        rows.append({"domain_size": d, "method": "base (normal)",
                     "ms": 1000 * _best(lambda est=est: intervals.confidence_intervals(est)),
                     "inside": float(np.mean((raw.low <= truth) & (truth <= raw.high)))})
        for method in intervals.BOOTSTRAP_METHODS:
            replicates = intervals.default_replicates(method, d)
            stats = {s: getattr(est, s) for s in postprocess.statistics_of(method)}
            one = _best(lambda m=method, st=stats, e=est: postprocess.postprocess(
                e.frequencies, m, **st))
            start = time.perf_counter()
            out = intervals.bootstrap_intervals(est, method, replicates=replicates)
            seconds = time.perf_counter() - start
            rows.append({"domain_size": d, "method": method, "replicates": replicates,
                         "ms": 1000 * seconds, "method_call_ms": 1000 * one,
                         "inside": float(np.mean((out.low <= truth) & (truth <= out.high)))})
    print(json.dumps({"oracle": args.oracle, "epsilon": args.epsilon, "users": args.users,
                      "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
