"""Reproduce the consistency paper's comparison of post-processing methods on Zipf data.

    python benchmarks/reproduce_consistency.py            # the default run (docs/consistency.md)
    python benchmarks/reproduce_consistency.py --quick    # small CI run; checks; writes nothing

Wang et al., "Locally Differentially Private Frequency Estimation with Consistency"
(NDSS 2020), Section V: a fixed synthetic dataset of ``n`` values drawn from a
Zipf distribution over ``d = 1024`` values is perturbed by a frequency oracle (OLH and GRR,
from ``ldpflow.core.oracles``) ``--repetitions`` times with independent fixed seeds; every
estimate is post-processed by each method of ``ldpflow.core.postprocess.METHODS`` and scored
against the dataset's true frequencies with ``ldpflow.core.queries``:

* full-domain MSE for every epsilon (the paper's Fig. 4), at every ``n``;
* set-value MSE against the subset size ``rho% * d`` (100 random subsets per size and
  repetition, shared by all methods), at ``epsilon = 1`` and the largest ``n``, as the paper;
* top-k MSE against k (the paper's Fig. 10) at the same epsilon.

Post-Pos answers each query clamped at 0. Every number is the mean over the repetitions of
the per-repetition MSE, with its standard error.

Outputs: one JSON object per (experiment, oracle, n, epsilon, x, method) on stdout; unless
``--no-write``, the tables between the ``generated`` markers of ``docs/consistency.md`` and,
when matplotlib is installed (``pip install matplotlib``; optional), the figures
``docs/figures/consistency_{full_domain,set_value,top_k}.png``. Progress goes to stderr.

Every run also checks what must hold on each single estimate, whatever the seed: Norm,
Base-Pos and Norm-Sub are projections onto convex sets containing the truth, so their
full-domain error never exceeds Base's. The script exits with status 1 if one fails.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import math
import os
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from ldpflow.core import queries
from ldpflow.core.oracles import registry
from ldpflow.core.postprocess import METHODS, postprocess

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "consistency.md"
FIGURES = ROOT / "docs" / "figures"
BEGIN, END = "<!-- generated:start -->", "<!-- generated:end -->"

# The paper's two panels per row (Section V-A): the first six methods on the left, Norm-Sub
# with the remaining five on the right. CLS is Norm-Sub (tables only).
LEFT = ("base", "base-pos", "post-pos", "norm", "norm-mul", "norm-sub")
RIGHT = ("norm-sub", "mle-apx", "base-cut", "norm-cut", "power", "power-ns")
# Projections onto convex sets that contain every distribution: never farther from it.
NON_EXPANSIVE = ("norm", "base-pos", "norm-sub")


@dataclasses.dataclass(frozen=True)
class Config:
    domain_size: int = 1024
    zipf_exponent: float = 1.5
    users: tuple[int, ...] = (100_000, 1_000_000)
    epsilons: tuple[float, ...] = (0.2, 0.5, 1.0, 2.0, 3.0, 4.0)
    oracles: tuple[str, ...] = ("olh", "grr")
    repetitions: int = 100
    detail_epsilon: float = 1.0
    set_percents: tuple[float, ...] = (1, 2, 5, 10, 20, 40, 60, 80)
    subsets: int = 100
    top_ks: tuple[int, ...] = (2, 4, 8, 16, 32)
    seed: int = 20200223

    @classmethod
    def quick(cls) -> Config:
        return cls(users=(100_000,), epsilons=(0.5, 1.0, 4.0), repetitions=3,
                   set_percents=(5, 40), subsets=20, top_ks=(4, 16))


# -- simulation ----------------------------------------------------------------------------------
def dataset(config: Config, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` values of one fixed Zipf sample, and their true frequencies."""
    weights = np.arange(1, config.domain_size + 1, dtype=float) ** -config.zipf_exponent
    rng = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=(0,)))
    values = rng.choice(config.domain_size, size=max(config.users), p=weights / weights.sum())
    values = values[:n]
    return values, np.bincount(values, minlength=config.domain_size) / n


