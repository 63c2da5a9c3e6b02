"""Order statistics, nan-reductions, scans and histograms: median, quantile, mode, cumprod,
cummax, nansum, histc, bincount, ..."""

from __future__ import annotations

__all__: list[str] = []
