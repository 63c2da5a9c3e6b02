"""Fused CUDA kernels: one launch where the array API takes several.

The cross entropy of class indices over a batch of logits, forward and backward, is about twenty
array calls through CuPy (the log-softmax, its masking of ignored targets, the check of the
targets, the reduction; then the scatter and the softmax's backward), each a kernel launch and
most an allocation. Here it is three kernels: ``ce_rows`` (a block per row: its max, log-sum-exp
and loss term), ``ce_total`` (one block: the reduction) and ``ce_grad`` (the gradient of every
logit). See NOTE [One cross entropy in three kernels].

The simulated device (``sim.py``) runs each kernel as its NumPy model below, registered under the
kernel's name (See NOTE [Modelled raw kernels] in sim.py): the arguments are checked against the
C signature in ``CE_SOURCE``, the model computes what the C body computes, and the launch is
counted and ordered on its stream like any other. NVRTC compiles the source without a GPU
(tests/backend/test_kernels.py), and the CUDA tests compare the kernels with the CPU's result.
"""

from __future__ import annotations

import threading
from typing import Any, Final

import numpy as np

from . import cuda

__all__ = ["CE_SOURCE", "cross_entropy_backward", "cross_entropy_forward", "fusable"]

# NOTE [One cross entropy in three kernels]
# ``ce_rows`` runs a block per row of the logits ``z`` (n rows of c classes). It finds the row's
# max ``m`` (NaN if any logit is NaN, as NumPy's max), then ``s = sum(exp(z - m))``, and writes
# three numbers per row into ``rows`` (3 x n): the log-sum-exp ``m + log(s)``, the loss term
# ``coef * (log(s) - (z[t] - m))`` and the coefficient ``coef``. The coefficient is the target's
# weight (1 without weights), 0 for an ignored target, NaN for a target out of range: no target
# is read on the host (See NOTE [Class indices on a device] in asyncgrad/nn/functional_core.py).
# ``ce_total`` sums the terms and the coefficients in double precision in one block and writes
# ``totals`` (2): the loss (the sum, or the sum over the coefficients' sum for a mean: 0/0 is NaN
# when every target is ignored, as torch's) and the coefficients' sum ``W``. A target out of
# range makes ``W`` NaN, and with it the loss and, through the scale, every gradient.
# ``ce_grad`` is elementwise over the logits: ``dz = scale * coef * (exp(z - lse) - onehot(t))``
# with ``scale = g / W`` for a mean and ``g`` for a sum (NaN when ``W`` is), and a row whose
# coefficient is 0 (an ignored target) sending ``0 * (exp(z - lse) - onehot)`` whatever the scale,
# as torch's nll_loss writes nothing there. That is nll_loss's gradient pushed through
# log_softmax's, ``gz = gl - exp(logp) * sum(gl)``, in one pass.
CE_SOURCE: Final = r"""
template <typename T> __device__ T ag_nan();
template <> __device__ float ag_nan<float>() { return __int_as_float(0x7fffffff); }
template <> __device__ double ag_nan<double>() {
    return __longlong_as_double(0x7ff8000000000000ULL);
}

// max that keeps a NaN, as NumPy's
template <typename T> __device__ T ag_max(T a, T b) { return (a > b || a != a) ? a : b; }

template <typename T, typename I>
__global__ void ce_rows(const T* z, const I* t, const T* w, long long n, long long c,
                        long long ignore, int has_w, T* rows) {
    extern __shared__ unsigned char ce_smem[];
    T* sm = reinterpret_cast<T*>(ce_smem);
    const long long r = blockIdx.x;
    const int tid = threadIdx.x;
    const T* zr = z + r * c;
    T m = zr[0];
    for (long long j = tid; j < c; j += blockDim.x) m = ag_max(m, zr[j]);
    sm[tid] = m;
    __syncthreads();
    for (int h = blockDim.x >> 1; h > 0; h >>= 1) {
        if (tid < h) sm[tid] = ag_max(sm[tid], sm[tid + h]);
        __syncthreads();
    }
    m = sm[0];
    __syncthreads();
    T acc = 0;
    for (long long j = tid; j < c; j += blockDim.x) acc += exp(zr[j] - m);
    sm[tid] = acc;
    __syncthreads();
    for (int h = blockDim.x >> 1; h > 0; h >>= 1) {
        if (tid < h) sm[tid] += sm[tid + h];
        __syncthreads();
    }
    if (tid == 0) {
        const T ls = log(sm[0]);
        const long long k = (long long)t[r];
        const bool valid = k != ignore;
        const bool inside = k >= 0 && k < c;
        T coef = 0;
        T term = 0;
        if (valid && inside) {
            coef = has_w ? w[k] : (T)1;
            term = coef * (ls - (zr[k] - m));
        } else if (valid) {
            coef = ag_nan<T>();
            term = coef;
        }
        rows[r] = m + ls;
        rows[n + r] = term;
        rows[2 * n + r] = coef;
    }
}

template <typename T>
__global__ void ce_total(const T* rows, long long n, int mean, T* totals) {
    extern __shared__ unsigned char ce_smem[];
    double* sm = reinterpret_cast<double*>(ce_smem);
    const int tid = threadIdx.x;
    double a = 0;
    double b = 0;
    for (long long i = tid; i < n; i += blockDim.x) {
        a += (double)rows[n + i];
        b += (double)rows[2 * n + i];
    }
    sm[tid] = a;
    sm[blockDim.x + tid] = b;
    __syncthreads();
    for (int h = blockDim.x >> 1; h > 0; h >>= 1) {
        if (tid < h) {
            sm[tid] += sm[tid + h];
            sm[blockDim.x + tid] += sm[blockDim.x + tid + h];
        }
        __syncthreads();
    }
    if (tid == 0) {
        const double total = sm[0];
        const double weight = sm[blockDim.x];
        totals[0] = (T)(mean ? total / weight : total);
        totals[1] = (T)weight;
    }
}

template <typename T, typename I>
__global__ void ce_grad(const T* g, const T* z, const I* t, const T* rows, const T* totals,
                        long long n, long long c, int mean, T* dz) {
    const long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (idx >= n * c) return;
    const long long r = idx / c;
    const long long j = idx - r * c;
    const T weight = totals[1];
    const T scale = mean ? g[0] / weight : (weight != weight ? weight : g[0]);
    const T coef = rows[2 * n + r];
    const T factor = coef == (T)0 ? (T)0 : scale * coef;  // an ignored row sends 0, as torch's
    const T p = exp(z[idx] - rows[r]);
    dz[idx] = factor * (p - ((long long)t[r] == j ? (T)1 : (T)0));
}
"""

