"""PGR benchmark: projective geometry response against subset selection and Hadamard response.

    python benchmarks/pgr.py [--users 1000000] [--domain_sizes 1024,50000] [--epsilons 1,4]

n values drawn from Zipf(1.1) over d values; for each (d, epsilon) one JSON object per oracle
(pgr, ss, hr) on stdout with keys oracle, n, d, epsilon, report_bits, perturb_s,
aggregate_decode_s (counting the reports and estimating, pgr's transform decoder included),
mse (over the d values, one run), mse_theory (the mean of ``variance(n, truth)``), and
mse_ratio = mse / mse_theory; pgr adds q, t and K. Reports are drawn and counted in chunks
of ``--chunk`` users (an SS batch of 10^6 bitmaps of 50000 bits would not fit in memory); the
times are the sums over the chunks, on one core, from a seeded generator.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from ldpflow.core.oracles import registry


def run_one(name, epsilon, values, truth, rng, chunk):
    n, d = values.size, truth.size
    oracle = registry.make(name, epsilon=epsilon, domain_size=d)
    perturb_s = aggregate_s = 0.0
    acc = oracle.create_accumulator()
    for start in range(0, n, chunk):
        begin = time.perf_counter()
        reports = oracle.perturb(values[start : start + chunk], rng=rng)
        middle = time.perf_counter()
        acc.merge(oracle.aggregate(reports))
        perturb_s += middle - begin
        aggregate_s += time.perf_counter() - middle
        del reports
    begin = time.perf_counter()
    est = oracle.estimate(acc)
    decode_s = time.perf_counter() - begin
    mse = float(np.mean((est.frequencies - truth) ** 2))
    theory = float(np.mean(oracle.variance(n, truth)))
    row = {"oracle": name, "n": n, "d": d, "epsilon": epsilon,
           "report_bits": oracle.report_bits, "perturb_s": round(perturb_s, 3),
           "aggregate_decode_s": round(aggregate_s + decode_s, 3),
           "decode_s": round(decode_s, 3), "mse": mse, "mse_theory": theory,
           "mse_ratio": round(mse / theory, 4)}
    if name == "pgr":
        q, t = oracle.geometry
        row.update(q=q, t=t, K=oracle.order)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--domain_sizes", default="1024,50000")
    parser.add_argument("--epsilons", default="1,4")
    parser.add_argument("--oracles", default="pgr,ss,hr")
    parser.add_argument("--chunk", type=int, default=1 << 16)
    parser.add_argument("--seed", type=int, default=20240611)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    for d in (int(x) for x in args.domain_sizes.split(",")):
        weights = np.arange(1, d + 1, dtype=float) ** -1.1
        values = rng.choice(d, size=args.users, p=weights / weights.sum())
        truth = np.bincount(values, minlength=d) / args.users
        for epsilon in (float(x) for x in args.epsilons.split(",")):
            for name in args.oracles.split(","):
                print(json.dumps(run_one(name, epsilon, values, truth, rng, args.chunk)),
                      flush=True)


if __name__ == "__main__":
    main()
