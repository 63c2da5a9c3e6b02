"""``ag.onnx``: asyncgrad cannot export ONNX graphs. ``export`` raises NotImplementedError, saying
so; ``is_in_onnx_export()`` is always False."""

from __future__ import annotations

from typing import Any

__all__ = ["export", "is_in_onnx_export"]


def export(model: Any, args: Any = (), f: Any = None, *rest: Any, **kwargs: Any) -> Any:
    """Not supported: asyncgrad records graphs for autograd only, with no ONNX exporter."""
    raise NotImplementedError(
        "ag.onnx.export is not supported: asyncgrad has no ONNX exporter. Save the weights with "
        "ag.save(model.state_dict(), 'model.pt') (a file torch.load reads), load them into the "
        "same model written in PyTorch, and export it with torch.onnx.export"
    )


def is_in_onnx_export() -> bool:
    return False
