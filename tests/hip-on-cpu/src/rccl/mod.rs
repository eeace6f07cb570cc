//! RCCL (NCCL's C API) on the host, for ranks that are threads of this
//! process, each on one emulated device.
//!
//! - Communicators ([`comm`]): `ncclCommInitRank` meets the other ranks of
//!   its unique id (bounded wait), `ncclCommInitAll` makes a clique at once.
//!   A rank's device is the calling thread's current HIP device.
//! - Collectives ([`collective`](mod@collective)) meet per sequence number; the last rank
//!   to arrive runs the whole operation for all ranks, in the data type
//!   ([`dtype`]: rank-order reductions), after checking that the ranks
//!   agree (`ncclInvalidUsage` on all of them otherwise).
//! - Send and receive ([`p2p`]) go through per-pair FIFO mailboxes.
//! - Groups ([`group`]) queue operations per thread and run them at the
//!   outermost `ncclGroupEnd` in an order that cannot deadlock.
//! - Every wait for other ranks is bounded ([`wait`]): `ncclRemoteError`
//!   after `HIP_ON_CPU_RCCL_TIMEOUT_S` seconds (60 by default).
//!
//! Work runs at the call, as every stream operation of this platform does,
//! so any stream of the shim is accepted, except a capturing one: RCCL
//! calls are not recorded into graphs here (`ncclInvalidUsage`). Buffers must lie inside device
//! buffers of the communicator's device. Argument errors return
//! `ncclInvalidArgument` and set the message of `ncclGetLastError`.

mod buffer;
mod collective;
mod comm;
mod dtype;
mod group;
mod p2p;
pub(crate) mod status;
pub(crate) mod wait;

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

use hip_sys::hipStream_t;
use rccl_sys::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclUniqueId};

use self::collective::{Collective, Kind};
use self::comm::{Comm, lookup};
use self::dtype::{DataType, RedOp};
use self::group::Task;
use self::status::{Failure, NcclResult, report};
use crate::ffi::write_out;
use crate::hip::device::{check_ordinal, current};

/// The version `ncclGetVersion` reports: RCCL 2.22.3's API number
/// (major * 10000 + minor * 100 + patch), the NCCL API level of ROCm 6.4,
/// whose HIP API this platform reports too. Every function bound here
/// exists at that level.
const VERSION: c_int = 22_203;

/// The result type of the exported functions.
type CResult = Result<(), ncclResult_t>;

/// Writes through an out-pointer; null is `ncclInvalidArgument`.
///
/// # Safety
/// `out` must be null or valid for a write of one `T`.
unsafe fn put<T>(out: *mut T, value: T, what: &str) -> NcclResult {
    let null = Failure::argument(format_args!("{what} is null"));
    // SAFETY: per the contract.
    unsafe { write_out(out, value, null) }
}

/// `ncclGetVersion`.
pub(crate) unsafe fn ncclGetVersion(version: *mut c_int) -> CResult {
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe { put(version, VERSION, "version") }.map_err(report)
}

/// `ncclGetErrorString`: a static string for every status.
pub(crate) unsafe fn ncclGetErrorString(result: ncclResult_t) -> *const c_char {
    status::error_string(result).as_ptr()
}

/// `ncclGetLastError`: the calling thread's last error message (see
/// [`status::last_error`] for the pointer's lifetime).
pub(crate) unsafe fn ncclGetLastError(_comm: ncclComm_t) -> *const c_char {
    status::last_error()
}

/// Prefix of every unique id this implementation makes.
const ID_MAGIC: &[u8; 16] = b"hip-on-cpu rccl\0";

/// `ncclGetUniqueId`: a fresh id: a marker, the process id and a counter.
pub(crate) unsafe fn ncclGetUniqueId(id: *mut ncclUniqueId) -> CResult {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0_u8; 128];
    bytes[..16].copy_from_slice(ID_MAGIC);
    bytes[16..20].copy_from_slice(&std::process::id().to_le_bytes());
    bytes[24..32].copy_from_slice(&NEXT.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    let value = ncclUniqueId {
        internal: bytes.map(|b| b as c_char),
    };
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe { put(id, value, "uniqueId") }.map_err(report)
}

