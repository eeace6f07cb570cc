//! The one emulated device: its target (chosen by `HIP_ON_CPU_ARCH`),
//! attributes, properties, versions and device selection.

use std::ffi::{c_int, c_uint};
use std::sync::OnceLock;

use hip_sys::{hipDeviceAttribute_t as H, hipDeviceProp_tR0000, hipDeviceProp_tR0600, hipError_t};

use super::properties::{legacy_properties, properties_from};
use super::status::HipResult;
use crate::ffi::{non_null, write_out};

/// Environment variable choosing the emulated AMD target.
pub const ARCH_VAR: &str = "HIP_ON_CPU_ARCH";

/// Environment variable setting the device memory size in MiB.
pub const MEMORY_VAR: &str = "HIP_ON_CPU_MEMORY_MIB";

/// The target emulated when [`ARCH_VAR`] is unset.
pub const DEFAULT_ARCH: &str = "gfx942";

/// Device memory when [`MEMORY_VAR`] is unset: 8 GiB.
const DEFAULT_MEMORY_MIB: u64 = 8 * 1024;

/// The HIP API level reported: 6.4, with the patch number 0.
const HIP_API_VERSION: c_int = 6 * 10_000_000 + 4 * 100_000;

/// The AMD targets this platform emulates: name, wave size, compute units
/// of the real part (reported, not used), and its feature suffix.
const TARGETS: &[(&str, u32, i64, &str)] = &[
    ("gfx908", 64, 120, ":sramecc+:xnack-"),
    ("gfx90a", 64, 104, ":sramecc+:xnack-"),
    ("gfx942", 64, 304, ":sramecc+:xnack-"),
    ("gfx1030", 32, 40, ""),
    ("gfx1100", 32, 48, ""),
    ("gfx1201", 32, 32, ""),
];

/// The emulated device.
#[derive(Debug)]
pub(crate) struct Target {
    /// Bare architecture name, e.g. `gfx942`.
    pub(crate) arch: &'static str,
    /// Lanes per wave.
    pub(crate) wave: u32,
    compute_units: i64,
    features: &'static str,
    /// Device memory in bytes.
    pub(crate) memory: u64,
}

/// The target named by [`ARCH_VAR`] and the memory size of [`MEMORY_VAR`],
/// read once; an error message when either is invalid.
pub(crate) fn target() -> Result<&'static Target, &'static str> {
    static TARGET: OnceLock<Result<Target, String>> = OnceLock::new();
    TARGET
        .get_or_init(|| {
            let name = std::env::var(ARCH_VAR).unwrap_or_else(|_| DEFAULT_ARCH.to_string());
            let &(arch, wave, compute_units, features) =
                TARGETS.iter().find(|t| t.0 == name).ok_or_else(|| {
                    let known: Vec<&str> = TARGETS.iter().map(|t| t.0).collect();
                    format!(
                        "hip-on-cpu: {ARCH_VAR}={name} is not one of {}",
                        known.join(", ")
                    )
                })?;
            let mib = match std::env::var(MEMORY_VAR) {
                Ok(v) => v
                    .parse::<u64>()
                    .ok()
                    .filter(|m| (1..=1 << 20).contains(m))
                    .ok_or_else(|| format!("hip-on-cpu: {MEMORY_VAR}={v} is not 1..=1048576"))?,
                Err(_) => DEFAULT_MEMORY_MIB,
            };
            Ok(Target {
                arch,
                wave,
                compute_units,
                features,
                memory: mib << 20,
            })
        })
        .as_ref()
        .map_err(String::as_str)
}

/// The target, or `hipErrorNoDevice` (with the reason on stderr, once).
pub(crate) fn device() -> HipResult<&'static Target> {
    target().map_err(|why| {
        static SAID: OnceLock<()> = OnceLock::new();
        SAID.get_or_init(|| eprintln!("{why}"));
        hipError_t::hipErrorNoDevice
    })
}

/// Checks a device ordinal: only device 0 exists.
fn check_ordinal(device_id: c_int) -> HipResult<&'static Target> {
    let t = device()?;
    if device_id == 0 {
        Ok(t)
    } else {
        Err(hipError_t::hipErrorInvalidDevice)
    }
}

