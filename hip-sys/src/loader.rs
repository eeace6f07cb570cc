//! Finding and opening ROCm shared libraries at run time.
//!
//! Nothing here panics: every failure becomes a [`LoadError`] that names the
//! library, every file that was tried and why each one failed. The search
//! order:
//!
//! 1. an explicit override variable naming a file (for example
//!    `HIP_SYS_LIBAMDHIP64=/opt/rocm-6.4.0/lib/libamdhip64.so.6`);
//! 2. `$ROCM_PATH/lib`, `$HIP_PATH/lib`, `/opt/rocm/lib`, then every
//!    `/opt/rocm-*/lib`, newest version first;
//! 3. the system loader with the bare file names.
//!
//! Within a directory, file names are tried newest major version first.
//! Companion libraries (hipRTC, rocBLAS, MIOpen) are searched only in the
//! directory where the HIP runtime was found, so that two ROCm releases are
//! never mixed in one process.

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
    /// missing dependency, a missing `GLIBC_x.y` version, ...).
    LoadFailed(String),
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
            LoadError::NotLoaded { attempts, .. } => attempts
                .iter()
                .any(|a| matches!(a.failure, AttemptFailure::LoadFailed(_))),
            LoadError::Dependency { .. } => false,
        }
    }

    /// A one-line summary: the first load failure if a file was found,
    /// otherwise "not found" with the number of places searched.
    pub fn summary(&self) -> String {
        match self {
            LoadError::NotLoaded { library, attempts } => {
                match attempts.iter().find_map(|a| match &a.failure {
                    AttemptFailure::LoadFailed(m) => Some((a, m)),
                    AttemptFailure::NotFound => None,
                }) {
                    Some((a, m)) => {
                        format!("{library} found at {} but failed to load: {m}", a.candidate)
                    }
                    None => format!(
                        "{library} not found ({} locations searched; set ROCM_PATH or install ROCm)",
                        attempts.len()
                    ),
                }
            }
            LoadError::Dependency { .. } => self.to_string(),
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

/// What to search for: the library's display name, its override variable and
/// its file names in preference order.
#[derive(Clone, Debug)]
pub struct LibrarySpec {
    /// Display name used in messages, e.g. `libamdhip64`.
    pub name: &'static str,
    /// Environment variable naming an explicit file to load.
    pub override_var: &'static str,
    /// File names, newest major version first.
    pub file_names: &'static [&'static str],
}

/// The directories searched for the HIP runtime, in order, computed from the
/// environment (`ROCM_PATH`, `HIP_PATH`) and the `/opt` tree.
pub fn default_search_dirs() -> Vec<PathBuf> {
    search_dirs_from(
        std::env::var_os("ROCM_PATH"),
        std::env::var_os("HIP_PATH"),
        Path::new("/opt"),
    )
}

/// The search directories for given `ROCM_PATH` / `HIP_PATH` values and an
/// `/opt`-like root; split out of [`default_search_dirs`] for testing.
pub fn search_dirs_from(
    rocm_path: Option<OsString>,
    hip_path: Option<OsString>,
    opt_root: &Path,
) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for root in [rocm_path, hip_path].into_iter().flatten() {
        if !root.is_empty() {
            dirs.push(PathBuf::from(root).join("lib"));
        }
    }
    dirs.push(opt_root.join("rocm").join("lib"));
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
    dirs.extend(versioned.into_iter().map(|(_, p)| p));
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|d| seen.insert(d.clone()));
    dirs
}

/// The candidates for `spec`, in order: the override file, each file name in
/// each directory, then each file name through the system loader (only when
/// `use_system_loader`).
pub fn candidates(spec: &LibrarySpec, dirs: &[PathBuf], use_system_loader: bool) -> Vec<Candidate> {
    let mut out = Vec::new();
    if let Some(file) = std::env::var_os(spec.override_var).filter(|v| !v.is_empty()) {
        out.push(Candidate::Path(PathBuf::from(file)));
    }
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

/// Opens the first candidate that loads, or reports every attempt.
pub fn open_first(name: &'static str, candidates: Vec<Candidate>) -> Result<Library, LoadError> {
    let mut attempts = Vec::new();
    for candidate in candidates {
        match open_candidate(&candidate) {
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
        library: name,
        attempts,
    })
}

fn open_candidate(candidate: &Candidate) -> Result<libloading::Library, AttemptFailure> {
    let target: &std::ffi::OsStr = match candidate {
        Candidate::Path(p) => {
            if !p.is_file() {
                return Err(AttemptFailure::NotFound);
            }
            p.as_os_str()
        }
        Candidate::SystemName(n) => n.as_ref(),
    };
    // SAFETY: loading a library runs its initialisers. The ROCm libraries'
    // initialisers only set up internal state; this is the unavoidable
    // contract of dynamic loading and is why only well-known names are tried.
    match unsafe { libloading::Library::new(target) } {
        Ok(lib) => Ok(lib),
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
            if absent {
                Err(AttemptFailure::NotFound)
            } else {
                Err(AttemptFailure::LoadFailed(msg))
            }
        }
    }
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
