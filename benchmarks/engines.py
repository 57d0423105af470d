"""``ldpflow estimate`` on every engine, on one input: JSON lines on stdout.

    python benchmarks/engines.py [--users 20000000] [--files 16] [--workdir DIR]
        [--cases ...] [--code DIR]

The input: ``--users`` OLH reports (d = 1024, epsilon = 1) in Parquet, made once by
``ldpflow simulate`` (``--files`` files) and kept in ``--workdir``. ``--code``: the
ldpflow tree the cases import (default this repository's; an older tree, e.g. ``git
archive COMMIT ldpflow | tar -x -C DIR``, measures before a change). Each case runs in
a fresh process: the engine is started (its fixed start-up timed apart: the cluster or
context, and one trivial job so that its worker processes exist and have imported the
reader), then the
job runs with ``--dedup none`` and with the default dedup (``report_id``), both with
``--methods base,norm-sub``. Job
time is the run's own (``summary["seconds"]``: planning, reading, shuffles, estimates,
writing and the commit). Peak memory: each worker process's peak resident set (after both
runs; for Beam's in-process runner and the local plan, the process's own). CPU: user + system
seconds of the driver and of the workers (Dask: each worker process; Spark: not split).
Dask also gives its parallel efficiency: the tasks' compute seconds (its task stream)
over workers x job seconds, which stays meaningful on a loaded machine where wall times do
not (on this machine every session is one scheduler autogroup: a second worker process
gets no more CPU while other sessions are busy). Each case prints the load average.

Cases: ``beam`` (FnApiRunner, 1 worker), ``local`` (the plan in process), ``dask-1``,
``dask-2`` (LocalCluster of N worker processes), ``spark-1``, ``spark-2``
(``local[N]``). The last line compares them (speed-ups and the price of dedup).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ("beam", "local", "dask-1", "dask-2", "spark-1", "spark-2")


def emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


def simulate(users: int, files: int, out: str) -> dict:
    if os.path.exists(os.path.join(out, "truth.json")):
        return {"cached": True}
    from ldpflow.pipelines import simulate as job

    started = time.perf_counter()
    job.run(["--oracle", "olh", "--epsilon", "1", "--domain_size", "1024", "--users",
             str(users), "--seed", "1", "--output", out, "--format", "parquet", "--shards",
             str(files)])
    return {"seconds": round(time.perf_counter() - started, 2)}


def _warm(x: int) -> int:
    """A trivial task that imports what the reads use, so that start-up holds the imports."""
    import pyarrow.parquet  # noqa: F401

    import ldpflow.plan.steps  # noqa: F401
    import ldpflow.wire.formats  # noqa: F401

    return x


def _self_peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _compute_seconds(tasks) -> float:
    return sum(part["stop"] - part["start"] for task in tasks
               for part in task.get("startstops", ()) if part["action"] == "compute")


def one(case: str, data: str, workdir: str) -> None:
    """Run one case in this process (a child of :func:`main`)."""
    from ldpflow.pipelines import estimate

    engine, _, n = case.partition("-")
    started = time.perf_counter()
    backend = None
    if engine == "dask":
        from ldpflow.engines.dask_backend import DaskBackend

        backend = DaskBackend(workers=int(n))
    elif engine == "spark":
        from ldpflow.engines.spark_backend import SparkBackend

        backend = SparkBackend(f"local[{n}]")
    elif engine == "local":
        from ldpflow.plan.backend import LocalBackend

        backend = LocalBackend()
    if backend is not None:  # one trivial job: the worker processes exist (and have
        # imported the reader) after it
        backend.collect(backend.map(backend.parallelize(list(range(8))), _warm))
    startup = time.perf_counter() - started
    runs = {}
    for dedup in ("none", "report_id"):
        argv = [f"--input={data}/*.parquet", f"--output={workdir}/out-{case}-{dedup}",
                "--methods=base,norm-sub", f"--dedup={dedup}", f"--engine={engine}",
                "--quiet=true"]
        load = os.getloadavg()[0]
        cpu = _cpu_seconds()
        workers_cpu = backend.client.run(_cpu_seconds) if engine == "dask" else None
        if engine == "dask":
            from distributed import get_task_stream

            with get_task_stream(backend.client) as stream:
                summary = estimate.run(argv, backend=backend)
            tasks = stream.data
        else:
            summary = estimate.run(argv, backend=backend)
        runs[dedup] = {"seconds": summary["seconds"], "records": summary["records"],
                       "reports_estimated": summary["reports_estimated"],
                       "duplicates": summary["duplicates"],
                       "steps_s": summary.get("timings_ms", {}).get("steps_s"),
                       "driver_cpu_s": round(_cpu_seconds() - cpu, 2),
                       "load_average_1min": round(load, 2)}
        if engine == "dask":
            after = backend.client.run(_cpu_seconds)
            compute = _compute_seconds(tasks)
            runs[dedup].update(
                workers_cpu_s=round(sum(after[w] - workers_cpu[w] for w in workers_cpu), 2),
                tasks=len(tasks), task_compute_s=round(compute, 2),
                parallel_efficiency=round(compute / (int(n) * summary["seconds"]), 3))
    if hasattr(backend, "peak_memory"):
        peaks = sorted(backend.peak_memory().values())
    else:
        peaks = [_self_peak()]
    if backend is not None:
        backend.close()
    emit(case=case, startup_seconds=round(startup, 2) if engine != "beam" else None,
         runs=runs, peak_memory_mb_per_worker=[round(p / 2**20) for p in peaks])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20_000_000)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--code", default=ROOT, help="the ldpflow tree the cases import")
    parser.add_argument("--workdir", default="/tmp/ldpflow-bench-engines")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    data = os.path.join(args.workdir, f"olh-{args.users}-{args.files}")
    if args.one:
        one(args.one, data, args.workdir)
        return
    os.makedirs(args.workdir, exist_ok=True)
    emit(step="simulate", users=args.users, files=args.files,
         **simulate(args.users, args.files, data))
    results = {}
    env = dict(os.environ, PYTHONPATH=os.path.abspath(args.code) + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    for case in args.cases.split(","):
        out = subprocess.run([sys.executable, __file__, "--users", str(args.users),
                              "--files", str(args.files), "--workdir", args.workdir,
                              "--one", case],
                             capture_output=True, text=True, env=env)
        if out.returncode != 0:
            emit(case=case, error=out.stderr[-2000:])
            continue
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1]
        results[case] = json.loads(line)
        print(line, flush=True)

    def seconds(case, dedup):
        return results.get(case, {}).get("runs", {}).get(dedup, {}).get("seconds")

    def ratio(a, b):
        return round(a / b, 2) if a and b else None

    emit(step="compare", **{
        f"{what}_{dedup}": ratio(seconds(a, dedup), seconds(b, dedup))
        for dedup in ("none", "report_id")
        for what, a, b in (("dask_2_vs_1_speedup", "dask-1", "dask-2"),
                           ("dask_2_vs_beam_speedup", "beam", "dask-2"),
                           ("spark_2_vs_1_speedup", "spark-1", "spark-2"))},
        **{f"dedup_price_{case}": ratio(seconds(case, "report_id"), seconds(case, "none"))
           for case in results})


if __name__ == "__main__":
    main()
