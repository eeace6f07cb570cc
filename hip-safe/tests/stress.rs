//! A multi-threaded stress test of hip-safe: 8 threads share one device,
//! each with its own stream and rocBLAS handle, and run 10,000 mixed
//! operations (element-wise kernels, block reductions, GEMMs, uploads,
//! downloads, fills, copies within a buffer and copies between the threads'
//! buffers), checking every result against a host mirror, then check that
//! the device's free memory is back where it started. Each thread's
//! sequence of operations is fixed by its seed; only which snapshots of the
//! other threads it receives depends on timing, and it adopts their mirrors
//! with them.
//!
//! Every value is an integer small enough that f32 arithmetic on it is exact
//! (sums and dot products stay below 2^24), so the GPU and the host agree
//! bit for bit whatever order a kernel or the BLAS library sums in. The host
//! arithmetic is unit-tested against integer arithmetic below; those tests
//! run everywhere, the GPU test only with `--include-ignored` on a machine
//! with a HIP device (or an NVIDIA GPU through tests/hip-on-cuda).

use std::collections::VecDeque;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hip_safe::{
    Blas, Device, DeviceBuffer, DevicePtr, Function, GemmConfig, KernelArg, LaunchConfig, Program,
    Result, Stream, Transpose,
};

/// Worker threads, one stream and one rocBLAS handle each.
const THREADS: usize = 8;
/// Operations per thread, unless `HIP_SAFE_STRESS_OPS` says otherwise (the
/// sanitizer runs of tests/hip-on-cuda/run.sh use fewer: racecheck makes
/// every launch hundreds of times slower).
const OPS: usize = 10_000;

/// The operations per thread of this run.
fn ops() -> usize {
    std::env::var("HIP_SAFE_STRESS_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(OPS)
}
/// Side of the square matrix each thread's buffer is viewed as.
const SIDE: usize = 64;
/// Elements of each thread's buffer.
const N: usize = SIDE * SIDE;
/// Every element lives in `[0, MODULUS)`.
const MODULUS: u32 = 97;
/// The element-wise step adds `index % INDEX_MIX`, so that equal elements
/// drift apart again.
const INDEX_MIX: u32 = 13;
/// Snapshots a mailbox holds; publishing into a full one evicts the oldest.
const MAILBOX: usize = 4;
/// A reduction uses up to this many blocks...
const MAX_BLOCKS: usize = 16;
/// ...of 64, 128, 256 or 512 threads (powers of two, multiples of both wave
/// sizes, though the kernel relies on neither).
const BLOCK_DIMS: [u32; 4] = [64, 128, 256, 512];
/// Past this the run counts as deadlocked and the process is aborted. The
/// 80,000 operations (a few API calls, or one synchronization, each) should
/// take seconds; the margin covers debug builds and slow drivers.
const DEADLINE: Duration = Duration::from_secs(600);

/// Kernels, compiled once and shared by every thread. `MODULUS` and
/// `INDEX_MIX` come from the host constants through `-D`.
const KERNELS: &str = r#"
extern "C" __global__ void step(float* x, unsigned n, float k) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] = fmodf(x[i] * 3.0f + k + (float)(i % INDEX_MIX), MODULUS);
    }
}

extern "C" __global__ void fold(float* x, const float* y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] = fmodf(x[i] + y[i], MODULUS);
    }
}

// One sum per block over a grid-stride loop, reduced in shared memory.
// blockDim.x must be a power of two; the launch gives blockDim.x floats of
// dynamic shared memory.
extern "C" __global__ void partial_sums(const float* x, float* partial, unsigned n) {
    extern __shared__ float acc[];
    unsigned t = threadIdx.x;
    float sum = 0.0f;
    for (unsigned i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x) {
        sum += x[i];
    }
    acc[t] = sum;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half) {
            acc[t] += acc[t + half];
        }
        __syncthreads();
    }
    if (t == 0) {
        partial[blockIdx.x] = acc[0];
    }
}
"#;

// ---------------------------------------------------------------- host side

