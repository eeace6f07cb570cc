//! Raw FFI for RCCL, AMD's port of NCCL, resolved at run time.
//!
//! RCCL keeps NCCL's C API: its functions are named `nccl*` and take HIP
//! streams. It is loaded from the directory where `hip-sys` found the HIP
//! runtime, so that libraries of two ROCm releases are never mixed. Types and
//! constants are generated from the RCCL 7.2 headers; `ncclResult_t`,
//! `ncclDataType_t` and `ncclRedOp_t` are integer newtypes with associated
//! constants (the numbers are the same in RCCL 5.4 and 7.2, and in NCCL).
//!
//! ```no_run
//! match rccl_sys::rccl() {
//!     Ok(api) => println!("RCCL from {}", api.library().origin()),
//!     Err(e) => println!("no RCCL: {}", e.summary()),
//! }
//! ```

pub use hip_sys::{LoadError, MissingSymbol};

hip_sys::generated_bindings!();

pub use functions::RcclApi;

/// RCCL's file names on Linux: every release since ROCm 5 ships
/// `librccl.so.1`. RCCL has no Windows build.
pub const RCCL_LINUX_NAMES: &[&str] = &["librccl.so.1", "librccl.so"];

/// RCCL: override variable and file names.
pub const RCCL_LIBRARY: hip_sys::loader::LibrarySpec = hip_sys::loader::LibrarySpec {
    name: "librccl",
    description: "RCCL",
    override_var: "RCCL_SYS_LIBRCCL",
    file_names: RCCL_LINUX_NAMES,
    identifying_symbols: &["ncclGetVersion", "ncclCommInitRank"],
};

hip_sys::companion_library! {
    /// RCCL, loaded on first use next to the HIP runtime.
    pub fn rccl() -> RcclApi = RCCL_LIBRARY;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_enum_numbers_match_the_headers() {
        assert_eq!(ncclResult_t::ncclSuccess.0, 0);
        assert_eq!(ncclResult_t::ncclInvalidUsage.0, 5);
        assert_eq!(ncclResult_t::ncclInProgress.0, 7);
        assert_eq!(ncclDataType_t::ncclBfloat16.0, 9);
        assert_eq!(ncclDataType_t::ncclFloat32.0, 7);
        assert_eq!(ncclRedOp_t::ncclAvg.0, 4);
        assert_eq!(core::mem::size_of::<ncclUniqueId>(), 128);
    }
}
