"""Value labels: a dictionary shared by clients and the server (value <-> label), versioned.

A label file gives some values of a domain ``[0, d)`` a label (a category name, a URL):

* CSV: rows ``value,label`` (an optional header row ``value,label``; RFC 4180 quoting, so a
  label may hold commas, quotes and newlines);
* JSON: an object ``{"3": "red", ...}`` or an array of labels (``["red", "green", null]``:
  the position is the value, ``null`` leaves a value unlabelled).

The file is UTF-8 (a byte-order mark is allowed). It is refused, with one line naming the
file, the place and the problem (:class:`LabelsError`, a ``ValueError``), if it is not UTF-8,
not valid CSV/JSON, names a value twice, a value that is not an integer in ``[0, d)``, has an
empty label, two equal labels (or labels equal after NFC normalisation, which would look
alike and which a client could not tell apart), or more labels than the domain has values.
A value without a label is shown as its integer.

The dictionary's **version** is a content hash: ``blake2b-128:`` and 32 hex digits of the
BLAKE2b-128 digest of its canonical form, the UTF-8 bytes of the JSON array
``[[value, label], ...]`` in value order with no spaces (``separators=(",", ":")``, non-ASCII
characters as they are). The JavaScript client (``clients/js/src/labels.js``) computes the
same version from the same labels; ``docs/testvectors/value_labels.json`` holds shared cases.
No Beam here.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import os
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ldpflow.core import validation

__all__ = ["LabelsError", "ValueLabels", "load_value_labels", "parse_value_labels",
           "canonical_bytes", "labels_version", "MAX_LABELS", "MAX_FILE_BYTES"]

#: The most labels a file may hold (``--max_domain_size``'s default).
MAX_LABELS = 2**24
#: The largest label file read, in bytes.
MAX_FILE_BYTES = 1 << 30
_VERSION_PREFIX = "blake2b-128:"
_SHOWN = 40  # characters of a label quoted in a message
#: Unicode's White_Space characters: a label of these alone is empty (the JS client's rule
#: too; str.isspace and String.prototype.trim each differ from it, and from each other).
WHITE_SPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
               "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


class LabelsError(ValueError):
    """A label file (or a label dictionary) that cannot be used; the message is one line."""


def _quote(text: str) -> str:
    """``text`` for a one-line message: JSON-quoted (newlines escaped), cut if long."""
    shown = text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"
    return json.dumps(shown, ensure_ascii=False)


def canonical_bytes(labels: Mapping[int, str]) -> bytes:
    """The bytes the version hashes: ``[[value, label], ...]`` as compact JSON, by value."""
    pairs = [[int(v), labels[v]] for v in sorted(labels)]
    return json.dumps(pairs, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def labels_version(labels: Mapping[int, str]) -> str:
    """The dictionary's version: ``blake2b-128:`` + 32 hex digits of its canonical bytes."""
    digest = hashlib.blake2b(canonical_bytes(labels), digest_size=16).hexdigest()
    return _VERSION_PREFIX + digest


