//! Stream capture into HIP graphs: record a sequence of stream work once,
//! replay it with one launch.
//!
//! [`Stream::capture`] runs a closure while the stream is captured
//! (`hipStreamBeginCapture` in relaxed mode … `hipStreamEndCapture`) and
//! instantiates the result (`hipGraphInstantiateWithFlags`) as a [`Graph`];
//! [`Graph::launch`] replays it (`hipGraphLaunch`) on the stream it was
//! captured from. A replay repeats the recorded kernels and copies with the
//! same arguments, so it reads whatever the buffers they name hold at that
//! time: write new inputs into the same buffers between launches.
//!
//! How memory behaves while capturing is described on [`Graph`].

use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use hip_sys::{hipGraph_t, hipGraphExec_t, hipStreamCaptureMode};

use crate::buffer::Release;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::result::{CheckStatus, out_ptr};
use crate::stream::Stream;

/// Graph-owned blocks are rounded up to this many bytes.
const BLOCK_ALIGN: usize = 256;

/// A captured, instantiated sequence of stream work (`hipGraphExec_t`),
/// made by [`Stream::capture`].
///
/// A replay repeats the recorded kernels and copies with the same
/// arguments, so it reads whatever the buffers they name hold at that time:
/// write new inputs into the same buffers between launches.
///
/// Memory: while a stream captures, buffers allocated on it come from a
/// pool owned by the graph (plain `hipMalloc` blocks, which relaxed capture
/// allows), never from the stream-ordered pool or the allocation cache, so
/// the addresses recorded in the graph stay valid for every replay. A
/// buffer of the capture dropped inside it returns its block to that pool
/// for later allocations of the same capture (safe: the replay keeps the
/// capture's order); a buffer that escapes the capture keeps the pool alive
/// and is rewritten by every replay, like a static output. A buffer from
/// before the capture that is dropped while the stream captures is freed
/// only once the graph is gone, since recorded work may still use it.
///
/// Dropping the graph waits for the device (a replay may still run), then
/// destroys it; the memory of its capture lives on while buffers that
/// escaped the capture do.
pub struct Graph {
    exec: hipGraphExec_t,
    graph: hipGraph_t,
    stream: Stream,
    nodes: usize,
    _memory: Arc<GraphMemory>,
}

// SAFETY: graph and exec handles are plain handles into the HIP runtime,
// whose graph API is thread-safe; they are destroyed exactly once, in Drop.
unsafe impl Send for Graph {}
// SAFETY: `&Graph` only launches the exec, which HIP allows from any thread.
unsafe impl Sync for Graph {}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("stream", &self.stream)
            .field("nodes", &self.nodes)
            .finish()
    }
}

impl Graph {
    /// Replays the captured work on the stream it was captured from, after
    /// the work queued there before (`hipGraphLaunch`).
    pub fn launch(&self) -> Result<()> {
        self.stream.bind()?;
        // SAFETY: a live exec; the stream belongs to the exec's device.
        unsafe {
            self.stream
                .api()
                .hipGraphLaunch(self.exec, self.stream.raw())
        }
        .check(format_args!(
            "hipGraphLaunch of a graph of {} nodes",
            self.nodes
        ))
    }

    /// How many operations the capture recorded (`hipGraphGetNodes`).
    pub fn node_count(&self) -> usize {
        self.nodes
    }

    /// The stream the graph was captured from and launches on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        let device = self.stream.device();
        // A failed wait (a lost device) still destroys: nothing will run.
        let _ = device.synchronize();
        destroy(device, self.graph, self.exec);
    }
}

/// Destroys whichever of a graph and its exec exist.
fn destroy(device: &Device, graph: hipGraph_t, exec: hipGraphExec_t) {
    if !exec.is_null() {
        // SAFETY: instantiated by `Stream::capture`, destroyed once.
        device.release(|api| unsafe { api.hipGraphExecDestroy(exec) });
    }
    if !graph.is_null() {
        // SAFETY: returned by hipStreamEndCapture, destroyed once.
        device.release(|api| unsafe { api.hipGraphDestroy(graph) });
    }
}

