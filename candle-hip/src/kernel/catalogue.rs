//! The kernel catalogue: every kernel family of the sources in
//! `candle-hip-kernels`, the source that holds it and the dtypes it is
//! instantiated for, as typed constants (a misspelt family does not
//! compile).
//!
//! A kernel is named `<family>_<dtype>` or, for families with two dtypes,
//! `<family>_<first>_<second>` (e.g. `cast_f32_bf16`, `where_u8_bf16`);
//! a family that takes the dtype as an argument has no dtype suffix
//! (`qmatvec_q4k`). Unary and binary ops are reached from candle's
//! `UnaryOpT::KERNEL` / `BinaryOpT::KERNEL` names through [`candle_op`],
//! comparisons through [`CMP`] and [`cmp_accept`], reductions through
//! [`reduce_family`].
//!
//! Families that only move elements (copies, fills, selects, gathers,
//! scatters that overwrite) are instantiated for the [`Dtypes::Carriers`],
//! one dtype per element width; they carry the other dtypes
//! ([`Carry`]): a lookup for i16 gets the bf16 kernel, for f8e4m3 the u8 one
//! (`dtype::carrier`). Families that compute are instantiated per dtype.

use candle_core::DType;
use candle_core::op::{CmpOp, ReduceOp};
use candle_core::quantized::GgmlDType;
use candle_hip_kernels::{self as sources, Source};

use crate::dtype::{
    self, ACTIVATIONS, ANY_FLOAT, CARRIERS, CORE, CORE_AND_F8, FLOATS, HALVES, INDEX, INTS,
    NUMERIC, RAW, TILE_CONVERTED_IDS, WIDENED_IDS,
};
use crate::error::Result;

/// A group of dtypes a family is instantiated for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Dtypes {
    /// Every dtype with arithmetic: u8, u32, i16, i32, i64, f16, bf16, f32,
    /// f64, f8e4m3.
    Numeric,
    /// u8, u32, i64, f16, bf16, f32, f64: every element width.
    Core,
    /// [`Dtypes::Core`] and f8e4m3.
    CoreAndF8,
    /// u8, bf16, u32, i64: one dtype per element width.
    Carriers,
    /// f16, bf16, f32, f64.
    Floats,
    /// f16, bf16, f32, f64, f8e4m3.
    AnyFloat,
    /// f16, bf16, f32.
    Activations,
    /// f16, bf16 and f32 in one kernel that takes the dtype as an argument
    /// (`header::dtype_code`): named without a dtype suffix, its
    /// `Kernel::first` is f32 whichever dtype it serves.
    ActivationArgument,
    /// f16, bf16.
    Halves,
    /// u8, u32, i16, i32, i64 (where_cond predicates).
    Ints,
    /// u8, i16, i32 (indices widened to i64 before an indexing kernel).
    WidenedIds,
    /// u8, i16, i32, i64 (indices converted to u32 before a tile form).
    TileConvertedIds,
}

impl Dtypes {
    /// The dtypes of the group.
    pub(crate) fn list(self) -> &'static [DType] {
        match self {
            Dtypes::Numeric => &NUMERIC,
            Dtypes::Core => &CORE,
            Dtypes::CoreAndF8 => &CORE_AND_F8,
            Dtypes::Carriers => &CARRIERS,
            Dtypes::Floats => &FLOATS,
            Dtypes::AnyFloat => &ANY_FLOAT,
            Dtypes::Activations => &ACTIVATIONS,
            Dtypes::ActivationArgument => &[DType::F32],
            Dtypes::Halves => &HALVES,
            Dtypes::Ints => &INTS,
            Dtypes::WidenedIds => &WIDENED_IDS,
            Dtypes::TileConvertedIds => &TILE_CONVERTED_IDS,
        }
    }
}

/// Which dtypes outside its group a family serves with the kernel of the
/// group dtype of the same element width (`dtype::carrier`): the families
/// that move elements without looking at them. Only the last dtype suffix
/// (the value dtype) is carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Carry {
    /// None: a kernel per dtype of the group.
    Nothing,
    /// Every dtype with arithmetic ([`Dtypes::Numeric`]).
    Numeric,
    /// Every stored dtype, candle's dummy dtypes (raw bytes) included.
    Stored,
}

impl Carry {
    /// Whether `dtype` is carried.
    fn takes(self, dtype: DType) -> bool {
        match self {
            Carry::Nothing => false,
            Carry::Numeric => NUMERIC.contains(&dtype),
            Carry::Stored => NUMERIC.contains(&dtype) || RAW.contains(&dtype),
        }
    }
}

/// The GGML block types with kernels of their own (`quantized.hip`): every
/// type candle-core reads except the plain f32, f16 and bf16 ones.
pub(crate) const BLOCK_TYPES: [GgmlDType; 12] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q8_1,
    GgmlDType::Q2K,
    GgmlDType::Q3K,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
    GgmlDType::Q8K,
];

/// Every block type, for the families with a kernel per block type.
const ALL_BLOCKS: &[GgmlDType] = &BLOCK_TYPES;

/// The block types of 32 values (`CH_EACH_BLOCK32` in `quantized.hip`).
const BLOCKS_OF_32: &[GgmlDType] = BLOCK_TYPES.split_at(6).0;

/// The k-quants, blocks of 256 values (`CH_EACH_BLOCK256`).
const BLOCKS_OF_256: &[GgmlDType] = BLOCK_TYPES.split_at(6).1;

/// The blocks of 32 values whose few-rows mat-vec has a split form
/// (`qmatvec_few_split_*`, part 4 of `quantized.hip`).
const SPLIT_BLOCKS_OF_32: &[GgmlDType] = &[GgmlDType::Q4_0, GgmlDType::Q8_0];

/// The k-quants whose few-rows mat-vec has a split form (part 5).
const SPLIT_BLOCKS_OF_256: &[GgmlDType] = &[GgmlDType::Q6K];

/// The block types activations are rounded to, the vec-dot types of the
/// weights' blocks (`CH_EACH_ACT` in `quantized.hip`; `quantized.rs`
/// `activation_type`): every weight type of one vec-dot type shares its
/// rounding kernel.
const ACTIVATION_BLOCKS: &[GgmlDType] = &[GgmlDType::Q8_0, GgmlDType::Q8_1, GgmlDType::Q8K];

