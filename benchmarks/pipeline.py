"""Batch pipeline benchmark: ``ldpflow estimate`` end to end against the tools a user would
pick to read the same files, and ``ldpflow simulate`` against its own targets.

    python benchmarks/pipeline.py [--parquet_users 20000000] [--avro_users 4000000]
        [--json_users 2000000] [--simulate_users 10000000] [--workdir DIR] [--skip ...]

OLH reports, d = 1024, epsilon = 1, 4 shards per format. Every timing is of a separate
process (``ldpflow ...`` or ``python -c``), so the job's figure includes starting Python,
importing Beam and building the pipeline, as a user waits for them. One JSON object per
step on stdout:

* ``simulate``: wall seconds and peak memory (PSS of all its processes together) of
  ``ldpflow simulate``;
* ``bare``: the reference read of the same files (``pyarrow.parquet.read_table`` all
  columns, and payload columns only; ``polars.read_avro``; ``pyarrow.json.read_json``),
  in one process that imports only that library;
* ``estimate``: ``ldpflow estimate`` with ``--dedup none`` and with the default
  deduplication, in process and on two worker processes, with the ratio of its records/s
  to the reference read's (the targets: Parquet >= 0.5 without dedup, >= 0.25 with it;
  Avro and JSON lines >= 0.5 without dedup).

Each reference read and job run is repeated ``--repeat`` times and the median reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

BIN = os.path.join(os.path.dirname(sys.executable), "ldpflow")

BARE = {
    "parquet_read_table": (
        "import glob, pyarrow.parquet as pq\n"
        "n = sum(pq.read_table(p).num_rows for p in sorted(glob.glob('{dir}/*.parquet')))"),
    "parquet_read_table_payload": (
        "import glob, pyarrow.parquet as pq\n"
        "n = sum(pq.read_table(p, columns=['seed', 'bucket']).num_rows "
        "for p in sorted(glob.glob('{dir}/*.parquet')))"),
    "polars_read_avro": (
        "import glob, polars as pl\n"
        "n = sum(pl.read_avro(p).height for p in sorted(glob.glob('{dir}/*.avro')))"),
    "pyarrow_read_json": (
        "import glob, pyarrow.json as pj\n"
        "n = sum(pj.read_json(p).num_rows for p in sorted(glob.glob('{dir}/*.jsonl')))"),
}
_TIMED = ("import time\nt0 = time.perf_counter()\n{body}\n"
          "print(n, time.perf_counter() - t0)")


def emit(**fields) -> dict:
    print(json.dumps(fields), flush=True)
    return fields


def _pss_kb(pid: int) -> int:
    """Proportional set size: resident memory with pages shared between processes (a
    forked worker's copy-on-write pages) divided among them, so sums are true totals."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _tree_memory_kb(root: int) -> int:
    """Memory (PSS) of a process and all its descendants (Linux /proc), in KiB."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += _pss_kb(pid)
        todo.extend(children.get(pid, []))
    return total


def run_timed(argv: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak memory of the whole process tree (PSS in MB, sampled every 20 ms)
    and stdout of a child process."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(argv, stdout=out, stderr=err)
        peak = 0
        while child.poll() is None:
            peak = max(peak, _tree_memory_kb(child.pid))
            time.sleep(0.02)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        text = out.read().decode()
        if child.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed:\n{err.read().decode()[-3000:]}")
    return seconds, peak / 1024, text


def simulate(fmt: str, users: int, out: str, shards: int = 4) -> dict:
    if os.path.exists(os.path.join(out, "truth.json")):
        return {}
    seconds, rss, _ = run_timed([BIN, "simulate", "--oracle", "olh", "--epsilon", "1",
                                 "--domain_size", "1024", "--users", str(users), "--seed", "1",
                                 "--output", out, "--format", fmt, "--shards", str(shards)])
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    return {"seconds": round(seconds, 2), "peak_memory_mb": round(rss), "bytes": size}


def bare(name: str, folder: str, repeat: int) -> dict:
    """The reference read, the median of ``repeat`` runs (the read itself, not the start):
    the emitted step, whose ``records_per_s`` is the reference rate."""
    code = _TIMED.format(body=BARE[name].format(dir=folder))
    runs = []
    for _ in range(repeat):
        _, _, out = run_timed([sys.executable, "-c", code])
        n, seconds = out.split()
        runs.append(float(seconds))
    seconds = statistics.median(runs)
    rate = int(n) / seconds
    return emit(step="bare", reader=name, records=int(n), seconds=round(seconds, 3),
                runs=[round(r, 3) for r in runs], records_per_s=round(rate))


def estimate(fmt: str, folder: str, out: str, users: int, reference: float, dedup: str,
             workers: int, repeat: int) -> dict:
    """``ldpflow estimate`` end to end (process start to exit), the median of ``repeat``:
    the emitted step."""
    extra = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"] \
        if workers == 2 else ["--engine=beam"]  # Beam's in-process runner, as before auto
    runs = []
    for _ in range(repeat):
        seconds, rss, _ = run_timed([BIN, "estimate", f"--input={folder}/reports-*",
                                     "--methods=base", f"--output={out}", f"--dedup={dedup}",
                                     *extra])
        runs.append(seconds)
    seconds = statistics.median(runs)
    with open(os.path.join(out, "estimates.json"), encoding="utf-8") as f:
        document = json.load(f)
    if document["reports_estimated"] != users:
        raise SystemExit(f"estimated {document['reports_estimated']} of {users} reports")
    rate = users / seconds
    return emit(step="estimate", format=fmt, dedup=dedup, workers=workers, records=users,
                seconds=round(seconds, 2), runs=[round(r, 2) for r in runs],
                peak_memory_mb=round(rss), records_per_s=round(rate),
                ratio_to_reference=round(rate / reference, 3))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parquet_users", type=int, default=20_000_000)
    parser.add_argument("--avro_users", type=int, default=4_000_000)
    parser.add_argument("--json_users", type=int, default=2_000_000)
    parser.add_argument("--simulate_users", type=int, default=10_000_000)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs per measurement (the median is reported)")
    parser.add_argument("--skip", default="", help="comma-separated: simulate,parquet,avro,json")
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    workdir = args.workdir or tempfile.mkdtemp(prefix="ldpflow-bench-")
    if "simulate" not in skip:
        for fmt in ("avro", "json", "parquet"):
            out = os.path.join(workdir, f"simulate-{fmt}")
            figures = simulate(fmt, args.simulate_users, out)
            emit(step="simulate", format=fmt, users=args.simulate_users, **figures)
            subprocess.run(["rm", "-rf", out], check=True)
    plan = [("parquet", args.parquet_users, "parquet_read_table"),
            ("avro", args.avro_users, "polars_read_avro"),
            ("json", args.json_users, "pyarrow_read_json")]
    for fmt, users, reference in plan:
        if fmt in skip:
            continue
        folder = os.path.join(workdir, f"reports-{fmt}-{users}")
        figures = simulate(fmt, users, folder)
        if figures:
            emit(step="simulate", format=fmt, users=users, **figures)
        rate = bare(reference, folder, args.repeat)["records_per_s"]
        if fmt == "parquet":
            bare("parquet_read_table_payload", folder, args.repeat)
        for dedup, workers in [("none", 1), ("none", 2), ("report_id", 1)]:
            estimate(fmt, folder, os.path.join(workdir, f"est-{fmt}-{dedup}-{workers}"),
                     users, rate, dedup, workers, args.repeat)


if __name__ == "__main__":
    main()