impl Stream {
    /// Captures the stream work that `work` queues on this stream into a
    /// [`Graph`], without running it (see [`Graph`] for how memory behaves
    /// while capturing). The stream must be one created by
    /// [`Device::new_stream`] (HIP cannot capture the null stream) and not
    /// capturing already. Work that needs the host to wait (copies to host
    /// memory, synchronisation) fails inside a capture with HIP's
    /// `hipErrorStreamCaptureUnsupported`; the capture then ends and the
    /// error is returned. Whatever `work` returns, the stream leaves
    /// capture mode before this returns.
    ///
    /// # Safety
    /// Every buffer that the captured work reads or writes and that was not
    /// allocated inside the capture must stay allocated, at the same
    /// address, for as long as the graph may be launched; so must host
    /// memory named by captured copies. (Buffers dropped inside `work` are
    /// kept until the graph is gone; buffers dropped after it returns are
    /// the caller's to keep.)
    pub unsafe fn capture<R, E: From<Error>>(
        &self,
        work: impl FnOnce() -> std::result::Result<R, E>,
    ) -> std::result::Result<(R, Graph), E> {
        let memory = Arc::new(GraphMemory::new(self.device().clone()));
        self.begin_capture(memory.clone())?;
        let outcome = work();
        let ended = self.end_capture();
        self.stop_capture();
        let (value, graph) = match (outcome, ended) {
            (Ok(value), Ok(graph)) => (value, graph),
            (Err(error), ended) => {
                if let Ok(graph) = ended {
                    destroy(self.device(), graph, std::ptr::null_mut());
                }
                return Err(error);
            }
            (Ok(_), Err(error)) => return Err(error.into()),
        };
        match self.instantiate(graph) {
            Ok((exec, nodes)) => Ok((
                value,
                Graph {
                    exec,
                    graph,
                    stream: self.clone(),
                    nodes,
                    _memory: memory,
                },
            )),
            Err(error) => {
                destroy(self.device(), graph, std::ptr::null_mut());
                Err(error.into())
            }
        }
    }

    /// Checks that this stream can capture, routes its allocations to
    /// `memory` and begins the capture (relaxed mode, so that the graph's
    /// pool may `hipMalloc`).
    fn begin_capture(&self, memory: Arc<GraphMemory>) -> Result<()> {
        if !self.is_owned() {
            return Err(Error::invalid(
                "Stream::capture",
                "only streams from Device::new_stream can be captured (HIP cannot capture the \
                 null or per-thread stream)",
            ));
        }
        self.start_capture(memory)?;
        let begun = self.bind().and_then(|()| {
            // SAFETY: an owned stream of the bound device; the mode is a
            // documented constant.
            unsafe {
                self.api().hipStreamBeginCapture(
                    self.raw(),
                    hipStreamCaptureMode::hipStreamCaptureModeRelaxed,
                )
            }
            .check("hipStreamBeginCapture")
        });
        begun.inspect_err(|_| self.stop_capture())
    }

    /// `hipStreamEndCapture`.
    fn end_capture(&self) -> Result<hipGraph_t> {
        out_ptr("hipStreamEndCapture", |graph| {
            // SAFETY: this stream is capturing; `graph` is a valid out-pointer.
            unsafe { self.api().hipStreamEndCapture(self.raw(), graph) }
        })
    }

    /// Instantiates a captured graph; returns the exec and the node count.
    fn instantiate(&self, graph: hipGraph_t) -> Result<(hipGraphExec_t, usize)> {
        let mut nodes = 0usize;
        // SAFETY: a live graph; a null node array asks for the count only.
        unsafe {
            self.api()
                .hipGraphGetNodes(graph, std::ptr::null_mut(), &mut nodes)
        }
        .check("hipGraphGetNodes")?;
        let exec = out_ptr(
            format_args!("hipGraphInstantiateWithFlags of a graph of {nodes} nodes"),
            |exec| {
                // SAFETY: a live graph; `exec` is a valid out-pointer; no flags.
                unsafe { self.api().hipGraphInstantiateWithFlags(exec, graph, 0) }
            },
        )?;
        Ok((exec, nodes))
    }
}

