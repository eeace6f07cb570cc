//! Fused attention (flash attention, forward) through `attention.hip`:
//! `softmax(Q·Kᵀ·scale + bias)·V` without materialising the scores, as
//! `candle_flash_attn::flash_attn*` computes it.
//!
//! Operands are `(batch, seq, heads, head_dim)`, f16 or bf16, with the same
//! dtype; `k` and `v` may have fewer heads than `q` (grouped- and
//! multi-query attention: query head `h` reads key/value head
//! `h / (h_q / h_k)`). Head dims 32, 64, 80, 96, 128 and 256. Windows, the
//! causal mask (`window_right = Some(0)`), soft-capping and ALiBi slopes
//! follow flash-attention 2, whose causal diagonal is aligned to the bottom
//! right when `s_q != s_k` (a query at row `i` sits at key position
//! `i + s_k - s_q`). A query row that sees no key gets zeros.
//!
//! One kernel body, two launch forms: prefill (a block per 16 query rows per
//! wave and head, matrix instructions for both products, the online softmax
//! in registers) and, for at most [`DECODE_MAX_QUERIES`] queries,
//! flash-decoding with the same products (the keys split across blocks,
//! each block's 16 rows being the query heads of one key/value head, so a
//! key is read once for its whole group; then a merge of the splits, which
//! one split skips: its decode writes the output).
//!
//! Which matrix path ran where: `mma.sync` (NVIDIA sm_80+) on the NVIDIA test
//! platform; MFMA (gfx908 f16, gfx90a/gfx942), WMMA (gfx11, gfx12) and the
//! portable product (gfx1030 at wave 32, bf16 on gfx908 at wave 64) on the
//! CPU test platform (`tests/hip-on-cpu`), whose matrix builtins follow AMD's
//! documented register layouts. The AMD paths were also compiled with the
//! real hipRTC in the ROCm sandbox (no spills); none has run on an AMD GPU.
//! Prefill's tile copies are asynchronous and pipelined (`cp.async`) only on
//! the NVIDIA test platform; every AMD target copies synchronously.

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout};
use hip_safe::{DevicePtr, DeviceRepr, DeviceViewMut, LaunchConfig};

use crate::error::{Result, invalid};
use crate::kernel::catalogue::{self as cat, Family};
use crate::kernel::launch::{mut_view_or_null, to_u32, view_or_null};
use crate::size;
use crate::storage::HipStorage;

const OP: &str = "flash_attn";

/// The head dims with kernels.
pub const HEAD_DIMS: [usize; 6] = [32, 64, 80, 96, 128, 256];

/// Queries per sequence up to which [`AttentionKernel::Auto`] decodes.
pub const DECODE_MAX_QUERIES: usize = 8;

/// `CH_ATTN_UNBOUNDED` of `attention.hip`: a window bound that never limits.
const UNBOUNDED: i32 = 0x3fff_ffff;
/// Keys of one decode split at the least: fewer would cost more in merging
/// than they save in parallelism.
const MIN_SPLIT_KEYS: usize = 64;
/// Splits per row at the most (`CH_DECODE_MAX_SPLITS` of `attention.hip`).
const MAX_SPLITS: usize = 256;

/// Which kernel computes the attention.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttentionKernel {
    /// Flash-decoding for at most [`DECODE_MAX_QUERIES`] queries, the
    /// prefill kernel otherwise.
    #[default]
    Auto,
    /// The prefill kernel, whatever the number of queries.
    Prefill,
    /// The decoding kernel, whatever the number of queries.
    Decode,
}

/// The parameters of a fused attention beside its operands.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlashAttnParams {
    /// Multiplies `q·k` (typically `1 / sqrt(head_dim)`).
    pub softmax_scale: f32,
    /// Keys visible before a query's position (`None`: all).
    pub window_left: Option<usize>,
    /// Keys visible after a query's position (`None`: all; `Some(0)`:
    /// causal).
    pub window_right: Option<usize>,
    /// Soft-capping of the scaled scores, `softcap · tanh(s / softcap)`
    /// (`None` or 0: none).
    pub softcap: Option<f32>,
    /// The kernel to run.
    pub kernel: AttentionKernel,
}

