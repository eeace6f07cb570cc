//! Safe RAII layer over the HIP runtime, hipRTC, rocBLAS, MIOpen and RCCL.
//!
//! Nothing from ROCm is needed to build a program that uses this crate: the
//! libraries are loaded at run time by the `-sys` crates, and every failure
//! (a missing library or symbol included) is an [`Error`] value, never a
//! panic. Call [`is_available`] to decide between GPU and CPU at start-up.
//!
//! The shape follows cudarc's safe layer:
//! - [`Device`] (by ordinal, with properties) hands out [`Stream`]s;
//! - a stream allocates [`DeviceBuffer`]s (in stream order, optionally
//!   recycling small ones: [`Stream::set_allocation_cache_limit`]), copies to
//!   and from the host, and launches kernels through
//!   [`Stream::launch_builder`];
//! - [`Module`]/[`Function`] load code objects, and [`Program`] compiles
//!   HIP C++ at run time with hipRTC, caching code objects on disk;
//! - [`CodeBundle`] reads one versioned file of code objects compiled ahead
//!   of time (looked up by module name, [`SourceHash`], architecture and
//!   wave size), which [`CodeBundleWriter`] writes;
//! - [`Blas`] runs rocBLAS GEMMs and [`Dnn`] MIOpen convolutions;
//! - [`Comm`] runs RCCL collectives between devices, and
//!   [`Stream::memcpy_dtod`] copies between devices directly (peer copies,
//!   [`Device::enable_peer_access`]).
//!
//! ```no_run
//! use hip_safe::{Device, LaunchConfig, Program};
//!
//! let dev = Device::new(0)?;
//! let stream = dev.new_stream()?;
//! let src = r#"extern "C" __global__ void twice(float* x, unsigned n) {
//!     unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
//!     if (i < n) x[i] *= 2.0f;
//! }"#;
//! let module = Program::new(src, "twice.hip").compile_for(&dev)?;
//! let twice = module.function("twice")?;
//! let x = stream.clone_htod(&[1.0f32, 2.0, 3.0])?;
//! let n = 3u32;
//! let mut launch = stream.launch_builder(&twice);
//! launch.arg(&x).arg(&n);
//! // SAFETY: `twice(float*, unsigned)` touches only x[0..n].
//! unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }?;
//! assert_eq!(stream.clone_dtoh(&x)?, vec![2.0, 4.0, 6.0]);
//! # Ok::<(), hip_safe::Error>(())
//! ```

#![warn(missing_docs)]

mod alloc;
mod alloc_cache;
mod blas;
mod buffer;
mod bundle;
mod code_object;
mod comm;
mod device;
mod dnn;
mod error;
mod event;
mod graph;
mod launch;
mod module;
mod probe;
mod repr;
mod result;
mod rtc;
mod stream;
mod transfer;

pub use blas::{Blas, GemmConfig, GemmType, StridedBatchedConfig, Transpose};
pub use buffer::{DeviceBuffer, DevicePtr, DevicePtrMut, DeviceView, DeviceViewMut};
pub use bundle::{BundleEntry, BundleError, CodeBundle, CodeBundleWriter, SourceHash};
pub use comm::{Comm, CommType, ReduceOp, UniqueId};
pub use device::Device;
pub use dnn::{Conv1dConfig, ConvConfig, ConvTransposeConfig, Dnn, DnnType};
pub use error::{BlasError, CommError, DnnError, Error, HipError, Result, RtcError};
pub use event::{Event, EventFlags};
pub use graph::Graph;
pub use hip_sys::{LoadError, MissingSymbol, RuntimeVersion};
pub use launch::{KernelArg, LaunchArgs, LaunchConfig};
pub use module::{Function, Module};
pub use probe::{DeviceReport, Probe, is_available, probe};
pub use repr::{DeviceRepr, ValidAsZeroBits};
pub use rtc::{CACHE_DIR_VAR, MAX_CACHE_BYTES, Program, default_cache_dir};
pub use stream::Stream;
