//! A test-only custom backend that delegates every operation to Candle's CPU backend through
//! candle-hip's bridge ([`candle_hip::extension`], the code that also presents HIP as a Candle
//! device), and its fused ops to Candle's own CPU implementations of them.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::cpu_backend::CpuDevice;
use candle_core::custom_backend::FusedOp;
use candle_core::op::BackpropOp;
use candle_core::{CpuStorage, Device, Layout, Result, Storage, Tensor};
use candle_hip::extension::Backend;

/// The CPU-delegating backend.
pub struct CpuDelegate;

/// Its (only) device.
pub fn device() -> Device {
    candle_hip::extension::device::<CpuDelegate>(CpuDevice)
}

/// A contiguous copy of the elements of `layout` in `storage`.
fn contiguous(storage: &CpuStorage, layout: &Layout) -> Result<CpuStorage> {
    // SAFETY: `copy_strided_src` writes every element of the new storage before it is read.
    let mut dst = unsafe { CpuDevice.alloc_uninit(layout.shape(), storage.dtype())? };
    storage.copy_strided_src(&mut dst, 0, layout)?;
    Ok(dst)
}

/// A CPU tensor holding the elements of `layout` in `storage`.
fn cpu_tensor(storage: &CpuStorage, layout: &Layout) -> Result<Tensor> {
    let data = Storage::Cpu(contiguous(storage, layout)?);
    Ok(Tensor::from_storage(
        data,
        layout.shape().clone(),
        BackpropOp::none(),
        false,
    ))
}

/// The contiguous CPU storage of a CPU tensor.
fn cpu_storage(tensor: &Tensor) -> Result<CpuStorage> {
    let (storage, layout) = tensor.storage_and_layout();
    match &*storage {
        Storage::Cpu(s) => contiguous(s, layout),
        other => candle_core::bail!("expected a CPU result, got {:?}", other.device().location()),
    }
}

impl Backend for CpuDelegate {
    const NAME: &'static str = "cpu-delegate";
    type Device = CpuDevice;
    type Storage = CpuStorage;

    fn ordinal(_: &CpuDevice) -> usize {
        0
    }

    fn supports_bf16(_: &CpuDevice) -> bool {
        Device::Cpu.supports_bf16()
    }

    fn fused_op(
        op: FusedOp,
        storage: &CpuStorage,
        layout: &Layout,
        operands: &[(&CpuStorage, &Layout)],
    ) -> Result<CpuStorage> {
        let xs = cpu_tensor(storage, layout)?;
        let args = operands
            .iter()
            .map(|(s, l)| cpu_tensor(s, l))
            .collect::<Result<Vec<_>>>()?;
        let arg = |i: usize| {
            args.get(i)
                .ok_or_else(|| candle_core::Error::Msg(format!("{op:?}: missing operand {i}")))
        };
        let result = match op {
            FusedOp::SoftmaxLastDim => candle_nn::ops::softmax_last_dim(&xs)?,
            FusedOp::RmsNorm { eps } => candle_nn::ops::rms_norm(&xs, arg(0)?, eps)?,
            FusedOp::LayerNorm { eps } => candle_nn::ops::layer_norm(&xs, arg(0)?, arg(1)?, eps)?,
            FusedOp::RopeInterleaved => candle_nn::rotary_emb::rope_i(&xs, arg(0)?, arg(1)?)?,
            FusedOp::Rope => candle_nn::rotary_emb::rope(&xs, arg(0)?, arg(1)?)?,
            FusedOp::RopeThd => candle_nn::rotary_emb::rope_thd(&xs, arg(0)?, arg(1)?)?,
            FusedOp::Sigmoid => candle_nn::ops::sigmoid(&xs)?,
            FusedOp::ArgSort { ascending } => xs.arg_sort_last_dim(ascending)?,
            other => candle_core::bail!("fused op {other:?} is not implemented by {}", Self::NAME),
        };
        cpu_storage(&result)
    }
}
