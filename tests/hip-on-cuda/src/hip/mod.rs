//! The HIP runtime on the CUDA driver API.

pub(crate) mod context;
pub(crate) mod device;
pub(crate) mod error;
pub(crate) mod graph;
pub(crate) mod memory;
pub(crate) mod module;
pub(crate) mod peer;
#[path = "../../../shim-common/hip_properties.rs"]
pub(crate) mod properties;
#[path = "../../../shim-common/hip_status.rs"]
pub(crate) mod status;
pub(crate) mod stream;
