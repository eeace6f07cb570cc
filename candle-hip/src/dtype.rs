//! The dtypes the backend stores, and conversions between typed host data
//! and the untyped bytes of a device buffer.
//!
//! Every dtype of candle 0.11.1 is stored. What each one computes follows
//! candle's CPU backend: the dtypes with arithmetic ([`NUMERIC`]) take the
//! element-wise ops, casts, reductions and indexing the CPU backend has for
//! them; the "dummy" dtypes ([`RAW`]: f6e2m3, f6e3m2, f4, f8e8m0), which the
//! CPU backend keeps as raw bytes, are only uploaded, downloaded and copied.

use candle_core::backend::BackendStorage;
use candle_core::scalar::Scalar;
use candle_core::{CpuStorage, DType, WithDType};

use crate::error::Result;

/// Every dtype the backend stores (all of candle's), in the order of the
/// coverage tables.
pub(crate) const SUPPORTED: [DType; 14] = [
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

/// The dtypes with arithmetic: all but [`RAW`].
pub(crate) const NUMERIC: [DType; 10] = [
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

/// candle's dummy dtypes: raw bytes, one per element, with no arithmetic
/// and no conversions (candle's CPU backend stores and copies them only).
pub(crate) const RAW: [DType; 4] = [DType::F6E2M3, DType::F6E3M2, DType::F4, DType::F8E8M0];

/// The dtypes every computing kernel family that takes all dtypes is
/// instantiated for, which cover every element width (1, 2, 4 and 8 bytes).
pub(crate) const CORE: [DType; 7] = [
    DType::U8,
    DType::U32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
];

/// [`CORE`] and f8e4m3: the dtypes of the adding indexing kernels, which
/// compute i16 and i32 as i64 (f8e4m3 sums round after every addition, as
/// candle's CPU backend rounds them, so f32 could not stand in for it).
pub(crate) const CORE_AND_F8: [DType; 8] = {
    let mut dtypes = [DType::F8E4M3; 8];
    let mut i = 0;
    while i < CORE.len() {
        dtypes[i] = CORE[i];
        i += 1;
    }
    dtypes
};

/// One dtype per element width, each the [`carrier`] of its width: the
/// dtypes of the kernels that move elements without looking at them.
pub(crate) const CARRIERS: [DType; 4] = [DType::U8, DType::BF16, DType::U32, DType::I64];

/// The floating dtypes of the fused and convolution kernels.
pub(crate) const FLOATS: [DType; 4] = [DType::F16, DType::BF16, DType::F32, DType::F64];

/// The floating dtypes quantized blocks dequantize to (candle's
/// activations).
pub(crate) const ACTIVATIONS: [DType; 3] = [DType::F16, DType::BF16, DType::F32];

/// The 16-bit floating dtypes (fused attention's, as flash attention's).
pub(crate) const HALVES: [DType; 2] = [DType::F16, DType::BF16];

/// Every floating dtype with arithmetic ([`FLOATS`] and f8e4m3).
pub(crate) const ANY_FLOAT: [DType; 5] = [
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
    DType::F8E4M3,
];

/// The index dtypes the indexing kernels take.
pub(crate) const INDEX: [DType; 2] = [DType::U32, DType::I64];

/// The integer dtypes: where_cond predicates, and the indices of
/// scatter_add and index_add (candle's CPU backend takes i16 and i32 there
/// and nowhere else).
pub(crate) const INTS: [DType; 5] = [DType::U8, DType::U32, DType::I16, DType::I32, DType::I64];

/// The index dtypes the indexing kernels do not take, widened to i64
/// first (`widen_ids_*`): u8 for every indexing op (one index dtype fewer
/// per kernel family, a third less code to compile), i16 and i32 for
/// scatter_add and index_add ([`ADD_ONLY_IDS`]).
pub(crate) const WIDENED_IDS: [DType; 3] = [DType::U8, DType::I16, DType::I32];

/// The index dtypes the tile forms of scatter, scatter_add and index_add
/// do not take, converted to u32 first (`tile_ids_*`): every index dtype
/// but u32.
pub(crate) const TILE_CONVERTED_IDS: [DType; 4] = [DType::U8, DType::I16, DType::I32, DType::I64];

/// The index dtypes candle's CPU backend takes for scatter_add and
/// index_add only.
pub(crate) const ADD_ONLY_IDS: [DType; 2] = [DType::I16, DType::I32];

/// Bytes of one element as stored: candle's `size_in_bytes`, except for
/// the sub-byte dummy dtypes (f6e2m3, f6e3m2, f4: size 0 in candle), whose
/// CPU storage holds one byte per element, as the device buffer does.
pub(crate) fn elem_bytes(dtype: DType) -> usize {
    dtype.size_in_bytes().max(1)
}

/// The [`CARRIERS`] dtype of `dtype`'s element width, whose data-movement
/// kernels (copies, fills, selects) move `dtype`'s elements bit for bit:
/// u8, bf16 (its kernels never interpret the bits), u32 or i64.
pub(crate) fn carrier(dtype: DType) -> DType {
    match elem_bytes(dtype) {
        1 => DType::U8,
        2 => DType::BF16,
        4 => DType::U32,
        _ => DType::I64,
    }
}

/// `Ok` for a dtype the backend stores, candle's `UnsupportedDTypeForOp`
/// otherwise.
pub(crate) fn check(dtype: DType, op: &'static str) -> Result<()> {
    if SUPPORTED.contains(&dtype) {
        Ok(())
    } else {
        Err(candle_core::Error::UnsupportedDTypeForOp(dtype, op).bt())
    }
}

/// `Ok` for a dtype with arithmetic, candle's `UnsupportedDTypeForOp`
/// otherwise: what candle's CPU backend answers for the dummy dtypes where
/// it creates storage itself (`zeros`, `alloc_uninit`) or converts.
pub(crate) fn check_numeric(dtype: DType, op: &'static str) -> Result<()> {
    if NUMERIC.contains(&dtype) {
        Ok(())
    } else {
        Err(candle_core::Error::UnsupportedDTypeForOp(dtype, op).bt())
    }
}

/// The bytes of a slice of plain numbers.
pub(crate) fn as_bytes<T: WithDType>(data: &[T]) -> &[u8] {
    // SAFETY: the element types candle stores are primitive numbers (or
    // `#[repr(transparent)]` wrappers of one, like F8E4M3) without padding,
    // so every byte is initialised; u8 has alignment 1 and the length
    // covers exactly the slice's memory.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

/// The bytes of a mutable slice of plain numbers.
pub(crate) fn as_bytes_mut<T: WithDType>(data: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; moreover every bit pattern is a valid value
    // of the numeric types candle stores (u8, u32, i16, i32, i64, f16,
    // bf16, f32, f64, F8E4M3), so writing arbitrary bytes through the
    // returned slice is sound.
    unsafe {
        std::slice::from_raw_parts_mut(data.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(data))
    }
}

/// The dtype and bytes of host data.
pub(crate) fn cpu_bytes(storage: &CpuStorage) -> Result<(DType, &[u8])> {
    let bytes = match storage {
        CpuStorage::U8(v) => as_bytes(v),
        CpuStorage::U32(v) => as_bytes(v),
        CpuStorage::I16(v) => as_bytes(v),
        CpuStorage::I32(v) => as_bytes(v),
        CpuStorage::I64(v) => as_bytes(v),
        CpuStorage::F16(v) => as_bytes(v),
        CpuStorage::BF16(v) => as_bytes(v),
        CpuStorage::F32(v) => as_bytes(v),
        CpuStorage::F64(v) => as_bytes(v),
        CpuStorage::F8E4M3(v) => as_bytes(v),
        CpuStorage::F6E2M3(v)
        | CpuStorage::F6E3M2(v)
        | CpuStorage::F4(v)
        | CpuStorage::F8E8M0(v) => v.as_slice(),
    };
    Ok((storage.dtype(), bytes))
}

/// Host data of `dtype` with `len` elements, filled by `fill` through its bytes.
pub(crate) fn cpu_from_bytes(
    dtype: DType,
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<()>,
) -> Result<CpuStorage> {
    /// `T` is the element type of `wrap`'s variant (candle names no
    /// F8E4M3 type of its own; this crate depends on no float8).
    fn typed<T: WithDType>(
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<()>,
        wrap: fn(Vec<T>) -> CpuStorage,
    ) -> Result<CpuStorage> {
        let mut data = vec![T::zero(); len];
        fill(as_bytes_mut(&mut data))?;
        Ok(wrap(data))
    }
    match dtype {
        DType::U8 => typed(len, fill, CpuStorage::U8),
        DType::U32 => typed(len, fill, CpuStorage::U32),
        DType::I16 => typed(len, fill, CpuStorage::I16),
        DType::I32 => typed(len, fill, CpuStorage::I32),
        DType::I64 => typed(len, fill, CpuStorage::I64),
        DType::F16 => typed(len, fill, CpuStorage::F16),
        DType::BF16 => typed(len, fill, CpuStorage::BF16),
        DType::F32 => typed(len, fill, CpuStorage::F32),
        DType::F64 => typed(len, fill, CpuStorage::F64),
        DType::F8E4M3 => typed(len, fill, CpuStorage::F8E4M3),
        // The dummy dtypes: one raw byte per element.
        DType::F6E2M3 => typed(len, fill, CpuStorage::F6E2M3),
        DType::F6E3M2 => typed(len, fill, CpuStorage::F6E3M2),
        DType::F4 => typed(len, fill, CpuStorage::F4),
        DType::F8E8M0 => typed(len, fill, CpuStorage::F8E8M0),
        other => {
            // `DType` is non-exhaustive: a dtype of a later candle.
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
        Scalar::I16(v) => u64::from(v as u16),
        Scalar::I32(v) => u64::from(v as u32),
        Scalar::I64(v) => v as u64,
        Scalar::F16(v) => u64::from(v.to_bits()),
        Scalar::BF16(v) => u64::from(v.to_bits()),
        Scalar::F32(v) => u64::from(v.to_bits()),
        Scalar::F64(v) => v.to_bits(),
        Scalar::F8E4M3(v) => u64::from(v.to_bits()),
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
    use candle_core::Layout;

    /// `values` as F8E4M3, converted by candle.
    fn f8e4m3(values: &[f64]) -> CpuStorage {
        CpuStorage::F64(values.to_vec())
            .to_dtype(&Layout::contiguous(values.len()), DType::F8E4M3)
            .unwrap()
    }

    /// One host storage of every dtype, holding `[0, 1, 2]` where the dtype
    /// has numbers and the bytes `[0, 1, 2]` otherwise.
    fn every_dtype() -> Vec<CpuStorage> {
        let raw = vec![0u8, 1, 2];
        let mut all: Vec<CpuStorage> = NUMERIC
            .iter()
            .map(|&d| {
                CpuStorage::U8(vec![0, 1, 2])
                    .to_dtype(&Layout::contiguous(3), d)
                    .unwrap()
            })
            .collect();
        all.extend([
            CpuStorage::F6E2M3(raw.clone()),
            CpuStorage::F6E3M2(raw.clone()),
            CpuStorage::F4(raw.clone()),
            CpuStorage::F8E8M0(raw),
        ]);
        all
    }

    #[test]
    fn dtype_lists_are_consistent() {
        for d in SUPPORTED {
            assert_eq!(NUMERIC.contains(&d), !RAW.contains(&d), "{d:?}");
            assert!(check(d, "op").is_ok());
            assert_eq!(check_numeric(d, "op").is_ok(), NUMERIC.contains(&d));
        }
        for list in [
            &CORE[..],
            &FLOATS,
            &ANY_FLOAT,
            &INDEX,
            &INTS,
            &WIDENED_IDS,
            &TILE_CONVERTED_IDS,
        ] {
            assert!(list.iter().all(|d| NUMERIC.contains(d)), "{list:?}");
        }
        assert!(FLOATS.iter().all(|d| ANY_FLOAT.contains(d)));
        assert!(INDEX.iter().all(|d| INTS.contains(d)));
        assert_eq!(
            INTS.iter()
                .filter(|d| !INDEX.contains(d))
                .collect::<Vec<_>>(),
            WIDENED_IDS.iter().collect::<Vec<_>>()
        );
        assert!(ADD_ONLY_IDS.iter().all(|d| WIDENED_IDS.contains(d)));
        assert_eq!(
            INTS.iter()
                .filter(|&&d| d != DType::U32)
                .collect::<Vec<_>>(),
            TILE_CONVERTED_IDS.iter().collect::<Vec<_>>()
        );
        let err = check_numeric(DType::F4, "zeros").unwrap_err().to_string();
        assert!(err.contains("F4") && err.contains("zeros"), "{err}");
    }

    #[test]
    fn every_dtype_has_a_carrier_of_its_width() {
        for d in SUPPORTED {
            let c = carrier(d);
            assert!(CORE.contains(&c), "{d:?}");
            assert_eq!(elem_bytes(c), elem_bytes(d), "{d:?}");
            if CORE.contains(&d) && d != DType::F16 && d != DType::F32 && d != DType::F64 {
                assert_eq!(c, d);
            }
        }
        assert_eq!(carrier(DType::I16), DType::BF16);
        assert_eq!(carrier(DType::I32), DType::U32);
        assert_eq!(carrier(DType::F8E4M3), DType::U8);
        assert_eq!(carrier(DType::F4), DType::U8);
        assert_eq!(elem_bytes(DType::F6E2M3), 1);
        assert_eq!(elem_bytes(DType::F8E8M0), 1);
    }

    #[test]
    fn host_bytes_round_trip_for_every_dtype() {
        for data in every_dtype() {
            let (dtype, bytes) = cpu_bytes(&data).unwrap();
            assert_eq!(dtype, data.dtype());
            assert_eq!(bytes.len(), 3 * elem_bytes(dtype), "{dtype:?}");
            let back = cpu_from_bytes(dtype, 3, |dst| {
                dst.copy_from_slice(bytes);
                Ok(())
            })
            .unwrap();
            assert_eq!(back.dtype(), dtype);
            assert_eq!(cpu_bytes(&back).unwrap().1, bytes, "{dtype:?}");
        }
    }

    #[test]
    fn host_bytes_are_the_little_endian_elements() {
        let bytes = |s: CpuStorage| cpu_bytes(&s).unwrap().1.to_vec();
        assert_eq!(
            bytes(CpuStorage::F32(vec![1.0, -2.5])),
            [0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0]
        );
        assert_eq!(bytes(CpuStorage::I16(vec![-2, 0x102])), [0xfe, 0xff, 2, 1]);
        assert_eq!(bytes(CpuStorage::I32(vec![-1])), [0xff; 4]);
        assert_eq!(bytes(f8e4m3(&[1.0, -448.0, 0.015625])), [0x38, 0xfe, 0x08]);
        let f4 = CpuStorage::F4(vec![0x21, 0x43]);
        assert_eq!(cpu_bytes(&f4).unwrap(), (DType::F4, &[0x21u8, 0x43][..]));
        let back = cpu_from_bytes(DType::F8E8M0, 2, |dst| {
            dst.copy_from_slice(&[7, 9]);
            Ok(())
        })
        .unwrap();
        assert!(matches!(back, CpuStorage::F8E8M0(v) if v == [7, 9]));
    }

    #[test]
    fn scalar_bits_are_little_endian_patterns() {
        assert_eq!(scalar_bits(Scalar::U8(7)).unwrap(), (DType::U8, 7));
        assert_eq!(
            scalar_bits(Scalar::I64(-1)).unwrap(),
            (DType::I64, u64::MAX)
        );
        assert_eq!(scalar_bits(Scalar::I16(-1)).unwrap(), (DType::I16, 0xffff));
        assert_eq!(
            scalar_bits(Scalar::I32(-2)).unwrap(),
            (DType::I32, 0xffff_fffe)
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
        let CpuStorage::F8E4M3(minus_one) = f8e4m3(&[-1.0]) else {
            unreachable!("an F8E4M3 storage")
        };
        assert_eq!(
            scalar_bits(Scalar::F8E4M3(minus_one[0])).unwrap(),
            (DType::F8E4M3, 0xb8)
        );
    }
}
