"""``ldpflow demo``: the main job on built-in data.

Simulates users on a Zipf(1.1) population, writes their perturbed reports as Avro files
(``ldpflow simulate``), estimates on Beam (``ldpflow estimate``), prints the top values'
true and estimated frequencies per post-processing method, plots them and writes
``OUTPUT/report.html`` (``ldpflow report``)::

    ldpflow demo [--oracle olh] [--users 1000000] [--epsilon 1.0] [--output demo-output]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

import numpy as np

from ldpflow.core.oracles import registry
from ldpflow.pipelines.usage import HelpFormatter

__all__ = ["run"]

_LOGGER = logging.getLogger(__name__)
_SUMMARY = ("The main job on built-in data: simulate users, estimate their frequencies on "
            "Beam, print and plot the top values.")
TABLE_METHODS = ("base", "base-cut", "norm-sub", "power-ns")


def _plot(path: str, truth: np.ndarray, estimates: dict[str, list], top: np.ndarray,
          title: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _LOGGER.warning("matplotlib is not installed (pip install ldpflow[plot]): no plot")
        return False
    fig, ax = plt.subplots(figsize=(9, 4.5))
    x = np.arange(top.size)
    ax.plot(x, truth[top], "k-", lw=2.5, label="true")
    for method, freqs in estimates.items():
        ax.plot(x, np.asarray(freqs)[top], ".-", lw=1, ms=4, label=method)
    ax.set_xlabel("value, by true rank")
    ax.set_ylabel("frequency")
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set_title(title)
    ax.legend(ncol=4, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ldpflow demo", description=_SUMMARY,
                                     formatter_class=HelpFormatter, allow_abbrev=False)
    parser.add_argument("--oracle", choices=sorted(registry.ORACLES), default="olh")
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--domain_size", type=int, default=1024)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--output", default="demo-output")
    args = parser.parse_args(argv)
    from ldpflow.pipelines import estimate, simulate

    reports_dir = os.path.join(args.output, "reports")
    estimates_dir = os.path.join(args.output, "estimates")
    started = time.perf_counter()
    simulate.run([
        "--oracle", args.oracle, "--epsilon", str(args.epsilon),
        "--domain_size", str(args.domain_size), "--users", str(args.users),
        "--distribution", "zipf:1.1", "--seed", str(args.seed), "--output", reports_dir,
    ])
    simulated = time.perf_counter()
    methods = ",".join(dict.fromkeys(("base", "base-pos", "base-cut", "norm", "norm-sub",
                                      "mle-apx", "power-ns")))
    estimate.run([
        f"--input={reports_dir}/reports-*.avro", f"--output={estimates_dir}",
        f"--methods={methods}",
    ])
    with open(os.path.join(estimates_dir, "estimates.json"), encoding="utf-8") as f:
        document = json.load(f)
    estimated = time.perf_counter()
    with open(os.path.join(reports_dir, "truth.json"), encoding="utf-8") as f:
        counts = np.asarray(json.load(f)["counts"], dtype=float)
    truth = counts / counts.sum()
    result = document["results"][0]
    top = np.argsort(-truth, kind="stable")[: args.top]
    print(f"\n{args.users} users, Zipf(1.1) over {args.domain_size} values, {args.oracle}, "
          f"epsilon = {args.epsilon}: {result['n']} reports estimated, "
          f"{result['dead_letters']} dead letters")
    print("value     true  " + "  ".join(f"{m:>9}" for m in TABLE_METHODS))
    for v in top:
        cells = "  ".join(f"{result['estimates'][m][v]:9.5f}" for m in TABLE_METHODS)
        print(f"{v:5d}  {truth[v]:7.5f}  {cells}")
    print("\nfull-domain MSE per method:")
    for method, freqs in result["estimates"].items():
        mse = float(np.mean((np.asarray(freqs) - truth) ** 2))
        print(f"  {method:9s} {mse:.3e}")
    plot = os.path.join(args.output, "top_values.png")
    shown = np.argsort(-truth, kind="stable")[:50]
    if _plot(plot, truth, {m: result["estimates"][m] for m in TABLE_METHODS}, shown,
             f"{args.oracle}, epsilon={args.epsilon}, n={args.users}: top 50 values"):
        print(f"\nplot: {plot}")
    page = os.path.join(args.output, "report.html")
    from ldpflow.pipelines import report

    report.run(["--input", estimates_dir, "--truth", os.path.join(reports_dir, "truth.json"),
                "--output", page, "--title", f"ldpflow demo: {args.oracle}, epsilon "
                                             f"{args.epsilon}, {args.users} users"])
    print(f"estimates: {estimates_dir}/estimates.json  (simulate {simulated - started:.1f}s, "
          f"estimate {estimated - simulated:.1f}s)")
    return 0