/// The memory of one capture: `hipMalloc` blocks handed to the buffers
/// allocated while the stream captured, and the buffers from before the
/// capture that were dropped during it. All of it is released once the
/// graph and every escaped buffer are gone.
pub(crate) struct GraphMemory {
    device: Device,
    state: Mutex<Pool>,
}

#[derive(Default)]
struct Pool {
    /// Every block, freed on drop.
    blocks: Vec<*mut c_void>,
    /// Blocks whose buffer was dropped, by rounded size.
    free: HashMap<usize, Vec<*mut c_void>>,
    /// Buffers from outside the capture dropped while it ran: their
    /// address, stream and way of release, applied on drop.
    deferred: Vec<(*mut c_void, Stream, Release)>,
}

// SAFETY: the pointers are device addresses owned by this pool (or handed
// to it by dropped buffers), used under the mutex and released once.
unsafe impl Send for GraphMemory {}
// SAFETY: as above; all access goes through the mutex.
unsafe impl Sync for GraphMemory {}

impl GraphMemory {
    fn new(device: Device) -> GraphMemory {
        GraphMemory {
            device,
            state: Mutex::new(Pool::default()),
        }
    }

    fn pool(&self) -> MutexGuard<'_, Pool> {
        // A panic while holding the lock cannot leave the pool inconsistent
        // (each update is one push or pop), so a poisoned lock is usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Rounded block size of a request of `bytes`.
    pub(crate) fn block_bytes(bytes: usize) -> Option<usize> {
        bytes.checked_next_multiple_of(BLOCK_ALIGN)
    }

    /// A block of `block` bytes (from [`GraphMemory::block_bytes`]): a
    /// freed one of the same size, else a new `hipMalloc`.
    pub(crate) fn take(&self, block: usize, what: impl fmt::Display) -> Result<*mut c_void> {
        if let Some(ptr) = self.pool().free.get_mut(&block).and_then(Vec::pop) {
            return Ok(ptr);
        }
        let ptr = out_ptr(
            format_args!("hipMalloc of {what} inside a capture"),
            |ptr| {
                // SAFETY: valid out-pointer; relaxed capture allows hipMalloc.
                unsafe { self.device.api().hipMalloc(ptr, block) }
            },
        )?;
        self.pool().blocks.push(ptr);
        Ok(ptr)
    }

    /// Returns a block taken from this pool.
    pub(crate) fn give_back(&self, ptr: *mut c_void, block: usize) {
        self.pool().free.entry(block).or_default().push(ptr);
    }

    /// Keeps a buffer from outside the capture until the graph is gone.
    pub(crate) fn defer(&self, ptr: *mut c_void, stream: Stream, release: Release) {
        self.pool().deferred.push((ptr, stream, release));
    }
}

impl Drop for GraphMemory {
    fn drop(&mut self) {
        let pool = std::mem::take(&mut *self.pool());
        for ptr in pool.blocks {
            // SAFETY: allocated by hipMalloc for this pool, freed once;
            // hipFree waits for the device, so no replay still uses it.
            self.device.release(|api| unsafe { api.hipFree(ptr) });
        }
        for (ptr, stream, release) in pool.deferred {
            stream.device().release(|api| {
                if matches!(release, Release::Free) {
                    // SAFETY: allocated by hipMalloc, handed over once by
                    // its dropped buffer; hipFree waits for the device.
                    unsafe { api.hipFree(ptr) }
                } else {
                    // SAFETY: allocated by hipMallocAsync, handed over once
                    // by its dropped buffer; freed in its stream's order.
                    unsafe { api.hipFreeAsync(ptr, stream.raw()) }
                }
            });
        }
    }
}
