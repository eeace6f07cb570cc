//! Raw FFI for rocBLAS, resolved at run time.
//!
//! rocBLAS is loaded from the directory where `hip-sys` found the HIP
//! runtime, so that libraries of two ROCm releases are never mixed. Types and
//! constants are generated from the ROCm 6.4 headers; `rocblas_status` and
//! the other enums are integer newtypes with associated constants.
//!
//! ```no_run
//! match rocblas_sys::rocblas() {
//!     Ok(api) => println!("rocBLAS from {}", api.library().origin()),
//!     Err(e) => println!("no rocBLAS: {}", e.summary()),
//! }
//! ```

pub use hip_sys::{LoadError, MissingSymbol};

hip_sys::generated_bindings!();

pub use functions::RocblasApi;

/// rocBLAS's file names on Linux, newest first (`.so.5` is ROCm 7, `.so.4`
/// ROCm 6).
pub const ROCBLAS_LINUX_NAMES: &[&str] = &["librocblas.so.5", "librocblas.so.4", "librocblas.so"];

/// rocBLAS's file name on Windows: every HIP SDK (5.5 to 7.x) installs an
/// unversioned `rocblas.dll` in its `bin` folder.
pub const ROCBLAS_WINDOWS_NAMES: &[&str] = &["rocblas.dll"];

/// rocBLAS: override variable and file names, newest first
/// ([`ROCBLAS_WINDOWS_NAMES`] on Windows, [`ROCBLAS_LINUX_NAMES`] elsewhere).
pub const ROCBLAS_LIBRARY: hip_sys::loader::LibrarySpec = hip_sys::loader::LibrarySpec {
    name: "librocblas",
    description: "rocBLAS",
    override_var: "ROCBLAS_SYS_LIBROCBLAS",
    file_names: if cfg!(windows) {
        ROCBLAS_WINDOWS_NAMES
    } else {
        ROCBLAS_LINUX_NAMES
    },
    identifying_symbols: &["rocblas_get_version_string_size"],
};

hip_sys::companion_library! {
    /// rocBLAS, loaded on first use next to the HIP runtime.
    pub fn rocblas() -> RocblasApi = ROCBLAS_LIBRARY;
}

#[cfg(test)]
mod file_name_tests {
    use super::*;

    #[test]
    fn each_platform_has_its_names_and_searches_its_own_list() {
        assert_eq!(ROCBLAS_WINDOWS_NAMES, ["rocblas.dll"]);
        assert_eq!(
            ROCBLAS_LINUX_NAMES,
            ["librocblas.so.5", "librocblas.so.4", "librocblas.so"]
        );
        let own = if cfg!(windows) {
            ROCBLAS_WINDOWS_NAMES
        } else {
            ROCBLAS_LINUX_NAMES
        };
        assert_eq!(ROCBLAS_LIBRARY.file_names, own);
    }
}
