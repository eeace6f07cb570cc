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
//! - `startup`: every kernel module loads, and a second device reuses the
//!   compiled code.
//! - `random` (the device's random numbers), `errors` (what is refused) and
//!   `large` (64-bit offsets) test the device directly.
//!
//! The GPU tests are ignored without a device; on the NVIDIA test platform
//! (tests/hip-on-cuda) they run with `--include-ignored`. Each storage-op
//! suite draws from a random stream of its own (seeded by its position), so
//! that `CONFORMANCE_PART=k/n` can run every n-th suite from the k-th (0-based)
//! with the same cases as the whole run: the sanitizer step splits the suite
//! over parallel processes that way. Each tallying test
//! prints an op × dtype table and then one line: the storage-op suite
//! `conformance: N cases, M failures`, the others
//! `conformance <group>: N cases, M failures`.

mod attention;
mod common;
mod conv;
mod conv_fallback;
mod copy;
mod dtypes;
mod elementwise;
mod errors;
mod fused;
mod graph;
mod index_faults;
mod indexing;
mod large;
mod matmul;
mod overflow;
mod pool;
mod quantized;
mod random;
mod reduce;
mod startup;

use common::{Ctx, DTYPES, FLOATS, INDEX, Rng, Tally, device, shapes};
use indexing::few_updates;

/// One storage-op suite over a context.
pub(crate) type Suite = fn(&mut Ctx);

/// The first pass: the usual shapes (random ones included) and layouts.
const FIRST_PASS: [(&str, Suite); 13] = [
    ("round trips", |c| copy::round_trips(c, &DTYPES)),
    ("unary", |c| elementwise::all_unary(c, &FLOATS, &DTYPES)),
    ("scalar parameters", |c| {
        elementwise::scalar_params(c, &DTYPES)
    }),
    ("binary", |c| elementwise::all_binary(c, &DTYPES)),
    ("comparisons", |c| elementwise::comparisons(c, &DTYPES)),
    ("casts", |c| elementwise::casts(c, &DTYPES, &DTYPES)),
    ("where_cond", |c| {
        elementwise::where_cond(c, &INDEX, &DTYPES)
    }),
    ("reductions", |c| reduce::reductions(c, &DTYPES)),
    ("index_select", |c| {
        indexing::index_select(c, &INDEX, &DTYPES)
    }),
    ("gather", |c| indexing::gather(c, &INDEX, &DTYPES)),
    ("scatter", |c| indexing::scatter(c, &INDEX, &DTYPES)),
    ("index_add", |c| indexing::index_add(c, &INDEX, &DTYPES)),
    ("copies", |c| copy::copies(c, &DTYPES)),
];

/// The second pass: shapes that reach the kernels' packed, tiled, split and
/// batched paths. Inner dimensions of whole 16-byte packs for every dtype
/// (packed broadcasts and permutations), permutations that are batched
/// transposes with whole and partial tiles, scatter / index_add walks of
/// several batches, and reductions large enough to be cut into chunks whose
/// partial states a second launch combines (long rows; outer dimensions with
/// few and with many outputs).
const SECOND_PASS: [(&str, Suite); 8] = [
    ("binary", |c| elementwise::all_binary(c, &DTYPES)),
    ("where_cond", |c| {
        elementwise::where_cond(c, &INDEX, &DTYPES)
    }),
    ("casts", |c| elementwise::casts(c, &DTYPES, &DTYPES)),
    ("copies", |c| copy::copies(c, &DTYPES)),
    ("scatter", |c| indexing::scatter(c, &INDEX, &DTYPES)),
    ("index_add", |c| indexing::index_add(c, &INDEX, &DTYPES)),
    ("update tiles", |c| {
        indexing::update_tiles(c, &INDEX, &DTYPES)
    }),
    ("chunked reductions", |c| {
        c.shapes = vec![vec![3, 200_000], vec![20_000, 33], vec![300, 5000]];
        reduce::reductions(c, &DTYPES)
    }),
];

/// Which suites this process runs: `CONFORMANCE_PART=k/n` selects every n-th
/// suite from the k-th; unset, all of them.
fn part() -> (usize, usize) {
    let Ok(value) = std::env::var("CONFORMANCE_PART") else {
        return (0, 1);
    };
    let parsed = value
        .split_once('/')
        .and_then(|(k, n)| Some((k.parse().ok()?, n.parse().ok()?)));
    match parsed {
        Some((k, n)) if k < n => (k, n),
        _ => panic!("CONFORMANCE_PART={value}: expected k/n with k < n"),
    }
}

/// Runs the selected suites of `suites` (numbered from `first`), each with
/// its own random stream derived from `seed` and its number.
pub(crate) fn run_suites(ctx: &mut Ctx, suites: &[(&str, Suite)], first: usize, seed: u64) {
    let (k, n) = part();
    for (i, (name, suite)) in suites.iter().enumerate() {
        let number = first + i;
        if number % n == k {
            println!("suite {number}: {name}");
            ctx.rng = Rng(seed ^ (number as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            suite(ctx);
        }
    }
}

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
    run_suites(&mut ctx, &FIRST_PASS, 0, 0x5eed_1234_abcd_0001);
    let mut paths = Ctx::paths(dev, 0, std::mem::take(&mut ctx.tally));
    run_suites(
        &mut paths,
        &SECOND_PASS,
        FIRST_PASS.len(),
        0x5eed_1234_abcd_0002,
    );
    paths.tally.finish("conformance");
}
