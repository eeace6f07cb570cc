//! Conformance of the HIP backend with candle's CPU backend.
//!
//! Every operation of candle-hip part 1 runs through the `BackendStorage`
//! traits on both backends with the same data and layouts: every supported
//! dtype, contiguous / offset / permuted / sliced / broadcast layouts, fixed
//! and random shapes (empty and size-1 dimensions included). Integer results
//! must be equal; float results must agree within a per-dtype tolerance
//! (`tolerance`), NaN matching NaN. When the CPU backend rejects a case the
//! HIP backend must reject it too.
//!
//! The GPU tests are ignored without a device; on the NVIDIA test platform
//! (tests/hip-on-cuda) they run with `--include-ignored` and print
//! `conformance: N cases, M failures` and the ops x dtypes coverage table.

use std::collections::BTreeMap;

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::op::{self, BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use candle_core::scalar::Scalar;
use candle_core::{CpuStorage, DType, Layout, Result, Shape};
use candle_hip::{HipDevice, HipStorage};
use half::{bf16, f16};

const DTYPES: [DType; 7] = [
    DType::U8,
    DType::U32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
];
const FLOATS: [DType; 4] = [DType::F16, DType::BF16, DType::F32, DType::F64];
const INDEX: [DType; 3] = [DType::U8, DType::U32, DType::I64];

// ---------------------------------------------------------------------------
// Deterministic random numbers (xorshift64*).

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// Uniform integer in `lo..=hi`.
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (hi as i128 - lo as i128 + 1) as u128;
        (lo as i128 + (u128::from(self.next()) % span) as i128) as i64
    }
}

// ---------------------------------------------------------------------------
// Test data.

/// What values an operand holds.
#[derive(Clone, Copy, Debug)]
enum Domain {
    /// Floats in [-3, 3); integers in [-5, 5] (unsigned: [0, 5]).
    Signed,
    /// Floats in [0.1, 3); integers in [1, 5].
    Positive,
    /// Edge values: NaN, infinities, signed zeros, halfway cases and values
    /// out of the integer ranges for floats; the whole range for integers.
    Special,
    /// The integers `lo..=hi` (clamped to the dtype's range), for every dtype.
    Ints(i64, i64),
}

const SPECIAL_FLOATS: [f64; 24] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -0.5,
    1.5,
    2.5,
    -2.5,
    255.0,
    256.0,
    300.0,
    -300.0,
    65504.0,
    70000.0,
    1e10,
    -1e10,
    4294967295.0,
    4294967296.0,
    1e-8,
    3.0,
];

fn int_range(dtype: DType) -> (i64, i64) {
    match dtype {
        DType::U8 => (0, 255),
        DType::U32 => (0, u32::MAX as i64),
        // i64::MIN has no absolute value; the CPU backend would panic on it.
        _ => (-(1 << 62), 1 << 62),
    }
}

fn random_int(rng: &mut Rng, dtype: DType, domain: Domain) -> i64 {
    let (min, max) = int_range(dtype);
    let (lo, hi) = match domain {
        Domain::Signed => (-5, 5),
        Domain::Positive => (1, 5),
        Domain::Special if rng.chance(0.3) => (-3, 3),
        Domain::Special => (min, max),
        Domain::Ints(lo, hi) => (lo, hi),
    };
    rng.int(lo.clamp(min, max), hi.clamp(min, max))
}

fn random_float(rng: &mut Rng, domain: Domain) -> f64 {
    match domain {
        Domain::Signed => rng.unit() * 6.0 - 3.0,
        Domain::Positive => 0.1 + rng.unit() * 2.9,
        Domain::Special if rng.chance(0.5) => rng.pick(&SPECIAL_FLOATS),
        Domain::Special => rng.unit() * 600.0 - 300.0,
        Domain::Ints(lo, hi) => rng.int(lo, hi) as f64,
    }
}

fn random_storage(rng: &mut Rng, dtype: DType, n: usize, domain: Domain) -> CpuStorage {
    let ints = |rng: &mut Rng| {
        (0..n)
            .map(|_| random_int(rng, dtype, domain))
            .collect::<Vec<_>>()
    };
    let floats = |rng: &mut Rng| {
        (0..n)
            .map(|_| random_float(rng, domain))
            .collect::<Vec<_>>()
    };
    match dtype {
        DType::U8 => CpuStorage::U8(ints(rng).into_iter().map(|v| v as u8).collect()),
        DType::U32 => CpuStorage::U32(ints(rng).into_iter().map(|v| v as u32).collect()),
        DType::I64 => CpuStorage::I64(ints(rng)),
        DType::F16 => CpuStorage::F16(floats(rng).into_iter().map(f16::from_f64).collect()),
        DType::BF16 => CpuStorage::BF16(floats(rng).into_iter().map(bf16::from_f64).collect()),
        DType::F32 => CpuStorage::F32(floats(rng).into_iter().map(|v| v as f32).collect()),
        DType::F64 => CpuStorage::F64(floats(rng)),
        other => panic!("no test data for {other:?}"),
    }
}

