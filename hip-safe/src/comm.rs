//! [`Comm`]: RCCL collectives and point-to-point transfers between devices,
//! ordered on hip-safe streams like every other operation.
//!
//! A communicator joins `world` ranks, one device each. Ranks agree on a
//! [`UniqueId`] made by one of them (its 128 bytes travel however the
//! program likes: a channel between threads, a file, a socket) and each
//! creates its [`Comm`] with [`Comm::from_rank`], all at the same time (the
//! call blocks until every rank has joined). One thread may also create the
//! communicators of several local devices at once with
//! [`Comm::from_devices`]; it must then issue their operations inside
//! [`Comm::group`].
//!
//! Every operation is queued on the communicator's stream after the work
//! already queued on its buffers' streams, and those streams wait for it in
//! turn, exactly as [`Stream::memcpy_dtod`] orders a copy.
//!
//! ```no_run
//! use hip_safe::{Comm, Device, ReduceOp, UniqueId};
//!
//! let id = UniqueId::new()?;
//! let ranks: Vec<_> = (0..2)
//!     .map(|rank| {
//!         std::thread::spawn(move || -> hip_safe::Result<Vec<f32>> {
//!             let stream = Device::new(rank)?.new_stream()?;
//!             let comm = Comm::from_rank(&stream, rank, 2, &id)?;
//!             let mut x = stream.clone_htod(&[rank as f32 + 1.0; 4])?;
//!             comm.all_reduce_in_place(&mut x, ReduceOp::Sum)?;
//!             stream.clone_dtoh(&x)
//!         })
//!     })
//!     .collect();
//! for rank in ranks {
//!     assert_eq!(rank.join().unwrap()?, vec![3.0; 4]);
//! }
//! # Ok::<(), hip_safe::Error>(())
//! ```

use std::ffi::c_int;
use std::fmt;
use std::sync::Mutex;

use half::{bf16, f16};
use hip_sys::hipStream_t;
use rccl_sys::{RcclApi, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclUniqueId};

use crate::buffer::{DevicePtr, DevicePtrMut};
use crate::error::{Error, Result};
use crate::repr::DeviceRepr;
use crate::result::{Call, CheckStatus, out, out_ptr};
use crate::stream::Stream;

/// The identity of one communicator, made by one rank and handed to all.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId(ncclUniqueId);

impl UniqueId {
    /// Asks RCCL for a fresh id (`ncclGetUniqueId`).
    pub fn new() -> Result<UniqueId> {
        let api = rccl_sys::rccl()?;
        let raw = out("ncclGetUniqueId", |id: &mut ncclUniqueId| {
            // SAFETY: `id` is a valid out-pointer to a 128-byte id.
            unsafe { api.ncclGetUniqueId(id) }
        })?;
        Ok(UniqueId(raw))
    }

    /// The id's bytes, to send to the other ranks.
    pub fn to_bytes(&self) -> [u8; 128] {
        self.0.internal.map(|c| c as u8)
    }

    /// The id another rank sent as [`UniqueId::to_bytes`].
    pub fn from_bytes(bytes: [u8; 128]) -> UniqueId {
        UniqueId(ncclUniqueId {
            internal: bytes.map(|b| b as std::ffi::c_char),
        })
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UniqueId(..)")
    }
}

/// The reduction of a collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Elementwise sum.
    Sum,
    /// Elementwise product.
    Prod,
    /// Elementwise maximum.
    Max,
    /// Elementwise minimum.
    Min,
    /// Elementwise mean over the ranks.
    Avg,
}

impl ReduceOp {
    /// Every reduction.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Avg,
    ];

    fn raw(self) -> ncclRedOp_t {
        match self {
            ReduceOp::Sum => ncclRedOp_t::ncclSum,
            ReduceOp::Prod => ncclRedOp_t::ncclProd,
            ReduceOp::Max => ncclRedOp_t::ncclMax,
            ReduceOp::Min => ncclRedOp_t::ncclMin,
            ReduceOp::Avg => ncclRedOp_t::ncclAvg,
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Element types RCCL reduces and moves.
pub trait CommType: DeviceRepr + sealed::Sealed {
    /// RCCL's name for the type.
    const DATATYPE: ncclDataType_t;
    /// Short name for messages.
    const NAME: &'static str;
}

macro_rules! comm_types {
    ($($t:ty => $raw:ident, $name:literal;)*) => {$(
        impl sealed::Sealed for $t {}
        impl CommType for $t {
            const DATATYPE: ncclDataType_t = ncclDataType_t::$raw;
            const NAME: &'static str = $name;
        }
    )*};
}

comm_types! {
    i8 => ncclInt8, "i8";
    u8 => ncclUint8, "u8";
    i32 => ncclInt32, "i32";
    u32 => ncclUint32, "u32";
    i64 => ncclInt64, "i64";
    u64 => ncclUint64, "u64";
    f16 => ncclFloat16, "f16";
    f32 => ncclFloat32, "f32";
    f64 => ncclFloat64, "f64";
    bf16 => ncclBfloat16, "bf16";
}

/// One rank's communicator, bound to a stream of its device.
///
/// RCCL communicators must not be used by two threads at once, so the
/// handle is used under a mutex and a `Comm` may be shared.
pub struct Comm {
    api: &'static RcclApi,
    handle: Mutex<RawComm>,
    stream: Stream,
    rank: usize,
    world: usize,
}

struct RawComm(ncclComm_t);

// SAFETY: an RCCL communicator is not tied to the creating thread; it is
// only used while holding the mutex, so never concurrently.
unsafe impl Send for RawComm {}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Comm")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("stream", &self.stream)
            .finish()
    }
}

