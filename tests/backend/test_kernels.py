"""The fused kernels' CUDA source and the simulator's raw kernels (NOTE [Modelled raw kernels] in
asyncgrad/backend/sim.py).

NVRTC compiles the source without a GPU (CuPy's wheel and NVIDIA's ``nvidia-cuda-nvrtc``; the
check skips without them). The simulator reads the same source's signatures and refuses every
argument a GPU would read wrongly; what the kernels compute is checked in
tests/cuda/test_fused_cross_entropy.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from asyncgrad.backend import kernels, sim

SOURCE = r"""
template <typename T, typename I>
__global__ void scale_rows(const T* x, const I* idx, long long n, T factor, T* out) {}

__global__ void plain(const float* x, int n, float* out) {}
"""


@pytest.fixture(autouse=True)
def one_device() -> Iterator[None]:
    settings = sim._settings()
    before = settings.devices
    sim.configure(devices=max(before, 1))
    sim.model_kernel("scale_rows", _scale_rows)
    try:
        yield
        sim.cuda.Device(0).synchronize()
    finally:
        sim._kernel_models.pop("scale_rows", None)
        sim.configure(devices=before)


def _scale_rows(launch: Any, x: Any, idx: Any, n: Any, factor: Any, out: Any) -> None:
    out[: int(n)] = x[idx[: int(n)]] * factor


def _kernel(name: str = "scale_rows<float,long long>") -> Any:
    module = sim.RawModule(code=SOURCE, name_expressions=(name,))
    return module.get_function(name)


def test_a_modelled_kernel_runs_on_its_stream_and_is_counted() -> None:
    stream = sim.cuda.Stream(non_blocking=True)
    with stream:
        x = sim.asarray(np.arange(4, dtype=np.float32))
        idx = sim.asarray(np.array([3, 0, 2], dtype=np.int64))
        out = sim.empty(3, dtype=np.float32)
        with sim.count_device_work() as counts:
            _kernel()((1,), (32,), (x, idx, np.int64(3), np.float32(2.0), out))
    stream.synchronize()
    np.testing.assert_array_equal(out.get(), [6.0, 0.0, 4.0])
    assert dict(counts.launches) == {"scale_rows": 1}
    assert counts.allocations == 0


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (
            lambda x, i, o: (x.astype(np.float64), i, np.int64(3), np.float32(2), o),
            TypeError,
            r"argument x points to float32, got an array of float64",
        ),
        (
            lambda x, i, o: (x, i.astype(np.int32), np.int64(3), np.float32(2), o),
            TypeError,
            r"argument idx points to int64, got an array of int32",
        ),
        (
            lambda x, i, o: (x[::2], i, np.int64(3), np.float32(2), o),
            ValueError,
            r"argument x: a raw kernel ignores strides",
        ),
        (
            lambda x, i, o: (x, i, 3, np.float32(2), o),
            TypeError,
            r"argument n is a long long \(int64\): pass a NumPy scalar of that type, got 3",
        ),
        (
            lambda x, i, o: (x, i, np.int64(3), np.float64(2), o),
            TypeError,
            r"argument factor is a T \(float32\)",
        ),
        (
            lambda x, i, o: (x, i, np.int64(3), o),
            TypeError,
            r"takes 5 arguments, got 4",
        ),
        (
            lambda x, i, o: (x, i, np.int64(3), np.float32(2), np.zeros(3, np.float32)),
            TypeError,
            r"argument out is a pointer to T; got ndarray",
        ),
    ],
    ids=["pointer dtype", "index dtype", "strided", "python int", "scalar dtype", "count", "host"],
)
def test_a_raw_kernel_refuses_what_a_gpu_would_misread(args: Any, error: Any, match: str) -> None:
    x = sim.asarray(np.arange(8, dtype=np.float32))
    idx = sim.asarray(np.array([3, 0, 2], dtype=np.int64))
    out = sim.empty(3, dtype=np.float32)
    poison = out._data.copy()
    with pytest.raises(error, match=match):
        _kernel()((1,), (32,), args(x, idx, out))
    sim.cuda.Device(0).synchronize()
    np.testing.assert_array_equal(out._data.view(np.uint8), poison.view(np.uint8))


def test_the_ordering_check_sees_what_a_kernel_reads() -> None:
    """A kernel on a side stream reading an upload on the null stream that nothing waited for."""
    sim.configure(check_order=True)
    try:
        x = sim.asarray(np.arange(4, dtype=np.float32))
        idx = sim.asarray(np.array([3, 0, 2], dtype=np.int64))
        stream = sim.cuda.Stream(non_blocking=True)
        with stream:
            out = sim.empty(3, dtype=np.float32)
            with pytest.raises(sim.StreamOrderError, match=r"scale_rows"):
                _kernel()((1,), (32,), (x, idx, np.int64(3), np.float32(2.0), out))
        stream.synchronize()
    finally:
        sim.configure(check_order=False)


def test_launch_configuration_is_checked() -> None:
    x = sim.asarray(np.arange(4, dtype=np.float32))
    idx = sim.asarray(np.array([1], dtype=np.int64))
    out = sim.empty(1, dtype=np.float32)
    args = (x, idx, np.int64(1), np.float32(1), out)
    with pytest.raises(ValueError, match=r"invalid launch \(grid \(1,\), block \(2048,\)"):
        _kernel()((1,), (2048,), args)
    with pytest.raises(ValueError, match=r"invalid launch \(grid \(0,\)"):
        _kernel()((0,), (32,), args)
    with pytest.raises(ValueError, match=r"shared_mem 65536"):
        _kernel()((1,), (32,), args, shared_mem=65536)


def test_names_are_checked_as_cupy_checks_them() -> None:
    module = sim.RawModule(code=SOURCE, name_expressions=("scale_rows<float,long long>",))
    with pytest.raises(RuntimeError, match=r"not among the name expressions"):
        module.get_function("scale_rows<double,long long>")
    with pytest.raises(RuntimeError, match=r"named symbol not found: 'missing'"):
        module.get_function("missing")
    with pytest.raises(RuntimeError, match=r"takes 2 template arguments \(T, I\), got 1"):
        sim.RawKernel(SOURCE, "scale_rows<float>")
    kernel = module.get_function("plain")  # a kernel without a model fails at its launch
    x = sim.empty(1, dtype=np.float32)
    with pytest.raises(NotImplementedError, match=r"no model of kernel 'plain'"):
        kernel((1,), (1,), (x, np.int32(1), x))


def test_every_fused_kernel_has_a_model_with_its_signature() -> None:
    """The models take the C signature's parameters, in its order (after the launch)."""
    import inspect

    for name, (_, params) in sim._kernels_in(kernels.CE_SOURCE).items():
        model = getattr(kernels, f"_model_{name}")
        names = list(inspect.signature(model).parameters)[1:]
        assert names == [p.name for p in params], name


