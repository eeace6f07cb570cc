//! rocBLAS is searched only next to the HIP runtime (CPU test with fakes).
#![cfg(target_os = "linux")]

#[path = "../../hip-sys/tests/support/mod.rs"]
mod support;

use rocblas_sys::{ROCBLAS_LIBRARY, RocblasApi, rocblas_status};

const FAKE_ROCBLAS: &str = "
#include <stddef.h>
int rocblas_get_version_string_size(size_t *len) { *len = 42; return 0; }
";

#[test]
fn rocblas_is_loaded_from_the_runtime_folder_only() {
    let load = || {
        hip_sys::load_companion(&ROCBLAS_LIBRARY, RocblasApi::from_library)
            .map(|api| api.library().origin().clone())
    };
    let global = || rocblas_sys::rocblas().map(|api| api.library().origin().clone());
    if !support::check_companion_search(&ROCBLAS_LIBRARY, FAKE_ROCBLAS, load, global) {
        return;
    }
    let api = rocblas_sys::rocblas().expect("loaded above");
    let mut len = 0;
    // SAFETY: `len` is a valid out-pointer.
    let status = unsafe { api.rocblas_get_version_string_size(&mut len) }.expect("bound");
    assert_eq!((status, len), (rocblas_status::rocblas_status_success, 42));
    // SAFETY: the call fails before any C code runs.
    let missing = unsafe { api.rocblas_create_handle(std::ptr::null_mut()) }.unwrap_err();
    assert_eq!(missing.symbol, "rocblas_create_handle");
}
