"""How cost grows with the input: ``ldpflow simulate`` and ``ldpflow estimate`` (both dedup
modes) from 2*10^6 to 2*10^8 reports, per format, with peak memory.

    python benchmarks/scale.py [--sizes 2000000,20000000,200000000]
        [--formats parquet,avro,json] [--max_json 20000000] [--max_avro 200000000]
        [--workdir DIR] [--repeat 1] [--keep]

OLH reports, d = 1024, epsilon = 1, 16 shards, one process (the table of
``docs/pipeline.md``). Each step is a separate process, timed from its start to its exit,
with the peak memory (PSS) of its whole process tree; see ``benchmarks/pipeline.py``, whose
measuring functions this uses. One JSON object per step on stdout:

* ``simulate``: seconds, peak memory and bytes written;
* ``bare``: the reference read of the payload columns (``pyarrow.parquet.read_table``),
  ``polars.read_avro`` or ``pyarrow.json.read_json`` of the same files;
* ``estimate``: ``--dedup none`` and the default deduplication, with the ratio of its
  records/s to the reference read's;

and last one ``table`` object: per format and size, the seconds and peak memory of each
step, and the price of deduplication (its time over the ``--dedup none`` job's).
JSON lines at 2*10^8 are about 20 GB, so ``--max_json`` leaves that size out by default.
The inputs of a size are removed after it unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipeline import bare, emit, estimate, simulate  # noqa: E402

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
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    formats = [f for f in args.formats.split(",") if f]
    unknown = sorted(set(formats) - set(REFERENCE))
    if unknown:
        parser.error(f"unknown formats {unknown}; choose from {sorted(REFERENCE)}")
    limits = {"json": args.max_json, "avro": args.max_avro}
    workdir = args.workdir or tempfile.mkdtemp(prefix="ldpflow-scale-")
    table = []
    for users in sizes:
        for fmt in formats:
            if users > limits.get(fmt, users):
                continue
            folder = os.path.join(workdir, f"reports-{fmt}-{users}")
            simulated = simulate(fmt, users, folder, shards=SHARDS)
            if simulated:
                emit(step="simulate", format=fmt, users=users, **simulated)
            read = bare(REFERENCE[fmt], folder, args.repeat)
            jobs = {}
            for dedup in ("none", "report_id"):
                out = os.path.join(workdir, f"estimate-{fmt}-{users}-{dedup}")
                jobs[dedup] = estimate(fmt, folder, out, users, read["records_per_s"], dedup,
                                       1, args.repeat)
                shutil.rmtree(out, ignore_errors=True)
            table.append(_row(fmt, users, simulated, read, jobs))
            if not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps({"step": "table", "rows": table}), flush=True)


if __name__ == "__main__":
    main()
