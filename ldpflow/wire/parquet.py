"""Parquet report files: the report reader (by row groups) and writer.

Row groups are read as Arrow record batches, only the columns the parse needs; a column
that the file's schema or its row-group statistics prove free of nulls (or all null) is
not read at all. A file is cut into byte ranges at row-group boundaries
(:func:`plan_ranges`); pages are written with checksums (:class:`TableWriter`), so that
flipped bits are found, not counted.
"""

from __future__ import annotations

from typing import IO, Any

import pyarrow as pa

from ldpflow.wire import reading
from ldpflow.wire.envelope import PARAMETER_FIELDS, REQUIRED_FIELDS, field_kind
from ldpflow.wire.parse import accepts_kind, arrow_schema, parse_table
from ldpflow.wire.reading import CHUNK_BYTES, CHUNK_ROWS

__all__ = ["plan_ranges", "read_chunks", "TableWriter"]


def plan_ranges(stream: IO[bytes], range_bytes: int) -> list[tuple[int, int | None]]:
    """Byte ranges of one Parquet file at row-group boundaries, each about
    ``range_bytes`` or more (``(0, None)``: the whole file)."""
    import pyarrow.parquet as pq

    try:
        metadata = pq.ParquetFile(stream).metadata
    except (pa.ArrowException, OSError, ValueError):  # the read reports the lost file
        return [(0, None)]
    starts = sorted(_row_group_offset(metadata.row_group(i))
                    for i in range(metadata.num_row_groups))
    ranges, begin = [], 0
    for start in starts[1:]:
        if start - begin >= range_bytes:
            ranges.append((begin, start))
            begin = start
    ranges.append((begin, None))
    return ranges


def _row_group_offset(row_group) -> int:
    column = row_group.column(0)
    offsets = [o for o in (column.dictionary_page_offset, column.data_page_offset) if o]
    return min(offsets) if offsets else 0


def read_chunks(stream, source, start, end, policy, keep):
    import pyarrow.parquet as pq

    try:  # pages written with checksums are verified
        parquet = pq.ParquetFile(stream, page_checksum_verification=True)
    except (pa.ArrowException, OSError, ValueError) as exc:
        if start == 0:  # one dead letter for the whole file, from its first range
            yield reading.lost_file(source, stream, f"unreadable Parquet file: "
                                                    f"{type(exc).__name__}: {exc}")
        return
    try:
        metadata = parquet.metadata
        schema = parquet.schema_arrow
        if len(set(schema.names)) != len(schema.names):
            raise ValueError(f"the file's schema repeats a column name: {schema.names}")
    except (pa.ArrowException, OSError, ValueError) as exc:
        if start == 0:
            yield reading.lost_file(source, stream, f"unreadable Parquet file: "
                                                    f"{type(exc).__name__}: {exc}")
        return
    fields, optional = reading.needed_fields(keep, policy)
    cache: dict = {}
    for index in range(metadata.num_row_groups):
        row_group = metadata.row_group(index)
        offset = _row_group_offset(row_group)
        if offset < start or (end is not None and offset >= end):
            continue
        done = 0  # rows of this row group already handed on
        try:
            columns, known_null, known_present, constants = _parquet_projection(
                schema, row_group, fields, optional)
            if not columns:  # everything is known from the statistics
                yield parse_table(pa.table({"_": pa.nulls(row_group.num_rows)}), source=source,
                                  policy=policy, keep=keep, known_null=known_null,
                                  known_present=known_present, constants=constants,
                                  protocols=cache)
                continue
            row_bytes = max(1, row_group.total_byte_size // max(row_group.num_rows, 1))
            rows = int(min(CHUNK_ROWS, max(1, CHUNK_BYTES // row_bytes)))
            for batch in parquet.iter_batches(batch_size=rows, row_groups=[index],
                                              columns=columns, use_threads=False):
                parsed = parse_table(pa.Table.from_batches([batch]), source=source,
                                     policy=policy, keep=keep, known_null=known_null,
                                     known_present=known_present, constants=constants,
                                     protocols=cache)
                done += batch.num_rows
                yield parsed
        except (pa.ArrowException, OSError, ValueError, KeyError, UnicodeDecodeError) as exc:
            lost = row_group.num_rows - done  # the rows not handed on: no row counted twice
            yield reading.damage(source, f"unreadable Parquet row group {index} ({lost} of "
                                         f"{row_group.num_rows} records): "
                                         f"{type(exc).__name__}: {exc}", lost)


_SHORT_CONSTANT = 32  # longer string statistics may be truncated prefixes


def _parquet_projection(schema: pa.Schema, row_group, fields: list[str], optional: set[str]):
    """Columns to read of one row group, and what the schema and statistics prove.

    A nullable field whose null count is the row count is all null, a required field of the
    right type (or null count 0) is present, and a parameter field whose minimum equals its
    maximum with no nulls is a constant: none of them is read. Integer and short string
    statistics only (float statistics leave NaN out).
    """
    rows = row_group.num_rows
    nulls: dict[str, list[int | None]] = {}
    single: dict[str, Any] = {}
    for i in range(row_group.num_columns):
        column = row_group.column(i)
        top = column.path_in_schema.split(".")[0]
        stats = column.statistics
        count = stats.null_count if stats is not None and stats.has_null_count else None
        nulls.setdefault(top, []).append(count)
        try:
            low, high = (stats.min, stats.max) if count == 0 and stats.has_min_max else (1, 0)
        except UnicodeDecodeError:  # statistics that are not UTF-8: not a proof
            low, high = 1, 0
        if (top in PARAMETER_FIELDS and "." not in column.path_in_schema and low == high
                and (isinstance(low, int) or (isinstance(low, str)
                                              and len(low) < _SHORT_CONSTANT))):
            single[top] = low
    columns, known_null, known_present, constants = [], [], [], {}
    for name in fields:
        if name not in schema.names:
            continue
        counts = nulls.get(name, [None])
        field = schema.field(name)
        kind_ok = accepts_kind(field.type, field_kind((name,)))
        if name in optional:
            if kind_ok and (not field.nullable or counts == [0]):
                known_present.append(name)
                continue
        elif name in single and kind_ok and not pa.types.is_floating(field.type):
            constants[name] = single[name]
            continue
        elif field.nullable and None not in counts and min(counts) == rows and name not in \
                REQUIRED_FIELDS:
            known_null.append(name)
            continue
        columns.append(name)
    return columns, known_null, known_present, constants


class TableWriter:
    """Writes one Parquet file of envelopes a table at a time (a row group of up to 2^20
    rows each), with page checksums."""

    def __init__(self, stream: IO[bytes]):
        self._stream = stream
        self._parquet = None

    def write(self, table: pa.Table) -> None:
        import pyarrow.parquet as pq

        schema = arrow_schema()
        if self._parquet is None:  # page checksums: flipped bits are found, not counted
            self._parquet = pq.ParquetWriter(self._stream, schema, write_page_checksum=True)
        self._parquet.write_table(table if table.schema.equals(schema)
                                  else table.cast(schema), row_group_size=1 << 20)

    def close(self) -> None:
        if self._parquet is None:
            import pyarrow.parquet as pq

            self._parquet = pq.ParquetWriter(self._stream, arrow_schema(),
                                             write_page_checksum=True)
        self._parquet.close()
