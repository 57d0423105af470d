"""``ldpflow demo``: simulate, perturb and estimate on built-in Zipf data with every oracle.

    ldpflow demo --users 200000 --domain_size 1024 --epsilon 1.0
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ldpflow.core.oracles import registry

__all__ = ["run"]


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ldpflow demo")
    parser.add_argument("--users", type=int, default=200_000)
    parser.add_argument("--domain_size", type=int, default=1024)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--seed", type=int, default=2024)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    ranks = np.arange(1, args.domain_size + 1, dtype=float)
    weights = ranks**-1.1
    values = rng.choice(args.domain_size, size=args.users, p=weights / weights.sum())
    truth = np.bincount(values, minlength=args.domain_size) / args.users
    top = np.argsort(-truth)[: args.top]
    print(f"{args.users} simulated users, Zipf(1.1) over {args.domain_size} values, "
          f"epsilon = {args.epsilon} (seeded simulation)")
    header = "value  true    " + "  ".join(f"{name:>7}" for name in registry.ORACLES)
    rows = {int(v): [truth[v]] for v in top}
    timings = []
    for name in registry.ORACLES:
        oracle = registry.make(name, epsilon=args.epsilon, domain_size=args.domain_size)
        start = time.perf_counter()
        est = oracle.estimate(oracle.aggregate(oracle.perturb(values, rng=rng)))
        timings.append(f"{name} {time.perf_counter() - start:.2f}s")
        for v in top:
            rows[int(v)].append(est.frequencies[v])
    print(header)
    for v, cells in rows.items():
        print(f"{v:>5}  " + "  ".join(f"{c:7.4f}" for c in cells))
    print("perturb+aggregate+estimate: " + ", ".join(timings))
    return 0