/// Index values for a dimension of `size`: valid positions, and now and then
/// the dtype's maximum, candle's "no index" marker.
fn random_ids(rng: &mut Rng, dtype: DType, n: usize, size: usize) -> CpuStorage {
    let ids: Vec<u64> = (0..n)
        .map(|_| {
            if size == 0 || rng.chance(0.1) {
                u64::MAX
            } else {
                rng.below(size) as u64
            }
        })
        .collect();
    match dtype {
        DType::U8 => CpuStorage::U8(
            ids.iter()
                .map(|&v| if v == u64::MAX { u8::MAX } else { v as u8 })
                .collect(),
        ),
        DType::U32 => CpuStorage::U32(
            ids.iter()
                .map(|&v| if v == u64::MAX { u32::MAX } else { v as u32 })
                .collect(),
        ),
        DType::I64 => CpuStorage::I64(
            ids.iter()
                .map(|&v| if v == u64::MAX { i64::MAX } else { v as i64 })
                .collect(),
        ),
        other => panic!("no index data for {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// Layouts.

/// How an operand's logical shape is laid out in its storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    Contiguous,
    /// Contiguous from a start offset that breaks 16-byte alignment.
    Offset,
    /// A permutation of a contiguous layout (a transpose for rank 2).
    Permuted,
    /// A narrowed window of a larger contiguous tensor.
    Sliced,
    /// A smaller tensor broadcast to the shape (stride 0 dimensions).
    Broadcast,
}

const FORMS: [Form; 5] = [
    Form::Contiguous,
    Form::Offset,
    Form::Permuted,
    Form::Sliced,
    Form::Broadcast,
];
const DENSE_FORMS: [Form; 2] = [Form::Contiguous, Form::Offset];

/// A layout of `shape` in `form` and the storage length it needs.
fn make_layout(rng: &mut Rng, shape: &[usize], form: Form) -> (Layout, usize) {
    let numel: usize = shape.iter().product();
    let rank = shape.len();
    match form {
        Form::Contiguous => (Layout::contiguous(shape), numel),
        Form::Offset => {
            let off = 1 + rng.below(5);
            (Layout::contiguous_with_offset(shape, off), numel + off)
        }
        Form::Permuted if rank >= 2 => {
            // perm[i] is the base dimension that becomes dimension i.
            let mut perm: Vec<usize> = (0..rank).collect();
            for i in (1..rank).rev() {
                perm.swap(i, rng.below(i + 1));
            }
            if perm.iter().enumerate().all(|(i, &p)| i == p) {
                perm.swap(rank - 2, rank - 1);
            }
            let mut base = vec![0; rank];
            for (i, &p) in perm.iter().enumerate() {
                base[p] = shape[i];
            }
            (Layout::contiguous(base).permute(&perm).unwrap(), numel)
        }
        Form::Sliced => {
            let off = rng.below(4);
            let big: Vec<usize> = shape.iter().map(|&d| d + rng.below(3)).collect();
            let mut layout = Layout::contiguous_with_offset(big.as_slice(), off);
            for (d, (&want, &have)) in shape.iter().zip(&big).enumerate() {
                let start = rng.below(have - want + 1);
                layout = layout.narrow(d, start, want).unwrap();
            }
            // An empty window may start past the end of an empty tensor.
            let len = (big.iter().product::<usize>() + off).max(layout.start_offset());
            (layout, len)
        }
        Form::Broadcast if rank >= 1 => {
            let dropped = rng.below(rank);
            let base: Vec<usize> = shape[dropped..]
                .iter()
                .map(|&d| if rng.chance(0.5) { 1 } else { d })
                .collect();
            let len = base.iter().product();
            (Layout::contiguous(base).broadcast_as(shape).unwrap(), len)
        }
        Form::Permuted | Form::Broadcast => (Layout::contiguous(shape), numel),
    }
}

fn fixed_shapes() -> Vec<Vec<usize>> {
    vec![
        vec![],
        vec![1],
        vec![0],
        vec![5],
        vec![1, 1],
        vec![3, 4],
        vec![4, 1],
        vec![1, 7],
        vec![2, 0, 3],
        vec![2, 3, 4],
        vec![3, 1, 5, 2],
        vec![1000],
        vec![33, 65],
        vec![2, 3, 4, 5, 3],
        vec![4, 1030],
    ]
}

fn shapes(rng: &mut Rng) -> Vec<Vec<usize>> {
    let mut all = fixed_shapes();
    for _ in 0..8 {
        let rank = 1 + rng.below(4);
        all.push(
            (0..rank)
                .map(|_| match rng.below(20) {
                    0 => 0,
                    1..=3 => 1,
                    _ => 2 + rng.below(9),
                })
                .collect(),
        );
    }
    all
}

// ---------------------------------------------------------------------------
// Comparison and the report.

#[derive(Clone, Copy, Debug)]
struct Tol {
    atol: f64,
    rtol: f64,
}

/// Tolerance for floats: a few units in the last place of the dtype (device
/// and host math libraries differ by an ulp or two; candle's CPU backend
/// rounds f16/bf16 after each step of some ops where the kernels round once).
fn tolerance(dtype: DType) -> Tol {
    match dtype {
        DType::F16 => Tol {
            atol: 5e-3,
            rtol: 5e-3,
        },
        DType::BF16 => Tol {
            atol: 3e-2,
            rtol: 2e-2,
        },
        DType::F32 => Tol {
            atol: 1e-5,
            rtol: 1e-5,
        },
        DType::F64 => Tol {
            atol: 1e-12,
            rtol: 1e-12,
        },
        _ => Tol {
            atol: 0.0,
            rtol: 0.0,
        },
    }
}

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
        atol: base.atol + n * n.sqrt() * eps * 3.0,
        rtol: base.rtol.max(n * eps),
    }
}

enum Values {
    Int(Vec<i128>),
    Float(Vec<f64>),
}

fn values(s: &CpuStorage) -> Values {
    match s {
        CpuStorage::U8(v) => Values::Int(v.iter().map(|&x| x.into()).collect()),
        CpuStorage::U32(v) => Values::Int(v.iter().map(|&x| x.into()).collect()),
        CpuStorage::I64(v) => Values::Int(v.iter().map(|&x| x.into()).collect()),
        CpuStorage::F16(v) => Values::Float(v.iter().map(|x| x.to_f64()).collect()),
        CpuStorage::BF16(v) => Values::Float(v.iter().map(|x| x.to_f64()).collect()),
        CpuStorage::F32(v) => Values::Float(v.iter().map(|&x| x.into()).collect()),
        CpuStorage::F64(v) => Values::Float(v.clone()),
        other => panic!("no comparison for {:?}", other.dtype()),
    }
}

fn close(want: f64, got: f64, tol: Tol) -> bool {
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return want == got;
    }
    (want - got).abs() <= tol.atol + tol.rtol * want.abs()
}

/// `Ok` when `got` (HIP) matches `want` (CPU).
fn compare(want: &CpuStorage, got: &CpuStorage, tol: Tol) -> std::result::Result<(), String> {
    if want.dtype() != got.dtype() {
        return Err(format!(
            "dtype {:?}, expected {:?}",
            got.dtype(),
            want.dtype()
        ));
    }
    match (values(want), values(got)) {
        (Values::Int(w), Values::Int(g)) => {
            if w.len() != g.len() {
                return Err(format!("{} elements, expected {}", g.len(), w.len()));
            }
            match w.iter().zip(&g).position(|(a, b)| a != b) {
                None => Ok(()),
                Some(i) => Err(format!("element {i}: {} instead of {}", g[i], w[i])),
            }
        }
        (Values::Float(w), Values::Float(g)) => {
            if w.len() != g.len() {
                return Err(format!("{} elements, expected {}", g.len(), w.len()));
            }
            match w.iter().zip(&g).position(|(&a, &b)| !close(a, b, tol)) {
                None => Ok(()),
                Some(i) => Err(format!(
                    "element {i}: {} instead of {} ({tol:?})",
                    g[i], w[i]
                )),
            }
        }
        _ => Err("integer and float results".to_string()),
    }
}

/// Cases run and failures, with coverage per (op, dtype).
#[derive(Default)]
struct Report {
    cases: usize,
    failures: Vec<String>,
    coverage: BTreeMap<String, [usize; 7]>,
}

