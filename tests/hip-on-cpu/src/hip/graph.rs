//! Stream capture and graphs, with HIP's semantics (which follow CUDA's).
//!
//! - **Capture** (`hipStreamBeginCapture` on a created stream; the null,
//!   legacy and per-thread streams cannot be captured): while a stream
//!   captures, the work queued on it is recorded as the nodes of one capture
//!   sequence instead of running: kernel launches (their argument values
//!   copied at the call), copies and fills, host functions, child graphs
//!   (`hipGraphLaunch` into a capturing stream), and rocBLAS GEMMs and
//!   MIOpen convolutions on a handle whose stream captures (their host
//!   scalars copied at the call). RCCL calls on a capturing stream are
//!   refused (`ncclInvalidUsage`): they are not recorded. `hipEventRecord` on a
//!   capturing stream marks a point of the capture without a node (as in
//!   HIP and CUDA: the event is not recorded at replay); another stream
//!   that waits on such an event joins the capture (a fork) and must be
//!   joined back (the origin, or another member, waits on an event recorded
//!   after its last work) before `hipStreamEndCapture`, else
//!   `hipErrorStreamCaptureUnjoined`. The graph is the linear sequence of
//!   the recorded nodes in call order, which is a valid schedule of any
//!   dependency graph the calls express; a wait on an event recorded
//!   outside the capture needs nothing (that work is complete here).
//! - **Memory**: `hipMallocAsync` on a capturing stream allocates at once
//!   (on the stream's device) and records an allocation node; the buffer
//!   belongs to the capture, then to its graph, valid for every replay and
//!   released when the graph and every exec made from it are destroyed (or
//!   when an invalidated capture ends). `hipFreeAsync` in the capture of
//!   such a buffer records a free node that does nothing at replay; of any
//!   other buffer it fails with `hipErrorInvalidValue` and invalidates the
//!   capture. Outside a capture, `hipFree`/`hipFreeAsync` of a graph's
//!   buffer succeed and leave it to the graph (CUDA's way to free a graph
//!   allocation, made harmless here).
//! - **Illegal calls** invalidate the capture, as HIP's runtime does:
//!   `hipStreamSynchronize`/`hipStreamQuery` of a capturing stream, and of
//!   any other stream except the null and legacy ones while this thread
//!   captures in global or thread-local mode or any thread captures in
//!   global mode (`hipErrorStreamCaptureUnsupported`); `hipMalloc`,
//!   `hipFree`, `hipHostMalloc`, `hipHostFree` and `hipEventSynchronize`
//!   under the same two conditions; `hipDeviceSynchronize` while any
//!   capture runs (`hipErrorStreamCaptureUnsupported`); the synchronous
//!   `hipMemcpy`/`hipMemset` while any capture runs, in any mode
//!   (`hipErrorStreamCaptureImplicit`); `hipEventSynchronize` and
//!   `hipEventQuery` of an event recorded in an active capture
//!   (`hipErrorCapturedEvent`). Work queued on a stream of an invalidated
//!   capture fails with `hipErrorStreamCaptureInvalidated`, and so does
//!   `hipStreamEndCapture`, which drops what was recorded.
//! - **Replay**: `hipGraphLaunch` runs the nodes in order at the call on
//!   the calling thread, as the same calls would have run (so after the
//!   work queued before it and before the work queued after it, on any
//!   stream, the null stream included), each time reading the buffers'
//!   current contents. The nodes keep the device they were captured on
//!   (the capturing stream's: that is where a graph's buffers live), so
//!   the stream a graph is launched on, of whichever device, only orders
//!   it. Launches of one exec never overlap. An exec holds the graph's
//!   content, so the graph may be destroyed first.
//!
//! Graph and exec handles are tokens of a registry, never dereferenced: a
//! destroyed or foreign handle is an error, not undefined behaviour.

use std::collections::BTreeMap;
use std::ffi::c_ulonglong;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;

use hip_sys::{
    hipError_t, hipGraph_t, hipGraphExec_t, hipGraphNode_t, hipStream_t, hipStreamCaptureMode,
    hipStreamCaptureStatus,
};

