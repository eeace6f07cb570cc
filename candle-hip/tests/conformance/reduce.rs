//! Reductions (sum, min, max, argmin, argmax): over any set of dimensions
//! of every layout form, over outer dimensions whose outputs are adjacent
//! in memory, and down to a single output long enough to be split.

use candle_core::backend::BackendStorage;
use candle_core::op::ReduceOp;
use candle_core::{CpuStorage, DType, Layout, Result};

use crate::common::{
    Ctx, Domain, FORMS, Form, Pair, Rng, Tol, cpu, describe, random_storage, tolerance,
};

/// Tolerance for a sum of `count` values of magnitude at most 3: the
/// summation orders differ (the CPU adds sequentially, the kernels in a
/// tree), and each addition rounds relative to its partial sum. Higham's
/// bound for the sequential sum is `count * eps * sum(|x|)`: for values of
/// one sign (a broadcast input repeats one value) that is `count * eps`
/// relative to the result, which the CPU really drifts by (an f64 sum of
/// 80000 equal values was off by 1.2e-12 relative, GPU run 25); for mixed
/// signs the independent roundings grow like `sqrt(count)`, covered by
/// `eps * 3 * count * sqrt(count)` absolute (f32 accumulation for f16, bf16
/// and f32).
fn sum_tolerance(dtype: DType, count: usize) -> Tol {
    let eps = match dtype {
        DType::F64 => f64::EPSILON,
        DType::F16 | DType::BF16 | DType::F32 => f64::from(f32::EPSILON),
        _ => 0.0,
    };
    let base = tolerance(dtype);
    let n = count as f64;
    Tol {
        rel: base.rel.max(n * eps),
        abs: base.abs + n * n.sqrt() * eps * 3.0,
    }
}

/// candle's CPU backend sums f16/bf16/f8e4m3 in the narrow type itself;
/// the kernels sum in f32. The reference for these dtypes is therefore the
/// CPU's f32 sum of the same values, rounded to the dtype.
fn cpu_sum(x: &CpuStorage, l: &Layout, dims: &[usize]) -> Result<CpuStorage> {
    match x.dtype() {
        DType::F16 | DType::BF16 | DType::F8E4M3 => {
            let wide = x.to_dtype(l, DType::F32)?;
            let sum = wide.reduce_op(ReduceOp::Sum, &Layout::contiguous(l.dims()), dims)?;
            let mut out_dims = l.dims().to_vec();
            for &d in dims {
                out_dims[d] = 1;
            }
            sum.to_dtype(&Layout::contiguous(out_dims), x.dtype())
        }
        _ => x.reduce_op(ReduceOp::Sum, l, dims),
    }
}

/// The same elements with the strides a contiguous layout normally has.
/// candle 0.11.1's CPU min/max/argmin/argmax divide by the stride of the
/// reduced dimension when the layout is contiguous, which is 0 for a size-1
/// dimension taken from a broadcast; the CPU reference gets this layout.
fn canonical(l: &Layout) -> Layout {
    if l.is_contiguous() {
        Layout::contiguous_with_offset(l.dims(), l.start_offset())
    } else {
        l.clone()
    }
}

pub const REDUCE_OPS: [(ReduceOp, &str); 5] = [
    (ReduceOp::Sum, "reduce sum"),
    (ReduceOp::Min, "reduce min"),
    (ReduceOp::Max, "reduce max"),
    (ReduceOp::ArgMin, "reduce argmin"),
    (ReduceOp::ArgMax, "reduce argmax"),
];

/// The data domain of a sum of `red` values per output that the CPU
/// reference computes exactly in the dtype (none for u8 sums that could
/// wrap), or of a min/max/argmin/argmax (`pick`).
fn reduce_domain(op: ReduceOp, dtype: DType, red: usize, pick: Domain) -> Option<Domain> {
    // i16 values whose sums stay in range: of at most this magnitude, and
    // for long sums a random walk of -1, 0, 1 steps (over 1,000,003 values
    // a standard deviation of 816, far from 2^15).
    let i16_bound = (i16::MAX as usize / red.max(1)).clamp(1, 5) as i64;
    match (op, dtype) {
        (ReduceOp::Sum, DType::U8) if red * 3 > 255 => None,
        (ReduceOp::Sum, DType::U8) => Some(Domain::Ints(0, 3)),
        (ReduceOp::Sum, DType::I16) => Some(Domain::Ints(-i16_bound, i16_bound)),
        (ReduceOp::Sum, DType::U32) => Some(Domain::Ints(0, 1000)),
        (ReduceOp::Sum, _) => Some(Domain::Signed),
        _ => Some(pick),
    }
}

