//! Checks of the extension point itself on the harness device (HIP or the CPU delegate, see
//! `upstream_tests::device`): placement and transfers, errors instead of panics, the custom-op
//! hooks, and the fused ops.

use candle_core::cpu_backend::CpuDevice;
use candle_core::custom_backend::{BoxedStorage, CustomStorage};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::scalar::Scalar;
use candle_core::{
    CpuStorage, CustomOp1, D, DType, Device, DeviceLocation, InplaceOp1, InplaceOp2, Layout,
    Module, Result, Shape, Tensor,
};
use candle_hip::extension::Backend;

fn dev() -> Device {
    upstream_tests::device()
}

/// The backend name of the harness device (`hip` or `cpu-delegate`).
fn backend_name() -> &'static str {
    match dev().location() {
        DeviceLocation::Custom { name, .. } => name,
        other => panic!("the harness device is not a custom device: {other:?}"),
    }
}

fn sample(device: &Device) -> Result<Tensor> {
    Tensor::arange(0f32, 24., device)?
        .affine(0.25, -2.)?
        .reshape((2, 3, 4))
}

#[test]
fn location_and_display_name_the_backend() -> Result<()> {
    let device = dev();
    let location = DeviceLocation::Custom {
        name: backend_name(),
        id: 0,
    };
    assert_eq!(device.location(), location);
    assert!(device.is_custom() && !device.is_cpu());
    assert!(device.as_custom_device().is_ok());
    assert!(device.as_cuda_device().is_err());
    assert!(device.same_device(&dev()));
    let t = Tensor::new(&[1u32, 2], &device)?;
    assert_eq!(t.device().location(), location);
    let shown = format!("{}:0", backend_name());
    assert!(format!("{t}").contains(&shown), "{t}");
    Ok(())
}

#[test]
fn transfers_round_trip_through_the_custom_device() -> Result<()> {
    let cpu = sample(&Device::Cpu)?;
    let custom = cpu.to_device(&dev())?;
    assert_eq!(custom.device().location(), dev().location());
    assert_eq!(
        custom.to_device(&Device::Cpu)?.to_vec3::<f32>()?,
        cpu.to_vec3::<f32>()?
    );
    let back = (custom.exp()? + 1.)?.to_device(&Device::Cpu)?;
    assert!(back.device().is_cpu());
    assert_close(&back, &(cpu.exp()? + 1.)?)
}

#[test]
fn mixing_devices_is_an_error_not_a_panic() -> Result<()> {
    let cpu = sample(&Device::Cpu)?;
    let custom = sample(&dev())?;
    let err = (&cpu + &custom).unwrap_err().to_string();
    assert!(err.contains("device mismatch"), "{err}");
    let err = cpu.matmul(&custom.t()?).unwrap_err().to_string();
    assert!(err.contains("device mismatch"), "{err}");
    Ok(())
}

/// A user op with only a CPU implementation.
struct CpuOnly;

impl CustomOp1 for CpuOnly {
    fn name(&self) -> &'static str {
        "cpu-only"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        Ok((storage.clone(), layout.shape().clone()))
    }
}

#[test]
fn custom_op_without_a_custom_implementation_reports_op_and_device() -> Result<()> {
    let err = sample(&dev())?.apply_op1(CpuOnly).unwrap_err().to_string();
    assert!(
        err.contains("cpu-only") && err.contains(backend_name()),
        "{err}"
    );
    Ok(())
}

/// A user op written against the object-safe storage API, so it runs on any custom device:
/// doubles its input.
struct Double;

impl CustomOp1 for Double {
    fn name(&self) -> &'static str {
        "double"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        use candle_core::backend::BackendStorage;
        Ok((storage.affine(layout, 2., 0.)?, layout.shape().clone()))
    }

    fn custom_fwd(
        &self,
        storage: &dyn CustomStorage,
        layout: &Layout,
    ) -> Result<(BoxedStorage, Shape)> {
        Ok((storage.affine(layout, 2., 0.)?, layout.shape().clone()))
    }
}

#[test]
fn custom_op_runs_on_the_custom_device() -> Result<()> {
    let x = sample(&dev())?.narrow(D::Minus1, 1, 2)?;
    let y = x.apply_op1(Double)?;
    assert_eq!(y.device().location(), dev().location());
    assert_eq!(y.to_vec3::<f32>()?, (x * 2.)?.to_vec3::<f32>()?);
    Ok(())
}

/// Fills a tensor with ones through the object-safe storage API.
struct FillOnes;

impl InplaceOp1 for FillOnes {
    fn name(&self) -> &'static str {
        "fill-ones"
    }

    fn cpu_fwd(&self, _: &mut CpuStorage, _: &Layout) -> Result<()> {
        candle_core::bail!("not used on the CPU")
    }

    fn custom_fwd(&self, storage: &mut dyn CustomStorage, layout: &Layout) -> Result<()> {
        storage.const_set(Scalar::F32(1.), layout)
    }
}

/// Copies the second operand into the first, through the object-safe storage API.
struct CopyFrom;

