"""``ag.backends``: torch's switches for the libraries under its kernels, as scripts set and read
them. asyncgrad computes with NumPy (and CuPy on CUDA), so the libraries torch names (cuDNN,
MKL, MKL-DNN, OpenMP, MPS) are not available: each ``is_available()`` answers as torch does on a
machine without that library, and each flag keeps the value a script gives it (it changes
nothing else; See NOTE [Backend flags])."""

# NOTE [Backend flags]
# Scripts write ``torch.backends.cudnn.benchmark = True`` or ``deterministic = True`` at start-up
# and read them back; torch changes which kernels run. asyncgrad has one kernel per op, already
# deterministic on the CPU, so the flags are plain module attributes holding torch's defaults:
# set, they read back as set, and nothing else changes. ``cuda.matmul.allow_tf32`` is the one
# switch that acts, on CUDA devices (it is ``ag.cuda.matmul.allow_tf32``).

from __future__ import annotations

from . import cpu, cuda, cudnn, mkl, mkldnn, mps, openmp, opt_einsum

__all__ = ["cpu", "cuda", "cudnn", "mkl", "mkldnn", "mps", "openmp", "opt_einsum"]
