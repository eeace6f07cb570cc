//! A Candle backend for AMD GPUs on ROCm.
//!
//! [`HipDevice`] and [`HipStorage`] implement candle-core's
//! [`BackendDevice`](candle_core::backend::BackendDevice) and
//! [`BackendStorage`](candle_core::backend::BackendStorage) traits on top of
//! `hip-safe`. Nothing from ROCm is needed to build: the HIP runtime and
//! hipRTC are loaded when a device is opened, and the kernels (HIP C++ of
//! the `candle-hip-kernels` crate, re-exported as [`kernels`]) are compiled
//! for the device's architecture on first use ([`kernel::Unit::program`]) and
//! cached on disk by `hip-safe`.
//!
//! Every dtype of candle 0.11.1 is stored. u8, u32, i16, i32, i64, f16,
//! bf16, f32, f64 and f8e4m3 take the ops candle's CPU backend computes for
//! them; candle's dummy dtypes (f6e2m3, f6e3m2, f4, f8e8m0: raw bytes) are
//! uploaded, downloaded and copied only. An op a dtype does not take gets
//! candle's `UnsupportedDTypeForOp` error. Element-wise ops, casts,
//! comparisons, `where_cond`, reductions, indexing ops, copies, fills and
//! random numbers run as HIP kernels; matrix multiplication uses rocBLAS,
//! convolutions MIOpen (or im2col + rocBLAS, see [`conv`]), pooling and
//! upsampling HIP kernels. The fused ops transformer models call (softmax,
//! rms_norm, layer_norm, rope, sigmoid, argsort) are functions in [`fused`];
//! `METHODS.md` lists what every method uses per dtype.
//!
//! ```no_run
//! use candle_core::backend::{BackendDevice, BackendStorage};
//! use candle_core::{CpuStorage, Layout};
//! use candle_hip::HipDevice;
//!
//! let dev = HipDevice::new(0)?;
//! let x = dev.storage_from_cpu_storage(&CpuStorage::F32(vec![1.0, 2.0, 3.0]))?;
//! let y = x.affine(&Layout::contiguous(3), 2.0, 1.0)?;
//! assert!(matches!(y.to_cpu_storage()?, CpuStorage::F32(v) if v == [3.0, 5.0, 7.0]));
//! # Ok::<(), candle_core::Error>(())
//! ```

mod collective;
mod device;
mod dtype;
mod error;
#[cfg(feature = "candle-extension")]
pub mod extension;
pub mod fused;
mod graph;
mod handles;
pub mod kernel;
mod ops;
pub mod quantized;
mod size;
mod storage;
mod typed;

pub use candle_hip_kernels as kernels;
pub use collective::HipComm;
pub use device::HipDevice;
pub use error::HipBackendError;
pub use graph::HipGraph;
pub use ops::conv;
pub use storage::HipStorage;
