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
use hip_safe::{DeviceView, DeviceViewMut};

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
    let doubled = |half: usize| half.checked_mul(2) == Some(d);
    if !doubled(cd) || !doubled(sd) || t > ct || t > st {
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

/// The layout [`rope_append`] writes: one layer's key and value caches and the
/// step's rotated query, one after the other in one storage of
/// [`StepCache::state_len`] elements:
/// `[keys (kv_heads, max_len, head_dim) | values (same) | query (heads, head_dim)]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepCache {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Elements per head (even).
    pub head_dim: usize,
    /// Positions each cache holds.
    pub max_len: usize,
    /// Whether RoPE rotates interleaved pairs `(x[2j], x[2j + 1])` (`rope_i`)
    /// rather than the two halves `(x[j], x[j + d/2])` (`rope`).
    pub interleaved: bool,
}

impl StepCache {
    /// Elements of the key cache, which is also the value cache's length and
    /// the values' offset; `None` when it overflows.
    pub fn cache_len(&self) -> Option<usize> {
        self.kv_heads
            .checked_mul(self.max_len)?
            .checked_mul(self.head_dim)
    }

    /// Elements of the whole layout, both caches and the query; `None` when
    /// it overflows.
    pub fn state_len(&self) -> Option<usize> {
        self.cache_len()?
            .checked_mul(2)?
            .checked_add(self.heads.checked_mul(self.head_dim)?)
    }

    /// Elements of the step's projections the query, key and value heads
    /// take: `(heads + 2 kv_heads) head_dim`; `None` when it overflows.
    pub fn qkv_len(&self) -> Option<usize> {
        self.kv_heads
            .checked_mul(2)?
            .checked_add(self.heads)?
            .checked_mul(self.head_dim)
    }
}

/// Where a decoding step is written, as [`rope_append`] and the products
/// that write the step themselves take it: the state (with `cache`'s
/// layout), the `(rows, head_dim / 2)` RoPE tables of every position and
/// the position, one u32 read on the device.
pub struct StepTarget<'a> {
    /// The state and its layout: contiguous, [`StepCache::state_len`]
    /// elements.
    pub state: (&'a mut HipStorage, &'a Layout),
    /// The cosine table (contiguous, the state's dtype).
    pub cos: (&'a HipStorage, &'a Layout),
    /// The sine table, as `cos`.
    pub sin: (&'a HipStorage, &'a Layout),
    /// The position: one u32.
    pub pos: (&'a HipStorage, &'a Layout),
    /// The state's layout.
    pub cache: StepCache,
}

/// One decoding step of batch 1 in one launch: RoPE on its query and key
/// heads at the position `pos` holds, the keys and values appended to the
/// caches at that position, the rotated query written beside them.
///
/// `qkv` holds the step's `heads` query, `kv_heads` key and `kv_heads` value
/// heads of `head_dim` elements (a fused projection's output, contiguous);
/// `step` ([`StepTarget`]) holds the state, the tables of every position and
/// the position (read on the device, so that a captured step serves every
/// position). Computes what `rope`/`rope_i` on the query and key heads
/// followed by writing row `pos` of the caches computes. A position at or
/// past `max_len` or the tables' rows writes nothing (the device cannot
/// report it: check it on the host before it is uploaded).
///
/// Errors: dtypes that differ (u32 for `pos`), sizes that disagree with
/// `cache`, an odd or zero head dimension, no heads, a non-contiguous
/// operand.
pub fn rope_append(qkv: &HipStorage, qkv_l: &Layout, step: StepTarget) -> candle_core::Result<()> {
    const OP: &str = "rope_append";
    let cache = step.cache;
    let family = if cache.interleaved {
        &cat::ROPE_I_APPEND
    } else {
        &cat::ROPE_APPEND
    };
    let step = StepRope::new(OP, qkv, step)?;
    let kernel = family.kernel(OP, qkv.dtype())?;
    let device = qkv.device().clone();
    let qkv_len = cache
        .qkv_len()
        .ok_or_else(|| invalid(OP, format!("{cache:?} overflows")))?;
    if qkv_l.shape().elem_count() != qkv_len || !qkv_l.is_contiguous() {
        return Err(invalid(
            OP,
            format!(
                "qkv {:?} is not {qkv_len} contiguous elements ({cache:?})",
                qkv_l.dims()
            ),
        ));
    }
    let x = qkv.view_range(OP, qkv_l.start_offset(), qkv_len)?;
    let [h, kv, d, len, rows] = step.dims;
    let cfg = grid_stride((qkv_len / 2) as u64, device.kernels().compute_units());
    // SAFETY: rope*_append_T take (const T* qkv, const T* cos, const T* sin,
    // const u32* pos, T* state, u32 heads, kv_heads, d, max_len, rows); qkv
    // holds (heads + 2 kv_heads) d elements, cos and sin rows * d/2, pos one,
    // state 2 kv_heads max_len d + heads d (checked above and by
    // `StepRope::new`); the kernel writes nothing for a position outside
    // max_len and rows.
    unsafe {
        device.kernels().launch(
            kernel,
            cfg,
            &[
                &x,
                &step.cos,
                &step.sin,
                &step.pos,
                &step.state,
                &h,
                &kv,
                &d,
                &len,
                &rows,
            ],
        )
    }?;
    Ok(())
}

