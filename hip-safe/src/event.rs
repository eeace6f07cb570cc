//! [`Event`]: a marker in a stream, for timing and cross-stream ordering.

use std::fmt;

use hip_sys::{hipError_t, hipEvent_t};

use crate::device::Device;
use crate::error::{Result, discard_drop_error, hip_check, hip_error};
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
        let mut handle: hipEvent_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let status = unsafe { device.api().hipEventCreateWithFlags(&mut handle, flags.0) };
        hip_check(
            status,
            format_args!("hipEventCreateWithFlags({:#x})", flags.0),
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
        let status = unsafe { self.device.api().hipEventRecord(self.handle, stream.raw()) };
        hip_check(status, "hipEventRecord")
    }

    /// Blocks until the work before the recorded point has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.device.bind_to_thread()?;
        // SAFETY: the handle is valid while `self` lives.
        let status = unsafe { self.device.api().hipEventSynchronize(self.handle) };
        hip_check(status, "hipEventSynchronize")
    }

    /// Whether the recorded work has finished (non-blocking).
    pub fn is_complete(&self) -> Result<bool> {
        self.device.bind_to_thread()?;
        // SAFETY: the handle is valid while `self` lives.
        let status = unsafe { self.device.api().hipEventQuery(self.handle) }?;
        match status {
            hipError_t::hipSuccess => Ok(true),
            hipError_t::hipErrorNotReady => Ok(false),
            other => Err(hip_error(other, "hipEventQuery").into()),
        }
    }

    /// Milliseconds between `start` and this event; both must be timing
    /// events that have completed.
    pub fn elapsed_ms_since(&self, start: &Event) -> Result<f32> {
        self.device.bind_to_thread()?;
        let mut ms = 0f32;
        // SAFETY: valid out-pointer and live handles.
        let status = unsafe {
            self.device
                .api()
                .hipEventElapsedTime(&mut ms, start.handle, self.handle)
        };
        hip_check(status, "hipEventElapsedTime")?;
        Ok(ms)
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
        // Drop cannot return errors; see `discard_drop_error`.
        if self.device.bind_to_thread().is_ok() {
            let api = self.device.api();
            // SAFETY: created by us in `new`, destroyed exactly once here.
            let status = unsafe { api.hipEventDestroy(self.handle) };
            discard_drop_error(api, status);
        }
    }
}
