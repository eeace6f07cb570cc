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

pub use hip_sys::{LoadError, MissingSymbol};

hip_sys::generated_bindings!();

pub use functions::MiopenApi;

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

hip_sys::companion_library! {
    /// MIOpen, loaded on first use next to the HIP runtime.
    pub fn miopen() -> MiopenApi = MIOPEN_LIBRARY;
}
