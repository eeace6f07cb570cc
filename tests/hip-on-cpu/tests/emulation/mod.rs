//! What the CPU platform adds to a GPU: partial waves, divergence reports,
//! buffer guards. Shared by the `wave64` and `wave32` test binaries, which
//! select the target before the first HIP call ([`use_platform`]) and get
//! their tests from [`emulation_tests!`].

mod builtins;

pub use builtins::{
    lane_builtins_follow_the_isa, matrix_builtin_misuse_is_reported,
    matrix_builtins_follow_amd_layouts,
};

use std::sync::Once;

use hip_safe::{Device, LaunchConfig, Module, Program};

/// Points this process at the built shim, emulating `arch`. Must run before
/// anything loads the HIP runtime.
pub fn use_platform(arch: &str) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Cargo builds the shim next to the test executables (`deps/`) for
        // `cargo test`; the copy one level up is only refreshed by `cargo build`.
        let exe = std::env::current_exe().expect("test executable path");
        let shim = exe.with_file_name("libhip_on_cpu.so");
        let root = std::env::temp_dir().join(format!("hip-on-cpu-{arch}-{}", std::process::id()));
        hip_on_cpu::layout::make_layout(&shim, &root).expect("layout of the built shim");
        // SAFETY: called once, before any thread of this process reads the
        // environment through the HIP loader.
        unsafe {
            std::env::set_var("ROCM_PATH", &root);
            std::env::set_var("HIP_ON_CPU_ARCH", arch);
            std::env::set_var("HIP_SAFE_CACHE_DIR", root.join("cache"));
        }
    });
}

const KERNELS: &str = r#"
// Lanes at or past `live` leave at once; the rest vote and read lane 45 of
// their wave (inactive at wave 64: reads 0) and lane 3.
extern "C" __global__ void partial(unsigned long long* out, int live) {
    const int lane = (int)(threadIdx.x % warpSize);
    if (lane >= live) return;
    const int x = (int)threadIdx.x + 1000;
    out[threadIdx.x * 3 + 0] = __ballot(1);
    out[threadIdx.x * 3 + 1] = (unsigned)__shfl(x, 45);
    out[threadIdx.x * 3 + 2] = (unsigned)__shfl(x, 3);
}

// A shuffle inside a branch that reconverges before a barrier.
extern "C" __global__ void branch_then_barrier(int* out) {
    int v = (int)threadIdx.x;
    if (threadIdx.x % warpSize < 16) v = __shfl_xor(v, 1);
    __syncthreads();
    out[threadIdx.x] = v;
}

// Lanes of one wave at two different shuffles: a divergence to report.
extern "C" __global__ void divergent_shuffles(int* out) {
    int v = (int)threadIdx.x;
    if (threadIdx.x % 2 == 0)
        v = __shfl_xor(v, 1);
    else
        v = __shfl_xor(v, 2);
    out[threadIdx.x] = v;
}

// Threads at two different barriers: a deadlock to report.
extern "C" __global__ void split_barrier(int* out) {
    if (threadIdx.x < 64)
        __syncthreads();
    else
        __syncthreads();
    out[threadIdx.x] = 1;
}

// Writes one element past the end of `out` (n elements).
extern "C" __global__ void one_past(float* out, unsigned n) {
    out[threadIdx.x] = 1.0f;
    if (threadIdx.x == 0) out[n] = 2.0f;
}

// A tree reduction through shared memory, barriers in a loop.
extern "C" __global__ void block_sum(const float* in, float* out) {
    __shared__ float part[256];
    part[threadIdx.x] = in[blockIdx.x * 256 + threadIdx.x];
    __syncthreads();
    for (unsigned s = 128; s > 0; s /= 2) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}
"#;

fn module(dev: &Device) -> Module {
    Program::new(KERNELS, "emulation.hip")
        .compile_for(dev)
        .expect("emulation kernels compile")
}