_C_TYPES: Final = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long"}
_NAMES: Final = tuple(
    [f"ce_rows<{t},{i}>" for t in ("float", "double") for i in ("int", "long long")]
    + [f"ce_total<{t}>" for t in ("float", "double")]
    + [f"ce_grad<{t},{i}>" for t in ("float", "double") for i in ("int", "long long")]
)
_ROWS_BLOCK_MAX: Final = 256
_TOTAL_BLOCK: Final = 256
_GRAD_BLOCK: Final = 256

_lock: Final = threading.Lock()
_module: Any = None
_functions: dict[str, Any] = {}


def fusable(z: Any, t: Any, w: Any) -> bool:
    """Whether the fused kernels take logits ``z``, targets ``t`` and weights ``w`` (or None):
    float32 or float64 logits of shape (n, c), c >= 1, C-contiguous; int32 or int64 targets
    of shape (n,); weights of shape (c,) and the logits' dtype."""
    return (
        z.ndim == 2
        and z.shape[1] > 0
        and z.dtype.name in ("float32", "float64")
        and z.flags.c_contiguous
        and t.ndim == 1
        and t.dtype.name in ("int32", "int64")
        and t.flags.c_contiguous
        and (
            w is None or (w.shape == (z.shape[1],) and w.dtype == z.dtype and w.flags.c_contiguous)
        )
    )


def _function(name: str) -> Any:
    f = _functions.get(name)
    if f is None:
        with _lock:
            global _module
            if _module is None:
                rt = cuda.rt
                if cuda.simulated():
                    _register_models(rt)
                _module = rt.RawModule(
                    code=CE_SOURCE, options=("-std=c++17",), name_expressions=_NAMES
                )
            f = _functions[name] = _module.get_function(name)
    return f


def _types(z: Any, t: Any | None = None) -> str:
    tt = _C_TYPES[z.dtype.name]
    return tt if t is None else f"{tt},{_C_TYPES[t.dtype.name]}"


def _rows_block(c: int) -> int:
    block = 32
    while block < c and block < _ROWS_BLOCK_MAX:
        block *= 2
    return block


