"""The configuration of the input is read from its first valid report without decoding
the whole first file (a few blocks or lines, range after range): the same configuration as
one read of the whole file."""

from __future__ import annotations

import gzip
import io

import numpy as np
import pytest

from ldpflow.plan import heavy_hitters as plan
from ldpflow.schemas import schema_json
from ldpflow.wire import avro, formats
from tests.core.heavy_hitter_contract import make, population

USERS, BLOCK_ROWS = 3000, 100


def _table(protocol, users=USERS):
    names = [f"u{i}" for i in range(users)]
    reports = protocol.perturb(population(users, 3), names, np.random.default_rng(4))
    return formats.reports_table(protocol, reports, formats.numbered_ids("r", 0, users),
                                 names, np.arange(users, dtype=np.int64))


def _write(folder, name, files=3):
    """``files`` Avro files of small blocks."""
    protocol = make(name)
    table = _table(protocol)
    bounds = np.linspace(0, USERS, files + 1).astype(int)
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        with open(folder / f"f{i}.avro", "wb") as f:
            f.write(avro.encode_container(table.slice(a, b - a), schema_json("report"),
                                          "deflate", BLOCK_ROWS))
    return str(folder / "*.avro"), protocol


def _first(paths, name, monkeypatch, probe):
    monkeypatch.setattr(plan, "PROBE_BYTES", probe)
    reads: list[tuple[int, int | None]] = []
    original = formats.read_reports

    def read_reports(stream, fmt, **k):
        reads.append((k.get("start", 0), k.get("end")))
        return original(stream, fmt, **k)

    monkeypatch.setattr(formats, "read_reports", read_reports)
    found = plan.first_configuration(paths, None, name)
    monkeypatch.setattr(formats, "read_reports", original)
    return found, reads


def test_first_configuration_reads_the_first_range_only(tmp_path, monkeypatch):
    pattern, protocol = _write(tmp_path, "pem", files=1)
    found, reads = _first([str(tmp_path / "f0.avro")], "pem", monkeypatch, (16384, 65536))
    assert found == protocol
    assert reads == [(0, 16384)]  # the header and the first blocks


@pytest.mark.parametrize("kind", ["avro", "json", "avro.gz"])
def test_first_configuration_past_damaged_blocks_equals_a_whole_read(tmp_path, monkeypatch,
                                                                     kind):
    protocol = make("pem")
    table = _table(protocol, 1000)
    if kind.startswith("avro"):
        data = bytearray(avro.encode_container(table, schema_json("report"), "deflate",
                                               BLOCK_ROWS))
        header = avro.read_header(io.BytesIO(bytes(data))).end
        data[header:header + 12000] = bytes(12000)  # the first blocks lost
    else:
        buffer = io.BytesIO()
        formats.ReportWriter(buffer, "json").write(table)
        rows = buffer.getvalue().split(b"\n")
        bad = b"\n".join(b"{not json" for _ in range(400))
        data = bytearray(bad + b"\n" + b"\n".join(rows[400:]))
    path = tmp_path / f"r.{kind}"
    raw = gzip.compress(bytes(data)) if kind.endswith(".gz") else bytes(data)
    path.write_bytes(raw)
    whole, whole_reads = _first([str(path)], "pem", monkeypatch, ())
    found, reads = _first([str(path)], "pem", monkeypatch, (2048, 8192))
    assert whole == found == protocol
    assert whole_reads == [(0, None)]
    if kind.endswith(".gz"):
        assert reads == [(0, None)]  # a compressed file is read whole
    else:
        assert len(reads) > 1 and reads[0] == (0, 2048)


def test_first_configuration_of_files_without_a_valid_report_is_none(tmp_path, monkeypatch):
    (tmp_path / "a.avro").write_bytes(b"not an Avro container" * 1000)
    (tmp_path / "b.jsonl").write_bytes(b"{not json\n" * 5000)
    found, reads = _first([str(tmp_path / "a.avro"), str(tmp_path / "b.jsonl")], "pem",
                          monkeypatch, (2048, 8192))
    assert found is None
    assert reads == [(0, 2048), (2048, 8192), (8192, None)] * 2
