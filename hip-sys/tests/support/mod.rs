//! Helpers shared by the -sys crates' loader tests: temporary folders, tiny
//! shared objects built with the system C compiler, and a lock that keeps
//! tests which read or change environment variables from running at once.
//!
//! Included with `#[path]` from the other crates' tests; not every crate uses
//! every helper.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

/// A fake HIP runtime: reports ROCm 6.4.43484 and no device, like the real
/// library on a machine without a GPU; exports nothing else.
pub const FAKE_HIP_RUNTIME: &str = "
int hipRuntimeGetVersion(int *version) { *version = 60443484; return 0; }
int hipGetDeviceCount(int *count) { *count = 0; return 100; }
";

/// A shared object that exports none of the ROCm symbols.
pub const UNRELATED_LIBRARY: &str = "int unrelated_function(void) { return 7; }\n";

/// Serialises the tests of one test binary: environment variables are
/// process-wide, and changing them while another thread reads them is unsound.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Sets an environment variable. Call only while holding [`serial`].
pub fn set_env(name: &str, value: impl AsRef<std::ffi::OsStr>) {
    // SAFETY: every test of the binary holds the `serial` lock, so no other
    // thread reads or writes the environment meanwhile.
    unsafe { std::env::set_var(name, value) }
}

/// Removes an environment variable. Call only while holding [`serial`].
pub fn remove_env(name: &str) {
    // SAFETY: as in `set_env`.
    unsafe { std::env::remove_var(name) }
}

/// A uniquely named folder under the system temporary folder, deleted on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates a fresh folder whose name contains `label`.
    pub fn new(label: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("rocm-sys-test-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temporary folder");
        TempDir(path)
    }

    /// The folder's path.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Creates `relative` (and its parents) as a folder inside this one.
    pub fn mkdir(&self, relative: &str) -> PathBuf {
        let path = self.0.join(relative);
        std::fs::create_dir_all(&path).expect("create folder");
        path
    }

    /// Writes `contents` to `relative` inside this folder.
    pub fn write(&self, relative: &str, contents: &[u8]) -> PathBuf {
        let path = self.0.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create folder");
        }
        std::fs::write(&path, contents).expect("write file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether a C compiler (`cc`) can be run.
pub fn have_c_compiler() -> bool {
    Command::new("cc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Builds `source` into the shared object `output` with `cc -shared`,
/// passing `extra` arguments (libraries to link) after the source. Returns
/// false, after saying so, when no C compiler is installed; a compiler that
/// fails is a test failure.
pub fn build_shared_object(output: &Path, source: &str, extra: &[&str]) -> bool {
    if !have_c_compiler() {
        eprintln!("skipped: no C compiler (cc) to build {}", output.display());
        return false;
    }
    let mut src = output.as_os_str().to_owned();
    src.push(".c");
    let src = PathBuf::from(src);
    std::fs::write(&src, source).expect("write C source");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(output)
        .arg(&src)
        .args(extra)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc failed for {}: {}",
        output.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// Checks a companion library's search end to end with fakes: the global HIP
/// runtime is pointed (override variable) at a fake in a fresh folder; then
/// `load` (the crate's uncached loader) must try exactly the companion's file
/// names in that folder and report each as not found; after a fake companion
/// built from `companion_source` is placed there as the first file name,
/// `load` and `global` (the crate's cached accessor) must both open it.
/// Returns false when no C compiler is available (the check is skipped).
pub fn check_companion_search(
    spec: &hip_sys::loader::LibrarySpec,
    companion_source: &str,
    load: impl Fn() -> Result<hip_sys::loader::Candidate, hip_sys::LoadError>,
    global: impl FnOnce() -> Result<hip_sys::loader::Candidate, hip_sys::LoadError>,
) -> bool {
    use hip_sys::loader::{Attempt, AttemptFailure, Candidate};
    let _env = serial();
    let dir = TempDir::new(spec.name);
    let runtime = dir.path().join("libamdhip64.so.6");
    if !build_shared_object(&runtime, FAKE_HIP_RUNTIME, &[]) {
        return false;
    }
    set_env(hip_sys::HIP_LIBRARY.override_var, &runtime);
    remove_env(spec.override_var);
    let hip_origin = hip_sys::hip().map(|api| api.library().origin().clone());
    let absent = load();
    let companion = dir.path().join(spec.file_names[0]);
    let built = build_shared_object(&companion, companion_source, &[]);
    let loaded = load();
    let cached = global();
    remove_env(hip_sys::HIP_LIBRARY.override_var);

    assert_eq!(
        hip_origin.expect("fake runtime loads"),
        Candidate::Path(runtime)
    );
    let expected: Vec<Attempt> = spec
        .file_names
        .iter()
        .map(|n| Attempt {
            candidate: Candidate::Path(dir.path().join(n)),
            failure: AttemptFailure::NotFound,
        })
        .collect();
    match absent {
        Err(hip_sys::LoadError::NotLoaded { library, attempts }) => {
            assert_eq!(library, spec.name);
            assert_eq!(attempts, expected, "only the runtime's folder is searched");
        }
        other => panic!("expected {} not to be found, got {other:?}", spec.name),
    }
    assert!(built);
    assert_eq!(
        loaded.expect("fake companion loads"),
        Candidate::Path(companion.clone())
    );
    assert_eq!(
        cached.expect("cached accessor loads"),
        Candidate::Path(companion)
    );
    true
}
