"""The plan's steps as pure functions, on the in-process backend (no engine, no Beam)."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

import ldpflow
from ldpflow.core import parallel
from ldpflow.core.oracles import Accumulator
from ldpflow.plan import outputs, steps
from ldpflow.plan.backend import LocalBackend
from ldpflow.plan.job import EstimateJob, count_reports, plan_ranges
from ldpflow.plan.packed import SpillError
from ldpflow.wire.parse import AcceptancePolicy
from tests.plan import inputs


def _accumulator(seed, n=50):
    oracle = ldpflow.oracle("olh", epsilon=1.0, domain_size=16)
    rng = np.random.default_rng(seed)
    return oracle.aggregate(oracle.perturb(rng.integers(0, 16, n), rng=rng))


def test_accumulator_addition_is_pure_and_subtraction_undoes_it():
    a, b = _accumulator(1), _accumulator(2, 30)
    a_counts, b_counts = a.counts.copy(), b.counts.copy()
    total = a + b
    assert (a.n, b.n, total.n) == (50, 30, 80)
    assert np.array_equal(a.counts, a_counts) and np.array_equal(b.counts, b_counts)
    assert total == a.copy().merge(b)  # the in-place merge gives the same counts
    assert total - b == a and (total - b) is not a
    with pytest.raises(ValueError, match="cannot take 80 reports"):
        b - total
    other = Accumulator(("grr",), np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match="cannot merge"):
        a + other


def test_tally_addition_is_pure():
    a = steps.Tally(_accumulator(1), duplicates=2, dead_letters=1)
    b = steps.Tally(None, capped=3)
    total = a + b + steps.Tally(_accumulator(2), conflicting=1)
    assert (total.duplicates, total.conflicting, total.dead_letters, total.capped) == (2, 1, 1, 3)
    assert total.accumulator.n == 100 and a.accumulator.n == 50 and b.accumulator is None
    less = total.without(steps.Tally(_accumulator(2), duplicates=5))
    assert less.accumulator == a.accumulator and less.duplicates == 7


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return inputs.write_inputs(tmp_path_factory.mktemp("inputs"))


def test_read_range_counts_the_valid_reports_and_refuses_the_others(files):
    tasks = plan_ranges(files)
    assert [os.path.basename(t.path) for t in tasks] == ["a.avro", "b.jsonl.gz", "c.parquet"]
    reads = [steps.read_range(t, AcceptancePolicy(), ("id_hashes",), ids=True) for t in tasks]
    assert sum(r.records for r in reads) == 1303
    assert sum(r.dead_letters for r in reads) == inputs.BROKEN_AVRO + inputs.BROKEN_JSON
    counted = sum(t.accumulator.n for r in reads for t in r.tallies.values() if t.accumulator)
    assert counted == 1303 - 6
    assert sum(h.size for r in reads for _, _, h in r.ids) == counted  # 8 bytes a report
    assert all(h.dtype == np.uint64 for r in reads for _, _, h in r.ids)


def test_repeated_ids_find_the_copies_and_the_ranges_holding_them(files):
    tasks = plan_ranges(files)
    reads = [steps.read_range(t, AcceptancePolicy(), ("id_hashes",), ids=True) for t in tasks]
    pieces = [(key, b, r.index, h) for r in reads for key, b, h in r.ids]
    found = steps.repeated_ids(pieces)
    assert sum(h.size for _, h, _ in found) == inputs.EXACT_COPIES + inputs.CONFLICTING_COPIES
    assert {i for _, _, where in found for i in where} == {0, 1, 2}  # a, b and their copies
    assert steps.repeated_ids(list(reversed(pieces)))[0][1].tolist() == found[0][1].tolist()


def _repeated_rows(files):
    """The ``(key, bucket, batch)`` pieces of the rows of repeated ids (what the second
    read of the plan's dedup gives)."""
    tasks = plan_ranges(files)
    reads = [steps.read_range(t, AcceptancePolicy(), ("id_hashes",), ids=True) for t in tasks]
    repeated = {}
    for text, hashes, _ in steps.repeated_ids(
            (k, b, r.index, h) for r in reads for k, b, h in r.ids):
        repeated[text] = np.union1d(repeated.get(text, hashes), hashes)  # one per bucket
    again = [steps.read_range(t, AcceptancePolicy(), ("id_hashes", "report_ids"),
                              account=False, count=False, repeated=repeated, unique=False)
             for t in tasks]
    return [p for r in again for p in r.repeats]


def test_drop_copies_keeps_one_copy_whatever_the_order(files):
    pieces = _repeated_rows(files)
    def dropped_per_key(pieces):
        out = {}
        for key, tally in steps.drop_copies(pieces):  # one tally per key and bucket
            out[key] = out[key] + tally if key in out else tally
        return out

    forward, backward = dropped_per_key(pieces), dropped_per_key(pieces[::-1])
    ((key, dropped),) = forward.items()
    assert key[0] == "olh" and dropped.duplicates == 103 and dropped.conflicting == 3
    assert dropped.accumulator.n == 103 and backward[key].accumulator == dropped.accumulator


def test_count_reports_equals_counting_the_deduplicated_reports_directly(files, tmp_path):
    job = EstimateJob(input=files, output=str(tmp_path), methods=("base",),
                      policy=AcceptancePolicy())
    counted = count_reports(LocalBackend(), job, str(tmp_path / "staging"))
    olh = next(t for k, t in counted.tallies.items() if k[0] == "olh")
    assert olh.duplicates == 103 and olh.conflicting == 3
    # every valid OLH report once: the files' reports less the refused ones
    assert olh.accumulator.n == inputs.OLH_REPORTS - 6
    none = count_reports(LocalBackend(), EstimateJob(
        input=files, output=str(tmp_path), methods=("base",), policy=AcceptancePolicy(),
        dedup=False), str(tmp_path / "staging2"))
    olh_all = next(t for k, t in none.tallies.items() if k[0] == "olh")
    assert olh_all.accumulator.n == olh.accumulator.n + 103


def test_commit_replaces_the_outputs_and_removes_stale_dead_letters(tmp_path):
    """The Beam jobs' commit: the previous run's dead letters that this run did not write
    go; a file ldpflow did not write stays (wire.outputs.commit)."""
    out = tmp_path / "out"

    def run(sources):
        staging = outputs.staging_folder(str(out))
        outputs.write_staged(staging, "estimates.json", f"{sources}".encode())
        for source in sources:
            name, data, _ = outputs.dead_letter_file(source, ['{"b": 1}', '{"a": 2}'])
            outputs.write_staged(staging, name, data)
        assert outputs.commit_outputs(str(out), staging) == 1 + len(sources)
        assert not os.path.exists(staging)

    run(["/data/old.avro"])
    (out / "dead_letters" / "mine.jsonl").write_text("not ldpflow's\n")
    name, data, count = outputs.dead_letter_file("/data/a.avro", ['{"b": 1}', '{"a": 2}'])
    assert count == 2 and data == b'{"a": 2}\n{"b": 1}\n'
    run(["/data/a.avro"])
    assert (out / "estimates.json").read_text() == "['/data/a.avro']"
    assert sorted(os.listdir(out / "dead_letters")) == sorted([os.path.basename(name),
                                                              "mine.jsonl"])


def test_local_engine_exits_1_when_every_record_was_refused(tmp_path):
    from ldpflow.pipelines import cli

    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n{\"report_id\": \"x\"}\n")
    status = cli.main(["estimate", f"--input={bad}", f"--output={tmp_path / 'out'}",
                       "--engine=local", "--methods=base"])
    assert status == 1
    document = json.loads((tmp_path / "out" / "estimates.json").read_text())
    assert document["records"] == 2 and document["dead_letters"]["total"] == 2
    assert document["run"]["runner"] == "local"


def test_dead_letter_summary_orders_ties_by_reason():
    summary = steps.dead_letter_summary({"b": (1, 0, 0, 0), "a": (1, 0, 0, 0),
                                         "c": (5, 0, 0, 0)})
    assert summary == {"total": 7, "by_reason": {"c": 5, "a": 1, "b": 1}}
    assert list(summary["by_reason"]) == ["c", "a", "b"]


def _grr_key(epsilon, domain_size=16):
    return tuple(ldpflow.oracle("grr", epsilon=epsilon, domain_size=domain_size).key)


def test_admit_keys_takes_the_most_reports_first_whatever_the_order():
    keys = [_grr_key(0.5 + i / 10) for i in range(6)]
    need = steps.key_memory(keys[0])
    assert need == 8 * 16 + 4096 * 16  # accumulator and estimates (wire.parse.key_bytes)
    census = {key: 10 * (i % 3) + i for i, key in enumerate(keys)}  # 0 11 22 3 14 25
    refused = steps.admit_keys(census, 3 * need)
    assert set(refused) == {keys[0], keys[1], keys[3]}  # 25, 22, 14 admitted
    assert steps.admit_keys(dict(reversed(list(census.items()))), 3 * need) == refused
    assert all("(--max_job_bytes)" in reason for reason in refused.values())
    # Ties by key text; a key too large is refused and the smaller ones are still tried.
    big = _grr_key(1.0, 256)
    tied = {keys[0]: 5, keys[1]: 5, big: 9}
    assert set(steps.admit_keys(tied, need + 1)) == {keys[1], big}
    assert steps.admit_keys(tied, None) == {}
    assert steps.admit_keys(tied, steps.key_memory(big) + 2 * need) == {}


def test_read_range_over_the_job_budget_counts_nothing_and_takes_its_census(files):
    tasks = plan_ranges(files)
    first = tasks[0]  # a.avro: OLH and GRR reports
    whole = steps.read_range(first, AcceptancePolicy())
    need = {key: steps.key_memory(key) for key in whole.census}
    assert len(need) == 2 and not whole.over
    over = steps.read_range(first, AcceptancePolicy(), max_job_bytes=max(need.values()))
    assert over.over and over.census == whole.census
    assert all(t.accumulator is None for t in over.tallies.values())
    assert over.records == whole.records and over.reasons == whole.reasons
    # Read again without the refused key: the other one's counts are the whole read's.
    (grr,) = [key for key in need if key[0] == "grr"]
    again = steps.read_range(first, AcceptancePolicy(), account=False, refused=[grr],
                             max_job_bytes=max(need.values()))
    assert not again.over and set(again.tallies) == set(need) - {grr}
    (olh,) = again.tallies
    assert again.tallies[olh].accumulator == whole.tallies[olh].accumulator


@pytest.mark.parametrize("threads", ["1", "2"])
def test_repeated_ids_on_disk_in_passes_equal_the_in_memory_shuffle(tmp_path, monkeypatch,
                                                                    threads):
    """Spilled id files resolved in many small passes give the same repeated hashes
    and ranges as the arrays shuffled in memory, whether the spill's sort and the passes
    run on threads or not."""
    monkeypatch.setenv("LDPFLOW_THREADS", threads)
    rng = np.random.default_rng(7)
    key = _grr_key(1.0)
    ranges = [rng.integers(0, 2**64, 5000, dtype=np.uint64) for _ in range(4)]
    ranges[1][:40] = ranges[0][100:140]  # copies across ranges
    ranges[3][10:20] = ranges[3][20:30]  # and within one
    in_memory, on_disk = [], []
    for index, hashes in enumerate(ranges):
        for bucket, rows in steps.bucket_parts(hashes, steps.ID_BUCKET_BITS):
            in_memory.append((key, bucket, index, hashes if rows is None else hashes[rows]))
        # Two runs a range (as two chunks), each sorted and cut at the bucket edges.
        spilled = steps.spill_ids(str(tmp_path), index, key, [hashes[::2], hashes[1::2]])
        on_disk.extend((key, bucket, index, piece) for bucket, piece in spilled)
        written = np.fromfile(spilled[0][1].path, dtype="<u8")
        assert np.array_equal(written, np.concatenate([np.sort(hashes[::2]),
                                                       np.sort(hashes[1::2])]))
        for bucket, piece in spilled:  # each run's slice holds exactly its bucket's hashes
            assert 1 <= len(piece.marks) <= 2
            mine = np.concatenate([written[m[0]:m[-1]] for m in piece.marks])
            top = hashes >> np.uint64(64 - steps.ID_BUCKET_BITS)
            assert np.array_equal(np.sort(mine), np.sort(hashes[top == bucket]))

    def resolved(pieces, **kw):
        groups: dict[int, list] = {}
        for piece in pieces:
            groups.setdefault(piece[1], []).append(piece)
        out = [found for group in groups.values() for found in steps.repeated_ids(group, **kw)]
        return sorted((text, h.tolist(), r) for text, h, r in out)

    expected = resolved(in_memory)
    assert sum(len(h) for _, h, _ in expected) == 50
    assert {r for _, _, where in expected for r in where} == {0, 1, 3}
    for pass_bytes in (8, 800, steps.DEDUP_PASS_BYTES):  # one hash a pass .. one pass
        assert resolved(on_disk, pass_bytes=pass_bytes) == expected


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("cap", [None, 2])
def test_count_reports_dedup_on_disk_equals_in_memory(files, tmp_path, monkeypatch, cap,
                                                      threads):
    monkeypatch.setenv("LDPFLOW_THREADS", threads)
    job = EstimateJob(input=files, output=str(tmp_path), methods=("base",),
                      policy=AcceptancePolicy(), max_reports_per_user=cap)
    memory = count_reports(LocalBackend(), job, str(tmp_path / "m"))
    temp = tmp_path / "temp"
    disk = count_reports(LocalBackend(), dataclasses.replace(
        job, dedup_store="disk", temp_location=str(temp)), str(tmp_path / "d"))
    assert os.listdir(temp) == []  # the id files are removed with their folder
    assert disk.records == memory.records and disk.reasons == memory.reasons
    assert disk.contribution == memory.contribution
    assert disk.tallies.keys() == memory.tallies.keys()
    assert sum(t.duplicates for t in disk.tallies.values()) == \
        inputs.EXACT_COPIES + inputs.CONFLICTING_COPIES
    for key, tally in memory.tallies.items():
        theirs = disk.tallies[key]
        assert (theirs.duplicates, theirs.conflicting, theirs.dead_letters, theirs.capped) == \
            (tally.duplicates, tally.conflicting, tally.dead_letters, tally.capped)
        assert theirs.accumulator == tally.accumulator


def test_scan_range_gives_the_chunks_read_range_counts(files):
    for task in plan_ranges(files):
        chunks = list(steps.scan_range(task, AcceptancePolicy()))
        read = steps.read_range(task, AcceptancePolicy())
        assert sum(c.records for c in chunks) == read.records
        assert sum(letter.count for c in chunks for letter in c.dead_letters) == \
            read.dead_letters
        counted = {}
        for chunk in chunks:
            for key, batch in chunk.batches.items():
                tally = steps.Tally(steps.count_batch(batch))
                counted[tuple(key)] = counted[tuple(key)] + tally \
                    if tuple(key) in counted else tally
        for key, tally in read.tallies.items():
            if tally.accumulator is not None:
                assert counted[key].accumulator == tally.accumulator


def test_add_letter_adds_in_place_what_add_tallies_adds():
    from ldpflow.wire.envelope import DeadLetter

    letters = [DeadLetter("f", "bad value", "{}"), DeadLetter("f", "bad value", "{}"),
               DeadLetter("f", "truncated", None, count=0, count_unknown=True, bytes=7)]
    counts: dict = {}
    expected: dict = {}
    for letter in letters:
        assert steps.add_letter(counts, letter) is counts
        expected = steps.add_tallies(expected, {letter.reason: steps.letter_tally(letter)})
    assert counts == expected == {"bad value": (2, 0, 0, 0), "truncated": (0, 1, 7, 0)}


def test_repeated_ids_without_ranges_find_the_same_hashes(files):
    tasks = plan_ranges(files)
    reads = [steps.read_range(t, AcceptancePolicy(), ("id_hashes",), ids=True) for t in tasks]
    pieces = [(key, b, r.index, h) for r in reads for key, b, h in r.ids]
    found = steps.repeated_ids(pieces)
    bare = steps.repeated_ids(pieces, ranges=False)
    assert [(t, h.tolist()) for t, h, _ in bare] == [(t, h.tolist()) for t, h, _ in found]
    assert all(where == [] for _, _, where in bare) and any(w for _, _, w in found)


def _user_pieces(files):
    tasks = plan_ranges(files)
    reads = [steps.read_range(t, AcceptancePolicy(), steps.CAP_KEEP, count=False, users=True)
             for t in tasks]
    by_bucket: dict = {}
    for r in reads:
        for bucket, key, batch in r.users:
            by_bucket.setdefault(bucket, []).append((key, batch))
    return by_bucket


@pytest.mark.parametrize("cap", [1, 2])
def test_cap_users_keeping_rows_counts_what_cap_users_counts(files, cap):
    for pieces in _user_pieces(files).values():
        tallies, summary = steps.cap_users(pieces, cap)
        kept, kept_summary = steps.cap_users(pieces, cap, keep_rows=True)
        assert kept_summary == summary
        counted = {}
        for key, value in kept:
            if isinstance(value, steps.Tally):
                assert value.accumulator is None
                tally = value
            else:
                assert len(value) > 0
                tally = steps.Tally(steps.count_batch(value))
            counted[key] = counted[key] + tally if key in counted else tally
        assert counted.keys() == dict(tallies).keys()
        for key, tally in tallies:
            assert counted[key].capped == tally.capped
            assert counted[key].accumulator == tally.accumulator


def test_drop_copies_keeping_rows_counts_the_kept_rows(files):
    pieces = _repeated_rows(files)
    dropped = {}
    for key, tally in steps.drop_copies(pieces):
        dropped[key] = dropped[key] + tally if key in dropped else tally
    kept = {}
    for key, value in steps.drop_copies(pieces, keep_rows=True):
        tally = value if isinstance(value, steps.Tally) else \
            steps.Tally(steps.count_batch(value))
        kept[key] = kept[key] + tally if key in kept else tally
    rows = [batch for _, _, batch in pieces]
    every = steps.Tally(None)
    for batch in rows:
        every = every + steps.Tally(steps.count_batch(batch))
    ((key, tally),) = dropped.items()
    assert (kept[key].duplicates, kept[key].conflicting) == (tally.duplicates,
                                                             tally.conflicting)
    # the rows kept plus the copies dropped are every row of a repeated id
    assert kept[key].accumulator + tally.accumulator == every.accumulator


@pytest.mark.parametrize("cap", [None, 2])
def test_a_tallys_reports_read_are_the_census_whatever_dedup_and_cap_drop(files, tmp_path,
                                                                          cap):
    census: dict = {}
    for task in plan_ranges(files):
        census = steps.add_counts(census, steps.read_range(task, AcceptancePolicy()).census)
    job = EstimateJob(input=files, output=str(tmp_path), methods=("base",),
                      policy=AcceptancePolicy(), max_reports_per_user=cap)
    counted = count_reports(LocalBackend(), job, str(tmp_path / "staging"))
    assert sum(t.duplicates + t.capped for t in counted.tallies.values()) > 0
    assert {k: t.reports_read for k, t in counted.tallies.items() if t.reports_read} == census


@pytest.mark.parametrize("range_bytes", [None, 2000])
def test_file_ranges_are_the_plans_ranges_of_each_file(files, range_bytes):
    from ldpflow.plan.files import match
    from ldpflow.wire import formats

    tasks = plan_ranges(files, range_bytes=range_bytes)
    got = []
    for path, size in match(files):
        kind = formats.detect_format(path)
        got += [(path, start, end) for start, end in steps.file_ranges(
            path, size, kind, range_bytes or formats.RANGE_BYTES)]
    assert got == [(t.path, t.start, t.end) for t in tasks]
    if range_bytes:
        assert len(tasks) > len(match(files))  # an uncompressed file was cut


def _reversed_rows(pieces):
    """The same pieces in the opposite order, each batch's rows reversed too."""
    return [(key, batch[np.arange(len(batch))[::-1]]) for key, batch in pieces[::-1]]


@pytest.mark.parametrize("cap", [1, 2])
def test_cap_users_without_dedup_keeps_the_same_copies_whatever_the_order(files, cap):
    """Without dedup, copies of one report id (same user, event time and tie-break) reach
    the cap; when their payloads differ, which are kept must not depend on the order the
    rows arrived in (regression: the cap kept whichever came first)."""
    tied = 0
    for pieces in _user_pieces(files).values():
        forward, summary = steps.cap_users(pieces, cap)
        backward, back_summary = steps.cap_users(_reversed_rows(pieces), cap)
        assert back_summary == summary
        assert dict(backward).keys() == dict(forward).keys()
        for key, tally in forward:
            other = dict(backward)[key]
            assert other.capped == tally.capped
            assert other.accumulator == tally.accumulator
        tied += sum(len(batch) for _, batch in pieces)
    assert tied  # the fixture's users were capped at all


def test_a_large_spilled_group_is_resolved_in_a_pass_a_thread(tmp_path, monkeypatch):
    """A group of more than 2 * MIN_ROWS hashes is cut into at least one pass a thread
    (each reads its slices of the sorted runs), with the result of one pass."""
    rng = np.random.default_rng(11)
    key = _grr_key(1.0)
    hashes = rng.integers(0, 2**60, 3 * parallel.MIN_ROWS, dtype=np.uint64)  # bucket 0
    hashes[-500:] = hashes[:500]
    spilled = steps.spill_ids(str(tmp_path), 0, key, [hashes[:parallel.MIN_ROWS],
                                                      hashes[parallel.MIN_ROWS:]])
    assert [bucket for bucket, _ in spilled] == [0]
    (bucket, piece), = spilled
    assert piece.size == hashes.size and len(piece.marks) == 2
    passes = steps._spilled_passes([(0, piece)], steps.DEDUP_PASS_BYTES, at_least=2)
    assert len(passes) == 2
    read = [steps._read_pass(p) for p in passes]
    assert np.array_equal(np.sort(np.concatenate([h for p in read for _, h in p])),
                          np.sort(hashes))
    assert read[0][0][1].max() < read[1][0][1].min()  # the passes are hash ranges
    expected = np.unique(hashes[:500])
    for threads in ("1", "2"):
        monkeypatch.setenv("LDPFLOW_THREADS", threads)
        (text, found, where), = steps.repeated_ids([(key, bucket, 0, piece)])
        assert found.tolist() == expected.tolist() and where == [0]


def test_a_spill_file_cut_short_or_missing_is_a_clear_error(tmp_path):
    key = _grr_key(1.0)
    hashes = np.random.default_rng(3).integers(0, 2**64, 1000, dtype=np.uint64)
    pieces = [(key, b, 0, piece) for b, piece in steps.spill_ids(str(tmp_path), 0, key,
                                                                 [hashes])]
    path = pieces[0][3].path
    with open(path, "r+b") as f:
        f.truncate(8 * 500)
    with pytest.raises(SpillError, match="damaged"):
        for piece in pieces:
            steps.repeated_ids([piece])
    os.remove(path)
    with pytest.raises(SpillError, match="missing"):
        steps.repeated_ids([pieces[0]])


def _spilled_hashes(read) -> dict[tuple, np.ndarray]:
    """key and bucket -> the sorted hashes one range's spill holds."""
    out = {}
    for key, bucket, piece in read.ids:
        slices = [(0, piece.path, (int(m[0]), int(m[-1]))) for m in piece.marks]
        out[(key, bucket)] = np.sort(np.concatenate([h for _, h in steps._read_pass(slices)]))
    return out


@pytest.mark.parametrize("threads", ["1", "2"])
def test_the_spill_thread_hashes_the_ids_as_the_parse_would(files, tmp_path, monkeypatch,
                                                            threads):
    # With threads, the read leaves the id hashes to the spill thread (keep id_column):
    # the spills hold exactly the hashes of the in-memory read (dead letters, copies and
    # every format included), and the counts do not change.
    monkeypatch.setenv("LDPFLOW_THREADS", threads)
    policy = AcceptancePolicy(id_key=bytes(range(16)))
    columns = []
    add_column = steps.IdSpill.add_column
    monkeypatch.setattr(steps.IdSpill, "add_column",
                        lambda self, *a: (columns.append(a), add_column(self, *a)))
    for index, task in enumerate(plan_ranges(files)):
        folder = tmp_path / f"{threads}-{index}"
        folder.mkdir()
        memory = steps.read_range(task, policy, ("id_hashes",), ids=True)
        disk = steps.read_range(task, policy, ("id_hashes",), ids=True, spill=str(folder))
        expected: dict[tuple, list] = {}
        for key, bucket, hashes in memory.ids:
            expected.setdefault((key, bucket), []).append(hashes)
        found = _spilled_hashes(disk)
        assert found.keys() == expected.keys() and found
        for where, parts in expected.items():
            assert np.array_equal(found[where], np.sort(np.concatenate(parts)))
        assert disk.tallies.keys() == memory.tallies.keys() and disk.records == memory.records
        for key, tally in memory.tallies.items():
            assert disk.tallies[key].accumulator == tally.accumulator
            assert disk.tallies[key].dead_letters == tally.dead_letters
        assert disk.reasons == memory.reasons
    assert bool(columns) == (threads == "2")  # hashed on the spill thread with threads


def test_a_spill_write_that_fails_is_raised_by_the_read(files, tmp_path, monkeypatch):
    monkeypatch.setenv("LDPFLOW_THREADS", "2")

    def broken(*args, **kwargs):
        raise OSError("no space left on device")

    monkeypatch.setattr(steps.IdSpill, "_write", broken)
    task = plan_ranges(files)[2]  # Parquet
    with pytest.raises(OSError, match="no space left"):
        steps.read_range(task, AcceptancePolicy(), ("id_hashes",), ids=True,
                         spill=str(tmp_path))


def test_the_writes_waiting_on_the_spill_thread_are_bounded_across_a_ranges_keys(tmp_path):
    # one thread writes for every key of a range: at most _SPILL_AHEAD writes wait in all,
    # so a range whose chunks bring new keys cannot queue without end
    import concurrent.futures
    import threading

    pool = concurrent.futures.ThreadPoolExecutor(1)
    gate = threading.Event()
    pool.submit(gate.wait)  # the thread is busy until the gate opens
    ahead: list = []
    writers = []
    hashes = np.arange(10, dtype=np.uint64)
    try:
        writers += [steps.IdSpill(str(tmp_path), 0, ("grr", ("domain_size", 2 + i)), pool,
                                  ahead) for i in range(3)]
        for writer in writers[:steps._SPILL_AHEAD]:  # one write each: within the bound
            writer.add(hashes)
        third = threading.Thread(target=writers[-1].add, args=(hashes,))
        third.start()
        third.join(0.3)
        assert third.is_alive()  # a third writer's first write waits for the thread
        gate.set()
        third.join(10)
        assert not third.is_alive()
        pieces = [writer.finish() for writer in writers]
        assert all(pieces) and len(ahead) <= steps._SPILL_AHEAD
    finally:
        gate.set()
        for writer in writers:
            writer.close()
        pool.shutdown(wait=True)
