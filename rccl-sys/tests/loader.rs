//! RCCL is searched only next to the HIP runtime (CPU test with fakes).
#![cfg(target_os = "linux")]

#[path = "../../hip-sys/tests/support/mod.rs"]
mod support;

use rccl_sys::{RCCL_LIBRARY, RcclApi, ncclResult_t};

const FAKE_RCCL: &str = "
int ncclGetVersion(int *version) { *version = 22203; return 0; }
int ncclCommInitRank(void **comm, int nranks, char id[128], int rank) { return 4; }
";

#[test]
fn rccl_is_loaded_from_the_runtime_folder_only() {
    let load = || {
        hip_sys::load_companion(&RCCL_LIBRARY, RcclApi::from_library)
            .map(|api| api.library().origin().clone())
    };
    let global = || rccl_sys::rccl().map(|api| api.library().origin().clone());
    if !support::check_companion_search(&RCCL_LIBRARY, FAKE_RCCL, load, global) {
        return;
    }
    let api = rccl_sys::rccl().expect("loaded above");
    let mut version = 0;
    // SAFETY: `version` is a valid out-pointer.
    let status = unsafe { api.ncclGetVersion(&mut version) }.expect("bound");
    assert_eq!((status, version), (ncclResult_t::ncclSuccess, 22203));
    // SAFETY: the call fails before any C code runs.
    let missing = unsafe { api.ncclGroupStart() }.unwrap_err();
    assert_eq!(missing.symbol, "ncclGroupStart");
}
