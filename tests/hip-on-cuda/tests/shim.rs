//! Tests of the shim through the normal loader path (`hip_sys::hip()`,
//! `hiprtc()`, `rocblas_sys::rocblas()`, `miopen_sys::miopen()`), so they
//! need `ROCM_PATH` pointing at a layout made by `hip-on-cuda-layout` on a
//! machine with an NVIDIA GPU. Only the export check runs without one.

use std::ffi::{CStr, CString, c_char, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use half::{bf16, f16};
use hip_sys::{
    HipApi, HiprtcApi, MissingSymbol, hipDeviceAttribute_t, hipDeviceProp_tR0000,
    hipDeviceProp_tR0600, hipError_t, hipEvent_t, hipFunction_attribute, hipFunction_t,
    hipMemcpyKind, hipModule_t, hipStream_t, hiprtcProgram, hiprtcResult,
};
use miopen_sys::{
    MiopenApi, miopenConvAlgoPerf_t, miopenConvBwdDataAlgorithm_t, miopenConvFwdAlgorithm_t,
    miopenConvolutionDescriptor_t, miopenConvolutionMode_t, miopenDataType_t, miopenHandle_t,
    miopenStatus_t, miopenTensorDescriptor_t,
};
use rocblas_sys::{
    RocblasApi, rocblas_datatype, rocblas_gemm_algo, rocblas_handle, rocblas_operation,
    rocblas_status,
};

const H2D: hipMemcpyKind = hipMemcpyKind::hipMemcpyHostToDevice;
const D2H: hipMemcpyKind = hipMemcpyKind::hipMemcpyDeviceToHost;

// ---------------------------------------------------------------- helpers

fn hip() -> &'static HipApi {
    hip_sys::hip().unwrap_or_else(|e| panic!("HIP runtime (set ROCM_PATH to the shim layout): {e}"))
}

fn hiprtc() -> &'static HiprtcApi {
    hip_sys::hiprtc().unwrap_or_else(|e| panic!("hipRTC: {e}"))
}

fn rocblas() -> &'static RocblasApi {
    rocblas_sys::rocblas().unwrap_or_else(|e| panic!("rocBLAS: {e}"))
}

fn miopen() -> &'static MiopenApi {
    miopen_sys::miopen().unwrap_or_else(|e| panic!("MIOpen: {e}"))
}

fn name(status: hipError_t) -> String {
    // SAFETY: hipGetErrorName returns a static string.
    let ptr = unsafe { hip().hipGetErrorName(status) }.expect("hipGetErrorName");
    // SAFETY: as above.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

/// The status of a HIP call (a missing symbol is a test failure).
fn status(result: Result<hipError_t, MissingSymbol>) -> hipError_t {
    result.unwrap_or_else(|e| panic!("{e}"))
}

fn ok(result: Result<hipError_t, MissingSymbol>, what: &str) {
    let s = status(result);
    assert_eq!(s, hipError_t::hipSuccess, "{what}: {} ({})", name(s), s.0);
}

fn rtc_ok(result: Result<hiprtcResult, MissingSymbol>, what: &str) {
    assert_eq!(
        result.unwrap_or_else(|e| panic!("{e}")),
        hiprtcResult::HIPRTC_SUCCESS,
        "{what}"
    );
}

fn blas_ok(result: Result<rocblas_status, MissingSymbol>, what: &str) {
    let s = result.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s, rocblas_status::rocblas_status_success, "{what}");
}

fn dnn_ok(result: Result<miopenStatus_t, MissingSymbol>, what: &str) {
    let s = result.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s, miopenStatus_t::miopenStatusSuccess, "{what}");
}

/// Device memory freed on drop.
struct DeviceBuffer {
    ptr: *mut c_void,
    bytes: usize,
}

impl DeviceBuffer {
    fn new(bytes: usize) -> Self {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        ok(unsafe { hip().hipMalloc(&mut ptr, bytes) }, "hipMalloc");
        Self { ptr, bytes }
    }

    fn from_slice<T: Copy>(data: &[T]) -> Self {
        let buffer = Self::new(size_of_val(data));
        buffer.upload(data);
        buffer
    }

    fn upload<T: Copy>(&self, data: &[T]) {
        assert!(size_of_val(data) <= self.bytes);
        // SAFETY: both ranges hold size_of_val(data) bytes.
        ok(
            unsafe { hip().hipMemcpy(self.ptr, data.as_ptr().cast(), size_of_val(data), H2D) },
            "hipMemcpy H2D",
        );
    }

    fn download<T: Copy + Default>(&self, count: usize) -> Vec<T> {
        let mut out = vec![T::default(); count];
        assert!(size_of_val(out.as_slice()) <= self.bytes);
        // SAFETY: both ranges hold the copied bytes.
        ok(
            unsafe {
                hip().hipMemcpy(
                    out.as_mut_ptr().cast(),
                    self.ptr,
                    size_of_val(out.as_slice()),
                    D2H,
                )
            },
            "hipMemcpy D2H",
        );
        out
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by hipMalloc, freed once.
        ok(unsafe { hip().hipFree(self.ptr) }, "hipFree");
    }
}

fn create_stream() -> hipStream_t {
    let mut stream = std::ptr::null_mut();
    // SAFETY: valid out-pointer; 1 = hipStreamNonBlocking.
    ok(
        unsafe { hip().hipStreamCreateWithFlags(&mut stream, 1) },
        "hipStreamCreateWithFlags",
    );
    stream
}

fn create_event(flags: u32) -> hipEvent_t {
    let mut event = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    ok(
        unsafe { hip().hipEventCreateWithFlags(&mut event, flags) },
        "hipEventCreateWithFlags",
    );
    event
}

fn properties() -> hipDeviceProp_tR0600 {
    let mut props = hipDeviceProp_tR0600::default();
    // SAFETY: valid out-pointer.
    ok(
        unsafe { hip().hipGetDevicePropertiesR0600(&mut props, 0) },
        "properties",
    );
    props
}

