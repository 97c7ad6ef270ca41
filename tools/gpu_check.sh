#!/usr/bin/env bash
# GPU check (one NVIDIA GPU, under 6 minutes): five time-boxed steps, one line each, and one
# result record (lch-result/1, kind gpu) of the run:
#   offload-native       the native offload machine's sync and async worlds on CUDA, each async
#                        run with its drawn side-stream delays (torch.cuda._sleep before copies)
#   race-switches        the three offload-race-* catalogue switches, caught through the delays
#                        alone (real streams: the simulated device is never built on CUDA)
#   waits-intact         no switch on: native passes the catalogue's offload budget with delays
#   vllm-offload-worker  vLLM's real CPUOffloadingWorker on CUDA, and which copy path ran
#   hunt                 a 30 s hunt of the offload engine on CUDA
# Each step's verdict is lch/gpu_check.py's (what each must show: its STEPS); what each test
# ran on (CUDA or CPU worlds, streams, delays queued, vLLM's copy paths) is counted by
# lch/gpu_check_plugin.py, so the record says it rather than assumes it.
#
# Usage: tools/gpu_check.sh [--allow-skip] [--out DIR]     (PYTHON=... picks the interpreter)
#   The record (DIR/gpu/gpu-check-<device>.json) and every step's log in one file
#   (DIR/gpu_check-steps.log) go to --out DIR, else $OUT (a lent machine's), else a fresh
#   temporary folder; a line says where. vLLM on a machine without it: tools/gpu_carry.sh.
#
# Exit codes, never confused (docs/design.md: pass, divergence, could-not-run):
#   0   every step passed (--allow-skip: also when steps or the GPU were SKIPs, still printed)
#   1   a step failed or timed out, torch cannot be imported, or no record could be written:
#       a broken check is a failure
#   3   no step failed but some could not run (SKIP, e.g. vLLM missing): not a pass
#   77  SKIP: torch loads but sees no CUDA device (nothing was checked; not a pass)
# properties/test_gpu_check.py checks the CPU-side behaviour (fail without torch, skip codes,
# the steps' verdicts and the record, with a fake CUDA python).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

PYTHON=${PYTHON:-python3}
ALLOW_SKIP=0
OUT_DIR=${OUT:-}
ARGS="$*"
while [ $# -gt 0 ]; do
    case "$1" in
        --allow-skip) ALLOW_SKIP=1 ;;
        --out) OUT_DIR=${2:?"gpu_check: --out needs a folder"}; shift ;;
        --out=*) OUT_DIR=${1#--out=} ;;
        *) echo "gpu_check: unknown argument $1 (usage: $0 [--allow-skip] [--out DIR])" >&2
           exit 2 ;;
    esac
    shift
done
[ -n "$OUT_DIR" ] || OUT_DIR=$(mktemp -d -t gpu_check.out.XXXX)
LOGS=$(mktemp -d -t gpu_check.XXXX)
STARTED=$(date -u +%Y-%m-%dT%H:%M:%S+00:00)
BEGAN=$SECONDS
probe=""

# record PROBE_OUTCOME PROBE_DETAIL: the run's one record, whatever happened (FAIL when none
# can be written: a run without its record checked nothing anyone can read).
record() {
    if ! "$PYTHON" -m lch.gpu_check record --dir "$LOGS" --out "$OUT_DIR" --probe "$probe" \
            --probe-outcome "$1" --probe-detail "$2" --command "tools/gpu_check.sh $ARGS" \
            --started "$STARTED" --wall $((SECONDS - BEGAN)); then
        echo "gpu_check: FAIL record: '$PYTHON -m lch.gpu_check record' failed (above); the" \
             "step logs are in $LOGS"
        return 1
    fi
}

