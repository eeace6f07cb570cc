#!/usr/bin/env bash
# The ROCm sandbox: a GPU-less Debian unstable chroot (debootstrap, minbase)
# holding the real ROCm 6.4 HIP runtime and hipRTC with what hipRTC needs to
# compile for AMD architectures (comgr, device libraries). Host-built test
# binaries run in it unchanged (unstable's glibc is newer than the host's).
# With ROCM_SANDBOX_ROCM=7 it holds ROCm 7.2 from Debian experimental instead
# (over unstable), in build/.sandbox-rocm7 unless ROCM_SANDBOX7_DIR says.
#
# usage: build/sandbox.sh create | exec <cmd> [args...] | reachable | remove | info
#   create     build the chroot in build/.sandbox (or .sandbox-rocm7; reused when
#              already ready)
#   exec       run <cmd> inside it, with the repository bind-mounted at its own
#              path and the working directory kept when it lies in the repository
#   reachable  exit 0 when the package archive answers (used by .ci/run)
#   remove     delete the chroot
#   info       print the installed ROCm package versions
#
# The archive address is read from this machine's own apt sources (or taken
# from ROCM_SANDBOX_MIRROR when set); none is written here. Mounts are made in
# a private mount namespace (unshare), so they disappear with the command and
# never leak into the host. The chroot helpers are in build/chroot-lib.sh.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SUITE=unstable
# The HIP runtime, hipRTC and its compile-time builtins; comgr comes with the
# runtime, the matching device library package is added in `create`. ROCm 7
# comes from experimental, which apt prefers only when told (-t).
case ${ROCM_SANDBOX_ROCM:-6} in
6)
    PACKAGES=(libamdhip64-6 libhiprtc6 libhiprtc-builtins6)
    EXTRA_SUITE=()
    SANDBOX=${ROCM_SANDBOX_DIR:-$REPO/build/.sandbox}
    ;;
7)
    PACKAGES=(libamdhip64-7 libhiprtc7 libhiprtc-builtins7)
    EXTRA_SUITE=(experimental)
    SANDBOX=${ROCM_SANDBOX7_DIR:-$REPO/build/.sandbox-rocm7}
    ;;
*)
    printf 'sandbox: error: ROCM_SANDBOX_ROCM must be 6 or 7, not %s\n' "$ROCM_SANDBOX_ROCM" >&2
    exit 2
    ;;
esac
ROOT=$SANDBOX/root
READY=$SANDBOX/ready

LOG_TAG=sandbox
# shellcheck source=build/chroot-lib.sh
source "$REPO/build/chroot-lib.sh"

# Fails when the sandbox at $SANDBOX holds another ROCm than the one asked for.
check_release() {
    [[ ! -f $READY ]] || grep -q "^${PACKAGES[0]}=" "$READY" ||
        die "$SANDBOX holds $(grep '^libamdhip64' "$READY" || echo 'another ROCm'), not ${PACKAGES[0]}"
}

create() {
    check_release
    if [[ -f $READY ]]; then
        log "reusing $ROOT ($(tr '\n' ' ' <"$READY"))"
        return 0
    fi
    local start=$SECONDS
    bootstrap "$SANDBOX"
    local release=()
    if [[ ${#EXTRA_SUITE[@]} -gt 0 ]]; then
        printf 'deb %s %s main\n' "$(archive_uri)" "${EXTRA_SUITE[0]}" >>"$ROOT/etc/apt/sources.list"
        in_chroot apt-get -q update >/dev/null
        release=(-t "${EXTRA_SUITE[0]}")
    fi
    # comgr links one LLVM major; the device libraries must be built for it.
    local llvm
    llvm=$(in_chroot apt-cache "${release[@]}" depends libamd-comgr3 | sed -n 's/.*Depends: libllvm\([0-9]\+\).*/\1/p' | head -n1)
    [[ -n $llvm ]] || die "cannot tell which LLVM libamd-comgr3 uses"
    local all=("${PACKAGES[@]}" "rocm-device-libs-$llvm")
    log "installing ${all[*]}"
    DEBIAN_FRONTEND=noninteractive in_chroot apt-get -q -y "${release[@]}" install "${all[@]}" >"$SANDBOX/install.log" 2>&1 ||
        { tail -n 30 "$SANDBOX/install.log" >&2; die "package install failed (log: $SANDBOX/install.log)"; }
    in_chroot apt-get clean
    in_chroot dpkg-query -W -f '${Package}=${Version}\n' "${all[@]}" libamd-comgr3 libhsa-runtime64-1 >"$READY"
    log "created in $((SECONDS - start)) s: $(tr '\n' ' ' <"$READY")"
}

cmd=${1:-}
[[ -n $cmd ]] && shift
case $cmd in
create) create ;;
exec)
    [[ $# -gt 0 ]] || die "usage: $0 exec <cmd> [args...]"
    [[ -f $READY ]] || die "no sandbox at $ROOT; run: $0 create"
    check_release
    start_ns=$(date +%s%N)
    status=0
    in_chroot "$@" || status=$?
    log "exec $1 finished in $(((($(date +%s%N) - start_ns)) / 1000000)) ms (exit $status)"
    exit "$status"
    ;;
reachable)
    reachable
    # ROCm 7 also needs experimental's packages.
    [[ ${#EXTRA_SUITE[@]} -eq 0 ]] || SUITE=${EXTRA_SUITE[0]} reachable
    ;;
remove)
    check_no_mounts
    rm -rf "$ROOT" "$READY"
    log "removed $ROOT"
    ;;
info)
    [[ -f $READY ]] || die "no sandbox at $ROOT"
    check_release
    cat "$READY"
    ;;
*)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
