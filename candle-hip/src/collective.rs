//! Collectives between HIP devices on candle-hip storages: one RCCL
//! communicator per device ([`HipComm`], on the device's stream, so the
//! collectives are ordered with every other operation of that device) and
//! the storage-level all-reduce and all-gather that tensor-parallel layers
//! need.
//!
//! ```no_run
//! use candle_hip::{HipComm, HipDevice};
//! use candle_core::backend::BackendDevice;
//! use hip_safe::UniqueId;
//!
//! let id = UniqueId::new()?;
//! let ranks: Vec<_> = (0..2)
//!     .map(|rank| {
//!         std::thread::spawn(move || -> candle_core::Result<HipComm> {
//!             HipComm::from_rank(&HipDevice::new(rank)?, rank, 2, &id)
//!         })
//!     })
//!     .collect();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout};
use hip_safe::{Comm, ReduceOp, UniqueId};

use crate::device::HipDevice;
use crate::error::{Result, hip, invalid};
use crate::storage::HipStorage;
use crate::typed::{Typed, TypedMut};

/// Runs `$body!(T)` for the element type of `$dtype`, or fails with the
/// dtypes RCCL has.
macro_rules! dispatch {
    ($dtype:expr, $op:expr, $body:ident) => {
        match $dtype {
            DType::U8 => $body!(u8),
            DType::U32 => $body!(u32),
            DType::I32 => $body!(i32),
            DType::I64 => $body!(i64),
            DType::F16 => $body!(half::f16),
            DType::BF16 => $body!(half::bf16),
            DType::F32 => $body!(f32),
            DType::F64 => $body!(f64),
            other => {
                return Err(invalid(
                    $op,
                    format!("RCCL has no {other:?} (u8, u32, i32, i64, f16, bf16, f32, f64)"),
                ));
            }
        }
    };
}

/// One rank's RCCL communicator, on its device's stream.
#[derive(Debug)]
pub struct HipComm {
    comm: Comm,
    device: HipDevice,
}

impl HipComm {
    /// Joins communicator `id` as `rank` of `world` on `device` (blocks until
    /// every rank has joined; the ranks of one process call it from
    /// different threads).
    pub fn from_rank(device: &HipDevice, rank: usize, world: usize, id: &UniqueId) -> Result<Self> {
        let comm = Comm::from_rank(device.stream(), rank, world, id).map_err(hip)?;
        Ok(HipComm {
            comm,
            device: device.clone(),
        })
    }

    /// The communicators of `devices` (distinct devices, rank order),
    /// created by one thread.
    pub fn from_devices(devices: &[HipDevice]) -> Result<Vec<Self>> {
        let streams: Vec<_> = devices.iter().map(|d| d.stream().clone()).collect();
        let comms = Comm::from_devices(&streams).map_err(hip)?;
        Ok(comms
            .into_iter()
            .zip(devices)
            .map(|(comm, device)| HipComm {
                comm,
                device: device.clone(),
            })
            .collect())
    }

    /// This rank's number.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.comm.world_size()
    }

    /// The device of this rank.
    pub fn device(&self) -> &HipDevice {
        &self.device
    }

    /// The hip-safe communicator, for collectives on buffers of one's own.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// A new contiguous storage holding `op` over all ranks of the elements
    /// of `storage` that `layout` (contiguous) selects, on every rank.
    pub fn all_reduce(
        &self,
        storage: &HipStorage,
        layout: &Layout,
        op: ReduceOp,
    ) -> Result<HipStorage> {
        const OP: &str = "all_reduce";
        let count = self.contiguous_count(OP, storage, layout)?;
        // SAFETY: the all-reduce below writes every element before the
        // storage is returned (a failure drops it unread).
        let mut out = unsafe { self.device.alloc_storage(storage.dtype(), count) }?;
        let start = layout.start_offset();
        macro_rules! reduce {
            ($t:ty) => {{
                let send = Typed::<$t>::new(OP, storage, start, count)?;
                let mut recv = TypedMut::<$t>::new(OP, &mut out, 0, count)?;
                self.comm.all_reduce(&send, &mut recv, op).map_err(hip)?;
            }};
        }
        dispatch!(storage.dtype(), OP, reduce);
        Ok(out)
    }

    /// A new contiguous storage holding every rank's elements of `storage`
    /// (`layout` contiguous) one after the other in rank order, on every
    /// rank: `world_size()` times as many elements.
    pub fn all_gather(&self, storage: &HipStorage, layout: &Layout) -> Result<HipStorage> {
        const OP: &str = "all_gather";
        let count = self.contiguous_count(OP, storage, layout)?;
        let total = count
            .checked_mul(self.world_size())
            .ok_or_else(|| invalid(OP, "the element count overflows"))?;
        // SAFETY: the all-gather below writes every element before the
        // storage is returned (a failure drops it unread).
        let mut out = unsafe { self.device.alloc_storage(storage.dtype(), total) }?;
        let start = layout.start_offset();
        macro_rules! gather {
            ($t:ty) => {{
                let send = Typed::<$t>::new(OP, storage, start, count)?;
                let mut recv = TypedMut::<$t>::new(OP, &mut out, 0, total)?;
                self.comm.all_gather(&send, &mut recv).map_err(hip)?;
            }};
        }
        dispatch!(storage.dtype(), OP, gather);
        Ok(out)
    }

    /// The element count of a contiguous `layout` over `storage`, which must
    /// live on this rank's device.
    fn contiguous_count(
        &self,
        op: &'static str,
        storage: &HipStorage,
        layout: &Layout,
    ) -> Result<usize> {
        storage.device().check_same(&self.device, op)?;
        if !layout.is_contiguous() {
            return Err(invalid(op, "the input must be contiguous"));
        }
        Ok(layout.shape().elem_count())
    }
}
