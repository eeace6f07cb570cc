//! What the conformance tests share: deterministic data, the operand
//! layouts, tolerances, the comparison with the CPU backend and the tally
//! of cases that each test prints.

use std::collections::BTreeMap;
use std::fmt::Display;

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{CpuStorage, DType, Device, Layout, Result, Tensor};
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
/// The dtypes with arithmetic that `DTYPES` lacks.
pub const NEW: [DType; 3] = [DType::I16, DType::I32, DType::F8E4M3];
/// The index dtypes candle's CPU backend takes for where_cond, scatter_add
/// and index_add only.
pub const NARROW_IDS: [DType; 2] = [DType::I16, DType::I32];
/// candle's dummy dtypes: raw bytes, stored and copied only.
pub const RAW: [DType; 4] = [DType::F6E2M3, DType::F6E3M2, DType::F4, DType::F8E8M0];
/// Every dtype with arithmetic.
pub const NUMERIC: [DType; 10] = [
    DType::U8,
    DType::U32,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
    DType::F8E4M3,
];
/// Every dtype of candle 0.11.1, in the order of the tally's columns.
pub const EVERY: [DType; 14] = [
    DType::U8,
    DType::U32,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
    DType::F8E4M3,
    DType::F6E2M3,
    DType::F6E3M2,
    DType::F4,
    DType::F8E8M0,
];

/// HIP device 0, which every GPU test uses.
pub fn device() -> HipDevice {
    HipDevice::new(0).expect("HIP device 0")
}

/// What every case-table test starts with: the device, an empty tally and
/// its own random stream (`seed` keeps each test's data independent of the
/// others and of their order).
pub fn start(seed: u64) -> (HipDevice, Tally, Rng) {
    (device(), Tally::default(), Rng(seed))
}

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

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// `n` values `k / 8` with integer `k` in `[-8, 8]`: exact in every
    /// float dtype, and their products sum exactly in f32.
    pub fn eighths(&mut self, n: usize) -> Vec<f64> {
        (0..n)
            .map(|_| (self.next() % 17) as f64 / 8.0 - 1.0)
            .collect()
    }

    /// `n` uniform values in `[lo, hi)`.
    pub fn values(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }

    /// `n` integers in `0..k` as f64.
    pub fn ints(&mut self, n: usize, k: u64) -> Vec<f64> {
        (0..n).map(|_| (self.next() % k) as f64).collect()
    }
}

// ---------------------------------------------------------------------------
// Random operands of the storage-op suite.

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
        // MIN has no absolute value; the CPU backend would panic on it.
        DType::I16 => (-(i16::MAX as i64), i16::MAX as i64),
        DType::I32 => (-(i32::MAX as i64), i32::MAX as i64),
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
        DType::I16 => CpuStorage::I16(ints(rng).into_iter().map(|v| v as i16).collect()),
        DType::I32 => CpuStorage::I32(ints(rng).into_iter().map(|v| v as i32).collect()),
        // Rounded by candle (the test crate names no float8 type).
        DType::F8E4M3 => CpuStorage::F64(floats(rng))
            .to_dtype(&Layout::contiguous(n), DType::F8E4M3)
            .unwrap(),
        raw if RAW.contains(&raw) => raw_storage(raw, (0..n).map(|_| rng.next() as u8).collect()),
        other => panic!("no test data for {other:?}"),
    }
}

/// `bytes` as a storage of the dummy dtype `dtype`.
pub fn raw_storage(dtype: DType, bytes: Vec<u8>) -> CpuStorage {
    match dtype {
        DType::F6E2M3 => CpuStorage::F6E2M3(bytes),
        DType::F6E3M2 => CpuStorage::F6E3M2(bytes),
        DType::F4 => CpuStorage::F4(bytes),
        DType::F8E8M0 => CpuStorage::F8E8M0(bytes),
        other => panic!("{other:?} is not a dummy dtype"),
    }
}

