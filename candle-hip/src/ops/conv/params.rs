//! The bridge from candle's conv params to [`ConvParams`].
//!
//! The crates.io candle-core 0.11.1 keeps the fields of `ParamsConv1D`,
//! `ParamsConv2D`, `ParamsConvTranspose1D` and `ParamsConvTranspose2D`
//! private and offers no accessors; their derived `Debug` text is the only
//! public view of padding, stride, dilation and output padding. Without the
//! `candle-extension` feature this module — and nothing else in candle-hip —
//! reads that text (`Name { field: value, ... }`); with it, the patched
//! candle-core's accessors. Either way every size is then checked against
//! the operands' layouts, so a change of the text format is an error naming
//! the text, never a silent misreading.

#[cfg(not(feature = "candle-extension"))]
use std::fmt::Debug;

use candle_core::Layout;
use candle_core::conv::{ParamsConv1D, ParamsConv2D, ParamsConvTranspose1D, ParamsConvTranspose2D};

use super::{ConvParams, ConvPath};
use crate::error::{Result, invalid};
use crate::storage::HipStorage;

/// The struct name and the `usize` fields of a `Debug` text of the form
/// `Name { field: value, ... }` (fields of other types are skipped).
#[cfg(not(feature = "candle-extension"))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DebugFields {
    name: String,
    fields: Vec<(String, usize)>,
}

#[cfg(not(feature = "candle-extension"))]
impl DebugFields {
    /// Parses `text`; `None` when it is not a struct's `Debug` text.
    pub(crate) fn parse(text: &str) -> Option<DebugFields> {
        let (name, rest) = text.split_once(" { ")?;
        let body = rest.strip_suffix(" }")?;
        let mut fields = Vec::new();
        for part in body.split(", ") {
            let (field, value) = part.split_once(": ")?;
            if let Ok(v) = value.parse::<usize>() {
                fields.push((field.to_string(), v));
            }
        }
        Some(DebugFields {
            name: name.to_string(),
            fields,
        })
    }

    fn get(&self, field: &str) -> Option<usize> {
        self.fields
            .iter()
            .find(|(f, _)| f == field)
            .map(|&(_, v)| v)
    }
}

/// The values of `fields` in `params`, a value of candle's struct `name`.
#[cfg(not(feature = "candle-extension"))]
fn read<const F: usize>(
    op: &'static str,
    params: &impl Debug,
    name: &str,
    fields: [&str; F],
) -> Result<[usize; F]> {
    let text = format!("{params:?}");
    let unreadable = |why: String| {
        invalid(
            op,
            format!("cannot read candle's {name} from its Debug text `{text}`: {why}"),
        )
    };
    let parsed = DebugFields::parse(&text)
        .ok_or_else(|| unreadable("not `Name { field: value, ... }`".into()))?;
    if parsed.name != name {
        return Err(unreadable(format!("the struct is named {}", parsed.name)));
    }
    let mut out = [0; F];
    for (slot, field) in out.iter_mut().zip(fields) {
        *slot = parsed
            .get(field)
            .ok_or_else(|| unreadable(format!("no integer field `{field}`")))?;
    }
    Ok(out)
}

/// Defines `$name(op, params)`: the `usize` fields of one of candle's conv
/// param structs, in the order listed, from the patched candle-core's
/// accessors (`candle-extension`) or else from the struct's `Debug` text.
macro_rules! param_fields {
    ($name:ident, $params:ident, [$($field:ident),* $(,)?]) => {
        fn $name(
            op: &'static str,
            params: &$params,
        ) -> Result<[usize; [$(stringify!($field)),*].len()]> {
            #[cfg(feature = "candle-extension")]
            {
                let _ = op;
                Ok([$(params.$field()),*])
            }
            #[cfg(not(feature = "candle-extension"))]
            {
                read(op, params, stringify!($params), [$(stringify!($field)),*])
            }
        }
    };
}

param_fields!(
    conv1d_fields,
    ParamsConv1D,
    [b_size, l_in, c_out, c_in, k_size, padding, stride, dilation]
);
param_fields!(
    conv2d_fields,
    ParamsConv2D,
    [
        b_size, i_h, i_w, k_h, k_w, c_out, c_in, padding, stride, dilation
    ]
);
param_fields!(
    conv_transpose1d_fields,
    ParamsConvTranspose1D,
    [
        b_size,
        l_in,
        c_out,
        c_in,
        k_size,
        padding,
        output_padding,
        stride,
        dilation
    ]
);
param_fields!(
    conv_transpose2d_fields,
    ParamsConvTranspose2D,
    [
        b_size,
        i_h,
        i_w,
        k_h,
        k_w,
        c_out,
        c_in,
        padding,
        output_padding,
        stride,
        dilation
    ]
);

/// The operand shapes one of candle's conv param structs describes.
struct Described<'a> {
    /// The struct's name, for errors.
    name: &'static str,
    /// The input's shape.
    input: &'a [usize],
    /// The kernel's shape.
    kernel: &'a [usize],
}

