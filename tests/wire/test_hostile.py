"""Hostile and unusual input that once crashed the read, lost records or counted them
twice: each case is one dead letter (or none), and every record is accounted for."""

from __future__ import annotations

import io
import json

import numpy as np

import ldpflow
from ldpflow.schemas import schema_json
from ldpflow.wire import avro, formats

ORACLE = ldpflow.oracle("grr", epsilon=1.0, domain_size=32)


def _table(n=40, seed=4):
    rng = np.random.default_rng(seed)
    reports = ORACLE.perturb(rng.integers(0, 32, n), rng=rng)
    return formats.reports_table(ORACLE, reports, formats.numbered_ids("r-", 0, n),
                                 formats.numbered_ids("u-", 0, n), np.arange(n))


def _summary(chunks):
    chunks = list(chunks)
    return (sum(p.records for p in chunks), sum(p.reports for p in chunks),
            sum(d.count for p in chunks for d in p.dead_letters),
            [d.reason for p in chunks for d in p.dead_letters])


def _container(table, block_rows=5):
    buffer = io.BytesIO()
    writer = avro.ContainerWriter(buffer, schema_json("report"), codec="null",
                                  block_rows=block_rows, sync=b"\x17" * 16)
    writer.write(table)
    writer.close()
    return buffer.getvalue()


def test_an_empty_avro_block_loses_nothing_after_it():
    data = _container(_table(10))
    header = avro.read_header(io.BytesIO(data))
    empty = b"\x00\x00" + header.sync  # count 0, size 0: legal Avro
    spliced = data[: header.end] + empty + data[header.end:]
    assert _summary(formats.read_reports(io.BytesIO(spliced), "avro"))[:3] == (10, 10, 0)


def test_ranges_of_a_file_with_a_broken_sync_marker_read_every_intact_block_once():
    table = _table(40)
    data = bytearray(_container(table))
    header = avro.read_header(io.BytesIO(bytes(data)))
    blocks = list(avro.iter_blocks(io.BytesIO(bytes(data)), header))
    damaged = blocks[2]
    data[damaged.offset + len(damaged.raw) - 3] ^= 0xFF
    data = bytes(data)
    whole = _summary(formats.read_reports(io.BytesIO(data), "avro"))
    assert whole[:3] == (40, 35, 5)
    for cut in range(header.end, len(data), 7):
        first = _summary(formats.read_reports(io.BytesIO(data), "avro", start=0, end=cut))
        second = _summary(formats.read_reports(io.BytesIO(data), "avro", start=cut))
        assert (first[1] + second[1], first[2] + second[2]) == (35, 5), cut


def test_a_block_claiming_a_terabyte_is_damage_not_an_allocation():
    data = bytearray(_container(_table(10)))
    header = avro.read_header(io.BytesIO(bytes(data)))
    (first, second) = list(avro.iter_blocks(io.BytesIO(bytes(data)), header))
    mat, lengths = avro._zigzag_varints(np.array([5, 10**12]))
    size_at = first.offset + lengths[0]
    _, old_end = avro._read_varint(first.raw, 1)
    head = mat[0, : lengths[0]].tobytes() + mat[1, : lengths[1]].tobytes()
    data = bytes(data[: first.offset]) + head + bytes(data[first.offset + old_end:])
    assert size_at > 0
    records, reports, dead, reasons = _summary(formats.read_reports(io.BytesIO(data), "avro"))
    assert reports == 5 and "claims 1000000000000 bytes" in reasons[0]


def test_strings_that_are_not_utf8_are_refused_whatever_their_neighbours():
    lines = formats.json_lines(_table(10)).splitlines(keepends=True)
    lines[3] = lines[3].replace(b'"oracle":"grr"', b'"oracle":"gr\\xffr"'.replace(
        b"\\xff", b"\xff"))
    lines[5] = lines[5].replace(b'"domain_size":32', b'"domain_size":64')  # a 2nd key
    lines[7] = lines[7].replace(b'"report_id":"r-7"', b'"report_id":"a\\ud800"')
    records, reports, dead, reasons = _summary(formats.read_reports(
        io.BytesIO(b"".join(lines)), "json"))
    assert (records, reports, dead) == (10, 8, 2)
    assert all("utf-8" in reason.lower() for reason in reasons), reasons


