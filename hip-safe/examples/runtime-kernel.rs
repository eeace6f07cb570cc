//! Compiles a HIP kernel at run time with hipRTC, launches it, runs a rocBLAS
//! GEMM on its output, and checks both against the host.
//!
//! ```text
//! cargo run --release --example runtime-kernel
//! ```
//!
//! Without a usable GPU it prints one line with the reason and exits 0.

use std::time::Instant;

use hip_safe::{Blas, Device, GemmConfig, LaunchConfig, Program, Transpose};

/// `y[i] = a * x[i] * x[i] + b`, one thread per element.
const KERNEL: &str = r#"
extern "C" __global__ void quadratic(const float* x, float* y, float a, float b, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] * x[i] + b;
    }
}
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if !hip_safe::is_available() {
        println!("runtime-kernel: skipped, {}", hip_safe::probe());
        return Ok(());
    }
    let dev = Device::new(0)?;
    let stream = dev.new_stream()?;
    println!(
        "device 0: {} ({}, wave {})",
        dev.name(),
        dev.arch(),
        dev.wave_size()
    );

    let start = Instant::now();
    let module = Program::new(KERNEL, "quadratic.hip")
        .option("-O3")
        .compile_for(&dev)?;
    let quadratic = module.function("quadratic")?;
    println!(
        "compiled `quadratic` in {:?} (code-object cache: {})",
        start.elapsed(),
        hip_safe::default_cache_dir().map_or_else(|| "off".into(), |d| d.display().to_string())
    );

    // y = 0.5 x² + 1 for x in [0, 1), as a 64 x 32 column-major matrix A.
    let (m, k, n) = (64usize, 32usize, 16usize);
    let x: Vec<f32> = (0..m * k).map(|i| i as f32 / (m * k) as f32).collect();
    let dx = stream.clone_htod(&x)?;
    let da = stream.alloc_zeros::<f32>(m * k)?;
    let (a, b, len) = (0.5f32, 1.0f32, (m * k) as u32);
    let mut launch = stream.launch_builder(&quadratic);
    launch.arg(&dx).arg(&da).arg(&a).arg(&b).arg(&len);
    // SAFETY: quadratic(const float*, float*, float, float, unsigned) reads
    // x[0..n) and writes y[0..n), and both buffers hold n = m * k floats.
    unsafe { launch.launch(LaunchConfig::for_num_elems(len)) }?;
    let host_a: Vec<f32> = x.iter().map(|v| a * v * v + b).collect();
    let got_a = stream.clone_dtoh(&da)?;
    let kernel_err = max_abs_diff(&got_a, &host_a);
    println!(
        "kernel: {} elements, max |device - host| = {kernel_err:e}",
        got_a.len()
    );

    // C = A * B with B[p, j] = (p + j) / k, column-major.
    let host_b: Vec<f32> = (0..k * n)
        .map(|idx| ((idx % k) + idx / k) as f32 / k as f32)
        .collect();
    let db = stream.clone_htod(&host_b)?;
    let mut dc = stream.alloc_zeros::<f32>(m * n)?;
    let blas = Blas::new(&stream)?;
    let cfg = GemmConfig {
        transa: Transpose::No,
        transb: Transpose::No,
        m,
        n,
        k,
        alpha: 1.0f32,
        lda: m,
        ldb: k,
        beta: 0.0f32,
        ldc: m,
    };
    blas.gemm(cfg, &da, &db, &mut dc)?;
    let got_c = stream.clone_dtoh(&dc)?;
    let host_c: Vec<f32> = (0..m * n)
        .map(|idx| {
            let (i, j) = (idx % m, idx / m);
            (0..k).map(|p| host_a[i + p * m] * host_b[p + j * k]).sum()
        })
        .collect();
    let gemm_err = max_abs_diff(&got_c, &host_c);
    println!("gemm {m}x{n}x{k}: max |device - host| = {gemm_err:e}");

    if kernel_err > 1e-6 || gemm_err > 1e-3 {
        return Err(format!(
            "results differ from the host: kernel {kernel_err:e}, gemm {gemm_err:e}"
        )
        .into());
    }
    println!("runtime-kernel: OK");
    Ok(())
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