/// `bits` as an F8E4M3 storage (every pattern: candle rounds the f64 each
/// one stands for back to it, signed zeros and NaNs included).
pub fn f8e4m3_from_bits(bits: &[u8]) -> CpuStorage {
    let value = |b: u8| {
        let magnitude = match (b & 0x7f, (b >> 3) & 0xf, b & 7) {
            (0x7f, _, _) => f64::NAN,
            (_, 0, m) => f64::from(m) * 2f64.powi(-9),
            (_, e, m) => (1.0 + f64::from(m) / 8.0) * 2f64.powi(i32::from(e) - 7),
        };
        if b & 0x80 != 0 { -magnitude } else { magnitude }
    };
    let values: Vec<f64> = bits.iter().map(|&b| value(b)).collect();
    let s = CpuStorage::F64(values)
        .to_dtype(&Layout::contiguous(bits.len()), DType::F8E4M3)
        .unwrap();
    assert_eq!(raw_bytes(&s), bits, "f8e4m3 patterns");
    s
}

/// The bytes of a host storage (little-endian elements).
pub fn raw_bytes(s: &CpuStorage) -> Vec<u8> {
    fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        v.iter().flat_map(|&x| f(x)).collect()
    }
    match s {
        CpuStorage::U8(v) => v.clone(),
        CpuStorage::U32(v) => le(v, u32::to_le_bytes),
        CpuStorage::I16(v) => le(v, i16::to_le_bytes),
        CpuStorage::I32(v) => le(v, i32::to_le_bytes),
        CpuStorage::I64(v) => le(v, i64::to_le_bytes),
        CpuStorage::F16(v) => le(v, |x| x.to_bits().to_le_bytes()),
        CpuStorage::BF16(v) => le(v, |x| x.to_bits().to_le_bytes()),
        CpuStorage::F32(v) => le(v, |x| x.to_bits().to_le_bytes()),
        CpuStorage::F64(v) => le(v, |x| x.to_bits().to_le_bytes()),
        CpuStorage::F8E4M3(v) => v.iter().map(|x| x.to_bits()).collect(),
        CpuStorage::F6E2M3(v)
        | CpuStorage::F6E3M2(v)
        | CpuStorage::F4(v)
        | CpuStorage::F8E8M0(v) => v.clone(),
    }
}

// ---------------------------------------------------------------------------
// Layout forms and shapes of the storage-op suite.

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
// Given values as tensors and device storages.

/// How an operand of given values is laid out in device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrange {
    /// Contiguous from element 0.
    Contiguous,
    /// Contiguous after 5 leading elements.
    Offset,
    /// Stored with the last two dimensions swapped, then transposed back.
    Transposed,
    /// The last dimension is a narrow view of a 3-wider one.
    Narrowed,
    /// Dimension 1 of a (N, C, ...) image is a narrow view of a wider one
    /// (what candle's grouped convolutions pass).
    ChannelSlice,
}

impl Display for Arrange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// The layout of `arrange` for a logical shape.
pub fn layout(shape: &[usize], arrange: Arrange) -> Layout {
    let r = shape.len();
    match arrange {
        Arrange::Contiguous => Layout::contiguous(shape),
        Arrange::Offset => Layout::contiguous_with_offset(shape, 5),
        Arrange::Transposed => {
            let mut stored = shape.to_vec();
            stored.swap(r - 2, r - 1);
            Layout::contiguous(stored).transpose(r - 2, r - 1).unwrap()
        }
        Arrange::Narrowed => {
            let mut stored = shape.to_vec();
            stored[r - 1] += 3;
            Layout::contiguous(stored)
                .narrow(r - 1, 1, shape[r - 1])
                .unwrap()
        }
        Arrange::ChannelSlice => {
            let mut stored = shape.to_vec();
            stored[1] += 2;
            Layout::contiguous(stored).narrow(1, 2, shape[1]).unwrap()
        }
    }
}

/// A host storage of `dtype` as long as `l` needs, holding the logical
/// `values` (row-major over `l`'s shape) at the positions `l` reads and
/// `fill` elsewhere.
pub fn host_storage(values: &[f64], l: &Layout, dtype: DType, fill: f64) -> CpuStorage {
    let len = l.start_offset()
        + l.dims()
            .iter()
            .zip(l.stride())
            .map(|(&d, &s)| d.saturating_sub(1) * s)
            .sum::<usize>()
        + 1;
    let mut buf = vec![fill; len];
    debug_assert_eq!(
        values.len(),
        l.shape().elem_count(),
        "one value per element"
    );
    // An odometer over `l`'s index, its storage offset kept alongside.
    let (dims, strides) = (l.dims(), l.stride());
    let mut index = vec![0; dims.len()];
    let mut offset = l.start_offset();
    for &v in values {
        buf[offset] = v;
        for k in (0..dims.len()).rev() {
            index[k] += 1;
            offset += strides[k];
            if index[k] < dims[k] {
                break;
            }
            offset -= strides[k] * dims[k];
            index[k] = 0;
        }
    }
    CpuStorage::F64(buf)
        .to_dtype(&Layout::contiguous(len), dtype)
        .unwrap()
}