def run_setting(config: Config, oracle_name: str, n: int, epsilon: float) -> dict:
    """All repetitions of one (oracle, n, epsilon): per-repetition MSEs and check failures."""
    values, truth = dataset(config, n)
    oracle = registry.make(oracle_name, epsilon=epsilon, domain_size=config.domain_size)
    detail = math.isclose(epsilon, config.detail_epsilon) and n == max(config.users)
    key = (config.oracles.index(oracle_name), config.users.index(n),
           config.epsilons.index(epsilon))
    scores: dict[tuple, list[float]] = defaultdict(list)
    failures: list[str] = []
    for rep in range(config.repetitions):
        rng = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=(1, *key, rep)))
        est = oracle.estimate(oracle.aggregate(oracle.perturb(values, rng=rng)))
        subsets = {
            pct: queries.random_subsets(
                config.domain_size, max(1, round(pct / 100 * config.domain_size)),
                config.subsets, rng)
            for pct in config.set_percents
        } if detail else {}
        full = {}
        for method in METHODS:
            out = postprocess(est, method)
            clamp = method == "post-pos"
            full[method] = queries.mse_full_domain(out, truth, clamp=clamp)
            scores[("full_domain", None, method)].append(full[method])
            for k in config.top_ks if detail else ():
                scores[("top_k", k, method)].append(queries.mse_top_k(out, truth, k, clamp=clamp))
            for pct, masks in subsets.items():
                scores[("set_value", pct, method)].append(
                    queries.mse_set_value(out, truth, masks, clamp=clamp))
        slack = 1e-12 * full["base"]
        for method in NON_EXPANSIVE:
            if full[method] > full["base"] + slack:
                failures.append(f"{oracle_name} n={n} eps={epsilon} rep={rep}: "
                                f"{method} MSE {full[method]:.3e} > base {full['base']:.3e}")
    return {"oracle": oracle_name, "n": n, "epsilon": epsilon,
            "scores": dict(scores), "failures": failures}


def simulate(config: Config, jobs: int) -> tuple[list[dict], dict, list[str]]:
    """Rows of mean MSEs (the JSON output), the per-repetition samples, and check failures."""
    settings = [(o, n, e) for o in config.oracles for n in config.users for e in config.epsilons]
    # Longest first (OLH's aggregation grows with epsilon and n) to balance the workers.
    settings.sort(key=lambda s: (s[0] != "olh", -s[1], -s[2]))
    rows, samples, failures = [], {}, []
    start = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_setting, config, *s): s for s in settings}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            result = future.result()
            failures += result["failures"]
            for (experiment, x, method), values in result["scores"].items():
                arr = np.asarray(values)
                samples[(experiment, result["oracle"], result["n"], result["epsilon"], x,
                         method)] = arr
                rows.append({
                    "experiment": experiment, "oracle": result["oracle"], "n": result["n"],
                    "epsilon": result["epsilon"], "x": x, "method": method,
                    "mse_mean": float(arr.mean()),
                    "mse_se": float(arr.std(ddof=1) / math.sqrt(arr.size)),
                    "repetitions": int(arr.size),
                })
            print(f"[{done}/{len(settings)}] {futures[future]} "
                  f"{time.perf_counter() - start:.0f}s", file=sys.stderr, flush=True)
    order = {m: i for i, m in enumerate(METHODS)}
    rows.sort(key=lambda r: (r["experiment"], r["oracle"], r["n"], r["epsilon"],
                             -1 if r["x"] is None else r["x"], order[r["method"]]))
    return rows, samples, failures


# -- tables ----------------------------------------------------------------------------------
def _fmt(value: float) -> str:
    return f"{value:.3g}" if value >= 1e-3 else f"{value:.2e}"