@dataclasses.dataclass(frozen=True)
class ValueLabels:
    """A checked label dictionary: ``labels`` maps a value to its label (sorted by value).

    Build it with :func:`load_value_labels` (a file), :func:`parse_value_labels` (bytes) or
    :meth:`from_pairs`, which check it; ``source`` names where it came from (for messages and
    the run block).
    """

    labels: Mapping[int, str]
    source: str | None = None

    def __post_init__(self) -> None:
        _check_labels(self.labels.items(), self.source or "value labels")
        object.__setattr__(self, "labels", dict(sorted(self.labels.items())))

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[int, str]], source: str | None = None
                   ) -> ValueLabels:
        """From ``(value, label)`` pairs, refusing a value named twice."""
        found: dict[int, str] = {}
        where = source or "value labels"
        for value, label in pairs:
            if value in found:
                raise LabelsError(f"{where}: value {value} is labelled twice "
                                  f"({_quote(found[value])} and {_quote(label)})")
            found[value] = label
        return cls(found, source)

    @property
    def version(self) -> str:
        return labels_version(self.labels)

    def __len__(self) -> int:
        return len(self.labels)

    def label(self, value: int) -> str:
        """The label of ``value``, or its integer as text if it has none."""
        return self.labels.get(int(value), str(int(value)))

    def get(self, value: int) -> str | None:
        """The label of ``value``, or None."""
        return self.labels.get(int(value))

    def value_of(self, label: str) -> int:
        """The value a label encodes (what a client sends for it). The label is looked up
        in its NFC form, so an NFD ``café`` finds ``café`` (a dictionary has no two labels
        of one NFC form).

        Raises
        ------
        KeyError
            If the dictionary has no such label.
        """
        index = self._index()
        label = unicodedata.normalize("NFC", label)
        if label not in index:
            raise KeyError(f"no value has the label {_quote(label)} in the dictionary "
                           f"{self.version}")
        return index[label]

    def _index(self) -> dict[str, int]:
        index = self.__dict__.get("_by_label")
        if index is None:
            index = {unicodedata.normalize("NFC", label): value
                     for value, label in self.labels.items()}
            object.__setattr__(self, "_by_label", index)
        return index

    def check_domain(self, domain_size: int, what: str = "the domain") -> None:
        """Refuse labels of values outside ``[0, domain_size)`` (or more labels than values).

        Raises
        ------
        LabelsError
            One line naming the file, the first value outside and ``what``.
        """
        where = self.source or "value labels"
        if len(self.labels) > domain_size:
            raise LabelsError(f"{where}: {len(self.labels)} labels for {what} of "
                              f"{domain_size} values (more labels than values)")
        outside = [v for v in self.labels if v >= domain_size]
        if outside:
            raise LabelsError(f"{where}: value {outside[0]} is outside [0, {domain_size}) of "
                              f"{what}" + (f" ({len(outside)} values are)"
                                           if len(outside) > 1 else ""))

    def run_block(self) -> dict[str, Any]:
        """The run block's ``"value_labels"``: ``{"version", "file", "count", "labels"}``
        (``labels``: ``{"VALUE": label}`` in value order)."""
        return {"version": self.version, "file": self.source, "count": len(self.labels),
                "labels": {str(v): label for v, label in self.labels.items()}}

    @classmethod
    def from_run_block(cls, block: Mapping[str, Any]) -> ValueLabels:
        """The dictionary a run block recorded (:meth:`run_block`), checked against its
        version.

        Raises
        ------
        LabelsError
            If the block is malformed or its labels do not hash to its version.
        """
        raw = block.get("labels") if isinstance(block, Mapping) else None
        if not isinstance(raw, Mapping):
            raise LabelsError("the run block's value_labels has no labels object")
        labels = cls(_from_json_object(list(raw.items()), "the run block's value_labels"),
                     block.get("file"))
        if block.get("version") not in (None, labels.version):
            raise LabelsError(f"the run block's value_labels hash to {labels.version}, not "
                              f"to the version it records ({block.get('version')})")
        return labels


def _check_labels(items: Iterable[tuple[int, str]], where: str) -> None:
    seen: dict[str, tuple[int, str]] = {}
    count = 0
    for value, label in items:
        count += 1
        if not validation.is_integer(value):
            raise LabelsError(f"{where}: values must be integers, got {value!r}")
        if value < 0:
            raise LabelsError(f"{where}: value {value} is negative (values are in [0, d))")
        if not isinstance(label, str):
            raise LabelsError(f"{where}: the label of value {value} must be a string, got "
                              f"{type(label).__name__}")
        if not label.strip(WHITE_SPACE):
            raise LabelsError(f"{where}: the label of value {value} is empty")
        try:
            label.encode("utf-8")
        except UnicodeEncodeError:
            raise LabelsError(f"{where}: the label of value {value} is not valid Unicode "
                              "(a lone surrogate)") from None
        form = unicodedata.normalize("NFC", label)
        if form in seen:
            other, text = seen[form]
            same = ("the same label" if text == label else
                    "labels equal after NFC normalisation (they look alike)")
            raise LabelsError(f"{where}: values {other} and {value} have {same} "
                              f"{_quote(label)}: a label names one value")
        seen[form] = (value, label)
    if count > MAX_LABELS:
        raise LabelsError(f"{where}: {count} labels, more than the limit {MAX_LABELS}")


def _integer(text: str, where: str) -> int:
    stripped = text.strip()
    digits = stripped[1:] if stripped[:1] in "+-" else stripped
    if not digits.isascii() or not digits.isdigit():
        raise LabelsError(f"{where}: the value {_quote(text)} is not an integer")
    return int(stripped)