/// A device storage holding the logical `values` (row-major over `l`'s
/// shape) at the positions `l` reads, as `dtype`; other positions hold 99.
pub fn upload(dev: &HipDevice, values: &[f64], l: &Layout, dtype: DType) -> HipStorage {
    dev.storage_from_cpu_storage(&host_storage(values, l, dtype, 99.0))
        .unwrap()
}

/// `values` in `shape` as a CPU tensor of `dtype`.
pub fn cpu_tensor(values: &[f64], shape: &[usize], dtype: DType) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape, &Device::Cpu)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

/// `values` rounded to `dtype` (as candle's `to_dtype` rounds).
pub fn rounded(values: &[f64], dtype: DType) -> Vec<f64> {
    let t = Tensor::from_vec(values.to_vec(), values.len(), &Device::Cpu).unwrap();
    to_f64(&t.to_dtype(dtype).unwrap())
}

/// A tensor's elements as f64, in row-major order.
pub fn to_f64(t: &Tensor) -> Vec<f64> {
    t.flatten_all()
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .to_vec1::<f64>()
        .unwrap()
}

/// A host storage's elements as f64 (the whole buffer), converted as
/// candle's `to_dtype` converts.
pub fn cpu_values(s: &CpuStorage) -> Vec<f64> {
    let len = match s {
        CpuStorage::U8(v) => v.len(),
        CpuStorage::U32(v) => v.len(),
        CpuStorage::I16(v) => v.len(),
        CpuStorage::I32(v) => v.len(),
        CpuStorage::I64(v) => v.len(),
        CpuStorage::F16(v) => v.len(),
        CpuStorage::BF16(v) => v.len(),
        CpuStorage::F32(v) => v.len(),
        CpuStorage::F64(v) => v.len(),
        // candle 0.11.1's CPU backend never finishes converting f8e4m3 to
        // f64 (`WithDType::to_f64` calls itself); through f32 it is exact.
        CpuStorage::F8E4M3(v) => {
            let l = Layout::contiguous(v.len());
            return cpu_values(&s.to_dtype(&l, DType::F32).unwrap());
        }
        _ => panic!("unexpected dtype"),
    };
    match s.to_dtype(&Layout::contiguous(len), DType::F64).unwrap() {
        CpuStorage::F64(v) => v,
        _ => unreachable!("to_dtype(F64) gives F64"),
    }
}

/// A device storage's elements as f64 (the whole buffer).
pub fn hip_values(s: &HipStorage) -> Vec<f64> {
    cpu_values(&s.to_cpu_storage().unwrap())
}

// ---------------------------------------------------------------------------
// Tolerances.

/// `|got - want| <= rel * |want| + abs`; NaN matches NaN only, an infinity
/// only itself.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub rel: f64,
    pub abs: f64,
}

impl Tol {
    pub const EXACT: Tol = Tol { rel: 0.0, abs: 0.0 };
    /// The bytes must match (`compare_bits`): for results that move
    /// elements or round them once exactly on both sides.
    pub const BITS: Tol = Tol {
        rel: -1.0,
        abs: -1.0,
    };

    pub fn is_bits(&self) -> bool {
        self.rel < 0.0
    }

    pub fn accepts(&self, got: f64, want: f64) -> bool {
        if got.is_nan() || want.is_nan() {
            return got.is_nan() && want.is_nan();
        }
        if got.is_infinite() || want.is_infinite() {
            return got == want;
        }
        (got - want).abs() <= self.rel * want.abs() + self.abs
    }
}

/// Tolerance for floats: a few units in the last place of the dtype (device
/// and host math libraries differ by an ulp or two; candle's CPU backend
/// rounds f16/bf16 after each step of some ops where the kernels round once).
pub fn tolerance(dtype: DType) -> Tol {
    match dtype {
        DType::F16 => Tol {
            rel: 5e-3,
            abs: 5e-3,
        },
        DType::BF16 => Tol {
            rel: 2e-2,
            abs: 3e-2,
        },
        DType::F32 => Tol {
            rel: 1e-5,
            abs: 1e-5,
        },
        DType::F64 => Tol {
            rel: 1e-12,
            abs: 1e-12,
        },
        // One step of the 3-bit mantissa (the smallest subnormal near 0):
        // a result a device math function puts on the other side of a
        // rounding boundary than the host's.
        DType::F8E4M3 => Tol {
            rel: 0.125,
            abs: 2f64.powi(-9),
        },
        _ => Tol::EXACT,
    }
}

