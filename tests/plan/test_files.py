"""The plan's input files open as the Beam jobs read them (``plan.files.open_file``)."""

from __future__ import annotations

import bz2
import gzip
import zlib

import pytest

from ldpflow.plan.files import open_file

DATA = b"".join(b'{"line": %d}\n' % i for i in range(5000))


@pytest.mark.parametrize("suffix,compress", [
    ("", lambda b: b),
    (".gz", gzip.compress),
    (".bz2", bz2.compress),
    (".deflate", zlib.compress),  # a zlib stream, as the wire layer (and Beam's jobs) read it
])
def test_a_file_reads_back_whole_whatever_its_compression(tmp_path, suffix, compress):
    path = tmp_path / f"reports.jsonl{suffix}"
    path.write_bytes(compress(DATA))
    with open_file(str(path)) as stream:
        assert stream.read() == DATA


def test_a_truncated_file_says_so(tmp_path):
    from ldpflow.wire.compression import TruncatedError

    path = tmp_path / "reports.jsonl.gz"
    path.write_bytes(gzip.compress(DATA)[:-20])
    with open_file(str(path)) as stream, pytest.raises(TruncatedError):
        stream.read()
