#!/usr/bin/env bash
# One call on a machine with an NVIDIA GPU: the CUDA tests, then the GPU benchmarks.
#
#   bash scripts/gpu_check.sh [--wheels DIR] [-- BENCH_ARGS...]
#
# --wheels DIR   wheels to install first (default: .whl in the repository root, if present),
#                into a temporary folder put on PYTHONPATH; nothing is downloaded.
# BENCH_ARGS     passed to benchmarks/bench_cuda.py (e.g. -- --rounds 1 --only mlp,stall).
#
# The package is used from this checkout through PYTHONPATH (no install needed). Prints the
# versions, runs `python3 -m pytest -q -m cuda tests` against the real GPU, then
# benchmarks/bench_cuda.py, even when tests fail. Everything is copied to
# ${OUT:-/tmp/gpu_check}/gpu_check.log and the benchmark report to .../gpu_results.md.
# Exits non-zero when the tests or the benchmarks failed. See scripts/README.md for wheels.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-/tmp/gpu_check}
wheels=""
[[ -d $repo/.whl ]] && wheels=$repo/.whl
bench_args=()
while (($#)); do
    case $1 in
        --wheels) wheels=${2:?--wheels needs a directory}; shift 2 ;;
        --) shift; bench_args=("$@"); break ;;
        -h | --help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

main() {
    cd "$repo" || return 2
    export ASYNCGRAD_SIM_CUDA=0  # the real GPU, not simulated devices (tests default to them)
    if [[ -n $wheels ]]; then
        shopt -s nullglob
        local whl=("$wheels"/*.whl)
        shopt -u nullglob
        if ((${#whl[@]})); then
            site=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_site.XXXXXX")
            trap 'rm -rf "$site"' EXIT
            echo "== installing ${#whl[@]} wheel(s) from $wheels into $site"
            python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
                --upgrade --target "$site" "${whl[@]}" || echo "!! wheel install failed"
            export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
        else
            echo "== no wheels in $wheels"
        fi
    fi
    export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"

    echo "== versions"
    python3 - <<'EOF'
import importlib
import importlib.metadata
import platform

print("python", platform.python_version())
for name in ("numpy", "cupy", "torch", "pytest", "pytest_asyncio", "pytest_timeout", "uvloop"):
    try:
        mod = importlib.import_module(name)
        version = getattr(mod, "__version__", None)
        version = version or importlib.metadata.version(name.replace("_", "-"))
    except Exception as exc:  # a broken install says why, and the check goes on
        print(name, "not importable:", exc)
        continue
    print(name, version, *([f"(CUDA {mod.version.cuda})"] if name == "torch" else []))
EOF
    nvidia-smi -L || echo "nvidia-smi failed or is missing"

    local tests=0 bench=0 timeout=()
    echo "== CUDA tests: python3 -m pytest -q -m cuda tests"
    if ! python3 -c "import pytest_asyncio" 2>/dev/null; then
        echo "!! pytest-asyncio is missing: bring its wheel (see scripts/README.md)"
        tests=1
    else
        python3 -c "import pytest_timeout" 2>/dev/null && timeout=(--timeout=300)
        python3 -m pytest -q -m cuda -p no:cacheprovider "${timeout[@]}" tests </dev/null ||
            tests=$?
        ((tests == 5)) && echo "!! no test carries the cuda marker"
    fi

    echo "== GPU benchmarks: python3 benchmarks/bench_cuda.py ${bench_args[*]}"
    python3 benchmarks/bench_cuda.py --markdown "$out/gpu_results.md" "${bench_args[@]}" ||
        bench=$?

    echo "== tests exit code $tests, benchmarks exit code $bench; report: $out/gpu_results.md"
    ((tests == 0 && bench == 0))
}

mkdir -p "$out"
main 2>&1 | tee "$out/gpu_check.log"
exit "${PIPESTATUS[0]}"
