"""Apple's CMS and HCMS: ldpflow against pure-ldp, the library a user would pick instead.

    python benchmarks/sketches.py [--users 1000000] [--pure_ldp_python /path/to/python]

Prints one JSON object per (library, oracle): seconds to perturb every user, to aggregate
and to estimate the whole domain, and the MSE over the domain. pure-ldp (``pip install
pure-ldp``) runs in the interpreter given by ``--pure_ldp_python`` (its own virtualenv),
on ``--pure_ldp_users`` users (it perturbs and aggregates one report at a time in Python,
so its times are also given per 10^6 users, scaled linearly).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
import time

import numpy as np

PURE_LDP = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer
    n, d, eps, k, m, hadamard, seed = json.loads(sys.argv[1])
    rng = np.random.default_rng(seed)
    w = np.arange(1, d + 1, dtype=float) ** -1.1
    values = rng.choice(d, size=n, p=w / w.sum())
    server = CMSServer(eps, k, m, is_hadamard=hadamard)
    client = CMSClient(eps, server.get_hash_funcs(), m, is_hadamard=hadamard)
    t0 = time.perf_counter()
    reports = [client.privatise(int(v)) for v in values]
    t1 = time.perf_counter()
    for r in reports:
        server.aggregate(r)
    t2 = time.perf_counter()
    est = np.array([server.estimate(v, suppress_warnings=True) for v in range(d)]) / n
    t3 = time.perf_counter()
    truth = np.bincount(values, minlength=d) / n
    print(json.dumps({"perturb_s": t1 - t0, "aggregate_s": t2 - t1, "estimate_s": t3 - t2,
                      "mse": float(np.mean((est - truth) ** 2))}))
""")


def ldpflow_run(name: str, n: int, d: int, eps: float, k: int, m: int, seed: int) -> dict:
    import ldpflow

    rng = np.random.default_rng(seed)
    w = np.arange(1, d + 1, dtype=float) ** -1.1
    values = rng.choice(d, size=n, p=w / w.sum())
    oracle = ldpflow.oracle(name, epsilon=eps, domain_size=d, hash_range=m, num_hashes=k)
    t0 = time.perf_counter()
    reports = oracle.perturb(values, rng=rng)
    t1 = time.perf_counter()
    acc = oracle.aggregate(reports)
    t2 = time.perf_counter()
    est = oracle.estimate(acc)
    t3 = time.perf_counter()
    truth = np.bincount(values, minlength=d) / n
    return {"perturb_s": t1 - t0, "aggregate_s": t2 - t1, "estimate_s": t3 - t2,
            "mse": float(np.mean((est.frequencies - truth) ** 2)),
            "mse_formula": float(np.mean(oracle.variance(n, truth)))}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--domain_size", type=int, default=1024)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--num_hashes", type=int, default=256)
    parser.add_argument("--hash_range", type=int, default=1024)
    parser.add_argument("--pure_ldp_python", default=None)
    parser.add_argument("--pure_ldp_users", type=int, default=100_000)
    args = parser.parse_args(argv)
    common = {"d": args.domain_size, "epsilon": args.epsilon, "k": args.num_hashes,
              "m": args.hash_range}
    for name in ("cms", "hcms"):
        figures = ldpflow_run(name, args.users, args.domain_size, args.epsilon,
                              args.num_hashes, args.hash_range, 7)
        print(json.dumps({"library": "ldpflow", "oracle": name, "n": args.users, **common,
                          **{key: round(v, 4) if key.endswith("_s") else v
                             for key, v in figures.items()}}), flush=True)
        if args.pure_ldp_python:
            n = args.pure_ldp_users
            job = [n, args.domain_size, args.epsilon, args.num_hashes, args.hash_range,
                   name == "hcms", 7]
            done = subprocess.run([args.pure_ldp_python, "-c", PURE_LDP, json.dumps(job)],
                                  capture_output=True, text=True, check=True)
            figures = json.loads(done.stdout)
            scale = 1_000_000 / n
            print(json.dumps({"library": "pure-ldp", "oracle": name, "n": n, **common,
                              **{key: round(v, 4) if key.endswith("_s") else v
                                 for key, v in figures.items()},
                              "per_million_users_s": round(scale * (figures["perturb_s"]
                                                                    + figures["aggregate_s"])
                                                           + figures["estimate_s"], 2)}),
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())
