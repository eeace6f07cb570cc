//! Device, pool and pinned host memory; copies and fills.
//!
//! Copies with an explicit `hipMemcpyKind` use the CUDA copy of that
//! direction, so the driver validates the device-side pointer (a bogus device
//! pointer is an error, not a host read); `hipMemcpyDefault` uses unified
//! addressing. The synchronous forms run on the null stream and wait for it,
//! so they have returned only once the copy or fill is complete.

use std::ffi::{c_int, c_uint, c_ushort, c_void};

use cudarc::driver::sys::CUmemPool_attribute as CuPoolAttr;
use cudarc::driver::sys::{self as cu_sys, CUdeviceptr, CUstream};
use hip_sys::{
    hipDeviceptr_t, hipError_t, hipMemAccessDesc, hipMemAccessFlags, hipMemLocationType,
    hipMemPool_t, hipMemPoolAttr, hipMemcpyKind, hipStream_t,
};

use super::context::{cu_device, cuda_ordinal, ensure_current};
use super::error::{HipResult, cu};
use crate::ffi::{non_null, write_out};

const INVALID: hipError_t = hipError_t::hipErrorInvalidValue;

/// The CUDA stream behind a HIP stream handle: the same pointer, including
/// the special values null (legacy default stream) and 2 (per-thread stream).
pub(crate) fn cu_stream(stream: hipStream_t) -> CUstream {
    stream.cast()
}

/// A device address as the driver API spells it.
fn dptr<T>(ptr: *const T) -> CUdeviceptr {
    ptr as usize as CUdeviceptr
}

/// Waits for the null stream (the synchronous forms' completion).
fn wait_null_stream() -> HipResult {
    // SAFETY: the null stream is always valid while a context is current.
    cu(unsafe { cu_sys::cuStreamSynchronize(std::ptr::null_mut()) })
}

/// The copy directions HIP names; anything else is invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    HostToHost,
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
    Unified,
}

impl Direction {
    fn of(kind: hipMemcpyKind) -> HipResult<Self> {
        match kind {
            hipMemcpyKind::hipMemcpyHostToHost => Ok(Self::HostToHost),
            hipMemcpyKind::hipMemcpyHostToDevice => Ok(Self::HostToDevice),
            hipMemcpyKind::hipMemcpyDeviceToHost => Ok(Self::DeviceToHost),
            hipMemcpyKind::hipMemcpyDeviceToDevice | hipMemcpyKind::hipMemcpyDeviceToDeviceNoCU => {
                Ok(Self::DeviceToDevice)
            }
            hipMemcpyKind::hipMemcpyDefault => Ok(Self::Unified),
            _ => Err(hipError_t::hipErrorInvalidMemcpyDirection),
        }
    }
}

/// Enqueues a copy of `bytes` on `stream`.
///
/// # Safety
/// Both ranges must be valid for `bytes` in the memory spaces `kind` names.
unsafe fn copy(
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: hipMemcpyKind,
    stream: CUstream,
) -> HipResult {
    let direction = Direction::of(kind)?;
    if bytes == 0 {
        return Ok(());
    }
    non_null(dst, INVALID)?;
    non_null(src, INVALID)?;
    ensure_current()?;
    // SAFETY: the caller guarantees both ranges; the driver validates the
    // device-side addresses of the explicit directions.
    cu(unsafe {
        match direction {
            Direction::HostToDevice => cu_sys::cuMemcpyHtoDAsync_v2(dptr(dst), src, bytes, stream),
            Direction::DeviceToHost => cu_sys::cuMemcpyDtoHAsync_v2(dst, dptr(src), bytes, stream),
            Direction::DeviceToDevice => {
                cu_sys::cuMemcpyDtoDAsync_v2(dptr(dst), dptr(src), bytes, stream)
            }
            Direction::HostToHost | Direction::Unified => {
                cu_sys::cuMemcpyAsync(dptr(dst), dptr(src), bytes, stream)
            }
        }
    })
}

/// A fill pattern of 1, 2 or 4 bytes repeated `count` times.
#[derive(Clone, Copy)]
enum Fill {
    D8(u8),
    D16(u16),
    D32(u32),
}

