//! What candle-hip refuses: dtypes it does not store or compute, storages
//! of different devices, and inputs that candle refuses (or cannot
//! express): these are errors, not computed.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::op;
use candle_core::{CpuStorage, DType, Layout, Result, Shape};
use candle_hip::conv::{ConvParams, ConvPath};
use candle_hip::{HipDevice, HipStorage, fused};

use crate::common::{device, upload};

#[test]
#[ignore = "needs a HIP device"]
fn unsupported_dtypes_and_devices_are_errors() {
    let dev = device();
    // Every dtype is stored; candle's dummy dtypes have no zeros (as on
    // candle's CPU backend) and no arithmetic.
    let f4 = dev
        .storage_from_cpu_storage(&CpuStorage::F4(vec![1, 2]))
        .unwrap();
    let err = dev.zeros_impl(&Shape::from(4), DType::F4).unwrap_err();
    assert!(err.to_string().contains("F4"), "{err}");
    let err = f4.to_dtype(&Layout::contiguous(2), DType::F32).unwrap_err();
    assert!(err.to_string().contains("F4"), "{err}");
    let x = dev
        .storage_from_cpu_storage(&CpuStorage::U32(vec![1, 2, 3]))
        .unwrap();
    let l = Layout::contiguous(3);
    let err = x.unary_impl::<op::Exp>(&l).unwrap_err();
    assert!(err.to_string().contains("U32"), "{err}");
    let i32s = dev
        .storage_from_cpu_storage(&CpuStorage::I32(vec![1, 2, 3]))
        .unwrap();
    let err = i32s.unary_impl::<op::Exp>(&l).unwrap_err();
    assert!(err.to_string().contains("I32"), "{err}");
    // Storages of two separately opened devices do not mix.
    let other = HipDevice::new(0).unwrap();
    assert!(!dev.same_device(&other));
    let y = other
        .storage_from_cpu_storage(&CpuStorage::U32(vec![1, 2, 3]))
        .unwrap();
    let err = x.binary_impl::<op::Add>(&y, &l, &l).unwrap_err();
    assert!(err.to_string().contains("different HIP devices"), "{err}");
}

#[test]
#[ignore = "needs a HIP device"]
fn invalid_inputs_are_errors() {
    let dev = device();
    // Ones at every element `l` addresses, as `dtype`.
    let ones =
        |l: &Layout, dtype: DType| upload(&dev, &vec![1.0; l.shape().elem_count()], l, dtype);
    let f32s = |l: &Layout| ones(l, DType::F32);
    let mut cases = 0;
    let mut expect_err = |what: &str, r: Result<HipStorage>, needle: &str| {
        cases += 1;
        match r {
            Ok(_) => panic!("{what}: expected an error"),
            Err(e) => assert!(e.to_string().contains(needle), "{what}: {e}"),
        }
    };
    // matmul: an operand with no unit-stride dimension.
    let strided = Layout::new(Shape::from((3, 4)), vec![8, 2], 0);
    let rhs = Layout::contiguous((4, 5));
    expect_err(
        "matmul strided",
        f32s(&strided).matmul(&f32s(&rhs), (1, 3, 5, 4), &strided, &rhs),
        "lhs",
    );
    // matmul: (b, m, n, k) that does not describe the layouts, on the
    // one-row path as on the others.
    let row = Layout::contiguous((1, 8));
    let cols = Layout::new(Shape::from((8, 4)), vec![1, 16], 0);
    expect_err(
        "matmul one row, k of 16 against layouts of 8",
        f32s(&Layout::contiguous(16)).matmul(
            &f32s(&Layout::contiguous(64)),
            (1, 1, 4, 16),
            &row,
            &cols,
        ),
        "shapes",
    );
    // matmul: integer dtypes.
    let u = ones(&Layout::contiguous((3, 4)), DType::U32);
    let ur = ones(&rhs, DType::U32);
    expect_err(
        "matmul u32",
        u.matmul(&ur, (1, 3, 5, 4), &Layout::contiguous((3, 4)), &rhs),
        "U32",
    );
    // Fused row ops need contiguous input, alpha of the row length.
    let tl = Layout::contiguous((4, 8)).transpose(0, 1).unwrap();
    expect_err(
        "softmax transposed",
        fused::softmax_last_dim(&f32s(&tl), &tl),
        "contiguous",
    );
    let l = Layout::contiguous((4, 8));
    let al = Layout::contiguous(7);
    expect_err(
        "rms_norm alpha",
        fused::rms_norm(&f32s(&l), &l, &f32s(&al), &al, 1e-5),
        "alpha",
    );
    expect_err(
        "softmax u8",
        fused::softmax_last_dim(&ones(&l, DType::U8), &l),
        "U8",
    );
    // rope: tables shorter than the sequence.
    let xl = Layout::contiguous((1, 2, 8, 4));
    let cl = Layout::contiguous((4, 2));
    expect_err(
        "rope short table",
        fused::rope(&f32s(&xl), &xl, &f32s(&cl), &cl, &f32s(&cl), &cl),
        "inconsistent",
    );
    // Convolutions: f64 with MIOpen only, a kernel larger than the input.
    let x = Layout::contiguous((1, 1, 2, 2));
    let w = Layout::contiguous((1, 1, 3, 3));
    let xd = ones(&x, DType::F64);
    let wd = ones(&w, DType::F64);
    let p = ConvParams::<2>::uniform(1, 1, 1);
    expect_err(
        "conv2d f64 MIOpen",
        candle_hip::conv::conv2d(&xd, &x, &wd, &w, &p, ConvPath::Miopen),
        "F64",
    );
    let p0 = ConvParams::<2>::uniform(0, 1, 1);
    expect_err(
        "conv2d kernel too large",
        candle_hip::conv::conv2d(&f32s(&x), &x, &f32s(&w), &w, &p0, ConvPath::Auto),
        "does not fit",
    );
    // Pooling windows larger than the input.
    let il = Layout::contiguous((1, 1, 2, 2));
    expect_err(
        "max_pool2d window",
        f32s(&il).max_pool2d(&il, (3, 3), (1, 1)),
        "do not fit",
    );
    expect_err(
        "avg_pool2d u32",
        ones(&il, DType::U32).avg_pool2d(&il, (1, 1), (1, 1)),
        "U32",
    );
    println!("conformance errors: {cases} cases, 0 failures");
}