/// The calling thread's current HIP device, for a new communicator.
fn current_device() -> NcclResult<c_int> {
    current().map_err(|e| {
        Failure::new(
            ncclResult_t::ncclUnhandledCudaError,
            format_args!("no current HIP device ({})", e.0),
        )
    })
}

/// `ncclCommInitRank`: joins `comm_id` as `rank` of `nranks`, on the
/// calling thread's current device, once every rank has joined. Joining
/// several ranks from one thread inside a group is not modelled
/// (`ncclInvalidUsage`): use `ncclCommInitAll` or one thread per rank.
pub(crate) unsafe fn ncclCommInitRank(
    comm: *mut ncclComm_t,
    nranks: c_int,
    comm_id: ncclUniqueId,
    rank: c_int,
) -> CResult {
    let run = || -> NcclResult {
        if comm.is_null() {
            return Err(Failure::argument("comm is null"));
        }
        if group::in_group() {
            return Err(Failure::usage(
                "ncclCommInitRank inside a group is not modelled by the hip-on-cpu RCCL",
            ));
        }
        let device = current_device()?;
        let id = comm_id.internal.map(|c| c as u8);
        let handle = comm::init_rank(nranks, id, rank, device)?;
        // SAFETY: checked non-null; the caller passes room for a handle.
        unsafe { put(comm, handle, "comm") }
    };
    run().map_err(report)
}

/// `ncclCommInitAll`: `ndev` communicators of one clique, rank `i` on
/// `devlist[i]` (devices `0..ndev` when `devlist` is null), which must be
/// distinct visible devices.
pub(crate) unsafe fn ncclCommInitAll(
    comms: *mut ncclComm_t,
    ndev: c_int,
    devlist: *const c_int,
) -> CResult {
    let run = || -> NcclResult {
        if comms.is_null() {
            return Err(Failure::argument("comms is null"));
        }
        let n = comm::check_nranks(ndev)?;
        let devices: Vec<c_int> = if devlist.is_null() {
            (0..ndev).collect()
        } else {
            // SAFETY: the caller passes `ndev` device numbers.
            unsafe { std::slice::from_raw_parts(devlist, n) }.to_vec()
        };
        for d in &devices {
            check_ordinal(*d).map_err(|_| {
                Failure::argument(format_args!("device {d} is not a visible HIP device"))
            })?;
        }
        let handles = comm::init_all(devices)?;
        for (i, handle) in handles.into_iter().enumerate() {
            // SAFETY: the caller passes room for `ndev` handles.
            unsafe { comms.add(i).write(handle) };
        }
        Ok(())
    };
    run().map_err(report)
}

/// `ncclCommDestroy`: frees the handle.
pub(crate) unsafe fn ncclCommDestroy(comm: ncclComm_t) -> CResult {
    comm::destroy(comm).map_err(report)
}

/// `ncclCommAbort`: as `ncclCommDestroy` (no operation is ever in flight
/// between calls on this platform).
pub(crate) unsafe fn ncclCommAbort(comm: ncclComm_t) -> CResult {
    comm::destroy(comm).map_err(report)
}

/// Answers a question about a live communicator through an out-pointer.
///
/// # Safety
/// `out` must be null or valid for a write of one `T`.
unsafe fn query<T>(
    comm: ncclComm_t,
    out: *mut T,
    what: &str,
    answer: impl Fn(&Comm) -> T,
) -> CResult {
    let run = || -> NcclResult {
        let comm = lookup(comm)?;
        // SAFETY: per the contract.
        unsafe { put(out, answer(&comm), what) }
    };
    run().map_err(report)
}

