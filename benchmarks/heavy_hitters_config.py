"""Heavy-hitter configuration study: F1 / NCR / precision / recall and server seconds of
PEM variants on one population, in core.

    python benchmarks/heavy_hitters_config.py [--users 1000000] [--value_bits 64]
        [--top_k 32] [--epsilon 4] [--num_distinct 100000] [--seeds 1 2 3]
        [--variants paper auto auto-plain auto-4k auto-sigma]

Population: ``--users`` values from Zipf(1.1) over ``--num_distinct`` distinct random
``m``-bit values (seeded), or with ``--dataset words`` the word tokens of ``--text_glob``
(as ``benchmarks/heavy_hitters_eval.py``: fitted string codec, pruned on the server).
Variants:

* ``paper``: the paper's configuration (Q = 2**20, gamma = ceil(log2 k), OLH's optimal hash
  range), ``k`` survivors per stage, ranked by the last stage alone, no pruning;
* ``auto``: :func:`ldpflow.core.heavy_hitters.configure` and the server defaults (``2 k``
  survivors, refined final ranking);
* ``auto-plain``: ``auto`` ranked by the last stage alone;
* ``auto-k``: ``auto`` keeping ``k`` survivors;
* ``auto-4k``: configured for and keeping ``4 k`` survivors;
* ``auto-sigma``: ``auto`` keeping at most ``4 k`` survivors above 3 sigma.

One JSON object per line and variant and seed: the configuration, the scores and
``server_seconds`` / ``server_cpu_seconds`` (wall and process CPU time of ``identify`` on
the perturbed reports; the machine has 2 cores shared with other work, so wall times are
noisy).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from ldpflow.core import heavy_hitters as hh

try:  # run as a script from the repository root
    from heavy_hitters_eval import DEFAULT_TEXT, population, words
except ImportError:  # pragma: no cover - imported as benchmarks.heavy_hitters_config
    from benchmarks.heavy_hitters_eval import DEFAULT_TEXT, population, words

VARIANTS = ("paper", "auto", "auto-plain", "auto-k", "auto-4k", "auto-sigma")


def build(variant: str, k: int, m: int, epsilon: float, n: int):
    """``(pem, identify keyword arguments)`` of a variant."""
    if variant == "paper":
        pem = hh.PrefixExtendingMethod(top_k=k, value_bits=m, epsilon=epsilon)
        return pem, {"survivors": k, "refine_sigma": None}
    if variant == "auto-4k":
        return hh.configure(top_k=k, value_bits=m, epsilon=epsilon, users=n,
                            survivors=4 * k), {"survivors": 4 * k}
    pem = hh.configure(top_k=k, value_bits=m, epsilon=epsilon, users=n)
    return pem, {"auto": {}, "auto-plain": {"refine_sigma": None},
                 "auto-k": {"survivors": k},
                 "auto-sigma": {"survivors": min(4 * k, pem.max_survivors),
                                "threshold_sigma": 3.0}}[variant]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--value_bits", type=int, default=64)
    parser.add_argument("--top_k", type=int, default=32)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--num_distinct", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--dataset", choices=("zipf", "words"), default="zipf")
    parser.add_argument("--text_glob", default=DEFAULT_TEXT)
    args = parser.parse_args(argv)
    k, m, n = args.top_k, args.value_bits, args.users
    text = words(args.text_glob) if args.dataset == "words" else None
    for seed in args.seeds:
        valid = None
        if text is not None:
            values, codec = population("words", n, seed, text)
            m, valid = codec.bits, codec.valid_prefixes
        else:
            rng = np.random.default_rng(seed)
            values = hh.sample_values(n, num_distinct=args.num_distinct, value_bits=m,
                                      rng=rng)
        truth = hh.true_top(values, k)
        for variant in args.variants:
            pem, kwargs = build(variant, k, m, args.epsilon, n)
            if valid is not None and variant != "paper":
                kwargs = {**kwargs, "valid": valid}
            reports = pem.perturb(values, np.arange(n), np.random.default_rng([seed, 1]))
            start, cpu = time.perf_counter(), time.process_time()
            found = pem.identify(reports, **kwargs)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            scores = hh.score_top_k(found.values, truth, k)
            print(json.dumps({
                "dataset": args.dataset, "variant": variant, "seed": seed, "n": n, "m": m,
                "k": k,
                "epsilon": args.epsilon, "prefix_bits": list(pem.prefix_bits),
                "hash_range": pem.hash_range, "query_limit": pem.query_limit,
                "survivors": kwargs.get("survivors", pem.default_survivors),
                **{key: round(value, 4) for key, value in scores.items()},
                "server_seconds": round(seconds, 2), "server_cpu_seconds": round(cpu, 2)}),
                  flush=True)


if __name__ == "__main__":
    main()