/// A decoding step's RoPE tables, position and state, checked for
/// [`StepCache`] (for [`rope_append`] and the products that write the step
/// themselves, `fused_linear_rope_append`).
pub(crate) struct StepRope<'a> {
    /// The `(rows, head_dim / 2)` cosine table.
    pub cos: DeviceView<'a, u8>,
    /// The sine table, as `cos`.
    pub sin: DeviceView<'a, u8>,
    /// The one u32 position.
    pub pos: DeviceView<'a, u8>,
    /// The whole state ([`StepCache::state_len`] elements).
    pub state: DeviceViewMut<'a, u8>,
    /// heads, kv_heads, head_dim, max_len and the tables' rows, as the
    /// kernels take them (the kernels index the state with 64-bit offsets;
    /// these and `heads + 2 kv_heads` fit u32).
    pub dims: [u32; 5],
}

impl<'a> StepRope<'a> {
    /// Checks `source` (what the step is computed from) and the operands
    /// against `cache` as `op`: one device for all, the state's dtype for
    /// the source and the tables, a u32 position of one element, contiguous
    /// `(rows, head_dim / 2)` tables, a contiguous state of
    /// [`StepCache::state_len`] elements, heads, positions and an even head
    /// dimension.
    pub fn new(
        op: &'static str,
        source: &HipStorage,
        step: StepTarget<'a>,
    ) -> Result<StepRope<'a>> {
        let StepTarget {
            state: (state, state_l),
            cos: (cos, cos_l),
            sin: (sin, sin_l),
            pos: (pos, pos_l),
            cache,
        } = step;
        source.check_device(state, op)?;
        source.check_dtype(state, op)?;
        for other in [cos, sin, pos] {
            state.check_device(other, op)?;
        }
        for other in [cos, sin] {
            state.check_dtype(other, op)?;
        }
        if pos.dtype() != candle_core::DType::U32 || pos_l.shape().elem_count() != 1 {
            return Err(invalid(
                op,
                format!(
                    "the position is {:?} of shape {:?}; expected one u32",
                    pos.dtype(),
                    pos_l.dims()
                ),
            ));
        }
        let StepCache {
            heads,
            kv_heads,
            head_dim,
            max_len,
            ..
        } = cache;
        if heads == 0 || kv_heads == 0 || max_len == 0 || head_dim == 0 || head_dim % 2 == 1 {
            return Err(invalid(
                op,
                format!("{cache:?}: needs heads, positions and an even head dimension"),
            ));
        }
        let state_len = cache
            .state_len()
            .ok_or_else(|| invalid(op, format!("{cache:?} overflows")))?;
        let rows = match *cos_l.dims() {
            [rows, half]
                if half.checked_mul(2) == Some(head_dim) && cos_l.dims() == sin_l.dims() =>
            {
                rows
            }
            _ => {
                return Err(invalid(
                    op,
                    format!(
                        "cos {:?} and sin {:?} must both be (positions, {})",
                        cos_l.dims(),
                        sin_l.dims(),
                        head_dim / 2
                    ),
                ));
            }
        };
        if state_l.shape().elem_count() != state_len {
            return Err(invalid(
                op,
                format!(
                    "state {:?} does not hold {state_len} elements ({cache:?})",
                    state_l.dims()
                ),
            ));
        }
        for (name, l) in [("state", state_l), ("cos", cos_l), ("sin", sin_l)] {
            if !l.is_contiguous() {
                return Err(invalid(op, format!("{name} has to be contiguous")));
            }
        }
        let u32_of = |what, v| to_u32(op, what, v);
        let dims = [
            u32_of("heads", heads)?,
            u32_of("kv_heads", kv_heads)?,
            u32_of("head_dim", head_dim)?,
            u32_of("max_len", max_len)?,
            u32_of("table rows", rows)?,
        ];
        // The kernels count the heads of the step in 32 bits.
        u32_of("heads + 2 kv_heads", heads + 2 * kv_heads)?;
        Ok(StepRope {
            cos: cos.view(op, cos_l)?,
            sin: sin.view(op, sin_l)?,
            pos: pos.view_range(op, pos_l.start_offset(), 1)?,
            state: state.view_range_mut(op, state_l.start_offset(), state_len)?,
            dims,
        })
    }
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
