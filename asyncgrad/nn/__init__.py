"""ag.nn: modules and parameters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import functional, init, utils
from .activation import ELU, LeakyReLU, LogSoftmax, Mish, SiLU, Softmax
from .modules import (
    GELU,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    IncompatibleKeys,
    L1Loss,
    LayerNorm,
    Linear,
    Module,
    ModuleDict,
    ModuleList,
    MSELoss,
    MultiheadAttention,
    NLLLoss,
    Parameter,
    ParameterDict,
    ParameterList,
    ReLU,
    RemovableHandle,
    Sequential,
    Sigmoid,
    Tanh,
)
from .normalization import BatchNorm1d, BatchNorm2d, GroupNorm, InstanceNorm2d
from .rnn import GRU, LSTM
from .transformer import TransformerEncoderLayer

__all__ = [
    "ELU",
    "GELU",
    "GRU",
    "LSTM",
    "BCEWithLogitsLoss",
    "BatchNorm1d",
    "BatchNorm2d",
    "CrossEntropyLoss",
    "Dropout",
    "Embedding",
    "Flatten",
    "GroupNorm",
    "Identity",
    "IncompatibleKeys",
    "InstanceNorm2d",
    "L1Loss",
    "LayerNorm",
    "LeakyReLU",
    "Linear",
    "LogSoftmax",
    "MSELoss",
    "Mish",
    "Module",
    "ModuleDict",
    "ModuleList",
    "MultiheadAttention",
    "NLLLoss",
    "Parameter",
    "ParameterDict",
    "ParameterList",
    "ReLU",
    "RemovableHandle",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Tanh",
    "TransformerEncoderLayer",
    "functional",
    "init",
    "utils",
]

# ----- convolution, pooling -----
from .modules import AvgPool2d, Conv1d, Conv2d, MaxPool2d, Upsample

__all__ += ["AvgPool2d", "Conv1d", "Conv2d", "MaxPool2d", "Upsample"]

# ----- torch's wider API, by family -----
from .loss import *  # noqa: E402, F403
from .loss import __all__ as _loss_all  # noqa: E402

__all__ += _loss_all

from .spatial import *  # noqa: E402, F403
from .spatial import __all__ as _spatial_all  # noqa: E402

__all__ += _spatial_all

from .layers import *  # noqa: E402, F403
from .layers import __all__ as _layers_all  # noqa: E402

__all__ += _layers_all

# ----- section H5: activations and losses -----
from .activation import (  # noqa: E402
    CELU,
    GLU,
    SELU,
    AlphaDropout,
    CosineSimilarity,
    Dropout1d,
    Dropout2d,
    Dropout3d,
    FeatureAlphaDropout,
    Hardshrink,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LogSigmoid,
    PairwiseDistance,
    PReLU,
    ReLU6,
    RReLU,
    Softmax2d,
    Softmin,
    Softplus,
    Softshrink,
    Softsign,
    Tanhshrink,
    Threshold,
)

__all__ += [
    "CELU",
    "GLU",
    "SELU",
    "AlphaDropout",
    "CosineSimilarity",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "FeatureAlphaDropout",
    "Hardshrink",
    "Hardsigmoid",
    "Hardswish",
    "Hardtanh",
    "LogSigmoid",
    "PReLU",
    "PairwiseDistance",
    "RReLU",
    "ReLU6",
    "Softmax2d",
    "Softmin",
    "Softplus",
    "Softshrink",
    "Softsign",
    "Tanhshrink",
    "Threshold",
]
# ----- end of section H5 -----

# ----- section H6: convolution, pooling, padding, upsampling -----
# ----- end of section H6 -----

# ----- section H7: recurrent, transformer, normalization and other layers -----
from .rnn import RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase  # noqa: E402

__all__ += ["RNN", "GRUCell", "LSTMCell", "RNNBase", "RNNCell", "RNNCellBase"]

from .normalization import (  # noqa: E402
    BatchNorm3d,
    InstanceNorm1d,
    InstanceNorm3d,
    LazyBatchNorm1d,
    LazyBatchNorm2d,
    LazyBatchNorm3d,
    LazyInstanceNorm1d,
    LazyInstanceNorm2d,
    LazyInstanceNorm3d,
    RMSNorm,
    SyncBatchNorm,
)

__all__ += [
    "BatchNorm3d",
    "InstanceNorm1d",
    "InstanceNorm3d",
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
    "LazyInstanceNorm1d",
    "LazyInstanceNorm2d",
    "LazyInstanceNorm3d",
    "RMSNorm",
    "SyncBatchNorm",
]

from .transformer import (  # noqa: E402
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
)

__all__ += ["Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder"]

from .modules import UninitializedBuffer, UninitializedParameter  # noqa: E402

__all__ += ["UninitializedBuffer", "UninitializedParameter"]
# ----- end of section H7 -----

# ----- section H8: start-up modules, legacy tensor types, init, optimizers, torch files -----
from . import parallel  # noqa: E402
from .parallel import DataParallel, DistributedDataParallel  # noqa: E402

__all__ += ["DataParallel", "DistributedDataParallel", "parallel"]
# ----- end of section H8 -----


if not TYPE_CHECKING:  # type checkers report a mistyped name; at run time, NOTE [Names torch has]

    def __getattr__(name: str) -> Any:
        from .._torch_names import missing

        raise missing(__name__, name)
