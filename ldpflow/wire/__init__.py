"""The wire layer: report envelopes in and out of files and messages, with no Beam.

* :mod:`~ldpflow.wire.envelope`: the envelope's fields, :class:`ReportBatch` and
  :class:`DeadLetter`;
* :mod:`~ldpflow.wire.parse`: the one parse path (columnar, validated once) and the
  server's :class:`AcceptancePolicy`;
* :mod:`~ldpflow.wire.formats`: Avro, JSON lines and Parquet, read by byte range and
  written column by column; Pub/Sub message bodies;
* :mod:`~ldpflow.wire.avro`: Avro container framing (blocks, resync, vectorised encoding);
* :mod:`~ldpflow.wire.buffers`: Arrow buffers as numpy arrays;
* :mod:`~ldpflow.wire.results`: estimate and heavy-hitter documents and records.

Needs pyarrow, polars and fastavro (``pip install ldpflow[beam]``), never apache_beam.
"""

from ldpflow.wire.envelope import DeadLetter, ReportBatch
from ldpflow.wire.parse import AcceptancePolicy, Parsed, parse_table

__all__ = ["DeadLetter", "ReportBatch", "AcceptancePolicy", "Parsed", "parse_table"]
