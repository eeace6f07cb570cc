//! One test executable for Candle's own test files (copied and retargeted by
//! `rocm-tools candle-patch` into `build/.candle-patched/tests`) and our checks of the extension
//! point: each file is a module, so a test is named `<file>::<test>` and
//! `upstream <file>::` runs one file. One executable links candle once, which keeps the folder
//! staged for the GPU machine small.

#[path = "../../../../build/.candle-patched/tests/candle-core/tensor_tests.rs"]
mod tensor_tests;

#[path = "../../../../build/.candle-patched/tests/candle-core/matmul_tests.rs"]
mod matmul_tests;

#[path = "../../../../build/.candle-patched/tests/candle-core/conv_tests.rs"]
mod conv_tests;

#[path = "../../../../build/.candle-patched/tests/candle-core/pool_tests.rs"]
mod pool_tests;

#[path = "../../../../build/.candle-patched/tests/candle-core/grad_tests.rs"]
mod grad_tests;

#[path = "../../../../build/.candle-patched/tests/candle-core/layout_tests.rs"]
mod layout_tests;

#[path = "../../../../build/.candle-patched/tests/candle-core/indexing_tests.rs"]
mod indexing_tests;

#[path = "../../../../build/.candle-patched/tests/candle-core/bilinear_tests.rs"]
mod bilinear_tests;

// `quantized_tests.rs` names `crate::quantized` and `crate::k_quants`, which its own test crate
// imports at the root.
#[allow(unused_imports)]
use candle_core::quantized::{self, k_quants};

// Candle's file uses `usize::is_multiple_of` (Rust 1.87), newer than this workspace's MSRV;
// it only builds with the toolchain that runs the tests.
#[allow(clippy::incompatible_msrv)]
#[path = "../../../../build/.candle-patched/tests/candle-core/quantized_tests.rs"]
mod quantized_tests;

#[path = "../../../../build/.candle-patched/tests/candle-nn/ops.rs"]
mod nn_ops;

mod extension;
