"""Seeded reports of ldpflow's own clients, for the JavaScript client to replay exactly.

Reads a JSON list of cases on standard input (``oracle``, ``parameters``, ``client_seed``,
``value``; onebit ``column``; a heavy-hitter protocol (pem, spm, mcm, treehist, sfp) its
configuration, ``user_id`` and ``value``, the integer code) and writes the reports
ldpflow makes from ``SplitMix64Source(client_seed)``, in the test vectors' wire form. A case
``{"buckets": {"parameters": ..., "pairs": [[j, v], ...]}}`` gets the buckets ``h_j(v)`` of
a sketch with those parameters instead, and a case ``{"geometry": [[epsilon, d], ...]}`` gets
PGR's ``[q, t, K]`` of each pair (``choose_geometry``); ``{"below": [[bound, size, seed], ...]}``
gets ``SplitMix64Source(seed).below(bound, size)`` of each; ``{"validate": [[protocol,
parameters], ...]}`` gets, for each, ldpflow's derived ``[num_groups, hash_range]`` or, when
it refuses the parameters, ``null``.
"""

import json
import sys

import numpy as np

from ldpflow.core import heavy_hitters as hh
from ldpflow.core.oracles import pgr, registry
from ldpflow.core.randomness import SplitMix64Source


def wire(report):
    return {k: (v.hex() if isinstance(v, bytes) else str(v)) for k, v in report.items()}


out = []
for case in json.load(sys.stdin):
    if "buckets" in case:  # h_j(v) of a sketch for the given (j, v) pairs
        sketch = registry.make("cms", **case["buckets"]["parameters"])
        pairs = case["buckets"]["pairs"]
        j, v = (np.array(column, dtype=np.int64) for column in zip(*pairs, strict=True))
        out.append([str(b) for b in sketch._hash(j, v)])
        continue
    if "below" in case:  # the batched below(bound, size) of a seeded stream
        out.append([[str(x) for x in SplitMix64Source(int(seed)).below(int(bound), int(size))]
                    for bound, size, seed in case["below"]])
        continue
    if "geometry" in case:  # PGR's (q, t, K) for the given (epsilon, d) pairs
        geometries = []
        for epsilon, domain_size in case["geometry"]:
            q, t = pgr.choose_geometry(float(epsilon), int(domain_size))
            geometries.append([str(q), str(t), str((q**t - 1) // (q - 1))])
        out.append(geometries)
        continue
    if "validate" in case:  # does ldpflow accept each configuration, and what does it derive?
        derived = []
        for name, parameters in case["validate"]:
            parameters = {k: int(v) if k.endswith("_seed") else v for k, v in parameters.items()}
            try:
                protocol = hh.PROTOCOLS[name](**parameters)
            except (TypeError, ValueError):
                derived.append(None)
                continue
            derived.append([protocol.num_groups, int(protocol.hash_range)])
        out.append(derived)
        continue
    source = SplitMix64Source(int(case["client_seed"]))
    if case["oracle"] in hh.PROTOCOLS:
        parameters = {k: int(v) if k.endswith("_seed") else v
                      for k, v in case["parameters"].items()}
        protocol = hh.PROTOCOLS[case["oracle"]](**parameters)
        reports = protocol.perturb(np.array([int(case["value"])], dtype=np.uint64),
                                   [case["user_id"]], source)
        out.append(wire(reports.to_records()[0]))
    else:
        oracle = registry.make(case["oracle"], **case["parameters"])
        extra = {"column": case["column"]} if "column" in case else {}
        out.append(wire(oracle.perturb_one(case["value"], source, **extra)))
json.dump(out, sys.stdout)