use super::device::device;
use super::memory::{allocate_for_graph, release_graph};
use super::status::HipResult;
use super::stream::{is_special_stream, stream_device};
use crate::ffi::{non_null, write_out};

const INVALID: hipError_t = hipError_t::hipErrorInvalidValue;
const UNSUPPORTED: hipError_t = hipError_t::hipErrorStreamCaptureUnsupported;
const INVALIDATED: hipError_t = hipError_t::hipErrorStreamCaptureInvalidated;

/// `hipGraphInstantiateFlagAutoFreeOnLaunch`: accepted (a graph's buffers
/// live as long as the graph here, so there is nothing to free).
const AUTO_FREE_ON_LAUNCH: c_ulonglong = 1;
/// `hipGraphInstantiateFlagUseNodePriority`: accepted, as by HIP (launch
/// priorities mean nothing where work runs at the call).
const USE_NODE_PRIORITY: c_ulonglong = 8;

/// The legacy stream handle (`hipStreamLegacy`).
const LEGACY_STREAM: usize = 1;

/// What a node does at each launch of its graph.
type Work = Box<dyn Fn() -> HipResult + Send + Sync>;

/// One recorded operation.
struct Node {
    work: Work,
}

/// Buffers allocated by `hipMallocAsync` in a capture (addresses), released
/// when dropped.
#[derive(Default)]
struct GraphMemory(Vec<usize>);

impl Drop for GraphMemory {
    fn drop(&mut self) {
        for ptr in self.0.drain(..) {
            release_graph(ptr);
        }
    }
}

/// The content of a graph: its nodes in capture order and the memory they
/// use, shared by the graph and every exec made from it.
struct Body {
    nodes: Vec<Node>,
    _memory: GraphMemory,
}

impl Body {
    /// Runs every node in order; stops at the first failure.
    fn replay(&self) -> HipResult {
        self.nodes.iter().try_for_each(|node| (node.work)())
    }
}

/// An instantiated graph.
struct Exec {
    body: Arc<Body>,
    /// Held while a launch runs, so launches of one exec never overlap.
    running: Mutex<()>,
}

impl Exec {
    /// Runs the graph's nodes at the call.
    fn launch(&self) -> HipResult {
        let _running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        self.body.replay()
    }
}

/// A stream taking part in a capture.
#[derive(Default)]
struct Member {
    /// How many nodes the stream has recorded in the capture.
    generation: u64,
    /// Whether its last node is not yet followed by another member's wait
    /// (never for the origin, which ends the capture).
    unjoined: bool,
}

/// One capture sequence.
struct Capture {
    mode: hipStreamCaptureMode,
    /// The thread that began it.
    thread: ThreadId,
    /// The stream it began on, which must end it.
    origin: usize,
    invalidated: bool,
    nodes: Vec<Node>,
    memory: GraphMemory,
    /// Buffers of `memory` freed in the capture.
    freed: Vec<usize>,
    /// Every stream of the capture, the origin included.
    members: BTreeMap<usize, Member>,
}

impl Capture {
    /// Appends a node recorded on `stream`, a member.
    fn push(&mut self, stream: usize, work: Work) {
        self.nodes.push(Node { work });
        let origin = self.origin;
        let member = self.members.entry(stream).or_default();
        member.generation += 1;
        member.unjoined = stream != origin;
    }
}

/// Where an event was recorded in a capture (`hipEventRecord` on a
/// capturing stream): the capture, the stream and how many nodes that
/// stream had recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CapturePoint {
    capture: u64,
    stream: usize,
    generation: u64,
}

/// Every capture, graph and exec.
struct Registry {
    /// The next id (captures, graphs and execs share the counter).
    next: u64,
    captures: BTreeMap<u64, Capture>,
    /// The capture of every capturing stream.
    streams: BTreeMap<usize, u64>,
    graphs: BTreeMap<u64, Arc<Body>>,
    execs: BTreeMap<u64, Arc<Exec>>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next: 1,
    captures: BTreeMap::new(),
    streams: BTreeMap::new(),
    graphs: BTreeMap::new(),
    execs: BTreeMap::new(),
});

