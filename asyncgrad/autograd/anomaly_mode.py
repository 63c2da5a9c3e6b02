"""``ag.autograd.anomaly_mode``: anomaly detection (held in asyncgrad/graph/anomaly_mode.py, below
the recording and the engine that read it)."""

from __future__ import annotations

from ..graph.anomaly_mode import (
    detect_anomaly,
    is_anomaly_check_nan_enabled,
    is_anomaly_enabled,
    set_detect_anomaly,
)

__all__ = [
    "detect_anomaly",
    "is_anomaly_check_nan_enabled",
    "is_anomaly_enabled",
    "set_detect_anomaly",
]
