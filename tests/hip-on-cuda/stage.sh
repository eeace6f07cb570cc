#!/usr/bin/env bash
# Builds (release) and stages into <repo>/.stage everything a GPU run on an
# NVIDIA machine needs, so that `.stage/run.sh <outdir>` runs the whole GPU
# suite and the benchmarks there (no Rust toolchain needed on that machine):
#
#   .stage/rocm/lib/    the hip-on-cuda shim laid out like a ROCm install
#   .stage/tests/       stripped release test executables of the packages in
#                       $STAGE_TEST_PACKAGES (default: hip-safe candle-hip
#                       hip-on-cuda), named <package>--<target>, except the
#                       targets in $STAGE_EXCLUDE_TARGETS (default: sandbox,
#                       the GPU-less ROCm checks)
#   .stage/bin/         the hip-info and runtime-kernel examples, and the
#                       two-GPU benchmark bench-comm (with its PyTorch twin)
#   .stage/bench/       benchmark executables (bins/examples named bench* of
#                       candle-hip) and candle-hip/benches/*.py
#   .stage/kernel-bench/ kernel-bench/kernel_bench.cu with the shim's headers
#                       and the kernel sources (built and run by hand there)
#   .stage/candle-app/  Candle's own tests, the MiniLM and custom-kernel demos
#                       (examples/candle-app/scripts/stage.sh; their weights stay
#                       in examples/candle-app/target/minilm, carried separately);
#                       with STAGE_CANDLE_CUDA=1 also candle-cuda-bench, Candle's
#                       own CUDA backend (tests/candle-cuda/README.md)
#   .stage/unbuilt.txt  test targets, examples and benchmarks that did not
#                       compile (if any): their errors are printed here and
#                       run.sh reports them as failed steps, so one broken
#                       target does not keep the rest of the suite from running
#   .stage/run.sh       the runner
#
# Test executables are those `cargo build --tests` produces (the same as
# `cargo test --no-run`, which has no --keep-going). Needs cargo, jq and
# strip on the build machine.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
stage="$repo/.stage"
packages="${STAGE_TEST_PACKAGES:-hip-safe candle-hip hip-on-cuda}"
excluded_targets="${STAGE_EXCLUDE_TARGETS:-sandbox}"
cd "$repo"

for tool in cargo jq strip; do
    command -v "$tool" >/dev/null || { echo "stage.sh: $tool is required" >&2; exit 1; }
done

rm -rf "$stage"
mkdir -p "$stage/tests" "$stage/bin" "$stage/bench"

# The package name in a JSON message: the one in the package id
# ("...#name@version"), else its directory ("...dir#version").
package_name='(.package_id | (capture("#(?<n>[^@/]+)@").n // capture("/(?<n>[^/#]+)#").n))'

