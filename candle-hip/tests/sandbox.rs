//! AMD compile check with the real hipRTC of ROCm 6.4 and no GPU: every
//! kernel source compiles for two wave64 (gfx90a, gfx942) and two wave32
//! (gfx1100, gfx1201) targets, every kernel the backend may launch is in the
//! code object, and no kernel spills vector registers to scratch memory.
//!
//! Runs inside the ROCm sandbox, where `.ci/run` executes every test binary
//! with `--ignored sandbox_` (see build/README.md); ignored elsewhere.
//! `SANDBOX_SOURCES=quantized.hip,gemv.hip` checks only those sources.

use std::time::{Duration, Instant};

use candle_hip::kernel::{kernel_names, program};
use candle_hip::kernels::ALL;

/// The targets, with the wave size their devices report.
const TARGETS: [(&str, u32); 4] = [
    ("gfx90a", 64),
    ("gfx942", 64),
    ("gfx1100", 32),
    ("gfx1201", 32),
];

/// Whether `name` is a symbol of the code object (a NUL-terminated string
/// in its string table).
fn has_symbol(code: &[u8], name: &str) -> bool {
    let needle: Vec<u8> = name.bytes().chain([0]).collect();
    code.windows(needle.len()).any(|w| w == needle.as_slice())
}

/// Sum of the values of every `key` in the code object's msgpack metadata
/// (e.g. `.vgpr_spill_count`); values are read as msgpack unsigned integers.
fn metadata_sum(code: &[u8], key: &str) -> u64 {
    let key = key.as_bytes();
    let mut total = 0;
    let mut i = 0;
    while let Some(pos) = code[i..].windows(key.len()).position(|w| w == key) {
        let at = i + pos + key.len();
        let value = match code.get(at..) {
            Some([b, ..]) if *b < 0x80 => u64::from(*b),
            Some([0xcc, b, ..]) => u64::from(*b),
            Some([0xcd, hi, lo, ..]) => u64::from(u16::from_be_bytes([*hi, *lo])),
            Some([0xce, a, b, c, d, ..]) => u64::from(u32::from_be_bytes([*a, *b, *c, *d])),
            _ => 0,
        };
        total += value;
        i = at;
    }
    total
}

#[test]
#[ignore = "needs the ROCm sandbox"]
fn sandbox_kernels_compile_for_amd() {
    let mut failures = Vec::new();
    let mut total = Duration::ZERO;
    println!(
        "{:<14}{:>8}  {}",
        "source",
        "kernels",
        TARGETS.map(|(a, _)| format!("{a:>22}")).join("")
    );
    let only = std::env::var("SANDBOX_SOURCES").ok();
    let selected = |file: &str| {
        only.as_ref()
            .is_none_or(|list| list.split(',').any(|f| f == file))
    };
    for source in ALL.into_iter().filter(|s| selected(s.file_name())) {
        let names = kernel_names(source);
        let mut row = format!("{:<14}{:>8}  ", source.file_name(), names.len());
        for (arch, wave) in TARGETS {
            let start = Instant::now();
            let result = program(source, wave).without_cache().compile_for_arch(arch);
            let took = start.elapsed();
            total += took;
            match result {
                Ok(code) => {
                    let missing: Vec<&String> =
                        names.iter().filter(|n| !has_symbol(&code, n)).collect();
                    let spills = metadata_sum(&code, ".vgpr_spill_count");
                    let scratch = metadata_sum(&code, ".private_segment_fixed_size");
                    row += &format!(
                        "{:>9.2}s {:>5}KiB vs{:<2}",
                        took.as_secs_f64(),
                        code.len() / 1024,
                        spills
                    );
                    if !missing.is_empty() {
                        failures.push(format!(
                            "{} {arch}: missing kernels {missing:?}",
                            source.file_name()
                        ));
                    }
                    if spills != 0 || scratch != 0 {
                        failures.push(format!(
                            "{} {arch}: {spills} spilled vector registers, {scratch} bytes of scratch",
                            source.file_name()
                        ));
                    }
                }
                Err(e) => {
                    row += &format!("{:>22}", "FAILED");
                    failures.push(format!("{} {arch}: {e}", source.file_name()));
                }
            }
        }
        println!("{row}");
    }
    let kernels: usize = ALL
        .iter()
        .filter(|s| selected(s.file_name()))
        .map(|&s| kernel_names(s).len())
        .sum();
    println!(
        "{kernels} kernels x {} targets compiled in {:.1}s (vs = spilled vector registers)",
        TARGETS.len(),
        total.as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn metadata_values_are_read_as_msgpack_integers() {
    let code = b"xx.vgpr_spill_count\x00yy.vgpr_spill_count\x05.vgpr_spill_count\xcd\x01\x00";
    assert_eq!(metadata_sum(code, ".vgpr_spill_count"), 5 + 256);
    assert!(has_symbol(b"\0uexp_f32\0", "uexp_f32"));
    assert!(!has_symbol(b"\0uexp_f32x\0", "uexp_f32"));
}
