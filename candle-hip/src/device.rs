//! [`HipDevice`]: candle's `BackendDevice` on one HIP device and stream.

use std::fmt;
use std::sync::{Arc, Mutex};

use candle_core::backend::BackendDevice;
use candle_core::{CpuStorage, DType, DeviceLocation, Shape, WithDType};
use hip_safe::{Blas, Device, Dnn, Stream};

use crate::dtype;
use crate::error::{HipBackendError, Result, hip};
use crate::handles::LazyHandle;
use crate::kernel::launch::Launcher;
use crate::ops::conv;
use crate::ops::indexing::fault::FaultWord;
use crate::ops::random::{self, Distribution, RngState};
use crate::size;
use crate::storage::HipStorage;

/// Bytes of freed small buffers each device's stream keeps for reuse
/// (`Stream::set_allocation_cache_limit`).
const ALLOCATION_CACHE_BYTES: usize = 64 << 20;

/// A HIP device as a Candle backend device.
///
/// Cheap to clone: clones share one stream (all work of the device is
/// queued on it, in order), the loaded kernels and the random generator.
/// Two devices opened separately, even on the same ordinal, are different
/// devices for candle (`same_device` is false), as with candle's CUDA backend.
#[derive(Clone)]
pub struct HipDevice {
    inner: Arc<Inner>,
}

struct Inner {
    kernels: Launcher,
    faults: FaultWord,
    miopen_refused: conv::Refused,
    rng: Mutex<RngState>,
    blas: LazyHandle<Blas>,
    dnn: LazyHandle<Dnn>,
}

impl fmt::Debug for HipDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.hip_device();
        write!(f, "HipDevice({}: {}, {})", d.ordinal(), d.name(), d.arch())
    }
}

impl HipDevice {
    /// The underlying hip-safe device.
    pub fn hip_device(&self) -> &Device {
        self.inner.kernels.device()
    }

    /// The stream all operations of this device run on.
    pub fn stream(&self) -> &Stream {
        self.inner.kernels.stream()
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.hip_device().ordinal()
    }

    /// Compiles (or takes from the code-object cache) and loads every kernel
    /// source now instead of on first use, e.g. to warm up or to measure the
    /// compile cost.
    pub fn load_all_kernels(&self) -> Result<()> {
        self.inner.kernels.load_all()
    }

    /// Returns the device memory this device keeps for reuse (freed small
    /// buffers of its stream, its memory pool) to the system, as PyTorch's
    /// `torch.cuda.empty_cache()` does; waits for the stream first. Live
    /// tensors are untouched.
    pub fn release_cached_memory(&self) -> Result<()> {
        let stream = self.stream();
        stream.synchronize().map_err(hip)?;
        stream.set_allocation_cache_limit(0);
        stream.set_allocation_cache_limit(ALLOCATION_CACHE_BYTES);
        stream.synchronize().map_err(hip)?;
        self.hip_device().trim_memory_pool().map_err(hip)
    }

    /// The launcher of this device's kernels (on its stream).
    pub(crate) fn kernels(&self) -> &Launcher {
        &self.inner.kernels
    }

    /// Where this device's indexing kernels report indices past their
    /// dimension.
    pub(crate) fn faults(&self) -> &FaultWord {
        &self.inner.faults
    }

    /// The error an indexing kernel reported since the last check, if any
    /// (see `ops::indexing::fault`).
    pub(crate) fn check_faults(&self) -> Result<()> {
        self.inner.faults.check(self.stream())
    }

    /// The convolutions MIOpen failed on this device.
    pub(crate) fn miopen_refused(&self) -> &conv::Refused {
        &self.inner.miopen_refused
    }

    /// This device's rocBLAS handle slot.
    pub(crate) fn blas_slot(&self) -> &LazyHandle<Blas> {
        &self.inner.blas
    }

    /// This device's MIOpen handle slot.
    pub(crate) fn dnn_slot(&self) -> &LazyHandle<Dnn> {
        &self.inner.dnn
    }

    /// Errors unless `other` is this device.
    pub(crate) fn check_same(&self, other: &HipDevice, op: &'static str) -> Result<()> {
        if self.same_device(other) {
            Ok(())
        } else {
            Err(HipBackendError::DeviceMismatch {
                op,
                lhs: self.ordinal(),
                rhs: other.ordinal(),
            }
            .into())
        }
    }

    /// A storage of `len` elements of `dtype` with unspecified content.
    ///
    /// # Safety
    /// Every element must be written before it is read.
    pub(crate) unsafe fn alloc_storage(&self, dtype: DType, len: usize) -> Result<HipStorage> {
        // candle's CPU backend allocates no dummy dtype (`alloc_uninit`).
        dtype::check_numeric(dtype, "alloc_uninit")?;
        let bytes = byte_len(dtype, len)?;
        // SAFETY: forwarded to the caller.
        let buffer = unsafe { self.stream().alloc::<u8>(bytes) }.map_err(hip)?;
        Ok(HipStorage::new(buffer, dtype, self.clone()))
    }

    /// Reserves random-stream blocks for `n` values of `dtype`.
    pub(crate) fn reserve_random(&self, n: usize, dtype: DType) -> (u64, u64) {
        self.rng().reserve(n, dtype)
    }

