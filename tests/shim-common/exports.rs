//! The exported C symbols, generated from the very function tables the -sys
//! crates bind (their `generated/functions.rs`), so names and signatures
//! cannot drift from what our loaders expect.
//!
//! Each table is included with a local `dynamic_api!` macro that, instead of
//! a loader struct, emits for every entry
//! `#[unsafe(no_mangle)] pub unsafe extern "C" fn <name>(<args>) -> <ret>`
//! whose body calls the implementation of the same name in `crate::imp`
//! through `crate::ffi::guard`, timed by `crate::profile` when
//! `HIP_SHIM_PROFILE` is set. A bound function without an implementation
//! (or with a different signature) is a compile error.

/// Emits one guarded C export per function of a generated table, plus the
/// list of exported names.
macro_rules! dynamic_api {
    (
        $(#[$struct_meta:meta])*
        pub struct $api:ident;
        $(
            $(#[$fn_meta:meta])*
            pub fn $name:ident($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty;
        )*
    ) => {
        $(#[$struct_meta])*
        #[allow(non_snake_case, clippy::too_many_arguments)]
        pub mod $api {
            use super::*;

            /// Names of the exported functions of this table.
            pub const SYMBOLS: &[&str] = &[$(stringify!($name)),*];

            $(
                $(#[$fn_meta])*
                ///
                /// # Safety
                /// The C contract of the ROCm function of the same name.
                #[unsafe(no_mangle)]
                pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                    static STAT: crate::profile::Stat = crate::profile::Stat::new();
                    crate::profile::timed(&STAT, stringify!($name), || {
                        // SAFETY: forwarded unchanged; the caller upholds the C contract.
                        crate::ffi::guard(|| unsafe { crate::imp::$name($($arg),*) })
                    })
                }
            )*
        }
    };
}

pub(crate) use dynamic_api;

/// `hip_sys::dynamic_api!` as the rocBLAS and MIOpen tables spell it.
mod hip_sys {
    pub(crate) use super::dynamic_api;
}

/// The HIP runtime and hipRTC exports: modules `HipApi` and `HiprtcApi`.
pub mod hip {
    use hip_sys::types::*;
    include!("../../hip-sys/src/generated/functions.rs");
}

/// The rocBLAS exports: module `RocblasApi`.
pub mod rocblas {
    use super::hip_sys;
    use rocblas_sys::types::*;
    include!("../../rocblas-sys/src/generated/functions.rs");
}

/// The MIOpen exports: module `MiopenApi`.
pub mod miopen {
    use super::hip_sys;
    use miopen_sys::types::*;
    include!("../../miopen-sys/src/generated/functions.rs");
}

/// The RCCL exports: module `RcclApi`.
pub mod rccl {
    use super::hip_sys;
    use rccl_sys::types::*;
    include!("../../rccl-sys/src/generated/functions.rs");
}
