"""Peak memory and time of bitmap oracles (OUE, SUE, SS) on wide domains.

    python benchmarks/oracle_memory.py [--users 1000000] [--domain_size 50000] [--chunk 65536]

Each case runs in a fresh subprocess, so its peak resident set size (``ru_maxrss``) is its
own; one JSON object per case on stdout:

* ``chunked``: ``--users`` users at ``--domain_size``, perturbed and aggregated ``--chunk``
  users at a time, the way a caller (or ``ldpflow simulate``) streams them, then estimated;
* ``one_chunk``: a single library ``perturb`` + ``aggregate`` of ``--chunk`` users;
* ``speed``: OUE perturb + aggregate + estimate of ``--users`` users at ``--speed_domain``
  (default 1024) in one call, best of ``--repeat`` (time only; memory is the batch's).
* ``whole`` (with ``--whole``): one ``perturb`` of all ``--users`` users at
  ``--domain_size``; reports the error if the library refuses the batch.

Keys: case, oracle, users, domain_size, chunk, epsilon, seconds, perturb_s, aggregate_s,
peak_rss_mb, baseline_rss_mb (after imports and the values), and error if any.
Simulation uses a seeded generator.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _values(users: int, domain_size: int, seed: int):
    import numpy as np

    from ldpflow.core import simulation

    rng = np.random.default_rng(seed)
    return simulation.RankDistribution("zipf", 1.1).sample(domain_size, users, rng), rng


def _child(args: argparse.Namespace) -> dict:
    from ldpflow.core.oracles import registry

    domain_size = args.speed_domain if args.case == "speed" else args.domain_size
    oracle = registry.make(args.oracle, epsilon=args.epsilon, domain_size=domain_size)
    users = args.chunk if args.case == "one_chunk" else args.users
    values, rng = _values(users, oracle.domain_size, args.seed)
    result = {"case": args.case, "oracle": args.oracle, "users": users,
              "domain_size": oracle.domain_size, "chunk": args.chunk, "epsilon": args.epsilon,
              "baseline_rss_mb": round(_rss_mb(), 1)}
    perturb_s = aggregate_s = 0.0
    started = time.perf_counter()
    try:
        if args.case == "chunked":
            acc = oracle.create_accumulator()
            for start in range(0, users, args.chunk):
                t0 = time.perf_counter()
                reports = oracle.perturb(values[start:start + args.chunk], rng=rng)
                t1 = time.perf_counter()
                acc.merge(oracle.aggregate(reports))
                del reports
                perturb_s += t1 - t0
                aggregate_s += time.perf_counter() - t1
            oracle.estimate(acc)
        elif args.case == "speed":
            best = (float("inf"), 0.0, 0.0)
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                reports = oracle.perturb(values, rng=rng)
                t1 = time.perf_counter()
                oracle.estimate(oracle.aggregate(reports))
                t2 = time.perf_counter()
                del reports
                best = min(best, (t2 - t0, t1 - t0, t2 - t1))
            result["seconds"], perturb_s, aggregate_s = best
        else:  # one_chunk, whole
            t0 = time.perf_counter()
            reports = oracle.perturb(values, rng=rng)
            t1 = time.perf_counter()
            oracle.estimate(oracle.aggregate(reports))
            perturb_s, aggregate_s = t1 - t0, time.perf_counter() - t1
    except (MemoryError, ValueError) as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    result.setdefault("seconds", time.perf_counter() - started)
    result.update(seconds=round(result["seconds"], 3), perturb_s=round(perturb_s, 3),
                  aggregate_s=round(aggregate_s, 3), peak_rss_mb=round(_rss_mb(), 1))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--domain_size", type=int, default=50_000)
    parser.add_argument("--chunk", type=int, default=1 << 16)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--speed_domain", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--oracles", default="oue,sue,ss")
    parser.add_argument("--cases", default="one_chunk,chunked,speed")
    parser.add_argument("--whole", action="store_true", help="Also run the 'whole' case.")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # set in the subprocess
    parser.add_argument("--oracle", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(_child(args)), flush=True)
        return
    common = [f"--users={args.users}", f"--domain_size={args.domain_size}",
              f"--chunk={args.chunk}", f"--epsilon={args.epsilon}",
              f"--speed_domain={args.speed_domain}", f"--repeat={args.repeat}",
              f"--seed={args.seed}"]
    cases = args.cases.split(",") + (["whole"] if args.whole else [])
    for case in cases:
        for name in (["oue"] if case == "speed" else args.oracles.split(",")):
            out = subprocess.run([sys.executable, __file__, *common, f"--case={case}",
                                  f"--oracle={name}"], capture_output=True, text=True)
            if out.returncode:
                print(json.dumps({"case": case, "oracle": name, "returncode": out.returncode,
                                  "stderr": out.stderr[-500:]}), flush=True)
            else:
                print(out.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