/// The number of captures, read without the lock by the checks that every
/// stream operation makes (none when no capture exists).
static CAPTURES: AtomicUsize = AtomicUsize::new(0);

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether any capture exists (a hint: the registry is authoritative).
fn any_capture() -> bool {
    CAPTURES.load(Ordering::Acquire) != 0
}

/// Spacing of graph and exec tokens: id `n` is the never dereferenced,
/// non-null address `n * TOKEN`.
const TOKEN: usize = 16;

fn token<T>(id: u64) -> *mut T {
    std::ptr::without_provenance_mut(usize::try_from(id).unwrap_or(0) * TOKEN)
}

/// The id behind a token (`None` for null or a non-token).
fn token_id<T>(handle: *mut T) -> Option<u64> {
    let address = handle as usize;
    (address != 0 && address.is_multiple_of(TOKEN)).then_some((address / TOKEN) as u64)
}

impl Registry {
    fn next_id(&mut self) -> u64 {
        let id = self.next;
        self.next += 1;
        id
    }

    /// The capture `stream` takes part in.
    fn capture_of(&mut self, stream: usize) -> Option<&mut Capture> {
        let id = *self.streams.get(&stream)?;
        self.captures.get_mut(&id)
    }

    /// Adds a capture and makes its origin a member.
    fn add(&mut self, capture: Capture) {
        let id = self.next_id();
        self.streams.insert(capture.origin, id);
        self.captures.insert(id, capture);
        CAPTURES.store(self.captures.len(), Ordering::Release);
    }

    /// Removes a capture; its streams stop capturing.
    fn remove(&mut self, id: u64) -> Option<Capture> {
        let capture = self.captures.remove(&id)?;
        for stream in capture.members.keys() {
            self.streams.remove(stream);
        }
        CAPTURES.store(self.captures.len(), Ordering::Release);
        Some(capture)
    }

    /// Invalidates every capture that `which` selects; whether there was one.
    fn invalidate(&mut self, which: impl Fn(&Capture) -> bool) -> bool {
        let mut any = false;
        for capture in self.captures.values_mut().filter(|c| which(c)) {
            capture.invalidated = true;
            any = true;
        }
        any
    }

    /// HIP's check before a call that may synchronise (its
    /// `CHECK_STREAM_CAPTURE_SUPPORTED`, for the default thread mode,
    /// global): fails, invalidating them, while this thread captures in a
    /// mode other than relaxed, or any thread captures in global mode.
    fn check_unsafe(&mut self) -> HipResult {
        let me = std::thread::current().id();
        let relaxed = hipStreamCaptureMode::hipStreamCaptureModeRelaxed;
        let global = hipStreamCaptureMode::hipStreamCaptureModeGlobal;
        if self.invalidate(|c| c.thread == me && c.mode != relaxed)
            || self.invalidate(|c| c.mode == global)
        {
            return Err(UNSUPPORTED);
        }
        Ok(())
    }

    /// HIP's check before synchronising with `stream` (its
    /// `StreamCaptureOngoing`): a capturing stream fails, its capture
    /// invalidated; the null and legacy streams pass; any other stream
    /// fails, invalidating them, while any thread captures in global mode
    /// or this thread captures in a mode other than relaxed.
    fn check_stream(&mut self, stream: usize) -> HipResult {
        if stream == 0 || stream == LEGACY_STREAM {
            return Ok(());
        }
        if let Some(capture) = self.capture_of(stream) {
            capture.invalidated = true;
            return Err(UNSUPPORTED);
        }
        let me = std::thread::current().id();
        let relaxed = hipStreamCaptureMode::hipStreamCaptureModeRelaxed;
        let global = hipStreamCaptureMode::hipStreamCaptureModeGlobal;
        if self.invalidate(|c| c.mode == global)
            || self.invalidate(|c| c.thread == me && c.mode != relaxed)
        {
            return Err(UNSUPPORTED);
        }
        Ok(())
    }
}

