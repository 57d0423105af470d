"""These tests need the ``beam`` extra (Apache Beam, fastavro, pyarrow, polars): without it
they are skipped, so the core tier still runs on a core-only install."""

import pytest

for _module in ("apache_beam", "fastavro", "pyarrow", "polars"):
    pytest.importorskip(_module, reason="needs the beam extra: pip install 'ldpflow[beam]'")