/// xorshift64 (shifts 13, 7, 17): deterministic, no dependency.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value: the state is never zero).
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform enough in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// An element value: an integer in `[0, MODULUS)`.
    fn value(&mut self) -> f32 {
        self.below(MODULUS as usize) as f32
    }

    /// `(start, len)` of a non-empty range of `0..n`: the whole of it one
    /// time in four.
    fn range(&mut self, n: usize) -> (usize, usize) {
        if self.below(4) == 0 {
            return (0, n);
        }
        let len = 1 + self.below(n);
        (self.below(n - len + 1), len)
    }
}

/// What one step of a worker does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// `step` over the whole buffer.
    Step,
    /// `step` over a sub-range, launched on a view.
    StepRange,
    /// Block partial sums, compared with the mirror's.
    Reduce,
    /// `y = X·X` (the buffer as a 64×64 matrix) then `x = (x + y) mod 97`.
    Gemm,
    /// A range copied back and compared.
    Download,
    /// Fresh host values into a range (synchronous or owned copy).
    Upload,
    /// `fill` of a range with one value.
    Fill,
    /// A range copied, through a temporary buffer, to another range.
    CopyWithin,
    /// A snapshot of the buffer posted to the next thread's mailbox.
    Publish,
    /// A range of a snapshot from this thread's mailbox copied in.
    Receive,
}

/// Relative frequencies (they add up to 100).
const WEIGHTS: [(Op, u64); 10] = [
    (Op::Step, 22),
    (Op::StepRange, 10),
    (Op::Reduce, 14),
    (Op::Gemm, 8),
    (Op::Download, 6),
    (Op::Upload, 6),
    (Op::Fill, 6),
    (Op::CopyWithin, 8),
    (Op::Publish, 10),
    (Op::Receive, 10),
];

/// The operation for a random draw.
fn pick(draw: u64) -> Op {
    let total: u64 = WEIGHTS.iter().map(|(_, w)| w).sum();
    let mut r = draw % total;
    for (op, weight) in WEIGHTS {
        if r < weight {
            return op;
        }
        r -= weight;
    }
    unreachable!("the draw is below the total weight")
}

/// The `step` kernel on the host: `x[i] = (3 x[i] + k + i mod 13) mod 97`,
/// `i` counted from the start of `x` (of the launched view).
fn step_host(x: &mut [f32], k: f32) {
    for (i, v) in x.iter_mut().enumerate() {
        *v = (*v * 3.0 + k + (i as u32 % INDEX_MIX) as f32) % MODULUS as f32;
    }
}

/// The `fold` kernel on the host: `x[i] = (x[i] + y[i]) mod 97`.
fn fold_host(x: &mut [f32], y: &[f32]) {
    for (v, w) in x.iter_mut().zip(y) {
        *v = (*v + w) % MODULUS as f32;
    }
}

/// `A·A` for the `side × side` column-major matrix `a`.
fn square_host(a: &[f32], side: usize) -> Vec<f32> {
    assert_eq!(a.len(), side * side);
    let mut out = vec![0.0f32; side * side];
    for j in 0..side {
        let b_col = &a[j * side..(j + 1) * side];
        let out_col = &mut out[j * side..(j + 1) * side];
        for (p, &b) in b_col.iter().enumerate() {
            let a_col = &a[p * side..(p + 1) * side];
            for (o, &av) in out_col.iter_mut().zip(a_col) {
                *o += av * b;
            }
        }
    }
    out
}

/// What `partial_sums` writes for a grid of `blocks` blocks of `block_dim`
/// threads: block `b` sums the elements whose index modulo the grid size
/// falls in its threads' slots.
fn partials_host(x: &[f32], blocks: usize, block_dim: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; blocks];
    for (i, v) in x.iter().enumerate() {
        out[(i % (blocks * block_dim)) / block_dim] += v;
    }
    out
}

