//! MIOpen status checking.

use miopen_sys::{MiopenApi, miopenStatus_t};

use crate::error::{DnnError, Error, Result, c_str_to_string};

/// Turns an MIOpen status into `Ok(())` or a [`DnnError::Failed`] carrying
/// the code, MIOpen's message and `op` (formatted only on failure).
pub(crate) fn check(
    api: &MiopenApi,
    status: std::result::Result<miopenStatus_t, hip_sys::MissingSymbol>,
    op: impl FnOnce() -> String,
) -> Result<()> {
    let status = status?;
    if status == miopenStatus_t::miopenStatusSuccess {
        return Ok(());
    }
    // SAFETY: miopenGetErrorString takes any code and returns a static
    // NUL-terminated string (or null), read at once.
    let message = unsafe {
        api.miopenGetErrorString(status)
            .ok()
            .and_then(|p| c_str_to_string(p))
    }
    .unwrap_or_else(|| "unknown miopenStatus_t".into());
    Err(Error::Dnn(DnnError::Failed {
        op: op(),
        code: status.0,
        message,
    }))
}