def _table(header: list[str], lines: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


RANKED = tuple(m for m in METHODS if m != "cls")  # CLS is Norm-Sub: not ranked twice


def leaders(samples: dict, key) -> tuple[str, set[str]]:
    """The method of smallest mean MSE, and every method not distinguishable from it.

    All methods score the same estimates, so the comparison is paired: a method ties with
    the best when the mean of its per-repetition MSE differences from the best is within two
    standard errors of that mean, or within floating-point rounding of the best (Norm on GRR
    differs from Base by rounding only, and consistently so).
    """
    means = {m: samples[key(m)].mean() for m in RANKED}
    best = min(means, key=means.get)
    tied = {best}
    for m in RANKED:
        diff = samples[key(m)] - samples[key(best)]
        standard_error = diff.std(ddof=1) / math.sqrt(diff.size)
        if diff.mean() <= max(2 * standard_error, 1e-9 * means[best]):
            tied.add(m)
    return best, tied


def _column_table(samples, keys: list, labels: list[str]) -> str:
    """Methods as rows, one column per key function; the leaders of each column in bold."""
    tied = [leaders(samples, key)[1] for key in keys]
    lines = [[m] + [("**{}**" if m in t else "{}").format(_fmt(samples[key(m)].mean()))
                    for key, t in zip(keys, tied, strict=True)] for m in METHODS]
    return _table(["method"] + labels, lines)


def markdown(config: Config, samples: dict, seconds: float, jobs: int) -> str:
    n_max, eps = max(config.users), config.detail_epsilon
    parts = [
        f"Generated by `python benchmarks/reproduce_consistency.py` in {seconds / 60:.1f} min "
        f"({jobs} worker processes). Zipf exponent {config.zipf_exponent}, d = "
        f"{config.domain_size}, {config.repetitions} repetitions per setting, seed "
        f"{config.seed}; set-value queries: {config.subsets} random subsets per size and "
        "repetition. Cells: mean MSE over the repetitions (standard errors in the JSON "
        "output). **Bold**: the smallest in its column and every method whose paired "
        "difference from it is within two standard errors. CLS is Norm-Sub and is not ranked.",
    ]
    for oracle in config.oracles:
        for n in config.users:
            parts.append(f"\n#### Full-domain MSE, {oracle.upper()}, n = {n:,}\n")
            parts.append(_column_table(
                samples,
                [lambda m, e=e, oracle=oracle, n=n: ("full_domain", oracle, n, e, None, m)
                 for e in config.epsilons],
                [f"eps={e:g}" for e in config.epsilons]))
    for experiment, xs, label, title in (
        ("set_value", config.set_percents, "rho", "Set-value MSE vs subset size rho% of d"),
        ("top_k", config.top_ks, "k", "Top-k MSE vs k"),
    ):
        for oracle in config.oracles:
            parts.append(f"\n#### {title}, {oracle.upper()}, n = {n_max:,}, eps = {eps:g}\n")
            parts.append(_column_table(
                samples,
                [lambda m, x=x, experiment=experiment, oracle=oracle:
                 (experiment, oracle, n_max, eps, x, m) for x in xs],
                [f"{label}={x:g}" for x in xs]))
    parts.append("\n#### The paper's claims, measured\n")
    parts.append(claims(config, samples))
    return "\n".join(parts)


def claims(config: Config, samples: dict) -> str:
    """One line per setting and claim, with the measured ratios or leaders."""
    n_max, eps = max(config.users), config.detail_epsilon
    lines = []

    def mean(*key):
        return samples[key].mean()

    def leaders_text(best, tied):
        others = sorted(tied - {best}, key=RANKED.index)
        return best + (f" (ties: {', '.join(others)})" if others else "")

    for oracle in config.oracles:
        for n in config.users:
            def ratios(a, b, oracle=oracle, n=n):
                def full(e, m):
                    return mean("full_domain", oracle, n, e, None, m)

                return ", ".join(f"{full(e, a) / full(e, b):.2g}" for e in config.epsilons)

            def base_cut(e, oracle=oracle, n=n):
                key = lambda m: ("full_domain", oracle, n, e, None, m)  # noqa: E731
                order = sorted(RANKED, key=lambda m: samples[key(m)].mean())
                best, tied = leaders(samples, key)
                mark = "=" if "base-cut" in tied else ""
                ratio = samples[key("base-cut")].mean() / samples[key(best)].mean()
                return f"{mark}{order.index('base-cut') + 1} ({best}; x{ratio:.2g})"

            setting = f"{oracle.upper()}, n = {n:,}"
            lines += [
                [setting, "Base / Norm-Sub (paper: about 10)", ratios("base", "norm-sub")],
                [setting, "Base-Pos / Base (paper: about 0.5)", ratios("base-pos", "base")],
                [setting, "Norm / Base (paper: about 1)", ratios("norm", "base")],
                [setting, "MLE-Apx / Norm-Sub (paper: about 1)", ratios("mle-apx", "norm-sub")],
                [setting, "Base-Cut's rank among 11 (the best; Base-Cut / best); = a tie",
                 ", ".join(base_cut(e) for e in config.epsilons)],
            ]
    for oracle in config.oracles:
        setting = f"{oracle.upper()}, n = {n_max:,}, eps = {eps:g}"
        topk = [leaders(samples,
                        lambda m, k=k, oracle=oracle: ("top_k", oracle, n_max, eps, k, m))
                for k in config.top_ks]
        sets = [leaders(samples,
                        lambda m, x=x, oracle=oracle: ("set_value", oracle, n_max, eps, x, m))
                for x in config.set_percents]

        def worst_ratio(experiment, x, method, oracle=oracle):
            own = mean(experiment, oracle, n_max, eps, x, method)
            others = [mean(experiment, oracle, n_max, eps, x, m) for m in RANKED if m != method]
            return f"{own / min(others):.2g}"

        lines += [
            [setting, "best for top-k (paper: Norm), per k",
             "; ".join(f"k={k}: {leaders_text(*lt)}"
                       for k, lt in zip(config.top_ks, topk, strict=True))],
            [setting, "Norm-Mul / best other method, top-k (paper: at least 10), per k",
             ", ".join(worst_ratio("top_k", k, "norm-mul") for k in config.top_ks)],
            [setting, "best for set-value (paper: PowerNS), per rho",
             "; ".join(f"rho={x:g}: {leaders_text(*lt)}"
                       for x, lt in zip(config.set_percents, sets, strict=True))],
            [setting, "PowerNS / best other method, set-value, per rho",
             ", ".join(worst_ratio("set_value", x, "power-ns") for x in config.set_percents)],
        ]
    epsilons = ", ".join(f"{e:g}" for e in config.epsilons)
    return _table(["setting", "claim", f"measured (full domain: per eps = {epsilons})"], lines)


def write_docs(path: Path, generated: str) -> None:
    text = path.read_text() if path.exists() else "# Consistency post-processing\n"
    if BEGIN not in text or END not in text:
        text = text.rstrip("\n") + f"\n\n{BEGIN}\n{END}\n"
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    path.write_text(pattern.sub(lambda _: f"{BEGIN}\n{generated}\n{END}", text, count=1))


# -- figures ---------------------------------------------------------------------------------
def figures(config: Config, samples: dict, directory: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        print("matplotlib is not installed: figures skipped (pip install matplotlib)",
              file=sys.stderr)
        return []
    directory.mkdir(parents=True, exist_ok=True)
    n_max, eps = max(config.users), config.detail_epsilon
    styles = {m: dict(marker=mk, linestyle=ls) for m, mk, ls in zip(
        METHODS, "osv^DxP*hX<>", ["-", "--", ":", "-.", "-", "--", "-", ":", "-", "-.", "--", "-"],
        strict=False)}
    written = []

    def draw(name, panels, xs, key, xlabel, logx):
        fig, axes = plt.subplots(len(panels), 2, figsize=(11, 3.2 * len(panels)), squeeze=False)
        for row, (title, panel_key) in enumerate(panels):
            for col, group in enumerate((LEFT, RIGHT)):
                ax = axes[row][col]
                for m in group:
                    runs = [samples[key(panel_key, x, m)] for x in xs]
                    means = [r.mean() for r in runs]
                    errs = [r.std(ddof=1) / math.sqrt(r.size) for r in runs]
                    ax.errorbar(xs, means, yerr=errs, label=m, capsize=2, markersize=4,
                                **styles[m])
                ax.set_yscale("log")
                if logx:
                    ax.set_xscale("log")
                    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
                ax.set_xticks(xs, [f"{x:g}" for x in xs])
                ax.set_title(title, fontsize=9)
                ax.set_xlabel(xlabel)
                ax.set_ylabel("MSE")
                ax.grid(True, which="both", alpha=0.3)
                ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        path = directory / f"consistency_{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    draw("full_domain",
         [(f"full domain, {o.upper()}, n = {n:,}", (o, n)) for o in config.oracles
          for n in config.users],
         list(config.epsilons), lambda p, e, m: ("full_domain", p[0], p[1], e, None, m),
         "epsilon", False)
    draw("set_value",
         [(f"set-value, {o.upper()}, n = {n_max:,}, eps = {eps:g}", o) for o in config.oracles],
         list(config.set_percents), lambda o, x, m: ("set_value", o, n_max, eps, x, m),
         "subset size rho (% of d)", True)
    draw("top_k",
         [(f"top-k, {o.upper()}, n = {n_max:,}, eps = {eps:g}", o) for o in config.oracles],
         list(config.top_ks), lambda o, k, m: ("top_k", o, n_max, eps, k, m), "k", True)
    return written


# -- main ------------------------------------------------------------------------------------
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="a small run for CI: n = 10^5, 3 epsilons, 3 repetitions; "
                             "checks, and writes nothing unless --write")
    parser.add_argument("--repetitions", type=int, help="override the repetitions per setting")
    parser.add_argument("--zipf_exponent", type=float, help="override the Zipf exponent (1.5)")
    parser.add_argument("--seed", type=int, help="override the seed (20200223)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="worker processes (default: min(2, cores))")
    parser.add_argument("--no-write", action="store_true", help="print only (JSON on stdout)")
    parser.add_argument("--write", action="store_true", help="write docs even with --quick")
    parser.add_argument("--docs", type=Path, default=DOCS)
    parser.add_argument("--figures", type=Path, default=FIGURES)
    args = parser.parse_args(argv)
    config = Config.quick() if args.quick else Config()
    overrides = {k: v for k, v in (("repetitions", args.repetitions),
                                   ("zipf_exponent", args.zipf_exponent), ("seed", args.seed))
                 if v is not None}
    config = dataclasses.replace(config, **overrides)
    if config.repetitions < 2:
        parser.error(f"--repetitions must be >= 2 (for a standard error), got {config.repetitions}")
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")

    start = time.perf_counter()
    rows, samples, failures = simulate(config, args.jobs)
    seconds = time.perf_counter() - start
    for row in rows:
        print(json.dumps(row))
    print(f"simulated in {seconds:.0f}s", file=sys.stderr)
    for failure in failures:
        print(f"CHECK FAILED: {failure}", file=sys.stderr)
    if (args.write or not args.quick) and not args.no_write:
        write_docs(args.docs, markdown(config, samples, seconds, args.jobs))
        for path in figures(config, samples, args.figures):
            print(f"wrote {path}", file=sys.stderr)
        print(f"wrote {args.docs}", file=sys.stderr)
    elif args.quick:
        print(markdown(config, samples, seconds, args.jobs), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
