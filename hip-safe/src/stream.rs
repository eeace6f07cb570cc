//! [`Stream`]: an ordered queue of device work.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, ThreadId};
use std::time::Duration;

use hip_sys::{hipDeviceptr_t, hipError_t, hipStream_t};

use crate::alloc_cache::{AllocationCache, MAX_CACHED_BYTES};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::event::{Event, EventFlags};
use crate::graph::GraphMemory;
use crate::result::{CheckStatus, clear_hip_last_error, out_ptr};

/// `hipStreamNonBlocking`: the stream does not synchronise with the null stream.
const STREAM_NON_BLOCKING: u32 = 0x01;
/// `hipStreamPerThread` is the macro `(hipStream_t)2`, not an exported symbol.
const PER_THREAD_HANDLE: usize = 2;

/// A stream on one device. Work submitted to a stream runs in order.
///
/// `Clone` shares one handle (an `Arc`); a stream created with
/// [`Device::new_stream`] is destroyed once, when the last clone is dropped.
///
/// Buffers remember the stream that allocated them and are freed in stream
/// order on it. Using a buffer on another stream is allowed: the operations
/// in this crate then order the two streams with events, so the buffer is
/// neither read before its earlier writes finish nor freed while in use.
///
/// A per-thread stream ([`Device::per_thread_stream`]) belongs to the thread
/// that made it: HIP resolves the handle to the calling thread's stream, so
/// the same value means a different stream on each thread. Two per-thread
/// streams of different threads are different streams here too, work can
/// only be queued on one from its own thread (elsewhere such calls return
/// [`Error::InvalidArgument`]), and ordering with one from another thread
/// waits on the host instead of with events (see [`Stream::join`]).
///
/// ```no_run
/// let dev = hip_safe::Device::new(0)?;
/// let stream = dev.new_stream()?;
/// let buf = stream.clone_htod(&[1.0f32, 2.0, 3.0])?;
/// assert_eq!(stream.clone_dtoh(&buf)?, vec![1.0, 2.0, 3.0]);
/// # Ok::<(), hip_safe::Error>(())
/// ```
#[derive(Clone)]
pub struct Stream {
    inner: Arc<StreamInner>,
}

struct StreamInner {
    device: Device,
    handle: hipStream_t,
    kind: StreamKind,
    /// Small freed allocations kept for reuse (off until given a limit).
    alloc_cache: AllocationCache,
    /// The memory of the capture in progress on this stream, if any.
    capture: Mutex<Option<Arc<GraphMemory>>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamKind {
    /// The legacy null stream of the device.
    Default,
    /// `hipStreamPerThread` of the given thread: the handle resolves to the
    /// calling thread's stream, so it means this one only on that thread.
    PerThread(ThreadId),
    /// Created by us, destroyed on drop.
    Owned,
}

// SAFETY: a hipStream_t is a handle into the HIP runtime, whose stream API is
// thread-safe; the owned handle is destroyed exactly once (in Drop of the
// single `StreamInner` behind the Arc), so sharing it across threads is sound.
unsafe impl Send for StreamInner {}
// SAFETY: as above; `&StreamInner` only exposes the handle value to HIP calls.
unsafe impl Sync for StreamInner {}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("device", &self.inner.device.ordinal())
            .field("kind", &self.inner.kind)
            .field("handle", &self.inner.handle)
            .finish()
    }
}

impl PartialEq for Stream {
    fn eq(&self, other: &Self) -> bool {
        self.inner.device == other.inner.device
            && self.inner.kind == other.inner.kind
            && self.inner.handle == other.inner.handle
    }
}

impl Eq for Stream {}

impl Stream {
    pub(crate) fn default_for(device: Device) -> Stream {
        Self::wrap(device, std::ptr::null_mut(), StreamKind::Default)
    }

    pub(crate) fn per_thread_for(device: Device) -> Stream {
        Self::wrap(
            device,
            PER_THREAD_HANDLE as hipStream_t,
            StreamKind::PerThread(thread::current().id()),
        )
    }

