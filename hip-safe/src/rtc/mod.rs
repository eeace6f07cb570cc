//! [`Program`]: HIP C++ compiled at run time with hipRTC, with the target
//! architecture validated first and code objects cached on disk.

mod arch;
mod code_cache;
mod compile;
mod hash;

use std::fmt::Display;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::code_object::{self, CodeTarget};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::module::Module;

pub(crate) use arch::is_nvidia_arch;
use arch::{Platform, platform_archs, validate_arch};
pub use code_cache::{CACHE_DIR_VAR, default_cache_dir};
use code_cache::{CodeCache, CodeCacheKey};

/// Options that choose the target; the target is always set by
/// [`Program::compile_for_arch`] itself.
const TARGET_OPTIONS: &[&str] = &[
    "--offload-arch",
    "--gpu-architecture",
    "-arch",
    "--amdgpu-target",
];

/// A HIP C++ source to compile with hipRTC: the user-defined-kernel API.
///
/// Kernels should be `extern "C" __global__` so they can be found by name.
/// Before compiling, the architecture is checked against the list the loaded
/// hipRTC supports (real hipRTC aborts the process on an unknown one).
/// Compiled code objects are cached on disk, keyed by the source, headers,
/// options, architecture and runtime version; see [`default_cache_dir`].
///
/// ```no_run
/// use hip_safe::{Device, Program};
/// let dev = Device::new(0)?;
/// let module = Program::new(
///     r#"extern "C" __global__ void fill(float* x, float v, unsigned n) {
///         unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
///         if (i < n) x[i] = v;
///     }"#,
///     "fill.hip",
/// )
/// .option("-O3")
/// .define("WAVE_SIZE", dev.wave_size())
/// .compile_for(&dev)?;
/// let fill = module.function("fill")?;
/// # Ok::<(), hip_safe::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Program {
    source: String,
    name: String,
    options: Vec<String>,
    headers: Vec<(String, String)>,
    cache: CodeCacheSetting,
}

/// Where a [`Program`] caches its code objects.
#[derive(Clone, Debug, PartialEq, Eq)]
enum CodeCacheSetting {
    /// [`default_cache_dir`], resolved at compile time.
    Default,
    Dir(PathBuf),
    Disabled,
}

impl Program {
    /// A program from `source`; `name` appears in compiler messages.
    pub fn new(source: &str, name: &str) -> Program {
        Program {
            source: source.to_string(),
            name: name.to_string(),
            options: Vec::new(),
            headers: Vec::new(),
            cache: CodeCacheSetting::Default,
        }
    }

    /// Adds a compiler option, e.g. `-O3` or `-ffast-math`. The target
    /// architecture is not an option: see [`Program::compile_for_arch`].
    pub fn option(mut self, option: impl Into<String>) -> Program {
        self.options.push(option.into());
        self
    }

    /// Adds `-D<name>=<value>`.
    pub fn define(self, name: &str, value: impl Display) -> Program {
        self.option(format!("-D{name}={value}"))
    }

    /// Makes `text` available to `#include "<include_name>"`.
    pub fn header(mut self, include_name: &str, text: &str) -> Program {
        self.headers
            .push((include_name.to_string(), text.to_string()));
        self
    }

    /// Caches code objects in `dir` instead of the default directory.
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Program {
        self.cache = CodeCacheSetting::Dir(dir.into());
        self
    }

    /// Always compiles, never reading or writing the cache.
    pub fn without_cache(mut self) -> Program {
        self.cache = CodeCacheSetting::Disabled;
        self
    }

    /// Compiles for `device`'s architecture (feature suffixes stripped) and
    /// loads the result on it.
    pub fn compile_for(&self, device: &Device) -> Result<Module> {
        let code = self.compile_for_arch(device.arch())?;
        Module::from_code_object(device, &code)
    }

    /// Compiles for `arch` (e.g. `gfx90a`; no GPU needed) and returns the
    /// code object. Fails without compiling when hipRTC does not support
    /// `arch`; a compile error carries the full compile log.
    pub fn compile_for_arch(&self, arch: &str) -> Result<Vec<u8>> {
        let platform = platform();
        validate_arch(arch, platform)?;
        let options = self.full_options(arch)?;
        let key = CodeCacheKey::new(
            &self.source,
            &self.headers,
            &options,
            arch,
            &runtime_id(platform),
        );
        let cache = self.code_cache();
        let target = CodeTarget::for_arch(arch);
        cached_compile(cache.as_ref(), &key, target, || {
            compile::compile(&compile::Job {
                name: &self.name,
                source: &self.source,
                headers: &self.headers,
                options: &options,
                arch,
            })
        })
    }

