//! What candle-hip refuses: dtypes it does not store or compute, and
//! storages of different devices.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::op;
use candle_core::{CpuStorage, DType, Layout, Shape};
use candle_hip::HipDevice;

use crate::common::device;

#[test]
#[ignore = "needs a HIP device"]
fn unsupported_dtypes_and_devices_are_errors() {
    let dev = device();
    let err = dev
        .storage_from_cpu_storage(&CpuStorage::I32(vec![1, 2]))
        .unwrap_err();
    assert!(err.to_string().contains("I32"), "{err}");
    assert!(dev.zeros_impl(&Shape::from(4), DType::I16).is_err());
    let x = dev
        .storage_from_cpu_storage(&CpuStorage::U32(vec![1, 2, 3]))
        .unwrap();
    let l = Layout::contiguous(3);
    let err = x.unary_impl::<op::Exp>(&l).unwrap_err();
    assert!(err.to_string().contains("U32"), "{err}");
    // Storages of two separately opened devices do not mix.
    let other = HipDevice::new(0).unwrap();
    assert!(!dev.same_device(&other));
    let y = other
        .storage_from_cpu_storage(&CpuStorage::U32(vec![1, 2, 3]))
        .unwrap();
    let err = x.binary_impl::<op::Add>(&y, &l, &l).unwrap_err();
    assert!(err.to_string().contains("different HIP devices"), "{err}");
}
