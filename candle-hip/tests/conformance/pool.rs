//! Pooling (max, avg) and upsampling (nearest 1-D / 2-D, bilinear) against
//! candle's CPU backend: max pooling and nearest upsampling select values
//! and must match exactly; averages and bilinear interpolation are compared
//! with a reference computed in f64.

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout, Result};
use candle_hip::HipDevice;

use crate::common::{
    Arrange, DTYPES, FLOATS, Rng, Tally, Tol, acc_unit, cpu_values, host_storage, layout, rounded,
    start, unit, upload,
};

const IMAGE_ARRANGEMENTS: [Arrange; 4] = [
    Arrange::Contiguous,
    Arrange::Offset,
    Arrange::Transposed,
    Arrange::ChannelSlice,
];

/// Values for a dtype: small integers for integer dtypes (exact
/// everywhere), uniform in [-3, 3) rounded to the dtype for floats.
fn image_values(rng: &mut Rng, n: usize, dtype: DType) -> Vec<f64> {
    if FLOATS.contains(&dtype) {
        rounded(&rng.values(n, -3.0, 3.0), dtype)
    } else {
        rng.ints(n, 100)
    }
}

/// A pooling or upsampling op with its parameters: `run` makes the same
/// call on either backend.
#[derive(Clone, Copy)]
enum ImageOp {
    MaxPool {
        kernel: (usize, usize),
        stride: (usize, usize),
    },
    AvgPool {
        kernel: (usize, usize),
        stride: (usize, usize),
    },
    Nearest1d(usize),
    Nearest2d(usize, usize),
    Bilinear {
        h: usize,
        w: usize,
        align: bool,
        scales: Option<(f64, f64)>,
    },
}

impl ImageOp {
    fn name(self) -> &'static str {
        match self {
            ImageOp::MaxPool { .. } => "max_pool2d",
            ImageOp::AvgPool { .. } => "avg_pool2d",
            ImageOp::Nearest1d(_) => "upsample_nearest1d",
            ImageOp::Nearest2d(..) => "upsample_nearest2d",
            ImageOp::Bilinear { .. } => "upsample_bilinear2d",
        }
    }

    fn run<S: BackendStorage>(self, x: &S, l: &Layout) -> Result<S> {
        match self {
            ImageOp::MaxPool { kernel, stride } => x.max_pool2d(l, kernel, stride),
            ImageOp::AvgPool { kernel, stride } => x.avg_pool2d(l, kernel, stride),
            ImageOp::Nearest1d(w) => x.upsample_nearest1d(l, w),
            ImageOp::Nearest2d(h, w) => x.upsample_nearest2d(l, h, w),
            ImageOp::Bilinear {
                h,
                w,
                align,
                scales,
            } => x.upsample_bilinear2d(l, h, w, align, scales.map(|s| s.0), scales.map(|s| s.1)),
        }
    }
}

/// An input of the image ops: `values` (row-major) laid out as `l`.
struct Image<'a> {
    dev: &'a HipDevice,
    values: &'a [f64],
    l: Layout,
    dtype: DType,
    case: String,
}

impl<'a> Image<'a> {
    fn new(dev: &'a HipDevice, values: &'a [f64], l: Layout, dtype: DType, case: String) -> Self {
        Image {
            dev,
            values,
            l,
            dtype,
            case,
        }
    }

    /// Runs `op` on the CPU backend (in `ref_dtype`) and on the GPU (in the
    /// image's dtype) with the same layout, and records the comparison.
    fn check(&self, t: &mut Tally, op: ImageOp, ref_dtype: DType, tol: Tol) {
        let (name, dtype, l) = (op.name(), self.dtype, &self.l);
        let host = host_storage(self.values, l, ref_dtype, 0.0);
        let want = match op.run(&host, l) {
            Ok(out) => cpu_values(&out),
            Err(e) => {
                return t.error(
                    name,
                    dtype,
                    &self.case,
                    format!("CPU reference failed: {e}"),
                );
            }
        };
        let dev_in = upload(self.dev, self.values, l, dtype);
        t.check_run(name, dtype, &self.case, &want, tol, || op.run(&dev_in, l));
    }
}

