//! Initialisation, versions, device selection, attributes and properties.
//!
//! Version choice: `hipRuntimeGetVersion` reports HIP 6.4 (the API level of
//! the headers our bindings come from, so callers take the ROCm 6 paths such
//! as `hipGetDevicePropertiesR0600`) with the CUDA driver version as the patch
//! number: CUDA 13.0 reads `6.4.13000` (60413000). `hipDriverGetVersion`
//! returns the CUDA driver's own number, as HIP on NVIDIA does.

use std::ffi::{c_char, c_int, c_uint};

use cudarc::driver::sys::{self as cu_sys, CUdevice_attribute as A};
use hip_sys::{hipDeviceAttribute_t as H, hipDeviceProp_tR0000, hipDeviceProp_tR0600, hipError_t};

use super::context::{
    cu_device, current_device, device_count, driver, ensure_current, set_current_device,
};
use super::error::{HipResult, cu};
use super::properties::{legacy_properties, properties_from};
use crate::ffi::write_out;

/// The HIP API level this shim emulates (`major * 10^7 + minor * 10^5`).
const HIP_API_VERSION: c_int = 6 * 10_000_000 + 4 * 100_000;

/// Where the value of a HIP device attribute comes from.
#[derive(Clone, Copy)]
enum Source {
    /// A CUDA device attribute with the same meaning.
    Cuda(A),
    /// `cuDeviceTotalMem` (wider than an attribute).
    TotalMemory,
    /// A fixed value: AMD-only notions with an obvious NVIDIA answer.
    Fixed(i64),
}

