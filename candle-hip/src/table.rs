//! The kernel table: every kernel family in `kernels/*.hip`, the source file
//! that holds it and the dtypes it is instantiated for.
//!
//! This is the one place that turns an operation into a kernel name: unary
//! and binary ops by candle's `UnaryOpT::KERNEL` / `BinaryOpT::KERNEL`
//! constants (`uexp`, `badd`, ...), comparisons and reductions by
//! [`cmp_family`] and [`reduce_family`], the other families by their own
//! names. A kernel is named `<family>_<dtype>` or, for families with two
//! dtypes, `<family>_<first>_<second>` (e.g. `cast_f32_bf16`,
//! `index_select_u32_f16`).

use candle_core::DType;
use candle_core::op::{CmpOp, ReduceOp};

use crate::dtype::{FLOATS, INDEX, SUPPORTED};
use crate::error::Result;
use crate::kernels::Source;

/// A group of dtypes a family is instantiated for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
#[derive(Debug)]
pub(crate) struct Family {
    /// Name prefix of the kernels.
    pub(crate) name: &'static str,
    /// The file holding them.
    pub(crate) source: Source,
    /// Dtypes of the first name suffix.
    pub(crate) first: Dtypes,
    /// Dtypes of the second name suffix, for two-dtype families.
    pub(crate) second: Option<Dtypes>,
}

/// One kernel: a family and its dtype suffix(es).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Kernel {
    /// The family's name.
    pub(crate) family: &'static str,
    /// The file holding it.
    pub(crate) source: Source,
    /// First dtype suffix.
    pub(crate) first: DType,
    /// Second dtype suffix, for two-dtype families.
    pub(crate) second: Option<DType>,
}

impl Kernel {
    /// The `extern "C"` name in the source.
    pub(crate) fn name(&self) -> String {
        match self.second {
            None => format!("{}_{}", self.family, self.first.as_str()),
            Some(second) => format!(
                "{}_{}_{}",
                self.family,
                self.first.as_str(),
                second.as_str()
            ),
        }
    }
}

impl Family {
    /// The kernel of this family for the given dtype(s), or candle's
    /// `UnsupportedDTypeForOp` error naming `op`.
    pub(crate) fn kernel(
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
            family: self.name,
            source: self.source,
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
                    family: self.name,
                    source: self.source,
                    first,
                    second,
                })
            })
            .collect()
    }
}

const fn one(name: &'static str, source: Source, first: Dtypes) -> Family {
    Family {
        name,
        source,
        first,
        second: None,
    }
}

const fn two(name: &'static str, source: Source, first: Dtypes, second: Dtypes) -> Family {
    Family {
        name,
        source,
        first,
        second: Some(second),
    }
}

use Dtypes::{All, Floats, Index};
use Source::Copy as CopySource;
use Source::{Argsort, Im2col, Norm, Pool, Rope, Sigmoid, Softmax, Upsample};
use Source::{Binary, Cast, Indexing, Random, Reduce, Unary, Where};

/// Every kernel family of `kernels/*.hip`.
pub(crate) const FAMILIES: &[Family] = &[
    one("uexp", Unary, Floats),
    one("ulog", Unary, Floats),
    one("usin", Unary, Floats),
    one("ucos", Unary, Floats),
    one("utanh", Unary, Floats),
    one("uneg", Unary, Floats),
    one("urecip", Unary, Floats),
    one("usqr", Unary, Floats),
    one("usqrt", Unary, Floats),
    one("ugelu", Unary, Floats),
    one("ugelu_erf", Unary, Floats),
    one("uerf", Unary, Floats),
    one("usilu", Unary, Floats),
    one("urelu", Unary, All),
    one("uabs", Unary, All),
    one("uceil", Unary, All),
    one("ufloor", Unary, All),
    one("uround", Unary, All),
    one("usign", Unary, All),
    one("ucopy", Unary, All),
    one("affine", Unary, All),
    one("powf", Unary, Floats),
    one("elu", Unary, Floats),
    one("badd", Binary, All),
    one("bsub", Binary, All),
    one("bmul", Binary, All),
    one("bdiv", Binary, All),
    one("bmaximum", Binary, All),
    one("bminimum", Binary, All),
    one("cmp_eq", Binary, All),
    one("cmp_ne", Binary, All),
    one("cmp_lt", Binary, All),
    one("cmp_le", Binary, All),
    one("cmp_gt", Binary, All),
    one("cmp_ge", Binary, All),
    two("cast", Cast, All, All),
    two("where", Where, Index, All),
    one("reduce_sum", Reduce, All),
    one("reduce_min", Reduce, All),
    one("reduce_max", Reduce, All),
    one("reduce_argmin", Reduce, All),
    one("reduce_argmax", Reduce, All),
    one("reduce_cols_sum", Reduce, All),
    one("reduce_cols_min", Reduce, All),
    one("reduce_cols_max", Reduce, All),
    one("reduce_cols_argmin", Reduce, All),
    one("reduce_cols_argmax", Reduce, All),
    two("index_select", Indexing, Index, All),
    two("gather", Indexing, Index, All),
    two("scatter", Indexing, Index, All),
    two("scatter_add", Indexing, Index, All),
    two("index_add", Indexing, Index, All),
    two("index_add_rows", Indexing, Index, All),
    two("scatter_tiles", Indexing, Index, All),
    two("scatter_add_tiles", Indexing, Index, All),
    two("index_add_tiles", Indexing, Index, All),
    one("copy2d", CopySource, All),
    one("transpose", CopySource, All),
    one("fill", CopySource, All),
    one("rand_uniform", Random, Floats),
    one("rand_normal", Random, Floats),
    one("softmax", Softmax, Floats),
    one("rms_norm", Norm, Floats),
    one("layer_norm", Norm, Floats),
    one("rope_i", Rope, Floats),
    one("rope", Rope, Floats),
    one("rope_thd", Rope, Floats),
    one("sigmoid", Sigmoid, Floats),
    one("argsort_asc", Argsort, All),
    one("argsort_desc", Argsort, All),
    one("argsort_step_asc", Argsort, All),
    one("argsort_step_desc", Argsort, All),
    one("max_pool2d", Pool, All),
    one("avg_pool2d", Pool, Floats),
    one("upsample_nearest2d", Upsample, All),
    one("upsample_bilinear2d", Upsample, Floats),
    one("im2col", Im2col, Floats),
    one("col2im", Im2col, Floats),
];