/// The GEMM shape: `C = X·X`, all 64×64, column-major.
fn square_config() -> GemmConfig<f32> {
    GemmConfig {
        transa: Transpose::No,
        transb: Transpose::No,
        m: SIDE,
        n: SIDE,
        k: SIDE,
        alpha: 1.0,
        lda: SIDE,
        ldb: SIDE,
        beta: 0.0,
        ldc: SIDE,
    }
}

/// Panics naming the first element where `got` and `want` differ.
fn assert_same(what: &dyn std::fmt::Display, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some((i, (g, w))) = got
        .iter()
        .zip(want)
        .enumerate()
        .find(|(_, (g, w))| g.to_bits() != w.to_bits())
    {
        panic!(
            "{what}: element {i} of {} is {g}, the host says {w}",
            got.len()
        );
    }
}

// ---------------------------------------------------------------- GPU side

struct Kernels {
    step: Function,
    fold: Function,
    partial_sums: Function,
}

impl Kernels {
    fn compile(dev: &Device) -> Kernels {
        let module = Program::new(KERNELS, "stress.hip")
            .option("-O3")
            .define("MODULUS", format_args!("{MODULUS}.0f"))
            .define("INDEX_MIX", format_args!("{INDEX_MIX}u"))
            .without_cache()
            .compile_for(dev)
            .expect("stress kernels compile");
        let function = |name| module.function(name).expect("kernel is in the module");
        Kernels {
            step: function("step"),
            fold: function("fold"),
            partial_sums: function("partial_sums"),
        }
    }

    /// `step` over all of `x`.
    fn step(&self, stream: &Stream, x: &(impl DevicePtr<f32> + KernelArg), k: f32) -> Result<()> {
        let n = elems(x);
        let mut launch = stream.launch_builder(&self.step);
        launch.arg(x).arg(&n).arg(&k);
        // SAFETY: step(float*, unsigned, float) touches x[0..n], and `x`
        // holds n elements.
        unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }
    }

    /// `x = (x + y) mod 97` over all of `x` (`y` at least as long).
    fn fold(
        &self,
        stream: &Stream,
        x: &(impl DevicePtr<f32> + KernelArg),
        y: &(impl DevicePtr<f32> + KernelArg),
    ) -> Result<()> {
        let n = elems(x);
        assert!(y.len() >= x.len());
        let mut launch = stream.launch_builder(&self.fold);
        launch.arg(x).arg(y).arg(&n);
        // SAFETY: fold(float*, const float*, unsigned) touches [0, n) of
        // both, and both hold at least n elements.
        unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }
    }

    /// `partial_sums` of `x` with `blocks` blocks of `block_dim` threads
    /// (a power of two) into a new buffer of `blocks` elements.
    fn partial_sums(
        &self,
        stream: &Stream,
        x: &(impl DevicePtr<f32> + KernelArg),
        blocks: u32,
        block_dim: u32,
    ) -> Result<DeviceBuffer<f32>> {
        assert!(block_dim.is_power_of_two());
        let n = elems(x);
        // SAFETY: the kernel writes one element per block, all of them.
        let partial = unsafe { stream.alloc::<f32>(blocks as usize) }?;
        let mut launch = stream.launch_builder(&self.partial_sums);
        launch.arg(x).arg(&partial).arg(&n);
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (block_dim, 1, 1),
            shared_mem_bytes: block_dim * 4,
        };
        // SAFETY: partial_sums(const float*, float*, unsigned) reads x[0..n],
        // writes partial[0..gridDim.x) and acc[0..blockDim.x), which the
        // dynamic shared memory holds.
        unsafe { launch.launch(cfg) }?;
        Ok(partial)
    }
}

fn elems(x: &impl DevicePtr<f32>) -> u32 {
    u32::try_from(x.len()).expect("test buffers are small")
}

/// A copy of one thread's buffer, posted to the next thread. The buffer is
/// allocated on (owned by) the publisher's stream; the receiver copies from
/// it on its own stream and drops it, which frees it in stream order on the
/// publisher's stream from the receiver's thread.
struct Snapshot {
    buffer: DeviceBuffer<f32>,
    mirror: Vec<f32>,
}

