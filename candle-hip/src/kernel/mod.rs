//! The kernel layer: everything between an op and hip-safe's launch.
//!
//! It imports only hip-safe, the sources crate and its own small modules
//! (never the device or storage types):
//! - `catalogue`: every kernel family as a typed constant;
//! - [`Unit`]: what one hipRTC program holds (a source, or one dtype
//!   and/or part of one), its program and kernel names;
//! - `registry`: a device's compiled modules and looked-up functions;
//! - [`bundle`]: the precompiled code objects looked up before compiling;
//! - `header`: every constant mirrored from the sources, checked against
//!   them by one test;
//! - `info`, `nchw`: the argument structs the kernels take by value;
//! - `grid`: launch shapes shared by several op families;
//! - `launch`: the one launch path (`Launcher`).
//!
//! Each op family plans its own launches next to its op code (`ops/`,
//! `fused/`).

pub mod bundle;
pub(crate) mod catalogue;
pub(crate) mod grid;
pub(crate) mod header;
pub(crate) mod info;
pub(crate) mod launch;
pub(crate) mod nchw;
mod registry;
mod unit;

pub use registry::code_object;
pub use unit::Unit;
