//! Layouts and arguments whose size arithmetic overflows: every op reports
//! an error naming itself, writes nothing, and the device stays usable.
//! (Layouts are public, so safe code can build any of these.)

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::scalar::Scalar;
use candle_core::{CpuStorage, DType, Layout, Result, Shape};
use candle_hip::HipStorage;
use candle_hip::conv::{ConvParams, ConvPath, conv2d};

use crate::common::device;

/// The review's example: strides that wrap a (2, 1001) view's span to 1.
fn wrapping_layout() -> Layout {
    Layout::new(Shape::from((2, 1001)), vec![usize::MAX - 999, 1], 0)
}

/// A broadcast whose element count wraps (2^64 elements).
fn wrapping_broadcast() -> Layout {
    Layout::new(Shape::from((1 << 32, 1 << 32)), vec![0, 0], 0)
}

#[test]
#[ignore = "needs a HIP device"]
fn overflowing_sizes_are_errors_and_write_nothing() {
    let dev = device();
    let ones = CpuStorage::F32(vec![1.0; 2000]);
    let mut x = dev.storage_from_cpu_storage(&ones).unwrap();
    let mut y = dev.storage_from_cpu_storage(&ones).unwrap();
    let mut cases = 0;
    let mut expect = |what: &str, r: Result<()>| {
        cases += 1;
        let err = r
            .err()
            .unwrap_or_else(|| panic!("{what}: expected an error"));
        let text = err.to_string();
        assert!(text.contains("overflow"), "{what}: {text}");
    };
    let ok = |r: Result<HipStorage>| r.map(|_| ());
    expect(
        "const_set",
        x.const_set(Scalar::F32(7.0), &wrapping_layout()),
    );
    expect("affine", ok(x.affine(&wrapping_layout(), 2.0, 1.0)));
    expect(
        "affine broadcast",
        ok(x.affine(&wrapping_broadcast(), 2.0, 1.0)),
    );
    expect(
        "reduce",
        ok(x.reduce_op(candle_core::op::ReduceOp::Sum, &wrapping_broadcast(), &[1])),
    );
    expect(
        "copy_strided_src",
        x.copy_strided_src(&mut y, 0, &wrapping_layout()),
    );
    expect("copy2d", x.copy2d(&mut y, 1 << 40, 4, 1 << 40, 4, 0, 0));
    expect("copy2d rows", x.copy2d(&mut y, usize::MAX, 2, 0, 0, 0, 0));
    let l = Layout::contiguous((40, 50));
    expect(
        "matmul",
        ok(x.matmul(&y, (usize::MAX / 2, 40, 50, 50), &l, &l)),
    );
    expect(
        "zeros",
        ok(dev.zeros_impl(&Shape::from((1 << 32, 1 << 32)), DType::F32)),
    );
    expect(
        "rand_uniform",
        ok(dev.rand_uniform(&Shape::from((1 << 32, 1 << 32)), DType::F32, 0.0, 1.0)),
    );
    let img = Layout::contiguous((1, 2, 10, 100));
    expect(
        "upsample_nearest2d",
        ok(x.upsample_nearest2d(&img, 1 << 32, 1 << 32)),
    );
    let w = Layout::contiguous((2, 2, 3, 3));
    let params = ConvParams {
        padding: [usize::MAX / 2; 2],
        ..ConvParams::uniform(0, 1, 1)
    };
    expect(
        "conv2d padding",
        ok(conv2d(&x, &img, &y, &w, &params, ConvPath::Auto)),
    );
    // Nothing was written, and the device still computes.
    let back = x.to_cpu_storage().unwrap();
    assert!(matches!(&back, CpuStorage::F32(v) if v.iter().all(|&e| e == 1.0)));
    let z = x.affine(&Layout::contiguous(2000), 2.0, 1.0).unwrap();
    let z = z.to_cpu_storage().unwrap();
    assert!(matches!(&z, CpuStorage::F32(v) if v.iter().all(|&e| e == 3.0)));
    println!("conformance overflow: {cases} cases, 0 failures");
}
