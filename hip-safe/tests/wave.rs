//! Wave-level operations at the device's wave size, against a host model of
//! HIP's semantics on AMD hardware.
//!
//! One kernel applies every shuffle form (with and without segment widths),
//! ballots and votes to lane-dependent values with all lanes active; the
//! host computes what each lane must read for the device's wave size
//! ([`Device::wave_size`]). Ignored without a GPU; it runs on AMD hardware,
//! on the NVIDIA test platform (wave 32) and on the CPU test platform at
//! wave 64 and 32 (`tests/hip-on-cpu`), which must all agree with the model.

use hip_safe::{Device, LaunchConfig, Program};

const KERNEL: &str = r#"
// One output row per case; `out[case * n + tid]`.
extern "C" __global__ void wave_ops(unsigned long long* out, unsigned n) {
    const unsigned tid = threadIdx.x;
    const int lane = (int)(tid % warpSize);
    const int x = (int)(tid * 3 + 1);
    unsigned long long* row = out;
    row[tid] = (unsigned)__shfl(x, (lane * 5 + 3) % warpSize); row += n;
    row[tid] = (unsigned)__shfl(x, lane + 1, 16); row += n;
    row[tid] = (unsigned)__shfl(x, -1, 8); row += n;
    row[tid] = (unsigned)__shfl_up(x, 3); row += n;
    row[tid] = (unsigned)__shfl_up(x, 1, 8); row += n;
    row[tid] = (unsigned)__shfl_down(x, 5); row += n;
    row[tid] = (unsigned)__shfl_down(x, 2, 16); row += n;
    row[tid] = (unsigned)__shfl_xor(x, 1); row += n;
    row[tid] = (unsigned)__shfl_xor(x, 21); row += n;
    row[tid] = (unsigned)__shfl_xor(x, 7, 4); row += n;
    row[tid] = __ballot(tid % 3 == 0); row += n;
    row[tid] = __ballot(lane >= 30); row += n;
    row[tid] = (unsigned)__any(tid == 70); row += n;
    row[tid] = (unsigned)__all(tid < 200); row += n;
    row[tid] = (unsigned)__all(tid % 2 == 0); row += n;
    const double d = 0.5 * (double)tid;
    row[tid] = (unsigned long long)(__shfl_xor(d, 2) * 2.0); row += n;
}
"#;

/// Number of cases (rows) the kernel writes.
const CASES: usize = 16;
/// Threads of the one block: two waves at 64 lanes, four at 32.
const THREADS: usize = 128;

/// HIP's source lane for `__shfl(var, src, width)` at wave `w`: lane
/// `src mod width` of the caller's segment.
fn shfl(lane: i64, src: i64, width: i64) -> i64 {
    src.rem_euclid(width) + (lane / width) * width
}

/// `__shfl_up`: own value when the source falls below the segment.
fn shfl_up(lane: i64, delta: i64, width: i64) -> i64 {
    if lane % width < delta {
        lane
    } else {
        lane - delta
    }
}

/// `__shfl_down`: own value when the source falls past the segment.
fn shfl_down(lane: i64, delta: i64, width: i64) -> i64 {
    if lane % width + delta >= width {
        lane
    } else {
        lane + delta
    }
}

/// `__shfl_xor`: own value when the source falls past the segment.
fn shfl_xor(lane: i64, mask: i64, width: i64) -> i64 {
    let src = lane ^ mask;
    if src >= (lane / width + 1) * width {
        lane
    } else {
        src
    }
}

/// What every thread must write, case by case, at wave size `w`.
fn model(w: usize) -> Vec<u64> {
    let wi = w as i64;
    let x = |t: i64| (t * 3 + 1) as u64;
    let ballot = |wave: usize, pred: &dyn Fn(usize) -> bool| {
        (0..w)
            .filter(|l| pred(wave * w + l))
            .fold(0u64, |m, l| m | 1 << l)
    };
    let mut out = vec![0u64; CASES * THREADS];
    for t in 0..THREADS {
        let (ti, wave) = (t as i64, t / w);
        let lane = ti % wi;
        let base = ti - lane;
        let from = |src_lane: i64| x(base + src_lane);
        let cases: [u64; CASES] = [
            from(shfl(lane, (lane * 5 + 3) % wi, wi)),
            from(shfl(lane, lane + 1, 16)),
            from(shfl(lane, -1, 8)),
            from(shfl_up(lane, 3, wi)),
            from(shfl_up(lane, 1, 8)),
            from(shfl_down(lane, 5, wi)),
            from(shfl_down(lane, 2, 16)),
            from(shfl_xor(lane, 1, wi)),
            from(shfl_xor(lane, 21, wi)),
            from(shfl_xor(lane, 7, 4)),
            ballot(wave, &|t| t % 3 == 0),
            ballot(wave, &|t| (t % w) >= 30),
            u64::from((wave * w..(wave + 1) * w).contains(&70)),
            1,
            0,
            (base + shfl_xor(lane, 2, wi)) as u64,
        ];
        for (case, value) in cases.into_iter().enumerate() {
            out[case * THREADS + t] = value;
        }
    }
    out
}

#[test]
fn the_model_follows_the_documented_examples() {
    // Lane 5 of a 64-lane wave reading lane 63 with width 8 gets lane 7 of
    // its own 8-lane segment.
    assert_eq!(shfl(5, 63, 8), 7);
    assert_eq!(shfl(13, -1, 8), 15);
    assert_eq!(shfl_up(8, 1, 8), 8);
    assert_eq!(shfl_down(15, 2, 16), 15);
    assert_eq!(shfl_xor(3, 7, 4), 3);
    assert_eq!(shfl_xor(3, 1, 4), 2);
    // At wave 32 a ballot has no high half.
    assert_eq!(model(32)[10 * THREADS] >> 32, 0);
}

#[test]
#[ignore = "needs a HIP device"]
pub fn gpu_wave_operations_follow_hip_semantics() {
    let dev = Device::new(0).expect("a HIP device");
    let wave = dev.wave_size() as usize;
    let module = Program::new(KERNEL, "wave_ops.hip")
        .compile_for(&dev)
        .expect("the wave kernel compiles");
    let f = module.function("wave_ops").unwrap();
    let stream = dev.new_stream().unwrap();
    let out = stream.alloc_zeros::<u64>(CASES * THREADS).unwrap();
    let n = THREADS as u32;
    let mut launch = stream.launch_builder(&f);
    launch.arg(&out).arg(&n);
    let config = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (n, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the kernel writes CASES rows of n values into `out`.
    unsafe { launch.launch(config) }.unwrap();
    let got = stream.clone_dtoh(&out).unwrap();
    let want = model(wave);
    for case in 0..CASES {
        let row = case * THREADS..(case + 1) * THREADS;
        assert_eq!(got[row.clone()], want[row], "case {case} at wave {wave}");
    }
    println!(
        "{} on {} (wave {wave}): {CASES} cases agree with the model",
        dev.name(),
        dev.arch()
    );
}