/// Checks `op` over `dims` of `x` (viewed through `l`) against the CPU.
pub fn check_reduction(
    ctx: &mut Ctx,
    (op, name): (ReduceOp, &str),
    dtype: DType,
    x: &Pair,
    l: &Layout,
    dims: &[usize],
) {
    let red: usize = dims.iter().map(|&d| l.dims()[d]).product();
    let want = cpu(|| {
        if op == ReduceOp::Sum {
            cpu_sum(&x.cpu, l, dims)
        } else {
            x.cpu.reduce_op(op, &canonical(l), dims)
        }
    });
    let got = x.hip.reduce_op(op, l, dims);
    let tol = match (op, dtype) {
        (ReduceOp::Sum, _) => sum_tolerance(dtype, red),
        // An element itself (equal values, -0 and +0, may come out either).
        (_, DType::F8E4M3) => Tol::EXACT,
        _ => tolerance(dtype),
    };
    let desc = || format!("{} dims {dims:?}", describe(l.dims(), &[l]));
    ctx.tally.check(name, dtype, desc, want, got, tol);
}

pub fn reductions(ctx: &mut Ctx, dtypes: &[DType]) {
    let mut shapes = ctx.shapes.clone();
    shapes.extend([vec![3, 5000], vec![70, 300], vec![300, 70], vec![2, 40_000]]);
    for op in REDUCE_OPS {
        for &dtype in dtypes {
            for shape in &shapes {
                if shape.is_empty() {
                    continue;
                }
                for form in FORMS {
                    let dims: Vec<usize> = if op.0 == ReduceOp::Sum {
                        let mut d: Vec<usize> =
                            (0..shape.len()).filter(|_| ctx.rng.chance(0.5)).collect();
                        if d.is_empty() {
                            d.push(ctx.rng.below(shape.len()));
                        }
                        d
                    } else {
                        vec![ctx.rng.below(shape.len())]
                    };
                    let red: usize = dims.iter().map(|&d| shape[d]).product();
                    let pick = if op.0 == ReduceOp::Sum {
                        Domain::Signed
                    } else {
                        ctx.rng
                            .pick(&[Domain::Special, Domain::Ints(0, 5), Domain::Signed])
                    };
                    let Some(domain) = reduce_domain(op.0, dtype, red, pick) else {
                        continue;
                    };
                    let (x, l) = ctx.input(dtype, shape, form, domain);
                    check_reduction(ctx, op, dtype, &x, &l, &dims);
                }
            }
        }
    }
    packed_column_reductions(ctx, dtypes);
    whole_tensor_reductions(ctx, dtypes);
    high_rank_reductions(ctx, dtypes);
}

/// Reductions of views whose kept or reduced dimensions do not merge into
/// the four each that the kernels index (`CH_REDUCE_MAX_DIMS`): rank-8 and
/// rank-6 tensors with their dimensions reversed (no two adjacent ones
/// merge), reduced over one, two or alternate dimensions, which candle-hip
/// reduces from a contiguous copy; the same views with at most four of each
/// (rank 6 reduced over three), which it reduces in place; and a contiguous
/// rank-10 tensor reduced over alternate dimensions (five runs of each),
/// which sum reduces in two passes.
fn high_rank_reductions(ctx: &mut Ctx, dtypes: &[DType]) {
    // (shape, reduced dims, stored reversed)
    let cases: &[(&[usize], &[usize], bool)] = &[
        (&[2, 3, 2, 2, 3, 2, 2, 3], &[0, 2], true),
        (&[2, 3, 2, 2, 3, 2, 2, 3], &[1, 3, 5, 7], true),
        (&[3, 2, 5, 2, 3, 4], &[4], true),
        (&[3, 2, 5, 2, 3, 4], &[0, 2, 4], true),
        (&[2, 3, 2, 3, 2, 3, 2, 3, 2, 3], &[1, 3, 5, 7, 9], false),
    ];
    for op in REDUCE_OPS {
        for &dtype in dtypes {
            for &(shape, dims, reversed) in cases {
                // Stored with the dimensions in reverse order, then reversed
                // back by transposes: every stride runs against its size.
                let rank = shape.len();
                let mut l = Layout::contiguous(shape);
                if reversed {
                    let stored: Vec<usize> = shape.iter().rev().copied().collect();
                    l = Layout::contiguous(stored.as_slice());
                    for d in 0..rank / 2 {
                        l = l.transpose(d, rank - 1 - d).unwrap();
                    }
                }
                // Candle's CPU backend takes one dimension for all but sum.
                let dims = if op.0 == ReduceOp::Sum {
                    dims
                } else {
                    &dims[..1]
                };
                let red: usize = dims.iter().map(|&d| shape[d]).product();
                let Some(domain) = reduce_domain(op.0, dtype, red, Domain::Signed) else {
                    continue;
                };
                let cpu = random_storage(&mut ctx.rng, dtype, l.shape().elem_count(), domain);
                let x = ctx.upload(cpu);
                check_reduction(ctx, op, dtype, &x, &l, dims);
            }
        }
    }
}

