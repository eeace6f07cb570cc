//! GPU tests of every part of hip-safe against host results.
//!
//! Ignored on machines without a GPU; run with `--include-ignored` on a
//! machine with a HIP device (or an NVIDIA GPU through tests/hip-on-cuda).
//! On the NVIDIA platform these validate our code and kernel arithmetic at
//! warp 32, not AMD code generation or rocBLAS/MIOpen numerics.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use half::{bf16, f16};
use hip_safe::{
    Blas, Conv1dConfig, ConvConfig, ConvTransposeConfig, Device, DevicePtr, DeviceRepr, Dnn,
    DnnType, Error, EventFlags, GemmConfig, GemmType, LaunchConfig, Module, Program, RtcError,
    Stream, StridedBatchedConfig, Transpose, ValidAsZeroBits,
};

const KERNELS: &str = r#"
struct Affine { float scale; float offset; unsigned n; };

extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}

extern "C" __global__ void affine(Affine p, float* x) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) {
        x[i] = x[i] * p.scale + p.offset;
    }
}

extern "C" __global__ void iota2d(double* out, unsigned width, unsigned height, long long base) {
    unsigned col = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned row = blockIdx.y * blockDim.y + threadIdx.y;
    if (col < width && row < height) {
        out[row * width + col] = (double)(base + (long long)row * 1000 + col);
    }
}

extern "C" __global__ void block_sum(const float* x, float* out, unsigned n) {
    extern __shared__ float partial[];
    unsigned t = threadIdx.x;
    float acc = 0.0f;
    for (unsigned i = t; i < n; i += blockDim.x) {
        acc += x[i];
    }
    partial[t] = acc;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half) {
            partial[t] += partial[t + half];
        }
        __syncthreads();
    }
    if (t == 0) {
        out[0] = partial[0];
    }
}

extern "C" __global__ void slow_fill(float* x, float v, unsigned n, unsigned spin) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float acc = (float)i * 1e-9f;
        for (unsigned k = 0; k < spin; ++k) {
            acc = acc * 1.0001f + 0.5f;
        }
        x[i] = v + (acc > 0.0f ? 1.0f : 0.0f);
    }
}
"#;

#[repr(C)]
#[derive(Clone, Copy)]
struct Affine {
    scale: f32,
    offset: f32,
    n: u32,
}

// SAFETY: three 4-byte fields, no padding, same layout as the C struct, and
// every bit pattern is valid.
unsafe impl DeviceRepr for Affine {}

/// The leak check measures device-wide free memory, so it runs alone: it
/// takes this lock exclusively, every other test takes it shared.
static GPU: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    GPU.read().unwrap_or_else(|p| p.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    GPU.write().unwrap_or_else(|p| p.into_inner())
}