/// The value of attribute `attr`, or `None` for one this platform does not
/// answer.
fn attribute(t: &Target, attr: H) -> Option<i64> {
    let cdna = t.wave == 64;
    Some(match attr {
        H::hipDeviceAttributeWarpSize => i64::from(t.wave),
        H::hipDeviceAttributeMaxThreadsPerBlock
        | H::hipDeviceAttributeMaxBlockDimX
        | H::hipDeviceAttributeMaxBlockDimY
        | H::hipDeviceAttributeMaxBlockDimZ => 1024,
        H::hipDeviceAttributeMaxGridDimX => i64::from(i32::MAX),
        H::hipDeviceAttributeMaxGridDimY | H::hipDeviceAttributeMaxGridDimZ => 65_535,
        H::hipDeviceAttributeMaxSharedMemoryPerBlock
        | H::hipDeviceAttributeSharedMemPerBlockOptin
        | H::hipDeviceAttributeMaxSharedMemoryPerMultiprocessor
        | H::hipDeviceAttributeSharedMemPerMultiprocessor => 65_536,
        H::hipDeviceAttributeTotalGlobalMem => i64::try_from(t.memory).unwrap_or(i64::MAX),
        H::hipDeviceAttributeTotalConstantMemory => 65_536,
        H::hipDeviceAttributeMultiprocessorCount
        | H::hipDeviceAttributePhysicalMultiProcessorCount => t.compute_units,
        H::hipDeviceAttributeMaxThreadsPerMultiProcessor => 2048,
        H::hipDeviceAttributeMaxRegistersPerBlock
        | H::hipDeviceAttributeMaxRegistersPerMultiprocessor => 65_536,
        H::hipDeviceAttributeComputeCapabilityMajor => {
            if cdna {
                9
            } else {
                t.arch[3..5].parse().unwrap_or(11)
            }
        }
        H::hipDeviceAttributeComputeCapabilityMinor => 0,
        H::hipDeviceAttributeClockRate
        | H::hipDeviceAttributeMemoryClockRate
        | H::hipDeviceAttributeClockInstructionRate => 1_000_000,
        H::hipDeviceAttributeWallClockRate => 1_000_000,
        H::hipDeviceAttributeMemoryBusWidth => 64,
        H::hipDeviceAttributeL2CacheSize => 4 << 20,
        H::hipDeviceAttributeMaxPitch => i64::from(i32::MAX),
        H::hipDeviceAttributeTextureAlignment | H::hipDeviceAttributeTexturePitchAlignment => 256,
        H::hipDeviceAttributeConcurrentKernels
        | H::hipDeviceAttributeCanMapHostMemory
        | H::hipDeviceAttributeUnifiedAddressing
        | H::hipDeviceAttributeMemoryPoolsSupported
        | H::hipDeviceAttributeManagedMemory
        | H::hipDeviceAttributeHostNativeAtomicSupported
        | H::hipDeviceAttributeCooperativeLaunch
        | H::hipDeviceAttributeIntegrated => 1,
        H::hipDeviceAttributeEccEnabled
        | H::hipDeviceAttributeKernelExecTimeout
        | H::hipDeviceAttributeComputeMode
        | H::hipDeviceAttributeAsicRevision
        | H::hipDeviceAttributePciBusId
        | H::hipDeviceAttributePciDeviceId
        | H::hipDeviceAttributePciDomainID
        | H::hipDeviceAttributeIsMultiGpuBoard => 0,
        _ => return None,
    })
}

/// `hipInit`: succeeds when the target is valid.
pub(crate) unsafe fn hipInit(flags: c_uint) -> HipResult {
    if flags != 0 {
        return Err(hipError_t::hipErrorInvalidValue);
    }
    device().map(|_| ())
}

/// `hipDriverGetVersion`: the HIP API level, as the runtime reports it.
pub(crate) unsafe fn hipDriverGetVersion(version: *mut c_int) -> HipResult {
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe { write_out(version, HIP_API_VERSION, hipError_t::hipErrorInvalidValue) }
}

