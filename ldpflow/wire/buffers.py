"""Arrow buffers seen as numpy arrays, without copies."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["offsets_and_data"]


def offsets_and_data(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The offsets (int64, ``len(array) + 1``) and the data bytes (uint8) of a string or
    binary array: value ``i`` is ``data[offsets[i]:offsets[i + 1]]`` (slices respected)."""
    large = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
    kind = np.int64 if large else np.int32
    offsets = np.frombuffer(array.buffers()[1], dtype=kind, count=len(array) + 1,
                            offset=array.offset * np.dtype(kind).itemsize).astype(np.int64)
    data = array.buffers()[2]
    return offsets, (np.frombuffer(data, dtype=np.uint8) if data is not None
                     else np.zeros(0, np.uint8))