    /// The AMD architectures the loaded hipRTC is known to compile for
    /// (empty on the HIP-on-CUDA test platform, which takes `sm_NN` names).
    pub fn supported_archs() -> Vec<&'static str> {
        platform_archs(platform())
    }

    /// The user's options followed by `--offload-arch=<arch>`.
    fn full_options(&self, arch: &str) -> Result<Vec<String>> {
        if let Some(bad) = self
            .options
            .iter()
            .find(|o| TARGET_OPTIONS.iter().any(|t| o.starts_with(t)))
        {
            return Err(Error::invalid(
                format_args!("Program `{}`", self.name),
                format_args!(
                    "option `{bad}` sets the target; pass the architecture to compile_for_arch instead"
                ),
            ));
        }
        let mut options = self.options.clone();
        options.push(format!("--offload-arch={arch}"));
        Ok(options)
    }

    fn code_cache(&self) -> Option<CodeCache> {
        match &self.cache {
            CodeCacheSetting::Default => default_cache_dir().map(CodeCache::new),
            CodeCacheSetting::Dir(dir) => Some(CodeCache::new(dir.clone())),
            CodeCacheSetting::Disabled => None,
        }
    }
}

/// The cached code object for `key`, or a fresh one from `compile`, which is
/// then stored. A cached entry that is not a well-formed code object for
/// `target` (see [`Module::from_code_object`]) counts as a miss, so a
/// planted or damaged entry is replaced, never handed out. A cache that
/// cannot be written only costs a recompilation next time, so store errors
/// are deliberately ignored.
fn cached_compile(
    cache: Option<&CodeCache>,
    key: &CodeCacheKey,
    target: CodeTarget,
    compile: impl FnOnce() -> Result<Vec<u8>>,
) -> Result<Vec<u8>> {
    let cached = cache.and_then(|c| c.load(key));
    if let Some(code) = cached.filter(|code| code_object::validate(code, target).is_ok()) {
        return Ok(code);
    }
    let code = compile()?;
    if let Some(cache) = cache {
        let _ = cache.store(key, &code);
    }
    Ok(code)
}

/// The compiling platform, detected once: the HIP-on-CUDA shim when its
/// first device reports an NVIDIA `sm_NN` architecture, AMD otherwise.
fn platform() -> Platform {
    static PLATFORM: OnceLock<Platform> = OnceLock::new();
    *PLATFORM.get_or_init(|| {
        let nvidia =
            crate::is_available() && Device::new(0).is_ok_and(|d| is_nvidia_arch(d.arch()));
        if nvidia {
            Platform::Nvidia
        } else {
            Platform::Amd(hip_sys::runtime_version().ok())
        }
    })
}

