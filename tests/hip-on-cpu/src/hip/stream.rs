//! Streams and events. Every operation runs to completion at the call, in
//! the caller's order, which is a valid schedule of any stream program: a
//! stream's work is complete whenever it is queried, and waits between
//! streams have nothing left to wait for. Events record the host time of
//! their `hipEventRecord`. While a stream captures, its work is recorded
//! instead, and synchronising with it is refused (see `hip::graph`).
//!
//! Streams and events belong to the device current when they are created;
//! the null and per-thread streams to the caller's current device. An event
//! is recorded only on a stream of its own device, and elapsed time is
//! measured only between events of one device, as HIP requires.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::Mutex;
use std::time::Instant;

use hip_sys::{hipError_t, hipEvent_t, hipHostFn_t, hipStream_t};

use super::device::{current, device};
use super::graph::{self, CapturePoint};
use super::status::HipResult;
use crate::ffi::{non_null, write_out};

const INVALID: hipError_t = hipError_t::hipErrorInvalidValue;
const INVALID_HANDLE: hipError_t = hipError_t::hipErrorInvalidHandle;

/// `hipStreamNonBlocking`, the only stream flag.
const STREAM_NON_BLOCKING: c_uint = 0x1;
/// `hipEventDisableTiming`.
const EVENT_DISABLE_TIMING: c_uint = 0x2;
/// Every event flag HIP defines (blocking sync, no timing, interprocess,
/// and AMD's fence scopes).
const EVENT_FLAGS: c_uint = 0x1 | 0x2 | 0x4 | 0x2000_0000 | 0x4000_0000 | 0x8000_0000;

/// The null stream, `hipStreamLegacy` (1) and `hipStreamPerThread` (2):
/// not destroyable, never captured.
pub(crate) fn is_special_stream(stream: hipStream_t) -> bool {
    (stream as usize) < 3
}

/// A created stream: its flags and device.
struct Stream {
    _flags: c_uint,
    device: c_int,
}

/// A created event.
struct Event {
    timing: bool,
    recorded: Mutex<Recorded>,
    device: c_int,
}

/// What an event's last `hipEventRecord` did.
#[derive(Default)]
struct Recorded {
    /// The host time of the last record outside a capture.
    time: Option<Instant>,
    /// The stream of the last record (an address).
    stream: usize,
    /// Where the last record was in a capture, if it was.
    capture: Option<CapturePoint>,
}

impl Event {
    fn recorded(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.recorded.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The device `stream` belongs to: the caller's current device for the
/// null and per-thread streams.
///
/// # Safety
/// `stream` must be a special stream or a live handle from
/// [`hipStreamCreateWithFlags`].
pub(crate) unsafe fn stream_device(stream: hipStream_t) -> HipResult<c_int> {
    if is_special_stream(stream) {
        return current();
    }
    // SAFETY: a live stream, per the contract.
    Ok(unsafe { &*stream.cast::<Stream>() }.device)
}

/// The event behind a handle.
///
/// # Safety
/// `event` must be null or a live handle from [`hipEventCreateWithFlags`].
unsafe fn event<'a>(event: hipEvent_t) -> HipResult<&'a Event> {
    non_null(event, INVALID_HANDLE)?;
    // SAFETY: per the contract.
    Ok(unsafe { &*event.cast::<Event>() })
}

/// `hipStreamCreateWithFlags`.
pub(crate) unsafe fn hipStreamCreateWithFlags(
    stream: *mut hipStream_t,
    flags: c_uint,
) -> HipResult {
    non_null(stream, INVALID)?;
    if flags & !STREAM_NON_BLOCKING != 0 {
        return Err(INVALID);
    }
    let device = current()?;
    let handle = Box::into_raw(Box::new(Stream {
        _flags: flags,
        device,
    }));
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(stream, handle.cast(), INVALID) }
}

/// `hipStreamDestroy`; a capturing stream leaves its capture, which is
/// dropped if it began on it.
pub(crate) unsafe fn hipStreamDestroy(stream: hipStream_t) -> HipResult {
    if is_special_stream(stream) {
        return Err(INVALID_HANDLE);
    }
    graph::forget_stream(stream);
    // SAFETY: the caller passes a stream from hipStreamCreateWithFlags.
    drop(unsafe { Box::from_raw(stream.cast::<Stream>()) });
    Ok(())
}

/// `hipStreamSynchronize`: the work is done (refused during captures as
/// HIP refuses it, see `hip::graph`).
pub(crate) unsafe fn hipStreamSynchronize(stream: hipStream_t) -> HipResult {
    device()?;
    graph::check_stream_sync(stream)
}

/// `hipStreamQuery`: always complete (refused during captures as HIP
/// refuses it, see `hip::graph`).
pub(crate) unsafe fn hipStreamQuery(stream: hipStream_t) -> HipResult {
    device()?;
    graph::check_stream_sync(stream)
}

/// `hipStreamWaitEvent`: the recorded work is done; a wait on an event
/// recorded in a capture makes the stream take part in it (see
/// `hip::graph`).
pub(crate) unsafe fn hipStreamWaitEvent(
    stream: hipStream_t,
    ev: hipEvent_t,
    flags: c_uint,
) -> HipResult {
    if flags != 0 {
        return Err(INVALID);
    }
    // SAFETY: the caller passes a live event.
    let point = unsafe { event(ev) }?.recorded().capture;
    graph::wait_event(stream, point)
}

/// `hipLaunchHostFunc`: calls the function now, or at each replay when the
/// stream captures.
pub(crate) unsafe fn hipLaunchHostFunc(
    stream: hipStream_t,
    fn_: hipHostFn_t,
    user_data: *mut c_void,
) -> HipResult {
    let f = fn_.ok_or(INVALID)?;
    let data = user_data as usize;
    let recorded = graph::record(stream, || {
        Ok(move || {
            // SAFETY: the caller's function with the caller's data, called
            // at each launch of the graph as HIP would.
            unsafe { f(data as *mut c_void) };
            Ok(())
        })
    })?;
    if recorded {
        return Ok(());
    }
    // SAFETY: the caller's function with the caller's data, as HIP would.
    unsafe { f(user_data) };
    Ok(())
}

/// `hipEventCreateWithFlags`.
pub(crate) unsafe fn hipEventCreateWithFlags(ev: *mut hipEvent_t, flags: c_uint) -> HipResult {
    non_null(ev, INVALID)?;
    if flags & !EVENT_FLAGS != 0 {
        return Err(INVALID);
    }
    let device = current()?;
    let handle = Box::into_raw(Box::new(Event {
        timing: flags & EVENT_DISABLE_TIMING == 0,
        recorded: Mutex::new(Recorded::default()),
        device,
    }));
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(ev, handle.cast(), INVALID) }
}

