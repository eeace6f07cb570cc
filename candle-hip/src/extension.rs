//! candle-hip as a Candle device (`candle_core::Device::Custom`), behind the
//! `candle-extension` feature.
//!
//! `candle_core::Device` and `Storage` are closed enums in the crates.io
//! release, so a tensor can only live on a backend outside candle-core through
//! the extension point that `patches/` adds to candle-core 0.11.1
//! (`candle_core::custom_backend`). **This module therefore only compiles
//! against the patched candle-core**: an application enables the feature and
//! points its `[patch.crates-io]` at the patched sources (see
//! `patches/README.md` and `examples/candle-app`). The repository's own
//! workspace never enables it.
//!
//! One implementation, two faces: the bridge ([`BridgeDevice`],
//! [`BridgeStorage`]) implements candle's object-safe `CustomDevice` /
//! `CustomStorage` traits by calling the [`BackendDevice`]/[`BackendStorage`]
//! methods of a [`Backend`], so every tensor operation on the Candle device
//! runs the very code of [`HipDevice`]/[`HipStorage`]. The bridge is generic
//! over the backend so that it can also be exercised without a GPU (with
//! Candle's CPU backend behind it); [`Hip`] is the HIP backend, whose fused
//! ops are the functions of [`crate::fused`].
//!
//! ```ignore
//! use candle_core::{DType, Device, Tensor};
//!
//! let device = if hip_safe::is_available() {
//!     candle_hip::extension::hip_device(0)?
//! } else {
//!     Device::Cpu
//! };
//! let x = Tensor::ones((2, 3), DType::F32, &device)?;
//! let y = candle_nn::ops::softmax_last_dim(&(x * 2.0)?)?;
//! # Ok::<(), candle_core::Error>(())
//! ```
//!
//! User-defined kernels: a `CustomOp1` implements `custom_fwd`, recovers the
//! HIP storage with [`hip_storage`], launches its own kernel (compiled with
//! `hip_safe::Program`) on the device's stream into a buffer allocated there,
//! and returns it with [`storage_from_buffer`] and [`boxed`].

mod attention;
mod collective;
mod decode;
mod device;
mod linear;
mod quantized;
mod storage;

use std::sync::Arc;

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::custom_backend::{BoxedStorage, CustomStorage, FusedOp};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Layout, Result, Shape, Storage};
use hip_safe::DeviceBuffer;

pub use crate::fused::StepCache;
pub use attention::{FlashAttn, flash_attn, flash_attn_quantized_linear, flash_attn_with_key_lens};
pub use collective::AllReduce;
pub use decode::{rope_append, silu_mul};
pub use device::BridgeDevice;
pub use linear::{
    FusedInput, fused_linear, fused_linear_rope_append, fused_linear_swiglu,
    fused_quantized_linear, fused_quantized_linear_parts, fused_quantized_linear_rope_append,
};
pub use quantized::{BridgeQStorage, NoQuantized, QuantizedBlocks};
pub use storage::BridgeStorage;

use crate::quantized::QuantizedStorage;
use crate::{HipDevice, HipStorage, dtype, error, fused};

