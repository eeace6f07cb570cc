//! The HIP runtime on the host.

pub(crate) mod device;
pub(crate) mod fibers;
pub(crate) mod graph;
pub(crate) mod memory;
pub(crate) mod module;
pub(crate) mod os;
#[path = "../../../shim-common/hip_properties.rs"]
pub(crate) mod properties;
#[path = "../../../shim-common/hip_status.rs"]
pub(crate) mod status;
pub(crate) mod stream;
