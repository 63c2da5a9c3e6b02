"""ag.nn.functional: neural-network functions built from asyncgrad ops, torch.nn.functional's
names gathered from the modules that define them: functional_core (activations, losses,
normalisation, embedding, dropout, attention, padding) and the families built on it,
functional_activations, functional_losses, functional_spatial (pooling, convolutions, resizing)
and functional_layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import ops
from .._tensor import Tensor as Tensor  # torch.nn.functional has it too
from .functional_activations import *  # noqa: F403
from .functional_activations import __all__ as _activations_all
from .functional_core import *  # noqa: F403
from .functional_core import __all__ as _core_all
from .functional_layers import *  # noqa: F403
from .functional_layers import __all__ as _layers_all
from .functional_losses import *  # noqa: F403
from .functional_losses import __all__ as _losses_all
from .functional_spatial import *  # noqa: F403
from .functional_spatial import __all__ as _spatial_all

__all__ = [*_core_all, *_activations_all, *_losses_all, *_spatial_all, *_layers_all]

# See NOTE [Ops run on their operands' device] in asyncgrad/ops/device_guard.py: the functions
# as called through this module (each defining module guards its own calls between them).
ops.device_guard.guard_module(__name__)

if not TYPE_CHECKING:  # type checkers report a mistyped name; at run time, NOTE [Names torch has]

    def __getattr__(name: str) -> Any:
        from .._torch_names import missing

        raise missing(__name__, name)