impl FlashAttnParams {
    /// Plain attention with `softmax_scale`, causal or not.
    pub fn new(softmax_scale: f32, causal: bool) -> FlashAttnParams {
        FlashAttnParams {
            softmax_scale,
            window_left: None,
            window_right: causal.then_some(0),
            softcap: None,
            kernel: AttentionKernel::Auto,
        }
    }
}

/// Device operands of a fused attention beside `q`, `k` and `v`, each a
/// storage with its layout.
#[derive(Clone, Copy, Default)]
pub struct FlashAttnExtras<'a> {
    /// ALiBi slopes: a contiguous f32 vector, one slope per query head.
    pub alibi_slopes: Option<(&'a HipStorage, &'a Layout)>,
    /// The keys of each sequence: a contiguous u32 vector, one length per
    /// batch element, read on the device (a KV cache of `s_k` positions
    /// filled to that length; longer counts as `s_k`). Sequence `b` then
    /// attends over keys `0..len_b` with its queries aligned to the end of
    /// them, as if `k` and `v` were cut to `len_b`. A captured graph thus
    /// serves every length. The decode kernel only (at most
    /// [`DECODE_MAX_QUERIES`] queries, or [`AttentionKernel::Decode`]).
    pub key_lens: Option<(&'a HipStorage, &'a Layout)>,
}

/// A device vector of `n` elements of `dtype` (`what` names it in errors).
fn device_vector<'a>(
    q: &HipStorage,
    what: &str,
    (x, l): (&'a HipStorage, &Layout),
    dtype: DType,
    n: usize,
) -> Result<hip_safe::DeviceView<'a, u8>> {
    q.check_device(x, OP)?;
    if x.dtype() != dtype || l.dims() != [n] || !l.is_contiguous() {
        return Err(invalid(
            OP,
            format!(
                "{what} must be a contiguous {dtype:?} vector of {n}, got {:?} {:?}",
                x.dtype(),
                l.dims()
            ),
        ));
    }
    x.view(OP, l)
}

/// `AttnArgs` of `attention.hip`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
struct AttnArgs {
    q_stride: [u64; 3],
    k_stride: [u64; 3],
    v_stride: [u64; 3],
    s_q: u32,
    s_k: u32,
    h_q: u32,
    h_k: u32,
    win_left: i32,
    win_right: i32,
    scale: f32,
    softcap: f32,
    split_keys: u32,
    splits: u32,
}

// SAFETY: `#[repr(C)]`, u64 arrays then 4-byte fields in the order of the C
// struct, which asserts the same size: no padding, every bit pattern valid.
unsafe impl DeviceRepr for AttnArgs {}
const _: () = assert!(std::mem::size_of::<AttnArgs>() == 9 * 8 + 10 * 4);

/// An operand's sizes and its strides for the batch, sequence and head
/// dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Operand {
    dims: [usize; 4],
    stride: [usize; 3],
}

/// The operand of `layout` when the kernels can read it in place: rank 4,
/// unit-stride head dim, the start and every stride whole 16-byte packs.
/// `Ok(None)` when it must be copied first.
fn operand(what: &str, layout: &Layout) -> Result<Option<Operand>> {
    let dims: [usize; 4] = layout.dims().try_into().map_err(|_| {
        invalid(
            OP,
            format!(
                "{what} must have rank 4 (batch, seq, heads, head_dim), got {:?}",
                layout.dims()
            ),
        )
    })?;
    let st = layout.stride();
    let pack = |s: usize| s.is_multiple_of(8);
    let in_place = st[3] == 1 && pack(layout.start_offset()) && st[..3].iter().all(|&s| pack(s));
    Ok(in_place.then_some(Operand {
        dims,
        stride: [st[0], st[1], st[2]],
    }))
}

