"""``ag.backends.cuda``: ``matmul.allow_tf32`` (asyncgrad's one CUDA math switch, shared with
``ag.cuda.matmul``) and torch's other CUDA flags, which read back as set (See NOTE [Backend
flags] in asyncgrad/backends/__init__.py)."""

from __future__ import annotations

from .. import cuda as _cuda

__all__ = [
    "enable_flash_sdp",
    "enable_math_sdp",
    "enable_mem_efficient_sdp",
    "flash_sdp_enabled",
    "is_built",
    "math_sdp_enabled",
    "matmul",
    "mem_efficient_sdp_enabled",
    "preferred_linalg_library",
]


class _Matmul:
    """``matmul.allow_tf32`` acts on CUDA float32 products; the reduced-precision flags are kept
    for torch's API (asyncgrad's float16 products accumulate as CuPy's do)."""

    allow_fp16_reduced_precision_reduction = True
    allow_bf16_reduced_precision_reduction = True

    @property
    def allow_tf32(self) -> bool:
        return _cuda.matmul.allow_tf32

    @allow_tf32.setter
    def allow_tf32(self, flag: bool) -> None:
        _cuda.matmul.allow_tf32 = bool(flag)


matmul = _Matmul()


def is_built() -> bool:
    """Whether asyncgrad can use CUDA here (torch: whether it was built with CUDA)."""
    return _cuda.is_available()


_sdp = {"flash": True, "mem_efficient": True, "math": True}


def flash_sdp_enabled() -> bool:
    return _sdp["flash"]


def enable_flash_sdp(enabled: bool) -> None:
    _sdp["flash"] = bool(enabled)


def mem_efficient_sdp_enabled() -> bool:
    return _sdp["mem_efficient"]


def enable_mem_efficient_sdp(enabled: bool) -> None:
    _sdp["mem_efficient"] = bool(enabled)


def math_sdp_enabled() -> bool:
    return _sdp["math"]


def enable_math_sdp(enabled: bool) -> None:
    _sdp["math"] = bool(enabled)


def preferred_linalg_library(backend: object = None) -> str:
    """The linear-algebra library: CuPy's (cuSOLVER) on CUDA, whatever ``backend`` asks."""
    return "cusolver"
