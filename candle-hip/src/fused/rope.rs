//! Rotary position embeddings (`kernels/rope.hip`), with the arguments and
//! checks of candle-nn's `rotary_emb::{rope_i, rope, rope_thd}`.

use candle_core::Layout;
use candle_core::backend::BackendStorage;

use crate::error::{Result, invalid};
use crate::kernel::catalogue::{self as cat, Family};
use crate::kernel::grid::grid_stride;
use crate::kernel::launch::to_u32;
use crate::size;
use crate::storage::HipStorage;

/// Which of candle's three layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// `rope_i`: x `(b, h, t, d)`, pairs `(x[2j], x[2j + 1])`.
    Interleaved,
    /// `rope`: x `(b, h, t, d)`, pairs `(x[j], x[j + d/2])`.
    Halves,
    /// `rope_thd`: x `(b, t, h, d)`, pairs `(x[j], x[j + d/2])`.
    Thd,
}

impl Variant {
    fn family(self) -> &'static Family {
        match self {
            Variant::Interleaved => &cat::ROPE_I,
            Variant::Halves => &cat::ROPE,
            Variant::Thd => &cat::ROPE_THD,
        }
    }

    fn op(self) -> &'static str {
        self.family().name
    }
}

/// The validated sizes of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sizes {
    b: usize,
    h: usize,
    t: usize,
    d: usize,
    /// cos/sin are `(b, t, d/2)` rather than `(t', d/2)`.
    batched: bool,
}

/// `(t', d/2)` of a cos or sin layout: `(t', d/2)` or `(b, t', d/2)`.
fn cos_sin_dims(op: &'static str, name: &str, l: &Layout, b: usize) -> Result<(usize, usize)> {
    match *l.dims() {
        [t, d] => Ok((t, d)),
        [bb, t, d] if bb == b => Ok((t, d)),
        ref dims => Err(invalid(
            op,
            format!(
                "{name} has shape {dims:?}; expected (seq_len, dim / 2) or ({b}, seq_len, dim / 2)"
            ),
        )),
    }
}

/// Candle-nn's checks: x 4-D and contiguous, cos and sin contiguous with
/// half of x's last dimension and at least its sequence length.
fn sizes(variant: Variant, x: &Layout, cos: &Layout, sin: &Layout) -> Result<Sizes> {
    let op = variant.op();
    let (b, h, t, d) = match *x.dims() {
        [b, t, h, d] if variant == Variant::Thd => (b, h, t, d),
        [b, h, t, d] => (b, h, t, d),
        ref dims => {
            return Err(invalid(
                op,
                format!("x has shape {dims:?}; expected 4 dimensions"),
            ));
        }
    };
    let (ct, cd) = cos_sin_dims(op, "cos", cos, b)?;
    let (st, sd) = cos_sin_dims(op, "sin", sin, b)?;
    if cd * 2 != d || sd * 2 != d || t > ct || t > st {
        return Err(invalid(
            op,
            format!(
                "inconsistent sizes: x {:?}, cos {:?}, sin {:?}",
                x.dims(),
                cos.dims(),
                sin.dims()
            ),
        ));
    }
    for (name, l) in [("x", x), ("cos", cos), ("sin", sin)] {
        if !l.is_contiguous() {
            return Err(invalid(op, format!("{name} has to be contiguous")));
        }
    }
    Ok(Sizes {
        b,
        h,
        t,
        d,
        batched: cos.dims().len() == 3 && sin.dims().len() == 3,
    })
}

fn run(
    variant: Variant,
    x: &HipStorage,
    x_l: &Layout,
    cos: &HipStorage,
    cos_l: &Layout,
    sin: &HipStorage,
    sin_l: &Layout,
) -> Result<HipStorage> {
    let op = variant.op();
    for other in [cos, sin] {
        x.check_device(other, op)?;
        x.check_dtype(other, op)?;
    }
    let s = sizes(variant, x_l, cos_l, sin_l)?;
    let kernel = variant.family().kernel(op, x.dtype())?;
    let device = x.device();
    let len = size::product(op, "the input", &[s.b, s.h, s.t, s.d])?;
    // SAFETY: the kernel writes both elements of every pair, i.e. all of them.
    let mut out = unsafe { device.alloc_storage(x.dtype(), len) }?;
    if len == 0 {
        return Ok(out);
    }
    let u32_of = |what, v| to_u32(op, what, v);
    let (b, h, t, d) = (
        u32_of("b", s.b)?,
        u32_of("h", s.h)?,
        u32_of("t", s.t)?,
        u32_of("d", s.d)?,
    );
    let batched = u32::from(s.batched);
    let xs = x.view_range(op, x_l.start_offset(), len)?;
    let cs = cos.view(op, cos_l)?;
    let sn = sin.view(op, sin_l)?;
    let dst = out.view_all_mut();
    let cfg = grid_stride((len / 2) as u64, device.kernels().compute_units());
    // SAFETY: rope*_T take (const T* x, const T* cos, const T* sin, T* y,
    // u32 b, h, t, d, batched); x and y hold b*h*t*d elements, cos and sin
    // at least t*d/2 (or b*t*d/2 when batched), as checked in `sizes`.
    unsafe {
        device.kernels().launch(
            kernel,
            cfg,
            &[&xs, &cs, &sn, &dst, &b, &h, &t, &d, &batched],
        )
    }?;
    Ok(out)
}

