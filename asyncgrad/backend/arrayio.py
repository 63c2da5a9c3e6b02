"""Reading and writing named host arrays as ``.npz`` and safetensors files, never with pickle.

The NumPy side of ``ag.save``/``ag.load`` (asyncgrad/serialization.py): only the backend imports
NumPy. Readers raise ``ArrayFileError`` (with the cause chained) for anything that is not a
well-formed file, so the caller can name the file once.

NOTE [Sizes from a file]
A reader allocates only what the file's bytes can hold. Every size a file declares (a zip
member's size, an ``.npy`` header's shape, a tensor's layout, a pickle's lengths and memo
indices) is checked against the bytes actually there before anything of that size is made, so
a file of a few hundred bytes cannot make a reader ask for gigabytes, and a declared size that
disagrees with the bytes is a defect of the file, not data to load. A stored zip member holds
its bytes as they are; a deflated one inflates at most ``MAX_DEFLATE_RATIO`` times (deflate
spends at least 2 bits on a match of at most 258 bytes), and ``ag.load(max_bytes=...)`` bounds
what a file that really compresses that well may take. Other zip compression methods are not
read: neither NumPy nor torch writes them.
"""

from __future__ import annotations

import copy
import io
import json
import math
import sys
import zipfile
from typing import IO, Any, Final

import numpy as np

