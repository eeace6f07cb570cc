#!/usr/bin/env bash
# Packages the published crates (`cargo package`, no verification build),
# lists what each .crate holds, then unpacks them into a scratch workspace
# whose [patch.crates-io] points at the unpacked copies and runs
# `cargo check --offline` on it: the .crate files alone, without this
# repository, must build together. Nothing is downloaded (the dependencies
# come from cargo's local cache, filled by the workspace build before).
#
# usage: build/package-check.sh
#   CARGO_TARGET_DIR is honoured; the scratch workspace is
#   <target>/package-check (deleted and rebuilt at every run).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
# In publishing order: every crate depends only on crates before it.
CRATES=(rocm-hip-sys rocblas-sys miopen-sys rccl-sys hip-safe candle-hip-kernels candle-hip)
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
case $TARGET in /*) ;; *) TARGET=$REPO/$TARGET ;; esac
SCRATCH=$TARGET/package-check

args=()
for crate in "${CRATES[@]}"; do args+=(-p "$crate"); done
# --allow-dirty: the check is about the include lists, not about git state.
cargo package --offline --no-verify --allow-dirty "${args[@]}" 2>&1 |
    grep -v '^warning: ignoring \(test\|example\|bench\) ' || true

rm -rf "$SCRATCH"
mkdir -p "$SCRATCH"
members=() patches=()
for crate in "${CRATES[@]}"; do
    version=$(cargo pkgid --offline -p "$crate" | sed 's/.*[#@]//')
    file=$TARGET/package/$crate-$version.crate
    [[ -f $file ]] || { echo "package-check: $file missing" >&2; exit 1; }
    tar -xzf "$file" -C "$SCRATCH"
    printf '%-30s %3d files %7d bytes: %s\n' "$(basename "$file")" \
        "$(tar -tzf "$file" | wc -l)" "$(stat -c %s "$file")" \
        "$(tar -tzf "$file" | cut -d/ -f2- | grep -v '^\(\.cargo_vcs_info\.json\|Cargo\.toml\.orig\)$' |
            sed 's|^src/.*\.rs$|src/*.rs|; s|^src/.*\.hip$|src/*.hip|; s|^examples/.*|examples/*|' |
            sort -u | tr '\n' ' ')"
    members+=("\"$crate-$version\"")
    patches+=("$crate = { path = \"$crate-$version\" }")
done

{
    echo '[workspace]'
    echo 'resolver = "3"'
    echo "members = [$(IFS=,; echo "${members[*]}")]"
    echo
    echo '[patch.crates-io]'
    printf '%s\n' "${patches[@]}"
} >"$SCRATCH/Cargo.toml"
# The versions this repository tests with; unused entries are pruned.
cp Cargo.lock "$SCRATCH/Cargo.lock"

# Shares the target directory: dependencies checked by the workspace build
# (clippy) are reused.
export CARGO_TARGET_DIR=$TARGET
cd "$SCRATCH"
cargo check --offline --workspace --all-targets
echo "package-check: the ${#CRATES[@]} .crate files build together offline ($SCRATCH)"
