"""Start-up cost of the ``ldpflow`` command: help, usage errors and a job's fixed cost.

    python benchmarks/startup.py [--runs 5] [--job_runs 3] [--reports 1000] [--jobs_only]

Each case is the command run in a fresh process (``python -m ldpflow.pipelines.cli ...``),
timed by wall clock and by CPU time (user + system, which a loaded machine inflates less);
the medians of ``--runs`` runs are reported (``--job_runs`` for the jobs), with every run's
wall time. The jobs estimate ``--reports`` OLH reports (d = 1024, one
Avro file) with the default engine (no ``--engine`` flag: what a user gets), ``--engine
local`` (the job plan, no Beam) and ``--engine beam`` (Beam's in-process FnApiRunner): with
``--methods base`` the run is almost all fixed cost (imports, flag checks, pipeline
construction, runner start, writing the outputs), with the default methods the
post-processing and bootstrap intervals of a 1,024-value domain are added; and find the heavy
hitters of ``--reports`` PEM reports (32-bit values, k = 8, one Avro file) with the default
engine, ``--engine local`` and ``--engine beam``. ``--jobs_only`` leaves out the help and
usage-error cases. The
machine's load average (1 minute) before and after is printed too: on a loaded machine the
times grow with it. Prints one JSON document.
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = _env.root + os.pathsep + env.get("PYTHONPATH", "")
    return env


_env.root = ROOT


def _run(argv: list[str], expect: int) -> tuple[float, float, float]:
    """Wall-clock seconds, CPU (user + system) seconds and peak resident memory (MB) of one
    run in a fresh process (its own resource usage, ``os.wait4``)."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.DEVNULL,
                                stderr=err, env=_env(), cwd=_env.root)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != expect:
            err.seek(0)
            raise RuntimeError(f"{argv}: exit {proc.returncode}, expected {expect}: "
                               f"{err.read().decode()[-2000:]}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def _case(argv: list[str], runs: int, expect: int = 0) -> dict:
    times = [_run(argv, expect) for _ in range(runs)]
    return {"median_s": round(statistics.median(t for t, _, _ in times), 3),
            "median_cpu_s": round(statistics.median(c for _, c, _ in times), 3),
            "median_peak_mb": round(statistics.median(m for _, _, m in times), 1),
            "runs_s": [round(t, 3) for t, _, _ in times],
            "load_average_1m": round(os.getloadavg()[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--job_runs", type=int, default=3)
    parser.add_argument("--reports", type=int, default=1000)
    parser.add_argument("--jobs_only", action="store_true",
                        help="Time the jobs alone (not the help and usage errors).")
    parser.add_argument("--repo", default=ROOT,
                        help="The source tree to time (default: this one), e.g. an export "
                             "of an earlier commit, for a comparison on the same machine.")
    args = parser.parse_args()
    _env.root = os.path.abspath(args.repo)
    cli = ["-m", "ldpflow.pipelines.cli"]
    load_before = os.getloadavg()[0]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        reports = os.path.join(tmp, "reports")
        _run([*cli, "simulate", "--oracle=olh", "--epsilon=1", "--domain_size=1024",
              f"--users={args.reports}", "--shards=1", f"--output={reports}"], 0)
        pem = os.path.join(tmp, "pem")
        _run([*cli, "simulate", "--oracle=pem", "--epsilon=4", "--bits=32", "--k=8",
              "--domain_size=1000", f"--users={args.reports}", "--shards=1",
              f"--output={pem}"], 0)
        given = [f"--input={reports}/*.avro", f"--output={tmp}/estimates"]
        cases = {} if args.jobs_only else {
            "python -c pass": (["-c", "pass"], 0),
            "import apache_beam": (["-c", "import apache_beam"], 0),
            "ldpflow --help": ([*cli, "--help"], 0),
            "ldpflow estimate --help": ([*cli, "estimate", "--help"], 0),
            "ldpflow simulate --help": ([*cli, "simulate", "--help"], 0),
            "ldpflow heavy-hitters --help": ([*cli, "heavy-hitters", "--help"], 0),
            "usage: estimate misspelt flag": ([*cli, "estimate", *given, "--method=base"], 2),
            "usage: estimate missing --output": ([*cli, "estimate", given[0]], 2),
            "usage: estimate misspelt Beam flag": ([*cli, "estimate", *given,
                                                    "--runer=DirectRunner"], 2),
            "usage: estimate unknown flag": ([*cli, "estimate", *given, "--bogus"], 2),
            "usage: estimate misspelt Beam flag (temp_location)": (
                [*cli, "estimate", *given, "--temp_locaton=/tmp/t"], 2),
            "usage: simulate bad value": ([*cli, "simulate", "--oracle=olh", "--epsilon=x",
                                           "--output=x"], 2),
            "usage: audit misspelt flag": ([*cli, "audit", "--orcale=olh"], 2),
            "usage: report missing --output": ([*cli, "report", "--input=x"], 2),
        }
        for name, (argv, expect) in cases.items():
            results[name] = _case(argv, args.runs, expect)
        for engine in (None, "local", "beam"):
            chosen = [] if engine is None else [f"--engine={engine}"]
            said = " (default engine)" if engine is None else f" --engine {engine}"
            for methods in ("base", None):
                flags = [*given, *chosen]
                if methods:
                    flags.append(f"--methods={methods}")
                name = f"job: estimate{said}" + (
                    " --methods base" if methods else " (default methods)")
                results[name] = _case([*cli, "estimate", *flags], args.job_runs)
            results[f"job: heavy-hitters{said}"] = _case(
                [*cli, "heavy-hitters", f"--input={pem}/*.avro", f"--output={tmp}/hh",
                 *chosen], args.job_runs)
    print(json.dumps({"benchmark": "startup", "repo": _env.root, "reports": args.reports,
                      "python": sys.version.split()[0], "cpus": os.cpu_count(),
                      "load_average_1m": {"before": round(load_before, 2),
                                          "after": round(os.getloadavg()[0], 2)},
                      "results": results}, indent=2))


if __name__ == "__main__":
    main()
