//! The emulated devices: their target (chosen by `HIP_ON_CPU_ARCH`), how
//! many there are (`HIP_ON_CPU_DEVICES`) and which are visible
//! (`HIP_VISIBLE_DEVICES`), their attributes, properties, versions, the
//! per-thread current device and peer access.
//!
//! Devices are identified by their visible ordinal (0..count): everything
//! that belongs to a device (buffers, streams, events, memory pools) records
//! that ordinal. The physical index behind it only shows in the device's
//! name and PCI bus id, so that tests can tell the devices apart.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::ffi::{c_int, c_uint};
use std::sync::{Mutex, OnceLock};

use hip_sys::{hipDeviceAttribute_t as H, hipDeviceProp_tR0000, hipDeviceProp_tR0600, hipError_t};

use super::properties::{legacy_properties, properties_from};
use super::status::HipResult;
use crate::ffi::{non_null, write_out};

/// Environment variable choosing the emulated AMD target.
pub const ARCH_VAR: &str = "HIP_ON_CPU_ARCH";

/// Environment variable setting the device memory size in MiB.
pub const MEMORY_VAR: &str = "HIP_ON_CPU_MEMORY_MIB";

/// Environment variable setting how many identical devices are emulated.
pub const DEVICES_VAR: &str = "HIP_ON_CPU_DEVICES";

/// ROCm's variable listing the physical devices a process sees.
pub const VISIBLE_VAR: &str = "HIP_VISIBLE_DEVICES";

/// The most devices [`DEVICES_VAR`] may ask for.
const MAX_DEVICES: usize = 64;

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

/// The emulated devices (all of one target).
#[derive(Debug)]
pub(crate) struct Target {
    /// Bare architecture name, e.g. `gfx942`.
    pub(crate) arch: &'static str,
    /// Lanes per wave.
    pub(crate) wave: u32,
    compute_units: i64,
    features: &'static str,
    /// Device memory in bytes, per device.
    pub(crate) memory: u64,
    /// The physical index of each visible device, by visible ordinal (never
    /// empty).
    visible: Vec<usize>,
}

impl Target {
    /// The number of visible devices.
    pub(crate) fn count(&self) -> usize {
        self.visible.len()
    }
}

/// The physical devices `spec` (the value of [`VISIBLE_VAR`], `None` when
/// unset) makes visible among `physical` ones, in visible-ordinal order.
///
/// As ROCm and CUDA read it: comma-separated physical indices, renumbered
/// from 0 in the listed order; the first entry that is not a valid index
/// (not a number, out of range, or listed before) hides itself and every
/// entry after it. An empty value hides every device.
fn visible_devices(spec: Option<&str>, physical: usize) -> Vec<usize> {
    let Some(spec) = spec else {
        return (0..physical).collect();
    };
    let mut visible = Vec::new();
    for entry in spec.split(',') {
        match entry.trim().parse::<usize>() {
            Ok(index) if index < physical && !visible.contains(&index) => visible.push(index),
            _ => break,
        }
    }
    visible
}

