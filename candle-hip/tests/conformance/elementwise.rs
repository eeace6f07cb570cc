//! Element-wise ops: unary ops, affine / powf / elu, binary ops,
//! comparisons, casts between every pair of dtypes and where_cond, over
//! every layout form and the suite's shapes. Each case function takes the
//! dtypes it runs, so that the storage-op suite (the first seven dtypes)
//! and the dtype suite (the others) share them.

use candle_core::backend::BackendStorage;
use candle_core::op::{self, BinaryOpT, CmpOp, UnaryOpT};
use candle_core::{CpuStorage, DType, Layout, Result};

use crate::common::{Ctx, Domain, FORMS, Tol, cpu, describe, strict, tolerance};

/// The unary ops that round an exact result once (f8e4m3 results of them
/// must match bit for bit); the others call math functions whose last
/// bits differ between the device and the host.
const ROUNDED_ONCE: [&str; 10] = [
    "neg", "recip", "sqr", "sqrt", "relu", "abs", "ceil", "floor", "round", "sign",
];

fn unary<U: UnaryOpT>(ctx: &mut Ctx, dtypes: &[DType], domain: Domain) {
    for &dtype in dtypes {
        for shape in ctx.shapes.clone() {
            for form in FORMS {
                let (x, l) = ctx.input(dtype, &shape, form, domain);
                let want = cpu(|| x.cpu.unary_impl::<U>(&l));
                let got = x.hip.unary_impl::<U>(&l);
                let tol = if ROUNDED_ONCE.contains(&U::NAME) {
                    strict(dtype)
                } else {
                    tolerance(dtype)
                };
                ctx.tally
                    .check(U::NAME, dtype, || describe(&shape, &[&l]), want, got, tol);
            }
        }
    }
}

/// Every unary op: the float ones on `floats`, those candle defines on
/// integers too on `all`.
pub fn all_unary(ctx: &mut Ctx, floats: &[DType], all: &[DType]) {
    let simple = Domain::Special;
    unary::<op::Exp>(ctx, floats, Domain::Signed);
    unary::<op::Log>(ctx, floats, Domain::Positive);
    unary::<op::Sin>(ctx, floats, Domain::Signed);
    unary::<op::Cos>(ctx, floats, Domain::Signed);
    unary::<op::Tanh>(ctx, floats, Domain::Signed);
    unary::<op::Neg>(ctx, floats, simple);
    unary::<op::Recip>(ctx, floats, Domain::Positive);
    unary::<op::Sqr>(ctx, floats, Domain::Signed);
    unary::<op::Sqrt>(ctx, floats, Domain::Positive);
    unary::<op::Gelu>(ctx, floats, Domain::Signed);
    unary::<op::GeluErf>(ctx, floats, Domain::Signed);
    unary::<op::Erf>(ctx, floats, Domain::Signed);
    unary::<op::Silu>(ctx, floats, Domain::Signed);
    unary::<op::Relu>(ctx, all, simple);
    unary::<op::Abs>(ctx, all, simple);
    unary::<op::Ceil>(ctx, all, simple);
    unary::<op::Floor>(ctx, all, simple);
    unary::<op::Round>(ctx, all, simple);
    unary::<op::Sign>(ctx, all, simple);
}

pub fn scalar_params(ctx: &mut Ctx, dtypes: &[DType]) {
    for &dtype in dtypes {
        let float = dtype.is_float();
        let affine: &[(f64, f64)] = if float {
            &[(2.5, -1.25), (-0.5, 3.0)]
        } else {
            &[(2.0, 1.0), (3.0, 0.0)]
        };
        let domain = if float {
            Domain::Signed
        } else {
            Domain::Ints(0, 3)
        };
        for shape in ctx.shapes.clone() {
            for form in FORMS {
                let (mul, add) = ctx.rng.pick(affine);
                let (x, l) = ctx.input(dtype, &shape, form, domain);
                let desc = || format!("{} mul {mul} add {add}", describe(&shape, &[&l]));
                ctx.tally.check(
                    "affine",
                    dtype,
                    desc,
                    cpu(|| x.cpu.affine(&l, mul, add)),
                    x.hip.affine(&l, mul, add),
                    strict(dtype),
                );
                if float {
                    let e = ctx.rng.pick(&[2.0, 0.5, 1.7, -1.3]);
                    let (x, l) = ctx.input(dtype, &shape, form, Domain::Positive);
                    let desc = || format!("{} e {e}", describe(&shape, &[&l]));
                    ctx.tally.check(
                        "powf",
                        dtype,
                        desc,
                        cpu(|| x.cpu.powf(&l, e)),
                        x.hip.powf(&l, e),
                        tolerance(dtype),
                    );
                    let alpha = ctx.rng.pick(&[1.0, 0.3]);
                    let (x, l) = ctx.input(dtype, &shape, form, Domain::Signed);
                    let desc = || format!("{} alpha {alpha}", describe(&shape, &[&l]));
                    ctx.tally.check(
                        "elu",
                        dtype,
                        desc,
                        cpu(|| x.cpu.elu(&l, alpha)),
                        x.hip.elu(&l, alpha),
                        tolerance(dtype),
                    );
                }
            }
        }
    }
}

