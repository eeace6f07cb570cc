//! A folder shaped like a ROCm install whose libraries are this shim, so
//! that `ROCM_PATH=<folder>` selects it through the normal search order.
//!
//! The shim is copied once to `<folder>/lib/<its file name>` (for example
//! `libhip_on_cuda.so`) and every ROCm library name is a relative symbolic
//! link to it. Because the names
//! resolve to one file, the dynamic loader maps the shim once, so the HIP
//! runtime, hipRTC, rocBLAS, MIOpen and RCCL share one state (current device,
//! contexts) exactly as one ROCm install would.

use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The library names our loaders look for, all served by the one shim.
pub const LIBRARY_NAMES: &[&str] = &[
    "libamdhip64.so.6",
    "libhiprtc.so.6",
    "librocblas.so.4",
    "libMIOpen.so.1",
    "librccl.so.1",
];

fn context(e: io::Error, what: String) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Copies `shim` (the built shim library) to `<root>/lib/` under its own
/// file name and links every name of [`LIBRARY_NAMES`] to it; returns the
/// library paths.
pub fn make_layout(shim: &Path, root: &Path) -> io::Result<Vec<PathBuf>> {
    let shim_name = shim.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no file", shim.display()),
        )
    })?;
    let lib = root.join("lib");
    std::fs::create_dir_all(&lib).map_err(|e| context(e, format!("creating {}", lib.display())))?;
    let copy = lib.join(shim_name);
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
            std::os::unix::fs::symlink(shim_name, &link)
                .map_err(|e| context(e, format!("linking {}", link.display())))?;
            Ok(link)
        })
        .collect()
}

/// The layout command of a shim, `<program> <dir> [<shim.so>]`: makes the
/// layout at `<dir>` from the given shim, or from `default_shim` next to the
/// running executable (cargo's target folder), and prints the paths and the
/// `ROCM_PATH` to export.
pub fn layout_command(program: &str, default_shim: &str) -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(dir) = args.next().map(PathBuf::from) else {
        eprintln!("usage: {program} <dir> [<path to {default_shim}>]");
        return ExitCode::from(2);
    };
    let shim = match args.next() {
        Some(path) => PathBuf::from(path),
        None => match std::env::current_exe() {
            Ok(exe) => exe.with_file_name(default_shim),
            Err(e) => {
                eprintln!("{program}: cannot locate this executable: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    match make_layout(&shim, &dir) {
        Ok(paths) => {
            for path in paths {
                println!("{}", path.display());
            }
            println!("export ROCM_PATH={}", dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{program}: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_has_every_library() {
        let root = std::env::temp_dir().join(format!("shim-layout-{}", std::process::id()));
        let shim = root.join("built.so");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(&shim, b"shim").unwrap();
        for _ in 0..2 {
            let written = make_layout(&shim, &root.join("rocm")).unwrap();
            assert_eq!(written.len(), LIBRARY_NAMES.len());
            for path in &written {
                assert_eq!(std::fs::read(path).unwrap(), b"shim");
                assert_eq!(std::fs::read_link(path).unwrap(), Path::new("built.so"));
            }
        }
        let err = make_layout(&root.join("missing.so"), &root.join("rocm")).unwrap_err();
        assert!(err.to_string().contains("missing.so"), "{err}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
