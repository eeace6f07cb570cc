//! The kernel catalogue: every kernel family of the sources in
//! `candle-hip-kernels`, the source that holds it and the dtypes it is
//! instantiated for, as typed constants (a misspelt family does not
//! compile), and the hipRTC program of each source.
//!
//! A kernel is named `<family>_<dtype>` or, for families with two dtypes,
//! `<family>_<first>_<second>` (e.g. `cast_f32_bf16`,
//! `index_select_u32_f16`). Unary and binary ops are reached from candle's
//! `UnaryOpT::KERNEL` / `BinaryOpT::KERNEL` names through [`candle_op`],
//! comparisons and reductions through [`cmp_family`] and [`reduce_family`].

use candle_core::DType;
use candle_core::op::{CmpOp, ReduceOp};
use candle_hip_kernels::{self as sources, COMMON_HEADER, COMMON_HEADER_NAME, Source};
use hip_safe::Program;

use crate::dtype::{FLOATS, INDEX, SUPPORTED};
use crate::error::Result;

/// A group of dtypes a family is instantiated for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Dtypes {
    /// Every supported dtype.
    All,
    /// f16, bf16, f32, f64.
    Floats,
    /// u8, u32, i64 (index and predicate dtypes).
    Index,
}

impl Dtypes {
    /// The dtypes of the group.
    pub(crate) fn list(self) -> &'static [DType] {
        match self {
            Dtypes::All => &SUPPORTED,
            Dtypes::Floats => &FLOATS,
            Dtypes::Index => &INDEX,
        }
    }
}

/// A family of kernels: one template instantiated per dtype (pair).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct Family {
    /// Name prefix of the kernels.
    pub(crate) name: &'static str,
    /// The source holding them.
    pub(crate) source: Source,
    /// Dtypes of the first name suffix.
    pub(crate) first: Dtypes,
    /// Dtypes of the second name suffix, for two-dtype families.
    pub(crate) second: Option<Dtypes>,
}

/// One kernel: a family and its dtype suffix(es).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Kernel {
    /// The family.
    pub(crate) family: &'static Family,
    /// First dtype suffix.
    pub(crate) first: DType,
    /// Second dtype suffix, for two-dtype families.
    pub(crate) second: Option<DType>,
}

