"""The published test vectors still hold, and agree with the plain-Python reference."""

from __future__ import annotations

import json
import pathlib

import numpy as np

from ldpflow.core import hashing
from ldpflow.core.oracles import registry
from ldpflow.core.randomness import SplitMix64Source
from tests.core import reference

VECTORS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "testvectors"


def test_hash_family_vectors():
    cases = json.loads((VECTORS / "hash_family.json").read_text())
    assert len(cases) >= 30
    for case in cases:
        seed, value = int(case["seed"]), int(case["value"])
        want = case["bucket"]
        assert reference.hash_value(seed, value, case["value_bits"], case["hash_range"]) == want
        got = hashing.hash_values(np.array([seed], np.uint64), np.array([value], np.uint64),
                                  case["value_bits"], case["hash_range"])
        assert int(got[0]) == want


def test_client_report_vectors():
    cases = json.loads((VECTORS / "client_reports.json").read_text())
    # sketch_reports.json: cms, hcms and pgr (the JavaScript client covers cms and hcms)
    sketches = json.loads((VECTORS / "sketch_reports.json").read_text())
    assert {c["oracle"] for c in cases} | {c["oracle"] for c in sketches} == set(registry.ORACLES)
    cases += sketches
    for case in cases:
        oracle = registry.make(case["oracle"], **case["parameters"])
        kwargs = {"column": case["column"]} if "column" in case else {}
        report = oracle.perturb_one(case["value"], SplitMix64Source(case["client_seed"]), **kwargs)
        wire = {k: (v.hex() if isinstance(v, bytes) else str(v) if v >= 2**53 else v)
                for k, v in report.items()}
        assert wire == case["report"], case