fn device() -> Device {
    Device::new(0).expect("a HIP device")
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("hip-safe-gpu-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn kernels(dev: &Device) -> Module {
    Program::new(KERNELS, "gpu_tests.hip")
        .option("-O3")
        .cache_dir(
            std::env::temp_dir().join(format!("hip-safe-gpu-kernels-{}", std::process::id())),
        )
        .compile_for(dev)
        .expect("test kernels compile")
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// Floating-point element types under test, with their tolerances.
trait TestFloat: ValidAsZeroBits + PartialEq + std::fmt::Debug {
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    const ATOL: f64;
    const RTOL: f64;
}

macro_rules! test_float {
    ($t:ty, $from:expr, $to:expr, $atol:expr, $rtol:expr) => {
        impl TestFloat for $t {
            fn from_f64(v: f64) -> Self {
                $from(v)
            }
            fn to_f64(self) -> f64 {
                $to(self)
            }
            const ATOL: f64 = $atol;
            const RTOL: f64 = $rtol;
        }
    };
}

test_float!(f32, |v| v as f32, f64::from, 1e-4, 1e-4);
test_float!(f64, |v| v, |v| v, 1e-10, 1e-10);
test_float!(f16, f16::from_f64, f16::to_f64, 1e-2, 1e-2);
test_float!(bf16, bf16::from_f64, bf16::to_f64, 5e-2, 1e-2);

/// Host data of type `T` and the same values as f64 (after rounding to `T`).
fn data<T: TestFloat>(n: usize, seed: u64) -> (Vec<T>, Vec<f64>) {
    let host: Vec<T> = values(n, seed).into_iter().map(T::from_f64).collect();
    let exact = host.iter().map(|v| v.to_f64()).collect();
    (host, exact)
}

fn assert_close<T: TestFloat>(what: &str, got: &[T], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = 0f64;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = g.to_f64();
        let err = (g - w).abs();
        let tol = T::ATOL + T::RTOL * w.abs();
        assert!(
            err <= tol,
            "{what}: element {i}: got {g}, want {w} (error {err:e} > {tol:e})"
        );
        worst = worst.max(err);
    }
    println!("{what}: {} elements, max abs error {worst:e}", got.len());
}

// ---------------------------------------------------------------- device

#[test]
#[ignore = "needs a HIP device"]
fn gpu_device_properties_and_probe() {
    let _gpu = shared();
    assert!(hip_safe::is_available());
    let count = Device::count().unwrap();
    assert!(count >= 1);
    let dev = device();
    println!(
        "{} arch {} (full {}), wave {}, {} CUs, {} bytes, pools {}",
        dev.name(),
        dev.arch(),
        dev.full_arch(),
        dev.wave_size(),
        dev.compute_units(),
        dev.total_memory(),
        dev.supports_memory_pools()
    );
    assert_eq!(dev.ordinal(), 0);
    assert!(!dev.name().is_empty());
    assert!(!dev.arch().is_empty() && !dev.arch().contains(':'));
    assert!(dev.full_arch().starts_with(dev.arch()));
    assert!(dev.wave_size() == 32 || dev.wave_size() == 64);
    assert!(dev.compute_units() > 0);
    assert!(dev.total_memory() > 0);
    let (free, total) = dev.memory_info().unwrap();
    assert!(free > 0 && free <= total);
    dev.synchronize().unwrap();
    dev.bind_to_thread().unwrap();
    let err = Device::new(count).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let report = hip_safe::probe();
    println!("{report}");
    assert!(report.is_available());
    assert_eq!(report.devices.len(), count);
    let first = report.devices[0].as_ref().unwrap();
    assert_eq!(first.name, dev.name());
    assert_eq!(first.wave_size, dev.wave_size());
}

// ---------------------------------------------------------------- memory

fn roundtrip<T: TestFloat>(stream: &Stream) {
    let (host, _) = data::<T>(1000, 1);
    let buf = stream.clone_htod(&host).unwrap();
    assert_eq!(buf.len(), 1000);
    assert_eq!(stream.clone_dtoh(&buf).unwrap(), host);

    let copy = stream.clone_dtod(&buf).unwrap();
    let mut back = vec![T::from_f64(0.0); 1000];
    stream.memcpy_dtoh(&copy, &mut back).unwrap();
    assert_eq!(back, host);

    let owned = stream.clone_htod_owned(host.clone()).unwrap();
    assert_eq!(stream.clone_dtoh(&owned).unwrap(), host);
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_copies_roundtrip_every_dtype() {
    let _gpu = shared();
    let stream = device().new_stream().unwrap();
    roundtrip::<f32>(&stream);
    roundtrip::<f64>(&stream);
    roundtrip::<f16>(&stream);
    roundtrip::<bf16>(&stream);
    let bytes: Vec<u8> = (0..=255).collect();
    assert_eq!(
        stream
            .clone_dtoh(&stream.clone_htod(&bytes).unwrap())
            .unwrap(),
        bytes
    );
    let longs: Vec<i64> = (0..100).map(|i| i * -123_456_789_012).collect();
    assert_eq!(
        stream
            .clone_dtoh(&stream.clone_htod(&longs).unwrap())
            .unwrap(),
        longs
    );
    let empty: Vec<f32> = Vec::new();
    let buf = stream.clone_htod(&empty).unwrap();
    assert!(buf.is_empty());
    assert_eq!(stream.clone_dtoh(&buf).unwrap(), empty);
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_views_copy_into_ranges() {
    let _gpu = shared();
    let stream = device().new_stream().unwrap();
    let mut buf = stream.alloc_zeros::<f32>(10).unwrap();
    {
        let mut mid = buf.slice_mut(3..7).unwrap();
        assert_eq!(mid.len(), 4);
        stream.memcpy_htod(&[1.0, 2.0, 3.0, 4.0], &mut mid).unwrap();
        let (mut a, mut b) = mid.split_at_mut(1).unwrap();
        stream.memcpy_htod(&[10.0], &mut a).unwrap();
        stream.memcpy_htod(&[20.0, 30.0, 40.0], &mut b).unwrap();
    }
    let all = stream.clone_dtoh(&buf).unwrap();
    assert_eq!(
        all,
        vec![0.0, 0.0, 0.0, 10.0, 20.0, 30.0, 40.0, 0.0, 0.0, 0.0]
    );
    let tail = buf.slice(8..).unwrap();
    assert_eq!(stream.clone_dtoh(&tail).unwrap(), vec![0.0, 0.0]);
    let inner = buf.slice(2..9).unwrap();
    assert_eq!(
        stream.clone_dtoh(&inner.slice(1..3).unwrap()).unwrap(),
        vec![10.0, 20.0]
    );

    let mut other = stream.alloc_zeros::<f32>(4).unwrap();
    stream
        .memcpy_dtod(&buf.slice(4..8).unwrap(), &mut other)
        .unwrap();
    assert_eq!(
        stream.clone_dtoh(&other).unwrap(),
        vec![20.0, 30.0, 40.0, 0.0]
    );

    assert!(buf.try_slice(5..11).is_none());
    assert!(buf.slice(11..).is_err());
    let err = stream.memcpy_htod(&[0.0f32; 5], &mut other).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let mut small = [0.0f32; 3];
    assert!(stream.memcpy_dtoh(&other, &mut small).is_err());
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_memset_and_fill() {
    let _gpu = shared();
    let stream = device().new_stream().unwrap();
    let zeros = stream.alloc_zeros::<f64>(333).unwrap();
    assert_eq!(stream.clone_dtoh(&zeros).unwrap(), vec![0.0; 333]);

    let mut f = stream.clone_htod(&[7.0f32; 100]).unwrap();
    stream.memset_zeros(&mut f).unwrap();
    assert_eq!(stream.clone_dtoh(&f).unwrap(), vec![0.0; 100]);
    stream.fill(&mut f, 1.5f32).unwrap();
    assert_eq!(stream.clone_dtoh(&f).unwrap(), vec![1.5; 100]);

    let mut h = stream.alloc_zeros::<f16>(77).unwrap();
    stream.fill(&mut h, f16::from_f32(-2.5)).unwrap();
    assert_eq!(
        stream.clone_dtoh(&h).unwrap(),
        vec![f16::from_f32(-2.5); 77]
    );

    let mut b = stream.alloc_zeros::<u8>(9).unwrap();
    stream.fill(&mut b, 0xabu8).unwrap();
    assert_eq!(stream.clone_dtoh(&b).unwrap(), vec![0xab; 9]);

    let mut d = stream.alloc_zeros::<f64>(50).unwrap();
    stream.fill(&mut d, 1.25f64).unwrap();
    assert_eq!(stream.clone_dtoh(&d).unwrap(), vec![1.25; 50]);

    let mut l = stream.alloc_zeros::<i64>(10).unwrap();
    stream.fill(&mut l.slice_mut(2..5).unwrap(), -1i64).unwrap();
    assert_eq!(
        stream.clone_dtoh(&l).unwrap(),
        vec![0, 0, -1, -1, -1, 0, 0, 0, 0, 0]
    );
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_fill_non_repeating_patterns_on_the_device() {
    let _gpu = shared();
    let stream = device().new_stream().unwrap();
    // f64 and u64 values that repeat no 1-, 2- or 4-byte word, at lengths
    // around the powers of two the doubling copies step through.
    for n in [1usize, 2, 3, 7, 8, 9, 1000, 4097, 1_000_003] {
        let mut d = stream.alloc_zeros::<f64>(n).unwrap();
        stream.fill(&mut d, 1.25f64).unwrap();
        assert_eq!(stream.clone_dtoh(&d).unwrap(), vec![1.25; n], "{n}");
        let mut u = stream.alloc_zeros::<u64>(n + 2).unwrap();
        let word = 0x0123_4567_89ab_cdefu64;
        stream.fill(&mut u.slice_mut(1..=n).unwrap(), word).unwrap();
        let mut want = vec![word; n + 2];
        (want[0], want[n + 1]) = (0, 0);
        assert_eq!(stream.clone_dtoh(&u).unwrap(), want, "{n}");
    }
    // A 12-byte struct, filled on another stream than the buffer's.
    let other = device().new_stream().unwrap();
    let mut s = stream.alloc_zeros::<u32>(3 * 1001).unwrap();
    let mut structs = as_affines(&mut s);
    let p = Affine {
        scale: 0.5,
        offset: -3.0,
        n: 77,
    };
    other.fill(&mut structs, p).unwrap();
    let got = stream.clone_dtoh(&structs).unwrap();
    assert_eq!(got.len(), 1001);
    assert!(
        got.iter()
            .all(|a| a.scale == 0.5 && a.offset == -3.0 && a.n == 77)
    );
}

/// `words` (3 per struct) seen as `Affine`s, for filling with a struct.
fn as_affines(words: &mut hip_safe::DeviceBuffer<u32>) -> AffineView<'_> {
    AffineView(words.as_view_mut())
}

/// A typed view of `Affine`s over a buffer of `u32` words.
struct AffineView<'a>(hip_safe::DeviceViewMut<'a, u32>);

// SAFETY: the view's memory holds `len() * 3` u32 words, i.e. `len()`
// 12-byte, 4-aligned `Affine`s, borrowed mutably for the view's life.
unsafe impl DevicePtr<Affine> for AffineView<'_> {
    fn device_ptr(&self) -> *mut std::ffi::c_void {
        self.0.device_ptr()
    }
    fn len(&self) -> usize {
        self.0.len() / 3
    }
    fn stream(&self) -> &Stream {
        self.0.stream()
    }
}

// SAFETY: as above; writes go through the exclusive borrow.
unsafe impl hip_safe::DevicePtrMut<Affine> for AffineView<'_> {
    fn device_ptr_mut(&mut self) -> *mut std::ffi::c_void {
        self.0.device_ptr()
    }
}

/// The peak resident memory of this process (Linux: `VmHWM`), in bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_fill_of_a_large_buffer_needs_no_host_copy() {
    // Alone: the peak resident size is process-wide.
    let _gpu = exclusive();
    let stream = device().new_stream().unwrap();
    let n = 256usize << 20; // 2 GiB of f64
    let mut big = stream.alloc_zeros::<f64>(n).unwrap();
    stream.synchronize().unwrap();
    // Reset the peak to the current resident size (Linux: "5"), so that an
    // earlier, larger peak cannot hide a host copy of the buffer.
    std::fs::write("/proc/self/clear_refs", "5").expect("/proc/self/clear_refs");
    let before = peak_rss().expect("/proc/self/status");
    stream.fill(&mut big, 1.25f64).unwrap();
    stream.synchronize().unwrap();
    let grown = peak_rss().unwrap().saturating_sub(before);
    assert!(
        grown < 256 << 20,
        "filling 2 GiB grew the peak resident size by {grown} bytes"
    );
    for range in [0..4096, n / 2 - 2048..n / 2 + 2048, n - 4096..n] {
        let got = stream
            .clone_dtoh(&big.slice(range.clone()).unwrap())
            .unwrap();
        assert!(got.iter().all(|&v| v == 1.25), "{range:?}");
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_default_and_per_thread_streams() {
    let _gpu = shared();
    let dev = device();
    for stream in [dev.default_stream(), dev.per_thread_stream()] {
        let buf = stream.clone_htod(&[1u32, 2, 3]).unwrap();
        assert_eq!(stream.clone_dtoh(&buf).unwrap(), vec![1, 2, 3]);
        stream.synchronize().unwrap();
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_per_thread_streams_order_across_threads() {
    let _gpu = shared();
    let dev = device();
    let module = kernels(&dev);
    let slow = module.function("slow_fill").unwrap();
    let n = 1u32 << 20;
    let (to_main, from_worker) = std::sync::mpsc::channel();
    let (to_worker, from_main) = std::sync::mpsc::channel();
    let (dev, slow) = (&dev, &slow);
    std::thread::scope(|scope| {
        let worker = scope.spawn(move || {
            // Thread A: zero a buffer and start a slow kernel on A's
            // per-thread stream, then hand the buffer over while it runs.
            let a = dev.per_thread_stream();
            let buf = a.alloc_zeros::<f32>(n as usize).unwrap();
            let (v, spin) = (4.0f32, 2_000_000u32);
            let mut launch = a.launch_builder(slow);
            launch.arg(&buf).arg(&v).arg(&n).arg(&spin);
            // SAFETY: slow_fill(float*, float, unsigned, unsigned) writes [0, n).
            unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }.unwrap();
            to_main.send(buf).unwrap();
            // Back from thread B after B overwrote it: A's own stream reads.
            let buf: hip_safe::DeviceBuffer<f32> = from_main.recv().unwrap();
            assert_eq!(a.clone_dtoh(&buf).unwrap(), vec![-1.0; n as usize]);
        });
        // Thread B: its per-thread stream is another stream than A's.
        let mut buf = from_worker.recv().unwrap();
        let b = dev.per_thread_stream();
        assert_ne!(&b, buf.stream(), "per-thread streams of two threads");
        assert_eq!(b, dev.per_thread_stream());
        // The read must wait for A's kernel (5.0 = v + 1 everywhere).
        assert_eq!(b.clone_dtoh(&buf).unwrap(), vec![5.0; n as usize]);
        // A's per-thread stream cannot take work from this thread.
        let err = buf.stream().synchronize().unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        let err = buf.stream().clone_htod(&[1.0f32]).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        // A write queued from here is finished before A reads it.
        let other = dev.new_stream().unwrap();
        let src = other.clone_htod(&vec![-1.0f32; n as usize]).unwrap();
        other.memcpy_dtod(&src, &mut buf).unwrap();
        to_worker.send(buf).unwrap();
        worker.join().unwrap();
    });
}

// ---------------------------------------------------------------- kernels

#[test]
#[ignore = "needs a HIP device"]
fn gpu_kernel_launch_scalars_buffers_views_structs() {
    let _gpu = shared();
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let module = kernels(&dev);

    let n = 10_000u32;
    let x: Vec<f32> = values(n as usize, 2).iter().map(|&v| v as f32).collect();
    let y0: Vec<f32> = values(n as usize, 3).iter().map(|&v| v as f32).collect();
    let dx = stream.clone_htod(&x).unwrap();
    let dy = stream.clone_htod(&y0).unwrap();
    let saxpy = module.function("saxpy").unwrap();
    println!(
        "saxpy: {} registers, {} bytes local, max block {}",
        saxpy.num_registers().unwrap(),
        saxpy.local_size_bytes().unwrap(),
        saxpy.max_threads_per_block().unwrap()
    );
    let a = 2.5f32;
    let mut launch = stream.launch_builder(&saxpy);
    launch.arg(&a).arg(&dx).arg(&dy).arg(&n);
    // SAFETY: saxpy(float, const float*, float*, unsigned) touches [0, n).
    unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }.unwrap();
    // The device may fuse the multiply-add: compare with a tolerance.
    let want: Vec<f64> = x
        .iter()
        .zip(&y0)
        .map(|(x, y)| f64::from(a) * f64::from(*x) + f64::from(*y))
        .collect();
    assert_close("saxpy", &stream.clone_dtoh(&dy).unwrap(), &want);

    // A view passes an offset pointer; a struct passes by value.
    let affine = module.function("affine").unwrap();
    let mut buf = stream.clone_htod(&[1.0f32; 16]).unwrap();
    {
        let view = buf.slice_mut(4..12).unwrap();
        let p = Affine {
            scale: 3.0,
            offset: 0.5,
            n: 8,
        };
        let mut launch = stream.launch_builder(&affine);
        launch.arg(&p).arg(&view);
        // SAFETY: affine(Affine, float*) touches [0, p.n) of the view.
        unsafe { launch.launch(LaunchConfig::for_num_elems(8)) }.unwrap();
    }
    let mut want = vec![1.0f32; 16];
    want[4..12].iter_mut().for_each(|v| *v = 3.5);
    assert_eq!(stream.clone_dtoh(&buf).unwrap(), want);

    // 2-D grid with 64-bit scalars.
    let iota = module.function("iota2d").unwrap();
    let (w, h) = (37u32, 19u32);
    let base = -5_000_000_000i64;
    let out = stream.alloc_zeros::<f64>((w * h) as usize).unwrap();
    let cfg = LaunchConfig {
        grid_dim: (w.div_ceil(16), h.div_ceil(8), 1),
        block_dim: (16, 8, 1),
        shared_mem_bytes: 0,
    };
    let mut launch = stream.launch_builder(&iota);
    launch.arg(&out).arg(&w).arg(&h).arg(&base);
    // SAFETY: iota2d(double*, unsigned, unsigned, long long) writes [0, w*h).
    unsafe { launch.launch(cfg) }.unwrap();
    let want: Vec<f64> = (0..h)
        .flat_map(|r| (0..w).map(move |c| (base + i64::from(r) * 1000 + i64::from(c)) as f64))
        .collect();
    assert_eq!(stream.clone_dtoh(&out).unwrap(), want);

    // Dynamic shared memory and __syncthreads.
    let sum = module.function("block_sum").unwrap();
    let xs: Vec<f32> = (0..5000).map(|i| (i % 7) as f32).collect();
    let dxs = stream.clone_htod(&xs).unwrap();
    let total = stream.alloc_zeros::<f32>(1).unwrap();
    let count = xs.len() as u32;
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 256 * 4,
    };
    let mut launch = stream.launch_builder(&sum);
    launch.arg(&dxs).arg(&total).arg(&count);
    // SAFETY: block_sum(const float*, float*, unsigned) with 256 floats of
    // shared memory reads [0, n) and writes out[0].
    unsafe { launch.launch(cfg) }.unwrap();
    let want: f32 = xs.iter().sum();
    assert_eq!(stream.clone_dtoh(&total).unwrap(), vec![want]);

    // A zero-sized grid is refused before launching.
    let bad = LaunchConfig {
        grid_dim: (0, 1, 1),
        ..LaunchConfig::for_num_elems(1)
    };
    let mut launch = stream.launch_builder(&sum);
    launch.arg(&dxs).arg(&total).arg(&count);
    // SAFETY: refused before reaching the device.
    assert!(unsafe { launch.launch(bad) }.is_err());
}

/// Captures `y = 2x` (into a buffer from before the capture), a copy into a
/// scratch buffer of the capture, `+1` on it and a copy into an output
/// that escapes the capture; returns the graph and the output.
fn capture_saxpy_plus_one(
    stream: &Stream,
    module: &Module,
    dx: &hip_safe::DeviceBuffer<f32>,
    dy: &mut hip_safe::DeviceBuffer<f32>,
) -> hip_safe::Result<(hip_safe::DeviceBuffer<f32>, hip_safe::Graph)> {
    let n = dx.len() as u32;
    let saxpy = module.function("saxpy")?;
    let affine = module.function("affine")?;
    let work = || {
        stream.memset_zeros(dy)?;
        let two = 2.0f32;
        let mut launch = stream.launch_builder(&saxpy);
        launch.arg(&two).arg(dx).arg(&*dy).arg(&n);
        // SAFETY: saxpy(float, const float*, float*, unsigned) touches [0, n).
        unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }?;
        let mut scratch = stream.alloc_zeros::<f32>(n as usize)?;
        stream.memcpy_dtod(&*dy, &mut scratch)?;
        let p = Affine {
            scale: 1.0,
            offset: 1.0,
            n,
        };
        let mut launch = stream.launch_builder(&affine);
        launch.arg(&p).arg(&scratch);
        // SAFETY: affine(Affine, float*) touches [0, p.n).
        unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }?;
        // SAFETY: written in full by the copy below before any read.
        let mut out = unsafe { stream.alloc::<f32>(n as usize) }?;
        stream.memcpy_dtod(&scratch, &mut out)?;
        Ok(out)
    };
    // SAFETY: dx and dy outlive every launch of the graph in the callers.
    unsafe { stream.capture(work) }
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_graph_capture_replays_with_new_inputs() {
    let _gpu = shared();
    let dev = device();
    let stream = dev.new_stream().unwrap();
    let module = kernels(&dev);
    let n = 3000usize;
    let mut dx = stream.clone_htod(&vec![0.0f32; n]).unwrap();
    let mut dy = stream.clone_htod(&vec![7.0f32; n]).unwrap();
    let (out, graph) = capture_saxpy_plus_one(&stream, &module, &dx, &mut dy).unwrap();
    assert!(graph.node_count() >= 5, "{graph:?}");
    // Captured work does not run.
    assert_eq!(stream.clone_dtoh(&dy).unwrap(), vec![7.0f32; n]);
    for replay in 0..3u64 {
        let x: Vec<f32> = values(n, 10 + replay).iter().map(|&v| v as f32).collect();
        stream.memcpy_htod(&x, &mut dx).unwrap();
        graph.launch().unwrap();
        let y = stream.clone_dtoh(&dy).unwrap();
        let got = stream.clone_dtoh(&out).unwrap();
        for i in 0..n {
            assert_eq!(y[i], 2.0 * x[i], "replay {replay}, y[{i}]");
            assert_eq!(got[i], 2.0 * x[i] + 1.0, "replay {replay}, out[{i}]");
        }
    }
    // The escaped output outlives the graph.
    drop(graph);
    assert_eq!(stream.clone_dtoh(&out).unwrap().len(), n);
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_graph_capture_refusals_leave_the_stream_usable() {
    let _gpu = shared();
    let dev = device();
    let stream = dev.new_stream().unwrap();
    // The null stream cannot be captured.
    // SAFETY: nothing is captured.
    let err = unsafe { dev.default_stream().capture(|| Ok::<(), Error>(())) }.unwrap_err();
    assert!(err.to_string().contains("new_stream"), "{err}");
    // Waiting for the host inside a capture fails; the capture ends.
    let buf = stream.clone_htod(&[1.0f32, 2.0]).unwrap();
    // SAFETY: the capture fails; nothing is launched.
    let err = unsafe { stream.capture(|| stream.clone_dtoh(&buf)) }.unwrap_err();
    println!("copy to host inside a capture: {err}");
    // A nested capture is refused.
    // SAFETY: nothing is launched.
    let nested = unsafe { stream.capture(|| stream.capture(|| Ok::<(), Error>(())).map(|_| ())) };
    assert!(nested.is_err());
    // The stream works normally afterwards.
    assert_eq!(stream.clone_dtoh(&buf).unwrap(), vec![1.0, 2.0]);
    // An empty capture is a valid graph.
    // SAFETY: the graph touches no memory.
    let ((), graph) = unsafe { stream.capture(|| Ok::<(), Error>(())) }.unwrap();
    graph.launch().unwrap();
    stream.synchronize().unwrap();
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_function_keeps_its_module_alive() {
    let _gpu = shared();
    let dev = device();
    let code = Program::new(KERNELS, "gpu_tests.hip")
        .without_cache()
        .compile_for_arch(dev.arch())
        .unwrap();
    let affine = {
        let module = Module::from_code_object(&dev, &code).unwrap();
        module.function("affine").unwrap()
    };
    assert!(Module::from_code_object(&dev, &[]).is_err());
    let stream = dev.new_stream().unwrap();
    let buf = stream.clone_htod(&[2.0f32; 4]).unwrap();
    let p = Affine {
        scale: 2.0,
        offset: 1.0,
        n: 4,
    };
    let mut launch = stream.launch_builder(&affine);
    launch.arg(&p).arg(&buf);
    // SAFETY: affine(Affine, float*) touches [0, 4).
    unsafe { launch.launch(LaunchConfig::for_num_elems(4)) }.unwrap();
    assert_eq!(stream.clone_dtoh(&buf).unwrap(), vec![5.0; 4]);
    assert!(
        Module::from_code_object(&dev, &code)
            .unwrap()
            .function("missing")
            .is_err()
    );
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_malformed_code_objects_are_refused_before_loading() {
    let _gpu = shared();
    let dev = device();
    let code = Program::new(KERNELS, "gpu_tests.hip")
        .without_cache()
        .compile_for_arch(dev.arch())
        .unwrap();
    // hipModuleLoadData takes no length: cut-short images must never reach it.
    for len in [1, 4, 63, 64, 200, code.len() / 2, code.len() - 1] {
        let err = Module::from_code_object(&dev, &code[..len]).unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { .. }),
            "{len} of {} bytes: {err}",
            code.len()
        );
    }
    if code.starts_with(b"\x7fELF") {
        // A section header table said to lie at the end of the image.
        let mut planted = code.clone();
        planted[40..48].copy_from_slice(&(code.len() as u64).to_le_bytes());
        let err = Module::from_code_object(&dev, &planted).unwrap_err();
        assert!(err.to_string().contains("section header table"), "{err}");
    }
    assert!(
        Module::from_code_object(&dev, &code)
            .unwrap()
            .function("affine")
            .is_ok()
    );
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_events_time_and_order_streams() {
    let _gpu = shared();
    let dev = device();
    let module = kernels(&dev);
    let slow = module.function("slow_fill").unwrap();
    let (producer, consumer) = (dev.new_stream().unwrap(), dev.new_stream().unwrap());
    let n = 1u32 << 20;
    let buf = producer.alloc_zeros::<f32>(n as usize).unwrap();
    let start = producer.record_event(EventFlags::DEFAULT).unwrap();
    let (v, spin) = (4.0f32, 2000u32);
    let mut launch = producer.launch_builder(&slow);
    launch.arg(&buf).arg(&v).arg(&n).arg(&spin);
    // SAFETY: slow_fill(float*, float, unsigned, unsigned) writes [0, n).
    unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }.unwrap();
    let stop = producer.record_event(EventFlags::DEFAULT).unwrap();
    let ready = producer.record_event(EventFlags::DISABLE_TIMING).unwrap();
    consumer.wait(&ready).unwrap();
    let mut copy = consumer.alloc_zeros::<f32>(n as usize).unwrap();
    consumer.memcpy_dtod(&buf, &mut copy).unwrap();
    let host = consumer.clone_dtoh(&copy).unwrap();
    assert!(
        host.iter().all(|&x| x == 5.0),
        "the consumer saw unfinished work"
    );
    stop.synchronize().unwrap();
    assert!(stop.is_complete().unwrap());
    let ms = stop.elapsed_ms_since(&start).unwrap();
    println!("slow_fill of {n} elements: {ms:.3} ms");
    assert!(ms > 0.0);
    assert!(
        ready.elapsed_ms_since(&start).is_err(),
        "no timing on DISABLE_TIMING"
    );
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_buffers_used_on_another_stream_are_ordered() {
    let _gpu = shared();
    let dev = device();
    let module = kernels(&dev);
    let slow = module.function("slow_fill").unwrap();
    let owner = dev.new_stream().unwrap();
    let worker = dev.new_stream().unwrap();
    let n = 1u32 << 20;
    for round in 0..3 {
        let buf = owner.alloc_zeros::<f32>(n as usize).unwrap();
        let (v, spin) = (round as f32, 3000u32);
        let mut launch = worker.launch_builder(&slow);
        launch.arg(&buf).arg(&v).arg(&n).arg(&spin);
        // SAFETY: slow_fill writes [0, n) of a buffer of n elements.
        unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }.unwrap();
        // Read back on the owning stream: it must wait for the worker.
        let host = owner.clone_dtoh(&buf).unwrap();
        assert!(host.iter().all(|&x| x == v + 1.0), "round {round}");
        // Dropping `buf` frees it on `owner`, which waits for the worker.
    }
    worker.synchronize().unwrap();
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_threads_share_device_and_function() {
    let _gpu = shared();
    let dev = device();
    let module = kernels(&dev);
    let saxpy = module.function("saxpy").unwrap();
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let (dev, saxpy) = (&dev, &saxpy);
            s.spawn(move || {
                let stream = dev.new_stream().unwrap();
                let n = 4096u32;
                let x = stream.clone_htod(&vec![1.0f32; n as usize]).unwrap();
                let y = stream.clone_htod(&vec![t as f32; n as usize]).unwrap();
                let a = 2.0f32;
                let mut launch = stream.launch_builder(saxpy);
                launch.arg(&a).arg(&x).arg(&y).arg(&n);
                // SAFETY: saxpy touches [0, n) of buffers of n elements.
                unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }.unwrap();
                let got = stream.clone_dtoh(&y).unwrap();
                assert!(got.iter().all(|&v| v == 2.0 + t as f32), "thread {t}");
            });
        }
    });
}

