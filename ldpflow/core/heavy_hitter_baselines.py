"""The PEM paper's baselines, SPM and MCM (kept for compatibility: they live in
:mod:`ldpflow.core.heavy_hitters.spm` and :mod:`ldpflow.core.heavy_hitters.mcm`)."""

from __future__ import annotations

from ldpflow.core.heavy_hitters.counting import hashed_support as olh_support
from ldpflow.core.heavy_hitters.mcm import NAME as MCM_NAME
from ldpflow.core.heavy_hitters.mcm import MultipleChannelMethod
from ldpflow.core.heavy_hitters.spm import NAME as SPM_NAME
from ldpflow.core.heavy_hitters.spm import SegmentPairsMethod

__all__ = [
    "SPM_NAME",
    "MCM_NAME",
    "SegmentPairsMethod",
    "MultipleChannelMethod",
    "olh_support",
]
