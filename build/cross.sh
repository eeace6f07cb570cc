#!/usr/bin/env bash
# The cross-compilation check, as the workers that use these crates build:
# the published library crates are compiled for aarch64-unknown-linux-gnu and
# the hip-info example of hip-safe is linked for it, on a machine with no ROCm
# at all. It runs in a Debian unstable chroot (debootstrap, minbase) next to
# the ROCm sandbox, with Debian's rustc and cargo, the arm64 standard library
# through multiarch (libstd-rust-dev:arm64) and gcc-aarch64-linux-gnu as the
# linker; no rustup target download is needed. The crates are fetched for
# aarch64 by the host's cargo (`cargo fetch --target`) into the host's cargo
# registry, which the chroot mounts: cargo runs there with --offline --locked.
#
# usage: build/cross.sh create | build | reachable | remove | info
#   create     build the chroot in build/.cross (reused when already ready)
#   build      create it if needed, check that it holds nothing of ROCm, then
#              build the crates and hip-info for aarch64 (target folder
#              build/.cross/target), show the binary's ELF header and the
#              libraries it needs, and run it once under qemu-aarch64
#   reachable  exit 0 when the package archive answers
#   remove     delete the chroot and its target folder
#   info       print the installed toolchain versions
#
# The archive address is read from this machine's own apt sources (or taken
# from ROCM_SANDBOX_MIRROR when set); none is written here. The chroot
# helpers are in build/chroot-lib.sh. Run as root. CROSS_SANDBOX_DIR moves
# the chroot elsewhere.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CROSS=${CROSS_SANDBOX_DIR:-$REPO/build/.cross}
ROOT=$CROSS/root
READY=$CROSS/ready
TARGET_DIR=$CROSS/target
SUITE=unstable
TARGET=aarch64-unknown-linux-gnu
# The library crates a worker depends on, in publishing order.
CRATES=(rocm-hip-sys rocblas-sys miopen-sys rccl-sys hip-safe candle-hip-kernels candle-hip)
# qemu-user runs the aarch64 hip-info once, emulated.
PACKAGES=(rustc cargo libstd-rust-dev:arm64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)

LOG_TAG=cross
CHROOT_MOUNTS=()
[[ $TARGET_DIR == "$REPO"/* ]] || CHROOT_MOUNTS=("$TARGET_DIR")
# shellcheck source=build/chroot-lib.sh
source "$REPO/build/chroot-lib.sh"

create() {
    if [[ -f $READY ]]; then
        log "reusing $ROOT ($(tr '\n' ' ' <"$READY"))"
        return 0
    fi
    local start=$SECONDS
    bootstrap "$CROSS"
    in_chroot dpkg --add-architecture arm64
    in_chroot apt-get -q update >/dev/null
    log "installing ${PACKAGES[*]}"
    DEBIAN_FRONTEND=noninteractive in_chroot apt-get -q -y install "${PACKAGES[@]}" >"$CROSS/install.log" 2>&1 ||
        { tail -n 30 "$CROSS/install.log" >&2; die "package install failed (log: $CROSS/install.log)"; }
    in_chroot apt-get clean
    in_chroot dpkg-query -W -f '${Package}:${Architecture}=${Version}\n' \
        rustc cargo libstd-rust-dev:arm64 gcc-aarch64-linux-gnu >"$READY"
    log "created in $((SECONDS - start)) s: $(tr '\n' ' ' <"$READY")"
}

# Fails when anything of ROCm is in the chroot: a package, /opt/rocm*, or a
# HIP runtime the loader knows.
check_no_rocm() {
    local found
    found=$(in_chroot sh -c '
        dpkg-query -W -f "\${Package}\n" | grep -iE "rocm|amdhip|hiprtc|rocblas|miopen|comgr|hsa-runtime" || true
        ls -d /opt/rocm* 2>/dev/null || true
        ldconfig -p | grep -iE "amdhip|hiprtc|rocblas|miopen" || true
    ')
    [[ -z $found ]] || die "the chroot holds ROCm: $found"
    log "no ROCm in the chroot (no package, no /opt/rocm*, no HIP library known to the loader)"
}

# The host's cargo home: its registry (index and downloaded crates) is
# mounted into the chroot.
HOST_CARGO_HOME=${CARGO_HOME:-$HOME/.cargo}

# Runs Debian's cargo inside the chroot, offline and locked, with a clean
# environment (nothing of the host's rustup toolchain leaks in), the host's
# registry and the cross linker.
cross_cargo() {
    local env=(PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
        CARGO_HOME="$HOST_CARGO_HOME"
        CARGO_TARGET_DIR="$TARGET_DIR"
        CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
        CARGO_TERM_COLOR=never)
    (cd "$REPO" && CHROOT_MOUNTS+=("$HOST_CARGO_HOME/registry") &&
        in_chroot env -i "${env[@]}" cargo "$@" --offline --locked)
}

build() {
    create
    check_no_rocm
    mkdir -p "$TARGET_DIR"
    in_chroot sh -c 'rustc --version; cargo --version; aarch64-linux-gnu-gcc --version | head -n1'
    local args=() crate start=$SECONDS
    for crate in "${CRATES[@]}"; do args+=(-p "$crate"); done
    log "host: cargo fetch --locked --target $TARGET"
    command -v cargo >/dev/null || die "the host needs cargo to fetch the crates"
    (cd "$REPO" && cargo fetch --locked --target "$TARGET")
    mkdir -p "$HOST_CARGO_HOME/registry"
    # Release, as workers ship; also, candle-core's gemm-f16 does not build
    # for aarch64 at opt-level 0 (its FP16 inline assembly: "instruction
    # requires: fullfp16", an upstream gemm issue).
    # One invocation, so that features unify once (hip-info is hip-safe's).
    log "cargo build --release --target $TARGET ${args[*]} --lib --example hip-info"
    cross_cargo build --release --target "$TARGET" "${args[@]}" --lib --example hip-info
    local bin=$TARGET_DIR/$TARGET/release/examples/hip-info
    [[ -x $bin ]] || die "$bin was not built"
    log "$bin:"
    in_chroot aarch64-linux-gnu-readelf -h "$bin" | grep -E 'Class|Machine|Type'
    in_chroot aarch64-linux-gnu-readelf -d "$bin" | grep NEEDED
    if in_chroot aarch64-linux-gnu-readelf -d "$bin" | grep -iE 'NEEDED.*(amdhip|hiprtc|rocblas|miopen)'; then
        die "hip-info links a ROCm library"
    fi
    log "built ${#CRATES[@]} crates and hip-info for $TARGET in $((SECONDS - start)) s"
    # No ROCm here: hip-info must say why in one line and exit 0.
    log "qemu-aarch64 hip-info (emulated, no ROCm):"
    in_chroot qemu-aarch64 -L /usr/aarch64-linux-gnu "$bin"
}

cmd=${1:-}
[[ -n $cmd ]] && shift
case $cmd in
create) create ;;
build) build ;;
reachable) reachable ;;
remove)
    check_no_mounts
    rm -rf "$ROOT" "$READY" "$TARGET_DIR"
    log "removed $ROOT"
    ;;
info)
    [[ -f $READY ]] || die "no chroot at $ROOT"
    cat "$READY"
    ;;
*)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
