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

/// MIOpen's file names on Linux (`.so.1` in both ROCm 6 and 7).
pub const MIOPEN_LINUX_NAMES: &[&str] = &["libMIOpen.so.1", "libMIOpen.so"];

/// MIOpen's file name on Windows. AMD's HIP SDK for Windows does not ship
/// MIOpen (it lists it as not available there); Windows builds of ROCm that
/// do carry it name it `MIOpen.dll`.
pub const MIOPEN_WINDOWS_NAMES: &[&str] = &["MIOpen.dll"];

/// MIOpen: override variable and file names, newest first
/// ([`MIOPEN_WINDOWS_NAMES`] on Windows, [`MIOPEN_LINUX_NAMES`] elsewhere).
pub const MIOPEN_LIBRARY: hip_sys::loader::LibrarySpec = hip_sys::loader::LibrarySpec {
    name: "libMIOpen",
    description: "MIOpen",
    override_var: "MIOPEN_SYS_LIBMIOPEN",
    file_names: if cfg!(windows) {
        MIOPEN_WINDOWS_NAMES
    } else {
        MIOPEN_LINUX_NAMES
    },
    identifying_symbols: &["miopenGetVersion"],
};

hip_sys::companion_library! {
    /// MIOpen, loaded on first use next to the HIP runtime.
    pub fn miopen() -> MiopenApi = MIOPEN_LIBRARY;
}

#[cfg(test)]
mod file_name_tests {
    use super::*;

    #[test]
    fn each_platform_has_its_names_and_searches_its_own_list() {
        assert_eq!(MIOPEN_WINDOWS_NAMES, ["MIOpen.dll"]);
        assert_eq!(MIOPEN_LINUX_NAMES, ["libMIOpen.so.1", "libMIOpen.so"]);
        let own = if cfg!(windows) {
            MIOPEN_WINDOWS_NAMES
        } else {
            MIOPEN_LINUX_NAMES
        };
        assert_eq!(MIOPEN_LIBRARY.file_names, own);
    }
}
