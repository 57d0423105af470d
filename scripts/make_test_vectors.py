"""Write the published test vectors of the hash family and of client reports.

    python scripts/make_test_vectors.py [--output docs/testvectors]

``hash_family.json``: (seed, value_bits, hash_range, value) -> bucket of ``H_s``.
``client_reports.json``: for each oracle, a client whose random words are the splitmix64
stream of ``client_seed`` (``SplitMix64Source``) perturbs ``value`` into ``report`` (bytes as
hex). 64-bit integers are decimal strings, so JSON readers without 64-bit numbers keep them.
``heavy_hitter_reports.json``: the same for one user of each heavy-hitter protocol (``pem spm
mcm treehist sfp``): its ``user_id`` fixes its ``group``, ``value`` is its value (``code`` the
``codec``'s integer of it), ``report`` the payload columns (unsigned seeds); 64-bit keys among
the ``parameters`` (``channel_seed``, ``hash_seed``) are decimal strings too.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import numpy as np

from ldpflow.core import codecs, hashing
from ldpflow.core import heavy_hitters as hh
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


HEAVY_HITTER_CASES = [
    ("pem", {"top_k": 8, "value_bits": 32, "epsilon": 4.0}),
    ("pem", {"top_k": 4, "value_bits": 64, "epsilon": 1.0, "query_limit": 4096}),
    ("spm", {"top_k": 8, "value_bits": 32, "epsilon": 3.0}),
    ("spm", {"top_k": 4, "value_bits": 64, "epsilon": 6.0, "num_segments": 5, "segment_top": 6}),
    ("spm", {"top_k": 3, "value_bits": 7, "epsilon": 0.5, "query_limit": 64}),
    ("mcm", {"top_k": 8, "value_bits": 32, "epsilon": 4.0}),
    ("mcm", {"top_k": 5, "value_bits": 64, "epsilon": 1.5, "num_channels": 7,
             "channel_seed": 2**64 - 12345}),
    ("treehist", {"top_k": 8, "value_bits": 32, "epsilon": 4.0}),
    ("treehist", {"top_k": 2, "value_bits": 61, "epsilon": 9.0, "step_bits": 5,
                  "hash_range": 2}),
    ("sfp", {"top_k": 8, "value_bits": 32, "epsilon": 4.0}),
    ("sfp", {"top_k": 3, "value_bits": 64, "epsilon": 2.5, "fragment_bits": 8, "hash_bits": 9,
             "hash_seed": 2**63 + 99}),
]
#: String-codec cases: (protocol, parameters, the value).
HEAVY_HITTER_STRING_CASES = [
    ("pem", {"top_k": 8, "value_bits": 64, "epsilon": 4.0}, "ldpflow"),
    ("spm", {"top_k": 8, "value_bits": 48, "epsilon": 3.0}, "é漢"),
    ("mcm", {"top_k": 8, "value_bits": 32, "epsilon": 4.0}, "abc"),
    ("treehist", {"top_k": 8, "value_bits": 64, "epsilon": 4.0}, "https:/"),
    ("sfp", {"top_k": 8, "value_bits": 64, "epsilon": 4.0}, "🙂x"),
]


def _wire(value):
    return value.hex() if isinstance(value, bytes) else str(value) if value >= 2**53 else value


def heavy_hitter_vectors() -> list[dict]:
    out = []
    cases = [(name, params, None) for name, params in HEAVY_HITTER_CASES]
    cases += HEAVY_HITTER_STRING_CASES
    for index, (name, parameters, text) in enumerate(cases):
        protocol = hh.PROTOCOLS[name](**parameters)
        bits = protocol.value_bits
        for client_seed in (1, 2, 3):
            user_id = f"vector-user-{index}-{client_seed}"
            if text is None:
                codec = "int"
                code = int(SplitMix64Source(100 * index + client_seed).words(1)[0]) >> (64 - bits)
                value = str(code) if code >= 2**53 else code
            else:
                codec, value = "string", text
                code = int(codecs.StringCodec(bits=bits).encode([text])[0])
            reports = protocol.perturb(np.array([code], dtype=np.uint64), [user_id],
                                       SplitMix64Source(client_seed))
            (report,) = reports.to_records()
            wire_parameters = {k: _wire(v) if isinstance(v, int) else v
                               for k, v in parameters.items()}
            out.append({"protocol": name, "parameters": wire_parameters, "codec": codec,
                        "client_seed": client_seed, "user_id": user_id, "value": value,
                        "code": str(code), "report": {k: _wire(v) for k, v in report.items()}})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default="docs/testvectors")
    args = parser.parse_args(argv)
    folder = pathlib.Path(args.output)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hash_family.json").write_text(json.dumps(hash_vectors(), indent=1) + "\n")
    (folder / "client_reports.json").write_text(json.dumps(client_vectors(), indent=1) + "\n")
    (folder / "heavy_hitter_reports.json").write_text(
        json.dumps(heavy_hitter_vectors(), indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