impl Described<'_> {
    /// Errors unless the operands have the described shapes; then the
    /// params with candle's uniform padding, stride and dilation.
    fn check<const N: usize>(
        &self,
        op: &'static str,
        x_l: &Layout,
        w_l: &Layout,
        [padding, stride, dilation, output_padding]: [usize; 4],
    ) -> Result<ConvParams<N>> {
        for (what, layout, expected) in [("input", x_l, self.input), ("kernel", w_l, self.kernel)] {
            if layout.dims() != expected {
                return Err(invalid(
                    op,
                    format!(
                        "candle's {} describes the {what} as {expected:?} but it has shape {:?}",
                        self.name,
                        layout.dims()
                    ),
                ));
            }
        }
        Ok(ConvParams {
            output_padding: [output_padding; N],
            ..ConvParams::uniform(padding, stride, dilation)
        })
    }
}

/// `BackendStorage::conv1d`.
pub(crate) fn conv1d(
    x: &HipStorage,
    x_l: &Layout,
    w: &HipStorage,
    w_l: &Layout,
    p: &ParamsConv1D,
) -> Result<HipStorage> {
    const OP: &str = "conv1d";
    let [b, l, c_out, c_in, k, padding, stride, dilation] = conv1d_fields(OP, p)?;
    let params = Described {
        name: "ParamsConv1D",
        input: &[b, c_in, l],
        kernel: &[c_out, c_in, k],
    }
    .check(OP, x_l, w_l, [padding, stride, dilation, 0])?;
    super::conv1d(x, x_l, w, w_l, &params, ConvPath::Auto)
}

/// `BackendStorage::conv2d`.
pub(crate) fn conv2d(
    x: &HipStorage,
    x_l: &Layout,
    w: &HipStorage,
    w_l: &Layout,
    p: &ParamsConv2D,
) -> Result<HipStorage> {
    const OP: &str = "conv2d";
    let [b, h, w_in, kh, kw, c_out, c_in, padding, stride, dilation] = conv2d_fields(OP, p)?;
    let params = Described {
        name: "ParamsConv2D",
        input: &[b, c_in, h, w_in],
        kernel: &[c_out, c_in, kh, kw],
    }
    .check(OP, x_l, w_l, [padding, stride, dilation, 0])?;
    super::conv2d(x, x_l, w, w_l, &params, ConvPath::Auto)
}

/// `BackendStorage::conv_transpose1d`.
pub(crate) fn conv_transpose1d(
    x: &HipStorage,
    x_l: &Layout,
    w: &HipStorage,
    w_l: &Layout,
    p: &ParamsConvTranspose1D,
) -> Result<HipStorage> {
    const OP: &str = "conv_transpose1d";
    let [
        b,
        l,
        c_out,
        c_in,
        k,
        padding,
        output_padding,
        stride,
        dilation,
    ] = conv_transpose1d_fields(OP, p)?;
    let params = Described {
        name: "ParamsConvTranspose1D",
        input: &[b, c_in, l],
        kernel: &[c_in, c_out, k],
    }
    .check(OP, x_l, w_l, [padding, stride, dilation, output_padding])?;
    super::conv_transpose1d(x, x_l, w, w_l, &params, ConvPath::Auto)
}

/// `BackendStorage::conv_transpose2d`.
pub(crate) fn conv_transpose2d(
    x: &HipStorage,
    x_l: &Layout,
    w: &HipStorage,
    w_l: &Layout,
    p: &ParamsConvTranspose2D,
) -> Result<HipStorage> {
    const OP: &str = "conv_transpose2d";
    let [
        b,
        h,
        w_in,
        kh,
        kw,
        c_out,
        c_in,
        padding,
        output_padding,
        stride,
        dilation,
    ] = conv_transpose2d_fields(OP, p)?;
    let params = Described {
        name: "ParamsConvTranspose2D",
        input: &[b, c_in, h, w_in],
        kernel: &[c_in, c_out, kh, kw],
    }
    .check(OP, x_l, w_l, [padding, stride, dilation, output_padding])?;
    super::conv_transpose2d(x, x_l, w, w_l, &params, ConvPath::Auto)
}

#[cfg(all(test, not(feature = "candle-extension")))]
mod tests {
    //! candle's params cannot be built outside candle-core, so these tests
    //! format structs declared exactly as candle-core 0.11.1 declares them
    //! (same names, fields, order and derived `Debug`): their text is the
    //! text the reader gets from the real values.
    #![allow(dead_code)]

    use super::*;
    use candle_core::conv::CudnnFwdAlgo;

    #[derive(Debug)]
    struct ParamsConv1D {
        b_size: usize,
        l_in: usize,
        c_out: usize,
        c_in: usize,
        k_size: usize,
        padding: usize,
        stride: usize,
        dilation: usize,
        cudnn_fwd_algo: Option<CudnnFwdAlgo>,
    }

