//! Compilation units: what one hipRTC program, and so one code object,
//! holds. A source is one unit, or is cut into several so that the first
//! use of an op compiles a fraction of it:
//! - a source split by dtype ([`Source::split_by_dtype`]) is one unit per
//!   dtype, compiled with `-DCH_ONLY_DTYPE=CH_DTYPE_<dtype>` and holding the
//!   kernels whose last dtype suffix is that dtype;
//! - a source whose families are grouped into parts (`#if CH_PART(n)` in
//!   the source, `part n` in the catalogue) is one unit per part (and per
//!   dtype), compiled with `-DCH_ONLY_PART=<n>`.

use std::fmt;

use candle_core::DType;
use candle_hip_kernels::{self as sources, COMMON_HEADER, COMMON_HEADER_NAME, Source};
use hip_safe::Program;

use crate::dtype::NUMERIC;
use crate::kernel::catalogue::{FAMILIES, Kernel};

/// One compilation unit: a source, or the kernels of one dtype and/or one
/// part of it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Unit {
    source: Source,
    dtype: Option<DType>,
    /// The part, or 0 for a source without parts.
    part: u8,
}

impl Unit {
    /// The unit holding `kernel`.
    pub(crate) fn of(kernel: &Kernel) -> Unit {
        let source = kernel.source();
        let dtype = source
            .split_by_dtype()
            .then(|| kernel.second.unwrap_or(kernel.first));
        Unit {
            source,
            dtype,
            part: kernel.family.part,
        }
    }

    /// Every unit of every source, in source order (then dtype order).
    pub fn all() -> Vec<Unit> {
        sources::ALL.into_iter().flat_map(Unit::of_source).collect()
    }

    /// The units of `source`, in part then dtype order: the source itself,
    /// or one per part and/or dtype that holds kernels.
    pub fn of_source(source: Source) -> Vec<Unit> {
        let mut units: Vec<Unit> = FAMILIES
            .iter()
            .filter(|f| f.source == source)
            .flat_map(|f| f.kernels())
            .map(|k| Unit::of(&k))
            .collect();
        let dtype_order = |u: &Unit| u.dtype.and_then(|d| NUMERIC.iter().position(|&n| n == d));
        units.sort_by_key(|u| (u.part, dtype_order(u)));
        units.dedup();
        units
    }

    /// The source the unit is compiled from.
    pub fn source(self) -> Source {
        self.source
    }

    /// The dtype of a unit of a source split by dtype.
    pub fn dtype(self) -> Option<DType> {
        self.dtype
    }

    /// The part of a unit of a source with parts.
    pub fn part(self) -> Option<u8> {
        (self.part != 0).then_some(self.part)
    }

    /// The unit's name: the file name, followed by the dtype and/or the
    /// part in brackets (`binary.hip[bf16,2]`, `softmax.hip`). It names the
    /// program in compiler messages and the unit's entries in kernel
    /// bundles.
    pub fn name(self) -> String {
        self.to_string()
    }

    /// The hipRTC program of the unit for a device whose waves have
    /// `wave_size` lanes: the source, `common.h`, `-O3`,
    /// `-DCANDLE_HIP_WAVE=<wave_size>`, and `-DCH_ONLY_DTYPE=CH_DTYPE_<dtype>`
    /// / `-DCH_ONLY_PART=<n>` for a unit of a dtype / a part.
    pub fn program(self, wave_size: u32) -> Program {
        let mut program = Program::new(self.source.code(), &self.name())
            .header(COMMON_HEADER_NAME, COMMON_HEADER.code())
            .option("-O3")
            .define("CANDLE_HIP_WAVE", wave_size);
        if let Some(dtype) = self.dtype {
            program = program.define("CH_ONLY_DTYPE", format!("CH_DTYPE_{}", dtype.as_str()));
        }
        if let Some(part) = self.part() {
            program = program.define("CH_ONLY_PART", part);
        }
        program
    }

    /// The name of every kernel the backend may launch from this unit.
    pub fn kernel_names(self) -> Vec<String> {
        FAMILIES
            .iter()
            .filter(|f| f.source == self.source)
            .flat_map(|f| f.kernels())
            .filter(|k| Unit::of(k) == self)
            .map(|k| k.name())
            .collect()
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dtype = self.dtype.map(|d| d.as_str().to_string());
        let part = self.part().map(|p| p.to_string());
        let label: Vec<String> = dtype.into_iter().chain(part).collect();
        match label.is_empty() {
            true => f.write_str(self.source.file_name()),
            false => write!(f, "{}[{}]", self.source.file_name(), label.join(",")),
        }
    }
}