/// (shape, kernel, stride) of a pooling case.
type PoolCase = (&'static [usize], (usize, usize), (usize, usize));
/// (shape, target, align_corners, scale factors) of a bilinear case.
type BilinearCase = (&'static [usize], (usize, usize), bool, Option<(f64, f64)>);

#[test]
#[ignore = "needs a HIP device"]
fn pooling_and_upsampling_match_cpu() {
    let (dev, mut t, mut rng) = start(0x5eed_0003);
    // (shape, kernel, stride): ResNet's 3x3/2 max pool, uneven windows.
    let pools: &[PoolCase] = &[
        (&[2, 3, 8, 9], (2, 2), (2, 2)),
        (&[2, 5, 7, 7], (2, 3), (1, 2)),
        (&[1, 1, 1, 1], (1, 1), (1, 1)),
        (&[1, 64, 112, 112], (3, 3), (2, 2)),
    ];
    for &(shape, kernel, stride) in pools {
        for dtype in DTYPES {
            let values = image_values(&mut rng, shape.iter().product(), dtype);
            for arr in IMAGE_ARRANGEMENTS {
                let case = format!("{shape:?} k{kernel:?} s{stride:?} {arr}");
                let image = Image::new(&dev, &values, layout(shape, arr), dtype, case);
                let max_pool = ImageOp::MaxPool { kernel, stride };
                image.check(&mut t, max_pool, dtype, Tol::EXACT);
                if FLOATS.contains(&dtype) {
                    let taps = (kernel.0 * kernel.1) as f64;
                    let tol = Tol {
                        rel: 2.0 * unit(dtype),
                        abs: (2.0 * unit(dtype) + taps * acc_unit(dtype)) * 3.0,
                    };
                    image.check(&mut t, ImageOp::AvgPool { kernel, stride }, DType::F64, tol);
                }
            }
        }
    }
    // Nearest: (shape, target); 1-D shapes have three dimensions.
    let nearest: &[(&[usize], (usize, usize))] = &[
        (&[2, 3, 5, 7], (10, 14)),
        (&[1, 4, 6, 6], (4, 9)),
        (&[2, 3, 64, 64], (128, 128)),
        (&[2, 3, 7], (1, 15)),
        (&[1, 2, 9], (1, 4)),
    ];
    for &(shape, (h, w)) in nearest {
        for dtype in DTYPES {
            let values = image_values(&mut rng, shape.iter().product(), dtype);
            for arr in IMAGE_ARRANGEMENTS {
                let case = format!("{shape:?} -> ({h}, {w}) {arr}");
                let image = Image::new(&dev, &values, layout(shape, arr), dtype, case);
                let op = if shape.len() == 3 {
                    ImageOp::Nearest1d(w)
                } else {
                    ImageOp::Nearest2d(h, w)
                };
                image.check(&mut t, op, dtype, Tol::EXACT);
            }
        }
    }
    // Bilinear: (shape, target, align_corners, scale factors).
    let bilinear: &[BilinearCase] = &[
        (&[2, 3, 5, 7], (10, 14), false, None),
        (&[2, 3, 5, 7], (10, 14), true, None),
        (&[1, 2, 8, 8], (3, 5), false, None),
        (&[1, 2, 8, 8], (3, 5), true, None),
        (&[1, 2, 4, 6], (10, 9), false, Some((2.5, 1.5))),
        (&[1, 4, 32, 32], (64, 64), false, None),
        (&[1, 1, 1, 1], (3, 2), true, None),
    ];
    for &(shape, (h, w), align, scales) in bilinear {
        for dtype in FLOATS {
            let values = image_values(&mut rng, shape.iter().product(), dtype);
            let tol = Tol {
                rel: 2.0 * unit(dtype),
                abs: 4.0 * (unit(dtype) + 4.0 * acc_unit(dtype)) * 3.0,
            };
            for arr in IMAGE_ARRANGEMENTS {
                let case = format!("{shape:?} -> ({h}, {w}) align {align} scales {scales:?} {arr}");
                let image = Image::new(&dev, &values, layout(shape, arr), dtype, case);
                let op = ImageOp::Bilinear {
                    h,
                    w,
                    align,
                    scales,
                };
                image.check(&mut t, op, DType::F64, tol);
            }
        }
    }
    t.finish("conformance pooling and upsampling");
}

/// Scale factors that place source positions past the input (which
/// candle's CPU backend indexes out of bounds with) read its last row and
/// column; factors that are not positive numbers are refused.
#[test]
#[ignore = "needs a HIP device"]
fn bilinear_scale_factors_past_the_input_read_its_edge() {
    let (dev, _, _) = start(0x5eed_0059);
    let values: Vec<f64> = (0..16).map(f64::from).collect();
    let l = Layout::contiguous((1, 1, 4, 4));
    let x = upload(&dev, &values, &l, DType::F32);
    // A factor of 0.1 asks for (8, 8) outputs ten source pixels apart.
    let y = x
        .upsample_bilinear2d(&l, 8, 8, false, Some(0.1), Some(0.1))
        .unwrap();
    assert_eq!(cpu_values(&y.to_cpu_storage().unwrap()), vec![15.0; 64]);
    for bad in [0.0, -1.0, f64::NAN] {
        let err = x
            .upsample_bilinear2d(&l, 8, 8, false, Some(bad), Some(2.0))
            .unwrap_err();
        assert!(err.to_string().contains("scale factor"), "{bad}: {err}");
    }
}