/// Enqueues a fill of `count` elements on `stream`.
///
/// # Safety
/// `dst` must be device memory valid for `count` elements of the pattern.
unsafe fn fill(dst: *mut c_void, pattern: Fill, count: usize, stream: CUstream) -> HipResult {
    if count == 0 {
        return Ok(());
    }
    non_null(dst, INVALID)?;
    ensure_current()?;
    // SAFETY: the caller guarantees the range; the driver checks alignment.
    cu(unsafe {
        match pattern {
            Fill::D8(v) => cu_sys::cuMemsetD8Async(dptr(dst), v, count, stream),
            Fill::D16(v) => cu_sys::cuMemsetD16Async(dptr(dst), v, count, stream),
            Fill::D32(v) => cu_sys::cuMemsetD32Async(dptr(dst), v, count, stream),
        }
    })
}

/// `hipMalloc`: device memory; size 0 gives a null pointer and success.
pub(crate) unsafe fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> HipResult {
    non_null(ptr, INVALID)?;
    let mut address: CUdeviceptr = 0;
    if size > 0 {
        ensure_current()?;
        // SAFETY: `address` is a valid out-pointer.
        cu(unsafe { cu_sys::cuMemAlloc_v2(&mut address, size) })?;
    }
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(ptr, address as usize as *mut c_void, INVALID) }
}

/// `hipFree`: null is a no-op.
pub(crate) unsafe fn hipFree(ptr: *mut c_void) -> HipResult {
    if ptr.is_null() {
        return Ok(());
    }
    ensure_current()?;
    // SAFETY: the caller passes a pointer from hipMalloc/hipMallocAsync.
    cu(unsafe { cu_sys::cuMemFree_v2(dptr(ptr)) })
}

/// `hipMallocAsync`: stream-ordered allocation from the default pool.
pub(crate) unsafe fn hipMallocAsync(
    ptr: *mut *mut c_void,
    size: usize,
    stream: hipStream_t,
) -> HipResult {
    non_null(ptr, INVALID)?;
    let mut address: CUdeviceptr = 0;
    if size > 0 {
        ensure_current()?;
        // SAFETY: `address` is a valid out-pointer; the stream is the caller's.
        cu(unsafe { cu_sys::cuMemAllocAsync(&mut address, size, cu_stream(stream)) })?;
    }
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(ptr, address as usize as *mut c_void, INVALID) }
}

/// `hipFreeAsync`: stream-ordered free; null is a no-op.
pub(crate) unsafe fn hipFreeAsync(ptr: *mut c_void, stream: hipStream_t) -> HipResult {
    if ptr.is_null() {
        return Ok(());
    }
    ensure_current()?;
    // SAFETY: the caller passes an allocation and a valid stream.
    cu(unsafe { cu_sys::cuMemFreeAsync(dptr(ptr), cu_stream(stream)) })
}

/// `hipDeviceGetDefaultMemPool`: the CUDA default pool of the device.
pub(crate) unsafe fn hipDeviceGetDefaultMemPool(
    mem_pool: *mut hipMemPool_t,
    device: c_int,
) -> HipResult {
    non_null(mem_pool, INVALID)?;
    let device = cu_device(device)?;
    let mut pool = std::ptr::null_mut();
    // SAFETY: `pool` is a valid out-pointer and `device` a valid handle.
    cu(unsafe { cu_sys::cuDeviceGetDefaultMemPool(&mut pool, device) })?;
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(mem_pool, pool.cast(), INVALID) }
}

/// `hipMemPoolTrimTo`: releases pool memory above `min_bytes_to_hold`.
pub(crate) unsafe fn hipMemPoolTrimTo(
    mem_pool: hipMemPool_t,
    min_bytes_to_hold: usize,
) -> HipResult {
    non_null(mem_pool, INVALID)?;
    ensure_current()?;
    // SAFETY: the caller passes a pool from hipDeviceGetDefaultMemPool.
    cu(unsafe { cu_sys::cuMemPoolTrimTo(mem_pool.cast(), min_bytes_to_hold) })
}

