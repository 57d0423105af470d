"""Every JSON line belongs to exactly one byte range, whatever its length: a line longer
than a range (and than the longest line read) once made the range it began in read on
into the next one, so the lines after it were counted twice."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ldpflow
from ldpflow.core.dedup import report_id_hashes
from ldpflow.wire import formats, jsonl

ORACLE = ldpflow.oracle("grr", epsilon=1.0, domain_size=8)
MAX_LINE = 300  # the longest line read (the product's is 1 MiB), small to keep this fast


def _lines(lengths: list[int]) -> tuple[bytes, list[str]]:
    """One report a line, padded (an unknown field, ignored) to about ``lengths``; returns
    the file and the ids of the lines short enough to be read."""
    out, kept = [], []
    for i, length in enumerate(lengths):
        record = {"report_id": f"r-{i}", "user_id": f"u-{i}", "event_time": i,
                  "oracle": "grr", "epsilon": 1.0, "domain_size": 8, "value": i % 8}
        text = json.dumps(record, separators=(",", ":"))
        pad = max(0, length - len(text) - 10)
        line = text[:-1] + f',"pad":"{"x" * pad}"' + "}"
        out.append(line)
        if len(line) <= MAX_LINE:
            kept.append(f"r-{i}")
    return ("\n".join(out) + "\n").encode(), kept


def _read_ranges(data: bytes, ranges: list[tuple[int, int | None]]):
    records, hashes = 0, []
    for start, end in ranges:
        for parsed in formats.read_reports(io.BytesIO(data), "json", start=start, end=end,
                                           keep=("id_hashes",)):
            records += parsed.records
            hashes += [h for b in parsed.batches.values() for h in b.id_hashes.tolist()]
    return records, sorted(hashes)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.one_of(st.integers(100, 250), st.integers(301, 2000)),
                        min_size=1, max_size=40),
       range_bytes=st.integers(64, 1500), block_bytes=st.integers(16, 700),
       cuts=st.lists(st.floats(0, 1), max_size=6))
def test_every_line_belongs_to_exactly_one_range(lengths, range_bytes, block_bytes, cuts):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonl, "MAX_LINE_BYTES", MAX_LINE)
        patch.setattr(jsonl, "_JSON_CHUNK_BYTES", block_bytes)
        _check_ranges(lengths, range_bytes, cuts)


def _check_ranges(lengths, range_bytes, cuts):
    data, kept = _lines(lengths)
    expected = sorted(report_id_hashes(kept).tolist())
    planned = formats.plan_ranges(io.BytesIO(data), "json", len(data), True, range_bytes)
    bounds = sorted({int(c * len(data)) for c in cuts} - {0})  # random cut points too
    chosen = [0, *bounds]
    random_ranges = list(zip(chosen, [*chosen[1:], None], strict=True))
    for ranges in (planned, random_ranges):
        records, hashes = _read_ranges(data, ranges)
        assert records == len(lengths), ranges
        assert hashes == expected, ranges


def test_a_line_longer_than_a_range_is_one_dead_letter_and_the_rest_read_once(
        monkeypatch):
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", MAX_LINE)
    monkeypatch.setattr(jsonl, "_JSON_CHUNK_BYTES", 256)
    lengths = [120] * 10 + [5000] + [120] * 30
    data, kept = _lines(lengths)
    ranges = formats.plan_ranges(io.BytesIO(data), "json", len(data), True, 1024)
    assert len(ranges) > 3
    records, hashes = _read_ranges(data, ranges)
    assert (records, len(hashes)) == (41, 40)
    assert hashes == sorted(report_id_hashes(kept).tolist())
    assert np.unique(hashes).size == 40
