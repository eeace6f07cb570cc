//! Test-only: the HIP runtime, hipRTC, rocBLAS and MIOpen C APIs that our
//! `-sys` crates bind, implemented on the CPU, so that our unmodified
//! binaries and kernel sources run at AMD's wave sizes on any x86_64 host.
//!
//! - The device is the host: device memory is host memory (every buffer
//!   between guard zones, checked after each launch), streams run their work
//!   in order at the call, events record host time; stream capture records
//!   the work instead, and a graph launch replays it at the call
//!   (`hip::graph`).
//! - hipRTC compiles a kernel source with the host C++ compiler against our
//!   replacement `hip/*.h` headers (`device/`) into a shared object; a
//!   launch runs every block's threads as fibers that meet at barriers and
//!   wave operations, with AMD's semantics at the wave size of the emulated
//!   target (`HIP_ON_CPU_ARCH`: `gfx942`, wave 64, by default; `gfx1100`,
//!   wave 32; see `hip::device`).
//! - rocBLAS and MIOpen are plain reference loops.
//! - `HIP_ON_CPU_DEVICES=N` emulates N identical devices (`HIP_VISIBLE_DEVICES`
//!   selects among them); RCCL runs collectives between ranks that are
//!   threads of this process (see `rccl`).
//!
//! Built as a `cdylib` and laid out like a ROCm install by [`layout`], it is
//! selected with `ROCM_PATH=<dir>`. The exports and the C boundary are the
//! ones the HIP-on-CUDA platform uses (`tests/shim-common`). See
//! `tests/hip-on-cpu/README.md` for what this platform checks and what it
//! does not.

#![allow(non_snake_case)]

#[path = "../../shim-common/exports.rs"]
pub mod exports;
#[path = "../../shim-common/ffi.rs"]
mod ffi;
pub mod hip;
mod hiprtc;
#[path = "../../shim-common/layout.rs"]
pub mod layout;
mod miopen;
mod parallel;
#[path = "../../shim-common/profile.rs"]
mod profile;
mod rccl;
mod rocblas;

use exports::dynamic_api;

/// The implementations, by their C names, for the generated exports.
mod imp {
    pub(crate) use crate::hip::device::*;
    pub(crate) use crate::hip::graph::{
        hipGraphDestroy, hipGraphExecDestroy, hipGraphGetNodes, hipGraphInstantiateWithFlags,
        hipGraphLaunch, hipStreamBeginCapture, hipStreamEndCapture, hipStreamIsCapturing,
    };
    pub(crate) use crate::hip::memory::*;
    pub(crate) use crate::hip::module::*;
    pub(crate) use crate::hip::status::{hipGetErrorName, hipGetErrorString, hipGetLastError};
    pub(crate) use crate::hip::stream::*;
    pub(crate) use crate::hiprtc::*;
    pub(crate) use crate::miopen::*;
    pub(crate) use crate::rccl::{
        ncclAllGather, ncclAllReduce, ncclBroadcast, ncclCommAbort, ncclCommCount,
        ncclCommCuDevice, ncclCommDestroy, ncclCommGetAsyncError, ncclCommInitAll,
        ncclCommInitRank, ncclCommUserRank, ncclGetErrorString, ncclGetLastError, ncclGetUniqueId,
        ncclGetVersion, ncclGroupEnd, ncclGroupStart, ncclRecv, ncclReduce, ncclReduceScatter,
        ncclSend,
    };
    pub(crate) use crate::rocblas::*;
}