impl InplaceOp2 for CopyFrom {
    fn name(&self) -> &'static str {
        "copy-from"
    }

    fn cpu_fwd(&self, _: &mut CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> Result<()> {
        candle_core::bail!("not used on the CPU")
    }

    fn custom_fwd(
        &self,
        dst: &mut dyn CustomStorage,
        dst_l: &Layout,
        src: &dyn CustomStorage,
        src_l: &Layout,
    ) -> Result<()> {
        src.copy_strided_src(dst, dst_l.start_offset(), src_l)
    }
}

#[test]
fn inplace_ops_reach_the_custom_hooks() -> Result<()> {
    let t = Tensor::zeros((2, 3), DType::F32, &dev())?;
    t.inplace_op1(&FillOnes)?;
    assert_eq!(t.to_vec2::<f32>()?, [[1f32; 3]; 2]);
    let src = Tensor::arange(0f32, 6., &dev())?.reshape((3, 2))?.t()?;
    t.inplace_op2(&src, &CopyFrom)?;
    assert_eq!(t.to_vec2::<f32>()?, src.to_vec2::<f32>()?);
    Ok(())
}

/// Compares a result of the custom device with the CPU's: integers exactly, floats to within
/// 1e-6 relative (the CPU delegate matches exactly; HIP kernels differ from Candle's CPU code
/// by rounding).
fn assert_close(got: &Tensor, want: &Tensor) -> Result<()> {
    assert_eq!(got.dtype(), want.dtype());
    let flat = |t: &Tensor| t.flatten_all()?.to_dtype(DType::F64)?.to_vec1::<f64>();
    let (g, w) = (flat(got)?, flat(want)?);
    assert_eq!(g.len(), w.len());
    let exact = !want.dtype().is_float();
    for (i, (g, w)) in g.iter().zip(&w).enumerate() {
        let close = if exact {
            g == w
        } else {
            (g - w).abs() <= 1e-6 * w.abs().max(1.)
        };
        assert!(
            close,
            "element {i}: {g} on {backend}, {w} on the CPU",
            backend = backend_name()
        );
    }
    Ok(())
}

/// Runs `f` on the CPU and on the custom device and compares the results ([`assert_close`]).
fn same_as_cpu(f: impl Fn(&Device) -> Result<Tensor>) -> Result<()> {
    let on_cpu = f(&Device::Cpu)?;
    let on_custom = f(&dev())?;
    assert_eq!(on_custom.device().location(), dev().location());
    assert_close(&on_custom, &on_cpu)
}

#[test]
fn fused_ops_match_the_cpu() -> Result<()> {
    use candle_nn::{ops, rotary_emb};
    same_as_cpu(|d| ops::softmax_last_dim(&sample(d)?))?;
    same_as_cpu(|d| ops::sigmoid(&sample(d)?))?;
    same_as_cpu(|d| sample(d)?.arg_sort_last_dim(false))?;
    same_as_cpu(|d| ops::rms_norm(&sample(d)?, &Tensor::new(&[1f32, 2., 3., 4.], d)?, 1e-5))?;
    same_as_cpu(|d| {
        let alpha = Tensor::new(&[1f32, 2., 3., 4.], d)?;
        let beta = Tensor::new(&[0.5f32, 0., -0.5, 1.], d)?;
        ops::layer_norm(&sample(d)?, &alpha, &beta, 1e-5)
    })?;
    let rope_input = |d: &Device| -> Result<(Tensor, Tensor, Tensor)> {
        let x = Tensor::arange(0f32, 48., d)?
            .reshape((1, 2, 3, 8))?
            .affine(0.1, -1.)?;
        let angles = Tensor::arange(0f32, 12., d)?
            .reshape((3, 4))?
            .affine(0.3, 0.)?;
        Ok((x, angles.cos()?, angles.sin()?))
    };
    same_as_cpu(|d| {
        let (x, cos, sin) = rope_input(d)?;
        rotary_emb::rope_i(&x, &cos, &sin)
    })?;
    same_as_cpu(|d| {
        let (x, cos, sin) = rope_input(d)?;
        rotary_emb::rope(&x, &cos, &sin)
    })?;
    same_as_cpu(|d| {
        let (x, cos, sin) = rope_input(d)?;
        rotary_emb::rope_thd(&x.transpose(1, 2)?.contiguous()?, &cos, &sin)
    })
}

/// A backend that shares the CPU code but provides no fused op.
struct NoFusedOps;

impl Backend for NoFusedOps {
    const NAME: &'static str = "no-fused-ops";
    type Device = CpuDevice;
    type Storage = CpuStorage;
    type Quantized = candle_hip::extension::NoQuantized;

    fn ordinal(_: &CpuDevice) -> usize {
        0
    }

    fn supports_bf16(_: &CpuDevice) -> bool {
        false
    }
}