/// The name suffix of a block type (`q4_0`, `q4k`, ...).
pub(crate) fn block_name(block: GgmlDType) -> &'static str {
    match block {
        GgmlDType::Q4_0 => "q4_0",
        GgmlDType::Q4_1 => "q4_1",
        GgmlDType::Q5_0 => "q5_0",
        GgmlDType::Q5_1 => "q5_1",
        GgmlDType::Q8_0 => "q8_0",
        GgmlDType::Q8_1 => "q8_1",
        GgmlDType::Q2K => "q2k",
        GgmlDType::Q3K => "q3k",
        GgmlDType::Q4K => "q4k",
        GgmlDType::Q5K => "q5k",
        GgmlDType::Q6K => "q6k",
        GgmlDType::Q8K => "q8k",
        GgmlDType::F32 => "f32",
        GgmlDType::F16 => "f16",
        GgmlDType::BF16 => "bf16",
    }
}

/// A family of kernels: one template instantiated per dtype (pair), and
/// per GGML block type for the families of quantized blocks.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct Family {
    /// Name prefix of the kernels.
    pub(crate) name: &'static str,
    /// The source holding them.
    pub(crate) source: Source,
    /// The part of the source (`#if CH_PART(n)`) holding them, or 0 for a
    /// source without parts.
    pub(crate) part: u8,
    /// The GGML block types with a kernel each (named
    /// `<family>_<block>_<dtype>`); empty for the families of plain dtypes.
    pub(crate) blocks: &'static [GgmlDType],
    /// Dtypes of the first name suffix.
    pub(crate) first: Dtypes,
    /// Dtypes of the second name suffix, for two-dtype families.
    pub(crate) second: Option<Dtypes>,
    /// The dtypes outside the last group that the family serves too.
    pub(crate) carry: Carry,
    /// The dtypes outside its group that the family computes in a wider
    /// dtype ([`Family::computed_as`]), for the one-dtype families.
    pub(crate) widen: Option<Dtypes>,
}

/// One kernel: a family and its dtype suffix(es).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Kernel {
    /// The family.
    pub(crate) family: &'static Family,
    /// The block type, for families of quantized blocks.
    pub(crate) block: Option<GgmlDType>,
    /// First dtype suffix.
    pub(crate) first: DType,
    /// Second dtype suffix, for two-dtype families.
    pub(crate) second: Option<DType>,
}

impl Kernel {
    /// The `extern "C"` name in the source.
    pub(crate) fn name(&self) -> String {
        let family = match self.block {
            Some(block) => format!("{}_{}", self.family.name, block_name(block)),
            None => self.family.name.to_string(),
        };
        match self.second {
            None if self.family.first == Dtypes::ActivationArgument => family,
            None => format!("{family}_{}", self.first.as_str()),
            Some(second) => format!("{family}_{}_{}", self.first.as_str(), second.as_str()),
        }
    }

    /// The source holding the kernel.
    pub(crate) fn source(&self) -> Source {
        self.family.source
    }
}

impl Family {
    /// Whether the family's kernels read contiguous inputs only
    /// (`map_contiguous` in `common.h`): the element-wise ops with one input,
    /// unary ops and casts, whose strided inputs the host copies to
    /// contiguous ones first. Without a strided path, those kernels have
    /// less than half the code and compile time.
    pub(crate) fn reads_contiguous(&self) -> bool {
        self.source == sources::UNARY || self.source == sources::CAST
    }

    /// The dtype this family computes `dtype` in: `dtype` itself, except
    /// for the dtypes outside its group that it widens (`widens` in the
    /// table): i16 and i32 as i64, f8e4m3 as f32. The wide dtype holds
    /// every value of the narrow one, so the host converts the operands,
    /// runs the wide kernel and converts the result back, and gets what a
    /// kernel of the narrow dtype gives: integer results wrap, f8e4m3 ones
    /// round once from f32, positions and comparisons are the same. Only
    /// families whose narrow kernels would compute exactly that widen
    /// (each of their ops is checked against candle's CPU backend in the
    /// dtype suite). A lookup of the dtype returned may still fail.
    pub(crate) fn computed_as(&self, dtype: DType) -> DType {
        let wider = match dtype {
            DType::I16 | DType::I32 => DType::I64,
            DType::F8E4M3 => DType::F32,
            _ => return dtype,
        };
        let widened = !self.first.list().contains(&dtype)
            && self
                .widen
                .is_some_and(|group| group.list().contains(&dtype));
        if widened { wider } else { dtype }
    }

    /// The kernel of this one-dtype family for `dtype`, or candle's
    /// `UnsupportedDTypeForOp` error naming `op`.
    pub(crate) fn kernel(&'static self, op: &'static str, dtype: DType) -> Result<Kernel> {
        self.instance(op, dtype, None)
    }

    /// The kernel of this family of quantized blocks for `block` and
    /// `dtype`, or an error naming `op`, the block type and the dtype.
    pub(crate) fn quantized(
        &'static self,
        op: &'static str,
        block: GgmlDType,
        dtype: DType,
    ) -> Result<Kernel> {
        if !self.blocks.contains(&block) {
            return Err(candle_core::Error::Msg(format!(
                "candle-hip: {op} has no kernel for {block:?} blocks"
            )));
        }
        match self.resolve(self.first, dtype, true) {
            Some(first) if self.second.is_none() => Ok(Kernel {
                family: self,
                block: Some(block),
                first,
                second: None,
            }),
            _ => Err(candle_core::Error::UnsupportedDTypeForOp(dtype, op).bt()),
        }
    }

    /// The kernel of this two-dtype family for `first` and `second`.
    pub(crate) fn pair(
        &'static self,
        op: &'static str,
        first: DType,
        second: DType,
    ) -> Result<Kernel> {
        self.instance(op, first, Some(second))
    }

    fn instance(
        &'static self,
        op: &'static str,
        first: DType,
        second: Option<DType>,
    ) -> Result<Kernel> {
        let unsupported = |dtype| Err(candle_core::Error::UnsupportedDTypeForOp(dtype, op).bt());
        if !self.blocks.is_empty() {
            return Err(candle_core::Error::Msg(format!(
                "candle-hip: kernel family {} takes a GGML block type",
                self.name
            )));
        }
        match (self.second, second) {
            (None, None) => match self.resolve(self.first, first, true) {
                Some(first) => Ok(Kernel {
                    family: self,
                    block: None,
                    first,
                    second: None,
                }),
                None => unsupported(first),
            },
            (Some(group), Some(d)) => {
                if self.resolve(self.first, first, false).is_none() {
                    return unsupported(first);
                }
                match self.resolve(group, d, true) {
                    Some(d) => Ok(Kernel {
                        family: self,
                        block: None,
                        first,
                        second: Some(d),
                    }),
                    None => unsupported(d),
                }
            }
            _ => Err(candle_core::Error::Msg(format!(
                "candle-hip: kernel family {} takes {} dtype(s)",
                self.name,
                1 + usize::from(self.second.is_some())
            ))),
        }
    }

