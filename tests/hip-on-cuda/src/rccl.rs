//! RCCL on NCCL: RCCL is AMD's port of NCCL and keeps its C API, so every
//! call forwards to the function of the same name in `libnccl.so.2`, loaded
//! at run time (PyTorch's wheel ships one: put its folder on
//! `LD_LIBRARY_PATH`, or name the file in `HIP_ON_CUDA_NCCL`).
//!
//! What is translated: HIP streams are CUDA streams and communicators are
//! NCCL's own handles, passed through; data types and reductions go through
//! explicit tables (their numbers coincide today); device ordinals are HIP
//! ordinals on our side and CUDA ordinals on NCCL's (`HIP_VISIBLE_DEVICES`),
//! and the context of the HIP device current on the calling thread is made
//! current first, because NCCL works on the current CUDA context. A missing NCCL is
//! `ncclSystemError`, with the loader's message in `ncclGetLastError`.

use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::OnceLock;

use hip_sys::hipStream_t;
use hip_sys::loader::{self, LibrarySpec};
use rccl_sys::{RcclApi, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclUniqueId};

use crate::ffi::{FfiReturn, Status};
use crate::hip::context::{cuda_ordinal, ensure_current, hip_ordinal};

/// NCCL: the override variable and its file name.
const NCCL_LIBRARY: LibrarySpec = LibrarySpec {
    name: "libnccl",
    description: "NCCL",
    override_var: "HIP_ON_CUDA_NCCL",
    file_names: &["libnccl.so.2"],
    identifying_symbols: &["ncclGetVersion", "ncclCommInitRank"],
};

type RcclResult = Result<(), ncclResult_t>;

impl FfiReturn for ncclResult_t {
    fn panicked() -> Self {
        ncclResult_t::ncclInternalError
    }
}

impl Status for ncclResult_t {
    const SUCCESS: Self = ncclResult_t::ncclSuccess;
}

thread_local! {
    /// The last failure of this shim on this thread (not NCCL's own).
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Records `message` for `ncclGetLastError` and returns `status`.
fn fail(status: ncclResult_t, message: String) -> ncclResult_t {
    let text = CString::new(message).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = Some(text));
    status
}

/// NCCL's functions, loaded on first use.
fn nccl() -> Result<&'static RcclApi, ncclResult_t> {
    static API: OnceLock<Result<RcclApi, String>> = OnceLock::new();
    API.get_or_init(|| {
        let candidates = loader::candidates(&NCCL_LIBRARY, &[], true);
        loader::open(&NCCL_LIBRARY, candidates, Vec::new())
            .map(RcclApi::from_library)
            .map_err(|e| e.summary())
    })
    .as_ref()
    .map_err(|e| fail(ncclResult_t::ncclSystemError, format!("hip-on-cuda: {e}")))
}