#[test]
fn missing_fused_op_is_an_error() -> Result<()> {
    let device = candle_hip::extension::device::<NoFusedOps>(CpuDevice);
    let err = candle_nn::ops::softmax_last_dim(&sample(&device)?)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("SoftmaxLastDim") && err.contains("no-fused-ops"),
        "{err}"
    );
    let err = (sample(&device)? + sample(&dev())?)
        .unwrap_err()
        .to_string();
    assert!(err.contains("device mismatch"), "{err}");
    Ok(())
}

/// Quantized tensors on the device: quantization (on the host, with Candle's CPU quantizer)
/// gives the CPU's blocks, dequantization the CPU's values and QMatMul the CPU's product up to
/// the order of its float sums; `custom_storage` hands the backend its blocks; a backend
/// without quantized tensors says so.
#[test]
fn quantized_tensors_live_on_the_custom_device() -> Result<()> {
    let values: Vec<f32> = (0..8 * 64)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
        .collect();
    let cpu_t = Tensor::from_vec(values, (8, 64), &Device::Cpu)?;
    for dtype in [GgmlDType::Q4_0, GgmlDType::Q8_0] {
        let on_cpu = QTensor::quantize(&cpu_t, dtype)?;
        let on_dev = QTensor::quantize(&cpu_t.to_device(&dev())?, dtype)?;
        assert_eq!(on_dev.device().location(), dev().location());
        assert_eq!(
            on_dev.data()?.to_vec(),
            on_cpu.data()?.to_vec(),
            "{dtype:?}"
        );
        let want = on_cpu
            .dequantize(&Device::Cpu)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let got = on_dev.dequantize(&dev())?.flatten_all()?.to_vec1::<f32>()?;
        assert_eq!(got, want, "{dtype:?}");
        // The backend's own blocks are reachable (for its ops on quantized operands).
        let blocks = on_dev
            .custom_storage()
            .expect("blocks of the custom device");
        assert_eq!(blocks.dtype(), dtype);
        assert_eq!(
            blocks.storage_size_in_bytes(),
            on_cpu.storage_size_in_bytes()
        );
        assert!(on_cpu.custom_storage().is_none());
        let x = Tensor::ones((1, 3, 64), DType::F32, &Device::Cpu)?;
        let want = QMatMul::from_qtensor(on_cpu)?
            .forward(&x)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let got = QMatMul::from_qtensor(on_dev)?
            .forward(&x.to_device(&dev())?)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                "{dtype:?}: {g} vs {w}"
            );
        }
    }
    let device = candle_hip::extension::device::<NoFusedOps>(CpuDevice);
    let err = QTensor::quantize(
        &Tensor::zeros((4, 32), DType::F32, &device)?,
        GgmlDType::Q4_0,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("not supported") && err.contains("no-fused-ops"),
        "{err}"
    );
    Ok(())
}

/// 10,000 rounds of allocate, compute and drop leave the device memory this
/// process holds where it was (once cached memory is released), and an
/// allocation larger than the device is an error after which the device
/// still computes. Held memory is the memory pool's reserved bytes: the
/// device-wide free memory also moves with other processes (the GPU run
/// runs Candle's test files side by side), so it is printed, not compared.
/// The memory figures are HIP's; the CPU delegate runs the rounds.
#[test]
fn memory_comes_back_and_oversized_allocations_are_errors() -> Result<()> {
    let device = dev();
    let hip = candle_hip::extension::as_hip_device(&device);
    let held = || -> Result<Option<(u64, usize)>> {
        let Some(h) = hip else { return Ok(None) };
        h.release_cached_memory()?;
        let d = h.hip_device();
        let reserved = d.memory_pool_reserved().map_err(candle_core::Error::wrap)?;
        let (free, _) = d.memory_info().map_err(candle_core::Error::wrap)?;
        Ok(Some((reserved, free)))
    };
    let round = |i: usize| -> Result<f32> {
        let a = Tensor::arange(0f32, 1024., &device)?;
        let b = a.affine(2.0, 1.0)?.mul(&a)?.sum_all()?;
        if i % 1000 == 0 {
            b.to_scalar::<f32>()
        } else {
            Ok(0.0)
        }
    };
    // One round first: kernel modules stay loaded for the device's life.
    let expect = round(0)?;
    let before = held()?;
    for i in 0..10_000 {
        let got = round(i)?;
        if i % 1000 == 0 {
            assert_eq!(got, expect, "round {i}");
        }
    }
    let after = held()?;
    println!(
        "memory pool reserved bytes and device free bytes before {before:?}, after {after:?} \
         (10000 rounds)"
    );
    assert_eq!(after.map(|(r, _)| r), before.map(|(r, _)| r));
    if let Some(h) = hip {
        let (_, total) = h
            .hip_device()
            .memory_info()
            .map_err(candle_core::Error::wrap)?;
        let elems = total / 4 + (1 << 28);
        assert!(Tensor::zeros(elems, DType::F32, &device).is_err());
        let sum = Tensor::ones(4, DType::F32, &device)?
            .sum_all()?
            .to_scalar::<f32>()?;
        assert_eq!(sum, 4.0);
    }
    Ok(())
}