/// Records work queued on `stream` if it captures: `Ok(false)` when it
/// does not (the caller then runs the work at once), `Ok(true)` once
/// `make`'s work is recorded, `hipErrorStreamCaptureInvalidated` when its
/// capture was invalidated, or `make`'s error (a call refused; the capture
/// goes on, as in HIP).
pub(crate) fn record<W>(stream: hipStream_t, make: impl FnOnce() -> HipResult<W>) -> HipResult<bool>
where
    W: Fn() -> HipResult + Send + Sync + 'static,
{
    let recorded = with_live_capture(stream, |capture| {
        capture.push(stream as usize, Box::new(make()?));
        Ok(())
    })?;
    Ok(recorded.is_some())
}

/// Runs `f` on the live capture `stream` takes part in, under the registry
/// lock: `Ok(None)` when the stream does not capture,
/// `hipErrorStreamCaptureInvalidated` when its capture was invalidated.
fn with_live_capture<R>(
    stream: hipStream_t,
    f: impl FnOnce(&mut Capture) -> HipResult<R>,
) -> HipResult<Option<R>> {
    if !any_capture() {
        return Ok(None);
    }
    let mut registry = registry();
    let Some(capture) = registry.capture_of(stream as usize) else {
        return Ok(None);
    };
    if capture.invalidated {
        return Err(INVALIDATED);
    }
    f(capture).map(Some)
}

/// Whether `stream` takes part in a capture (active or invalidated).
pub(crate) fn is_capturing(stream: hipStream_t) -> bool {
    any_capture() && registry().streams.contains_key(&(stream as usize))
}

/// `hipMallocAsync` of `size` (> 0) bytes on `stream` if it captures: a
/// buffer of the stream's device owned by the capture, and an allocation
/// node; `None` when the stream does not capture.
///
/// # Safety
/// `stream` must be a special stream or a live handle.
pub(crate) unsafe fn record_alloc(stream: hipStream_t, size: usize) -> HipResult<Option<usize>> {
    if !any_capture() || is_special_stream(stream) {
        return Ok(None);
    }
    // SAFETY: a live stream, per the contract.
    let device = unsafe { stream_device(stream) }?;
    with_live_capture(stream, |capture| {
        let ptr = allocate_for_graph(size, device)?;
        capture.memory.0.push(ptr);
        capture.push(stream as usize, Box::new(|| Ok(())));
        Ok(ptr)
    })
}

/// `hipFreeAsync` of `ptr` on `stream` if it captures: a free node (doing
/// nothing at replay) for a buffer allocated in this capture and not freed
/// yet; any other buffer fails with `hipErrorInvalidValue` and invalidates
/// the capture. `Ok(false)` when the stream does not capture.
pub(crate) fn record_free(stream: hipStream_t, ptr: usize) -> HipResult<bool> {
    let recorded = with_live_capture(stream, |capture| {
        if !capture.memory.0.contains(&ptr) || capture.freed.contains(&ptr) {
            capture.invalidated = true;
            return Err(INVALID);
        }
        capture.freed.push(ptr);
        capture.push(stream as usize, Box::new(|| Ok(())));
        Ok(())
    })?;
    Ok(recorded.is_some())
}

/// For `hipEventRecord` on `stream`: the point of its capture the event
/// now marks, `None` when the stream does not capture (the event is then
/// recorded as usual), `hipErrorStreamCaptureInvalidated` for a stream of
/// an invalidated capture.
pub(crate) fn capture_point(stream: hipStream_t) -> HipResult<Option<CapturePoint>> {
    if !any_capture() {
        return Ok(None);
    }
    let mut registry = registry();
    let Some(&id) = registry.streams.get(&(stream as usize)) else {
        return Ok(None);
    };
    let Some(capture) = registry.captures.get_mut(&id) else {
        return Ok(None);
    };
    if capture.invalidated {
        return Err(INVALIDATED);
    }
    let generation = capture
        .members
        .get(&(stream as usize))
        .map_or(0, |m| m.generation);
    Ok(Some(CapturePoint {
        capture: id,
        stream: stream as usize,
        generation,
    }))
}

