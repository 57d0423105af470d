"""How cost grows with the input: ``ldpflow simulate`` and ``ldpflow estimate`` (both dedup
modes) from 2*10^6 to 2*10^8 reports, per format, with peak memory.

    python benchmarks/scale.py [--sizes 2000000,20000000,200000000]
        [--formats parquet,avro,json] [--max_json 20000000] [--max_avro 200000000]
        [--workdir DIR] [--repeat 1] [--keep] [--engines beam,local] [--input DIR]

OLH reports, d = 1024, epsilon = 1, 16 shards, one process (the table of
``docs/pipeline.md``). Each step is a separate process, timed from its start to its exit,
with the peak memory (PSS) of its whole process tree; see ``benchmarks/pipeline.py``, whose
measuring functions this uses. One JSON object per step on stdout:

* ``simulate``: seconds, peak memory and bytes written;
* ``bare``: the reference read of the payload columns (``pyarrow.parquet.read_table``),
  ``polars.read_avro`` or ``pyarrow.json.read_json`` of the same files;
* ``estimate``: ``--dedup none`` and the default deduplication, with the ratio of its
  records/s to the reference read's;

* ``estimate_plan`` (``--engines`` with ``local``): the job plan in one process
  (``--engine local``) with ``--dedup none``, the dedup of id hashes in memory
  (``--dedup_store memory``) and on disk (``--dedup_store disk``, the local engine's
  default: peak memory flat in the number of reports);

and last one ``table`` object: per format and size, the seconds and peak memory of each
step, and the price of deduplication (its time over the ``--dedup none`` job's).
``--input DIR`` reuses reports made before (``DIR/reports-FORMAT-SIZE``, or
``DIR/pSIZE`` for Parquet) instead of simulating them.
JSON lines at 2*10^8 are about 20 GB, so ``--max_json`` leaves that size out by default.
The inputs of a size are removed after it unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipeline import BIN, bare, emit, estimate, run_timed, simulate  # noqa: E402

REFERENCE = {"parquet": "parquet_read_table_payload", "avro": "polars_read_avro",
             "json": "pyarrow_read_json"}
SHARDS = 16


def _row(fmt: str, users: int, simulated: dict, read: dict, jobs: dict[str, dict]) -> dict:
    """One row of the closing table: a format at a size."""
    row = {"format": fmt, "reports": users,
           "bare_read": {"reader": read["reader"], "seconds": read["seconds"]}}
    if simulated:
        row["simulate"] = {k: simulated[k] for k in ("seconds", "peak_memory_mb", "bytes")}
    for dedup, job in jobs.items():
        row[f"estimate_dedup_{dedup}"] = {k: job[k] for k in
                                          ("seconds", "peak_memory_mb", "ratio_to_reference")}
    row["dedup_time_ratio"] = round(jobs["report_id"]["seconds"] / jobs["none"]["seconds"], 2)
    return row


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def estimate_plan(fmt: str, folder: str, out: str, users: int, store: str | None,
                  repeat: int = 1) -> dict:
    """``ldpflow estimate --engine local`` (process start to exit), the median of
    ``repeat`` runs (wall seconds, CPU seconds of user and system, peak memory, and the
    load average at the start of each): ``--dedup none`` when ``store`` is None, else the
    default dedup with ``--dedup_store STORE``."""
    flags = ["--dedup=none"] if store is None else ["--dedup=report_id",
                                                    f"--dedup_store={store}"]
    runs = []
    for _ in range(max(1, repeat)):
        load = os.getloadavg()[0]
        cpu = _children_cpu()
        seconds, peak, _ = run_timed([BIN, "estimate", f"--input={folder}/reports-*",
                                      "--methods=base", f"--output={out}", "--engine=local",
                                      *flags])
        runs.append((seconds, _children_cpu() - cpu, peak, load))
        with open(os.path.join(out, "estimates.json"), encoding="utf-8") as f:
            document = json.load(f)
        if document["reports_estimated"] != users:
            raise SystemExit(f"estimated {document['reports_estimated']} of {users} reports")
        shutil.rmtree(out, ignore_errors=True)
    seconds = statistics.median(r[0] for r in runs)
    return emit(step="estimate_plan", engine="local", format=fmt, records=users,
                dedup="none" if store is None else "report_id", dedup_store=store,
                seconds=round(seconds, 2),
                cpu_s=round(statistics.median(r[1] for r in runs), 2),
                peak_memory_mb=round(max(r[2] for r in runs)),
                records_per_s=round(users / seconds),
                runs=[{"seconds": round(w, 2), "cpu_s": round(c, 2), "load": round(lo, 2)}
                      for w, c, _, lo in runs])


def _plan_row(fmt: str, users: int, jobs: dict) -> dict:
    row = {"format": fmt, "reports": users, "engine": "local"}
    for name, job in jobs.items():
        row[name] = {k: job[k] for k in ("seconds", "cpu_s", "peak_memory_mb")}
    none = jobs["dedup_none"]
    for store in ("memory", "disk"):
        job = jobs[f"dedup_{store}"]
        row[f"dedup_{store}_time_ratio"] = round(job["seconds"] / none["seconds"], 2)
        row[f"dedup_{store}_cpu_ratio"] = round(job["cpu_s"] / max(none["cpu_s"], 1e-9), 2)
    return row


def _existing(root: str | None, fmt: str, users: int) -> str | None:
    if root is None:
        return None
    for name in (f"reports-{fmt}-{users}", f"p{users}" if fmt == "parquet" else ""):
        if name and os.path.isdir(os.path.join(root, name)):
            return os.path.join(root, name)
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="2000000,20000000,200000000",
                        help="comma-separated report counts")
    parser.add_argument("--formats", default="parquet,avro,json")
    parser.add_argument("--max_json", type=int, default=20_000_000,
                        help="the largest JSON-lines input (they are ~100 bytes a report)")
    parser.add_argument("--max_avro", type=int, default=200_000_000)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per measurement (the median is reported)")
    parser.add_argument("--keep", action="store_true", help="keep the inputs")
    parser.add_argument("--engines", default="beam",
                        help="comma-separated: beam (the Beam job, both dedup modes), local "
                             "(the job plan: dedup none, in memory and on disk)")
    parser.add_argument("--input", default=None,
                        help="a folder of reports made before (kept)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    formats = [f for f in args.formats.split(",") if f]
    unknown = sorted(set(formats) - set(REFERENCE))
    if unknown:
        parser.error(f"unknown formats {unknown}; choose from {sorted(REFERENCE)}")
    limits = {"json": args.max_json, "avro": args.max_avro}
    engines = {e for e in args.engines.split(",") if e}
    workdir = args.workdir or tempfile.mkdtemp(prefix="ldpflow-scale-")
    table = []
    for users in sizes:
        for fmt in formats:
            if users > limits.get(fmt, users):
                continue
            folder = _existing(args.input, fmt, users)
            simulated = {}
            if folder is None:
                folder = os.path.join(workdir, f"reports-{fmt}-{users}")
                simulated = simulate(fmt, users, folder, shards=SHARDS)
                if simulated:
                    emit(step="simulate", format=fmt, users=users, **simulated)
            if "beam" in engines:
                read = bare(REFERENCE[fmt], folder, args.repeat)
                jobs = {}
                for dedup in ("none", "report_id"):
                    out = os.path.join(workdir, f"estimate-{fmt}-{users}-{dedup}")
                    jobs[dedup] = estimate(fmt, folder, out, users, read["records_per_s"],
                                           dedup, 1, args.repeat)
                    shutil.rmtree(out, ignore_errors=True)
                table.append(_row(fmt, users, simulated, read, jobs))
            if "local" in engines:
                jobs = {}
                for name, store in (("dedup_none", None), ("dedup_memory", "memory"),
                                    ("dedup_disk", "disk")):
                    out = os.path.join(workdir, f"plan-{fmt}-{users}-{name}")
                    jobs[name] = estimate_plan(fmt, folder, out, users, store, args.repeat)
                    shutil.rmtree(out, ignore_errors=True)
                table.append(_plan_row(fmt, users, jobs))
            if not args.keep and folder.startswith(workdir):
                shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps({"step": "table", "rows": table}), flush=True)


if __name__ == "__main__":
    main()