/// `value` as a C `int`, or an error naming `what`.
fn c_int_of(op: &str, what: &str, value: usize) -> Result<c_int> {
    c_int::try_from(value)
        .map_err(|_| Error::invalid(op, format_args!("{what} {value} is too large")))
}

impl Comm {
    /// Joins communicator `id` as `rank` of `world`, on `stream`'s device
    /// (`ncclCommInitRank`). Blocks until all `world` ranks have joined, so
    /// the ranks of one process call it from different threads.
    pub fn from_rank(stream: &Stream, rank: usize, world: usize, id: &UniqueId) -> Result<Comm> {
        let op = format!("ncclCommInitRank(rank {rank} of {world})");
        if rank >= world {
            return Err(Error::invalid(op, "the rank must be below the world size"));
        }
        let api = rccl_sys::rccl()?;
        let (nranks, rank_c) = (c_int_of(&op, "world", world)?, c_int_of(&op, "rank", rank)?);
        stream.bind()?;
        let raw = out_ptr(&op, |comm| {
            // SAFETY: valid out-pointer; the id is passed by value; the
            // stream's device is current on this thread.
            unsafe { api.ncclCommInitRank(comm, nranks, id.0, rank_c) }
        })?;
        Ok(Comm::wrap(api, raw, stream, rank, world))
    }

    /// The communicators of a clique of local devices, one per stream in
    /// rank order, created by one thread (`ncclCommInitAll`). Each stream
    /// must be on a different device.
    pub fn from_devices(streams: &[Stream]) -> Result<Vec<Comm>> {
        let op = format!("ncclCommInitAll({} devices)", streams.len());
        let mut ordinals = Vec::with_capacity(streams.len());
        for s in streams {
            let ordinal = c_int_of(&op, "device", s.device().ordinal())?;
            if ordinals.contains(&ordinal) {
                return Err(Error::invalid(
                    op,
                    format_args!("device {ordinal} appears twice"),
                ));
            }
            ordinals.push(ordinal);
        }
        if ordinals.is_empty() {
            return Err(Error::invalid(op, "no devices"));
        }
        let api = rccl_sys::rccl()?;
        let count = c_int_of(&op, "device count", ordinals.len())?;
        let mut raw = vec![std::ptr::null_mut(); ordinals.len()];
        // SAFETY: `raw` has room for one communicator per device and
        // `ordinals` lists `count` valid device ordinals.
        unsafe { api.ncclCommInitAll(raw.as_mut_ptr(), count, ordinals.as_ptr()) }.check(&op)?;
        let world = streams.len();
        Ok(raw
            .into_iter()
            .zip(streams)
            .enumerate()
            .map(|(rank, (comm, stream))| Comm::wrap(api, comm, stream, rank, world))
            .collect())
    }

    fn wrap(
        api: &'static RcclApi,
        raw: ncclComm_t,
        stream: &Stream,
        rank: usize,
        world: usize,
    ) -> Comm {
        Comm {
            api,
            handle: Mutex::new(RawComm(raw)),
            stream: stream.clone(),
            rank,
            world,
        }
    }

