//! `CodeBundle` through the public API only (CPU, no ROCm needed): what a
//! build tool writes and a program embeds or opens. The format's corner
//! cases are tested in the module itself (`src/bundle.rs`).

use hip_safe::{BundleError, CodeBundle, CodeBundleWriter, Error, SourceHash};

/// The smallest AMDGPU code object the structural checks accept: an ELF64
/// file header for `EM_AMDGPU` with no program or section headers.
fn header_only_amd_elf() -> Vec<u8> {
    let mut elf = vec![0u8; 64];
    elf[..4].copy_from_slice(b"\x7fELF");
    elf[4] = 2; // ELFCLASS64
    elf[5] = 1; // little-endian
    elf[6] = 1; // EV_CURRENT
    elf[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
    elf[18..20].copy_from_slice(&224u16.to_le_bytes()); // EM_AMDGPU
    elf[20..24].copy_from_slice(&1u32.to_le_bytes());
    elf[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    elf
}

const PTX: &[u8] = b".version 8.5\n.target sm_90\n\0";

fn writer() -> CodeBundleWriter {
    let mut w = CodeBundleWriter::new("hipRTC 6.4.43484 (ROCm 6.4)", "candle-hip 0.1.0").unwrap();
    let h = SourceHash::new([1; 32]);
    w.add("reduce.hip", h, "gfx942", 64, header_only_amd_elf())
        .unwrap();
    w.add("reduce.hip", h, "gfx1100", 32, header_only_amd_elf())
        .unwrap();
    w.add("reduce.hip", h, "sm_90", 32, PTX.to_vec()).unwrap();
    w
}

#[test]
fn a_written_file_opens_and_lists_its_entries() {
    let dir = std::env::temp_dir().join(format!("hip-safe-bundle-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kernels.hipbundle");
    writer().write(&path).unwrap();
    let bundle = CodeBundle::open(&path).unwrap();
    assert_eq!(bundle.version(), CodeBundle::FORMAT_VERSION);
    assert_eq!(bundle.compiler(), "hipRTC 6.4.43484 (ROCm 6.4)");
    assert_eq!(bundle.producer(), "candle-hip 0.1.0");
    let listing: Vec<String> = bundle
        .entries()
        .map(|e| {
            format!(
                "{} {} w{} {}B",
                e.name(),
                e.arch(),
                e.wave_size(),
                e.code().len()
            )
        })
        .collect();
    assert_eq!(
        listing,
        [
            "reduce.hip gfx1100 w32 64B",
            "reduce.hip gfx942 w64 64B",
            "reduce.hip sm_90 w32 28B"
        ]
    );
    let h = SourceHash::new([1; 32]);
    assert_eq!(bundle.code_object("reduce.hip", h, "sm_90", 32), Some(PTX));
    assert_eq!(bundle.code_object("reduce.hip", h, "gfx942", 32), None);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_embedded_bundle_parses_in_place() {
    // As `include_bytes!` would give it: a `&'static` array.
    let bytes: &'static [u8] = writer().to_bytes().leak();
    let bundle = CodeBundle::parse(bytes).unwrap();
    assert_eq!(bundle.as_bytes().as_ptr(), bytes.as_ptr());
    assert_eq!(CodeBundle::parse(bytes.to_vec()).unwrap(), bundle);
    static NOT_A_BUNDLE: &[u8; 4] = b"\x7fELF";
    assert!(matches!(
        CodeBundle::parse(NOT_A_BUNDLE),
        Err(BundleError::NotABundle { .. })
    ));
}

#[test]
fn bundle_errors_flow_into_hip_safe_errors() {
    fn load(path: &std::path::Path) -> hip_safe::Result<usize> {
        Ok(CodeBundle::open(path)?.len())
    }
    let missing = std::env::temp_dir().join("hip-safe-no-such-bundle.hipbundle");
    let err = load(&missing).unwrap_err();
    assert!(
        matches!(err, Error::Bundle(BundleError::Io { .. })),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("hip-safe-no-such-bundle.hipbundle"),
        "{err}"
    );
}

#[test]
fn damaged_bundles_are_refused_whole() {
    let bytes = writer().to_bytes();
    for at in (0..bytes.len()).step_by(7) {
        let mut damaged = bytes.clone();
        damaged[at] = !damaged[at];
        assert!(CodeBundle::parse(damaged).is_err(), "byte {at}");
    }
}
