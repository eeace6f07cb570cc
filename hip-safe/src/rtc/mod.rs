//! [`Program`]: HIP C++ compiled at run time with hipRTC, with the target
//! architecture validated first and code objects cached on disk. Compiles
//! from several threads run side by side, on AMD's hipRTC through further
//! copies of it (`copies`).

mod arch;
mod code_cache;
mod compile;
mod copies;
mod hash;

use std::fmt::Display;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::code_object::{self, CodeTarget};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::module::Module;
use crate::result::CheckStatus;

pub(crate) use arch::is_nvidia_arch;
use arch::{Platform, platform_archs, validate_arch};
pub use code_cache::{CACHE_DIR_VAR, MAX_CACHE_BYTES, default_cache_dir};
use code_cache::{CodeCache, CodeCacheKey};

/// Options that make the compiler read files from disk (include paths,
/// forced includes, another ROCm or CUDA tree). hipRTC does not report which
/// files a compile read, so their content cannot be part of a cache key:
/// programs with such options are not cached.
const FILE_READING_OPTIONS: &[&str] = &[
    "-I",
    "--include-path",
    "-isystem",
    "-iquote",
    "-idirafter",
    "-iprefix",
    "-iwithprefix",
    "-include",
    "-imacros",
    "--pre-include",
    "--sysroot",
    "-isysroot",
    "--rocm-path",
    "--hip-path",
    "--hip-device-lib",
    "--rocm-device-lib-path",
    "--cuda-path",
];

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
/// options, architecture and the compiler's identity (hipRTC's version and
/// library file, the HIP runtime's version); see [`default_cache_dir`] for
/// where, when a directory is refused, and the size limit.
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

    /// Caches code objects in `dir` instead of the default directory. The
    /// directory must belong to the current user and not be writable by
    /// group or others; otherwise it is not used (see [`default_cache_dir`]).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Program {
        self.cache = CodeCacheSetting::Dir(dir.into());
        self
    }

    /// Always compiles, never reading or writing the cache.
    pub fn without_cache(mut self) -> Program {
        self.cache = CodeCacheSetting::Disabled;
        self
    }

    /// A hash of everything the code object depends on besides the target
    /// and the compiler: the source, the in-memory headers and the options
    /// (FNV-1a 128 of their unambiguous serialisation, in the first 16 of
    /// the 32 bytes). A [`crate::CodeBundle`] keys its code objects by it.
    pub fn source_hash(&self) -> crate::SourceHash {
        let key = CodeCacheKey::new(&self.source, &self.headers, &self.options, "", "");
        let mut bytes = [0u8; 32];
        bytes[..16].copy_from_slice(&key.hash().to_le_bytes());
        crate::SourceHash::from(bytes)
    }

    /// The loaded compiler as code-object caches and bundles record it: the
    /// platform, hipRTC's version, the hipRTC library and the runtime's
    /// version.
    pub fn compiler_identity() -> String {
        compiler_id(platform()).to_string()
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
    ///
    /// A program with an option that makes the compiler read files from
    /// disk (`-I`, `-isystem`, `-include`, `--rocm-path`, ...) is compiled
    /// every time: hipRTC does not say which files it read, so a cache key
    /// could not cover their content. Headers given with
    /// [`Program::header`] are part of the key.
    pub fn compile_for_arch(&self, arch: &str) -> Result<Vec<u8>> {
        let platform = platform();
        validate_arch(arch, platform)?;
        let options = self.full_options(arch)?;
        let key = CodeCacheKey::new(
            &self.source,
            &self.headers,
            &options,
            arch,
            compiler_id(platform),
        );
        let cache = self.code_cache_for(&options);
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

    /// The cache for a compile with `options`: none when an option reads
    /// files from disk (see [`FILE_READING_OPTIONS`]).
    fn code_cache_for(&self, options: &[String]) -> Option<CodeCache> {
        let reads_files = options
            .iter()
            .any(|o| FILE_READING_OPTIONS.iter().any(|f| o.starts_with(f)));
        if reads_files {
            return None;
        }
        self.code_cache()
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

/// Identifies the compiler in cache keys (computed once per process): the
/// platform, hipRTC's own version, the hipRTC library file that was loaded
/// and the HIP runtime's full version. See [`describe_compiler`].
fn compiler_id(platform: Platform) -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let rtc = hip_sys::hiprtc().ok();
        describe_compiler(
            match platform {
                Platform::Nvidia => "hip-on-cuda",
                Platform::Amd(_) => "rocm",
            },
            rtc.and_then(hiprtc_version),
            rtc.map(|api| library_stamp(api.library().origin()))
                .as_deref(),
            hip_sys::runtime_version()
                .ok()
                .map(|v| v.to_string())
                .as_deref(),
        )
    })
}

