"""Oracle benchmark: perturb and aggregate+estimate time, empirical vs analytic MSE.

    python benchmarks/oracles.py [--users 1000000] [--domain_size 1024] [--epsilon 1.0]

n values drawn from Zipf(1.1) over d values; one JSON object per oracle on stdout with keys
oracle, n, d, epsilon, perturb_s, aggregate_s, mse, mse_theory (and perturb_secure_s: the
same perturbation drawing from the OS CSPRNG, as a client does). Simulation uses a seeded
generator; times are the best of ``--repeat`` runs on one core.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from ldpflow.core.oracles import registry
from ldpflow.core.randomness import SecureSource


def best_time(fn, repeat):
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--domain_size", type=int, default=1024)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--oracles", default=",".join(registry.ORACLES))
    args = parser.parse_args(argv)
    n, d, eps = args.users, args.domain_size, args.epsilon
    rng = np.random.default_rng(args.seed)
    weights = np.arange(1, d + 1, dtype=float) ** -1.1
    distribution = weights / weights.sum()
    values = rng.choice(d, size=n, p=distribution)
    truth = np.bincount(values, minlength=d) / n
    for name in args.oracles.split(","):
        oracle = registry.make(name, epsilon=eps, domain_size=d)
        perturb_s, reports = best_time(
            lambda oracle=oracle: oracle.perturb(values, rng=rng), args.repeat)
        secure_s, _ = best_time(
            lambda oracle=oracle: oracle.perturb(values, rng=SecureSource()), 1)
        aggregate_s, est = best_time(
            lambda oracle=oracle, reports=reports: oracle.estimate(oracle.aggregate(reports)),
            args.repeat)
        mse = float(np.mean((est.frequencies - truth) ** 2))
        theory = np.mean(oracle.variance(n, truth))  # one-bit: with the column sampling
        print(json.dumps({
            "oracle": name, "n": n, "d": d, "epsilon": eps,
            "perturb_s": round(perturb_s, 4), "aggregate_s": round(aggregate_s, 4),
            "mse": mse, "mse_theory": float(theory), "mse_ratio": round(mse / theory, 4),
            "perturb_secure_s": round(secure_s, 4),
        }), flush=True)


if __name__ == "__main__":
    main()
