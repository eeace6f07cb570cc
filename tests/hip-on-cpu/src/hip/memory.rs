//! Device memory is host memory, each buffer between guards:
//!
//! ```text
//! | guard page | canary ... | buffer (256-byte aligned) | canary | guard page |
//! ```
//!
//! The guard pages are inaccessible, so a kernel reading or writing far
//! past either end faults at once (the module's fault handler names the
//! kernel); the canary bytes between the buffer and the guard pages (at
//! least 256 on each side) are checked after every launch ([`check_guards`]), so a write just past either
//! end fails the launch with the kernel's name. Copies and fills that start
//! inside a buffer must end inside it (`hipErrorInvalidValue` otherwise).
//!
//! Every device buffer belongs to the device current at its allocation
//! (`hipMallocAsync`: the stream's device), and usage is counted per device
//! against the device size of `HIP_ON_CPU_MEMORY_MIB`, so `hipMemGetInfo`
//! and out-of-memory errors behave as on a GPU. Each device's default
//! memory pool keeps buffers freed with `hipFreeAsync` up to its release
//! threshold, as ROCm's does. Peer copies (`hipMemcpyPeerAsync`) check that
//! each pointer lies in a buffer of the device named for it.
//!
//! On a capturing stream the asynchronous operations are checked at the
//! call and recorded instead of run (see `hip::graph`); buffers that
//! `hipMallocAsync` allocates in a capture belong to its graph, and
//! `hipFree`/`hipFreeAsync` leave them to it.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_int, c_uint, c_ushort, c_void};
use std::sync::Mutex;

use hip_sys::{
    hipDeviceptr_t, hipError_t, hipMemAccessDesc, hipMemLocationType, hipMemPool_t, hipMemPoolAttr,
    hipMemcpyKind, hipStream_t,
};

use super::device::{check_ordinal, current, device};
use super::graph::{check_sync_copy, check_unsafe_call, record, record_alloc, record_free};
use super::status::HipResult;
use super::stream::stream_device;
use crate::ffi::{non_null, write_out};

const INVALID: hipError_t = hipError_t::hipErrorInvalidValue;
const PAGE: usize = 4096;
/// Buffer alignment, and the least canary before a buffer.
const ALIGN: usize = 256;
/// The canary byte.
const CANARY: u8 = 0xA5;
/// A page of canary bytes to compare against.
static CANARY_PAGE: [u8; PAGE] = [CANARY; PAGE];

/// One mapping holding a buffer.
struct Allocation {
    /// Start of the mapping (the front guard page).
    base: usize,
    /// Length of the mapping.
    map_len: usize,
    /// Bytes asked for.
    size: usize,
    /// Bytes counted against the device (0 for host allocations).
    counted: usize,
    /// The owning device; `None` for host allocations.
    device: Option<c_int>,
    /// Allocated in a stream capture: owned by the graph, released only by
    /// [`release_graph`].
    graph: bool,
}

impl Allocation {
    /// The canary ranges `(start, len)`: before and after the buffer.
    fn canaries(&self, ptr: usize) -> [(usize, usize); 2] {
        let front = self.base + PAGE;
        let end = self.base + self.map_len - PAGE;
        [
            (front, ptr - front),
            (ptr + self.size, end - ptr - self.size),
        ]
    }
}

/// Every live buffer by its address, and the bytes in use on each device.
struct Heap {
    buffers: BTreeMap<usize, Allocation>,
    used: BTreeMap<c_int, usize>,
}

impl Heap {
    /// Bytes in use on `device`.
    fn used(&self, device: c_int) -> usize {
        self.used.get(&device).copied().unwrap_or(0)
    }

    /// The buffer that holds all of `[ptr, ptr + len)`, if one does.
    fn holding(&self, ptr: usize, len: usize) -> Option<&Allocation> {
        let (&start, a) = self.buffers.range(..=ptr).next_back()?;
        let end = ptr.checked_add(len)?;
        (ptr < start + a.size.max(1) && end <= start + a.size).then_some(a)
    }
}

static HEAP: Mutex<Heap> = Mutex::new(Heap {
    buffers: BTreeMap::new(),
    used: BTreeMap::new(),
});

fn heap() -> std::sync::MutexGuard<'static, Heap> {
    HEAP.lock().unwrap_or_else(|e| e.into_inner())
}

