//! Data types and reductions, computed on the host.
//!
//! Every element is reduced over the ranks in rank order (0, 1, ..., n-1),
//! so results are deterministic and the same on every rank (real RCCL
//! reduces in the order of its ring or tree, which may round floats
//! differently):
//!
//! - integers: sum and product wrap (two's complement, as GPU arithmetic
//!   does), max and min compare; avg is NCCL's "sum, then divide by the
//!   number of ranks": the wrapped sum divided by n with integer division
//!   (truncating toward zero);
//! - `f32`, `f64`: computed in the type, one rounding per step of the left
//!   fold; max and min are IEEE `maxNum`/`minNum` (a NaN loses to a
//!   number); avg is NCCL's pre-multiplied sum: each value times `1/n`
//!   (rounded to the type), summed in rank order;
//! - `f16`, `bf16`: each value widened to `f32`, reduced as `f32` above
//!   (avg with `1/n` as an `f32`), and the result rounded to the type once
//!   per element (round to nearest even).
//!
//! The fp8 types of RCCL 7 are rejected (`ncclInvalidArgument`).

use half::{bf16, f16};
use rccl_sys::{ncclDataType_t, ncclRedOp_t};

use super::status::{Failure, NcclResult};

/// An element type of `ncclDataType_t` this implementation reduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DataType {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F16,
    F32,
    F64,
    Bf16,
}

impl DataType {
    /// The type behind `raw`; fp8 and unknown values are invalid arguments.
    pub(crate) fn from_raw(raw: ncclDataType_t) -> NcclResult<DataType> {
        use ncclDataType_t as T;
        Ok(match raw {
            T::ncclInt8 => DataType::I8,
            T::ncclUint8 => DataType::U8,
            T::ncclInt32 => DataType::I32,
            T::ncclUint32 => DataType::U32,
            T::ncclInt64 => DataType::I64,
            T::ncclUint64 => DataType::U64,
            T::ncclFloat16 => DataType::F16,
            T::ncclFloat32 => DataType::F32,
            T::ncclFloat64 => DataType::F64,
            T::ncclBfloat16 => DataType::Bf16,
            T::ncclFloat8e4m3 | T::ncclFloat8e5m2 => {
                return Err(Failure::argument(
                    "fp8 data types are not supported by the hip-on-cpu RCCL",
                ));
            }
            other => {
                return Err(Failure::argument(format_args!(
                    "invalid data type {}",
                    other.0
                )));
            }
        })
    }

    /// Bytes per element.
    pub(crate) fn size(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 => 1,
            DataType::F16 | DataType::Bf16 => 2,
            DataType::I32 | DataType::U32 | DataType::F32 => 4,
            DataType::I64 | DataType::U64 | DataType::F64 => 8,
        }
    }
}

/// A built-in reduction of `ncclRedOp_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RedOp {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
}

impl RedOp {
    /// The reduction behind `raw`; anything else (custom reductions made by
    /// `ncclRedOpCreatePreMulSum`, which is not bound) is invalid.
    pub(crate) fn from_raw(raw: ncclRedOp_t) -> NcclResult<RedOp> {
        use ncclRedOp_t as R;
        Ok(match raw {
            R::ncclSum => RedOp::Sum,
            R::ncclProd => RedOp::Prod,
            R::ncclMax => RedOp::Max,
            R::ncclMin => RedOp::Min,
            R::ncclAvg => RedOp::Avg,
            other => {
                return Err(Failure::argument(format_args!(
                    "invalid reduction {}",
                    other.0
                )));
            }
        })
    }
}

/// An element read from and written to native-endian bytes.
trait Element: Copy {
    /// Bytes per element.
    const SIZE: usize;
    /// Reads one element from exactly `SIZE` bytes.
    fn load(bytes: &[u8]) -> Self;
    /// Writes the element into exactly `SIZE` bytes.
    fn store(self, bytes: &mut [u8]);
    /// Reduces `values` (one per rank, in rank order) with `op`.
    fn reduce(values: &[Self], op: RedOp) -> Self;
}