# ----------------------------------------------------------------------------- NVRTC
def _nvrtc() -> Any:
    try:
        from cupy.cuda import compiler
    except ImportError as exc:
        pytest.skip(f"CuPy is not installed ({exc}); CI installs cupy-cuda13x")
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # any failure to load libnvrtc
        pytest.skip(f"NVRTC cannot be loaded ({type(exc).__name__}: {exc}); nvidia-cuda-nvrtc")
    return compiler


def test_the_cuda_source_compiles_with_nvrtc() -> None:
    compiler = _nvrtc()
    program = compiler._NVRTCProgram(
        kernels.CE_SOURCE, "asyncgrad_kernels.cu", name_expressions=list(kernels._NAMES)
    )
    _, mapping = program.compile(options=("-arch=compute_90", "-std=c++17"))
    assert sorted(mapping) == sorted(kernels._NAMES)


def test_nvrtc_would_reject_a_broken_source() -> None:
    """The compile check can fail: an undeclared name is an error."""
    compiler = _nvrtc()
    broken = re.sub(r"rows\[r\] = m \+ ls;", "rows[r] = m + undeclared;", kernels.CE_SOURCE)
    assert broken != kernels.CE_SOURCE
    program = compiler._NVRTCProgram(
        broken, "asyncgrad_kernels.cu", name_expressions=list(kernels._NAMES)
    )
    with pytest.raises(Exception, match=r"undeclared"):
        program.compile(options=("-arch=compute_90", "-std=c++17"))
