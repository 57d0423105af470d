"""Reports in compact columns, in memory and in spill files: what the heavy-hitter passes
after the first keep of the reports they count (Beam-free).

A heavy-hitter protocol's pass ``s > 0`` counts its groups' reports for what pass ``s - 1``
found, so the reports of the groups a later pass reads (:func:`later_groups`) are kept
between passes, in the narrowest integer dtypes that hold their values
(:func:`ldpflow.wire.envelope.narrow_column`), a column of one value as that value alone
(:class:`PackedReports`; exact: :meth:`PackedReports.unpack` restores values and dtypes).
Two jobs keep them:

* the windowed heavy hitters (:mod:`ldpflow.transforms.windowed_heavy_hitters`) in memory,
  per window, joined in tiers as a window fills (:func:`compact`);
* the heavy-hitter job plan (:mod:`ldpflow.plan.heavy_hitters`) on disk: pass 0 writes, per
  range, key and group, one spill file (:func:`write_spill`) of the reports' columns and
  of their id-hash buckets (one byte a report: what a pass's ``(bucket, group)`` parts
  figure needs), which the later passes read in pieces (:func:`read_spill`) instead of
  reading and decoding the input again.

A spill file is ``MAGIC``, the length of a JSON header (uint32, little endian) and its
CRC-32, the header, then every array column's bytes. The header names the oracle, the
number of reports, the block size and, per column, its original dtype, how it is stored
(an array in a narrower dtype, or a constant) and the CRC-32 of each block of
:data:`SPILL_BLOCK` rows, so that a piece of whole blocks is read and checked without
reading the rest. A file that is missing, of another size than its header says, or whose
bytes do not match their checksums raises :class:`SpillError`.
"""

from __future__ import annotations

import json
import math
import os
import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ldpflow.core.oracles import Reports
from ldpflow.wire.envelope import narrow_column

__all__ = [
    "ALL_GROUPS",
    "FAN_IN",
    "MAGIC",
    "SPILL_BLOCK",
    "PackedReports",
    "SpillError",
    "compact",
    "concat_packed",
    "later_groups",
    "read_spill",
    "rereads_all",
    "spill_size",
    "write_spill",
]

#: The ``group`` of reports of every group kept together, for :func:`rereads_all` protocols.
ALL_GROUPS = -1
#: Chunks of one size tier (sizes within a factor of it) joined into one once there are
#: this many (:func:`compact`): ``O(FAN_IN log n)`` chunks for ``n`` reports, each copied
#: ``log_FAN_IN n`` times.
FAN_IN = 8
#: Rows of a spill file's checksum block: a piece a pass reads starts at a multiple of it.
SPILL_BLOCK = 1 << 16
#: The first bytes of a spill file (its format's version).
MAGIC = b"LDPFPAK1"
_PREFIX = struct.Struct("<II")  # header length, header CRC-32


class SpillError(ValueError):
    """A spill file that is missing or damaged (its run's temporary folder was changed)."""


def later_groups(protocol) -> tuple[int, ...]:
    """The groups some pass after the first reads: their reports are kept for it (the
    first pass's own groups are counted as they are read)."""
    return tuple(sorted({g for s in range(1, protocol.num_passes)
                         for g in protocol.pass_groups(s)}))


def rereads_all(protocol) -> bool:
    """Whether every pass reads every group (SPM, MCM, SFP): the reports are then kept
    together (:data:`ALL_GROUPS`), not split by group."""
    return all(len(protocol.pass_groups(s)) == protocol.num_groups
               for s in range(protocol.num_passes))