    fn rng(&self) -> std::sync::MutexGuard<'_, RngState> {
        // The state is two integers, valid whatever a panicking holder did.
        self.inner
            .rng
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A storage holding a copy of `bytes` as `dtype`.
    fn upload(&self, dtype: DType, bytes: &[u8]) -> Result<HipStorage> {
        dtype::check(dtype, "storage_from_cpu_storage")?;
        let buffer = self.stream().clone_htod(bytes).map_err(hip)?;
        Ok(HipStorage::new(buffer, dtype, self.clone()))
    }
}

/// Bytes of `len` elements of `dtype`, with overflow reported.
fn byte_len(dtype: DType, len: usize) -> Result<usize> {
    len.checked_mul(dtype::elem_bytes(dtype)).ok_or_else(|| {
        crate::error::invalid(
            "alloc",
            format!("{len} elements of {dtype:?} overflow usize"),
        )
    })
}

fn float_only(dtype: DType, op: &'static str) -> Result<()> {
    if dtype::ANY_FLOAT.contains(&dtype) {
        Ok(())
    } else {
        Err(candle_core::Error::UnsupportedDTypeForOp(dtype, op).bt())
    }
}

impl BackendDevice for HipDevice {
    type Storage = HipStorage;

    /// Opens HIP device `ordinal` with a stream of its own.
    fn new(ordinal: usize) -> Result<Self> {
        let device = Device::new(ordinal).map_err(hip)?;
        let stream = device.new_stream().map_err(hip)?;
        // Every op allocates its output and frees its inputs' temporaries
        // stream-ordered. With HIP's default release threshold of 0 each
        // synchronization hands that memory back to the system and the next
        // op maps it again, which can cost more device time than an
        // element-wise kernel over the same bytes (PERF_NOTES.md). Keep it
        // cached as PyTorch's allocator does; `Device::trim_memory_pool`
        // releases it.
        device
            .set_memory_pool_release_threshold(u64::MAX)
            .map_err(hip)?;
        // Small tensors (up to 1 MiB) are recycled on the host without a
        // HIP call each: an allocation and a free per op are a large part of
        // a tiny op's host time (PERF_NOTES.md).
        stream.set_allocation_cache_limit(ALLOCATION_CACHE_BYTES);
        Ok(HipDevice {
            inner: Arc::new(Inner {
                faults: FaultWord::new(&stream).map_err(hip)?,
                miopen_refused: conv::Refused::default(),
                kernels: Launcher::new(stream),
                rng: Mutex::new(RngState::new()),
                blas: LazyHandle::new(),
                dnn: LazyHandle::new(),
            }),
        })
    }

    /// Reported as `DeviceLocation::Cuda { gpu_id: ordinal }`.
    ///
    /// candle-core 0.11.1's `DeviceLocation` has only `Cpu`, `Cuda` and
    /// `Metal`. `Cuda` is the least misleading of the three: a discrete GPU
    /// addressed by ordinal, which is what a HIP device is, and candle only
    /// uses the location to compare devices and in error messages. Code that
    /// needs to tell the backends apart should look at the storage type.
    /// The candle-core extension patch adds a variant for custom backends.
    fn location(&self) -> DeviceLocation {
        DeviceLocation::Cuda {
            gpu_id: self.ordinal(),
        }
    }

    fn same_device(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn zeros_impl(&self, shape: &Shape, dtype: DType) -> Result<HipStorage> {
        // As on candle's CPU backend, the dummy dtypes have no zeros.
        dtype::check_numeric(dtype, "zeros")?;
        let bytes = byte_len(dtype, size::numel("zeros", shape.dims())?)?;
        let buffer = self.stream().alloc_zeros::<u8>(bytes).map_err(hip)?;
        Ok(HipStorage::new(buffer, dtype, self.clone()))
    }

    unsafe fn alloc_uninit(&self, shape: &Shape, dtype: DType) -> Result<HipStorage> {
        // SAFETY: the caller initialises the storage before reading it
        // (this method's own contract).
        unsafe { self.alloc_storage(dtype, size::numel("alloc_uninit", shape.dims())?) }
    }

    fn storage_from_slice<T: WithDType>(&self, data: &[T]) -> Result<HipStorage> {
        // The dummy dtypes' element types hold no data (candle's CPU backend
        // panics on them); their storage comes as raw bytes (`CpuStorage`).
        dtype::check_numeric(T::DTYPE, "storage_from_slice")?;
        self.upload(T::DTYPE, dtype::as_bytes(data))
    }

    fn storage_from_cpu_storage(&self, storage: &CpuStorage) -> Result<HipStorage> {
        let (dtype, bytes) = dtype::cpu_bytes(storage)?;
        self.upload(dtype, bytes)
    }

    fn storage_from_cpu_storage_owned(&self, storage: CpuStorage) -> Result<HipStorage> {
        self.storage_from_cpu_storage(&storage)
    }

    fn rand_uniform(&self, shape: &Shape, dtype: DType, low: f64, high: f64) -> Result<HipStorage> {
        float_only(dtype, "rand_uniform")?;
        random::sample(self, shape, dtype, Distribution::Uniform { low, high })
    }

    fn rand_normal(&self, shape: &Shape, dtype: DType, mean: f64, std: f64) -> Result<HipStorage> {
        float_only(dtype, "rand_normal")?;
        random::sample(self, shape, dtype, Distribution::Normal { mean, std })
    }

    fn set_seed(&self, seed: u64) -> Result<()> {
        self.rng().set_seed(seed);
        Ok(())
    }

    fn get_current_seed(&self) -> Result<u64> {
        Ok(self.rng().seed())
    }

    fn synchronize(&self) -> Result<()> {
        self.stream().synchronize().map_err(hip)?;
        self.check_faults()
    }
}
