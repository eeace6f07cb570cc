//! Errors of the HIP backend and their conversion into candle's error type.

/// An error of the HIP backend. Converted into [`candle_core::Error`]
/// (as `Error::Wrapped`) at the trait boundary; dtype problems use candle's
/// own `UnsupportedDTypeForOp` and `DTypeMismatchBinaryOp` instead.
#[derive(Debug, thiserror::Error)]
pub enum HipBackendError {
    /// The HIP runtime, hipRTC or a kernel launch failed.
    #[error(transparent)]
    Hip(#[from] hip_safe::Error),
    /// After merging contiguous dimensions a layout still has more
    /// dimensions than the kernels take.
    #[error(
        "{op}: {rank} dimensions remain after merging contiguous ones (shape {shape:?}); \
         the HIP kernels take at most {max}"
    )]
    TooManyDims {
        /// The operation.
        op: &'static str,
        /// Dimensions after merging.
        rank: usize,
        /// The kernels' limit.
        max: usize,
        /// The original shape.
        shape: Vec<usize>,
    },
    /// A layout reaches past the end of its storage.
    #[error("{op}: the layout reaches elements {start}..{end} of a storage of {len} elements")]
    OutOfBounds {
        /// The operation.
        op: &'static str,
        /// First element reached.
        start: usize,
        /// One past the last element reached.
        end: usize,
        /// Elements in the storage.
        len: usize,
    },
    /// A size, offset or span computed from a layout or an argument does
    /// not fit the address range.
    #[error("{op}: {what} overflows the address range")]
    SizeOverflow {
        /// The operation.
        op: &'static str,
        /// The values whose arithmetic overflowed.
        what: String,
    },
    /// Two storages of one operation live on different devices.
    #[error("{op}: the operands live on different HIP devices ({lhs} and {rhs})")]
    DeviceMismatch {
        /// The operation.
        op: &'static str,
        /// Ordinal of the first device.
        lhs: usize,
        /// Ordinal of the second device.
        rhs: usize,
    },
    /// Arguments the operation cannot take.
    #[error("{op}: {reason}")]
    Invalid {
        /// The operation.
        op: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl From<HipBackendError> for candle_core::Error {
    fn from(err: HipBackendError) -> Self {
        candle_core::Error::wrap(err)
    }
}

/// Shorthand for results of this crate at the candle boundary.
pub(crate) type Result<T> = std::result::Result<T, candle_core::Error>;

/// Converts a `hip-safe` error into candle's error type.
pub(crate) fn hip(err: hip_safe::Error) -> candle_core::Error {
    HipBackendError::Hip(err).into()
}

/// An `Invalid` error.
pub(crate) fn invalid(op: &'static str, reason: impl Into<String>) -> candle_core::Error {
    HipBackendError::Invalid {
        op,
        reason: reason.into(),
    }
    .into()
}
