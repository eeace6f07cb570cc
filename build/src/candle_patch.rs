//! `candle-patch`: takes the exact crates.io sources of the pinned Candle release, applies
//! `patches/<crate>-<version>/*.patch` in name order into `build/.candle-patched/`, and writes
//! copies of Candle's own test files there, retargeted to the device of the application
//! workspace's test harness (`examples/candle-app`). See `patches/README.md`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Result, run_checked};

/// A crates.io release that gets patched.
struct Release {
    /// Crate name on crates.io.
    name: &'static str,
    /// Exact version.
    version: &'static str,
    /// Whether its test files refer to candle-core as `candle` without declaring the alias.
    tests_alias_candle: bool,
    /// Whether its test files are retargeted to the harness device.
    retarget_tests: bool,
}

/// The patched releases, in dependency order.
const RELEASES: [Release; 3] = [
    Release {
        name: "candle-core",
        version: "0.11.1",
        tests_alias_candle: false,
        retarget_tests: true,
    },
    Release {
        name: "candle-nn",
        version: "0.11.1",
        tests_alias_candle: true,
        retarget_tests: true,
    },
    // Only its `flash-attn` feature changes (see patches/README.md); its
    // tests are not part of the harness.
    Release {
        name: "candle-transformers",
        version: "0.11.1",
        tests_alias_candle: false,
        retarget_tests: false,
    },
];

/// The expression the retargeted tests use for their device: the harness crate's device.
const HARNESS_DEVICE: &str = "upstream_tests::device()";

impl Release {
    /// `name-version`, the folder name in the `.crate` archive and under `patches/`.
    fn dir_name(&self) -> String {
        format!("{}-{}", self.name, self.version)
    }
}

/// Root of the ignored output folder.
pub fn out_root(repo: &Path) -> PathBuf {
    repo.join("build").join(".candle-patched")
}

/// Fetches, unpacks and patches each release whose patches changed since the last run (so
/// that cargo does not rebuild an unchanged patched crate), then writes the retargeted tests.
/// Returns the patched source folders.
pub fn run(repo: &Path) -> Result<Vec<PathBuf>> {
    let out = out_root(repo);
    let mut patched = Vec::new();
    for release in &RELEASES {
        let patches = patch_files(&repo.join("patches").join(release.dir_name()))?;
        let stamp = stamp(&patches)?;
        let stamp_file = out.join(format!("{}.stamp", release.dir_name()));
        let mut src = out.join(release.dir_name());
        if !src.is_dir() || std::fs::read(&stamp_file).ok().as_deref() != Some(&stamp[..]) {
            // A run that fails from here on must not leave a valid stamp behind.
            if stamp_file.exists() {
                std::fs::remove_file(&stamp_file)?;
            }
            fetch_releases(&out)?;
            src = unpack(&out, release)?;
            apply_patches(&src, &patches)?;
            std::fs::write(&stamp_file, &stamp)?;
        }
        if release.retarget_tests {
            write_tests(&src, &out.join("tests").join(release.name), release)?;
        }
        patched.push(src);
    }
    Ok(patched)
}

/// What the patched sources depend on besides the fixed release: the names and contents of
/// the patches.
fn stamp(patches: &[PathBuf]) -> Result<Vec<u8>> {
    let mut stamp = Vec::new();
    for patch in patches {
        stamp.extend_from_slice(patch.to_string_lossy().as_bytes());
        stamp.push(b'\n');
        stamp.extend_from_slice(&std::fs::read(patch)?);
    }
    Ok(stamp)
}

/// Lets cargo download the `.crate` archives (checksums verified against the index) through a
/// throwaway manifest that depends on the exact versions.
fn fetch_releases(out: &Path) -> Result<()> {
    let dir = out.join("fetch");
    std::fs::create_dir_all(dir.join("src"))?;
    let deps: String = RELEASES
        .iter()
        .map(|r| format!("{} = \"={}\"\n", r.name, r.version))
        .collect();
    let manifest = format!(
        "[package]\nname = \"candle-release-fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         publish = false\n\n[workspace]\n\n[dependencies]\n{deps}"
    );
    std::fs::write(dir.join("Cargo.toml"), manifest)?;
    std::fs::write(dir.join("src").join("lib.rs"), "")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run_checked(
        Command::new(cargo)
            .arg("fetch")
            .arg("--manifest-path")
            .arg(dir.join("Cargo.toml")),
    )
}

/// Cargo's home folder: `$CARGO_HOME`, else `~/.cargo`.
fn cargo_home() -> Result<PathBuf> {
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        return Ok(PathBuf::from(home));
    }
    let home = std::env::var_os("HOME").ok_or("neither CARGO_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".cargo"))
}

