//! Compilation units: what one hipRTC program, and so one code object,
//! holds. A source is one unit, or is cut into several so that the first
//! use of an op compiles a fraction of it:
//! - a source split by dtype ([`Source::split_by_dtype`]) is one unit per
//!   group of dtypes ([`DTYPE_GROUPS`]), compiled with
//!   `-DCH_ONLY_DTYPES=<mask of the group>` and holding the kernels whose
//!   last dtype suffix is in the group;
//! - a source whose families are grouped into parts (`#if CH_PART(n)` in
//!   the source, `part n` in the catalogue) is one unit per part (and per
//!   dtype), compiled with `-DCH_ONLY_PART=<n>`.

use std::fmt;

use candle_core::DType;
use candle_hip_kernels::{self as sources, COMMON_HEADER, COMMON_HEADER_NAME, Source};
use hip_safe::Program;

use crate::kernel::catalogue::{FAMILIES, Kernel};

/// How a source split by dtype groups the dtypes of its kernels into
/// units: dtypes a program tends to use together share one, so that each
/// hipRTC program (about 0.13 s before its first kernel) holds more code,
/// while the first use of an op still compiles a fraction of its source.
/// Every kernel's dtype is in exactly one group.
pub const DTYPE_GROUPS: [&[DType]; 4] = [
    &[DType::F16, DType::BF16],
    &[DType::F32],
    &[DType::U8, DType::U32, DType::I64],
    &[DType::F64, DType::I16, DType::I32, DType::F8E4M3],
];

/// The index in [`DTYPE_GROUPS`] of the group holding `dtype`.
fn group_of(dtype: DType) -> Option<u8> {
    DTYPE_GROUPS
        .iter()
        .position(|group| group.contains(&dtype))
        .and_then(|g| u8::try_from(g).ok())
}

/// One compilation unit: a source, or the kernels of one group of dtypes
/// and/or one part of it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Unit {
    source: Source,
    /// The index in [`DTYPE_GROUPS`] for a source split by dtype.
    group: Option<u8>,
    /// The part, or 0 for a source without parts.
    part: u8,
}

impl Unit {
    /// The unit holding `kernel`.
    pub(crate) fn of(kernel: &Kernel) -> Unit {
        let source = kernel.source();
        let group = source
            .split_by_dtype()
            .then(|| group_of(kernel.second.unwrap_or(kernel.first)))
            .flatten();
        Unit {
            source,
            group,
            part: kernel.family.part,
        }
    }

    /// Every unit of every source, in source order (then part and group
    /// order).
    pub fn all() -> Vec<Unit> {
        sources::ALL.into_iter().flat_map(Unit::of_source).collect()
    }

    /// The units of `source`, in part then group order: the source itself,
    /// or one per part and/or group of dtypes that holds kernels.
    pub fn of_source(source: Source) -> Vec<Unit> {
        let mut units: Vec<Unit> = FAMILIES
            .iter()
            .filter(|f| f.source == source)
            .flat_map(|f| f.kernels())
            .map(|k| Unit::of(&k))
            .collect();
        units.sort_by_key(|u| (u.part, u.group));
        units.dedup();
        units
    }

    /// The source the unit is compiled from.
    pub fn source(self) -> Source {
        self.source
    }

    /// The dtypes of a unit of a source split by dtype (empty for a unit
    /// of every dtype).
    pub fn dtypes(self) -> &'static [DType] {
        self.group.map_or(&[], |g| DTYPE_GROUPS[usize::from(g)])
    }

    /// The part of a unit of a source with parts.
    pub fn part(self) -> Option<u8> {
        (self.part != 0).then_some(self.part)
    }

    /// The unit's name: the file name, followed by the dtypes and/or the
    /// part in brackets (`binary.hip[f16+bf16,2]`, `softmax.hip`). It names the
    /// program in compiler messages and the unit's entries in kernel
    /// bundles.
    pub fn name(self) -> String {
        self.to_string()
    }

    /// The hipRTC program of the unit for a device whose waves have
    /// `wave_size` lanes: the source, `common.h`, `-O3`,
    /// `-DCANDLE_HIP_WAVE=<wave_size>`, and `-DCH_ONLY_DTYPES=<mask>`
    /// (`(1<<CH_DTYPE_f16)|(1<<CH_DTYPE_bf16)`) / `-DCH_ONLY_PART=<n>` for a
    /// unit of a group of dtypes / a part.
    pub fn program(self, wave_size: u32) -> Program {
        let mut program = Program::new(self.source.code(), &self.name())
            .header(COMMON_HEADER_NAME, COMMON_HEADER.code())
            .option("-O3")
            .define("CANDLE_HIP_WAVE", wave_size);
        if self.group.is_some() {
            let bits: Vec<String> = self
                .dtypes()
                .iter()
                .map(|d| format!("(1<<CH_DTYPE_{})", d.as_str()))
                .collect();
            program = program.define("CH_ONLY_DTYPES", bits.join("|"));
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
        let dtypes: Vec<&str> = self.dtypes().iter().map(|d| d.as_str()).collect();
        let dtypes = (!dtypes.is_empty()).then(|| dtypes.join("+"));
        let part = self.part().map(|p| p.to_string());
        let label: Vec<String> = dtypes.into_iter().chain(part).collect();
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
    use crate::dtype::NUMERIC;

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
    fn dtype_groups_cover_every_dtype_with_arithmetic_once() {
        for dtype in NUMERIC {
            let groups = DTYPE_GROUPS.iter().filter(|g| g.contains(&dtype)).count();
            assert_eq!(groups, 1, "{dtype:?} is in {groups} groups");
        }
    }

    #[test]
    fn split_sources_have_a_unit_per_dtype_group_and_part() {
        let binary = Unit::of_source(sources::BINARY);
        assert_eq!(binary.len(), DTYPE_GROUPS.len());
        assert_eq!(binary[0].name(), "binary.hip[f16+bf16]");
        assert_eq!(binary[3].name(), "binary.hip[f64+i16+i32+f8e4m3]");
        let names = Unit::of_source(sources::CAST)
            .into_iter()
            .find(|u| u.dtypes().contains(&DType::BF16))
            .unwrap()
            .kernel_names();
        assert!(names.contains(&"cast_f32_bf16".to_string()));
        assert!(names.contains(&"cast_u8_f16".to_string()));
        assert!(!names.contains(&"cast_bf16_f32".to_string()));
        // Sum, min/max and argmin/argmax, each for every group.
        let reduce = Unit::of_source(sources::REDUCE);
        assert_eq!(reduce.len(), 3 * DTYPE_GROUPS.len());
        assert_eq!(reduce[0].name(), "reduce.hip[f16+bf16,1]");
        assert!(
            reduce[0]
                .kernel_names()
                .contains(&"reduce_cols_sum_bf16".to_string())
        );
        // Parts without dtype groups.
        let quantized = Unit::of_source(sources::QUANTIZED);
        assert_eq!(quantized.len(), 5);
        assert_eq!(quantized[1].name(), "quantized.hip[2]");
        assert_eq!(Unit::of_source(sources::SOFTMAX).len(), 1);
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
            .find(|u| u.dtypes().contains(&DType::F8E4M3))
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
        for &dtype in Unit::all().iter().flat_map(|u| u.dtypes()) {
            let define = format!("CH_DTYPE_{}", dtype.as_str());
            assert!(
                COMMON_HEADER.define(&define).is_some(),
                "common.h defines no {define}"
            );
        }
    }
}
