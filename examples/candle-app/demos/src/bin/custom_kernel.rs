//! A user-defined kernel on Candle tensors: a `CustomOp1` whose HIP source is compiled at run
//! time with `hip_safe::Program` and launched on the tensor's HIP storage (`custom_fwd`, the
//! hook the candle-core extension patch adds), checked against its CPU implementation.
//!
//! The op is `x * sigmoid(beta * x)` (swish with a slope) on f32. Run with `custom-kernel`; it
//! exits non-zero when HIP is not available or a result differs from the CPU by more than
//! 1e-6 relative.

use std::process::ExitCode;

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::custom_backend::{BoxedStorage, CustomStorage};
use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Result, Shape, Tensor};
use candle_hip::HipDevice;
use candle_hip::extension::{as_hip_device, boxed, hip_storage, storage_from_buffer};
use hip_safe::{Function, LaunchConfig, Program};

/// The kernel: one thread per element of a contiguous f32 input that starts at `offset`.
const SOURCE: &str = r#"
extern "C" __global__ void swish_beta(const float* x, unsigned long long offset, float* y,
                                      float beta, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[offset + i];
        y[i] = v / (1.0f + expf(-beta * v));
    }
}
"#;

/// `x * sigmoid(beta * x)` as a Candle custom op, with its kernel compiled for one device.
struct SwishBeta {
    beta: f32,
    device: HipDevice,
    kernel: Function,
}

impl SwishBeta {
    /// Compiles the kernel for `device` (hipRTC; the code object is cached on disk).
    fn new(beta: f32, device: &HipDevice) -> Result<Self> {
        let module = Program::new(SOURCE, "swish_beta.hip")
            .option("-O3")
            .compile_for(device.hip_device())
            .map_err(candle_core::Error::wrap)?;
        let kernel = module
            .function("swish_beta")
            .map_err(candle_core::Error::wrap)?;
        Ok(Self {
            beta,
            device: device.clone(),
            kernel,
        })
    }

    /// The start and length of a contiguous f32 layout, or an error naming what is not.
    fn contiguous_f32(&self, dtype: DType, layout: &Layout) -> Result<(usize, usize)> {
        if dtype != DType::F32 {
            return Err(candle_core::Error::UnsupportedDTypeForOp(dtype, self.name()).bt());
        }
        match layout.contiguous_offsets() {
            Some((start, end)) => Ok((start, end - start)),
            None => candle_core::bail!("{}: the input must be contiguous", self.name()),
        }
    }
}

impl CustomOp1 for SwishBeta {
    fn name(&self) -> &'static str {
        "swish-beta"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let (start, len) = self.contiguous_f32(storage.dtype(), layout)?;
        let x = &storage.as_slice::<f32>()?[start..start + len];
        let y = x
            .iter()
            .map(|&v| v / (1.0 + (-self.beta * v).exp()))
            .collect();
        Ok((CpuStorage::F32(y), layout.shape().clone()))
    }

    fn custom_fwd(
        &self,
        storage: &dyn CustomStorage,
        layout: &Layout,
    ) -> Result<(BoxedStorage, Shape)> {
        let x = hip_storage(storage, self.name())?;
        if !x.device().same_device(&self.device) {
            candle_core::bail!(
                "{}: the kernel was compiled for another device",
                self.name()
            );
        }
        let (start, len) = self.contiguous_f32(x.dtype(), layout)?;
        let n = u32::try_from(len).map_err(|_| {
            candle_core::Error::Msg(format!("{}: {len} elements exceed u32", self.name()))
        })?;
        let offset = start as u64;
        let stream = self.device.stream();
        // SAFETY: the kernel writes every one of the `len` elements before anything reads them.
        let y = unsafe { stream.alloc::<u8>(len * 4) }.map_err(candle_core::Error::wrap)?;
        let mut launch = stream.launch_builder(&self.kernel);
        launch
            .arg(x.buffer())
            .arg(&offset)
            .arg(&y)
            .arg(&self.beta)
            .arg(&n);
        // SAFETY: the signature is (const float*, u64, float*, float, unsigned) as pushed; the
        // kernel reads x[offset..offset + n], inside `x` (the layout was checked against the
        // storage by candle), and writes y[0..n], the fresh buffer of n floats.
        unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }
            .map_err(candle_core::Error::wrap)?;
        let y = storage_from_buffer(y, DType::F32, &self.device)?;
        Ok((boxed(y), layout.shape().clone()))
    }
}

/// Applies the op on HIP and on the CPU to the same values (a slice of a larger tensor, so the
/// input starts at an offset) and returns the largest relative difference.
fn check(device: &Device, hip: &HipDevice, dims: (usize, usize)) -> Result<f32> {
    let op = SwishBeta::new(1.702, hip)?;
    let (rows, cols) = dims;
    let all = Tensor::randn(0f32, 3.0, (rows + 1, cols), &Device::Cpu)?;
    let x_cpu = all.narrow(0, 1, rows)?;
    let x_hip = all.to_device(device)?.narrow(0, 1, rows)?;
    let y_cpu = x_cpu.apply_op1_no_bwd(&op)?;
    let y_hip = x_hip.apply_op1_no_bwd(&op)?;
    if y_hip.device().location() != device.location() {
        candle_core::bail!("the result is not on the HIP device");
    }
    let (a, b) = (
        y_hip.flatten_all()?.to_vec1::<f32>()?,
        y_cpu.flatten_all()?.to_vec1::<f32>()?,
    );
    Ok(a.iter()
        .zip(&b)
        .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
        .fold(0f32, f32::max))
}

fn main() -> ExitCode {
    let (device, reason) = candle_app_demos::pick_device();
    let Some(hip) = as_hip_device(&device) else {
        eprintln!(
            "custom-kernel: HIP is not available ({}); nothing to check",
            reason.unwrap_or_default()
        );
        return ExitCode::FAILURE;
    };
    println!("custom-kernel on {}", candle_app_demos::describe(&device));
    let mut ok = true;
    for dims in [(1, 7), (64, 384), (1000, 1003)] {
        match check(&device, hip, dims) {
            Ok(err) => {
                let pass = err <= 1e-6;
                ok &= pass;
                println!(
                    "swish-beta {dims:?} f32: max relative difference to the CPU {err:.2e} {}",
                    if pass { "ok" } else { "FAILED" }
                );
            }
            Err(e) => {
                ok = false;
                println!("swish-beta {dims:?} f32: error: {e}");
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