__all__ = [
    "ArrayFileError",
    "byte_span",
    "open_zip",
    "read_member",
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


def read_npz(data: bytes, zf: zipfile.ZipFile | None = None) -> dict[str, Any]:
    """Every array of the ``.npz`` whose bytes are ``data`` (``zf``: its zip, if already open),
    read without pickle (object arrays refused) and checked against the bytes the file holds
    (See NOTE [Sizes from a file])."""
    if zf is None:
        if data[:6] == b"\x93NUMPY":
            raise ArrayFileError("not an .npz archive (a single NumPy array)")
        if data[:4] not in (b"PK\x03\x04", b"PK\x05\x06"):  # a zip; an empty one
            raise ArrayFileError("not an .npz archive (neither a zip nor a NumPy file)")
        zf = open_zip(data)
    arrays: dict[str, Any] = {}
    for info in zf.infolist():
        if not info.filename.endswith(".npy"):
            raise ArrayFileError(f"its zip member {info.filename!r} is not a NumPy array (.npy)")
        name = info.filename[: -len(".npy")]
        arrays[name] = _read_npy(zf, info, name, len(data))
    return arrays


def _read_npy(zf: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, file_bytes: int) -> Any:
    """The array in the ``.npy`` member ``info``: its header read first, then exactly the
    bytes that header declares, into an array made once."""
    size = _member_size(info, file_bytes)
    fmt = np.lib.format
    with _open_member(zf, info, check_crc=True) as f:
        try:
            version = fmt.read_magic(f)
            if version == (1, 0):
                shape, fortran_order, dt = fmt.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran_order, dt = fmt.read_array_header_2_0(f)
            else:
                raise ArrayFileError(f"its array {name!r} is in .npy format {version}")
            body = size - f.tell()
        except ArrayFileError:
            raise
        except Exception as e:  # NumPy's header parser, and zipfile's errors under it
            raise ArrayFileError(
                f"its array {name!r} has no readable .npy header ({type(e).__name__}: {e})"
            ) from e
        if dt.hasobject:
            raise ArrayFileError(
                "it holds an object array (pickled Python objects), which is never loaded"
            )
        if dt.kind not in "biufc" or dt.fields is not None:  # no strings, dates, records
            raise ArrayFileError(f"its array {name!r} has dtype {dt}, not a tensor's")
        if not all(type(n) is int and n >= 0 for n in shape):
            raise ArrayFileError(f"its array {name!r} has the malformed shape {shape!r}")
        count = math.prod(shape)
        if count * dt.itemsize != body:
            raise ArrayFileError(
                f"its array {name!r} of shape {list(shape)} and dtype {dt} needs "
                f"{count * dt.itemsize} bytes, and its member holds {body}"
            )
        flat = np.empty(count, dt)
        _read_into(f, flat.view(np.uint8), info.filename)
    a = flat.reshape(shape[::-1]).T if fortran_order else flat.reshape(shape)
    return a if dt.isnative else a.astype(dt.newbyteorder("="))


# ----------------------------------------------------------------------------- zip members
MAX_DEFLATE_RATIO: Final = 1032
_CHUNK: Final = 1 << 20  # bytes read from a zip member at a time


def open_zip(data: bytes) -> zipfile.ZipFile:
    """``data`` as a zip archive, its directory read and checked: each member named once, as
    many as the archive's end record declares (zipfile reads the directory by its length in
    bytes, so a damaged length would drop members without a word)."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except Exception as e:  # zipfile, struct, decoding: a damaged directory raises any of them
        raise ArrayFileError(f"not a valid zip archive ({type(e).__name__}: {e})") from e
    names = zf.namelist()
    declared = _declared_members(data)
    if declared is not None and declared != len(names):
        raise ArrayFileError(
            f"its zip directory lists {len(names)} members, and its end record {declared}"
        )
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise ArrayFileError(f"it holds the zip member {twice!r} twice")
    return zf


def _declared_members(data: bytes) -> int | None:
    """How many members the end record of the zip ``data`` declares, found where zipfile finds
    it (the last 22 bytes, else the last record signature before a comment), or None."""
    end = len(data) - 22
    if not (end >= 0 and data[end : end + 4] == b"PK\x05\x06" and data[-2:] == b"\0\0"):
        end = data.rfind(b"PK\x05\x06", max(0, len(data) - 22 - 0xFFFF))
    if end < 0 or end + 22 > len(data):
        return None
    count = int.from_bytes(data[end + 10 : end + 12], "little")
    record = end - 20 - 56  # a zip64 end record, then its locator, right before it
    if record >= 0 and data[end - 20 : end - 16] == b"PK\x06\x07":
        if data[record : record + 4] == b"PK\x06\x06":
            count = int.from_bytes(data[record + 32 : record + 40], "little")
    return count


def read_member(
    zf: zipfile.ZipFile, info: zipfile.ZipInfo, file_bytes: int, *, check_crc: bool = True
) -> Any:
    """The bytes of the member ``info`` of ``zf`` (a zip of ``file_bytes`` bytes) as a
    writable 1-d uint8 array, once its declared size is checked against the file
    (See NOTE [Sizes from a file]) and, if ``check_crc``, its CRC against its bytes."""
    out = np.empty(_member_size(info, file_bytes), np.uint8)
    with _open_member(zf, info, check_crc=check_crc) as f:
        _read_into(f, out, info.filename)
    return out


def _member_size(info: zipfile.ZipInfo, file_bytes: int) -> int:
    """The size the member ``info`` declares, once checked against the bytes that hold it."""
    name, stored = info.filename, info.compress_size
    if info.header_offset < 0 or info.header_offset + stored > file_bytes:
        raise ArrayFileError(f"its zip member {name!r} runs past the end of the file")
    if info.compress_type == zipfile.ZIP_STORED:
        if info.file_size != stored:
            raise ArrayFileError(
                f"its zip member {name!r} is stored as {stored} bytes and declares {info.file_size}"
            )
    elif info.compress_type == zipfile.ZIP_DEFLATED:
        if info.file_size > stored * MAX_DEFLATE_RATIO:
            raise ArrayFileError(
                f"its zip member {name!r} declares {info.file_size} bytes, more than its "
                f"{stored} compressed bytes can hold"
            )
    else:
        raise ArrayFileError(
            f"its zip member {name!r} uses compression method {info.compress_type}, which is "
            "not read (only stored and deflated members are)"
        )
    return info.file_size


def _open_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, *, check_crc: bool) -> IO[bytes]:
    if not check_crc:
        info = copy.copy(info)
        del info.CRC  # zipfile checks the CRC of a member whose ZipInfo has one
    try:
        return zf.open(info)
    except Exception as e:  # a damaged local header, an encrypted member: zipfile's errors
        raise ArrayFileError(
            f"its zip member {info.filename!r} cannot be read ({type(e).__name__}: {e})"
        ) from e


def _read_into(f: IO[bytes], out: Any, member: str) -> None:
    """Fill ``out`` (a 1-d uint8 array) from ``f``, which must then be at its end: reading
    up to it is what makes zipfile check the member's CRC."""
    try:
        done = 0
        while done < out.size:
            chunk = f.read(min(_CHUNK, out.size - done))
            if not chunk:
                raise ArrayFileError(f"its zip member {member!r} is truncated at byte {done}")
            out[done : done + len(chunk)] = np.frombuffer(chunk, np.uint8)
            done += len(chunk)
        if f.read(1):
            raise ArrayFileError(f"its zip member {member!r} holds more bytes than it declares")
    except ArrayFileError:
        raise
    except Exception as e:  # zipfile's CRC check, zlib's inflate: BadZipFile, zlib.error, ...
        raise ArrayFileError(
            f"its zip member {member!r} is corrupt ({type(e).__name__}: {e})"
        ) from e


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
def torch_storage(raw: Any, dtype: str, byteorder: str) -> Any:
    """A writable host array over a storage of a PyTorch file: its bytes (``raw``, a writable
    1-d uint8 array from ``read_member``, which it may share) read as ``dtype`` in the file's
    ``byteorder`` ("little" or "big"), in this machine's order."""
    dt = np.dtype(dtype)
    if dt.itemsize and raw.size % dt.itemsize:
        raise ArrayFileError(f"a storage of {raw.size} bytes is not a whole number of {dtype}")
    if dt.itemsize < 2 or byteorder == sys.byteorder:  # NumPy's own dtype object
        return raw.view(dt)
    return raw.view(dt.newbyteorder("<" if byteorder == "little" else ">")).astype(dt)


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
    item = storage.dtype.itemsize
    if (
        any(n > sys.maxsize for n in shape)
        or any(abs(s) * item > sys.maxsize for s in steps)
        or math.prod(shape) * item > sys.maxsize
    ):  # See NOTE [Sizes from a file]
        raise ArrayFileError(
            f"a tensor of size {list(shape)} and stride {list(steps)} is larger than an array "
            "can be"
        )
    if 0 not in shape:
        first = offset + sum((n - 1) * s for n, s in zip(shape, steps, strict=True) if s < 0)
        last = offset + sum((n - 1) * s for n, s in zip(shape, steps, strict=True) if s > 0)
        if first < 0 or last >= storage.shape[0]:
            raise ArrayFileError(
                f"a tensor of size {list(shape)} and stride {list(steps)} at offset {offset} "
                f"needs elements {first}..{last} of a storage of {storage.shape[0]}"
            )
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
