"""Start-up cost of the ``ldpflow`` command: help, usage errors and a job's fixed cost.

    python benchmarks/startup.py [--runs 5] [--job_runs 3] [--reports 1000]

Each case is the command run in a fresh process (``python -m ldpflow.pipelines.cli ...``),
timed by wall clock and by CPU time (user + system, which a loaded machine inflates less);
the medians of ``--runs`` runs are reported (``--job_runs`` for the jobs), with every run's
wall time. The jobs estimate ``--reports`` OLH reports (d = 1024, one
Avro file) with ``--engine local`` (the job plan, no Beam) and ``--engine beam`` (Beam's
in-process FnApiRunner): with ``--methods base`` the run is almost all fixed cost (imports,
flag checks, pipeline construction, runner start, writing the outputs), with the default
methods the post-processing and bootstrap intervals of a 1,024-value domain are added. The
machine's load average (1 minute) before and after is printed too: on a loaded machine the
times grow with it. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def _run(argv: list[str], expect: int) -> tuple[float, float]:
    """Wall-clock and CPU (user + system) seconds of one run in a fresh process."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_env(), cwd=_env.root)
    _, err = proc.communicate()
    elapsed = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime - _run.cpu_so_far
    _run.cpu_so_far = usage.ru_utime + usage.ru_stime
    if proc.returncode != expect:
        raise RuntimeError(f"{argv}: exit {proc.returncode}, expected {expect}: "
                           f"{err.decode()[-2000:]}")
    return elapsed, cpu


_run.cpu_so_far = 0.0


def _case(argv: list[str], runs: int, expect: int = 0) -> dict:
    times = [_run(argv, expect) for _ in range(runs)]
    return {"median_s": round(statistics.median(t for t, _ in times), 3),
            "median_cpu_s": round(statistics.median(c for _, c in times), 3),
            "runs_s": [round(t, 3) for t, _ in times]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--job_runs", type=int, default=3)
    parser.add_argument("--reports", type=int, default=1000)
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
        given = [f"--input={reports}/*.avro", f"--output={tmp}/estimates"]
        cases = {
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
        for engine in ("local", "beam"):
            for methods in ("base", None):
                flags = [*given, f"--engine={engine}"]
                if methods:
                    flags.append(f"--methods={methods}")
                name = f"job: estimate --engine {engine}" + (
                    " --methods base" if methods else " (default methods)")
                results[name] = _case([*cli, "estimate", *flags], args.job_runs)
    print(json.dumps({"benchmark": "startup", "repo": _env.root, "reports": args.reports,
                      "python": sys.version.split()[0], "cpus": os.cpu_count(),
                      "load_average_1m": {"before": round(load_before, 2),
                                          "after": round(os.getloadavg()[0], 2)},
                      "results": results}, indent=2))


if __name__ == "__main__":
    main()
