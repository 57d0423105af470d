"""Post-processing benchmark: wall time of every consistency method on one estimate.

    python benchmarks/postprocess.py [--domain_size 100000] [--power_domain_size 10000]
                                     [--users 1000000] [--epsilon 1.0] [--repeat 7]

The estimate is a real OLH estimate of ``--users`` values drawn from Zipf(1.1) over the
domain (seeded). Every method except Power/PowerNS runs at ``--domain_size`` (issue target:
<= 50 ms at d = 10^5); Power and PowerNS run at ``--power_domain_size`` (target: <= 1 s at
d = 10^4). One JSON object per method on stdout with keys method, d, n, epsilon, oracle,
best_ms, median_ms, limit_ms and within_limit; times are over ``--repeat`` calls of
``ldpflow.core.postprocess.postprocess`` (validation included) on one core.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from ldpflow.core.oracles import registry
from ldpflow.core.postprocess import METHODS, postprocess

SLOW = ("power", "power-ns")
LIMIT_MS = {"fast": 50.0, "slow": 1000.0}


def zipf_estimate(d: int, n: int, epsilon: float, seed: int):
    rng = np.random.default_rng(seed)
    weights = np.arange(1, d + 1, dtype=float) ** -1.1
    values = rng.choice(d, size=n, p=weights / weights.sum())
    oracle = registry.make("olh", epsilon=epsilon, domain_size=d)
    return oracle.estimate(oracle.aggregate(oracle.perturb(values, rng=rng)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--domain_size", type=int, default=100_000)
    parser.add_argument("--power_domain_size", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--seed", type=int, default=20200223)
    parser.add_argument("--methods", default=",".join(METHODS))
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be >= 1, got {args.repeat}")
    estimates = {
        d: zipf_estimate(d, args.users, args.epsilon, args.seed)
        for d in {args.domain_size, args.power_domain_size}
    }
    for method in args.methods.split(","):
        slow = method in SLOW
        est = estimates[args.power_domain_size if slow else args.domain_size]
        postprocess(est, method)  # warm-up: first-call allocation and imports
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            postprocess(est, method)
            times.append((time.perf_counter() - start) * 1e3)
        limit = LIMIT_MS["slow" if slow else "fast"]
        print(json.dumps({
            "method": method, "d": est.domain_size, "n": est.n, "epsilon": args.epsilon,
            "oracle": est.oracle, "best_ms": round(min(times), 3),
            "median_ms": round(statistics.median(times), 3), "limit_ms": limit,
            "within_limit": statistics.median(times) <= limit,
        }), flush=True)


if __name__ == "__main__":
    main()