/// For `hipEventSynchronize` (`sync`) and `hipEventQuery` of an event
/// recorded at `point` of a capture and last recorded on `last_stream`:
/// while that capture is active, `hipErrorCapturedEvent` and the capture
/// invalidated; `hipEventSynchronize` also fails as
/// `hipStreamSynchronize(last_stream)` would (see [`check_stream_sync`]).
pub(crate) fn check_event(
    point: Option<CapturePoint>,
    last_stream: usize,
    sync: bool,
) -> HipResult {
    if !any_capture() {
        return Ok(());
    }
    let mut registry = registry();
    if let Some(capture) = point.and_then(|p| registry.captures.get_mut(&p.capture))
        && !capture.invalidated
    {
        capture.invalidated = true;
        return Err(hipError_t::hipErrorCapturedEvent);
    }
    if sync {
        registry.check_stream(last_stream)?;
    }
    Ok(())
}

/// `hipStreamWaitEvent(stream, event)` for an event recorded at `point` of
/// a capture (or outside any, `None`). A wait on an event of a live capture
/// makes `stream` a member of that capture if it is not (a fork; the null,
/// legacy and per-thread streams cannot join: `hipErrorInvalidHandle`, a
/// stream of another capture: `hipErrorStreamCaptureMerge`) and joins the
/// event's stream back if the event follows its last node. Otherwise the
/// recorded work is complete, so there is nothing to wait for (a
/// capturing stream records nothing).
pub(crate) fn wait_event(stream: hipStream_t, point: Option<CapturePoint>) -> HipResult {
    if !any_capture() {
        return Ok(());
    }
    let mut registry = registry();
    let waiter = stream as usize;
    let live = point.filter(|p| registry.captures.contains_key(&p.capture));
    let Some(point) = live else {
        // An event from outside any live capture.
        return match registry.capture_of(waiter) {
            Some(c) if c.invalidated => Err(INVALIDATED),
            _ => Ok(()),
        };
    };
    if is_special_stream(stream) {
        return Err(hipError_t::hipErrorInvalidHandle);
    }
    match registry.streams.get(&waiter) {
        Some(&id) if id != point.capture => return Err(hipError_t::hipErrorStreamCaptureMerge),
        Some(_) => {}
        None => {
            registry.streams.insert(waiter, point.capture);
        }
    }
    let Some(capture) = registry.captures.get_mut(&point.capture) else {
        return Ok(());
    };
    capture.members.entry(waiter).or_default();
    if point.stream != waiter
        && let Some(source) = capture.members.get_mut(&point.stream)
        && source.generation == point.generation
    {
        source.unjoined = false;
    }
    if capture.invalidated {
        return Err(INVALIDATED);
    }
    Ok(())
}

/// `hipStreamSynchronize` and `hipStreamQuery` of `stream` while captures
/// exist (HIP's rules, see the module docs).
pub(crate) fn check_stream_sync(stream: hipStream_t) -> HipResult {
    if !any_capture() {
        return Ok(());
    }
    registry().check_stream(stream as usize)
}

/// `hipMalloc`, `hipFree`, `hipHostMalloc` and `hipHostFree` while
/// captures exist (HIP's rules, see the module docs).
pub(crate) fn check_unsafe_call() -> HipResult {
    if !any_capture() {
        return Ok(());
    }
    registry().check_unsafe()
}

/// The synchronous `hipMemcpy` and `hipMemset`: while any capture exists,
/// in any mode, they fail with `hipErrorStreamCaptureImplicit` and
/// invalidate every capture (HIP's `CHECK_STREAM_CAPTURING`).
pub(crate) fn check_sync_copy() -> HipResult {
    if any_capture() && registry().invalidate(|_| true) {
        return Err(hipError_t::hipErrorStreamCaptureImplicit);
    }
    Ok(())
}

/// `hipDeviceSynchronize`: while any capture exists it fails with
/// `hipErrorStreamCaptureUnsupported` and invalidates every capture.
pub(crate) fn check_device_sync() -> HipResult {
    if any_capture() && registry().invalidate(|_| true) {
        return Err(UNSUPPORTED);
    }
    Ok(())
}

