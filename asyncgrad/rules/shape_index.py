"""The derivative rules of the shape, view and indexing ops added in ops/views.py.

None so far: the family's ops are compositions of the table's ops (See NOTE [scatter_reduce's
prod, amax and amin] in ops/views.py).
"""

from __future__ import annotations

__all__: list[str] = []
