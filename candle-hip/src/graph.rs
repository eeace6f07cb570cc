//! Capturing a device's Candle work into a HIP graph and replaying it
//! ([`HipDevice::capture`], [`HipGraph`]): the decode step of a language
//! model, recorded once, costs one launch per token instead of one per op.
//!
//! A replay repeats every kernel and copy with the arguments it was
//! recorded with, so captured work must have static shapes and read its
//! varying inputs (a token id, a position) from device memory that the
//! caller rewrites in place between launches. Storages allocated inside the
//! capture belong to the graph's memory and are rewritten by every replay;
//! a tensor created in the capture and kept afterwards is a static output.
//! Indexing faults of replayed kernels are reported by the next indexing
//! op launched outside a graph.

use crate::device::HipDevice;
use crate::error::hip;

/// Captured device work, ready to replay ([`HipDevice::capture`]).
#[derive(Debug)]
pub struct HipGraph {
    graph: hip_safe::Graph,
}

impl HipGraph {
    /// Replays the captured work on the device's stream, in order after the
    /// work queued before.
    pub fn launch(&self) -> candle_core::Result<()> {
        self.graph.launch().map_err(hip)
    }

    /// How many operations (kernels, copies, fills) the capture recorded.
    pub fn node_count(&self) -> usize {
        self.graph.node_count()
    }
}

/// Why a capture failed: HIP's capture calls, or the captured work.
enum Failure {
    Hip(hip_safe::Error),
    Work(candle_core::Error),
}

impl From<hip_safe::Error> for Failure {
    fn from(error: hip_safe::Error) -> Failure {
        Failure::Hip(error)
    }
}

impl HipDevice {
    /// Records the device work that `work` queues (every op on tensors of
    /// this device) into a [`HipGraph`] without running it. Run `work` once
    /// outside a capture first: compiling a kernel or growing a library's
    /// workspace inside it would be recorded, or refused. Work that reads a
    /// value to the host fails with HIP's capture error and ends the
    /// capture; the device stays usable.
    ///
    /// # Safety
    /// Every tensor whose storage the captured work reads or writes and
    /// that was created before the capture (weights, caches, inputs) must
    /// stay alive, unmoved, for as long as the graph may be launched.
    pub unsafe fn capture<R>(
        &self,
        work: impl FnOnce() -> candle_core::Result<R>,
    ) -> candle_core::Result<(R, HipGraph)> {
        // SAFETY: the caller keeps every storage the work uses alive.
        let captured = unsafe { self.stream().capture(|| work().map_err(Failure::Work)) };
        match captured {
            Ok((value, graph)) => Ok((value, HipGraph { graph })),
            Err(Failure::Hip(error)) => Err(hip(error)),
            Err(Failure::Work(error)) => Err(error),
        }
    }
}
