"""The job-wide memory budget (``--max_job_bytes``): many parameter sets, each within
``--max_key_bytes``, cannot together exhaust memory; the sets with the most reports are
admitted while they fit, the reports of the others are dead letters, on every engine."""

from __future__ import annotations

import glob
import json

import numpy as np
import pytest

import ldpflow
from ldpflow.pipelines import estimate
from ldpflow.pipelines.verdict import verdict
from ldpflow.plan.steps import key_memory
from tests import wire_support as formats
from tests.wire_support import reports_to_records

pytestmark = pytest.mark.pipeline

KEYS, ADMITTED, DOMAIN = 64, 10, 16


def _write(folder, copies: int = 0):
    """64 GRR keys (one epsilon each), key ``i`` with ``5 + i`` reports, in one file."""
    records = []
    for i in range(KEYS):
        oracle = ldpflow.oracle("grr", epsilon=0.5 + i / 100, domain_size=DOMAIN)
        rng = np.random.default_rng(i)
        n = 5 + i
        reports = oracle.perturb(rng.integers(0, DOMAIN, n), rng=rng)
        records += reports_to_records(oracle, reports, [f"k{i}-{j}" for j in range(n)],
                                      [f"u{j}" for j in range(n)], np.arange(n))
    records += records[:5] * (copies // 5)  # copies of key 0's 5 reports (counted once)
    with open(folder / "many.avro", "wb") as f:
        formats.write_avro(f, records)
    return str(folder / "many.avro")


def _budget_flags():
    need = key_memory(ldpflow.oracle("grr", epsilon=1.0, domain_size=DOMAIN).key)
    return [f"--max_key_bytes={need}",  # every key at the per-key bound
            f"--max_job_bytes={ADMITTED * need + need // 2}"]  # 10 of them, not 11


@pytest.mark.parametrize("engine,extra", [("beam", []), ("local", []),
                                          ("local", ["--dedup=none"]),
                                          ("local", ["--max_reports_per_user=100"]),
                                          ("beam", ["--max_reports_per_user=100"])])
def test_keys_past_the_job_budget_are_dead_letters(tmp_path, engine, extra):
    source = _write(tmp_path)
    out = tmp_path / "out"
    summary = estimate.run([f"--input={source}", f"--output={out}", "--methods=base",
                            f"--engine={engine}", *_budget_flags(), *extra])
    with open(out / "estimates.json") as f:
        document = json.load(f)
    epsilons = sorted(r["epsilon"] for r in document["results"])
    # The 10 keys with the most reports (i = 54 .. 63), whatever the order they were read in.
    assert epsilons == pytest.approx([0.5 + i / 100 for i in range(KEYS - ADMITTED, KEYS)])
    refused = sum(5 + i for i in range(KEYS - ADMITTED))
    assert summary["reports_estimated"] == sum(5 + i for i in range(KEYS - ADMITTED, KEYS))
    assert summary["dead_letters"] == document["dead_letters"]["total"] == refused
    (reason,) = summary["reasons"]
    assert "(--max_job_bytes)" in reason
    letters = [json.loads(line) for path in glob.glob(f"{out}/dead_letters/*.jsonl")
               for line in open(path)]
    assert len(letters) == KEYS - ADMITTED
    assert sum(letter["count"] for letter in letters) == refused
    assert all(letter["record"] is None and letter["source"] == source for letter in letters)
    # 1701 of 2336 records refused: the run fails by the verdict (exit status 1).
    assert "more than --max_dead_letter_fraction" in verdict(summary, 0.01)


def test_job_budget_counts_duplicates_as_read_and_admits_in_order(tmp_path):
    """Admission ranks by reports read (copies included), so key 0 with 80 copies (85 read)
    is admitted first; the dedup still counts it once."""
    source = _write(tmp_path, copies=80)
    for engine in ("beam", "local"):
        out = tmp_path / engine
        summary = estimate.run([f"--input={source}", f"--output={out}", "--methods=base",
                                f"--engine={engine}", *_budget_flags()])
        document = json.load(open(out / "estimates.json"))
        epsilons = sorted(r["epsilon"] for r in document["results"])
        assert epsilons == pytest.approx([0.5] + [0.5 + i / 100 for i in range(55, KEYS)])
        assert summary["duplicates"] == 80
        assert summary["dead_letters"] == sum(5 + i for i in range(1, 55))


def test_job_budget_refused_flag_is_a_usage_error(tmp_path):
    source = _write(tmp_path)
    with pytest.raises(SystemExit) as exc:
        estimate.run([f"--input={source}", f"--output={tmp_path}/o", "--max_job_bytes=0"])
    assert "--max_job_bytes must be a positive integer" in str(exc.value.code)
