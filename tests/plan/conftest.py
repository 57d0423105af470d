"""The job plan reads files through the wire layer (pyarrow, fastavro, polars)."""

import pytest

for _module in ("fastavro", "pyarrow", "polars"):
    pytest.importorskip(_module, reason="needs the wire layer's packages: pip install "
                                         "'ldpflow[dask]' (or [spark], [beam])")