/// Every HIP attribute this shim answers; anything else is
/// `hipErrorInvalidValue`. Array-valued or Windows-only attributes (such as
/// `hipDeviceAttributeMaxThreadsDim`, `hipDeviceAttributeLuid`) are absent.
const ATTRIBUTES: &[(H, Source)] = &[
    (
        H::hipDeviceAttributeEccEnabled,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_ECC_ENABLED),
    ),
    (
        H::hipDeviceAttributeAccessPolicyMaxWindowSize,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE),
    ),
    (
        H::hipDeviceAttributeAsyncEngineCount,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT),
    ),
    (
        H::hipDeviceAttributeCanMapHostMemory,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY),
    ),
    (
        H::hipDeviceAttributeCanUseHostPointerForRegisteredMem,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM),
    ),
    (
        H::hipDeviceAttributeClockRate,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
    ),
    (
        H::hipDeviceAttributeComputeMode,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE),
    ),
    (
        H::hipDeviceAttributeComputePreemptionSupported,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED),
    ),
    (
        H::hipDeviceAttributeConcurrentKernels,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS),
    ),
    (
        H::hipDeviceAttributeConcurrentManagedAccess,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS),
    ),
    (
        H::hipDeviceAttributeCooperativeLaunch,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH),
    ),
    (
        H::hipDeviceAttributeCooperativeMultiDeviceLaunch,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH),
    ),
    (
        H::hipDeviceAttributeDeviceOverlap,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_GPU_OVERLAP),
    ),
    (
        H::hipDeviceAttributeDirectManagedMemAccessFromHost,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST),
    ),
    (
        H::hipDeviceAttributeGlobalL1CacheSupported,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED),
    ),
    (
        H::hipDeviceAttributeHostNativeAtomicSupported,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED),
    ),
    (
        H::hipDeviceAttributeIntegrated,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_INTEGRATED),
    ),
    (
        H::hipDeviceAttributeIsMultiGpuBoard,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD),
    ),
    (
        H::hipDeviceAttributeKernelExecTimeout,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT),
    ),
    (
        H::hipDeviceAttributeL2CacheSize,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
    ),
    (
        H::hipDeviceAttributeLocalL1CacheSupported,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED),
    ),
    (
        H::hipDeviceAttributeComputeCapabilityMajor,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
    ),
    (
        H::hipDeviceAttributeManagedMemory,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY),
    ),
    (
        H::hipDeviceAttributeMaxBlocksPerMultiProcessor,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR),
    ),
    (
        H::hipDeviceAttributeMaxBlockDimX,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X),
    ),
    (
        H::hipDeviceAttributeMaxBlockDimY,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
    ),
    (
        H::hipDeviceAttributeMaxBlockDimZ,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z),
    ),
    (
        H::hipDeviceAttributeMaxGridDimX,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X),
    ),
    (
        H::hipDeviceAttributeMaxGridDimY,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
    ),
    (
        H::hipDeviceAttributeMaxGridDimZ,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z),
    ),
    (
        H::hipDeviceAttributeMaxSurface1D,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH),
    ),
    (
        H::hipDeviceAttributeMaxTexture1DWidth,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH),
    ),
    (
        H::hipDeviceAttributeMaxTexture1DLinear,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH),
    ),
    (
        H::hipDeviceAttributeMaxTexture1DMipmap,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH),
    ),
    (
        H::hipDeviceAttributeMaxTexture2DWidth,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH),
    ),
    (
        H::hipDeviceAttributeMaxTexture2DHeight,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT),
    ),
    (
        H::hipDeviceAttributeMaxTexture3DWidth,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH),
    ),
    (
        H::hipDeviceAttributeMaxTexture3DHeight,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT),
    ),
    (
        H::hipDeviceAttributeMaxTexture3DDepth,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH),
    ),
    (
        H::hipDeviceAttributeMaxTextureCubemap,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH),
    ),
    (
        H::hipDeviceAttributeMaxThreadsPerBlock,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
    ),
    (
        H::hipDeviceAttributeMaxThreadsPerMultiProcessor,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR),
    ),
    (
        H::hipDeviceAttributeMaxPitch,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_PITCH),
    ),
    (
        H::hipDeviceAttributeMemoryBusWidth,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
    ),
    (
        H::hipDeviceAttributeMemoryClockRate,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
    ),
    (
        H::hipDeviceAttributeComputeCapabilityMinor,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    ),
    (
        H::hipDeviceAttributeMultiGpuBoardGroupID,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID),
    ),
    (
        H::hipDeviceAttributeMultiprocessorCount,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
    ),
    (
        H::hipDeviceAttributePageableMemoryAccess,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS),
    ),
    (
        H::hipDeviceAttributePageableMemoryAccessUsesHostPageTables,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES),
    ),
    (
        H::hipDeviceAttributePciBusId,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
    ),
    (
        H::hipDeviceAttributePciDeviceId,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
    ),
    (
        H::hipDeviceAttributePciDomainID,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
    ),
    (
        H::hipDeviceAttributePersistingL2CacheMaxSize,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE),
    ),
    (
        H::hipDeviceAttributeMaxRegistersPerBlock,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK),
    ),
    (
        H::hipDeviceAttributeMaxRegistersPerMultiprocessor,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR),
    ),
    (
        H::hipDeviceAttributeReservedSharedMemPerBlock,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK),
    ),
    (
        H::hipDeviceAttributeMaxSharedMemoryPerBlock,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
    ),
    (
        H::hipDeviceAttributeSharedMemPerBlockOptin,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
    ),
    (
        H::hipDeviceAttributeSharedMemPerMultiprocessor,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
    ),
    (
        H::hipDeviceAttributeSingleToDoublePrecisionPerfRatio,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO),
    ),
    (
        H::hipDeviceAttributeStreamPrioritiesSupported,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED),
    ),
    (
        H::hipDeviceAttributeSurfaceAlignment,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT),
    ),
    (
        H::hipDeviceAttributeTccDriver,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_TCC_DRIVER),
    ),
    (
        H::hipDeviceAttributeTextureAlignment,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT),
    ),
    (
        H::hipDeviceAttributeTexturePitchAlignment,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT),
    ),
    (
        H::hipDeviceAttributeTotalConstantMemory,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY),
    ),
    (H::hipDeviceAttributeTotalGlobalMem, Source::TotalMemory),
    (
        H::hipDeviceAttributeUnifiedAddressing,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING),
    ),
    (
        H::hipDeviceAttributeWarpSize,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE),
    ),
    (
        H::hipDeviceAttributeMemoryPoolsSupported,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED),
    ),
    (
        H::hipDeviceAttributeVirtualMemoryManagementSupported,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED),
    ),
    (
        H::hipDeviceAttributeHostRegisterSupported,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED),
    ),
    (
        H::hipDeviceAttributeMemoryPoolSupportedHandleTypes,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES),
    ),
    // AMD-specific attributes with an NVIDIA equivalent: the clock() counter
    // runs at the SM clock, LDS is shared memory, a CU is an SM.
    (
        H::hipDeviceAttributeClockInstructionRate,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
    ),
    (
        H::hipDeviceAttributeMaxSharedMemoryPerMultiprocessor,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
    ),
    (
        H::hipDeviceAttributePhysicalMultiProcessorCount,
        Source::Cuda(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
    ),
    (H::hipDeviceAttributeAsicRevision, Source::Fixed(0)),
    (H::hipDeviceAttributeImageSupport, Source::Fixed(1)),
    // %globaltimer ticks in nanoseconds: 1 GHz = 1_000_000 kHz.
    (H::hipDeviceAttributeWallClockRate, Source::Fixed(1_000_000)),
];

