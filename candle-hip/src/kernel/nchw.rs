//! Kernel argument structs of the image kernels, mirrored from
//! `kernels/common.h` (`Nchw`) and `kernels/im2col.hip` (`ConvGeom`).

use candle_core::Layout;
use hip_safe::DeviceRepr;

use crate::error::{Result, invalid};
use crate::kernel::info::to_u64;
use crate::size;

/// A strided `(N, C, H, W)` source: sizes and strides in elements.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Nchw {
    /// N, C, H, W.
    pub(crate) dims: [u64; 4],
    /// Strides of N, C, H, W.
    pub(crate) strides: [u64; 4],
}

// SAFETY: `#[repr(C)]` of eight u64: no padding, every bit pattern valid.
unsafe impl DeviceRepr for Nchw {}
const _: () = assert!(std::mem::size_of::<Nchw>() == 64);

impl Nchw {
    /// The `(N, C, H, W)` view of a 4-D layout, or of a 3-D `(N, C, L)`
    /// layout as `(N, C, 1, L)`.
    pub(crate) fn of(op: &'static str, layout: &Layout) -> Result<Nchw> {
        let (d, s) = (layout.dims(), layout.stride());
        let (dims, strides) = match d.len() {
            4 => ([d[0], d[1], d[2], d[3]], [s[0], s[1], s[2], s[3]]),
            3 => ([d[0], d[1], 1, d[2]], [s[0], s[1], 0, s[2]]),
            _ => {
                return Err(invalid(
                    op,
                    format!("expected a 3-D (N, C, L) or 4-D (N, C, H, W) input, got shape {d:?}"),
                ));
            }
        };
        size::span(op, &dims, &strides)?;
        Ok(Nchw {
            dims: dims.map(to_u64),
            strides: strides.map(to_u64),
        })
    }

    /// N * C * H * W (checked when the view was made).
    pub(crate) fn numel(&self) -> usize {
        self.dims.iter().product::<u64>() as usize
    }

    /// N, C, H, W as usize.
    pub(crate) fn sizes(&self) -> [usize; 4] {
        self.dims.map(|d| d as usize)
    }
}

/// The geometry of an im2col / col2im launch (see `kernels/im2col.hip`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConvGeom {
    pub(crate) in_h: u64,
    pub(crate) in_w: u64,
    pub(crate) out_h: u64,
    pub(crate) out_w: u64,
    pub(crate) kh: u32,
    pub(crate) kw: u32,
    pub(crate) ph: u32,
    pub(crate) pw: u32,
    pub(crate) sh: u32,
    pub(crate) sw: u32,
    pub(crate) dh: u32,
    pub(crate) dw: u32,
}

// SAFETY: `#[repr(C)]` of four u64 then eight u32: no padding, every bit
// pattern valid.
unsafe impl DeviceRepr for ConvGeom {}
const _: () = assert!(std::mem::size_of::<ConvGeom>() == 64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_become_nchw() {
        let l = Layout::contiguous((2, 3, 4, 5));
        assert_eq!(
            Nchw::of("t", &l).unwrap(),
            Nchw {
                dims: [2, 3, 4, 5],
                strides: [60, 20, 5, 1]
            }
        );
        let l = Layout::contiguous((2, 3, 7)).transpose(0, 1).unwrap();
        let n = Nchw::of("t", &l).unwrap();
        assert_eq!((n.dims, n.strides), ([3, 2, 1, 7], [7, 21, 0, 1]));
        assert_eq!(n.numel(), 42);
        let err = Nchw::of("max_pool2d", &Layout::contiguous((2, 3))).unwrap_err();
        assert!(err.to_string().contains("max_pool2d"), "{err}");
    }
}
