#!/usr/bin/env bash
# The ROCm sandbox: a GPU-less Debian unstable chroot (debootstrap, minbase)
# holding the real ROCm 6.4 HIP runtime and hipRTC with what hipRTC needs to
# compile for AMD architectures (comgr, device libraries). Host-built test
# binaries run in it unchanged (unstable's glibc is newer than the host's).
#
# usage: build/sandbox.sh create | exec <cmd> [args...] | reachable | remove | info
#   create     build the chroot in build/.sandbox (reused when already ready)
#   exec       run <cmd> inside it, with the repository bind-mounted at its own
#              path and the working directory kept when it lies in the repository
#   reachable  exit 0 when the package archive answers (used by .ci/run)
#   remove     delete the chroot
#   info       print the installed ROCm package versions
#
# The archive address is read from this machine's own apt sources (or taken
# from ROCM_SANDBOX_MIRROR when set); none is written here. Mounts are made in a private mount namespace (unshare), so
# they disappear with the command and never leak into the host.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SANDBOX=${ROCM_SANDBOX_DIR:-$REPO/build/.sandbox}
ROOT=$SANDBOX/root
READY=$SANDBOX/ready
SUITE=unstable
# The HIP runtime, hipRTC and its compile-time builtins; comgr comes with the
# runtime, the matching device library package is added in `create`.
PACKAGES=(libamdhip64-6 libhiprtc6 libhiprtc-builtins6)

log() { printf 'sandbox: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ROCM_SANDBOX_MIRROR, or the first Debian archive URI (not the security
# archive) of the machine's own apt sources, deb822 or one-line format.
archive_uri() {
    local uri=${ROCM_SANDBOX_MIRROR:-}
    [[ -n $uri ]] || uri=$(
        {
            cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^[[:space:]]*URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p'
            cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
                sed -n 's/^[[:space:]]*deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\).*/\2/p'
        } | grep -i debian | grep -vi security | head -n1
    ) || true
    [[ -n $uri ]] || die "no Debian archive in /etc/apt/sources.list(.d)"
    printf '%s\n' "${uri%/}"
}

# Whether the archive serves the suite's Release file within 20 seconds.
reachable() {
    local tmp uri
    uri=$(archive_uri)
    tmp=$(mktemp)
    if /usr/lib/apt/apt-helper -o Acquire::http::Timeout=20 -o Acquire::Retries=1 \
        download-file "$uri/dists/$SUITE/Release" "$tmp" >/dev/null 2>&1; then
        rm -f "$tmp"
        return 0
    fi
    rm -f "$tmp"
    return 1
}

# Fails when something is still mounted below the chroot (never delete then).
check_no_mounts() {
    if grep -q " $ROOT/" /proc/self/mounts 2>/dev/null; then
        die "something is mounted below $ROOT; unmount it first"
    fi
}

# Runs "$@" inside the chroot in a private mount namespace with /proc, /sys,
# /dev and the repository (and an outside cargo target directory) mounted.
in_chroot() {
    local cwd=$PWD
    [[ $cwd == "$REPO" || $cwd == "$REPO"/* ]] || cwd=$REPO
    local extra=${CARGO_TARGET_DIR:-}
    [[ -n $extra && $extra != "$REPO"/* ]] || extra=
    unshare --mount --propagation private -- bash -euo pipefail -c '
        root=$1 repo=$2 cwd=$3 extra=$4; shift 4
        mount -t proc proc "$root/proc"
        mount --rbind /sys "$root/sys"
        mount --rbind /dev "$root/dev"
        for dir in "$repo" $extra; do
            mkdir -p "$root$dir"
            mount --bind "$dir" "$root$dir"
        done
        exec chroot "$root" /usr/bin/env -C "$cwd" "$@"
    ' sandbox "$ROOT" "$REPO" "$cwd" "$extra" "$@"
}

create() {
    if [[ -f $READY ]]; then
        log "reusing $ROOT ($(tr '\n' ' ' <"$READY"))"
        return 0
    fi
    command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
    local uri start
    uri=$(archive_uri)
    start=$SECONDS
    check_no_mounts
    rm -rf "$ROOT"
    mkdir -p "$SANDBOX"
    log "debootstrap --variant=minbase $SUITE into $ROOT"
    unshare --mount --propagation private -- \
        debootstrap --variant=minbase "$SUITE" "$ROOT" "$uri" >"$SANDBOX/debootstrap.log" 2>&1 ||
        { tail -n 30 "$SANDBOX/debootstrap.log" >&2; die "debootstrap failed (log: $SANDBOX/debootstrap.log)"; }
    log "debootstrap took $((SECONDS - start)) s"
    cat >"$ROOT/etc/apt/apt.conf.d/99sandbox" <<'EOF'
Acquire::Check-Valid-Until "false";
APT::Install-Recommends "false";
APT::Install-Suggests "false";
EOF
    in_chroot apt-get -q update >/dev/null
    # comgr links one LLVM major; the device libraries must be built for it.
    local llvm
    llvm=$(in_chroot apt-cache depends libamd-comgr3 | sed -n 's/.*Depends: libllvm\([0-9]\+\).*/\1/p' | head -n1)
    [[ -n $llvm ]] || die "cannot tell which LLVM libamd-comgr3 uses"
    local all=("${PACKAGES[@]}" "rocm-device-libs-$llvm")
    log "installing ${all[*]}"
    DEBIAN_FRONTEND=noninteractive in_chroot apt-get -q -y install "${all[@]}" >"$SANDBOX/install.log" 2>&1 ||
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
    start_ns=$(date +%s%N)
    status=0
    in_chroot "$@" || status=$?
    log "exec $1 finished in $(((($(date +%s%N) - start_ns)) / 1000000)) ms (exit $status)"
    exit "$status"
    ;;
reachable) reachable ;;
remove)
    check_no_mounts
    rm -rf "$ROOT" "$READY"
    log "removed $ROOT"
    ;;
info)
    [[ -f $READY ]] || die "no sandbox at $ROOT"
    cat "$READY"
    ;;
*)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
