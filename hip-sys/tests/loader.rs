//! Library search and load errors, on the CPU: temporary folders hold absent,
//! empty, wrong and tiny fake libraries named like the real ones.
#![cfg(target_os = "linux")]

mod support;

use std::path::{Path, PathBuf};

use hip_sys::loader::{self, Attempt, AttemptFailure, Candidate, LibrarySpec, search_dirs_from};
use hip_sys::{HIP_LIBRARY, HIPRTC_LIBRARY, HipApi, LoadError};
use support::{FAKE_HIP_RUNTIME, TempDir, UNRELATED_LIBRARY, build_shared_object, serial};

/// The HIP runtime's file names with an override variable of the test's own.
fn hip_spec(override_var: &'static str) -> LibrarySpec {
    LibrarySpec {
        override_var,
        ..HIP_LIBRARY
    }
}

fn attempts(err: &LoadError) -> &[Attempt] {
    match err {
        LoadError::NotLoaded { attempts, .. } => attempts,
        other => panic!("expected NotLoaded, got {other:?}"),
    }
}

fn failure_at<'a>(err: &'a LoadError, path: &Path) -> &'a AttemptFailure {
    &attempts(err)
        .iter()
        .find(|a| a.candidate == Candidate::Path(path.to_path_buf()))
        .unwrap_or_else(|| panic!("{} was not tried: {err}", path.display()))
        .failure
}

fn load_failure_message(failure: &AttemptFailure) -> &str {
    match failure {
        AttemptFailure::LoadFailed(msg) => msg,
        other => panic!("expected a load failure, got {other:?}"),
    }
}

/// The failure of an override, which must be the only file tried.
fn override_failure(err: LoadError, variable: &str, path: &Path) -> AttemptFailure {
    match err {
        LoadError::Override {
            library,
            variable: v,
            path: p,
            failure,
        } => {
            assert_eq!((library, v, p.as_path()), ("libamdhip64", variable, path));
            failure
        }
        other => panic!("expected the override's failure, got {other:?}"),
    }
}

#[test]
fn search_dirs_put_variables_first_then_opt_rocm_then_versions_newest_first() {
    let _env = serial();
    let opt = TempDir::new("opt");
    for name in [
        "rocm",
        "rocm-5.7.1",
        "rocm-6.4.0",
        "rocm-6.10.0",
        "rocm-6.4.3",
        "rocm-nightly",
        "other",
    ] {
        opt.mkdir(name);
    }
    let dirs = search_dirs_from(
        Some("/custom/rocm".into()),
        Some("/custom/hip".into()),
        opt.path(),
    )
    .dirs;
    let lib = |name: &str| opt.path().join(name).join("lib");
    assert_eq!(
        dirs,
        vec![
            PathBuf::from("/custom/rocm/lib"),
            PathBuf::from("/custom/hip/lib"),
            lib("rocm"),
            lib("rocm-6.10.0"),
            lib("rocm-6.4.3"),
            lib("rocm-6.4.0"),
            lib("rocm-5.7.1"),
            lib("rocm-nightly"),
        ]
    );
}

#[test]
fn search_dirs_skip_empty_variables_and_duplicates() {
    let _env = serial();
    let opt = TempDir::new("opt-dup");
    opt.mkdir("rocm-6.4.3");
    let rocm = opt.path().join("rocm-6.4.3");
    let dirs = search_dirs_from(Some("".into()), Some(rocm.clone().into()), opt.path()).dirs;
    assert_eq!(
        dirs,
        vec![rocm.join("lib"), opt.path().join("rocm").join("lib")],
        "HIP_PATH first, /opt/rocm-6.4.3 not repeated, empty ROCM_PATH ignored"
    );
    let missing_opt = opt.path().join("absent");
    assert_eq!(
        search_dirs_from(None, None, &missing_opt).dirs,
        vec![missing_opt.join("rocm").join("lib")]
    );
}