/// `x` as the kernels read it, with the layout to read it through: itself,
/// or a contiguous copy (into `copy`) when [`operand`] refuses its layout or
/// its buffer is not 16-byte aligned.
fn readable<'a>(
    what: &str,
    x: &'a HipStorage,
    layout: &Layout,
    copy: &'a mut Option<HipStorage>,
) -> Result<(&'a HipStorage, Layout, Operand)> {
    let aligned = (x.buffer().device_ptr() as usize).is_multiple_of(16);
    if let Some(op) = operand(what, layout)?.filter(|_| aligned) {
        return Ok((x, layout.clone(), op));
    }
    let len = layout.shape().elem_count();
    // SAFETY: copy_strided_src writes every element of the copy.
    let mut dst = unsafe { x.device().alloc_storage(x.dtype(), len) }?;
    x.copy_strided_src(&mut dst, 0, layout)?;
    let contiguous = Layout::contiguous(layout.shape());
    let op = operand(what, &contiguous)?.ok_or_else(|| {
        invalid(
            OP,
            format!(
                "{what}: a contiguous copy of {:?} is not readable",
                layout.dims()
            ),
        )
    })?;
    Ok((copy.insert(dst), contiguous, op))
}

/// The kernel family of a head dim.
fn families(d: usize) -> Option<[&'static Family; 4]> {
    Some(match d {
        32 => [
            &cat::FLASH_ATTN_D32,
            &cat::FLASH_DECODE_D32,
            &cat::FLASH_COMBINE_D32,
            &cat::FLASH_COMBINE_ROUND_D32,
        ],
        64 => [
            &cat::FLASH_ATTN_D64,
            &cat::FLASH_DECODE_D64,
            &cat::FLASH_COMBINE_D64,
            &cat::FLASH_COMBINE_ROUND_D64,
        ],
        80 => [
            &cat::FLASH_ATTN_D80,
            &cat::FLASH_DECODE_D80,
            &cat::FLASH_COMBINE_D80,
            &cat::FLASH_COMBINE_ROUND_D80,
        ],
        96 => [
            &cat::FLASH_ATTN_D96,
            &cat::FLASH_DECODE_D96,
            &cat::FLASH_COMBINE_D96,
            &cat::FLASH_COMBINE_ROUND_D96,
        ],
        128 => [
            &cat::FLASH_ATTN_D128,
            &cat::FLASH_DECODE_D128,
            &cat::FLASH_COMBINE_D128,
            &cat::FLASH_COMBINE_ROUND_D128,
        ],
        256 => [
            &cat::FLASH_ATTN_D256,
            &cat::FLASH_DECODE_D256,
            &cat::FLASH_COMBINE_D256,
            &cat::FLASH_COMBINE_ROUND_D256,
        ],
        _ => return None,
    })
}

/// A window bound as the kernels take it.
fn window(w: Option<usize>) -> i32 {
    w.map_or(UNBOUNDED, |w| w.min(UNBOUNDED as usize) as i32)
}

/// Waves per prefill block for head dim `d` (`ATTN_WAVES` of
/// `attention.hip`): 16 query rows each.
fn prefill_waves(d: usize) -> u32 {
    if d > 128 { 2 } else { 4 }
}

/// Waves per decode block for head dim `d` on a device of architecture
/// `arch` (`ATTN_DECODE_WAVES` of `attention.hip`): 16 keys of a tile each,
/// tiles of 64 keys on the NVIDIA test platform (`sm_*`) and 32 on AMD,
/// one wave for head dim 256.
fn decode_waves(d: usize, arch: &str) -> u32 {
    match (d > 128, arch.starts_with("sm_")) {
        (true, _) => 1,
        (false, true) => 4,
        (false, false) => 2,
    }
}

/// Values a block of `flash_combine_round_d*` merges and rounds
/// (`CH_MERGE_ROUND_VALUES` of `attention.hip`), one a thread.
const MERGE_ROUND_VALUES: usize = 256;

/// Query rows per decode block (`CH_DECODE_ROWS` of `attention.hip`).
const DECODE_ROWS: usize = 16;

