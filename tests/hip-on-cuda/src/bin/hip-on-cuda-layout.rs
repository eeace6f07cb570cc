//! `hip-on-cuda-layout <dir> [<shim.so>]`: copies the built shim to
//! `<dir>/lib/libhip_on_cuda.so` and links `libamdhip64.so.6`,
//! `libhiprtc.so.6`, `librocblas.so.4` and `libMIOpen.so.1` to it, so that
//! `ROCM_PATH=<dir>` selects it. The shim defaults to `libhip_on_cuda.so`
//! next to this executable (cargo's target folder).

fn main() -> std::process::ExitCode {
    hip_on_cuda::layout::layout_command("hip-on-cuda-layout", "libhip_on_cuda.so")
}
