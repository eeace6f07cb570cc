//! Tensors of more than 2^32 elements: kernels index them with 64-bit
//! offsets.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::op::ReduceOp;
use candle_core::scalar::Scalar;
use candle_core::{CpuStorage, DType, Layout, Shape};
use candle_hip::HipStorage;

use crate::common::device;

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
    let dev = device();
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