    /// The kernel dtype for `dtype` in a suffix of `group`: itself, or when
    /// `last` (the carried suffix) and the family carries it, its carrier;
    /// f32 for every dtype a kernel of [`Dtypes::ActivationArgument`] takes.
    fn resolve(&self, group: Dtypes, dtype: DType, last: bool) -> Option<DType> {
        if group == Dtypes::ActivationArgument {
            ACTIVATIONS.contains(&dtype).then_some(DType::F32)
        } else if group.list().contains(&dtype) {
            Some(dtype)
        } else if last && self.carry.takes(dtype) {
            Some(dtype::carrier(dtype)).filter(|c| group.list().contains(c))
        } else {
            None
        }
    }

    /// Every kernel of the family.
    pub(crate) fn kernels(&'static self) -> Vec<Kernel> {
        let seconds: Vec<Option<DType>> = match self.second {
            None => vec![None],
            Some(group) => group.list().iter().copied().map(Some).collect(),
        };
        let blocks: Vec<Option<GgmlDType>> = if self.blocks.is_empty() {
            vec![None]
        } else {
            self.blocks.iter().copied().map(Some).collect()
        };
        let seconds = &seconds;
        blocks
            .iter()
            .flat_map(|&block| {
                self.first.list().iter().flat_map(move |&first| {
                    seconds.iter().map(move |&second| Kernel {
                        family: self,
                        block,
                        first,
                        second,
                    })
                })
            })
            .collect()
    }
}

/// Defines one `Family` constant per line (`NAME = "prefix" in SOURCE
/// [part N]: dtypes [x dtypes] [carries Carry] [widens dtypes] [per
/// BLOCK_LIST];`) and [`FAMILIES`], the list of all of them.
macro_rules! families {
    ($($konst:ident = $name:literal in $source:ident $(part $part:literal)?: $first:ident
        $(x $second:ident)? $(carries $carry:ident)? $(widens $widen:ident)?
        $(per $block:ident)?;)*) => {
        $(
            #[doc = concat!("`", $name, "_*` in `", stringify!($source), "`.")]
            pub(crate) const $konst: Family = Family {
                name: $name,
                source: sources::$source,
                part: families!(@part $($part)?),
                blocks: families!(@blocks $($block)?),
                first: Dtypes::$first,
                second: families!(@second $($second)?),
                carry: families!(@carry $($carry)?),
                widen: families!(@second $($widen)?),
            };
        )*
        /// Every kernel family of the sources.
        pub(crate) const FAMILIES: &[&Family] = &[$(&$konst),*];
    };
    (@part) => { 0 };
    (@part $part:literal) => { $part };
    (@second) => { None };
    (@second $second:ident) => { Some(Dtypes::$second) };
    (@blocks) => { &[] };
    (@blocks $blocks:ident) => { $blocks };
    (@carry) => { Carry::Nothing };
    (@carry $carry:ident) => { Carry::$carry };
}

