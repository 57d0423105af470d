"""The heavy-hitter job plan without Beam: the protocol's own passes on the deduplicated
reports, pure sums, and tasks that hold one running sum each."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ldpflow.core import heavy_hitters as hh
from ldpflow.plan import heavy_hitters as plan
from ldpflow.plan.backend import LocalBackend
from ldpflow.plan.steps import RangeTask
from ldpflow.wire.parse import AcceptancePolicy
from tests import wire_support as formats
from tests.core.heavy_hitter_contract import make, population

USERS, COPIES = 3000, 200


def _write(folder, name):
    protocol = make(name)
    users = [f"u{i}" for i in range(USERS)]
    reports = protocol.perturb(population(USERS, 3), users, np.random.default_rng(4))
    records = formats.reports_to_records(protocol, reports, [f"r{i}" for i in range(USERS)],
                                         users, np.arange(USERS))
    half = USERS // 2
    with open(folder / "a.avro", "wb") as f:
        formats.write_avro(f, records[:half])
    with open(folder / "b.avro", "wb") as f:  # and a part of a.avro sent again
        formats.write_avro(f, records[half:] + records[:COPIES])
    return str(folder / "*.avro"), protocol, reports


@pytest.mark.parametrize("name", sorted(hh.PROTOCOLS))
def test_plan_finds_what_the_protocol_finds_on_the_deduplicated_reports(tmp_path, name):
    pattern, protocol, reports = _write(tmp_path, name)
    found = plan.first_configuration([str(tmp_path / "a.avro")], None, name)
    assert found == protocol
    job = plan.HeavyHittersJob(input=pattern, output=str(tmp_path / "out"), protocol=found,
                               policy=AcceptancePolicy(expect={"oracle": name},
                                                       id_key=bytes(16)))
    summary = plan.run_heavy_hitters(LocalBackend(), job)
    with open(tmp_path / "out" / "heavy_hitters.json") as f:
        document = json.load(f)
    expected = protocol.identify(reports)
    assert [t["value"] for t in document["top_k"]] == expected.values.tolist()
    assert [t["frequency"] for t in document["top_k"]] == expected.frequencies.tolist()
    assert document["group_sizes"] == list(expected.group_sizes)
    assert [s["candidates"] for s in document["stages"]] == list(expected.stage_candidates)
    assert summary["records"] == document["records"] == USERS + COPIES
    assert summary["duplicates"] == document["duplicates"] == COPIES
    assert summary["estimated"] == document["n"] == USERS and summary["dead_letters"] == 0
    assert len(summary["passes"]) == protocol.num_passes


def test_pass_tally_sums_are_pure_and_merge_adds_in_place():
    protocol = make("pem")
    users = [f"u{i}" for i in range(800)]
    reports = protocol.perturb(population(800, 1), users, np.random.default_rng(2))
    records = formats.reports_to_records(protocol, reports, [f"r{i}" for i in range(800)],
                                         users, np.arange(800))
    batches, _ = formats.parse_records(records, expect={"oracle": "pem"})
    ((_, batch),) = batches.items()
    state = protocol.initial_state()
    a = plan._tally(protocol, 0, state, [batch[np.arange(400)]])
    b = plan._tally(protocol, 0, state, [batch[np.arange(400, 800)]])
    whole = plan._tally(protocol, 0, state, [batch])
    a_counts, a_groups = a.counts.copy(), a.group_counts.copy()
    total = a + b
    assert total.counts == whole.counts and np.array_equal(total.parts, whole.parts)
    assert a.counts == a_counts and np.array_equal(a.group_counts, a_groups)  # unchanged
    assert (total - b).counts == a.counts
    assert total.partial().batches == int(np.count_nonzero(whole.parts))
    assert a.merge(b) is a and a.counts == whole.counts  # merge: in place, by design


class _Wide(LocalBackend):
    parallelism = 3


@pytest.mark.parametrize("backend, expected",
                         [(LocalBackend(), [7]), (_Wide(), [1, 1, 1, 1, 1, 2])])
def test_tasks_are_runs_of_consecutive_ranges_a_few_per_worker(backend, expected):
    tasks = [RangeTask(i, f"f{i}", "avro") for i in range(7)]
    lists = plan.task_lists(tasks, backend)
    assert [len(t) for t in lists] == expected
    assert [t for part in lists for t in part] == tasks