/// The CUDA pool attribute of the same meaning (the numbering of the two
/// enums agrees, but every value is mapped explicitly).
fn cuda_pool_attribute(attr: hipMemPoolAttr) -> HipResult<CuPoolAttr> {
    Ok(match attr {
        hipMemPoolAttr::hipMemPoolReuseFollowEventDependencies => {
            CuPoolAttr::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES
        }
        hipMemPoolAttr::hipMemPoolReuseAllowOpportunistic => {
            CuPoolAttr::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC
        }
        hipMemPoolAttr::hipMemPoolReuseAllowInternalDependencies => {
            CuPoolAttr::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES
        }
        hipMemPoolAttr::hipMemPoolAttrReleaseThreshold => {
            CuPoolAttr::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
        }
        hipMemPoolAttr::hipMemPoolAttrReservedMemCurrent => {
            CuPoolAttr::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT
        }
        hipMemPoolAttr::hipMemPoolAttrReservedMemHigh => {
            CuPoolAttr::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH
        }
        hipMemPoolAttr::hipMemPoolAttrUsedMemCurrent => {
            CuPoolAttr::CU_MEMPOOL_ATTR_USED_MEM_CURRENT
        }
        hipMemPoolAttr::hipMemPoolAttrUsedMemHigh => CuPoolAttr::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
        _ => return Err(INVALID),
    })
}

/// `cuMemPoolSetAttribute` or `cuMemPoolGetAttribute`.
type CuPoolAttrFn = unsafe fn(cu_sys::CUmemoryPool, CuPoolAttr, *mut c_void) -> cu_sys::CUresult;

/// Checks the arguments of a pool-attribute call, maps the attribute and
/// calls `cuda_fn` with the pool, the CUDA attribute and `value`.
///
/// # Safety
/// `mem_pool` comes from hipDeviceGetDefaultMemPool and `value` points to
/// the attribute's type (`int` or `u64`; CUDA uses the same ones), readable
/// and writable.
unsafe fn pool_attribute(
    mem_pool: hipMemPool_t,
    attr: hipMemPoolAttr,
    value: *mut c_void,
    cuda_fn: CuPoolAttrFn,
) -> HipResult {
    non_null(mem_pool, INVALID)?;
    non_null(value, INVALID)?;
    let attr = cuda_pool_attribute(attr)?;
    ensure_current()?;
    // SAFETY: guaranteed by the caller (see above).
    cu(unsafe { cuda_fn(mem_pool.cast(), attr, value) })
}

/// `hipMemPoolSetAttribute`: reads an `int` or a `u64` from `value`.
pub(crate) unsafe fn hipMemPoolSetAttribute(
    mem_pool: hipMemPool_t,
    attr: hipMemPoolAttr,
    value: *mut c_void,
) -> HipResult {
    // SAFETY: the caller's contract is pool_attribute's.
    unsafe { pool_attribute(mem_pool, attr, value, cu_sys::cuMemPoolSetAttribute) }
}

/// `hipMemPoolGetAttribute`: writes an `int` or a `u64` to `value`.
pub(crate) unsafe fn hipMemPoolGetAttribute(
    mem_pool: hipMemPool_t,
    attr: hipMemPoolAttr,
    value: *mut c_void,
) -> HipResult {
    // SAFETY: the caller's contract is pool_attribute's.
    unsafe { pool_attribute(mem_pool, attr, value, cu_sys::cuMemPoolGetAttribute) }
}

/// `hipMemPoolSetAccess`: CUDA's descriptors for HIP's (device locations
/// only, their ordinals translated; the access flags have CUDA's values).
pub(crate) unsafe fn hipMemPoolSetAccess(
    mem_pool: hipMemPool_t,
    desc_list: *const hipMemAccessDesc,
    count: usize,
) -> HipResult {
    non_null(mem_pool, INVALID)?;
    if count > 0 {
        non_null(desc_list, INVALID)?;
    }
    let descs = if count == 0 {
        &[][..]
    } else {
        // SAFETY: the caller passes `count` descriptors.
        unsafe { std::slice::from_raw_parts(desc_list, count) }
    };
    let cuda = descs
        .iter()
        .map(|d| {
            if d.location.type_ != hipMemLocationType::hipMemLocationTypeDevice {
                return Err(INVALID);
            }
            let flags = match d.flags {
                hipMemAccessFlags::hipMemAccessFlagsProtNone => {
                    cu_sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE
                }
                hipMemAccessFlags::hipMemAccessFlagsProtRead => {
                    cu_sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READ
                }
                hipMemAccessFlags::hipMemAccessFlagsProtReadWrite => {
                    cu_sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                }
                _ => return Err(INVALID),
            };
            Ok(cu_sys::CUmemAccessDesc {
                location: cu_sys::CUmemLocation {
                    type_: cu_sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                    id: cuda_ordinal(d.location.id)?,
                },
                flags,
            })
        })
        .collect::<HipResult<Vec<_>>>()?;
    ensure_current()?;
    // SAFETY: a pool from hipDeviceGetDefaultMemPool and `count` descriptors.
    cu(unsafe { cu_sys::cuMemPoolSetAccess(mem_pool.cast(), cuda.as_ptr(), cuda.len()) })
}