def cross_entropy_forward(z: Any, t: Any, w: Any, ignore_index: int, mean: bool) -> tuple[Any, Any]:
    """The loss (0-d) of device logits ``z`` and targets ``t`` (``fusable``), and what the
    backward reads: ``(rows, totals)`` (See NOTE [One cross entropy in three kernels])."""
    rt = cuda.rt
    n, c = z.shape
    rows = rt.empty((3, n), dtype=z.dtype)
    totals = rt.empty((2,), dtype=z.dtype)
    i64 = np.int64
    if n:
        block = _rows_block(c)
        _function(f"ce_rows<{_types(z, t)}>")(
            (n,),
            (block,),
            (
                z,
                t,
                z if w is None else w,
                i64(n),
                i64(c),
                i64(ignore_index),
                np.int32(w is not None),
                rows,
            ),
            shared_mem=block * z.itemsize,
        )
    _function(f"ce_total<{_types(z)}>")(
        (1,),
        (_TOTAL_BLOCK,),
        (rows, i64(n), np.int32(mean), totals),
        shared_mem=2 * _TOTAL_BLOCK * 8,
    )
    return totals[0], (rows, totals)


def cross_entropy_backward(g: Any, z: Any, t: Any, saved: tuple[Any, Any], mean: bool) -> Any:
    """The gradient of the fused loss for the logits, ``g`` (0-d, on the device) its gradient."""
    rt = cuda.rt
    rows, totals = saved
    n, c = z.shape
    dz = rt.empty(z.shape, dtype=z.dtype)
    if g.dtype != z.dtype or not g.flags.c_contiguous:
        g = rt.ascontiguousarray(g, dtype=z.dtype)
    size = n * c
    if size:
        _function(f"ce_grad<{_types(z, t)}>")(
            ((size + _GRAD_BLOCK - 1) // _GRAD_BLOCK,),
            (_GRAD_BLOCK,),
            (g, z, t, rows, totals, np.int64(n), np.int64(c), np.int32(mean), dz),
        )
    return dz


# ----------------------------------------------------------------------------- models
# What each kernel computes, in NumPy on the kernel's arguments (the simulated device's host
# copies), for the simulator (See NOTE [Modelled raw kernels] in sim.py). Each follows its C body:
# the same operations in the same precision, so the simulated device gives what a GPU gives
# up to the order of the sums.
def _model_ce_rows(
    launch: Any, z: Any, t: Any, w: Any, n: Any, c: Any, ignore: Any, has_w: Any, rows: Any
) -> None:
    n, c = int(n), int(c)
    zz = z[: n * c].reshape(n, c)
    m = np.max(zz, axis=1)  # NaN if any is
    ls = np.log(np.exp(zz - m[:, None]).sum(axis=1))
    k = t[:n].astype(np.int64)
    valid = k != int(ignore)
    inside = (k >= 0) & (k < c)
    ok = valid & inside
    safe = np.where(ok, k, 0)
    coef = np.where(ok, w[safe] if has_w else np.ones((), zz.dtype), 0).astype(zz.dtype)
    coef[valid & ~inside] = np.nan
    picked = zz[np.arange(n), safe]
    term = np.where(ok, coef * (ls - (picked - m)), coef)
    out = rows[: 3 * n].reshape(3, n)
    out[0] = m + ls
    out[1] = term
    out[2] = coef


def _model_ce_total(launch: Any, rows: Any, n: Any, mean: Any, totals: Any) -> None:
    n = int(n)
    r = rows[: 3 * n].reshape(3, n).astype(np.float64)
    total, weight = r[1].sum(), r[2].sum()
    totals[0] = total / weight if mean else total
    totals[1] = weight


def _model_ce_grad(
    launch: Any, g: Any, z: Any, t: Any, rows: Any, totals: Any, n: Any, c: Any, mean: Any, dz: Any
) -> None:
    n, c = int(n), int(c)
    zz = z[: n * c].reshape(n, c)
    r = rows[: 3 * n].reshape(3, n)
    weight = totals[1]
    scale = g[0] / weight if mean else (weight if np.isnan(weight) else g[0])
    coef = r[2][:, None]
    factor = np.where(coef == 0, np.zeros((), zz.dtype), scale * coef)
    p = np.exp(zz - r[0][:, None])
    onehot = t[:n].astype(np.int64)[:, None] == np.arange(c)
    dz[: n * c].reshape(n, c)[...] = factor * (p - onehot.astype(zz.dtype))


def _register_models(rt: Any) -> None:
    rt.model_kernel("ce_rows", _model_ce_rows)
    rt.model_kernel("ce_total", _model_ce_total)
    rt.model_kernel("ce_grad", _model_ce_grad)
