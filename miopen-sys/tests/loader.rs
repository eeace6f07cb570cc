//! MIOpen is searched only next to the HIP runtime (CPU test with fakes).
#![cfg(target_os = "linux")]

#[path = "../../hip-sys/tests/support/mod.rs"]
mod support;

use miopen_sys::{MIOPEN_LIBRARY, MiopenApi, miopenStatus_t};

const FAKE_MIOPEN: &str = "
#include <stddef.h>
int miopenGetVersion(size_t *major, size_t *minor, size_t *patch) {
    *major = 3; *minor = 4; *patch = 0; return 0;
}
";

#[test]
fn miopen_is_loaded_from_the_runtime_folder_only() {
    let load = || {
        hip_sys::load_companion(&MIOPEN_LIBRARY, MiopenApi::from_library)
            .map(|api| api.library().origin().clone())
    };
    let global = || miopen_sys::miopen().map(|api| api.library().origin().clone());
    if !support::check_companion_search(&MIOPEN_LIBRARY, FAKE_MIOPEN, load, global) {
        return;
    }
    let api = miopen_sys::miopen().expect("loaded above");
    let (mut major, mut minor, mut patch) = (0, 0, 9);
    // SAFETY: valid out-pointers.
    let status =
        unsafe { api.miopenGetVersion(&mut major, &mut minor, &mut patch) }.expect("bound");
    assert_eq!(
        (status, major, minor, patch),
        (miopenStatus_t::miopenStatusSuccess, 3, 4, 0)
    );
    // SAFETY: the call fails before any C code runs.
    let missing = unsafe { api.miopenCreate(std::ptr::null_mut()) }.unwrap_err();
    assert_eq!(missing.symbol, "miopenCreate");
}
