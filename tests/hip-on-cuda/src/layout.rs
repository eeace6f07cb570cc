//! A folder shaped like a ROCm install whose libraries are this shim, so
//! that `ROCM_PATH=<folder>` selects it through the normal search order.

use std::io;
use std::path::{Path, PathBuf};

/// The library names our loaders look for, all served by the one shim.
pub const LIBRARY_NAMES: &[&str] = &[
    "libamdhip64.so.6",
    "libhiprtc.so.6",
    "librocblas.so.4",
    "libMIOpen.so.1",
];

/// Copies `shim` (the built `libhip_on_cuda.so`) to `<root>/lib/<name>` for
/// every name in [`LIBRARY_NAMES`] and returns the paths written. Copies,
/// not links, so the folder can be moved to another machine as is.
pub fn make_layout(shim: &Path, root: &Path) -> io::Result<Vec<PathBuf>> {
    let lib = root.join("lib");
    std::fs::create_dir_all(&lib)?;
    LIBRARY_NAMES
        .iter()
        .map(|name| {
            let target = lib.join(name);
            std::fs::copy(shim, &target).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("copying {} to {}: {e}", shim.display(), target.display()),
                )
            })?;
            Ok(target)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_has_every_library() {
        let root = std::env::temp_dir().join(format!("hip-on-cuda-layout-{}", std::process::id()));
        let shim = root.join("shim.so");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(&shim, b"shim").unwrap();
        let written = make_layout(&shim, &root.join("rocm")).unwrap();
        assert_eq!(written.len(), LIBRARY_NAMES.len());
        for path in &written {
            assert_eq!(std::fs::read(path).unwrap(), b"shim");
        }
        let err = make_layout(&root.join("missing.so"), &root.join("rocm")).unwrap_err();
        assert!(err.to_string().contains("missing.so"), "{err}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
