//! The replacement `hip/*.h` headers handed to NVRTC as in-memory headers,
//! and the CUDA include directory NVRTC needs for `cuda_fp16.h` and
//! `cuda_bf16.h` (NVRTC 13 has no built-in copies).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `(include name, contents)` of every replacement header.
pub(crate) const REPLACEMENT_HEADERS: &[(&str, &str)] = &[
    (
        "hip/hip_runtime.h",
        include_str!("../../headers/hip/hip_runtime.h"),
    ),
    (
        "hip/hip_fp16.h",
        include_str!("../../headers/hip/hip_fp16.h"),
    ),
    (
        "hip/hip_bf16.h",
        include_str!("../../headers/hip/hip_bf16.h"),
    ),
];

/// Environment variable naming CUDA include directories explicitly
/// (separated by `:`), overriding the search below.
pub(crate) const INCLUDE_OVERRIDE_VAR: &str = "HIP_ON_CUDA_CUDA_INCLUDE";

/// The text NVRTC compiles for a hipRTC source: hipRTC includes
/// `hip/hip_runtime.h` implicitly; a `#line` directive keeps the line
/// numbers of messages those of the original source.
pub(crate) fn wrap_source(source: &str, name: &str) -> String {
    let quoted: String = name
        .chars()
        .filter(|c| *c != '"' && *c != '\\' && !c.is_control())
        .collect();
    format!("#include <hip/hip_runtime.h>\n#line 1 \"{quoted}\"\n{source}")
}

/// The CUDA include directories to pass with `-I`, searched once: the
/// override variable, else the first of `$CUDA_HOME/include`,
/// `$CUDA_PATH/include`, `/usr/local/cuda/include` and
/// `/usr/local/cuda/targets/x86_64-linux/include` that holds `cuda_fp16.h`,
/// plus its `cccl` subdirectory when present (CUDA 13 layout).
pub(crate) fn cuda_include_dirs() -> &'static [PathBuf] {
    static DIRS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    DIRS.get_or_init(|| {
        if let Some(list) = std::env::var_os(INCLUDE_OVERRIDE_VAR) {
            return std::env::split_paths(&list).collect();
        }
        let roots = ["CUDA_HOME", "CUDA_PATH"]
            .into_iter()
            .filter_map(std::env::var_os)
            .map(|root| PathBuf::from(root).join("include"))
            .chain(
                [
                    "/usr/local/cuda/include",
                    "/usr/local/cuda/targets/x86_64-linux/include",
                ]
                .map(PathBuf::from),
            );
        find_include_dirs(roots)
    })
}

/// The first candidate holding `cuda_fp16.h`, with its `cccl` subdirectory.
fn find_include_dirs(candidates: impl IntoIterator<Item = PathBuf>) -> Vec<PathBuf> {
    let Some(dir) = candidates
        .into_iter()
        .find(|dir| dir.join("cuda_fp16.h").is_file())
    else {
        return Vec::new();
    };
    let cccl = dir.join("cccl");
    let mut dirs = vec![dir];
    if Path::is_dir(&cccl) {
        dirs.push(cccl);
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_get_the_runtime_header_and_keep_line_numbers() {
        let wrapped = wrap_source("__global__ void k() {}\n", "my\"kernel.hip");
        assert_eq!(
            wrapped,
            "#include <hip/hip_runtime.h>\n#line 1 \"mykernel.hip\"\n__global__ void k() {}\n"
        );
    }

    #[test]
    fn include_dir_is_the_one_with_cuda_fp16() {
        let root = std::env::temp_dir().join(format!("hip-on-cuda-inc-{}", std::process::id()));
        let good = root.join("good");
        std::fs::create_dir_all(good.join("cccl")).unwrap();
        std::fs::write(good.join("cuda_fp16.h"), "").unwrap();
        let found = find_include_dirs([root.join("missing"), good.clone()]);
        assert_eq!(found, [good.clone(), good.join("cccl")]);
        assert!(find_include_dirs([root.join("missing")]).is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn headers_are_embedded() {
        let names: Vec<_> = REPLACEMENT_HEADERS.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            ["hip/hip_runtime.h", "hip/hip_fp16.h", "hip/hip_bf16.h"]
        );
        assert!(REPLACEMENT_HEADERS[0].1.contains("__shfl_xor"));
    }
}