/// Maps a guarded buffer of `size` bytes, owned by `owner` and counted
/// against its memory (`None`: a host buffer, not counted).
fn allocate(size: usize, owner: Option<c_int>) -> HipResult<*mut c_void> {
    allocate_as(size, owner, false)
}

/// A buffer of `size` (> 0) bytes of `device` for a graph (`hipMallocAsync`
/// in a capture); only [`release_graph`] releases it.
pub(crate) fn allocate_for_graph(size: usize, device: c_int) -> HipResult<usize> {
    allocate_as(size, Some(device), true).map(|p| p as usize)
}

/// Releases a buffer of [`allocate_for_graph`] (when its graph is gone).
pub(crate) fn release_graph(ptr: usize) {
    if let Some(a) = heap().buffers.get_mut(&ptr) {
        a.graph = false;
    }
    let _ = release(ptr as *mut c_void);
}

/// [`allocate`], the buffer marked as a graph's when `graph` is set.
fn allocate_as(size: usize, owner: Option<c_int>, graph: bool) -> HipResult<*mut c_void> {
    let limit = usize::try_from(device()?.memory).unwrap_or(usize::MAX);
    let body = size
        .max(1)
        .checked_next_multiple_of(ALIGN)
        .ok_or(hipError_t::hipErrorOutOfMemory)?;
    // The buffer, then at least ALIGN canary bytes; ALIGN more before it.
    let data = body + ALIGN;
    let map_len = (data + ALIGN)
        .checked_next_multiple_of(PAGE)
        .and_then(|n| n.checked_add(2 * PAGE))
        .ok_or(hipError_t::hipErrorOutOfMemory)?;
    let counted = if owner.is_some() { body } else { 0 };
    let mut heap = heap();
    if let Some(d) = owner
        && heap.used(d).checked_add(counted).is_none_or(|u| u > limit)
    {
        return Err(hipError_t::hipErrorOutOfMemory);
    }
    // SAFETY: an anonymous private mapping; no existing memory is touched.
    let base = unsafe { libc_mmap(map_len) }.ok_or(hipError_t::hipErrorOutOfMemory)?;
    let ptr = base + map_len - PAGE - data;
    let a = Allocation {
        base,
        map_len,
        size,
        counted,
        device: owner,
        graph,
    };
    for (start, len) in a.canaries(ptr) {
        // SAFETY: inside the accessible part of the fresh mapping.
        unsafe { std::ptr::write_bytes(start as *mut u8, CANARY, len) };
    }
    if let Some(d) = owner {
        *heap.used.entry(d).or_default() += counted;
    }
    heap.buffers.insert(ptr, a);
    Ok(ptr as *mut c_void)
}

/// Unmaps the buffer at `ptr` (null is a no-op); a graph's buffer stays
/// (its graph releases it).
fn release(ptr: *mut c_void) -> HipResult {
    if ptr.is_null() {
        return Ok(());
    }
    let mut heap = heap();
    match heap.buffers.get(&(ptr as usize)) {
        None => return Err(INVALID),
        Some(a) if a.graph => return Ok(()),
        Some(_) => {}
    }
    let a = heap.buffers.remove(&(ptr as usize)).ok_or(INVALID)?;
    if let Some(used) = a.device.and_then(|d| heap.used.get_mut(&d)) {
        *used -= a.counted;
    }
    // SAFETY: the mapping was made by `allocate` and is no longer listed.
    unsafe { libc_munmap(a.base, a.map_len) };
    Ok(())
}

/// Fails when `[ptr, ptr + len)` starts inside a buffer and ends past it.
pub(crate) fn check_range(ptr: usize, len: usize) -> HipResult {
    let heap = heap();
    if let Some((&start, a)) = heap.buffers.range(..=ptr).next_back() {
        let inside = ptr < start + a.size.max(1);
        if inside && ptr.checked_add(len).is_none_or(|end| end > start + a.size) {
            return Err(INVALID);
        }
    }
    Ok(())
}

/// The device whose buffer holds all of `[ptr, ptr + len)`; `None` when no
/// device buffer does (host buffers included).
pub(crate) fn device_holding(ptr: usize, len: usize) -> Option<c_int> {
    heap().holding(ptr, len).and_then(|a| a.device)
}

