"""Reading and writing named host arrays as ``.npz`` and safetensors files, never with pickle.

The NumPy side of ``ag.save``/``ag.load`` (asyncgrad/serialization.py): only the backend imports
NumPy. Readers raise ``ArrayFileError`` (with the cause chained) for anything that is not a
well-formed file, so the caller can name the file once.
"""

from __future__ import annotations

import json
import zipfile
from typing import IO, Any

import numpy as np

__all__ = ["ArrayFileError", "read_npz", "read_safetensors", "write_npz", "write_safetensors"]


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
            return {name: npz[name] for name in npz.files}
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
