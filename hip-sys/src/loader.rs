//! Finding and opening ROCm shared libraries at run time.
//!
//! Nothing here panics: every failure becomes a [`LoadError`] that names the
//! library, every file that was tried and why each one failed. The search
//! order:
//!
//! 1. an explicit override variable naming a file (for example
//!    `HIP_SYS_LIBAMDHIP64=/opt/rocm-6.4.0/lib/libamdhip64.so.6`): when it is
//!    set, that file is the only candidate and its failure is the error;
//! 2. otherwise `$ROCM_PATH/lib`, `$HIP_PATH/lib`, `/opt/rocm/lib`, then every
//!    `/opt/rocm-*/lib`, newest version first;
//! 3. then the system loader with the bare file names.
//!
//! Within a directory, file names are tried newest major version first.
//! Companion libraries (hipRTC, rocBLAS, MIOpen) are searched only in the
//! directory where the HIP runtime was found, so that two ROCm releases are
//! never mixed in one process.
//!
//! Paths from the environment must be absolute: a relative override is an
//! error and a relative `ROCM_PATH`/`HIP_PATH` is skipped (and listed in the
//! error), because resolving them against the working directory would load
//! whatever library the current folder happens to hold. On Unix a library
//! is opened with `RTLD_NOW`, so that an unresolvable symbol of the library
//! or of its dependencies is a load error rather than a process abort at the
//! first call; a library that loads but lacks the entry points that identify
//! it ([`LibrarySpec::identifying_symbols`]) is rejected as "not `<what>`".

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// Where a candidate file came from in the search order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Candidate {
    /// A path to open directly.
    Path(PathBuf),
    /// A bare file name handed to the system loader (`dlopen` search rules).
    SystemName(String),
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Candidate::Path(p) => write!(f, "{}", p.display()),
            Candidate::SystemName(n) => write!(f, "{n} (system loader)"),
        }
    }
}

/// Why one candidate was not used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptFailure {
    /// No such file.
    NotFound,
    /// The file exists but the dynamic loader refused it (wrong format, a
    /// missing dependency, a missing `GLIBC_x.y` version, an unresolvable
    /// symbol, ...).
    LoadFailed(String),
    /// The path exists but is not a regular file (a directory, a device).
    NotAFile,
    /// The file loaded but lacks entry points that identify the library: it
    /// is some other library.
    WrongLibrary {
        /// What was searched for, e.g. `a HIP runtime`.
        expected: &'static str,
        /// The identifying symbols it does not export.
        missing: Vec<&'static str>,
    },
    /// The path was not tried: it came from the environment and is relative.
    Relative(&'static str),
}

/// One tried candidate and its outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// What was tried.
    pub candidate: Candidate,
    /// Why it was not used.
    pub failure: AttemptFailure,
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.failure {
            AttemptFailure::NotFound => write!(f, "{}: not found", self.candidate),
            AttemptFailure::LoadFailed(msg) => {
                write!(f, "{}: found but failed to load: {msg}", self.candidate)
            }
            AttemptFailure::NotAFile => write!(f, "{}: not a regular file", self.candidate),
            AttemptFailure::WrongLibrary { expected, missing } => write!(
                f,
                "{}: loaded but lacks {}: not {expected}",
                self.candidate,
                missing.join(", ")
            ),
            AttemptFailure::Relative(variable) => write!(
                f,
                "{}: skipped, {variable} is a relative path (not resolved against the working directory)",
                self.candidate
            ),
        }
    }
}

/// A library could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// Every candidate was tried and none could be opened.
    #[error("{library} could not be loaded; tried {}", format_attempts(.attempts))]
    NotLoaded {
        /// The library's display name, e.g. `libamdhip64`.
        library: &'static str,
        /// Every candidate in search order with its failure.
        attempts: Vec<Attempt>,
    },
    /// The override variable names a file that cannot be used. Nothing else
    /// was tried: a set override is the only candidate.
    #[error("{library}: {variable}={} {}; unset {variable} to search the default locations", .path.display(), describe_override_failure(.failure))]
    Override {
        /// The library's display name, e.g. `libamdhip64`.
        library: &'static str,
        /// The override variable, e.g. `HIP_SYS_LIBAMDHIP64`.
        variable: &'static str,
        /// Its value.
        path: PathBuf,
        /// Why the file cannot be used.
        failure: AttemptFailure,
    },
    /// A library this one depends on (the HIP runtime) could not be loaded.
    #[error("{library} needs the HIP runtime, which is unavailable: {cause}")]
    Dependency {
        /// The library that was wanted.
        library: &'static str,
        /// The HIP runtime's load error, as text.
        cause: String,
    },
}

