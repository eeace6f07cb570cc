//! Indices past their dimension, reported from the device.
//!
//! Candle's CPU backend refuses an index past the indexed dimension (other
//! than the "no index" marker, the largest value of the index dtype). The
//! kernels cannot fail an op that is already queued, so they keep memory
//! safe (such an index reads zeros or skips its update, like the marker)
//! and store the op's code in a per-device fault word. The host reads the
//! word at its next synchronisation point (`to_cpu_storage`,
//! `synchronize`) whenever an indexing kernel ran since the last read, and
//! returns the error there. With several threads on one device, a fault is
//! reported at the first such point after it happened, on whichever thread
//! reaches it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use hip_safe::{DeviceBuffer, DevicePtr, Stream};

use crate::error::{Result, hip, invalid};
use crate::kernel::info::IndexInfo;

/// The ops whose kernels report out-of-range indices, by the code they store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Reporter {
    IndexSelect = 1,
    Gather = 2,
    Scatter = 3,
    ScatterAdd = 4,
    IndexAdd = 5,
}

impl Reporter {
    const ALL: [Reporter; 5] = [
        Reporter::IndexSelect,
        Reporter::Gather,
        Reporter::Scatter,
        Reporter::ScatterAdd,
        Reporter::IndexAdd,
    ];

    /// The op's name in errors.
    fn op(self) -> &'static str {
        match self {
            Reporter::IndexSelect => "index-select",
            Reporter::Gather => "gather",
            Reporter::Scatter => "scatter",
            Reporter::ScatterAdd => "scatter-add",
            Reporter::IndexAdd => "index-add",
        }
    }

    /// The op of a stored code.
    fn of_code(code: u32) -> Option<Reporter> {
        Reporter::ALL.into_iter().find(|r| *r as u32 == code)
    }
}

/// One device's fault word.
pub(crate) struct FaultWord {
    word: Mutex<DeviceBuffer<u32>>,
    address: u64,
    pending: AtomicBool,
}

impl FaultWord {
    /// A cleared word on `stream`'s device.
    pub(crate) fn new(stream: &Stream) -> hip_safe::Result<FaultWord> {
        let word = stream.alloc_zeros::<u32>(1)?;
        let address = word.device_ptr() as u64;
        Ok(FaultWord {
            word: Mutex::new(word),
            address,
            pending: AtomicBool::new(false),
        })
    }

    /// Points `info` at the word for a launch of `op`'s kernel; the next
    /// check reads the word.
    pub(crate) fn arm(&self, info: &mut IndexInfo, op: Reporter) {
        info.fault = self.address;
        info.fault_code = op as u64;
        self.pending.store(true, Ordering::Release);
    }

    /// The error a kernel reported since the last check, if any. Reads the
    /// word (waiting for `stream`) only when an indexing kernel ran since.
    pub(crate) fn check(&self, stream: &Stream) -> Result<()> {
        if !self.pending.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        // The word is only ever held for these few calls.
        let mut word = self.word.lock().unwrap_or_else(|p| p.into_inner());
        let mut code = [0u32];
        stream.memcpy_dtoh(&*word, &mut code).map_err(hip)?;
        if code[0] == 0 {
            return Ok(());
        }
        stream.memset_zeros(&mut *word).map_err(hip)?;
        let op = Reporter::of_code(code[0]).map_or("an indexing op", Reporter::op);
        Err(invalid(
            op,
            "an index is past the indexed dimension (found on the device after the op ran: \
             that index read zeros or its update was skipped)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_name_their_ops() {
        for r in Reporter::ALL {
            assert_eq!(Reporter::of_code(r as u32), Some(r));
        }
        assert_eq!(Reporter::of_code(0), None);
        assert_eq!(Reporter::of_code(6), None);
        assert_eq!(Reporter::IndexAdd.op(), "index-add");
    }
}
