//! `hipDeviceProp_t` for the test platforms' shims: the R0600 layout filled
//! from a device's attribute values, and the legacy R0000 layout copied from
//! it.

use std::ffi::{c_char, c_int};

use hip_sys::{hipDeviceAttribute_t as H, hipDeviceProp_tR0000, hipDeviceProp_tR0600};

/// Copies `text` into a fixed C char array, truncating and NUL-terminating.
pub(crate) fn fill_chars(dst: &mut [c_char], text: &[u8]) {
    let n = text.len().min(dst.len().saturating_sub(1));
    for (d, s) in dst.iter_mut().zip(&text[..n]) {
        *d = *s as c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}

/// The R0600 properties of a device named `name` whose attributes `a`
/// answers (0 for one it does not know), filled field by field, with
/// `arch_name` as `gcnArchName`.
pub(crate) fn properties_from(
    name: &[u8],
    arch_name: &str,
    a: impl Fn(H) -> i64,
) -> hipDeviceProp_tR0600 {
    let mut p = hipDeviceProp_tR0600::default();
    fill_chars(&mut p.name, name);
    p.totalGlobalMem =
        usize::try_from(a(H::hipDeviceAttributeTotalGlobalMem)).unwrap_or(usize::MAX);

    macro_rules! fill {
        ($($field:ident = $attr:ident),* $(,)?) => {
            $(p.$field = a(H::$attr) as _;)*
        };
    }
    fill!(
        sharedMemPerBlock = hipDeviceAttributeMaxSharedMemoryPerBlock,
        regsPerBlock = hipDeviceAttributeMaxRegistersPerBlock,
        warpSize = hipDeviceAttributeWarpSize,
        memPitch = hipDeviceAttributeMaxPitch,
        maxThreadsPerBlock = hipDeviceAttributeMaxThreadsPerBlock,
        clockRate = hipDeviceAttributeClockRate,
        totalConstMem = hipDeviceAttributeTotalConstantMemory,
        major = hipDeviceAttributeComputeCapabilityMajor,
        minor = hipDeviceAttributeComputeCapabilityMinor,
        textureAlignment = hipDeviceAttributeTextureAlignment,
        texturePitchAlignment = hipDeviceAttributeTexturePitchAlignment,
        deviceOverlap = hipDeviceAttributeDeviceOverlap,
        multiProcessorCount = hipDeviceAttributeMultiprocessorCount,
        kernelExecTimeoutEnabled = hipDeviceAttributeKernelExecTimeout,
        integrated = hipDeviceAttributeIntegrated,
        canMapHostMemory = hipDeviceAttributeCanMapHostMemory,
        computeMode = hipDeviceAttributeComputeMode,
        maxTexture1D = hipDeviceAttributeMaxTexture1DWidth,
        maxTexture1DMipmap = hipDeviceAttributeMaxTexture1DMipmap,
        maxTexture1DLinear = hipDeviceAttributeMaxTexture1DLinear,
        maxTextureCubemap = hipDeviceAttributeMaxTextureCubemap,
        maxSurface1D = hipDeviceAttributeMaxSurface1D,
        surfaceAlignment = hipDeviceAttributeSurfaceAlignment,
        concurrentKernels = hipDeviceAttributeConcurrentKernels,
        ECCEnabled = hipDeviceAttributeEccEnabled,
        pciBusID = hipDeviceAttributePciBusId,
        pciDeviceID = hipDeviceAttributePciDeviceId,
        pciDomainID = hipDeviceAttributePciDomainID,
        tccDriver = hipDeviceAttributeTccDriver,
        asyncEngineCount = hipDeviceAttributeAsyncEngineCount,
        unifiedAddressing = hipDeviceAttributeUnifiedAddressing,
        memoryClockRate = hipDeviceAttributeMemoryClockRate,
        memoryBusWidth = hipDeviceAttributeMemoryBusWidth,
        l2CacheSize = hipDeviceAttributeL2CacheSize,
        persistingL2CacheMaxSize = hipDeviceAttributePersistingL2CacheMaxSize,
        maxThreadsPerMultiProcessor = hipDeviceAttributeMaxThreadsPerMultiProcessor,
        streamPrioritiesSupported = hipDeviceAttributeStreamPrioritiesSupported,
        globalL1CacheSupported = hipDeviceAttributeGlobalL1CacheSupported,
        localL1CacheSupported = hipDeviceAttributeLocalL1CacheSupported,
        sharedMemPerMultiprocessor = hipDeviceAttributeSharedMemPerMultiprocessor,
        regsPerMultiprocessor = hipDeviceAttributeMaxRegistersPerMultiprocessor,
        managedMemory = hipDeviceAttributeManagedMemory,
        isMultiGpuBoard = hipDeviceAttributeIsMultiGpuBoard,
        multiGpuBoardGroupID = hipDeviceAttributeMultiGpuBoardGroupID,
        hostNativeAtomicSupported = hipDeviceAttributeHostNativeAtomicSupported,
        singleToDoublePrecisionPerfRatio = hipDeviceAttributeSingleToDoublePrecisionPerfRatio,
        pageableMemoryAccess = hipDeviceAttributePageableMemoryAccess,
        concurrentManagedAccess = hipDeviceAttributeConcurrentManagedAccess,
        computePreemptionSupported = hipDeviceAttributeComputePreemptionSupported,
        canUseHostPointerForRegisteredMem = hipDeviceAttributeCanUseHostPointerForRegisteredMem,
        cooperativeLaunch = hipDeviceAttributeCooperativeLaunch,
        cooperativeMultiDeviceLaunch = hipDeviceAttributeCooperativeMultiDeviceLaunch,
        sharedMemPerBlockOptin = hipDeviceAttributeSharedMemPerBlockOptin,
        pageableMemoryAccessUsesHostPageTables =
            hipDeviceAttributePageableMemoryAccessUsesHostPageTables,
        directManagedMemAccessFromHost = hipDeviceAttributeDirectManagedMemAccessFromHost,
        maxBlocksPerMultiProcessor = hipDeviceAttributeMaxBlocksPerMultiProcessor,
        accessPolicyMaxWindowSize = hipDeviceAttributeAccessPolicyMaxWindowSize,
        reservedSharedMemPerBlock = hipDeviceAttributeReservedSharedMemPerBlock,
        hostRegisterSupported = hipDeviceAttributeHostRegisterSupported,
        memoryPoolsSupported = hipDeviceAttributeMemoryPoolsSupported,
        memoryPoolSupportedHandleTypes = hipDeviceAttributeMemoryPoolSupportedHandleTypes,
        maxSharedMemoryPerMultiProcessor = hipDeviceAttributeMaxSharedMemoryPerMultiprocessor,
        clockInstructionRate = hipDeviceAttributeClockInstructionRate,
        asicRevision = hipDeviceAttributeAsicRevision,
    );
    p.maxThreadsDim = [
        H::hipDeviceAttributeMaxBlockDimX,
        H::hipDeviceAttributeMaxBlockDimY,
        H::hipDeviceAttributeMaxBlockDimZ,
    ]
    .map(|attr| a(attr) as c_int);
    p.maxGridSize = [
        H::hipDeviceAttributeMaxGridDimX,
        H::hipDeviceAttributeMaxGridDimY,
        H::hipDeviceAttributeMaxGridDimZ,
    ]
    .map(|attr| a(attr) as c_int);
    p.maxTexture2D = [
        H::hipDeviceAttributeMaxTexture2DWidth,
        H::hipDeviceAttributeMaxTexture2DHeight,
    ]
    .map(|attr| a(attr) as c_int);
    p.maxTexture3D = [
        H::hipDeviceAttributeMaxTexture3DWidth,
        H::hipDeviceAttributeMaxTexture3DHeight,
        H::hipDeviceAttributeMaxTexture3DDepth,
    ]
    .map(|attr| a(attr) as c_int);
    fill_chars(&mut p.gcnArchName, arch_name.as_bytes());
    set_arch_flags(&mut p.arch);
    p
}

/// Every feature flag of `hipDeviceArch_t` (all hold on the NVIDIA GPUs
/// CUDA 13 supports and on the emulated AMD targets).
fn set_arch_flags(arch: &mut hip_sys::hipDeviceArch_t) {
    arch.set_hasGlobalInt32Atomics(1);
    arch.set_hasGlobalFloatAtomicExch(1);
    arch.set_hasSharedInt32Atomics(1);
    arch.set_hasSharedFloatAtomicExch(1);
    arch.set_hasFloatAtomicAdd(1);
    arch.set_hasGlobalInt64Atomics(1);
    arch.set_hasSharedInt64Atomics(1);
    arch.set_hasDoubles(1);
    arch.set_hasWarpVote(1);
    arch.set_hasWarpBallot(1);
    arch.set_hasWarpShuffle(1);
    arch.set_hasFunnelShift(1);
    arch.set_hasThreadFenceSystem(1);
    arch.set_hasSyncThreadsExt(1);
    arch.set_hasSurfaceFuncs(1);
    arch.set_has3dGrid(1);
    arch.set_hasDynamicParallelism(1);
}

/// The legacy (R0000, ROCm 5) layout, copied from the R0600 properties.
pub(crate) fn legacy_properties(new: &hipDeviceProp_tR0600) -> hipDeviceProp_tR0000 {
    let mut old = hipDeviceProp_tR0000::default();
    macro_rules! copy {
        ($($field:ident),* $(,)?) => {
            $(old.$field = new.$field;)*
        };
    }
    copy!(
        name,
        totalGlobalMem,
        sharedMemPerBlock,
        regsPerBlock,
        warpSize,
        maxThreadsPerBlock,
        maxThreadsDim,
        maxGridSize,
        clockRate,
        memoryClockRate,
        memoryBusWidth,
        totalConstMem,
        major,
        minor,
        multiProcessorCount,
        l2CacheSize,
        maxThreadsPerMultiProcessor,
        computeMode,
        clockInstructionRate,
        arch,
        concurrentKernels,
        pciDomainID,
        pciBusID,
        pciDeviceID,
        maxSharedMemoryPerMultiProcessor,
        isMultiGpuBoard,
        canMapHostMemory,
        gcnArchName,
        integrated,
        cooperativeLaunch,
        cooperativeMultiDeviceLaunch,
        maxTexture1DLinear,
        maxTexture1D,
        maxTexture2D,
        maxTexture3D,
        memPitch,
        textureAlignment,
        texturePitchAlignment,
        kernelExecTimeoutEnabled,
        ECCEnabled,
        tccDriver,
        asicRevision,
        managedMemory,
        directManagedMemAccessFromHost,
        concurrentManagedAccess,
        pageableMemoryAccess,
        pageableMemoryAccessUsesHostPageTables,
    );
    old
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_truncated_and_terminated() {
        let mut buf = [1 as c_char; 4];
        fill_chars(&mut buf, b"sm_120");
        assert_eq!(buf, [b's' as c_char, b'm' as c_char, b'_' as c_char, 0]);
    }

    #[test]
    fn fields_come_from_the_attributes() {
        let p = properties_from(b"dev", "gfx942", |attr| match attr {
            H::hipDeviceAttributeWarpSize => 64,
            H::hipDeviceAttributeMaxBlockDimY => 1024,
            H::hipDeviceAttributeTotalGlobalMem => 1 << 34,
            _ => 0,
        });
        assert_eq!(p.warpSize, 64);
        assert_eq!(p.maxThreadsDim, [0, 1024, 0]);
        assert_eq!(p.totalGlobalMem, 1 << 34);
        assert_eq!(
            p.gcnArchName[..7],
            [103, 102, 120, 57, 52, 50, 0].map(|b| b as c_char)
        );
        assert_eq!(legacy_properties(&p).warpSize, 64);
    }
}