#[test]
fn default_search_dirs_read_rocm_path_and_hip_path() {
    let _env = serial();
    let saved: Vec<_> = ["ROCM_PATH", "HIP_PATH"]
        .iter()
        .map(|v| (*v, std::env::var_os(v)))
        .collect();
    support::set_env("ROCM_PATH", "/from/rocm_path");
    support::set_env("HIP_PATH", "/from/hip_path");
    let dirs = loader::default_search_dirs().dirs;
    for (name, value) in saved {
        match value {
            Some(v) => support::set_env(name, v),
            None => support::remove_env(name),
        }
    }
    assert_eq!(dirs[0], PathBuf::from("/from/rocm_path/lib"));
    assert_eq!(dirs[1], PathBuf::from("/from/hip_path/lib"));
    assert_eq!(dirs[2], PathBuf::from("/opt/rocm/lib"));
}

#[test]
fn candidates_are_each_folder_newest_name_first_then_system() {
    let dirs = [PathBuf::from("/a"), PathBuf::from("/b")];
    let spec = hip_spec("HIP_SYS_TEST_UNSET");
    let names = HIP_LIBRARY.file_names;
    let mut expected = Vec::new();
    for dir in &dirs {
        expected.extend(names.iter().map(|n| Candidate::Path(dir.join(n))));
    }
    let without_system = expected.clone();
    expected.extend(names.iter().map(|n| Candidate::SystemName(n.to_string())));
    assert_eq!(names[0], "libamdhip64.so.7");
    assert_eq!(loader::candidates(&spec, &dirs, true), expected);
    assert_eq!(loader::candidates(&spec, &dirs, false), without_system);
}

#[test]
fn relative_rocm_path_and_hip_path_are_skipped_and_reported() {
    let _env = serial();
    let opt = TempDir::new("opt-relative");
    let search = search_dirs_from(Some("rocm-here".into()), Some("./hip".into()), opt.path());
    assert_eq!(search.dirs, vec![opt.path().join("rocm").join("lib")]);
    assert_eq!(
        search.skipped,
        vec![
            Attempt {
                candidate: Candidate::Path("rocm-here/lib".into()),
                failure: AttemptFailure::Relative("ROCM_PATH"),
            },
            Attempt {
                candidate: Candidate::Path("./hip/lib".into()),
                failure: AttemptFailure::Relative("HIP_PATH"),
            },
        ]
    );
    let candidates = loader::candidates(&hip_spec("HIP_SYS_TEST_UNSET"), &search.dirs, false);
    let err =
        loader::open(&hip_spec("HIP_SYS_TEST_UNSET"), candidates, search.skipped).unwrap_err();
    assert!(
        err.to_string().contains(
            "rocm-here/lib: skipped, ROCM_PATH is a relative path (not resolved against the working directory)"
        ),
        "{err}"
    );
}

#[test]
fn nothing_found_lists_every_path_as_not_found() {
    let _env = serial();
    let a = TempDir::new("empty-a");
    let b = TempDir::new("empty-b");
    let dirs = [a.path().to_path_buf(), b.path().to_path_buf()];
    let candidates = loader::candidates(&hip_spec("HIP_SYS_TEST_UNSET"), &dirs, false);
    let err = loader::open_first(&HIP_LIBRARY, candidates.clone()).unwrap_err();

    assert_eq!(attempts(&err).len(), candidates.len());
    assert!(
        attempts(&err)
            .iter()
            .all(|a| a.failure == AttemptFailure::NotFound)
    );
    let text = err.to_string();
    for candidate in &candidates {
        assert!(text.contains(&format!("{candidate}: not found")), "{text}");
    }
    assert!(!err.is_present_but_broken());
    assert!(
        err.summary()
            .starts_with("libamdhip64 not found (8 locations searched")
    );
}