/// Checks every buffer's canaries; on damage, restores them and describes
/// the first damaged buffer.
pub(crate) fn check_guards() -> Result<(), String> {
    let heap = heap();
    let mut report = None;
    for (&ptr, a) in &heap.buffers {
        for (side, (start, len)) in ["before", "after"].into_iter().zip(a.canaries(ptr)) {
            // SAFETY: the canary range lies inside the accessible mapping.
            let bytes = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) };
            // Compared a page at a time (memcmp), the common case being intact.
            let intact = bytes.chunks(PAGE).all(|c| c == &CANARY_PAGE[..c.len()]);
            if let Some(at) = (!intact)
                .then(|| bytes.iter().position(|b| *b != CANARY))
                .flatten()
            {
                let distance = if side == "before" { len - at } else { at + 1 };
                report.get_or_insert(format!(
                    "wrote {distance} byte(s) {side} the {}-byte buffer at {ptr:#x}",
                    a.size
                ));
                bytes.fill(CANARY);
            }
        }
    }
    report.map_or(Ok(()), Err)
}

/// `mmap` of `len` bytes, read-write except the first and last page.
///
/// # Safety
/// Creates a new mapping; `len` must be a multiple of the page size > 2 pages.
unsafe fn libc_mmap(len: usize) -> Option<usize> {
    use super::os::{MAP_PRIVATE_ANON_NORESERVE, PROT_NONE, PROT_RW, mmap, mprotect};
    // SAFETY: a fresh anonymous mapping at an address of the kernel's choice.
    let base = unsafe {
        mmap(
            std::ptr::null_mut(),
            len,
            PROT_RW,
            MAP_PRIVATE_ANON_NORESERVE,
            -1,
            0,
        )
    };
    if base as isize == -1 {
        return None;
    }
    // SAFETY: both pages belong to the mapping just made.
    unsafe {
        mprotect(base, PAGE, PROT_NONE);
        mprotect(base.cast::<u8>().add(len - PAGE).cast(), PAGE, PROT_NONE);
    }
    Some(base as usize)
}

/// `munmap`.
///
/// # Safety
/// `[base, base + len)` must be a mapping made by [`libc_mmap`].
unsafe fn libc_munmap(base: usize, len: usize) {
    // SAFETY: per the contract.
    unsafe { super::os::munmap(base as *mut c_void, len) };
}

/// `hipMemGetInfo`: the current device's size minus its buffers in use.
pub(crate) unsafe fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> HipResult {
    let limit = usize::try_from(device()?.memory).unwrap_or(usize::MAX);
    let used = heap().used(current()?);
    // SAFETY: the caller passes valid or null out-pointers.
    unsafe {
        write_out(free, limit.saturating_sub(used), INVALID)?;
        write_out(total, limit, INVALID)
    }
}

/// `hipMalloc`: a guarded buffer of the current device (size 0 gives null,
/// as HIP does). Refused during some captures (see `hip::graph`).
pub(crate) unsafe fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> HipResult {
    check_unsafe_call()?;
    non_null(ptr, INVALID)?;
    let p = if size == 0 {
        std::ptr::null_mut()
    } else {
        allocate(size, Some(current()?))?
    };
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(ptr, p, INVALID) }
}

/// `hipFree` (a graph's buffer stays with its graph). Refused during some
/// captures (see `hip::graph`).
pub(crate) unsafe fn hipFree(ptr: *mut c_void) -> HipResult {
    check_unsafe_call()?;
    release(ptr)
}

/// A device's default memory pool: buffers freed with `hipFreeAsync` stay
/// reserved (for reuse by an allocation of the same size) while the
/// reserve stays within the release threshold, as a ROCm pool keeps them.
struct Pool {
    /// Freed buffers kept for reuse: `(address, bytes)`.
    kept: Vec<(usize, usize)>,
    /// Bytes of live pool allocations.
    used: u64,
    /// Attributes set with `hipMemPoolSetAttribute`.
    attributes: HashMap<u32, u64>,
}

/// Every device's default pool, made on first use.
static POOLS: Mutex<BTreeMap<c_int, Pool>> = Mutex::new(BTreeMap::new());

/// Runs `f` on the state of `device`'s pool.
fn with_pool<R>(device: c_int, f: impl FnOnce(&mut Pool) -> R) -> R {
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    f(pools.entry(device).or_insert_with(|| Pool {
        kept: Vec::new(),
        used: 0,
        attributes: HashMap::new(),
    }))
}

