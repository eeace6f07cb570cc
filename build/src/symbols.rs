//! `symbols`: records the exported function names of real ROCm releases.
//!
//! The runtime packages of each release are downloaded from Debian (see
//! [`crate::fetch`]) and unpacked under `build/.rocm/`; every library's
//! defined dynamic C function symbols (`nm -D --defined-only`, symbol
//! versions stripped, C++-mangled names left out) are written, sorted, to `build/symbols/<library>-<version>.txt`
//! with a one-line `#` header naming the package and its exact version. The
//! lists are committed; a unit test checks every symbol the -sys crates bind
//! against them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Result, fetch};

/// One shared library of one Debian package.
struct Library {
    /// The Debian package that ships it.
    package: &'static str,
    /// Its file name under `usr/lib/x86_64-linux-gnu` (the soname).
    soname: &'static str,
}

/// Runtime packages taken from one Debian suite.
struct Snapshot {
    /// Folder name under `build/.rocm/`.
    folder: &'static str,
    /// The Debian suite.
    suite: &'static str,
    /// The libraries to record.
    libraries: &'static [Library],
}

/// ROCm 5.2 (Debian 12), ROCm 5.7 and 6.4 (unstable), ROCm 7.x (experimental).
/// Debian carries RCCL 5.4 (unstable, for ROCm 5) and 7.2 (experimental), none for ROCm 6.
const SNAPSHOTS: &[Snapshot] = &[
    Snapshot {
        folder: "runtime-bookworm",
        suite: "bookworm",
        libraries: &[Library {
            package: "libamdhip64-5",
            soname: "libamdhip64.so.5",
        }],
    },
    Snapshot {
        folder: "runtime-unstable",
        suite: "unstable",
        libraries: &[
            Library {
                package: "libamdhip64-5",
                soname: "libamdhip64.so.5",
            },
            Library {
                package: "libamdhip64-6",
                soname: "libamdhip64.so.6",
            },
            Library {
                package: "libhiprtc6",
                soname: "libhiprtc.so.6",
            },
            Library {
                package: "librccl1",
                soname: "librccl.so.1",
            },
            Library {
                package: "librocblas4",
                soname: "librocblas.so.4",
            },
            Library {
                package: "libmiopen1",
                soname: "libMIOpen.so.1",
            },
        ],
    },
    Snapshot {
        folder: "runtime-experimental",
        suite: "experimental",
        libraries: &[
            Library {
                package: "libamdhip64-7",
                soname: "libamdhip64.so.7",
            },
            Library {
                package: "libhiprtc7",
                soname: "libhiprtc.so.7",
            },
            Library {
                package: "librocblas5",
                soname: "librocblas.so.5",
            },
            Library {
                package: "librccl1",
                soname: "librccl.so.1",
            },
            Library {
                package: "libmiopen1",
                soname: "libMIOpen.so.1",
            },
        ],
    },
];

/// The folder of the committed lists.
pub fn lists_dir(repo: &Path) -> PathBuf {
    repo.join("build").join("symbols")
}

/// Downloads every snapshot and writes one list per library.
pub fn run(repo: &Path) -> Result<()> {
    let out_dir = lists_dir(repo);
    std::fs::create_dir_all(&out_dir)?;
    for snapshot in SNAPSHOTS {
        let packages: Vec<&str> = snapshot.libraries.iter().map(|l| l.package).collect();
        let unpacked = fetch::ensure_packages(repo, snapshot.folder, snapshot.suite, &packages)?;
        let debs = fetch::debs_dir(repo, snapshot.folder);
        for library in snapshot.libraries {
            let version = package_version(&debs, library.package)?;
            let file = unpacked
                .join("usr/lib/x86_64-linux-gnu")
                .join(library.soname);
            let names = exported_functions(&file)?;
            let list = out_dir.join(format!(
                "{}-{}.txt",
                library_name(library.soname),
                upstream_version(&version)
            ));
            let header = format!(
                "# {} of Debian package {} {version} ({}): exported C functions\n",
                library.soname, library.package, snapshot.suite
            );
            let body: String = names.iter().map(|n| format!("{n}\n")).collect();
            std::fs::write(&list, header + &body)?;
            println!("{} ({} functions)", list.display(), names.len());
        }
    }
    Ok(())
}

/// `libamdhip64.so.6` -> `libamdhip64`.
fn library_name(soname: &str) -> &str {
    soname.split(".so").next().unwrap_or(soname)
}