#[test]
fn absent_system_name_is_not_found() {
    let _env = serial();
    let err = loader::open_first(
        &HIP_LIBRARY,
        vec![Candidate::SystemName("librocm-sys-test-absent.so.6".into())],
    )
    .unwrap_err();
    assert_eq!(attempts(&err)[0].failure, AttemptFailure::NotFound);
    assert!(
        err.to_string()
            .contains("librocm-sys-test-absent.so.6 (system loader): not found"),
    );
}

#[test]
fn empty_and_text_files_are_found_but_fail_to_load() {
    let _env = serial();
    let dir = TempDir::new("broken");
    let empty = dir.write("libamdhip64.so.6", b"");
    let text = dir.write("libamdhip64.so.5", b"INPUT(libamdhip64.so.6)\n");
    let candidates = loader::candidates(
        &hip_spec("HIP_SYS_TEST_UNSET"),
        &[dir.path().to_path_buf()],
        false,
    );
    let err = loader::open_first(&HIP_LIBRARY, candidates).unwrap_err();

    assert_eq!(
        failure_at(&err, &dir.path().join("libamdhip64.so.7")),
        &AttemptFailure::NotFound
    );
    for path in [&empty, &text] {
        let msg = load_failure_message(failure_at(&err, path));
        assert!(
            msg.contains(&path.display().to_string()),
            "loader message: {msg}"
        );
    }
    let shown = err.to_string();
    assert!(shown.contains(&format!("{}: found but failed to load: ", empty.display())));
    assert!(err.is_present_but_broken());
    assert!(
        err.summary().starts_with(&format!(
            "libamdhip64 found at {} but failed to load",
            empty.display()
        )),
        "{}",
        err.summary()
    );
}

#[test]
fn missing_dependency_is_a_load_failure_naming_the_dependency() {
    let _env = serial();
    let dir = TempDir::new("missing-dep");
    let dep = dir.path().join("librocmsystestdep.so");
    let lib = dir.path().join("libamdhip64.so.6");
    let link = format!("-L{}", dir.path().display());
    if !build_shared_object(&dep, UNRELATED_LIBRARY, &[])
        || !build_shared_object(
            &lib,
            FAKE_HIP_RUNTIME,
            &["-Wl,--no-as-needed", &link, "-lrocmsystestdep"],
        )
    {
        return;
    }
    std::fs::remove_file(&dep).expect("remove dependency");

    for candidate in [
        Candidate::Path(lib.clone()),
        Candidate::SystemName(lib.display().to_string()),
    ] {
        let err = loader::open_first(&HIP_LIBRARY, vec![candidate]).unwrap_err();
        let msg = load_failure_message(&attempts(&err)[0].failure);
        assert!(
            msg.contains("librocmsystestdep.so"),
            "loader message: {msg}"
        );
        assert!(err.is_present_but_broken());
    }
}

#[test]
fn a_library_without_the_runtime_entry_points_is_not_a_hip_runtime() {
    let _env = serial();
    let dir = TempDir::new("unrelated");
    let path = dir.path().join("libamdhip64.so.6");
    if !build_shared_object(&path, UNRELATED_LIBRARY, &[]) {
        return;
    }
    let err = loader::open_first(&HIP_LIBRARY, vec![Candidate::Path(path.clone())]).unwrap_err();
    assert_eq!(
        attempts(&err)[0].failure,
        AttemptFailure::WrongLibrary {
            expected: "a HIP runtime",
            missing: vec!["hipRuntimeGetVersion", "hipGetDeviceCount"],
        }
    );
    assert!(err.is_present_but_broken());
    assert_eq!(
        err.summary(),
        format!(
            "libamdhip64 at {} is not a HIP runtime (it lacks hipRuntimeGetVersion, hipGetDeviceCount)",
            path.display()
        )
    );
}

