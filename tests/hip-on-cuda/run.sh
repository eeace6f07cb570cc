#!/usr/bin/env bash
# Runs the staged GPU suite on an NVIDIA machine through the hip-on-cuda
# shim: `run.sh <outdir>`. Made by tests/hip-on-cuda/stage.sh, it lives at
# the top of the staged folder and needs no Rust toolchain: CUDA (driver,
# NVRTC, cuBLAS) and cuDNN 9 are found in $CUDA_HOME (default
# /usr/local/cuda) and the system library path.
#
# With `--sanitize TOOL` it runs instead every test executable and Candle's
# own test files (the staged candle-app `upstream` executable) under
# compute-sanitizer's TOOL, one row per executable with the sanitizer's
# error count (see sanitize_step): every memory, race or sync error fails the
# run, and so does every failing API call, except in the tests listed in
# DELIBERATE_API_ERRORS, which make such calls on purpose and run apart.
# Executables that never initialise CUDA pass (--require-cuda-init no). The
# executables run as parallel processes (the sanitizers are slow and mostly
# host-bound), each stopped after $SANITIZE_TIMEOUT seconds (default 1800);
# $SANITIZE_ONLY, an extended regular expression, keeps only the executables
# whose names match it (e.g. `candle-hip--conformance|candle-app-upstream`);
# the tests in SPLIT_UNDER_SANITIZER run as $SANITIZE_PARTS parallel parts
# ($SANITIZE_SPLIT_ONLY=1: only those parts, the executables' other tests
# not run).
# Run the plain suite first on the same machine: it fills the kernel cache,
# so that the sanitized processes do not compile every kernel again.
#
# Steps, each logged to <outdir>/<name>.log: nvidia-smi, the hip-info and
# runtime-kernel examples, every test executable with --include-ignored --nocapture
# --test-threads=1, the candle-app step (Candle's tests and demos on HIP, if
# staged), then the benchmarks (executables, then python3 scripts,
# report*.py last; they find the output folder in $HIP_ON_CUDA_OUT). Ends
# with a summary table and a `N passed, M failed` line (also in
# <outdir>/summary.txt); exits non-zero if anything failed.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sanitize=""
if [[ $# -eq 3 && "$1" == --sanitize ]]; then
    sanitize="$2"
    shift 2
fi
if [[ $# -ne 1 ]]; then
    echo "usage: $0 [--sanitize memcheck|racecheck|synccheck|initcheck] <outdir>" >&2
    exit 2
fi
mkdir -p "$1"
out="$(cd "$1" && pwd)"
export HIP_ON_CUDA_OUT="$out"

# The shim as a ROCm install. If the staged links did not survive the copy to
# this machine, rebuild them next to the logs.
rocm="$here/rocm"
if [[ ! -e "$rocm/lib/libamdhip64.so.6" ]]; then
    rocm="$out/rocm"
    mkdir -p "$rocm/lib"
    cp "$here/rocm/lib/libhip_on_cuda.so" "$rocm/lib/"
    for name in libamdhip64.so.6 libhiprtc.so.6 librocblas.so.4 libMIOpen.so.1; do
        ln -sf libhip_on_cuda.so "$rocm/lib/$name"
    done
fi
export ROCM_PATH="$rocm"
cuda="${CUDA_HOME:-/usr/local/cuda}"
export LD_LIBRARY_PATH="$cuda/lib64:$cuda/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"

rows=()        # summary rows: "name|status|passed|failed|ignored"
total_passed=0
total_failed=0
other_failures=0

# Runs a step, tee-ing its output to <outdir>/<name>.log; returns its status.
step() {
    local name="$1"
    shift
    echo
    echo "===== $name"
    "$@" 2>&1 | tee "$out/$name.log"
    return "${PIPESTATUS[0]}"
}

# Records a step that is not a test executable (examples, benchmarks): its
# exit status, or a word such as "not built".
record() {
    local name="$1" status="$2"
    case "$status" in
        0) rows+=("$name|ok|-|-|-") ;;
        [0-9]*) rows+=("$name|exit $status|-|-|-") ;;
        *) rows+=("$name|$status|-|-|-") ;;
    esac
    [[ "$status" == 0 ]] || other_failures=$((other_failures + 1))
}

# Tests that make failing API calls on purpose (out of memory, a missing
# kernel, the time of an untimed event, a query of an unknown attribute, the
# shim's error codes): under the sanitizer they run apart, with API errors
# not reported (memory errors still are). Keyed by executable name.
declare -A DELIBERATE_API_ERRORS=(
    [hip-safe--gpu]="gpu_out_of_memory_is_an_error_and_the_device_stays_usable gpu_function_keeps_its_module_alive gpu_events_time_and_order_streams"
    [hip-safe--hip_safe]="device::tests::gpu_failed_attribute_query_leaves_no_last_error"
    [hip-on-cuda--shim]="deliberate_errors_come_back_as_codes"
    [candle-app-upstream]="extension::memory_comes_back_and_oversized_allocations_are_errors"
)
# Tests too long for one sanitized process, split over $SANITIZE_PARTS
# (default 8) parallel processes with CONFORMANCE_PART=k/n (see the
# conformance suite). Keyed by executable name; the tests of one executable
# separated by spaces.
declare -A SPLIT_UNDER_SANITIZER=(
    [candle-hip--conformance]="conformance_with_the_cpu_backend every_candle_dtype_with_the_cpu_backend"
)
# Tests not run under the sanitizer, with the reason printed in the log:
# cuDNN under compute-sanitizer offers no bf16 backward-data algorithm, so
# the shim's MIOpen Find refuses it (hip-safe's own MIOpen test has no
# fallback; candle-hip's convolutions fall back to im2col + GEMM and run).
declare -A NOT_UNDER_SANITIZER=(
    [hip-safe--gpu]="gpu_dnn_conv2d_forward_and_backward_data"
)

# Runs test executable $2 (named $1) under compute-sanitizer's $sanitize,
# `--report-api-errors $3`, with libtest arguments $4..., and writes a row
# named $1$5 (the libtest counts and the sanitizer's error count, then
# "FAILED" or "ok") to the folder $sanitize_rows. An executable that never
# initialises CUDA prints no error summary; it passes when it exits 0.
sanitized_run() {
    local name="$1" exe="$2" api="$3" suffix="$4"
    shift 4
    local log="$out/sanitize-$sanitize-$name${suffix// /_}.log"
    echo "===== sanitize $sanitize: $name$suffix (API errors: $api)" > "$log"
    timeout "${SANITIZE_TIMEOUT:-1800}" \
        "$cuda/bin/compute-sanitizer" --tool "$sanitize" --require-cuda-init no \
        --report-api-errors "$api" --print-limit 100 --error-exitcode 86 \
        "$exe" --include-ignored --test-threads=1 "$@" >> "$log" 2>&1
    local status=$?
    local errors result passed failed ignored label verdict=ok
    # memcheck, synccheck and initcheck end with "ERROR SUMMARY: N errors",
    # racecheck with "RACECHECK SUMMARY: H hazards displayed (N errors, W
    # warnings)"; without a kernel launch, racecheck prints no summary.
    errors="$(grep -aoE 'ERROR SUMMARY: [0-9]+|RACECHECK SUMMARY: .*\([0-9]+ errors' "$log" |
        tail -n 1 | grep -oE '[0-9]+$|[0-9]+ errors' | grep -oE '[0-9]+' | tail -n 1)"
    result="$(grep -aE '^test result: ' "$log" | tail -n 1)"
    passed="$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$result")"
    failed="$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$result")"
    ignored="$(sed -nE 's/.* ([0-9]+) ignored.*/\1/p' <<<"$result")"
    if [[ -z "$errors" && "$status" -eq 0 && -n "$result" ]]; then
        label="$sanitize: no GPU work"
    else
        label="$sanitize: ${errors:-?} errors"
    fi
    if [[ -z "$result" || "$status" -ne 0 || ( -n "$errors" && "$errors" != 0 ) ]]; then
        label="$label (exit $status"
        [[ "$status" -eq 124 ]] && label="$label, timed out"
        label="$label) FAILED"
        verdict=FAILED
    fi
    echo "sanitize $name$suffix|$label|${passed:--}|${failed:--}|${ignored:--}|$verdict" \
        > "$sanitize_rows/$name${suffix// /_}.row"
    echo "----- sanitize $sanitize: $name$suffix: $label"
}

