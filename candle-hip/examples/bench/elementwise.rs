//! Element-wise cases: unary ops, affine/powf/elu, binary ops (contiguous
//! and broadcast), comparisons, where_cond, casts, and the tiny-tensor
//! host-overhead cases.

use candle_core::backend::BackendStorage;
use candle_core::op::{
    Add, BinaryOpT, CmpOp, Div, Exp, Gelu, GeluErf, Maximum, Mul, ReduceOp, Relu, Silu, Sqrt, Tanh,
    UnaryOpT,
};
use candle_core::{DType, Layout};
use candle_hip::{HipDevice, HipStorage};

use crate::cases::{BenchResult, Case, Measure, bytes, dims, op};
use crate::inputs;

/// Elements of the large element-wise cases (64 Mi).
const N: usize = 1 << 26;
/// Rows and columns of the broadcast cases.
const SIDE: usize = 8192;
/// Elements of the tiny-tensor cases.
const TINY: usize = 1024;

/// Every element-wise case.
pub fn cases() -> Vec<Case> {
    let mut cases = vec![
        unary::<Silu>(DType::BF16, false),
        unary::<Exp>(DType::F32, false),
        unary::<Gelu>(DType::BF16, false),
        unary::<GeluErf>(DType::F32, false),
        unary::<Sqrt>(DType::F16, true),
        unary::<Relu>(DType::F32, false),
        unary::<Tanh>(DType::BF16, false),
        scalar_op("affine", DType::F32, |x, l| x.affine(l, 1.5, -0.5)),
        scalar_op("affine", DType::BF16, |x, l| x.affine(l, 1.5, -0.5)),
        scalar_op("powf", DType::F32, |x, l| x.powf(l, 1.7)),
        scalar_op("elu", DType::F32, |x, l| x.elu(l, 0.5)),
        binary::<Add>(DType::F32),
        binary::<Add>(DType::BF16),
        binary::<Mul>(DType::F16),
        binary::<Div>(DType::F32),
        binary::<Maximum>(DType::BF16),
        broadcast::<Add>("add_bcast_row", DType::F32, [1, SIDE]),
        broadcast::<Mul>("mul_bcast_col", DType::BF16, [SIDE, 1]),
        cmp("lt", CmpOp::Lt, DType::F32),
        cmp("eq", CmpOp::Eq, DType::BF16),
        where_cond(DType::F32),
        where_cond(DType::BF16),
    ];
    cases.push(transposed_unary::<Silu>(DType::BF16));
    for (from, to) in [
        (DType::BF16, DType::F32),
        (DType::F32, DType::BF16),
        (DType::F32, DType::F16),
        (DType::F16, DType::F32),
        (DType::U8, DType::F32),
    ] {
        cases.push(cast(from, to));
    }
    cases.push(transposed_cast(DType::F32, DType::BF16));
    cases.extend(overhead());
    cases
}

/// Random input of `n` elements: positive for ops that need it, u8 for u8.
fn input(dev: &HipDevice, n: usize, dtype: DType, positive: bool) -> BenchResult<HipStorage> {
    match dtype {
        DType::U8 => inputs::bytes(dev, n),
        _ if positive => inputs::positive(dev, &[n], dtype),
        _ => inputs::signed(dev, &[n], dtype),
    }
}

fn unary<U: UnaryOpT + 'static>(dtype: DType, positive: bool) -> Case {
    let work = Measure::Bytes(2 * bytes(N, dtype));
    Case::new(
        "unary",
        U::NAME,
        dims(&[N]),
        dtype.as_str(),
        work,
        move |dev| {
            let x = input(dev, N, dtype, positive)?;
            let l = Layout::contiguous(N);
            op(move || {
                x.unary_impl::<U>(&l)?;
                Ok(())
            })
        },
    )
}

/// A `SIDE x SIDE` matrix read transposed, as the one-input ops see a
/// strided view (the key's shape ends in ` t`).
fn transposed() -> candle_core::Result<Layout> {
    Layout::contiguous((SIDE, SIDE)).transpose(0, 1)
}