/// Runs one NCCL call on the current HIP device's context.
fn forward(
    call: impl FnOnce(&'static RcclApi) -> Result<ncclResult_t, hip_sys::MissingSymbol>,
) -> RcclResult {
    let api = nccl()?;
    ensure_current().map_err(|e| {
        fail(
            ncclResult_t::ncclUnhandledCudaError,
            format!("hip-on-cuda: binding the current device failed ({})", e.0),
        )
    })?;
    match call(api) {
        Ok(ncclResult_t::ncclSuccess) => Ok(()),
        Ok(status) => Err(status),
        Err(missing) => Err(fail(
            ncclResult_t::ncclSystemError,
            format!("hip-on-cuda: {missing}"),
        )),
    }
}

/// RCCL's data type as NCCL numbers it.
fn data_type(t: ncclDataType_t) -> Result<ncclDataType_t, ncclResult_t> {
    use ncclDataType_t as T;
    let nccl = match t {
        T::ncclInt8 => 0,
        T::ncclUint8 => 1,
        T::ncclInt32 => 2,
        T::ncclUint32 => 3,
        T::ncclInt64 => 4,
        T::ncclUint64 => 5,
        T::ncclFloat16 => 6,
        T::ncclFloat32 => 7,
        T::ncclFloat64 => 8,
        T::ncclBfloat16 => 9,
        T::ncclFloat8e4m3 => 10,
        T::ncclFloat8e5m2 => 11,
        other => {
            return Err(fail(
                ncclResult_t::ncclInvalidArgument,
                format!("hip-on-cuda: unknown ncclDataType_t {}", other.0),
            ));
        }
    };
    Ok(ncclDataType_t(nccl))
}

/// RCCL's built-in reduction as NCCL numbers it.
fn red_op(op: ncclRedOp_t) -> Result<ncclRedOp_t, ncclResult_t> {
    use ncclRedOp_t as O;
    let nccl = match op {
        O::ncclSum => 0,
        O::ncclProd => 1,
        O::ncclMax => 2,
        O::ncclMin => 3,
        O::ncclAvg => 4,
        other => {
            return Err(fail(
                ncclResult_t::ncclInvalidArgument,
                format!("hip-on-cuda: reduction {} is not built in", other.0),
            ));
        }
    };
    Ok(ncclRedOp_t(nccl))
}

/// `ncclGetVersion`: NCCL's version number.
pub(crate) unsafe fn ncclGetVersion(version: *mut c_int) -> RcclResult {
    // SAFETY: forwarded out-pointer.
    forward(|api| unsafe { api.ncclGetVersion(version) })
}

/// `ncclGetErrorString`: NCCL's text for a code.
pub(crate) unsafe fn ncclGetErrorString(result: ncclResult_t) -> *const c_char {
    match nccl().map(|api| {
        // SAFETY: takes any code, returns a static string.
        unsafe { api.ncclGetErrorString(result) }
    }) {
        Ok(Ok(text)) => text,
        _ => c"NCCL is not available (hip-on-cuda)".as_ptr(),
    }
}

/// `ncclGetLastError`: this shim's last failure on this thread, else NCCL's.
pub(crate) unsafe fn ncclGetLastError(comm: ncclComm_t) -> *const c_char {
    let own = LAST_ERROR.with(|e| e.borrow().as_ref().map(|t| t.as_ptr()));
    if let Some(text) = own {
        // The string lives in this thread's slot until the next failure.
        return text;
    }
    match nccl().map(|api| {
        // SAFETY: a null or live communicator; returns a string NCCL owns.
        unsafe { api.ncclGetLastError(comm) }
    }) {
        Ok(Ok(text)) => text,
        _ => c"".as_ptr(),
    }
}

/// `ncclGetUniqueId`.
pub(crate) unsafe fn ncclGetUniqueId(id: *mut ncclUniqueId) -> RcclResult {
    // SAFETY: forwarded out-pointer.
    forward(|api| unsafe { api.ncclGetUniqueId(id) })
}

/// `ncclCommInitRank`: on the calling thread's current HIP device.
pub(crate) unsafe fn ncclCommInitRank(
    comm: *mut ncclComm_t,
    nranks: c_int,
    id: ncclUniqueId,
    rank: c_int,
) -> RcclResult {
    // SAFETY: forwarded arguments.
    forward(|api| unsafe { api.ncclCommInitRank(comm, nranks, id, rank) })
}

/// `ncclCommInitAll`: HIP ordinals in `devlist` become CUDA ordinals.
pub(crate) unsafe fn ncclCommInitAll(
    comm: *mut ncclComm_t,
    ndev: c_int,
    devlist: *const c_int,
) -> RcclResult {
    let count = usize::try_from(ndev).map_err(|_| ncclResult_t::ncclInvalidArgument)?;
    let devices: Vec<c_int> = if devlist.is_null() {
        (0..ndev).collect()
    } else {
        // SAFETY: the caller passes `ndev` ordinals.
        unsafe { std::slice::from_raw_parts(devlist, count) }.to_vec()
    };
    let cuda = devices
        .iter()
        .map(|&d| cuda_ordinal(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| {
            fail(
                ncclResult_t::ncclInvalidArgument,
                format!(
                    "hip-on-cuda: ncclCommInitAll: {devices:?} names a device that is not visible"
                ),
            )
        })?;
    // SAFETY: `comm` has room for `ndev` handles; `cuda` holds `ndev` ordinals.
    forward(|api| unsafe { api.ncclCommInitAll(comm, ndev, cuda.as_ptr()) })
}

/// `ncclCommDestroy`.
pub(crate) unsafe fn ncclCommDestroy(comm: ncclComm_t) -> RcclResult {
    // SAFETY: forwarded handle.
    forward(|api| unsafe { api.ncclCommDestroy(comm) })
}

/// `ncclCommAbort`.
pub(crate) unsafe fn ncclCommAbort(comm: ncclComm_t) -> RcclResult {
    // SAFETY: forwarded handle.
    forward(|api| unsafe { api.ncclCommAbort(comm) })
}

/// `ncclCommGetAsyncError`.
pub(crate) unsafe fn ncclCommGetAsyncError(
    comm: ncclComm_t,
    async_error: *mut ncclResult_t,
) -> RcclResult {
    // SAFETY: forwarded handle and out-pointer.
    forward(|api| unsafe { api.ncclCommGetAsyncError(comm, async_error) })
}

/// `ncclCommCount`.
pub(crate) unsafe fn ncclCommCount(comm: ncclComm_t, count: *mut c_int) -> RcclResult {
    // SAFETY: forwarded handle and out-pointer.
    forward(|api| unsafe { api.ncclCommCount(comm, count) })
}

/// `ncclCommCuDevice`: the communicator's device as a HIP ordinal.
pub(crate) unsafe fn ncclCommCuDevice(comm: ncclComm_t, device: *mut c_int) -> RcclResult {
    if device.is_null() {
        return Err(ncclResult_t::ncclInvalidArgument);
    }
    let mut cuda = 0;
    // SAFETY: forwarded handle; valid out-pointer.
    forward(|api| unsafe { api.ncclCommCuDevice(comm, &mut cuda) })?;
    let hip = hip_ordinal(cuda).map_err(|_| ncclResult_t::ncclInternalError)?;
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { device.write(hip) };
    Ok(())
}

/// `ncclCommUserRank`.
pub(crate) unsafe fn ncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) -> RcclResult {
    // SAFETY: forwarded handle and out-pointer.
    forward(|api| unsafe { api.ncclCommUserRank(comm, rank) })
}

/// `ncclAllReduce`.
pub(crate) unsafe fn ncclAllReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: hipStream_t,
) -> RcclResult {
    let (t, o) = (data_type(datatype)?, red_op(op)?);
    // SAFETY: forwarded; HIP streams are CUDA streams.
    forward(|api| unsafe { api.ncclAllReduce(send, recv, count, t, o, comm, stream) })
}

