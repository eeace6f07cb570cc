//! The HIP C++ kernel sources of candle-hip, embedded as text.
//!
//! Each [`Source`] is one file of this crate's `src/` folder and becomes one
//! hipRTC program (one code object) when compiled; every source includes
//! [`COMMON_HEADER`] as `"common.h"`, which the host hands to hipRTC as an
//! in-memory header. The sources expect `-DCANDLE_HIP_WAVE=<wave size>`.
//! [`ALL`] is the module catalogue. Which kernels each source defines, and
//! how they are launched, is candle-hip's business (its kernel layer); this
//! crate only owns the text, so that tools can compile the same programs for
//! any architecture (e.g. to check that every kernel builds for every AMD
//! target) and a packaged candle-hip carries its sources.
//!
//! ```
//! use candle_hip_kernels::{ALL, REDUCE};
//! assert!(ALL.contains(&REDUCE));
//! assert_eq!(REDUCE.file_name(), "reduce.hip");
//! assert_eq!(REDUCE.define("CH_REDUCE_ROWS"), Some("0"));
//! ```

#![warn(missing_docs)]

use std::fmt;
use std::hash::{Hash, Hasher};

/// One kernel source file. Sources compare, order and hash by file name.
#[derive(Clone, Copy)]
pub struct Source {
    file_name: &'static str,
    code: &'static str,
    split_by_dtype: bool,
}

impl Source {
    /// The file name, also the program name in compiler messages.
    pub const fn file_name(self) -> &'static str {
        self.file_name
    }

    /// The source text.
    pub const fn code(self) -> &'static str {
        self.code
    }

    /// Whether the source is compiled once per group of dtypes: as one
    /// program per `-DCH_ONLY_DTYPES=<mask of the group>`, each holding the
    /// kernels whose last dtype suffix is in the group (see `common.h`).
    /// The large element-wise, reduction and indexing sources are, and the
    /// copies, softmax and norms every model runs, so that the first use of
    /// an op compiles a fraction of its source.
    pub const fn split_by_dtype(self) -> bool {
        self.split_by_dtype
    }

    /// The value of `#define NAME value` in this source (the rest of the
    /// line, trimmed), if the source defines `name` that way.
    pub fn define(self, name: &str) -> Option<&'static str> {
        self.code.lines().find_map(|line| {
            let rest = line.strip_prefix("#define ")?.strip_prefix(name)?;
            rest.strip_prefix(' ').map(str::trim)
        })
    }
}

impl PartialEq for Source {
    fn eq(&self, other: &Source) -> bool {
        self.file_name == other.file_name
    }
}

impl Eq for Source {}

impl Hash for Source {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.file_name.hash(state);
    }
}

impl PartialOrd for Source {
    fn partial_cmp(&self, other: &Source) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Source {
    fn cmp(&self, other: &Source) -> std::cmp::Ordering {
        self.file_name.cmp(other.file_name)
    }
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Source({})", self.file_name)
    }
}

/// Defines one public [`Source`] constant per file (`per dtype` marks the
/// ones split by dtype), and [`ALL`].
macro_rules! sources {
    ($($(#[$doc:meta])* $name:ident = $file:literal $($per:ident $dtype:ident)?;)*) => {
        $(
            $(#[$doc])*
            pub const $name: Source = Source {
                file_name: $file,
                code: include_str!($file),
                split_by_dtype: sources!(@split $($per $dtype)?),
            };
        )*
        /// Every source, in a fixed order.
        pub const ALL: [Source; [$($file),*].len()] = [$($name),*];
    };
    (@split) => { false };
    (@split per dtype) => { true };
}

/// The name under which every source includes [`COMMON_HEADER`].
pub const COMMON_HEADER_NAME: &str = "common.h";

/// `common.h`: types, index arithmetic, element-wise loops and reductions
/// shared by every source.
pub const COMMON_HEADER: Source = Source {
    file_name: COMMON_HEADER_NAME,
    code: include_str!("common.h"),
    split_by_dtype: false,
};

sources! {
    /// `unary.hip`: unary ops, copy, affine, powf, elu.
    UNARY = "unary.hip" per dtype;
    /// `binary.hip`: binary ops and comparisons.
    BINARY = "binary.hip" per dtype;
    /// `cast.hip`: dtype conversions.
    CAST = "cast.hip" per dtype;
    /// `where.hip`: `where_cond`.
    WHERE = "where.hip";
    /// `reduce.hip`: sum, min, max, argmin, argmax.
    REDUCE = "reduce.hip" per dtype;
    /// `indexing.hip`: index_select, gather, scatter, scatter_add, index_add.
    INDEXING = "indexing.hip" per dtype;
    /// `copy.hip`: copy2d, tiled transpose and fill.
    COPY = "copy.hip";
    /// `random.hip`: uniform and normal random numbers.
    RANDOM = "random.hip";
    /// `softmax.hip`: softmax over the last dimension.
    SOFTMAX = "softmax.hip";
    /// `norm.hip`: rms_norm and layer_norm.
    NORM = "norm.hip";
    /// `rope.hip`: rotary embeddings (interleaved, halves, thd).
    ROPE = "rope.hip";
    /// `sigmoid.hip`: the logistic sigmoid.
    SIGMOID = "sigmoid.hip";
    /// `argsort.hip`: argsort along the last dimension.
    ARGSORT = "argsort.hip";
    /// `pool.hip`: max and average 2-D pooling.
    POOL = "pool.hip";
    /// `upsample.hip`: nearest and bilinear upsampling.
    UPSAMPLE = "upsample.hip";
    /// `im2col.hip`: im2col and col2im for convolutions through GEMM.
    IM2COL = "im2col.hip";
    /// `gemv.hip`: matrix-vector products for decoding one token (a row
    /// times a row-major weight).
    GEMV = "gemv.hip" per dtype;
    /// `quantized.hip`: GGML's quantized blocks (dequantization and the
    /// matrix-vector product of decoding).
    QUANTIZED = "quantized.hip";
    /// `attention.hip`: fused attention (flash attention) for prefill and
    /// decode, with matrix instructions where the target has them.
    ATTENTION = "attention.hip" per dtype;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_includes_the_common_header_and_defines_kernels() {
        for source in ALL {
            let include = format!("#include \"{COMMON_HEADER_NAME}\"");
            assert!(source.code().contains(&include), "{source:?}");
            assert!(
                source.code().contains("extern \"C\" __global__"),
                "{source:?}"
            );
        }
    }

    #[test]
    fn file_names_are_unique_and_match_the_files() {
        let mut names: Vec<&str> = ALL.iter().map(|s| s.file_name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".hip"))
            .collect();
        on_disk.sort_unstable();
        assert_eq!(names, on_disk, "every .hip file is in ALL");
    }

    #[test]
    fn defines_are_read_exactly() {
        assert_eq!(COMMON_HEADER.define("CH_MAX_DIMS"), Some("8"));
        assert_eq!(COMMON_HEADER.define("CH_MAX"), None);
        assert_eq!(INDEXING.define("CH_NOT_DEFINED"), None);
    }
}
