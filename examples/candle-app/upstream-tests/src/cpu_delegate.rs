//! A test-only custom backend that delegates every operation to Candle's CPU backend through
//! candle-hip's bridge ([`candle_hip::extension`], the code that also presents HIP as a Candle
//! device), its fused ops to Candle's own CPU implementations of them, and its quantized tensors
//! to Candle's CPU quantized storage.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::cpu_backend::CpuDevice;
use candle_core::custom_backend::FusedOp;
use candle_core::op::BackpropOp;
use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Result, Shape, Storage, Tensor};
use candle_hip::extension::{Backend, QuantizedBlocks};

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
    type Quantized = CpuBlocks;

    fn load_quantized(_: &CpuDevice, dtype: GgmlDType, data: &[u8]) -> Result<CpuBlocks> {
        if data.len() % dtype.type_size() != 0 {
            candle_core::bail!("{} bytes are not whole {dtype:?} blocks", data.len())
        }
        Ok(CpuBlocks {
            dtype,
            data: data.to_vec(),
        })
    }

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

/// The delegate's quantized tensors: the blocks in host memory, handed to Candle's CPU quantized
/// code for every operation.
#[derive(Debug)]
pub struct CpuBlocks {
    dtype: GgmlDType,
    data: Vec<u8>,
}

impl CpuBlocks {
    /// A CPU `QTensor` of shape `shape` over a copy of the blocks.
    fn qtensor(&self, shape: &Shape) -> Result<QTensor> {
        let storage = QStorage::from_data(self.data.as_slice().into(), &Device::Cpu, self.dtype)?;
        QTensor::new(storage, shape)
    }
}

impl QuantizedBlocks<CpuDelegate> for CpuBlocks {
    fn dtype(&self) -> GgmlDType {
        self.dtype
    }

    fn size_in_bytes(&self) -> usize {
        self.data.len()
    }

    fn to_host(&self) -> Result<Vec<u8>> {
        Ok(self.data.clone())
    }

    fn dequantize(&self, elem_count: usize, dtype: DType) -> Result<CpuStorage> {
        let values = self
            .qtensor(&Shape::from(elem_count))?
            .dequantize(&Device::Cpu)?;
        cpu_storage(&values.to_dtype(dtype)?)
    }

    fn matmul_t(
        &self,
        w_shape: &Shape,
        xs: &CpuStorage,
        layout: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let xs = contiguous(xs, layout)?;
        self.qtensor(w_shape)?
            .cpu_fwd(&xs, &Layout::contiguous(layout.shape()))
    }
}
