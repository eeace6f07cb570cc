//! hipRTC (clang) options to NVRTC options.
//!
//! - `--offload-arch=X`, `--gpu-architecture=X`, `-arch=X`: kept as
//!   `--gpu-architecture=X` when X is an NVIDIA target (`sm_*`, producing a
//!   CUBIN, or `compute_*`, producing PTX); an AMD target (`gfx*`) is dropped
//!   and the current device's `sm_XY` is used instead.
//! - AMD code-generation options (`-m*`, `-mllvm <arg>`, `-Xclang <arg>`,
//!   `-x <lang>`, `-f*` other than fast math and flushing denormals),
//!   `-O<n>` (NVRTC always optimises and has no `-O`), `-g` and `-W*` are
//!   dropped; `-w` becomes `--disable-warnings`.
//! - `-ffast-math` becomes `--use_fast_math`;
//!   `-fgpu-flush-denormals-to-zero` becomes `--ftz=true`.
//! - `-D`, `-U`, `-I` (attached or as a separate argument), `-std=` and
//!   anything unknown pass through unchanged (NVRTC rejects what it does not
//!   know, which is better than silently ignoring it).

/// The NVRTC options for a hipRTC option list.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Translated {
    /// Options to hand to NVRTC.
    pub(crate) options: Vec<String>,
    /// Options that were dropped, for the program log.
    pub(crate) dropped: Vec<String>,
    /// Whether an NVIDIA architecture was given.
    pub(crate) has_arch: bool,
    /// Whether a language standard was given.
    pub(crate) has_std: bool,
}

/// Options whose value is the next argument and that are dropped together.
const DROPPED_WITH_VALUE: &[&str] = &["-mllvm", "-Xclang", "-x"];
/// Options whose value may be the next argument and that pass through.
const KEPT_WITH_VALUE: &[&str] = &["-D", "-U", "-I"];
/// Prefixes naming the target architecture.
const ARCH_PREFIXES: &[&str] = &[
    "--offload-arch=",
    "--gpu-architecture=",
    "-arch=",
    "--cuda-gpu-arch=",
];

/// Translates hipRTC options into NVRTC options.
pub(crate) fn translate(options: &[String]) -> Translated {
    let mut out = Translated::default();
    let mut args = options.iter();
    while let Some(option) = args.next() {
        let opt = option.as_str();
        if DROPPED_WITH_VALUE.contains(&opt) {
            out.dropped.push(opt.to_string());
            if let Some(value) = args.next() {
                out.dropped.push(value.clone());
            }
        } else if KEPT_WITH_VALUE.contains(&opt) {
            match args.next() {
                Some(value) => out.options.push(format!("{opt}{value}")),
                None => out.dropped.push(opt.to_string()),
            }
        } else if let Some(arch) = ARCH_PREFIXES.iter().find_map(|p| opt.strip_prefix(p)) {
            if arch.starts_with("sm_") || arch.starts_with("compute_") {
                out.options.push(format!("--gpu-architecture={arch}"));
                out.has_arch = true;
            } else {
                out.dropped.push(opt.to_string());
            }
        } else if let Some(mapped) = mapped(opt) {
            out.options.push(mapped.to_string());
        } else if is_dropped(opt) {
            out.dropped.push(opt.to_string());
        } else {
            out.has_std |= opt.starts_with("-std=") || opt.starts_with("--std=");
            out.options.push(opt.to_string());
        }
    }
    out
}

/// Options with a direct NVRTC counterpart.
fn mapped(option: &str) -> Option<&'static str> {
    match option {
        "-ffast-math" => Some("--use_fast_math"),
        "-fgpu-flush-denormals-to-zero" => Some("--ftz=true"),
        "-w" => Some("--disable-warnings"),
        _ => None,
    }
}

/// NVRTC's own single-dash options that look like clang's `-m*`/`-f*`.
const NVRTC_SHORT: &[&str] = &["-maxrregcount=", "-ftz=", "-fmad="];

/// AMD code generation, optimisation levels, debug info and warning flags.
fn is_dropped(option: &str) -> bool {
    if NVRTC_SHORT.iter().any(|p| option.starts_with(p)) {
        return false;
    }
    option.starts_with("-m")
        || option.starts_with("-f")
        || option.starts_with("-O")
        || option.starts_with("-W")
        || option == "-g"
        || option.starts_with("-ggdb")
        || option == "--save-temps"
        || option == "-save-temps"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(options: &[&str]) -> Translated {
        translate(&options.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn architectures() {
        let t = run(&["--offload-arch=sm_90"]);
        assert_eq!(t.options, ["--gpu-architecture=sm_90"]);
        assert!(t.has_arch);
        let t = run(&["--gpu-architecture=compute_80"]);
        assert_eq!(t.options, ["--gpu-architecture=compute_80"]);
        let t = run(&["--offload-arch=gfx90a:sramecc+:xnack-"]);
        assert!(t.options.is_empty());
        assert!(!t.has_arch);
        assert_eq!(t.dropped, ["--offload-arch=gfx90a:sramecc+:xnack-"]);
    }

    #[test]
    fn amd_options_are_dropped_and_defines_pass() {
        let t = run(&[
            "-O3",
            "-mwavefrontsize64",
            "-mcumode",
            "-mllvm",
            "-amdgpu-early-inline-all=true",
            "-DCANDLE_HIP_WAVE=32",
            "-D",
            "FOO=1",
            "-I",
            "/inc",
            "-ffast-math",
            "-fno-gpu-rdc",
            "-std=c++17",
            "-Wall",
            "-w",
        ]);
        assert_eq!(
            t.options,
            [
                "-DCANDLE_HIP_WAVE=32",
                "-DFOO=1",
                "-I/inc",
                "--use_fast_math",
                "-std=c++17",
                "--disable-warnings"
            ]
        );
        assert_eq!(
            t.dropped,
            [
                "-O3",
                "-mwavefrontsize64",
                "-mcumode",
                "-mllvm",
                "-amdgpu-early-inline-all=true",
                "-fno-gpu-rdc",
                "-Wall"
            ]
        );
        assert!(t.has_std);
    }

    #[test]
    fn unknown_options_pass_through() {
        let t = run(&[
            "--some-nvrtc-option",
            "-lineinfo",
            "-ftz=true",
            "-maxrregcount=64",
        ]);
        assert_eq!(
            t.options,
            [
                "--some-nvrtc-option",
                "-lineinfo",
                "-ftz=true",
                "-maxrregcount=64"
            ]
        );
    }
}
