//! Convolutions (1-D and 2-D, forward and transposed, grouped) against
//! candle's CPU convolutions in f64: small edge cases and ResNet, UNet and
//! Whisper sizes, through the automatic path and the im2col + GEMM path.

use candle_core::{DType, Layout, Result, Tensor};
use candle_hip::HipStorage;
use candle_hip::conv::{ConvParams, ConvPath, conv_transpose1d, conv_transpose2d, conv1d, conv2d};

use crate::common::{Arrange, FLOATS, cpu_tensor, gemm_tol, layout, start, to_f64, upload};

/// One convolution case (uniform padding/stride/dilation, as candle takes).
struct Conv {
    name: &'static str,
    x: &'static [usize],
    w: &'static [usize],
    padding: usize,
    stride: usize,
    dilation: usize,
    output_padding: usize,
    groups: usize,
}

impl Conv {
    /// The case's parameters for candle-hip, on every one of `N` axes.
    fn params<const N: usize>(&self) -> ConvParams<N> {
        ConvParams {
            output_padding: [self.output_padding; N],
            groups: self.groups,
            ..ConvParams::uniform(self.padding, self.stride, self.dilation)
        }
    }
}

#[rustfmt::skip]
const FORWARD: &[Conv] = &[
    Conv { name: "1x1 kernel", x: &[1, 1, 1, 1], w: &[1, 1, 1, 1], padding: 0, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "3x3 pad 1", x: &[2, 3, 5, 7], w: &[4, 3, 3, 3], padding: 1, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "3x2 pad 2 stride 3 dil 2", x: &[2, 4, 9, 10], w: &[6, 4, 3, 2], padding: 2, stride: 3, dilation: 2, output_padding: 0, groups: 1 },
    Conv { name: "grouped 3", x: &[2, 6, 8, 8], w: &[9, 2, 3, 3], padding: 1, stride: 1, dilation: 1, output_padding: 0, groups: 3 },
    Conv { name: "ResNet 3x3 64", x: &[2, 64, 56, 56], w: &[64, 64, 3, 3], padding: 1, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "ResNet 1x1 256->64", x: &[2, 256, 28, 28], w: &[64, 256, 1, 1], padding: 0, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "ResNet stem 7x7/2", x: &[1, 3, 224, 224], w: &[64, 3, 7, 7], padding: 3, stride: 2, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "ResNet 3x3/2 128->256", x: &[2, 128, 28, 28], w: &[256, 128, 3, 3], padding: 1, stride: 2, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "UNet 3x3 320", x: &[1, 320, 32, 32], w: &[320, 320, 3, 3], padding: 1, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "UNet conv_in 4->320", x: &[2, 4, 64, 64], w: &[320, 4, 3, 3], padding: 1, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "1-D k3 pad 1", x: &[2, 3, 11], w: &[5, 3, 3], padding: 1, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "1-D k4 stride 2 dil 3", x: &[3, 4, 20], w: &[2, 4, 4], padding: 2, stride: 2, dilation: 3, output_padding: 0, groups: 1 },
    Conv { name: "1-D grouped 2", x: &[2, 4, 9], w: &[6, 2, 3], padding: 0, stride: 1, dilation: 1, output_padding: 0, groups: 2 },
    Conv { name: "Whisper conv1 80->384", x: &[1, 80, 3000], w: &[384, 80, 3], padding: 1, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
];

#[rustfmt::skip]
const TRANSPOSED: &[Conv] = &[
    Conv { name: "3x3 stride 2 pad 1 outpad 1", x: &[2, 8, 7, 7], w: &[8, 4, 3, 3], padding: 1, stride: 2, dilation: 1, output_padding: 1, groups: 1 },
    Conv { name: "4x4 stride 2 (UNet up)", x: &[1, 64, 16, 16], w: &[64, 32, 4, 4], padding: 1, stride: 2, dilation: 1, output_padding: 0, groups: 1 },
    Conv { name: "3x2 dil 2", x: &[2, 3, 5, 6], w: &[3, 5, 3, 2], padding: 0, stride: 1, dilation: 2, output_padding: 0, groups: 1 },
    Conv { name: "grouped 3 stride 2", x: &[2, 6, 5, 5], w: &[6, 2, 3, 3], padding: 1, stride: 2, dilation: 1, output_padding: 0, groups: 3 },
    Conv { name: "1-D k5 stride 3 dil 2", x: &[2, 4, 10], w: &[4, 3, 5], padding: 1, stride: 3, dilation: 2, output_padding: 1, groups: 1 },
    Conv { name: "1-D stride 1", x: &[1, 2, 7], w: &[2, 3, 3], padding: 0, stride: 1, dilation: 1, output_padding: 0, groups: 1 },
];

/// candle's CPU result in f64.
fn conv_reference(c: &Conv, x: &[f64], w: &[f64], transposed: bool) -> Vec<f64> {
    let xt = cpu_tensor(x, c.x, DType::F64);
    let wt = cpu_tensor(w, c.w, DType::F64);
    let one = |x: &Tensor, w: &Tensor| -> Tensor {
        match (transposed, c.x.len()) {
            (false, 4) => x
                .conv2d(w, c.padding, c.stride, c.dilation, c.groups)
                .unwrap(),
            (false, _) => x
                .conv1d(w, c.padding, c.stride, c.dilation, c.groups)
                .unwrap(),
            (true, 4) => x
                .conv_transpose2d(w, c.padding, c.output_padding, c.stride, c.dilation)
                .unwrap(),
            (true, _) => x
                .conv_transpose1d(w, c.padding, c.output_padding, c.stride, c.dilation, 1)
                .unwrap(),
        }
    };
    if transposed && c.groups > 1 {
        // candle's transposed convolutions take no groups: one per group.
        let xs = xt.chunk(c.groups, 1).unwrap();
        let ws = wt.chunk(c.groups, 0).unwrap();
        let parts: Vec<Tensor> = xs.iter().zip(&ws).map(|(x, w)| one(x, w)).collect();
        return to_f64(&Tensor::cat(&parts, 1).unwrap());
    }
    to_f64(&one(&xt, &wt))
}

/// Case `c` on the device through `path`.
fn run_conv(
    dev_x: &HipStorage,
    xl: &Layout,
    dev_w: &HipStorage,
    wl: &Layout,
    c: &Conv,
    transposed: bool,
    path: ConvPath,
) -> Result<HipStorage> {
    match (transposed, c.x.len()) {
        (false, 4) => conv2d(dev_x, xl, dev_w, wl, &c.params(), path),
        (false, _) => conv1d(dev_x, xl, dev_w, wl, &c.params(), path),
        (true, 4) => conv_transpose2d(dev_x, xl, dev_w, wl, &c.params(), path),
        (true, _) => conv_transpose1d(dev_x, xl, dev_w, wl, &c.params(), path),
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn convolutions_match_cpu() {
    let (dev, mut t, mut rng) = start(0x5eed_0002);
    for (transposed, cases) in [(false, FORWARD), (true, TRANSPOSED)] {
        for c in cases {
            let x = rng.eighths(c.x.iter().product());
            let w = rng.eighths(c.w.iter().product());
            let want = conv_reference(c, &x, &w, transposed);
            // Terms per output: (input channels per group) x taps.
            let in_per_group = c.x[1] / c.groups;
            let terms = (in_per_group * c.w[2..].iter().product::<usize>()) as f64;
            let small = c.x.iter().product::<usize>() < 100_000;
            let arrangements: &[Arrange] = if small {
                &[
                    Arrange::Contiguous,
                    Arrange::ChannelSlice,
                    Arrange::Narrowed,
                ]
            } else {
                &[Arrange::Contiguous]
            };
            let op = match (transposed, c.x.len()) {
                (false, 4) => "conv2d",
                (false, _) => "conv1d",
                (true, 4) => "conv_transpose2d",
                (true, _) => "conv_transpose1d",
            };
            for dtype in FLOATS {
                let tol = gemm_tol(dtype, terms as usize);
                let wl = Layout::contiguous(c.w);
                let ws = upload(&dev, &w, &wl, dtype);
                for &arr in arrangements {
                    let xl = layout(c.x, arr);
                    let xs = upload(&dev, &x, &xl, dtype);
                    let paths: &[ConvPath] = if dtype == DType::F64 {
                        &[ConvPath::Auto]
                    } else {
                        &[ConvPath::Auto, ConvPath::Gemm]
                    };
                    for &path in paths {
                        let case = format!("{} x{:?} w{:?} {arr} {path:?}", c.name, c.x, c.w);
                        t.check_run(op, dtype, &case, &want, tol, || {
                            run_conv(&xs, &xl, &ws, &wl, c, transposed, path)
                        });
                    }
                }
            }
        }
    }
    t.finish("conformance convolutions");
}
