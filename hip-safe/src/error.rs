//! Error types: one per library, and the crate-level [`Error`] that wraps them.
//!
//! Every error carries the operation that failed (with sizes or dtypes where
//! they matter) and, for library failures, the library's numeric code and its
//! own name/message for it.

use std::fmt;

use hip_sys::{LoadError, MissingSymbol, hipError_t};

use crate::bundle::BundleError;

/// The crate-wide result type.
pub type Result<T> = std::result::Result<T, Error>;

/// A failed HIP runtime call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HipError {
    /// The device could not satisfy an allocation (`hipErrorOutOfMemory`).
    #[error("{op}: out of device memory (hipErrorOutOfMemory, code 2)")]
    OutOfMemory {
        /// What was attempted, e.g. `hipMalloc of 1125899906842624 bytes`.
        op: String,
    },
    /// Any other failing status.
    #[error("{op}: {name} (code {code}): {message}")]
    Failed {
        /// What was attempted.
        op: String,
        /// The raw `hipError_t` value.
        code: u32,
        /// The runtime's name for the code (`hipGetErrorName`).
        name: String,
        /// The runtime's description (`hipGetErrorString`).
        message: String,
    },
}

impl HipError {
    /// The raw status code.
    pub fn code(&self) -> hipError_t {
        match self {
            HipError::OutOfMemory { .. } => hipError_t::hipErrorOutOfMemory,
            HipError::Failed { code, .. } => hipError_t(*code),
        }
    }
}

/// A failed hipRTC call or compilation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RtcError {
    /// The source did not compile; `log` is the compiler's full output.
    #[error("hipRTC compilation of `{program}` for {arch} failed (code {code}):\n{log}")]
    Compilation {
        /// The program name given to [`crate::Program::new`].
        program: String,
        /// The target architecture.
        arch: String,
        /// The raw `hiprtcResult`.
        code: u32,
        /// The complete compile log.
        log: String,
    },
    /// The architecture is not one hipRTC can compile for. Checked before
    /// compiling because real hipRTC aborts the process on an unknown arch.
    #[error("architecture `{arch}` is not supported by hipRTC: {reason}")]
    UnsupportedArch {
        /// The rejected architecture name.
        arch: String,
        /// Why it was rejected, with the accepted names.
        reason: String,
    },
    /// Any other failing hipRTC call.
    #[error("{op}: {message} (hiprtcResult {code})")]
    Failed {
        /// What was attempted.
        op: String,
        /// The raw `hiprtcResult`.
        code: u32,
        /// hipRTC's description (`hiprtcGetErrorString`).
        message: String,
    },
}

/// A failed rocBLAS call or an argument rejected before calling rocBLAS.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BlasError {
    /// rocBLAS returned an error status.
    #[error("{op}: {message} (rocblas_status {code})")]
    Failed {
        /// What was attempted, with shapes and dtype.
        op: String,
        /// The raw `rocblas_status`.
        code: u32,
        /// rocBLAS's description (`rocblas_status_to_string`).
        message: String,
    },
    /// The shapes, leading dimensions, strides or buffer sizes are inconsistent.
    #[error("{op}: invalid arguments: {reason}")]
    InvalidArgument {
        /// What was attempted, with shapes and dtype.
        op: String,
        /// What is wrong.
        reason: String,
    },
}

/// A failed MIOpen call or an argument rejected before calling MIOpen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DnnError {
    /// MIOpen returned an error status.
    #[error("{op}: {message} (miopenStatus {code})")]
    Failed {
        /// What was attempted, with shapes and dtype.
        op: String,
        /// The raw `miopenStatus_t`.
        code: u32,
        /// MIOpen's description (`miopenGetErrorString`).
        message: String,
    },
    /// The shapes or convolution parameters are inconsistent.
    #[error("{op}: invalid arguments: {reason}")]
    InvalidArgument {
        /// What was attempted.
        op: String,
        /// What is wrong.
        reason: String,
    },
}

/// A failed RCCL call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommError {
    /// RCCL returned an error status.
    #[error("{op}: {message} (ncclResult_t {code})")]
    Failed {
        /// What was attempted, with rank, element count and dtype.
        op: String,
        /// The raw `ncclResult_t`.
        code: u32,
        /// RCCL's description (`ncclGetErrorString`).
        message: String,
    },
}

/// Every error this crate returns.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A ROCm library could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The loaded library lacks a function this call needs (an older release).
    #[error(transparent)]
    MissingSymbol(#[from] MissingSymbol),
    /// The HIP runtime failed.
    #[error(transparent)]
    Hip(#[from] HipError),
    /// hipRTC failed.
    #[error(transparent)]
    Rtc(#[from] RtcError),
    /// rocBLAS failed.
    #[error(transparent)]
    Blas(#[from] BlasError),
    /// MIOpen failed.
    #[error(transparent)]
    Dnn(#[from] DnnError),
    /// RCCL failed.
    #[error(transparent)]
    Comm(#[from] CommError),
    /// A code bundle could not be read, parsed or written.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// An argument was rejected before any library call (lengths, ranges,
    /// devices that do not match).
    #[error("{op}: {reason}")]
    InvalidArgument {
        /// What was attempted.
        op: String,
        /// What is wrong.
        reason: String,
    },
}

impl Error {
    /// True when the device ran out of memory.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Error::Hip(HipError::OutOfMemory { .. }))
    }

    pub(crate) fn invalid(op: impl fmt::Display, reason: impl fmt::Display) -> Self {
        Error::InvalidArgument {
            op: op.to_string(),
            reason: reason.to_string(),
        }
    }
}
