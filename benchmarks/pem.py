"""PEM benchmark: per-pass time of the prefix extending method, end to end, in core.

    python benchmarks/pem.py [--users 1000000] [--value_bits 64] [--top_k 32] [--epsilon 4]
                             [--query_limit Q] [--num_distinct 100000] [--seed 20240611]

Without ``--query_limit`` the configuration is the automatic one
(:func:`ldpflow.core.heavy_hitters.configure`); with it, the paper's derivation from ``Q``.

n users draw values from Zipf(1.1) over ``--num_distinct`` distinct random ``m``-bit values,
perturb them (seeded generator, simulation only) and the aggregator runs every pass. One
JSON object per line on stdout: first the simulation and perturbation, then one per pass
(aggregate + estimate + select of that pass's group), then the total; each has the keys n,
m, k, epsilon, eta, pass, candidates, seconds (the total adds f1 and ncr against the true
top-k). ``seconds`` is wall time on this machine, which other work may share, and
``cpu_seconds`` the process CPU time.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from ldpflow.core import heavy_hitters as hh


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--value_bits", type=int, default=64)
    parser.add_argument("--top_k", type=int, default=32)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--query_limit", type=int, default=None)
    parser.add_argument("--num_distinct", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=20240611)
    args = parser.parse_args(argv)
    if args.query_limit is None:
        pem = hh.configure(top_k=args.top_k, value_bits=args.value_bits, epsilon=args.epsilon,
                           users=args.users)
    else:
        pem = hh.PrefixExtendingMethod(top_k=args.top_k, value_bits=args.value_bits,
                                       epsilon=args.epsilon, query_limit=args.query_limit)
    common = {"n": args.users, "m": pem.value_bits, "k": pem.top_k, "epsilon": pem.epsilon,
              "eta": pem.step_bits, "hash_range": pem.hash_range}

    def emit(pass_index, candidates, seconds, cpu=None, **extra):
        cpu_field = {} if cpu is None else {"cpu_seconds": round(cpu, 3)}
        print(json.dumps({**common, "pass": pass_index, "candidates": candidates,
                          "seconds": round(seconds, 3), **cpu_field, **extra}), flush=True)

    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    values = hh.sample_values(args.users, num_distinct=args.num_distinct,
                              value_bits=pem.value_bits, rng=rng)
    truth = hh.true_top(values, pem.top_k)
    emit("simulate", 0, time.perf_counter() - start)

    start = time.perf_counter()
    reports = pem.perturb(values, np.arange(args.users), rng)
    emit("perturb", 0, time.perf_counter() - start, hash_range=pem.hash_range,
         prefix_bits=list(pem.prefix_bits))

    total_start, total_cpu = time.perf_counter(), time.process_time()
    groups = pem.split_groups(reports)
    emit("split", 0, time.perf_counter() - total_start)
    prefixes, history = None, []
    for pass_index, group in enumerate(groups):
        start, cpu = time.perf_counter(), time.process_time()
        acc = pem.aggregate(pass_index, group, prefixes)
        aggregated = time.perf_counter()
        est = pem.estimate(acc)
        kept = pem.select(est, history=history)
        history.append(kept)
        prefixes = kept.prefixes
        end = time.perf_counter()
        emit(pass_index, int(est.candidates.size), end - start, time.process_time() - cpu,
             group_size=len(group), survivors=int(prefixes.size),
             aggregate_seconds=round(aggregated - start, 3),
             estimate_seconds=round(end - aggregated, 3))
    found, _ = history[-1].top(pem.top_k)
    scores = hh.score_top_k(found, truth, pem.top_k)
    emit("total", 0, time.perf_counter() - total_start, time.process_time() - total_cpu,
         f1=round(scores["f1"], 4), ncr=round(scores["ncr"], 4))


if __name__ == "__main__":
    main()