/// A unary op of a transposed view: the kernels read contiguous inputs, so
/// this times the copy to a contiguous one plus the op.
fn transposed_unary<U: UnaryOpT + 'static>(dtype: DType) -> Case {
    let n = SIDE * SIDE;
    let work = Measure::Bytes(2 * bytes(n, dtype));
    let shape = format!("{} t", dims(&[SIDE, SIDE]));
    Case::new("unary", U::NAME, shape, dtype.as_str(), work, move |dev| {
        let x = input(dev, n, dtype, false)?;
        let l = transposed()?;
        op(move || {
            x.unary_impl::<U>(&l)?;
            Ok(())
        })
    })
}

/// A one-input op with scalar parameters (affine, powf, elu) on positive inputs.
fn scalar_op(
    name: &'static str,
    dtype: DType,
    f: fn(&HipStorage, &Layout) -> candle_core::Result<HipStorage>,
) -> Case {
    let work = Measure::Bytes(2 * bytes(N, dtype));
    Case::new(
        "affine",
        name,
        dims(&[N]),
        dtype.as_str(),
        work,
        move |dev| {
            let x = input(dev, N, dtype, true)?;
            let l = Layout::contiguous(N);
            op(move || {
                f(&x, &l)?;
                Ok(())
            })
        },
    )
}

fn binary<B: BinaryOpT + 'static>(dtype: DType) -> Case {
    let work = Measure::Bytes(3 * bytes(N, dtype));
    Case::new(
        "binary",
        B::NAME,
        dims(&[N]),
        dtype.as_str(),
        work,
        move |dev| {
            let a = input(dev, N, dtype, true)?;
            let b = input(dev, N, dtype, true)?;
            let l = Layout::contiguous(N);
            op(move || {
                a.binary_impl::<B>(&b, &l, &l)?;
                Ok(())
            })
        },
    )
}

/// `lhs (SIDE, SIDE) op rhs` with `rhs` of shape `rhs_dims` broadcast.
fn broadcast<B: BinaryOpT + 'static>(
    name: &'static str,
    dtype: DType,
    rhs_dims: [usize; 2],
) -> Case {
    let n = SIDE * SIDE;
    let work = Measure::Bytes(2 * bytes(n, dtype) + bytes(rhs_dims[0] * rhs_dims[1], dtype));
    Case::new(
        "binary",
        name,
        dims(&[SIDE, SIDE]),
        dtype.as_str(),
        work,
        move |dev| {
            let a = input(dev, n, dtype, true)?;
            let b = input(dev, rhs_dims[0] * rhs_dims[1], dtype, true)?;
            let la = Layout::contiguous((SIDE, SIDE));
            let lb = Layout::contiguous((rhs_dims[0], rhs_dims[1])).broadcast_as((SIDE, SIDE))?;
            op(move || {
                a.binary_impl::<B>(&b, &la, &lb)?;
                Ok(())
            })
        },
    )
}

fn cmp(name: &'static str, cmp: CmpOp, dtype: DType) -> Case {
    let work = Measure::Bytes(2 * bytes(N, dtype) + bytes(N, DType::U8));
    Case::new("cmp", name, dims(&[N]), dtype.as_str(), work, move |dev| {
        let a = input(dev, N, dtype, false)?;
        let b = input(dev, N, dtype, false)?;
        let l = Layout::contiguous(N);
        op(move || {
            a.cmp(cmp, &b, &l, &l)?;
            Ok(())
        })
    })
}

fn where_cond(dtype: DType) -> Case {
    let work = Measure::Bytes(bytes(N, DType::U8) + 3 * bytes(N, dtype));
    Case::new(
        "where",
        "where_cond",
        dims(&[N]),
        dtype.as_str(),
        work,
        move |dev| {
            let mask = inputs::mask(dev, N)?;
            let t = input(dev, N, dtype, false)?;
            let f = input(dev, N, dtype, false)?;
            let l = Layout::contiguous(N);
            op(move || {
                mask.where_cond(&l, &t, &l, &f, &l)?;
                Ok(())
            })
        },
    )
}

