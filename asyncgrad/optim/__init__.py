"""ag.optim: SGD (momentum, nesterov, weight decay), Adam, AdamW, RMSprop, Adagrad and
Adadelta; lr_scheduler."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import lr_scheduler
from .optimizers import SGD, Adadelta, Adagrad, Adam, AdamW, Optimizer, RMSprop

__all__ = [
    "SGD",
    "Adadelta",
    "Adagrad",
    "Adam",
    "AdamW",
    "Optimizer",
    "RMSprop",
    "lr_scheduler",
]

# ----- section H8: start-up modules, legacy tensor types, init, optimizers, torch files -----
from .more import *  # noqa: F403
from .more import __all__ as _more_all

__all__ += _more_all
# ----- end of section H8 -----


if not TYPE_CHECKING:  # type checkers report a mistyped name; at run time, NOTE [Names torch has]

    def __getattr__(name: str) -> Any:
        from .._torch_names import missing

        raise missing(__name__, name)
