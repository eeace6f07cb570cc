//! Precompiled kernel code objects: the [`CodeBundle`] the registry looks
//! in before compiling a module.
//!
//! The bundle is found, in this order: the file named by
//! [`BUNDLE_VAR`]; [`BUNDLE_FILE_NAME`] next to the running executable; the
//! bundle embedded at build time (feature `embedded-kernel-bundle`, which
//! reads the file named by the build-time variable
//! `CANDLE_HIP_KERNEL_BUNDLE_EMBED`: building still needs no ROCm, only the
//! file). An entry is used only when its unit name ([`Unit::name`]),
//! source hash (of the exact program the registry would compile),
//! architecture and wave size match; everything else falls through to the
//! disk cache and hipRTC. A bundle that cannot be read or is invalid is
//! reported once (`tracing` warning) and ignored.

use std::path::PathBuf;
use std::sync::OnceLock;

use hip_safe::{CodeBundle, Program};

use crate::kernel::Unit;

/// Environment variable naming a bundle file.
pub const BUNDLE_VAR: &str = "CANDLE_HIP_KERNEL_BUNDLE";

/// The bundle's file name next to the executable.
pub const BUNDLE_FILE_NAME: &str = "candle-hip-kernels.bundle";

/// The bundle embedded at build time.
#[cfg(feature = "embedded-kernel-bundle")]
static EMBEDDED: &[u8] = include_bytes!(env!("CANDLE_HIP_KERNEL_BUNDLE_EMBED"));

/// The process's bundle, found and validated once.
fn bundle() -> Option<&'static CodeBundle> {
    static BUNDLE: OnceLock<Option<CodeBundle>> = OnceLock::new();
    BUNDLE.get_or_init(find).as_ref()
}

/// The first bundle of the search order that exists; `None` when none
/// does or the one found is unusable (with a warning).
fn find() -> Option<CodeBundle> {
    let from_file = |path: PathBuf, why: &str| match CodeBundle::open(&path) {
        Ok(bundle) => {
            tracing::info!(target: "candle_hip::kernel", path = %path.display(), entries = bundle.len(),
                compiler = bundle.compiler(), "kernel bundle loaded ({why})");
            Some(bundle)
        }
        Err(e) => {
            tracing::warn!(target: "candle_hip::kernel", "kernel bundle ignored ({why}): {e}");
            None
        }
    };
    if let Some(path) = std::env::var_os(BUNDLE_VAR).filter(|p| !p.is_empty()) {
        return from_file(PathBuf::from(path), BUNDLE_VAR);
    }
    let beside = std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name(BUNDLE_FILE_NAME))
        .filter(|p| p.is_file());
    if let Some(path) = beside {
        return from_file(path, "next to the executable");
    }
    embedded()
}

#[cfg(feature = "embedded-kernel-bundle")]
fn embedded() -> Option<CodeBundle> {
    CodeBundle::parse(EMBEDDED)
        .inspect_err(
            |e| tracing::warn!(target: "candle_hip::kernel", "embedded kernel bundle ignored: {e}"),
        )
        .ok()
}

#[cfg(not(feature = "embedded-kernel-bundle"))]
fn embedded() -> Option<CodeBundle> {
    None
}

/// The bundle's code object of `unit` compiled as `program` for `arch`
/// with `wave_size`-lane waves, if the bundle has exactly that one.
pub(crate) fn lookup(
    unit: Unit,
    program: &Program,
    arch: &str,
    wave_size: u32,
) -> Option<&'static [u8]> {
    bundle()?.code_object(&unit.name(), program.source_hash(), arch, wave_size)
}
