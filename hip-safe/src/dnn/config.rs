//! Convolution shapes and their validation (no device needed).

/// A 2-D convolution as ML frameworks define it (cross-correlation) over
/// contiguous NCHW tensors:
///
/// - input `x`: `batch × in_channels × input[0] × input[1]`
/// - weights `w`: `out_channels × (in_channels / groups) × kernel[0] × kernel[1]`
/// - output `y`: `batch × out_channels × output()[0] × output()[1]`
///
/// 1-D convolutions are 2-D ones with a unit height: see [`Conv1dConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvConfig {
    /// N.
    pub batch: usize,
    /// C, the channels of `x`.
    pub in_channels: usize,
    /// K, the channels of `y`.
    pub out_channels: usize,
    /// Spatial size of `x` (height, width).
    pub input: [usize; 2],
    /// Spatial size of the kernel (height, width).
    pub kernel: [usize; 2],
    /// Zero padding on each side (height, width).
    pub padding: [usize; 2],
    /// Step between outputs (height, width).
    pub stride: [usize; 2],
    /// Spacing between kernel taps (height, width).
    pub dilation: [usize; 2],
    /// Channel groups; `in_channels` and `out_channels` must divide by it.
    pub groups: usize,
}

/// A 1-D convolution over contiguous NCL tensors; converted to a
/// [`ConvConfig`] with a unit height.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conv1dConfig {
    /// N.
    pub batch: usize,
    /// C, the channels of `x`.
    pub in_channels: usize,
    /// K, the channels of `y`.
    pub out_channels: usize,
    /// L, the length of `x`.
    pub input_len: usize,
    /// Kernel length.
    pub kernel_len: usize,
    /// Zero padding on each side.
    pub padding: usize,
    /// Step between outputs.
    pub stride: usize,
    /// Spacing between kernel taps.
    pub dilation: usize,
    /// Channel groups.
    pub groups: usize,
}

impl From<Conv1dConfig> for ConvConfig {
    fn from(c: Conv1dConfig) -> ConvConfig {
        ConvConfig {
            batch: c.batch,
            in_channels: c.in_channels,
            out_channels: c.out_channels,
            input: [1, c.input_len],
            kernel: [1, c.kernel_len],
            padding: [0, c.padding],
            stride: [1, c.stride],
            dilation: [1, c.dilation],
            groups: c.groups,
        }
    }
}

/// A transposed convolution (the gradient of a convolution with respect to
/// its input), over contiguous NCHW tensors:
///
/// - input `x`: `batch × in_channels × input[0] × input[1]`
/// - weights `w`: `in_channels × (out_channels / groups) × kernel[0] × kernel[1]`
/// - output `y`: `batch × out_channels × output()[0] × output()[1]`, where
///   `output = (input - 1) * stride - 2 * padding + dilation * (kernel - 1)
///   + output_padding + 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvTransposeConfig {
    /// N.
    pub batch: usize,
    /// Channels of `x`.
    pub in_channels: usize,
    /// Channels of `y`.
    pub out_channels: usize,
    /// Spatial size of `x`.
    pub input: [usize; 2],
    /// Spatial size of the kernel.
    pub kernel: [usize; 2],
    /// Padding of the equivalent forward convolution.
    pub padding: [usize; 2],
    /// Extra rows/columns added at the end of the output; less than the
    /// stride or the dilation.
    pub output_padding: [usize; 2],
    /// Stride of the equivalent forward convolution.
    pub stride: [usize; 2],
    /// Dilation of the equivalent forward convolution.
    pub dilation: [usize; 2],
    /// Channel groups.
    pub groups: usize,
}

impl ConvConfig {
    /// Spatial size of the output, or an explanation when the kernel (with
    /// dilation) does not fit the padded input.
    pub fn output(&self) -> Result<[usize; 2], String> {
        let mut out = [0; 2];
        for (d, o) in out.iter_mut().enumerate() {
            let overflow =
                || format!("dimension {d}: the padded input or the kernel's span overflows");
            let padded = self.padding[d]
                .checked_mul(2)
                .and_then(|p| p.checked_add(self.input[d]))
                .ok_or_else(overflow)?;
            let reach = self.dilation[d]
                .checked_mul(self.kernel[d].max(1) - 1)
                .and_then(|r| r.checked_add(1))
                .ok_or_else(overflow)?;
            if self.stride[d] == 0 || padded < reach {
                return Err(format!(
                    "dimension {d}: a kernel spanning {reach} (kernel {}, dilation {}) does not fit the padded input {padded} (input {}, padding {}) or the stride is 0",
                    self.kernel[d], self.dilation[d], self.input[d], self.padding[d]
                ));
            }
            *o = (padded - reach) / self.stride[d] + 1;
        }
        Ok(out)
    }