/// The tolerance of a result that both backends round once from the same
/// exact value (a cast, an IEEE operation, a move): `tolerance(dtype)`,
/// except that f8e4m3 results must match bit for bit. The seven first
/// dtypes keep the tolerances their cases always had.
pub fn strict(dtype: DType) -> Tol {
    if dtype == DType::F8E4M3 {
        Tol::BITS
    } else {
        tolerance(dtype)
    }
}

/// Unit roundoff of a dtype.
pub fn unit(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        DType::F32 => 2f64.powi(-24),
        _ => 2f64.powi(-53),
    }
}

/// Unit roundoff of the type a kernel accumulates in.
pub fn acc_unit(dtype: DType) -> f64 {
    if dtype == DType::F64 {
        unit(DType::F64)
    } else {
        unit(DType::F32)
    }
}

/// Tolerance of a vendor GEMM or convolution summing `terms` products of
/// values in [-1, 1]: f32 (f64) accumulation roundoff and two output
/// roundings; for f16/bf16 also one output rounding per partial sum of a
/// split reduction (libraries may round partial sums to the output type:
/// cuBLAS does for f16 with unaligned operands), about `sqrt(terms)` in size.
pub fn gemm_tol(dtype: DType, terms: usize) -> Tol {
    let split = if dtype == DType::F16 || dtype == DType::BF16 {
        2.0 * unit(dtype) * (terms as f64).sqrt()
    } else {
        0.0
    };
    Tol {
        rel: 4.0 * unit(dtype),
        abs: 4.0 * acc_unit(dtype) * terms as f64 + split,
    }
}

// ---------------------------------------------------------------------------
// Comparison and the tally.

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
        CpuStorage::I16(v) => Values::Int(v.iter().map(|&x| x.into()).collect()),
        CpuStorage::I32(v) => Values::Int(v.iter().map(|&x| x.into()).collect()),
        // to_f32 is exact (`to_f64` would be WithDType's, which never returns).
        CpuStorage::F8E4M3(v) => Values::Float(v.iter().map(|x| x.to_f32().into()).collect()),
        // The dummy dtypes' bytes, which must match exactly.
        CpuStorage::F6E2M3(v)
        | CpuStorage::F6E3M2(v)
        | CpuStorage::F4(v)
        | CpuStorage::F8E8M0(v) => Values::Int(v.iter().map(|&x| x.into()).collect()),
    }
}

/// `Ok` when the bytes of `got` equal those of `want` (same dtype), an
/// f8e4m3 NaN matching either NaN (x86 and GPUs give the NaNs they create
/// different signs).
pub fn compare_bits(got: &CpuStorage, want: &CpuStorage) -> std::result::Result<(), String> {
    if want.dtype() != got.dtype() {
        return Err(format!(
            "dtype {:?}, expected {:?}",
            got.dtype(),
            want.dtype()
        ));
    }
    let canonical = |bytes: Vec<u8>| -> Vec<u8> {
        if got.dtype() == DType::F8E4M3 {
            bytes
                .into_iter()
                .map(|b| if b & 0x7f == 0x7f { 0x7f } else { b })
                .collect()
        } else {
            bytes
        }
    };
    let (g, w) = (canonical(raw_bytes(got)), canonical(raw_bytes(want)));
    compare_elements(&g, &w, |a, b| a == b).map_err(|why| format!("{why} (bytes)"))
}

/// `Ok` when every element of `got` passes `accepts` against the one of
/// `want`; else how many do not and the first of them.
fn compare_elements<T: Copy + Display>(
    got: &[T],
    want: &[T],
    accepts: impl Fn(T, T) -> bool,
) -> std::result::Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} elements, expected {}", got.len(), want.len()));
    }
    let wrong: Vec<usize> = (0..got.len())
        .filter(|&i| !accepts(got[i], want[i]))
        .collect();
    match wrong.first() {
        None => Ok(()),
        Some(&i) => Err(format!(
            "{} of {} elements off, first at {i}: {} instead of {}",
            wrong.len(),
            got.len(),
            got[i],
            want[i]
        )),
    }
}