impl Kernel {
    /// The `extern "C"` name in the source.
    pub(crate) fn name(&self) -> String {
        let family = self.family.name;
        match self.second {
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
    /// The kernel of this one-dtype family for `dtype`, or candle's
    /// `UnsupportedDTypeForOp` error naming `op`.
    pub(crate) fn kernel(&'static self, op: &'static str, dtype: DType) -> Result<Kernel> {
        self.instance(op, dtype, None)
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
        if !self.first.list().contains(&first) {
            return unsupported(first);
        }
        match (self.second, second) {
            (None, None) => {}
            (Some(group), Some(d)) if group.list().contains(&d) => {}
            (Some(_), Some(d)) => return unsupported(d),
            _ => {
                return Err(candle_core::Error::Msg(format!(
                    "candle-hip: kernel family {} takes {} dtype(s)",
                    self.name,
                    1 + usize::from(self.second.is_some())
                )));
            }
        }
        Ok(Kernel {
            family: self,
            first,
            second,
        })
    }

    /// Every kernel of the family.
    pub(crate) fn kernels(&'static self) -> Vec<Kernel> {
        let seconds: Vec<Option<DType>> = match self.second {
            None => vec![None],
            Some(group) => group.list().iter().copied().map(Some).collect(),
        };
        self.first
            .list()
            .iter()
            .flat_map(|&first| {
                seconds.iter().map(move |&second| Kernel {
                    family: self,
                    first,
                    second,
                })
            })
            .collect()
    }
}

/// Defines one `Family` constant per line (`NAME = "prefix" in SOURCE:
/// dtypes [x dtypes];`) and [`FAMILIES`], the list of all of them.
macro_rules! families {
    ($($konst:ident = $name:literal in $source:ident: $first:ident $(x $second:ident)?;)*) => {
        $(
            #[doc = concat!("`", $name, "_*` in `", stringify!($source), "`.")]
            pub(crate) const $konst: Family = Family {
                name: $name,
                source: sources::$source,
                first: Dtypes::$first,
                second: families!(@second $($second)?),
            };
        )*
        /// Every kernel family of the sources.
        pub(crate) const FAMILIES: &[&Family] = &[$(&$konst),*];
    };
    (@second) => { None };
    (@second $second:ident) => { Some(Dtypes::$second) };
}

families! {
    UEXP = "uexp" in UNARY: Floats;
    ULOG = "ulog" in UNARY: Floats;
    USIN = "usin" in UNARY: Floats;
    UCOS = "ucos" in UNARY: Floats;
    UTANH = "utanh" in UNARY: Floats;
    UNEG = "uneg" in UNARY: Floats;
    URECIP = "urecip" in UNARY: Floats;
    USQR = "usqr" in UNARY: Floats;
    USQRT = "usqrt" in UNARY: Floats;
    UGELU = "ugelu" in UNARY: Floats;
    UGELU_ERF = "ugelu_erf" in UNARY: Floats;
    UERF = "uerf" in UNARY: Floats;
    USILU = "usilu" in UNARY: Floats;
    URELU = "urelu" in UNARY: All;
    UABS = "uabs" in UNARY: All;
    UCEIL = "uceil" in UNARY: All;
    UFLOOR = "ufloor" in UNARY: All;
    UROUND = "uround" in UNARY: All;
    USIGN = "usign" in UNARY: All;
    UCOPY = "ucopy" in UNARY: All;
    AFFINE = "affine" in UNARY: All;
    POWF = "powf" in UNARY: Floats;
    ELU = "elu" in UNARY: Floats;
    BADD = "badd" in BINARY: All;
    BSUB = "bsub" in BINARY: All;
    BMUL = "bmul" in BINARY: All;
    BDIV = "bdiv" in BINARY: All;
    BMAXIMUM = "bmaximum" in BINARY: All;
    BMINIMUM = "bminimum" in BINARY: All;
    CMP_EQ = "cmp_eq" in BINARY: All;
    CMP_NE = "cmp_ne" in BINARY: All;
    CMP_LT = "cmp_lt" in BINARY: All;
    CMP_LE = "cmp_le" in BINARY: All;
    CMP_GT = "cmp_gt" in BINARY: All;
    CMP_GE = "cmp_ge" in BINARY: All;
    CAST = "cast" in CAST: All x All;
    WHERE = "where" in WHERE: Index x All;
    REDUCE_SUM = "reduce_sum" in REDUCE: All;
    REDUCE_MIN = "reduce_min" in REDUCE: All;
    REDUCE_MAX = "reduce_max" in REDUCE: All;
    REDUCE_ARGMIN = "reduce_argmin" in REDUCE: All;
    REDUCE_ARGMAX = "reduce_argmax" in REDUCE: All;
    REDUCE_COLS_SUM = "reduce_cols_sum" in REDUCE: All;
    REDUCE_COLS_MIN = "reduce_cols_min" in REDUCE: All;
    REDUCE_COLS_MAX = "reduce_cols_max" in REDUCE: All;
    REDUCE_COLS_ARGMIN = "reduce_cols_argmin" in REDUCE: All;
    REDUCE_COLS_ARGMAX = "reduce_cols_argmax" in REDUCE: All;
    INDEX_SELECT = "index_select" in INDEXING: Index x All;
    GATHER = "gather" in INDEXING: Index x All;
    SCATTER = "scatter" in INDEXING: Index x All;
    SCATTER_ADD = "scatter_add" in INDEXING: Index x All;
    INDEX_ADD = "index_add" in INDEXING: Index x All;
    INDEX_ADD_ROWS = "index_add_rows" in INDEXING: Index x All;
    SCATTER_TILES = "scatter_tiles" in INDEXING: Index x All;
    SCATTER_ADD_TILES = "scatter_add_tiles" in INDEXING: Index x All;
    INDEX_ADD_TILES = "index_add_tiles" in INDEXING: Index x All;
    COPY2D = "copy2d" in COPY: All;
    TRANSPOSE = "transpose" in COPY: All;
    FILL = "fill" in COPY: All;
    RAND_UNIFORM = "rand_uniform" in RANDOM: Floats;
    RAND_NORMAL = "rand_normal" in RANDOM: Floats;
    SOFTMAX = "softmax" in SOFTMAX: Floats;
    RMS_NORM = "rms_norm" in NORM: Floats;
    LAYER_NORM = "layer_norm" in NORM: Floats;
    ROPE_I = "rope_i" in ROPE: Floats;
    ROPE = "rope" in ROPE: Floats;
    ROPE_THD = "rope_thd" in ROPE: Floats;
    SIGMOID = "sigmoid" in SIGMOID: Floats;
    ARGSORT_ASC = "argsort_asc" in ARGSORT: All;
    ARGSORT_DESC = "argsort_desc" in ARGSORT: All;
    ARGSORT_STEP_ASC = "argsort_step_asc" in ARGSORT: All;
    ARGSORT_STEP_DESC = "argsort_step_desc" in ARGSORT: All;
    MAX_POOL2D = "max_pool2d" in POOL: All;
    AVG_POOL2D = "avg_pool2d" in POOL: Floats;
    UPSAMPLE_NEAREST2D = "upsample_nearest2d" in UPSAMPLE: All;
    UPSAMPLE_BILINEAR2D = "upsample_bilinear2d" in UPSAMPLE: Floats;
    IM2COL = "im2col" in IM2COL: Floats;
    COL2IM = "col2im" in IM2COL: Floats;
}

/// The family of candle's `UnaryOpT::KERNEL` or `BinaryOpT::KERNEL` name
/// (`uexp`, `badd`, ...): candle names its ops by string, so this is the
/// one place a name is looked up (a test covers every candle op).
pub(crate) fn candle_op(kernel: &str) -> Option<&'static Family> {
    FAMILIES
        .iter()
        .copied()
        .filter(|f| f.source == sources::UNARY || f.source == sources::BINARY)
        .find(|f| f.name == kernel)
}

/// The comparison family of `op`.
pub(crate) fn cmp_family(op: CmpOp) -> &'static Family {
    match op {
        CmpOp::Eq => &CMP_EQ,
        CmpOp::Ne => &CMP_NE,
        CmpOp::Lt => &CMP_LT,
        CmpOp::Le => &CMP_LE,
        CmpOp::Gt => &CMP_GT,
        CmpOp::Ge => &CMP_GE,
    }
}