type Mailbox = Mutex<VecDeque<Snapshot>>;

/// A mailbox's queue; a poisoned lock only means another worker panicked,
/// which fails the test anyway.
fn open(mailbox: &Mailbox) -> MutexGuard<'_, VecDeque<Snapshot>> {
    mailbox.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a worker counted.
#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    /// Comparisons of device results with the host.
    checks: u64,
    /// Snapshots copied in from another thread.
    adopted: u64,
    /// Receives that found the mailbox empty (and skipped the copy).
    empty: u64,
}

/// One thread's state: its stream, handle, buffers and their host mirror.
struct Worker<'a> {
    id: usize,
    kernels: &'a Kernels,
    mailboxes: &'a [Mailbox],
    stream: Stream,
    blas: Blas,
    /// The buffer every operation works on; `mirror` is its expected value.
    x: DeviceBuffer<f32>,
    mirror: Vec<f32>,
    /// GEMM output.
    y: DeviceBuffer<f32>,
    rng: Rng,
    stats: Stats,
}

impl<'a> Worker<'a> {
    fn new(
        id: usize,
        dev: &Device,
        kernels: &'a Kernels,
        mailboxes: &'a [Mailbox],
    ) -> Result<Self> {
        let stream = dev.new_stream()?;
        // Half the streams recycle small allocations, so that snapshots
        // dropped by the receiving thread also go back to another stream's
        // allocation cache.
        if id % 2 == 1 {
            stream.set_allocation_cache_limit(1 << 20);
        }
        let blas = Blas::new(&stream)?;
        let mut rng = Rng::new(0x5EED_0000 + id as u64);
        let mirror: Vec<f32> = (0..N).map(|_| rng.value()).collect();
        let x = stream.clone_htod(&mirror)?;
        let y = stream.alloc_zeros::<f32>(N)?;
        Ok(Worker {
            id,
            kernels,
            mailboxes,
            stream,
            blas,
            x,
            mirror,
            y,
            rng,
            stats: Stats::default(),
        })
    }

    fn run(mut self) -> Stats {
        let id = self.id;
        for index in 0..ops() {
            let op = pick(self.rng.next_u64());
            self.apply(op, index)
                .unwrap_or_else(|e| panic!("thread {id}, operation {index} ({op:?}): {e}"));
        }
        let got = self.stream.clone_dtoh(&self.x).expect("final download");
        assert_same(&format!("thread {id}: final buffer"), &got, &self.mirror);
        self.stats.checks += 1;
        self.stream.synchronize().expect("final synchronize");
        self.stats
    }

