"""JSON lines parsed against the fields the lines hold: the same tables, reports and dead
letters as a parse against the whole envelope schema, whatever the lines hold."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ldpflow
from ldpflow.wire import formats, jsonl
from ldpflow.wire.parse import KEEP_FIELDS, AcceptancePolicy

OLH = ldpflow.oracle("olh", epsilon=1.0, domain_size=64)
GRR = ldpflow.oracle("grr", epsilon=1.0, domain_size=8)
UNREAD = ("spm", "mcm", "treehist", "sfp")


def _lines(oracle, n: int, seed: int = 0, prefix: str = "r") -> list[bytes]:
    rng = np.random.default_rng(seed)
    reports = oracle.perturb(rng.integers(0, oracle.domain_size, n), rng)
    table = formats.reports_table(oracle, reports, formats.numbered_ids(f"{prefix}-", 0, n),
                                  formats.numbered_ids("u-", 0, n), np.arange(n))
    return jsonl.json_lines(table).splitlines(keepends=True)


def _edited(line: bytes, **changes) -> bytes:
    record = json.loads(line)
    for name, value in changes.items():
        if value is _DROP:
            del record[name]
        else:
            record[name] = value
    return (json.dumps(record, separators=(",", ":")) + "\n").encode()


_DROP = object()


_PYARROW_JSON = jsonl._pyarrow_json  # not the spy below


def _whole_schema(chunk: bytes, unread: tuple[str, ...] = ()):
    """The parse before the held fields: against the whole envelope schema."""
    return _PYARROW_JSON(chunk, jsonl._json_schema(unread), "ignore")


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    """No fields held from other tests (the memory is the process's)."""
    monkeypatch.setattr(jsonl, "_HELD", {})
    monkeypatch.setattr(jsonl, "_HELD_MISSES", set())


@pytest.fixture
def calls(monkeypatch):
    """The parses made: ``(unexpected-field behaviour, number of fields, succeeded)``."""
    seen: list[tuple[str, int, bool]] = []
    parse = jsonl._pyarrow_json

    def spy(chunk, schema, unexpected):
        try:
            table = parse(chunk, schema, unexpected)
        except Exception:
            seen.append((unexpected, len(schema), False))
            raise
        seen.append((unexpected, len(schema), True))
        return table

    monkeypatch.setattr(jsonl, "_pyarrow_json", spy)
    return seen


def test_a_chunk_after_the_first_is_parsed_against_the_held_fields_alone(calls):
    lines = _lines(OLH, 400)
    first, second = b"".join(lines[:200]), b"".join(lines[200:])
    assert jsonl._json_read(first, UNREAD).equals(_whole_schema(first, UNREAD))
    table = jsonl._json_read(second, UNREAD)
    assert table.equals(_whole_schema(second, UNREAD))
    held = set(jsonl._HELD[UNREAD])
    assert held == {"report_id", "user_id", "event_time", "oracle", "epsilon", "domain_size",
                    "hash_range", "seed", "bucket"}
    whole = len(jsonl._json_schema(UNREAD))
    # First the whole schema, then the held fields alone (proven the only ones present).
    assert calls[:2] == [("ignore", whole, True), ("error", len(held), True)]


@pytest.mark.parametrize("change", [
    {"num_hashes": None},  # a field of the envelope, held null
    {"app": {"version": 3}},  # a field unknown to the envelope (ignored)
    {"value": 3},  # another protocol's payload field (refused by the parse)
    {"pem": {"group": 1}},  # a nested record
    {"seed": "x"},  # a wrong type (the chunk fails either way)
    {"event_time": _DROP},  # a required field missing
])
def test_a_line_holding_other_fields_is_parsed_as_the_whole_schema_parses_it(change):
    lines = _lines(OLH, 300)
    jsonl._json_read(b"".join(lines[:100]), UNREAD)  # the fields are held
    lines[150] = _edited(lines[150], **change)
    chunk = b"".join(lines[100:])
    try:
        expected = _whole_schema(chunk, UNREAD)
    except Exception as exc:  # noqa: BLE001 - whatever pyarrow raises, the same is raised
        with pytest.raises(type(exc)):
            jsonl._json_read(chunk, UNREAD)
        return
    assert jsonl._json_read(chunk, UNREAD).equals(expected)


def test_fields_that_fail_again_once_learned_go_to_the_whole_schema_at_once(calls):
    lines = [_edited(line, num_hashes=None) for line in _lines(OLH, 300)]
    chunks = [b"".join(lines[i:i + 100]) for i in (0, 100, 200)]
    for chunk in chunks:
        assert jsonl._json_read(chunk, UNREAD).equals(_whole_schema(chunk, UNREAD))
    assert jsonl._HELD[UNREAD] in jsonl._HELD_MISSES
    # The first chunk learns, the second tries the held fields once and fails, the third
    # is parsed against the whole schema only.
    assert [(u, ok) for u, _, ok in calls] == [("ignore", True), ("error", False),
                                               ("ignore", True), ("ignore", True)]


def _read_all(data: bytes, keep) -> list:
    out = []
    for parsed in formats.read_reports(io.BytesIO(data), "json", source="f.jsonl",
                                       policy=AcceptancePolicy(), keep=keep):
        batches = {tuple(key): {name: np.asarray(column).tolist()
                                for name, column in sorted(batch.reports.columns.items())}
                   | {"ids": None if batch.id_hashes is None else batch.id_hashes.tolist()}
                   for key, batch in parsed.batches.items()}
        out.append((parsed.records, parsed.reports, batches,
                    [letter.to_json() for letter in parsed.dead_letters]))
    return out


def _hostile_file() -> bytes:
    lines = _lines(OLH, 3000)
    grr = _lines(GRR, 500, seed=1, prefix="g")
    edits = {100: {"num_hashes": None}, 200: {"app": [1, 2]}, 300: {"user_id": 5},
             400: {"event_time": _DROP}, 500: {"bits": "zz"}, 600: {"value": 1},
             700: {"report_id": "x" * 3000}}
    for i, change in edits.items():
        lines[i] = _edited(lines[i], **change)
    lines[800] = lines[800][:-6] + b"\n"  # cut short: malformed
    lines[900] = lines[900].rstrip(b"\n") + lines[901]  # two objects on one line
    lines[1000] = b"\n"  # an empty line
    lines[1100] = b'{"a":' * 80 + b"\n"  # deeper than allowed
    lines[1200] = lines[1200].replace(b'"seed"', b'"s\\u0065ed"')  # an escaped key
    lines[1300] = b"\xff\xfe not UTF-8\n"
    lines[1400] = b"x" * 5000 + b"\n"  # longer than the longest line read
    return b"".join(lines[:2000] + grr + lines[2000:])


@pytest.mark.parametrize("keep", [(), KEEP_FIELDS])
def test_reading_holds_every_report_and_dead_letter_of_the_whole_schema(monkeypatch, keep):
    data = _hostile_file()
    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(jsonl, "_JSON_CHUNK_BYTES", 40_000)  # many chunks, protocols mixed
    fast = _read_all(data, keep)
    monkeypatch.setattr(jsonl, "_json_read", _whole_schema)  # the parse as it was
    whole = _read_all(data, keep)
    assert fast == whole
    assert sum(p[1] for p in fast) > 3000 and sum(len(p[3]) for p in fast) >= 10


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=30), st.integers(2, 50))
def test_lines_proven_short_are_short(lengths, limit):
    chunk = b"".join(b"x" * n + b"\n" for n in lengths)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonl, "MAX_LINE_BYTES", limit)
        if jsonl._lines_are_short(chunk):
            assert max(lengths) <= limit
        if max(lengths) < limit // 2:
            assert jsonl._lines_are_short(chunk)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([b"\n", b"a", b" ", b"{}"]), min_size=1, max_size=40))
def test_nonblank_lines_counts_the_lines_that_are_not_empty(parts):
    chunk = b"".join(parts)
    expected = sum(1 for line in chunk.split(b"\n") if line)
    assert jsonl._nonblank_lines(chunk) == expected
    assert jsonl._nonblank_lines(chunk, chunk.count(b"\n")) == expected