families! {
    UEXP = "uexp" in UNARY: AnyFloat;
    ULOG = "ulog" in UNARY: AnyFloat;
    USIN = "usin" in UNARY: AnyFloat;
    UCOS = "ucos" in UNARY: AnyFloat;
    UTANH = "utanh" in UNARY: AnyFloat;
    UNEG = "uneg" in UNARY: AnyFloat;
    URECIP = "urecip" in UNARY: AnyFloat;
    USQR = "usqr" in UNARY: AnyFloat;
    USQRT = "usqrt" in UNARY: AnyFloat;
    UGELU = "ugelu" in UNARY: AnyFloat;
    UGELU_ERF = "ugelu_erf" in UNARY: AnyFloat;
    UERF = "uerf" in UNARY: AnyFloat;
    USILU = "usilu" in UNARY: AnyFloat;
    URELU = "urelu" in UNARY: CoreAndF8 widens Numeric;
    UABS = "uabs" in UNARY: CoreAndF8 widens Numeric;
    UCEIL = "uceil" in UNARY: CoreAndF8 widens Numeric;
    UFLOOR = "ufloor" in UNARY: CoreAndF8 widens Numeric;
    UROUND = "uround" in UNARY: CoreAndF8 widens Numeric;
    USIGN = "usign" in UNARY: CoreAndF8 widens Numeric;
    AFFINE = "affine" in UNARY: Numeric;
    POWF = "powf" in UNARY: AnyFloat;
    ELU = "elu" in UNARY: AnyFloat;
    BADD = "badd" in BINARY: Core widens Numeric;
    BSUB = "bsub" in BINARY: Core widens Numeric;
    BMUL = "bmul" in BINARY: Core widens Numeric;
    BDIV = "bdiv" in BINARY: Core widens Numeric;
    BMAXIMUM = "bmaximum" in BINARY: Core widens Numeric;
    BMINIMUM = "bminimum" in BINARY: Core widens Numeric;
    CMP = "cmp" in BINARY: Core widens Numeric;
    CAST = "cast" in CAST: Numeric x Numeric;
    WIDEN_IDS = "widen_ids" in CAST: WidenedIds;
    TILE_IDS = "tile_ids" in CAST: TileConvertedIds;
    WHERE = "where" in WHERE: Ints x Carriers carries Numeric;
    REDUCE_SUM = "reduce_sum" in REDUCE part 1: Core widens Numeric;
    REDUCE_MINMAX = "reduce_minmax" in REDUCE part 2: Core widens Numeric;
    REDUCE_ARGMINMAX = "reduce_argminmax" in REDUCE part 3: Core widens Numeric;
    REDUCE_COLS_SUM = "reduce_cols_sum" in REDUCE part 1: Core widens Numeric;
    REDUCE_COLS_MINMAX = "reduce_cols_minmax" in REDUCE part 2: Core widens Numeric;
    REDUCE_COLS_ARGMINMAX = "reduce_cols_argminmax" in REDUCE part 3: Core widens Numeric;
    INDEX_SELECT = "index_select" in INDEXING part 1: Carriers carries Numeric;
    GATHER = "gather" in INDEXING part 1: Carriers carries Numeric;
    SCATTER = "scatter" in INDEXING part 2: Carriers carries Numeric;
    SCATTER_ADD = "scatter_add" in INDEXING part 2: CoreAndF8 widens Numeric;
    INDEX_ADD = "index_add" in INDEXING part 2: CoreAndF8 widens Numeric;
    INDEX_ADD_ROWS = "index_add_rows" in INDEXING part 2: CoreAndF8 widens Numeric;
    SCATTER_TILES = "scatter_tiles" in INDEXING part 3: Carriers carries Numeric;
    SCATTER_ADD_TILES = "scatter_add_tiles" in INDEXING part 4: CoreAndF8 widens Numeric;
    INDEX_ADD_TILES = "index_add_tiles" in INDEXING part 5: CoreAndF8 widens Numeric;
    UCOPY = "ucopy" in COPY: Carriers carries Stored;
    COPY2D = "copy2d" in COPY: Carriers carries Stored;
    TRANSPOSE = "transpose" in COPY: Carriers carries Stored;
    FILL = "fill" in COPY: Carriers carries Numeric;
    RAND_UNIFORM = "rand_uniform" in RANDOM: AnyFloat;
    RAND_NORMAL = "rand_normal" in RANDOM: AnyFloat;
    SOFTMAX = "softmax" in SOFTMAX: Floats;
    RMS_NORM = "rms_norm" in NORM: Floats;
    LAYER_NORM = "layer_norm" in NORM: Floats;
    ROPE_I = "rope_i" in ROPE: Floats;
    ROPE = "rope" in ROPE: Floats;
    ROPE_THD = "rope_thd" in ROPE: Floats;
    ROPE_APPEND = "rope_append" in ROPE: Floats;
    ROPE_I_APPEND = "rope_i_append" in ROPE: Floats;
    SIGMOID = "sigmoid" in SIGMOID: Floats;
    SILU_MUL = "silu_mul" in SIGMOID: Floats;
    ARGSORT_ASC = "argsort_asc" in ARGSORT: Core;
    ARGSORT_DESC = "argsort_desc" in ARGSORT: Core;
    ARGSORT_STEP_ASC = "argsort_step_asc" in ARGSORT: Core;
    ARGSORT_STEP_DESC = "argsort_step_desc" in ARGSORT: Core;
    MAX_POOL2D = "max_pool2d" in POOL: Core;
    AVG_POOL2D = "avg_pool2d" in POOL: Floats;
    UPSAMPLE_NEAREST2D = "upsample_nearest2d" in UPSAMPLE: Carriers carries Numeric;
    UPSAMPLE_BILINEAR2D = "upsample_bilinear2d" in UPSAMPLE: Floats;
    IM2COL = "im2col" in IM2COL: Floats;
    COL2IM = "col2im" in IM2COL: Floats;
    GEMV = "gemv" in GEMV part 1: Floats;
    GEMV_SPLIT = "gemv_split" in GEMV part 1: Floats;
    GEMV_FUSED = "gemv_fused" in GEMV part 1: Floats;
    GEMV_PAIRS = "gemv_pairs" in GEMV part 2: Floats;
    DEQUANTIZE = "dequantize" in QUANTIZED part 1: Activations per ALL_BLOCKS;
    QUANTIZE_ACT = "quantize_act" in QUANTIZED part 1: Activations per ACTIVATION_BLOCKS;
    QMATVEC32 = "qmatvec" in QUANTIZED part 2: ActivationArgument per BLOCKS_OF_32;
    QMATVEC256 = "qmatvec" in QUANTIZED part 3: ActivationArgument per BLOCKS_OF_256;
    QMATVEC_FEW32 = "qmatvec_few" in QUANTIZED part 4: ActivationArgument per BLOCKS_OF_32;
    QMATVEC_FEW256 = "qmatvec_few" in QUANTIZED part 5: ActivationArgument per BLOCKS_OF_256;
    QMATVEC_FEW_SPLIT32 = "qmatvec_few_split" in QUANTIZED part 4: ActivationArgument per SPLIT_BLOCKS_OF_32;
    QMATVEC_FEW_SPLIT256 = "qmatvec_few_split" in QUANTIZED part 5: ActivationArgument per SPLIT_BLOCKS_OF_256;
    FLASH_ATTN_D32 = "flash_attn_d32" in ATTENTION part 1: Halves;
    FLASH_ATTN_D64 = "flash_attn_d64" in ATTENTION part 1: Halves;
    FLASH_ATTN_D80 = "flash_attn_d80" in ATTENTION part 1: Halves;
    FLASH_ATTN_D96 = "flash_attn_d96" in ATTENTION part 1: Halves;
    FLASH_ATTN_D128 = "flash_attn_d128" in ATTENTION part 2: Halves;
    FLASH_ATTN_D256 = "flash_attn_d256" in ATTENTION part 3: Halves;
    FLASH_DECODE_D32 = "flash_decode_d32" in ATTENTION part 4: Halves;
    FLASH_DECODE_D64 = "flash_decode_d64" in ATTENTION part 4: Halves;
    FLASH_DECODE_D80 = "flash_decode_d80" in ATTENTION part 4: Halves;
    FLASH_DECODE_D96 = "flash_decode_d96" in ATTENTION part 4: Halves;
    FLASH_DECODE_D128 = "flash_decode_d128" in ATTENTION part 5: Halves;
    FLASH_DECODE_D256 = "flash_decode_d256" in ATTENTION part 5: Halves;
    FLASH_COMBINE_D32 = "flash_combine_d32" in ATTENTION part 4: Halves;
    FLASH_COMBINE_D64 = "flash_combine_d64" in ATTENTION part 4: Halves;
    FLASH_COMBINE_D80 = "flash_combine_d80" in ATTENTION part 4: Halves;
    FLASH_COMBINE_D96 = "flash_combine_d96" in ATTENTION part 4: Halves;
    FLASH_COMBINE_D128 = "flash_combine_d128" in ATTENTION part 5: Halves;
    FLASH_COMBINE_D256 = "flash_combine_d256" in ATTENTION part 5: Halves;
    FLASH_COMBINE_ROUND_D32 = "flash_combine_round_d32" in ATTENTION part 4: Halves;
    FLASH_COMBINE_ROUND_D64 = "flash_combine_round_d64" in ATTENTION part 4: Halves;
    FLASH_COMBINE_ROUND_D80 = "flash_combine_round_d80" in ATTENTION part 4: Halves;
    FLASH_COMBINE_ROUND_D96 = "flash_combine_round_d96" in ATTENTION part 4: Halves;
    FLASH_COMBINE_ROUND_D128 = "flash_combine_round_d128" in ATTENTION part 5: Halves;
    FLASH_COMBINE_ROUND_D256 = "flash_combine_round_d256" in ATTENTION part 5: Halves;
}