// ---------------------------------------------------------------- failures and leaks

#[test]
#[ignore = "needs a HIP device"]
fn gpu_out_of_memory_is_an_error_and_the_device_stays_usable() {
    let _gpu = shared();
    let stream = device().new_stream().unwrap();
    let pib = 1usize << 50;
    // SAFETY: never read; the allocation is expected to fail.
    let err = unsafe { stream.alloc::<u8>(pib) }.unwrap_err();
    println!("1 PiB allocation: {err}");
    assert!(err.is_out_of_memory(), "{err:?}");
    assert!(err.to_string().contains(&pib.to_string()), "{err}");
    let overflow = stream.alloc_zeros::<f64>(usize::MAX / 4).unwrap_err();
    assert!(
        matches!(overflow, Error::InvalidArgument { .. }),
        "{overflow}"
    );
    let buf = stream.clone_htod(&[1.0f32, 2.0, 3.0]).unwrap();
    assert_eq!(stream.clone_dtoh(&buf).unwrap(), vec![1.0, 2.0, 3.0]);
    stream.synchronize().unwrap();
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_no_leak_over_10000_alloc_launch_free_cycles() {
    let _gpu = exclusive();
    let dev = device();
    let module = kernels(&dev);
    let affine = module.function("affine").unwrap();
    let stream = dev.new_stream().unwrap();
    let n = 256 * 1024u32;
    let cycle = |stream: &Stream| {
        let buf = stream.alloc_zeros::<f32>(n as usize).unwrap();
        let p = Affine {
            scale: 1.0,
            offset: 1.0,
            n,
        };
        let mut launch = stream.launch_builder(&affine);
        launch.arg(&p).arg(&buf);
        // SAFETY: affine touches [0, n) of a buffer of n elements.
        unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }.unwrap();
    };
    for _ in 0..100 {
        cycle(&stream);
    }
    stream.synchronize().unwrap();
    dev.trim_memory_pool().unwrap();
    let (before, total) = dev.memory_info().unwrap();
    let start = Instant::now();
    for _ in 0..10_000 {
        cycle(&stream);
    }
    stream.synchronize().unwrap();
    dev.trim_memory_pool().unwrap();
    let (after, _) = dev.memory_info().unwrap();
    println!(
        "leak check: free before {before} B, after {after} B of {total} B, difference {} B, 10000 cycles of {} KiB in {:?} (memory pools: {})",
        before as i64 - after as i64,
        n / 256,
        start.elapsed(),
        dev.supports_memory_pools()
    );
    // compute-sanitizer allocates device memory of its own while the test
    // runs: under it (run.sh --sanitize sets the variable) only the plain run
    // can compare the device's free memory.
    if std::env::var_os("HIP_SAFE_TEST_UNDER_SANITIZER").is_none() {
        assert_eq!(
            before, after,
            "device free memory changed over 10000 cycles"
        );
    }
}