/// The upstream part of a Debian version: `1:6.4.3+dfsg-1+b1` -> `6.4.3`.
fn upstream_version(debian: &str) -> &str {
    let no_epoch = debian.split_once(':').map_or(debian, |(_, v)| v);
    let end = no_epoch
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(no_epoch.len());
    &no_epoch[..end]
}

/// The exact version of `package` among the downloaded `.deb` files in `debs`.
fn package_version(debs: &Path, package: &str) -> Result<String> {
    let prefix = format!("{package}_");
    let deb = std::fs::read_dir(debs)?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
        })
        .ok_or_else(|| format!("no {package} package in {}", debs.display()))?;
    let out = Command::new("dpkg-deb")
        .arg("-f")
        .arg(&deb)
        .arg("Version")
        .output()
        .map_err(|e| format!("dpkg-deb -f {}: {e}", deb.display()))?;
    if !out.status.success() {
        return Err(format!("dpkg-deb -f {} failed: {}", deb.display(), out.status).into());
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

/// The defined dynamic function symbols of `file`, versions stripped.
fn exported_functions(file: &Path) -> Result<BTreeSet<String>> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(file)
        .output()
        .map_err(|e| format!("nm -D {}: {e}", file.display()))?;
    if !out.status.success() {
        return Err(format!(
            "nm -D {} failed: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(String::from_utf8(out.stdout)?
        .lines()
        .filter_map(function_name)
        .map(str::to_string)
        .collect())
}

/// The symbol name of one `nm -D --defined-only` line when it is a C
/// function (`T` text, `W` weak, `i` indirect), without its `@VERSION` /
/// `@@VERSION`. C++-mangled names (`_Z...`) are left out: only C entry
/// points can be bound, and they would make the lists ten times longer.
fn function_name(line: &str) -> Option<&str> {
    let mut fields = line.split_whitespace();
    let (_address, kind, name) = (fields.next()?, fields.next()?, fields.next()?);
    matches!(kind, "T" | "W" | "i")
        .then(|| name.split('@').next().unwrap_or(name))
        .filter(|n| !n.is_empty() && !n.starts_with("_Z"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of a committed list (`#` lines are comments).
    fn parse_list(text: &str) -> BTreeSet<String> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect()
    }

    /// The ROCm majors every bound symbol must be exported by.
    const ROCM_6_AND_7: &[u32] = &[6, 7];

    /// Every table the -sys crates bind, with the library it is loaded from
    /// and the releases whose lists must contain it (RCCL: the 5.4 and 7.2
    /// that Debian carries).
    const BOUND: &[(&str, &[&str], &[u32])] = &[
        ("libamdhip64", hip_sys::HipApi::SYMBOLS, ROCM_6_AND_7),
        ("libhiprtc", hip_sys::HiprtcApi::SYMBOLS, ROCM_6_AND_7),
        ("librocblas", rocblas_sys::RocblasApi::SYMBOLS, ROCM_6_AND_7),
        ("libMIOpen", miopen_sys::MiopenApi::SYMBOLS, ROCM_6_AND_7),
        ("librccl", rccl_sys::RcclApi::SYMBOLS, &[5, 7]),
    ];

    fn repo() -> PathBuf {
        crate::repo_root()
    }

    /// Every committed list of `library` for ROCm `major`, as (file, names).
    fn lists(library: &str, major: u32) -> Vec<(String, BTreeSet<String>)> {
        let prefix = format!("{library}-{major}.");
        let mut out: Vec<_> = std::fs::read_dir(lists_dir(&repo()))
            .expect("build/symbols exists")
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                (name.starts_with(&prefix) && name.ends_with(".txt")).then_some(name)
            })
            .map(|name| {
                let text = std::fs::read_to_string(lists_dir(&repo()).join(&name))
                    .expect("list is readable");
                (name, parse_list(&text))
            })
            .collect();
        out.sort();
        assert!(
            !out.is_empty(),
            "no list {prefix}*.txt in build/symbols (run `cargo run -p rocm-tools -- symbols`)"
        );
        out
    }

    /// Legacy entry points bound for ROCm 5 (the generator's aliases).
    fn legacy() -> Vec<&'static str> {
        crate::generate::legacy_entry_points().collect()
    }

    /// `(list, symbol)` for each of `symbols` absent from a list of `library`
    /// for each of `majors`.
    fn absent(library: &str, majors: &[u32], symbols: &[&str]) -> Vec<String> {
        let mut missing = Vec::new();
        for &major in majors {
            for (file, names) in lists(library, major) {
                missing.extend(
                    symbols
                        .iter()
                        .filter(|s| !names.contains(**s))
                        .map(|s| format!("{s} not in {file}")),
                );
            }
        }
        missing
    }

    #[test]
    fn every_bound_symbol_is_exported_by_its_releases() {
        let legacy = legacy();
        let mut missing = Vec::new();
        for (library, symbols, majors) in BOUND {
            let current: Vec<&str> = symbols
                .iter()
                .copied()
                .filter(|s| !legacy.contains(s))
                .collect();
            assert!(!current.is_empty(), "{library}: empty table");
            missing.extend(absent(library, majors, &current));
        }
        assert!(missing.is_empty(), "{missing:#?}");
    }

    #[test]
    fn legacy_entry_points_are_exported_by_rocm_5_and_6() {
        let legacy = legacy();
        assert!(legacy.contains(&"hipGetDeviceProperties"));
        for name in &legacy {
            assert!(
                hip_sys::HipApi::SYMBOLS.contains(name),
                "{name} is not bound"
            );
        }
        let missing = absent("libamdhip64", &[5, 6], &legacy);
        assert!(missing.is_empty(), "{missing:#?}");
    }

    #[test]
    fn rocm_5_runtime_exports_what_the_report_needs() {
        let needed = [
            "hipRuntimeGetVersion",
            "hipDriverGetVersion",
            "hipGetDeviceCount",
            "hipDeviceGetAttribute",
            "hipGetErrorName",
        ];
        let missing = absent("libamdhip64", &[5], &needed);
        assert!(missing.is_empty(), "{missing:#?}");
    }

    #[test]
    fn rocm_5_runtime_contains_hiprtc() {
        let missing = absent("libamdhip64", &[5], hip_sys::HiprtcApi::SYMBOLS);
        assert!(missing.is_empty(), "{missing:#?}");
    }

    #[test]
    fn lists_are_sorted_plain_names_with_a_header() {
        for (library, _, majors) in BOUND {
            for &major in *majors {
                for (file, names) in lists(library, major) {
                    let text = std::fs::read_to_string(lists_dir(&repo()).join(&file))
                        .expect("list is readable");
                    assert!(text.starts_with("# "), "{file}: no header");
                    let body: Vec<&str> = text.lines().skip(1).collect();
                    assert_eq!(body.len(), names.len(), "{file}: duplicates or blanks");
                    assert!(body.windows(2).all(|w| w[0] < w[1]), "{file}: not sorted");
                    assert!(
                        body.iter().all(|n| !n.contains(['@', ' '])),
                        "{file}: not plain names"
                    );
                }
            }
        }
    }

    #[test]
    fn nm_lines_are_parsed() {
        assert_eq!(
            function_name("00000000000a1b20 T hipGetDevicePropertiesR0600@@hip_6.0"),
            Some("hipGetDevicePropertiesR0600")
        );
        assert_eq!(
            function_name("00000000000a1b20 T hipGetDeviceProperties@hip_4.2"),
            Some("hipGetDeviceProperties")
        );
        assert_eq!(function_name("0000000000001000 W weak_fn"), Some("weak_fn"));
        assert_eq!(
            function_name("0000000000001000 i memcpy_ifunc"),
            Some("memcpy_ifunc")
        );
        assert_eq!(function_name("0000000000201000 D some_data"), None);
        assert_eq!(function_name("0000000000000000 A hip_6.0"), None);
        assert_eq!(function_name("garbage"), None);
        assert_eq!(
            function_name("0000000000001000 T _ZN6miopen4HandleC1Ev"),
            None
        );
    }

    #[test]
    fn versions_and_names_are_derived() {
        assert_eq!(upstream_version("6.4.3-5"), "6.4.3");
        assert_eq!(upstream_version("6.4.3+dfsg-1+b1"), "6.4.3");
        assert_eq!(upstream_version("7.2.4-1~exp2"), "7.2.4");
        assert_eq!(upstream_version("1:5.2.3-8"), "5.2.3");
        assert_eq!(library_name("libMIOpen.so.1"), "libMIOpen");
        assert_eq!(library_name("libhiprtc.so.7"), "libhiprtc");
    }
}
