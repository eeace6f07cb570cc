//! `fetch`: downloads real ROCm packages from Debian with `apt-get download`
//! and unpacks them with `dpkg -x`, using a private apt configuration derived
//! from this machine's own apt sources (no archive host is written anywhere
//! in the repository).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Result, run_checked};

/// A set of packages from one Debian suite, unpacked into one folder.
pub struct Release {
    /// Folder name under `build/.rocm/`, e.g. `6.4`.
    pub name: &'static str,
    /// Debian suite that carries it.
    pub suite: &'static str,
    /// Packages to download and unpack.
    pub packages: &'static [&'static str],
}

/// The development headers used for binding generation.
pub const DEV_6_4: Release = Release {
    name: "6.4",
    suite: "unstable",
    packages: &[
        "libamdhip64-dev",
        "libamdhip64-6",
        "libhiprtc6",
        "librocblas-dev",
        "libmiopen-dev",
        "libmiopen1",
        "libhsa-runtime-dev",
    ],
};

/// RCCL's development headers: Debian carries RCCL only for ROCm 5 (unstable)
/// and ROCm 7 (experimental); the bindings follow the newer API.
pub const DEV_RCCL_7_2: Release = Release {
    name: "rccl-7.2",
    suite: "experimental",
    packages: &["librccl-dev"],
};

/// Root of every ignored download folder.
pub fn rocm_root(repo: &Path) -> PathBuf {
    repo.join("build").join(".rocm")
}

/// Writes a private apt configuration for `suite` (sources copied from the
/// machine's own `deb822` or one-line sources, suites replaced) and returns
/// the `-o` options that select it.
pub fn apt_options(repo: &Path, suite: &str) -> Result<Vec<String>> {
    let state = rocm_root(repo).join("apt").join(suite);
    for sub in ["lists/partial", "cache/archives/partial", "etc"] {
        std::fs::create_dir_all(state.join(sub))?;
    }
    let sources = state.join("etc").join("sources.list");
    std::fs::write(&sources, sources_for_suite(suite)?)?;
    let opt = |k: &str, v: &Path| format!("-o{k}={}", v.display());
    Ok(vec![
        opt("Dir::Etc::sourcelist", &sources),
        "-oDir::Etc::sourceparts=-".to_string(),
        opt("Dir::State::Lists", &state.join("lists")),
        opt("Dir::Cache", &state.join("cache")),
        "-oAcquire::Check-Valid-Until=false".to_string(),
        "-oAPT::Get::List-Cleanup=false".to_string(),
        "-oAPT::Sandbox::User=root".to_string(),
    ])
}

/// One-line `deb` entries for `suite`, one per archive URI found in the
/// machine's apt sources (security archives skipped: they carry no ROCm).
fn sources_for_suite(suite: &str) -> Result<String> {
    let mut uris = Vec::new();
    let mut texts = Vec::new();
    if let Ok(t) = std::fs::read_to_string("/etc/apt/sources.list") {
        texts.push(t);
    }
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        for entry in dir.flatten() {
            let path = entry.path();
            let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            if ext == "sources" || ext == "list" {
                texts.push(std::fs::read_to_string(&path)?);
            }
        }
    }
    for text in &texts {
        for line in text.lines().map(str::trim) {
            let uri = if let Some(rest) = line.strip_prefix("URIs:") {
                rest.split_whitespace().next()
            } else if let Some(rest) = line.strip_prefix("deb ") {
                rest.split_whitespace().find(|w| w.contains("://"))
            } else {
                None
            };
            if let Some(uri) = uri
                && !uri.contains("security")
                && uri.contains("debian")
                && !uris.iter().any(|u| u == uri)
            {
                uris.push(uri.to_string());
            }
        }
    }
    if uris.is_empty() {
        return Err("no Debian archive found in /etc/apt/sources.list(.d)".into());
    }
    Ok(uris
        .iter()
        .map(|u| format!("deb {u} {suite} main\n"))
        .collect())
}

/// Runs `apt-get update` for the suite and downloads `packages` into `dest`.
pub fn download(repo: &Path, suite: &str, packages: &[&str], dest: &Path) -> Result<()> {
    let opts = apt_options(repo, suite)?;
    run_checked(Command::new("apt-get").args(&opts).args(["-q", "update"]))?;
    std::fs::create_dir_all(dest)?;
    run_checked(
        Command::new("apt-get")
            .current_dir(dest)
            .args(&opts)
            .arg("download")
            .args(packages),
    )
}

/// Unpacks every `.deb` in `debs` into `dest` with `dpkg -x`.
pub fn unpack_all(debs: &Path, dest: &Path) -> Result<()> {
    std::fs::create_dir_all(dest)?;
    let mut files: Vec<_> = std::fs::read_dir(debs)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        .collect();
    files.sort();
    for deb in files {
        run_checked(Command::new("dpkg").arg("-x").arg(&deb).arg(dest))?;
    }
    Ok(())
}

/// Fetches and unpacks `release` unless it is already unpacked.
pub fn ensure(repo: &Path, release: &Release) -> Result<PathBuf> {
    ensure_packages(repo, release.name, release.suite, release.packages)
}

/// Fetches `packages` from `suite` and unpacks them into `build/.rocm/<name>`
/// unless that folder is already complete. The downloaded `.deb` files stay
/// in [`debs_dir`] (their versions are read from there).
pub fn ensure_packages(repo: &Path, name: &str, suite: &str, packages: &[&str]) -> Result<PathBuf> {
    let dest = rocm_root(repo).join(name);
    let marker = dest.join(".complete");
    if marker.exists() {
        return Ok(dest);
    }
    let debs = debs_dir(repo, name);
    download(repo, suite, packages, &debs)?;
    unpack_all(&debs, &dest)?;
    std::fs::write(&marker, packages.join("\n"))?;
    Ok(dest)
}

/// Where the `.deb` files of the folder `name` are downloaded.
pub fn debs_dir(repo: &Path, name: &str) -> PathBuf {
    rocm_root(repo).join("debs").join(name)
}
