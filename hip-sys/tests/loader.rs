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
        AttemptFailure::NotFound => panic!("expected a load failure, got not found"),
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
    );
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
    let dirs = search_dirs_from(Some("".into()), Some(rocm.clone().into()), opt.path());
    assert_eq!(
        dirs,
        vec![rocm.join("lib"), opt.path().join("rocm").join("lib")],
        "HIP_PATH first, /opt/rocm-6.4.3 not repeated, empty ROCM_PATH ignored"
    );
    let missing_opt = opt.path().join("absent");
    assert_eq!(
        search_dirs_from(None, None, &missing_opt),
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
    let dirs = loader::default_search_dirs();
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
fn candidates_are_override_then_each_folder_newest_name_first_then_system() {
    let _env = serial();
    const VAR: &str = "HIP_SYS_TEST_CANDIDATES";
    let spec = hip_spec(VAR);
    let dirs = [PathBuf::from("/a"), PathBuf::from("/b")];
    support::set_env(VAR, "/explicit/libamdhip64.so.6");
    let with_override = loader::candidates(&spec, &dirs, true);
    support::set_env(VAR, "");
    let empty_override = loader::candidates(&spec, &dirs, false);
    support::remove_env(VAR);

    let names = HIP_LIBRARY.file_names;
    let mut expected = vec![Candidate::Path("/explicit/libamdhip64.so.6".into())];
    for dir in &dirs {
        expected.extend(names.iter().map(|n| Candidate::Path(dir.join(n))));
    }
    expected.extend(names.iter().map(|n| Candidate::SystemName(n.to_string())));
    assert_eq!(with_override, expected);
    assert_eq!(names[0], "libamdhip64.so.7");
    assert_eq!(
        empty_override,
        expected[1..1 + 2 * names.len()].to_vec(),
        "an empty override is ignored, no system names when disabled"
    );
}

#[test]
fn nothing_found_lists_every_path_as_not_found() {
    let _env = serial();
    let a = TempDir::new("empty-a");
    let b = TempDir::new("empty-b");
    let dirs = [a.path().to_path_buf(), b.path().to_path_buf()];
    let candidates = loader::candidates(&hip_spec("HIP_SYS_TEST_UNSET"), &dirs, false);
    let err = loader::open_first("libamdhip64", candidates.clone()).unwrap_err();

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
        "libabsent",
        vec![Candidate::SystemName("librocm-sys-test-absent.so.6".into())],
    )
    .unwrap_err();
    assert_eq!(attempts(&err)[0].failure, AttemptFailure::NotFound);
    assert!(
        err.to_string()
            .contains("librocm-sys-test-absent.so.6 (system loader): not found")
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
    let err = loader::open_first("libamdhip64", candidates).unwrap_err();

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
        let err = loader::open_first("libamdhip64", vec![candidate]).unwrap_err();
        let msg = load_failure_message(&attempts(&err)[0].failure);
        assert!(
            msg.contains("librocmsystestdep.so"),
            "loader message: {msg}"
        );
        assert!(err.is_present_but_broken());
    }
}

#[test]
fn unrelated_library_loads_and_every_call_reports_its_missing_symbol() {
    let _env = serial();
    let dir = TempDir::new("unrelated");
    let path = dir.path().join("libamdhip64.so.6");
    if !build_shared_object(&path, UNRELATED_LIBRARY, &[]) {
        return;
    }
    let library = loader::open_first("libamdhip64", vec![Candidate::Path(path.clone())])
        .expect("a valid shared object loads");
    assert_eq!(library.directory(), Some(dir.path()));
    let api = HipApi::from_library(library);
    assert_eq!(api.missing_symbols(), HipApi::SYMBOLS.to_vec());

    let mut count = -1;
    // SAFETY: `count` is a valid out-pointer; the call fails before C code runs.
    let err = unsafe { api.hipGetDeviceCount(&mut count) }.unwrap_err();
    assert_eq!(err.symbol, "hipGetDeviceCount");
    assert_eq!(
        err.to_string(),
        format!(
            "symbol hipGetDeviceCount is missing from {}",
            path.display()
        )
    );
    assert_eq!(count, -1);
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
        loader::open_first("libamdhip64", vec![Candidate::Path(path)]).expect("fake loads"),
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
fn override_variable_wins_and_an_absent_override_is_reported() {
    let _env = serial();
    const VAR: &str = "HIP_SYS_TEST_OVERRIDE";
    let chosen = TempDir::new("override");
    let searched = TempDir::new("override-searched");
    let explicit = chosen.path().join("my-hip.so");
    if !build_shared_object(&explicit, FAKE_HIP_RUNTIME, &[]) {
        return;
    }
    searched.write("libamdhip64.so.6", b"");
    let dirs = [searched.path().to_path_buf()];

    support::set_env(VAR, &explicit);
    let loaded = loader::open_first(
        "libamdhip64",
        loader::candidates(&hip_spec(VAR), &dirs, false),
    );
    let absent = chosen.path().join("absent.so");
    support::set_env(VAR, &absent);
    let err = loader::open_first(
        "libamdhip64",
        loader::candidates(&hip_spec(VAR), &dirs, false),
    );
    support::remove_env(VAR);

    assert_eq!(
        loaded.expect("override loads").origin(),
        &Candidate::Path(explicit)
    );
    let err = err.unwrap_err();
    assert_eq!(attempts(&err)[0].candidate, Candidate::Path(absent.clone()));
    assert_eq!(attempts(&err)[0].failure, AttemptFailure::NotFound);
    assert!(matches!(
        failure_at(&err, &searched.path().join("libamdhip64.so.6")),
        AttemptFailure::LoadFailed(_)
    ));
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
        loader::open_first("libamdhip64", vec![Candidate::Path(runtime_path)]).expect("fake loads");
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
