//! The device face: [`CustomDevice`] on top of [`BackendDevice`].

use std::any::Any;

use candle_core::backend::BackendDevice;
use candle_core::custom_backend::{BoxedStorage, CustomDevice, CustomQStorage};
use candle_core::quantized::GgmlDType;
use candle_core::{CpuStorage, CpuStorageRef, DType, DeviceLocation, Result, Shape};

use super::Backend;
use super::quantized::boxed_q;
use super::storage::boxed;

/// A device of backend `B` seen as a Candle custom device.
pub struct BridgeDevice<B: Backend> {
    device: B::Device,
}

impl<B: Backend> BridgeDevice<B> {
    /// Wraps `device`.
    pub fn new(device: B::Device) -> Self {
        Self { device }
    }

    /// The backend's own device.
    pub fn inner(&self) -> &B::Device {
        &self.device
    }
}

impl<B: Backend> std::fmt::Debug for BridgeDevice<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{} ({:?})",
            B::NAME,
            B::ordinal(&self.device),
            self.device
        )
    }
}

impl<B: Backend> CustomDevice for BridgeDevice<B> {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn location(&self) -> DeviceLocation {
        DeviceLocation::Custom {
            name: B::NAME,
            id: B::ordinal(&self.device),
        }
    }

    fn same_device(&self, rhs: &dyn CustomDevice) -> bool {
        rhs.as_any()
            .downcast_ref::<Self>()
            .is_some_and(|rhs| self.device.same_device(&rhs.device))
    }

    fn supports_bf16(&self) -> bool {
        B::supports_bf16(&self.device)
    }

    fn zeros(&self, shape: &Shape, dtype: DType) -> Result<BoxedStorage> {
        boxed::<B>(self.device.zeros_impl(shape, dtype))
    }

    unsafe fn alloc_uninit(&self, shape: &Shape, dtype: DType) -> Result<BoxedStorage> {
        // SAFETY: same contract as `CustomDevice::alloc_uninit`, passed on to the caller.
        boxed::<B>(unsafe { self.device.alloc_uninit(shape, dtype) })
    }

    fn storage_from_slice(&self, data: CpuStorageRef<'_>) -> Result<BoxedStorage> {
        let d = &self.device;
        let storage = match data {
            CpuStorageRef::U8(s) => d.storage_from_slice(s),
            CpuStorageRef::U32(s) => d.storage_from_slice(s),
            CpuStorageRef::I16(s) => d.storage_from_slice(s),
            CpuStorageRef::I32(s) => d.storage_from_slice(s),
            CpuStorageRef::I64(s) => d.storage_from_slice(s),
            CpuStorageRef::BF16(s) => d.storage_from_slice(s),
            CpuStorageRef::F16(s) => d.storage_from_slice(s),
            CpuStorageRef::F32(s) => d.storage_from_slice(s),
            CpuStorageRef::F64(s) => d.storage_from_slice(s),
            CpuStorageRef::F8E4M3(s) => d.storage_from_slice(s),
            // The sub-byte float types are raw bytes; only the owned storage keeps their dtype.
            CpuStorageRef::F6E2M3(s) => {
                d.storage_from_cpu_storage_owned(CpuStorage::F6E2M3(s.to_vec()))
            }
            CpuStorageRef::F6E3M2(s) => {
                d.storage_from_cpu_storage_owned(CpuStorage::F6E3M2(s.to_vec()))
            }
            CpuStorageRef::F4(s) => d.storage_from_cpu_storage_owned(CpuStorage::F4(s.to_vec())),
            CpuStorageRef::F8E8M0(s) => {
                d.storage_from_cpu_storage_owned(CpuStorage::F8E8M0(s.to_vec()))
            }
        };
        boxed::<B>(storage)
    }

    fn storage_from_cpu_storage(&self, storage: &CpuStorage) -> Result<BoxedStorage> {
        boxed::<B>(self.device.storage_from_cpu_storage(storage))
    }

    fn storage_from_cpu_storage_owned(&self, storage: CpuStorage) -> Result<BoxedStorage> {
        boxed::<B>(self.device.storage_from_cpu_storage_owned(storage))
    }

    fn rand_uniform(&self, shape: &Shape, dtype: DType, lo: f64, up: f64) -> Result<BoxedStorage> {
        boxed::<B>(self.device.rand_uniform(shape, dtype, lo, up))
    }

    fn rand_normal(
        &self,
        shape: &Shape,
        dtype: DType,
        mean: f64,
        std: f64,
    ) -> Result<BoxedStorage> {
        boxed::<B>(self.device.rand_normal(shape, dtype, mean, std))
    }

    fn set_seed(&self, seed: u64) -> Result<()> {
        self.device.set_seed(seed)
    }

    fn get_current_seed(&self) -> Result<u64> {
        self.device.get_current_seed()
    }

    fn synchronize(&self) -> Result<()> {
        self.device.synchronize()
    }

    fn load_quantized(&self, dtype: GgmlDType, data: &[u8]) -> Result<Box<dyn CustomQStorage>> {
        boxed_q::<B>(B::load_quantized(&self.device, dtype, data), &self.device)
    }
}