/// `hipStreamDestroy` of a capturing stream: it leaves its capture, which
/// ends (its recorded work and memory dropped) if it began there.
pub(crate) fn forget_stream(stream: hipStream_t) {
    if !any_capture() {
        return;
    }
    let mut registry = registry();
    let Some(&id) = registry.streams.get(&(stream as usize)) else {
        return;
    };
    let origin = registry.captures.get(&id).map(|c| c.origin);
    if origin == Some(stream as usize) {
        let dropped = registry.remove(id);
        drop(registry);
        drop(dropped);
    } else {
        registry.streams.remove(&(stream as usize));
        if let Some(capture) = registry.captures.get_mut(&id) {
            capture.members.remove(&(stream as usize));
        }
    }
}

/// `hipStreamBeginCapture`.
pub(crate) unsafe fn hipStreamBeginCapture(
    stream: hipStream_t,
    mode: hipStreamCaptureMode,
) -> HipResult {
    device()?;
    if is_special_stream(stream) {
        return Err(UNSUPPORTED);
    }
    if mode.0 > hipStreamCaptureMode::hipStreamCaptureModeRelaxed.0 {
        return Err(INVALID);
    }
    let mut registry = registry();
    if registry.streams.contains_key(&(stream as usize)) {
        return Err(hipError_t::hipErrorIllegalState);
    }
    let origin = stream as usize;
    registry.add(Capture {
        mode,
        thread: std::thread::current().id(),
        origin,
        invalidated: false,
        nodes: Vec::new(),
        memory: GraphMemory::default(),
        freed: Vec::new(),
        members: BTreeMap::from([(origin, Member::default())]),
    });
    Ok(())
}

/// `hipStreamEndCapture`.
pub(crate) unsafe fn hipStreamEndCapture(stream: hipStream_t, graph: *mut hipGraph_t) -> HipResult {
    non_null(graph, INVALID)?;
    let mut registry = registry();
    let Some(&id) = registry.streams.get(&(stream as usize)) else {
        return Err(hipError_t::hipErrorIllegalState);
    };
    let capture = registry
        .captures
        .get(&id)
        .ok_or(hipError_t::hipErrorIllegalState)?;
    if capture.origin != stream as usize {
        return Err(hipError_t::hipErrorStreamCaptureUnmatched);
    }
    if capture.mode != hipStreamCaptureMode::hipStreamCaptureModeRelaxed
        && capture.thread != std::thread::current().id()
    {
        return Err(hipError_t::hipErrorStreamCaptureWrongThread);
    }
    if capture.invalidated {
        let dropped = registry.remove(id);
        drop(registry);
        drop(dropped);
        // SAFETY: checked non-null; the caller passes a valid out-pointer.
        unsafe { graph.write(std::ptr::null_mut()) };
        return Err(INVALIDATED);
    }
    if capture.members.values().any(|m| m.unjoined) {
        return Err(hipError_t::hipErrorStreamCaptureUnjoined);
    }
    let capture = registry
        .remove(id)
        .ok_or(hipError_t::hipErrorIllegalState)?;
    let body = Arc::new(Body {
        nodes: capture.nodes,
        _memory: capture.memory,
    });
    let graph_id = registry.next_id();
    registry.graphs.insert(graph_id, body);
    // SAFETY: checked non-null; the caller passes a valid out-pointer.
    unsafe { graph.write(token(graph_id)) };
    Ok(())
}

/// `hipStreamIsCapturing`: none for the null, legacy and per-thread
/// streams and any stream outside a capture.
pub(crate) unsafe fn hipStreamIsCapturing(
    stream: hipStream_t,
    status: *mut hipStreamCaptureStatus,
) -> HipResult {
    non_null(status, INVALID)?;
    let mut registry = registry();
    let s = match registry.capture_of(stream as usize) {
        None => hipStreamCaptureStatus::hipStreamCaptureStatusNone,
        Some(c) if c.invalidated => hipStreamCaptureStatus::hipStreamCaptureStatusInvalidated,
        Some(_) => hipStreamCaptureStatus::hipStreamCaptureStatusActive,
    };
    // SAFETY: checked non-null; the caller passes a valid out-pointer.
    unsafe { write_out(status, s, INVALID) }
}