    pub(crate) fn create(device: Device) -> Result<Stream> {
        device.bind_to_thread()?;
        let handle = out_ptr("hipStreamCreateWithFlags(hipStreamNonBlocking)", |handle| {
            // SAFETY: valid out-pointer; the flag is a documented constant.
            unsafe {
                device
                    .api()
                    .hipStreamCreateWithFlags(handle, STREAM_NON_BLOCKING)
            }
        })?;
        Ok(Self::wrap(device, handle, StreamKind::Owned))
    }

    fn wrap(device: Device, handle: hipStream_t, kind: StreamKind) -> Stream {
        Stream {
            inner: Arc::new(StreamInner {
                device,
                handle,
                kind,
                alloc_cache: AllocationCache::default(),
                capture: Mutex::new(None),
            }),
        }
    }

    /// The device this stream belongs to.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// The raw handle, for calls into libraries this crate does not wrap.
    /// It stays valid while any clone of this stream lives. For a
    /// per-thread stream it is `hipStreamPerThread`, which names the calling
    /// thread's stream: use it only on the thread that made this stream.
    pub fn raw(&self) -> hipStream_t {
        self.inner.handle
    }

    /// Blocks until all work queued so far has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: the handle is valid while `self` lives.
        unsafe { self.api().hipStreamSynchronize(self.inner.handle) }.check("hipStreamSynchronize")
    }

    /// Creates an event with `flags` and records it on this stream.
    pub fn record_event(&self, flags: EventFlags) -> Result<Event> {
        let event = Event::new(self.device(), flags)?;
        event.record(self)?;
        Ok(event)
    }

    /// Makes all work submitted to this stream after this call wait until
    /// `event` has completed (does not block the host).
    pub fn wait(&self, event: &Event) -> Result<()> {
        self.bind()?;
        // SAFETY: both handles are valid while their owners live.
        unsafe {
            self.api()
                .hipStreamWaitEvent(self.inner.handle, event.raw(), 0)
        }
        .check("hipStreamWaitEvent")
    }

    /// Makes this stream wait for everything queued on `other` so far
    /// (no-op when both are the same stream).
    ///
    /// Normally an event recorded on `other` that this stream waits for,
    /// without blocking the host. A per-thread stream of another thread can
    /// neither record nor wait from here, so then the host waits instead:
    /// for the whole device when `other` is such a stream (its work is
    /// finished on return), for `other` when this stream is one (the work
    /// it was to wait for is finished on return).
    pub fn join(&self, other: &Stream) -> Result<()> {
        if self == other {
            return Ok(());
        }
        if !other.is_reachable() {
            return other.device().synchronize();
        }
        if !self.is_reachable() {
            return other.synchronize();
        }
        let event = other.record_event(EventFlags::DISABLE_TIMING)?;
        self.wait(&event)
    }

    /// Makes this stream wait for the work just queued on `worker` (which
    /// may use memory this stream owns, so that a later free or reuse of it
    /// on this stream comes after that work).
    ///
    /// When the join cannot be arranged (an event cannot be created or
    /// recorded: out of memory, a failing device), the host waits instead:
    /// for `worker`, and if that fails for the whole device. The work has
    /// then finished, so the result is `Ok`; the join's error is returned
    /// only when no wait succeeded either.
    pub(crate) fn join_back(&self, worker: &Stream) -> Result<()> {
        self.join(worker).or_else(|error| {
            wait_after_failure(
                error,
                &[&|| worker.synchronize(), &|| worker.device().synchronize()],
            )
        })
    }

    /// Waits for a copy queued on this stream that reads or writes host
    /// memory, before that memory is released or its borrow ends.
    ///
    /// When synchronizing the stream fails the copy may still be running,
    /// so the whole device is waited for; if that fails too, the stream is
    /// polled until HIP no longer reports work in flight on it. `Err` holds
    /// the stream's error (the copy's result is not to be trusted) and
    /// whether the copy is known to have finished (the device wait
    /// succeeded); memory the caller owns should be leaked when it is not.
    pub(crate) fn finish_host_copy(&self) -> std::result::Result<(), (Error, bool)> {
        let Err(error) = self.synchronize() else {
            return Ok(());
        };
        let finished =
            wait_after_failure(error.clone(), &[&|| self.device().synchronize()]).is_ok();
        if !finished {
            self.poll_while_busy();
        }
        Err((error, finished))
    }

    /// Polls until `hipStreamQuery` answers anything but `hipErrorNotReady`:
    /// the last way to wait for a copy once synchronizing has failed.
    fn poll_while_busy(&self) {
        if self.bind().is_err() {
            return;
        }
        let busy = || {
            // SAFETY: the handle is valid while `self` lives.
            let status = unsafe { self.api().hipStreamQuery(self.raw()) };
            status == Ok(hipError_t::hipErrorNotReady)
        };
        while busy() {
            thread::sleep(Duration::from_millis(1));
        }
        clear_hip_last_error();
    }

    /// Whether work can be queued on this stream from the calling thread:
    /// always, except for another thread's per-thread stream.
    fn is_reachable(&self) -> bool {
        match self.inner.kind {
            StreamKind::PerThread(owner) => owner == thread::current().id(),
            StreamKind::Default | StreamKind::Owned => true,
        }
    }

    /// Whether buffers allocated on this stream may be allocated and freed
    /// in stream order. Not for the per-thread stream, whose meaning depends
    /// on the thread that drops a buffer.
    pub(crate) fn stream_ordered_alloc(&self) -> bool {
        !matches!(self.inner.kind, StreamKind::PerThread(_))
            && self.inner.device.supports_memory_pools()
    }

    /// Keeps up to `bytes` of freed allocations of at most
    /// [`Stream::MAX_CACHED_ALLOCATION`] bytes (1 MiB) each for reuse by
    /// later allocations on this stream, which then skip `hipMallocAsync`
    /// and `hipFreeAsync` (what a framework's caching allocator does for
    /// eager workloads of small tensors). Requests the cache serves are
    /// allocated at their size class, a power of two from 256 bytes. Reuse
    /// is in stream order, as with `hipFreeAsync`. 0 (the default) turns the
    /// cache off; lowering the limit frees what no longer fits (a failure to
    /// free, on a lost device, leaks the memory). A no-op on streams that do
    /// not allocate in stream order (the per-thread stream, devices without
    /// memory pools).
    pub fn set_allocation_cache_limit(&self, bytes: usize) {
        if self.stream_ordered_alloc() {
            self.free_cached(self.inner.alloc_cache.set_limit(bytes));
        }
    }

    /// Bytes of freed allocations the allocation cache holds now.
    pub fn allocation_cache_bytes(&self) -> usize {
        self.inner.alloc_cache.held()
    }

    /// The largest request the allocation cache serves.
    pub const MAX_CACHED_ALLOCATION: usize = MAX_CACHED_BYTES;

    pub(crate) fn allocation_cache(&self) -> &AllocationCache {
        &self.inner.alloc_cache
    }

    /// Frees addresses the allocation cache gave up (`hipFreeAsync` on
    /// this stream). A failure (a lost device) leaks them, which is safe.
    pub(crate) fn free_cached(&self, ptrs: Vec<hipDeviceptr_t>) {
        self.inner.free_cached(ptrs);
    }

    /// Makes the stream's device current on the calling thread, before
    /// any call that passes the handle to HIP. Refuses another thread's
    /// per-thread stream: there the handle would name the calling thread's
    /// stream, and the work would escape the ordering this crate keeps.
    pub(crate) fn bind(&self) -> Result<()> {
        if let StreamKind::PerThread(owner) = self.inner.kind {
            let here = thread::current().id();
            if owner != here {
                return Err(Error::invalid(
                    "per-thread stream",
                    format_args!(
                        "the per-thread stream of thread {owner:?} was used on thread {here:?}; \
                         hipStreamPerThread names the calling thread's stream, so take this \
                         thread's own from Device::per_thread_stream"
                    ),
                ));
            }
        }
        self.inner.device.bind_to_thread()
    }

    pub(crate) fn api(&self) -> &'static hip_sys::HipApi {
        self.inner.device.api()
    }

    /// Whether this stream was created by us (the only kind HIP captures).
    pub(crate) fn is_owned(&self) -> bool {
        self.inner.kind == StreamKind::Owned
    }

    fn capture_slot(&self) -> MutexGuard<'_, Option<Arc<GraphMemory>>> {
        // Each update replaces the whole value, so a poisoned lock is usable.
        self.inner
            .capture
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The memory of the capture in progress on this stream, if any.
    pub(crate) fn capture_memory(&self) -> Option<Arc<GraphMemory>> {
        self.capture_slot().clone()
    }

    /// Marks the stream as capturing into `memory`; refuses a second capture.
    pub(crate) fn start_capture(&self, memory: Arc<GraphMemory>) -> Result<()> {
        let mut slot = self.capture_slot();
        if slot.is_some() {
            return Err(Error::invalid(
                "Stream::capture",
                "the stream is capturing already",
            ));
        }
        *slot = Some(memory);
        Ok(())
    }

    /// Ends what [`Stream::start_capture`] began.
    pub(crate) fn stop_capture(&self) {
        *self.capture_slot() = None;
    }
}