/// A new stream of `dev` when it has memory pools; `None` (saying so)
/// otherwise, for the pool tests to skip.
fn pool_stream(dev: &Device) -> Option<Stream> {
    if !dev.supports_memory_pools() {
        println!("memory pools unsupported: nothing to check");
        return None;
    }
    Some(dev.new_stream().unwrap())
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_memory_pool_release_threshold_keeps_freed_memory() {
    let _gpu = exclusive();
    let dev = device();
    let Some(stream) = pool_stream(&dev) else {
        return;
    };
    let bytes = 256usize << 20;
    // Device time of one allocation + zero fill + free, queued right after a
    // synchronization (the GPU idles while the host allocates).
    let cycle_after_sync = || {
        stream.synchronize().unwrap();
        let start = stream.record_event(EventFlags::DEFAULT).unwrap();
        drop(stream.alloc_zeros::<u8>(bytes).unwrap());
        let stop = stream.record_event(EventFlags::DEFAULT).unwrap();
        stop.synchronize().unwrap();
        stop.elapsed_ms_since(&start).unwrap() * 1000.0
    };
    let median = |mut t: Vec<f32>| {
        t.sort_by(f32::total_cmp);
        t[t.len() / 2]
    };
    dev.trim_memory_pool().unwrap();
    dev.set_memory_pool_release_threshold(0).unwrap();
    let released = median((0..9).map(|_| cycle_after_sync()).collect());
    stream.synchronize().unwrap();
    let after_release = dev.memory_pool_reserved().unwrap();
    dev.set_memory_pool_release_threshold(u64::MAX).unwrap();
    let cached = median((0..9).map(|_| cycle_after_sync()).collect());
    stream.synchronize().unwrap();
    let after_cache = dev.memory_pool_reserved().unwrap();
    dev.trim_memory_pool().unwrap();
    let after_trim = dev.memory_pool_reserved().unwrap();
    dev.set_memory_pool_release_threshold(0).unwrap();
    println!(
        "pool: 256 MiB alloc+zero+free after a sync: {released:.1} us with release threshold 0, \
         {cached:.1} us with u64::MAX; reserved after sync {after_release} B (threshold 0), \
         {after_cache} B (u64::MAX), {after_trim} B after trim"
    );
    assert!(
        after_release < bytes as u64,
        "threshold 0 kept {after_release} B"
    );
    assert!(
        after_cache >= bytes as u64,
        "u64::MAX kept only {after_cache} B"
    );
    assert!(after_trim < bytes as u64, "trim kept {after_trim} B");
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_allocation_that_needs_the_pools_cached_frees_succeeds() {
    let _gpu = exclusive();
    let dev = device();
    let Some(stream) = pool_stream(&dev) else {
        return;
    };
    dev.set_memory_pool_release_threshold(u64::MAX).unwrap();
    dev.trim_memory_pool().unwrap();
    let (free, _) = dev.memory_info().unwrap();
    // Eight buffers of different sizes, half the free memory in all, freed
    // in stream order: the pool keeps them (release threshold u64::MAX).
    let part = free / 16;
    let parts: Vec<hip_safe::DeviceBuffer<u8>> = (0..8)
        // SAFETY: never read.
        .map(|k| unsafe { stream.alloc::<u8>(part + k * 4096) }.unwrap())
        .collect();
    drop(parts);
    stream.synchronize().unwrap();
    let kept = dev.memory_pool_reserved().unwrap();
    // More than the memory outside the pool's reserve: it fits once the
    // pool gives back what it keeps.
    let big = free / 10 * 6;
    // SAFETY: never read.
    let result = unsafe { stream.alloc::<u8>(big) };
    let reserved = dev.memory_pool_reserved().unwrap();
    println!(
        "{free} B free; the pool kept {kept} B of freed buffers; a {big} B allocation: {}; \
         pool reserve after it {reserved} B",
        if result.is_ok() {
            "allocated"
        } else {
            "failed"
        }
    );
    let buffer = result.unwrap();
    drop(buffer);
    stream.synchronize().unwrap();
    dev.trim_memory_pool().unwrap();
    dev.set_memory_pool_release_threshold(0).unwrap();
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_allocation_cache_reuses_small_buffers_in_stream_order() {
    let _gpu = shared();
    let dev = device();
    let stream = dev.new_stream().unwrap();
    stream.set_allocation_cache_limit(8 << 10);
    if !dev.supports_memory_pools() {
        println!("memory pools unsupported: the cache stays off");
        assert_eq!(stream.allocation_cache_bytes(), 0);
        return;
    }
    // A freed 1000-element f32 buffer (class 4 KiB) serves the next request
    // of that class, even one of another type and length.
    let first = stream.clone_htod(&[7.0f32; 1000]).unwrap();
    let addr = first.device_ptr();
    drop(first);
    assert_eq!(stream.allocation_cache_bytes(), 4096);
    let reused = stream.clone_htod(&[3u32; 900]).unwrap();
    assert_eq!(reused.device_ptr(), addr, "same class, same memory");
    assert_eq!(stream.allocation_cache_bytes(), 0);
    assert_eq!(stream.clone_dtoh(&reused).unwrap(), vec![3u32; 900]);
    // Reuse is in stream order: a kernel-free chain of copies through
    // recycled buffers keeps every value.
    let mut expect = vec![0.0f32; 700];
    let mut buf = stream.clone_htod(&expect).unwrap();
    for round in 1..20 {
        let fresh: Vec<f32> = (0..700).map(|i| (round * 1000 + i) as f32).collect();
        // SAFETY: written by the copy below before it is read.
        let mut next = unsafe { stream.alloc::<f32>(700) }.unwrap();
        stream.memcpy_htod(&fresh, &mut next).unwrap();
        drop(buf);
        buf = next;
        expect = fresh;
    }
    assert_eq!(stream.clone_dtoh(&buf).unwrap(), expect);
    // The limit bounds what is kept; requests above 1 MiB bypass the cache.
    let held: Vec<_> = (0..3)
        // SAFETY: never read.
        .map(|_| unsafe { stream.alloc::<u8>(4096) }.unwrap())
        .collect();
    drop(held);
    assert_eq!(stream.allocation_cache_bytes(), 8 << 10);
    drop(
        stream
            .alloc_zeros::<u8>(Stream::MAX_CACHED_ALLOCATION + 1)
            .unwrap(),
    );
    assert_eq!(stream.allocation_cache_bytes(), 8 << 10);
    // Lowering the limit frees what no longer fits; 0 turns the cache off.
    stream.set_allocation_cache_limit(4096);
    assert_eq!(stream.allocation_cache_bytes(), 4096);
    stream.set_allocation_cache_limit(0);
    assert_eq!(stream.allocation_cache_bytes(), 0);
    drop(stream.alloc_zeros::<u8>(100).unwrap());
    assert_eq!(stream.allocation_cache_bytes(), 0);
    stream.synchronize().unwrap();
}

// ---------------------------------------------------------------- hipRTC

#[test]
#[ignore = "needs a HIP device"]
fn gpu_program_cache_cold_vs_warm() {
    let _gpu = shared();
    let dev = device();
    let dir = temp_dir("cache");
    let program = Program::new(KERNELS, "cache_test.hip").cache_dir(&dir);
    let start = Instant::now();
    let cold = program.compile_for(&dev).unwrap();
    let cold_time = start.elapsed();
    let start = Instant::now();
    let warm = program.compile_for(&dev).unwrap();
    let warm_time = start.elapsed();
    println!(
        "compile for {}: cold {cold_time:?}, warm (cached) {warm_time:?}",
        dev.arch()
    );
    assert!(warm_time < cold_time);
    let stream = dev.new_stream().unwrap();
    for module in [cold, warm] {
        let buf = stream.clone_htod(&[1.0f32; 3]).unwrap();
        let p = Affine {
            scale: 4.0,
            offset: 0.0,
            n: 3,
        };
        let affine = module.function("affine").unwrap();
        let mut launch = stream.launch_builder(&affine);
        launch.arg(&p).arg(&buf);
        // SAFETY: affine touches [0, 3).
        unsafe { launch.launch(LaunchConfig::for_num_elems(3)) }.unwrap();
        assert_eq!(stream.clone_dtoh(&buf).unwrap(), vec![4.0; 3]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_program_errors_carry_the_log() {
    let _gpu = shared();
    let dev = device();
    let broken = "extern \"C\" __global__ void k(float* x) { x[0] = undefined_name; }";
    let err = Program::new(broken, "broken.hip")
        .without_cache()
        .compile_for(&dev)
        .unwrap_err();
    println!("{err}");
    match err {
        Error::Rtc(RtcError::Compilation { log, .. }) => {
            assert!(log.contains("undefined_name"), "{log}")
        }
        other => panic!("expected a compilation error, got {other}"),
    }
    let err = Program::new(KERNELS, "k.hip")
        .compile_for_arch("gfx9999")
        .unwrap_err();
    assert!(
        matches!(err, Error::Rtc(RtcError::UnsupportedArch { .. })),
        "{err}"
    );
}

// ---------------------------------------------------------------- rocBLAS

/// Column-major `alpha * op(A) * op(B) + beta * C` on the host.
fn host_gemm(cfg: &GemmConfig<f64>, a: &[f64], b: &[f64], c: &[f64]) -> Vec<f64> {
    let mut out = c.to_vec();
    for j in 0..cfg.n {
        for i in 0..cfg.m {
            let mut acc = 0.0;
            for p in 0..cfg.k {
                let av = match cfg.transa {
                    Transpose::No => a[i + p * cfg.lda],
                    Transpose::Yes => a[p + i * cfg.lda],
                };
                let bv = match cfg.transb {
                    Transpose::No => b[p + j * cfg.ldb],
                    Transpose::Yes => b[j + p * cfg.ldb],
                };
                acc += av * bv;
            }
            out[i + j * cfg.ldc] = cfg.alpha * acc + cfg.beta * c[i + j * cfg.ldc];
        }
    }
    out
}

/// `cfg` with alpha and beta converted to another scalar type.
fn with_scalars<S>(cfg: &GemmConfig<f64>, scalar: &impl Fn(f64) -> S) -> GemmConfig<S> {
    GemmConfig {
        transa: cfg.transa,
        transb: cfg.transb,
        m: cfg.m,
        n: cfg.n,
        k: cfg.k,
        alpha: scalar(cfg.alpha),
        lda: cfg.lda,
        ldb: cfg.ldb,
        beta: scalar(cfg.beta),
        ldc: cfg.ldc,
    }
}

fn check_gemm<T: TestFloat + GemmType>(blas: &Blas, scalar: impl Fn(f64) -> T::Scalar) {
    let stream = blas.stream();
    let (m, n, k) = (37, 23, 41);
    for transa in [Transpose::No, Transpose::Yes] {
        for transb in [Transpose::No, Transpose::Yes] {
            let lda = if transa == Transpose::No { m } else { k } + 3;
            let ldb = if transb == Transpose::No { k } else { n } + 1;
            let ldc = m + 2;
            let a_cols = if transa == Transpose::No { k } else { m };
            let b_cols = if transb == Transpose::No { n } else { k };
            let (ha, ea) = data::<T>(lda * a_cols, 10);
            let (hb, eb) = data::<T>(ldb * b_cols, 11);
            let (hc, ec) = data::<T>(ldc * n, 12);
            let cfg64 = GemmConfig {
                transa,
                transb,
                m,
                n,
                k,
                alpha: 0.75,
                lda,
                ldb,
                beta: -0.5,
                ldc,
            };
            let cfg = with_scalars(&cfg64, &scalar);
            let (da, db) = (
                stream.clone_htod(&ha).unwrap(),
                stream.clone_htod(&hb).unwrap(),
            );
            let mut dc = stream.clone_htod(&hc).unwrap();
            blas.gemm(cfg, &da, &db, &mut dc).unwrap();
            let got = stream.clone_dtoh(&dc).unwrap();
            let want = host_gemm(&cfg64, &ea, &eb, &ec);
            let name = std::any::type_name::<T>();
            assert_close(&format!("gemm {name} {transa:?}/{transb:?}"), &got, &want);
        }
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_blas_gemm_every_dtype_and_transpose() {
    let _gpu = shared();
    let stream = device().new_stream().unwrap();
    let blas = Blas::new(&stream).unwrap();
    check_gemm::<f32>(&blas, |v| v as f32);
    check_gemm::<f64>(&blas, |v| v);
    check_gemm::<f16>(&blas, |v| v as f32);
    check_gemm::<bf16>(&blas, |v| v as f32);
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_blas_strided_batched_with_broadcast() {
    let _gpu = shared();
    let stream = device().new_stream().unwrap();
    let blas = Blas::new(&stream).unwrap();
    let (m, n, k, batch) = (16, 12, 20, 5);
    let (ha, ea) = data::<f32>(m * k * batch, 20);
    let (hb, eb) = data::<f32>(k * n, 21); // shared by every batch
    let cfg64 = GemmConfig {
        transa: Transpose::No,
        transb: Transpose::Yes,
        m,
        n,
        k,
        alpha: 1.0,
        lda: m,
        ldb: n,
        beta: 0.0,
        ldc: m,
    };
    let cfg = StridedBatchedConfig {
        gemm: with_scalars(&cfg64, &|v| v as f32),
        batch_size: batch,
        stride_a: m * k,
        stride_b: 0,
        stride_c: m * n,
    };
    let (da, db) = (
        stream.clone_htod(&ha).unwrap(),
        stream.clone_htod(&hb).unwrap(),
    );
    let mut dc = stream.alloc_zeros::<f32>(m * n * batch).unwrap();
    blas.gemm_strided_batched(cfg, &da, &db, &mut dc).unwrap();
    let got = stream.clone_dtoh(&dc).unwrap();
    let want: Vec<f64> = (0..batch)
        .flat_map(|i| {
            host_gemm(
                &cfg64,
                &ea[i * m * k..(i + 1) * m * k],
                &eb,
                &vec![0.0; m * n],
            )
        })
        .collect();
    assert_close("gemm_strided_batched f32", &got, &want);

    let mut short = stream.alloc_zeros::<f32>(m * n * batch - 1).unwrap();
    let err = blas
        .gemm_strided_batched(cfg, &da, &db, &mut short)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Blas(hip_safe::BlasError::InvalidArgument { .. })
        ),
        "{err}"
    );
}

// ---------------------------------------------------------------- MIOpen

/// NCHW cross-correlation on the host.
fn host_conv(cfg: &ConvConfig, x: &[f64], w: &[f64]) -> Vec<f64> {
    let [oh, ow] = cfg.output().unwrap();
    let (cg, kg) = (cfg.in_channels / cfg.groups, cfg.out_channels / cfg.groups);
    let [ih, iw] = cfg.input;
    let [kh, kw] = cfg.kernel;
    let mut y = vec![0.0; cfg.batch * cfg.out_channels * oh * ow];
    for n in 0..cfg.batch {
        for ko in 0..cfg.out_channels {
            let g = ko / kg;
            for p in 0..oh {
                for q in 0..ow {
                    let mut acc = 0.0;
                    for c in 0..cg {
                        for r in 0..kh {
                            for s in 0..kw {
                                let h = (p * cfg.stride[0] + r * cfg.dilation[0]) as isize
                                    - cfg.padding[0] as isize;
                                let wi = (q * cfg.stride[1] + s * cfg.dilation[1]) as isize
                                    - cfg.padding[1] as isize;
                                if h < 0 || wi < 0 || h >= ih as isize || wi >= iw as isize {
                                    continue;
                                }
                                let xc = g * cg + c;
                                let xv = x[((n * cfg.in_channels + xc) * ih + h as usize) * iw
                                    + wi as usize];
                                let wv = w[((ko * cg + c) * kh + r) * kw + s];
                                acc += xv * wv;
                            }
                        }
                    }
                    y[((n * cfg.out_channels + ko) * oh + p) * ow + q] = acc;
                }
            }
        }
    }
    y
}

/// The adjoint of `host_conv` with respect to `x`, applied to `dy`.
fn host_conv_backward_data(cfg: &ConvConfig, dy: &[f64], w: &[f64]) -> Vec<f64> {
    let [oh, ow] = cfg.output().unwrap();
    let (cg, kg) = (cfg.in_channels / cfg.groups, cfg.out_channels / cfg.groups);
    let [ih, iw] = cfg.input;
    let [kh, kw] = cfg.kernel;
    let mut dx = vec![0.0; cfg.batch * cfg.in_channels * ih * iw];
    for n in 0..cfg.batch {
        for ko in 0..cfg.out_channels {
            let g = ko / kg;
            for p in 0..oh {
                for q in 0..ow {
                    let d = dy[((n * cfg.out_channels + ko) * oh + p) * ow + q];
                    for c in 0..cg {
                        for r in 0..kh {
                            for s in 0..kw {
                                let h = (p * cfg.stride[0] + r * cfg.dilation[0]) as isize
                                    - cfg.padding[0] as isize;
                                let wi = (q * cfg.stride[1] + s * cfg.dilation[1]) as isize
                                    - cfg.padding[1] as isize;
                                if h < 0 || wi < 0 || h >= ih as isize || wi >= iw as isize {
                                    continue;
                                }
                                let xc = g * cg + c;
                                dx[((n * cfg.in_channels + xc) * ih + h as usize) * iw
                                    + wi as usize] += d * w[((ko * cg + c) * kh + r) * kw + s];
                            }
                        }
                    }
                }
            }
        }
    }
    dx
}

fn sizes(cfg: &ConvConfig) -> (usize, usize, usize) {
    let [oh, ow] = cfg.output().unwrap();
    (
        cfg.batch * cfg.in_channels * cfg.input[0] * cfg.input[1],
        cfg.out_channels * (cfg.in_channels / cfg.groups) * cfg.kernel[0] * cfg.kernel[1],
        cfg.batch * cfg.out_channels * oh * ow,
    )
}

fn check_conv<T: TestFloat + DnnType>(dnn: &Dnn, cfg: ConvConfig, label: &str) {
    let stream = dnn.stream();
    let (nx, nw, ny) = sizes(&cfg);
    let (hx, ex) = data::<T>(nx, 30);
    let (hw, ew) = data::<T>(nw, 31);
    let (hdy, edy) = data::<T>(ny, 32);
    let (dx, dw) = (
        stream.clone_htod(&hx).unwrap(),
        stream.clone_htod(&hw).unwrap(),
    );
    let mut dy = stream.alloc_zeros::<T>(ny).unwrap();
    let want = host_conv(&cfg, &ex, &ew);
    for pass in 0..2 {
        // The second pass uses the cached algorithm choice.
        dnn.conv_forward(cfg, &dx, &dw, &mut dy).unwrap();
        assert_close(
            &format!("{label} forward (pass {pass})"),
            &stream.clone_dtoh(&dy).unwrap(),
            &want,
        );
    }
    let ddy = stream.clone_htod(&hdy).unwrap();
    let mut ddx = stream.alloc_zeros::<T>(nx).unwrap();
    dnn.conv_backward_data(cfg, &ddy, &dw, &mut ddx).unwrap();
    let want = host_conv_backward_data(&cfg, &edy, &ew);
    assert_close(
        &format!("{label} backward data"),
        &stream.clone_dtoh(&ddx).unwrap(),
        &want,
    );
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_dnn_conv2d_forward_and_backward_data() {
    let _gpu = shared();
    let stream = device().new_stream().unwrap();
    let dnn = Dnn::new(&stream).unwrap();
    let plain = ConvConfig {
        batch: 2,
        in_channels: 3,
        out_channels: 5,
        input: [9, 11],
        kernel: [3, 3],
        padding: [0, 0],
        stride: [1, 1],
        dilation: [1, 1],
        groups: 1,
    };
    check_conv::<f32>(&dnn, plain, "conv2d f32 plain");
    let full = ConvConfig {
        in_channels: 4,
        out_channels: 6,
        input: [13, 10],
        kernel: [3, 2],
        padding: [1, 2],
        stride: [2, 1],
        dilation: [2, 1],
        groups: 2,
        ..plain
    };
    check_conv::<f32>(&dnn, full, "conv2d f32 groups/pad/stride/dilation");
    check_conv::<f16>(&dnn, full, "conv2d f16 groups/pad/stride/dilation");
    check_conv::<bf16>(&dnn, plain, "conv2d bf16 plain");

    let err = dnn
        .conv_forward(
            plain,
            &stream.alloc_zeros::<f32>(10).unwrap(),
            &stream.alloc_zeros::<f32>(135).unwrap(),
            &mut stream.alloc_zeros::<f32>(630).unwrap(),
        )
        .unwrap_err();
    assert!(
        matches!(err, Error::Dnn(hip_safe::DnnError::InvalidArgument { .. })),
        "{err}"
    );
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_dnn_conv1d_and_transpose() {
    let _gpu = shared();
    let stream = device().new_stream().unwrap();
    let dnn = Dnn::new(&stream).unwrap();
    let c1 = Conv1dConfig {
        batch: 3,
        in_channels: 4,
        out_channels: 2,
        input_len: 50,
        kernel_len: 5,
        padding: 2,
        stride: 3,
        dilation: 2,
        groups: 2,
    };
    check_conv::<f32>(&dnn, c1.into(), "conv1d f32");

    let t = ConvTransposeConfig {
        batch: 2,
        in_channels: 4,
        out_channels: 6,
        input: [5, 7],
        kernel: [3, 4],
        padding: [1, 0],
        output_padding: [1, 0],
        stride: [2, 1],
        dilation: [1, 1],
        groups: 2,
    };
    let forward = t.as_forward().unwrap();
    let [oh, ow] = t.output().unwrap();
    let nx = 2 * 4 * 5 * 7;
    let nw = 4 * (6 / 2) * 3 * 4;
    let (hx, ex) = data::<f32>(nx, 40);
    let (hw, ew) = data::<f32>(nw, 41);
    let (dx, dw) = (
        stream.clone_htod(&hx).unwrap(),
        stream.clone_htod(&hw).unwrap(),
    );
    let mut dy = stream.alloc_zeros::<f32>(2 * 6 * oh * ow).unwrap();
    dnn.conv_transpose(&t, &dx, &dw, &mut dy).unwrap();
    let want = host_conv_backward_data(&forward, &ex, &ew);
    assert_close(
        "conv_transpose2d f32",
        &stream.clone_dtoh(&dy).unwrap(),
        &want,
    );
}