/// `Ok` when the floats `got` match `want` within `tol`.
pub fn compare_values(got: &[f64], want: &[f64], tol: Tol) -> std::result::Result<(), String> {
    compare_elements(got, want, |g, w| tol.accepts(g, w))
        .map_err(|why| format!("{why} (tolerance {tol:?})"))
}

/// `Ok` when `got` (HIP) matches `want` (CPU): the same dtype, integers
/// equal, floats within `tol`.
pub fn compare(got: &CpuStorage, want: &CpuStorage, tol: Tol) -> std::result::Result<(), String> {
    if want.dtype() != got.dtype() {
        return Err(format!(
            "dtype {:?}, expected {:?}",
            got.dtype(),
            want.dtype()
        ));
    }
    match (values(got), values(want)) {
        (Values::Int(g), Values::Int(w)) => compare_elements(&g, &w, |a, b| a == b),
        (Values::Float(g), Values::Float(w)) => compare_values(&g, &w, tol),
        _ => Err("integer and float results".to_string()),
    }
}

/// Cases run and failed per (op, dtype), and what the failures were.
#[derive(Default)]
pub struct Tally {
    counts: BTreeMap<(String, &'static str), (usize, usize)>,
    failures: Vec<String>,
}

impl Tally {
    /// Records one case of `op` on `dtype` whose `outcome` is `Err` with
    /// what went wrong; `case` describes it (asked for failures only).
    pub fn record(
        &mut self,
        op: &str,
        dtype: DType,
        case: impl FnOnce() -> String,
        outcome: std::result::Result<(), String>,
    ) {
        let entry = self
            .counts
            .entry((op.to_string(), dtype.as_str()))
            .or_default();
        entry.0 += 1;
        if let Err(why) = outcome {
            entry.1 += 1;
            self.failures
                .push(format!("{op} {dtype:?} {}: {why}", case()));
        }
    }

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
        let outcome = match (want, got.and_then(|h| h.to_cpu_storage())) {
            (Ok(w), Ok(g)) if tol.is_bits() => compare_bits(&g, &w),
            (Ok(w), Ok(g)) => compare(&g, &w, tol),
            (Err(_), Err(_)) => Ok(()),
            (Ok(_), Err(e)) => Err(format!("HIP failed where the CPU succeeded: {e}")),
            (Err(e), Ok(_)) => Err(format!("HIP succeeded where the CPU failed: {e}")),
        };
        self.record(op, dtype, describe, outcome);
    }

    /// Records one case: `got` against `want` element-wise.
    pub fn check_values(
        &mut self,
        op: &str,
        dtype: DType,
        case: impl Display,
        got: &[f64],
        want: &[f64],
        tol: Tol,
    ) {
        let outcome = compare_values(got, want, tol);
        self.record(op, dtype, || case.to_string(), outcome);
    }

    /// Runs a GPU computation and records its result against `want`; an
    /// error is a failed case.
    pub fn check_run(
        &mut self,
        op: &str,
        dtype: DType,
        case: impl Display,
        want: &[f64],
        tol: Tol,
        run: impl FnOnce() -> Result<HipStorage>,
    ) {
        match run() {
            Ok(out) => self.check_values(op, dtype, case, &hip_values(&out), want, tol),
            Err(e) => self.error(op, dtype, case, e),
        }
    }

    /// Records a case that failed before producing a result.
    pub fn error(&mut self, op: &str, dtype: DType, case: impl Display, err: impl Display) {
        // The first line: candle errors append their backtrace.
        let err = err.to_string();
        let first = err.lines().next().unwrap_or_default();
        self.record(
            op,
            dtype,
            || case.to_string(),
            Err(format!("error {first}")),
        );
    }