class PackedReports:
    """Reports (of one group, or of a message) in compact columns: each integer column in the
    narrowest dtype that holds its values, a column of one value as that value alone.

    Exact: :meth:`unpack` restores the columns, values and dtypes.
    """

    __slots__ = ("oracle", "size", "columns")

    def __init__(self, reports: Reports):
        self.oracle = reports.oracle
        self.size = len(reports)
        self.columns: dict[str, tuple[str, Any, str]] = {
            name: _packed_column(column) for name, column in reports.columns.items()}

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held."""
        return sum(v.nbytes for kind, v, _ in self.columns.values() if kind == "array")

    def unpack(self, start: int = 0, stop: int | None = None) -> Reports:
        """The reports (those of ``start:stop``), in their own dtypes."""
        stop = self.size if stop is None else min(stop, self.size)
        return Reports(self.oracle, {name: self._column(name, start, stop)
                                     for name in self.columns})

    @classmethod
    def join(cls, chunks: Sequence[PackedReports]) -> PackedReports:
        """One chunk of ``chunks``' reports, in order: columns packed alike are joined as
        they are (one copy), the others restored, joined and packed again."""
        first = chunks[0]
        if any(c.columns.keys() != first.columns.keys() for c in chunks):
            raise ValueError("cannot join reports of different columns")
        joined = object.__new__(cls)
        joined.oracle, joined.size, joined.columns = first.oracle, sum(c.size for c in chunks), {}
        for name, (kind, value, dtype) in first.columns.items():
            forms = [c.columns[name] for c in chunks]
            if all(f[0] == kind and f[2] == dtype for f in forms) and (
                    kind == "constant" and all(f[1] == value for f in forms)
                    or kind == "array" and all(f[1].dtype == value.dtype for f in forms)):
                joined.columns[name] = (kind, value, dtype) if kind == "constant" else (
                    kind, np.concatenate([f[1] for f in forms]), dtype)
            else:
                joined.columns[name] = _packed_column(
                    np.concatenate([c._column(name) for c in chunks]))
        return joined

    def _column(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        kind, value, dtype = self.columns[name]
        stop = self.size if stop is None else stop
        if kind == "constant":
            return np.full(max(stop - start, 0), value, dtype=np.dtype(dtype))
        return value[start:stop].astype(np.dtype(dtype), copy=False)


def _packed_column(column: np.ndarray) -> tuple[str, Any, str]:
    """``(kind, value, dtype)`` of one column: ``("constant", value, dtype)`` for an integer
    column of one value, else ``("array", narrowest array, dtype)``."""
    if column.ndim == 1 and column.size and column.dtype.kind in "iu" and (
            column.min() == column.max()):
        return "constant", column[0].item(), column.dtype.str
    packed, dtype = narrow_column(column)
    return "array", packed, dtype


def _tier(size: int) -> int:
    return int(math.log(max(size, 1), FAN_IN))


def compact(chunks: list[PackedReports]) -> list[PackedReports]:
    """``chunks`` with the chunks of a size tier joined into one whenever there are
    :data:`FAN_IN` of them (tiered joins, lowest tier first: each join makes chunks of a
    higher tier, so a report is copied about ``log_FAN_IN n`` times as a window fills)."""
    while True:
        tiers: dict[int, list[int]] = {}
        for i, chunk in enumerate(chunks):
            tiers.setdefault(_tier(chunk.size), []).append(i)
        full = [t for t, members in tiers.items() if len(members) >= FAN_IN]
        if not full:
            return chunks
        members = set(tiers[min(full)])
        joined = PackedReports.join([chunks[i] for i in sorted(members)])
        chunks = [c for i, c in enumerate(chunks) if i not in members] + [joined]


def concat_packed(chunks: Sequence[PackedReports]) -> Reports:
    """The reports of ``chunks``, in order, unpacked into one batch."""
    return chunks[0].unpack() if len(chunks) == 1 else Reports.concat(
        [c.unpack() for c in chunks])


# -- spill files ------------------------------------------------------------------------------
def _row_bytes(dtype: np.dtype, shape: Sequence[int]) -> int:
    return dtype.itemsize * int(np.prod(shape, dtype=np.int64))


def _crcs(data: np.ndarray, block: int) -> list[int]:
    raw = memoryview(data.reshape(-1)).cast("B")
    step = block * _row_bytes(data.dtype, data.shape[1:])
    return [zlib.crc32(raw[i:i + step]) for i in range(0, len(raw), step)]


def write_spill(path: str, packed: PackedReports,
                extra: Mapping[str, np.ndarray] | None = None) -> int:
    """Write ``packed`` (and ``extra``: more columns of its rows, e.g. the id-hash buckets,
    packed alike) as one spill file at ``path``; returns the bytes written."""
    columns = dict(packed.columns)
    for name, column in (extra or {}).items():
        if len(column) != packed.size:
            raise ValueError(f"spill column {name!r} has {len(column)} rows, not {packed.size}")
        columns[f"extra:{name}"] = _packed_column(np.asarray(column))
    described, arrays, offset = [], [], 0
    for name, (kind, value, dtype) in columns.items():
        entry: dict[str, Any] = {"name": name, "kind": kind, "dtype": dtype}
        if kind == "constant":
            entry["value"] = value
        else:
            data = np.ascontiguousarray(value)
            if data.dtype.hasobject or data.ndim == 0:
                raise ValueError(f"spill column {name!r} is not an array of numbers")
            entry.update(stored=data.dtype.str, shape=list(data.shape[1:]), offset=offset,
                         crc=_crcs(data, SPILL_BLOCK))
            offset += data.nbytes
            arrays.append(data)
        described.append(entry)
    header = json.dumps({"oracle": packed.oracle, "size": packed.size, "block": SPILL_BLOCK,
                         "data_bytes": offset, "columns": described},
                        separators=(",", ":")).encode("utf-8")
    with open(path, "wb") as f:
        f.write(MAGIC + _PREFIX.pack(len(header), zlib.crc32(header)) + header)
        for data in arrays:
            f.write(memoryview(data).cast("B"))
    return len(MAGIC) + _PREFIX.size + len(header) + offset


def _header(f, path: str) -> tuple[dict, int]:
    head = f.read(len(MAGIC) + _PREFIX.size)
    if len(head) < len(MAGIC) + _PREFIX.size or head[:len(MAGIC)] != MAGIC:
        raise SpillError(f"spill file {path} is damaged: it does not start as a spill file")
    length, crc = _PREFIX.unpack(head[len(MAGIC):])
    raw = f.read(length)
    if len(raw) != length or zlib.crc32(raw) != crc:
        raise SpillError(f"spill file {path} is damaged: its header does not match its "
                         f"checksum")
    header = json.loads(raw)
    start = len(head) + length
    size = os.fstat(f.fileno()).st_size
    if size != start + header["data_bytes"]:
        raise SpillError(f"spill file {path} is damaged: {size} bytes, its header says "
                         f"{start + header['data_bytes']}")
    return header, start


def spill_size(path: str) -> int:
    """The reports a spill file holds (from its header)."""
    try:
        with open(path, "rb") as f:
            return int(_header(f, path)[0]["size"])
    except FileNotFoundError:
        raise SpillError(f"spill file {path} is missing (the run's temporary folder was "
                         f"removed while the job ran)") from None


def read_spill(path: str, start: int = 0, stop: int | None = None
               ) -> tuple[Reports, dict[str, np.ndarray]]:
    """The reports ``start:stop`` of a spill file and its extra columns of those rows, in
    their own dtypes (exactly what :func:`write_spill` was given). ``start`` is a multiple
    of the file's block, ``stop`` one too or the file's end; only the blocks of the piece
    are read, and each is checked."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise SpillError(f"spill file {path} is missing (the run's temporary folder was "
                         f"removed while the job ran)") from None
    with f:
        header, data_start = _header(f, path)
        size, block = int(header["size"]), int(header["block"])
        stop = size if stop is None else min(int(stop), size)
        if start % block or start < 0 or start > stop or (stop % block and stop != size):
            raise ValueError(f"a spill piece is whole blocks of {block} rows (or ends with "
                             f"the file's {size}), got {start}:{stop}")
        first, last = start // block, -(-stop // block)
        columns: dict[str, np.ndarray] = {}
        for entry in header["columns"]:
            dtype = np.dtype(entry["dtype"])
            if entry["kind"] == "constant":
                columns[entry["name"]] = np.full(stop - start, entry["value"], dtype=dtype)
                continue
            stored, shape = np.dtype(entry["stored"]), tuple(entry["shape"])
            row = _row_bytes(stored, shape)
            f.seek(data_start + entry["offset"] + start * row)
            raw = f.read((stop - start) * row)
            if len(raw) != (stop - start) * row:
                raise SpillError(f"spill file {path} is damaged: column {entry['name']} "
                                 f"is cut short")
            view = memoryview(raw)
            for b in range(first, last):
                lo = (b - first) * block * row
                if zlib.crc32(view[lo:lo + block * row]) != entry["crc"][b]:
                    raise SpillError(f"spill file {path} is damaged: column {entry['name']} "
                                     f"rows {b * block}.. do not match their checksum")
            columns[entry["name"]] = np.frombuffer(raw, dtype=stored).reshape(
                (stop - start, *shape)).astype(dtype)
    extra = {name[len("extra:"):]: col for name, col in columns.items()
             if name.startswith("extra:")}
    reports = Reports(header["oracle"], {name: col for name, col in columns.items()
                                         if not name.startswith("extra:")})
    return reports, extra