/// Identifies the compiler in cache keys.
fn runtime_id(platform: Platform) -> String {
    let version =
        hip_sys::runtime_version().map_or_else(|_| "unknown".to_string(), |v| v.to_string());
    match platform {
        Platform::Nvidia => format!("hip-on-cuda {version}"),
        Platform::Amd(_) => format!("rocm {version}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn temp_cache(name: &str) -> CodeCache {
        let dir =
            std::env::temp_dir().join(format!("hip-safe-rtc-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        CodeCache::new(dir)
    }

    fn key() -> CodeCacheKey {
        CodeCacheKey::new(
            "src",
            &[],
            &["--offload-arch=gfx90a".into()],
            "gfx90a",
            "rocm 6.4.43484",
        )
    }

    /// Code objects for the tests: PTX text is the smallest well-formed one.
    const PTX: &[u8] = b".version 8.5\n.target sm_90\n\0";
    const NV: CodeTarget = CodeTarget::Nvidia;

    #[test]
    fn cold_compiles_warm_hits_corrupt_recompiles() {
        let cache = temp_cache("flow");
        let calls = Cell::new(0);
        let compiler = || {
            calls.set(calls.get() + 1);
            Ok(PTX.to_vec())
        };
        assert_eq!(
            cached_compile(Some(&cache), &key(), NV, compiler).unwrap(),
            PTX
        );
        assert_eq!(calls.get(), 1);
        assert_eq!(
            cached_compile(Some(&cache), &key(), NV, compiler).unwrap(),
            PTX
        );
        assert_eq!(calls.get(), 1, "warm cache must not compile");
        std::fs::write(cache.path_of(&key()), b"corrupt").unwrap();
        assert_eq!(
            cached_compile(Some(&cache), &key(), NV, compiler).unwrap(),
            PTX
        );
        assert_eq!(calls.get(), 2, "corrupt entry must be recompiled");
        assert_eq!(cache.load(&key()).as_deref(), Some(PTX));
        let _ = std::fs::remove_dir_all(cache.path_of(&key()).parent().unwrap());
    }

    #[test]
    fn entries_that_are_not_code_objects_are_recompiled() {
        let cache = temp_cache("malformed");
        // A well-formed cache entry (right key, right checksum) whose code
        // object is cut short: as a damaged or planted file would be.
        let truncated = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0";
        cache.store(&key(), truncated).unwrap();
        assert_eq!(cache.load(&key()).as_deref(), Some(&truncated[..]));
        let calls = Cell::new(0);
        let compiler = || {
            calls.set(calls.get() + 1);
            Ok(PTX.to_vec())
        };
        let amd = CodeTarget::Amd;
        let unterminated_ptx = b".version 8.5\n".to_vec();
        cache.store(&key(), &unterminated_ptx).unwrap();
        assert_eq!(
            cached_compile(Some(&cache), &key(), NV, compiler).unwrap(),
            PTX
        );
        assert_eq!(
            calls.get(),
            1,
            "a PTX entry without its NUL must be recompiled"
        );
        cache.store(&key(), truncated).unwrap();
        assert_eq!(
            cached_compile(Some(&cache), &key(), amd, compiler).unwrap(),
            PTX
        );
        assert_eq!(calls.get(), 2, "a truncated ELF entry must be recompiled");
        let _ = std::fs::remove_dir_all(cache.path_of(&key()).parent().unwrap());
    }

    #[test]
    fn failures_are_not_cached_and_disabled_cache_always_compiles() {
        let cache = temp_cache("failure");
        let failing = || Err(Error::invalid("compile", "syntax error"));
        assert!(cached_compile(Some(&cache), &key(), NV, failing).is_err());
        assert_eq!(cache.load(&key()), None);
        let calls = Cell::new(0);
        let compiler = || {
            calls.set(calls.get() + 1);
            Ok(PTX.to_vec())
        };
        cached_compile(None, &key(), NV, compiler).unwrap();
        cached_compile(None, &key(), NV, compiler).unwrap();
        assert_eq!(calls.get(), 2);
    }

    #[test]
    fn an_unwritable_cache_still_compiles() {
        let file =
            std::env::temp_dir().join(format!("hip-safe-rtc-not-a-dir-{}", std::process::id()));
        std::fs::write(&file, b"x").unwrap();
        let cache = CodeCache::new(file.join("sub"));
        assert_eq!(
            cached_compile(Some(&cache), &key(), NV, || Ok(PTX.to_vec())).unwrap(),
            PTX
        );
        let _ = std::fs::remove_file(&file);
    }

    #[test]
    fn options_end_with_the_target() {
        let p = Program::new("s", "p.hip").option("-O3").define("WAVE", 64);
        assert_eq!(
            p.full_options("gfx942").unwrap(),
            vec!["-O3", "-DWAVE=64", "--offload-arch=gfx942"]
        );
    }

    #[test]
    fn target_options_are_refused() {
        for bad in [
            "--offload-arch=gfx90a",
            "--gpu-architecture=gfx90a",
            "-arch=sm_90",
        ] {
            let err = Program::new("s", "p.hip")
                .option(bad)
                .full_options("gfx90a")
                .unwrap_err();
            assert!(err.to_string().contains("sets the target"), "{err}");
        }
    }

    #[test]
    fn cache_settings() {
        let p = Program::new("s", "p.hip");
        assert_eq!(p.cache, CodeCacheSetting::Default);
        assert_eq!(p.clone().without_cache().code_cache(), None);
        assert_eq!(
            p.cache_dir("/tmp/x").code_cache(),
            Some(CodeCache::new(PathBuf::from("/tmp/x")))
        );
    }

    #[test]
    fn unsupported_arch_fails_before_compiling() {
        let err = Program::new("s", "p.hip")
            .compile_for_arch("gfx9999")
            .unwrap_err();
        assert!(
            matches!(err, Error::Rtc(crate::RtcError::UnsupportedArch { .. })),
            "{err}"
        );
    }
}