def _from_json_object(items: list[tuple[str, Any]], where: str) -> dict[int, str]:
    found: dict[int, str] = {}
    for key, label in items:
        value = _integer(key, where)
        if value in found:
            raise LabelsError(f"{where}: value {value} is labelled twice")
        if not isinstance(label, str):
            raise LabelsError(f"{where}: the label of value {value} must be a string, got "
                              f"{json.dumps(label)[:_SHOWN]}")
        found[value] = label
    return found


def _parse_json(text: str, where: str) -> dict[int, str]:
    try:
        document = json.loads(text, object_pairs_hook=lambda pairs: pairs)
    except ValueError as exc:
        raise LabelsError(f"{where}: not valid JSON: {exc}") from None
    if isinstance(document, list) and all(isinstance(p, tuple) for p in document) and document:
        return _from_json_object(document, where)  # an object (pairs, in file order)
    if isinstance(document, list):
        found = {}
        for value, label in enumerate(document):
            if label is None:
                continue
            if not isinstance(label, str):
                raise LabelsError(f"{where}: the label at position {value} must be a string "
                                  f"or null, got {json.dumps(label)[:_SHOWN]}")
            found[value] = label
        return found
    raise LabelsError(f"{where}: a JSON label file is an object {{\"value\": \"label\"}} or an "
                      "array of labels")


def _parse_csv(text: str, where: str) -> dict[int, str]:
    found: dict[int, str] = {}
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        for row in reader:
            line = reader.line_num
            if not row:
                continue
            if len(row) != 2:
                raise LabelsError(f"{where}: line {line}: {len(row)} fields, expected 2 "
                                  "(value,label; quote a label that holds a comma)")
            if not found and line == 1 and [c.strip().lower() for c in row] == ["value",
                                                                               "label"]:
                continue  # the header
            value = _integer(row[0], f"{where}: line {line}")
            if value in found:
                raise LabelsError(f"{where}: line {line}: value {value} is labelled twice "
                                  f"({_quote(found[value])} and {_quote(row[1])})")
            found[value] = row[1]
    except csv.Error as exc:
        raise LabelsError(f"{where}: line {reader.line_num}: not valid CSV: {exc}") from None
    return found


def parse_value_labels(data: bytes, source: str = "value labels",
                       fmt: str | None = None) -> ValueLabels:
    """A :class:`ValueLabels` from a label file's bytes; ``fmt`` ``csv`` or ``json``
    (default: JSON if the first character that is not a space is ``{`` or ``[``).

    Raises
    ------
    LabelsError
        One line naming ``source`` and the problem.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LabelsError(f"{source}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset "
                          f"{exc.start})") from None
    if fmt is None:
        fmt = "json" if text.lstrip()[:1] in ("{", "[") else "csv"
    if fmt not in ("csv", "json"):
        raise LabelsError(f"{source}: format must be csv or json, got {fmt!r}")
    labels = _parse_json(text, source) if fmt == "json" else _parse_csv(text, source)
    if not labels:
        raise LabelsError(f"{source}: no labels")
    return ValueLabels(labels, source)


def load_value_labels(path: str, domain_size: int | None = None,
                      read: Callable[[str], bytes] | None = None) -> ValueLabels:
    """The label file at ``path`` (``.json`` is JSON, ``.csv`` CSV, anything else by its
    content), checked against ``domain_size`` when given. ``read`` reads a path that is not
    local (``gs://``, ...; the jobs pass Beam's file systems); default: local files only.

    Raises
    ------
    LabelsError
        One line: the file cannot be read, or is refused (see the module's docstring).
    """
    try:
        if read is not None and "://" in path and not path.startswith("file://"):
            data = read(path)
        else:
            local = path[len("file://"):] if path.startswith("file://") else path
            size = os.path.getsize(local)
            if size > MAX_FILE_BYTES:
                raise LabelsError(f"{path}: {size} bytes, more than the limit "
                                  f"{MAX_FILE_BYTES}")
            with open(local, "rb") as f:
                data = f.read()
    except OSError as exc:
        raise LabelsError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise LabelsError(f"{path}: {len(data)} bytes, more than the limit {MAX_FILE_BYTES}")
    ext = os.path.splitext(path)[1].lower()
    labels = parse_value_labels(data, path, {".json": "json", ".csv": "csv"}.get(ext))
    if domain_size is not None:
        labels.check_domain(domain_size)
    return labels