/// `hipHostMallocPortable`, `...Mapped`, `...WriteCombined`.
const HOST_PORTABLE: c_uint = 0x1;
const HOST_MAPPED: c_uint = 0x2;
const HOST_WRITE_COMBINED: c_uint = 0x4;
/// AMD-only placement flags (`NumaUser`, `Coherent`, `NonCoherent`): accepted
/// and ignored, CUDA pinned memory is always coherent.
const HOST_NUMA_USER: c_uint = 0x2000_0000;
const HOST_COHERENT: c_uint = 0x4000_0000;
const HOST_NON_COHERENT: c_uint = 0x8000_0000;

/// CUDA host-allocation flags for HIP's: pinned memory is always portable
/// and mapped (as HIP's is on AMD), write-combined on request.
fn host_alloc_flags(flags: c_uint) -> HipResult<c_uint> {
    let known = HOST_PORTABLE
        | HOST_MAPPED
        | HOST_WRITE_COMBINED
        | HOST_NUMA_USER
        | HOST_COHERENT
        | HOST_NON_COHERENT;
    let both_coherences = HOST_COHERENT | HOST_NON_COHERENT;
    if flags & !known != 0 || flags & both_coherences == both_coherences {
        return Err(INVALID);
    }
    let mut cuda = cu_sys::CU_MEMHOSTALLOC_PORTABLE | cu_sys::CU_MEMHOSTALLOC_DEVICEMAP;
    if flags & HOST_WRITE_COMBINED != 0 {
        cuda |= cu_sys::CU_MEMHOSTALLOC_WRITECOMBINED;
    }
    Ok(cuda)
}

/// `hipHostMalloc`: pinned host memory.
pub(crate) unsafe fn hipHostMalloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> HipResult {
    non_null(ptr, INVALID)?;
    let cuda_flags = host_alloc_flags(flags)?;
    let mut host = std::ptr::null_mut();
    if size > 0 {
        ensure_current()?;
        // SAFETY: `host` is a valid out-pointer.
        cu(unsafe { cu_sys::cuMemHostAlloc(&mut host, size, cuda_flags) })?;
    }
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(ptr, host, INVALID) }
}

/// `hipHostFree`: null is a no-op.
pub(crate) unsafe fn hipHostFree(ptr: *mut c_void) -> HipResult {
    if ptr.is_null() {
        return Ok(());
    }
    ensure_current()?;
    // SAFETY: the caller passes a pointer from hipHostMalloc.
    cu(unsafe { cu_sys::cuMemFreeHost(ptr) })
}

/// `hipMemcpy`: copies and waits for completion.
pub(crate) unsafe fn hipMemcpy(
    dst: *mut c_void,
    src: *const c_void,
    size_bytes: usize,
    kind: hipMemcpyKind,
) -> HipResult {
    // SAFETY: forwarded contract.
    unsafe { copy(dst, src, size_bytes, kind, std::ptr::null_mut()) }?;
    if size_bytes > 0 {
        wait_null_stream()
    } else {
        Ok(())
    }
}

/// `hipMemcpyAsync`: enqueues a copy on `stream`.
pub(crate) unsafe fn hipMemcpyAsync(
    dst: *mut c_void,
    src: *const c_void,
    size_bytes: usize,
    kind: hipMemcpyKind,
    stream: hipStream_t,
) -> HipResult {
    // SAFETY: forwarded contract.
    unsafe { copy(dst, src, size_bytes, kind, cu_stream(stream)) }
}

/// `hipMemset`: fills bytes with the low byte of `value` and waits.
pub(crate) unsafe fn hipMemset(dst: *mut c_void, value: c_int, size_bytes: usize) -> HipResult {
    // SAFETY: forwarded contract.
    unsafe { fill(dst, Fill::D8(value as u8), size_bytes, std::ptr::null_mut()) }?;
    if size_bytes > 0 {
        wait_null_stream()
    } else {
        Ok(())
    }
}