impl LoadError {
    /// True when at least one candidate exists but failed to load: the
    /// library is installed but broken or incompatible (as opposed to absent).
    pub fn is_present_but_broken(&self) -> bool {
        match self {
            LoadError::NotLoaded { attempts, .. } => {
                attempts.iter().any(|a| a.failure.is_present_but_broken())
            }
            LoadError::Override { failure, .. } => failure.is_present_but_broken(),
            LoadError::Dependency { .. } => false,
        }
    }

    /// A one-line summary: the first load failure if a file was found,
    /// otherwise "not found" with the number of places searched.
    pub fn summary(&self) -> String {
        match self {
            LoadError::NotLoaded { library, attempts } => {
                match attempts.iter().find(|a| a.failure.is_present_but_broken()) {
                    Some(Attempt {
                        candidate,
                        failure: AttemptFailure::LoadFailed(m),
                    }) => format!("{library} found at {candidate} but failed to load: {m}"),
                    Some(Attempt {
                        candidate,
                        failure: AttemptFailure::WrongLibrary { expected, missing },
                    }) => format!(
                        "{library} at {candidate} is not {expected} (it lacks {})",
                        missing.join(", ")
                    ),
                    Some(Attempt { candidate, .. }) => {
                        format!("{library} found at {candidate} but it is not a regular file")
                    }
                    None => format!(
                        "{library} not found ({} locations searched; set ROCM_PATH or install ROCm)",
                        attempts.len()
                    ),
                }
            }
            LoadError::Override { .. } | LoadError::Dependency { .. } => self.to_string(),
        }
    }
}

impl AttemptFailure {
    /// True when a file exists at the candidate but cannot be used.
    fn is_present_but_broken(&self) -> bool {
        matches!(
            self,
            AttemptFailure::LoadFailed(_)
                | AttemptFailure::NotAFile
                | AttemptFailure::WrongLibrary { .. }
        )
    }
}

/// The failure of one named file, as a phrase ("is not a regular file").
fn describe_override_failure(failure: &AttemptFailure) -> String {
    match failure {
        AttemptFailure::NotFound => "does not exist".to_string(),
        AttemptFailure::LoadFailed(msg) => format!("failed to load: {msg}"),
        AttemptFailure::NotAFile => "is not a regular file".to_string(),
        AttemptFailure::WrongLibrary { expected, missing } => {
            format!("loaded but lacks {}: not {expected}", missing.join(", "))
        }
        AttemptFailure::Relative(_) => {
            "is a relative path, which is not resolved against the working directory: give an absolute path"
                .to_string()
        }
    }
}

fn format_attempts(attempts: &[Attempt]) -> String {
    if attempts.is_empty() {
        return "nothing".to_string();
    }
    attempts
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A symbol the loaded library does not export.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("symbol {symbol} is missing from {library}")]
pub struct MissingSymbol {
    /// The C name of the symbol.
    pub symbol: &'static str,
    /// The file it was looked up in.
    pub library: String,
}

/// An opened shared library together with the path it was opened from.
#[derive(Debug)]
pub struct Library {
    inner: libloading::Library,
    origin: Candidate,
}

impl Library {
    /// The file (or system name) this library was opened from.
    pub fn origin(&self) -> &Candidate {
        &self.origin
    }

    /// The directory the library was loaded from, when it was opened by path.
    pub fn directory(&self) -> Option<&Path> {
        match &self.origin {
            Candidate::Path(p) => p.parent(),
            Candidate::SystemName(_) => None,
        }
    }

    /// The file this library was loaded from: the path it was opened by,
    /// or, for a library the system loader found by name, the file holding
    /// its symbol `symbol` (glibc's `dladdr`; `None` on other systems).
    pub fn file(&self, symbol: &str) -> Option<PathBuf> {
        match &self.origin {
            Candidate::Path(path) => Some(path.clone()),
            Candidate::SystemName(_) => {
                // SAFETY: only the symbol's address is read, never called.
                let address =
                    unsafe { self.inner.get::<*const std::ffi::c_void>(symbol.as_bytes()) }.ok()?;
                file_holding(*address)
            }
        }
    }

