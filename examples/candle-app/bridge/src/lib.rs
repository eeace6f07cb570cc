//! Presents a backend written against Candle's generic traits
//! ([`BackendDevice`]/[`BackendStorage`]) as a Candle custom device
//! ([`Device::Custom`], see `candle_core::custom_backend`), so that one implementation of the
//! operations serves both faces.
//!
//! A backend implements [`Backend`] (its types, its name, and optionally the fused ops) and
//! builds its device with [`device`]:
//! ```ignore
//! let device: candle_core::Device = candle_backend_bridge::device::<MyBackend>(my_device);
//! let x = candle_core::Tensor::zeros((2, 3), candle_core::DType::F32, &device)?;
//! ```

mod device;
mod storage;

use std::sync::Arc;

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::custom_backend::FusedOp;
use candle_core::{Device, Layout, Result};

pub use device::BridgeDevice;
pub use storage::BridgeStorage;

/// A backend exposed through the bridge.
pub trait Backend: Send + Sync + 'static {
    /// The backend name, as shown in `DeviceLocation::Custom` and in error messages.
    const NAME: &'static str;

    /// The backend's device.
    type Device: BackendDevice<Storage = Self::Storage> + Send + Sync + 'static;

    /// The backend's storage.
    type Storage: BackendStorage<Device = Self::Device> + std::fmt::Debug + Send + Sync + 'static;

    /// The ordinal of `device` among the devices of this backend.
    fn ordinal(device: &Self::Device) -> usize;

    /// Whether `device` computes in bf16.
    fn supports_bf16(device: &Self::Device) -> bool;

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