/// The target named by [`ARCH_VAR`], the memory size of [`MEMORY_VAR`] and
/// the devices of [`DEVICES_VAR`] and [`VISIBLE_VAR`], read once; an error
/// message when any is invalid or no device is visible.
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
            let physical = match std::env::var(DEVICES_VAR) {
                Ok(v) => v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_DEVICES).contains(n))
                    .ok_or_else(|| {
                        format!("hip-on-cpu: {DEVICES_VAR}={v} is not 1..={MAX_DEVICES}")
                    })?,
                Err(_) => 1,
            };
            let spec = std::env::var(VISIBLE_VAR).ok();
            let visible = visible_devices(spec.as_deref(), physical);
            if visible.is_empty() {
                return Err(format!(
                    "hip-on-cpu: {VISIBLE_VAR}={} leaves none of the {physical} device(s) visible",
                    spec.unwrap_or_default()
                ));
            }
            Ok(Target {
                arch,
                wave,
                compute_units,
                features,
                memory: mib << 20,
                visible,
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

/// Checks a (visible) device ordinal: `hipErrorInvalidDevice` unless it
/// names a visible device.
pub(crate) fn check_ordinal(device_id: c_int) -> HipResult<&'static Target> {
    let t = device()?;
    if usize::try_from(device_id).is_ok_and(|d| d < t.count()) {
        Ok(t)
    } else {
        Err(hipError_t::hipErrorInvalidDevice)
    }
}

thread_local! {
    /// The calling thread's current device (HIP: device 0 until set).
    static CURRENT: Cell<c_int> = const { Cell::new(0) };
}

/// The calling thread's current device, once the platform is valid.
pub(crate) fn current() -> HipResult<c_int> {
    device()?;
    Ok(CURRENT.with(Cell::get))
}

/// The value of attribute `attr` for the device whose physical index is
/// `physical`, or `None` for one this platform does not answer.
fn attribute(t: &Target, physical: usize, attr: H) -> Option<i64> {
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
        // Distinct per device: the physical index.
        H::hipDeviceAttributePciBusId => i64::try_from(physical).unwrap_or(0),
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

/// `hipGetDeviceCount`: the visible devices, or 0 and `hipErrorNoDevice`
/// when the configuration is invalid.
pub(crate) unsafe fn hipGetDeviceCount(count: *mut c_int) -> HipResult {
    let status = device().map(|t| c_int::try_from(t.count()).unwrap_or(c_int::MAX));
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe {
        write_out(
            count,
            *status.as_ref().unwrap_or(&0),
            hipError_t::hipErrorInvalidValue,
        )
    }?;
    status.map(|_| ())
}

/// `hipGetDevice`: the calling thread's current device.
pub(crate) unsafe fn hipGetDevice(device_id: *mut c_int) -> HipResult {
    let d = current()?;
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe { write_out(device_id, d, hipError_t::hipErrorInvalidValue) }
}

/// `hipSetDevice`: makes a visible device current on the calling thread.
pub(crate) unsafe fn hipSetDevice(device_id: c_int) -> HipResult {
    check_ordinal(device_id)?;
    CURRENT.with(|c| c.set(device_id));
    Ok(())
}

/// `hipDeviceSynchronize`: work runs at the call, so there is nothing to
/// wait for (refused while any stream captures, as by HIP: see
/// `hip::graph`).
pub(crate) unsafe fn hipDeviceSynchronize() -> HipResult {
    device()?;
    super::graph::check_device_sync()
}

/// `hipDeviceGetAttribute`: one value of the attribute table.
pub(crate) unsafe fn hipDeviceGetAttribute(
    value: *mut c_int,
    attr: H,
    device_id: c_int,
) -> HipResult {
    non_null(value, hipError_t::hipErrorInvalidValue)?;
    let t = check_ordinal(device_id)?;
    let v = attribute(t, physical(t, device_id), attr).ok_or(hipError_t::hipErrorInvalidValue)?;
    let v = c_int::try_from(v).unwrap_or(c_int::MAX);
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(value, v, hipError_t::hipErrorInvalidValue) }
}

/// The physical index of a checked visible ordinal.
fn physical(t: &Target, device_id: c_int) -> usize {
    usize::try_from(device_id)
        .ok()
        .and_then(|d| t.visible.get(d).copied())
        .unwrap_or(0)
}

/// The R0600 properties of a device; the name ends with the physical index
/// (`#1`), which also is the PCI bus id.
fn properties(device_id: c_int) -> HipResult<hipDeviceProp_tR0600> {
    let t = check_ordinal(device_id)?;
    let physical = physical(t, device_id);
    let name = format!("hip-on-cpu ({}, wave {}) #{physical}", t.arch, t.wave);
    let arch_name = format!("{}{}", t.arch, t.features);
    Ok(properties_from(name.as_bytes(), &arch_name, |attr| {
        attribute(t, physical, attr).unwrap_or(0)
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

/// `(device, peer)` pairs with peer access enabled on `device`.
static PEERS: Mutex<BTreeSet<(c_int, c_int)>> = Mutex::new(BTreeSet::new());

/// `hipDeviceCanAccessPeer`: 1 between two distinct visible devices (their
/// memory is the same host memory), 0 for a device and itself.
pub(crate) unsafe fn hipDeviceCanAccessPeer(
    can_access: *mut c_int,
    device_id: c_int,
    peer_id: c_int,
) -> HipResult {
    non_null(can_access, hipError_t::hipErrorInvalidValue)?;
    check_ordinal(device_id)?;
    check_ordinal(peer_id)?;
    let can = c_int::from(device_id != peer_id);
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(can_access, can, hipError_t::hipErrorInvalidValue) }
}

/// `hipDeviceEnablePeerAccess`: lets the current device access `peer_id`'s
/// memory. Flags must be 0; the peer must be another visible device;
/// enabling a pair twice is `hipErrorPeerAccessAlreadyEnabled`, as in HIP.
/// Copies work without it (all memory is host memory): it is bookkeeping
/// only, so that misuse is reported as on a GPU.
pub(crate) unsafe fn hipDeviceEnablePeerAccess(peer_id: c_int, flags: c_uint) -> HipResult {
    if flags != 0 {
        return Err(hipError_t::hipErrorInvalidValue);
    }
    let device_id = current()?;
    check_ordinal(peer_id)?;
    if peer_id == device_id {
        return Err(hipError_t::hipErrorInvalidDevice);
    }
    let mut peers = PEERS.lock().unwrap_or_else(|e| e.into_inner());
    if peers.insert((device_id, peer_id)) {
        Ok(())
    } else {
        Err(hipError_t::hipErrorPeerAccessAlreadyEnabled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_devices_follow_rocm() {
        assert_eq!(visible_devices(None, 3), [0, 1, 2]);
        assert_eq!(visible_devices(Some("1"), 2), [1]);
        assert_eq!(visible_devices(Some("2, 0"), 3), [2, 0]);
        // An invalid entry hides itself and the rest.
        assert_eq!(visible_devices(Some("1,7,0"), 2), [1]);
        assert_eq!(visible_devices(Some("0,x,1"), 2), [0]);
        assert_eq!(visible_devices(Some("1,1,0"), 2), [1]);
        assert_eq!(visible_devices(Some("-1,0"), 2), Vec::<usize>::new());
        assert_eq!(visible_devices(Some(""), 2), Vec::<usize>::new());
    }

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
        let vars = [ARCH_VAR, MEMORY_VAR, DEVICES_VAR, VISIBLE_VAR];
        if vars.iter().all(|v| std::env::var_os(v).is_none()) {
            let t = target().unwrap();
            assert_eq!((t.arch, t.wave, t.memory), ("gfx942", 64, 8 << 30));
            assert_eq!(t.count(), 1);
            let p = properties(0).unwrap();
            assert_eq!(p.warpSize, 64);
            assert_eq!(
                properties(1).unwrap_err(),
                hipError_t::hipErrorInvalidDevice
            );
        }
    }
}
