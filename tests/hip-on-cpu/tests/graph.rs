//! Stream capture and graphs on the CPU platform, through the raw HIP API
//! (`hip_sys`): a memset, a kernel and copies captured without running and
//! replayed with new inputs (arguments by pointer array or packed
//! buffer); memory allocated and freed inside a capture;
//! calls that invalidate a capture; every error code of the capture and
//! graph functions; `hipGraphGetNodes`; destroying a graph before its exec;
//! forks and joins through events; host functions; a graph launched inside
//! a capture; rocBLAS GEMMs, MIOpen convolutions and RCCL calls on a
//! capturing stream; and, in a child process with 2 devices, a graph
//! captured on one device and launched on another.
//!
//! A capture changes what other threads may do (HIP refuses `hipMalloc`
//! everywhere during a global-mode capture, and the synchronous copies
//! during any capture), so the tests of this binary run one at a time
//! ([`platform`] holds a lock).

mod child;

use std::ffi::{CString, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};

use hip_sys::{
    hipError_t as E, hipEvent_t, hipFunction_t, hipGraph_t, hipGraphExec_t, hipGraphNode_t,
    hipMemcpyKind, hipStream_t, hipStreamCaptureMode as Mode, hipStreamCaptureStatus as Status,
};

const OK: E = E::hipSuccess;
const GLOBAL: Mode = Mode::hipStreamCaptureModeGlobal;
const THREAD_LOCAL: Mode = Mode::hipStreamCaptureModeThreadLocal;
const RELAXED: Mode = Mode::hipStreamCaptureModeRelaxed;
const DEFAULT_COPY: hipMemcpyKind = hipMemcpyKind::hipMemcpyDefault;

/// Set in a child process; its value is the child's test.
const CHILD_VAR: &str = "HIP_ON_CPU_GRAPH_CHILD";

/// Calls a function of the HIP runtime the shim provides; its status.
macro_rules! hip {
    ($f:ident $(, $a:expr)* $(,)?) => {{
        let api = hip_sys::hip().expect("the shim's HIP runtime");
        // SAFETY: the calls of these tests pass live handles and pointers
        // to locals or buffers that outlive the call or, for captured work,
        // every launch of its graph.
        unsafe { api.$f($($a),*) }.expect(stringify!($f))
    }};
}

/// Points this process at the built shim (a child keeps the parent's
/// layout and the variables it was given) and takes the lock that runs
/// these tests one at a time.
fn platform() -> MutexGuard<'static, ()> {
    static ONCE: Once = Once::new();
    static SERIAL: Mutex<()> = Mutex::new(());
    ONCE.call_once(|| {
        if std::env::var_os(CHILD_VAR).is_some() {
            return;
        }
        // Cargo builds the shim next to the test executables (`deps/`).
        let exe = std::env::current_exe().expect("test executable path");
        let shim = exe.with_file_name("libhip_on_cpu.so");
        let root = std::env::temp_dir().join(format!("hip-on-cpu-graph-{}", std::process::id()));
        hip_on_cpu::layout::make_layout(&shim, &root).expect("layout of the built shim");
        // SAFETY: called once, before any thread of this process reads the
        // environment through the HIP loader.
        unsafe {
            std::env::set_var("ROCM_PATH", &root);
            std::env::remove_var("HIP_ON_CPU_DEVICES");
            std::env::remove_var("HIP_VISIBLE_DEVICES");
        }
    });
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the ignored test `test` in a child process with `vars` set, and
/// checks that it ran and passed.
fn run_child(test: &str, vars: &[(&str, &str)]) {
    child::run(CHILD_VAR, test, vars);
}

/// Whether this process is the child running `test`.
fn is_child(test: &str) -> bool {
    child::is(CHILD_VAR, test)
}

/// `y[i] += a * x[i] + b` for `i < n`.
const KERNEL: &str = r#"
extern "C" __global__ void axpb(const float* x, float* y, float a, float b, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i] + b;
}
"#;

/// Threads per block of [`launch`].
const BLOCK: u32 = 64;