/// The value of HIP attribute `attr` for device `ordinal`.
fn attribute(ordinal: c_int, attr: H) -> HipResult<i64> {
    let device = cu_device(ordinal)?;
    let source = ATTRIBUTES
        .iter()
        .find(|(a, _)| *a == attr)
        .map(|(_, source)| *source)
        .ok_or(hipError_t::hipErrorInvalidValue)?;
    match source {
        Source::Cuda(cuda) => {
            let mut value = 0;
            // SAFETY: `value` is a valid out-pointer and `device` a valid handle.
            cu(unsafe { cu_sys::cuDeviceGetAttribute(&mut value, cuda, device) })?;
            Ok(i64::from(value))
        }
        Source::TotalMemory => {
            let mut bytes = 0;
            // SAFETY: as above.
            cu(unsafe { cu_sys::cuDeviceTotalMem_v2(&mut bytes, device) })?;
            Ok(i64::try_from(bytes).unwrap_or(i64::MAX))
        }
        Source::Fixed(value) => Ok(value),
    }
}

/// The NVIDIA architecture name reported as `gcnArchName`, e.g. `sm_90`.
pub(crate) fn arch_name(major: i64, minor: i64) -> String {
    format!("sm_{major}{minor}")
}

/// The architecture name of this thread's current device, if there is one.
pub(crate) fn current_arch_name() -> Option<String> {
    let ordinal = current_device();
    let major = attribute(ordinal, H::hipDeviceAttributeComputeCapabilityMajor).ok()?;
    let minor = attribute(ordinal, H::hipDeviceAttributeComputeCapabilityMinor).ok()?;
    Some(arch_name(major, minor))
}

/// The R0600 properties of device `ordinal` (an attribute the driver refuses
/// reads as 0).
fn properties(ordinal: c_int) -> HipResult<hipDeviceProp_tR0600> {
    let device = cu_device(ordinal)?;
    let mut name = [0 as c_char; 256];
    // SAFETY: `name` has room for 256 bytes, the length passed.
    cu(unsafe { cu_sys::cuDeviceGetName(name.as_mut_ptr(), 256, device) })?;
    let name: Vec<u8> = name
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    let a = |attr: H| attribute(ordinal, attr).unwrap_or(0);
    let major = attribute(ordinal, H::hipDeviceAttributeComputeCapabilityMajor)?;
    let minor = attribute(ordinal, H::hipDeviceAttributeComputeCapabilityMinor)?;
    Ok(properties_from(&name, &arch_name(major, minor), a))
}

/// `hipInit`: initialises the driver; `hipErrorNoDevice` without a GPU.
pub(crate) unsafe fn hipInit(flags: c_uint) -> HipResult {
    if flags != 0 {
        return Err(hipError_t::hipErrorInvalidValue);
    }
    match device_count()? {
        0 => Err(hipError_t::hipErrorNoDevice),
        _ => Ok(()),
    }
}

/// `hipDriverGetVersion`: the CUDA driver version (e.g. 13000).
pub(crate) unsafe fn hipDriverGetVersion(version: *mut c_int) -> HipResult {
    driver()?;
    let mut value = 0;
    // SAFETY: `value` is a valid out-pointer.
    cu(unsafe { cu_sys::cuDriverGetVersion(&mut value) })?;
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe { write_out(version, value, hipError_t::hipErrorInvalidValue) }
}