/// A backend exposed as a Candle custom device through the bridge.
pub trait Backend: Send + Sync + Sized + 'static {
    /// The backend name, as shown in `DeviceLocation::Custom` and in error messages.
    const NAME: &'static str;

    /// The backend's device.
    type Device: BackendDevice<Storage = Self::Storage> + Send + Sync + 'static;

    /// The backend's storage.
    type Storage: BackendStorage<Device = Self::Device> + std::fmt::Debug + Send + Sync + 'static;

    /// The backend's quantized tensors (GGML blocks); [`NoQuantized`] for a
    /// backend without them.
    type Quantized: QuantizedBlocks<Self>;

    /// The ordinal of `device` among the devices of this backend.
    fn ordinal(device: &Self::Device) -> usize;

    /// Blocks holding `data`, whole GGML blocks of `dtype`, on `device`.
    /// Backends without quantized tensors keep the default, an error.
    fn load_quantized(
        device: &Self::Device,
        dtype: GgmlDType,
        data: &[u8],
    ) -> Result<Self::Quantized> {
        let _ = (device, data);
        candle_core::bail!(
            "quantized tensors ({dtype:?}) are not supported by the {} backend",
            Self::NAME
        )
    }

    /// Whether `device` computes in bf16.
    fn supports_bf16(device: &Self::Device) -> bool;

    /// A copy of `storage` on `device`, another device of this backend,
    /// made without the host; `None` (the default) sends the data through
    /// host memory instead.
    fn transfer(storage: &Self::Storage, device: &Self::Device) -> Result<Option<Self::Storage>> {
        let _ = (storage, device);
        Ok(None)
    }

    /// Runs a fused op (see [`FusedOp`]): `storage` is the first operand, `operands` the others.
    /// The result is contiguous with the shape of `layout`. Backends without fused ops keep the
    /// default, an error naming the op.
    fn fused_op(
        op: FusedOp,
        storage: &Self::Storage,
        layout: &Layout,
        operands: &[(&Self::Storage, &Layout)],
    ) -> Result<Self::Storage> {
        let _ = (storage, layout, operands);
        candle_core::bail!(
            "fused op {op:?} is not implemented by the {} backend",
            Self::NAME
        )
    }
}

/// The Candle device for `device` of backend `B`.
pub fn device<B: Backend>(device: B::Device) -> Device {
    Device::Custom(Arc::new(BridgeDevice::<B>::new(device)))
}

/// The HIP backend: [`HipDevice`]/[`HipStorage`], fused ops from [`crate::fused`].
pub struct Hip;

impl Backend for Hip {
    const NAME: &'static str = "hip";
    type Device = HipDevice;
    type Storage = HipStorage;
    type Quantized = QuantizedStorage;

    fn ordinal(device: &HipDevice) -> usize {
        device.ordinal()
    }

    fn load_quantized(
        device: &HipDevice,
        dtype: GgmlDType,
        data: &[u8],
    ) -> Result<QuantizedStorage> {
        QuantizedStorage::from_blocks(device, dtype, data)
    }

    /// A peer copy between two HIP devices ([`HipStorage::to_device`]).
    fn transfer(storage: &HipStorage, device: &HipDevice) -> Result<Option<HipStorage>> {
        storage.to_device(device).map(Some)
    }

    /// Every kernel and rocBLAS GEMM of candle-hip takes bf16.
    fn supports_bf16(_: &HipDevice) -> bool {
        dtype::SUPPORTED.contains(&DType::BF16)
    }

    fn fused_op(
        op: FusedOp,
        x: &HipStorage,
        layout: &Layout,
        operands: &[(&HipStorage, &Layout)],
    ) -> Result<HipStorage> {
        let arg = |i: usize| {
            operands.get(i).copied().ok_or_else(|| {
                error::invalid(
                    "fused op",
                    format!("{op:?} got {} operands, needs more", operands.len()),
                )
            })
        };
        match op {
            FusedOp::SoftmaxLastDim => fused::softmax_last_dim(x, layout),
            FusedOp::RmsNorm { eps } => {
                let (alpha, alpha_l) = arg(0)?;
                fused::rms_norm(x, layout, alpha, alpha_l, eps)
            }
            FusedOp::LayerNorm { eps } => {
                let ((alpha, alpha_l), (beta, beta_l)) = (arg(0)?, arg(1)?);
                fused::layer_norm(x, layout, alpha, alpha_l, beta, beta_l, eps)
            }
            FusedOp::RopeInterleaved | FusedOp::Rope | FusedOp::RopeThd => {
                let ((cos, cos_l), (sin, sin_l)) = (arg(0)?, arg(1)?);
                let rope = match op {
                    FusedOp::RopeInterleaved => fused::rope_i,
                    FusedOp::Rope => fused::rope,
                    _ => fused::rope_thd,
                };
                rope(x, layout, cos, cos_l, sin, sin_l)
            }
            FusedOp::Sigmoid => fused::sigmoid(x, layout),
            FusedOp::ArgSort { ascending } => fused::arg_sort_last_dim(x, layout, ascending),
            other => Err(error::invalid(
                "fused op",
                format!("{other:?} is not implemented by the {} backend", Self::NAME),
            )),
        }
    }
}

impl QuantizedBlocks<Hip> for QuantizedStorage {
    fn dtype(&self) -> GgmlDType {
        QuantizedStorage::dtype(self)
    }