# Executables in the cargo JSON messages of file $1, as lines
# "<package>\t<target>\t<kinds>\t<path>\t<test|build>".
executables() {
    jq -r "select(.reason == \"compiler-artifact\" and .executable != null)
           | [$package_name, .target.name, (.target.kind | join(\",\")), .executable,
              (if .profile.test then \"test\" else \"build\" end)] | @tsv" "$1"
}

# Prints the compiler errors in the cargo JSON messages of file $1 and lists
# the failed targets as lines "<package>\t<target>".
failed_targets() {
    jq -r 'select(.reason == "compiler-message" and .message.level == "error")
           | .message.rendered' "$1" >&2
    jq -r "select(.reason == \"compiler-message\" and .message.level == \"error\")
           | [$package_name, .target.name] | @tsv" "$1" | sort -u
}

# Records a step that could not be built.
unbuilt() {
    echo "stage.sh: WARNING: $1 does not build" >&2
    echo "$1" >> "$stage/unbuilt.txt"
}

# Whether package $1 is one whose tests are staged.
wanted_package() {
    [[ " $packages " == *" $1 "* ]]
}

# Copies and strips an executable.
stage_exe() {
    cp "$1" "$2"
    strip "$2"
}

echo "== shim"
cargo build --release -p hip-on-cuda --lib --bin hip-on-cuda-layout
target/release/hip-on-cuda-layout "$stage/rocm" target/release/libhip_on_cuda.so >/dev/null
strip "$stage/rocm/lib/libhip_on_cuda.so"

echo "== test executables"
json="$stage/.cargo.json"
status=0
cargo build --release --workspace --tests --keep-going --message-format=json > "$json" || status=$?
while IFS=$'\t' read -r package target kinds path profile; do
    # Test harnesses only, and not those of binaries (our bins have no tests).
    [[ "$profile" == "test" && "$kinds" != "bin" ]] || continue
    [[ " $excluded_targets " != *" $target "* ]] || continue
    wanted_package "$package" || continue
    stage_exe "$path" "$stage/tests/$package--$target"
done < <(executables "$json")
if [[ "$status" -ne 0 ]]; then
    failed="$(failed_targets "$json")"
    [[ -n "$failed" ]] || unbuilt "workspace tests (cargo exit $status)"
    while IFS=$'\t' read -r package target; do
        if [[ -n "$package" ]] && wanted_package "$package"; then
            unbuilt "$package--$target"
        fi
    done <<<"$failed"
fi

echo "== examples and benchmarks"
# Example and bin targets by name, from cargo metadata: "<package>\t<kind>\t<name>".
targets="$(cargo metadata --no-deps --format-version 1 \
    | jq -r '.packages[] | .name as $p | .targets[]
             | select((.kind | index("example") or index("bin"))
                      and ((.name == "hip-info" or .name == "runtime-kernel" or .name == "bench-comm")
                           or ($p == "candle-hip" and (.name | startswith("bench")))))
             | [$p, (if (.kind | index("example")) then "example" else "bin" end), .name] | @tsv')"
while IFS=$'\t' read -r package kind name; do
    [[ -n "$package" ]] || continue
    if ! cargo build --release -p "$package" "--$kind" "$name" --message-format=json > "$json"; then
        failed_targets "$json" >/dev/null
        unbuilt "$name"
        continue
    fi
    while IFS=$'\t' read -r _package target _kinds path _profile; do
        [[ "$target" == "$name" ]] || continue
        case "$name" in
            # Needs two GPUs: run by hand, not by run.sh's benchmark loop.
            bench-comm) stage_exe "$path" "$stage/bin/$name" ;;
            bench*) stage_exe "$path" "$stage/bench/$name" ;;
            *) stage_exe "$path" "$stage/bin/$name" ;;
        esac
    done < <(executables "$json")
done <<<"$targets"
rm -f "$json"
shopt -s nullglob
for script in candle-hip/benches/*.py; do
    cp "$script" "$stage/bench/"
done
cp hip-safe/examples/bench_comm_torch.py "$stage/bin/"
# The decode-kernel bench, built there with nvcc: its source, the shim's
# headers and the kernel sources it compiles.
mkdir -p "$stage/kernel-bench/kernels"
cp tests/hip-on-cuda/kernel-bench/kernel_bench.cu "$stage/kernel-bench/"
cp -r tests/hip-on-cuda/headers "$stage/kernel-bench/headers"
cp kernels/src/*.hip kernels/src/*.h "$stage/kernel-bench/kernels/"

echo "== candle-app (Candle's own tests and demos on HIP; STAGE_CANDLE_APP=0 skips)"
if [[ "${STAGE_CANDLE_APP:-1}" == 1 ]]; then
    examples/candle-app/scripts/stage.sh "$stage/candle-app" || unbuilt "candle-app"
fi

cp tests/hip-on-cuda/run.sh "$stage/run.sh"
chmod +x "$stage/run.sh"

echo "== staged"
(cd "$stage" && find . -type f -o -type l | sort)
if [[ -f "$stage/unbuilt.txt" ]]; then
    echo "not built (reported as failures by run.sh):"
    sed 's/^/  /' "$stage/unbuilt.txt"
fi
size="$(du -sm "$stage" | cut -f1)"
echo "staged folder: $stage, ${size} MiB"
# A GPU run carries at most 64 MiB: past that (the candle-app binaries
# alone are about 75 MiB), the folder also goes into one xz archive,
# $repo/.stage-pack/stage.tar.xz, to carry instead and unpack there with
# `tar -xJf .stage-pack/stage.tar.xz`.
if (( size >= 64 )); then
    pack="$repo/.stage-pack"
    mkdir -p "$pack"
    tar -C "$repo" -cf - .stage | xz -T0 -6 > "$pack/stage.tar.xz"
    packed="$(du -sm "$pack" | cut -f1)"
    echo "over 64 MiB: packed into $pack/stage.tar.xz, ${packed} MiB (carry .stage-pack)"
    if (( packed >= 64 )); then
        echo "stage.sh: even packed, the staged folder is over 64 MiB" >&2
        exit 1
    fi
fi
