//! What the conformance tests share: deterministic data, the operand
//! layouts, tolerances, the comparison with the CPU backend and the tally
//! of cases that each test prints.

use std::collections::BTreeMap;

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{CpuStorage, DType, Layout, Result};
use candle_hip::{HipDevice, HipStorage};
use half::{bf16, f16};

pub const DTYPES: [DType; 7] = [
    DType::U8,
    DType::U32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
];
pub const FLOATS: [DType; 4] = [DType::F16, DType::BF16, DType::F32, DType::F64];
pub const INDEX: [DType; 3] = [DType::U8, DType::U32, DType::I64];

// ---------------------------------------------------------------------------
// Deterministic random numbers (xorshift64*).

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// Uniform integer in `lo..=hi`.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (hi as i128 - lo as i128 + 1) as u128;
        (lo as i128 + (u128::from(self.next()) % span) as i128) as i64
    }
}

// ---------------------------------------------------------------------------
// Test data.

/// What values an operand holds.
#[derive(Clone, Copy, Debug)]
pub enum Domain {
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

pub fn random_storage(rng: &mut Rng, dtype: DType, n: usize, domain: Domain) -> CpuStorage {
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

// ---------------------------------------------------------------------------
// Layouts.

/// How an operand's logical shape is laid out in its storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
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

pub const FORMS: [Form; 5] = [
    Form::Contiguous,
    Form::Offset,
    Form::Permuted,
    Form::Sliced,
    Form::Broadcast,
];
pub const DENSE_FORMS: [Form; 2] = [Form::Contiguous, Form::Offset];

/// A layout of `shape` in `form` and the storage length it needs.
pub fn make_layout(rng: &mut Rng, shape: &[usize], form: Form) -> (Layout, usize) {
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

pub fn shapes(rng: &mut Rng) -> Vec<Vec<usize>> {
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
pub struct Tol {
    pub atol: f64,
    pub rtol: f64,
}

/// Tolerance for floats: a few units in the last place of the dtype (device
/// and host math libraries differ by an ulp or two; candle's CPU backend
/// rounds f16/bf16 after each step of some ops where the kernels round once).
pub fn tolerance(dtype: DType) -> Tol {
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

pub enum Values {
    Int(Vec<i128>),
    Float(Vec<f64>),
}

pub fn values(s: &CpuStorage) -> Values {
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
pub fn compare(want: &CpuStorage, got: &CpuStorage, tol: Tol) -> std::result::Result<(), String> {
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
pub struct Report {
    cases: usize,
    pub failures: Vec<String>,
    coverage: BTreeMap<String, [usize; 7]>,
}

impl Report {
    /// Records one case: the CPU result `want` and the HIP result `got`.
    /// A panic of the CPU backend (a bad test case) arrives as an error.
    pub fn check(
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

    pub fn print(&self) {
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
pub struct Pair {
    pub cpu: CpuStorage,
    pub hip: HipStorage,
}

pub struct Ctx {
    pub dev: HipDevice,
    pub rng: Rng,
    pub report: Report,
    pub shapes: Vec<Vec<usize>>,
    /// Updates along the indexed dimension of scatter and index_add, given
    /// the bound of the usual few.
    pub updates: fn(&mut Rng, usize) -> usize,
}

impl Ctx {
    pub fn upload(&self, cpu: CpuStorage) -> Pair {
        let hip = self.dev.storage_from_cpu_storage(&cpu).expect("upload");
        Pair { cpu, hip }
    }

    /// An operand of `shape` in `form` with random data.
    pub fn input(
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

    pub fn random_form(&mut self) -> Form {
        self.rng.pick(&FORMS)
    }
}

/// Runs a CPU-backend call; a panic (a case the CPU backend cannot take,
/// i.e. a bad test case) becomes an error so that the run goes on.
pub fn cpu<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
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

pub fn describe(shape: &[usize], layouts: &[&Layout]) -> String {
    let parts: Vec<String> = layouts
        .iter()
        .map(|l| format!("stride {:?} offset {}", l.stride(), l.start_offset()))
        .collect();
    format!("shape {shape:?} [{}]", parts.join("; "))
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