/// `hipRuntimeGetVersion`: HIP 6.4 with the CUDA driver version as patch.
pub(crate) unsafe fn hipRuntimeGetVersion(version: *mut c_int) -> HipResult {
    let mut cuda = 0;
    if driver().is_ok() {
        // SAFETY: `cuda` is a valid out-pointer; on failure it stays 0.
        let _ = unsafe { cu_sys::cuDriverGetVersion(&mut cuda) };
    }
    let value = HIP_API_VERSION + cuda.clamp(0, 99_999);
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe { write_out(version, value, hipError_t::hipErrorInvalidValue) }
}

/// `hipGetDeviceCount`: 0 and `hipErrorNoDevice` without a usable GPU.
pub(crate) unsafe fn hipGetDeviceCount(count: *mut c_int) -> HipResult {
    let (value, status) = match device_count() {
        Ok(0) => (0, Err(hipError_t::hipErrorNoDevice)),
        Ok(n) => (n, Ok(())),
        Err(e) => (0, Err(e)),
    };
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe { write_out(count, value, hipError_t::hipErrorInvalidValue) }?;
    status
}

/// `hipGetDevice`: this thread's current device.
pub(crate) unsafe fn hipGetDevice(device: *mut c_int) -> HipResult {
    if device_count()? == 0 {
        return Err(hipError_t::hipErrorNoDevice);
    }
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe { write_out(device, current_device(), hipError_t::hipErrorInvalidValue) }
}

/// `hipSetDevice`: changes this thread's current device.
pub(crate) unsafe fn hipSetDevice(device: c_int) -> HipResult {
    set_current_device(device)
}

/// `hipDeviceSynchronize`: waits for all work on the current device.
pub(crate) unsafe fn hipDeviceSynchronize() -> HipResult {
    ensure_current()?;
    // SAFETY: a context is current on this thread.
    cu(unsafe { cu_sys::cuCtxSynchronize() })
}

/// `hipDeviceGetAttribute`: one value from the attribute table, saturated
/// to `int`.
pub(crate) unsafe fn hipDeviceGetAttribute(value: *mut c_int, attr: H, device: c_int) -> HipResult {
    if value.is_null() {
        return Err(hipError_t::hipErrorInvalidValue);
    }
    let v = attribute(device, attr)?;
    let v = c_int::try_from(v).unwrap_or(if v < 0 { c_int::MIN } else { c_int::MAX });
    // SAFETY: checked non-null above; the caller guarantees validity.
    unsafe { write_out(value, v, hipError_t::hipErrorInvalidValue) }
}

/// `hipGetDevicePropertiesR0600`: the ROCm 6 property layout.
pub(crate) unsafe fn hipGetDevicePropertiesR0600(
    prop: *mut hipDeviceProp_tR0600,
    device: c_int,
) -> HipResult {
    crate::ffi::non_null(prop, hipError_t::hipErrorInvalidValue)?;
    let p = properties(device)?;
    // SAFETY: the caller passes a valid out-pointer (checked non-null).
    unsafe { write_out(prop, p, hipError_t::hipErrorInvalidValue) }
}

/// `hipGetDeviceProperties` as exported by the library: the legacy R0000
/// layout (the 6.x headers turn the name into `...R0600` at compile time).
pub(crate) unsafe fn hipGetDeviceProperties(
    prop: *mut hipDeviceProp_tR0000,
    device: c_int,
) -> HipResult {
    crate::ffi::non_null(prop, hipError_t::hipErrorInvalidValue)?;
    let p = legacy_properties(&properties(device)?);
    // SAFETY: the caller passes a valid out-pointer (checked non-null).
    unsafe { write_out(prop, p, hipError_t::hipErrorInvalidValue) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_table_has_no_duplicates() {
        let mut keys: Vec<u32> = ATTRIBUTES.iter().map(|(a, _)| a.0).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), ATTRIBUTES.len());
    }

    #[test]
    fn arch_names_follow_compute_capability() {
        assert_eq!(arch_name(9, 0), "sm_90");
        assert_eq!(arch_name(8, 6), "sm_86");
    }

    #[test]
    fn version_reads_as_hip_6_4() {
        let v = hip_sys::RuntimeVersion::from_raw(HIP_API_VERSION + 13000);
        assert_eq!((v.major, v.minor, v.patch), (6, 4, 13000));
        assert!(v.has_r0600_properties());
    }
}
