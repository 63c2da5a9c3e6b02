"""Matrix and vector products beyond matmul: addmm, baddbmm, mv, kron, tensordot, ..."""

from __future__ import annotations

__all__: list[str] = []
