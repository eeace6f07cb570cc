//! [`Device`]: one GPU by ordinal, its properties, and binding it to the
//! calling thread.

use std::cell::Cell;
use std::ffi::c_int;
use std::fmt;
use std::sync::{Arc, Mutex};

use hip_sys::{
    HipApi, hipDeviceAttribute_t, hipDeviceProp_tR0000, hipDeviceProp_tR0600, hipError_t,
};

use crate::error::{Error, Result};
use crate::result::{Call, CheckStatus, Status, clear_hip_last_error, out, out_ptr};
use crate::stream::Stream;

thread_local! {
    /// The device this thread last made current through [`Device::bind_to_thread`]
    /// (-1: not known yet). HIP keeps the current device per thread.
    static CURRENT_DEVICE: Cell<c_int> = const { Cell::new(-1) };
}

/// A HIP device, identified by its ordinal, with its properties read once.
///
/// Cloning is cheap (an `Arc`). HIP has no explicit contexts: streams,
/// modules and library handles belong to the device that is current on the
/// calling thread when they are created, so every operation of this crate
/// first calls [`Device::bind_to_thread`], which calls `hipSetDevice` only
/// when the thread's current device differs.
///
/// ```no_run
/// let dev = hip_safe::Device::new(0)?;
/// println!("{} ({}), wave {}", dev.name(), dev.arch(), dev.wave_size());
/// let (free, total) = dev.memory_info()?;
/// println!("{free} of {total} bytes free");
/// # Ok::<(), hip_safe::Error>(())
/// ```
#[derive(Clone)]
pub struct Device {
    inner: Arc<DeviceInner>,
}

struct DeviceInner {
    api: &'static HipApi,
    ordinal: c_int,
    name: String,
    full_arch: String,
    wave_size: u32,
    compute_units: u32,
    total_memory: usize,
    memory_pools: bool,
    /// The peers this device was given direct access to (through this
    /// `Device` or its clones), so that enabling again costs no HIP call.
    peers: Mutex<Vec<c_int>>,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("ordinal", &self.inner.ordinal)
            .field("name", &self.inner.name)
            .field("arch", &self.inner.full_arch)
            .finish()
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        self.inner.ordinal == other.inner.ordinal
    }
}

impl Eq for Device {}

/// Name, architecture, total memory as read from `hipDeviceProp_t`.
struct BasicProperties {
    name: String,
    full_arch: String,
    total_memory: usize,
    warp_size: c_int,
    multiprocessors: c_int,
}

impl Device {
    /// The number of HIP devices (0 when the runtime reports
    /// `hipErrorNoDevice`).
    pub fn count() -> Result<usize> {
        device_count(hip_sys::hip()?)
    }