impl Report {
    /// Records one case: the CPU result `want` and the HIP result `got`.
    /// A panic of the CPU backend (a bad test case) arrives as an error.
    fn check(
        &mut self,
        op: &str,
        dtype: DType,
        describe: impl FnOnce() -> String,
        want: Result<CpuStorage>,
        got: Result<HipStorage>,
        tol: Tol,
    ) {
        self.cases += 1;
        let column = DTYPES.iter().position(|&d| d == dtype).unwrap();
        self.coverage.entry(op.to_string()).or_insert([0; 7])[column] += 1;
        let outcome = match (want, got.and_then(|h| h.to_cpu_storage())) {
            (Ok(w), Ok(g)) => compare(&w, &g, tol),
            (Err(_), Err(_)) => Ok(()),
            (Ok(_), Err(e)) => Err(format!("HIP failed where the CPU succeeded: {e}")),
            (Err(e), Ok(_)) => Err(format!("HIP succeeded where the CPU failed: {e}")),
        };
        if let Err(msg) = outcome {
            self.failures
                .push(format!("{op} {dtype:?} {}: {msg}", describe()));
        }
    }

    fn print(&self) {
        let names = DTYPES.map(|d| format!("{:>6}", d.as_str())).join("");
        println!("{:<28}{names}", "op \\ dtype");
        for (op, counts) in &self.coverage {
            let cells: String = counts
                .iter()
                .map(|&c| {
                    if c == 0 {
                        format!("{:>6}", "-")
                    } else {
                        format!("{c:>6}")
                    }
                })
                .collect();
            println!("{op:<28}{cells}");
        }
        for f in self.failures.iter().take(200) {
            println!("FAIL {f}");
        }
        println!(
            "conformance: {} cases, {} failures",
            self.cases,
            self.failures.len()
        );
    }
}

// ---------------------------------------------------------------------------
// Running cases on both backends.

/// The same data on the CPU and on the device.
struct Pair {
    cpu: CpuStorage,
    hip: HipStorage,
}

struct Ctx {
    dev: HipDevice,
    rng: Rng,
    report: Report,
    shapes: Vec<Vec<usize>>,
    /// Updates along the indexed dimension of scatter and index_add, given
    /// the bound of the usual few.
    updates: fn(&mut Rng, usize) -> usize,
}

impl Ctx {
    fn upload(&self, cpu: CpuStorage) -> Pair {
        let hip = self.dev.storage_from_cpu_storage(&cpu).expect("upload");
        Pair { cpu, hip }
    }

    /// An operand of `shape` in `form` with random data.
    fn input(
        &mut self,
        dtype: DType,
        shape: &[usize],
        form: Form,
        domain: Domain,
    ) -> (Pair, Layout) {
        let (layout, len) = make_layout(&mut self.rng, shape, form);
        let cpu = random_storage(&mut self.rng, dtype, len, domain);
        (self.upload(cpu), layout)
    }

    fn random_form(&mut self) -> Form {
        self.rng.pick(&FORMS)
    }
}

/// Runs a CPU-backend call; a panic (a case the CPU backend cannot take,
/// i.e. a bad test case) becomes an error so that the run goes on.
fn cpu<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let text = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Err(candle_core::Error::Msg(format!(
            "the CPU backend panicked: {text}"
        )))
    })
}

fn describe(shape: &[usize], layouts: &[&Layout]) -> String {
    let parts: Vec<String> = layouts
        .iter()
        .map(|l| format!("stride {:?} offset {}", l.stride(), l.start_offset()))
        .collect();
    format!("shape {shape:?} [{}]", parts.join("; "))
}

fn unary<U: UnaryOpT>(ctx: &mut Ctx, dtypes: &[DType], domain: Domain) {
    for &dtype in dtypes {
        for shape in ctx.shapes.clone() {
            for form in FORMS {
                let (x, l) = ctx.input(dtype, &shape, form, domain);
                let want = cpu(|| x.cpu.unary_impl::<U>(&l));
                let got = x.hip.unary_impl::<U>(&l);
                ctx.report.check(
                    U::NAME,
                    dtype,
                    || describe(&shape, &[&l]),
                    want,
                    got,
                    tolerance(dtype),
                );
            }
        }
    }
}

fn all_unary(ctx: &mut Ctx) {
    let simple = Domain::Special;
    unary::<op::Exp>(ctx, &FLOATS, Domain::Signed);
    unary::<op::Log>(ctx, &FLOATS, Domain::Positive);
    unary::<op::Sin>(ctx, &FLOATS, Domain::Signed);
    unary::<op::Cos>(ctx, &FLOATS, Domain::Signed);
    unary::<op::Tanh>(ctx, &FLOATS, Domain::Signed);
    unary::<op::Neg>(ctx, &FLOATS, simple);
    unary::<op::Recip>(ctx, &FLOATS, Domain::Positive);
    unary::<op::Sqr>(ctx, &FLOATS, Domain::Signed);
    unary::<op::Sqrt>(ctx, &FLOATS, Domain::Positive);
    unary::<op::Gelu>(ctx, &FLOATS, Domain::Signed);
    unary::<op::GeluErf>(ctx, &FLOATS, Domain::Signed);
    unary::<op::Erf>(ctx, &FLOATS, Domain::Signed);
    unary::<op::Silu>(ctx, &FLOATS, Domain::Signed);
    unary::<op::Relu>(ctx, &DTYPES, simple);
    unary::<op::Abs>(ctx, &DTYPES, simple);
    unary::<op::Ceil>(ctx, &DTYPES, simple);
    unary::<op::Floor>(ctx, &DTYPES, simple);
    unary::<op::Round>(ctx, &DTYPES, simple);
    unary::<op::Sign>(ctx, &DTYPES, simple);
}

