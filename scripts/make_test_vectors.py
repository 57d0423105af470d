"""Write the published test vectors of the hash family and of client reports.

    python scripts/make_test_vectors.py [--output docs/testvectors]

``hash_family.json``: (seed, value_bits, hash_range, value) -> bucket of ``H_s``.
``client_reports.json``: for each oracle, a client whose random words are the splitmix64
stream of ``client_seed`` (``SplitMix64Source``) perturbs ``value`` into ``report`` (bytes as
hex). 64-bit integers are decimal strings, so JSON readers without 64-bit numbers keep them.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import numpy as np

from ldpflow.core import hashing
from ldpflow.core.oracles import registry
from ldpflow.core.randomness import SplitMix64Source

HASH_CASES = [(1, 2), (4, 2), (10, 4), (16, 8), (20, 16), (32, 64), (48, 256), (64, 2), (64, 1024)]
CLIENT_CASES = [
    ("grr", 1.0, 10), ("oue", 1.0, 20), ("sue", 2.0, 20), ("olh", 1.0, 1024),
    ("blh", 0.5, 1000), ("hr", 1.0, 100), ("ss", 1.0, 32), ("onebit", 1.0, 100),
]


def hash_vectors() -> list[dict]:
    out = []
    for i, (value_bits, g) in enumerate(HASH_CASES):
        words = SplitMix64Source(1000 + i).words(8)
        seeds, values = words[:4], words[4:] & np.uint64(
            (1 << value_bits) - 1 if value_bits < 64 else 2**64 - 1)
        buckets = hashing.hash_values(seeds, values, value_bits, g)
        for s, v, b in zip(seeds.tolist(), values.tolist(), buckets.tolist(), strict=True):
            out.append({"seed": str(s), "value_bits": value_bits, "hash_range": g,
                        "value": str(v), "bucket": b})
    return out


def client_vectors() -> list[dict]:
    out = []
    for name, epsilon, d in CLIENT_CASES:
        oracle = registry.make(name, epsilon=epsilon, domain_size=d)
        for client_seed in (1, 2, 3):
            value = (client_seed * 7919) % d
            kwargs = {"column": client_seed % oracle.order} if name == "onebit" else {}
            report = oracle.perturb_one(value, SplitMix64Source(client_seed), **kwargs)
            wire = {k: (v.hex() if isinstance(v, bytes) else str(v) if v >= 2**53 else v)
                    for k, v in report.items()}
            out.append({"oracle": name, "parameters": oracle.parameters, "client_seed": client_seed,
                        "value": value, **kwargs, "report": wire})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default="docs/testvectors")
    args = parser.parse_args(argv)
    folder = pathlib.Path(args.output)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hash_family.json").write_text(json.dumps(hash_vectors(), indent=1) + "\n")
    (folder / "client_reports.json").write_text(json.dumps(client_vectors(), indent=1) + "\n")


if __name__ == "__main__":
    main()