impl fmt::Debug for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Unit({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_is_in_exactly_one_unit_of_its_source() {
        let units = Unit::all();
        let mut names: Vec<String> = units.iter().flat_map(|u| u.kernel_names()).collect();
        let total: usize = FAMILIES.iter().map(|f| f.kernels().len()).sum();
        assert_eq!(names.len(), total);
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), total);
        assert!(units.iter().all(|u| !u.kernel_names().is_empty()));
    }

    #[test]
    fn split_sources_have_a_unit_per_last_dtype_and_part() {
        let binary = Unit::of_source(sources::BINARY);
        // Arithmetic and comparisons, each for every dtype with arithmetic.
        assert_eq!(binary.len(), 2 * NUMERIC.len());
        assert_eq!(binary[0].name(), "binary.hip[u8,1]");
        assert_eq!(binary.last().unwrap().name(), "binary.hip[f8e4m3,2]");
        let names = Unit::of_source(sources::CAST)
            .into_iter()
            .find(|u| u.dtype() == Some(DType::BF16))
            .unwrap()
            .kernel_names();
        assert!(names.contains(&"cast_f32_bf16".to_string()));
        assert!(!names.contains(&"cast_bf16_f32".to_string()));
        let where_units = Unit::of_source(sources::WHERE);
        // Values are the seven element-width dtypes; the others are carried.
        assert_eq!(where_units.len(), 7);
        // Every element width: copy.hip's first use compiles one dtype.
        assert_eq!(Unit::of_source(sources::COPY).len(), 7);
        let softmax = Unit::of_source(sources::SOFTMAX);
        assert_eq!(softmax.len(), 4);
        assert_eq!(softmax[1].name(), "softmax.hip[bf16]");
        assert_eq!(Unit::of_source(sources::ROPE).len(), 1);
        assert_eq!(Unit::of_source(sources::ROPE)[0].name(), "rope.hip");
    }

    /// The part whose `#if CH_PART(n)` block holds the instantiation line
    /// of `family` in its source (0 outside any block).
    fn part_in_source(family: &crate::kernel::catalogue::Family) -> Option<u8> {
        let mut part = 0;
        for line in family.source.code().lines() {
            if let Some(n) = line.strip_prefix("#if CH_PART(") {
                part = n.trim_end_matches(')').parse().ok()?;
            } else if line.starts_with("#endif") {
                part = 0;
            } else if line.starts_with("CH_") && line.contains(&format!(", {},", family.name)) {
                return Some(part);
            }
        }
        None
    }

    #[test]
    fn families_are_instantiated_in_their_part() {
        for family in FAMILIES {
            let siblings = FAMILIES.iter().filter(|f| f.source == family.source);
            assert!(
                siblings
                    .clone()
                    .all(|f| (f.part == 0) == (family.part == 0)),
                "{}: every family of a source with parts has one",
                family.source.file_name()
            );
            // Families of GGML blocks are instantiated through block
            // macros, not by name; the sandbox test checks their units.
            if family.part != 0 && family.blocks.is_empty() {
                assert_eq!(
                    part_in_source(family),
                    Some(family.part),
                    "family {} is not instantiated in part {} of {}",
                    family.name,
                    family.part,
                    family.source.file_name()
                );
            }
        }
    }

    #[test]
    fn a_split_unit_compiles_with_its_dtype_define() {
        let unit = Unit::of_source(sources::REDUCE)
            .into_iter()
            .find(|u| u.dtype() == Some(DType::F8E4M3))
            .unwrap();
        let whole = Unit::of_source(sources::SOFTMAX)[0];
        assert_ne!(
            unit.program(64).source_hash(),
            Unit::of_source(sources::REDUCE)[0]
                .program(64)
                .source_hash()
        );
        assert_ne!(
            whole.program(32).source_hash(),
            whole.program(64).source_hash()
        );
        for dtype in Unit::all().iter().filter_map(|u| u.dtype()) {
            let define = format!("CH_DTYPE_{}", dtype.as_str());
            assert!(
                COMMON_HEADER.define(&define).is_some(),
                "common.h defines no {define}"
            );
        }
    }
}
