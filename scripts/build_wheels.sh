#!/usr/bin/env bash
# The release recipe: the sdist (pure Python) and a wheel for this interpreter whose engine is
# compiled by mypyc (NOTE [Compiled modules] in asyncgrad/_build.py), both into DIST (default
# dist/). The wheel is built from the sdist in a temporary directory, so the checkout gets no
# compiled files. Needs a C compiler and Python's headers; the build environment (hatchling,
# hatch-mypyc, mypy, numpy) is made by `build`.
#
#   bash scripts/build_wheels.sh [DIST]
#   pip install DIST/asyncgrad-*.whl && python -c "import asyncgrad; print(asyncgrad.__build__)"
set -euo pipefail
cd "$(dirname "$0")/.."
dist="${1:-dist}"
python -m build --version > /dev/null 2>&1 || {
    echo "build_wheels.sh: needs the 'build' package (pip install build)" >&2
    exit 2
}
# The sdist, then the wheel from it (python -m build's default order), with the hook on.
HATCH_BUILD_HOOK_ENABLE_MYPYC=true python -m build --outdir "$dist"
python - "$dist" <<'PY'
import sys, zipfile, pathlib
wheels = sorted(pathlib.Path(sys.argv[1]).glob("asyncgrad-*.whl"), key=lambda p: p.stat().st_mtime)
names = zipfile.ZipFile(wheels[-1]).namelist()
compiled = [n for n in names if n.startswith("asyncgrad/") and n.endswith((".so", ".pyd"))]
if not compiled:
    sys.exit(f"build_wheels.sh: {wheels[-1].name} has no compiled modules")
print(f"{wheels[-1].name}: {len(compiled)} compiled modules")
PY