/// The downloaded `.crate` archive of `release` in cargo's registry cache.
fn crate_archive(release: &Release) -> Result<PathBuf> {
    let cache = cargo_home()?.join("registry").join("cache");
    let file = format!("{}.crate", release.dir_name());
    let entries = std::fs::read_dir(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    for entry in entries {
        let candidate = entry?.path().join(&file);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(format!(
        "{file} not found under {} after cargo fetch",
        cache.display()
    )
    .into())
}

/// Unpacks the pristine release into `out/<name>-<version>`, replacing an earlier copy.
fn unpack(out: &Path, release: &Release) -> Result<PathBuf> {
    let archive = crate_archive(release)?;
    let dest = out.join(release.dir_name());
    if dest.exists() {
        std::fs::remove_dir_all(&dest)?;
    }
    run_checked(
        Command::new("tar")
            .arg("-xzf")
            .arg(&archive)
            .arg("-C")
            .arg(out),
    )?;
    if !dest.join("Cargo.toml").is_file() {
        return Err(format!(
            "{} did not unpack into {}",
            archive.display(),
            dest.display()
        )
        .into());
    }
    Ok(dest)
}

/// The `.patch` files of a folder, in name order; there must be at least one.
fn patch_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut patches = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "patch") {
            patches.push(path);
        }
    }
    patches.sort();
    if patches.is_empty() {
        return Err(format!("no .patch files in {}", dir.display()).into());
    }
    Ok(patches)
}

/// Applies `patches` in order to `src` with no fuzz, failing with `patch`'s own report on the
/// first one that does not apply exactly.
fn apply_patches(src: &Path, patches: &[PathBuf]) -> Result<()> {
    for patch in patches {
        let output = Command::new("patch")
            .args([
                "-p1",
                "--batch",
                "--forward",
                "--fuzz=0",
                "--no-backup-if-mismatch",
            ])
            .arg("--reject-file=-")
            .arg("-d")
            .arg(src)
            .arg("-i")
            .arg(patch)
            .output()
            .map_err(|e| format!("running patch: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "{} does not apply to {} ({}):\n{}{}",
                patch.display(),
                src.display(),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
            .into());
        }
    }
    Ok(())
}

/// Writes the retargeted copy of every `tests/*.rs` of the release into `dest`, leaving files
/// whose content is unchanged untouched.
fn write_tests(src: &Path, dest: &Path, release: &Release) -> Result<()> {
    std::fs::create_dir_all(dest)?;
    for entry in std::fs::read_dir(src.join("tests"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path)?;
            let name = path.file_name().ok_or("test file without a name")?;
            let retargeted = retarget_tests(&text, HARNESS_DEVICE, release.tests_alias_candle);
            let dest = dest.join(name);
            if std::fs::read_to_string(&dest).ok() != Some(retargeted.clone()) {
                std::fs::write(&dest, retargeted)?;
            }
        }
    }
    Ok(())
}

/// Shadows candle's `test_device!` in a retargeted file: one test per device-generic test
/// function, named like candle's CUDA variant, running on `DEVICE`.
const TEST_DEVICE_MACRO: &str = r#"macro_rules! test_device {
    ($fn_name:ident, $test_cpu:ident, $test_cuda:ident, $test_metal:ident) => {
        #[test]
        fn $test_cuda() -> Result<()> {
            $fn_name(&DEVICE)
        }
    };
}
"#;