    fn apply(&mut self, op: Op, index: usize) -> Result<()> {
        let id = self.id;
        let what = |detail: &str| format!("thread {id}, operation {index} ({op:?}){detail}");
        match op {
            Op::Step => {
                let k = self.rng.value();
                self.kernels.step(&self.stream, &self.x, k)?;
                step_host(&mut self.mirror, k);
            }
            Op::StepRange => {
                let (start, len) = self.rng.range(N);
                let k = self.rng.value();
                let view = self.x.slice_mut(start..start + len)?;
                self.kernels.step(&self.stream, &view, k)?;
                step_host(&mut self.mirror[start..start + len], k);
            }
            Op::Reduce => {
                let blocks = 1 + self.rng.below(MAX_BLOCKS) as u32;
                let block_dim = BLOCK_DIMS[self.rng.below(BLOCK_DIMS.len())];
                let partial =
                    self.kernels
                        .partial_sums(&self.stream, &self.x, blocks, block_dim)?;
                let got = self.stream.clone_dtoh(&partial)?;
                let want = partials_host(&self.mirror, blocks as usize, block_dim as usize);
                let detail = format!(": {blocks} blocks of {block_dim}");
                assert_same(&what(&detail), &got, &want);
                let total: f32 = got.iter().sum();
                let mirror_total: f32 = self.mirror.iter().sum();
                assert_eq!(total, mirror_total, "{}: total", what(&detail));
                self.stats.checks += 1;
            }
            Op::Gemm => {
                self.blas
                    .gemm(square_config(), &self.x, &self.x, &mut self.y)?;
                let product = square_host(&self.mirror, SIDE);
                if self.rng.below(4) == 0 {
                    let got = self.stream.clone_dtoh(&self.y)?;
                    assert_same(&what(": product"), &got, &product);
                    self.stats.checks += 1;
                }
                self.kernels.fold(&self.stream, &self.x, &self.y)?;
                fold_host(&mut self.mirror, &product);
            }
            Op::Download => {
                let (start, len) = self.rng.range(N);
                let got = self.stream.clone_dtoh(&self.x.slice(start..start + len)?)?;
                let detail = format!(": range {start}..{}", start + len);
                assert_same(&what(&detail), &got, &self.mirror[start..start + len]);
                self.stats.checks += 1;
            }
            Op::Upload => {
                let (start, len) = self.rng.range(N);
                let values: Vec<f32> = (0..len).map(|_| self.rng.value()).collect();
                self.mirror[start..start + len].copy_from_slice(&values);
                let mut view = self.x.slice_mut(start..start + len)?;
                if self.rng.below(2) == 0 {
                    self.stream.memcpy_htod(&values, &mut view)?;
                } else {
                    self.stream.memcpy_htod_owned(values, &mut view)?;
                }
            }
            Op::Fill => {
                let (start, len) = self.rng.range(N);
                let value = self.rng.value();
                self.stream
                    .fill(&mut self.x.slice_mut(start..start + len)?, value)?;
                self.mirror[start..start + len].fill(value);
            }
            Op::CopyWithin => {
                let (from, len) = self.rng.range(N);
                let to = self.rng.below(N - len + 1);
                let staged = self.stream.clone_dtod(&self.x.slice(from..from + len)?)?;
                self.stream
                    .memcpy_dtod(&staged, &mut self.x.slice_mut(to..to + len)?)?;
                self.mirror.copy_within(from..from + len, to);
            }
            Op::Publish => {
                let snapshot = Snapshot {
                    buffer: self.stream.clone_dtod(&self.x)?,
                    mirror: self.mirror.clone(),
                };
                let next = &self.mailboxes[(id + 1) % THREADS];
                let evicted = {
                    let mut queue = open(next);
                    queue.push_back(snapshot);
                    if queue.len() > MAILBOX {
                        queue.pop_front()
                    } else {
                        None
                    }
                };
                // One of this thread's own earlier snapshots, dropped outside
                // the lock.
                drop(evicted);
            }
            Op::Receive => {
                // Drawn whether or not a snapshot is waiting, so that every
                // thread's sequence of operations is the same in every run
                // (only what it receives depends on timing).
                let verify = self.rng.below(4) == 0;
                let (from, len) = self.rng.range(N);
                let to = self.rng.below(N - len + 1);
                let received = open(&self.mailboxes[id]).pop_front();
                let Some(snapshot) = received else {
                    self.stats.empty += 1;
                    return Ok(());
                };
                if verify {
                    // Read on this stream what the other stream wrote.
                    let got = self.stream.clone_dtoh(&snapshot.buffer)?;
                    assert_same(&what(": snapshot"), &got, &snapshot.mirror);
                    self.stats.checks += 1;
                }
                self.stream.memcpy_dtod(
                    &snapshot.buffer.slice(from..from + len)?,
                    &mut self.x.slice_mut(to..to + len)?,
                )?;
                self.mirror[to..to + len].copy_from_slice(&snapshot.mirror[from..from + len]);
                self.stats.adopted += 1;
                // Frees the publisher's buffer on the publisher's stream.
                drop(snapshot);
            }
        }
        Ok(())
    }
}

