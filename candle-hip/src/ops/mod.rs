//! The operations of `HipStorage`, one module per kernel family group.

pub(crate) mod copy;
pub(crate) mod elementwise;
pub(crate) mod indexing;
pub(crate) mod reduce;
