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

use std::sync::OnceLock;

pub use hip_sys::{LoadError, MissingSymbol};

/// Types and constants generated from the ROCm 6.4 headers.
#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    missing_docs,
    clippy::all
)]
pub mod types {
    include!("generated/types.rs");
}

#[allow(non_camel_case_types, non_snake_case, clippy::all)]
mod functions {
    use crate::types::*;
    include!("generated/functions.rs");
}

pub use functions::RocblasApi;
pub use types::*;

/// rocBLAS: override variable and file names, newest first
/// (`.so.5` is ROCm 7, `.so.4` ROCm 6).
pub const ROCBLAS_LIBRARY: hip_sys::loader::LibrarySpec = hip_sys::loader::LibrarySpec {
    name: "librocblas",
    override_var: "ROCBLAS_SYS_LIBROCBLAS",
    file_names: if cfg!(windows) {
        &["rocblas.dll"]
    } else {
        &["librocblas.so.5", "librocblas.so.4", "librocblas.so"]
    },
};

/// rocBLAS, loaded on first use next to the HIP runtime.
pub fn rocblas() -> Result<&'static RocblasApi, LoadError> {
    static API: OnceLock<Result<RocblasApi, LoadError>> = OnceLock::new();
    API.get_or_init(|| hip_sys::load_companion(&ROCBLAS_LIBRARY, RocblasApi::from_library))
        .as_ref()
        .map_err(Clone::clone)
}
