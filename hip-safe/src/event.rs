//! [`Event`]: a marker in a stream, for timing and cross-stream ordering.

use std::fmt;

use hip_sys::{hipError_t, hipEvent_t};

use crate::device::Device;
use crate::error::Result;
use crate::result::{CheckStatus, Status, out, out_ptr};
use crate::stream::Stream;

/// Flags for [`Event::new`] (`hipEvent*` constants of `hip_runtime_api.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventFlags(pub u32);

impl EventFlags {
    /// A timing event (`hipEventDefault`).
    pub const DEFAULT: EventFlags = EventFlags(0x0);
    /// The host blocks instead of spinning in [`Event::synchronize`]
    /// (`hipEventBlockingSync`).
    pub const BLOCKING_SYNC: EventFlags = EventFlags(0x1);
    /// No timing data: cheaper, for ordering only (`hipEventDisableTiming`).
    pub const DISABLE_TIMING: EventFlags = EventFlags(0x2);
}

impl std::ops::BitOr for EventFlags {
    type Output = EventFlags;
    fn bitor(self, rhs: EventFlags) -> EventFlags {
        EventFlags(self.0 | rhs.0)
    }
}

/// An owned HIP event, destroyed exactly once on drop (it is not `Clone`).
///
/// ```no_run
/// use hip_safe::{Device, EventFlags};
/// let stream = Device::new(0)?.new_stream()?;
/// let start = stream.record_event(EventFlags::DEFAULT)?;
/// // ... queue work on `stream` ...
/// let stop = stream.record_event(EventFlags::DEFAULT)?;
/// stop.synchronize()?;
/// println!("{} ms", stop.elapsed_ms_since(&start)?);
/// # Ok::<(), hip_safe::Error>(())
/// ```
pub struct Event {
    handle: hipEvent_t,
    device: Device,
    flags: EventFlags,
}

// SAFETY: a hipEvent_t is a handle into the thread-safe HIP runtime; it is
// owned by exactly one `Event` and destroyed once, so moving or sharing the
// owner between threads is sound.
unsafe impl Send for Event {}
// SAFETY: `&Event` only passes the handle value to thread-safe HIP calls.
unsafe impl Sync for Event {}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("device", &self.device.ordinal())
            .field("flags", &self.flags)
            .finish()
    }
}

impl Event {
    /// Creates an event on `device`.
    pub fn new(device: &Device, flags: EventFlags) -> Result<Event> {
        device.bind_to_thread()?;
        let handle = out_ptr(
            format_args!("hipEventCreateWithFlags({:#x})", flags.0),
            |handle| {
                // SAFETY: valid out-pointer.
                unsafe { device.api().hipEventCreateWithFlags(handle, flags.0) }
            },
        )?;
        Ok(Event {
            handle,
            device: device.clone(),
            flags,
        })
    }

    /// Records the event at the current end of `stream`.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        stream.bind()?;
        // SAFETY: both handles are valid while their owners live.
        unsafe { self.device.api().hipEventRecord(self.handle, stream.raw()) }
            .check("hipEventRecord")
    }

    /// Blocks until the work before the recorded point has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.device.bind_to_thread()?;
        // SAFETY: the handle is valid while `self` lives.
        unsafe { self.device.api().hipEventSynchronize(self.handle) }.check("hipEventSynchronize")
    }

    /// Whether the recorded work has finished (non-blocking).
    pub fn is_complete(&self) -> Result<bool> {
        self.device.bind_to_thread()?;
        // SAFETY: the handle is valid while `self` lives.
        let status = unsafe { self.device.api().hipEventQuery(self.handle) }?;
        match status {
            hipError_t::hipSuccess => Ok(true),
            hipError_t::hipErrorNotReady => Ok(false),
            other => Err(other.error("hipEventQuery")),
        }
    }

    /// Milliseconds between `start` and this event; both must be timing
    /// events that have completed.
    pub fn elapsed_ms_since(&self, start: &Event) -> Result<f32> {
        self.device.bind_to_thread()?;
        out("hipEventElapsedTime", |ms| {
            // SAFETY: valid out-pointer and live handles.
            unsafe {
                self.device
                    .api()
                    .hipEventElapsedTime(ms, start.handle, self.handle)
            }
        })
    }

    /// The flags the event was created with.
    pub fn flags(&self) -> EventFlags {
        self.flags
    }

    pub(crate) fn raw(&self) -> hipEvent_t {
        self.handle
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        self.device.release(|api| {
            // SAFETY: created by us in `new`, destroyed exactly once here.
            unsafe { api.hipEventDestroy(self.handle) }
        });
    }
}
