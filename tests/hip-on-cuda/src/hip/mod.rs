//! The HIP runtime on the CUDA driver API.

pub(crate) mod context;
pub(crate) mod device;
pub(crate) mod error;
pub(crate) mod memory;
pub(crate) mod module;
pub(crate) mod stream;
