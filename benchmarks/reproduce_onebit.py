"""Reproduce Figure 1 of Acharya and Sun (ICML 2019): l1 error of distribution estimation.

    python benchmarks/reproduce_onebit.py            # the default run (docs/oracles.md)
    python benchmarks/reproduce_onebit.py --quick    # a small smoke run; writes nothing

Acharya and Sun, "Communication Complexity in Locally Private Distribution Estimation and Heavy
Hitters" (ICML 2019), Section 6: k = 1000, epsilon = 1, users' values i.i.d. from six
distributions, each point the mean of 30 experiments; the one-bit scheme against randomized
response, RAPPOR, Hadamard response and subset selection. Here each scheme is the ldpflow
oracle of that name, built with ``ldpflow.oracle``:

    onebit -> ``onebit``, RR -> ``grr``, RAPPOR -> ``sue`` (symmetric unary encoding is basic
    RAPPOR), HR -> ``hr``, subset -> ``ss``.

The paper's text defines neither the distributions' exact forms nor the sample sizes of the
x axis; the forms are those of the authors' public experiment code for Hadamard response
(same group, same comparison): uniform; ``Geo(l)``: ``p(x) ~ l**x``, x = 0..k-1 (truncated);
``Zipf(s)``: ``p(x) ~ (x+1)**-s``; two-step: the first k/2 values weight 1, the others 3.
The sample sizes are a log grid from 10^4 to 10^6 (``--users``): below 10^4 every scheme's
error is near its maximum of 2, and from 10^6 on the estimates resolve the distributions.
Subset selection runs up to ``--ss_max_users`` (default 10^5) only: its reports are k-bit maps
with omega = 269 members (2 to 5 microseconds a user here, 30 x 6 x 10^6 users would take hours);
above that, the best of the other schemes is the reference (RAPPOR's variance is within 7% of
subset selection's at epsilon = 1: 3.92 against 3.67, in units of 1/n).

Per repetition, one sample of ``n`` values is drawn and given to every scheme (a paired
comparison). A scheme's estimate is its raw unbiased estimate projected onto the probability
simplex (``norm-sub``: the one-bit scheme's step 4 in the paper, applied to all five alike);
the l1 error is against the distribution ``p`` (the paper's risk, eq. 2). The raw estimate's
l1 error is reported too.

Simulation paths (``accumulate``), each exactly the law of ``aggregate(perturb(values))`` for
i.i.d. values: the value counts are one multinomial draw; ``sue`` draws its column sums from
them with ``sample_accumulator`` (independent binomials); the others perturb and count in
chunks of users (``onebit`` deals the columns j mod K by a uniform permutation: an i.i.d.
sequence is its counts in a random order).

Outputs: one JSON object per (distribution, scheme, n) on stdout, then one summary object per
distribution (the one-bit error over the best other scheme's, per n) and one overall; unless
``--no-write`` (implied by ``--quick``), the figure ``docs/figures/onebit_figure1.png`` (six
log-log panels). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

import ldpflow
from ldpflow.core import simulation
from ldpflow.core.oracles import OneBitHadamard
from ldpflow.core.postprocess import norm_sub

ROOT = Path(__file__).resolve().parent.parent
FIGURE = ROOT / "docs" / "figures" / "onebit_figure1.png"

#: Registry key -> the paper's label.
SCHEMES = {"onebit": "onebit", "grr": "RR", "sue": "RAPPOR", "hr": "HR", "ss": "subset"}
#: The six panels of Figure 1, in order.
DISTRIBUTIONS = ("uniform", "geometric:0.8", "geometric:0.98", "zipf:0.5", "zipf:1.0",
                 "two-step")
TITLES = {"uniform": "Uniform", "geometric:0.8": "Geo(0.8)", "geometric:0.98": "Geo(0.98)",
          "zipf:0.5": "Zipf(0.5)", "zipf:1.0": "Zipf(1.0)", "two-step": "Two Steps"}
CHUNK_USERS = {"ss": 1 << 15}  # k-bit reports: bounded memory; the others in one chunk
DEFAULT_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class Config:
    domain_size: int = 1000
    epsilon: float = 1.0
    users: tuple[int, ...] = (10_000, 30_000, 100_000, 300_000, 1_000_000)
    repetitions: int = 30
    ss_max_users: int = 100_000
    seed: int = 20190612

    @classmethod
    def quick(cls) -> Config:
        return cls(users=(2_000, 5_000), repetitions=2, ss_max_users=2_000)

    def schemes(self, n: int) -> tuple[str, ...]:
        """The schemes run at ``n`` users (subset selection up to ``ss_max_users``)."""
        return tuple(s for s in SCHEMES if s != "ss" or n <= self.ss_max_users)


def probabilities(spec: str, k: int) -> np.ndarray:
    """The distribution named ``spec`` over ``k`` values (see the module notes)."""
    if spec == "two-step":
        weights = np.concatenate([np.ones(k // 2), np.full(k - k // 2, 3.0)])
        return weights / weights.sum()
    return simulation.parse_distribution(spec).probabilities(k)


def sample_counts(p: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """How many of ``n`` i.i.d. users from ``p`` hold each value (one multinomial draw)."""
    return rng.multinomial(n, p)


def accumulate(oracle, counts: np.ndarray, rng: np.random.Generator):
    """The accumulator of ``aggregate(perturb(values))`` for ``n`` i.i.d. users whose value
    counts are ``counts``, by a path exactly equal in law.

    An i.i.d. sequence is its counts in a uniformly random order. Every scheme but the
    one-bit one perturbs each user independently of the others, so the order does not
    matter and the values are taken sorted; the one-bit scheme's columns ``j mod K`` are
    dealt to the users by a uniform permutation. RAPPOR (``sue``) draws its column sums
    from the counts (``sample_accumulator``: independent binomials).
    """
    if oracle.name == "sue":
        return oracle.sample_accumulator(counts, rng)
    values = np.repeat(np.arange(counts.size), counts)
    slots = rng.permutation(values.size) if isinstance(oracle, OneBitHadamard) else None
    acc = oracle.create_accumulator()
    step = CHUNK_USERS.get(oracle.name, DEFAULT_CHUNK)
    for start in range(0, values.size, step):
        chunk = values[start:start + step]
        if slots is not None:  # user at slot j -> column j mod K, over all chunks
            columns = slots[start:start + step] % oracle.order
            reports = oracle.perturb(chunk, rng=rng, columns=columns)
        else:
            reports = oracle.perturb(chunk, rng=rng)
        acc.merge(oracle.count_valid(reports))  # the oracle's own reports: valid
    return acc


def run(config: Config) -> tuple[list[dict], dict]:
    """Per-(distribution, scheme, n) rows, and the per-repetition errors keyed alike."""
    k, eps = config.domain_size, config.epsilon
    oracles = {name: ldpflow.oracle(name, epsilon=eps, domain_size=k) for name in SCHEMES}
    rows, errors = [], {}
    started = time.perf_counter()
    for d_index, spec in enumerate(DISTRIBUTIONS):
        p = probabilities(spec, k)
        for n_index, n in enumerate(config.users):
            active = config.schemes(n)
            l1 = {name: np.empty(config.repetitions) for name in active}
            raw = {name: np.empty(config.repetitions) for name in active}
            seconds = dict.fromkeys(active, 0.0)
            for rep in range(config.repetitions):
                rng = np.random.default_rng(
                    np.random.SeedSequence(config.seed, spawn_key=(d_index, n_index, rep)))
                counts = sample_counts(p, n, rng)
                for name in active:
                    oracle = oracles[name]
                    t = time.perf_counter()
                    est = oracle.estimate(accumulate(oracle, counts, rng))
                    seconds[name] += time.perf_counter() - t
                    l1[name][rep] = float(np.abs(norm_sub(est.frequencies) - p).sum())
                    raw[name][rep] = float(np.abs(est.frequencies - p).sum())
            for name in active:
                errors[(spec, name, n)] = l1[name]
                rows.append({
                    "distribution": spec, "scheme": name, "label": SCHEMES[name], "n": n,
                    "k": k, "epsilon": eps, "repetitions": config.repetitions,
                    "bits": oracles[name].report_bits,
                    "l1": float(l1[name].mean()),
                    "l1_se": float(l1[name].std(ddof=1) / math.sqrt(config.repetitions)),
                    "l1_raw": float(raw[name].mean()),
                    "seconds": round(seconds[name], 3),
                })
            print(f"{spec} n={n}: {time.perf_counter() - started:.0f}s", file=sys.stderr,
                  flush=True)
    return rows, errors


def summarise(config: Config, errors: dict) -> list[dict]:
    """Per distribution and overall: the one-bit error over the best other scheme's, per n,
    and whether the one-bit scheme is within two standard errors of the best (paired)."""
    out, ratios = [], []
    for spec in DISTRIBUTIONS:
        per_n = []
        for n in config.users:
            others = {name: errors[(spec, name, n)].mean() for name in config.schemes(n)
                      if name != "onebit"}
            best = min(others, key=others.get)
            diff = errors[(spec, "onebit", n)] - errors[(spec, best, n)]
            se = diff.std(ddof=1) / math.sqrt(diff.size) if diff.size > 1 else math.nan
            ratio = float(errors[(spec, "onebit", n)].mean() / others[best])
            ratios.append(ratio)
            ranking = sorted(config.schemes(n), key=lambda s: errors[(spec, s, n)].mean())
            onebit = errors[(spec, "onebit", n)].mean()
            per_n.append({"n": n, "best_other": best, "onebit_over_best": round(ratio, 4),
                          "onebit_minus_best": float(diff.mean()),
                          "onebit_minus_best_se": float(se) if math.isfinite(se) else None,
                          "onebit_over_hr": round(float(onebit / others["hr"]), 4),
                          "onebit_rank": ranking.index("onebit") + 1,
                          "ranking": ranking})
        out.append({"summary": spec, "points": per_n})
    out.append({"summary": "all", "onebit_over_best_min": round(min(ratios), 4),
                "onebit_over_best_max": round(max(ratios), 4),
                "onebit_over_best_median": round(float(np.median(ratios)), 4)})
    return out


def plot(config: Config, rows: list[dict], path: Path) -> bool:
    """Six log-log panels like the paper's Figure 1; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install ldpflow[plot]): no figure",
              file=sys.stderr)
        return False
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5), sharex=True)
    markers = {"onebit": "o", "grr": "s", "sue": "^", "hr": "D", "ss": "v"}
    for ax, spec in zip(axes.flat, DISTRIBUTIONS, strict=True):
        for name in SCHEMES:
            pts = sorted((r["n"], r["l1"], r["l1_se"]) for r in rows
                         if r["distribution"] == spec and r["scheme"] == name)
            n, l1, se = (np.array(col) for col in zip(*pts, strict=True))
            bits = next(r["bits"] for r in rows if r["scheme"] == name)
            ax.errorbar(n, l1, yerr=2 * se, marker=markers[name], ms=4, capsize=2,
                        lw=2.2 if name == "onebit" else 1.2,
                        label=f"{SCHEMES[name]} ({bits} bit{'s' if bits > 1 else ''})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(TITLES[spec])
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("number of users n")
    for ax in axes[:, 0]:
        ax.set_ylabel(r"$\ell_1$ error (norm-sub)")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"l1 error, k = {config.domain_size}, epsilon = {config.epsilon:g}, mean of "
                 f"{config.repetitions} runs (bars: 2 standard errors); ldpflow oracles")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="two small n, two repetitions; writes nothing")
    parser.add_argument("--users", help="comma-separated n values (default: 10^4..10^6)")
    parser.add_argument("--repetitions", type=int)
    parser.add_argument("--ss_max_users", type=int,
                        help="run subset selection up to this n (default 100000)")
    parser.add_argument("--no-write", action="store_true", help="do not write the figure")
    parser.add_argument("--figure", type=Path, default=FIGURE)
    args = parser.parse_args(argv)
    config = Config.quick() if args.quick else Config()
    if args.users:
        config = dataclasses.replace(
            config, users=tuple(int(u) for u in args.users.split(",")))
    if args.repetitions:
        config = dataclasses.replace(config, repetitions=args.repetitions)
    if args.ss_max_users is not None:
        config = dataclasses.replace(config, ss_max_users=args.ss_max_users)
    started = time.perf_counter()
    rows, errors = run(config)
    for row in rows:
        print(json.dumps(row), flush=True)
    for line in summarise(config, errors):
        print(json.dumps(line), flush=True)
    if not (args.quick or args.no_write) and plot(config, rows, args.figure):
        print(f"wrote {args.figure}", file=sys.stderr)
    print(f"total {time.perf_counter() - started:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