    /// A further copy of this library, opened from the same file
    /// ([`Library::file`] of `symbol`) in a link-map namespace of its own
    /// (glibc's `dlmopen`), together with its own copies of the libraries
    /// it loads: none of its global state, locks included, is shared with
    /// this one. `None` on other systems or when the copy fails to load
    /// (glibc allows 16 namespaces per process).
    pub fn isolated_copy(&self, symbol: &str) -> Option<Library> {
        let path = self.file(symbol)?;
        let inner = dlmopen_new_namespace(path.as_os_str())?;
        Some(Library {
            inner,
            origin: Candidate::Path(path),
        })
    }

    /// Looks up a function pointer by name; `None` when the library does not
    /// export it.
    ///
    /// # Safety
    /// `T` must be a function pointer type whose signature matches the C
    /// declaration of `name` exactly.
    pub unsafe fn function<T: Copy>(&self, name: &str) -> Option<T> {
        // SAFETY: the caller guarantees that `T` matches the symbol's real
        // type; the pointer is copied out and stays valid while `self` (which
        // owns the library handle) lives.
        unsafe { self.inner.get::<T>(name.as_bytes()).ok().map(|s| *s) }
    }
}

/// What to search for: the library's display name, its override variable,
/// its file names in preference order and the symbols that identify it.
#[derive(Clone, Debug)]
pub struct LibrarySpec {
    /// Display name used in messages, e.g. `libamdhip64`.
    pub name: &'static str,
    /// What the library is, for "not `<what>`" messages, e.g. `a HIP runtime`.
    pub description: &'static str,
    /// Environment variable naming an explicit file to load.
    pub override_var: &'static str,
    /// File names, newest major version first.
    pub file_names: &'static [&'static str],
    /// Entry points every release of the library exports: a file without
    /// them is some other library and is not used.
    pub identifying_symbols: &'static [&'static str],
}

/// The folders to search and the environment values that were skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchDirs {
    /// The folders, in search order.
    pub dirs: Vec<PathBuf>,
    /// `ROCM_PATH`/`HIP_PATH` values that were not used (relative paths),
    /// reported with the attempts when nothing loads.
    pub skipped: Vec<Attempt>,
}

/// The folders searched for the HIP runtime, in order, computed from the
/// environment (`ROCM_PATH`, `HIP_PATH`) and the `/opt` tree.
pub fn default_search_dirs() -> SearchDirs {
    search_dirs_from(
        std::env::var_os("ROCM_PATH"),
        std::env::var_os("HIP_PATH"),
        Path::new("/opt"),
    )
}

/// The search folders for given `ROCM_PATH` / `HIP_PATH` values and an
/// `/opt`-like root; split out of [`default_search_dirs`] for testing. Empty
/// values are ignored and relative ones skipped (listed in
/// [`SearchDirs::skipped`]).
pub fn search_dirs_from(
    rocm_path: Option<OsString>,
    hip_path: Option<OsString>,
    opt_root: &Path,
) -> SearchDirs {
    let mut search = SearchDirs::default();
    for (variable, root) in [("ROCM_PATH", rocm_path), ("HIP_PATH", hip_path)] {
        let Some(root) = root.filter(|r| !r.is_empty()).map(PathBuf::from) else {
            continue;
        };
        let dir = root.join("lib");
        if root.is_absolute() {
            search.dirs.push(dir);
        } else {
            search.skipped.push(Attempt {
                candidate: Candidate::Path(dir),
                failure: AttemptFailure::Relative(variable),
            });
        }
    }
    search.dirs.push(opt_root.join("rocm").join("lib"));
    let mut versioned: Vec<(Vec<u64>, PathBuf)> = std::fs::read_dir(opt_root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let version = name.strip_prefix("rocm-")?;
            let key = version
                .split(|c: char| !c.is_ascii_digit())
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().unwrap_or(0))
                .collect();
            Some((key, entry.path().join("lib")))
        })
        .collect();
    versioned.sort_by(|a, b| b.0.cmp(&a.0));
    search.dirs.extend(versioned.into_iter().map(|(_, p)| p));
    let mut seen = std::collections::HashSet::new();
    search.dirs.retain(|d| seen.insert(d.clone()));
    search
}