/// `hipRuntimeGetVersion`: HIP 6.4.0.
pub(crate) unsafe fn hipRuntimeGetVersion(version: *mut c_int) -> HipResult {
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe { write_out(version, HIP_API_VERSION, hipError_t::hipErrorInvalidValue) }
}

/// `hipGetDeviceCount`: one device, or 0 and `hipErrorNoDevice` when the
/// target is invalid.
pub(crate) unsafe fn hipGetDeviceCount(count: *mut c_int) -> HipResult {
    let status = device().map(|_| ());
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe {
        write_out(
            count,
            c_int::from(status.is_ok()),
            hipError_t::hipErrorInvalidValue,
        )
    }?;
    status
}

/// `hipGetDevice`: always device 0.
pub(crate) unsafe fn hipGetDevice(device_id: *mut c_int) -> HipResult {
    device()?;
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe { write_out(device_id, 0, hipError_t::hipErrorInvalidValue) }
}

/// `hipSetDevice`: only device 0 exists.
pub(crate) unsafe fn hipSetDevice(device_id: c_int) -> HipResult {
    check_ordinal(device_id).map(|_| ())
}

/// `hipDeviceSynchronize`: work runs at the call, so there is nothing to
/// wait for.
pub(crate) unsafe fn hipDeviceSynchronize() -> HipResult {
    device().map(|_| ())
}

/// `hipDeviceGetAttribute`: one value of the attribute table.
pub(crate) unsafe fn hipDeviceGetAttribute(
    value: *mut c_int,
    attr: H,
    device_id: c_int,
) -> HipResult {
    non_null(value, hipError_t::hipErrorInvalidValue)?;
    let t = check_ordinal(device_id)?;
    let v = attribute(t, attr).ok_or(hipError_t::hipErrorInvalidValue)?;
    let v = c_int::try_from(v).unwrap_or(c_int::MAX);
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(value, v, hipError_t::hipErrorInvalidValue) }
}

/// The R0600 properties of the device.
fn properties(device_id: c_int) -> HipResult<hipDeviceProp_tR0600> {
    let t = check_ordinal(device_id)?;
    let name = format!("hip-on-cpu ({}, wave {})", t.arch, t.wave);
    let arch_name = format!("{}{}", t.arch, t.features);
    Ok(properties_from(name.as_bytes(), &arch_name, |attr| {
        attribute(t, attr).unwrap_or(0)
    }))
}

/// `hipGetDevicePropertiesR0600`: the ROCm 6 property layout.
pub(crate) unsafe fn hipGetDevicePropertiesR0600(
    prop: *mut hipDeviceProp_tR0600,
    device_id: c_int,
) -> HipResult {
    non_null(prop, hipError_t::hipErrorInvalidValue)?;
    let p = properties(device_id)?;
    // SAFETY: the caller passes a valid out-pointer (checked non-null).
    unsafe { write_out(prop, p, hipError_t::hipErrorInvalidValue) }
}

/// `hipGetDeviceProperties`: the legacy R0000 layout.
pub(crate) unsafe fn hipGetDeviceProperties(
    prop: *mut hipDeviceProp_tR0000,
    device_id: c_int,
) -> HipResult {
    non_null(prop, hipError_t::hipErrorInvalidValue)?;
    let p = legacy_properties(&properties(device_id)?);
    // SAFETY: the caller passes a valid out-pointer (checked non-null).
    unsafe { write_out(prop, p, hipError_t::hipErrorInvalidValue) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_have_amd_wave_sizes() {
        for (name, wave, _, _) in TARGETS {
            let expected = if name.starts_with("gfx9") { 64 } else { 32 };
            assert_eq!(*wave, expected, "{name}");
        }
    }

    #[test]
    fn default_target_is_cdna_wave64() {
        // The test process does not set the variables.
        if std::env::var_os(ARCH_VAR).is_none() && std::env::var_os(MEMORY_VAR).is_none() {
            let t = target().unwrap();
            assert_eq!((t.arch, t.wave, t.memory), ("gfx942", 64, 8 << 30));
            let p = properties(0).unwrap();
            assert_eq!(p.warpSize, 64);
            assert_eq!(
                properties(1).unwrap_err(),
                hipError_t::hipErrorInvalidDevice
            );
        }
    }
}
