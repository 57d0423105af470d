"""``ldpflow simulate``: synthetic users -> perturbed reports (sharded files) + ``truth.json``.

    ldpflow simulate --oracle olh --epsilon 1.0 --domain_size 1024 --users 1000000 \\
        --distribution zipf:1.1 --seed 7 --output /tmp/reports

Writes ``OUTPUT/reports-SSSSS-of-NNNNN.avro`` (or ``.jsonl`` / ``.parquet``) and
``OUTPUT/truth.json`` (``{"counts": [...], ...}``: the true number of users per value).
Values come from a synthetic distribution over the domain (rank r is value r) or from
``--values_file`` (one integer per line). Simulation is seeded: it is for evaluation, not
for real clients, whose perturbation draws from the OS CSPRNG.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import logging
import multiprocessing
import os
import time
from typing import Any

import numpy as np

from ldpflow.core import simulation, validation
from ldpflow.core.oracles import FrequencyOracle, registry
from ldpflow.transforms import formats
from ldpflow.transforms.records import reports_to_records

__all__ = ["run", "build_parser", "write_reports"]

_LOGGER = logging.getLogger(__name__)
_SUFFIX = {"avro": ".avro", "json": ".jsonl", "parquet": ".parquet"}
DEFAULT_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ldpflow simulate", description=__doc__.split("\n")[0])
    parser.add_argument("--oracle", required=True, choices=sorted(registry.ORACLES))
    parser.add_argument("--epsilon", type=float, required=True)
    parser.add_argument("--domain_size", type=int, required=True)
    parser.add_argument("--hash_range", type=int, default=None, help="olh: g (a power of two).")
    parser.add_argument("--users", type=int, default=None,
                        help="Number of users (required unless --values_file is given).")
    parser.add_argument("--distribution", default="zipf:1.1",
                        help="zipf:S | uniform | geometric:P over the domain (rank r = value r).")
    parser.add_argument("--values_file", default=None,
                        help="Raw values instead of a distribution: one integer per line.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", required=True, help="Output directory.")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--format", choices=sorted(_SUFFIX), default="avro")
    parser.add_argument("--start_time_ms", type=int, default=DEFAULT_START_MS,
                        help="Event times are uniform over [start, start + duration).")
    parser.add_argument("--duration_s", type=float, default=3600.0)
    return parser


def _oracle(args: argparse.Namespace) -> FrequencyOracle:
    params: dict[str, Any] = {"epsilon": args.epsilon, "domain_size": args.domain_size}
    if args.hash_range is not None:
        params["hash_range"] = args.hash_range
    return registry.make(args.oracle, **params)


def _values(args: argparse.Namespace, rng: np.random.Generator) -> np.ndarray:
    if args.values_file:
        with open(args.values_file, encoding="utf-8") as f:
            raw = [line.strip() for line in f if line.strip()]
        try:
            values = np.array([int(v) for v in raw], dtype=np.int64)
        except ValueError as exc:
            raise SystemExit(f"--values_file must hold one integer per line: {exc}") from None
        return validation.check_values(values, args.domain_size, name="--values_file values")
    if args.users is None:
        raise SystemExit("--users is required unless --values_file is given")
    validation.check_positive_int(args.users, name="--users")
    dist = simulation.parse_distribution(args.distribution)
    return dist.sample(args.domain_size, args.users, rng)


def write_reports(path: str, fmt: str, records: list[dict]) -> None:
    """One shard of report envelopes in ``fmt``."""
    if fmt == "avro":
        with open(path, "wb") as f:
            formats.write_avro(f, records)
    elif fmt == "json":
        with open(path, "w", encoding="utf-8") as f:
            formats.write_json_lines(f, records)
    else:
        formats.write_parquet(path, records)


def _write_shard(job: tuple) -> tuple[str, int]:
    path, fmt, oracle, reports, first, run_id, event_times = job
    count = len(reports)
    ids = [f"{run_id}-{i}" for i in range(first, first + count)]
    users = [f"user-{i}" for i in range(first, first + count)]
    write_reports(path, fmt, reports_to_records(oracle, reports, ids, users, event_times))
    return path, count


def run(argv: list[str] | None = None) -> dict:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        oracle = _oracle(args)
        validation.check_positive_int(args.shards, name="--shards")
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    values = _values(args, rng)
    n = values.size
    kwargs = {"columns": rng.permutation(n) % oracle.order} if oracle.name == "onebit" else {}
    reports = oracle.perturb(values, rng=rng, **kwargs)  # seeded: a simulation
    event_times = args.start_time_ms + (rng.random(n) * args.duration_s * 1000).astype(np.int64)
    os.makedirs(args.output, exist_ok=True)
    bounds = np.linspace(0, n, args.shards + 1).astype(int)
    jobs = []
    for shard in range(args.shards):
        lo, hi = int(bounds[shard]), int(bounds[shard + 1])
        path = os.path.join(args.output,
                            f"reports-{shard:05d}-of-{args.shards:05d}{_SUFFIX[args.format]}")
        jobs.append((path, args.format, oracle, reports[lo:hi], lo, f"s{args.seed}",
                     event_times[lo:hi]))
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers > 1:  # encoding is per record in Python: spread the shards over the cores
        context = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
            for path, count in pool.map(_write_shard, jobs):
                _LOGGER.info("wrote %s (%d reports)", path, count)
    else:
        for job in jobs:
            _LOGGER.info("wrote %s (%d reports)", *_write_shard(job))
    counts = np.bincount(values, minlength=args.domain_size)
    truth = {"counts": counts.tolist(), "users": int(n), "oracle": oracle.name,
             "parameters": oracle.parameters,
             "distribution": None if args.values_file else args.distribution, "seed": args.seed}
    with open(os.path.join(args.output, "truth.json"), "w", encoding="utf-8") as f:
        json.dump(truth, f)
    elapsed = time.perf_counter() - started
    _LOGGER.info("simulated %d %s reports in %.1fs -> %s", n, oracle.name, elapsed, args.output)
    return truth