/// The candidates of the default search for `spec`, in order: each file
/// name in each folder, then each file name through the system loader (only
/// when `use_system_loader`). The override variable is not among them: see
/// [`open`].
pub fn candidates(spec: &LibrarySpec, dirs: &[PathBuf], use_system_loader: bool) -> Vec<Candidate> {
    let mut out = Vec::new();
    for dir in dirs {
        for name in spec.file_names {
            out.push(Candidate::Path(dir.join(name)));
        }
    }
    if use_system_loader {
        out.extend(
            spec.file_names
                .iter()
                .map(|n| Candidate::SystemName((*n).to_string())),
        );
    }
    out
}

/// The value of `spec`'s override variable, when set and not empty.
pub fn override_value(spec: &LibrarySpec) -> Option<PathBuf> {
    std::env::var_os(spec.override_var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Opens `spec`: the file its override variable names if set (and nothing
/// else), otherwise the first of `candidates` that loads, reporting `skipped`
/// with the attempts when none does.
pub fn open(
    spec: &LibrarySpec,
    candidates: Vec<Candidate>,
    skipped: Vec<Attempt>,
) -> Result<Library, LoadError> {
    match override_value(spec) {
        Some(path) => open_override(spec, path),
        None => open_first(spec, candidates).map_err(|err| match err {
            LoadError::NotLoaded { library, attempts } => LoadError::NotLoaded {
                library,
                attempts: skipped.into_iter().chain(attempts).collect(),
            },
            other => other,
        }),
    }
}

/// Opens the file an override variable names; its failure is the error.
pub fn open_override(spec: &LibrarySpec, path: PathBuf) -> Result<Library, LoadError> {
    let candidate = Candidate::Path(path.clone());
    let opened = if path.is_absolute() {
        open_candidate(spec, &candidate)
    } else {
        Err(AttemptFailure::Relative(spec.override_var))
    };
    opened
        .map(|inner| Library {
            inner,
            origin: candidate,
        })
        .map_err(|failure| LoadError::Override {
            library: spec.name,
            variable: spec.override_var,
            path,
            failure,
        })
}

/// Opens the first candidate that loads and is `spec`'s library, or
/// reports every attempt.
pub fn open_first(spec: &LibrarySpec, candidates: Vec<Candidate>) -> Result<Library, LoadError> {
    let mut attempts = Vec::new();
    for candidate in candidates {
        match open_candidate(spec, &candidate) {
            Ok(inner) => {
                return Ok(Library {
                    inner,
                    origin: candidate,
                });
            }
            Err(failure) => attempts.push(Attempt { candidate, failure }),
        }
    }
    Err(LoadError::NotLoaded {
        library: spec.name,
        attempts,
    })
}

fn open_candidate(
    spec: &LibrarySpec,
    candidate: &Candidate,
) -> Result<libloading::Library, AttemptFailure> {
    let target: &std::ffi::OsStr = match candidate {
        Candidate::Path(p) => {
            // `metadata` follows symbolic links, as the loader does.
            match std::fs::metadata(p) {
                Err(_) => return Err(AttemptFailure::NotFound),
                Ok(meta) if !meta.is_file() => return Err(AttemptFailure::NotAFile),
                Ok(_) => p.as_os_str(),
            }
        }
        Candidate::SystemName(n) => n.as_ref(),
    };
    let library = match dlopen_now(target) {
        Ok(lib) => lib,
        Err(e) => {
            let msg = error_chain(&e);
            // For a bare name the system loader reports absence as
            // "<name>: cannot open shared object file"; a message naming
            // another file is a missing dependency of a library it found.
            let absent = match candidate {
                Candidate::SystemName(n) => {
                    msg.contains(&format!("{n}: cannot open shared object file"))
                }
                Candidate::Path(_) => false,
            };
            return Err(if absent {
                AttemptFailure::NotFound
            } else {
                AttemptFailure::LoadFailed(msg)
            });
        }
    };
    let missing: Vec<&'static str> = spec
        .identifying_symbols
        .iter()
        .copied()
        // SAFETY: only the symbol's presence is checked; the pointer is
        // never dereferenced or called.
        .filter(|name| unsafe { library.get::<*const ()>(name.as_bytes()) }.is_err())
        .collect();
    if missing.is_empty() {
        Ok(library)
    } else {
        Err(AttemptFailure::WrongLibrary {
            expected: spec.description,
            missing,
        })
    }
}

/// `target` opened with every symbol resolved now in a new link-map
/// namespace (glibc's `dlmopen` with `LM_ID_NEWLM`), or `None` where that
/// fails or the system has no `dlmopen`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn dlmopen_new_namespace(target: &std::ffi::OsStr) -> Option<libloading::Library> {
    use std::ffi::{CString, c_char, c_int, c_long, c_void};
    use std::os::unix::ffi::OsStrExt;

    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

    unsafe extern "C" {
        fn dlmopen(lmid: c_long, filename: *const c_char, flags: c_int) -> *mut c_void;
    }
    /// glibc's `LM_ID_NEWLM`: a new namespace.
    const LM_ID_NEWLM: c_long = -1;
    let path = CString::new(target.as_bytes()).ok()?;
    // SAFETY: `path` is a NUL-terminated file name; loading runs the
    // library's initialisers, as `dlopen_now` does for the first copy of the
    // same file.
    let handle = unsafe { dlmopen(LM_ID_NEWLM, path.as_ptr(), RTLD_NOW | RTLD_LOCAL) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: a handle `dlmopen` returned, owned (and `dlclose`d) by the
    // `Library` from now on.
    Some(unsafe { Library::from_raw(handle) }.into())
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn dlmopen_new_namespace(_target: &std::ffi::OsStr) -> Option<libloading::Library> {
    None
}

/// The file of the loaded object holding `address` (glibc's `dladdr`), or
/// `None` where none does or the system has no `dladdr`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn file_holding(address: *const std::ffi::c_void) -> Option<PathBuf> {
    use std::ffi::{CStr, c_char, c_int, c_void};
    use std::os::unix::ffi::OsStrExt;

    /// glibc's `Dl_info`.
    #[repr(C)]
    struct DlInfo {
        fname: *const c_char,
        fbase: *mut c_void,
        sname: *const c_char,
        saddr: *mut c_void,
    }
    unsafe extern "C" {
        fn dladdr(address: *const c_void, info: *mut DlInfo) -> c_int;
    }
    let mut info = DlInfo {
        fname: std::ptr::null(),
        fbase: std::ptr::null_mut(),
        sname: std::ptr::null(),
        saddr: std::ptr::null_mut(),
    };
    // SAFETY: `info` is a valid `Dl_info` to fill; any address may be asked.
    if unsafe { dladdr(address, &mut info) } == 0 || info.fname.is_null() {
        return None;
    }
    // SAFETY: glibc's NUL-terminated name of a loaded object, which stays
    // loaded (the caller holds it) while it is copied here.
    let name = unsafe { CStr::from_ptr(info.fname) };
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())))
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn file_holding(_address: *const std::ffi::c_void) -> Option<PathBuf> {
    None
}

/// Opens a shared library with every symbol resolved now (`RTLD_NOW` on
/// Unix), so that a symbol missing from it or from one of its dependencies
/// is a load error, not an abort at the first call that needs it.
fn dlopen_now(target: &std::ffi::OsStr) -> Result<libloading::Library, libloading::Error> {
    // SAFETY: loading a library runs its initialisers. The ROCm libraries'
    // initialisers only set up internal state; this is the unavoidable
    // contract of dynamic loading and is why only well-known names, or the
    // file the user named, are tried.
    #[cfg(unix)]
    let library = unsafe {
        use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
        Library::open(Some(target), RTLD_NOW | RTLD_LOCAL).map(Into::into)
    };
    // SAFETY: as above; Windows resolves a DLL's imports when it loads.
    #[cfg(not(unix))]
    let library = unsafe { libloading::Library::new(target) };
    library
}

/// The error and its sources joined: libloading's own message is only
/// "dlopen failed", the loader's explanation is in the source.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut msg = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        msg.push_str(": ");
        msg.push_str(&cause.to_string());
        source = cause.source();
    }
    msg
}