/// `ncclCommGetAsyncError`: always `ncclSuccess` (errors are returned by
/// the calls themselves).
pub(crate) unsafe fn ncclCommGetAsyncError(
    comm: ncclComm_t,
    async_error: *mut ncclResult_t,
) -> CResult {
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe {
        query(comm, async_error, "asyncError", |_| {
            ncclResult_t::ncclSuccess
        })
    }
}

/// `ncclCommCount`: the number of ranks.
pub(crate) unsafe fn ncclCommCount(comm: ncclComm_t, count: *mut c_int) -> CResult {
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe {
        query(comm, count, "count", |c| {
            c_int::try_from(c.nranks()).unwrap_or(c_int::MAX)
        })
    }
}

/// `ncclCommCuDevice`: the rank's HIP device.
pub(crate) unsafe fn ncclCommCuDevice(comm: ncclComm_t, device: *mut c_int) -> CResult {
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe { query(comm, device, "device", Comm::device) }
}

/// `ncclCommUserRank`: the rank.
pub(crate) unsafe fn ncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) -> CResult {
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe {
        query(comm, rank, "rank", |c| {
            c_int::try_from(c.rank).unwrap_or(c_int::MAX)
        })
    }
}

/// The C arguments of a collective.
struct CollectiveArgs {
    kind: Kind,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: ncclDataType_t,
    op: Option<ncclRedOp_t>,
    root: Option<c_int>,
}

/// Checks a collective's arguments on `comm`.
fn check_collective(comm: &Comm, args: &CollectiveArgs) -> NcclResult<Collective> {
    let dtype = DataType::from_raw(args.dtype)?;
    let op = args.op.map(RedOp::from_raw).transpose()?;
    let n = comm.nranks();
    let root = args
        .root
        .map(|r| {
            usize::try_from(r)
                .ok()
                .filter(|r| *r < n)
                .ok_or_else(|| Failure::argument(format_args!("root {r} is not in 0..{n}")))
        })
        .transpose()?;
    let call = Collective {
        kind: args.kind,
        count: args.count,
        dtype,
        op,
        root,
        send: args.send as usize,
        recv: args.recv as usize,
    };
    call.check(comm)?;
    Ok(call)
}

/// Issues a collective: runs it (outside a group) or queues it.
///
/// As in NCCL, a call whose arguments are refused is not issued (it takes
/// no sequence number, so the rank may retry), and calls with count 0 are
/// discarded after the checks.
fn collective(comm: ncclComm_t, args: CollectiveArgs) -> CResult {
    let run = || -> NcclResult {
        let comm = lookup(comm)?;
        let call = check_collective(&comm, &args).map_err(|failure| {
            Failure::new(
                failure.code,
                format_args!("{}: {}", args.kind.name(), failure.message),
            )
        })?;
        if call.count == 0 {
            return Ok(());
        }
        let seq = comm.next_seq();
        group::submit(Task::Collective { comm, seq, call })
    };
    run().map_err(|failure| {
        group::refused(&failure);
        report(failure)
    })
}

/// Refuses an RCCL call on a capturing stream with `ncclInvalidUsage`
/// (this platform does not record RCCL calls into graphs); the capture
/// goes on.
fn refuse_capture(name: &str, stream: hipStream_t) -> CResult {
    if !crate::hip::graph::is_capturing(stream) {
        return Ok(());
    }
    let failure = Failure::usage(format_args!(
        "{name}: the stream is capturing, and hip-on-cpu does not record RCCL calls into graphs"
    ));
    group::refused(&failure);
    Err(report(failure))
}

/// `ncclAllReduce`.
pub(crate) unsafe fn ncclAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: hipStream_t,
) -> CResult {
    refuse_capture("ncclAllReduce", stream)?;
    collective(
        comm,
        CollectiveArgs {
            kind: Kind::AllReduce,
            send: sendbuff,
            recv: recvbuff,
            count,
            dtype: datatype,
            op: Some(op),
            root: None,
        },
    )
}