/// The family called `name`, or a "not supported" error naming `op`.
pub(crate) fn family(name: &str, op: &'static str) -> Result<&'static Family> {
    FAMILIES.iter().find(|f| f.name == name).ok_or_else(|| {
        candle_core::Error::Msg(format!(
            "candle-hip has no kernel `{name}` for {op} (not yet supported on HIP)"
        ))
        .bt()
    })
}

/// The kernel of family `name` for `first` (and `second`), with errors naming `op`.
pub(crate) fn kernel(
    name: &str,
    op: &'static str,
    first: DType,
    second: Option<DType>,
) -> Result<Kernel> {
    family(name, op)?.kernel(op, first, second)
}

/// The comparison family of `op`.
pub(crate) fn cmp_family(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "cmp_eq",
        CmpOp::Ne => "cmp_ne",
        CmpOp::Lt => "cmp_lt",
        CmpOp::Le => "cmp_le",
        CmpOp::Gt => "cmp_gt",
        CmpOp::Ge => "cmp_ge",
    }
}

/// The reduction family of `op`: the general kernels, or (`packed`) those
/// of the COLS_PACKED mode (`reduce_cols_*`, outputs adjacent in memory).
pub(crate) fn reduce_family(op: ReduceOp, packed: bool) -> &'static str {
    match (op, packed) {
        (ReduceOp::Sum, false) => "reduce_sum",
        (ReduceOp::Min, false) => "reduce_min",
        (ReduceOp::Max, false) => "reduce_max",
        (ReduceOp::ArgMin, false) => "reduce_argmin",
        (ReduceOp::ArgMax, false) => "reduce_argmax",
        (ReduceOp::Sum, true) => "reduce_cols_sum",
        (ReduceOp::Min, true) => "reduce_cols_min",
        (ReduceOp::Max, true) => "reduce_cols_max",
        (ReduceOp::ArgMin, true) => "reduce_cols_argmin",
        (ReduceOp::ArgMax, true) => "reduce_cols_argmax",
    }
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
            let f = family(k, "unary").unwrap();
            assert_eq!(f.source, Source::Unary, "{k}");
            assert!(f.kernel("unary", DType::F32, None).is_ok(), "{k}");
            assert!(f.kernel("unary", DType::BF16, None).is_ok(), "{k}");
        }
        for k in [
            op::Add::KERNEL,
            op::Sub::KERNEL,
            op::Mul::KERNEL,
            op::Div::KERNEL,
            op::Maximum::KERNEL,
            op::Minimum::KERNEL,
        ] {
            let f = family(k, "binary").unwrap();
            assert_eq!(f.source, Source::Binary, "{k}");
            for &d in &SUPPORTED {
                assert!(f.kernel("binary", d, None).is_ok(), "{k} {d:?}");
            }
        }
        for op in [
            CmpOp::Eq,
            CmpOp::Ne,
            CmpOp::Lt,
            CmpOp::Le,
            CmpOp::Gt,
            CmpOp::Ge,
        ] {
            assert!(family(cmp_family(op), "cmp").is_ok());
        }
        for op in [
            ReduceOp::Sum,
            ReduceOp::Min,
            ReduceOp::Max,
            ReduceOp::ArgMin,
            ReduceOp::ArgMax,
        ] {
            assert!(family(reduce_family(op, false), "reduce").is_ok());
            assert!(family(reduce_family(op, true), "reduce").is_ok());
        }
    }

    #[test]
    fn names_and_dtype_checks() {
        let k = kernel("uexp", "exp", DType::F16, None).unwrap();
        assert_eq!(k.name(), "uexp_f16");
        let k = kernel("cast", "to_dtype", DType::F32, Some(DType::BF16)).unwrap();
        assert_eq!(k.name(), "cast_f32_bf16");
        let k = kernel("index_select", "index_select", DType::I64, Some(DType::U8)).unwrap();
        assert_eq!(k.name(), "index_select_i64_u8");
        let err = kernel("uexp", "exp", DType::U32, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("U32") && err.contains("exp"), "{err}");
        let err = kernel("where", "where_cond", DType::F32, Some(DType::F32)).unwrap_err();
        assert!(err.to_string().contains("F32"));
        assert!(kernel("ufoo", "foo", DType::F32, None).is_err());
        assert!(kernel("cast", "to_dtype", DType::F32, None).is_err());
        assert!(kernel("uexp", "exp", DType::F32, Some(DType::F32)).is_err());
    }

    #[test]
    fn family_sizes() {
        let count = |name: &str| family(name, "t").unwrap().kernels().len();
        assert_eq!(count("uexp"), 4);
        assert_eq!(count("urelu"), 7);
        assert_eq!(count("cast"), 49);
        assert_eq!(count("where"), 21);
        assert_eq!(count("gather"), 21);
        let mut names: Vec<&str> = FAMILIES.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FAMILIES.len());
    }
}
