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
#   .stage/bin/         the hip-info and runtime-kernel examples
#   .stage/bench/       benchmark executables (bins/examples named bench* of
#                       candle-hip) and candle-hip/benches/*.py
#   .stage/unbuilt.txt  examples/benchmarks that failed to build (if any;
#                       run.sh reports them as failed steps)
#   .stage/run.sh       the runner
#
# Needs cargo, jq and strip on the build machine.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
stage="$repo/.stage"
packages="${STAGE_TEST_PACKAGES:-hip-safe candle-hip hip-on-cuda}"
# Test targets that check the real ROCm libraries without a GPU (run in the
# ROCm sandbox by .ci/run); on the GPU machine their ignored tests would fail.
excluded_targets="${STAGE_EXCLUDE_TARGETS:-sandbox}"
cd "$repo"

for tool in cargo jq strip; do
    command -v "$tool" >/dev/null || { echo "stage.sh: $tool is required" >&2; exit 1; }
done

rm -rf "$stage"
mkdir -p "$stage/tests" "$stage/bin" "$stage/bench"

# Executables cargo reports in JSON messages on stdin, as lines
# "<package>\t<target>\t<kinds>\t<path>". The package name is the one in the
# package id ("...#name@version"), else its directory ("...dir#version").
executables() {
    jq -r 'select(.reason == "compiler-artifact" and .executable != null)
           | [(.package_id | (capture("#(?<n>[^@/]+)@").n // capture("/(?<n>[^/#]+)#").n)),
              .target.name, (.target.kind | join(",")), .executable,
              (if .profile.test then "test" else "build" end)] | @tsv'
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
cargo test --release --workspace --no-run --message-format=json \
    | executables > "$stage/.tests.tsv"
while IFS=$'\t' read -r package target kinds path profile; do
    # Test harnesses only, and not those of binaries (our bins have no tests).
    [[ "$profile" == "test" && "$kinds" != "bin" ]] || continue
    [[ " $excluded_targets " != *" $target "* ]] || continue
    for wanted in $packages; do
        if [[ "$package" == "$wanted" ]]; then
            stage_exe "$path" "$stage/tests/$package--$target"
        fi
    done
done < "$stage/.tests.tsv"
rm "$stage/.tests.tsv"

echo "== examples and benchmarks"
# Example and bin targets by name, from cargo metadata: "<package>\t<kind>\t<name>".
cargo metadata --no-deps --format-version 1 \
    | jq -r '.packages[] | .name as $p | .targets[]
             | select((.kind | index("example") or index("bin"))
                      and ((.name == "hip-info" or .name == "runtime-kernel")
                           or ($p == "candle-hip" and (.name | startswith("bench")))))
             | [$p, (if (.kind | index("example")) then "example" else "bin" end), .name] | @tsv' \
    > "$stage/.targets.tsv"
while IFS=$'\t' read -r package kind name; do
    # A benchmark or example that does not build must not keep the test suite
    # from running: it is listed in unbuilt.txt and run.sh reports it as failed.
    if ! cargo build --release -p "$package" "--$kind" "$name" --message-format=json \
        > "$stage/.build.json"; then
        jq -r 'select(.reason == "compiler-message") | .message.rendered' "$stage/.build.json" >&2
        echo "stage.sh: WARNING: $package $kind $name does not build" >&2
        echo "$name" >> "$stage/unbuilt.txt"
        continue
    fi
    executables < "$stage/.build.json" | while IFS=$'\t' read -r _p target _k path _profile; do
        [[ "$target" == "$name" ]] || continue
        case "$name" in
            bench*) stage_exe "$path" "$stage/bench/$name" ;;
            *) stage_exe "$path" "$stage/bin/$name" ;;
        esac
    done
done < "$stage/.targets.tsv"
rm -f "$stage/.build.json"
rm "$stage/.targets.tsv"
shopt -s nullglob
for script in candle-hip/benches/*.py; do
    cp "$script" "$stage/bench/"
done

cp tests/hip-on-cuda/run.sh "$stage/run.sh"
chmod +x "$stage/run.sh"

echo "== staged"
(cd "$stage" && find . -type f -o -type l | sort)
size="$(du -sm "$stage" | cut -f1)"
echo "staged folder: $stage, ${size} MiB"
if (( size >= 64 )); then
    echo "stage.sh: the staged folder is over 64 MiB" >&2
    exit 1
fi