/// Decode blocks per compute unit that the splits aim at, at most: three
/// measured faster than four or eight on the test platform, and on AMD
/// three blocks of two waves fit a CDNA unit's 64 KiB of shared memory.
const DECODE_BLOCKS_PER_UNIT: usize = 3;

/// 32-bit registers of an NVIDIA streaming multiprocessor (every
/// architecture the test platform runs).
const NVIDIA_REGISTERS_PER_UNIT: usize = 65536;

/// Decode blocks per compute unit on the test platform, for a kernel of
/// `registers` registers a lane in blocks of `threads`: as many as a unit's
/// registers hold, up to [`DECODE_BLOCKS_PER_UNIT`]. (Head dim 128 loads a
/// whole K and V tile at once, 206 registers a lane: two blocks, which
/// measured faster than three blocks of a kernel loading less at once.) AMD
/// targets take [`DECODE_BLOCKS_PER_UNIT`].
fn nvidia_decode_blocks_per_unit(registers: u32, threads: u32) -> usize {
    let per_block = (registers as usize).max(1) * (threads as usize).max(1);
    (NVIDIA_REGISTERS_PER_UNIT / per_block).clamp(1, DECODE_BLOCKS_PER_UNIT)
}

/// Key splits for decoding: about `per_unit` blocks per compute unit, each
/// split at least [`MIN_SPLIT_KEYS`] keys, at most [`MAX_SPLITS`] splits.
fn decode_splits(s_k: usize, blocks: usize, per_unit: usize, compute_units: usize) -> usize {
    let wanted = (per_unit * compute_units) / blocks.max(1);
    wanted.clamp(1, s_k.div_ceil(MIN_SPLIT_KEYS).clamp(1, MAX_SPLITS))
}

/// Fused attention of `q` (batch, s_q, h_q, d) over `k` and `v` (batch,
/// s_k, h_k, d), with the ALiBi slopes and key lengths of `extras` when
/// given. Returns a contiguous (batch, s_q, h_q, d) storage of q's dtype.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn(
    q: &HipStorage,
    q_l: &Layout,
    k: &HipStorage,
    k_l: &Layout,
    v: &HipStorage,
    v_l: &Layout,
    extras: FlashAttnExtras,
    params: &FlashAttnParams,
) -> candle_core::Result<HipStorage> {
    match attend(q, q_l, k, k_l, v, v_l, extras, params)? {
        Attended::Output(out) => Ok(out),
        Attended::Splits(splits) => splits.merge(),
    }
}

/// What the attention kernels of [`attend`] left.
pub(crate) enum Attended {
    /// The output, as [`flash_attn`] returns it.
    Output(HipStorage),
    /// Flash-decoding's records of each key split, to merge.
    Splits(Splits),
}

/// The records of flash-decoding's key splits, for every (batch, head,
/// query) row: the unnormalised partial output, the maximum and the sum of
/// each split (d + 2 floats).
pub(crate) struct Splits {
    part: HipStorage,
    args: AttnArgs,
    batch: usize,
    head_dim: usize,
    dtype: DType,
}

impl Splits {
    /// The number of values of each (batch, query) row of the output:
    /// every head's.
    pub(crate) fn row_width(&self) -> usize {
        self.args.h_q as usize * self.head_dim
    }

    /// The (batch, query) rows of the output.
    pub(crate) fn rows(&self) -> usize {
        self.batch * self.args.s_q as usize
    }

    /// The dtype of the attention's output.
    pub(crate) fn dtype(&self) -> DType {
        self.dtype
    }