#[test]
fn a_dependency_lacking_a_symbol_is_a_load_error_not_an_abort_at_first_call() {
    let _env = serial();
    let dir = TempDir::new("dep-symbol");
    let dep = dir.path().join("librocmsystestdep.so");
    let lib = dir.path().join("libamdhip64.so.6");
    let link = format!("-L{}", dir.path().display());
    // The runtime calls a function of its dependency lazily bound under
    // RTLD_LAZY: with the function gone from the dependency, the first call
    // would kill the process with "symbol lookup error".
    let runtime = format!(
        "{FAKE_HIP_RUNTIME}\nextern int helper_from_dependency(void);\n\
         int hipInit(unsigned flags) {{ return helper_from_dependency() + (int)flags; }}\n"
    );
    if !build_shared_object(
        &dep,
        "int helper_from_dependency(void) { return 0; }\n",
        &[],
    ) || !build_shared_object(
        &lib,
        &runtime,
        &[&link, "-lrocmsystestdep", "-Wl,-rpath,$ORIGIN"],
    ) {
        return;
    }
    assert!(build_shared_object(&dep, UNRELATED_LIBRARY, &[]));

    let err = loader::open_first(&HIP_LIBRARY, vec![Candidate::Path(lib)]).unwrap_err();
    let msg = load_failure_message(&attempts(&err)[0].failure);
    assert!(
        msg.contains("helper_from_dependency"),
        "loader message: {msg}"
    );
}

#[test]
fn a_missing_symbol_fails_only_the_calls_that_need_it() {
    let _env = serial();
    let dir = TempDir::new("partial");
    let path = dir.path().join("libamdhip64.so.6");
    if !build_shared_object(&path, FAKE_HIP_RUNTIME, &[]) {
        return;
    }
    let api = HipApi::from_library(
        loader::open_first(&HIP_LIBRARY, vec![Candidate::Path(path)]).expect("fake loads"),
    );
    let (mut version, mut count) = (0, -1);
    // SAFETY: valid out-pointers; the fake writes one int each.
    let (v, c, init) = unsafe {
        (
            api.hipRuntimeGetVersion(&mut version),
            api.hipGetDeviceCount(&mut count),
            api.hipInit(0),
        )
    };
    assert_eq!(v, Ok(hip_sys::hipError_t::hipSuccess));
    assert_eq!(version, 60443484);
    assert_eq!(c, Ok(hip_sys::hipError_t::hipErrorNoDevice));
    assert_eq!(count, 0);
    assert_eq!(init.unwrap_err().symbol, "hipInit");
    assert!(!api.missing_symbols().contains(&"hipGetDeviceCount"));
}