/// Loads what may stay loaded for the life of the process or of the objects
/// the test keeps, so that the memory measured before the run includes it:
/// the first launch of each kernel (drivers may load code lazily), a first
/// GEMM of the test's shape on `blas` (rocBLAS and cuBLAS load kernels and
/// library state on first use), and as many extra streams as there will be
/// workers, each ordered against `stream` with events (runtimes may pool
/// resources that streams share, such as ROCm's hardware queues). The extra
/// streams are dropped again; the workers' own streams, events, handles and
/// buffers must all be given back.
fn warm_up(dev: &Device, stream: &Stream, blas: &Blas, kernels: &Kernels) -> Result<()> {
    let x = stream.clone_htod(&vec![1.0f32; N])?;
    let mut y = stream.alloc_zeros::<f32>(N)?;
    kernels.step(stream, &x, 1.0)?;
    blas.gemm(square_config(), &x, &x, &mut y)?;
    kernels.fold(stream, &x, &y)?;
    for block_dim in BLOCK_DIMS {
        drop(kernels.partial_sums(stream, &x, MAX_BLOCKS as u32, block_dim)?);
    }
    let others = (0..THREADS)
        .map(|_| dev.new_stream())
        .collect::<Result<Vec<_>>>()?;
    for other in &others {
        let copy = other.clone_dtod(&x)?;
        kernels.step(other, &copy, 2.0)?;
        stream.memcpy_dtod(&copy, &mut y)?;
    }
    stream.synchronize()?;
    for other in &others {
        other.synchronize()?;
    }
    Ok(())
}