fn scalar_params(ctx: &mut Ctx) {
    for dtype in DTYPES {
        let float = FLOATS.contains(&dtype);
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
                ctx.report.check(
                    "affine",
                    dtype,
                    desc,
                    cpu(|| x.cpu.affine(&l, mul, add)),
                    x.hip.affine(&l, mul, add),
                    tolerance(dtype),
                );
                if float {
                    let e = ctx.rng.pick(&[2.0, 0.5, 1.7, -1.3]);
                    let (x, l) = ctx.input(dtype, &shape, form, Domain::Positive);
                    let desc = || format!("{} e {e}", describe(&shape, &[&l]));
                    ctx.report.check(
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
                    ctx.report.check(
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
    let float = FLOATS.contains(&dtype);
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

fn binary<B: BinaryOpT>(ctx: &mut Ctx) {
    for dtype in DTYPES {
        let (da, db) = binary_domains(B::NAME, dtype);
        for shape in ctx.shapes.clone() {
            for form in FORMS {
                let (a, la) = ctx.input(dtype, &shape, form, da);
                let rform = ctx.random_form();
                let (b, lb) = ctx.input(dtype, &shape, rform, db);
                let want = cpu(|| a.cpu.binary_impl::<B>(&b.cpu, &la, &lb));
                let got = a.hip.binary_impl::<B>(&b.hip, &la, &lb);
                ctx.report.check(
                    B::NAME,
                    dtype,
                    || describe(&shape, &[&la, &lb]),
                    want,
                    got,
                    tolerance(dtype),
                );
            }
        }
    }
}

fn all_binary(ctx: &mut Ctx) {
    binary::<op::Add>(ctx);
    binary::<op::Sub>(ctx);
    binary::<op::Mul>(ctx);
    binary::<op::Div>(ctx);
    binary::<op::Maximum>(ctx);
    binary::<op::Minimum>(ctx);
}

fn comparisons(ctx: &mut Ctx) {
    let ops = [
        (CmpOp::Eq, "cmp eq"),
        (CmpOp::Ne, "cmp ne"),
        (CmpOp::Lt, "cmp lt"),
        (CmpOp::Le, "cmp le"),
        (CmpOp::Gt, "cmp gt"),
        (CmpOp::Ge, "cmp ge"),
    ];
    for (op, name) in ops {
        for dtype in DTYPES {
            for shape in ctx.shapes.clone() {
                for form in FORMS {
                    let domain = ctx.rng.pick(&[Domain::Special, Domain::Ints(0, 3)]);
                    let (a, la) = ctx.input(dtype, &shape, form, domain);
                    let rform = ctx.random_form();
                    let (b, lb) = ctx.input(dtype, &shape, rform, domain);
                    let want = cpu(|| a.cpu.cmp(op, &b.cpu, &la, &lb));
                    let got = a.hip.cmp(op, &b.hip, &la, &lb);
                    ctx.report.check(
                        name,
                        dtype,
                        || describe(&shape, &[&la, &lb]),
                        want,
                        got,
                        Tol {
                            atol: 0.0,
                            rtol: 0.0,
                        },
                    );
                }
            }
        }
    }
}

fn casts(ctx: &mut Ctx) {
    for to in DTYPES {
        let name = format!("to_dtype -> {}", to.as_str());
        for from in DTYPES {
            for shape in ctx.shapes.clone() {
                for form in FORMS {
                    let domain = ctx.rng.pick(&[Domain::Special, Domain::Signed]);
                    let (x, l) = ctx.input(from, &shape, form, domain);
                    let want = cpu(|| x.cpu.to_dtype(&l, to));
                    let got = x.hip.to_dtype(&l, to);
                    // f64 -> f16/bf16 rounds through f32 on the device: one ulp.
                    ctx.report.check(
                        &name,
                        from,
                        || describe(&shape, &[&l]),
                        want,
                        got,
                        tolerance(to),
                    );
                }
            }
        }
    }
}

fn where_cond(ctx: &mut Ctx) {
    for pred_dtype in INDEX {
        let name = format!("where_cond (pred {})", pred_dtype.as_str());
        for dtype in DTYPES {
            for shape in ctx.shapes.clone() {
                for form in FORMS {
                    let (p, lp) = ctx.input(pred_dtype, &shape, form, Domain::Ints(0, 2));
                    let (tform, fform) = (ctx.random_form(), ctx.random_form());
                    let (t, lt) = ctx.input(dtype, &shape, tform, Domain::Special);
                    let (f, lf) = ctx.input(dtype, &shape, fform, Domain::Special);
                    let want = cpu(|| p.cpu.where_cond(&lp, &t.cpu, &lt, &f.cpu, &lf));
                    let got = p.hip.where_cond(&lp, &t.hip, &lt, &f.hip, &lf);
                    ctx.report.check(
                        &name,
                        dtype,
                        || describe(&shape, &[&lp, &lt, &lf]),
                        want,
                        got,
                        tolerance(dtype),
                    );
                }
            }
        }
    }
}

/// candle's CPU backend sums f16/bf16 in the half type itself; the kernels
/// sum in f32. The reference for half dtypes is therefore the CPU's f32 sum
/// of the same values, rounded to the dtype.
fn cpu_sum(x: &CpuStorage, l: &Layout, dims: &[usize]) -> Result<CpuStorage> {
    match x.dtype() {
        DType::F16 | DType::BF16 => {
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

const REDUCE_OPS: [(ReduceOp, &str); 5] = [
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
    match (op, dtype) {
        (ReduceOp::Sum, DType::U8) if red * 3 > 255 => None,
        (ReduceOp::Sum, DType::U8) => Some(Domain::Ints(0, 3)),
        (ReduceOp::Sum, DType::U32) => Some(Domain::Ints(0, 1000)),
        (ReduceOp::Sum, _) => Some(Domain::Signed),
        _ => Some(pick),
    }
}

/// Checks `op` over `dims` of `x` (viewed through `l`) against the CPU.
fn check_reduction(
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
    let tol = if op == ReduceOp::Sum {
        sum_tolerance(dtype, red)
    } else {
        tolerance(dtype)
    };
    let desc = || format!("{} dims {dims:?}", describe(l.dims(), &[l]));
    ctx.report.check(name, dtype, desc, want, got, tol);
}

fn reductions(ctx: &mut Ctx) {
    let mut shapes = ctx.shapes.clone();
    shapes.extend([vec![3, 5000], vec![70, 300], vec![300, 70], vec![2, 40_000]]);
    for op in REDUCE_OPS {
        for dtype in DTYPES {
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
    packed_column_reductions(ctx);
    whole_tensor_reductions(ctx);
}

/// Reductions to a single output long enough to be cut into chunks whose
/// partial states a finish launch combines: every op and dtype, contiguous
/// and offset views, an odd length, and a 2-D sum over both dimensions. Its
/// own random stream leaves the other tests' data as it was.
fn whole_tensor_reductions(ctx: &mut Ctx) {
    let saved = std::mem::replace(&mut ctx.rng, Rng(0x5eed_1234_abcd_0003));
    let cases: [(&[usize], &[usize]); 3] = [
        (&[300_000], &[0]),
        (&[1_000_003], &[0]),
        (&[4, 250_000], &[0, 1]),
    ];
    for op in REDUCE_OPS {
        for dtype in DTYPES {
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
/// Its own random stream leaves the other tests' data as it was.
fn packed_column_reductions(ctx: &mut Ctx) {
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
            for dtype in DTYPES {
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

fn index_select(ctx: &mut Ctx) {
    for ids_dtype in INDEX {
        let name = format!("index_select (ids {})", ids_dtype.as_str());
        for dtype in DTYPES {
            for shape in ctx.shapes.clone() {
                if shape.is_empty() {
                    continue;
                }
                for form in [Form::Contiguous, Form::Offset, Form::Permuted] {
                    let dim = ctx.rng.below(shape.len());
                    let (src, ls) = ctx.input(dtype, &shape, form, Domain::Special);
                    let n_ids = ctx.rng.below(8);
                    // Indices contiguous, or every other element of a longer buffer.
                    let strided = ctx.rng.chance(0.5);
                    let len = if strided { 2 * n_ids + 1 } else { n_ids };
                    let ids = random_ids(&mut ctx.rng, ids_dtype, len, shape[dim]);
                    let lids = if strided {
                        Layout::new(Shape::from(n_ids), vec![2], 1)
                    } else {
                        Layout::contiguous(n_ids)
                    };
                    let ids = ctx.upload(ids);
                    let want = cpu(|| src.cpu.index_select(&ids.cpu, &ls, &lids, dim));
                    let got = src.hip.index_select(&ids.hip, &ls, &lids, dim);
                    let desc = || {
                        format!(
                            "{} dim {dim} ids {:?}",
                            describe(&shape, &[&ls, &lids]),
                            ids.cpu
                        )
                    };
                    ctx.report
                        .check(&name, dtype, desc, want, got, tolerance(dtype));
                }
            }
        }
    }
}

/// A few scatter / index_add updates (fewer than `bound`).
fn few_updates(rng: &mut Rng, bound: usize) -> usize {
    rng.below(bound)
}

/// Updates that make several batches of the kernels' column walks (with
/// many repeated positions).
fn many_updates(rng: &mut Rng, _bound: usize) -> usize {
    20 + rng.below(40)
}

/// `shape` with dimension `dim` replaced by `size`.
fn with_dim(shape: &[usize], dim: usize, size: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[dim] = size;
    s
}

fn gather(ctx: &mut Ctx) {
    for ids_dtype in INDEX {
        let name = format!("gather (ids {})", ids_dtype.as_str());
        for dtype in DTYPES {
            for shape in ctx.shapes.clone() {
                if shape.is_empty() {
                    continue;
                }
                for form in DENSE_FORMS {
                    let dim = ctx.rng.below(shape.len());
                    let (src, ls) = ctx.input(dtype, &shape, form, Domain::Special);
                    let ids_shape = with_dim(&shape, dim, ctx.rng.below(5));
                    let n: usize = ids_shape.iter().product();
                    let ids = random_ids(&mut ctx.rng, ids_dtype, n, shape[dim]);
                    let ids = ctx.upload(ids);
                    let lids = Layout::contiguous(ids_shape.as_slice());
                    let want = cpu(|| src.cpu.gather(&ls, &ids.cpu, &lids, dim));
                    let got = src.hip.gather(&ls, &ids.hip, &lids, dim);
                    let desc =
                        || format!("{} dim {dim} ids {ids_shape:?}", describe(&shape, &[&ls]));
                    ctx.report
                        .check(&name, dtype, desc, want, got, tolerance(dtype));
                }
            }
        }
    }
}

fn scatter(ctx: &mut Ctx) {
    for add in [false, true] {
        for ids_dtype in INDEX {
            let name = format!(
                "{} (ids {})",
                if add { "scatter_add" } else { "scatter" },
                ids_dtype.as_str()
            );
            for dtype in DTYPES {
                let domain = if FLOATS.contains(&dtype) {
                    Domain::Signed
                } else {
                    Domain::Ints(0, 3)
                };
                for shape in ctx.shapes.clone() {
                    if shape.is_empty() {
                        continue;
                    }
                    for form in DENSE_FORMS {
                        let dim = ctx.rng.below(shape.len());
                        let (dst, ld) = ctx.input(dtype, &shape, form, domain);
                        let src_shape = with_dim(&shape, dim, (ctx.updates)(&mut ctx.rng, 5));
                        let (src, ls) = ctx.input(dtype, &src_shape, Form::Contiguous, domain);
                        let n: usize = src_shape.iter().product();
                        let ids = random_ids(&mut ctx.rng, ids_dtype, n, shape[dim]);
                        let ids = ctx.upload(ids);
                        let lids = Layout::contiguous(src_shape.as_slice());
                        let want = cpu(|| {
                            dst.cpu.try_clone(&ld).and_then(|mut d| {
                                if add {
                                    d.scatter_add_set(&ld, &ids.cpu, &lids, &src.cpu, &ls, dim)?;
                                } else {
                                    d.scatter_set(&ld, &ids.cpu, &lids, &src.cpu, &ls, dim)?;
                                }
                                Ok(d)
                            })
                        });
                        let got = dst.hip.try_clone(&ld).and_then(|mut d| {
                            if add {
                                d.scatter_add_set(&ld, &ids.hip, &lids, &src.hip, &ls, dim)?;
                            } else {
                                d.scatter_set(&ld, &ids.hip, &lids, &src.hip, &ls, dim)?;
                            }
                            Ok(d)
                        });
                        let desc =
                            || format!("{} dim {dim} src {src_shape:?}", describe(&shape, &[&ld]));
                        ctx.report.check(&name, dtype, desc, want, got, EXACT);
                    }
                }
            }
        }
    }
}

fn index_add(ctx: &mut Ctx) {
    for ids_dtype in INDEX {
        let name = format!("index_add (ids {})", ids_dtype.as_str());
        for dtype in DTYPES {
            let domain = if FLOATS.contains(&dtype) {
                Domain::Signed
            } else {
                Domain::Ints(0, 3)
            };
            for shape in ctx.shapes.clone() {
                if shape.is_empty() {
                    continue;
                }
                for form in FORMS {
                    let dim = ctx.rng.below(shape.len());
                    let (dst, ld) = ctx.input(dtype, &shape, form, domain);
                    let n_ids = (ctx.updates)(&mut ctx.rng, 6);
                    let src_shape = with_dim(&shape, dim, n_ids);
                    let (src, ls) = ctx.input(dtype, &src_shape, Form::Contiguous, domain);
                    let ids = random_ids(&mut ctx.rng, ids_dtype, n_ids, shape[dim]);
                    let ids = ctx.upload(ids);
                    let lids = Layout::contiguous(n_ids);
                    let want = cpu(|| dst.cpu.index_add(&ld, &ids.cpu, &lids, &src.cpu, &ls, dim));
                    let got = dst.hip.index_add(&ld, &ids.hip, &lids, &src.hip, &ls, dim);
                    let desc =
                        || format!("{} dim {dim} ids {:?}", describe(&shape, &[&ld]), ids.cpu);
                    ctx.report.check(&name, dtype, desc, want, got, EXACT);
                }
            }
        }
    }
}

/// Scatter and index_add apply the updates of each element in index order,
/// rounding after each: results equal the CPU backend's bit for bit.
const EXACT: Tol = Tol {
    atol: 0.0,
    rtol: 0.0,
};

/// Indices of `dtype` into a dimension of `size` for the device and the CPU:
/// mostly among the first `distinct` positions (many updates of the same
/// element), some the "no index" marker, some past the dimension (the CPU
/// backend rejects those; the device skips them, so the CPU gets the marker
/// in their place), for i64 some negative.
fn ids_with_edges(
    rng: &mut Rng,
    dtype: DType,
    n: usize,
    size: usize,
    distinct: usize,
) -> (CpuStorage, CpuStorage) {
    let max = match dtype {
        DType::U8 => u64::from(u8::MAX),
        DType::U32 => u64::from(u32::MAX),
        _ => i64::MAX as u64,
    };
    let (mut dev, mut host) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let id = match rng.below(10) {
            0 => max,
            1 if (size as u64) < max => (size as u64 + rng.below(1000) as u64).min(max - 1),
            2 if dtype == DType::I64 => (-1 - rng.below(5) as i64) as u64,
            _ => rng.below(distinct.min(size).min(max as usize).max(1)) as u64,
        };
        dev.push(id);
        host.push(if id < size as u64 { id } else { max });
    }
    let storage = |ids: Vec<u64>| match dtype {
        DType::U8 => CpuStorage::U8(ids.iter().map(|&v| v as u8).collect()),
        DType::U32 => CpuStorage::U32(ids.iter().map(|&v| v as u32).collect()),
        _ => CpuStorage::I64(ids.iter().map(|&v| v as i64).collect()),
    };
    (storage(dev), storage(host))
}

/// Cases of the shared-memory tile form of scatter, scatter_add and
/// index_add (and of the forms next to it): destinations of several row
/// ranges (not whole ones), column counts that are not whole tiles, left >
/// 1, many updates of the same element, the marker and indices past the
/// dimension; every value and index dtype; exact equality.
fn update_tiles(ctx: &mut Ctx) {
    // (destination shape, dim, updates, distinct positions)
    let cases: [(&[usize], usize, usize, usize); 5] = [
        (&[2, 2500, 20], 1, 3000, 2500),
        (&[300, 70], 0, 500, 6),
        (&[100, 40], 0, 300, 100),
        (&[3, 40, 9], 1, 600, 3),
        (&[2, 200, 1024], 1, 400, 200),
    ];
    for (shape, dim, n, distinct) in cases {
        for ids_dtype in INDEX {
            for dtype in DTYPES {
                let domain = if FLOATS.contains(&dtype) {
                    Domain::Signed
                } else {
                    Domain::Ints(0, 3)
                };
                let (dst, ld) = ctx.input(dtype, shape, Form::Contiguous, domain);
                let src_shape = with_dim(shape, dim, n);
                let (src, ls) = ctx.input(dtype, &src_shape, Form::Contiguous, domain);
                let desc = || format!("dst {shape:?} dim {dim} src {src_shape:?}");
                for add in [false, true] {
                    let count: usize = src_shape.iter().product();
                    let (dev_ids, cpu_ids) =
                        ids_with_edges(&mut ctx.rng, ids_dtype, count, shape[dim], distinct);
                    let hip_ids = ctx.dev.storage_from_cpu_storage(&dev_ids).expect("upload");
                    let lids = Layout::contiguous(src_shape.as_slice());
                    let want = cpu(|| {
                        let mut d = dst.cpu.try_clone(&ld)?;
                        if add {
                            d.scatter_add_set(&ld, &cpu_ids, &lids, &src.cpu, &ls, dim)?;
                        } else {
                            d.scatter_set(&ld, &cpu_ids, &lids, &src.cpu, &ls, dim)?;
                        }
                        Ok(d)
                    });
                    let got = dst.hip.try_clone(&ld).and_then(|mut d| {
                        if add {
                            d.scatter_add_set(&ld, &hip_ids, &lids, &src.hip, &ls, dim)?;
                        } else {
                            d.scatter_set(&ld, &hip_ids, &lids, &src.hip, &ls, dim)?;
                        }
                        Ok(d)
                    });
                    let op = if add { "scatter_add" } else { "scatter" };
                    let name = format!("{op} tiles (ids {})", ids_dtype.as_str());
                    ctx.report.check(&name, dtype, desc, want, got, EXACT);
                }
                let (dev_ids, cpu_ids) =
                    ids_with_edges(&mut ctx.rng, ids_dtype, n, shape[dim], distinct);
                let hip_ids = ctx.dev.storage_from_cpu_storage(&dev_ids).expect("upload");
                let lids = Layout::contiguous(n);
                let want = cpu(|| dst.cpu.index_add(&ld, &cpu_ids, &lids, &src.cpu, &ls, dim));
                let got = dst.hip.index_add(&ld, &hip_ids, &lids, &src.hip, &ls, dim);
                let name = format!("index_add tiles (ids {})", ids_dtype.as_str());
                ctx.report.check(&name, dtype, desc, want, got, EXACT);
            }
        }
    }
}

fn copies(ctx: &mut Ctx) {
    for dtype in DTYPES {
        for shape in ctx.shapes.clone() {
            for form in FORMS {
                // copy_strided_src into the middle of a larger destination.
                let (src, ls) = ctx.input(dtype, &shape, form, Domain::Special);
                let numel: usize = shape.iter().product();
                let offset = ctx.rng.below(4);
                let len = numel + offset + ctx.rng.below(4);
                let dst = random_storage(&mut ctx.rng, dtype, len, Domain::Signed);
                let dst = ctx.upload(dst);
                let whole = Layout::contiguous(len);
                let want = cpu(|| {
                    dst.cpu.try_clone(&whole).and_then(|mut d| {
                        src.cpu.copy_strided_src(&mut d, offset, &ls)?;
                        Ok(d)
                    })
                });
                let got = dst.hip.try_clone(&whole).and_then(|mut d| {
                    src.hip.copy_strided_src(&mut d, offset, &ls)?;
                    Ok(d)
                });
                let desc = || format!("{} dst offset {offset}", describe(&shape, &[&ls]));
                ctx.report
                    .check("copy_strided_src", dtype, desc, want, got, tolerance(dtype));

                // const_set over the layout.
                let (dst, ld) = ctx.input(dtype, &shape, form, Domain::Signed);
                let value = match random_storage(&mut ctx.rng, dtype, 1, Domain::Special) {
                    _ if ctx.rng.chance(0.3) => Scalar::zero(dtype),
                    CpuStorage::U8(v) => Scalar::U8(v[0]),
                    CpuStorage::U32(v) => Scalar::U32(v[0]),
                    CpuStorage::I64(v) => Scalar::I64(v[0]),
                    CpuStorage::F16(v) => Scalar::F16(v[0]),
                    CpuStorage::BF16(v) => Scalar::BF16(v[0]),
                    CpuStorage::F32(v) => Scalar::F32(v[0]),
                    CpuStorage::F64(v) => Scalar::F64(v[0]),
                    other => panic!("{:?}", other.dtype()),
                };
                let want = cpu(|| {
                    dst.cpu.try_clone(&ld).and_then(|mut d| {
                        d.const_set(value, &ld)?;
                        Ok(d)
                    })
                });
                let got = dst.hip.try_clone(&ld).and_then(|mut d| {
                    d.const_set(value, &ld)?;
                    Ok(d)
                });
                let desc = || format!("{} value {value:?}", describe(&shape, &[&ld]));
                ctx.report
                    .check("const_set", dtype, desc, want, got, tolerance(dtype));
            }
        }
        for _ in 0..40 {
            let rows = ctx.rng.below(40);
            let cols = ctx.rng.pick(&[0, 1, 3, 8, 16, 33, 64, 200]);
            let src_stride = cols + ctx.rng.pick(&[0, 0, 1, 8, 13]);
            let dst_stride = cols + ctx.rng.pick(&[0, 0, 2, 16, 5]);
            let (src_off, dst_off) = (ctx.rng.below(20), ctx.rng.below(20));
            let reach = |stride: usize| {
                if rows == 0 {
                    0
                } else {
                    (rows - 1) * stride + cols
                }
            };
            let src = random_storage(
                &mut ctx.rng,
                dtype,
                src_off + reach(src_stride) + 3,
                Domain::Special,
            );
            let dst_len = dst_off + reach(dst_stride) + 3;
            let dst = random_storage(&mut ctx.rng, dtype, dst_len, Domain::Signed);
            let whole = Layout::contiguous(dst_len);
            let (src, dst) = (ctx.upload(src), ctx.upload(dst));
            let want = cpu(|| {
                dst.cpu.try_clone(&whole).and_then(|mut d| {
                    src.cpu
                        .copy2d(&mut d, rows, cols, src_stride, dst_stride, src_off, dst_off)?;
                    Ok(d)
                })
            });
            let got = dst.hip.try_clone(&whole).and_then(|mut d| {
                src.hip
                    .copy2d(&mut d, rows, cols, src_stride, dst_stride, src_off, dst_off)?;
                Ok(d)
            });
            let desc = || {
                format!(
                    "{rows}x{cols} strides {src_stride}/{dst_stride} offsets {src_off}/{dst_off}"
                )
            };
            ctx.report
                .check("copy2d", dtype, desc, want, got, tolerance(dtype));
        }
    }
}

fn round_trips(ctx: &mut Ctx) {
    for dtype in DTYPES {
        for n in [0, 1, 7, 1000, 65_537] {
            let cpu = random_storage(&mut ctx.rng, dtype, n, Domain::Special);
            let got = ctx.dev.storage_from_cpu_storage(&cpu);
            ctx.report.check(
                "upload + to_cpu_storage",
                dtype,
                || format!("{n} elements"),
                Ok(cpu),
                got,
                tolerance(dtype),
            );
            let zeros = CpuStorage::U8(vec![0; n]).to_dtype(&Layout::contiguous(n), dtype);
            let got = ctx.dev.zeros_impl(&Shape::from(n), dtype);
            ctx.report.check(
                "zeros",
                dtype,
                || format!("{n} elements"),
                zeros,
                got,
                tolerance(dtype),
            );
        }
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn conformance_with_the_cpu_backend() {
    let dev = HipDevice::new(0).expect("HIP device 0");
    println!("device: {dev:?}");
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let shapes = shapes(&mut rng);
    let mut ctx = Ctx {
        dev: dev.clone(),
        rng,
        report: Report::default(),
        shapes,
        updates: few_updates,
    };
    round_trips(&mut ctx);
    all_unary(&mut ctx);
    scalar_params(&mut ctx);
    all_binary(&mut ctx);
    comparisons(&mut ctx);
    casts(&mut ctx);
    where_cond(&mut ctx);
    reductions(&mut ctx);
    index_select(&mut ctx);
    gather(&mut ctx);
    scatter(&mut ctx);
    index_add(&mut ctx);
    copies(&mut ctx);
    // A second pass with its own random stream (the cases above stay as
    // they were): shapes that reach the kernels' packed, tiled, split and
    // batched paths. Inner dimensions of whole 16-byte packs for every dtype
    // (packed broadcasts and permutations), permutations that are batched
    // transposes with whole and partial tiles, scatter / index_add walks of
    // several batches, and reductions large enough to be cut into chunks
    // whose partial states a second launch combines (long rows; outer
    // dimensions with few and with many outputs).
    let mut paths = Ctx {
        dev,
        rng: Rng(0x5eed_1234_abcd_0002),
        report: std::mem::take(&mut ctx.report),
        shapes: vec![
            vec![6, 64],
            vec![3, 5, 48],
            vec![3, 70, 40],
            vec![130, 67],
            vec![2, 3, 40, 24],
        ],
        updates: many_updates,
    };
    all_binary(&mut paths);
    where_cond(&mut paths);
    casts(&mut paths);
    copies(&mut paths);
    scatter(&mut paths);
    index_add(&mut paths);
    update_tiles(&mut paths);
    paths.shapes = vec![vec![3, 200_000], vec![20_000, 33], vec![300, 5000]];
    reductions(&mut paths);
    paths.report.print();
    assert!(
        paths.report.failures.is_empty(),
        "{} failures",
        paths.report.failures.len()
    );
}

/// Mean and variance of the values of a float storage.
fn moments(s: &CpuStorage) -> (f64, f64, f64, f64) {
    let Values::Float(v) = values(s) else {
        panic!("not floats")
    };
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (mean, var, min, max)
}

#[test]
#[ignore = "needs a HIP device"]
fn random_numbers_follow_their_distribution() {
    let dev = HipDevice::new(0).expect("HIP device 0");
    let shape = Shape::from((1000, 1001));
    for dtype in FLOATS {
        dev.set_seed(7).unwrap();
        assert_eq!(dev.get_current_seed().unwrap(), 7);
        let u = dev
            .rand_uniform(&shape, dtype, -2.0, 6.0)
            .unwrap()
            .to_cpu_storage()
            .unwrap();
        let (mean, var, min, max) = moments(&u);
        println!("{dtype:?} uniform[-2, 6): mean {mean:.4} var {var:.4} min {min} max {max}");
        assert!((mean - 2.0).abs() < 0.02, "{dtype:?} mean {mean}");
        assert!((var - 64.0 / 12.0).abs() < 0.05, "{dtype:?} var {var}");
        assert!(min >= -2.0 && max < 6.0, "{dtype:?} range {min}..{max}");
        let n = dev
            .rand_normal(&shape, dtype, 1.5, 3.0)
            .unwrap()
            .to_cpu_storage()
            .unwrap();
        let (mean, var, _, _) = moments(&n);
        println!("{dtype:?} normal(1.5, 3): mean {mean:.4} var {var:.4}");
        assert!((mean - 1.5).abs() < 0.02, "{dtype:?} mean {mean}");
        assert!((var - 9.0).abs() < 0.1, "{dtype:?} var {var}");

        // The same seed gives the same numbers; successive calls differ.
        dev.set_seed(7).unwrap();
        let again = dev
            .rand_uniform(&shape, dtype, -2.0, 6.0)
            .unwrap()
            .to_cpu_storage()
            .unwrap();
        assert!(
            compare(
                &u,
                &again,
                Tol {
                    atol: 0.0,
                    rtol: 0.0
                }
            )
            .is_ok(),
            "{dtype:?} not reproducible"
        );
        let next = dev
            .rand_uniform(&shape, dtype, -2.0, 6.0)
            .unwrap()
            .to_cpu_storage()
            .unwrap();
        assert!(
            compare(
                &u,
                &next,
                Tol {
                    atol: 0.0,
                    rtol: 0.0
                }
            )
            .is_err(),
            "{dtype:?} repeated"
        );
    }
    for dtype in [DType::U8, DType::U32, DType::I64] {
        assert!(dev.rand_uniform(&shape, dtype, 0.0, 1.0).is_err());
        assert!(dev.rand_normal(&shape, dtype, 0.0, 1.0).is_err());
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn unsupported_dtypes_and_devices_are_errors() {
    let dev = HipDevice::new(0).expect("HIP device 0");
    let err = dev
        .storage_from_cpu_storage(&CpuStorage::I32(vec![1, 2]))
        .unwrap_err();
    assert!(err.to_string().contains("I32"), "{err}");
    assert!(dev.zeros_impl(&Shape::from(4), DType::I16).is_err());
    let x = dev
        .storage_from_cpu_storage(&CpuStorage::U32(vec![1, 2, 3]))
        .unwrap();
    let l = Layout::contiguous(3);
    let err = x.unary_impl::<op::Exp>(&l).unwrap_err();
    assert!(err.to_string().contains("U32"), "{err}");
    // Storages of two separately opened devices do not mix.
    let other = HipDevice::new(0).unwrap();
    assert!(!dev.same_device(&other));
    let y = other
        .storage_from_cpu_storage(&CpuStorage::U32(vec![1, 2, 3]))
        .unwrap();
    let err = x.binary_impl::<op::Add>(&y, &l, &l).unwrap_err();
    assert!(err.to_string().contains("different HIP devices"), "{err}");
}

/// Downloads a small u8 or u32 storage as u64 values.
fn small_ints(s: &HipStorage) -> Vec<u64> {
    match s.to_cpu_storage().unwrap() {
        CpuStorage::U8(v) => v.into_iter().map(u64::from).collect(),
        CpuStorage::U32(v) => v.into_iter().map(u64::from).collect(),
        other => panic!("unexpected {:?}", other.dtype()),
    }
}

#[test]
#[ignore = "needs a HIP device with 16 GB of memory"]
fn large_tensors_use_64_bit_offsets() {
    let dev = HipDevice::new(0).expect("HIP device 0");
    // A (rows, cols) u8 matrix of more than 2^32 elements inside a slightly
    // longer buffer; the last 100 elements of the buffer are 7, the rest 1.
    let (rows, cols) = (65_537usize, 65_536usize);
    let n = rows * cols + 5;
    let all = Layout::contiguous(n);
    let mut x = dev.zeros_impl(&Shape::from(n), DType::U8).unwrap();
    x.const_set(Scalar::U8(3), &all.narrow(0, n - 100, 100).unwrap())
        .unwrap();
    let y = x.affine(&all, 2.0, 1.0).unwrap();
    let sum = y.reduce_op(ReduceOp::Sum, &all, &[0]).unwrap();
    assert_eq!(small_ints(&sum), [((n - 100) + 700) as u64 % 256]);

    // Transposed copy: z[c][r] = y[r][c], shape (cols, rows).
    let matrix = Layout::contiguous((rows, cols));
    let z = y
        .to_dtype(&matrix.transpose(0, 1).unwrap(), DType::U8)
        .unwrap();
    let zl = Layout::contiguous((cols, rows));
    let sum = z.reduce_op(ReduceOp::Sum, &zl, &[0, 1]).unwrap();
    assert_eq!(
        small_ints(&sum),
        [((rows * cols - 95) + 95 * 7) as u64 % 256]
    );
    // The 7s of the matrix are its last 95 elements: row rows-1, columns
    // cols-95.., so z's rows cols-95.. have their maximum at position rows-1.
    let argmax = small_ints(&z.reduce_op(ReduceOp::ArgMax, &zl, &[1]).unwrap());
    assert_eq!(argmax.len(), cols);
    for (c, &pos) in argmax.iter().enumerate() {
        let want = if c >= cols - 95 { rows as u64 - 1 } else { 0 };
        assert_eq!(pos, want, "row {c} of the transpose");
    }
}

#[test]
fn comparison_rules() {
    let t = tolerance(DType::F32);
    assert!(close(f64::NAN, f64::NAN, t));
    assert!(!close(f64::NAN, 1.0, t));
    assert!(close(f64::INFINITY, f64::INFINITY, t));
    assert!(!close(f64::INFINITY, f64::NEG_INFINITY, t));
    assert!(close(1.0, 1.0 + 1e-6, t));
    assert!(!close(1.0, 1.001, t));
    let a = CpuStorage::U8(vec![1, 2]);
    assert!(compare(&a, &CpuStorage::U8(vec![1, 2]), t).is_ok());
    assert!(compare(&a, &CpuStorage::U8(vec![1, 3]), t).is_err());
    assert!(compare(&a, &CpuStorage::U32(vec![1, 2]), t).is_err());
}

#[test]
fn layouts_have_the_requested_shape_and_fit_their_storage() {
    let mut rng = Rng(99);
    for shape in shapes(&mut rng) {
        for form in FORMS {
            let (layout, len) = make_layout(&mut rng, &shape, form);
            assert_eq!(layout.dims(), shape.as_slice(), "{form:?}");
            assert!(layout.start_offset() <= len, "{form:?} {shape:?}");
            if shape.iter().product::<usize>() > 0 {
                let last: usize = layout.start_offset()
                    + layout
                        .dims()
                        .iter()
                        .zip(layout.stride())
                        .map(|(&d, &s)| (d - 1) * s)
                        .sum::<usize>();
                assert!(last < len, "{form:?} {shape:?} reaches {last} of {len}");
            }
        }
    }
}