    /// The merge of the splits into [`flash_attn`]'s output.
    fn merge(self) -> candle_core::Result<HipStorage> {
        let (args, d) = (&self.args, self.head_dim);
        let device = self.part.device();
        let launcher = device.kernels();
        let len = size::mul(OP, "the output", self.rows() * args.h_q as usize, d)?;
        // SAFETY: the merge writes every element: one block per (query,
        // head) and batch, a thread per element of the head.
        let mut out = unsafe { device.alloc_storage(self.dtype, len) }?;
        let pr = self.part.view_range(OP, 0, self.part.len())?;
        let o = out.view_all_mut();
        let wave = launcher.wave_size() as usize;
        let cfg = LaunchConfig {
            grid_dim: (
                to_u32(OP, "queries x heads", args.s_q as usize * args.h_q as usize)?,
                to_u32(OP, "batch", self.batch)?,
                1,
            ),
            block_dim: (to_u32(OP, "merge threads", d.next_multiple_of(wave))?, 1, 1),
            shared_mem_bytes: 0,
        };
        let kernel = self.families()?[2].kernel(OP, self.dtype)?;
        // SAFETY: flash_combine_d<D>_T takes (AttnArgs, const float* part,
        // T* o); part holds the records of b*h_q*s_q rows of `splits`
        // splits, o b*s_q*h_q*d elements; one block of d threads rounded up
        // to whole waves per (query, head) and batch.
        unsafe { launcher.launch(kernel, cfg, &[args, &pr, &o]) }?;
        Ok(out)
    }