def test_hex_is_as_strict_on_the_slow_path_as_on_the_columnar_one():
    oue = ldpflow.oracle("oue", epsilon=1.0, domain_size=16)
    reports = oue.perturb(np.arange(4), rng=np.random.default_rng(1))
    table = formats.reports_table(oue, reports, ["a", "b", "c", "d"], list("uvwx"), [0] * 4)
    lines = formats.json_lines(table).splitlines(keepends=True)
    record = json.loads(lines[0])
    record["bits"] = record["bits"][:2] + " " + record["bits"][2:]
    lines[0] = (json.dumps(record) + "\n").encode()
    for extra in ([], [b"{bad json\n"]):  # with a neighbour that sends the chunk line by line
        records, reports, dead, reasons = _summary(formats.read_reports(
            io.BytesIO(b"".join(lines + extra)), "json"))
        assert reports == 3 and "payload field 'bits' is not a hex string" in reasons


def test_refusing_a_whole_chunk_keeps_a_bounded_number_of_records():
    lines = formats.json_lines(_table(5000)).replace(b'"oracle":"grr"', b'"oracle":"nope"')
    parsed = list(formats.read_reports(io.BytesIO(lines), "json"))
    letters = [d for p in parsed for d in p.dead_letters]
    assert sum(d.count for d in letters) == 5000 and len(letters) == 1001
    assert letters[-1].record is None and letters[-1].count == 4000


def test_an_undecodable_avro_message_is_one_record():
    (parsed,) = formats.decode_message(b"Obj\x01" + b"\xff" * 40, "pubsub:1")
    assert parsed.records == 1 and [d.count for d in parsed.dead_letters] == [1]


def test_a_heavy_hitter_report_outside_its_users_group_is_refused():
    from ldpflow.core import heavy_hitters as hh
    from ldpflow.wire.parse import AcceptancePolicy

    pem = hh.PrefixExtendingMethod(top_k=3, value_bits=16, epsilon=2.0, query_limit=64)
    n = 400
    users = np.array([f"user-{i}" for i in range(n)], dtype=object)
    rng = np.random.default_rng(8)
    reports = pem.perturb(rng.integers(0, 2**16, n).astype(np.uint64), users, rng)
    group = reports.columns["group"]
    victim = int(np.flatnonzero(group == 0)[0])
    other = int(np.flatnonzero(group == 1)[0])
    for name in ("group", "prefix_bits"):  # a consistent report, in another user's group
        reports.columns[name][victim] = reports.columns[name][other]
    table = formats.reports_table(pem, reports, formats.numbered_ids("r", 0, n), list(users),
                                  np.zeros(n, dtype=np.int64))
    buffer = io.BytesIO()
    formats.write_reports(buffer, "avro", table)
    policy = AcceptancePolicy(expect={"oracle": "pem"})
    records, valid, dead, reasons = _summary(formats.read_reports(
        io.BytesIO(buffer.getvalue()), "avro", policy=policy))
    assert (records, valid, dead) == (n, n - 1, 1)
    assert reasons == ["group does not match the hash of user_id"]
    unchecked = AcceptancePolicy(expect={"oracle": "pem"}, check_groups=False)
    assert _summary(formats.read_reports(io.BytesIO(buffer.getvalue()), "avro",
                                         policy=unchecked))[1] == n


def test_a_chunk_of_undecodable_lines_keeps_a_bounded_number_of_dead_letters():
    data = b"{not json\n" * 5000
    parsed = list(formats.read_reports(io.BytesIO(data), "json"))
    letters = [d for p in parsed for d in p.dead_letters]
    assert sum(d.count for d in letters) == 5000 == sum(p.records for p in parsed)
    assert len(letters) == 1001
    assert letters[-1].record is None and "4000 more records refused" in \
        letters[-1].reason


