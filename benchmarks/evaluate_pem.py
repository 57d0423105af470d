"""PEM evaluation: F1 and NCR of the identified top-k vs epsilon, vs k and vs eta, and
PEM against the PEM paper's baselines SPM and MCM vs epsilon.

    python benchmarks/evaluate_pem.py            # defaults below, about 6 minutes here
    python benchmarks/evaluate_pem.py --quick    # 10^5 users, one repetition, seconds

Synthetic data as in Sec. VI of Wang, Li, Jha, "Locally Differentially Private Heavy
Hitter Identification" (the PEM paper): ``--users`` (10^6) users whose values are drawn
from ``--num_distinct`` (10^5) distinct random ``--bits``-bit (64) values by Zipf
(``--exponent`` 1.1) over their ranks (:func:`ldpflow.core.heavy_hitters.sample_values`).
Every run is the core :class:`~ldpflow.core.heavy_hitters.PrefixExtendingMethod` with the
paper's defaults (query limit ``Q = 2**20``, ``gamma = ceil(log2 k)``, the largest ``eta``
within ``Q``, equal groups by a hash of the user id) unless the sweep sets ``eta``; the Beam
pipeline gives exactly the same answer on the same reports (tests/pipelines). Scores are
against the true top-k of the sampled population.

Sweeps (each point repeated ``--repetitions`` times, 3 by default):

* ``epsilon``: epsilon in 0.5, 1, ..., 5 at k = 16 and 32;
* ``k``: k in 4, 8, 16, 24, 32, 48, 64 at epsilon = 4 and 2;
* ``eta``: eta in 2, 4, ..., 14, 15 at k = 32 and epsilon = 0.9 (the PEM paper's setting), 2
  and 4 (where F1 is neither near 0 nor near 1 at eta = 15).

The baselines (:mod:`ldpflow.core.heavy_hitters.spm` and ``mcm``: SPM and MCM with their default
parameters and the same ``Q``) run the ``epsilon`` sweep's points (same k, same epsilons)
on the same populations, in the first ``--baseline_repetitions`` (2) repetitions only, to keep
the default run near 6 minutes on 2 cores. Their points come after PEM's in the point list,
so PEM's per-point seeds are unchanged by them.

Repetition ``r`` draws its population from seed ``--seed + r`` (every point of a repetition
sees the same population) and each point perturbs with its own seed derived from
``(--seed, r, point)``. Writes ``docs/figures/pem_vs_epsilon.png``, ``pem_vs_k.png``,
``pem_vs_eta.png``, ``pem_results.json`` (every run) and, between the markers
``<!-- pem-results:start -->`` / ``<!-- pem-results:end -->`` of ``docs/heavy_hitters.md``,
the table of means and standard deviations over the repetitions. The column ``f_k/sigma``
is the true frequency of the k-th value over the standard deviation of one estimate in a
group (``n/g`` users): below 3 to 4, the k-th value is rarely distinguishable from the
``k 2**eta`` candidates' noise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import time

import numpy as np

from ldpflow.core import heavy_hitters as hh
from ldpflow.core.heavy_hitters import MultipleChannelMethod, SegmentPairsMethod

ROOT = pathlib.Path(__file__).resolve().parents[1]
BASELINES = {"spm": SegmentPairsMethod, "mcm": MultipleChannelMethod}
START, END = "<!-- pem-results:start -->", "<!-- pem-results:end -->"


def sweeps(quick: bool) -> list[dict]:
    """The evaluation points: dicts of sweep, epsilon, k and eta (None: the default)."""
    points = []
    epsilons = [0.5, 1, 2, 3, 4, 5] if quick else [0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5]
    for k in (16, 32):
        points += [{"sweep": "epsilon", "epsilon": e, "k": k, "eta": None} for e in epsilons]
    ks = [4, 16, 32, 64] if quick else [4, 8, 16, 24, 32, 48, 64]
    for epsilon in (4.0, 2.0):
        points += [{"sweep": "k", "epsilon": epsilon, "k": k, "eta": None} for k in ks]
    etas = [2, 6, 10, 15] if quick else [2, 4, 6, 8, 10, 12, 14, 15]
    for epsilon in (0.9, 2.0, 4.0):
        points += [{"sweep": "eta", "epsilon": epsilon, "k": 32, "eta": eta} for eta in etas]
    points = [{**p, "method": "pem"} for p in points]
    for method in BASELINES:  # after PEM's points: PEM's per-point seeds do not move
        for k in (16, 32):
            points += [{"sweep": "epsilon", "method": method, "epsilon": e, "k": k, "eta": None}
                       for e in epsilons]
    return points


def run_baseline(point, values, ids, truth, args, rng) -> dict:
    cls = BASELINES[point["method"]]
    model = cls(top_k=point["k"], value_bits=args.bits, epsilon=float(point["epsilon"]),
                query_limit=args.query_limit)
    start = time.perf_counter()
    result = model.identify(model.perturb(values, ids, rng))
    seconds = time.perf_counter() - start
    scores = hh.score_top_k(result.values, truth, model.top_k)
    return {
        **point, "gamma": None, "groups": len(result.group_sizes),
        "hash_range": model.hash_range, "f1": scores["f1"], "ncr": scores["ncr"],
        "precision": scores["precision"], "recall": scores["recall"], "kth_snr": float("nan"),
        "max_candidates": max(result.pass_candidates),
        "final_candidates": result.pass_candidates[-1], "seconds": seconds,
    }


def run_point(point, values, ids, truth, args, rng) -> dict:
    if point.get("method", "pem") != "pem":
        return run_baseline(point, values, ids, truth, args, rng)
    pem = hh.PrefixExtendingMethod(top_k=point["k"], value_bits=args.bits,
                                   epsilon=float(point["epsilon"]),
                                   query_limit=args.query_limit, step_bits=point["eta"])
    start = time.perf_counter()
    result = pem.identify(pem.perturb(values, ids, rng))
    seconds = time.perf_counter() - start
    scores = hh.score_top_k(result.values, truth, pem.top_k)
    sigma = math.sqrt(pem.variance(values.size // pem.num_groups))
    return {
        **point, "eta": pem.step_bits, "gamma": pem.start_bits, "groups": pem.num_groups,
        "hash_range": pem.hash_range, "f1": scores["f1"], "ncr": scores["ncr"],
        "precision": scores["precision"], "recall": scores["recall"],
        "kth_snr": truth[pem.top_k - 1]["count"] / values.size / sigma,
        "max_candidates": max(result.pass_candidates), "seconds": seconds,
    }


def summarise(runs: list[dict]) -> list[dict]:
    rows: dict[tuple, list[dict]] = {}
    for run in runs:
        key = (run.get("method", "pem"), run["sweep"], run["epsilon"], run["k"], run["eta"])
        rows.setdefault(key, []).append(run)
    out = []
    for (method, sweep, epsilon, k, eta), group in rows.items():
        def stat(name, group=group):
            vals = np.array([g[name] for g in group], dtype=float)
            return float(vals.mean()), float(vals.std(ddof=1)) if vals.size > 1 else 0.0

        out.append({"method": method, "sweep": sweep, "epsilon": epsilon, "k": k, "eta": eta,
                    "gamma": group[0]["gamma"], "groups": group[0]["groups"],
                    "f1": stat("f1"), "ncr": stat("ncr"), "kth_snr": stat("kth_snr")[0],
                    "seconds": stat("seconds")[0], "repetitions": len(group),
                    "max_candidates": max(g["max_candidates"] for g in group)})
    return out


def table(rows: list[dict], args) -> str:
    lines = [f"n = {args.users:,} users, Zipf({args.exponent}) over {args.num_distinct:,} "
             f"distinct {args.bits}-bit values, Q = 2^{int(math.log2(args.query_limit))}, "
             f"{args.repetitions} repetition(s) per PEM point, "
             f"{min(args.repetitions, getattr(args, 'baseline_repetitions', 2))} per SPM/MCM "
             f"point (the first ones; mean ± standard deviation); "
             f"`python benchmarks/evaluate_pem.py{' --quick' if args.quick else ''}`.", "",
             "| method | sweep | ε | k | η | γ | g | F1 | NCR | f_k/σ | max candidates | s/run |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.get('method', 'pem').upper()} | {r['sweep']} | {r['epsilon']:g} | {r['k']} | "
            f"{r['eta'] if r['eta'] is not None else '–'} | "
            f"{r['gamma'] if r['gamma'] is not None else '–'} | "
            f"{r['groups']} | {r['f1'][0]:.3f} ± {r['f1'][1]:.3f} | "
            f"{r['ncr'][0]:.3f} ± {r['ncr'][1]:.3f} | "
            f"{'–' if math.isnan(r['kth_snr']) else format(r['kth_snr'], '.1f')} | "
            f"{r['max_candidates']:,} | {r['seconds']:.1f} |")
    lines += ["", *comparison(rows)]
    return "\n".join(lines)


def comparison(rows: list[dict]) -> list[str]:
    """PEM against the baselines at each (k, epsilon) of the epsilon sweep: mean F1 / NCR."""
    by = {(r.get("method", "pem"), r["k"], r["epsilon"]): r for r in rows
          if r["sweep"] == "epsilon"}
    keys = sorted({(k, e) for (m, k, e) in by if m != "pem" and ("pem", k, e) in by})
    if not keys:
        return []
    methods = [m for m in ("pem", *BASELINES) if any((m, *key) in by for key in keys)]
    head = " | ".join(f"{m.upper()} F1 / NCR" for m in methods)
    lines = ["PEM against the baselines (epsilon sweep; mean over each method's repetitions):",
             "", f"| k | ε | {head} | PEM best F1 and NCR |",
             "|---|---|" + "---|" * len(methods) + "---|"]
    for k, e in keys:
        cells, f1s, ncrs = [], {}, {}
        for m in methods:
            r = by.get((m, k, e))
            cells.append("–" if r is None else f"{r['f1'][0]:.3f} / {r['ncr'][0]:.3f}")
            if r is not None:
                f1s[m], ncrs[m] = r["f1"][0], r["ncr"][0]
        best = all(f1s["pem"] > v for m, v in f1s.items() if m != "pem") and all(
            ncrs["pem"] > v for m, v in ncrs.items() if m != "pem")
        lines.append(f"| {k} | {e:g} | {' | '.join(cells)} | {'yes' if best else '**no**'} |")
    return lines


def plot(rows: list[dict], figures: pathlib.Path, args) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    specs = [
        ("epsilon", "epsilon", "ε", lambda r: f"{r.get('method', 'pem').upper()}, k = {r['k']}"),
        ("k", "k", "k", lambda r: f"ε = {r['epsilon']:g}"),
        ("eta", "eta", "η (bits per step)", lambda r: f"ε = {r['epsilon']:g}, k = {r['k']}"),
    ]
    for sweep, x_name, x_label, label_of in specs:
        mine = [r for r in rows if r["sweep"] == sweep]
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
        for label in dict.fromkeys(label_of(r) for r in mine):
            series = sorted((r for r in mine if label_of(r) == label), key=lambda r: r[x_name])
            xs = [r[x_name] for r in series]
            style = {"pem": "-", "spm": "--", "mcm": ":"}[series[0].get("method", "pem")]
            for ax, metric in zip(axes, ("f1", "ncr"), strict=True):
                ax.errorbar(xs, [r[metric][0] for r in series], yerr=[r[metric][1] for r in series],
                            marker="o", capsize=3, label=label, linestyle=style)
        for ax, metric in zip(axes, ("F1", "NCR"), strict=True):
            ax.set_xlabel(x_label)
            who = "PEM, SPM, MCM" if sweep == "epsilon" else "PEM"
            ax.set_title(f"{who}: {metric} vs {x_label.split(' ')[0]}")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("score")
        axes[1].legend(fontsize=8)
        fig.suptitle(f"n = {args.users:g}, m = {args.bits}, Zipf({args.exponent}) over "
                     f"{args.num_distinct:g} values, Q = 2^{int(math.log2(args.query_limit))}",
                     fontsize=9)
        fig.tight_layout()
        path = figures / f"pem_vs_{sweep}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(str(path))
    return written


def update_doc(doc: pathlib.Path, text: str) -> bool:
    if not doc.exists():
        return False
    content = doc.read_text(encoding="utf-8")
    if START not in content or END not in content:
        return False
    head, rest = content.split(START, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{START}\n{text}\n{END}{tail}", encoding="utf-8")
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=None, help="Default 10^6 (--quick 10^5).")
    parser.add_argument("--num_distinct", type=int, default=None,
                        help="Default 10^5 (--quick 10^4).")
    parser.add_argument("--exponent", type=float, default=1.1)
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--query_limit", type=int, default=2**20)
    parser.add_argument("--repetitions", type=int, default=None, help="Default 3 (--quick 1).")
    parser.add_argument("--baseline_repetitions", type=int, default=2,
                        help="Repetitions that also run SPM and MCM (the first ones).")
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--figures", default=str(ROOT / "docs" / "figures"))
    parser.add_argument("--doc", default=str(ROOT / "docs" / "heavy_hitters.md"),
                        help="Markdown file whose marked section receives the table ('' to skip).")
    parser.add_argument("--from_results", default=None,
                        help="Redraw the figures and the table from a pem_results.json.")
    args = parser.parse_args(argv)
    if args.from_results:
        with open(args.from_results, encoding="utf-8") as f:
            saved = json.load(f)
        for name, value in saved["parameters"].items():
            setattr(args, name, value)
        rows = summarise(saved["runs"])
        text = table(rows, args)
        pathlib.Path(args.figures).mkdir(parents=True, exist_ok=True)
        written = plot(rows, pathlib.Path(args.figures), args)
        updated = bool(args.doc) and update_doc(pathlib.Path(args.doc), text)
        print(text)
        print(json.dumps({"figures": written, "doc_updated": updated}))
        return
    args.users = args.users or (100_000 if args.quick else 1_000_000)
    args.num_distinct = args.num_distinct or (10_000 if args.quick else 100_000)
    args.repetitions = args.repetitions or (1 if args.quick else 3)
    figures = pathlib.Path(args.figures)
    figures.mkdir(parents=True, exist_ok=True)
    points = sweeps(args.quick)
    started = time.perf_counter()
    runs = []
    for rep in range(args.repetitions):
        values = hh.sample_values(args.users, num_distinct=args.num_distinct,
                                  value_bits=args.bits, rng=args.seed + rep,
                                  exponent=args.exponent)
        truth = hh.true_top(values, max(p["k"] for p in points))
        ids = np.arange(values.size)
        for index, point in enumerate(points):
            if point["method"] != "pem" and rep >= args.baseline_repetitions:
                continue
            rng = np.random.default_rng([args.seed, rep, index])
            run = run_point(point, values, ids, truth, args, rng)
            runs.append({**run, "repetition": rep})
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v)
                              for k, v in runs[-1].items()}), flush=True)
    rows = summarise(runs)
    text = table(rows, args)
    with open(figures / "pem_results.json", "w", encoding="utf-8") as f:
        json.dump({"parameters": {k: v for k, v in vars(args).items()
                                  if k not in ("figures", "doc")},
                   "runs": runs, "summary": rows}, f, indent=1)
    written = plot(rows, figures, args)
    updated = bool(args.doc) and update_doc(pathlib.Path(args.doc), text)
    print(text)
    print(json.dumps({"figures": written, "doc_updated": updated,
                      "seconds": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    main()