/// Aborts the process if it is still alive when the deadline passes: a
/// deadlock must fail the run, not hang it. Dropping the returned sender
/// (at the end of the test, or while a failure unwinds) disarms it.
fn watchdog(limit: Duration) -> mpsc::Sender<()> {
    let (armed, disarmed) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = disarmed.recv_timeout(limit) {
            eprintln!("stress: still running after {limit:?}; deadlocked? aborting");
            std::process::abort();
        }
    });
    armed
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_stress_8_threads_mixed_ops_match_host_and_free_all_memory() {
    let _watchdog = watchdog(DEADLINE);
    let dev = Device::new(0).expect("a HIP device");
    let kernels = Kernels::compile(&dev);
    // Kept until after the last measurement, so they are in both: the
    // module's code, the first rocBLAS handle and what warm_up loads may
    // legitimately stay resident. Everything the workers create (streams,
    // rocBLAS handles, events, buffers, allocation caches) must be given
    // back.
    let warm_stream = dev.new_stream().expect("stream");
    let warm_blas = Blas::new(&warm_stream).expect("rocBLAS handle");
    warm_up(&dev, &warm_stream, &warm_blas, &kernels).expect("warm-up");
    dev.trim_memory_pool().expect("trim");
    let (before, total) = dev.memory_info().expect("memory info");

    let mailboxes: Vec<Mailbox> = (0..THREADS).map(|_| Mutex::default()).collect();
    let start = Instant::now();
    let stats: Vec<Stats> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|id| {
                let (dev, kernels, mailboxes) = (&dev, &kernels, &mailboxes[..]);
                s.spawn(move || {
                    Worker::new(id, dev, kernels, mailboxes)
                        .unwrap_or_else(|e| panic!("thread {id}: set-up: {e}"))
                        .run()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let elapsed = start.elapsed();
    // Snapshots nobody received still hold buffers (and the last clones of
    // some streams).
    drop(mailboxes);
    dev.trim_memory_pool().expect("trim");
    let (after, _) = dev.memory_info().expect("memory info");

    let checks: u64 = stats.iter().map(|s| s.checks).sum();
    let adopted: u64 = stats.iter().map(|s| s.adopted).sum();
    let empty: u64 = stats.iter().map(|s| s.empty).sum();
    println!(
        "stress: {THREADS} threads x {} ops, {checks} checks, free memory before {before} \
         after {after} (of {total} B; {elapsed:.2?}; {adopted} snapshots adopted, \
         {empty} receives found an empty mailbox)",
        ops()
    );
    assert!(adopted > 0, "no thread ever received a snapshot");
    // Under compute-sanitizer (which allocates device memory of its own; run.sh
    // --sanitize sets the variable) only the plain run compares free memory.
    if std::env::var_os("HIP_SAFE_TEST_UNDER_SANITIZER").is_none() {
        assert_eq!(
            before,
            after,
            "device free memory changed by {} B over the run",
            before as i64 - after as i64
        );
    }
    drop((warm_blas, warm_stream));
}

// ---------------------------------------------------------------- host tests

#[test]
fn rng_is_xorshift64_and_stays_in_range() {
    let mut reference = Rng(1);
    assert_eq!(reference.next_u64(), 0x4082_2041);
    let mut a = Rng::new(3);
    let mut b = Rng::new(3);
    let draws: Vec<u64> = (0..100).map(|_| a.next_u64()).collect();
    assert!(draws.iter().all(|&d| d == b.next_u64()), "deterministic");
    assert_ne!(Rng::new(0).0, 0, "a zero seed still runs");
    assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    let mut seen = [false; 7];
    for _ in 0..1000 {
        let v = a.value();
        assert!((0.0..MODULUS as f32).contains(&v) && v.fract() == 0.0);
        seen[a.below(7)] = true;
        let (start, len) = a.range(N);
        assert!(len >= 1 && start + len <= N);
        let (start, len) = a.range(1);
        assert_eq!((start, len), (0, 1));
    }
    assert!(seen.iter().all(|&s| s), "below(7) reaches every value");
}

#[test]
fn every_op_is_picked_by_its_weight() {
    assert_eq!(WEIGHTS.iter().map(|(_, w)| w).sum::<u64>(), 100);
    for (op, weight) in WEIGHTS {
        let picked = (0..100).filter(|&d| pick(d) == op).count() as u64;
        assert_eq!(picked, weight, "{op:?}");
    }
    assert!((0..100).all(|d| pick(d + 100) == pick(d) && pick(d + 7_700) == pick(d)));
}

#[test]
fn host_kernels_match_integer_arithmetic() {
    let (m, mix) = (u64::from(MODULUS), u64::from(INDEX_MIX));
    let x: Vec<f32> = (0..N).map(|i| (i as u64 % m) as f32).collect();
    for k in 0..m {
        let mut got = x.clone();
        step_host(&mut got, k as f32);
        for (i, &g) in got.iter().enumerate() {
            let want = ((i as u64 % m) * 3 + k + i as u64 % mix) % m;
            assert_eq!(g, want as f32, "step k={k} i={i}");
        }
    }
    let y: Vec<f32> = (0..N).map(|i| (i * 151) as f32).collect();
    let mut folded = x.clone();
    fold_host(&mut folded, &y);
    for (i, &f) in folded.iter().enumerate() {
        assert_eq!(
            f,
            (((i as u64 % m) + i as u64 * 151) % m) as f32,
            "fold {i}"
        );
    }
}

#[test]
fn host_gemm_is_column_major_and_exact_at_the_largest_values() {
    // [[1, 2], [3, 4]] squared is [[7, 10], [15, 22]]; stored by columns.
    assert_eq!(
        square_host(&[1.0, 3.0, 2.0, 4.0], 2),
        vec![7.0, 15.0, 10.0, 22.0]
    );
    let mut identity = vec![0.0f32; N];
    for i in 0..SIDE {
        identity[i * SIDE + i] = 1.0;
    }
    assert_eq!(square_host(&identity, SIDE), identity);
    // The largest elements give the largest dot products: still below 2^24,
    // so every partial sum, in any order, is exact in f32.
    let top = (MODULUS - 1) as f32;
    let largest = square_host(&vec![top; N], SIDE);
    let want = f64::from(top) * f64::from(top) * SIDE as f64;
    assert!(want < f64::from(1u32 << 24));
    assert!(largest.iter().all(|&v| f64::from(v) == want));
    // Against integer arithmetic on a non-symmetric matrix.
    let mut rng = Rng::new(9);
    let a: Vec<f32> = (0..N).map(|_| rng.value()).collect();
    let got = square_host(&a, SIDE);
    for j in 0..SIDE {
        for i in 0..SIDE {
            let want: u64 = (0..SIDE)
                .map(|p| a[i + p * SIDE] as u64 * a[p + j * SIDE] as u64)
                .sum();
            assert_eq!(got[i + j * SIDE], want as f32, "({i}, {j})");
        }
    }
}

#[test]
fn host_partials_follow_the_grid_stride_and_add_up() {
    let x: Vec<f32> = (0..8).map(|i| i as f32).collect();
    // Grid of 2 blocks of 2 threads: block 0 owns indices 0, 1, 4, 5.
    assert_eq!(partials_host(&x, 2, 2), vec![10.0, 18.0]);
    assert_eq!(partials_host(&x, 16, 64), {
        let mut v = vec![0.0; 16];
        v[0] = 28.0;
        v
    });
    let top = vec![(MODULUS - 1) as f32; N];
    let whole = partials_host(&top, 1, 64);
    assert_eq!(f64::from(whole[0]), f64::from(MODULUS - 1) * N as f64);
    assert!(f64::from(whole[0]) < f64::from(1u32 << 24));
    let mut rng = Rng::new(4);
    let x: Vec<f32> = (0..N).map(|_| rng.value()).collect();
    let total: u64 = x.iter().map(|&v| v as u64).sum();
    for blocks in 1..=MAX_BLOCKS {
        for block_dim in BLOCK_DIMS {
            let parts = partials_host(&x, blocks, block_dim as usize);
            assert_eq!(parts.len(), blocks);
            assert_eq!(parts.iter().map(|&v| v as u64).sum::<u64>(), total);
        }
    }
}

/// The mirror arithmetic of a whole worker run (every operation that
/// changes the buffer, with its random draws) against the same run in
/// integers: the f32 values never leave the exact range.
#[test]
fn a_host_only_run_stays_exact() {
    let m = u64::from(MODULUS);
    let mut rng = Rng::new(77);
    let mut mirror: Vec<f32> = (0..N).map(|_| rng.value()).collect();
    let mut exact: Vec<u64> = mirror.iter().map(|&v| v as u64).collect();
    let mut other = Rng::new(78);
    for _ in 0..1_000 {
        match pick(rng.next_u64()) {
            Op::Step | Op::StepRange => {
                let (start, len) = rng.range(N);
                let k = rng.value();
                step_host(&mut mirror[start..start + len], k);
                for (i, v) in exact[start..start + len].iter_mut().enumerate() {
                    *v = (*v * 3 + k as u64 + (i as u64 % u64::from(INDEX_MIX))) % m;
                }
            }
            Op::Gemm => {
                let product = square_host(&mirror, SIDE);
                assert!(product.iter().all(|&v| v < (1u32 << 24) as f32));
                fold_host(&mut mirror, &product);
                let before = exact.clone();
                for j in 0..SIDE {
                    for i in 0..SIDE {
                        let dot: u64 = (0..SIDE)
                            .map(|p| before[i + p * SIDE] * before[p + j * SIDE])
                            .sum();
                        exact[i + j * SIDE] = (before[i + j * SIDE] + dot) % m;
                    }
                }
            }
            Op::Reduce => {
                let parts = partials_host(&mirror, 7, 64);
                let sum: f32 = parts.iter().sum();
                assert_eq!(sum as u64, exact.iter().sum::<u64>());
            }
            Op::Upload | Op::Fill | Op::Receive => {
                let (start, len) = rng.range(N);
                for (v, e) in mirror[start..start + len]
                    .iter_mut()
                    .zip(&mut exact[start..start + len])
                {
                    *v = other.value();
                    *e = *v as u64;
                }
            }
            Op::CopyWithin => {
                let (from, len) = rng.range(N);
                let to = rng.below(N - len + 1);
                mirror.copy_within(from..from + len, to);
                exact.copy_within(from..from + len, to);
            }
            Op::Download | Op::Publish => {}
        }
        for (&v, &e) in mirror.iter().zip(&exact) {
            assert!(e < m);
            assert_eq!(v, e as f32);
        }
    }
}