/// `hipMemsetAsync`: enqueues a byte fill on `stream`.
pub(crate) unsafe fn hipMemsetAsync(
    dst: *mut c_void,
    value: c_int,
    size_bytes: usize,
    stream: hipStream_t,
) -> HipResult {
    // SAFETY: forwarded contract.
    unsafe { fill(dst, Fill::D8(value as u8), size_bytes, cu_stream(stream)) }
}

/// `hipMemsetD16Async`: enqueues a 16-bit fill of `count` elements.
pub(crate) unsafe fn hipMemsetD16Async(
    dest: hipDeviceptr_t,
    value: c_ushort,
    count: usize,
    stream: hipStream_t,
) -> HipResult {
    // SAFETY: forwarded contract.
    unsafe { fill(dest, Fill::D16(value), count, cu_stream(stream)) }
}

/// `hipMemsetD32Async`: enqueues a 32-bit fill of `count` elements.
pub(crate) unsafe fn hipMemsetD32Async(
    dst: hipDeviceptr_t,
    value: c_int,
    count: usize,
    stream: hipStream_t,
) -> HipResult {
    let bits = u32::from_ne_bytes(value.to_ne_bytes());
    // SAFETY: forwarded contract.
    unsafe { fill(dst, Fill::D32(bits), count, cu_stream(stream)) }
}

/// `hipMemGetInfo`: free and total memory of the current device.
pub(crate) unsafe fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> HipResult {
    non_null(free, INVALID)?;
    non_null(total, INVALID)?;
    ensure_current()?;
    // SAFETY: both out-pointers are non-null and, per the caller, valid.
    cu(unsafe { cu_sys::cuMemGetInfo_v2(free, total) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_attributes_map_by_meaning_and_unknown_ones_are_invalid() {
        assert_eq!(
            cuda_pool_attribute(hipMemPoolAttr::hipMemPoolAttrReleaseThreshold),
            Ok(CuPoolAttr::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
        );
        assert_eq!(
            cuda_pool_attribute(hipMemPoolAttr::hipMemPoolAttrReservedMemCurrent),
            Ok(CuPoolAttr::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
        );
        for hip in 1..=8 {
            let cuda = cuda_pool_attribute(hipMemPoolAttr(hip)).unwrap();
            assert_eq!(cuda as u32, hip, "attribute {hip}");
        }
        assert_eq!(cuda_pool_attribute(hipMemPoolAttr(0)), Err(INVALID));
        assert_eq!(cuda_pool_attribute(hipMemPoolAttr(9)), Err(INVALID));
    }

    #[test]
    fn memcpy_kinds_follow_hip() {
        assert_eq!(
            Direction::of(hipMemcpyKind(1024)),
            Ok(Direction::DeviceToDevice)
        );
        assert_eq!(Direction::of(hipMemcpyKind(4)), Ok(Direction::Unified));
        assert_eq!(
            Direction::of(hipMemcpyKind(5)),
            Err(hipError_t::hipErrorInvalidMemcpyDirection)
        );
    }

    #[test]
    fn host_flags_are_checked() {
        let pinned = cu_sys::CU_MEMHOSTALLOC_PORTABLE | cu_sys::CU_MEMHOSTALLOC_DEVICEMAP;
        assert_eq!(host_alloc_flags(0), Ok(pinned));
        assert_eq!(
            host_alloc_flags(HOST_WRITE_COMBINED | HOST_COHERENT),
            Ok(pinned | cu_sys::CU_MEMHOSTALLOC_WRITECOMBINED)
        );
        assert_eq!(host_alloc_flags(0x10), Err(INVALID));
        assert_eq!(
            host_alloc_flags(HOST_COHERENT | HOST_NON_COHERENT),
            Err(INVALID)
        );
    }

    #[test]
    fn null_arguments_are_invalid_values() {
        // SAFETY: null pointers are rejected before any use.
        unsafe {
            assert_eq!(hipMalloc(std::ptr::null_mut(), 16), Err(INVALID));
            assert_eq!(
                hipMemGetInfo(std::ptr::null_mut(), std::ptr::null_mut()),
                Err(INVALID)
            );
            assert_eq!(
                hipMemcpy(std::ptr::null_mut(), std::ptr::null(), 4, hipMemcpyKind(1)),
                Err(INVALID)
            );
            assert_eq!(hipFree(std::ptr::null_mut()), Ok(()));
        }
    }
}
