#!/usr/bin/env bash
# Runs hip-safe's GPU tests and candle-hip's conformance suites on the CPU
# platform (the shim built in release mode: it checks every buffer's guards
# after each launch), at wave 64 (gfx942) and wave 32 (gfx1100), printing one timing
# line per suite and target. Kernels compile once per target into
# target/hip-on-cpu/cache/<arch> (hip-safe's disk cache).
#
#   HIP_ON_CPU_SUITES  "ci" (default): the hip-safe GPU and stress tests
#                      (8 threads x 2,000 mixed ops), hip-safe's two-device
#                      tests (HIP_ON_CPU_DEVICES=2), the conformance tests
#                      in CI_CONFORMANCE and CI_PARTS;
#                      "full": the stress test at its full 10,000 ops per
#                      thread, every conformance test but `large::` (built
#                      in release, as on the GPU platform: the debug CPU
#                      reference panics where u8 sums wrap), then Candle's own
#                      test files (the application workspace's `upstream`
#                      executable, release, on the HIP device);
#                      "upstream": Candle's test files only.
#   HIP_ON_CPU_ARCHS   targets to run (default "gfx942 gfx1100").
#
# Skipped everywhere, because they are sized for GPUs (10^9 to 10^12
# thread-iterations, hours on two cores; 16 GB of device memory) or measure
# what this platform does not model (streams never overlap here):
# gpu_no_leak_over_10000_*, gpu_per_thread_streams_order_across_threads and
# the conformance test large::.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

suites=${HIP_ON_CPU_SUITES:-ci}
archs=${HIP_ON_CPU_ARCHS:-gfx942 gfx1100}
root=$PWD/target/hip-on-cpu
GPU_SKIPS=(--skip gpu_no_leak_over_10000 --skip gpu_per_thread_streams_order_across_threads)
# The conformance tests CI runs: every op family's own test but the dtype
# and random-number sweeps and the large-tensor test (GiB-sized buffers),
# plus parts 0 and 1 of 8 of the storage-op suite (round trips,
# index_select, copies, unary ops, ...); "full" runs them all. The attention
# cases run the MFMA (gfx942) and WMMA (gfx1100) paths of attention.hip.
CI_CONFORMANCE=(conv:: conv_fallback:: errors:: fused:: graph:: index_faults:: matmul:: overflow:: pool::
    startup::a_kernel_bundle attention::flash_attn_matches attention::flash_attn_refuses)
CI_PARTS=(0/8 1/8)

cargo build -q --release -p hip-on-cpu
cargo test -q -p hip-safe --test gpu --no-run
cargo test -q -p hip-safe --test stress --no-run
cargo test -q -p hip-safe --test multi_gpu --no-run
cargo test -q -p candle-hip --test conformance --no-run
target/release/hip-on-cpu-layout "$root/rocm" >/dev/null
upstream=(--manifest-path examples/candle-app/Cargo.toml -p upstream-tests --test upstream)
if [[ $suites == full ]]; then
    cargo test -q --release -p candle-hip --test conformance --no-run
fi
if [[ $suites != ci ]]; then
    cargo run -q -p rocm-tools -- candle-patch >/dev/null
    cargo test -q --release "${upstream[@]}" --no-run
fi

timed() {
    local what=$1 t0=$SECONDS
    shift
    "$@"
    printf 'hip-on-cpu %s: %s in %d s\n' "$arch" "$what" $((SECONDS - t0))
}

for arch in $archs; do
    export ROCM_PATH=$root/rocm HIP_ON_CPU_ARCH=$arch HIP_SAFE_CACHE_DIR=$root/cache/$arch
    if [[ $suites != upstream ]]; then
        timed "hip-safe GPU tests" cargo test -q -p hip-safe --test gpu -- --include-ignored "${GPU_SKIPS[@]}"
        HIP_SAFE_STRESS_OPS=$([[ $suites == full ]] && echo 10000 || echo 2000) \
            timed "hip-safe stress test" cargo test -q -p hip-safe --test stress -- --include-ignored
        # Two emulated devices and the shim's CPU RCCL.
        HIP_ON_CPU_DEVICES=2 timed "hip-safe two-device tests" \
            cargo test -q -p hip-safe --test multi_gpu -- --include-ignored
    fi
    if [[ $suites == full ]]; then
        timed "conformance (full)" cargo test -q --release -p candle-hip --test conformance -- \
            --include-ignored --skip large::
    elif [[ $suites == ci ]]; then
        timed "conformance (CI subset)" cargo test -q -p candle-hip --test conformance -- --include-ignored "${CI_CONFORMANCE[@]}"
        for part in "${CI_PARTS[@]}"; do
            CONFORMANCE_PART=$part timed "storage-op suite part $part" cargo test -q -p candle-hip --test conformance -- \
                --include-ignored --exact conformance_with_the_cpu_backend
        done
    fi
    if [[ $suites != ci ]]; then
        # One test at a time: the extension checks measure the device's
        # memory pool, which tests running beside them would move.
        CANDLE_APP_DEVICE=hip timed "Candle's test files" \
            cargo test -q --release "${upstream[@]}" -- --include-ignored --test-threads=1
    fi
done
