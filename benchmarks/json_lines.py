"""JSON lines against ``pyarrow.json.read_json``: the wire layer's read, and the estimate job.

    python benchmarks/json_lines.py [--users 10000000] [--input DIR] [--workdir DIR]
        [--repeat 3] [--skip read_one_thread,estimate] [--engine auto]

OLH reports, d = 1024, epsilon = 1, written by ``ldpflow simulate --format json`` (16
shards; or the ``reports-*.jsonl`` of ``--input``). Three measurements, each in its own
process and repeated ``--repeat`` times in turn (reference, read, job; so that a change in
the machine's load touches all three alike), the median reported:

* ``reference``: ``pyarrow.json.read_json`` of every file (type inference, all columns),
  the read call alone;
* ``read``: :func:`ldpflow.wire.formats.read_reports` of every file (ranges, chunks, the
  parse and its checks: the batches the job counts), the read alone;
* ``read_one_thread``: the same read with its stages (read and measure, parse, check) run
  one after the other in the caller's thread, as a loop (what the stages on threads gain);
* ``estimate``: ``ldpflow estimate --dedup none --engine ENGINE`` end to end (start to
  exit; ``--engine``: auto, the job's default, which runs these files on the local engine;
  or beam, on its in-process runner).

Each prints one JSON object, with ``ratio_to_reference`` (records/s over the reference's)
and ``cpu_ratio_to_reference`` (the same of CPU seconds, all threads: steadier than wall
time on a loaded machine), and a last object ``summary`` with the ratios (the target for
the job: >= 0.6) and the load average (each step also gives the load average when it ended).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipeline import BIN, emit, run_timed, simulate  # noqa: E402

_TIMED = ("import glob, time\n{setup}\nt0 = time.perf_counter(); c0 = time.process_time()\n"
          "{body}\nprint(n, time.perf_counter() - t0, time.process_time() - c0)")
REFERENCE = ("import pyarrow.json as pj", "n = sum(pj.read_json(p).num_rows "
             "for p in sorted(glob.glob('{dir}/*.jsonl')))")
READ = ("from ldpflow.wire import formats",
        "n = 0\n"
        "for p in sorted(glob.glob('{dir}/*.jsonl')):\n"
        "    with open(p, 'rb') as f:\n"
        "        n += sum(c.reports for c in formats.read_reports(f, 'json', source=p))")
READ_ONE_THREAD = ("from ldpflow.wire import formats, jsonl, reading\n"
                   "jsonl.read_ahead = reading.read_ahead = lambda items: items", READ[1])


def _child(code: tuple[str, str], folder: str) -> tuple[int, float, float]:
    setup, body = code
    text = _TIMED.format(setup=setup, body=body.format(dir=folder))
    _, _, out = run_timed([sys.executable, "-c", text])
    n, seconds, cpu = out.split()
    return int(n), float(seconds), float(cpu)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=10_000_000)
    parser.add_argument("--input", default=None, help="a folder of reports-*.jsonl")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip", default="",
                        help="comma-separated: read,read_one_thread,estimate")
    parser.add_argument("--engine", default="auto",
                        choices=("auto", "beam", "local", "dask", "spark"))
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    workdir = args.workdir or tempfile.mkdtemp(prefix="ldpflow-bench-json-")
    folder = args.input or os.path.join(workdir, f"reports-json-{args.users}")
    if not args.input:
        figures = simulate("json", args.users, folder, shards=16)
        if figures:
            emit(step="simulate", format="json", users=args.users, **figures)
    files = sorted(glob.glob(os.path.join(folder, "*.jsonl")))
    size = sum(os.path.getsize(f) for f in files)
    runs: dict[str, list[tuple]] = {"reference": [], "read": [], "read_one_thread": [],
                                    "estimate": []}
    loads: dict[str, float] = {}
    records = None
    for _ in range(args.repeat):
        n, seconds, cpu = _child(REFERENCE, folder)
        records = n
        runs["reference"].append((seconds, cpu))
        loads["reference"] = os.getloadavg()[0]
        for step, code in (("read", READ), ("read_one_thread", READ_ONE_THREAD)):
            if step in skip:
                continue
            n, seconds, cpu = _child(code, folder)
            if n != records:
                raise SystemExit(f"the {step} gave {n} reports of {records}")
            runs[step].append((seconds, cpu))
            loads[step] = os.getloadavg()[0]
        if "estimate" not in skip:
            out = os.path.join(workdir, "estimate")
            before = _children_cpu()
            seconds, memory, _ = run_timed([BIN, "estimate", f"--input={folder}/reports-*",
                                            "--methods=base", f"--output={out}",
                                            "--dedup=none", f"--engine={args.engine}",
                                            "--quiet"])
            cpu = _children_cpu() - before
            with open(os.path.join(out, "estimates.json"), encoding="utf-8") as f:
                estimated = json.load(f)["reports_estimated"]
            if estimated != records:
                raise SystemExit(f"estimated {estimated} of {records} reports")
            runs["estimate"].append((seconds, cpu, memory))
            loads["estimate"] = os.getloadavg()[0]
    reference = statistics.median(t[0] for t in runs["reference"])
    reference_cpu = statistics.median(t[1] for t in runs["reference"])
    summary, summary_cpu = {}, {}
    for step, timings in runs.items():
        if not timings:
            continue
        seconds = statistics.median(t[0] for t in timings)
        cpu = statistics.median(t[1] for t in timings)
        extra = ({"peak_memory_mb": round(max(t[2] for t in timings))} if step == "estimate"
                 else {})
        emit(step=step, records=records, bytes=size, seconds=round(seconds, 2),
             runs=[round(t[0], 2) for t in timings], records_per_s=round(records / seconds),
             ratio_to_reference=round(reference / seconds, 3), cpu_seconds=round(cpu, 2),
             cpu_ratio_to_reference=round(reference_cpu / cpu, 3),
             load_average=round(loads[step], 1), **extra)
        summary[step] = round(reference / seconds, 3)
        summary_cpu[step] = round(reference_cpu / cpu, 3)
    emit(step="summary", records=records, engine=args.engine, ratio_to_reference=summary,
         cpu_ratio_to_reference=summary_cpu, target_estimate=0.6,
         load_average=[round(x, 1) for x in os.getloadavg()])


def _children_cpu() -> float:
    """CPU seconds (user and system) of the child processes waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