impl Pool {
    fn kept_bytes(&self) -> u64 {
        self.kept.iter().map(|(_, n)| *n as u64).sum()
    }
    /// Releases kept buffers until at most `keep` bytes remain.
    fn trim(&mut self, keep: u64) {
        while self.kept_bytes() > keep {
            if let Some((ptr, _)) = self.kept.pop() {
                let _ = release(ptr as *mut c_void);
            }
        }
    }
}

/// `hipMallocAsync`: from the pool of the stream's device, a kept buffer of
/// the same size or a new one; on a capturing stream, a buffer of the
/// capture's graph.
pub(crate) unsafe fn hipMallocAsync(
    ptr: *mut *mut c_void,
    size: usize,
    stream: hipStream_t,
) -> HipResult {
    non_null(ptr, INVALID)?;
    // SAFETY: the caller passes a live stream (or a special one).
    let d = unsafe { stream_device(stream) }?;
    let p = if size == 0 {
        std::ptr::null_mut()
    // SAFETY: as above.
    } else if let Some(p) = unsafe { record_alloc(stream, size) }? {
        p as *mut c_void
    } else {
        let reused = with_pool(d, |pool| {
            let at = pool.kept.iter().position(|(_, n)| *n == size)?;
            Some(pool.kept.swap_remove(at).0)
        });
        let p = match reused {
            Some(p) => p as *mut c_void,
            None => allocate(size, Some(d))?,
        };
        with_pool(d, |pool| pool.used += size as u64);
        p
    };
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(ptr, p, INVALID) }
}

/// `hipFreeAsync`: kept by the pool of the buffer's device while the
/// pool's reserve stays within its release threshold, released otherwise;
/// on a capturing stream, a free node for a buffer of the capture (see
/// `hip::graph`); a graph's buffer stays with its graph.
pub(crate) unsafe fn hipFreeAsync(ptr: *mut c_void, stream: hipStream_t) -> HipResult {
    if ptr.is_null() {
        return Ok(());
    }
    if record_free(stream, ptr as usize)? {
        return Ok(());
    }
    let (size, owner, graph) = heap()
        .buffers
        .get(&(ptr as usize))
        .map(|a| (a.size, a.device, a.graph))
        .ok_or(INVALID)?;
    if graph {
        return Ok(());
    }
    let Some(d) = owner else {
        // A host buffer belongs to no pool.
        return release(ptr);
    };
    with_pool(d, |pool| {
        pool.used = pool.used.saturating_sub(size as u64);
        let threshold = pool
            .attributes
            .get(&hipMemPoolAttr::hipMemPoolAttrReleaseThreshold.0)
            .copied()
            .unwrap_or(0);
        if pool.kept_bytes() + size as u64 <= threshold {
            pool.kept.push((ptr as usize, size));
            Ok(())
        } else {
            release(ptr)
        }
    })
}

/// Spacing of the pool handles: device `d`'s default pool is the non-null,
/// never dereferenced token `(d + 1) * POOL_TOKEN`.
const POOL_TOKEN: usize = 8;

/// The handle of `device`'s default pool.
fn pool_handle(device: c_int) -> hipMemPool_t {
    let index = usize::try_from(device).unwrap_or(0);
    std::ptr::without_provenance_mut((index + 1) * POOL_TOKEN)
}

/// The device whose default pool `pool` is (`hipErrorInvalidValue` for
/// anything else).
fn pool_device(pool: hipMemPool_t) -> HipResult<c_int> {
    let token = pool as usize;
    if token == 0 || !token.is_multiple_of(POOL_TOKEN) {
        return Err(INVALID);
    }
    let d = c_int::try_from(token / POOL_TOKEN - 1).map_err(|_| INVALID)?;
    check_ordinal(d).map_err(|_| INVALID)?;
    Ok(d)
}

/// `hipDeviceGetDefaultMemPool`.
pub(crate) unsafe fn hipDeviceGetDefaultMemPool(
    pool: *mut hipMemPool_t,
    device_id: c_int,
) -> HipResult {
    check_ordinal(device_id)?;
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe { write_out(pool, pool_handle(device_id), INVALID) }
}

