# shellcheck shell=bash
# Shared by build/sandbox.sh and build/cross.sh (sourced, not run): a GPU-less
# Debian chroot made with debootstrap (minbase) from this machine's own apt
# sources, and a way to run commands in it.
#
# The sourcing script sets:
#   REPO     the repository root (bind-mounted at its own path)
#   ROOT     the chroot folder
#   SUITE    the Debian suite (unstable)
#   LOG_TAG  the prefix of log lines
# and may set the array CHROOT_MOUNTS of further host folders to bind-mount
# at their own path.
#
# The archive address is read from this machine's apt sources (or taken from
# ROCM_SANDBOX_MIRROR when set); none is written in this repository. Mounts
# are made in a private mount namespace (unshare), so they disappear with the
# command and never leak into the host.

log() { printf '%s: %s\n' "$LOG_TAG" "$*" >&2; }
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
# /dev, the repository, an outside cargo target directory and CHROOT_MOUNTS
# mounted; the working directory is kept when it lies in the repository.
in_chroot() {
    local cwd=$PWD
    [[ $cwd == "$REPO" || $cwd == "$REPO"/* ]] || cwd=$REPO
    local dirs=("$REPO") extra=${CARGO_TARGET_DIR:-}
    if [[ -n $extra && $extra != "$REPO"/* ]]; then
        dirs+=("$extra")
    fi
    dirs+=(${CHROOT_MOUNTS[@]+"${CHROOT_MOUNTS[@]}"})
    unshare --mount --propagation private -- bash -euo pipefail -c '
        root=$1 cwd=$2; shift 2
        mount -t proc proc "$root/proc"
        mount --rbind /sys "$root/sys"
        mount --rbind /dev "$root/dev"
        while [[ $1 != -- ]]; do
            mkdir -p "$root$1"
            mount --bind "$1" "$root$1"
            shift
        done
        shift
        exec chroot "$root" /usr/bin/env -C "$cwd" "$@"
    ' chroot "$ROOT" "$cwd" "${dirs[@]}" -- "$@"
}

# debootstrap --variant=minbase $SUITE into $ROOT (log in $1/debootstrap.log),
# then apt settings for an archive whose Release files may look expired to
# this machine's clock, and `apt-get update`.
bootstrap() {
    local logdir=$1 uri start=$SECONDS
    command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
    uri=$(archive_uri)
    check_no_mounts
    rm -rf "$ROOT"
    mkdir -p "$logdir"
    log "debootstrap --variant=minbase $SUITE into $ROOT"
    unshare --mount --propagation private -- \
        debootstrap --variant=minbase "$SUITE" "$ROOT" "$uri" >"$logdir/debootstrap.log" 2>&1 ||
        { tail -n 30 "$logdir/debootstrap.log" >&2; die "debootstrap failed (log: $logdir/debootstrap.log)"; }
    log "debootstrap took $((SECONDS - start)) s"
    cat >"$ROOT/etc/apt/apt.conf.d/99sandbox" <<'EOF'
Acquire::Check-Valid-Until "false";
APT::Install-Recommends "false";
APT::Install-Suggests "false";
EOF
    in_chroot apt-get -q update >/dev/null
}