/// After `error` left queued work unwaited or unordered, tries `waits` in
/// order until one succeeds: `Ok` when one did (the work has finished),
/// `error` when none did.
fn wait_after_failure(error: Error, waits: &[&dyn Fn() -> Result<()>]) -> Result<()> {
    if waits.iter().any(|wait| wait().is_ok()) {
        Ok(())
    } else {
        Err(error)
    }
}

impl StreamInner {
    /// See [`Stream::free_cached`].
    fn free_cached(&self, ptrs: Vec<hipDeviceptr_t>) {
        if ptrs.is_empty() || self.device.bind_to_thread().is_err() {
            return;
        }
        let api = self.device.api();
        for ptr in ptrs {
            // SAFETY: a cached address came from hipMallocAsync on this
            // stream and is owned by nobody else; freed once, in stream order.
            unsafe { api.hipFreeAsync(ptr, self.handle) }.discard();
        }
    }
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        self.free_cached(self.alloc_cache.drain());
        if self.kind != StreamKind::Owned {
            return;
        }
        self.device.release(|api| {
            // SAFETY: the handle was created by us and is destroyed exactly once.
            unsafe { api.hipStreamDestroy(self.handle) }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn failed_waits_fall_back_in_order_until_one_succeeds() {
        let calls = RefCell::new(Vec::new());
        let wait = |name: &'static str, ok: bool| {
            let calls = &calls;
            move || {
                calls.borrow_mut().push(name);
                if ok {
                    Ok(())
                } else {
                    Err(Error::invalid(name, "failed"))
                }
            }
        };
        let join_error = || Error::invalid("hipEventCreateWithFlags", "out of memory");

        let (stream, device) = (wait("stream", false), wait("device", true));
        assert_eq!(
            wait_after_failure(join_error(), &[&stream, &device]),
            Ok(())
        );
        assert_eq!(*calls.borrow(), ["stream", "device"]);

        calls.borrow_mut().clear();
        let (stream, device) = (wait("stream", true), wait("device", true));
        assert_eq!(
            wait_after_failure(join_error(), &[&stream, &device]),
            Ok(())
        );
        assert_eq!(*calls.borrow(), ["stream"], "stops at the first success");

        calls.borrow_mut().clear();
        let (stream, device) = (wait("stream", false), wait("device", false));
        assert_eq!(
            wait_after_failure(join_error(), &[&stream, &device]),
            Err(join_error()),
            "the original error when nothing could be waited for"
        );
        assert_eq!(*calls.borrow(), ["stream", "device"]);
    }
}