/// Rewrites one of Candle's test files so that its device tests run on `device` (an expression
/// of type `Device`):
/// - a local `test_device!` macro shadows candle's: each device-generic test function becomes
///   one `#[test]`, named like candle's CUDA variant, that runs on `device`;
/// - in a file with no `test_device!` test, every `Device::Cpu` expression becomes `device`,
///   so its CPU-only tests run on `device` as well. Files with device-generic tests keep their
///   CPU-only tests on the CPU, as candle does when it tests CUDA or Metal: there `Device::Cpu`
///   is often chosen on purpose (to check device mismatches, for example);
/// - a match arm `Device::Cpu =>` (expected values per backend, as in `quantized_tests.rs`)
///   becomes `Device::Cpu | Device::Custom(_) =>`: the enums' new variant would leave the match
///   non-exhaustive, and a custom device is held to the CPU's values (candle-hip's quantized
///   products round the activations as the CPU does).
///
/// The prelude goes after the file's leading inner attributes and comments.
pub fn retarget_tests(source: &str, device: &str, alias_candle: bool) -> String {
    let device_generic = source.contains("test_device!(");
    // The features candle's files test for (cuda, mkl, ...) are not features of the harness.
    let mut prelude = String::from(
        "// Retargeted by `rocm-tools candle-patch` to the device of examples/candle-app.\n\
         #![allow(unused_imports, unexpected_cfgs)]\n",
    );
    if alias_candle {
        prelude.push_str("extern crate candle_core as candle;\n");
    }
    if device_generic {
        prelude.push_str(&TEST_DEVICE_MACRO.replace("DEVICE", device));
    }
    let mut out = String::with_capacity(source.len() + prelude.len());
    let mut prelude_done = false;
    for line in source.lines() {
        let trimmed = line.trim_start();
        let header = trimmed.starts_with("#![") || trimmed.starts_with("//") || trimmed.is_empty();
        if !prelude_done && !header {
            out.push_str(&prelude);
            prelude_done = true;
        }
        if prelude_done && !device_generic && !trimmed.starts_with("use ") {
            out.push_str(&replace_cpu_device(line, device));
        } else if trimmed.starts_with(CPU_ARM) {
            out.push_str(&line.replacen(CPU_ARM, CUSTOM_AS_CPU_ARM, 1));
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    if !prelude_done {
        out.push_str(&prelude);
    }
    out
}

/// A match arm on the CPU device, and the same arm taking custom devices too.
const CPU_ARM: &str = "Device::Cpu =>";
const CUSTOM_AS_CPU_ARM: &str = "Device::Cpu | Device::Custom(_) =>";

/// Replaces every whole-path `Device::Cpu` of `line` (not `x::Device::Cpu`, not
/// `Device::CpuX`) with `device`.
fn replace_cpu_device(line: &str, device: &str) -> String {
    const PATH: &str = "Device::Cpu";
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(pos) = rest.find(PATH) {
        let (before, after) = (&rest[..pos], &rest[pos + PATH.len()..]);
        let qualified = before.ends_with("::") || before.ends_with(is_ident);
        let longer = after.starts_with(is_ident);
        out.push_str(before);
        out.push_str(if qualified || longer { PATH } else { device });
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV: &str = "h::device()";

    #[test]
    fn device_generic_file_gets_shadow_macro_and_keeps_cpu() {
        let src = "#![allow(clippy::approx_constant)]\n// c\nuse candle_core::{test_device, Device};\n\
                   fn f(d: &Device) -> Result<()> { g(&Device::Cpu) }\n\
                   test_device!(f, f_cpu, f_gpu, f_metal);\n";
        let out = retarget_tests(src, DEV, false);
        let attr = out.find("#![allow(clippy").unwrap();
        let prelude = out.find("#![allow(unused_imports").unwrap();
        let first_use = out.find("use candle_core").unwrap();
        assert!(attr < prelude && prelude < first_use, "{out}");
        assert!(out.contains("fn $test_cuda() -> Result<()>"));
        assert!(out.contains("$fn_name(&h::device())"));
        assert!(out.contains("g(&Device::Cpu)"), "{out}");
        assert!(!out.contains("extern crate"));
    }

    #[test]
    fn per_backend_expectations_hold_custom_devices_to_the_cpu_values() {
        let src = "fn f(device: &Device) {\n    match device {\n        Device::Metal(_) => m(),\n        \
                   Device::Cpu => c(),\n    }\n}\ntest_device!(f, f_cpu, f_gpu, f_metal);\n";
        let out = retarget_tests(src, DEV, false);
        assert!(
            out.contains("        Device::Cpu | Device::Custom(_) => c(),"),
            "{out}"
        );
        assert!(out.contains("        Device::Metal(_) => m(),"), "{out}");
    }

    #[test]
    fn cpu_only_file_is_retargeted() {
        let src = "use candle_core::{Device, Tensor};\nuse candle::Device::Cpu;\n\
                   #[test]\nfn t() -> Result<()> {\n    let dev = Device::Cpu;\n    \
                   let a = x(&Device::Cpu, candle::Device::Cpu, Device::CpuLike);\n    Ok(())\n}\n";
        let out = retarget_tests(src, DEV, true);
        assert!(out.contains("extern crate candle_core as candle;"));
        assert!(!out.contains("macro_rules!"));
        assert!(out.contains("use candle::Device::Cpu;"));
        assert!(out.contains("let dev = h::device();"));
        assert!(
            out.contains("x(&h::device(), candle::Device::Cpu, Device::CpuLike)"),
            "{out}"
        );
    }

    #[test]
    fn replacement_handles_several_and_none() {
        assert_eq!(
            replace_cpu_device("(Device::Cpu, Device::Cpu)", "d()"),
            "(d(), d())"
        );
        assert_eq!(replace_cpu_device("no device", "d()"), "no device");
        assert_eq!(replace_cpu_device("MyDevice::Cpu", "d()"), "MyDevice::Cpu");
    }
}