    #[derive(Debug)]
    struct ParamsConvTranspose1D {
        b_size: usize,
        l_in: usize,
        c_out: usize,
        c_in: usize,
        k_size: usize,
        padding: usize,
        output_padding: usize,
        stride: usize,
        dilation: usize,
    }

    #[derive(Debug)]
    struct ParamsConv2D {
        b_size: usize,
        i_h: usize,
        i_w: usize,
        k_h: usize,
        k_w: usize,
        c_out: usize,
        c_in: usize,
        padding: usize,
        stride: usize,
        dilation: usize,
        cudnn_fwd_algo: Option<CudnnFwdAlgo>,
    }

    #[derive(Debug)]
    struct ParamsConvTranspose2D {
        b_size: usize,
        i_h: usize,
        i_w: usize,
        k_h: usize,
        k_w: usize,
        c_out: usize,
        c_in: usize,
        padding: usize,
        output_padding: usize,
        stride: usize,
        dilation: usize,
    }

    #[test]
    fn reads_every_params_struct() {
        let p = ParamsConv2D {
            b_size: 32,
            i_h: 56,
            i_w: 57,
            k_h: 3,
            k_w: 1,
            c_out: 256,
            c_in: 128,
            padding: 1,
            stride: 2,
            dilation: 3,
            cudnn_fwd_algo: Some(CudnnFwdAlgo::ImplicitGemm),
        };
        let fields = [
            "b_size", "i_h", "i_w", "k_h", "k_w", "c_out", "c_in", "padding", "stride", "dilation",
        ];
        let v = read("conv2d", &p, "ParamsConv2D", fields).unwrap();
        assert_eq!(v, [32, 56, 57, 3, 1, 256, 128, 1, 2, 3]);
        let p = ParamsConv1D {
            b_size: 1,
            l_in: 3000,
            c_out: 384,
            c_in: 80,
            k_size: 3,
            padding: 1,
            stride: 1,
            dilation: 1,
            cudnn_fwd_algo: None,
        };
        let v = read("conv1d", &p, "ParamsConv1D", ["l_in", "c_out", "padding"]).unwrap();
        assert_eq!(v, [3000, 384, 1]);
        let p = ParamsConvTranspose2D {
            b_size: 2,
            i_h: 8,
            i_w: 9,
            k_h: 4,
            k_w: 4,
            c_out: 64,
            c_in: 128,
            padding: 1,
            output_padding: 1,
            stride: 2,
            dilation: 1,
        };
        let v = read(
            "t",
            &p,
            "ParamsConvTranspose2D",
            ["output_padding", "stride", "c_in"],
        )
        .unwrap();
        assert_eq!(v, [1, 2, 128]);
        let p = ParamsConvTranspose1D {
            b_size: 4,
            l_in: 10,
            c_out: 3,
            c_in: 5,
            k_size: 7,
            padding: 0,
            output_padding: 0,
            stride: 3,
            dilation: 2,
        };
        assert_eq!(
            read("t", &p, "ParamsConvTranspose1D", ["dilation", "k_size"]).unwrap(),
            [2, 7]
        );
    }

    #[test]
    fn unreadable_text_is_an_error_naming_it() {
        let p = ParamsConvTranspose1D {
            b_size: 4,
            l_in: 10,
            c_out: 3,
            c_in: 5,
            k_size: 7,
            padding: 0,
            output_padding: 0,
            stride: 3,
            dilation: 2,
        };
        let err = read("conv_transpose1d", &p, "ParamsConv1D", ["stride"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("named ParamsConvTranspose1D") && err.contains("l_in: 10"),
            "{err}"
        );
        let err = read("t", &p, "ParamsConvTranspose1D", ["groups"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("no integer field `groups`"), "{err}");
        assert_eq!(DebugFields::parse("(1, 2)"), None);
        assert_eq!(DebugFields::parse("P { a: x }").unwrap().fields, vec![]);
        assert_eq!(DebugFields::parse("P { a }"), None);
    }

    #[test]
    fn shapes_are_checked_against_the_params() {
        let x = Layout::contiguous((2, 3, 10));
        let w = Layout::contiguous((5, 3, 4));
        let described = |input| Described {
            name: "ParamsConvTranspose1D",
            input,
            kernel: &[5, 3, 4],
        };
        let p: ConvParams<1> = described(&[2, 3, 10])
            .check("conv1d", &x, &w, [1, 2, 3, 1])
            .unwrap();
        assert_eq!(
            (p.padding, p.stride, p.dilation, p.output_padding, p.groups),
            ([1], [2], [3], [1], 1)
        );
        let err = described(&[2, 4, 10])
            .check::<1>("conv1d", &x, &w, [1, 1, 1, 0])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("[2, 4, 10]") && err.contains("ParamsConvTranspose1D describes the input"),
            "{err}"
        );
        let err = described(&[2, 3, 10])
            .check::<1>("conv1d", &x, &Layout::contiguous((5, 3, 3)), [1, 1, 1, 0])
            .unwrap_err()
            .to_string();
        assert!(err.contains("kernel as [5, 3, 4]"), "{err}");
    }
}