/// `hipGraphInstantiateWithFlags`: flags 0, auto-free-on-launch or
/// use-node-priority (the ones HIP accepts here).
pub(crate) unsafe fn hipGraphInstantiateWithFlags(
    exec: *mut hipGraphExec_t,
    graph: hipGraph_t,
    flags: c_ulonglong,
) -> HipResult {
    non_null(exec, INVALID)?;
    if ![0, AUTO_FREE_ON_LAUNCH, USE_NODE_PRIORITY].contains(&flags) {
        return Err(INVALID);
    }
    let mut registry = registry();
    let body = token_id(graph)
        .and_then(|id| registry.graphs.get(&id))
        .cloned()
        .ok_or(INVALID)?;
    let id = registry.next_id();
    registry.execs.insert(
        id,
        Arc::new(Exec {
            body,
            running: Mutex::new(()),
        }),
    );
    // SAFETY: checked non-null; the caller passes a valid out-pointer.
    unsafe { write_out(exec, token(id), INVALID) }
}

/// `hipGraphLaunch`: runs the graph at the call, or records it as one
/// child-graph node when `stream` captures.
pub(crate) unsafe fn hipGraphLaunch(exec: hipGraphExec_t, stream: hipStream_t) -> HipResult {
    let found = token_id(exec).and_then(|id| registry().execs.get(&id).cloned());
    let exec = found.ok_or(INVALID)?;
    // SAFETY: the caller passes a live or special stream.
    unsafe { stream_device(stream) }?;
    let child = exec.clone();
    if record(stream, || Ok(move || child.launch()))? {
        return Ok(());
    }
    exec.launch()
}

/// `hipGraphExecDestroy`: the graph's memory goes when nothing refers to it.
pub(crate) unsafe fn hipGraphExecDestroy(exec: hipGraphExec_t) -> HipResult {
    non_null(exec, INVALID)?;
    let id = token_id(exec).ok_or(INVALID)?;
    let removed = registry().execs.remove(&id);
    // Dropped outside the lock: releasing memory takes the heap's.
    removed.map(drop).ok_or(INVALID)
}

/// `hipGraphDestroy`: a stale handle is `hipErrorIllegalState`, as in HIP;
/// execs made from the graph keep working.
pub(crate) unsafe fn hipGraphDestroy(graph: hipGraph_t) -> HipResult {
    non_null(graph, INVALID)?;
    let id = token_id(graph).ok_or(hipError_t::hipErrorIllegalState)?;
    let removed = registry().graphs.remove(&id);
    removed.map(drop).ok_or(hipError_t::hipErrorIllegalState)
}

/// `hipGraphGetNodes`, as `cuGraphGetNodes`: with `nodes` null, `*count`
/// becomes the number of nodes; else `*count` is the room in `nodes`: the
/// first `min(*count, nodes)` handles are written, entries past the last
/// node are set to null and `*count` becomes the number written.
pub(crate) unsafe fn hipGraphGetNodes(
    graph: hipGraph_t,
    nodes: *mut hipGraphNode_t,
    count: *mut usize,
) -> HipResult {
    non_null(count, INVALID)?;
    let found = token_id(graph).and_then(|id| registry().graphs.get(&id).cloned());
    let body = found.ok_or(INVALID)?;
    let total = body.nodes.len();
    if nodes.is_null() {
        // SAFETY: checked non-null; the caller passes a valid pointer.
        return unsafe { write_out(count, total, INVALID) };
    }
    // SAFETY: checked non-null; the caller passes a valid pointer.
    let room = unsafe { count.read() };
    for i in 0..room {
        let node = body
            .nodes
            .get(i)
            .map_or(std::ptr::null_mut(), |n| std::ptr::from_ref(n).cast_mut());
        // SAFETY: the caller passes room for `room` handles.
        unsafe { nodes.add(i).write(node.cast()) };
    }
    // SAFETY: as above.
    unsafe { write_out(count, room.min(total), INVALID) }
}
