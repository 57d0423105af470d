"""Every batch job fails (status 1, one line naming the top dead-letter reasons) when it
counted nothing or refused too much, and a file lost whole is a dead letter of unknown
record count that counts against ``--max_dead_letter_fraction`` by its bytes."""

from __future__ import annotations

import glob
import io
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

import ldpflow
from ldpflow.pipelines import cli, simulate
from ldpflow.pipelines.verdict import verdict
from ldpflow.schemas import schema_json
from ldpflow.wire import avro, formats
from ldpflow.wire.parse import arrow_schema

pytestmark = pytest.mark.pipeline

ORACLE = ldpflow.oracle("grr", epsilon=1.0, domain_size=16)


def _table(n: int, first: int = 0):
    rng = np.random.default_rng(first)
    reports = ORACLE.perturb(rng.integers(0, 16, n), rng=rng)
    return formats.reports_table(ORACLE, reports, formats.numbered_ids("r-", first, first + n),
                                 formats.numbered_ids("u-", first, first + n), np.arange(n))


def _parquet(table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def _avro(table) -> bytes:
    buffer = io.BytesIO()
    writer = avro.ContainerWriter(buffer, schema_json("report"), codec="null")
    if table is not None:
        writer.write(table)
    writer.close()
    return buffer.getvalue()


def _letters(output) -> list[dict]:
    return [json.loads(line) for path in sorted(glob.glob(f"{output}/dead_letters/*"))
            for line in open(path)]


def _estimate(tmp_path, capsys, *extra):
    status = cli.main(["estimate", "--engine=beam", f"--input={tmp_path}/in/*",
                       f"--output={tmp_path}/out", "--methods=base", "--dedup=none", *extra])
    return status, capsys.readouterr().err


@pytest.fixture
def inputs(tmp_path):
    (tmp_path / "in").mkdir()
    return tmp_path / "in"


def test_a_truncated_parquet_footer_is_a_lost_file_of_its_bytes(tmp_path, inputs, capsys):
    (inputs / "good.jsonl").write_bytes(formats.json_lines(_table(1000)))
    data = _parquet(_table(1000, 1000))
    (inputs / "cut.parquet").write_bytes(data[:-10])
    status, err = _estimate(tmp_path, capsys)
    (letter,) = _letters(tmp_path / "out")
    assert letter["count_unknown"] is True and letter["count"] == 0
    assert letter["bytes"] == len(data) - 10
    assert letter["reason"].startswith("unreadable Parquet file: ")
    assert letter["reason"].endswith(f"; the file is lost ({len(data) - 10} bytes, how many "
                                     "records: unknown)")
    # The Parquet file is a sizeable share of the input's bytes: the run fails, and says why.
    share = (len(data) - 10) / (inputs / "good.jsonl").stat().st_size
    assert share > 0.1
    assert status == 1
    (line,) = err.strip().splitlines()[-1:]
    assert "of the records were refused, more than --max_dead_letter_fraction 0.1" in line
    assert "1 part of files lost whole" in line
    assert "top reasons: unreadable Parquet file: " in line
    status, _ = _estimate(tmp_path, capsys, "--max_dead_letter_fraction=0.9")
    assert status == 0
    doc = json.loads((tmp_path / "out" / "estimates.json").read_text())
    assert doc["dead_letters"]["lost"] == {"parts": 1, "bytes": len(data) - 10, "unsized": 0,
                                           "by_reason": {letter["reason"]: 1}}


def test_one_flipped_bit_in_an_avro_header_loses_the_file_and_counts(tmp_path, inputs, capsys):
    data = bytearray(_avro(_table(500)))
    data[2] ^= 0x10  # the magic bytes: the file cannot be read at all
    (inputs / "flipped.avro").write_bytes(bytes(data))
    status, err = _estimate(tmp_path, capsys)
    (letter,) = _letters(tmp_path / "out")
    assert letter["count_unknown"] is True and letter["bytes"] == len(data)
    assert status == 1
    assert "no valid report was estimated (0 records: 0 estimated" in err
    assert "1 part of files lost whole" in err
    assert "top reasons: unreadable Avro file: not an Avro container file" in err


@pytest.mark.parametrize("kind", ["parquet", "avro"])
def test_inputs_of_no_record_exit_non_zero(tmp_path, inputs, capsys, kind):
    if kind == "parquet":
        empty = arrow_schema().empty_table()
        (inputs / "empty.parquet").write_bytes(_parquet(empty))
    else:
        for i in range(2):
            (inputs / f"header-only-{i}.avro").write_bytes(_avro(None))
    status, err = _estimate(tmp_path, capsys)
    assert status == 1
    assert "ldpflow estimate: no valid report was estimated (0 records: 0 estimated" in err


def test_a_run_that_refuses_everything_names_its_top_reasons(tmp_path, inputs, capsys):
    (inputs / "a.jsonl").write_bytes(formats.json_lines(_table(300)))
    status, err = _estimate(tmp_path, capsys, "--expect_domain_size=32")
    assert status == 1
    (line,) = [x for x in err.splitlines() if x.startswith("ldpflow estimate:")]
    assert line == ("ldpflow estimate: no valid report was estimated (300 records: 0 "
                    "estimated, 0 duplicates, 300 dead letters; top reasons: parameter "
                    "mismatch: domain_size #, expected # (300))")


def test_heavy_hitters_exits_non_zero_when_every_record_is_refused(tmp_path, capsys):
    flags = ["--bits", "32", "--k", "8", "--query_limit", "1024"]
    simulate.run(["--oracle", "pem", *flags, "--epsilon", "4.0", "--domain_size", "100",
                  "--users", "2000", "--seed", "3", "--output", str(tmp_path / "r"),
                  "--shards", "1"])
    status = cli.main(["heavy-hitters", "--engine=beam", f"--input={tmp_path}/r/*.avro",
                       f"--output={tmp_path}/hh", *flags, "--expect_epsilon", "3.0"])
    err = capsys.readouterr().err
    assert status == 1
    (line,) = [x for x in err.splitlines() if x.startswith("ldpflow heavy-hitters:")]
    assert line.startswith("ldpflow heavy-hitters: no valid report was estimated (2000 "
                           "records: 0 estimated, 0 duplicates, 2000 dead letters; top "
                           "reasons: parameter mismatch: epsilon #, expected #")
    status = cli.main(["heavy-hitters", "--engine=beam", f"--input={tmp_path}/r/*.avro",
                       f"--output={tmp_path}/hh2", *flags,
                       "--max_dead_letter_fraction=1.5"])
    assert status == 2 and "--max_dead_letter_fraction must be in [0, 1]" in \
        capsys.readouterr().err


def test_the_lost_bytes_rule():
    base = {"records": 1000, "estimated": 950, "dead_letters": 50, "duplicates": 0}
    assert verdict(base, 0.05) is None  # 50 / 1000
    assert verdict(base, 0.049).startswith("5.0% of the records were refused")
    # A lost part of 100 bytes in 1,100 bytes of input: 100 * 1000 / 1000 = 100 records,
    # so (50 + 100) / (1000 + 100) = 13.6% were refused.
    lost = {**base, "lost_parts": 1, "lost_bytes": 100, "input_bytes": 1100}
    assert verdict(lost, 0.13).startswith("13.6% of the records were refused")
    assert "1 part of files lost whole (100 bytes, records unknown)" in verdict(lost, 0.13)
    assert verdict(lost, 0.14) is None
    # A part of unknown size (the tail of a truncated file) counts as one record.
    tail = {**base, "lost_parts": 1, "lost_unsized": 1, "input_bytes": 1100}
    assert verdict(tail, 0.05).startswith("5.1% of the records were refused")  # 51 / 1001
    # Nothing read, a part lost: nothing estimated, whatever the fraction.
    nothing = {"records": 0, "estimated": 0, "dead_letters": 0, "lost_parts": 1,
               "lost_bytes": 10, "input_bytes": 10}
    assert verdict(nothing, 1.0).startswith("no valid report was estimated (0 records")
    assert verdict({"submitted": True}, 0.1) is None and verdict({}, 0.1) is None