/// The compiler identity of a cache key: `platform`, hipRTC's version as
/// `hiprtcVersion` reports it, the loaded hipRTC library (see
/// [`library_stamp`]: an update or rebuild of the library, which carries
/// hipRTC's built-in headers, changes it even when the version does not)
/// and the HIP runtime's version (with its build number); `unknown` for
/// what could not be read.
fn describe_compiler(
    platform: &str,
    hiprtc: Option<(i32, i32)>,
    library: Option<&str>,
    runtime: Option<&str>,
) -> String {
    let hiprtc = hiprtc.map_or_else(
        || "unknown".into(),
        |(major, minor)| format!("{major}.{minor}"),
    );
    format!(
        "{platform}; hipRTC {hiprtc}; library {}; HIP runtime {}",
        library.unwrap_or("unknown"),
        runtime.unwrap_or("unknown")
    )
}

/// hipRTC's own version (`hiprtcVersion`), `None` when it cannot say.
fn hiprtc_version(api: &hip_sys::HiprtcApi) -> Option<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two valid out-pointers to ints.
    unsafe { api.hiprtcVersion(&mut major, &mut minor) }
        .check("hiprtcVersion")
        .ok()?;
    Some((major, minor))
}

/// A library file as the key sees it: its resolved path (which on ROCm
/// carries the full version), size and modification time. A library the
/// system loader found by name is looked up among the files this process
/// mapped (Linux); elsewhere its name is all there is.
fn library_stamp(origin: &hip_sys::loader::Candidate) -> String {
    let path = match origin {
        hip_sys::loader::Candidate::Path(path) => path.clone(),
        hip_sys::loader::Candidate::SystemName(name) => match mapped_library(name) {
            Some(path) => path,
            None => return origin.to_string(),
        },
    };
    file_stamp(&path)
}

/// The file the system loader mapped for the library `name` (e.g.
/// `libhiprtc.so.6` -> `/usr/lib/x86_64-linux-gnu/libhiprtc.so.6.4.43484`),
/// read from `/proc/self/maps`; `None` where there is no such file.
fn mapped_library(name: &str) -> Option<PathBuf> {
    let prefix = format!("{}.so", name.split(".so").next()?);
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .map(std::path::Path::new)
        .find(|path| {
            path.file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with(&prefix))
        })
        .map(std::path::Path::to_path_buf)
}

/// `path` resolved, with its size and modification time.
fn file_stamp(path: &std::path::Path) -> String {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let Ok(meta) = std::fs::metadata(&real) else {
        return real.display().to_string();
    };
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!(
        "{} ({} bytes, modified {modified})",
        real.display(),
        meta.len()
    )
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
    fn the_compiler_identity_names_hiprtc_and_its_library() {
        let id = |rtc, lib| describe_compiler("rocm", rtc, lib, Some("6.4.43484"));
        let base = id(
            Some((6, 4)),
            Some("/opt/rocm/lib/libhiprtc.so.6.4.43484 (1 bytes)"),
        );
        assert!(
            base.contains("hipRTC 6.4") && base.contains("HIP runtime 6.4.43484"),
            "{base}"
        );
        // Same HIP runtime, another hipRTC or another hipRTC library file.
        assert_ne!(
            base,
            id(
                Some((7, 0)),
                Some("/opt/rocm/lib/libhiprtc.so.6.4.43484 (1 bytes)")
            )
        );
        assert_ne!(
            base,
            id(
                Some((6, 4)),
                Some("/opt/rocm/lib/libhiprtc.so.6.4.43484 (2 bytes)")
            )
        );
        assert_ne!(base, id(None, None));
        assert_eq!(
            describe_compiler("hip-on-cuda", None, None, None),
            "hip-on-cuda; hipRTC unknown; library unknown; HIP runtime unknown"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn libraries_found_by_name_are_identified_by_their_mapped_file() {
        // Every Linux test process has the C library mapped.
        let libc = mapped_library("libc.so.6").expect("libc is mapped");
        assert!(libc.is_absolute(), "{}", libc.display());
        let stamp = library_stamp(&hip_sys::loader::Candidate::SystemName("libc.so.6".into()));
        assert!(stamp.contains(" bytes, modified "), "{stamp}");
        assert_eq!(mapped_library("libnot-mapped-anywhere.so.1"), None);
    }

    #[test]
    fn programs_that_read_files_from_disk_are_not_cached() {
        let p = Program::new("s", "p.hip").cache_dir("/tmp/x");
        let opts = |o: &[&str]| o.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(p.code_cache_for(&opts(&["-O3", "-DX=1"])).is_some());
        for reads in [
            "-I/usr/include",
            "-I",
            "-isystem/x",
            "-include",
            "--include-path=/x",
            "--rocm-path=/opt/rocm-6.4",
        ] {
            assert_eq!(p.code_cache_for(&opts(&["-O3", reads])), None, "{reads}");
        }
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