/// Reductions to a single output long enough to be cut into chunks whose
/// partial states a finish launch combines: every op and dtype, contiguous
/// and offset views, an odd length, and a 2-D sum over both dimensions. Its
/// own random stream keeps the data of the other cases independent of it.
fn whole_tensor_reductions(ctx: &mut Ctx, dtypes: &[DType]) {
    let saved = std::mem::replace(&mut ctx.rng, Rng(0x5eed_1234_abcd_0003));
    let cases: [(&[usize], &[usize]); 3] = [
        (&[300_000], &[0]),
        (&[1_000_003], &[0]),
        (&[4, 250_000], &[0, 1]),
    ];
    for op in REDUCE_OPS {
        for &dtype in dtypes {
            for (shape, dims) in cases {
                if dims.len() > 1 && op.0 != ReduceOp::Sum {
                    continue;
                }
                let red: usize = dims.iter().map(|&d| shape[d]).product();
                let pick = if op.0 == ReduceOp::Sum {
                    Domain::Signed
                } else {
                    Domain::Special
                };
                let Some(domain) = reduce_domain(op.0, dtype, red, pick) else {
                    continue;
                };
                for form in [Form::Contiguous, Form::Offset] {
                    let (x, l) = ctx.input(dtype, shape, form, domain);
                    check_reduction(ctx, op, dtype, &x, &l, dims);
                }
            }
        }
    }
    ctx.rng = saved;
}

/// A reduction over outer dimensions of a view into a contiguous base.
struct ColumnCase {
    base: Vec<usize>,
    /// Start offset of the base in its storage.
    offset: usize,
    /// (dim, start, len) windows taken of the base, in order.
    narrow: Vec<(usize, usize, usize)>,
    /// Swap the last two dimensions after narrowing.
    transpose: bool,
    dims: Vec<usize>,
}

fn column_case(base: &[usize], offset: usize, dims: &[usize]) -> ColumnCase {
    ColumnCase {
        base: base.to_vec(),
        offset,
        narrow: Vec::new(),
        transpose: false,
        dims: dims.to_vec(),
    }
}

/// Reductions whose outputs are adjacent in memory (`reduce_cols_*`, packs
/// of 16 bytes of outputs per thread): widths on and off the pack grid,
/// views starting off it, short and long reductions, few and many outputs,
/// with and without a split and its two finish forms (on a GPU of about 132
/// units: 4352 outputs is past the thread-per-output finish threshold).
/// Its own random stream keeps the data of the other cases independent of
/// it.
fn packed_column_reductions(ctx: &mut Ctx, dtypes: &[DType]) {
    let mut rng = Rng(0x5eed_c015_0000_0003);
    let mut cases = vec![
        column_case(&[250, 256], 0, &[0]),
        column_case(&[300, 256], 3, &[0]),
        column_case(&[3, 40, 48], 0, &[1]),
        column_case(&[5, 37, 96], 1, &[0, 1]),
        column_case(&[8, 4096], 0, &[0]),
        column_case(&[9, 4096], 5, &[0]),
        column_case(&[20_000, 16], 0, &[0]),
        column_case(&[20_000, 16], 1, &[0]),
        column_case(&[1100, 4352], 0, &[0]),
        column_case(&[700, 64], 2, &[1]),
    ];
    cases[9].transpose = true;
    // Rows of 297 within rows of 320 starting 1 + 3 past the pack grid.
    let mut ragged = column_case(&[90, 320], 1, &[0]);
    ragged.narrow = vec![(1, 3, 297)];
    cases.push(ragged);
    // Rows of 40 of 48 (7 past the pack grid for 1- and 2-byte types) in
    // a rank-3 view, over its middle dim: two output dims.
    let mut middle = column_case(&[6, 30, 48], 2, &[1]);
    middle.narrow = vec![(2, 5, 40), (1, 1, 28)];
    cases.push(middle);
    for case in &cases {
        let mut l = Layout::contiguous_with_offset(case.base.as_slice(), case.offset);
        for &(d, start, len) in &case.narrow {
            l = l.narrow(d, start, len).unwrap();
        }
        if case.transpose {
            let r = l.dims().len();
            l = l.transpose(r - 2, r - 1).unwrap();
        }
        let len = case.base.iter().product::<usize>() + case.offset;
        let red: usize = case.dims.iter().map(|&d| l.dims()[d]).product();
        let big = len > 1 << 20;
        for op in REDUCE_OPS {
            // Candle reduces min, max and their args over one dimension.
            if case.dims.len() > 1 && op.0 != ReduceOp::Sum {
                continue;
            }
            for &dtype in dtypes {
                let picks = if big {
                    vec![rng.pick(&[Domain::Special, Domain::Ints(0, 5)])]
                } else {
                    vec![Domain::Special, Domain::Ints(0, 5), Domain::Signed]
                };
                for pick in picks {
                    let Some(domain) = reduce_domain(op.0, dtype, red, pick) else {
                        continue;
                    };
                    let cpu = random_storage(&mut rng, dtype, len, domain);
                    let x = ctx.upload(cpu);
                    check_reduction(ctx, op, dtype, &x, &l, &case.dims);
                    if op.0 == ReduceOp::Sum {
                        break;
                    }
                }
            }
        }
    }
}
