//! A folder shaped like a ROCm install whose libraries are this shim, so
//! that `ROCM_PATH=<folder>` selects it through the normal search order.
//!
//! The shim is copied once to `<folder>/lib/libhip_on_cuda.so` and every
//! ROCm library name is a relative symbolic link to it. Because the names
//! resolve to one file, the dynamic loader maps the shim once, so the HIP
//! runtime, hipRTC, rocBLAS and MIOpen share one state (current device,
//! contexts) exactly as one ROCm install would.

use std::io;
use std::path::{Path, PathBuf};

/// The library names our loaders look for, all served by the one shim.
pub const LIBRARY_NAMES: &[&str] = &[
    "libamdhip64.so.6",
    "libhiprtc.so.6",
    "librocblas.so.4",
    "libMIOpen.so.1",
];

/// The file name of the shim inside the layout.
pub const SHIM_NAME: &str = "libhip_on_cuda.so";

fn context(e: io::Error, what: String) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Copies `shim` (the built `libhip_on_cuda.so`) to `<root>/lib/` and links
/// every name of [`LIBRARY_NAMES`] to it; returns the library paths.
pub fn make_layout(shim: &Path, root: &Path) -> io::Result<Vec<PathBuf>> {
    let lib = root.join("lib");
    std::fs::create_dir_all(&lib).map_err(|e| context(e, format!("creating {}", lib.display())))?;
    let copy = lib.join(SHIM_NAME);
    std::fs::copy(shim, &copy).map_err(|e| {
        context(
            e,
            format!("copying {} to {}", shim.display(), copy.display()),
        )
    })?;
    LIBRARY_NAMES
        .iter()
        .map(|name| {
            let link = lib.join(name);
            match std::fs::remove_file(&link) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(context(e, format!("replacing {}", link.display())));
                }
                _ => {}
            }
            std::os::unix::fs::symlink(SHIM_NAME, &link)
                .map_err(|e| context(e, format!("linking {}", link.display())))?;
            Ok(link)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_has_every_library() {
        let root = std::env::temp_dir().join(format!("hip-on-cuda-layout-{}", std::process::id()));
        let shim = root.join("built.so");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(&shim, b"shim").unwrap();
        for _ in 0..2 {
            let written = make_layout(&shim, &root.join("rocm")).unwrap();
            assert_eq!(written.len(), LIBRARY_NAMES.len());
            for path in &written {
                assert_eq!(std::fs::read(path).unwrap(), b"shim");
                assert_eq!(std::fs::read_link(path).unwrap(), Path::new(SHIM_NAME));
            }
        }
        let err = make_layout(&root.join("missing.so"), &root.join("rocm")).unwrap_err();
        assert!(err.to_string().contains("missing.so"), "{err}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
