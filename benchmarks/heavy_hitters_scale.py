"""``ldpflow heavy-hitters`` at scale, on every engine, against a bare decode of the same
files: JSON lines on stdout.

    python benchmarks/heavy_hitters_scale.py [--users 1000000] [--protocols pem,sfp]
        [--cases beam,local,dask-1,dask-2,decode,pass0] [--workdir DIR] [--threads N]

The input: ``--users`` reports of each protocol (64-bit values, k = 32, epsilon = 4; Zipf
1.1 over 10^5 values), made once by ``ldpflow simulate`` (Avro, 4 files) and kept in
``--workdir``. Each case runs in a fresh process, so that its peak resident memory is its
own: ``beam`` (FnApiRunner, 1 worker; its dedup shuffles the id hashes only and each
pass reads the input again, as the plan's), ``local`` (the job plan in process), ``dask-N``
(a LocalCluster of N worker processes: the driver's peak and each worker's), and
``decode`` (``polars.read_avro`` of every file, the bare decode the job must keep up
with; fastavro when polars has no Avro reader), and ``pass0``: the CPU seconds of the
plan's pass 0 (``read_ranges`` over every range, in one thread so that each part's time is
its own) by part: polars' decode, the container built for it (blocks uncompressed, their
sentinels), the envelope checks and column building (``parse_table``), the id hashes, the
group check, the counting and the spill write. Job time is the run's own
(``summary["seconds"]``, without the engine's start-up, which is timed apart).
``--threads N`` sets ``LDPFLOW_THREADS`` for the cases (1: no reading ahead, no counting
threads); each line has wall and CPU (user + system) seconds and the peak memory.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ("beam", "local", "dask-1", "dask-2", "decode", "pass0")


def emit(**fields) -> None:
    """One JSON line, with the machine's load average (1, 5, 15 min) when it was printed:
    on a shared machine the seconds mean little without it."""
    print(json.dumps({**fields, "load_average": [round(x, 2) for x in os.getloadavg()]}),
          flush=True)


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _cpu() -> float:
    """User + system CPU seconds of this process so far (the driver's, on Dask): the figure
    a loaded machine distorts least."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return round(usage.ru_utime + usage.ru_stime, 2)


def simulate(protocol: str, users: int, out: str) -> dict:
    if os.path.exists(os.path.join(out, "truth.json")):
        return {"cached": True}
    from ldpflow.pipelines import simulate as job

    started = time.perf_counter()
    job.run(["--oracle", protocol, "--bits", "64", "--k", "32", "--epsilon", "4",
             "--domain_size", "100000", "--distribution", "zipf:1.1", "--users", str(users),
             "--seed", "7", "--output", out, "--shards", "4"])
    return {"seconds": round(time.perf_counter() - started, 2)}


def decode(data: str) -> dict:
    """A bare decode of every file (all columns), the floor the job is compared with."""
    started = time.perf_counter()
    rows = 0
    paths = sorted(glob.glob(f"{data}/*.avro"))
    try:
        import polars

        reader = "polars.read_avro"
        for path in paths:
            rows += polars.read_avro(path).height
    except (ImportError, AttributeError):
        import fastavro

        reader = "fastavro"
        for path in paths:
            with open(path, "rb") as f:
                rows += sum(1 for _ in fastavro.reader(f))
    return {"seconds": round(time.perf_counter() - started, 2), "rows": rows,
            "reader": reader}


def pass0(data: str, workdir: str) -> dict:
    """Pass 0 of the plan over every range of ``data``, its CPU seconds by part (one
    thread: ``LDPFLOW_THREADS=1`` is set by :func:`one`)."""
    import collections
    import functools
    import tempfile

    import polars  # noqa: F401 - imported before the clock starts, as in a job

    from ldpflow.plan import heavy_hitters as plan
    from ldpflow.plan import job, packed
    from ldpflow.wire import avro, parse
    from ldpflow.wire.parse import AcceptancePolicy

    spent: collections.Counter = collections.Counter()
    inside: list[str] = []

    def timed(module, name, label):
        original = getattr(module, name)

        @functools.wraps(original)
        def wrapper(*a, **k):
            started = time.process_time()
            inside.append(label)
            try:
                return original(*a, **k)
            finally:
                inside.pop()
                took = time.process_time() - started
                spent[label] += took
                if inside:  # not counted twice: the enclosing part loses it
                    spent[inside[-1]] -= took
        setattr(module, name, wrapper)

    for module, name, label in (
            (avro, "to_null", "container_uncompress"),
            (avro, "with_sentinels", "container_sentinels"),
            (avro, "_polars_table", "polars_decode"),
            (avro, "parse_table", "parse_table_other"),
            (parse, "_id_hashes", "id_hashes"),
            (parse, "_group_mismatches", "group_check"),
            (plan, "pass_tally", "counting"),
            (packed, "write_spill", "spill_write")):
        timed(module, name, label)
    policy = AcceptancePolicy(expect={"oracle": os.path.basename(data).split("-")[0]})
    tasks = job.plan_ranges(f"{data}/*.avro", None, plan.RANGE_BYTES)
    spill = tempfile.mkdtemp(dir=workdir)
    started, cpu = time.perf_counter(), time.process_time()
    try:
        plan.read_ranges(tasks, policy, 0, account=True, ids=True, spill=spill)
        total = time.process_time() - cpu
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    parts = {k: round(v, 3) for k, v in sorted(spent.items())}
    return {"seconds": round(time.perf_counter() - started, 2), "ranges": len(tasks),
            "pass0_cpu_seconds": round(total, 2), "parts_cpu_seconds": parts,
            "rest_cpu_seconds": round(total - sum(spent.values()), 3)}


def one(case: str, protocol: str, data: str, workdir: str) -> None:
    """Run one case in this process (a child of :func:`main`)."""
    if case == "pass0":
        os.environ["LDPFLOW_THREADS"] = "1"
        result = pass0(data, workdir)
        emit(case=case, protocol=protocol, **result, peak_memory_mb=round(_peak() / 2**20))
        return
    if case == "decode":
        before = _cpu()
        result = decode(data)
        emit(case=case, protocol=protocol, **result, cpu_seconds=round(_cpu() - before, 2),
             peak_memory_mb=round(_peak() / 2**20))
        return
    from ldpflow.pipelines import heavy_hitters

    engine, _, n = case.partition("-")
    started = time.perf_counter()
    backend = None
    if engine == "dask":
        from ldpflow.engines.dask_backend import DaskBackend

        backend = DaskBackend(workers=int(n))
    elif engine == "local":
        from ldpflow.plan.backend import LocalBackend

        backend = LocalBackend()
    startup = time.perf_counter() - started
    cpu_before = _cpu()
    output = f"{workdir}/out-{protocol}-{case}"
    summary = heavy_hitters.run([f"--input={data}/*.avro", f"--output={output}",
                                 f"--protocol={protocol}", f"--engine={engine}"],
                                backend=backend)
    cpu = round(_cpu() - cpu_before, 2)
    workers = None
    if hasattr(backend, "peak_memory"):
        workers = sorted(round(p / 2**20) for p in backend.peak_memory().values())
    if backend is not None:
        backend.close()
    with open(f"{output}/heavy_hitters.json") as f:
        document = json.load(f)
    with open(f"{data}/truth.json") as f:
        truth = [t["value"] for t in json.load(f)["top"]]
    found = [t["value"] for t in document["top_k"]]
    hits = len(set(found) & set(truth[:32]))
    emit(case=case, protocol=protocol, seconds=summary["seconds"],
         startup_seconds=round(startup, 2) if backend is not None else None,
         records=summary.get("records"), found=len(found), true_in_top_32=hits,
         cpu_seconds=cpu, steps_s=(summary.get("timings_ms") or {}).get("steps_s"),
         peak_memory_mb=round(_peak() / 2**20), peak_memory_mb_per_worker=workers,
         load_average=round(os.getloadavg()[0], 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--protocols", default="pem,sfp")
    parser.add_argument("--workdir", default="/tmp/ldpflow-bench-hh-scale")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--threads", type=int, default=None,
                        help="LDPFLOW_THREADS for the cases (default: as the environment)")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if args.threads is not None:
        env["LDPFLOW_THREADS"] = str(args.threads)
    for protocol in args.protocols.split(","):
        data = os.path.join(args.workdir, f"{protocol}-{args.users}")
        if args.one:
            one(args.one, protocol, data, args.workdir)
            return
        os.makedirs(args.workdir, exist_ok=True)
        emit(step="simulate", protocol=protocol, users=args.users,
             **simulate(protocol, args.users, data))
        results = {}
        for case in args.cases.split(","):
            out = subprocess.run([sys.executable, __file__, "--users", str(args.users),
                                  "--workdir", args.workdir, "--protocols", protocol,
                                  "--one", case], capture_output=True, text=True, env=env)
            if out.returncode != 0:
                emit(case=case, protocol=protocol, error=out.stderr[-2000:])
                continue
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1]
            results[case] = json.loads(line)
            print(line, flush=True)

        emit(step="compare", protocol=protocol, users=args.users,
             dask_2_vs_1_speedup=_ratio(results, "dask-1", "dask-2"),
             local_vs_decode=_ratio(results, "local", "decode"),
             local_vs_decode_cpu=_ratio(results, "local", "decode", "cpu_seconds"),
             beam_vs_decode=_ratio(results, "beam", "decode"),
             beam_vs_local=_ratio(results, "beam", "local"))


def _ratio(results: dict, a: str, b: str, figure: str = "seconds") -> float | None:
    """``figure(a) / figure(b)`` (None when either did not run)."""
    x, y = results.get(a, {}).get(figure), results.get(b, {}).get(figure)
    return round(x / y, 2) if x and y else None


if __name__ == "__main__":
    main()