    /// The merge rounded for a product against GGML blocks whose vec-dot
    /// type is `act` (`flash_combine_round_d<D>`: 0 q8_0, 1 q8_1, 2 q8k)
    /// instead of written: each row's integers into `q` (row r from r *
    /// [`row_width`](Splits::row_width) on), its scales and sums into `d`
    /// and `s` (one per 32 values), as `quantize_act` rounds the merged
    /// output. The row width must be whole blocks of the activation type
    /// (the caller checks it against the weights); the views are checked
    /// here.
    pub(crate) fn merge_rounded(
        &self,
        act: u32,
        q: &DeviceViewMut<'_, u8>,
        d: &DeviceViewMut<'_, u8>,
        s: &DeviceViewMut<'_, u8>,
    ) -> candle_core::Result<()> {
        let count = size::mul(OP, "the rounded rows", self.rows(), self.row_width())?;
        let scales = size::mul(OP, "the scales", count / 32, 4)?;
        if !count.is_multiple_of(32) || q.len() < count || d.len() < scales || s.len() < scales {
            return Err(invalid(
                OP,
                format!(
                    "{count} merged values do not fit the rounding's {} integers and {} / {} \
                     scale bytes",
                    q.len(),
                    d.len(),
                    s.len()
                ),
            ));
        }
        let launcher = self.part.device().kernels();
        let cfg = LaunchConfig {
            grid_dim: (
                to_u32(
                    OP,
                    "merge blocks",
                    self.row_width().div_ceil(MERGE_ROUND_VALUES),
                )?,
                self.args.s_q,
                to_u32(OP, "batch", self.batch)?,
            ),
            block_dim: (MERGE_ROUND_VALUES as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let pr = self.part.view_range(OP, 0, self.part.len())?;
        let kernel = self.families()?[3].kernel(OP, self.dtype)?;
        // SAFETY: flash_combine_round_d<D>_T takes (AttnArgs, const float*
        // part, i8* q, float* d, float* s, u32 act); part holds the records
        // of b*h_q*s_q rows, q `count` bytes, d and s count / 32 floats
        // (checked above); the grid covers (row blocks of 256 values, s_q,
        // b) with 256 threads a block.
        unsafe { launcher.launch(kernel, cfg, &[&self.args, &pr, q, d, s, &act]) }
    }

    /// The kernel families of the head dim.
    fn families(&self) -> candle_core::Result<[&'static Family; 4]> {
        families(self.head_dim)
            .ok_or_else(|| invalid(OP, format!("head_dim {} has no kernel", self.head_dim)))
    }
}

/// [`flash_attn`] up to flash-decoding's merge: the output, or (more than
/// one key split) the splits' records.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend(
    q: &HipStorage,
    q_l: &Layout,
    k: &HipStorage,
    k_l: &Layout,
    v: &HipStorage,
    v_l: &Layout,
    extras: FlashAttnExtras,
    params: &FlashAttnParams,
) -> candle_core::Result<Attended> {
    for other in [k, v] {
        q.check_device(other, OP)?;
        q.check_dtype(other, OP)?;
    }
    let dtype = q.dtype();
    if !matches!(dtype, DType::F16 | DType::BF16) {
        return Err(invalid(OP, format!("f16 and bf16 only, got {dtype:?}")));
    }
    let (mut qc, mut kc, mut vc) = (None, None, None);
    let (q, q_l, qo) = readable("q", q, q_l, &mut qc)?;
    let (k, k_l, ko) = readable("k", k, k_l, &mut kc)?;
    let (v, v_l, vo) = readable("v", v, v_l, &mut vc)?;
    let [b, s_q, h_q, d] = qo.dims;
    let [kb, s_k, h_k, kd] = ko.dims;
    if kb != b || kd != d || vo.dims != ko.dims {
        return Err(invalid(
            OP,
            format!(
                "q {:?}, k {:?} and v {:?} disagree: (batch, seq, heads, head_dim) with the same \
                 batch and head_dim, k and v of one shape",
                qo.dims, ko.dims, vo.dims
            ),
        ));
    }
    if h_k == 0 || !h_q.is_multiple_of(h_k) {
        return Err(invalid(
            OP,
            format!("{h_k} key/value heads must divide {h_q} query heads"),
        ));
    }
    let Some([prefill, decode, _, _]) = families(d) else {
        return Err(invalid(
            OP,
            format!("head_dim {d} has no kernel (supported: {HEAD_DIMS:?})"),
        ));
    };
    let softcap = params.softcap.unwrap_or(0.0);
    if !params.softmax_scale.is_finite() || !softcap.is_finite() || softcap < 0.0 {
        return Err(invalid(
            OP,
            format!(
                "softmax_scale {} and softcap {softcap} must be finite, softcap >= 0",
                params.softmax_scale
            ),
        ));
    }
    let alibi = extras
        .alibi_slopes
        .map(|x| device_vector(q, "alibi slopes (one per query head)", x, DType::F32, h_q))
        .transpose()?;
    let key_lens = extras
        .key_lens
        .map(|x| device_vector(q, "key lengths (one per sequence)", x, DType::U32, b))
        .transpose()?;
    let device = q.device();
    let len = size::product(OP, "the output", &[b, s_q, h_q, d])?;
    // SAFETY (every use): every element of the output is written by one of
    // the kernels below (every row of every head), or the output is empty.
    let alloc_out = || unsafe { device.alloc_storage(dtype, len) };
    if len == 0 {
        return Ok(Attended::Output(alloc_out()?));
    }
    let u32_of = |what, v| to_u32(OP, what, v);
    let mut args = AttnArgs {
        q_stride: qo.stride.map(|s| s as u64),
        k_stride: ko.stride.map(|s| s as u64),
        v_stride: vo.stride.map(|s| s as u64),
        s_q: u32_of("s_q", s_q)?,
        s_k: u32_of("s_k", s_k)?,
        h_q: u32_of("h_q", h_q)?,
        h_k: u32_of("h_k", h_k)?,
        win_left: window(params.window_left),
        win_right: window(params.window_right),
        scale: params.softmax_scale,
        softcap,
        split_keys: 0,
        splits: 0,
    };
    let (qv, kv, vv) = (q.view(OP, &q_l)?, k.view(OP, &k_l)?, v.view(OP, &v_l)?);
    let (slopes, lens) = (
        view_or_null(alibi.as_ref()),
        view_or_null(key_lens.as_ref()),
    );
    let launcher = device.kernels();
    let batch = u32_of("batch", b)?;
    let use_decode = match params.kernel {
        AttentionKernel::Auto => s_q <= DECODE_MAX_QUERIES,
        AttentionKernel::Prefill => false,
        AttentionKernel::Decode => true,
    };
    if !use_decode && key_lens.is_some() {
        return Err(invalid(
            OP,
            format!(
                "key lengths need the decode kernel: at most {DECODE_MAX_QUERIES} queries per \
                 sequence (got {s_q}) or AttentionKernel::Decode"
            ),
        ));
    }
    if !use_decode {
        let waves = prefill_waves(d);
        let rows_per_block = 16 * waves as usize;
        let cfg = LaunchConfig {
            grid_dim: (
                u32_of("query blocks", s_q.div_ceil(rows_per_block))?,
                args.h_q,
                batch,
            ),
            block_dim: (waves * launcher.wave_size(), 1, 1),
            shared_mem_bytes: 0,
        };
        let mut out = alloc_out()?;
        let o = out.view_all_mut();
        let kernel = prefill.kernel(OP, dtype)?;
        // SAFETY: flash_attn_d<D>_T takes (AttnArgs, const T* q, k, v, T* o,
        // const float* alibi); the views span every element the strides of
        // `args` reach for these dims, o holds b*s_q*h_q*d elements, alibi
        // h_q floats or is null; the grid covers (query blocks, h_q, b) with
        // ATTN_WAVES(d) waves per block.
        unsafe { launcher.launch(kernel, cfg, &[&args, &qv, &kv, &vv, &o, slopes]) }?;
        return Ok(Attended::Output(out));
    }

    // Flash-decoding: partial results per key split, then their merge; one
    // split writes the output itself.
    let per_kv = h_q / h_k;
    let row_groups = (s_q * per_kv).div_ceil(DECODE_ROWS);
    let blocks = size::product(OP, "the decode blocks", &[b, h_k, row_groups])?;
    let kernel = decode.kernel(OP, dtype)?;
    let arch = launcher.device().arch();
    let threads = decode_waves(d, arch) * launcher.wave_size();
    let per_unit = if arch.starts_with("sm_") {
        nvidia_decode_blocks_per_unit(launcher.registers(kernel)?, threads)
    } else {
        DECODE_BLOCKS_PER_UNIT
    };
    let splits = decode_splits(s_k, blocks, per_unit, launcher.compute_units() as usize);
    let split_keys = s_k.div_ceil(splits).max(1);
    let splits = s_k.div_ceil(split_keys).max(1);
    args.split_keys = u32_of("split_keys", split_keys)?;
    args.splits = u32_of("splits", splits)?;
    let merged = splits > 1;
    let part_len = match merged {
        true => size::product(OP, "the partial results", &[b, h_q, s_q, splits, d + 2])?,
        false => 0,
    };
    // SAFETY: the decode kernel writes the d + 2 floats of every (row,
    // split) before the merge reads them; with one split it writes none.
    let mut part = unsafe { device.alloc_storage(DType::F32, part_len) }?;
    let mut out = match merged {
        true => None,
        false => Some(alloc_out()?),
    };
    let cfg = LaunchConfig {
        grid_dim: (
            args.splits,
            u32_of("decode row groups", h_k * row_groups)?,
            batch,
        ),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    };
    {
        let part_view = part.view_all_mut();
        let out_view = out.as_mut().map(HipStorage::view_all_mut);
        let part_arg = mut_view_or_null(merged.then_some(&part_view));
        let out_arg = mut_view_or_null(out_view.as_ref());
        // SAFETY: flash_decode_d<D>_T takes (AttnArgs, const T* q, k, v,
        // float* part, const float* alibi, const u32* key_lens, T* o); views
        // as above, key_lens b u32 or null; either part holds
        // b*h_q*s_q*splits rows of d + 2 floats and o is null, or (one
        // split) part is null and o holds b*s_q*h_q*d elements; the grid
        // covers (splits, h_k * row groups, b).
        unsafe {
            launcher.launch(
                kernel,
                cfg,
                &[&args, &qv, &kv, &vv, part_arg, slopes, lens, out_arg],
            )
        }?;
    }
    if let Some(out) = out {
        return Ok(Attended::Output(out));
    }
    Ok(Attended::Splits(Splits {
        part,
        args,
        batch: b,
        head_dim: d,
        dtype,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_and_transposed_operands_are_read_in_place() {
        let l = Layout::contiguous((2, 7, 4, 64));
        let op = operand("q", &l).unwrap().unwrap();
        assert_eq!(op.stride, [7 * 4 * 64, 4 * 64, 64]);
        // (b, h, s, d) transposed to (b, s, h, d), as candle-transformers passes it.
        let t = Layout::contiguous((2, 4, 7, 80)).transpose(1, 2).unwrap();
        let op = operand("q", &t).unwrap().unwrap();
        assert_eq!(op.dims, [2, 7, 4, 80]);
        assert_eq!(op.stride, [4 * 7 * 80, 80, 7 * 80]);
    }

    #[test]
    fn unaligned_or_strided_head_dims_are_copied() {
        let l = Layout::contiguous_with_offset((1, 3, 2, 64), 4);
        assert_eq!(operand("q", &l).unwrap(), None);
        let t = Layout::contiguous((1, 2, 64, 3)).transpose(2, 3).unwrap();
        assert_eq!(operand("q", &t).unwrap(), None);
        let err = operand("k", &Layout::contiguous((3, 64)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("k must have rank 4"), "{err}");
    }

    #[test]
    fn windows_and_splits() {
        assert_eq!(window(None), UNBOUNDED);
        assert_eq!(window(Some(0)), 0);
        assert_eq!(window(Some(usize::MAX)), UNBOUNDED);
        // One block per (batch, kv head): 32 kv heads on 100 compute units
        // take 9 splits (288 blocks), not 10 (320, over 3 per unit).
        assert_eq!(decode_splits(4096, 32, 3, 100), 9);
        // Batch 8 of 8 kv heads on 132 units: 6 splits, 384 blocks.
        assert_eq!(decode_splits(4096, 64, 3, 132), 6);
        // Two blocks a unit: 4 splits, 256 blocks.
        assert_eq!(decode_splits(4096, 64, 2, 132), 4);
        // Blocks a unit on the test platform: as its registers allow, at most 3.
        assert_eq!(nvidia_decode_blocks_per_unit(206, 128), 2);
        assert_eq!(nvidia_decode_blocks_per_unit(128, 128), 3);
        assert_eq!(nvidia_decode_blocks_per_unit(255, 1024), 1);
        assert_eq!(nvidia_decode_blocks_per_unit(0, 128), 3);
        // Decode blocks: 64-key tiles on the test platform, 32 on AMD.
        assert_eq!(decode_waves(128, "sm_90"), 4);
        assert_eq!(decode_waves(128, "gfx942"), 2);
        assert_eq!(decode_waves(64, "gfx1100"), 2);
        assert_eq!(decode_waves(256, "sm_90"), 1);
        // Short caches are not split below MIN_SPLIT_KEYS keys.
        assert_eq!(decode_splits(60, 1, 3, 100), 1);
        assert_eq!(decode_splits(300, 1, 3, 100), 5);
        // Enough blocks already.
        assert_eq!(decode_splits(4096, 1000, 3, 100), 1);
        // A long cache on a large device: at most MAX_SPLITS.
        assert_eq!(decode_splits(1 << 20, 1, 3, 1000), MAX_SPLITS);
    }

    #[test]
    fn constants_match_the_kernel_source() {
        let src = candle_hip_kernels::ATTENTION;
        assert_eq!(src.define("CH_ATTN_UNBOUNDED"), Some("0x3fffffff"));
        assert_eq!(UNBOUNDED, 0x3fff_ffff);
        assert_eq!(
            src.define("CH_DECODE_MAX_SPLITS"),
            Some(MAX_SPLITS.to_string().as_str())
        );
        assert_eq!(
            src.define("CH_DECODE_ROWS"),
            Some(DECODE_ROWS.to_string().as_str())
        );
        assert_eq!(
            src.define("CH_MERGE_ROUND_VALUES"),
            Some(MERGE_ROUND_VALUES.to_string().as_str())
        );
    }

    #[test]
    fn every_head_dim_has_its_kernels() {
        for d in HEAD_DIMS {
            for f in families(d).unwrap() {
                assert!(f.name.ends_with(&format!("_d{d}")), "{}", f.name);
            }
        }
        assert!(families(72).is_none());
    }
}
