//! Library handles bound to a device's stream (rocBLAS and MIOpen), created
//! on first use, shared by every operation on that device and freed with it.

use std::sync::{Arc, Mutex};

use hip_safe::{Blas, Dnn, Stream};

use crate::device::HipDevice;
use crate::error::{Result, hip};

/// A handle created on first successful use. A failed creation (for example
/// MIOpen not loading) is not cached, so the error is reported again.
pub(crate) struct LazyHandle<H> {
    slot: Mutex<Option<Arc<H>>>,
}

impl<H> LazyHandle<H> {
    /// An empty slot.
    pub(crate) const fn new() -> LazyHandle<H> {
        LazyHandle {
            slot: Mutex::new(None),
        }
    }

    /// The handle, created on `stream` with `create` when the slot is empty.
    fn get(
        &self,
        stream: &Stream,
        create: impl FnOnce(&Stream) -> hip_safe::Result<H>,
    ) -> Result<Arc<H>> {
        // The slot is only ever replaced whole; a panic elsewhere cannot
        // leave it invalid.
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = slot.as_ref() {
            return Ok(Arc::clone(h));
        }
        let handle = Arc::new(create(stream).map_err(hip)?);
        *slot = Some(Arc::clone(&handle));
        Ok(handle)
    }
}

/// The rocBLAS handle of `device`'s stream.
pub(crate) fn blas(device: &HipDevice) -> Result<Arc<Blas>> {
    device.blas_slot().get(device.stream(), Blas::new)
}

/// The MIOpen handle of `device`'s stream (an error when MIOpen does not
/// load).
pub(crate) fn dnn(device: &HipDevice) -> Result<Arc<Dnn>> {
    device.dnn_slot().get(device.stream(), Dnn::new)
}
