//! `hip-on-cuda-layout <dir> [<shim.so>]`: copies the built shim to
//! `<dir>/lib/libhip_on_cuda.so` and links `libamdhip64.so.6`,
//! `libhiprtc.so.6`, `librocblas.so.4` and `libMIOpen.so.1` to it, so that
//! `ROCM_PATH=<dir>` selects it. The shim defaults to `libhip_on_cuda.so`
//! next to this executable (cargo's target folder).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(dir) = args.next().map(PathBuf::from) else {
        eprintln!("usage: hip-on-cuda-layout <dir> [<path to libhip_on_cuda.so>]");
        return ExitCode::from(2);
    };
    let shim = match args.next() {
        Some(path) => PathBuf::from(path),
        None => match std::env::current_exe() {
            Ok(exe) => exe.with_file_name("libhip_on_cuda.so"),
            Err(e) => {
                eprintln!("hip-on-cuda-layout: cannot locate this executable: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    match hip_on_cuda::layout::make_layout(&shim, &dir) {
        Ok(paths) => {
            for path in paths {
                println!("{}", path.display());
            }
            println!("export ROCM_PATH={}", dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hip-on-cuda-layout: {e}");
            ExitCode::FAILURE
        }
    }
}
