"""The heavy-hitter plan reads the next range on a thread while it counts this one, and
counts the later passes' spill pieces in parts on several threads (``LDPFLOW_THREADS`` >
1): the same sums, records, dead letters (in order) and document as reading one range
after the other, errors raised where they were, and never more than one chunk read
ahead."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pyarrow as pa
import pytest

from ldpflow.plan import heavy_hitters as plan
from ldpflow.plan import job as estimate_plan
from ldpflow.plan import packed
from ldpflow.plan.backend import LocalBackend
from ldpflow.schemas import schema_json
from ldpflow.wire import avro, formats
from ldpflow.wire.parse import AcceptancePolicy
from tests.core.heavy_hitter_contract import make, population

USERS, COPIES, BLOCK_ROWS = 3000, 200, 100
THREAD = "ldpflow-read-ahead"


def _write(folder) -> tuple[str, object]:
    """Two Avro files of small blocks (the second repeats some reports of the first and
    has one damaged block) and a file that is not Avro at all."""
    protocol = make("pem")
    users = [f"u{i}" for i in range(USERS)]
    reports = protocol.perturb(population(USERS, 3), users, np.random.default_rng(4))
    table = formats.reports_table(protocol, reports, formats.numbered_ids("r", 0, USERS),
                                  users, np.arange(USERS, dtype=np.int64))
    half = USERS // 2
    schema = schema_json("report")
    with open(folder / "a.avro", "wb") as f:
        f.write(avro.encode_container(table.slice(0, half), schema, "deflate", BLOCK_ROWS))
    data = bytearray(avro.encode_container(
        pa.concat_tables([table.slice(half), table.slice(0, COPIES)]), schema, "deflate",
        BLOCK_ROWS))
    middle = len(data) // 2
    data[middle:middle + 40] = bytes(40)  # a block's data zeroed: one dead letter
    with open(folder / "b.avro", "wb") as f:
        f.write(bytes(data))
    with open(folder / "c.avro", "wb") as f:
        f.write(b"not an Avro container")
    return str(folder / "*.avro"), protocol


def _job(pattern, output, protocol, range_bytes=8 << 10, **extra):
    return plan.HeavyHittersJob(input=pattern, output=str(output), protocol=protocol,
                                policy=AcceptancePolicy(expect={"oracle": "pem"},
                                                        id_key=bytes(16)),
                                range_bytes=range_bytes, **extra)


def _threads_made(monkeypatch) -> list[str]:
    """The name of the thread that made each range's chunks."""
    names: list[str] = []
    original = plan._range_chunks

    def chunks(*a, **k):
        names.append(threading.current_thread().name)
        return original(*a, **k)

    monkeypatch.setattr(plan, "_range_chunks", chunks)
    return names


def _outputs(folder) -> dict[str, object]:
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = f.read()
    for name, data in out.items():
        if name == "heavy_hitters.json":
            document = json.loads(data)
            document["elapsed_seconds"] = None
            out[name] = document
    return out


def _no_reader_left() -> bool:
    return not any(t.name == THREAD and t.is_alive() for t in threading.enumerate())


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(avro, "CHUNK_ROWS", 250)  # several chunks a range


@pytest.mark.parametrize("store", plan.PASS_STORES)
def test_reading_ahead_gives_the_job_of_reading_one_range_after_the_other(
        tmp_path, monkeypatch, small_chunks, store):
    pattern, protocol = _write(tmp_path)
    assert len(estimate_plan.plan_ranges(pattern, None, 8 << 10)) > 6
    runs = {}
    for threads in ("1", "2"):
        with monkeypatch.context() as patch:
            patch.setenv("LDPFLOW_THREADS", threads)
            made = _threads_made(patch)
            summary = plan.run_heavy_hitters(
                LocalBackend(), _job(pattern, tmp_path / threads, protocol, pass_store=store))
        assert set(made) == ({THREAD} if threads == "2" else {threading.current_thread().name})
        for name in ("seconds", "timings_ms", "output"):
            summary.pop(name)
        runs[threads] = summary, _outputs(tmp_path / threads)
        assert _no_reader_left()
    (one, files_one), (two, files_two) = runs["1"], runs["2"]
    assert one == two and files_one == files_two
    assert one["duplicates"] == COPIES and one["dead_letters"] > 0
    assert one["lost_parts"] >= 1  # c.avro, lost whole
    letters = [name for name in files_one if name != "heavy_hitters.json"]
    assert letters  # the dead letters, in the same order in the same files


def _read_all(tasks, threads, monkeypatch):
    monkeypatch.setenv("LDPFLOW_THREADS", threads)
    return plan.read_ranges(tasks, AcceptancePolicy(expect={"oracle": "pem"}, id_key=bytes(16)),
                            0, account=True, ids=True)


def test_read_ranges_gives_the_same_reads_and_tallies(tmp_path, monkeypatch, small_chunks):
    pattern, _ = _write(tmp_path)
    tasks = estimate_plan.plan_ranges(pattern, None, 8 << 10)
    one, two = (_read_all(tasks, t, monkeypatch) for t in ("1", "2"))
    assert one.tallies.keys() == two.tallies.keys()
    for key, tally in one.tallies.items():
        assert tally.counts == two.tallies[key].counts
        assert np.array_equal(tally.parts, two.tallies[key].parts)
        assert np.array_equal(tally.group_counts, two.tallies[key].group_counts)
    assert len(one.reads) == len(two.reads) == len(tasks)
    for a, b in zip(one.reads, two.reads, strict=True):
        assert (a.index, a.records, a.reports, a.reasons, a.letters, a.dead) == (
            b.index, b.records, b.reports, b.reasons, b.letters, b.dead)
        assert [(k, g, h.tolist()) for k, g, h in a.ids] == [
            (k, g, h.tolist()) for k, g, h in b.ids]