    /// Opens device `ordinal`, makes it current on this thread and reads its
    /// properties.
    pub fn new(ordinal: usize) -> Result<Device> {
        let api = hip_sys::hip()?;
        let count = device_count(api)?;
        if ordinal >= count {
            return Err(Error::invalid(
                format_args!("Device::new({ordinal})"),
                format_args!("there are {count} HIP device(s)"),
            ));
        }
        let raw = c_int::try_from(ordinal)
            .map_err(|_| Error::invalid("Device::new", "ordinal too large"))?;
        set_current(api, raw)?;
        let props = read_properties(api, raw)?;
        let attr = |a, fallback: c_int| device_attribute(api, a, raw).unwrap_or(fallback);
        let wave_size = attr(
            hipDeviceAttribute_t::hipDeviceAttributeWarpSize,
            props.warp_size,
        );
        let compute_units = attr(
            hipDeviceAttribute_t::hipDeviceAttributeMultiprocessorCount,
            props.multiprocessors,
        );
        let memory_pools = attr(
            hipDeviceAttribute_t::hipDeviceAttributeMemoryPoolsSupported,
            0,
        );
        Ok(Device {
            inner: Arc::new(DeviceInner {
                api,
                ordinal: raw,
                name: props.name,
                full_arch: props.full_arch,
                wave_size: u32::try_from(wave_size).unwrap_or(0),
                compute_units: u32::try_from(compute_units).unwrap_or(0),
                total_memory: props.total_memory,
                memory_pools: memory_pools != 0,
                peers: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        // Non-negative by construction in `new`.
        self.inner.ordinal as usize
    }

    /// The marketing name, e.g. `AMD Instinct MI210`.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The architecture without feature suffixes: `gfx90a` for
    /// `gfx90a:sramecc+:xnack-` (on the NVIDIA test shim, e.g. `sm_90`).
    pub fn arch(&self) -> &str {
        strip_arch_features(&self.inner.full_arch)
    }

    /// The full `gcnArchName`, feature suffixes included.
    pub fn full_arch(&self) -> &str {
        &self.inner.full_arch
    }

    /// Threads per wavefront (64 on CDNA, 32 on RDNA and NVIDIA).
    pub fn wave_size(&self) -> u32 {
        self.inner.wave_size
    }

    /// Number of compute units (multiprocessors).
    pub fn compute_units(&self) -> u32 {
        self.inner.compute_units
    }

    /// Total global memory in bytes.
    pub fn total_memory(&self) -> usize {
        self.inner.total_memory
    }

    /// Whether the device supports stream-ordered allocation
    /// (`hipMallocAsync`); buffers use plain `hipMalloc` otherwise.
    pub fn supports_memory_pools(&self) -> bool {
        self.inner.memory_pools
    }

    /// `(free, total)` device memory in bytes right now.
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.bind_to_thread()?;
        out(
            format_args!("hipMemGetInfo on device {}", self.inner.ordinal),
            |(free, total): &mut (usize, usize)| {
                // SAFETY: both are valid out-pointers.
                unsafe { self.inner.api.hipMemGetInfo(free, total) }
            },
        )
    }

    /// Waits until all work on every stream of this device has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.bind_to_thread()?;
        // SAFETY: no arguments; the device is current.
        unsafe { self.inner.api.hipDeviceSynchronize() }.check(format_args!(
            "hipDeviceSynchronize on device {}",
            self.inner.ordinal
        ))
    }

    /// Waits for the device, then returns the memory that the default
    /// memory pool keeps cached after stream-ordered frees to the system (so
    /// that [`Device::memory_info`] reflects only live buffers). A no-op on
    /// devices without memory pools.
    pub fn trim_memory_pool(&self) -> Result<()> {
        let Some(pool) = self.default_memory_pool()? else {
            return Ok(());
        };
        self.synchronize()?;
        // SAFETY: `pool` is the device's live default pool.
        unsafe { self.inner.api.hipMemPoolTrimTo(pool, 0) }.check("hipMemPoolTrimTo(0)")
    }

    /// Sets how many bytes of freed memory the default memory pool may keep
    /// cached across synchronizations (`hipMemPoolAttrReleaseThreshold`).
    ///
    /// HIP's default is 0: every stream, event or device synchronization
    /// returns the memory of stream-ordered frees to the system, and the
    /// next allocation maps it again, which costs more than many kernels.
    /// `u64::MAX` keeps everything for reuse, as PyTorch's caching allocator
    /// does; [`Device::trim_memory_pool`] still releases it on request. A
    /// no-op on devices without memory pools.
    pub fn set_memory_pool_release_threshold(&self, bytes: u64) -> Result<()> {
        let Some(pool) = self.default_memory_pool()? else {
            return Ok(());
        };
        let mut value = bytes;
        // SAFETY: live pool; this attribute reads a u64 from `value`.
        unsafe {
            self.inner.api.hipMemPoolSetAttribute(
                pool,
                hip_sys::hipMemPoolAttr::hipMemPoolAttrReleaseThreshold,
                (&raw mut value).cast(),
            )
        }
        .check(format_args!(
            "hipMemPoolSetAttribute(release threshold = {bytes} B)"
        ))
    }

    /// Bytes of device memory the default memory pool holds now, live
    /// buffers and cached frees together (`hipMemPoolAttrReservedMemCurrent`);
    /// 0 on devices without memory pools.
    pub fn memory_pool_reserved(&self) -> Result<u64> {
        let Some(pool) = self.default_memory_pool()? else {
            return Ok(0);
        };
        out(
            "hipMemPoolGetAttribute(reserved memory)",
            |value: &mut u64| {
                // SAFETY: live pool; this attribute writes a u64 to `value`.
                unsafe {
                    self.inner.api.hipMemPoolGetAttribute(
                        pool,
                        hip_sys::hipMemPoolAttr::hipMemPoolAttrReservedMemCurrent,
                        std::ptr::from_mut(value).cast(),
                    )
                }
            },
        )
    }

    /// The device's default memory pool, `None` on devices without pools.
    fn default_memory_pool(&self) -> Result<Option<hip_sys::hipMemPool_t>> {
        if !self.supports_memory_pools() {
            return Ok(None);
        }
        self.bind_to_thread()?;
        out_ptr("hipDeviceGetDefaultMemPool", |pool| {
            // SAFETY: valid out-pointer and device ordinal.
            unsafe {
                self.inner
                    .api
                    .hipDeviceGetDefaultMemPool(pool, self.inner.ordinal)
            }
        })
        .map(Some)
    }

    /// The device's legacy default (null) stream.
    pub fn default_stream(&self) -> Stream {
        Stream::default_for(self.clone())
    }

    /// HIP's per-thread default stream (`hipStreamPerThread`) of the calling
    /// thread. HIP resolves the handle to the stream of whichever thread uses
    /// it, so the returned stream belongs to this thread: per-thread streams
    /// of two threads are different streams, and queuing work on this one
    /// from another thread returns an error. Buffers allocated on it may
    /// still be used from other threads' streams: the ordering with it then
    /// waits on the host (see [`Stream::join`]). Because its meaning depends
    /// on the calling thread, buffers allocated on it use
    /// `hipMalloc`/`hipFree` (which waits for the device) rather than
    /// stream-ordered allocation.
    pub fn per_thread_stream(&self) -> Stream {
        Stream::per_thread_for(self.clone())
    }

    /// Creates a new non-blocking stream on this device.
    pub fn new_stream(&self) -> Result<Stream> {
        Stream::create(self.clone())
    }

    /// Makes this device current on the calling thread; calls `hipSetDevice`
    /// only when another device (or none known) is current.
    ///
    /// The cache is per thread and only sees changes made through this crate:
    /// code that calls `hipSetDevice` directly should call this again.
    pub fn bind_to_thread(&self) -> Result<()> {
        set_current(self.inner.api, self.inner.ordinal)
    }

    /// Whether kernels and copies on this device can access `peer`'s memory
    /// directly once [`Device::enable_peer_access`] allows it
    /// (`hipDeviceCanAccessPeer`). A device is not its own peer.
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool> {
        if peer.inner.ordinal == self.inner.ordinal {
            return Ok(false);
        }
        let op = format_args!(
            "hipDeviceCanAccessPeer(device {}, peer {})",
            self.inner.ordinal, peer.inner.ordinal
        );
        let can = out(op, |can: &mut c_int| {
            // SAFETY: valid out-pointer; both ordinals name open devices.
            unsafe {
                self.inner
                    .api
                    .hipDeviceCanAccessPeer(can, self.inner.ordinal, peer.inner.ordinal)
            }
        })?;
        Ok(can != 0)
    }

    /// Lets this device access `peer`'s memory directly, so that copies
    /// between the two ([`crate::Stream::memcpy_dtod`]) take the direct path
    /// (`hipDeviceEnablePeerAccess`, and `hipMemPoolSetAccess` for `peer`'s
    /// default memory pool, where stream-ordered buffers live). Enabling it
    /// twice is not an error. Access is one-way: enable it on both devices
    /// for copies either way. An error when the devices cannot access each
    /// other's memory (see [`Device::try_enable_peer_access`]).
    pub fn enable_peer_access(&self, peer: &Device) -> Result<()> {
        if self.try_enable_peer_access(peer)? {
            Ok(())
        } else {
            Err(Error::invalid(
                format_args!(
                    "enable_peer_access({} -> {})",
                    self.inner.ordinal, peer.inner.ordinal
                ),
                "the devices cannot access each other's memory directly",
            ))
        }
    }

    /// [`Device::enable_peer_access`] where the hardware allows it: `false`
    /// (and nothing enabled) when it does not, e.g. for a device and
    /// itself. Remembered per peer: asking again costs no HIP call.
    pub fn try_enable_peer_access(&self, peer: &Device) -> Result<bool> {
        let mut peers = self
            .inner
            .peers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if peers.contains(&peer.inner.ordinal) {
            return Ok(true);
        }
        if !self.can_access_peer(peer)? {
            return Ok(false);
        }
        self.bind_to_thread()?;
        // SAFETY: takes an open device ordinal and no pointers.
        let status = unsafe {
            self.inner
                .api
                .hipDeviceEnablePeerAccess(peer.inner.ordinal, 0)
        };
        if status == Ok(hipError_t::hipErrorPeerAccessAlreadyEnabled) {
            clear_hip_last_error();
        } else {
            status.check(format_args!(
                "hipDeviceEnablePeerAccess(device {}, peer {})",
                self.inner.ordinal, peer.inner.ordinal
            ))?;
        }
        self.access_memory_pool_of(peer)?;
        peers.push(peer.inner.ordinal);
        Ok(true)
    }

    /// Lets this device read and write buffers of `peer`'s default memory
    /// pool (stream-ordered allocations), which peer access alone does not
    /// cover (`hipMemPoolSetAccess`).
    fn access_memory_pool_of(&self, peer: &Device) -> Result<()> {
        let Some(pool) = peer.default_memory_pool()? else {
            return Ok(());
        };
        let access = hip_sys::hipMemAccessDesc {
            location: hip_sys::hipMemLocation {
                type_: hip_sys::hipMemLocationType::hipMemLocationTypeDevice,
                id: self.inner.ordinal,
            },
            flags: hip_sys::hipMemAccessFlags::hipMemAccessFlagsProtReadWrite,
        };
        // SAFETY: a live pool and one valid access descriptor.
        unsafe { self.inner.api.hipMemPoolSetAccess(pool, &access, 1) }.check(format_args!(
            "hipMemPoolSetAccess(pool of device {}, read-write for device {})",
            peer.inner.ordinal, self.inner.ordinal
        ))
    }

    pub(crate) fn api(&self) -> &'static HipApi {
        self.inner.api
    }

    /// Makes a release call from `Drop`, which cannot report errors: binds
    /// this device, makes the call and discards its status (see
    /// [`CheckStatus::discard`]). When the device cannot be bound the
    /// resource is leaked, which is safe.
    pub(crate) fn release<S: Status>(&self, call: impl FnOnce(&'static HipApi) -> Call<S>) {
        if self.bind_to_thread().is_ok() {
            call(self.inner.api).discard();
        }
    }
}

/// `gfx90a:sramecc+:xnack-` -> `gfx90a`.
pub(crate) fn strip_arch_features(full: &str) -> &str {
    full.split(':').next().unwrap_or(full).trim()
}

fn set_current(api: &HipApi, ordinal: c_int) -> Result<()> {
    if CURRENT_DEVICE.with(Cell::get) == ordinal {
        return Ok(());
    }
    // SAFETY: plain integer argument.
    unsafe { api.hipSetDevice(ordinal) }.check(format_args!("hipSetDevice({ordinal})"))?;
    CURRENT_DEVICE.with(|c| c.set(ordinal));
    Ok(())
}

pub(crate) fn device_count(api: &HipApi) -> Result<usize> {
    let mut count: c_int = 0;
    // SAFETY: valid out-pointer.
    let status = unsafe { api.hipGetDeviceCount(&mut count) };
    if status == Ok(hip_sys::hipError_t::hipErrorNoDevice) {
        // "No device" is an answer, not a failure: clear it from HIP's
        // last-error slot so it does not surface on a later call.
        clear_hip_last_error();
        return Ok(0);
    }
    status.check("hipGetDeviceCount")?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// One attribute of device `ordinal`; `None` when the runtime cannot answer
/// (an unknown attribute, a missing symbol). A failing status goes through
/// [`out`], which also clears it from HIP's last-error slot, so a caller
/// that falls back to another value leaves nothing behind for rocBLAS or
/// MIOpen to find later.
fn device_attribute(api: &HipApi, attr: hipDeviceAttribute_t, ordinal: c_int) -> Option<c_int> {
    out(
        format_args!("hipDeviceGetAttribute({}, {ordinal})", attr.0),
        |value: &mut c_int| {
            // SAFETY: valid out-pointer; unknown attributes are reported as
            // errors.
            unsafe { api.hipDeviceGetAttribute(value, attr, ordinal) }
        },
    )
    .ok()
}

/// Reads `hipDeviceProp_t` with the layout of the loaded runtime:
/// `hipGetDevicePropertiesR0600` on ROCm 6 and newer, the legacy
/// `hipGetDeviceProperties` (R0000 layout) on ROCm 5.
fn read_properties(api: &HipApi, ordinal: c_int) -> Result<BasicProperties> {
    let modern = hip_sys::runtime_version().map_or(true, |v| v.has_r0600_properties());
    if modern {
        out(
            format_args!("hipGetDevicePropertiesR0600({ordinal})"),
            |p: &mut hipDeviceProp_tR0600| {
                // SAFETY: `p` is a properly sized and aligned R0600 struct.
                unsafe { api.hipGetDevicePropertiesR0600(p, ordinal) }
            },
        )
        .map(BasicProperties::from)
    } else {
        out(
            format_args!("hipGetDeviceProperties({ordinal})"),
            |p: &mut hipDeviceProp_tR0000| {
                // SAFETY: `p` is a properly sized and aligned R0000 struct,
                // the layout the plain exported `hipGetDeviceProperties`
                // fills.
                unsafe { api.hipGetDeviceProperties(p, ordinal) }
            },
        )
        .map(BasicProperties::from)
    }
}

/// `BasicProperties` from either `hipDeviceProp_t` layout: the fields read
/// here have the same names and types in both.
macro_rules! basic_properties_from {
    ($($layout:ty),*) => {$(
        impl From<$layout> for BasicProperties {
            fn from(p: $layout) -> BasicProperties {
                BasicProperties {
                    name: fixed_c_string(&p.name),
                    full_arch: fixed_c_string(&p.gcnArchName),
                    total_memory: p.totalGlobalMem,
                    warp_size: p.warpSize,
                    multiprocessors: p.multiProcessorCount,
                }
            }
        }
    )*};
}

basic_properties_from!(hipDeviceProp_tR0600, hipDeviceProp_tR0000);

/// A `char[N]` field as a string, stopping at the first NUL (or the end if
/// the runtime filled every byte).
pub(crate) fn fixed_c_string(raw: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_suffixes_are_stripped() {
        assert_eq!(strip_arch_features("gfx90a:sramecc+:xnack-"), "gfx90a");
        assert_eq!(strip_arch_features("gfx1100"), "gfx1100");
        assert_eq!(strip_arch_features("sm_90"), "sm_90");
        assert_eq!(strip_arch_features(""), "");
    }

    #[test]
    #[ignore = "needs a HIP device"]
    fn gpu_failed_attribute_query_leaves_no_last_error() {
        let api = hip_sys::hip().expect("the HIP runtime");
        set_current(api, 0).expect("device 0");
        let unknown = hipDeviceAttribute_t(0x7fff_0000);
        assert_eq!(device_attribute(api, unknown, 0), None);
        // SAFETY: no arguments; reads and resets this thread's error slot.
        let left = unsafe { api.hipGetLastError() }.expect("hipGetLastError");
        assert_eq!(left, hip_sys::hipError_t::hipSuccess);
        let warp = device_attribute(api, hipDeviceAttribute_t::hipDeviceAttributeWarpSize, 0);
        assert!(matches!(warp, Some(32 | 64)), "{warp:?}");
    }

    #[test]
    fn fixed_strings_stop_at_nul_or_end() {
        let mut raw = [0 as std::ffi::c_char; 8];
        for (d, s) in raw.iter_mut().zip(b"gfx942") {
            *d = *s as std::ffi::c_char;
        }
        assert_eq!(fixed_c_string(&raw), "gfx942");
        let full = [b'a' as std::ffi::c_char; 4];
        assert_eq!(fixed_c_string(&full), "aaaa");
    }
}
