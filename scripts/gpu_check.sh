#!/usr/bin/env bash
# One call on a machine with an NVIDIA GPU: a preflight, the CUDA tests, the examples on cuda,
# then the GPU benchmarks.
#
#   bash scripts/gpu_check.sh [--quick] [--wheels DIR] [--compiled WHEEL] [--steps LIST]
#                             [-- BENCH_ARGS...]
#
# --quick        fits one 10-minute command (aimed at under 5 minutes; not yet timed on a GPU):
#                the CNN example for one epoch and `bench_cuda.py --quick --rounds 1`, every
#                step under a time limit and all of them within QUICK_BUDGET_S (default 540) s.
# --wheels DIR   wheels to install first (default: .whl in the repository root, if present),
#                into a temporary folder put on PYTHONPATH; nothing is downloaded.
# --compiled WHEEL  run the compiled build: this checkout with the extension modules of WHEEL
#                (a wheel of this commit from scripts/build_wheels.sh, for this machine's
#                Python) beside the sources, removed again at the end (scripts/inplace_compiled.py)
# --steps LIST   the steps to run after the preflight, comma-separated (default: all of
#                tests,cnn,saliency,bench); the preflight always runs.
# BENCH_ARGS     passed to benchmarks/bench_cuda.py (e.g. -- --rounds 1 --only mlp,stall).
#
# Steps, each reported as passed, failed or skipped, and listed in a summary at the end:
#   preflight  versions; fails unless a real device computes (CuPy imports and sees a device,
#              a kernel compiled at run time by NVRTC, a cuBLAS matmul and a reduction give
#              NumPy's numbers, asyncgrad sees the real device and computes a backward pass)
#              and pytest-asyncio >= 1.4 and pytest-timeout are there. Nothing else runs
#              unless it passes.
#   tests      python3 -m pytest -m cuda tests (tests/cuda and every test marked cuda), on the
#              real GPU; fails when a test failed, when none ran, or when any skipped for want
#              of a CUDA device.
#   cnn        examples/cnn_digits.py --device cuda (skipped without scikit-learn and tqdm)
#   saliency   examples/server's saliency handler on cuda, against the same on the CPU
#              (skipped without fastapi, pydantic, pillow, prometheus-client, scikit-learn)
#   bench      benchmarks/bench_cuda.py
# The log goes to ${OUT:-/tmp/gpu_check}/gpu_check.log, the tests' JUnit XML to junit-cuda.xml
# and the benchmark report to gpu_results.md in the same folder. Exits 1 if a step failed.
# See scripts/README.md for what to bring to the machine.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-/tmp/gpu_check}
wheels=""
[[ -d $repo/.whl ]] && wheels=$repo/.whl
quick=0
compiled=""
steps=",tests,cnn,saliency,bench,"
bench_args=()
while (($#)); do
    case $1 in
        --quick) quick=1; shift ;;
        --wheels) wheels=${2:?--wheels needs a directory}; shift 2 ;;
        --compiled) compiled=${2:?--compiled needs a wheel}; shift 2 ;;
        --steps) steps=",${2:?--steps needs a list such as tests,bench},"; shift 2 ;;
        --) shift; bench_args=("$@"); break ;;
        -h | --help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

budget=${QUICK_BUDGET_S:-540}  # --quick: all steps within this many seconds
names=()
results=()
failed=0

# step NAME LIMIT_S COMMAND...: runs COMMAND under a time limit (in quick mode no longer than
# what is left of the budget), and records passed, failed or skipped (exit status 3); a step
# not in --steps is not run and not recorded.
step() {
    local name=$1 limit=$2 rc=0 result start=$SECONDS
    shift 2
    if [[ $name != preflight && $steps != *",$name,"* ]]; then
        echo "== $name: not run (not in --steps)"
        return 0
    fi
    if ((quick)); then
        local left=$((budget - SECONDS))
        ((left < limit)) && limit=$left
    fi
    if ((limit < 10)); then
        result="FAILED (not run: the --quick budget of ${budget}s is spent)"
        rc=1
    else
        echo "== $name (limit ${limit}s): $*"
        timeout --kill-after=15 "$limit" "$@" </dev/null || rc=$?
        case $rc in
            0) result="passed" ;;
            3) result="skipped (its packages are not installed, see above)" ;;
            124 | 137) result="FAILED (timed out after ${limit}s)" ;;
            *) result="FAILED (exit status $rc)" ;;
        esac
        result+=" in $((SECONDS - start))s"
    fi
    echo "== $name: $result"
    names+=("$name")
    results+=("$result")
    [[ $result == FAILED* ]] && failed=1
    return "$rc"
}

summary() {
    echo
    echo "== summary ($((SECONDS))s in all; log, JUnit XML and reports in $out)"
    local i
    for i in "${!names[@]}"; do
        printf '  %-10s %s\n' "${names[$i]}" "${results[$i]}"
    done
    if ((failed)); then
        echo "GPU check FAILED"
    else
        echo "GPU check passed"
    fi
}

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
    if [[ -n $compiled ]]; then
        echo "== the compiled build: $compiled"
        python3 scripts/inplace_compiled.py "$compiled" || return 1
        trap 'python3 scripts/inplace_compiled.py --remove; rm -rf "${site:-}"' EXIT
    fi
    nvidia-smi -L || echo "nvidia-smi failed or is missing"

    if ! step preflight 120 python3 scripts/gpu_check.py preflight; then
        summary
        return 1
    fi
    # Time limits (seconds) of the steps and of each test, and the CNN example's epochs.
    local tests=1800 per_test=300 cnn=300 epochs=3 saliency=300 bench=3600
    if ((quick)); then
        tests=330 per_test=120 cnn=150 epochs=1 saliency=150 bench=240
        bench_args=(--quick --rounds 1 "${bench_args[@]}")
    fi
    step tests "$tests" python3 scripts/gpu_check.py tests "$out/junit-cuda.xml" "$per_test"
    step cnn "$cnn" python3 scripts/gpu_check.py cnn "$out/cnn" "$epochs"
    step saliency "$saliency" python3 scripts/gpu_check.py saliency "$out"
    step bench "$bench" python3 benchmarks/bench_cuda.py --markdown "$out/gpu_results.md" \
        "${bench_args[@]}"
    summary
    ((failed == 0))
}

mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2
main 2>&1 | tee "$out/gpu_check.log"
exit "${PIPESTATUS[0]}"