/// Declares a table of C functions resolved from a [`Library`] at run time.
///
/// Each function becomes an `unsafe` method with the C signature that returns
/// `Result<Ret, MissingSymbol>`: a symbol the library does not export fails
/// only the calls that need it. The input is the body of a bindgen
/// `extern "C"` block, so generated declarations are used verbatim.
#[macro_export]
macro_rules! dynamic_api {
    (
        $(#[$struct_meta:meta])*
        pub struct $api:ident;
        $(
            $(#[$fn_meta:meta])*
            pub fn $name:ident($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty;
        )*
    ) => {
        $(#[$struct_meta])*
        #[allow(non_snake_case)]
        pub struct $api {
            library: $crate::loader::Library,
            $($name: ::core::option::Option<unsafe extern "C" fn($($ty),*) -> $ret>,)*
        }

        impl ::core::fmt::Debug for $api {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.debug_struct(stringify!($api))
                    .field("library", &self.library.origin())
                    .finish_non_exhaustive()
            }
        }

        #[allow(non_snake_case, clippy::too_many_arguments, clippy::missing_safety_doc)]
        impl $api {
            /// Resolves every function of the table from `library`; absent
            /// symbols are remembered as absent.
            pub fn from_library(library: $crate::loader::Library) -> Self {
                Self {
                    // SAFETY: each pointer type is the bindgen-generated
                    // signature of the symbol with the same name.
                    $($name: unsafe { library.function(stringify!($name)) },)*
                    library,
                }
            }

            /// The library these functions come from.
            pub fn library(&self) -> &$crate::loader::Library {
                &self.library
            }

            /// Names of the functions in this table that the loaded library
            /// does not export.
            pub fn missing_symbols(&self) -> ::std::vec::Vec<&'static str> {
                let mut missing = ::std::vec::Vec::new();
                $(if self.$name.is_none() { missing.push(stringify!($name)); })*
                missing
            }

            /// Every symbol name this table binds.
            pub const SYMBOLS: &'static [&'static str] = &[$(stringify!($name)),*];

            $(
                $(#[$fn_meta])*
                ///
                /// # Safety
                /// The C function's contract: pointers must be valid for the
                /// accesses the ROCm documentation describes.
                #[inline]
                pub unsafe fn $name(&self, $($arg: $ty),*) -> ::core::result::Result<$ret, $crate::loader::MissingSymbol> {
                    match self.$name {
                        // SAFETY: forwarded to the caller, see above.
                        Some(f) => Ok(unsafe { f($($arg),*) }),
                        None => Err($crate::loader::MissingSymbol {
                            symbol: stringify!($name),
                            library: self.library.origin().to_string(),
                        }),
                    }
                }
            )*
        }
    };
}

/// Declares the `types` module (bindgen types and constants from
/// `src/generated/types.rs`) and the private `functions` module (the
/// `dynamic_api!` tables from `src/generated/functions.rs`) of a -sys crate,
/// and re-exports every type at the crate root.
#[macro_export]
macro_rules! generated_bindings {
    () => {
        /// Types and constants generated from the ROCm 6.4 headers.
        #[allow(
            non_camel_case_types,
            non_snake_case,
            non_upper_case_globals,
            missing_docs,
            clippy::all
        )]
        pub mod types {
            include!("generated/types.rs");
        }

        #[allow(non_camel_case_types, non_snake_case, clippy::all)]
        mod functions {
            use super::types::*;
            include!("generated/functions.rs");
        }

        pub use types::*;
    };
}

/// Declares a lazily loaded companion library of the HIP runtime: a function
/// that loads it once (next to libamdhip64, see [`crate::load_companion`]) and
/// returns its function table or the load error.
#[macro_export]
macro_rules! companion_library {
    ($(#[$meta:meta])* pub fn $name:ident() -> $api:ty = $spec:expr;) => {
        $(#[$meta])*
        pub fn $name() -> ::core::result::Result<&'static $api, $crate::LoadError> {
            static API: ::std::sync::OnceLock<::core::result::Result<$api, $crate::LoadError>> =
                ::std::sync::OnceLock::new();
            API.get_or_init(|| $crate::load_companion(&$spec, <$api>::from_library))
                .as_ref()
                .map_err(::core::clone::Clone::clone)
        }
    };
}
