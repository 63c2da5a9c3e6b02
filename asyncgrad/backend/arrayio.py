"""Reading and writing named host arrays as ``.npz`` and safetensors files, never with pickle.

The NumPy side of ``ag.save``/``ag.load`` (asyncgrad/serialization.py): only the backend imports
NumPy. Readers raise ``ArrayFileError`` (with the cause chained) for anything that is not a
well-formed file, so the caller can name the file once.
"""

from __future__ import annotations

import json
import sys
import zipfile
from typing import IO, Any

import numpy as np

__all__ = [
    "ArrayFileError",
    "byte_span",
    "read_npz",
    "read_safetensors",
    "span_of",
    "strided_view",
    "torch_storage",
    "write_npz",
    "write_safetensors",
]


class ArrayFileError(Exception):
    """The file is not a readable archive of arrays (the message says why)."""


def write_npz(file: IO[bytes], arrays: dict[str, Any]) -> None:
    """Write ``arrays`` (host arrays, no object dtype; ``bytes`` become uint8 arrays) as an
    uncompressed ``.npz`` to ``file``."""
    with zipfile.ZipFile(file, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, a in arrays.items():
            with zf.open(name + ".npy", mode="w", force_zip64=True) as f:
                if isinstance(a, bytes):
                    a = np.frombuffer(a, dtype=np.uint8)
                np.lib.format.write_array(f, np.asanyarray(a), allow_pickle=False)


def read_npz(file: IO[bytes]) -> dict[str, Any]:
    """Every array of the ``.npz`` in ``file``, loaded without pickle (object arrays refused)."""
    try:
        npz = np.load(file, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ArrayFileError("not an .npz archive (a single NumPy array)")
        with npz:
            # NpzFile reads a member whose name does not end in .npy as raw bytes.
            members = npz.zip.namelist() if npz.zip is not None else []
            bad = [n for n in members if not n.endswith(".npy")]
            if bad:
                raise ArrayFileError(f"its zip member {bad[0]!r} is not a NumPy array (.npy)")
            arrays = {name: npz[name] for name in npz.files}
        for name, a in arrays.items():  # what a tensor can hold: no strings, dates, records
            if a.dtype.kind not in "biufc" or a.dtype.fields is not None:
                raise ArrayFileError(f"its array {name!r} has dtype {a.dtype}, not a tensor's")
        return arrays
    except ArrayFileError:
        raise
    except ValueError as e:
        if "Object arrays" in str(e):
            raise ArrayFileError(
                "it holds an object array (pickled Python objects), which is never loaded"
            ) from e
        if "pickled" in str(e):  # NumPy takes what is neither a zip nor a .npy for a pickle
            raise ArrayFileError("not an .npz archive (neither a zip nor a NumPy file)") from e
        raise ArrayFileError(f"not a valid .npz archive ({e})") from e
    except Exception as e:  # zipfile, struct, zlib, NumPy's header parser: any of them
        raise ArrayFileError(f"not a valid .npz archive ({type(e).__name__}: {e})") from e


def _safetensors() -> Any:
    try:
        import safetensors.numpy
    except ImportError:
        raise ImportError(
            "reading and writing .safetensors files needs the safetensors package: "
            'pip install "asyncgrad[safetensors]"'
        ) from None
    return safetensors.numpy


def write_safetensors(arrays: dict[str, Any], metadata: dict[str, str]) -> bytes:
    """The bytes of a safetensors file holding ``arrays`` (host arrays) and ``metadata``."""
    st = _safetensors()
    # Not np.ascontiguousarray: it turns a 0-d array into a 1-d one.
    flat = {k: a if a.flags.c_contiguous else a.copy(order="C") for k, a in arrays.items()}
    data: bytes = st.save(flat, metadata)
    return data


def read_safetensors(data: bytes) -> tuple[dict[str, Any], dict[str, str]]:
    """The arrays and the metadata of the safetensors file whose bytes are ``data``."""
    st = _safetensors()
    try:
        arrays = st.load(data)
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + n])
        metadata = header.get("__metadata__") or {}
    except Exception as e:  # safetensors raises its own SafetensorError for every defect
        raise ArrayFileError(f"not a valid safetensors file ({type(e).__name__}: {e})") from e
    if not isinstance(metadata, dict):
        raise ArrayFileError("not a valid safetensors file (bad metadata)")
    return dict(arrays), metadata


