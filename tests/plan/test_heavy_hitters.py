"""The heavy-hitter job plan without Beam: the protocol's own passes on the deduplicated
reports, pure sums, and tasks that hold one running sum each."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ldpflow.core import heavy_hitters as hh
from ldpflow.plan import heavy_hitters as plan
from ldpflow.plan import packed
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
    assert [s["candidates"] for s in document["passes"]] == list(expected.pass_candidates)
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
    a = plan.pass_tally(protocol, 0, state, [batch[np.arange(400)]])
    b = plan.pass_tally(protocol, 0, state, [batch[np.arange(400, 800)]])
    whole = plan.pass_tally(protocol, 0, state, [batch])
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


def _job(pattern, output, protocol, **extra):
    return plan.HeavyHittersJob(input=pattern, output=str(output), protocol=protocol,
                                policy=AcceptancePolicy(expect={"oracle": protocol.name},
                                                        id_key=bytes(16)), **extra)


def _leftovers(output) -> list[str]:
    return sorted(p for p in os.listdir(output) if p.startswith(".ldpflow-passes-"))


def _passes(monkeypatch) -> list:
    """Each pass's deduplicated sums, as the job computes them."""
    passes: list = []
    corrected = plan.corrected_tallies
    monkeypatch.setattr(plan, "corrected_tallies",
                        lambda *a: passes.append(corrected(*a)) or passes[-1])
    return passes


def _reads(monkeypatch) -> list:
    """The pass of each read of an input range."""
    steps: list = []
    original = plan.read_pass

    def read_pass(task, policy, pass_index, *a, **k):
        steps.append(pass_index)
        return original(task, policy, pass_index, *a, **k)

    monkeypatch.setattr(plan, "read_pass", read_pass)
    return steps


@pytest.mark.parametrize("name", sorted(hh.PROTOCOLS))
def test_spilled_passes_count_what_reading_again_counts(tmp_path, monkeypatch, name):
    """The later passes read what pass 0 spilled: the same integer sums every pass, the
    same document, and the spill folder is gone when the job is done."""
    pattern, protocol, _ = _write(tmp_path, name)
    documents, sums = {}, {}
    for store in plan.PASS_STORES:
        with monkeypatch.context() as patch:
            passes = _passes(patch)
            reads = _reads(patch)  # with the spill, the input is read by pass 0 alone
            plan.run_heavy_hitters(LocalBackend(), _job(pattern, tmp_path / store, protocol,
                                                        pass_store=store))
        sums[store] = passes
        assert set(reads) == ({0} if store == "disk" else set(range(protocol.num_passes)))
        with open(tmp_path / store / "heavy_hitters.json") as f:
            document = json.load(f)
        document["elapsed_seconds"] = None
        documents[store] = document
        assert _leftovers(tmp_path / store) == []
    assert documents["disk"] == documents["reread"]
    assert len(sums["disk"]) == len(sums["reread"]) == protocol.num_passes
    for disk, again in zip(sums["disk"], sums["reread"], strict=True):
        assert disk.keys() == again.keys()
        for key, tally in disk.items():
            assert tally.counts == again[key].counts
            assert np.array_equal(tally.group_counts, again[key].group_counts)
            assert np.array_equal(tally.parts, again[key].parts)


def test_spill_folder_is_removed_when_a_pass_fails(tmp_path, monkeypatch):
    pattern, protocol, _ = _write(tmp_path, "pem")

    def fails(*a, **k):
        assert len(_leftovers(tmp_path / "out")) == 1  # the spill is there while it runs
        raise RuntimeError("a worker was lost")

    monkeypatch.setattr(plan, "read_spilled", fails)
    with pytest.raises(RuntimeError, match="a worker was lost"):
        plan.run_heavy_hitters(LocalBackend(), _job(pattern, tmp_path / "out", protocol))
    assert _leftovers(tmp_path / "out") == []
    assert not os.path.exists(tmp_path / "out" / "heavy_hitters.json")


@pytest.mark.parametrize("damage", ["missing", "damaged"])
def test_spill_lost_during_the_run_is_a_clear_error(tmp_path, monkeypatch, damage):
    pattern, protocol, _ = _write(tmp_path, "pem")
    tasks = plan.spill_tasks

    def lose(spilled, pass_index, backend):
        path = spilled[0][2]
        if damage == "missing":
            os.remove(path)
        else:
            with open(path, "r+b") as f:
                f.seek(-1, os.SEEK_END)
                byte = f.read(1)
                f.seek(-1, os.SEEK_END)
                f.write(bytes([byte[0] ^ 1]))
        return tasks(spilled, pass_index, backend)

    monkeypatch.setattr(plan, "spill_tasks", lose)
    message = "is missing" if damage == "missing" else "do not match their checksum"
    with pytest.raises(packed.SpillError, match=message):
        plan.run_heavy_hitters(LocalBackend(), _job(pattern, tmp_path / "out", protocol))
    assert _leftovers(tmp_path / "out") == []


class _Two(LocalBackend):
    parallelism = 2


def test_spilled_pass_runs_as_twice_as_many_tasks_as_workers(tmp_path, monkeypatch):
    """Two spill files (two input files) of one pass still give 2 workers 4 tasks, of whole
    blocks, which cover every row once."""
    monkeypatch.setattr(packed, "SPILL_BLOCK", 16)
    key = ("pem",)
    spilled = [(key, 1, "a.pak", 100), (key, 1, "b.pak", 90), (key, 2, "c.pak", 50)]
    monkeypatch.setattr(plan, "_protocol", lambda k, cache: make("pem"))
    lists = plan.spill_tasks(spilled, 1, _Two())
    assert len(lists) == 4
    rows = {"a.pak": [], "b.pak": []}
    for pieces in lists:
        for _, group, path, start, stop in pieces:
            assert group == 1 and start % 16 == 0
            rows[path].extend(range(start, stop))
    assert rows == {"a.pak": list(range(100)), "b.pak": list(range(90))}
    assert [len(t) for t in plan.spill_tasks(spilled, 1, LocalBackend())] == [2]