@pytest.mark.parametrize("threads", ["1", "2"])
def test_an_error_reading_a_range_is_raised_after_the_ranges_before_it(
        tmp_path, monkeypatch, small_chunks, threads):
    pattern, _ = _write(tmp_path)
    tasks = estimate_plan.plan_ranges(pattern, None, 8 << 10)
    counted: list[int] = []
    original_chunks, original_read = plan._range_chunks, plan.read_pass

    def chunks(task, *a, **k):
        if task.index == 3:
            yield next(original_chunks(task, *a, **k))
            raise OSError("the disk went away")
        yield from original_chunks(task, *a, **k)

    def read_pass(task, *a, **k):
        out = original_read(task, *a, **k)
        counted.append(task.index)
        return out

    monkeypatch.setattr(plan, "_range_chunks", chunks)
    monkeypatch.setattr(plan, "read_pass", read_pass)
    with pytest.raises(OSError, match="the disk went away"):
        _read_all(tasks, threads, monkeypatch)
    assert counted == [0, 1, 2]
    assert _no_reader_left()


def test_an_error_counting_stops_the_reader_one_chunk_ahead(tmp_path, monkeypatch,
                                                           small_chunks):
    pattern, _ = _write(tmp_path)
    tasks = estimate_plan.plan_ranges(pattern, None, 8 << 10)
    made, counted = [0], [0]
    original_chunks, original_tally = plan._range_chunks, plan.pass_tally

    def chunks(*a, **k):
        for parsed in original_chunks(*a, **k):
            made[0] += 1
            yield parsed

    def tally(*a, **k):
        counted[0] += 1
        if counted[0] == 3:
            raise RuntimeError("out of memory counting")
        return original_tally(*a, **k)

    monkeypatch.setattr(plan, "_range_chunks", chunks)
    monkeypatch.setattr(plan, "pass_tally", tally)
    monkeypatch.setattr(plan, "MAX_REPORTS_PER_COUNT", 1)  # a count per chunk
    with pytest.raises(RuntimeError, match="out of memory counting"):
        _read_all(tasks, "2", monkeypatch)
    assert _no_reader_left()
    assert 3 <= made[0] <= counted[0] + 1  # at most one chunk made past the one counted


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_damaged_spill_piece_is_a_clear_error_reading_ahead(tmp_path, monkeypatch,
                                                             threads):
    monkeypatch.setenv("LDPFLOW_THREADS", threads)
    pattern, protocol = _write(tmp_path)
    tasks = plan.spill_tasks
    pieces_read: list[str] = []
    original = packed.read_spill

    def lose(spilled, pass_index, backend):
        out = tasks(spilled, pass_index, backend)
        path = out[0][1][2]  # the second piece of the one task: the first is counted first
        with open(path, "r+b") as f:
            f.seek(-1, os.SEEK_END)
            byte = f.read(1)
            f.seek(-1, os.SEEK_END)
            f.write(bytes([byte[0] ^ 1]))
        return out

    def read_spill(path, *a):
        pieces_read.append(path)
        return original(path, *a)

    monkeypatch.setattr(plan, "spill_tasks", lose)
    monkeypatch.setattr(packed, "read_spill", read_spill)
    with pytest.raises(packed.SpillError, match="do not match their checksum"):
        plan.run_heavy_hitters(LocalBackend(), _job(pattern, tmp_path / "out", protocol,
                                                    range_bytes=None))
    assert len(pieces_read) == 2
    assert _no_reader_left()
    assert not os.path.exists(tmp_path / "out" / "heavy_hitters.json")


def test_spill_pieces_are_counted_in_parts_on_threads(tmp_path, monkeypatch):
    """With two threads the later passes' pieces are cut into parts of at most
    ``THREAD_PIECE_ROWS`` rows, read and counted on the pool's threads two at a time: the
    same summary and files as one thread counting whole pieces."""
    pattern, protocol = _write(tmp_path)
    monkeypatch.setattr(packed, "SPILL_BLOCK", 64)
    monkeypatch.setattr(plan, "THREAD_PIECE_ROWS", 128)
    original = packed.read_spill
    runs = {}
    for threads in ("1", "2"):
        reads: list[tuple[str, int]] = []

        def read_spill(path, start, stop, reads=reads):
            reads.append((threading.current_thread().name, stop - start))
            return original(path, start, stop)

        with monkeypatch.context() as patch:
            patch.setenv("LDPFLOW_THREADS", threads)
            patch.setattr(packed, "read_spill", read_spill)
            summary = plan.run_heavy_hitters(
                LocalBackend(), _job(pattern, tmp_path / threads, protocol, range_bytes=None))
        for name in ("seconds", "timings_ms", "output"):
            summary.pop(name)
        runs[threads] = summary, _outputs(tmp_path / threads), reads
    (one, files_one, reads_one), (two, files_two, reads_two) = runs["1"], runs["2"]
    assert one == two and files_one == files_two
    assert sum(rows for _, rows in reads_one) == sum(rows for _, rows in reads_two) > 0
    assert max(rows for _, rows in reads_one) > 128  # one thread: whole pieces
    assert max(rows for _, rows in reads_two) <= 128 and len(reads_two) > len(reads_one)
    assert {name.split("_")[0] for name, _ in reads_two} == {"ldpflow-count"}
