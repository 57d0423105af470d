"""Write the published test vectors of the hash family and of client reports.

    python scripts/make_test_vectors.py [--output docs/testvectors]

``hash_family.json``: (seed, value_bits, hash_range, value) -> bucket of ``H_s``.
``client_reports.json``: for each oracle, a client whose random words are the splitmix64
stream of ``client_seed`` (``SplitMix64Source``) perturbs ``value`` into ``report`` (bytes as
hex). 64-bit integers are decimal strings, so JSON readers without 64-bit numbers keep them.
``heavy_hitter_reports.json``: the same for one user of each heavy-hitter protocol (``pem spm
mcm treehist sfp``): its ``user_id`` fixes its ``group``, ``value`` is its value (``code`` the
``codec``'s integer of it), ``report`` the payload columns (unsigned seeds); 64-bit keys among
the ``parameters`` (``channel_seed``, ``hash_seed``) are decimal strings too. A case whose
``parameters`` name no ``group_hash`` is of version 1 (as a report that names none); the cases
appended after them name ``group_hash`` 2.
``group_hash.json``: for each user id (its UTF-8 bytes as hex too), the keyed string hash
``S_K`` of ``ldpflow-grouphash-2`` (``K`` = ``GROUP_HASH_KEY``), each version's 64-bit key and
its group for several numbers of groups; and ``S_K`` of a few byte strings under other keys.
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


#: Version-2 heavy-hitter cases, appended after the version-1 ones (one per protocol and codec).
HEAVY_HITTER_V2_CASES = [
    ("pem", {"top_k": 8, "value_bits": 32, "epsilon": 4.0}, None),
    ("spm", {"top_k": 4, "value_bits": 64, "epsilon": 6.0, "num_segments": 5, "segment_top": 6},
     None),
    ("mcm", {"top_k": 5, "value_bits": 64, "epsilon": 1.5, "num_channels": 7,
             "channel_seed": 2**64 - 12345}, None),
    ("treehist", {"top_k": 8, "value_bits": 32, "epsilon": 4.0}, None),
    ("sfp", {"top_k": 8, "value_bits": 32, "epsilon": 4.0}, None),
    ("pem", {"top_k": 8, "value_bits": 64, "epsilon": 4.0}, "ldpflow"),
    ("spm", {"top_k": 8, "value_bits": 48, "epsilon": 3.0}, "é漢"),
    ("mcm", {"top_k": 8, "value_bits": 32, "epsilon": 4.0}, "abc"),
    ("treehist", {"top_k": 8, "value_bits": 64, "epsilon": 4.0}, "https:/"),
    ("sfp", {"top_k": 8, "value_bits": 64, "epsilon": 4.0}, "🙂x"),
]
#: User ids of the group hash vectors: empty, word boundaries (7, 8, 9, 16, 17 bytes),
#: multi-byte UTF-8, a NUL byte, a long id.
GROUP_HASH_IDS = ["", "a", "alice", "user-12", "user-123", "user-1234", "0123456789abcdef",
                  "0123456789abcdefg", "é", "日本語", "🙂 smile", "a\x00", "a\x00b",
                  "vector-user-0-1", "x" * 100]
GROUP_COUNTS = [1, 2, 3, 4, 7, 16]


def group_hash_vectors() -> dict:
    ids = []
    for user_id in GROUP_HASH_IDS:
        data = user_id.encode("utf-8")
        keys = {str(v): int(hh.user_keys([user_id], group_hash=v)[0]) for v in hh.GROUP_HASHES}
        groups = {str(v): {str(g): int(hh.assign_groups([user_id], g, group_hash=v)[0])
                           for g in GROUP_COUNTS} for v in hh.GROUP_HASHES}
        ids.append({"user_id": user_id, "utf8": data.hex(),
                    "keyed_hash": str(keys[str(hh.GROUP_HASH_KEYED)]),
                    "keys": {v: str(k) for v, k in keys.items()}, "groups": groups})
    raw = []
    for key in (0, 1, int(hashing.GOLDEN_GAMMA), 2**64 - 1, hh.GROUP_HASH_KEY):
        for data in (b"", b"\x00", bytes(range(1, 8)), bytes(range(8)), bytes(range(9)),
                     bytes(range(256))[::7]):
            offsets = np.array([0, len(data)], dtype=np.int64)
            value = hashing.keyed_string_hashes(offsets, np.frombuffer(data, np.uint8), key)[0]
            raw.append({"key": str(key), "bytes": data.hex(), "hash": str(int(value))})
    return {"key": str(hh.GROUP_HASH_KEY), "ids": ids, "keyed_hashes": raw}


def _wire(value):
    return value.hex() if isinstance(value, bytes) else str(value) if value >= 2**53 else value


def heavy_hitter_vectors() -> list[dict]:
    out = []
    cases = [(name, {**params, "group_hash": 1}, None) for name, params in HEAVY_HITTER_CASES]
    cases += [(name, {**params, "group_hash": 1}, text)
              for name, params, text in HEAVY_HITTER_STRING_CASES]
    cases += [(name, {**params, "group_hash": 2}, text)
              for name, params, text in HEAVY_HITTER_V2_CASES]
    for index, (name, parameters, text) in enumerate(cases):
        protocol = hh.PROTOCOLS[name](**parameters)
        if parameters["group_hash"] == 1:  # the version-1 cases name no version (as before)
            parameters = {k: v for k, v in parameters.items() if k != "group_hash"}
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
    (folder / "group_hash.json").write_text(
        json.dumps(group_hash_vectors(), indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