fn cast(from: DType, to: DType) -> Case {
    let work = Measure::Bytes(bytes(N, from) + bytes(N, to));
    let name = format!("{}->{}", from.as_str(), to.as_str());
    Case::new("cast", "cast", dims(&[N]), name, work, move |dev| {
        let x = input(dev, N, from, false)?;
        let l = Layout::contiguous(N);
        op(move || {
            x.to_dtype(&l, to)?;
            Ok(())
        })
    })
}

/// A cast of a transposed view (see [`transposed_unary`]).
fn transposed_cast(from: DType, to: DType) -> Case {
    let n = SIDE * SIDE;
    let work = Measure::Bytes(bytes(n, from) + bytes(n, to));
    let name = format!("{}->{}", from.as_str(), to.as_str());
    let shape = format!("{} t", dims(&[SIDE, SIDE]));
    Case::new("cast", "cast", shape, name, work, move |dev| {
        let x = input(dev, n, from, false)?;
        let l = transposed()?;
        op(move || {
            x.to_dtype(&l, to)?;
            Ok(())
        })
    })
}

/// Tiny tensors: the cost per op is the host's (launch, allocation).
fn overhead() -> Vec<Case> {
    let add = |dev: &HipDevice| -> BenchResult<crate::cases::Op> {
        let a = inputs::signed(dev, &[TINY], DType::F32)?;
        let b = inputs::signed(dev, &[TINY], DType::F32)?;
        let l = Layout::contiguous(TINY);
        op(move || {
            a.binary_impl::<Add>(&b, &l, &l)?;
            Ok(())
        })
    };
    let exp = |dev: &HipDevice| -> BenchResult<crate::cases::Op> {
        let x = inputs::signed(dev, &[TINY], DType::F32)?;
        let l = Layout::contiguous(TINY);
        op(move || {
            x.unary_impl::<Exp>(&l)?;
            Ok(())
        })
    };
    let side = 32;
    let sum = move |dev: &HipDevice| -> BenchResult<crate::cases::Op> {
        let x = inputs::signed(dev, &[side, side], DType::F32)?;
        let l = Layout::contiguous((side, side));
        op(move || {
            x.reduce_op(ReduceOp::Sum, &l, &[1])?;
            Ok(())
        })
    };
    // The parts of an op's host cost, ours only: a stream-ordered allocation
    // and free of an output, and a kernel launch into an existing buffer (a
    // transposing copy, which is a kernel, not a memcpy).
    let alloc_free = |dev: &HipDevice| -> BenchResult<crate::cases::Op> {
        let stream = dev.stream().clone();
        op(move || {
            // SAFETY: the buffer is never read; it is freed in stream order.
            drop(unsafe { stream.alloc::<f32>(TINY) }?);
            Ok(())
        })
    };
    let copy_into = |dev: &HipDevice| -> BenchResult<crate::cases::Op> {
        let x = inputs::signed(dev, &[32, 32], DType::F32)?;
        let mut y = inputs::signed(dev, &[32, 32], DType::F32)?;
        let l = Layout::contiguous((32, 32)).transpose(0, 1)?;
        op(move || {
            x.copy_strided_src(&mut y, 0, &l)?;
            Ok(())
        })
    };
    let tiny = dims(&[TINY]);
    vec![
        Case::new(
            "overhead",
            "alloc_free_queued",
            tiny.clone(),
            "f32",
            Measure::HostAsync,
            alloc_free,
        ),
        Case::new(
            "overhead",
            "copy_into_queued",
            dims(&[32, 32]),
            "f32",
            Measure::HostAsync,
            copy_into,
        ),
        Case::new(
            "overhead",
            "add_queued",
            tiny.clone(),
            "f32",
            Measure::HostAsync,
            add,
        ),
        Case::new(
            "overhead",
            "add_synced",
            tiny.clone(),
            "f32",
            Measure::HostSync,
            add,
        ),
        Case::new(
            "overhead",
            "exp_queued",
            tiny,
            "f32",
            Measure::HostAsync,
            exp,
        ),
        Case::new(
            "overhead",
            "sum_last_queued",
            dims(&[side, side]),
            "f32",
            Measure::HostAsync,
            sum,
        ),
    ]
}
