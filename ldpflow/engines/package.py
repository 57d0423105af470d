"""The ldpflow package as one zip, for engines whose workers do not have it installed
(Spark's ``addPyFile``, Dask's ``upload_file``)."""

from __future__ import annotations

import os
import tempfile
import zipfile

__all__ = ["package_zip"]


def package_zip(folder: str | None = None) -> str:
    """Zip the imported ``ldpflow`` package (its .py files and package data) into
    ``folder`` (default: a fresh temporary folder); returns the zip's path."""
    import ldpflow

    root = os.path.dirname(os.path.abspath(ldpflow.__file__))
    folder = folder or tempfile.mkdtemp(prefix="ldpflow-package-")
    path = os.path.join(folder, "ldpflow.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for here, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(names):
                if name.endswith((".py", ".avsc", ".typed", ".json")):
                    full = os.path.join(here, name)
                    # a fixed time: the same package gives the same bytes (Spark refuses a
                    # second file of one name with other contents)
                    info = zipfile.ZipInfo(os.path.relpath(full, os.path.dirname(root)),
                                           date_time=(1980, 1, 1, 0, 0, 0))
                    info.compress_type = zipfile.ZIP_DEFLATED
                    with open(full, "rb") as f:
                        archive.writestr(info, f.read())
    return path