/// `hipMemPoolTrimTo`: releases kept buffers down to `min_bytes_to_hold`.
pub(crate) unsafe fn hipMemPoolTrimTo(pool: hipMemPool_t, min_bytes_to_hold: usize) -> HipResult {
    let d = pool_device(pool)?;
    with_pool(d, |p| p.trim(min_bytes_to_hold as u64));
    Ok(())
}

/// Whether a pool attribute is a 64-bit size (else an `int` flag).
fn is_size_attribute(attr: hipMemPoolAttr) -> bool {
    attr.0 >= hipMemPoolAttr::hipMemPoolAttrReleaseThreshold.0
}

/// `hipMemPoolSetAttribute`: remembered.
pub(crate) unsafe fn hipMemPoolSetAttribute(
    pool: hipMemPool_t,
    attr: hipMemPoolAttr,
    value: *mut c_void,
) -> HipResult {
    let d = pool_device(pool)?;
    non_null(value, INVALID)?;
    // SAFETY: the caller passes a value of the attribute's type.
    let v = unsafe {
        if is_size_attribute(attr) {
            value.cast::<u64>().read()
        } else {
            value.cast::<c_int>().read() as u64
        }
    };
    with_pool(d, |p| p.attributes.insert(attr.0, v));
    Ok(())
}

/// `hipMemPoolSetAccess`: checked and accepted; every device reaches host
/// memory, so access needs no mapping here.
pub(crate) unsafe fn hipMemPoolSetAccess(
    pool: hipMemPool_t,
    desc_list: *const hipMemAccessDesc,
    count: usize,
) -> HipResult {
    pool_device(pool)?;
    if count == 0 {
        return Ok(());
    }
    non_null(desc_list, INVALID)?;
    // SAFETY: the caller passes `count` descriptors.
    let descs = unsafe { std::slice::from_raw_parts(desc_list, count) };
    for d in descs {
        if d.location.type_ != hipMemLocationType::hipMemLocationTypeDevice
            || ![0, 1, 3].contains(&d.flags.0)
        {
            return Err(INVALID);
        }
        check_ordinal(d.location.id)?;
    }
    Ok(())
}

/// `hipMemPoolGetAttribute`: the reserve (live plus kept buffers) and the
/// live bytes; anything else what was set (0 by default).
pub(crate) unsafe fn hipMemPoolGetAttribute(
    pool: hipMemPool_t,
    attr: hipMemPoolAttr,
    value: *mut c_void,
) -> HipResult {
    use hipMemPoolAttr as A;
    let d = pool_device(pool)?;
    non_null(value, INVALID)?;
    let v = with_pool(d, |p| match attr {
        A::hipMemPoolAttrReservedMemCurrent => p.used + p.kept_bytes(),
        A::hipMemPoolAttrUsedMemCurrent => p.used,
        _ => p.attributes.get(&attr.0).copied().unwrap_or(0),
    });
    // SAFETY: the caller passes room for a value of the attribute's type.
    unsafe {
        if is_size_attribute(attr) {
            value.cast::<u64>().write(v);
        } else {
            value.cast::<c_int>().write(v as c_int);
        }
    }
    Ok(())
}

/// `hipHostMalloc`: a guarded buffer not counted against the device.
/// Refused during some captures (see `hip::graph`).
pub(crate) unsafe fn hipHostMalloc(
    ptr: *mut *mut c_void,
    size: usize,
    _flags: c_uint,
) -> HipResult {
    check_unsafe_call()?;
    non_null(ptr, INVALID)?;
    let p = if size == 0 {
        std::ptr::null_mut()
    } else {
        allocate(size, None)?
    };
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(ptr, p, INVALID) }
}

/// `hipHostFree`. Refused during some captures (see `hip::graph`).
pub(crate) unsafe fn hipHostFree(ptr: *mut c_void) -> HipResult {
    check_unsafe_call()?;
    release(ptr)
}

/// The checks of [`copy`].
fn check_copy(dst: *mut c_void, src: *const c_void, size: usize) -> HipResult {
    if size == 0 {
        return Ok(());
    }
    non_null(dst, INVALID)?;
    non_null(src, INVALID)?;
    check_range(dst as usize, size)?;
    check_range(src as usize, size)
}