/// The `axpb` kernel, compiled once per process with the shim's hipRTC.
fn kernel() -> hipFunction_t {
    static KERNEL_FN: OnceLock<usize> = OnceLock::new();
    let f = *KERNEL_FN.get_or_init(|| {
        let rtc = hip_sys::hiprtc().expect("the shim's hipRTC");
        let source = CString::new(KERNEL).unwrap();
        let mut program = std::ptr::null_mut();
        let mut size = 0usize;
        let mut code = Vec::new();
        // SAFETY: a C string program with no headers and no options; the
        // code buffer has the size hipRTC reports; destroyed once.
        unsafe {
            let status = rtc.hiprtcCreateProgram(
                &mut program,
                source.as_ptr(),
                c"graph.hip".as_ptr(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
            assert_eq!(status.unwrap().0, 0, "hiprtcCreateProgram");
            let status = rtc.hiprtcCompileProgram(program, 0, std::ptr::null_mut());
            assert_eq!(status.unwrap().0, 0, "hiprtcCompileProgram");
            assert_eq!(rtc.hiprtcGetCodeSize(program, &mut size).unwrap().0, 0);
            code.resize(size, 0u8);
            assert_eq!(
                rtc.hiprtcGetCode(program, code.as_mut_ptr().cast())
                    .unwrap()
                    .0,
                0
            );
            assert_eq!(rtc.hiprtcDestroyProgram(&mut program).unwrap().0, 0);
        }
        let mut module = std::ptr::null_mut();
        assert_eq!(
            hip!(hipModuleLoadData, &mut module, code.as_ptr().cast()),
            OK
        );
        let mut f = std::ptr::null_mut();
        assert_eq!(
            hip!(hipModuleGetFunction, &mut f, module, c"axpb".as_ptr()),
            OK
        );
        f as usize
    });
    f as hipFunction_t
}

/// Queues `axpb(x, y, a, b, n)` on `stream`; the arguments live on this
/// function's stack, so a capture must copy their values.
fn launch(stream: hipStream_t, x: *mut c_void, y: *mut c_void, a: f32, b: f32, n: u32) -> E {
    let (mut x, mut y, mut a, mut b, mut n) = (x, y, a, b, n);
    let mut params: [*mut c_void; 5] = [
        std::ptr::from_mut(&mut x).cast(),
        std::ptr::from_mut(&mut y).cast(),
        std::ptr::from_mut(&mut a).cast(),
        std::ptr::from_mut(&mut b).cast(),
        std::ptr::from_mut(&mut n).cast(),
    ];
    let status = hip!(
        hipModuleLaunchKernel,
        kernel(),
        n.div_ceil(BLOCK),
        1,
        1,
        BLOCK,
        1,
        1,
        0,
        stream,
        params.as_mut_ptr(),
        std::ptr::null_mut(),
    );
    // Overwrite the values: a capture must have copied them already.
    (a, b, n) = (f32::NAN, f32::NAN, 0);
    std::hint::black_box((&a, &b, &n));
    status
}

fn new_stream() -> hipStream_t {
    let mut s = std::ptr::null_mut();
    assert_eq!(hip!(hipStreamCreateWithFlags, &mut s, 0), OK);
    s
}

fn new_event() -> hipEvent_t {
    let mut e = std::ptr::null_mut();
    assert_eq!(hip!(hipEventCreateWithFlags, &mut e, 0), OK);
    e
}

fn malloc(bytes: usize) -> *mut c_void {
    let mut p = std::ptr::null_mut();
    assert_eq!(hip!(hipMalloc, &mut p, bytes), OK);
    p
}

/// Writes `values` to device memory (synchronously: outside captures).
fn upload(dst: *mut c_void, values: &[f32]) {
    let bytes = size_of_val(values);
    assert_eq!(
        hip!(hipMemcpy, dst, values.as_ptr().cast(), bytes, DEFAULT_COPY),
        OK
    );
}

/// Reads `n` floats of device memory (synchronously: outside captures).
fn download(src: *const c_void, n: usize) -> Vec<f32> {
    let mut out = vec![0f32; n];
    let bytes = size_of_val(out.as_slice());
    assert_eq!(
        hip!(hipMemcpy, out.as_mut_ptr().cast(), src, bytes, DEFAULT_COPY),
        OK
    );
    out
}

fn status(stream: hipStream_t) -> Status {
    let mut s = Status(99);
    assert_eq!(hip!(hipStreamIsCapturing, stream, &mut s), OK);
    s
}

/// `hipStreamEndCapture`: its status and graph.
fn end(stream: hipStream_t) -> (E, hipGraph_t) {
    let mut g = std::ptr::without_provenance_mut(0x1234);
    let e = hip!(hipStreamEndCapture, stream, &mut g);
    (e, g)
}

/// Ends a capture that must succeed.
fn end_ok(stream: hipStream_t) -> hipGraph_t {
    let (e, g) = end(stream);
    assert_eq!(e, OK);
    assert!(!g.is_null());
    g
}

fn node_count(graph: hipGraph_t) -> usize {
    let mut n = usize::MAX;
    assert_eq!(
        hip!(hipGraphGetNodes, graph, std::ptr::null_mut(), &mut n),
        OK
    );
    n
}

fn instantiate(graph: hipGraph_t) -> hipGraphExec_t {
    let mut exec = std::ptr::null_mut();
    assert_eq!(hip!(hipGraphInstantiateWithFlags, &mut exec, graph, 0), OK);
    assert!(!exec.is_null());
    exec
}

/// Frees device buffers and destroys streams (outside captures).
fn free_all(buffers: &[*mut c_void], streams: &[hipStream_t]) {
    for &p in buffers {
        assert_eq!(hip!(hipFree, p), OK);
    }
    for &s in streams {
        assert_eq!(hip!(hipStreamDestroy, s), OK);
    }
}

/// Free memory of the current device.
fn free_memory() -> usize {
    let (mut free, mut total) = (0, 0);
    assert_eq!(hip!(hipMemGetInfo, &mut free, &mut total), OK);
    free
}

#[test]
fn a_captured_sequence_replays_with_new_inputs() {
    let _serial = platform();
    let n = 300usize;
    let bytes = n * 4;
    let s = new_stream();
    let (x, y) = (malloc(bytes), malloc(bytes));
    upload(x, &vec![1.0; n]);
    upload(y, &vec![-7.0; n]);
    // The host buffer the capture copies the result into.
    let mut out = vec![-1.0f32; n];

    assert_eq!(hip!(hipStreamBeginCapture, s, GLOBAL), OK);
    assert_eq!(status(s), Status::hipStreamCaptureStatusActive);
    assert_eq!(hip!(hipMemsetAsync, y, 0, bytes, s), OK);
    assert_eq!(launch(s, x, y, 2.0, 1.0, n as u32), OK);
    let dst = out.as_mut_ptr().cast();
    assert_eq!(
        hip!(
            hipMemcpyAsync,
            dst,
            y,
            bytes,
            hipMemcpyKind::hipMemcpyDeviceToHost,
            s
        ),
        OK
    );
    let graph = end_ok(s);
    assert_eq!(status(s), Status::hipStreamCaptureStatusNone);

    // Nothing ran during the capture.
    assert_eq!(download(y, n), vec![-7.0; n]);
    assert_eq!(out, vec![-1.0; n]);
    assert_eq!(node_count(graph), 3);

    let exec = instantiate(graph);
    for round in 0..3 {
        let input: Vec<f32> = (0..n).map(|i| (i * (round + 1)) as f32).collect();
        upload(x, &input);
        assert_eq!(hip!(hipGraphLaunch, exec, s), OK);
        assert_eq!(hip!(hipStreamSynchronize, s), OK);
        let want: Vec<f32> = input.iter().map(|v| 2.0 * v + 1.0).collect();
        assert_eq!(out, want, "replay {round}");
        assert_eq!(download(y, n), want, "replay {round}");
    }
    // The null stream launches it too, ordered with the work around it.
    upload(x, &vec![0.5; n]);
    assert_eq!(hip!(hipGraphLaunch, exec, std::ptr::null_mut()), OK);
    assert_eq!(out, vec![2.0; n]);
    // The stream works normally again.
    assert_eq!(hip!(hipMemsetAsync, y, 0, bytes, s), OK);
    assert_eq!(download(y, n), vec![0.0; n]);

    assert_eq!(hip!(hipGraphExecDestroy, exec), OK);
    assert_eq!(hip!(hipGraphDestroy, graph), OK);
    free_all(&[x, y], &[s]);
}

/// `axpb`'s arguments as HIP's packed buffer lays them out.
#[repr(C)]
struct PackedArgs {
    x: *mut c_void,
    y: *mut c_void,
    a: f32,
    b: f32,
    n: u32,
}

#[test]
fn launches_with_a_packed_argument_buffer_are_captured() {
    let _serial = platform();
    let n = 10usize;
    let s = new_stream();
    let (x, y) = (malloc(n * 4), malloc(n * 4));
    upload(x, &vec![3.0; n]);
    upload(y, &vec![0.0; n]);
    let mut args = PackedArgs {
        x,
        y,
        a: 2.0,
        b: 0.5,
        n: n as u32,
    };
    let mut size = size_of::<PackedArgs>();
    // HIP_LAUNCH_PARAM_BUFFER_POINTER, _BUFFER_SIZE, _END.
    let mut extra: [*mut c_void; 5] = [
        std::ptr::without_provenance_mut(1),
        std::ptr::from_mut(&mut args).cast(),
        std::ptr::without_provenance_mut(2),
        std::ptr::from_mut(&mut size).cast(),
        std::ptr::without_provenance_mut(3),
    ];
    assert_eq!(hip!(hipStreamBeginCapture, s, GLOBAL), OK);
    let status = hip!(
        hipModuleLaunchKernel,
        kernel(),
        1,
        1,
        1,
        BLOCK,
        1,
        1,
        0,
        s,
        std::ptr::null_mut(),
        extra.as_mut_ptr(),
    );
    assert_eq!(status, OK);
    let graph = end_ok(s);
    // The buffer was copied at the call.
    args.a = f32::NAN;
    std::hint::black_box(&args);
    let exec = instantiate(graph);
    assert_eq!(download(y, n), vec![0.0; n]);
    assert_eq!(hip!(hipGraphLaunch, exec, s), OK);
    assert_eq!(hip!(hipGraphLaunch, exec, s), OK);
    assert_eq!(download(y, n), vec![13.0; n]);
    assert_eq!(hip!(hipGraphExecDestroy, exec), OK);
    assert_eq!(hip!(hipGraphDestroy, graph), OK);
    free_all(&[x, y], &[s]);
}

#[test]
fn memory_allocated_in_a_capture_belongs_to_the_graph() {
    let _serial = platform();
    let n = 100usize;
    let bytes = n * 4;
    let s = new_stream();
    let y = malloc(bytes);
    let before = free_memory();

    assert_eq!(hip!(hipStreamBeginCapture, s, GLOBAL), OK);
    let mut tmp = std::ptr::null_mut();
    assert_eq!(hip!(hipMallocAsync, &mut tmp, bytes, s), OK);
    assert!(!tmp.is_null());
    // Size 0 gives null and records nothing.
    let mut none = std::ptr::without_provenance_mut(1);
    assert_eq!(hip!(hipMallocAsync, &mut none, 0, s), OK);
    assert!(none.is_null());
    assert_eq!(
        hip!(hipMemsetD32Async, tmp, 3.0f32.to_bits() as c_int, n, s),
        OK
    );
    assert_eq!(hip!(hipMemsetAsync, y, 0, bytes, s), OK);
    assert_eq!(launch(s, tmp, y, 1.0, 0.5, n as u32), OK);
    assert_eq!(hip!(hipFreeAsync, tmp, s), OK);
    let graph = end_ok(s);
    assert_eq!(node_count(graph), 5);
    // The graph's buffer is counted against the device until it is gone.
    assert!(before - free_memory() >= bytes);

    let exec = instantiate(graph);
    // Destroying the graph first leaves the exec and its memory intact.
    assert_eq!(hip!(hipGraphDestroy, graph), OK);
    for _ in 0..2 {
        upload(y, &vec![9.0; n]);
        assert_eq!(hip!(hipGraphLaunch, exec, s), OK);
        assert_eq!(download(y, n), vec![3.5; n]);
    }
    // A free outside the graph leaves the buffer to the graph.
    assert_eq!(hip!(hipFree, tmp), OK);
    assert_eq!(hip!(hipFreeAsync, tmp, s), OK);
    assert_eq!(hip!(hipGraphLaunch, exec, s), OK);
    assert_eq!(download(y, n), vec![3.5; n]);
    assert_eq!(hip!(hipGraphExecDestroy, exec), OK);
    assert_eq!(free_memory(), before);

    // A double free inside a capture invalidates it, and its memory goes
    // with the capture.
    assert_eq!(hip!(hipStreamBeginCapture, s, RELAXED), OK);
    let mut tmp = std::ptr::null_mut();
    assert_eq!(hip!(hipMallocAsync, &mut tmp, bytes, s), OK);
    assert_eq!(hip!(hipFreeAsync, tmp, s), OK);
    assert_eq!(hip!(hipFreeAsync, tmp, s), E::hipErrorInvalidValue);
    assert_eq!(status(s), Status::hipStreamCaptureStatusInvalidated);
    let (e, g) = end(s);
    assert_eq!(
        (e, g),
        (E::hipErrorStreamCaptureInvalidated, std::ptr::null_mut())
    );
    assert_eq!(free_memory(), before);
    free_all(&[y], &[s]);
}

/// Begins a capture of `s` in `mode` with one node, runs `illegal`, checks
/// its status, then that the capture is invalidated: further work is
/// refused and ending it gives no graph. The stream is usable afterwards.
fn check_invalidates(mode: Mode, what: &str, want: E, illegal: impl FnOnce(hipStream_t) -> E) {
    let s = new_stream();
    let y = malloc(64);
    upload(y, &[0.0; 16]);
    assert_eq!(hip!(hipStreamBeginCapture, s, mode), OK, "{what}");
    assert_eq!(hip!(hipMemsetAsync, y, 1, 64, s), OK, "{what}");
    assert_eq!(illegal(s), want, "{what}");
    assert_eq!(
        status(s),
        Status::hipStreamCaptureStatusInvalidated,
        "{what}"
    );
    let invalidated = E::hipErrorStreamCaptureInvalidated;
    assert_eq!(hip!(hipMemsetAsync, y, 2, 64, s), invalidated, "{what}");
    assert_eq!(launch(s, y, y, 1.0, 1.0, 16), invalidated, "{what}");
    let mut p = std::ptr::null_mut();
    assert_eq!(hip!(hipMallocAsync, &mut p, 64, s), invalidated, "{what}");
    let (e, g) = end(s);
    assert_eq!((e, g), (invalidated, std::ptr::null_mut()), "{what}");
    assert_eq!(status(s), Status::hipStreamCaptureStatusNone, "{what}");
    // Nothing recorded ran; the stream runs work again.
    assert_eq!(download(y, 16), [0.0; 16], "{what}");
    assert_eq!(hip!(hipMemsetAsync, y, 0, 64, s), OK, "{what}");
    assert_eq!(hip!(hipStreamSynchronize, s), OK, "{what}");
    free_all(&[y], &[s]);
}

#[test]
fn illegal_calls_invalidate_the_capture() {
    let _serial = platform();
    let unsupported = E::hipErrorStreamCaptureUnsupported;
    check_invalidates(GLOBAL, "hipStreamSynchronize", unsupported, |s| {
        hip!(hipStreamSynchronize, s)
    });
    check_invalidates(RELAXED, "hipStreamQuery", unsupported, |s| {
        hip!(hipStreamQuery, s)
    });
    let e = new_event();
    check_invalidates(
        RELAXED,
        "hipEventSynchronize",
        E::hipErrorCapturedEvent,
        |s| {
            assert_eq!(hip!(hipEventRecord, e, s), OK);
            hip!(hipEventSynchronize, e)
        },
    );
    check_invalidates(RELAXED, "hipEventQuery", E::hipErrorCapturedEvent, |s| {
        assert_eq!(hip!(hipEventRecord, e, s), OK);
        hip!(hipEventQuery, e)
    });
    // Once the capture is over the event is an ordinary one again.
    assert_eq!(hip!(hipEventQuery, e), OK);
    assert_eq!(hip!(hipEventSynchronize, e), OK);
    let outside = malloc(64);
    check_invalidates(RELAXED, "hipFreeAsync", E::hipErrorInvalidValue, |s| {
        hip!(hipFreeAsync, outside, s)
    });
    // The refused free left the buffer alone.
    upload(outside, &[4.0]);
    assert_eq!(download(outside, 1), [4.0]);
    check_invalidates(GLOBAL, "hipMalloc (global)", unsupported, |_| {
        let mut p = std::ptr::null_mut();
        hip!(hipMalloc, &mut p, 64)
    });
    check_invalidates(THREAD_LOCAL, "hipFree (thread-local)", unsupported, |_| {
        hip!(hipFree, outside)
    });
    check_invalidates(
        RELAXED,
        "hipMemcpy",
        E::hipErrorStreamCaptureImplicit,
        |_| {
            let v = 1f32;
            hip!(
                hipMemcpy,
                outside,
                std::ptr::from_ref(&v).cast(),
                4,
                DEFAULT_COPY
            )
        },
    );
    check_invalidates(
        RELAXED,
        "hipMemset",
        E::hipErrorStreamCaptureImplicit,
        |_| hip!(hipMemset, outside, 0, 4),
    );
    check_invalidates(RELAXED, "hipDeviceSynchronize", unsupported, |_| {
        hip!(hipDeviceSynchronize)
    });
    let other = new_stream();
    check_invalidates(GLOBAL, "another stream's sync", unsupported, |_| {
        hip!(hipStreamSynchronize, other)
    });
    // A global capture forbids those calls to other threads too.
    check_invalidates(GLOBAL, "hipMalloc on another thread", unsupported, |_| {
        std::thread::scope(|t| {
            t.spawn(|| {
                let mut p = std::ptr::null_mut();
                hip!(hipMalloc, &mut p, 64)
            })
            .join()
            .unwrap()
        })
    });
    free_all(&[outside], &[other]);
    assert_eq!(hip!(hipEventDestroy, e), OK);
}

#[test]
fn relaxed_captures_allow_what_may_synchronise() {
    let _serial = platform();
    let s = new_stream();
    let other = new_stream();
    assert_eq!(hip!(hipStreamBeginCapture, s, RELAXED), OK);
    let p = malloc(64);
    assert_eq!(hip!(hipStreamSynchronize, other), OK);
    assert_eq!(hip!(hipStreamSynchronize, std::ptr::null_mut()), OK);
    assert_eq!(hip!(hipFree, p), OK);
    assert_eq!(status(s), Status::hipStreamCaptureStatusActive);
    let graph = end_ok(s);
    assert_eq!(node_count(graph), 0);
    // An empty graph launches and does nothing.
    let exec = instantiate(graph);
    assert_eq!(hip!(hipGraphLaunch, exec, s), OK);
    // A thread-local capture of another thread does not restrict this one.
    let (began, end_now) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    let s2 = new_stream();
    let s2_addr = s2 as usize;
    std::thread::scope(|t| {
        t.spawn(|| {
            let s2 = s2_addr as hipStream_t;
            assert_eq!(hip!(hipStreamBeginCapture, s2, THREAD_LOCAL), OK);
            began.wait();
            end_now.wait();
            let graph = end_ok(s2);
            assert_eq!(hip!(hipGraphDestroy, graph), OK);
        });
        began.wait();
        let q = malloc(64);
        assert_eq!(hip!(hipFree, q), OK);
        assert_eq!(hip!(hipStreamSynchronize, s), OK);
        assert_eq!(status(s2), Status::hipStreamCaptureStatusActive);
        end_now.wait();
    });
    assert_eq!(hip!(hipGraphExecDestroy, exec), OK);
    assert_eq!(hip!(hipGraphDestroy, graph), OK);
    free_all(&[], &[s, s2, other]);
}

#[test]
fn capture_and_graph_calls_report_errors_as_hip() {
    let _serial = platform();
    let invalid = E::hipErrorInvalidValue;
    let unsupported = E::hipErrorStreamCaptureUnsupported;
    let s = new_stream();
    // The null, legacy and per-thread streams cannot be captured.
    for special in [0usize, 1, 2] {
        let h: hipStream_t = std::ptr::without_provenance_mut(special);
        assert_eq!(hip!(hipStreamBeginCapture, h, GLOBAL), unsupported);
        assert_eq!(status(h), Status::hipStreamCaptureStatusNone);
    }
    assert_eq!(hip!(hipStreamBeginCapture, s, Mode(3)), invalid);
    assert_eq!(hip!(hipStreamIsCapturing, s, std::ptr::null_mut()), invalid);
    assert_eq!(status(s), Status::hipStreamCaptureStatusNone);
    assert_eq!(end(s).0, E::hipErrorIllegalState);
    assert_eq!(
        hip!(
            hipStreamEndCapture,
            std::ptr::null_mut(),
            &mut std::ptr::null_mut()
        ),
        E::hipErrorIllegalState
    );
    assert_eq!(hip!(hipStreamBeginCapture, s, GLOBAL), OK);
    assert_eq!(
        hip!(hipStreamBeginCapture, s, GLOBAL),
        E::hipErrorIllegalState
    );
    assert_eq!(
        hip!(hipStreamBeginCapture, s, RELAXED),
        E::hipErrorIllegalState
    );
    assert_eq!(hip!(hipStreamEndCapture, s, std::ptr::null_mut()), invalid);
    // A global or thread-local capture must end on the thread that began it.
    let s_addr = s as usize;
    let e = std::thread::scope(|t| t.spawn(|| end(s_addr as hipStream_t).0).join().unwrap());
    assert_eq!(e, E::hipErrorStreamCaptureWrongThread);
    let graph = end_ok(s);
    // A relaxed one may end anywhere.
    assert_eq!(hip!(hipStreamBeginCapture, s, RELAXED), OK);
    let other = std::thread::scope(|t| {
        t.spawn(|| end(s_addr as hipStream_t).1 as usize)
            .join()
            .unwrap()
    });
    let other = other as hipGraph_t;
    assert!(!other.is_null());
    assert_eq!(hip!(hipGraphDestroy, other), OK);

    // Instantiation: flags 0, auto-free-on-launch (1) and node priority (8).
    let mut exec = std::ptr::null_mut();
    for flags in [2, 4, 16] {
        assert_eq!(
            hip!(hipGraphInstantiateWithFlags, &mut exec, graph, flags),
            invalid
        );
    }
    assert_eq!(
        hip!(
            hipGraphInstantiateWithFlags,
            &mut exec,
            std::ptr::null_mut(),
            0
        ),
        invalid
    );
    assert_eq!(
        hip!(hipGraphInstantiateWithFlags, std::ptr::null_mut(), graph, 0),
        invalid
    );
    for flags in [1, 8] {
        assert_eq!(
            hip!(hipGraphInstantiateWithFlags, &mut exec, graph, flags),
            OK
        );
        assert_eq!(hip!(hipGraphLaunch, exec, s), OK);
        assert_eq!(hip!(hipGraphExecDestroy, exec), OK);
    }
    // Destroyed and null handles.
    assert_eq!(hip!(hipGraphLaunch, exec, s), invalid);
    assert_eq!(hip!(hipGraphLaunch, std::ptr::null_mut(), s), invalid);
    assert_eq!(hip!(hipGraphExecDestroy, exec), invalid);
    assert_eq!(hip!(hipGraphExecDestroy, std::ptr::null_mut()), invalid);
    assert_eq!(hip!(hipGraphDestroy, std::ptr::null_mut()), invalid);
    // A graph handle is not an exec handle.
    assert_eq!(hip!(hipGraphLaunch, graph.cast(), s), invalid);
    let mut n = 0;
    assert_eq!(
        hip!(
            hipGraphGetNodes,
            graph,
            std::ptr::null_mut(),
            std::ptr::null_mut()
        ),
        invalid
    );
    assert_eq!(
        hip!(
            hipGraphGetNodes,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut n
        ),
        invalid
    );
    assert_eq!(hip!(hipGraphDestroy, graph), OK);
    assert_eq!(hip!(hipGraphDestroy, graph), E::hipErrorIllegalState);
    assert_eq!(
        hip!(hipGraphGetNodes, graph, std::ptr::null_mut(), &mut n),
        invalid
    );
    free_all(&[], &[s]);
}

#[test]
fn graph_nodes_are_listed_as_cu_graph_get_nodes() {
    let _serial = platform();
    let s = new_stream();
    let y = malloc(256);
    let e = new_event();
    assert_eq!(hip!(hipStreamBeginCapture, s, GLOBAL), OK);
    for v in 0..4 {
        assert_eq!(hip!(hipMemsetAsync, y, v, 256, s), OK);
        // Event records and waits inside a capture add no node.
        assert_eq!(hip!(hipEventRecord, e, s), OK);
        assert_eq!(hip!(hipStreamWaitEvent, s, e, 0), OK);
    }
    let graph = end_ok(s);
    assert_eq!(node_count(graph), 4);
    let marker: hipGraphNode_t = std::ptr::without_provenance_mut(0x99);
    // Room for fewer: that many are written, the count stays.
    let mut nodes = [marker; 6];
    let mut n = 2usize;
    assert_eq!(
        hip!(hipGraphGetNodes, graph, nodes.as_mut_ptr(), &mut n),
        OK
    );
    assert_eq!(n, 2);
    assert!(nodes[..2].iter().all(|p| !p.is_null() && *p != marker));
    assert!(nodes[2..].iter().all(|p| *p == marker));
    // Room for more: every node, null after them, the count written.
    let mut n = 6usize;
    assert_eq!(
        hip!(hipGraphGetNodes, graph, nodes.as_mut_ptr(), &mut n),
        OK
    );
    assert_eq!(n, 4);
    assert!(nodes[..4].iter().all(|p| !p.is_null() && *p != marker));
    assert!(nodes[4..].iter().all(|p| p.is_null()));
    let mut distinct = nodes[..4].to_vec();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 4);
    // Room for none: nothing written.
    let mut n = 0usize;
    assert_eq!(
        hip!(hipGraphGetNodes, graph, nodes.as_mut_ptr(), &mut n),
        OK
    );
    assert_eq!(n, 0);
    // The event was not recorded by the capture or by its replay.
    let exec = instantiate(graph);
    assert_eq!(hip!(hipGraphLaunch, exec, s), OK);
    let mut ms = 0f32;
    assert_eq!(
        hip!(hipEventElapsedTime, &mut ms, e, e),
        E::hipErrorInvalidHandle
    );
    assert_eq!(hip!(hipGraphExecDestroy, exec), OK);
    assert_eq!(hip!(hipGraphDestroy, graph), OK);
    assert_eq!(hip!(hipEventDestroy, e), OK);
    free_all(&[y], &[s]);
}

#[test]
fn forked_streams_join_the_capture_and_must_join_back() {
    let _serial = platform();
    let n = 128usize;
    let bytes = n * 4;
    let (s1, s2) = (new_stream(), new_stream());
    let (fork, join) = (new_event(), new_event());
    let (x, y, z) = (malloc(bytes), malloc(bytes), malloc(bytes));
    upload(x, &vec![2.0; n]);
    assert_eq!(hip!(hipStreamBeginCapture, s1, GLOBAL), OK);
    assert_eq!(hip!(hipMemsetAsync, y, 0, bytes, s1), OK);
    assert_eq!(hip!(hipEventRecord, fork, s1), OK);
    assert_eq!(hip!(hipStreamWaitEvent, s2, fork, 0), OK);
    assert_eq!(status(s2), Status::hipStreamCaptureStatusActive);
    // s2: z = 3x; s1: y = x + 1; then s1 waits for s2 and adds z to y.
    assert_eq!(hip!(hipMemsetAsync, z, 0, bytes, s2), OK);
    assert_eq!(launch(s2, x, z, 3.0, 0.0, n as u32), OK);
    assert_eq!(launch(s1, x, y, 1.0, 1.0, n as u32), OK);
    // Only the origin ends the capture, and only once s2 is joined.
    assert_eq!(end(s2).0, E::hipErrorStreamCaptureUnmatched);
    assert_eq!(end(s1).0, E::hipErrorStreamCaptureUnjoined);
    assert_eq!(status(s1), Status::hipStreamCaptureStatusActive);
    assert_eq!(hip!(hipEventRecord, join, s2), OK);
    assert_eq!(hip!(hipStreamWaitEvent, s1, join, 0), OK);
    assert_eq!(launch(s1, z, y, 1.0, 0.0, n as u32), OK);
    let graph = end_ok(s1);
    assert_eq!(status(s2), Status::hipStreamCaptureStatusNone);
    assert_eq!(node_count(graph), 5);
    let exec = instantiate(graph);
    assert_eq!(hip!(hipGraphLaunch, exec, s1), OK);
    assert_eq!(download(y, n), vec![9.0; n]);
    upload(x, &vec![1.0; n]);
    assert_eq!(hip!(hipGraphLaunch, exec, s2), OK);
    assert_eq!(download(y, n), vec![5.0; n]);
    assert_eq!(hip!(hipGraphExecDestroy, exec), OK);
    assert_eq!(hip!(hipGraphDestroy, graph), OK);
    // Waiting on an event recorded outside a capture needs nothing.
    assert_eq!(hip!(hipEventRecord, fork, s2), OK);
    assert_eq!(hip!(hipStreamBeginCapture, s1, GLOBAL), OK);
    assert_eq!(hip!(hipStreamWaitEvent, s1, fork, 0), OK);
    assert_eq!(status(s2), Status::hipStreamCaptureStatusNone);
    let graph = end_ok(s1);
    assert_eq!(node_count(graph), 0);
    assert_eq!(hip!(hipGraphDestroy, graph), OK);
    // Destroying the origin ends its capture; its forks leave it.
    assert_eq!(hip!(hipStreamBeginCapture, s1, GLOBAL), OK);
    assert_eq!(hip!(hipEventRecord, fork, s1), OK);
    assert_eq!(hip!(hipStreamWaitEvent, s2, fork, 0), OK);
    assert_eq!(hip!(hipStreamDestroy, s1), OK);
    assert_eq!(status(s2), Status::hipStreamCaptureStatusNone);
    assert_eq!(hip!(hipMemsetAsync, y, 0, bytes, s2), OK);
    assert_eq!(download(y, n), vec![0.0; n]);
    for e in [fork, join] {
        assert_eq!(hip!(hipEventDestroy, e), OK);
    }
    free_all(&[x, y, z], &[s2]);
}

/// Counts its calls (a host function's data is a pointer to one).
extern "C" fn count_call(data: *mut c_void) {
    // SAFETY: the tests pass a pointer to a static counter.
    let counter = unsafe { &*data.cast::<AtomicUsize>() };
    counter.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn host_functions_and_child_graphs_run_at_each_launch() {
    let _serial = platform();
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let data = std::ptr::from_ref(&CALLS).cast_mut().cast();
    let n = 64usize;
    let (s1, s2) = (new_stream(), new_stream());
    let y = malloc(n * 4);
    upload(y, &vec![0.0; n]);
    assert_eq!(hip!(hipStreamBeginCapture, s1, GLOBAL), OK);
    assert_eq!(hip!(hipLaunchHostFunc, s1, Some(count_call), data), OK);
    assert_eq!(
        hip!(hipLaunchHostFunc, s1, None, data),
        E::hipErrorInvalidValue
    );
    assert_eq!(launch(s1, y, y, 1.0, 1.0, n as u32), OK);
    let inner = end_ok(s1);
    assert_eq!(CALLS.load(Ordering::SeqCst), 0);
    let inner_exec = instantiate(inner);
    assert_eq!(hip!(hipGraphLaunch, inner_exec, s1), OK);
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
    // y = 2y + 1 per launch.
    assert_eq!(download(y, n), vec![1.0; n]);

    // A graph launched into a capturing stream is one node of the capture.
    assert_eq!(hip!(hipStreamBeginCapture, s2, GLOBAL), OK);
    assert_eq!(hip!(hipGraphLaunch, inner_exec, s2), OK);
    assert_eq!(hip!(hipLaunchHostFunc, s2, Some(count_call), data), OK);
    let outer = end_ok(s2);
    assert_eq!(node_count(outer), 2);
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
    let outer_exec = instantiate(outer);
    // The outer graph keeps the inner one's content.
    assert_eq!(hip!(hipGraphExecDestroy, inner_exec), OK);
    assert_eq!(hip!(hipGraphDestroy, inner), OK);
    assert_eq!(hip!(hipGraphLaunch, outer_exec, s2), OK);
    assert_eq!(CALLS.load(Ordering::SeqCst), 3);
    assert_eq!(download(y, n), vec![3.0; n]);
    assert_eq!(hip!(hipGraphExecDestroy, outer_exec), OK);
    assert_eq!(hip!(hipGraphDestroy, outer), OK);
    free_all(&[y], &[s1, s2]);
}

#[test]
fn rocblas_gemms_are_captured_and_rccl_calls_refused() {
    use rocblas_sys::{
        rocblas_datatype as T, rocblas_gemm_algo, rocblas_operation, rocblas_pointer_mode,
        rocblas_status,
    };
    let _serial = platform();
    let blas = rocblas_sys::rocblas().expect("the shim's rocBLAS");
    let s = new_stream();
    let (a, b, c) = (malloc(16), malloc(16), malloc(16));
    // Column-major 2x2: A = I, B = [1 2; 3 4].
    upload(a, &[1.0, 0.0, 0.0, 1.0]);
    upload(b, &[1.0, 3.0, 2.0, 4.0]);
    let mut handle = std::ptr::null_mut();
    let none = rocblas_operation::rocblas_operation_none;
    let f32_r = T::rocblas_datatype_f32_r;
    let algo = rocblas_gemm_algo::rocblas_gemm_algo_standard;
    let (mut alpha, beta) = (2.0f32, 0.0f32);
    let gemm = |h, alpha: *const f32, beta: *const f32| {
        // SAFETY: 2x2 f32 matrices in live buffers; scalars of the compute
        // type at `alpha` and `beta`.
        unsafe {
            blas.rocblas_gemm_ex(
                h,
                none,
                none,
                2,
                2,
                2,
                alpha.cast(),
                a,
                f32_r,
                2,
                b,
                f32_r,
                2,
                beta.cast(),
                c,
                f32_r,
                2,
                c,
                f32_r,
                2,
                f32_r,
                algo,
                0,
                0,
            )
        }
        .unwrap()
    };
    // SAFETY: a valid out-pointer; the handle is destroyed below.
    unsafe {
        assert_eq!(
            blas.rocblas_create_handle(&mut handle).unwrap(),
            rocblas_status::rocblas_status_success
        );
        assert_eq!(
            blas.rocblas_set_stream(handle, s).unwrap(),
            rocblas_status::rocblas_status_success
        );
    }
    upload(c, &[0.0; 4]);
    assert_eq!(hip!(hipStreamBeginCapture, s, GLOBAL), OK);
    assert_eq!(
        gemm(handle, &alpha, &beta),
        rocblas_status::rocblas_status_success
    );
    // Host-mode scalars are read at the call.
    alpha = 10.0;
    std::hint::black_box(alpha);
    let graph = end_ok(s);
    assert_eq!(node_count(graph), 1);
    assert_eq!(download(c, 4), [0.0; 4]);
    let exec = instantiate(graph);
    assert_eq!(hip!(hipGraphLaunch, exec, s), OK);
    assert_eq!(download(c, 4), [2.0, 6.0, 4.0, 8.0]);
    upload(b, &[1.0; 4]);
    assert_eq!(hip!(hipGraphLaunch, exec, s), OK);
    assert_eq!(download(c, 4), [2.0; 4]);
    assert_eq!(hip!(hipGraphExecDestroy, exec), OK);
    assert_eq!(hip!(hipGraphDestroy, graph), OK);

    // Device-mode scalars are read at each replay.
    let scalars = malloc(8);
    upload(scalars, &[3.0, 0.0]);
    let device_mode = rocblas_pointer_mode::rocblas_pointer_mode_device;
    // SAFETY: a live handle.
    let set = unsafe { blas.rocblas_set_pointer_mode(handle, device_mode) }.unwrap();
    assert_eq!(set, rocblas_status::rocblas_status_success);
    assert_eq!(hip!(hipStreamBeginCapture, s, GLOBAL), OK);
    let (alpha_d, beta_d) = (scalars.cast::<f32>(), scalars.cast::<f32>().wrapping_add(1));
    assert_eq!(
        gemm(handle, alpha_d, beta_d),
        rocblas_status::rocblas_status_success
    );
    let graph = end_ok(s);
    let exec = instantiate(graph);
    upload(scalars, &[5.0, 0.0]);
    assert_eq!(hip!(hipGraphLaunch, exec, s), OK);
    assert_eq!(download(c, 4), [5.0; 4]);
    assert_eq!(hip!(hipGraphExecDestroy, exec), OK);
    assert_eq!(hip!(hipGraphDestroy, graph), OK);

    // RCCL does not record: its calls on a capturing stream are refused.
    let rccl = rccl_sys::rccl().expect("the shim's RCCL");
    let mut comm = std::ptr::null_mut();
    let device = 0;
    // SAFETY: one communicator for device 0, destroyed below.
    let init = unsafe { rccl.ncclCommInitAll(&mut comm, 1, &device) }.unwrap();
    assert_eq!(init, rccl_sys::ncclResult_t::ncclSuccess);
    assert_eq!(hip!(hipStreamBeginCapture, s, RELAXED), OK);
    // SAFETY: a live communicator; buffers of its device.
    let refused = unsafe {
        rccl.ncclAllReduce(
            a,
            c,
            4,
            rccl_sys::ncclDataType_t::ncclFloat32,
            rccl_sys::ncclRedOp_t::ncclSum,
            comm,
            s,
        )
    }
    .unwrap();
    assert_eq!(refused, rccl_sys::ncclResult_t::ncclInvalidUsage);
    assert_eq!(status(s), Status::hipStreamCaptureStatusActive);
    let graph = end_ok(s);
    assert_eq!(node_count(graph), 0);
    assert_eq!(hip!(hipGraphDestroy, graph), OK);
    // SAFETY: live handles, destroyed once.
    unsafe {
        let destroyed = rccl.ncclCommDestroy(comm).unwrap();
        assert_eq!(destroyed, rccl_sys::ncclResult_t::ncclSuccess);
        let destroyed = blas.rocblas_destroy_handle(handle).unwrap();
        assert_eq!(destroyed, rocblas_status::rocblas_status_success);
    }
    free_all(&[a, b, c, scalars], &[s]);
}

#[test]
fn miopen_convolutions_are_captured() {
    use miopen_sys::{
        miopenConvFwdAlgorithm_t, miopenConvolutionMode_t, miopenDataType_t, miopenStatus_t,
    };
    let _serial = platform();
    let dnn = miopen_sys::miopen().expect("the shim's MIOpen");
    let ok = miopenStatus_t::miopenStatusSuccess;
    let s = new_stream();
    let (x, w, y) = (malloc(16), malloc(8), malloc(12));
    upload(w, &[1.0, 10.0]);
    upload(y, &[-1.0; 3]);
    let (mut handle, mut x_desc, mut w_desc, mut y_desc, mut conv) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    let f32_t = miopenDataType_t::miopenFloat;
    let (mut alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: valid out-pointers and dimension arrays; every object is
    // destroyed below.
    unsafe {
        assert_eq!(dnn.miopenCreate(&mut handle).unwrap(), ok);
        assert_eq!(dnn.miopenSetStream(handle, s).unwrap(), ok);
        for (desc, dims) in [
            (&mut x_desc, [1, 1, 1, 4]),
            (&mut w_desc, [1, 1, 1, 2]),
            (&mut y_desc, [1, 1, 1, 3]),
        ] {
            assert_eq!(dnn.miopenCreateTensorDescriptor(desc).unwrap(), ok);
            let strides = [dims[3], dims[3], dims[3], 1];
            let set =
                dnn.miopenSetTensorDescriptor(*desc, f32_t, 4, dims.as_ptr(), strides.as_ptr());
            assert_eq!(set.unwrap(), ok);
        }
        assert_eq!(
            dnn.miopenCreateConvolutionDescriptor(&mut conv).unwrap(),
            ok
        );
        let (pad, stride, dilation) = ([0, 0], [1, 1], [1, 1]);
        let init = dnn.miopenInitConvolutionNdDescriptor(
            conv,
            2,
            pad.as_ptr(),
            stride.as_ptr(),
            dilation.as_ptr(),
            miopenConvolutionMode_t::miopenConvolution,
        );
        assert_eq!(init.unwrap(), ok);
    }
    assert_eq!(hip!(hipStreamBeginCapture, s, GLOBAL), OK);
    // SAFETY: live descriptors of the live buffers; host scalars.
    let captured = unsafe {
        dnn.miopenConvolutionForward(
            handle,
            std::ptr::from_ref(&alpha).cast(),
            x_desc,
            x,
            w_desc,
            w,
            conv,
            miopenConvFwdAlgorithm_t::miopenConvolutionFwdAlgoGEMM,
            std::ptr::from_ref(&beta).cast(),
            y_desc,
            y,
            std::ptr::null_mut(),
            0,
        )
    };
    assert_eq!(captured.unwrap(), ok);
    // The scalars were copied at the call.
    alpha = 100.0;
    std::hint::black_box(alpha);
    let graph = end_ok(s);
    assert_eq!(node_count(graph), 1);
    assert_eq!(download(y, 3), [-1.0; 3]);
    let exec = instantiate(graph);
    for x_values in [[1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 0.0, 1.0]] {
        upload(x, &x_values);
        assert_eq!(hip!(hipGraphLaunch, exec, s), OK);
        let want: Vec<f32> = (0..3)
            .map(|i| x_values[i] + 10.0 * x_values[i + 1])
            .collect();
        assert_eq!(download(y, 3), want);
    }
    assert_eq!(hip!(hipGraphExecDestroy, exec), OK);
    assert_eq!(hip!(hipGraphDestroy, graph), OK);
    // SAFETY: live objects, destroyed once.
    unsafe {
        for desc in [x_desc, w_desc, y_desc] {
            assert_eq!(dnn.miopenDestroyTensorDescriptor(desc).unwrap(), ok);
        }
        assert_eq!(dnn.miopenDestroyConvolutionDescriptor(conv).unwrap(), ok);
        assert_eq!(dnn.miopenDestroy(handle).unwrap(), ok);
    }
    free_all(&[x, w, y], &[s]);
}

#[test]
fn graphs_work_across_devices() {
    let _serial = platform();
    run_child(
        "child_graphs_work_across_devices",
        &[("HIP_ON_CPU_DEVICES", "2")],
    );
}

/// With 2 devices: a capture on a stream of device 1 allocates device 1
/// memory and copies into a device 0 buffer; the graph is launched on
/// streams of both devices.
#[test]
#[ignore = "run by graphs_work_across_devices in a child process"]
fn child_graphs_work_across_devices() {
    if !is_child("child_graphs_work_across_devices") {
        return;
    }
    let _serial = platform();
    let n = 32usize;
    let bytes = n * 4;
    let free_on = |d: c_int| {
        assert_eq!(hip!(hipSetDevice, d), OK);
        free_memory()
    };
    assert_eq!(hip!(hipSetDevice, 0), OK);
    let (s0, out) = (new_stream(), malloc(bytes));
    assert_eq!(hip!(hipSetDevice, 1), OK);
    let (s1, x) = (new_stream(), malloc(bytes));
    upload(x, &vec![1.5; n]);
    let (before0, before1) = (free_on(0), free_on(1));
    // Device 0 is current; the capture's memory is its stream's device's.
    assert_eq!(hip!(hipStreamBeginCapture, s1, GLOBAL), OK);
    let mut tmp = std::ptr::null_mut();
    assert_eq!(hip!(hipMallocAsync, &mut tmp, bytes, s1), OK);
    assert_eq!(hip!(hipMemsetAsync, tmp, 0, bytes, s1), OK);
    assert_eq!(launch(s1, x, tmp, 2.0, 0.0, n as u32), OK);
    assert_eq!(hip!(hipMemcpyPeerAsync, out, 0, tmp, 1, bytes, s1), OK);
    // A peer copy naming the wrong device is refused at the call.
    assert_eq!(
        hip!(hipMemcpyPeerAsync, out, 1, tmp, 1, bytes, s1),
        E::hipErrorInvalidValue
    );
    let graph = end_ok(s1);
    assert_eq!(node_count(graph), 4);
    assert_eq!(free_on(0), before0);
    assert!(before1 - free_on(1) >= bytes);
    let exec = instantiate(graph);
    for (stream, value) in [(s0, 1.0f32), (s1, 4.0)] {
        upload(x, &vec![value; n]);
        assert_eq!(hip!(hipGraphLaunch, exec, stream), OK);
        assert_eq!(download(out, n), vec![2.0 * value; n]);
    }
    assert_eq!(hip!(hipGraphExecDestroy, exec), OK);
    assert_eq!(hip!(hipGraphDestroy, graph), OK);
    assert_eq!(free_on(1), before1);
    free_all(&[out, x], &[s0, s1]);
}
