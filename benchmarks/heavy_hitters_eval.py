"""Heavy-hitter evaluation: F1 / NCR / precision / recall and server seconds of every
protocol on the same populations, in core.

    python benchmarks/heavy_hitters_eval.py [--datasets zipf64 words ints32]
        [--protocols pem pem-paper spm mcm treehist] [--epsilons 1 2 4 8] [--ks 16 32]
        [--users 1000000] [--seeds 1] [--text_glob '/usr/share/vim/vim90/doc/*.txt']

Datasets (``--users`` users each, seeded):

* ``zipf64``: Zipf(1.1) over 100 000 distinct random 64-bit values;
* ``ints32``: Zipf(1.1) over 100 000 distinct random 32-bit values (pure-ldp's case:
  32-bit values, k = 16);
* ``words``: real text: the word tokens (lower-cased runs of letters) of the files of
  ``--text_glob`` (by default the Vim documentation shipped with Debian's vim, 1.4 million
  tokens), shuffled with the seed; the first ``--users`` tokens are the users' values,
  encoded by ``StringCodec.fit`` (m from the data; longer words truncated) and pruned by
  the codec on the server.

Protocols: ``pem`` (the automatic configuration and server defaults), ``pem-paper`` (the
paper's configuration, ``k`` survivors, last-stage ranking), ``pem-optimal-g`` (the
automatic configuration with OLH's optimal hash range instead of the cost-aware one),
``spm``, ``mcm``, ``treehist``, ``sfp``.

One JSON object per line per run: dataset, protocol, epsilon, k, seed, the scores,
``found`` (how many values were returned), ``control_strings`` (on ``words``: how many of
them hold a control character other than whitespace, which no word has),
``server_seconds`` (wall) and ``server_cpu_seconds`` (process CPU time of ``identify``;
the machine has 2 cores shared with other work, so wall times are noisy and CPU times
are the steadier figure). Then one last object, ``{"summary": [...]}``: per dataset,
protocol, epsilon and k, the F1 of each seed, their mean and the control strings over
all seeds (the table of ``docs/heavy_hitters.md``).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import re
import time

import numpy as np

from ldpflow.core import codecs
from ldpflow.core import heavy_hitters as hh
from ldpflow.core.oracles.local_hashing import optimal_hash_range

PROTOCOLS = ("pem", "pem-paper", "pem-optimal-g", "spm", "mcm", "treehist", "sfp")
DATASETS = ("zipf64", "ints32", "words")
DEFAULT_TEXT = "/usr/share/vim/vim90/doc/*.txt"


def control_strings(values: list) -> int:
    """How many decoded strings hold a C0/C1 control character or DEL other than the
    whitespace ``\\t \\n \\v \\f \\r``."""
    return sum(bool(re.search(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]", v))
               for v in values if isinstance(v, str))


def summarise(rows: list[dict]) -> list[dict]:
    """The F1 of every seed, their mean and the control strings per cell."""
    cells: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (row["dataset"], row["protocol"], row["epsilon"], row["k"])
        cells.setdefault(key, []).append(row)
    return [{"dataset": d, "protocol": p, "epsilon": e, "k": k,
             "seeds": [r["seed"] for r in runs], "f1": [r["f1"] for r in runs],
             "f1_mean": round(float(np.mean([r["f1"] for r in runs])), 4),
             "found": [r["found"] for r in runs],
             "control_strings": sum(r["control_strings"] for r in runs)}
            for (d, p, e, k), runs in cells.items()]


def words(pattern: str) -> list[str]:
    tokens: list[str] = []
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8", errors="replace") as f:
            tokens += re.findall(r"[^\W\d_]+", f.read().lower())
    return tokens


def population(dataset: str, users: int, seed: int, text: list[str] | None):
    """``(codes, codec, truth list of codes in rank order)``."""
    rng = np.random.default_rng(seed)
    if dataset == "words":
        chosen = [text[i] for i in rng.permutation(len(text))[:users]]
        codec = codecs.StringCodec.fit(chosen)
        codes = codec.encode(chosen, truncate=True)
    else:
        bits = 64 if dataset == "zipf64" else 32
        codec = codecs.IntegerCodec(bits=bits)
        codes = hh.sample_values(users, num_distinct=100_000, value_bits=bits, rng=rng)
    return codes, codec


def protocol_of(name: str, k: int, m: int, epsilon: float, n: int):
    """``(protocol, identify keyword arguments)``."""
    if name == "pem":
        return hh.configure(top_k=k, value_bits=m, epsilon=epsilon, users=n), {}
    if name == "pem-optimal-g":
        pem = hh.configure(top_k=k, value_bits=m, epsilon=epsilon, users=n)
        return dataclasses.replace(pem, hash_range=optimal_hash_range(epsilon)), {}
    if name == "pem-paper":
        return (hh.PrefixExtendingMethod(top_k=k, value_bits=m, epsilon=epsilon),
                {"survivors": k, "refine_sigma": None})
    return hh.make(name, top_k=k, value_bits=m, epsilon=epsilon), {}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--protocols", nargs="+", choices=PROTOCOLS,
                        default=["pem", "pem-paper", "spm", "mcm", "treehist", "sfp"])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0])
    parser.add_argument("--ks", type=int, nargs="+", default=[32])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--text_glob", default=DEFAULT_TEXT)
    args = parser.parse_args(argv)
    text = words(args.text_glob) if "words" in args.datasets else None
    rows = []
    for dataset in args.datasets:
        for seed in args.seeds:
            codes, codec = population(dataset, args.users, seed, text)
            valid = codec.valid_prefixes if isinstance(codec, codecs.StringCodec) else None
            ranked = hh.true_top(codes)
            for epsilon in args.epsilons:
                for k in args.ks:
                    for name in args.protocols:
                        protocol, kwargs = protocol_of(name, k, codec.bits, epsilon, codes.size)
                        if valid is not None:
                            kwargs["valid"] = valid
                        reports = protocol.perturb(codes, np.arange(codes.size),
                                                   np.random.default_rng([seed, 7]))
                        wall, cpu = time.perf_counter(), time.process_time()
                        found = protocol.identify(reports, **kwargs)
                        cpu = time.process_time() - cpu
                        wall = time.perf_counter() - wall
                        scores = hh.score_top_k(found.values, ranked, k)
                        decoded = codec.decode(found.values) if found.values.size else []
                        rows.append({
                            "dataset": dataset, "protocol": name, "epsilon": epsilon, "k": k,
                            "seed": seed, "n": int(codes.size), "m": codec.bits,
                            "groups": protocol.num_groups,
                            "hash_range": getattr(protocol, "hash_range", None),
                            **{key: round(v, 4) for key, v in scores.items()},
                            "found": int(found.values.size),
                            "control_strings": control_strings(list(decoded)),
                            "server_seconds": round(wall, 2),
                            "server_cpu_seconds": round(cpu, 2)})
                        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"summary": summarise(rows)}), flush=True)


if __name__ == "__main__":
    main()