    /// Element counts of `x`, `w` and `y` after checking every parameter.
    pub(crate) fn validate(&self) -> Result<Sizes, String> {
        let positive = [
            ("batch", self.batch),
            ("in_channels", self.in_channels),
            ("out_channels", self.out_channels),
            ("groups", self.groups),
            ("input height", self.input[0]),
            ("input width", self.input[1]),
            ("kernel height", self.kernel[0]),
            ("kernel width", self.kernel[1]),
            ("stride height", self.stride[0]),
            ("stride width", self.stride[1]),
            ("dilation height", self.dilation[0]),
            ("dilation width", self.dilation[1]),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        if self.in_channels % self.groups != 0 || self.out_channels % self.groups != 0 {
            return Err(format!(
                "in_channels {} and out_channels {} must both be multiples of groups {}",
                self.in_channels, self.out_channels, self.groups
            ));
        }
        let geometry = [
            ("padding", self.padding),
            ("stride", self.stride),
            ("dilation", self.dilation),
        ];
        if let Some((name, v)) = geometry
            .iter()
            .find(|(_, v)| v.iter().any(|&x| i32::try_from(x).is_err()))
        {
            return Err(format!("{name} {v:?} exceeds MIOpen's 32-bit sizes"));
        }
        let out = self.output()?;
        let product = |dims: &[usize]| {
            dims.iter()
                .try_fold(1usize, |acc, &d| acc.checked_mul(d))
                .filter(|&n| i32::try_from(n).is_ok())
                .ok_or_else(|| {
                    format!("a tensor of shape {dims:?} is too large for MIOpen's 32-bit sizes")
                })
        };
        let x = [self.batch, self.in_channels, self.input[0], self.input[1]];
        let w = [
            self.out_channels,
            self.in_channels / self.groups,
            self.kernel[0],
            self.kernel[1],
        ];
        let y = [self.batch, self.out_channels, out[0], out[1]];
        Ok(Sizes {
            x: product(&x)?,
            w: product(&w)?,
            y: product(&y)?,
            x_dims: x,
            w_dims: w,
            y_dims: y,
        })
    }
}

impl ConvTransposeConfig {
    /// Spatial size of the output, or an explanation when it is not positive
    /// or the output padding is too large.
    pub fn output(&self) -> Result<[usize; 2], String> {
        let mut out = [0; 2];
        for (d, o) in out.iter_mut().enumerate() {
            if self.output_padding[d] >= self.stride[d].max(self.dilation[d]) {
                return Err(format!(
                    "dimension {d}: output_padding {} must be smaller than the stride {} or the dilation {}",
                    self.output_padding[d], self.stride[d], self.dilation[d]
                ));
            }
            let grown = (self.input[d].max(1) - 1)
                .checked_mul(self.stride[d])
                .zip(self.dilation[d].checked_mul(self.kernel[d].max(1) - 1))
                .and_then(|(a, b)| a.checked_add(b))
                .and_then(|g| g.checked_add(self.output_padding[d] + 1))
                .ok_or_else(|| format!("dimension {d}: the output size overflows"))?;
            *o = self.padding[d]
                .checked_mul(2)
                .and_then(|p| grown.checked_sub(p))
                .filter(|&o| o > 0)
                .ok_or_else(|| {
                    format!(
                        "dimension {d}: padding {} leaves no output",
                        self.padding[d]
                    )
                })?;
        }
        Ok(out)
    }

    /// The forward convolution whose input gradient this is: its input is
    /// this operation's output and its output is this operation's input.
    pub fn as_forward(&self) -> Result<ConvConfig, String> {
        let output = self.output()?;
        let forward = ConvConfig {
            batch: self.batch,
            in_channels: self.out_channels,
            out_channels: self.in_channels,
            input: output,
            kernel: self.kernel,
            padding: self.padding,
            stride: self.stride,
            dilation: self.dilation,
            groups: self.groups,
        };
        if forward.output()? != self.input {
            return Err(format!(
                "the output {output:?} does not map back onto the input {:?}",
                self.input
            ));
        }
        Ok(forward)
    }
}

/// Element counts and dimensions of the three tensors of a convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sizes {
    pub x: usize,
    pub w: usize,
    pub y: usize,
    pub x_dims: [usize; 4],
    pub w_dims: [usize; 4],
    pub y_dims: [usize; 4],
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(input: [usize; 2], kernel: [usize; 2]) -> ConvConfig {
        ConvConfig {
            batch: 2,
            in_channels: 4,
            out_channels: 6,
            input,
            kernel,
            padding: [0, 0],
            stride: [1, 1],
            dilation: [1, 1],
            groups: 1,
        }
    }

