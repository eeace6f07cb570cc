//! Arrival counters: zeroed u32s on the device that the blocks of one launch
//! count themselves in on. The block that arrives last does the launch's
//! finishing work (flash-decoding's merge of its key splits) and zeroes its
//! counter again, so one launch does what a second one would.

use std::sync::Mutex;

use hip_safe::{DeviceBuffer, DevicePtr, Stream};

/// Counters handed out at the least, so that small launches share one buffer.
const MIN_COUNTERS: usize = 1024;

/// One device's arrival counters.
pub(crate) struct Arrivals {
    /// Every buffer handed out, the longest last. A shorter one is kept while
    /// the device lives: a captured graph may name it.
    buffers: Mutex<Vec<DeviceBuffer<u32>>>,
}

impl Arrivals {
    /// No counters yet; the first request allocates them.
    pub(crate) fn new() -> Arrivals {
        Arrivals {
            buffers: Mutex::new(Vec::new()),
        }
    }

    /// The device address of at least `count` zeroed counters, allocated (or
    /// grown to twice the longest so far) on `stream` when there are not
    /// enough. Kernels given them leave them zeroed; the buffer lives as long
    /// as this value.
    pub(crate) fn address(&self, stream: &Stream, count: usize) -> hip_safe::Result<u64> {
        // Each update pushes a whole buffer, so a poisoned lock is usable.
        let mut buffers = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        let longest = buffers.last().map_or(0, |b| b.len());
        if longest < count {
            let len = count.max(2 * longest).max(MIN_COUNTERS);
            buffers.push(stream.alloc_zeros::<u32>(len)?);
        }
        let current = buffers.last().expect("a buffer was pushed above");
        Ok(current.device_ptr() as u64)
    }
}