/// Rotary embedding with interleaved pairs on `x: (b, h, t, d)`; `cos` and
/// `sin` are `(t', d/2)` with `t' >= t`, or `(b, t, d/2)`
/// (`candle_nn::rotary_emb::rope_i`).
pub fn rope_i(
    x: &HipStorage,
    x_layout: &Layout,
    cos: &HipStorage,
    cos_layout: &Layout,
    sin: &HipStorage,
    sin_layout: &Layout,
) -> candle_core::Result<HipStorage> {
    run(
        Variant::Interleaved,
        x,
        x_layout,
        cos,
        cos_layout,
        sin,
        sin_layout,
    )
}

/// Rotary embedding on the two halves of the last dimension of
/// `x: (b, h, t, d)`; `cos`/`sin` as for [`rope_i`]
/// (`candle_nn::rotary_emb::rope`).
pub fn rope(
    x: &HipStorage,
    x_layout: &Layout,
    cos: &HipStorage,
    cos_layout: &Layout,
    sin: &HipStorage,
    sin_layout: &Layout,
) -> candle_core::Result<HipStorage> {
    run(
        Variant::Halves,
        x,
        x_layout,
        cos,
        cos_layout,
        sin,
        sin_layout,
    )
}

/// Rotary embedding on the two halves of the last dimension of
/// `x: (b, t, h, d)`; `cos`/`sin` as for [`rope_i`]
/// (`candle_nn::rotary_emb::rope_thd`).
pub fn rope_thd(
    x: &HipStorage,
    x_layout: &Layout,
    cos: &HipStorage,
    cos_layout: &Layout,
    sin: &HipStorage,
    sin_layout: &Layout,
) -> candle_core::Result<HipStorage> {
    run(Variant::Thd, x, x_layout, cos, cos_layout, sin, sin_layout)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(dims: &[usize]) -> Layout {
        Layout::contiguous(dims)
    }

    #[test]
    fn shapes_follow_candle_nn() {
        let s = sizes(
            Variant::Halves,
            &c(&[2, 32, 7, 128]),
            &c(&[4096, 64]),
            &c(&[4096, 64]),
        )
        .unwrap();
        assert_eq!(
            s,
            Sizes {
                b: 2,
                h: 32,
                t: 7,
                d: 128,
                batched: false
            }
        );
        let s = sizes(
            Variant::Thd,
            &c(&[2, 7, 32, 128]),
            &c(&[2, 7, 64]),
            &c(&[2, 7, 64]),
        )
        .unwrap();
        assert_eq!(
            s,
            Sizes {
                b: 2,
                h: 32,
                t: 7,
                d: 128,
                batched: true
            }
        );
        // One 2-D and one 3-D table: indexed as 2-D, as candle-nn does.
        let s = sizes(
            Variant::Interleaved,
            &c(&[2, 4, 7, 16]),
            &c(&[2, 7, 8]),
            &c(&[7, 8]),
        )
        .unwrap();
        assert!(!s.batched);
    }

    #[test]
    fn inconsistent_inputs_are_errors() {
        let x = c(&[1, 2, 8, 16]);
        let err = |r: Result<Sizes>| r.unwrap_err().to_string();
        assert!(err(sizes(Variant::Halves, &x, &c(&[8, 7]), &c(&[8, 8]))).contains("inconsistent"));
        assert!(err(sizes(Variant::Halves, &x, &c(&[4, 8]), &c(&[8, 8]))).contains("inconsistent"));
        assert!(err(sizes(Variant::Halves, &x, &c(&[3, 8, 8]), &c(&[8, 8]))).contains("cos"));
        assert!(
            err(sizes(
                Variant::Halves,
                &c(&[2, 8, 16]),
                &c(&[8, 8]),
                &c(&[8, 8])
            ))
            .contains("4 dimensions")
        );
        let xt = c(&[1, 8, 2, 16]).transpose(1, 2).unwrap();
        assert!(
            err(sizes(Variant::Halves, &xt, &c(&[8, 8]), &c(&[8, 8])))
                .contains("x has to be contiguous")
        );
        let ct = c(&[8, 8]).transpose(0, 1).unwrap();
        assert!(
            err(sizes(Variant::Thd, &c(&[1, 8, 2, 16]), &ct, &c(&[8, 8])))
                .contains("cos has to be contiguous")
        );
    }
}
