//! The dtypes the backend stores, and conversions between typed host data
//! and the untyped bytes of a device buffer.

use candle_core::backend::BackendStorage;
use candle_core::scalar::Scalar;
use candle_core::{CpuStorage, DType, WithDType};

use crate::error::Result;

/// Every dtype with kernels, in the order of the coverage tables.
pub(crate) const SUPPORTED: [DType; 7] = [
    DType::U8,
    DType::U32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
];

/// The floating dtypes.
pub(crate) const FLOATS: [DType; 4] = [DType::F16, DType::BF16, DType::F32, DType::F64];

/// The dtypes an index tensor may have.
pub(crate) const INDEX: [DType; 3] = [DType::U8, DType::U32, DType::I64];

/// `Ok` for a dtype the backend stores, candle's `UnsupportedDTypeForOp`
/// otherwise.
pub(crate) fn check(dtype: DType, op: &'static str) -> Result<()> {
    if SUPPORTED.contains(&dtype) {
        Ok(())
    } else {
        Err(candle_core::Error::UnsupportedDTypeForOp(dtype, op).bt())
    }
}

/// The bytes of a slice of plain numbers.
pub(crate) fn as_bytes<T: WithDType>(data: &[T]) -> &[u8] {
    // SAFETY: the element types candle stores are primitive numbers without
    // padding, so every byte is initialised; u8 has alignment 1 and the
    // length covers exactly the slice's memory.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

/// The bytes of a mutable slice of plain numbers.
pub(crate) fn as_bytes_mut<T: WithDType>(data: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; moreover every bit pattern is a valid value
    // of the numeric types candle stores (u8, u32, i64, f16, bf16, f32, f64),
    // so writing arbitrary bytes through the returned slice is sound.
    unsafe {
        std::slice::from_raw_parts_mut(data.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(data))
    }
}

/// The dtype and bytes of host data, for the supported dtypes.
pub(crate) fn cpu_bytes(storage: &CpuStorage) -> Result<(DType, &[u8])> {
    let bytes = match storage {
        CpuStorage::U8(v) => as_bytes(v),
        CpuStorage::U32(v) => as_bytes(v),
        CpuStorage::I64(v) => as_bytes(v),
        CpuStorage::F16(v) => as_bytes(v),
        CpuStorage::BF16(v) => as_bytes(v),
        CpuStorage::F32(v) => as_bytes(v),
        CpuStorage::F64(v) => as_bytes(v),
        other => {
            check(other.dtype(), "storage_from_cpu_storage")?;
            unreachable_dtype(other.dtype())?
        }
    };
    Ok((storage.dtype(), bytes))
}

/// Host data of `dtype` with `len` elements, filled by `fill` through its bytes.
pub(crate) fn cpu_from_bytes(
    dtype: DType,
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<()>,
) -> Result<CpuStorage> {
    fn typed<T: WithDType>(
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<()>,
    ) -> Result<CpuStorage> {
        let mut data = vec![T::zero(); len];
        fill(as_bytes_mut(&mut data))?;
        Ok(T::to_cpu_storage_owned(data))
    }
    match dtype {
        DType::U8 => typed::<u8>(len, fill),
        DType::U32 => typed::<u32>(len, fill),
        DType::I64 => typed::<i64>(len, fill),
        DType::F16 => typed::<half::f16>(len, fill),
        DType::BF16 => typed::<half::bf16>(len, fill),
        DType::F32 => typed::<f32>(len, fill),
        DType::F64 => typed::<f64>(len, fill),
        other => {
            check(other, "to_cpu_storage")?;
            unreachable_dtype(other)
        }
    }
}

/// The dtype and the bit pattern (zero-extended to 64 bits) of a scalar.
pub(crate) fn scalar_bits(scalar: Scalar) -> Result<(DType, u64)> {
    let bits = match scalar {
        Scalar::U8(v) => u64::from(v),
        Scalar::U32(v) => u64::from(v),
        Scalar::I64(v) => v as u64,
        Scalar::F16(v) => u64::from(v.to_bits()),
        Scalar::BF16(v) => u64::from(v.to_bits()),
        Scalar::F32(v) => u64::from(v.to_bits()),
        Scalar::F64(v) => v.to_bits(),
        other => {
            check(other.dtype(), "const_set")?;
            return unreachable_dtype(other.dtype());
        }
    };
    Ok((scalar.dtype(), bits))
}

/// The error for a dtype that `check` accepted but a match does not list:
/// keeps the lists in this file consistent without a panic.
fn unreachable_dtype<T>(dtype: DType) -> Result<T> {
    Err(candle_core::Error::Msg(format!(
        "candle-hip: dtype {dtype:?} is listed as supported but has no host conversion"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_dtypes_are_errors() {
        assert!(check(DType::F32, "op").is_ok());
        let err = check(DType::I16, "op").unwrap_err().to_string();
        assert!(err.contains("I16") && err.contains("op"), "{err}");
        assert!(cpu_bytes(&CpuStorage::I32(vec![1])).is_err());
        assert!(cpu_from_bytes(DType::F8E4M3, 1, |_| Ok(())).is_err());
        assert!(scalar_bits(Scalar::I16(3)).is_err());
    }

    #[test]
    fn host_bytes_round_trip() {
        let data = CpuStorage::F32(vec![1.0, -2.5]);
        let (dtype, bytes) = cpu_bytes(&data).unwrap();
        assert_eq!(dtype, DType::F32);
        assert_eq!(bytes.len(), 8);
        let back = cpu_from_bytes(DType::F32, 2, |dst| {
            dst.copy_from_slice(bytes);
            Ok(())
        })
        .unwrap();
        assert!(matches!(back, CpuStorage::F32(v) if v == [1.0, -2.5]));
    }

    #[test]
    fn scalar_bits_are_little_endian_patterns() {
        assert_eq!(scalar_bits(Scalar::U8(7)).unwrap(), (DType::U8, 7));
        assert_eq!(
            scalar_bits(Scalar::I64(-1)).unwrap(),
            (DType::I64, u64::MAX)
        );
        assert_eq!(
            scalar_bits(Scalar::F32(1.0)).unwrap(),
            (DType::F32, 0x3f80_0000)
        );
        assert_eq!(
            scalar_bits(Scalar::BF16(half::bf16::ONE)).unwrap(),
            (DType::BF16, 0x3f80)
        );
        assert_eq!(
            scalar_bits(Scalar::F64(2.0)).unwrap(),
            (DType::F64, 2f64.to_bits())
        );
    }
}