/// Operand domains of a binary op that keep candle's CPU backend (built
/// with overflow checks in tests) away from integer overflow and division by zero.
fn binary_domains(name: &str, dtype: DType) -> (Domain, Domain) {
    let float = dtype.is_float();
    let unsigned = matches!(dtype, DType::U8 | DType::U32);
    match name {
        "add" if float => (Domain::Signed, Domain::Signed),
        "add" => (Domain::Ints(-100, 100), Domain::Ints(-100, 100)),
        "sub" if float => (Domain::Signed, Domain::Signed),
        "sub" if unsigned => (Domain::Ints(100, 200), Domain::Ints(0, 100)),
        "sub" => (Domain::Ints(-100, 100), Domain::Ints(-100, 100)),
        "mul" if float => (Domain::Signed, Domain::Signed),
        "mul" => (Domain::Ints(-15, 15), Domain::Ints(-15, 15)),
        "div" if float => (Domain::Signed, Domain::Positive),
        "div" => (Domain::Ints(-100, 100), Domain::Ints(1, 10)),
        _ => (Domain::Special, Domain::Special),
    }
}

fn binary<B: BinaryOpT>(ctx: &mut Ctx, dtypes: &[DType]) {
    for &dtype in dtypes {
        let (da, db) = binary_domains(B::NAME, dtype);
        for shape in ctx.shapes.clone() {
            for form in FORMS {
                let (a, la) = ctx.input(dtype, &shape, form, da);
                let rform = ctx.random_form();
                let (b, lb) = ctx.input(dtype, &shape, rform, db);
                let want = cpu(|| a.cpu.binary_impl::<B>(&b.cpu, &la, &lb));
                let got = a.hip.binary_impl::<B>(&b.hip, &la, &lb);
                ctx.tally.check(
                    B::NAME,
                    dtype,
                    || describe(&shape, &[&la, &lb]),
                    want,
                    got,
                    strict(dtype),
                );
            }
        }
    }
}

pub fn all_binary(ctx: &mut Ctx, dtypes: &[DType]) {
    binary::<op::Add>(ctx, dtypes);
    binary::<op::Sub>(ctx, dtypes);
    binary::<op::Mul>(ctx, dtypes);
    binary::<op::Div>(ctx, dtypes);
    binary::<op::Maximum>(ctx, dtypes);
    binary::<op::Minimum>(ctx, dtypes);
}

pub fn comparisons(ctx: &mut Ctx, dtypes: &[DType]) {
    let ops = [
        (CmpOp::Eq, "cmp eq"),
        (CmpOp::Ne, "cmp ne"),
        (CmpOp::Lt, "cmp lt"),
        (CmpOp::Le, "cmp le"),
        (CmpOp::Gt, "cmp gt"),
        (CmpOp::Ge, "cmp ge"),
    ];
    for (op, name) in ops {
        for &dtype in dtypes {
            for shape in ctx.shapes.clone() {
                for form in FORMS {
                    let domain = ctx.rng.pick(&[Domain::Special, Domain::Ints(0, 3)]);
                    let (a, la) = ctx.input(dtype, &shape, form, domain);
                    let rform = ctx.random_form();
                    let (b, lb) = ctx.input(dtype, &shape, rform, domain);
                    let want = cpu(|| a.cpu.cmp(op, &b.cpu, &la, &lb));
                    let got = a.hip.cmp(op, &b.hip, &la, &lb);
                    ctx.tally.check(
                        name,
                        dtype,
                        || describe(&shape, &[&la, &lb]),
                        want,
                        got,
                        Tol::EXACT,
                    );
                }
            }
        }
    }
}

/// candle's CPU conversion of `x` (laid out as `l`) to `to`. candle 0.11.1
/// never finishes converting f8e4m3 to f64 (`WithDType::to_f64` calls
/// itself); that reference goes through f32, exactly.
pub fn cpu_cast(x: &CpuStorage, l: &Layout, to: DType) -> Result<CpuStorage> {
    if (x.dtype(), to) == (DType::F8E4M3, DType::F64) {
        let wide = x.to_dtype(l, DType::F32)?;
        return wide.to_dtype(&Layout::contiguous(l.dims()), to);
    }
    x.to_dtype(l, to)
}

/// Casts from every dtype of `froms` to every one of `tos`.
pub fn casts(ctx: &mut Ctx, froms: &[DType], tos: &[DType]) {
    for &to in tos {
        let name = format!("to_dtype -> {}", to.as_str());
        for &from in froms {
            for shape in ctx.shapes.clone() {
                for form in FORMS {
                    let domain = ctx.rng.pick(&[Domain::Special, Domain::Signed]);
                    let (x, l) = ctx.input(from, &shape, form, domain);
                    let want = cpu(|| cpu_cast(&x.cpu, &l, to));
                    let got = x.hip.to_dtype(&l, to);
                    // f64 -> f16/bf16 rounds through f32 on the device: one ulp.
                    ctx.tally.check(
                        &name,
                        from,
                        || describe(&shape, &[&l]),
                        want,
                        got,
                        strict(to),
                    );
                }
            }
        }
    }
}

/// where_cond with every predicate dtype of `preds` and value dtype of `values`.
pub fn where_cond(ctx: &mut Ctx, preds: &[DType], values: &[DType]) {
    for &pred_dtype in preds {
        let name = format!("where_cond (pred {})", pred_dtype.as_str());
        for &dtype in values {
            for shape in ctx.shapes.clone() {
                for form in FORMS {
                    let (p, lp) = ctx.input(pred_dtype, &shape, form, Domain::Ints(0, 2));
                    let (tform, fform) = (ctx.random_form(), ctx.random_form());
                    let (t, lt) = ctx.input(dtype, &shape, tform, Domain::Special);
                    let (f, lf) = ctx.input(dtype, &shape, fform, Domain::Special);
                    let want = cpu(|| p.cpu.where_cond(&lp, &t.cpu, &lt, &f.cpu, &lf));
                    let got = p.hip.where_cond(&lp, &t.hip, &lt, &f.hip, &lf);
                    ctx.tally.check(
                        &name,
                        dtype,
                        || describe(&shape, &[&lp, &lt, &lf]),
                        want,
                        got,
                        strict(dtype),
                    );
                }
            }
        }
    }
}