PROBE_S=30
probe=$(timeout "$PROBE_S" "$PYTHON" -c 'import torch; ok = torch.cuda.is_available(); print("cuda" if ok else "nocuda", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0).replace(" ", "_") if ok else "-")' 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
    why=$(echo "$probe" | tail -n 1)
    probe=""
    echo "gpu_check: FAIL torch: '$PYTHON -c \"import torch\"' exited $rc: $why"
    record FAIL "import torch exited $rc: $why"
    echo "gpu_check: FAIL (install torch for $PYTHON, or point PYTHON= at a Python that has it)"
    exit 1
fi
probe=$(echo "$probe" | tail -n 1)
# shellcheck disable=SC2086  # split on purpose: cuda|nocuda TORCH CUDA DEVICE
set -- $probe
if [ "$1" != "cuda" ]; then
    echo "gpu_check: SKIP torch $2 loads but sees no CUDA device: nothing was checked"
    record SKIP "torch $2 sees no CUDA device" || exit 1
    [ $ALLOW_SKIP -eq 1 ] && exit 0
    exit 77
fi
echo "gpu_check: device $4 torch $2 cuda $3"

# CUDA for the native targets (sim/device.py raises if it is missing, never falls back to
# CPU), and for vLLM's platform (release.py would pick its CPU platform otherwise).
export HYPOTHESIS_PROFILE=ci LCH_DEVICE=cuda VLLM_TARGET_DEVICE=cuda PYTHONUNBUFFERED=1
failed=0
skipped=0
# step NAME SECONDS CMD...: run CMD time-boxed into LOGS/NAME.log, then lch/gpu_check.py
# judges it (one line) from the log, the tests' lines (LCH_GPU_CHECK_TESTS, written by the
# plugin), the harness's outcomes (--outcomes) and the reproducers (LCH_REPRODUCER_DIR).
# GPU_CHECK_LIMIT_S replaces every step's limit (properties/test_gpu_check.py uses it).
step() {
    local name=$1 limit=${GPU_CHECK_LIMIT_S:-$2}; shift 2
    local start=$SECONDS rc
    LCH_GPU_CHECK_TESTS="$LOGS/$name.tests.jsonl" LCH_REPRODUCER_DIR="$LOGS/$name" \
        PYTEST_ADDOPTS="--outcomes='$LOGS/$name.outcomes.jsonl'" \
        timeout --kill-after=5 "$limit" "$@" >"$LOGS/$name.log" 2>&1
    rc=$?
    "$PYTHON" -m lch.gpu_check step "$name" --dir "$LOGS" --rc $rc \
        --seconds $((SECONDS - start)) --limit "$limit" -- "$@"
    case $? in
        0) ;;
        3) skipped=1 ;;
        *) failed=1 ;;
    esac
}

PYTEST=("$PYTHON" -m pytest -q -p no:cacheprovider -p lch.gpu_check_plugin -rs)
KNOWN_BUGS=properties/test_known_bugs.py
# 1. The native offload machine on CUDA (sync and async worlds, delays drawn per async run),
#    its id-reuse tests and the delay plumbing's own tests.
step offload-native 65 "${PYTEST[@]}" -n 3 --dist loadgroup properties/test_offload_engine.py \
    properties/test_offload_id_reuse.py properties/test_copy_delays.py
# 2. The race switches, named one by one (a selection that matched nothing would pass).
step race-switches 70 "${PYTEST[@]}" -n 3 \
    "$KNOWN_BUGS::test_known_bug_is_caught_and_shrunk[offload-race-read-before-load]" \
    "$KNOWN_BUGS::test_known_bug_is_caught_and_shrunk[offload-race-slot-reuse]" \
    "$KNOWN_BUGS::test_known_bug_is_caught_and_shrunk[offload-race-dbuf-overwrite]"
# 3. The same machine with every switch off, at the largest offload budget, delays on.
step waits-intact 45 "${PYTEST[@]}" \
    "$KNOWN_BUGS::test_switch_off_passes_with_the_same_budget[offload_engine]"
# 4. vLLM's CPUOffloadingWorker: a SKIP with vLLM's reason if it cannot be imported here.
step vllm-offload-worker 60 "${PYTEST[@]}" properties/test_offload_worker.py --target vllm
# 5. A short hunt, native target, CUDA (its workers inherit LCH_DEVICE).
step hunt 60 "$PYTHON" -m lch.cli hunt --subsystem offload_engine --target native \
    --budget 30s --workers 4 --no-db --report-dir "$LOGS/hunt" \
    --reproducer-dir "$LOGS/hunt/reproducers"

record PASS "torch $2 sees $4 (CUDA $3)" || failed=1
if [ $failed -ne 0 ]; then
    echo "gpu_check: FAIL"
    exit 1
fi
if [ $skipped -ne 0 ]; then
    echo "gpu_check: SKIP: some steps could not run (above): not a pass"
    [ $ALLOW_SKIP -eq 1 ] && exit 0
    exit 3
fi
echo "gpu_check: PASS"