    fn size_in_bytes(&self) -> usize {
        QuantizedStorage::size_in_bytes(self)
    }

    fn to_host(&self) -> Result<Vec<u8>> {
        QuantizedStorage::to_host(self)
    }

    fn dequantize(&self, elem_count: usize, dtype: DType) -> Result<HipStorage> {
        QuantizedStorage::dequantize(self, elem_count, dtype)
    }

    fn matmul_t(
        &self,
        w_shape: &Shape,
        xs: &HipStorage,
        layout: &Layout,
    ) -> Result<(HipStorage, Shape)> {
        QuantizedStorage::matmul_t(self, w_shape, xs, layout)
    }
}

/// Opens HIP device `ordinal` (with a stream of its own) as a Candle device.
pub fn hip_device(ordinal: usize) -> Result<Device> {
    Ok(device::<Hip>(HipDevice::new(ordinal)?))
}

/// The HIP device behind a Candle device, if it is one made by [`hip_device`].
pub fn as_hip_device(device: &Device) -> Option<&HipDevice> {
    match device {
        Device::Custom(d) => d
            .as_any()
            .downcast_ref::<BridgeDevice<Hip>>()
            .map(BridgeDevice::inner),
        _ => None,
    }
}

/// The HIP blocks of a quantized tensor, if it was loaded onto a device
/// made by [`hip_device`].
pub fn hip_quantized(tensor: &QTensor) -> Option<&QuantizedStorage> {
    tensor
        .custom_storage()?
        .as_any()
        .downcast_ref::<BridgeQStorage<Hip>>()
        .map(BridgeQStorage::inner)
}

/// The HIP storage behind a custom storage (as handed to a custom op's
/// `custom_fwd`); `op` names the operation in the error for a storage of
/// another backend.
pub fn hip_storage<'a>(storage: &'a dyn CustomStorage, op: &str) -> Result<&'a HipStorage> {
    BridgeStorage::<Hip>::downcast(storage, op)
}

/// The HIP storage of a tensor's `storage` that op `name` takes beside its
/// operands (ALiBi slopes, a norm's weight, a residual); `what` names it in
/// the error when it lives elsewhere.
pub(crate) fn on_hip<'a>(
    storage: &'a Storage,
    layout: &'a Layout,
    what: &str,
    name: &str,
) -> Result<(&'a HipStorage, &'a Layout)> {
    match storage {
        Storage::Custom(s) => Ok((hip_storage(s.as_ref(), name)?, layout)),
        _ => candle_core::bail!("{name}: the {what} is not on the HIP device"),
    }
}

/// The error of a HIP custom op's CPU entry point (candle calls it for
/// tensors on the CPU): the op named `name` runs on HIP devices only.
pub(crate) fn hip_only<T>(name: &str) -> Result<T> {
    candle_core::bail!("{name} runs on HIP devices only")
}

/// A HIP storage as the custom storage a custom op returns.
pub fn boxed(storage: HipStorage) -> BoxedStorage {
    Box::new(BridgeStorage::<Hip>::new(storage))
}

/// Takes `buffer` (raw bytes of `dtype` elements, e.g. written by a kernel of
/// one's own) as a storage of `device`. The buffer must belong to the
/// device's stream, so that later operations are ordered after the writes
/// queued there, and hold a whole number of elements.
pub fn storage_from_buffer(
    buffer: DeviceBuffer<u8>,
    dtype: DType,
    device: &HipDevice,
) -> Result<HipStorage> {
    const OP: &str = "storage_from_buffer";
    dtype::check(dtype, OP)?;
    if buffer.stream() != device.stream() {
        return Err(error::invalid(
            OP,
            format!(
                "the buffer belongs to a stream on device {}, not to the stream of {device:?}",
                buffer.stream().device().ordinal()
            ),
        ));
    }
    if !buffer.len().is_multiple_of(dtype::elem_bytes(dtype)) {
        return Err(error::invalid(
            OP,
            format!(
                "{} bytes are not a whole number of {dtype:?} elements",
                buffer.len()
            ),
        ));
    }
    Ok(HipStorage::new(buffer, dtype, device.clone()))
}
