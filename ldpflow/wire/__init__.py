"""The wire layer: report envelopes in and out of files and messages, with no Beam.

* :mod:`~ldpflow.wire.envelope`: the envelope's fields, :class:`ReportBatch` and
  :class:`DeadLetter`;
* :mod:`~ldpflow.wire.parse`: the one parse path (columnar, validated once) and the
  server's :class:`AcceptancePolicy`;
* :mod:`~ldpflow.wire.formats`: the front of the readers and writers: format detection,
  byte ranges, the reader and writer dispatch (and the names other packages import);
* one module per format, each with its reader and writer: :mod:`~ldpflow.wire.avro`
  (container framing: blocks, resync, vectorised encoding), :mod:`~ldpflow.wire.jsonl`
  (JSON lines), :mod:`~ldpflow.wire.parquet`, :mod:`~ldpflow.wire.messages` (Pub/Sub
  message bodies);
* what the readers and writers share: :mod:`~ldpflow.wire.reading` (needed fields, damage,
  dead-letter bound), :mod:`~ldpflow.wire.compression` (bounded decompression),
  :mod:`~ldpflow.wire.tables` (the envelope as Arrow columns);
* :mod:`~ldpflow.wire.buffers`: Arrow buffers as numpy arrays;
* :mod:`~ldpflow.wire.results`: estimate and heavy-hitter documents and records.

Needs pyarrow, polars and fastavro (``pip install ldpflow[beam]``), never apache_beam.
"""

from ldpflow.wire.envelope import DeadLetter, ReportBatch
from ldpflow.wire.parse import AcceptancePolicy, Parsed, parse_table

__all__ = ["DeadLetter", "ReportBatch", "AcceptancePolicy", "Parsed", "parse_table"]