/// Copies after checking both ranges against the buffers they start in.
///
/// # Safety
/// The caller's contract of `hipMemcpy`: both ranges valid for `size` bytes.
unsafe fn copy(dst: *mut c_void, src: *const c_void, size: usize) -> HipResult {
    check_copy(dst, src, size)?;
    if size == 0 {
        return Ok(());
    }
    // SAFETY: valid per the contract; `copy` allows overlap.
    unsafe { std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), size) };
    Ok(())
}

/// `hipMemcpy`: any direction (all memory is host memory). Refused while
/// any stream captures (see `hip::graph`).
pub(crate) unsafe fn hipMemcpy(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    _kind: hipMemcpyKind,
) -> HipResult {
    check_sync_copy()?;
    // SAFETY: same contract.
    unsafe { copy(dst, src, size) }
}

/// `hipMemcpyAsync`: done at the call, or checked and recorded on a
/// capturing stream (host memory is then read or written at each replay,
/// as on a GPU).
pub(crate) unsafe fn hipMemcpyAsync(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    _kind: hipMemcpyKind,
    stream: hipStream_t,
) -> HipResult {
    let (d, s) = (dst as usize, src as usize);
    let recorded = record(stream, || {
        check_copy(dst, src, size)?;
        // SAFETY: the caller keeps both ranges valid for every replay (the
        // contract of a captured copy); they are checked again then.
        Ok(move || unsafe { copy(d as *mut c_void, s as *const c_void, size) })
    })?;
    if recorded {
        return Ok(());
    }
    // SAFETY: same contract.
    unsafe { copy(dst, src, size) }
}

/// `hipMemcpyPeerAsync`: both ordinals must be visible devices and each
/// range must lie inside one buffer of its device (`hipErrorInvalidDevice`,
/// `hipErrorInvalidValue` otherwise); copies at the call, or is recorded
/// on a capturing stream (and checked again at each replay).
pub(crate) unsafe fn hipMemcpyPeerAsync(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    size: usize,
    stream: hipStream_t,
) -> HipResult {
    let (d, s) = (dst as usize, src as usize);
    let recorded = record(stream, || {
        check_peer_copy(d, dst_device, s, src_device, size)?;
        // SAFETY: checked again at each replay; the caller keeps the
        // buffers alive for every replay (the contract of a captured copy).
        Ok(move || unsafe { peer_copy(d, dst_device, s, src_device, size) })
    })?;
    if recorded {
        return Ok(());
    }
    // SAFETY: the caller keeps both buffers alive for the call.
    unsafe { peer_copy(d, dst_device, s, src_device, size) }
}

/// The checks of [`peer_copy`].
fn check_peer_copy(
    dst: usize,
    dst_device: c_int,
    src: usize,
    src_device: c_int,
    size: usize,
) -> HipResult {
    check_ordinal(dst_device)?;
    check_ordinal(src_device)?;
    if size != 0
        && (device_holding(dst, size) != Some(dst_device)
            || device_holding(src, size) != Some(src_device))
    {
        return Err(INVALID);
    }
    Ok(())
}

/// A peer copy after [`check_peer_copy`].
///
/// # Safety
/// Buffers that pass the checks must stay allocated for the call.
unsafe fn peer_copy(
    dst: usize,
    dst_device: c_int,
    src: usize,
    src_device: c_int,
    size: usize,
) -> HipResult {
    check_peer_copy(dst, dst_device, src, src_device, size)?;
    // SAFETY: both ranges lie inside live buffers (checked above).
    unsafe { copy(dst as *mut c_void, src as *const c_void, size) }
}

/// The checks of [`fill`].
fn check_fill<T>(dst: *mut c_void, count: usize) -> HipResult {
    if count == 0 {
        return Ok(());
    }
    non_null(dst, INVALID)?;
    let bytes = count.checked_mul(size_of::<T>()).ok_or(INVALID)?;
    check_range(dst as usize, bytes)
}

/// Fills `count` elements of `T` at `dst` after the range check.
///
/// # Safety
/// `dst` must be valid for `count` writes of `T`.
unsafe fn fill<T: Copy>(dst: *mut c_void, value: T, count: usize) -> HipResult {
    check_fill::<T>(dst, count)?;
    if count == 0 {
        return Ok(());
    }
    // SAFETY: valid per the contract; buffers are 256-byte aligned and
    // callers pass element-aligned pointers.
    unsafe { std::slice::from_raw_parts_mut(dst.cast::<T>(), count).fill(value) };
    Ok(())
}