/// Copies `N` bytes into an array (the callers pass chunks of exactly `N`).
fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut a = [0; N];
    a.copy_from_slice(bytes);
    a
}

macro_rules! integer_elements {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const SIZE: usize = size_of::<$t>();
            fn load(bytes: &[u8]) -> Self {
                <$t>::from_ne_bytes(array(bytes))
            }
            fn store(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.to_ne_bytes());
            }
            fn reduce(values: &[Self], op: RedOp) -> Self {
                let (first, rest) = values.split_first().map_or((0, &[][..]), |(f, r)| (*f, r));
                match op {
                    RedOp::Sum => rest.iter().fold(first, |a, b| a.wrapping_add(*b)),
                    RedOp::Prod => rest.iter().fold(first, |a, b| a.wrapping_mul(*b)),
                    RedOp::Max => rest.iter().fold(first, |a, b| a.max(*b)),
                    RedOp::Min => rest.iter().fold(first, |a, b| a.min(*b)),
                    RedOp::Avg => {
                        let sum = rest.iter().fold(first, |a, b| a.wrapping_add(*b));
                        // The quotient's magnitude is at most the sum's, so
                        // it fits the type; i128 holds every n and sum.
                        (i128::from(sum) / values.len().max(1) as i128) as $t
                    }
                }
            }
        }
    )*};
}

integer_elements!(i8, u8, i32, u32, i64, u64);

macro_rules! float_elements {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const SIZE: usize = size_of::<$t>();
            fn load(bytes: &[u8]) -> Self {
                <$t>::from_ne_bytes(array(bytes))
            }
            fn store(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.to_ne_bytes());
            }
            fn reduce(values: &[Self], op: RedOp) -> Self {
                let (first, rest) = values.split_first().map_or((0.0, &[][..]), |(f, r)| (*f, r));
                match op {
                    RedOp::Sum => rest.iter().fold(first, |a, b| a + b),
                    RedOp::Prod => rest.iter().fold(first, |a, b| a * b),
                    RedOp::Max => rest.iter().fold(first, |a, b| a.max(*b)),
                    RedOp::Min => rest.iter().fold(first, |a, b| a.min(*b)),
                    RedOp::Avg => {
                        let inv = 1.0 / values.len().max(1) as $t;
                        rest.iter().fold(first * inv, |a, b| a + b * inv)
                    }
                }
            }
        }
    )*};
}

float_elements!(f32, f64);

macro_rules! half_elements {
    ($($t:ty),*) => {$(
        impl Element for $t {
            const SIZE: usize = 2;
            fn load(bytes: &[u8]) -> Self {
                <$t>::from_bits(u16::from_ne_bytes(array(bytes)))
            }
            fn store(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.to_bits().to_ne_bytes());
            }
            fn reduce(values: &[Self], op: RedOp) -> Self {
                let wide: Vec<f32> = values.iter().map(|v| v.to_f32()).collect();
                <$t>::from_f32(f32::reduce(&wide, op))
            }
        }
    )*};
}

half_elements!(f16, bf16);

/// Reduces `inputs` (one equally long byte buffer per rank, in rank order)
/// element by element.
fn reduce_as<T: Element>(op: RedOp, inputs: &[Vec<u8>]) -> Vec<u8> {
    let len = inputs.first().map_or(0, Vec::len);
    let mut out = vec![0; len];
    let mut values = Vec::with_capacity(inputs.len());
    for (i, slot) in out.chunks_exact_mut(T::SIZE).enumerate() {
        let at = i * T::SIZE..(i + 1) * T::SIZE;
        values.clear();
        values.extend(inputs.iter().map(|input| T::load(&input[at.clone()])));
        T::reduce(&values, op).store(slot);
    }
    out
}

