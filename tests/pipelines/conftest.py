"""These tests need the ``beam`` extra (Apache Beam, fastavro, pyarrow, polars): without it
they are skipped, so the core tier still runs on a core-only install."""

import logging

import pytest

for _module in ("apache_beam", "fastavro", "pyarrow", "polars"):
    pytest.importorskip(_module, reason="needs the beam extra: pip install 'ldpflow[beam]'")


@pytest.fixture
def engine_lines(caplog):
    """A function giving the lines the jobs logged so far about the engine they chose
    (``ldpflow.pipelines.common.job_options``: "PROG: engine NAME (why)")."""
    caplog.set_level(logging.INFO, logger="ldpflow.pipelines.common")
    return lambda: [r.getMessage() for r in caplog.records
                    if r.name == "ldpflow.pipelines.common" and ": engine " in r.getMessage()]
