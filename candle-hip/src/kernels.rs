//! The HIP C++ kernel sources, embedded as text.
//!
//! Each [`Source`] is one file of the repository's `kernels/` folder; all of
//! them include `common.h` ([`COMMON_HEADER`]), handed to hipRTC as an
//! in-memory header. A device compiles a source the first time one of its
//! kernels is needed ([`Source::program`] gives the exact compilation), so
//! tools can compile the same programs for other architectures, e.g. to
//! check that every kernel builds for every AMD target.

use hip_safe::Program;

use crate::table;

/// `kernels/common.h`: types, index arithmetic and reductions shared by every source.
pub const COMMON_HEADER: &str = include_str!("../../kernels/common.h");

/// One kernel source file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// `unary.hip`: unary ops, copy, affine, powf, elu.
    Unary,
    /// `binary.hip`: binary ops and comparisons.
    Binary,
    /// `cast.hip`: dtype conversions.
    Cast,
    /// `where.hip`: `where_cond`.
    Where,
    /// `reduce.hip`: sum, min, max, argmin, argmax.
    Reduce,
    /// `indexing.hip`: index_select, gather, scatter, scatter_add, index_add.
    Indexing,
    /// `copy.hip`: copy2d, tiled transpose and fill.
    Copy,
    /// `random.hip`: uniform and normal random numbers.
    Random,
    /// `softmax.hip`: softmax over the last dimension.
    Softmax,
    /// `norm.hip`: rms_norm and layer_norm.
    Norm,
    /// `rope.hip`: rotary embeddings (interleaved, halves, thd).
    Rope,
    /// `sigmoid.hip`: the logistic sigmoid.
    Sigmoid,
    /// `argsort.hip`: argsort along the last dimension.
    Argsort,
    /// `pool.hip`: max and average 2-D pooling.
    Pool,
    /// `upsample.hip`: nearest and bilinear upsampling.
    Upsample,
    /// `im2col.hip`: im2col and col2im for convolutions through GEMM.
    Im2col,
}

impl Source {
    /// Every source.
    pub const ALL: [Source; 16] = [
        Source::Unary,
        Source::Binary,
        Source::Cast,
        Source::Where,
        Source::Reduce,
        Source::Indexing,
        Source::Copy,
        Source::Random,
        Source::Softmax,
        Source::Norm,
        Source::Rope,
        Source::Sigmoid,
        Source::Argsort,
        Source::Pool,
        Source::Upsample,
        Source::Im2col,
    ];

    /// The file name in `kernels/`, also the program name in compiler messages.
    pub fn file_name(self) -> &'static str {
        match self {
            Source::Unary => "unary.hip",
            Source::Binary => "binary.hip",
            Source::Cast => "cast.hip",
            Source::Where => "where.hip",
            Source::Reduce => "reduce.hip",
            Source::Indexing => "indexing.hip",
            Source::Copy => "copy.hip",
            Source::Random => "random.hip",
            Source::Softmax => "softmax.hip",
            Source::Norm => "norm.hip",
            Source::Rope => "rope.hip",
            Source::Sigmoid => "sigmoid.hip",
            Source::Argsort => "argsort.hip",
            Source::Pool => "pool.hip",
            Source::Upsample => "upsample.hip",
            Source::Im2col => "im2col.hip",
        }
    }

    /// The source text.
    pub fn code(self) -> &'static str {
        match self {
            Source::Unary => include_str!("../../kernels/unary.hip"),
            Source::Binary => include_str!("../../kernels/binary.hip"),
            Source::Cast => include_str!("../../kernels/cast.hip"),
            Source::Where => include_str!("../../kernels/where.hip"),
            Source::Reduce => include_str!("../../kernels/reduce.hip"),
            Source::Indexing => include_str!("../../kernels/indexing.hip"),
            Source::Copy => include_str!("../../kernels/copy.hip"),
            Source::Random => include_str!("../../kernels/random.hip"),
            Source::Softmax => include_str!("../../kernels/softmax.hip"),
            Source::Norm => include_str!("../../kernels/norm.hip"),
            Source::Rope => include_str!("../../kernels/rope.hip"),
            Source::Sigmoid => include_str!("../../kernels/sigmoid.hip"),
            Source::Argsort => include_str!("../../kernels/argsort.hip"),
            Source::Pool => include_str!("../../kernels/pool.hip"),
            Source::Upsample => include_str!("../../kernels/upsample.hip"),
            Source::Im2col => include_str!("../../kernels/im2col.hip"),
        }
    }

    /// The hipRTC program for a device whose waves have `wave_size` lanes:
    /// the source, `common.h`, `-O3` and `-DCANDLE_HIP_WAVE=<wave_size>`.
    pub fn program(self, wave_size: u32) -> Program {
        Program::new(self.code(), self.file_name())
            .header("common.h", COMMON_HEADER)
            .option("-O3")
            .define("CANDLE_HIP_WAVE", wave_size)
    }

    /// The name of every kernel the backend may launch from this source.
    pub fn kernel_names(self) -> Vec<String> {
        table::FAMILIES
            .iter()
            .filter(|f| f.source == self)
            .flat_map(|f| f.kernels())
            .map(|k| k.name())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `#define NAME value` from the common header.
    fn header_define(name: &str) -> Option<&'static str> {
        COMMON_HEADER.lines().find_map(|line| {
            let rest = line.strip_prefix("#define ")?.strip_prefix(name)?;
            rest.strip_prefix(' ').map(str::trim)
        })
    }

    #[test]
    fn host_constants_match_the_kernel_header() {
        use crate::info;
        let expect = [
            ("CH_MAX_DIMS", info::MAX_DIMS),
            ("CH_MAX_OPERANDS", info::MAX_OPERANDS),
            ("CH_ELEM_BLOCK", info::ELEM_BLOCK as usize),
            ("CH_REDUCE_MAX_BLOCK", info::REDUCE_MAX_BLOCK as usize),
            ("CH_VEC_BYTES", info::VEC_BYTES),
            ("CH_UNROLL", info::UNROLL as usize),
            ("CH_REDUCE_STATE_BYTES", info::REDUCE_STATE_BYTES),
        ];
        for (name, value) in expect {
            assert_eq!(
                header_define(name),
                Some(value.to_string().as_str()),
                "{name}"
            );
        }
    }

    #[test]
    fn every_source_includes_the_header_and_names_its_kernels() {
        for source in Source::ALL {
            let code = source.code();
            assert!(code.contains("#include \"common.h\""), "{source:?}");
            let names = source.kernel_names();
            assert!(!names.is_empty(), "{source:?} has no kernels in the table");
            assert!(code.contains("extern \"C\" __global__"), "{source:?}");
        }
    }

    #[test]
    fn kernel_names_are_unique_across_sources() {
        let mut all: Vec<String> = Source::ALL.iter().flat_map(|s| s.kernel_names()).collect();
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
        for f in table::FAMILIES {
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