    #[test]
    fn output_sizes_follow_the_usual_formula() {
        assert_eq!(conv([5, 7], [3, 3]).output(), Ok([3, 5]));
        let c = ConvConfig {
            padding: [1, 2],
            stride: [2, 3],
            dilation: [2, 1],
            ..conv([9, 10], [3, 3])
        };
        // (9 + 2 - 5) / 2 + 1 = 4; (10 + 4 - 3) / 3 + 1 = 4
        assert_eq!(c.output(), Ok([4, 4]));
        assert!(conv([2, 7], [3, 3]).output().is_err());
    }

    #[test]
    fn sizes_and_groups_are_validated() {
        let s = conv([5, 7], [3, 3]).validate().unwrap();
        assert_eq!((s.x, s.w, s.y), (2 * 4 * 35, 6 * 4 * 9, 2 * 6 * 15));
        let grouped = ConvConfig {
            groups: 2,
            ..conv([5, 7], [3, 3])
        };
        assert_eq!(grouped.validate().unwrap().w_dims, [6, 2, 3, 3]);
        let bad = ConvConfig {
            groups: 4,
            ..conv([5, 7], [3, 3])
        };
        assert!(bad.validate().unwrap_err().contains("multiples of groups"));
        let zero = ConvConfig {
            stride: [1, 0],
            ..conv([5, 7], [3, 3])
        };
        assert!(zero.validate().unwrap_err().contains("stride width"));
        let huge = ConvConfig {
            batch: 1 << 20,
            ..conv([64, 64], [3, 3])
        };
        assert!(huge.validate().unwrap_err().contains("too large"));
        // Geometry past usize or MIOpen's ints is an error, not a wrap.
        let padded = ConvConfig {
            padding: [1 << 63, 0],
            ..conv([1, 1], [1, 1])
        };
        assert!(padded.output().unwrap_err().contains("overflows"));
        let strided = ConvConfig {
            stride: [1 << 40, 1],
            ..conv([5, 7], [3, 3])
        };
        assert_eq!(strided.output(), Ok([1, 5]));
        assert!(strided.validate().unwrap_err().contains("32-bit"));
    }

    #[test]
    fn one_d_is_two_d_with_unit_height() {
        let c: ConvConfig = Conv1dConfig {
            batch: 1,
            in_channels: 2,
            out_channels: 3,
            input_len: 10,
            kernel_len: 3,
            padding: 1,
            stride: 2,
            dilation: 1,
            groups: 1,
        }
        .into();
        assert_eq!(c.input, [1, 10]);
        assert_eq!(c.output(), Ok([1, 5]));
    }

    #[test]
    fn transposed_output_and_forward_equivalent() {
        let t = ConvTransposeConfig {
            batch: 1,
            in_channels: 4,
            out_channels: 2,
            input: [3, 5],
            kernel: [3, 3],
            padding: [1, 0],
            output_padding: [1, 0],
            stride: [2, 1],
            dilation: [1, 1],
            groups: 1,
        };
        // (3-1)*2 - 2 + 2 + 1 + 1 = 6; (5-1)*1 - 0 + 2 + 0 + 1 = 7
        assert_eq!(t.output(), Ok([6, 7]));
        let f = t.as_forward().unwrap();
        assert_eq!((f.in_channels, f.out_channels, f.input), (2, 4, [6, 7]));
        assert_eq!(f.output(), Ok([3, 5]));
        let too_much = ConvTransposeConfig {
            output_padding: [2, 0],
            ..t
        };
        assert!(too_much.output().unwrap_err().contains("output_padding"));
        let overflowing = ConvTransposeConfig {
            input: [1 << 40, 5],
            stride: [1 << 40, 1],
            output_padding: [0, 0],
            ..t
        };
        assert!(overflowing.output().unwrap_err().contains("overflows"));
    }
}