fn arch_name(props: &hipDeviceProp_tR0600) -> String {
    // SAFETY: the shim NUL-terminates the name.
    unsafe { CStr::from_ptr(props.gcnArchName.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// Deterministic values in [-1, 1) with full f32 mantissas.
fn values(count: usize, seed: u64) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn assert_close(got: &[f32], want: &[f32], tolerance: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        assert!(
            err <= tolerance * w.abs().max(1.0),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

// ---------------------------------------------------------------- exports

/// The shim library under test: `HIP_ON_CUDA_SHIM`, else the layout under
/// `ROCM_PATH`, else the cdylib cargo built for this test (`cargo test`
/// leaves it in `deps/` next to the test executable; `cargo build` also
/// copies it one level up).
fn shim_path() -> PathBuf {
    if let Some(path) = std::env::var_os("HIP_ON_CUDA_SHIM") {
        return PathBuf::from(path);
    }
    if let Some(root) = std::env::var_os("ROCM_PATH") {
        let path = PathBuf::from(root).join("lib/libamdhip64.so.6");
        if path.is_file() {
            return path;
        }
    }
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("test executable directory");
    let beside = deps.join("libhip_on_cuda.so");
    if beside.is_file() {
        return beside;
    }
    deps.parent()
        .expect("target directory")
        .join("libhip_on_cuda.so")
}

#[test]
fn exports_every_bound_symbol() {
    let path = shim_path();
    // SAFETY: loading the shim runs no initialisers with preconditions.
    let lib = unsafe { libloading::Library::new(&path) }.unwrap_or_else(|e| {
        let cause = std::error::Error::source(&e).map(ToString::to_string);
        panic!(
            "loading {}: {e}: {}",
            path.display(),
            cause.unwrap_or_default()
        )
    });
    let tables = [
        HipApi::SYMBOLS,
        HiprtcApi::SYMBOLS,
        RocblasApi::SYMBOLS,
        MiopenApi::SYMBOLS,
    ];
    let missing: Vec<&str> = tables
        .iter()
        .flat_map(|t| t.iter().copied())
        // SAFETY: only the symbol's address is looked up.
        .filter(|name| unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_err())
        .collect();
    assert!(missing.is_empty(), "{} lacks {missing:?}", path.display());
    assert_eq!(hip_on_cuda::exports::hip::HipApi::SYMBOLS, HipApi::SYMBOLS);
    assert_eq!(
        hip_on_cuda::exports::rocblas::RocblasApi::SYMBOLS,
        RocblasApi::SYMBOLS
    );
}

// ---------------------------------------------------------------- runtime

#[test]
#[ignore = "needs a HIP device"]
fn device_properties_and_attributes() {
    let api = hip();
    // SAFETY: plain calls with valid out-pointers throughout.
    unsafe {
        ok(api.hipInit(0), "hipInit");
        let mut count = 0;
        ok(api.hipGetDeviceCount(&mut count), "hipGetDeviceCount");
        assert!(count >= 1);
        let mut version = 0;
        ok(
            api.hipRuntimeGetVersion(&mut version),
            "hipRuntimeGetVersion",
        );
        assert!(
            hip_sys::RuntimeVersion::from_raw(version).has_r0600_properties(),
            "{version}"
        );
        let mut driver = 0;
        ok(api.hipDriverGetVersion(&mut driver), "hipDriverGetVersion");
        assert!(driver >= 12000, "{driver}");

        let props = properties();
        let device_name = CStr::from_ptr(props.name.as_ptr())
            .to_string_lossy()
            .into_owned();
        assert!(!device_name.is_empty());
        assert_eq!(props.warpSize, 32);
        assert!(props.totalGlobalMem > 1 << 30);
        assert!(props.multiProcessorCount > 0);
        assert!(props.maxThreadsPerBlock >= 256);
        assert_eq!(
            arch_name(&props),
            format!("sm_{}{}", props.major, props.minor)
        );
        println!(
            "{device_name}: {} MiB, {} SMs, wave {}, {}",
            props.totalGlobalMem >> 20,
            props.multiProcessorCount,
            props.warpSize,
            arch_name(&props)
        );

        let mut legacy = hipDeviceProp_tR0000::default();
        ok(
            api.hipGetDeviceProperties(&mut legacy, 0),
            "hipGetDeviceProperties",
        );
        assert_eq!(legacy.warpSize, 32);
        assert_eq!(legacy.totalGlobalMem, props.totalGlobalMem);

        let mut value = 0;
        ok(
            api.hipDeviceGetAttribute(
                &mut value,
                hipDeviceAttribute_t::hipDeviceAttributeWarpSize,
                0,
            ),
            "warp size",
        );
        assert_eq!(value, 32);
        ok(
            api.hipDeviceGetAttribute(
                &mut value,
                hipDeviceAttribute_t::hipDeviceAttributeMultiprocessorCount,
                0,
            ),
            "SM count",
        );
        assert_eq!(value, props.multiProcessorCount);
        ok(
            api.hipDeviceGetAttribute(
                &mut value,
                hipDeviceAttribute_t::hipDeviceAttributeMemoryPoolsSupported,
                0,
            ),
            "pools",
        );
        assert_eq!(value, props.memoryPoolsSupported);

        let mut device = -1;
        ok(api.hipSetDevice(0), "hipSetDevice");
        ok(api.hipGetDevice(&mut device), "hipGetDevice");
        assert_eq!(device, 0);
        let (mut free, mut total) = (0, 0);
        ok(api.hipMemGetInfo(&mut free, &mut total), "hipMemGetInfo");
        assert!(free > 0 && free <= total);
        ok(api.hipDeviceSynchronize(), "hipDeviceSynchronize");
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn memory_round_trips() {
    let api = hip();
    let data: Vec<u32> = (0..4096).collect();
    let bytes = size_of_val(data.as_slice());
    let a = DeviceBuffer::from_slice(&data);
    let b = DeviceBuffer::new(bytes);
    let c = DeviceBuffer::new(bytes);
    // SAFETY: all buffers hold `bytes` bytes; host slices are sized likewise.
    unsafe {
        ok(
            api.hipMemcpy(b.ptr, a.ptr, bytes, hipMemcpyKind::hipMemcpyDeviceToDevice),
            "D2D",
        );
        ok(
            api.hipMemcpy(
                c.ptr,
                b.ptr,
                bytes,
                hipMemcpyKind::hipMemcpyDeviceToDeviceNoCU,
            ),
            "D2D no CU",
        );
        assert_eq!(c.download::<u32>(data.len()), data);
        ok(
            api.hipMemcpy(c.ptr, a.ptr, bytes, hipMemcpyKind::hipMemcpyDefault),
            "default kind",
        );
        let mut host = vec![0_u32; data.len()];
        ok(
            api.hipMemcpy(
                host.as_mut_ptr().cast(),
                c.ptr,
                bytes,
                hipMemcpyKind::hipMemcpyDefault,
            ),
            "default D2H",
        );
        assert_eq!(host, data);

        ok(api.hipMemset(b.ptr, 0x1ab, bytes), "hipMemset");
        assert!(b.download::<u8>(bytes).iter().all(|&x| x == 0xab));
        let stream = create_stream();
        ok(api.hipMemsetD32Async(b.ptr, -2, data.len(), stream), "D32");
        ok(
            api.hipMemsetD16Async(c.ptr, 0xbeef, bytes / 2, stream),
            "D16",
        );
        ok(
            api.hipMemsetAsync(a.ptr.cast::<u8>().add(4).cast(), 7, 4, stream),
            "byte fill",
        );
        ok(api.hipStreamSynchronize(stream), "sync");
        assert!(b.download::<i32>(data.len()).iter().all(|&x| x == -2));
        assert!(c.download::<u16>(bytes / 2).iter().all(|&x| x == 0xbeef));
        assert_eq!(a.download::<u32>(3), [0, 0x0707_0707, 2]);

        // Pinned host memory and stream-ordered allocations.
        let mut pinned = std::ptr::null_mut();
        ok(api.hipHostMalloc(&mut pinned, bytes, 0), "hipHostMalloc");
        let mut pool_mem = std::ptr::null_mut();
        ok(
            api.hipMallocAsync(&mut pool_mem, bytes, stream),
            "hipMallocAsync",
        );
        ok(
            api.hipMemcpyAsync(pool_mem, data.as_ptr().cast(), bytes, H2D, stream),
            "H2D async",
        );
        ok(
            api.hipMemcpyAsync(pinned, pool_mem, bytes, D2H, stream),
            "D2H async",
        );
        ok(api.hipFreeAsync(pool_mem, stream), "hipFreeAsync");
        ok(api.hipStreamSynchronize(stream), "sync");
        assert_eq!(
            std::slice::from_raw_parts(pinned.cast::<u32>(), data.len()),
            data.as_slice()
        );
        ok(api.hipHostFree(pinned), "hipHostFree");

        let mut pool = std::ptr::null_mut();
        ok(api.hipDeviceGetDefaultMemPool(&mut pool, 0), "default pool");
        ok(api.hipMemPoolTrimTo(pool, 0), "trim");
        let mut zero = std::ptr::dangling_mut::<c_void>();
        ok(api.hipMalloc(&mut zero, 0), "hipMalloc(0)");
        assert!(zero.is_null());
        ok(api.hipStreamDestroy(stream), "hipStreamDestroy");
    }
}

static HOST_CALLS: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn count_call(user_data: *mut c_void) {
    HOST_CALLS.fetch_add(user_data as usize, Ordering::SeqCst);
}

#[test]
#[ignore = "needs a HIP device"]
fn async_copies_ordered_by_events() {
    let api = hip();
    let count = 1 << 20;
    let data: Vec<f32> = (0..count).map(|i| i as f32).collect();
    let bytes = count * 4;
    let first = DeviceBuffer::new(bytes);
    let second = DeviceBuffer::new(bytes);
    let (producer, consumer) = (create_stream(), create_stream());
    let copied = create_event(0);
    let (start, stop) = (create_event(0), create_event(0));
    // SAFETY: buffers and pinned memory hold `bytes` bytes; the handles are live.
    unsafe {
        let mut pinned = std::ptr::null_mut();
        ok(api.hipHostMalloc(&mut pinned, bytes, 0), "hipHostMalloc");
        std::ptr::copy_nonoverlapping(data.as_ptr(), pinned.cast::<f32>(), count);
        ok(api.hipEventRecord(start, producer), "record start");
        ok(
            api.hipMemcpyAsync(first.ptr, pinned, bytes, H2D, producer),
            "H2D",
        );
        ok(api.hipEventRecord(copied, producer), "record copied");
        ok(api.hipEventRecord(stop, producer), "record stop");
        ok(api.hipStreamWaitEvent(consumer, copied, 0), "wait");
        ok(
            api.hipMemcpyAsync(
                second.ptr,
                first.ptr,
                bytes,
                hipMemcpyKind::hipMemcpyDeviceToDevice,
                consumer,
            ),
            "D2D",
        );
        let mut result = vec![0.0_f32; count];
        ok(
            api.hipMemcpyAsync(result.as_mut_ptr().cast(), second.ptr, bytes, D2H, consumer),
            "D2H",
        );
        ok(
            api.hipLaunchHostFunc(
                consumer,
                Some(count_call),
                std::ptr::without_provenance_mut(3),
            ),
            "host func",
        );
        ok(api.hipStreamSynchronize(consumer), "sync consumer");
        assert_eq!(result, data);
        assert_eq!(HOST_CALLS.load(Ordering::SeqCst), 3);
        ok(api.hipStreamQuery(consumer), "query idle stream");
        ok(api.hipEventSynchronize(stop), "sync stop");
        ok(api.hipEventQuery(stop), "query done event");
        let mut ms = -1.0_f32;
        ok(api.hipEventElapsedTime(&mut ms, start, stop), "elapsed");
        assert!(ms >= 0.0, "{ms}");
        for e in [copied, start, stop] {
            ok(api.hipEventDestroy(e), "hipEventDestroy");
        }
        for s in [producer, consumer] {
            ok(api.hipStreamDestroy(s), "hipStreamDestroy");
        }
        ok(api.hipHostFree(pinned), "hipHostFree");
    }
}

// ---------------------------------------------------------------- hipRTC

const PROBE_SOURCE: &str = r#"
#include <hip/hip_fp16.h>
#include <hip/hip_bf16.h>

extern "C" __global__ void __launch_bounds__(256, 2)
probe(const float* in, float* out, unsigned long long* ballots, float* sum, int n) {
    HIP_DYNAMIC_SHARED(float, tile)
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? in[i] : 0.0f;
    tile[threadIdx.x] = v;
    __syncthreads();
    float reversed = tile[blockDim.x - 1 - threadIdx.x];
    __half h = __float2half(v);
    __hip_bfloat16 b = __float2bfloat16(v);
    float triple = fmaxf(__half2float(h + h) + __bfloat162float(b), -__builtin_huge_valf());
    float s = v;
    for (int offset = CANDLE_HIP_WAVE / 2; offset > 0; offset /= 2) {
        s += __shfl_xor(s, offset, CANDLE_HIP_WAVE);
    }
    unsigned long long mask = __ballot(v > 0.5f);
    if (i < n) {
        out[3 * i] = reversed;
        out[3 * i + 1] = triple;
        out[3 * i + 2] = s;
    }
    if (threadIdx.x % CANDLE_HIP_WAVE == 0) {
        ballots[i / CANDLE_HIP_WAVE] = mask;
    }
    unsafeAtomicAdd(sum, v);
}
"#;

/// Compiles `source` with hipRTC; returns the code object or the log.
fn compile(source: &str, options: &[&str]) -> Result<Vec<u8>, String> {
    let rtc = hiprtc();
    let src = CString::new(source).unwrap();
    let name = CString::new("probe.hip").unwrap();
    let opts: Vec<CString> = options.iter().map(|o| CString::new(*o).unwrap()).collect();
    let mut opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    let mut prog: hiprtcProgram = std::ptr::null_mut();
    // SAFETY: valid strings and out-pointers; the program is destroyed below.
    unsafe {
        rtc_ok(
            rtc.hiprtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            ),
            "create",
        );
        let status = rtc
            .hiprtcCompileProgram(prog, opt_ptrs.len() as i32, opt_ptrs.as_mut_ptr())
            .unwrap();
        let result = if status == hiprtcResult::HIPRTC_SUCCESS {
            let mut size = 0;
            rtc_ok(rtc.hiprtcGetCodeSize(prog, &mut size), "code size");
            let mut code = vec![0_u8; size];
            rtc_ok(rtc.hiprtcGetCode(prog, code.as_mut_ptr().cast()), "code");
            Ok(code)
        } else {
            let mut size = 0;
            rtc_ok(rtc.hiprtcGetProgramLogSize(prog, &mut size), "log size");
            let mut log = vec![0_u8; size];
            rtc_ok(
                rtc.hiprtcGetProgramLog(prog, log.as_mut_ptr().cast()),
                "log",
            );
            Err(format!(
                "status {}: {}",
                status.0,
                String::from_utf8_lossy(&log)
            ))
        };
        rtc_ok(rtc.hiprtcDestroyProgram(&mut prog), "destroy");
        assert!(prog.is_null());
        result
    }
}

fn load_function(code: &[u8], kernel: &str) -> (hipModule_t, hipFunction_t) {
    let api = hip();
    let mut module = std::ptr::null_mut();
    let mut function = std::ptr::null_mut();
    let kname = CString::new(kernel).unwrap();
    // SAFETY: a code object from hipRTC and valid out-pointers.
    unsafe {
        ok(
            api.hipModuleLoadData(&mut module, code.as_ptr().cast()),
            "hipModuleLoadData",
        );
        ok(
            api.hipModuleGetFunction(&mut function, module, kname.as_ptr()),
            "hipModuleGetFunction",
        );
    }
    (module, function)
}

#[test]
#[ignore = "needs a HIP device"]
fn kernel_compiled_with_hiprtc_and_launched_both_ways() {
    let api = hip();
    let arch = format!("--offload-arch={}", arch_name(&properties()));
    let code = compile(
        PROBE_SOURCE,
        &[&arch, "-DCANDLE_HIP_WAVE=32", "-O3", "-std=c++17"],
    )
    .unwrap_or_else(|log| panic!("{log}"));
    let (module, function) = load_function(&code, "probe");
    let mut max_threads = 0;
    // SAFETY: a live function and a valid out-pointer.
    ok(
        unsafe {
            api.hipFuncGetAttribute(
                &mut max_threads,
                hipFunction_attribute::HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                function,
            )
        },
        "hipFuncGetAttribute",
    );
    assert_eq!(
        max_threads, 256,
        "__launch_bounds__ keeps its first argument"
    );

    let (block, grid) = (256_u32, 2_u32);
    let n = (block * grid) as usize;
    let input: Vec<f32> = (0..n).map(|i| (i % 16) as f32 * 0.125).collect();
    let in_buf = DeviceBuffer::from_slice(&input);
    let out_buf = DeviceBuffer::new(n * 3 * 4);
    let ballot_buf = DeviceBuffer::new(n / 32 * 8);
    let sum_buf = DeviceBuffer::new(4);

    let check = |how: &str| {
        let out = out_buf.download::<f32>(n * 3);
        let ballots = ballot_buf.download::<u64>(n / 32);
        let sum = sum_buf.download::<f32>(1)[0];
        for i in 0..n {
            let block_start = i / 256 * 256;
            let reversed = input[block_start + 255 - (i - block_start)];
            let warp = &input[i / 32 * 32..i / 32 * 32 + 32];
            assert_eq!(out[3 * i], reversed, "{how}: shared memory at {i}");
            assert_eq!(out[3 * i + 1], 3.0 * input[i], "{how}: fp16/bf16 at {i}");
            assert_eq!(
                out[3 * i + 2],
                warp.iter().sum::<f32>(),
                "{how}: shuffle sum at {i}"
            );
        }
        for (w, mask) in ballots.iter().enumerate() {
            let want: u64 = (0..32)
                .filter(|&l| input[w * 32 + l] > 0.5)
                .map(|l| 1 << l)
                .sum();
            assert_eq!(*mask, want, "{how}: ballot of warp {w}");
        }
        assert_eq!(sum, input.iter().sum::<f32>(), "{how}: atomic sum");
    };

    let n_arg = n as i32;
    let mut args: [*mut c_void; 5] = [
        (&raw const in_buf.ptr).cast_mut().cast(),
        (&raw const out_buf.ptr).cast_mut().cast(),
        (&raw const ballot_buf.ptr).cast_mut().cast(),
        (&raw const sum_buf.ptr).cast_mut().cast(),
        (&raw const n_arg).cast_mut().cast(),
    ];
    // SAFETY: argument pointers match the kernel's parameters.
    unsafe {
        ok(api.hipMemset(sum_buf.ptr, 0, 4), "zero sum");
        ok(
            api.hipModuleLaunchKernel(
                function,
                grid,
                1,
                1,
                block,
                1,
                1,
                block * 4,
                std::ptr::null_mut(),
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            ),
            "launch with kernelParams",
        );
        ok(api.hipDeviceSynchronize(), "sync");
    }
    check("kernelParams");

    // The same launch through HIP's `extra` array: a packed argument buffer.
    #[repr(C)]
    struct Packed {
        input: *mut c_void,
        out: *mut c_void,
        ballots: *mut c_void,
        sum: *mut c_void,
        n: i32,
    }
    let mut packed = Packed {
        input: in_buf.ptr,
        out: out_buf.ptr,
        ballots: ballot_buf.ptr,
        sum: sum_buf.ptr,
        n: n_arg,
    };
    let mut packed_size: usize = 4 * 8 + 4;
    let mut extra: [*mut c_void; 5] = [
        std::ptr::without_provenance_mut(1),
        (&raw mut packed).cast(),
        std::ptr::without_provenance_mut(2),
        (&raw mut packed_size).cast(),
        std::ptr::without_provenance_mut(3),
    ];
    // SAFETY: as above, arguments through the extra array.
    unsafe {
        ok(api.hipMemset(out_buf.ptr, 0, n * 12), "clear out");
        ok(api.hipMemset(sum_buf.ptr, 0, 4), "zero sum");
        ok(
            api.hipModuleLaunchKernel(
                function,
                grid,
                1,
                1,
                block,
                1,
                1,
                block * 4,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                extra.as_mut_ptr(),
            ),
            "launch with extra",
        );
        ok(api.hipDeviceSynchronize(), "sync");
    }
    check("extra");
    // SAFETY: the module is no longer used.
    ok(unsafe { api.hipModuleUnload(module) }, "hipModuleUnload");
}

#[test]
#[ignore = "needs a HIP device"]
fn compile_errors_come_back_with_a_log() {
    let err = compile("__global__ void broken() { undeclared_name = 1; }", &[]).unwrap_err();
    assert!(err.starts_with("status 6"), "{err}");
    assert!(err.contains("undeclared_name"), "{err}");
}

// ---------------------------------------------------------------- rocBLAS

/// Column-major host reference: D = alpha·op(A)·op(B) + beta·C.
#[allow(clippy::too_many_arguments)]
fn host_gemm(
    trans_a: bool,
    trans_b: bool,
    (m, n, k): (usize, usize, usize),
    alpha: f64,
    a: &[f64],
    lda: usize,
    b: &[f64],
    ldb: usize,
    beta: f64,
    c: &[f64],
    ldc: usize,
) -> Vec<f64> {
    let mut d = vec![0.0; m * n];
    for j in 0..n {
        for i in 0..m {
            let mut acc = 0.0;
            for p in 0..k {
                let av = if trans_a {
                    a[p + i * lda]
                } else {
                    a[i + p * lda]
                };
                let bv = if trans_b {
                    b[j + p * ldb]
                } else {
                    b[p + j * ldb]
                };
                acc += av * bv;
            }
            d[i + j * m] = alpha * acc + beta * c[i + j * ldc];
        }
    }
    d
}

fn blas_handle(stream: hipStream_t) -> rocblas_handle {
    let api = rocblas();
    let mut handle = std::ptr::null_mut();
    // SAFETY: valid out-pointer and stream.
    unsafe {
        blas_ok(api.rocblas_create_handle(&mut handle), "create");
        blas_ok(api.rocblas_set_stream(handle, stream), "set stream");
        let mut got = std::ptr::null_mut();
        blas_ok(api.rocblas_get_stream(handle, &mut got), "get stream");
        assert_eq!(got, stream);
    }
    handle
}

#[test]
#[ignore = "needs a HIP device"]
fn gemm_f32_with_separate_d_is_not_tf32() {
    let api = rocblas();
    let stream = create_stream();
    let handle = blas_handle(stream);
    let (m, n, k) = (33_usize, 17_usize, 129_usize);
    let (lda, ldb, ldc, ldd) = (m, n, m + 3, m + 1);
    let a = values(lda * k, 1);
    let b = values(ldb * k, 2);
    let c = values(ldc * n, 3);
    let (alpha, beta) = (1.5_f32, 0.5_f32);
    let (da, db, dc) = (
        DeviceBuffer::from_slice(&a),
        DeviceBuffer::from_slice(&b),
        DeviceBuffer::from_slice(&c),
    );
    let dd = DeviceBuffer::new(ldd * n * 4);
    let f32_r = rocblas_datatype::rocblas_datatype_f32_r;
    // SAFETY: buffers sized for the leading dimensions; host scalars.
    unsafe {
        blas_ok(
            api.rocblas_gemm_ex(
                handle,
                rocblas_operation::rocblas_operation_none,
                rocblas_operation::rocblas_operation_transpose,
                m as i32,
                n as i32,
                k as i32,
                (&raw const alpha).cast(),
                da.ptr,
                f32_r,
                lda as i32,
                db.ptr,
                f32_r,
                ldb as i32,
                (&raw const beta).cast(),
                dc.ptr,
                f32_r,
                ldc as i32,
                dd.ptr,
                f32_r,
                ldd as i32,
                f32_r,
                rocblas_gemm_algo::rocblas_gemm_algo_standard,
                0,
                0,
            ),
            "gemm_ex f32",
        );
        ok(hip().hipStreamSynchronize(stream), "sync");
    }
    let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    let want = host_gemm(
        false,
        true,
        (m, n, k),
        1.5,
        &wide(&a),
        lda,
        &wide(&b),
        ldb,
        0.5,
        &wide(&c),
        ldc,
    );
    let got = dd.download::<f32>(ldd * n);
    for j in 0..n {
        for i in 0..m {
            let (g, w) = (f64::from(got[i + j * ldd]), want[i + j * m]);
            // FP32 accumulation error is ~1e-6 here; TF32 inputs would be ~1e-3 off.
            assert!(
                (g - w).abs() < 2e-5 * (k as f64).sqrt(),
                "D[{i},{j}] = {g}, want {w}"
            );
        }
    }
    // SAFETY: the handle and stream are no longer used.
    unsafe {
        blas_ok(api.rocblas_destroy_handle(handle), "destroy");
        ok(hip().hipStreamDestroy(stream), "stream destroy");
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn gemm_bf16_f16_and_batched_f64() {
    let api = rocblas();
    let stream = create_stream();
    let handle = blas_handle(stream);
    let (m, n, k) = (64_usize, 48_usize, 32_usize);
    let a = values(m * k, 4);
    let b = values(k * n, 5);
    let zero_c = vec![0.0_f64; m * n];
    let (alpha, beta) = (1.0_f32, 0.0_f32);
    let none = rocblas_operation::rocblas_operation_none;
    let f32_r = rocblas_datatype::rocblas_datatype_f32_r;
    let standard = rocblas_gemm_algo::rocblas_gemm_algo_standard;
    for (ty, to_bits, from_bits) in [
        (
            rocblas_datatype::rocblas_datatype_bf16_r,
            (|x: f32| bf16::from_f32(x).to_bits()) as fn(f32) -> u16,
            (|x: u16| bf16::from_bits(x).to_f32()) as fn(u16) -> f32,
        ),
        (
            rocblas_datatype::rocblas_datatype_f16_r,
            |x: f32| f16::from_f32(x).to_bits(),
            |x: u16| f16::from_bits(x).to_f32(),
        ),
    ] {
        let a16: Vec<u16> = a.iter().map(|&x| to_bits(x)).collect();
        let b16: Vec<u16> = b.iter().map(|&x| to_bits(x)).collect();
        let (da, db) = (
            DeviceBuffer::from_slice(&a16),
            DeviceBuffer::from_slice(&b16),
        );
        let dd = DeviceBuffer::new(m * n * 2);
        // SAFETY: buffers sized for the shapes; C == D.
        unsafe {
            blas_ok(
                api.rocblas_gemm_ex(
                    handle,
                    none,
                    none,
                    m as i32,
                    n as i32,
                    k as i32,
                    (&raw const alpha).cast(),
                    da.ptr,
                    ty,
                    m as i32,
                    db.ptr,
                    ty,
                    k as i32,
                    (&raw const beta).cast(),
                    dd.ptr,
                    ty,
                    m as i32,
                    dd.ptr,
                    ty,
                    m as i32,
                    f32_r,
                    standard,
                    0,
                    0,
                ),
                "gemm_ex 16-bit",
            );
            ok(hip().hipStreamSynchronize(stream), "sync");
        }
        let rounded = |v: &[u16]| {
            v.iter()
                .map(|&x| f64::from(from_bits(x)))
                .collect::<Vec<_>>()
        };
        let want = host_gemm(
            false,
            false,
            (m, n, k),
            1.0,
            &rounded(&a16),
            m,
            &rounded(&b16),
            k,
            0.0,
            &zero_c,
            m,
        );
        let got: Vec<f32> = dd
            .download::<u16>(m * n)
            .into_iter()
            .map(from_bits)
            .collect();
        let want: Vec<f32> = want.iter().map(|&x| x as f32).collect();
        assert_close(&got, &want, 1e-2, &format!("gemm type {}", ty.0));
    }

    // f64, strided batched, transposed A.
    let batch = 3_usize;
    let a = values(k * m * batch, 6);
    let b = values(k * n * batch, 7);
    let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    let (a64, b64) = (wide(&a), wide(&b));
    let (da, db) = (
        DeviceBuffer::from_slice(&a64),
        DeviceBuffer::from_slice(&b64),
    );
    let dd = DeviceBuffer::new(m * n * batch * 8);
    let (alpha, beta) = (2.0_f64, 0.0_f64);
    let f64_r = rocblas_datatype::rocblas_datatype_f64_r;
    // SAFETY: buffers sized for the batch; C == D.
    unsafe {
        blas_ok(
            api.rocblas_gemm_strided_batched_ex(
                handle,
                rocblas_operation::rocblas_operation_transpose,
                none,
                m as i32,
                n as i32,
                k as i32,
                (&raw const alpha).cast(),
                da.ptr,
                f64_r,
                k as i32,
                (k * m) as i64,
                db.ptr,
                f64_r,
                k as i32,
                (k * n) as i64,
                (&raw const beta).cast(),
                dd.ptr,
                f64_r,
                m as i32,
                (m * n) as i64,
                dd.ptr,
                f64_r,
                m as i32,
                (m * n) as i64,
                batch as i32,
                f64_r,
                standard,
                0,
                0,
            ),
            "strided batched f64",
        );
        ok(hip().hipStreamSynchronize(stream), "sync");
    }
    let got = dd.download::<f64>(m * n * batch);
    for p in 0..batch {
        let want = host_gemm(
            true,
            false,
            (m, n, k),
            2.0,
            &a64[p * k * m..],
            k,
            &b64[p * k * n..],
            k,
            0.0,
            &zero_c,
            m,
        );
        for (i, w) in want.iter().enumerate() {
            assert!(
                (got[p * m * n + i] - w).abs() < 1e-12,
                "batch {p} element {i}"
            );
        }
    }
    // SAFETY: the handle and stream are no longer used.
    unsafe {
        blas_ok(api.rocblas_destroy_handle(handle), "destroy");
        ok(hip().hipStreamDestroy(stream), "stream destroy");
    }
}

// ---------------------------------------------------------------- MIOpen

fn tensor_desc(dims: &[i32]) -> miopenTensorDescriptor_t {
    let api = miopen();
    let mut desc = std::ptr::null_mut();
    // SAFETY: valid out-pointer and dims; null strides mean packed.
    unsafe {
        dnn_ok(api.miopenCreateTensorDescriptor(&mut desc), "create tensor");
        dnn_ok(
            api.miopenSetTensorDescriptor(
                desc,
                miopenDataType_t::miopenFloat,
                dims.len() as i32,
                dims.as_ptr(),
                std::ptr::null(),
            ),
            "set tensor",
        );
    }
    desc
}

fn conv_desc(
    mode: miopenConvolutionMode_t,
    pad: i32,
    stride: i32,
) -> miopenConvolutionDescriptor_t {
    let api = miopen();
    let mut desc = std::ptr::null_mut();
    let (pads, strides, dilations) = ([pad; 2], [stride; 2], [1; 2]);
    // SAFETY: valid out-pointer and 2-element arrays.
    unsafe {
        dnn_ok(
            api.miopenCreateConvolutionDescriptor(&mut desc),
            "create conv",
        );
        dnn_ok(
            api.miopenInitConvolutionNdDescriptor(
                desc,
                2,
                pads.as_ptr(),
                strides.as_ptr(),
                dilations.as_ptr(),
                mode,
            ),
            "init conv",
        );
        dnn_ok(api.miopenSetConvolutionGroupCount(desc, 1), "groups");
        dnn_ok(
            api.miopenSetTransposeConvNdOutputPadding(desc, 2, [0, 0].as_ptr()),
            "output padding",
        );
    }
    desc
}

/// Host cross-correlation: x [n, c, h, w], w [k, c, r, s] → [n, k, oh, ow].
fn host_conv(
    x: &[f32],
    xd: [usize; 4],
    w: &[f32],
    wd: [usize; 4],
    pad: usize,
    stride: usize,
    od: [usize; 4],
) -> Vec<f32> {
    let mut y = vec![0.0_f32; od.iter().product()];
    for n in 0..od[0] {
        for k in 0..od[1] {
            for oy in 0..od[2] {
                for ox in 0..od[3] {
                    let mut acc = 0.0_f64;
                    for c in 0..xd[1] {
                        for r in 0..wd[2] {
                            for s in 0..wd[3] {
                                let iy = (oy * stride + r) as isize - pad as isize;
                                let ix = (ox * stride + s) as isize - pad as isize;
                                if iy < 0 || ix < 0 || iy >= xd[2] as isize || ix >= xd[3] as isize
                                {
                                    continue;
                                }
                                let xv = x
                                    [((n * xd[1] + c) * xd[2] + iy as usize) * xd[3] + ix as usize];
                                let wv = w[((k * wd[1] + c) * wd[2] + r) * wd[3] + s];
                                acc += f64::from(xv) * f64::from(wv);
                            }
                        }
                    }
                    y[((n * od[1] + k) * od[2] + oy) * od[3] + ox] = acc as f32;
                }
            }
        }
    }
    y
}

/// Host transposed convolution (the adjoint of [`host_conv`]): dy [n, k, oh,
/// ow] with w [k, c, r, s] → dx [n, c, h, w].
fn host_conv_transpose(
    dy: &[f32],
    dyd: [usize; 4],
    w: &[f32],
    wd: [usize; 4],
    pad: usize,
    stride: usize,
    xd: [usize; 4],
) -> Vec<f32> {
    let mut dx = vec![0.0_f64; xd.iter().product()];
    for n in 0..dyd[0] {
        for k in 0..dyd[1] {
            for oy in 0..dyd[2] {
                for ox in 0..dyd[3] {
                    let g = f64::from(dy[((n * dyd[1] + k) * dyd[2] + oy) * dyd[3] + ox]);
                    for c in 0..wd[1] {
                        for r in 0..wd[2] {
                            for s in 0..wd[3] {
                                let iy = (oy * stride + r) as isize - pad as isize;
                                let ix = (ox * stride + s) as isize - pad as isize;
                                if iy < 0 || ix < 0 || iy >= xd[2] as isize || ix >= xd[3] as isize
                                {
                                    continue;
                                }
                                let wv = f64::from(w[((k * wd[1] + c) * wd[2] + r) * wd[3] + s]);
                                dx[((n * xd[1] + c) * xd[2] + iy as usize) * xd[3]
                                    + ix as usize] += g * wv;
                            }
                        }
                    }
                }
            }
        }
    }
    dx.into_iter().map(|v| v as f32).collect()
}

/// Allocates the workspace, runs Find and returns the fastest algorithm.
fn find_forward(
    handle: miopenHandle_t,
    (x_desc, x): (miopenTensorDescriptor_t, &DeviceBuffer),
    (w_desc, w): (miopenTensorDescriptor_t, &DeviceBuffer),
    conv: miopenConvolutionDescriptor_t,
    (y_desc, y): (miopenTensorDescriptor_t, &DeviceBuffer),
) -> (miopenConvFwdAlgorithm_t, DeviceBuffer) {
    let api = miopen();
    let mut size = 0;
    let mut perfs = [miopenConvAlgoPerf_t::default(); 4];
    let mut returned = 0;
    // SAFETY: live descriptors and buffers of the described shapes.
    unsafe {
        dnn_ok(
            api.miopenConvolutionForwardGetWorkSpaceSize(
                handle, w_desc, x_desc, conv, y_desc, &mut size,
            ),
            "fwd workspace",
        );
        let workspace = DeviceBuffer::new(size.max(1));
        dnn_ok(
            api.miopenFindConvolutionForwardAlgorithm(
                handle,
                x_desc,
                x.ptr,
                w_desc,
                w.ptr,
                conv,
                y_desc,
                y.ptr,
                4,
                &mut returned,
                perfs.as_mut_ptr(),
                workspace.ptr,
                size,
                false,
            ),
            "find forward",
        );
        assert!(returned >= 1);
        (perfs[0].__bindgen_anon_1.fwd_algo, workspace)
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn convolution_forward_backward_data_and_transpose() {
    let api = miopen();
    let stream = create_stream();
    let mut handle = std::ptr::null_mut();
    // SAFETY: valid out-pointer and stream.
    unsafe {
        dnn_ok(api.miopenCreate(&mut handle), "miopenCreate");
        dnn_ok(api.miopenSetStream(handle, stream), "set stream");
    }
    let (pad, stride) = (1_usize, 2_usize);
    let (xd, wd) = ([2_usize, 3, 7, 7], [4_usize, 3, 3, 3]);
    let as_i32 = |d: [usize; 4]| d.map(|v| v as i32);
    let x = values(xd.iter().product(), 8);
    let w = values(wd.iter().product(), 9);
    let (x_desc, w_desc) = (tensor_desc(&as_i32(xd)), tensor_desc(&as_i32(wd)));
    let conv = conv_desc(
        miopenConvolutionMode_t::miopenConvolution,
        pad as i32,
        stride as i32,
    );
    let mut out_dims = [0_i32; 4];
    let mut nd = 0;
    // SAFETY: live descriptors and a 4-element output.
    unsafe {
        dnn_ok(
            api.miopenGetConvolutionNdForwardOutputDim(
                conv,
                x_desc,
                w_desc,
                &mut nd,
                out_dims.as_mut_ptr(),
            ),
            "output dims",
        );
    }
    assert_eq!((nd, out_dims), (4, [2, 4, 4, 4]));
    let yd = out_dims.map(|v| v as usize);
    let y_desc = tensor_desc(&out_dims);
    let (dx_buf, dw_buf) = (DeviceBuffer::from_slice(&x), DeviceBuffer::from_slice(&w));
    let dy_buf = DeviceBuffer::new(yd.iter().product::<usize>() * 4);

    // Forward (cross-correlation).
    let (algo, workspace) = find_forward(
        handle,
        (x_desc, &dx_buf),
        (w_desc, &dw_buf),
        conv,
        (y_desc, &dy_buf),
    );
    let (one, zero) = (1.0_f32, 0.0_f32);
    // SAFETY: as above, with the algorithm Find reported.
    unsafe {
        dnn_ok(
            api.miopenConvolutionForward(
                handle,
                (&raw const one).cast(),
                x_desc,
                dx_buf.ptr,
                w_desc,
                dw_buf.ptr,
                conv,
                algo,
                (&raw const zero).cast(),
                y_desc,
                dy_buf.ptr,
                workspace.ptr,
                workspace.bytes,
            ),
            "forward",
        );
        ok(hip().hipStreamSynchronize(stream), "sync");
    }
    let want = host_conv(&x, xd, &w, wd, pad, stride, yd);
    assert_close(&dy_buf.download::<f32>(want.len()), &want, 1e-4, "forward");

    // Backward data of the convolution: the transposed convolution of dy.
    let dy = values(yd.iter().product(), 10);
    dy_buf.upload(&dy);
    let want_dx = host_conv_transpose(&dy, yd, &w, wd, pad, stride, xd);
    let mut size = 0;
    let mut perfs = [miopenConvAlgoPerf_t::default(); 4];
    let mut returned = 0;
    // SAFETY: live descriptors and buffers of the described shapes.
    unsafe {
        dnn_ok(
            api.miopenConvolutionBackwardDataGetWorkSpaceSize(
                handle, y_desc, w_desc, conv, x_desc, &mut size,
            ),
            "bwd workspace",
        );
        let ws = DeviceBuffer::new(size.max(1));
        dnn_ok(
            api.miopenFindConvolutionBackwardDataAlgorithm(
                handle,
                y_desc,
                dy_buf.ptr,
                w_desc,
                dw_buf.ptr,
                conv,
                x_desc,
                dx_buf.ptr,
                4,
                &mut returned,
                perfs.as_mut_ptr(),
                ws.ptr,
                size,
                false,
            ),
            "find backward data",
        );
        assert!(returned >= 1);
        let algo: miopenConvBwdDataAlgorithm_t = perfs[0].__bindgen_anon_1.bwd_data_algo;
        ok(
            hip().hipMemsetAsync(dx_buf.ptr, 0, dx_buf.bytes, stream),
            "clear dx",
        );
        dnn_ok(
            api.miopenConvolutionBackwardData(
                handle,
                (&raw const one).cast(),
                y_desc,
                dy_buf.ptr,
                w_desc,
                dw_buf.ptr,
                conv,
                algo,
                (&raw const zero).cast(),
                x_desc,
                dx_buf.ptr,
                ws.ptr,
                size,
            ),
            "backward data",
        );
        ok(hip().hipStreamSynchronize(stream), "sync");
    }
    assert_close(
        &dx_buf.download::<f32>(want_dx.len()),
        &want_dx,
        1e-4,
        "backward data",
    );

    // Transposed convolution (miopenTranspose): input dy, weights [K, C, r, s].
    let transpose = conv_desc(
        miopenConvolutionMode_t::miopenTranspose,
        pad as i32,
        stride as i32,
    );
    // SAFETY: live descriptors and a 4-element output.
    unsafe {
        dnn_ok(
            api.miopenGetConvolutionNdForwardOutputDim(
                transpose,
                y_desc,
                w_desc,
                &mut nd,
                out_dims.as_mut_ptr(),
            ),
            "transposed output dims",
        );
    }
    assert_eq!(out_dims, as_i32(xd));
    let out_buf = DeviceBuffer::new(dx_buf.bytes);
    let (algo, workspace) = find_forward(
        handle,
        (y_desc, &dy_buf),
        (w_desc, &dw_buf),
        transpose,
        (x_desc, &out_buf),
    );
    // SAFETY: as above.
    unsafe {
        dnn_ok(
            api.miopenConvolutionForward(
                handle,
                (&raw const one).cast(),
                y_desc,
                dy_buf.ptr,
                w_desc,
                dw_buf.ptr,
                transpose,
                algo,
                (&raw const zero).cast(),
                x_desc,
                out_buf.ptr,
                workspace.ptr,
                workspace.bytes,
            ),
            "transposed forward",
        );
        ok(hip().hipStreamSynchronize(stream), "sync");
    }
    assert_close(
        &out_buf.download::<f32>(want_dx.len()),
        &want_dx,
        1e-4,
        "transposed forward",
    );

    // Deliberate errors: an unknown mode and data type, a convolution of a
    // problem Find never saw.
    let bad_dims = [1_i32, 3, 9, 9];
    let other_x = tensor_desc(&bad_dims);
    let other_y = tensor_desc(&[1, 4, 5, 5]);
    let pads = [1_i32; 2];
    // SAFETY: live descriptors; the failing calls do not touch device memory.
    unsafe {
        let mut probe = std::ptr::null_mut();
        dnn_ok(api.miopenCreateConvolutionDescriptor(&mut probe), "create");
        let status = api
            .miopenInitConvolutionNdDescriptor(
                probe,
                2,
                pads.as_ptr(),
                pads.as_ptr(),
                pads.as_ptr(),
                miopenConvolutionMode_t(9),
            )
            .unwrap();
        assert_eq!(status, miopenStatus_t::miopenStatusBadParm);
        let status = api
            .miopenSetTensorDescriptor(
                other_x,
                miopenDataType_t(77),
                4,
                bad_dims.as_ptr(),
                std::ptr::null(),
            )
            .unwrap();
        assert_eq!(status, miopenStatus_t::miopenStatusBadParm);
        let status = api
            .miopenConvolutionForward(
                handle,
                (&raw const one).cast(),
                other_x,
                dx_buf.ptr,
                w_desc,
                dw_buf.ptr,
                conv,
                miopenConvFwdAlgorithm_t::miopenConvolutionFwdAlgoGEMM,
                (&raw const zero).cast(),
                other_y,
                dy_buf.ptr,
                std::ptr::null_mut(),
                0,
            )
            .unwrap();
        assert_ne!(status, miopenStatus_t::miopenStatusSuccess);
        dnn_ok(api.miopenDestroyConvolutionDescriptor(probe), "destroy");
        for desc in [x_desc, w_desc, y_desc, other_x, other_y] {
            dnn_ok(api.miopenDestroyTensorDescriptor(desc), "destroy tensor");
        }
        dnn_ok(api.miopenDestroyConvolutionDescriptor(conv), "destroy conv");
        dnn_ok(
            api.miopenDestroyConvolutionDescriptor(transpose),
            "destroy conv",
        );
        dnn_ok(api.miopenDestroy(handle), "miopenDestroy");
        ok(hip().hipStreamDestroy(stream), "stream destroy");
    }
}

// ---------------------------------------------------------------- errors

#[test]
#[ignore = "needs a HIP device"]
fn deliberate_errors_come_back_as_codes() {
    let api = hip();
    let buffer = DeviceBuffer::new(256);
    let mut host = [0_u8; 256];
    // SAFETY: every call is made to fail before touching invalid memory on
    // the host; device-side validation is the driver's.
    unsafe {
        let bogus = std::ptr::without_provenance::<c_void>(0x10);
        let s = status(api.hipMemcpy(host.as_mut_ptr().cast(), bogus, 256, D2H));
        assert_eq!(
            s,
            hipError_t::hipErrorInvalidValue,
            "bad device pointer: {}",
            name(s)
        );
        let s = status(api.hipMemcpy(buffer.ptr, host.as_ptr().cast(), 256, hipMemcpyKind(7)));
        assert_eq!(s, hipError_t::hipErrorInvalidMemcpyDirection);
        assert_eq!(
            status(api.hipGetLastError()),
            hipError_t::hipErrorInvalidMemcpyDirection
        );
        assert_eq!(status(api.hipGetLastError()), hipError_t::hipSuccess);

        let mut value = 0;
        let s = status(api.hipDeviceGetAttribute(&mut value, hipDeviceAttribute_t(12345), 0));
        assert_eq!(s, hipError_t::hipErrorInvalidValue);
        let s = status(api.hipSetDevice(1 << 20));
        assert_eq!(s, hipError_t::hipErrorInvalidDevice);
        let s = status(api.hipMalloc(std::ptr::null_mut(), 16));
        assert_eq!(s, hipError_t::hipErrorInvalidValue);

        let code = compile("extern \"C\" __global__ void noop() {}", &[])
            .unwrap_or_else(|l| panic!("{l}"));
        let (module, function) = load_function(&code, "noop");
        let mut missing = std::ptr::null_mut();
        let s = status(api.hipModuleGetFunction(&mut missing, module, c"absent".as_ptr()));
        assert_eq!(s, hipError_t::hipErrorNotFound);
        let s = status(api.hipFuncGetAttribute(&mut value, hipFunction_attribute(99), function));
        assert_eq!(s, hipError_t::hipErrorInvalidValue);
        let launch =
            |grid: u32, block: u32, extra: *mut *mut c_void| {
                let (stream, params) = (std::ptr::null_mut(), std::ptr::null_mut());
                status(api.hipModuleLaunchKernel(
                    function, grid, 1, 1, block, 1, 1, 0, stream, params, extra,
                ))
            };
        let s = launch(1, 2048, std::ptr::null_mut());
        assert_ne!(s, hipError_t::hipSuccess, "block of 2048 threads");
        assert_eq!(
            launch(0, 32, std::ptr::null_mut()),
            hipError_t::hipErrorInvalidValue
        );
        let mut bad_extra = [
            std::ptr::without_provenance_mut(7),
            std::ptr::null_mut(),
            std::ptr::without_provenance_mut(3),
        ];
        assert_eq!(
            launch(1, 32, bad_extra.as_mut_ptr()),
            hipError_t::hipErrorInvalidValue
        );
        let mut garbage = [0x5a_u8; 64];
        garbage[63] = 0;
        let mut bad_module = std::ptr::null_mut();
        let s = status(api.hipModuleLoadData(&mut bad_module, garbage.as_ptr().cast()));
        assert_ne!(s, hipError_t::hipSuccess);

        // The device still works after all of that.
        assert_eq!(
            launch(1, 32, std::ptr::null_mut()),
            hipError_t::hipSuccess,
            "good launch"
        );
        ok(api.hipDeviceSynchronize(), "sync");
        ok(api.hipModuleUnload(module), "unload");
    }

    let blas = rocblas();
    let stream = create_stream();
    let handle = blas_handle(stream);
    let (alpha, beta) = (1.0_f32, 0.0_f32);
    let f32_r = rocblas_datatype::rocblas_datatype_f32_r;
    let none = rocblas_operation::rocblas_operation_none;
    let standard = rocblas_gemm_algo::rocblas_gemm_algo_standard;
    // SAFETY: every call fails validation before any memory is touched.
    unsafe {
        let gemm = |op: rocblas_operation, ty: rocblas_datatype, m: i32| {
            blas.rocblas_gemm_ex(
                handle,
                op,
                none,
                m,
                4,
                4,
                (&raw const alpha).cast(),
                buffer.ptr,
                ty,
                4,
                buffer.ptr,
                ty,
                4,
                (&raw const beta).cast(),
                buffer.ptr,
                ty,
                4,
                buffer.ptr,
                ty,
                4,
                f32_r,
                standard,
                0,
                0,
            )
            .unwrap()
        };
        assert_eq!(
            gemm(rocblas_operation(5), f32_r, 4),
            rocblas_status::rocblas_status_invalid_value
        );
        assert_eq!(
            gemm(none, rocblas_datatype(999), 4),
            rocblas_status::rocblas_status_invalid_value
        );
        assert_eq!(
            gemm(none, f32_r, -1),
            rocblas_status::rocblas_status_invalid_size
        );
        blas_ok(blas.rocblas_destroy_handle(handle), "destroy");
        ok(hip().hipStreamDestroy(stream), "stream destroy");
    }
}