fn one_block(threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Exited lanes are inactive: ballots leave them out, reads from them give 0.
pub fn exited_lanes_are_inactive() {
    let dev = Device::new(0).unwrap();
    let wave = dev.wave_size() as usize;
    let f = module(&dev).function("partial").unwrap();
    let stream = dev.new_stream().unwrap();
    let threads = 2 * wave;
    let live = 40.min(wave as i32 - 4);
    let out = stream.alloc_zeros::<u64>(threads * 3).unwrap();
    let mut launch = stream.launch_builder(&f);
    launch.arg(&out).arg(&live);
    // SAFETY: `partial` writes 3 values per thread of the one block.
    unsafe { launch.launch(one_block(threads as u32)) }.unwrap();
    let got = stream.clone_dtoh(&out).unwrap();
    let live = live as usize;
    for t in 0..threads {
        let (lane, base) = (t % wave, t - t % wave);
        let want = if lane >= live {
            [0, 0, 0]
        } else {
            let src45 = 45 % wave;
            let read45 = if src45 < live {
                (base + src45 + 1000) as u64
            } else {
                0
            };
            [(1u64 << live) - 1, read45, (base + 3 + 1000) as u64]
        };
        assert_eq!(got[t * 3..t * 3 + 3], want, "thread {t} at wave {wave}");
    }
}

/// A shuffle by some lanes of a wave whose other lanes wait at a barrier.
pub fn branches_reconverge_at_barriers() {
    let dev = Device::new(0).unwrap();
    let wave = dev.wave_size();
    let f = module(&dev).function("branch_then_barrier").unwrap();
    let stream = dev.new_stream().unwrap();
    let out = stream.alloc_zeros::<i32>(128).unwrap();
    let mut launch = stream.launch_builder(&f);
    launch.arg(&out);
    // SAFETY: one value per thread.
    unsafe { launch.launch(one_block(128)) }.unwrap();
    let got = stream.clone_dtoh(&out).unwrap();
    for (t, v) in got.iter().enumerate() {
        let want = if (t as u32) % wave < 16 { t ^ 1 } else { t };
        assert_eq!(*v as usize, want, "thread {t}");
    }
}

/// Divergent wave operations and barriers fail the launch instead of
/// pairing up lanes the hardware would not pair.
pub fn divergence_is_reported() {
    let dev = Device::new(0).unwrap();
    let m = module(&dev);
    let stream = dev.new_stream().unwrap();
    for name in ["divergent_shuffles", "split_barrier"] {
        let f = m.function(name).unwrap();
        let out = stream.alloc_zeros::<i32>(128).unwrap();
        let mut launch = stream.launch_builder(&f);
        launch.arg(&out);
        // SAFETY: one value per thread.
        let err = unsafe { launch.launch(one_block(128)) }.unwrap_err();
        assert!(err.to_string().contains(name), "{name}: {err}");
    }
    // The device stays usable.
    exited_lanes_are_inactive();
}

/// A write past the end of a buffer fails the launch.
pub fn writes_past_a_buffer_are_reported() {
    let dev = Device::new(0).unwrap();
    let f = module(&dev).function("one_past").unwrap();
    let stream = dev.new_stream().unwrap();
    let n = 64u32;
    let out = stream.alloc_zeros::<f32>(n as usize).unwrap();
    let mut launch = stream.launch_builder(&f);
    launch.arg(&out).arg(&n);
    // SAFETY: deliberately writes one element past `out` (into the guard).
    let err = unsafe { launch.launch(one_block(n)) }.unwrap_err();
    assert!(err.to_string().contains("one_past"), "{err}");
}

/// Shared memory is per block and barriers order it.
pub fn shared_memory_reductions_are_exact() {
    let dev = Device::new(0).unwrap();
    let f = module(&dev).function("block_sum").unwrap();
    let stream = dev.new_stream().unwrap();
    let blocks = 8usize;
    let input: Vec<f32> = (0..blocks * 256).map(|i| (i % 97) as f32).collect();
    let x = stream.clone_htod(&input).unwrap();
    let out = stream.alloc_zeros::<f32>(blocks).unwrap();
    let mut launch = stream.launch_builder(&f);
    launch.arg(&x).arg(&out);
    let config = LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: 256 inputs per block, one output per block.
    unsafe { launch.launch(config) }.unwrap();
    let got = stream.clone_dtoh(&out).unwrap();
    for (b, v) in got.iter().enumerate() {
        let want: f32 = input[b * 256..(b + 1) * 256].iter().sum();
        assert_eq!(*v, want, "block {b}");
    }
}

/// The tests of one test binary for the emulated target `$arch`: each
/// selects the platform, then runs one check of this module (or the
/// wave-semantics test shared with the GPU platforms, `wave`).
#[macro_export]
macro_rules! emulation_tests {
    ($arch:literal) => {
        #[test]
        fn wave_operations_follow_hip_semantics() {
            emulation::use_platform($arch);
            wave::gpu_wave_operations_follow_hip_semantics();
        }
        $crate::emulation_tests!(
            $arch,
            exited_lanes_are_inactive,
            branches_reconverge_at_barriers,
            divergence_is_reported,
            writes_past_a_buffer_are_reported,
            shared_memory_reductions_are_exact,
            lane_builtins_follow_the_isa,
            matrix_builtins_follow_amd_layouts,
            matrix_builtin_misuse_is_reported
        );
    };
    ($arch:literal, $($check:ident),+) => {
        $(
            #[test]
            fn $check() {
                emulation::use_platform($arch);
                emulation::$check();
            }
        )+
    };
}
