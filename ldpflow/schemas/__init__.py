"""Avro schemas (``*.avsc``, the source of truth) and ``load_schema``."""

__all__: list[str] = []
