//! Raw FFI for MIOpen, resolved at run time.
//!
//! MIOpen is loaded from the directory where `hip-sys` found the HIP
//! runtime, so that libraries of two ROCm releases are never mixed. Types and
//! constants are generated from the ROCm 6.4 headers; `miopenStatus_t` and
//! the other enums are integer newtypes with associated constants.
//!
//! ```no_run
//! match miopen_sys::miopen() {
//!     Ok(api) => println!("MIOpen from {}", api.library().origin()),
//!     Err(e) => println!("no MIOpen: {}", e.summary()),
//! }
//! ```

mod layout;

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

pub use functions::MiopenApi;
pub use types::*;

/// MIOpen: override variable and file names, newest first
/// (`.so.1` in both ROCm 6 and 7).
pub const MIOPEN_LIBRARY: hip_sys::loader::LibrarySpec = hip_sys::loader::LibrarySpec {
    name: "libMIOpen",
    override_var: "MIOPEN_SYS_LIBMIOPEN",
    file_names: if cfg!(windows) {
        &["MIOpen.dll"]
    } else {
        &["libMIOpen.so.1", "libMIOpen.so"]
    },
};

/// MIOpen, loaded on first use next to the HIP runtime.
pub fn miopen() -> Result<&'static MiopenApi, LoadError> {
    static API: OnceLock<Result<MiopenApi, LoadError>> = OnceLock::new();
    API.get_or_init(|| hip_sys::load_companion(&MIOPEN_LIBRARY, MiopenApi::from_library))
        .as_ref()
        .map_err(Clone::clone)
}