/// `hipEventDestroy`.
pub(crate) unsafe fn hipEventDestroy(ev: hipEvent_t) -> HipResult {
    non_null(ev, INVALID_HANDLE)?;
    // SAFETY: the caller passes an event from hipEventCreateWithFlags.
    drop(unsafe { Box::from_raw(ev.cast::<Event>()) });
    Ok(())
}

/// `hipEventRecord`: the current time, on a stream of the event's device
/// (`hipErrorInvalidHandle` otherwise). On a capturing stream it marks a
/// point of the capture instead (no node, no time: see `hip::graph`).
pub(crate) unsafe fn hipEventRecord(ev: hipEvent_t, stream: hipStream_t) -> HipResult {
    // SAFETY: the caller passes a live event.
    let e = unsafe { event(ev) }?;
    // SAFETY: the caller passes a live or special stream.
    if unsafe { stream_device(stream) }? != e.device {
        return Err(INVALID_HANDLE);
    }
    let point = graph::capture_point(stream)?;
    let mut recorded = e.recorded();
    recorded.stream = stream as usize;
    recorded.capture = point;
    if point.is_none() {
        recorded.time = Some(Instant::now());
    }
    Ok(())
}

/// `hipEventSynchronize`: recorded work is done (refused for an event of
/// an active capture and during captures as HIP refuses it, see
/// `hip::graph`).
pub(crate) unsafe fn hipEventSynchronize(ev: hipEvent_t) -> HipResult {
    let (point, stream) = {
        // SAFETY: the caller passes a live event.
        let e = unsafe { event(ev) }?;
        let recorded = e.recorded();
        (recorded.capture, recorded.stream)
    };
    graph::check_event(point, stream, true)
}

/// `hipEventQuery`: always complete (refused for an event of an active
/// capture, see `hip::graph`).
pub(crate) unsafe fn hipEventQuery(ev: hipEvent_t) -> HipResult {
    let (point, stream) = {
        // SAFETY: the caller passes a live event.
        let e = unsafe { event(ev) }?;
        let recorded = e.recorded();
        (recorded.capture, recorded.stream)
    };
    graph::check_event(point, stream, false)
}

/// `hipEventElapsedTime`: milliseconds between two recorded, timed events
/// of one device (`hipErrorInvalidHandle` otherwise, as HIP).
pub(crate) unsafe fn hipEventElapsedTime(
    ms: *mut f32,
    start: hipEvent_t,
    stop: hipEvent_t,
) -> HipResult {
    non_null(ms, INVALID)?;
    // SAFETY: the caller passes live events.
    let (a, b) = unsafe { (event(start)?, event(stop)?) };
    if a.device != b.device {
        return Err(INVALID_HANDLE);
    }
    let time = |e: &Event| {
        let t = e.recorded().time;
        t.filter(|_| e.timing).ok_or(INVALID_HANDLE)
    };
    let (t0, t1) = (time(a)?, time(b)?);
    let elapsed = if t1 >= t0 {
        t1.duration_since(t0).as_secs_f32() * 1e3
    } else {
        -(t0.duration_since(t1).as_secs_f32() * 1e3)
    };
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(ms, elapsed, INVALID) }
}
