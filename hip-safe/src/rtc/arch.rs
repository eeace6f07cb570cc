//! Which GPU architectures hipRTC can compile for, checked before compiling:
//! real hipRTC aborts the whole process (inside comgr) on an unknown arch.

use hip_sys::RuntimeVersion;

use crate::error::RtcError;

/// AMD architectures and the first ROCm release whose hipRTC compiles for
/// them (conservative: a release that may support an arch but is not known
/// to is treated as not supporting it, because the failure mode is an abort).
/// gfx940 and gfx941 are left out on purpose: they were dropped from LLVM,
/// and ROCm 6.4's hipRTC aborts on them. The sandbox test
/// `sandbox_every_listed_arch_really_compiles` compiles for every entry.
const AMD_ARCHS: &[(&str, (u32, u32))] = &[
    ("gfx803", (5, 0)),
    ("gfx900", (5, 0)),
    ("gfx906", (5, 0)),
    ("gfx908", (5, 0)),
    ("gfx90a", (5, 0)),
    ("gfx90c", (5, 0)),
    ("gfx942", (5, 5)),
    ("gfx950", (7, 0)),
    ("gfx1010", (5, 0)),
    ("gfx1011", (5, 0)),
    ("gfx1012", (5, 0)),
    ("gfx1030", (5, 0)),
    ("gfx1031", (5, 0)),
    ("gfx1032", (5, 0)),
    ("gfx1034", (5, 0)),
    ("gfx1035", (5, 0)),
    ("gfx1036", (5, 5)),
    ("gfx1100", (5, 5)),
    ("gfx1101", (5, 5)),
    ("gfx1102", (5, 5)),
    ("gfx1103", (5, 5)),
    ("gfx1150", (6, 0)),
    ("gfx1151", (6, 0)),
    ("gfx1200", (6, 4)),
    ("gfx1201", (6, 4)),
];

/// The runtime assumed when the version cannot be read: the oldest one, so
/// only architectures every supported release knows are accepted.
const FALLBACK_RUNTIME: (u32, u32) = (5, 0);

/// What is compiling: an AMD hipRTC of some version, or the HIP-on-CUDA test
/// platform (NVRTC underneath, NVIDIA `sm_NN` targets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Platform {
    /// AMD hipRTC; `None` when the version could not be read.
    Amd(Option<RuntimeVersion>),
    /// The HIP-on-CUDA shim (its devices report `sm_NN` arch names).
    Nvidia,
}

/// Accepts `arch` if the platform's hipRTC can compile for it.
pub(crate) fn validate_arch(arch: &str, platform: Platform) -> Result<(), RtcError> {
    let reject = |reason: String| {
        Err(RtcError::UnsupportedArch {
            arch: arch.to_string(),
            reason,
        })
    };
    if arch.contains(':') {
        return reject("pass the bare name without feature suffixes (e.g. gfx90a)".into());
    }
    match platform {
        Platform::Nvidia if is_nvidia_arch(arch) => Ok(()),
        Platform::Nvidia => {
            reject("the loaded HIP runtime drives NVIDIA devices; expected an sm_NN target".into())
        }
        Platform::Amd(version) => {
            let have = version.map_or(FALLBACK_RUNTIME, |v| (v.major, v.minor));
            let version_text =
                version.map_or_else(|| "of unknown version".into(), |v| v.to_string());
            match AMD_ARCHS.iter().find(|(name, _)| *name == arch) {
                Some((_, need)) if *need <= have => Ok(()),
                Some((_, need)) => reject(format!(
                    "needs ROCm {}.{} or newer, the loaded runtime is {version_text}",
                    need.0, need.1
                )),
                None => reject(format!(
                    "unknown architecture; the loaded runtime ({version_text}) accepts: {}",
                    supported_archs(have).join(", ")
                )),
            }
        }
    }
}

/// `sm_NN` / `sm_NNa`: an NVIDIA target, meaningful only on the test shim.
pub(crate) fn is_nvidia_arch(arch: &str) -> bool {
    arch.strip_prefix("sm_").is_some_and(|rest| {
        let digits = rest.trim_end_matches(['a', 'f']);
        !digits.is_empty()
            && digits.len() + 1 >= rest.len()
            && digits.bytes().all(|b| b.is_ascii_digit())
    })
}

/// The AMD architectures `platform` compiles for (none listed for NVIDIA,
/// where any `sm_NN` is accepted).
pub(crate) fn platform_archs(platform: Platform) -> Vec<&'static str> {
    match platform {
        Platform::Amd(version) => {
            supported_archs(version.map_or(FALLBACK_RUNTIME, |v| (v.major, v.minor)))
        }
        Platform::Nvidia => Vec::new(),
    }
}

fn supported_archs(have: (u32, u32)) -> Vec<&'static str> {
    AMD_ARCHS
        .iter()
        .filter(|(_, need)| *need <= have)
        .map(|(name, _)| *name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rocm(raw: i32) -> Platform {
        Platform::Amd(Some(RuntimeVersion::from_raw(raw)))
    }

    #[test]
    fn rocm_6_4_accepts_the_test_targets() {
        for arch in [
            "gfx90a", "gfx942", "gfx1100", "gfx1201", "gfx908", "gfx1030",
        ] {
            assert_eq!(validate_arch(arch, rocm(60443484)), Ok(()), "{arch}");
        }
    }

    #[test]
    fn unknown_archs_are_rejected_with_the_accepted_list() {
        let err = validate_arch("gfx9999", rocm(60443484)).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("gfx9999") && text.contains("gfx90a, "),
            "{text}"
        );
        assert!(validate_arch("", rocm(60443484)).is_err());
        assert!(validate_arch("sm_90", rocm(60443484)).is_err());
        assert!(validate_arch("gfx940", rocm(60443484)).is_err());
    }

    #[test]
    fn rocm_5_2_rejects_archs_that_abort_it() {
        for arch in ["gfx1100", "gfx942", "gfx1201"] {
            let err = validate_arch(arch, rocm(50221153)).unwrap_err().to_string();
            assert!(err.contains("needs ROCm"), "{err}");
        }
        assert_eq!(validate_arch("gfx90a", rocm(50221153)), Ok(()));
    }

    #[test]
    fn unknown_version_is_conservative() {
        assert_eq!(validate_arch("gfx90a", Platform::Amd(None)), Ok(()));
        assert!(validate_arch("gfx1201", Platform::Amd(None)).is_err());
    }

    #[test]
    fn feature_suffixes_are_refused() {
        let err = validate_arch("gfx90a:xnack-", rocm(60443484))
            .unwrap_err()
            .to_string();
        assert!(err.contains("without feature suffixes"), "{err}");
    }

    #[test]
    fn nvidia_targets_only_on_the_shim() {
        assert_eq!(validate_arch("sm_90", Platform::Nvidia), Ok(()));
        assert_eq!(validate_arch("sm_90a", Platform::Nvidia), Ok(()));
        assert_eq!(validate_arch("sm_120", Platform::Nvidia), Ok(()));
        assert!(validate_arch("sm_", Platform::Nvidia).is_err());
        assert!(validate_arch("sm_9x", Platform::Nvidia).is_err());
        assert!(validate_arch("gfx90a", Platform::Nvidia).is_err());
    }
}