/// `ncclBroadcast`.
pub(crate) unsafe fn ncclBroadcast(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: hipStream_t,
) -> RcclResult {
    let t = data_type(datatype)?;
    // SAFETY: forwarded; HIP streams are CUDA streams.
    forward(|api| unsafe { api.ncclBroadcast(send, recv, count, t, root, comm, stream) })
}

/// `ncclReduce`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn ncclReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    root: c_int,
    comm: ncclComm_t,
    stream: hipStream_t,
) -> RcclResult {
    let (t, o) = (data_type(datatype)?, red_op(op)?);
    // SAFETY: forwarded; HIP streams are CUDA streams.
    forward(|api| unsafe { api.ncclReduce(send, recv, count, t, o, root, comm, stream) })
}

/// `ncclAllGather`.
pub(crate) unsafe fn ncclAllGather(
    send: *const c_void,
    recv: *mut c_void,
    send_count: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: hipStream_t,
) -> RcclResult {
    let t = data_type(datatype)?;
    // SAFETY: forwarded; HIP streams are CUDA streams.
    forward(|api| unsafe { api.ncclAllGather(send, recv, send_count, t, comm, stream) })
}

/// `ncclReduceScatter`.
pub(crate) unsafe fn ncclReduceScatter(
    send: *const c_void,
    recv: *mut c_void,
    recv_count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: hipStream_t,
) -> RcclResult {
    let (t, o) = (data_type(datatype)?, red_op(op)?);
    // SAFETY: forwarded; HIP streams are CUDA streams.
    forward(|api| unsafe { api.ncclReduceScatter(send, recv, recv_count, t, o, comm, stream) })
}

/// `ncclSend`.
pub(crate) unsafe fn ncclSend(
    send: *const c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: hipStream_t,
) -> RcclResult {
    let t = data_type(datatype)?;
    // SAFETY: forwarded; HIP streams are CUDA streams.
    forward(|api| unsafe { api.ncclSend(send, count, t, peer, comm, stream) })
}

/// `ncclRecv`.
pub(crate) unsafe fn ncclRecv(
    recv: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: hipStream_t,
) -> RcclResult {
    let t = data_type(datatype)?;
    // SAFETY: forwarded; HIP streams are CUDA streams.
    forward(|api| unsafe { api.ncclRecv(recv, count, t, peer, comm, stream) })
}

/// `ncclGroupStart`.
pub(crate) unsafe fn ncclGroupStart() -> RcclResult {
    // SAFETY: no arguments.
    forward(|api| unsafe { api.ncclGroupStart() })
}

/// `ncclGroupEnd`. NCCL may leave another device's context current (it
/// launches on every communicator's device); the next HIP call binds the
/// thread's HIP device again (`ensure_current` compares with the driver).
pub(crate) unsafe fn ncclGroupEnd() -> RcclResult {
    // SAFETY: no arguments.
    forward(|api| unsafe { api.ncclGroupEnd() })
}