/// The reduction family of `op`: the general kernels, or (`packed`) those
/// of the COLS_PACKED mode (`reduce_cols_*`, outputs adjacent in memory).
pub(crate) fn reduce_family(op: ReduceOp, packed: bool) -> &'static Family {
    match (op, packed) {
        (ReduceOp::Sum, false) => &REDUCE_SUM,
        (ReduceOp::Min, false) => &REDUCE_MIN,
        (ReduceOp::Max, false) => &REDUCE_MAX,
        (ReduceOp::ArgMin, false) => &REDUCE_ARGMIN,
        (ReduceOp::ArgMax, false) => &REDUCE_ARGMAX,
        (ReduceOp::Sum, true) => &REDUCE_COLS_SUM,
        (ReduceOp::Min, true) => &REDUCE_COLS_MIN,
        (ReduceOp::Max, true) => &REDUCE_COLS_MAX,
        (ReduceOp::ArgMin, true) => &REDUCE_COLS_ARGMIN,
        (ReduceOp::ArgMax, true) => &REDUCE_COLS_ARGMAX,
    }
}

/// The hipRTC program of `source` for a device whose waves have
/// `wave_size` lanes: the source, `common.h`, `-O3` and
/// `-DCANDLE_HIP_WAVE=<wave_size>`.
pub fn program(source: Source, wave_size: u32) -> Program {
    Program::new(source.code(), source.file_name())
        .header(COMMON_HEADER_NAME, COMMON_HEADER.code())
        .option("-O3")
        .define("CANDLE_HIP_WAVE", wave_size)
}

/// The name of every kernel the backend may launch from `source`.
pub fn kernel_names(source: Source) -> Vec<String> {
    FAMILIES
        .iter()
        .filter(|f| f.source == source)
        .flat_map(|f| f.kernels())
        .map(|k| k.name())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::op::{self, BinaryOpT, UnaryOpT};

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

    #[test]
    fn every_candle_op_marker_has_a_family() {
        for k in unary_kernels() {
            let f = candle_op(k).unwrap();
            assert_eq!(f.source, sources::UNARY, "{k}");
            assert!(f.kernel("unary", DType::F32).is_ok(), "{k}");
            assert!(f.kernel("unary", DType::BF16).is_ok(), "{k}");
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
                assert!(f.kernel("binary", d).is_ok(), "{k} {d:?}");
            }
        }
        assert!(candle_op("ufoo").is_none());
        assert!(candle_op("cast").is_none());
    }

    #[test]
    fn names_and_dtype_checks() {
        assert_eq!(UEXP.kernel("exp", DType::F16).unwrap().name(), "uexp_f16");
        let k = CAST.pair("to_dtype", DType::F32, DType::BF16).unwrap();
        assert_eq!(k.name(), "cast_f32_bf16");
        let k = INDEX_SELECT
            .pair("index_select", DType::I64, DType::U8)
            .unwrap();
        assert_eq!(k.name(), "index_select_i64_u8");
        assert_eq!(k.source(), sources::INDEXING);
        let err = UEXP.kernel("exp", DType::U32).unwrap_err().to_string();
        assert!(err.contains("U32") && err.contains("exp"), "{err}");
        let err = WHERE
            .pair("where_cond", DType::F32, DType::F32)
            .unwrap_err();
        assert!(err.to_string().contains("F32"));
        assert!(CAST.kernel("to_dtype", DType::F32).is_err());
        assert!(UEXP.pair("exp", DType::F32, DType::F32).is_err());
    }

    #[test]
    fn family_sizes() {
        assert_eq!(UEXP.kernels().len(), 4);
        assert_eq!(URELU.kernels().len(), 7);
        assert_eq!(CAST.kernels().len(), 49);
        assert_eq!(WHERE.kernels().len(), 21);
        assert_eq!(GATHER.kernels().len(), 21);
        let mut names: Vec<&str> = FAMILIES.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FAMILIES.len());
    }

    #[test]
    fn every_source_has_kernels_and_names_are_unique() {
        let mut all = Vec::new();
        for source in sources::ALL {
            let names = kernel_names(source);
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
            "where_i64_f16",
            "reduce_argmax_f64",
            "index_select_u32_bf16",
            "scatter_add_u8_i64",
            "copy2d_u32",
            "fill_f16",
            "transpose_bf16",
            "rand_normal_bf16",
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