    /// Prints the op × dtype table (cases, `failed!/cases` where some
    /// failed), the first failures and the line `<label>: N cases, M
    /// failures` that the GPU run's summary reads, then fails on any
    /// failure.
    pub fn finish(self, label: &str) {
        let cases: usize = self.counts.values().map(|c| c.0).sum();
        let failed: usize = self.counts.values().map(|c| c.1).sum();
        let mut ops: Vec<&String> = self.counts.keys().map(|(op, _)| op).collect();
        ops.dedup();
        let width = ops.iter().map(|op| op.len()).max().unwrap_or(0).max(10) + 2;
        // A column per dtype that has cases.
        let columns: Vec<DType> = EVERY
            .into_iter()
            .filter(|d| self.counts.keys().any(|(_, c)| *c == d.as_str()))
            .collect();
        print!("  {:<width$}", "op \\ dtype");
        for d in &columns {
            print!("{:>9}", d.as_str());
        }
        println!();
        for op in ops {
            print!("  {op:<width$}");
            for d in &columns {
                match self.counts.get(&(op.clone(), d.as_str())) {
                    Some(&(n, 0)) => print!("{n:>9}"),
                    Some(&(n, f)) => print!("{:>9}", format!("{f}!/{n}")),
                    None => print!("{:>9}", "-"),
                }
            }
            println!();
        }
        for f in self.failures.iter().take(200) {
            println!("  FAILED {f}");
        }
        println!("{label}: {cases} cases, {failed} failures");
        assert_eq!(failed, 0, "{label}: {failed} of {cases} cases failed");
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
    pub tally: Tally,
    pub shapes: Vec<Vec<usize>>,
    /// Updates along the indexed dimension of scatter and index_add, given
    /// the bound of the usual few.
    pub updates: fn(&mut Rng, usize) -> usize,
}

impl Ctx {
    /// The context of a suite's second pass: shapes that reach the
    /// kernels' packed, tiled, split and batched paths (inner dimensions of
    /// whole 16-byte packs for every dtype, batched transposes with whole
    /// and partial tiles), update walks of several batches, a random stream
    /// of its own (`seed`) and the tally so far.
    pub fn paths(dev: HipDevice, seed: u64, tally: Tally) -> Ctx {
        Ctx {
            dev,
            rng: Rng(seed),
            tally,
            shapes: vec![
                vec![6, 64],
                vec![3, 5, 48],
                vec![3, 70, 40],
                vec![130, 67],
                vec![2, 3, 40, 24],
            ],
            updates: crate::indexing::many_updates,
        }
    }

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
    assert!(t.accepts(f64::NAN, f64::NAN));
    assert!(!t.accepts(1.0, f64::NAN));
    assert!(t.accepts(f64::INFINITY, f64::INFINITY));
    assert!(!t.accepts(f64::NEG_INFINITY, f64::INFINITY));
    assert!(t.accepts(1.0 + 1e-6, 1.0));
    assert!(!t.accepts(1.001, 1.0));
    let a = CpuStorage::U8(vec![1, 2]);
    assert!(compare(&CpuStorage::U8(vec![1, 2]), &a, t).is_ok());
    assert!(compare(&CpuStorage::U8(vec![1, 3]), &a, t).is_err());
    assert!(compare(&CpuStorage::U32(vec![1, 2]), &a, t).is_err());
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

#[test]
fn every_dtype_has_test_data_and_a_bitwise_comparison() {
    let mut rng = Rng(5);
    for dtype in EVERY {
        let s = random_storage(&mut rng, dtype, 9, Domain::Special);
        assert_eq!(s.dtype(), dtype);
        assert_eq!(raw_bytes(&s).len(), 9 * dtype.size_in_bytes().max(1));
        assert!(compare_bits(&s, &s).is_ok(), "{dtype:?}");
    }
    let patterns: Vec<u8> = (0..=255).collect();
    let all = f8e4m3_from_bits(&patterns);
    assert_eq!(raw_bytes(&all), patterns);
    let values = cpu_values(&all);
    assert_eq!(values[0x38], 1.0);
    assert_eq!(values[0xfe], -448.0);
    assert_eq!(values[0x01], 2f64.powi(-9));
    assert!(values[0x7f].is_nan() && values[0xff].is_nan());
    let f8 = |b: u8| f8e4m3_from_bits(&[b]);
    assert!(compare_bits(&f8(0x7f), &f8(0xff)).is_ok());
    assert!(compare_bits(&f8(0x00), &f8(0x80)).is_err());
    assert!(compare_bits(&f8(0x38), &f8(0x39)).is_err());
    assert!(Tol::BITS.is_bits() && !Tol::EXACT.is_bits());
    assert!(strict(DType::F8E4M3).is_bits() && !strict(DType::F16).is_bits());
    // One f8e4m3 step passes the f8e4m3 tolerance, two do not.
    let t = tolerance(DType::F8E4M3);
    assert!(t.accepts(values[0x39], values[0x38]) && !t.accepts(values[0x3a], values[0x38]));
    assert!(t.accepts(values[0x02], values[0x01]));
}