    /// This rank's number, `0..world_size()`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.world
    }

    /// The stream operations are queued on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The RCCL library's version number (`ncclGetVersion`, e.g. 22203 for
    /// NCCL API 2.22.3).
    pub fn version() -> Result<i32> {
        let api = rccl_sys::rccl()?;
        out("ncclGetVersion", |v: &mut c_int| {
            // SAFETY: valid out-pointer.
            unsafe { api.ncclGetVersion(v) }
        })
    }

    /// Runs `ops` between `ncclGroupStart` and `ncclGroupEnd`, so that the
    /// operations it issues (on several communicators of one thread, or
    /// matching sends and receives) are launched together. The group is
    /// always ended, also when `ops` fails.
    pub fn group<R>(ops: impl FnOnce() -> Result<R>) -> Result<R> {
        let api = rccl_sys::rccl()?;
        // SAFETY: no arguments; opens a group on this thread.
        unsafe { api.ncclGroupStart() }.check("ncclGroupStart")?;
        let result = ops();
        // SAFETY: closes the group opened above.
        let ended = unsafe { api.ncclGroupEnd() }.check("ncclGroupEnd");
        let value = result?;
        ended.map(|()| value)
    }

    /// `recv[i] = op over ranks of send[i]`, on every rank.
    pub fn all_reduce<T: CommType>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let what = self.describe::<T>("ncclAllReduce", send.len());
        self.expect_len(&what, "the receive buffer", recv.len(), send.len())?;
        let (src, dst, count) = (send.device_ptr(), recv.device_ptr_mut(), send.len());
        self.run(
            &what,
            &[send.stream(), recv.stream()],
            |api, comm, stream| {
                // SAFETY: both buffers hold `count` elements of T on this
                // communicator's device and stay alive until the operation is
                // done (their streams wait for it).
                unsafe { api.ncclAllReduce(src, dst, count, T::DATATYPE, op.raw(), comm, stream) }
            },
        )
    }

    /// [`Comm::all_reduce`] with `buf` as both input and output.
    pub fn all_reduce_in_place<T: CommType>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let what = self.describe::<T>("ncclAllReduce (in place)", buf.len());
        let (ptr, count) = (buf.device_ptr_mut(), buf.len());
        self.run(&what, &[buf.stream()], |api, comm, stream| {
            // SAFETY: as in `all_reduce`; RCCL allows send == recv.
            unsafe { api.ncclAllReduce(ptr, ptr, count, T::DATATYPE, op.raw(), comm, stream) }
        })
    }

    /// Copies `buf` of rank `root` into `buf` of every rank.
    pub fn broadcast<T: CommType>(
        &self,
        buf: &mut impl DevicePtrMut<T>,
        root: usize,
    ) -> Result<()> {
        let what = self.describe::<T>(&format!("ncclBroadcast(root {root})"), buf.len());
        let root = self.check_peer(&what, "root", root)?;
        let (ptr, count) = (buf.device_ptr_mut(), buf.len());
        self.run(&what, &[buf.stream()], |api, comm, stream| {
            // SAFETY: `buf` holds `count` elements on this device (in place).
            unsafe { api.ncclBroadcast(ptr, ptr, count, T::DATATYPE, root, comm, stream) }
        })
    }

    /// `recv[i] = op over ranks of send[i]` on rank `root` only; `recv` is
    /// not written on the other ranks (but must have the same length).
    pub fn reduce<T: CommType>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        let what = self.describe::<T>(&format!("ncclReduce(root {root})"), send.len());
        let root = self.check_peer(&what, "root", root)?;
        self.expect_len(&what, "the receive buffer", recv.len(), send.len())?;
        let (src, dst, count) = (send.device_ptr(), recv.device_ptr_mut(), send.len());
        self.run(
            &what,
            &[send.stream(), recv.stream()],
            |api, comm, stream| {
                // SAFETY: as in `all_reduce`.
                unsafe {
                    api.ncclReduce(src, dst, count, T::DATATYPE, op.raw(), root, comm, stream)
                }
            },
        )
    }

    /// Every rank's `send`, concatenated in rank order into `recv`
    /// (`world_size() * send.len()` elements) on every rank.
    pub fn all_gather<T: CommType>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        let what = self.describe::<T>("ncclAllGather", send.len());
        let total = self.times_world(&what, send.len())?;
        self.expect_len(&what, "the receive buffer", recv.len(), total)?;
        let (src, dst, count) = (send.device_ptr(), recv.device_ptr_mut(), send.len());
        self.run(
            &what,
            &[send.stream(), recv.stream()],
            |api, comm, stream| {
                // SAFETY: `send` holds `count` and `recv` `world * count`
                // elements on this device.
                unsafe { api.ncclAllGather(src, dst, count, T::DATATYPE, comm, stream) }
            },
        )
    }

    /// The reduction over ranks of `send` (`world_size() * recv.len()`
    /// elements), of which rank `r` receives block `r` in `recv`.
    pub fn reduce_scatter<T: CommType>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let what = self.describe::<T>("ncclReduceScatter", send.len());
        let total = self.times_world(&what, recv.len())?;
        self.expect_len(&what, "the send buffer", send.len(), total)?;
        let (src, dst, count) = (send.device_ptr(), recv.device_ptr_mut(), recv.len());
        self.run(
            &what,
            &[send.stream(), recv.stream()],
            |api, comm, stream| {
                // SAFETY: `send` holds `world * count` and `recv` `count`
                // elements on this device.
                unsafe {
                    api.ncclReduceScatter(src, dst, count, T::DATATYPE, op.raw(), comm, stream)
                }
            },
        )
    }

    /// Sends `buf` to rank `peer`, which must post a matching
    /// [`Comm::recv`]. Pairs of sends and receives between two ranks belong
    /// in one [`Comm::group`] on each side.
    pub fn send<T: CommType>(&self, buf: &impl DevicePtr<T>, peer: usize) -> Result<()> {
        let what = self.describe::<T>(&format!("ncclSend(to rank {peer})"), buf.len());
        let peer = self.check_peer(&what, "peer", peer)?;
        let (ptr, count) = (buf.device_ptr(), buf.len());
        self.run(&what, &[buf.stream()], |api, comm, stream| {
            // SAFETY: `buf` holds `count` elements on this device.
            unsafe { api.ncclSend(ptr, count, T::DATATYPE, peer, comm, stream) }
        })
    }

    /// Receives into `buf` what rank `peer` sends with [`Comm::send`].
    pub fn recv<T: CommType>(&self, buf: &mut impl DevicePtrMut<T>, peer: usize) -> Result<()> {
        let what = self.describe::<T>(&format!("ncclRecv(from rank {peer})"), buf.len());
        let peer = self.check_peer(&what, "peer", peer)?;
        let (ptr, count) = (buf.device_ptr_mut(), buf.len());
        self.run(&what, &[buf.stream()], |api, comm, stream| {
            // SAFETY: `buf` holds `count` elements on this device.
            unsafe { api.ncclRecv(ptr, count, T::DATATYPE, peer, comm, stream) }
        })
    }

    /// Aborts the communicator (`ncclCommAbort`): operations in flight on
    /// any rank stop waiting for this one, and every later operation on this
    /// `Comm` is an error. Meant for a rank that failed, so that the others
    /// do not wait for it forever; may be called from any thread.
    pub fn abort(&self) -> Result<()> {
        let mut handle = self
            .handle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if handle.0.is_null() {
            return Ok(());
        }
        let raw = std::mem::replace(&mut handle.0, std::ptr::null_mut());
        // SAFETY: a live communicator, released here exactly once (the slot
        // is null from now on, so neither `run` nor `Drop` use it again).
        unsafe { self.api.ncclCommAbort(raw) }.check(format_args!(
            "ncclCommAbort on rank {} of {}",
            self.rank, self.world
        ))
    }

    fn describe<T: CommType>(&self, op: &str, len: usize) -> String {
        format!(
            "{op} of {len} {} on rank {} of {}",
            T::NAME,
            self.rank,
            self.world
        )
    }

    fn expect_len(&self, what: &str, which: &str, got: usize, want: usize) -> Result<()> {
        if got == want {
            Ok(())
        } else {
            Err(Error::invalid(
                what,
                format_args!("{which} holds {got} elements, {want} are needed"),
            ))
        }
    }

    fn times_world(&self, what: &str, len: usize) -> Result<usize> {
        len.checked_mul(self.world)
            .ok_or_else(|| Error::invalid(what, "the element count overflows"))
    }

    fn check_peer(&self, what: &str, role: &str, rank: usize) -> Result<c_int> {
        if rank >= self.world {
            return Err(Error::invalid(
                what,
                format_args!("{role} {rank} is not a rank of a world of {}", self.world),
            ));
        }
        c_int_of(what, role, rank)
    }

    /// Queues one RCCL operation on this communicator's stream, after the
    /// work queued on `operands` (which must be on this device), and makes
    /// their streams wait for it.
    fn run(
        &self,
        what: &str,
        operands: &[&Stream],
        call: impl FnOnce(&'static RcclApi, ncclComm_t, hipStream_t) -> Call<ncclResult_t>,
    ) -> Result<()> {
        for s in operands {
            if s.device() != self.stream.device() {
                return Err(Error::invalid(
                    what,
                    format_args!(
                        "a buffer lives on device {}, the communicator on device {}",
                        s.device().ordinal(),
                        self.stream.device().ordinal()
                    ),
                ));
            }
            self.stream.join(s)?;
        }
        self.stream.bind()?;
        let handle = self
            .handle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if handle.0.is_null() {
            return Err(Error::invalid(what, "the communicator was aborted"));
        }
        let queued = call(self.api, handle.0, self.stream.raw()).check(what);
        drop(handle);
        let mut joined = Ok(());
        for s in operands {
            joined = joined.and(s.join_back(&self.stream));
        }
        queued.and(joined)
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        let handle = self
            .handle
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if handle.0.is_null() {
            return;
        }
        // Operations queued on the communicator must finish before it goes.
        let _ = self.stream.synchronize();
        // SAFETY: the communicator is live and no operation is in flight; a
        // failure only leaks it.
        unsafe { self.api.ncclCommDestroy(handle.0) }.discard();
    }
}