# ----------------------------------------------------------------------------- PyTorch files
def torch_storage(raw: bytes, dtype: str, byteorder: str) -> Any:
    """A writable host array over a storage of a PyTorch file: its bytes read as ``dtype`` in
    the file's ``byteorder`` ("little" or "big"), in this machine's order."""
    dt = np.dtype(dtype)
    if dt.itemsize and len(raw) % dt.itemsize:
        raise ArrayFileError(f"a storage of {len(raw)} bytes is not a whole number of {dtype}")
    if dt.itemsize < 2 or byteorder == sys.byteorder:  # NumPy's own dtype object
        return np.frombuffer(bytearray(raw), dtype=dt)
    swapped = np.frombuffer(raw, dtype=dt.newbyteorder("<" if byteorder == "little" else ">"))
    return swapped.astype(dt)


def strided_view(storage: Any, offset: Any, size: Any, stride: Any) -> Any:
    """The array at element ``offset`` of ``storage`` (a 1-d host or device array) with shape
    ``size`` and strides ``stride`` in elements (negative ones too), sharing its memory; its
    layout is checked against the storage first, so a malformed file cannot read past it. A
    layout in which elements may share memory (an expanded tensor: a stride of 0) gives a
    read-only host array, as ``broadcast_to`` does."""
    if type(size) not in (list, tuple) or type(stride) not in (list, tuple):
        raise ArrayFileError(f"a tensor's layout is malformed (size {size!r}, stride {stride!r})")
    shape, steps = tuple(size), tuple(stride)
    if not (
        type(offset) is int
        and offset >= 0
        and len(shape) == len(steps)
        and all(type(n) is int and n >= 0 for n in shape)
        and all(type(s) is int for s in steps)
    ):
        raise ArrayFileError(
            f"a tensor's layout is malformed (offset {offset!r}, size {size!r}, stride {stride!r})"
        )
    if 0 not in shape:
        first = offset + sum((n - 1) * s for n, s in zip(shape, steps, strict=True) if s < 0)
        last = offset + sum((n - 1) * s for n, s in zip(shape, steps, strict=True) if s > 0)
        if first < 0 or last >= storage.shape[0]:
            raise ArrayFileError(
                f"a tensor of size {list(shape)} and stride {list(steps)} at offset {offset} "
                f"needs elements {first}..{last} of a storage of {storage.shape[0]}"
            )
    item = storage.dtype.itemsize
    strides = [s * item for s in steps]
    if type(storage) is np.ndarray:
        return np.lib.stride_tricks.as_strided(
            storage[offset:], shape, strides, writeable=not _may_overlap(shape, steps)
        )
    from . import namespace

    return namespace(storage).lib.stride_tricks.as_strided(storage[offset:], shape, strides)


def _may_overlap(shape: tuple[int, ...], steps: tuple[int, ...]) -> bool:
    """Whether two elements of the layout may share memory: unless each stride, smallest
    first, steps past everything the smaller ones reach (a conservative test)."""
    reach = 0
    for s, n in sorted((abs(s), n) for s, n in zip(steps, shape, strict=True) if n > 1):
        if s <= reach:
            return True
        reach += (n - 1) * s
    return False


# ----------------------------------------------------------------------------- shared memory
def byte_span(a: Any) -> tuple[int, int]:
    """The addresses ``[lo, hi)`` of the memory ``a`` (a host or device array with elements)
    reads."""
    lo = hi = int(a.__array_interface__["data"][0]) if type(a) is np.ndarray else int(a.data.ptr)
    for n, s in zip(a.shape, a.strides, strict=True):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi + a.itemsize


def span_of(a: Any, start: int, count: int) -> Any:
    """A 1-d array of ``count`` elements of ``a``'s dtype, over the memory from address
    ``start`` on (at or before ``a``'s first element, in the same allocation): a view, no
    copy."""
    item = a.dtype.itemsize
    first = int(a.__array_interface__["data"][0]) if type(a) is np.ndarray else int(a.data.ptr)
    back = (first - start) // item
    if type(a) is np.ndarray:
        if back:  # step back to ``start`` (a view with negative strides starts after it)
            a = np.lib.stride_tricks.as_strided(a, (back + 1,), (-item,), writeable=False)[::-1]
        return np.lib.stride_tricks.as_strided(a, (count,), (item,), writeable=False)
    from . import namespace

    strided = namespace(a).lib.stride_tricks.as_strided
    if back:
        a = strided(a, (back + 1,), (-item,))[::-1]
    return strided(a, (count,), (item,))