def test_two_objects_on_one_line_are_one_refused_record_on_every_path():
    lines = formats.json_lines(_table(40)).splitlines(keepends=True)
    joined = lines[:3] + [lines[3].rstrip(b"\n") + lines[4]] + lines[5:]  # 39 lines
    for extra in ([], [b"{bad json\n"], [b"\n", b"\n"]):  # columnar, line by line, blank lines
        records, reports, dead, reasons = _summary(formats.read_reports(
            io.BytesIO(b"".join(joined + extra)), "json"))
        bad = 1 if extra == [b"{bad json\n"] else 0
        assert (records, reports, dead) == (39 + bad, 38, 1 + bad)
        assert any(reason.startswith("malformed JSON") and "Extra data" in reason
                   for reason in reasons)


def test_a_chunk_cannot_claim_more_counters_than_the_policy_allows():
    import pyarrow as pa

    from ldpflow.wire.parse import AcceptancePolicy

    rng = np.random.default_rng(8)
    tables = []
    for rows, size, epsilon in ((30, 2**20, 1.0), (20, 2**21, 1.0), (10, 2**20, 2.0),
                                (5, 64, 1.0)):
        grr = ldpflow.oracle("grr", epsilon=epsilon, domain_size=size)
        reports = grr.perturb(rng.integers(0, 64, rows), rng=rng)
        start = sum(t.num_rows for t in tables)
        tables.append(formats.reports_table(grr, reports,
                                            formats.numbered_ids("r-", start, start + rows),
                                            formats.numbered_ids("u-", start, start + rows),
                                            np.arange(rows)))
    lines = formats.json_lines(pa.concat_tables(tables))
    policy = AcceptancePolicy(max_counters=2**21 + 2**20 + 64, max_key_bytes=2**40)
    chunks = list(formats.read_reports(io.BytesIO(lines), "json", policy=policy))
    kept = {(key.parameters["domain_size"], key.parameters["epsilon"]): len(batch)
            for p in chunks for key, batch in p.batches.items()}
    # Largest sets first: 30 rows (2^20 counters), 20 rows (2^21), then 10 rows (2^20) would
    # pass the limit and are refused; 5 rows of 64 counters still fit.
    assert kept == {(2**20, 1.0): 30, (2**21, 1.0): 20, (64, 1.0): 5}
    records, reports, dead, reasons = _summary(chunks)
    assert (records, reports, dead) == (65, 55, 10)
    assert set(reasons) == {f"policy: the chunk's parameter sets need more than "
                            f"{policy.max_counters} counters (--max_counters)"}


def test_a_flipped_bit_in_an_avro_header_is_a_lost_file_never_a_silent_loss_or_a_crash():
    n = 40
    data = _container(_table(n), block_rows=10)
    header = avro.read_header(io.BytesIO(data))
    positions = [*range(0, 48), *range(header.end - 40, header.end)]
    outcomes = set()
    for pos in positions:
        for bit in (0, 3, 6):
            flipped = bytearray(data)
            flipped[pos] ^= 1 << bit
            chunks = list(formats.read_reports(io.BytesIO(bytes(flipped)), "avro"))
            records, reports, dead, _ = _summary(chunks)
            letters = [d for p in chunks for d in p.dead_letters]
            assert records == reports + dead, (pos, bit)
            lost = [d for d in letters if d.count_unknown]
            if lost:  # the file (or what follows its header) is lost: said so, with bytes
                assert all(d.bytes and d.bytes >= header.end for d in lost), (pos, bit)
                assert all(d.reason.startswith("unreadable Avro file: ") and
                           "; the file is lost (" in d.reason for d in lost), (pos, bit)
                outcomes.add("lost")
            else:  # every record is accounted for, as a report or a counted dead letter
                assert records == n, (pos, bit, [d.reason for d in letters])
                outcomes.add("counted")
    assert outcomes == {"lost", "counted"}
