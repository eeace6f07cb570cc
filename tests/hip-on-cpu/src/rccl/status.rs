//! RCCL status codes at the C boundary: failures with their messages, the
//! per-thread last error of `ncclGetLastError`, and the error strings.

use std::cell::RefCell;
use std::ffi::{CStr, c_char};
use std::fmt::Display;

use rccl_sys::ncclResult_t;

use crate::ffi::{FfiReturn, Status};

impl FfiReturn for ncclResult_t {
    fn panicked() -> Self {
        ncclResult_t::ncclInternalError
    }
}

impl Status for ncclResult_t {
    const SUCCESS: Self = ncclResult_t::ncclSuccess;
}

/// A failed RCCL call: its status and what went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The status returned to the caller.
    pub(crate) code: ncclResult_t,
    /// The message `ncclGetLastError` returns afterwards.
    pub(crate) message: String,
}

/// The result type of the RCCL implementation.
pub(crate) type NcclResult<T = ()> = Result<T, Failure>;

impl Failure {
    /// A failure with status `code`.
    pub(crate) fn new(code: ncclResult_t, message: impl Display) -> Failure {
        Failure {
            code,
            message: message.to_string(),
        }
    }

    /// `ncclInvalidArgument`: a bad argument of one call.
    pub(crate) fn argument(message: impl Display) -> Failure {
        Failure::new(ncclResult_t::ncclInvalidArgument, message)
    }

    /// `ncclInvalidUsage`: calls that do not fit together (ranks that
    /// disagree, a rank joining twice).
    pub(crate) fn usage(message: impl Display) -> Failure {
        Failure::new(ncclResult_t::ncclInvalidUsage, message)
    }

    /// `ncclRemoteError`: other ranks did not take part in time.
    pub(crate) fn remote(message: impl Display) -> Failure {
        Failure::new(ncclResult_t::ncclRemoteError, message)
    }
}

/// Size of the last-error buffer, terminator included (NCCL's is 1024).
const LAST_ERROR_BYTES: usize = 1024;

thread_local! {
    /// The message of the calling thread's last failed RCCL call.
    static LAST_ERROR: RefCell<[u8; LAST_ERROR_BYTES]> = const { RefCell::new([0; LAST_ERROR_BYTES]) };
}

/// Records `failure` as the calling thread's last error and returns its
/// status, for the C boundary.
pub(crate) fn report(failure: Failure) -> ncclResult_t {
    LAST_ERROR.with(|buf| {
        let mut buf = buf.borrow_mut();
        let text = failure.message.as_bytes();
        // Truncated on a byte boundary; the reader only needs a C string.
        let n = text.len().min(LAST_ERROR_BYTES - 1);
        buf[..n].copy_from_slice(&text[..n]);
        buf[n] = 0;
    });
    failure.code
}

/// `ncclGetLastError`: the calling thread's last error message (empty
/// before any). As in NCCL the pointer is to a per-thread buffer: it stays
/// valid for the thread's lifetime and is overwritten by its next error.
/// The communicator argument is not needed (errors are per thread).
pub(crate) fn last_error() -> *const c_char {
    LAST_ERROR.with(|buf| buf.as_ptr().cast::<c_char>().cast_const())
}

/// `ncclGetErrorString`: a static description of every status.
pub(crate) fn error_string(code: ncclResult_t) -> &'static CStr {
    match code {
        ncclResult_t::ncclSuccess => c"no error",
        ncclResult_t::ncclUnhandledCudaError => c"unhandled HIP runtime error",
        ncclResult_t::ncclSystemError => c"unhandled system error",
        ncclResult_t::ncclInternalError => c"internal error of the RCCL implementation",
        ncclResult_t::ncclInvalidArgument => c"invalid argument (see ncclGetLastError)",
        ncclResult_t::ncclInvalidUsage => c"invalid usage (see ncclGetLastError)",
        ncclResult_t::ncclRemoteError => {
            c"a remote rank failed or did not take part (see ncclGetLastError)"
        }
        ncclResult_t::ncclInProgress => c"operation in progress",
        _ => c"unknown result code",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_error_keeps_the_message() {
        let code = report(Failure::usage("ranks disagree"));
        assert_eq!(code, ncclResult_t::ncclInvalidUsage);
        // SAFETY: the thread's buffer is NUL-terminated.
        let text = unsafe { CStr::from_ptr(last_error()) };
        assert_eq!(text, c"ranks disagree");
        report(Failure::argument("x".repeat(5000)));
        // SAFETY: as above.
        let text = unsafe { CStr::from_ptr(last_error()) };
        assert_eq!(text.to_bytes().len(), LAST_ERROR_BYTES - 1);
    }

    #[test]
    fn every_status_has_a_string() {
        for code in 0..8 {
            let text = error_string(ncclResult_t(code));
            assert_ne!(text, c"unknown result code", "{code}");
        }
        assert_eq!(error_string(ncclResult_t(99)), c"unknown result code");
    }
}
