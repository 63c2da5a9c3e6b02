"""Run this checkout as the compiled build: put a compiled wheel's extension modules beside the
sources, or take them away again (See NOTE [Compiled modules] in asyncgrad/_build.py).

    bash scripts/build_wheels.sh /tmp/dist
    python scripts/inplace_compiled.py /tmp/dist/asyncgrad-*.whl   # the suite now runs compiled
    python -c "import asyncgrad; print(asyncgrad.__build__)"       # compiled
    python scripts/inplace_compiled.py --remove                     # pure again

An extension module is imported ahead of the ``.py`` file beside it, so a stale one would run
old code: the wheel's sources of its compiled modules must equal the checkout's, or nothing is
copied.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def extensions(root: Path) -> list[Path]:
    """The compiled files in a checkout: the package's extension modules and mypyc's shared
    library beside the package."""
    suffixes = tuple(EXTENSION_SUFFIXES)
    found = [p for p in (root / "asyncgrad").rglob("*") if p.name.endswith(suffixes)]
    found += [p for p in root.glob("*__mypyc*") if p.name.endswith(suffixes)]
    return sorted(found)


def remove(root: Path) -> int:
    gone = extensions(root)
    for p in gone:
        p.unlink()
    print(f"removed {len(gone)} compiled files: the checkout is the pure build")
    return 0


def install(wheel: Path, root: Path) -> int:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        compiled = [n for n in names if n.endswith(tuple(EXTENSION_SUFFIXES))]
        if not compiled:
            print(f"{wheel.name} has no compiled modules", file=sys.stderr)
            return 1
        stale = []
        for name in compiled:
            if not name.startswith("asyncgrad/"):
                continue  # mypyc's shared library
            source = name.split(".", 1)[0] + ".py"
            if source in names and zf.read(source) != (root / source).read_bytes():
                stale.append(source)
        if stale:
            print(
                f"{wheel.name} was built from other sources than this checkout's: "
                + ", ".join(stale),
                file=sys.stderr,
            )
            return 1
        remove(root)
        for name in compiled:
            (root / name).write_bytes(zf.read(name))
            (root / name).chmod(0o755)
    print(f"copied {len(compiled)} compiled files from {wheel.name}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("wheel", nargs="?", type=Path, help="a compiled wheel of this checkout")
    ap.add_argument("--remove", action="store_true", help="remove every compiled file")
    a = ap.parse_args()
    if a.remove:
        return remove(ROOT)
    if a.wheel is None:
        ap.error("give a wheel, or --remove")
    return install(a.wheel, ROOT)


if __name__ == "__main__":
    sys.exit(main())
