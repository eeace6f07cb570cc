#!/usr/bin/env bash
# Runs the staged candle-app programs on HIP device 0: `run.sh <outdir>`.
# Staged by scripts/stage.sh; tests/hip-on-cuda/run.sh calls it as one step. The
# caller provides the HIP libraries (ROCM_PATH; on NVIDIA the hip-on-cuda shim and
# the CUDA library path, as tests/hip-on-cuda/run.sh sets them).
#
# 1. Candle's own test files on HIP (CANDLE_APP_DEVICE=hip: a test never falls
#    back to the CPU), one libtest process per file, all at once, each stopped
#    after $CANDLE_APP_TEST_TIMEOUT seconds (default 600), logged to
#    upstream-<file>.log ($CANDLE_APP_TEST_ARGS: extra libtest arguments, e.g.
#    `-Z unstable-options --report-time` with RUSTC_BOOTSTRAP=1 for per-test
#    times); the user-defined kernel demo (custom-kernel) beside them;
# 2. then, alone on the GPU so that its timings are clean, MiniLM at batches of
#    1, 8 and 64 sentences: PyTorch's side (torch_minilm.py, needs torch and
#    transformers), then `minilm run --require-hip` on its report (HIP must be
#    there, unlike a plain `minilm run`, which falls back to the CPU). The
#    weights are taken from $MINILM_DIR, else <here>/minilm-model, else
#    <here>/../../examples/candle-app/target/minilm (where they are when
#    staged at <repo>/.stage/candle-app).
# 3. generation (generation.sh check): the generation package's GPU tests, the
#    embedded default on HIP, and a Llama-3.2-1B shape against Hugging Face
#    transformers; CANDLE_APP_GENERATION=0 skips it. The generation benchmark
#    is a command of its own: `generation.sh bench <outdir> llama-3.2-1b`.
# Writes <outdir>/rows.txt (lines "step|status|passed|failed|ignored") and a
# summary table; exits non-zero if anything failed or did not run (MiniLM
# without weights is a SKIPPED row, not a failure).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ $# -ne 1 ]]; then
    echo "usage: $0 <outdir>" >&2
    exit 2
fi
mkdir -p "$1"
out="$(cd "$1" && pwd)"
rows="$out/rows.txt"
: > "$rows"
export CANDLE_APP_DEVICE=hip
failures=0

# Runs a program, logging its output to <outdir>/<log>.log; returns its status.
logged() {
    local log="$1"
    shift
    echo "----- $log: $*"
    timeout "${CANDLE_APP_TEST_TIMEOUT:-600}" "$@" 2>&1 | tee "$out/$log.log"
    return "${PIPESTATUS[0]}"
}

# Records a step that is not a test file: its exit status or a reason.
record() {
    local name="$1" status="$2"
    if [[ "$status" == 0 ]]; then
        echo "$name|ok|-|-|-" >> "$rows"
    else
        [[ "$status" == [0-9]* ]] && status="exit $status"
        echo "$name|$status|-|-|-" >> "$rows"
        failures=$((failures + 1))
    fi
}

# Runs a program under the test timeout, logging its output and wall time to
# <outdir>/<log>.log and its exit status to <outdir>/<log>.status.
timed_job() {
    local log="$1" start status
    shift
    start=$SECONDS
    timeout "${CANDLE_APP_TEST_TIMEOUT:-600}" "$@" > "$out/$log.log" 2>&1
    status=$?
    echo "($log: exit $status after $((SECONDS - start)) s)" >> "$out/$log.log"
    echo "$status" > "$out/$log.status"
}

# 1. Candle's test files (the modules of the upstream executable) and the
#    user-defined kernel, as parallel processes.
mapfile -t files < <("$here/upstream" --list 2>/dev/null |
    sed -nE 's/^([A-Za-z0-9_]+)::.*: test$/\1/p' | sort -u)
[[ ${#files[@]} -gt 0 ]] || record "candle-app upstream --list" "no tests listed"
for file in "${files[@]}"; do
    # shellcheck disable=SC2086 # extra libtest arguments, split into words
    timed_job "upstream-$file" "$here/upstream" "$file::" --include-ignored --test-threads=1 \
        ${CANDLE_APP_TEST_ARGS:-} &
done
timed_job custom-kernel "$here/custom-kernel" &
wait
for file in "${files[@]}"; do
    cat "$out/upstream-$file.log"
    status="$(cat "$out/upstream-$file.status")"
    result="$(grep -aE '^test result: ' "$out/upstream-$file.log" | tail -n 1)"
    if [[ -z "$result" ]]; then
        echo "candle-app $file|crashed (exit $status)|0|1|0" >> "$rows"
        failures=$((failures + 1))
        continue
    fi
    passed="$(sed -E 's/.* ([0-9]+) passed.*/\1/' <<<"$result")"
    failed="$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$result")"
    ignored="$(sed -E 's/.* ([0-9]+) ignored.*/\1/' <<<"$result")"
    label="ok"
    [[ "$status" -eq 0 ]] || label="FAILED"
    echo "candle-app $file|$label|$passed|$failed|$ignored" >> "$rows"
    [[ "$status" -eq 0 ]] || failures=$((failures + 1))
done
cat "$out/custom-kernel.log"
record "candle-app custom-kernel" "$(cat "$out/custom-kernel.status")"

# 2. MiniLM on HIP vs CPU, next to PyTorch.
weights=""
for dir in "${MINILM_DIR:-}" "$here/minilm-model" "$here/../../examples/candle-app/target/minilm"; do
    if [[ -n "$dir" && -f "$dir/model.safetensors" ]]; then
        weights="$dir"
        break
    fi
done
if [[ -z "$weights" ]]; then
    # Shown in the summary, not counted as a failure: the weights travel apart
    # from the staged folder and a run may leave them behind.
    echo "candle-app minilm|SKIPPED: no weights|-|-|-" >> "$rows"
else
    torch=()
    if logged torch-minilm python3 "$here/torch_minilm.py" "$weights" "$here/sentences.txt" \
        "$out/torch_minilm.json"; then
        torch=(--torch "$out/torch_minilm.json")
        record "candle-app torch_minilm.py" 0
    else
        record "candle-app torch_minilm.py" $?
    fi
    logged minilm "$here/minilm" run --model "$weights" --require-hip "${torch[@]}"
    record "candle-app minilm" $?
fi

# 3. Text generation.
if [[ "${CANDLE_APP_GENERATION:-1}" != 0 ]]; then
    "$here/generation.sh" check "$out" || failures=$((failures + 1))
fi

echo
echo "===== candle-app summary"
printf '%-40s %-22s %8s %8s %8s\n' "step" "status" "passed" "failed" "ignored"
while IFS='|' read -r name label passed failed ignored; do
    printf '%-40s %-22s %8s %8s %8s\n' "$name" "$label" "$passed" "$failed" "$ignored"
done < "$rows"
[[ "$failures" -eq 0 ]]