#[test]
fn a_set_override_is_the_only_candidate_and_its_failure_is_the_error() {
    let _env = serial();
    const VAR: &str = "HIP_SYS_TEST_OVERRIDE";
    let chosen = TempDir::new("override");
    let searched = TempDir::new("override-searched");
    let explicit = chosen.path().join("my-hip.so");
    let fallback = searched.path().join("libamdhip64.so.6");
    if !build_shared_object(&explicit, FAKE_HIP_RUNTIME, &[])
        || !build_shared_object(&fallback, FAKE_HIP_RUNTIME, &[])
    {
        return;
    }
    let spec = hip_spec(VAR);
    let text = chosen.write("notes.txt", b"not a library\n");
    let unrelated = chosen.path().join("libunrelated.so");
    assert!(build_shared_object(&unrelated, UNRELATED_LIBRARY, &[]));
    let absent = chosen.path().join("absent.so");
    let open_with = |value: &std::ffi::OsStr| {
        support::set_env(VAR, value);
        let candidates = loader::candidates(&spec, &[searched.path().to_path_buf()], false);
        loader::open(&spec, candidates, Vec::new())
    };
    let loaded = open_with(explicit.as_os_str());
    let results = [
        open_with(absent.as_os_str()),
        open_with(chosen.path().as_os_str()),
        open_with(text.as_os_str()),
        open_with(unrelated.as_os_str()),
    ];
    // A relative value is refused even where it names a loadable file from
    // the working directory.
    let cwd = std::env::current_dir().expect("working directory");
    std::env::set_current_dir(chosen.path()).expect("enter folder");
    let relative = open_with("my-hip.so".as_ref());
    std::env::set_current_dir(cwd).expect("leave folder");
    support::set_env(VAR, "");
    let empty = open_with("".as_ref());
    support::remove_env(VAR);

    assert_eq!(
        loaded.expect("override loads").origin(),
        &Candidate::Path(explicit)
    );
    let [absent_err, dir_err, text_err, unrelated_err] = results.map(Result::unwrap_err);
    let message = absent_err.to_string();
    assert_eq!(
        override_failure(absent_err, VAR, &absent),
        AttemptFailure::NotFound
    );
    assert_eq!(
        message,
        format!(
            "libamdhip64: {VAR}={} does not exist; unset {VAR} to search the default locations",
            absent.display()
        )
    );
    assert_eq!(
        override_failure(dir_err, VAR, chosen.path()),
        AttemptFailure::NotAFile
    );
    assert!(matches!(
        override_failure(text_err, VAR, &text),
        AttemptFailure::LoadFailed(_)
    ));
    assert!(matches!(
        override_failure(unrelated_err, VAR, &unrelated),
        AttemptFailure::WrongLibrary { .. }
    ));
    assert_eq!(
        override_failure(relative.unwrap_err(), VAR, Path::new("my-hip.so")),
        AttemptFailure::Relative(VAR)
    );
    assert_eq!(
        empty.expect("an empty override is unset").origin(),
        &Candidate::Path(fallback),
        "an empty override is ignored"
    );
}

#[test]
fn companions_are_searched_only_next_to_the_runtime() {
    let _env = serial();
    let dir = TempDir::new("companion");
    let runtime_path = dir.path().join("libamdhip64.so.6");
    if !build_shared_object(&runtime_path, FAKE_HIP_RUNTIME, &[]) {
        return;
    }
    let runtime =
        loader::open_first(&HIP_LIBRARY, vec![Candidate::Path(runtime_path)]).expect("fake loads");
    let spec = LibrarySpec {
        override_var: "HIP_SYS_TEST_UNSET",
        ..HIPRTC_LIBRARY
    };
    let expected: Vec<_> = HIPRTC_LIBRARY
        .file_names
        .iter()
        .map(|n| Candidate::Path(dir.path().join(n)))
        .collect();
    assert_eq!(hip_sys::companion_candidates(&runtime, &spec), expected);
}

#[test]
fn the_global_runtime_and_hiprtc_follow_the_override_variable() {
    let _env = serial();
    let dir = TempDir::new("global");
    let runtime = dir.path().join("libamdhip64.so.6");
    let hiprtc = dir.path().join("libhiprtc.so.6");
    if !build_shared_object(&runtime, FAKE_HIP_RUNTIME, &[])
        || !build_shared_object(
            &hiprtc,
            "int hiprtcVersion(int *a, int *b) { *a = 6; *b = 4; return 0; }\n",
            &[],
        )
    {
        return;
    }
    support::set_env(HIP_LIBRARY.override_var, &runtime);
    let api = hip_sys::hip();
    let version = hip_sys::runtime_version();
    let rtc = hip_sys::hiprtc();
    support::remove_env(HIP_LIBRARY.override_var);

    assert_eq!(
        api.expect("fake runtime loads").library().origin(),
        &Candidate::Path(runtime)
    );
    assert_eq!(version.expect("version is read").to_string(), "6.4.43484");
    let rtc = rtc.expect("hipRTC is found next to the runtime");
    assert_eq!(rtc.library().origin(), &Candidate::Path(hiprtc));
    let (mut major, mut minor) = (0, 0);
    // SAFETY: valid out-pointers.
    let status = unsafe { rtc.hiprtcVersion(&mut major, &mut minor) }.expect("bound");
    assert_eq!((status.0, major, minor), (0, 6, 4));
}