/// Reduces `inputs` (one byte buffer per rank, in rank order, all of the
/// same whole number of elements of `dtype`) element by element with `op`.
pub(crate) fn reduce(dtype: DataType, op: RedOp, inputs: &[Vec<u8>]) -> Vec<u8> {
    match dtype {
        DataType::I8 => reduce_as::<i8>(op, inputs),
        DataType::U8 => reduce_as::<u8>(op, inputs),
        DataType::I32 => reduce_as::<i32>(op, inputs),
        DataType::U32 => reduce_as::<u32>(op, inputs),
        DataType::I64 => reduce_as::<i64>(op, inputs),
        DataType::U64 => reduce_as::<u64>(op, inputs),
        DataType::F16 => reduce_as::<f16>(op, inputs),
        DataType::F32 => reduce_as::<f32>(op, inputs),
        DataType::F64 => reduce_as::<f64>(op, inputs),
        DataType::Bf16 => reduce_as::<bf16>(op, inputs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: Element>(values: &[T]) -> Vec<u8> {
        let mut out = vec![0; values.len() * T::SIZE];
        for (v, slot) in values.iter().zip(out.chunks_exact_mut(T::SIZE)) {
            v.store(slot);
        }
        out
    }

    fn values<T: Element>(bytes: &[u8]) -> Vec<T> {
        bytes.chunks_exact(T::SIZE).map(T::load).collect()
    }

    #[test]
    fn integers_wrap_and_average_by_truncation() {
        let inputs = [bytes(&[100_i8, -7]), bytes(&[100_i8, 2])];
        let sum = reduce(DataType::I8, RedOp::Sum, &inputs);
        assert_eq!(values::<i8>(&sum), [-56, -5]);
        let avg = reduce(DataType::I8, RedOp::Avg, &inputs);
        // -56 / 2 and -5 / 2 (toward zero).
        assert_eq!(values::<i8>(&avg), [-28, -2]);
        let inputs = [bytes(&[7_u32]), bytes(&[1_u32]), bytes(&[0_u32])];
        let avg = reduce(DataType::U32, RedOp::Avg, &inputs);
        assert_eq!(values::<u32>(&avg), [2]);
        let max = reduce(DataType::U32, RedOp::Max, &inputs);
        assert_eq!(values::<u32>(&max), [7]);
    }

    #[test]
    fn floats_reduce_in_rank_order() {
        let inputs = [bytes(&[1e8_f32]), bytes(&[-1e8_f32]), bytes(&[1.0_f32])];
        assert_eq!(
            values::<f32>(&reduce(DataType::F32, RedOp::Sum, &inputs)),
            [1.0]
        );
        let inputs = [bytes(&[3.0_f64]), bytes(&[f64::NAN])];
        assert_eq!(
            values::<f64>(&reduce(DataType::F64, RedOp::Max, &inputs)),
            [3.0]
        );
        let third = 1.0_f32 / 3.0;
        let inputs = [bytes(&[1.0_f32]), bytes(&[2.0_f32]), bytes(&[4.0_f32])];
        assert_eq!(
            values::<f32>(&reduce(DataType::F32, RedOp::Avg, &inputs)),
            [third + 2.0 * third + 4.0 * third]
        );
    }

    #[test]
    fn halves_round_once() {
        // 2048 + 1 + 1 is 2050 in f32; each step in f16 would stay at 2048.
        let inputs = [
            bytes(&[f16::from_f32(2048.0)]),
            bytes(&[f16::ONE]),
            bytes(&[f16::ONE]),
        ];
        let sum = reduce(DataType::F16, RedOp::Sum, &inputs);
        assert_eq!(values::<f16>(&sum), [f16::from_f32(2050.0)]);
        let inputs = [bytes(&[bf16::from_f32(1.5)]), bytes(&[bf16::from_f32(2.0)])];
        let prod = reduce(DataType::Bf16, RedOp::Prod, &inputs);
        assert_eq!(values::<bf16>(&prod), [bf16::from_f32(3.0)]);
    }

    #[test]
    fn fp8_and_unknown_values_are_rejected() {
        for raw in [10, 11, 12, 99] {
            let err = DataType::from_raw(ncclDataType_t(raw)).unwrap_err();
            assert_eq!(err.code, rccl_sys::ncclResult_t::ncclInvalidArgument);
        }
        assert!(RedOp::from_raw(ncclRedOp_t(5)).is_err());
    }
}
