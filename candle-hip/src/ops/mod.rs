//! The operations of `HipStorage`, one module per op family; each plans its
//! own launches next to its op code and launches through the kernel layer.

pub mod conv;
pub(crate) mod copy;
pub(crate) mod elementwise;
pub(crate) mod gemv;
pub(crate) mod indexing;
pub(crate) mod matmul;
pub(crate) mod pool;
pub(crate) mod random;
pub(crate) mod reduce;