/// The family of candle's `UnaryOpT::KERNEL` or `BinaryOpT::KERNEL` name
/// (`uexp`, `badd`, `ucopy`, ...): candle names its ops by string, so this
/// is the one place a name is looked up (a test covers every candle op).
pub(crate) fn candle_op(kernel: &str) -> Option<&'static Family> {
    FAMILIES
        .iter()
        .copied()
        .filter(|f| f.source == sources::UNARY || f.source == sources::BINARY || *f == &UCOPY)
        .find(|f| f.name == kernel)
}

/// The kernel of indexing `family` for `values` and indices of dtype `ids`:
/// u32 or i64, which every indexing kernel reads (`IndexInfo::wide_ids`
/// tells which); other index dtypes are refused with candle's
/// `UnsupportedDTypeForOp` naming `op` (the ops widen u8, i16 and i32
/// indices to i64 first where candle's CPU backend takes them).
pub(crate) fn indexing_kernel(
    family: &'static Family,
    op: &'static str,
    ids: DType,
    values: DType,
) -> Result<Kernel> {
    if !INDEX.contains(&ids) {
        return Err(candle_core::Error::UnsupportedDTypeForOp(ids, op).bt());
    }
    family.kernel(op, values)
}

/// The outcomes of comparing a with b for which the [`CMP`] kernels answer
/// 1 under `op`: bit 0 less, 1 equal, 2 greater, 3 unordered (a NaN).
pub(crate) fn cmp_accept(op: CmpOp) -> u32 {
    match op {
        CmpOp::Eq => 0b0010,
        CmpOp::Ne => 0b1101,
        CmpOp::Lt => 0b0001,
        CmpOp::Le => 0b0011,
        CmpOp::Gt => 0b0100,
        CmpOp::Ge => 0b0110,
    }
}

/// The quantized mat-vec family of `block`, for few rows (`few`: at most
/// `CH_QMATVEC_FEW_ROWS`) or more: each is compiled in two units, one for
/// the blocks of 32 values and one for the k-quants, so that a first use
/// compiles a quarter of them.
pub(crate) fn qmatvec_family(block: GgmlDType, few: bool) -> &'static Family {
    match (QMATVEC32.blocks.contains(&block), few) {
        (true, false) => &QMATVEC32,
        (false, false) => &QMATVEC256,
        (true, true) => &QMATVEC_FEW32,
        (false, true) => &QMATVEC_FEW256,
    }
}

/// The few-rows mat-vec family of `block` with two waves per group of
/// outputs, if the block type has one (`matvec_split_family` in `quantized.rs`
/// says when it is taken).
pub(crate) fn qmatvec_split_family(block: GgmlDType) -> Option<&'static Family> {
    [&QMATVEC_FEW_SPLIT32, &QMATVEC_FEW_SPLIT256]
        .into_iter()
        .find(|f| f.blocks.contains(&block))
}

/// The reduction family of `op`: the general kernels, or (`packed`) those
/// of the COLS_PACKED mode (`reduce_cols_*`, outputs adjacent in memory).
/// Min and max share their kernels, as do argmin and argmax: their launch
/// takes the direction last ([`reduce_direction`]).
pub(crate) fn reduce_family(op: ReduceOp, packed: bool) -> &'static Family {
    match (op, packed) {
        (ReduceOp::Sum, false) => &REDUCE_SUM,
        (ReduceOp::Min | ReduceOp::Max, false) => &REDUCE_MINMAX,
        (ReduceOp::ArgMin | ReduceOp::ArgMax, false) => &REDUCE_ARGMINMAX,
        (ReduceOp::Sum, true) => &REDUCE_COLS_SUM,
        (ReduceOp::Min | ReduceOp::Max, true) => &REDUCE_COLS_MINMAX,
        (ReduceOp::ArgMin | ReduceOp::ArgMax, true) => &REDUCE_COLS_ARGMINMAX,
    }
}

