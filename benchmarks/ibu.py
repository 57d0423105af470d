"""IBU benchmark: time, iterations and accuracy of the iterative Bayesian update vs Norm-Sub.

    python benchmarks/ibu.py [--users 1000000] [--epsilon 1.0] [--seeds 5]
                             [--domain_sizes 1024,50000] [--oracles grr,olh,oue]

For every oracle, domain size and seed, ``--users`` values are drawn from Zipf(1.1) over the
domain (seeded) and their accumulator is simulated: at the count level where the oracle
offers it (``sample_accumulator``: unary encoding, exact in law), otherwise by perturbing and
aggregating every report. The truth is the empirical distribution of the drawn values.

Per case it measures

* ``ibu``: the method ``ibu`` (:func:`ldpflow.core.postprocess.ibu`, the IBU fixed point in
  closed form): milliseconds (best of 5 calls) and MSE;
* ``ibu_iteration``: the literal EM iteration from uniform
  (:func:`~ldpflow.core.postprocess.iterative_bayesian_update`) with its default stopping
  rule (its optimality certificate, a bound on how far its objective is below the maximum,
  at most 1e-9; at most 10000 updates): seconds, iterations, whether the tolerance was met,
  the certificate where it stopped, the MSE of that iterate and its largest distance to the
  fixed point;
* ``norm_sub`` and ``base``: the MSE of Norm-Sub and of the raw estimate.

MSE is ``mean_v (f'_v - f_v)^2``. Prints one JSON document: the configuration, one row per
(oracle, d, seed), and per (oracle, d) the means over seeds with the number of seeds where
IBU's MSE is at most Norm-Sub's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from ldpflow.core import postprocess as pp
from ldpflow.core.oracles import registry
from ldpflow.core.simulation import parse_distribution


def simulate(name: str, d: int, users: int, epsilon: float, seed: int):
    """(estimate, truth, how) for one seeded population of Zipf(1.1) values."""
    rng = np.random.default_rng(seed)
    values = parse_distribution("zipf:1.1").sample(d, users, rng)
    counts = np.bincount(values, minlength=d)
    oracle = registry.make(name, epsilon=epsilon, domain_size=d)
    if hasattr(oracle, "sample_accumulator"):
        acc, how = oracle.sample_accumulator(counts, rng), "count-level"
    else:
        acc, how = oracle.aggregate(oracle.perturb(values, rng=rng)), "reports"
    return oracle.estimate(acc), counts / users, how


def mse(f, truth) -> float:
    return float(np.mean((np.asarray(f) - truth) ** 2))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--domain_sizes", default="1024,50000")
    parser.add_argument("--oracles", default="grr,olh,oue")
    parser.add_argument("--first_seed", type=int, default=20240611)
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds must be >= 1, got {args.seeds}")
    sizes = [int(x) for x in args.domain_sizes.split(",")]
    rows = []
    for name in args.oracles.split(","):
        for d in sizes:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                est, truth, how = simulate(name, d, args.users, args.epsilon, seed)
                times = []
                for _ in range(5):
                    start = time.perf_counter()
                    fixed = pp.postprocess(est, "ibu")
                    times.append(time.perf_counter() - start)
                start = time.perf_counter()
                it = pp.iterative_bayesian_update(est.frequencies, p=est.p, q=est.q)
                em_seconds = time.perf_counter() - start
                rows.append({
                    "oracle": name, "d": d, "seed": seed, "simulation": how,
                    "ibu": {"ms": round(1000 * min(times), 3), "mse": mse(fixed, truth)},
                    "ibu_iteration": {
                        "seconds": round(em_seconds, 3), "iterations": it.iterations,
                        "converged": it.converged, "gap": it.gap,
                        "mse": mse(it.frequencies, truth),
                        "max_distance_to_fixed_point": float(np.max(np.abs(it.frequencies
                                                                           - fixed)))},
                    "norm_sub": {"mse": mse(pp.norm_sub(est.frequencies), truth)},
                    "base": {"mse": mse(est.frequencies, truth)},
                })
    summary = []
    for name in args.oracles.split(","):
        for d in sizes:
            mine = [r for r in rows if r["oracle"] == name and r["d"] == d]
            summary.append({
                "oracle": name, "d": d, "seeds": len(mine),
                "mse_base": statistics.fmean(r["base"]["mse"] for r in mine),
                "mse_norm_sub": statistics.fmean(r["norm_sub"]["mse"] for r in mine),
                "mse_ibu": statistics.fmean(r["ibu"]["mse"] for r in mine),
                "mse_ibu_iteration": statistics.fmean(r["ibu_iteration"]["mse"] for r in mine),
                "ibu_at_most_norm_sub": sum(r["ibu"]["mse"] <= r["norm_sub"]["mse"]
                                            for r in mine),
                "ibu_ms": statistics.median(r["ibu"]["ms"] for r in mine),
                "iteration_seconds": statistics.median(r["ibu_iteration"]["seconds"]
                                                       for r in mine),
                "iterations": statistics.median(r["ibu_iteration"]["iterations"]
                                                for r in mine),
                "iteration_converged": sum(r["ibu_iteration"]["converged"] for r in mine),
            })
    print(json.dumps({"config": {"users": args.users, "epsilon": args.epsilon,
                                 "distribution": "zipf:1.1", "seeds": args.seeds,
                                 "domain_sizes": sizes, "oracles": args.oracles.split(","),
                                 "iteration_tol": pp.IBU_TOLERANCE,
                                 "iteration_max": pp.IBU_MAX_ITERATIONS},
                      "summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
