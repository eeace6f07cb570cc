//! hipRTC (clang) options to host compiler options.
//!
//! - `--offload-arch=X` (also `--gpu-architecture=X`, `-arch=X`): X must be
//!   an AMD target this platform knows (feature suffixes such as
//!   `:sramecc+` are ignored); it sets the wave size (64 for `gfx9*`, 32
//!   otherwise) and the target macro (`__gfx942__`). Without one, the
//!   emulated device's target is used. `-mwavefrontsize64` and
//!   `-mno-wavefrontsize64` override the wave size, as with clang.
//! - `-D`, `-U` (attached or separate) and `-std=` pass through; `-I` is
//!   refused (hipRTC programs get their headers by name).
//! - `-O<n>`, `-g`, `-w`, `-W*`, `-f*`, other `-m*`, and `-mllvm`/`-Xclang`
//!   with their value are AMD code-generation or diagnostic options: they
//!   are dropped and listed in the log.
//! - Anything else is refused with `HIPRTC_ERROR_INVALID_OPTION`.

/// Options the host compiler gets, and what was dropped.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Parsed {
    /// Bare AMD target name (`gfx942`).
    pub(crate) arch: String,
    /// Lanes per wave.
    pub(crate) wave: u32,
    /// `-D`/`-U`/`-std=` options, passed through.
    pub(crate) pass: Vec<String>,
    /// Options that were dropped, for the log.
    pub(crate) dropped: Vec<String>,
}

const ARCH_PREFIXES: &[&str] = &["--offload-arch=", "--gpu-architecture=", "-arch="];
const DROPPED_WITH_VALUE: &[&str] = &["-mllvm", "-Xclang"];

/// The wave size of an AMD target: 64 for GCN/CDNA (`gfx9*`, `gfx8*`), 32
/// for RDNA (`gfx10*` and newer); `None` for a name that is not a target.
pub(crate) fn wave_of(arch: &str) -> Option<u32> {
    let digits = arch.strip_prefix("gfx")?;
    if digits.len() < 3 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(if digits.len() == 3 { 64 } else { 32 })
}

/// Parses a hipRTC option list; the message says what is wrong.
pub(crate) fn parse(options: &[String]) -> Result<Parsed, String> {
    let device = crate::hip::device::target()?;
    let mut out = Parsed {
        arch: device.arch.to_string(),
        wave: device.wave,
        ..Parsed::default()
    };
    let mut wave_override = None;
    let mut args = options.iter();
    while let Some(option) = args.next() {
        let opt = option.as_str();
        if let Some(arch) = ARCH_PREFIXES.iter().find_map(|p| opt.strip_prefix(p)) {
            let bare = arch.split(':').next().unwrap_or(arch);
            out.wave =
                wave_of(bare).ok_or_else(|| format!("hip-on-cpu: `{opt}` names no AMD target"))?;
            out.arch = bare.to_string();
        } else if opt == "-mwavefrontsize64" {
            wave_override = Some(64);
        } else if opt == "-mno-wavefrontsize64" {
            wave_override = Some(32);
        } else if opt == "-D" || opt == "-U" {
            let value = args
                .next()
                .ok_or_else(|| format!("hip-on-cpu: `{opt}` without a value"))?;
            out.pass.push(format!("{opt}{value}"));
        } else if opt.starts_with("-D") || opt.starts_with("-U") || opt.starts_with("-std=") {
            out.pass.push(opt.to_string());
        } else if DROPPED_WITH_VALUE.contains(&opt) {
            out.dropped.push(opt.to_string());
            out.dropped.extend(args.next().cloned());
        } else if ["-O", "-g", "-w", "-W", "-f", "-m"]
            .iter()
            .any(|p| opt.starts_with(p))
        {
            out.dropped.push(opt.to_string());
        } else {
            return Err(format!("hip-on-cpu: unsupported hipRTC option `{opt}`"));
        }
    }
    if let Some(wave) = wave_override {
        out.wave = wave;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn targets_choose_the_wave() {
        assert_eq!(wave_of("gfx942"), Some(64));
        assert_eq!(wave_of("gfx90a"), Some(64));
        assert_eq!(wave_of("gfx1100"), Some(32));
        assert_eq!(wave_of("sm_90"), None);
        let p = parse(&strings(&[
            "-O3",
            "--offload-arch=gfx1100",
            "-D",
            "X=1",
            "-DY",
        ]))
        .unwrap();
        assert_eq!((p.arch.as_str(), p.wave), ("gfx1100", 32));
        assert_eq!(p.pass, strings(&["-DX=1", "-DY"]));
        assert_eq!(p.dropped, strings(&["-O3"]));
        let p = parse(&strings(&["--offload-arch=gfx1100", "-mwavefrontsize64"])).unwrap();
        assert_eq!(p.wave, 64);
    }

    #[test]
    fn unknown_options_are_refused() {
        assert!(
            parse(&strings(&["--offload-arch=sm_90"]))
                .unwrap_err()
                .contains("sm_90")
        );
        assert!(parse(&strings(&["-I/tmp"])).unwrap_err().contains("-I/tmp"));
        assert!(parse(&strings(&["-D"])).is_err());
    }
}
