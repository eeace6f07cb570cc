//! Library handles bound to a device's stream (rocBLAS and MIOpen),
//! created on first use and shared by every operation on that stream.
//!
//! `HipDevice` (candle-hip part 1) has no slot for them, so they live in a
//! process-wide table keyed by the stream. A handle holds its stream, so an
//! entry lives as long as the process: one handle per library per device
//! opened, which a program does a few times. (Moving the slot into
//! `HipDevice` would free them with the device.)

use std::sync::{Arc, Mutex};

use hip_safe::{Blas, Dnn, Stream};

use crate::device::HipDevice;
use crate::error::{Result, hip};

/// Handles of one library, at most one per stream.
struct Table<H> {
    entries: Mutex<Vec<Arc<H>>>,
}

impl<H> Table<H> {
    const fn new() -> Table<H> {
        Table {
            entries: Mutex::new(Vec::new()),
        }
    }

    /// The handle bound to `stream`, created with `create` on first use.
    fn get(
        &self,
        stream: &Stream,
        handle_stream: impl Fn(&H) -> &Stream,
        create: impl FnOnce(&Stream) -> hip_safe::Result<H>,
    ) -> Result<Arc<H>> {
        // The table only grows; a panic elsewhere cannot leave it invalid.
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(h) = entries.iter().find(|h| handle_stream(h) == stream) {
            return Ok(Arc::clone(h));
        }
        let handle = Arc::new(create(stream).map_err(hip)?);
        entries.push(Arc::clone(&handle));
        Ok(handle)
    }
}

static BLAS: Table<Blas> = Table::new();

/// The rocBLAS handle of `device`'s stream.
pub(crate) fn blas(device: &HipDevice) -> Result<Arc<Blas>> {
    BLAS.get(device.stream(), Blas::stream, Blas::new)
}

static DNN: Table<Dnn> = Table::new();

/// The MIOpen handle of `device`'s stream (an error when MIOpen does not
/// load; nothing is cached then).
pub(crate) fn dnn(device: &HipDevice) -> Result<Arc<Dnn>> {
    DNN.get(device.stream(), Dnn::stream, Dnn::new)
}
