"""Plots and Markdown tables of ``benchmarks/heavy_hitters_eval.py`` output.

    python benchmarks/heavy_hitters_plots.py RUNS.jsonl [MORE.jsonl ...] \\
        [--figures docs/figures] [--prefix heavy_hitters]

Writes ``FIGURES/PREFIX_vs_epsilon.png`` (F1 and NCR against epsilon at ``--epsilon_k``,
one panel per dataset), ``FIGURES/PREFIX_vs_k.png`` (against ``k`` at epsilon 4) and
``FIGURES/PREFIX_speed.png`` (server CPU seconds against epsilon), and prints one JSON
object with the Markdown tables (``{"tables": {...}}``; means over seeds).
"""

from __future__ import annotations

import argparse
import collections
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ("pem", "pem-paper", "pem-optimal-g", "spm", "mcm", "treehist", "sfp")
COLORS = dict(zip(ORDER, ("C0", "C1", "C7", "C2", "C3", "C4", "C5"), strict=True))
METRICS = ("f1", "ncr", "precision", "recall", "server_cpu_seconds", "server_seconds")


def load(paths):
    runs = []
    for path in paths:
        with open(path) as f:
            runs += [json.loads(line) for line in f if line.startswith("{")]
    return runs


def means(runs):
    """``{(dataset, protocol, epsilon, k): {metric: mean, "seeds": count}}``."""
    groups = collections.defaultdict(list)
    for run in runs:
        groups[(run["dataset"], run["protocol"], run["epsilon"], run["k"])].append(run)
    out = {}
    for key, rows in groups.items():
        out[key] = {m: sum(r[m] for r in rows) / len(rows) for m in METRICS}
        out[key]["seeds"] = len(rows)
    return out


def _panel(ax, points, x_of, title, metric):
    by_protocol = collections.defaultdict(list)
    for key, value in points.items():
        by_protocol[key[1]].append((x_of(key), value[metric]))
    for protocol in ORDER:
        if protocol in by_protocol:
            xs, ys = zip(*sorted(by_protocol[protocol]), strict=True)
            ax.plot(xs, ys, marker="o", label=protocol, color=COLORS[protocol])
    ax.set_title(title)
    ax.grid(alpha=0.3)


def figure(avg, select, x_of, xlabel, path, metrics=("f1", "ncr"), log_y=False):
    datasets = sorted({key[0] for key in avg if select(key)})
    if not datasets:
        return
    fig, axes = plt.subplots(len(metrics), len(datasets), squeeze=False,
                             figsize=(4.2 * len(datasets), 3.2 * len(metrics)))
    for j, dataset in enumerate(datasets):
        points = {key: v for key, v in avg.items() if key[0] == dataset and select(key)}
        for i, metric in enumerate(metrics):
            ax = axes[i][j]
            _panel(ax, points, x_of, f"{dataset}: {metric}", metric)
            ax.set_xlabel(xlabel)
            if log_y:
                ax.set_yscale("log")
            elif metric in ("f1", "ncr"):
                ax.set_ylim(-0.02, 1.02)
    handles, labels = {}, {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    labels = [p for p in ORDER if p in handles]
    fig.legend([handles[p] for p in labels], labels, loc="lower center", ncol=len(labels),
               fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(avg, select):
    rows = ["| dataset | protocol | ε | k | F1 | NCR | precision | recall | server CPU s | "
            "server wall s | seeds |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted((k for k in avg if select(k)),
                      key=lambda k: (k[0], k[2], k[3], ORDER.index(k[1]))):
        v = avg[key]
        rows.append(f"| {key[0]} | {key[1]} | {key[2]:g} | {key[3]} | {v['f1']:.3f} | "
                    f"{v['ncr']:.3f} | {v['precision']:.3f} | {v['recall']:.3f} | "
                    f"{v['server_cpu_seconds']:.1f} | {v['server_seconds']:.1f} | "
                    f"{v['seeds']} |")
    return "\n".join(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--figures", default="docs/figures")
    parser.add_argument("--prefix", default="heavy_hitters")
    parser.add_argument("--epsilon_k", type=int, default=32,
                        help="The k of the epsilon sweep (figures and table).")
    args = parser.parse_args(argv)
    avg = means(load(args.runs))
    os.makedirs(args.figures, exist_ok=True)
    top_k = args.epsilon_k
    base = os.path.join(args.figures, args.prefix)
    figure(avg, lambda key: key[3] == top_k, lambda key: key[2], "epsilon",
           f"{base}_vs_epsilon.png")
    figure(avg, lambda key: key[2] == 4.0, lambda key: key[3], "k", f"{base}_vs_k.png")
    figure(avg, lambda key: key[3] == top_k, lambda key: key[2], "epsilon",
           f"{base}_speed.png", metrics=("server_cpu_seconds",), log_y=True)
    print(json.dumps({"tables": {
        "vs_epsilon": table(avg, lambda key: key[3] == top_k),
        "vs_k": table(avg, lambda key: key[2] == 4.0),
    }}))


if __name__ == "__main__":
    main()