# All of executable $2's tests under the sanitizer: the deliberate API-error
# tests apart (see DELIBERATE_API_ERRORS), NOT_UNDER_SANITIZER skipped.
sanitize_step() {
    local name="$1" exe="$2" t
    local -a skips=() deliberate=()
    read -r -a deliberate <<<"${DELIBERATE_API_ERRORS[$name]:-}"
    for t in ${NOT_UNDER_SANITIZER[$name]:-}; do
        echo "sanitize $sanitize: $name: $t is not run under the sanitizer (see run.sh)"
        skips+=(--skip "$t")
    done
    for t in "${deliberate[@]}"; do
        skips+=(--skip "$t")
    done
    local split parts="${SANITIZE_PARTS:-8}" k
    for split in ${SPLIT_UNDER_SANITIZER[$name]:-}; do
        skips+=(--skip "$split")
        for ((k = 0; k < parts; k++)); do
            CONFORMANCE_PART="$k/$parts" sanitized_run "$name" "$exe" explicit \
                " ($split part $k of $parts)" --exact "$split" &
        done
    done
    [[ "${SANITIZE_SPLIT_ONLY:-0}" == 1 ]] && return
    sanitized_run "$name" "$exe" explicit "" "${skips[@]}" &
    if [[ ${#deliberate[@]} -gt 0 ]]; then
        sanitized_run "$name" "$exe" no " (deliberate API errors)" --exact "${deliberate[@]}" &
    fi
}

if [[ -n "$sanitize" ]]; then
    # Tests that compare the device's free memory skip that comparison: the
    # sanitizer and the other sanitized processes allocate meanwhile.
    export HIP_SAFE_TEST_UNDER_SANITIZER=1
    # 1,000 stress operations per thread instead of 10,000 (see stress.rs).
    export HIP_SAFE_STRESS_OPS=${HIP_SAFE_STRESS_OPS:-1000}
    sanitize_rows="$out/sanitize-$sanitize-rows"
    rm -rf "$sanitize_rows"
    mkdir -p "$sanitize_rows"
    shopt -s nullglob
    for test in "$here"/tests/*; do
        if [[ -z "${SANITIZE_ONLY:-}" || "$(basename "$test")" =~ ^(${SANITIZE_ONLY})$ ]]; then
            sanitize_step "$(basename "$test")" "$test"
        fi
    done
    if [[ -x "$here/candle-app/upstream" &&
          ( -z "${SANITIZE_ONLY:-}" || candle-app-upstream =~ ^(${SANITIZE_ONLY})$ ) ]]; then
        CANDLE_APP_DEVICE=hip sanitize_step candle-app-upstream "$here/candle-app/upstream"
    fi
    wait
    for row in "$sanitize_rows"/*.row; do
        IFS='|' read -r name label passed failed ignored verdict < "$row"
        rows+=("$name|$label|$passed|$failed|$ignored")
        [[ "$passed" == - ]] || total_passed=$((total_passed + passed))
        [[ "$failed" == - ]] || total_failed=$((total_failed + failed))
        [[ "$verdict" == ok ]] || other_failures=$((other_failures + 1))
    done
    {
        echo
        echo "===== summary ($sanitize)"
        printf '%-48s %-36s %8s %8s %8s\n' "step" "status" "passed" "failed" "ignored"
        for row in "${rows[@]}"; do
            IFS='|' read -r name label passed failed ignored <<<"$row"
            printf '%-48s %-36s %8s %8s %8s\n' "$name" "$label" "$passed" "$failed" "$ignored"
        done
        echo
        echo "$total_passed passed, $total_failed failed"
        if [[ "$other_failures" -gt 0 ]]; then
            echo "$other_failures sanitizer step(s) failed"
        fi
    } | tee "$out/summary-$sanitize.txt"
    [[ "$total_failed" -eq 0 && "$other_failures" -eq 0 && ${#rows[@]} -gt 0 ]]
    exit
fi

if [[ -f "$here/unbuilt.txt" ]]; then
    while read -r name; do
        record "$name" "not built"
    done < "$here/unbuilt.txt"
fi

step nvidia-smi nvidia-smi || echo "(nvidia-smi failed)"
echo "ROCM_PATH=$ROCM_PATH"

for example in hip-info runtime-kernel; do
    if [[ -x "$here/bin/$example" ]]; then
        step "$example" "$here/bin/$example"
        record "$example" $?
    fi
done

gpus=$(nvidia-smi --list-gpus 2>/dev/null | grep -c '^GPU' || true)
shopt -s nullglob
for test in "$here"/tests/*; do
    name="$(basename "$test")"
    if [[ "$name" == *--multi_gpu && "$gpus" -lt 2 ]]; then
        # Said in the table, not passed: the test needs a two-GPU machine.
        rows+=("$name|NOT RUN: needs 2 GPUs, found $gpus|0|0|0")
        continue
    fi
    step "$name" "$test" --include-ignored --test-threads=1 --nocapture
    status=$?
    result="$(grep -aE '^test result: ' "$out/$name.log" | tail -n 1)"
    if [[ -z "$result" ]]; then
        # Crashed before libtest could report: count it as one failure.
        rows+=("$name|crashed (exit $status)|0|1|0")
        total_failed=$((total_failed + 1))
        continue
    fi
    passed="$(sed -E 's/.* ([0-9]+) passed.*/\1/' <<<"$result")"
    failed="$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$result")"
    ignored="$(sed -E 's/.* ([0-9]+) ignored.*/\1/' <<<"$result")"
    label="ok"
    [[ "$status" -eq 0 ]] || label="FAILED"
    rows+=("$name|$label|$passed|$failed|$ignored")
    total_passed=$((total_passed + passed))
    total_failed=$((total_failed + failed))
done

# Candle's own tests and the demos on HIP (examples/candle-app): one row per
# test file and demo.
if [[ -x "$here/candle-app/run.sh" ]]; then
    step candle-app "$here/candle-app/run.sh" "$out/candle-app"
    [[ -s "$out/candle-app/rows.txt" ]] || record candle-app "no results"
    while IFS='|' read -r name label passed failed ignored; do
        rows+=("$name|$label|$passed|$failed|$ignored")
        if [[ "$passed" == - ]]; then
            [[ "$label" == ok || "$label" == SKIPPED* ]] || other_failures=$((other_failures + 1))
        else
            total_passed=$((total_passed + passed))
            total_failed=$((total_failed + failed))
        fi
    done < <(cat "$out/candle-app/rows.txt" 2>/dev/null)
fi

# Benchmark executables, then the python scripts; scripts named report*.py
# summarise the others' results, so they run last.
benches=()
for bench in "$here"/bench/*; do
    [[ "$bench" != *.py && -x "$bench" ]] && benches+=("$bench")
done
for bench in "$here"/bench/*.py; do
    [[ "$(basename "$bench")" != report*.py ]] && benches+=("$bench")
done
benches+=("$here"/bench/report*.py)
for bench in "${benches[@]}"; do
    name="$(basename "$bench")"
    case "$name" in
        *.py) step "$name" python3 "$bench" ;;
        *) step "$name" "$bench" ;;
    esac
    record "$name" $?
done

{
    echo
    echo "===== summary"
    printf '%-48s %-22s %8s %8s %8s\n' "step" "status" "passed" "failed" "ignored"
    for row in "${rows[@]}"; do
        IFS='|' read -r name label passed failed ignored <<<"$row"
        printf '%-48s %-22s %8s %8s %8s\n' "$name" "$label" "$passed" "$failed" "$ignored"
    done
    echo
    echo "$total_passed passed, $total_failed failed"
    if [[ "$other_failures" -gt 0 ]]; then
        echo "$other_failures example/benchmark step(s) failed"
    fi
} | tee "$out/summary.txt"

[[ "$total_failed" -eq 0 && "$other_failures" -eq 0 ]]