/// `ncclBroadcast`.
pub(crate) unsafe fn ncclBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: hipStream_t,
) -> CResult {
    refuse_capture("ncclBroadcast", stream)?;
    collective(
        comm,
        CollectiveArgs {
            kind: Kind::Broadcast,
            send: sendbuff,
            recv: recvbuff,
            count,
            dtype: datatype,
            op: None,
            root: Some(root),
        },
    )
}

/// `ncclReduce`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn ncclReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    root: c_int,
    comm: ncclComm_t,
    stream: hipStream_t,
) -> CResult {
    refuse_capture("ncclReduce", stream)?;
    collective(
        comm,
        CollectiveArgs {
            kind: Kind::Reduce,
            send: sendbuff,
            recv: recvbuff,
            count,
            dtype: datatype,
            op: Some(op),
            root: Some(root),
        },
    )
}

/// `ncclAllGather`.
pub(crate) unsafe fn ncclAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: hipStream_t,
) -> CResult {
    refuse_capture("ncclAllGather", stream)?;
    collective(
        comm,
        CollectiveArgs {
            kind: Kind::AllGather,
            send: sendbuff,
            recv: recvbuff,
            count: sendcount,
            dtype: datatype,
            op: None,
            root: None,
        },
    )
}

/// `ncclReduceScatter`.
pub(crate) unsafe fn ncclReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: hipStream_t,
) -> CResult {
    refuse_capture("ncclReduceScatter", stream)?;
    collective(
        comm,
        CollectiveArgs {
            kind: Kind::ReduceScatter,
            send: sendbuff,
            recv: recvbuff,
            count: recvcount,
            dtype: datatype,
            op: Some(op),
            root: None,
        },
    )
}

/// Which way a point-to-point call goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Send,
    Recv,
}

/// Issues `ncclSend` or `ncclRecv` of `count` elements at `ptr` with rank
/// `peer`: runs it (outside a group) or queues it.
fn point_to_point(
    direction: Direction,
    ptr: usize,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
) -> CResult {
    let run = || -> NcclResult {
        let comm = lookup(comm)?;
        let dtype = DataType::from_raw(datatype)?;
        let n = comm.nranks();
        let peer = usize::try_from(peer)
            .ok()
            .filter(|p| *p < n)
            .ok_or_else(|| Failure::argument(format_args!("peer {peer} is not in 0..{n}")))?;
        let what = if direction == Direction::Send {
            "sendbuff"
        } else {
            "recvbuff"
        };
        let bytes = buffer::check(&comm, what, ptr, count, dtype)?;
        group::submit(match direction {
            Direction::Send => Task::Send {
                comm,
                peer,
                ptr,
                bytes,
            },
            Direction::Recv => Task::Recv {
                comm,
                peer,
                ptr,
                bytes,
            },
        })
    };
    run().map_err(|failure| {
        let name = if direction == Direction::Send {
            "ncclSend"
        } else {
            "ncclRecv"
        };
        let failure = Failure::new(failure.code, format_args!("{name}: {}", failure.message));
        group::refused(&failure);
        report(failure)
    })
}

/// `ncclSend`: never waits for the receiver (see [`p2p`]).
pub(crate) unsafe fn ncclSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: hipStream_t,
) -> CResult {
    refuse_capture("ncclSend", stream)?;
    point_to_point(
        Direction::Send,
        sendbuff as usize,
        count,
        datatype,
        peer,
        comm,
    )
}

/// `ncclRecv`: waits (bounded) for the matching send.
pub(crate) unsafe fn ncclRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: hipStream_t,
) -> CResult {
    refuse_capture("ncclRecv", stream)?;
    point_to_point(
        Direction::Recv,
        recvbuff as usize,
        count,
        datatype,
        peer,
        comm,
    )
}

/// `ncclGroupStart`.
pub(crate) unsafe fn ncclGroupStart() -> CResult {
    group::start();
    Ok(())
}

/// `ncclGroupEnd`: runs the group's operations at the outermost level.
pub(crate) unsafe fn ncclGroupEnd() -> CResult {
    group::end().map_err(report)
}