/// The last argument of a min/max kernel launch (`largest`: 1 for max and
/// argmax, 0 for min and argmin); `None` for a sum, which takes none.
pub(crate) fn reduce_direction(op: ReduceOp) -> Option<u32> {
    match op {
        ReduceOp::Sum => None,
        ReduceOp::Min | ReduceOp::ArgMin => Some(0),
        ReduceOp::Max | ReduceOp::ArgMax => Some(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::backend::{BackendDevice, BackendStorage};
    use candle_core::cpu_backend::CpuDevice;
    use candle_core::op::{self, BinaryOpT, UnaryOpT};
    use candle_core::{CpuStorage, Layout, Shape};

    use crate::dtype::{ADD_ONLY_IDS, SUPPORTED};

    fn unary_kernels() -> [&'static str; 19] {
        [
            op::Exp::KERNEL,
            op::Log::KERNEL,
            op::Sin::KERNEL,
            op::Cos::KERNEL,
            op::Tanh::KERNEL,
            op::Neg::KERNEL,
            op::Recip::KERNEL,
            op::Sqr::KERNEL,
            op::Sqrt::KERNEL,
            op::Gelu::KERNEL,
            op::GeluErf::KERNEL,
            op::Erf::KERNEL,
            op::Silu::KERNEL,
            op::Relu::KERNEL,
            op::Abs::KERNEL,
            op::Ceil::KERNEL,
            op::Floor::KERNEL,
            op::Round::KERNEL,
            op::Sign::KERNEL,
        ]
    }

    /// The unary ops candle defines on integers (the others are left
    /// unimplemented or 0 in its `UnaryOpT` integer functions; candle-hip refuses them).
    const INTEGER_UNARY: [&str; 6] = ["urelu", "uabs", "uceil", "ufloor", "uround", "usign"];

    #[test]
    fn every_candle_op_marker_has_a_family() {
        for k in unary_kernels() {
            let f = candle_op(k).unwrap();
            assert_eq!(f.source, sources::UNARY, "{k}");
            for d in NUMERIC {
                let integer_op = INTEGER_UNARY.contains(&k);
                let expected = d.is_float() || integer_op;
                let served = f.kernel("unary", f.computed_as(d)).is_ok();
                assert_eq!(served, expected, "{k} {d:?}");
            }
            for d in RAW {
                assert!(f.kernel("unary", d).is_err(), "{k} {d:?}");
            }
        }
        for k in [
            op::Add::KERNEL,
            op::Sub::KERNEL,
            op::Mul::KERNEL,
            op::Div::KERNEL,
            op::Maximum::KERNEL,
            op::Minimum::KERNEL,
        ] {
            let f = candle_op(k).unwrap();
            assert_eq!(f.source, sources::BINARY, "{k}");
            for &d in &SUPPORTED {
                assert_eq!(
                    f.kernel("binary", f.computed_as(d)).is_ok(),
                    NUMERIC.contains(&d),
                    "{k} {d:?}"
                );
            }
        }
        assert!(candle_op("ufoo").is_none());
        assert!(candle_op("cast").is_none());
    }

    #[test]
    fn names_and_dtype_checks() {
        assert_eq!(UEXP.kernel("exp", DType::F16).unwrap().name(), "uexp_f16");
        assert_eq!(
            UEXP.kernel("exp", DType::F8E4M3).unwrap().name(),
            "uexp_f8e4m3"
        );
        let k = CAST.pair("to_dtype", DType::F32, DType::BF16).unwrap();
        assert_eq!(k.name(), "cast_f32_bf16");
        let k = CAST.pair("to_dtype", DType::I16, DType::F8E4M3).unwrap();
        assert_eq!(k.name(), "cast_i16_f8e4m3");
        let k = indexing_kernel(&INDEX_SELECT, "index_select", DType::I64, DType::U8).unwrap();
        assert_eq!(k.name(), "index_select_u8");
        assert_eq!(k.source(), sources::INDEXING);
        let err =
            indexing_kernel(&INDEX_SELECT, "index_select", DType::U8, DType::F32).unwrap_err();
        assert!(err.to_string().contains("U8"), "{err}");
        let err = UEXP.kernel("exp", DType::U32).unwrap_err().to_string();
        assert!(err.contains("U32") && err.contains("exp"), "{err}");
        let err = UEXP.kernel("exp", DType::I32).unwrap_err().to_string();
        assert!(err.contains("I32") && err.contains("exp"), "{err}");
        let err = WHERE
            .pair("where_cond", DType::F32, DType::F32)
            .unwrap_err();
        assert!(err.to_string().contains("F32"));
        assert!(CAST.kernel("to_dtype", DType::F32).is_err());
        assert!(UEXP.pair("exp", DType::F32, DType::F32).is_err());
        let err = CAST.pair("to_dtype", DType::F4, DType::F32).unwrap_err();
        assert!(err.to_string().contains("F4"), "{err}");
        let err = CAST
            .pair("to_dtype", DType::F32, DType::F8E8M0)
            .unwrap_err();
        assert!(err.to_string().contains("F8E8M0"), "{err}");
        assert_eq!(
            WIDEN_IDS.kernel("scatter-add", DType::I16).unwrap().name(),
            "widen_ids_i16"
        );
        assert_eq!(
            WIDEN_IDS.kernel("gather", DType::U8).unwrap().name(),
            "widen_ids_u8"
        );
        assert!(WIDEN_IDS.kernel("scatter-add", DType::U32).is_err());
    }

    #[test]
    fn moving_families_carry_other_dtypes_to_a_kernel_of_their_width() {
        let name = |f: &'static Family, d| f.kernel("op", d).unwrap().name();
        assert_eq!(name(&UCOPY, DType::I16), "ucopy_bf16");
        assert_eq!(name(&UCOPY, DType::I32), "ucopy_u32");
        assert_eq!(name(&UCOPY, DType::F8E4M3), "ucopy_u8");
        assert_eq!(name(&COPY2D, DType::F4), "copy2d_u8");
        assert_eq!(name(&TRANSPOSE, DType::F6E3M2), "transpose_u8");
        assert_eq!(name(&FILL, DType::I32), "fill_u32");
        assert_eq!(
            name(&UPSAMPLE_NEAREST2D, DType::F8E4M3),
            "upsample_nearest2d_u8"
        );
        // Dtypes of the group keep their own kernels.
        assert_eq!(name(&UCOPY, DType::BF16), "ucopy_bf16");
        assert_eq!(name(&UCOPY, DType::F16), "ucopy_bf16");
        assert_eq!(name(&FILL, DType::F32), "fill_u32");
        let select = WHERE.pair("op", DType::U8, DType::F64).unwrap();
        assert_eq!(select.name(), "where_u8_i64");
        // Dummy dtypes are copied, never filled, selected or computed with.
        for d in RAW {
            assert!(FILL.kernel("const_set", d).is_err(), "{d:?}");
            assert!(indexing_kernel(&INDEX_SELECT, "index_select", DType::U32, d).is_err());
            assert!(WHERE.pair("where_cond", DType::U8, d).is_err());
        }
        // Only the value dtype is carried: i16 indices are refused where
        // candle's CPU backend refuses them.
        let k = WHERE.pair("where_cond", DType::I16, DType::F8E4M3).unwrap();
        assert_eq!(k.name(), "where_i16_u8");
        let k = indexing_kernel(&GATHER, "gather", DType::U32, DType::I16).unwrap();
        assert_eq!(k.name(), "gather_bf16");
        assert!(indexing_kernel(&GATHER, "gather", DType::I16, DType::F32).is_err());
        assert!(indexing_kernel(&SCATTER, "scatter", DType::I32, DType::F32).is_err());
        // Families that compute do not carry; the adds widen i16 and i32.
        let k = indexing_kernel(&SCATTER_ADD, "scatter-add", DType::U32, DType::F8E4M3).unwrap();
        assert_eq!(k.name(), "scatter_add_f8e4m3");
        assert!(indexing_kernel(&SCATTER_ADD, "scatter-add", DType::U32, DType::I16).is_err());
        assert_eq!(SCATTER_ADD.computed_as(DType::I16), DType::I64);
        assert_eq!(SCATTER_ADD.computed_as(DType::F8E4M3), DType::F8E4M3);
        assert_eq!(BADD.computed_as(DType::F8E4M3), DType::F32);
        assert_eq!(BADD.computed_as(DType::F16), DType::F16);
        assert_eq!(UEXP.computed_as(DType::I32), DType::I32);
        assert!(CAST.pair("to_dtype", DType::F4, DType::U8).is_err());
        // Every carried lookup lands on a kernel the family has.
        for f in FAMILIES {
            let kernels = f.kernels();
            for &d in &SUPPORTED {
                let found = match f.second {
                    None => f.kernel("op", d).ok(),
                    Some(_) => f.pair("op", f.first.list()[0], d).ok(),
                };
                if let Some(k) = found {
                    assert!(kernels.contains(&k), "{} {d:?} -> {}", f.name, k.name());
                }
            }
        }
    }

    /// Whether candle's CPU backend runs `f` (it answers an error for the
    /// dtypes it does not take).
    fn cpu_ok<T>(f: impl FnOnce() -> candle_core::Result<T>) -> bool {
        f().is_ok()
    }

    /// The elements `values` as `dtype` (raw bytes for the dummy dtypes).
    fn sample_of(dtype: DType, values: [u8; 2]) -> CpuStorage {
        let raw = values.to_vec();
        match dtype {
            DType::F6E2M3 => CpuStorage::F6E2M3(raw),
            DType::F6E3M2 => CpuStorage::F6E3M2(raw),
            DType::F4 => CpuStorage::F4(raw),
            DType::F8E8M0 => CpuStorage::F8E8M0(raw),
            d => CpuStorage::U8(raw)
                .to_dtype(&Layout::contiguous(2), d)
                .unwrap(),
        }
    }

    /// Two nonzero elements of `dtype`.
    fn sample(dtype: DType) -> CpuStorage {
        sample_of(dtype, [2, 1])
    }

    /// For every dtype candle stores, the kernel lookups of the storage ops
    /// succeed exactly where candle's CPU backend computes the op (the
    /// indexing ops' u8, i16 and i32 indices through `widen_ids`).
    #[test]
    fn lookups_follow_the_cpu_backend() {
        let l = Layout::contiguous(2);
        // Indices into a dimension of 2.
        let ids = |d: DType| sample_of(d, [1, 0]);
        let f32s = sample(DType::F32);
        let both = |family: &'static Family, d: DType| family.kernel("op", d).is_ok();
        for &d in &SUPPORTED {
            let x = sample(d);
            let what = |op: &str| format!("{op} on {d:?}");
            for &to in &SUPPORTED {
                // candle 0.11.1's CPU backend has this conversion but never
                // finishes it: `WithDType::to_f64` of F8E4M3 calls itself
                // until the stack overflows.
                let cpu = (d, to) == (DType::F8E4M3, DType::F64) || cpu_ok(|| x.to_dtype(&l, to));
                assert_eq!(
                    CAST.pair("to_dtype", d, to).is_ok(),
                    cpu,
                    "{}",
                    what(&format!("to_dtype {to:?}"))
                );
            }
            macro_rules! binary {
                ($($op:ty => $family:ident),*) => {$(
                    assert_eq!(
                        both(&$family, $family.computed_as(d)),
                        cpu_ok(|| x.binary_impl::<$op>(&x, &l, &l)),
                        "{}",
                        what(<$op>::NAME)
                    );
                )*};
            }
            binary!(op::Add => BADD, op::Sub => BSUB, op::Mul => BMUL, op::Div => BDIV,
                op::Maximum => BMAXIMUM, op::Minimum => BMINIMUM);
            assert_eq!(
                CMP.kernel("cmp", CMP.computed_as(d)).is_ok(),
                cpu_ok(|| x.cmp(CmpOp::Lt, &x, &l, &l)),
                "{}",
                what("cmp")
            );
            assert_eq!(both(&AFFINE, d), cpu_ok(|| x.affine(&l, 2.0, 1.0)));
            assert_eq!(
                both(&POWF, d),
                cpu_ok(|| x.powf(&l, 2.0)),
                "{}",
                what("powf")
            );
            assert_eq!(both(&ELU, d), cpu_ok(|| x.elu(&l, 1.0)), "{}", what("elu"));
            for op in [
                ReduceOp::Sum,
                ReduceOp::Min,
                ReduceOp::Max,
                ReduceOp::ArgMin,
                ReduceOp::ArgMax,
            ] {
                let cpu = cpu_ok(|| x.reduce_op(op, &l, &[0]));
                for packed in [false, true] {
                    let family = reduce_family(op, packed);
                    assert_eq!(
                        both(family, family.computed_as(d)),
                        cpu,
                        "{}",
                        what("reduce")
                    );
                }
            }
            // where_cond: `d` as the predicate, then as the values.
            assert_eq!(
                WHERE.pair("where_cond", d, DType::F32).is_ok(),
                cpu_ok(|| x.where_cond(&l, &f32s, &l, &f32s, &l)),
                "{}",
                what("where_cond predicate")
            );
            let pred = sample(DType::U8);
            assert_eq!(
                WHERE.pair("where_cond", DType::U8, d).is_ok(),
                cpu_ok(|| pred.where_cond(&l, &x, &l, &x, &l)),
                "{}",
                what("where_cond values")
            );
            // Indexing: `d` as the values (u32 indices), then as the indices.
            let u32s = ids(DType::U32);
            let reads: [(&'static Family, bool); 2] = [
                (&INDEX_SELECT, cpu_ok(|| x.index_select(&u32s, &l, &l, 0))),
                (&GATHER, cpu_ok(|| x.gather(&l, &u32s, &l, 0))),
            ];
            for (family, cpu) in reads {
                let hip = indexing_kernel(family, "op", DType::U32, d).is_ok();
                assert_eq!(hip, cpu, "{}", what(family.name));
            }
            let mut dst = x.clone();
            let cpu = cpu_ok(|| dst.scatter_set(&l, &u32s, &l, &x, &l, 0));
            assert_eq!(
                indexing_kernel(&SCATTER, "op", DType::U32, d).is_ok(),
                cpu,
                "{}",
                what("scatter")
            );
            let mut dst = x.clone();
            let cpu = cpu_ok(|| dst.scatter_add_set(&l, &u32s, &l, &x, &l, 0));
            for family in [&SCATTER_ADD, &SCATTER_ADD_TILES] {
                let hip = indexing_kernel(family, "op", DType::U32, family.computed_as(d)).is_ok();
                assert_eq!(hip, cpu, "{}", what(family.name));
            }
            let cpu = cpu_ok(|| x.index_add(&l, &u32s, &l, &x, &l, 0));
            for family in [&INDEX_ADD, &INDEX_ADD_ROWS, &INDEX_ADD_TILES] {
                let hip = indexing_kernel(family, "op", DType::U32, family.computed_as(d)).is_ok();
                assert_eq!(hip, cpu, "{}", what(family.name));
            }
            let as_ids = ids(d);
            let widened = WIDENED_IDS.contains(&d) && WIDEN_IDS.kernel("op", d).is_ok();
            let add_only = ADD_ONLY_IDS.contains(&d);
            let index_dtype = |family: &'static Family, adds: bool| {
                indexing_kernel(family, "op", d, DType::F32).is_ok()
                    || (widened && (adds || !add_only))
            };
            let cases: [(&'static Family, bool, bool); 5] = [
                (
                    &INDEX_SELECT,
                    false,
                    cpu_ok(|| f32s.index_select(&as_ids, &l, &l, 0)),
                ),
                (&GATHER, false, cpu_ok(|| f32s.gather(&l, &as_ids, &l, 0))),
                (
                    &SCATTER,
                    false,
                    cpu_ok(|| f32s.clone().scatter_set(&l, &as_ids, &l, &f32s, &l, 0)),
                ),
                (
                    &SCATTER_ADD,
                    true,
                    cpu_ok(|| f32s.clone().scatter_add_set(&l, &as_ids, &l, &f32s, &l, 0)),
                ),
                (
                    &INDEX_ADD,
                    true,
                    cpu_ok(|| f32s.index_add(&l, &as_ids, &l, &f32s, &l, 0)),
                ),
            ];
            for (family, adds, cpu) in cases {
                assert_eq!(
                    index_dtype(family, adds),
                    cpu,
                    "{} indices",
                    what(family.name)
                );
            }
            // Copies take every dtype, fills every dtype a scalar can have.
            let mut dst = x.clone();
            assert!(cpu_ok(|| x.copy_strided_src(&mut dst, 0, &l)));
            assert!(cpu_ok(|| x.copy2d(&mut dst, 1, 2, 2, 2, 0, 0)));
            for family in [&UCOPY, &COPY2D, &TRANSPOSE] {
                assert!(both(family, d), "{}", what(family.name));
            }
            let mut dst = x.clone();
            let cpu = NUMERIC.contains(&d)
                && cpu_ok(|| dst.const_set(candle_core::scalar::Scalar::one(d), &l));
            assert_eq!(both(&FILL, d), cpu, "{}", what("const_set"));
            // Device-side creation.
            let shape = Shape::from(2);
            let cpu = cpu_ok(|| CpuDevice.zeros_impl(&shape, d));
            assert_eq!(
                dtype::check_numeric(d, "zeros").is_ok(),
                cpu,
                "{}",
                what("zeros")
            );
            let cpu = cpu_ok(|| CpuDevice.rand_uniform(&shape, d, 0.0, 1.0));
            assert_eq!(both(&RAND_UNIFORM, d), cpu, "{}", what("rand_uniform"));
            let cpu = cpu_ok(|| CpuDevice.rand_normal(&shape, d, 0.0, 1.0));
            assert_eq!(both(&RAND_NORMAL, d), cpu, "{}", what("rand_normal"));
        }
    }

    #[test]
    fn the_mat_vec_families_split_the_blocks_by_size() {
        assert!(BLOCKS_OF_32.iter().all(|b| b.block_size() == 32));
        assert!(BLOCKS_OF_256.iter().all(|b| b.block_size() == 256));
        assert_eq!(BLOCKS_OF_32.len() + BLOCKS_OF_256.len(), BLOCK_TYPES.len());
        for &block in &BLOCK_TYPES {
            for few in [false, true] {
                assert!(
                    qmatvec_family(block, few).blocks.contains(&block),
                    "{block:?}"
                );
            }
        }
    }

    #[test]
    fn the_mat_vec_takes_every_activation_dtype_in_one_kernel() {
        let names: Vec<String> = [DType::F16, DType::BF16, DType::F32]
            .iter()
            .map(|&d| QMATVEC256.quantized("t", GgmlDType::Q4K, d).unwrap().name())
            .collect();
        assert_eq!(names, ["qmatvec_q4k"; 3]);
        assert!(
            QMATVEC256
                .quantized("t", GgmlDType::Q4K, DType::F64)
                .is_err()
        );
        let k = QMATVEC_FEW32
            .quantized("t", GgmlDType::Q8_0, DType::BF16)
            .unwrap();
        assert_eq!(k.name(), "qmatvec_few_q8_0");
        let k = qmatvec_split_family(GgmlDType::Q6K)
            .unwrap()
            .quantized("t", GgmlDType::Q6K, DType::F32)
            .unwrap();
        assert_eq!(k.name(), "qmatvec_few_split_q6k");
        assert!(qmatvec_split_family(GgmlDType::Q4K).is_none());
        let k = DEQUANTIZE
            .quantized("t", GgmlDType::Q8_0, DType::BF16)
            .unwrap();
        assert_eq!(k.name(), "dequantize_q8_0_bf16");
    }

    #[test]
    fn family_sizes() {
        assert_eq!(UEXP.kernels().len(), 5);
        assert_eq!(URELU.kernels().len(), 8);
        assert_eq!(UCOPY.kernels().len(), 4);
        assert_eq!(CAST.kernels().len(), 100);
        assert_eq!(WHERE.kernels().len(), 20);
        assert_eq!(GATHER.kernels().len(), 4);
        assert_eq!(SCATTER_ADD.kernels().len(), 8);
        assert_eq!(BADD.kernels().len(), 7);
        assert_eq!(WIDEN_IDS.kernels().len(), 3);
        assert_eq!(TILE_IDS.kernels().len(), 4);
        assert_eq!(QMATVEC_FEW256.kernels().len(), 6);
        let mut names: Vec<String> = FAMILIES
            .iter()
            .flat_map(|f| f.kernels())
            .map(|k| k.name())
            .collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "kernel names are unique");
        // What the sandbox check compiles for each AMD target (each kernel
        // more or fewer is compile time; see kernels/README.md).
        let total: usize = FAMILIES.iter().map(|f| f.kernels().len()).sum();
        assert_eq!(total, 664);
    }

    #[test]
    fn every_source_has_kernels_and_names_are_unique() {
        let mut all = Vec::new();
        for source in sources::ALL {
            let names: Vec<String> = crate::kernel::Unit::of_source(source)
                .into_iter()
                .flat_map(|u| u.kernel_names())
                .collect();
            assert!(
                !names.is_empty(),
                "{source:?} has no kernels in the catalogue"
            );
            all.extend(names);
        }
        let count = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), count);
        for name in [
            "uexp_f32",
            "badd_u8",
            "cast_bf16_i64",
            "where_i64_bf16",
            "reduce_argminmax_f64",
            "index_select_bf16",
            "scatter_add_i64",
            "copy2d_u32",
            "fill_bf16",
            "transpose_bf16",
            "rand_normal_bf16",
            "uexp_f8e4m3",
            "badd_f64",
            "cmp_u32",
            "cast_f64_f8e4m3",
            "cast_f8e4m3_i16",
            "where_i32_i64",
            "reduce_sum_f64",
            "reduce_cols_argminmax_i64",
            "index_add_tiles_f8e4m3",
            "widen_ids_i32",
            "widen_ids_u8",
            "tile_ids_i64",
            "tile_ids_u8",
            "rand_uniform_f8e4m3",
        ] {
            assert!(all.iter().any(|n| n == name), "{name}");
        }
    }

    #[test]
    fn family_prefixes_appear_in_their_source() {
        for f in FAMILIES {
            let code = f.source.code();
            assert!(
                code.contains(&format!(", {},", f.name))
                    || code.contains(&format!("{}_##", f.name)),
                "family {} not instantiated in {}",
                f.name,
                f.source.file_name()
            );
        }
    }
}
