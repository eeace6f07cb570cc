//! Conformance of candle-hip with Candle's CPU backend (and candle-nn's
//! CPU implementations of the fused ops): one test target, so one
//! executable in the staged GPU suite, its tests grouped by topic.
//!
//! - The storage ops (the `BackendStorage` methods: `elementwise`, `reduce`,
//!   `indexing`, `copy`) run through the traits on both backends with the
//!   same data and layouts: every supported dtype, contiguous / offset /
//!   permuted / sliced / broadcast layouts, fixed and random shapes (empty
//!   and size-1 dimensions included). Integer results must be equal; float
//!   results must agree within a per-dtype tolerance
//!   (`common::tolerance`), NaN matching NaN. When the CPU backend rejects
//!   a case the HIP backend must reject it too. One test runs them all
//!   (`conformance_with_the_cpu_backend`, below): their cases draw their
//!   data from one random stream, in a fixed order.
//! - `matmul`, `conv`, `pool` and `fused` run each case on the GPU through
//!   candle-hip and on the CPU through candle (Tensor API) or candle-nn,
//!   with the same values, for every dtype the op takes and for
//!   contiguous, offset, transposed, narrowed and broadcast layouts, over a
//!   spread of shapes that includes real model sizes (32 heads × 128, a
//!   32000-entry vocabulary, 4096-wide rms_norm, ResNet and UNet
//!   convolutions, a Whisper conv1d). References are computed in higher
//!   precision (f64; f32 for the fused ops on f16/bf16 inputs), so each
//!   comparison bounds the GPU result's own error:
//!   `|hip - ref| <= rel * |ref| + abs`, with `rel` and `abs` derived from
//!   the unit roundoff of the output and accumulation types (`common::Tol`).
//!   Selection ops (max pooling, nearest upsampling, argsort) must match
//!   exactly.
//! - `dtypes` runs the storage-op cases of the suite for the dtypes added
//!   after the first seven (i16, i32, f8e4m3 and candle's dummy dtypes),
//!   with data of its own, and checks f8e4m3 ops on every bit pattern.
//! - `random` (the device's random numbers), `errors` (what is refused) and
//!   `large` (64-bit offsets) test the device directly.
//!
//! The GPU tests are ignored without a device; on the NVIDIA test platform
//! (tests/hip-on-cuda) they run with `--include-ignored`. Each tallying test
//! prints an op × dtype table and then one line: the storage-op suite
//! `conformance: N cases, M failures`, the others
//! `conformance <group>: N cases, M failures`.

mod common;
mod conv;
mod conv_fallback;
mod copy;
mod dtypes;
mod elementwise;
mod errors;
mod fused;
mod index_faults;
mod indexing;
mod large;
mod matmul;
mod overflow;
mod pool;
mod random;
mod reduce;

use common::{Ctx, DTYPES, FLOATS, INDEX, Rng, Tally, device, shapes};
use indexing::few_updates;

#[test]
#[ignore = "needs a HIP device"]
fn conformance_with_the_cpu_backend() {
    let dev = device();
    println!("device: {dev:?}");
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let shapes = shapes(&mut rng);
    let mut ctx = Ctx {
        dev: dev.clone(),
        rng,
        tally: Tally::default(),
        shapes,
        updates: few_updates,
    };
    copy::round_trips(&mut ctx, &DTYPES);
    elementwise::all_unary(&mut ctx, &FLOATS, &DTYPES);
    elementwise::scalar_params(&mut ctx, &DTYPES);
    elementwise::all_binary(&mut ctx, &DTYPES);
    elementwise::comparisons(&mut ctx, &DTYPES);
    elementwise::casts(&mut ctx, &DTYPES, &DTYPES);
    elementwise::where_cond(&mut ctx, &INDEX, &DTYPES);
    reduce::reductions(&mut ctx, &DTYPES);
    indexing::index_select(&mut ctx, &INDEX, &DTYPES);
    indexing::gather(&mut ctx, &INDEX, &DTYPES);
    indexing::scatter(&mut ctx, &INDEX, &DTYPES);
    indexing::index_add(&mut ctx, &INDEX, &DTYPES);
    copy::copies(&mut ctx, &DTYPES);
    // A second pass with its own random stream (so that the data of the
    // cases above does not depend on it): shapes that reach the kernels' packed, tiled, split and
    // batched paths. Inner dimensions of whole 16-byte packs for every dtype
    // (packed broadcasts and permutations), permutations that are batched
    // transposes with whole and partial tiles, scatter / index_add walks of
    // several batches, and reductions large enough to be cut into chunks
    // whose partial states a second launch combines (long rows; outer
    // dimensions with few and with many outputs).
    let mut paths = Ctx::paths(dev, 0x5eed_1234_abcd_0002, std::mem::take(&mut ctx.tally));
    elementwise::all_binary(&mut paths, &DTYPES);
    elementwise::where_cond(&mut paths, &INDEX, &DTYPES);
    elementwise::casts(&mut paths, &DTYPES, &DTYPES);
    copy::copies(&mut paths, &DTYPES);
    indexing::scatter(&mut paths, &INDEX, &DTYPES);
    indexing::index_add(&mut paths, &INDEX, &DTYPES);
    indexing::update_tiles(&mut paths, &INDEX, &DTYPES);
    paths.shapes = vec![vec![3, 200_000], vec![20_000, 33], vec![300, 5000]];
    reduce::reductions(&mut paths, &DTYPES);
    paths.tally.finish("conformance");
}