/// A fill queued on `stream`: at the call, or checked and recorded when
/// the stream captures.
///
/// # Safety
/// `dst` must be valid for `count` writes of `T` (at every replay, when
/// captured).
unsafe fn fill_on<T>(stream: hipStream_t, dst: *mut c_void, value: T, count: usize) -> HipResult
where
    T: Copy + Send + Sync + 'static,
{
    let d = dst as usize;
    let recorded = record(stream, || {
        check_fill::<T>(dst, count)?;
        // SAFETY: the caller keeps the range valid for every replay (the
        // contract of a captured fill); it is checked again then.
        Ok(move || unsafe { fill(d as *mut c_void, value, count) })
    })?;
    if recorded {
        return Ok(());
    }
    // SAFETY: same contract.
    unsafe { fill(dst, value, count) }
}

/// `hipMemset`: bytes. Refused while any stream captures (see
/// `hip::graph`).
pub(crate) unsafe fn hipMemset(dst: *mut c_void, value: c_int, size: usize) -> HipResult {
    check_sync_copy()?;
    // SAFETY: same contract.
    unsafe { fill(dst, value as u8, size) }
}

/// `hipMemsetAsync`: bytes, at the call (recorded on a capturing stream).
pub(crate) unsafe fn hipMemsetAsync(
    dst: *mut c_void,
    value: c_int,
    size: usize,
    stream: hipStream_t,
) -> HipResult {
    // SAFETY: same contract.
    unsafe { fill_on(stream, dst, value as u8, size) }
}

/// `hipMemsetD16Async`: 16-bit elements.
pub(crate) unsafe fn hipMemsetD16Async(
    dst: hipDeviceptr_t,
    value: c_ushort,
    count: usize,
    stream: hipStream_t,
) -> HipResult {
    if !(dst as usize).is_multiple_of(2) {
        return Err(INVALID);
    }
    // SAFETY: same contract.
    unsafe { fill_on(stream, dst, value, count) }
}

/// `hipMemsetD32Async`: 32-bit elements.
pub(crate) unsafe fn hipMemsetD32Async(
    dst: hipDeviceptr_t,
    value: c_int,
    count: usize,
    stream: hipStream_t,
) -> HipResult {
    if !(dst as usize).is_multiple_of(4) {
        return Err(INVALID);
    }
    // SAFETY: same contract.
    unsafe { fill_on(stream, dst, value, count) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_past_a_buffer_are_found() {
        let p = allocate(100, Some(0)).unwrap() as *mut u8;
        assert_eq!(p as usize % ALIGN, 0);
        assert_eq!(check_guards(), Ok(()));
        // SAFETY: inside the canary after the 100-byte buffer.
        unsafe { p.add(101).write(0) };
        let report = check_guards().unwrap_err();
        assert!(
            report.contains("2 byte(s) after the 100-byte buffer"),
            "{report}"
        );
        assert_eq!(check_guards(), Ok(()));
        // SAFETY: the canary before the buffer.
        unsafe { p.sub(3).write(0) };
        assert!(check_guards().unwrap_err().contains("3 byte(s) before"));
        assert_eq!(check_range(p as usize, 100), Ok(()));
        assert_eq!(check_range(p as usize + 50, 51), Err(INVALID));
        release(p.cast()).unwrap();
        assert_eq!(release(p.cast()), Err(INVALID));
    }

    #[test]
    fn device_size_is_enforced() {
        let mut free = 0;
        let mut total = 0;
        // SAFETY: valid out-pointers.
        unsafe { hipMemGetInfo(&mut free, &mut total) }.unwrap();
        assert_eq!(
            allocate(total + 1, Some(0)),
            Err(hipError_t::hipErrorOutOfMemory)
        );
    }

    #[test]
    fn ranges_name_their_device() {
        let p = allocate(64, Some(0)).unwrap() as usize;
        let h = allocate(64, None).unwrap() as usize;
        assert_eq!(device_holding(p, 64), Some(0));
        assert_eq!(device_holding(p + 8, 56), Some(0));
        assert_eq!(device_holding(p + 8, 57), None);
        assert_eq!(device_holding(h, 8), None);
        release(p as *mut c_void).unwrap();
        release(h as *mut c_void).unwrap();
    }
}
