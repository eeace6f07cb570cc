//! One ignored test of the running test executable in a child process, with
//! environment variables of its own (a fresh emulated platform per case).

use std::process::Command;

/// Runs the ignored test `test` of this executable in a child process with
/// `marker` set to `test` and `vars` set, and checks that it ran and passed.
pub fn run(marker: &str, test: &str, vars: &[(&str, &str)]) {
    let exe = std::env::current_exe().expect("test executable path");
    let out = Command::new(exe)
        .args([test, "--exact", "--include-ignored", "--test-threads=1"])
        .env(marker, test)
        .envs(vars.iter().copied())
        .output()
        .expect("child test process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test} with {vars:?}:\n{stdout}\n{stderr}"
    );
}

/// Whether this process is the child [`run`] started for `test`.
pub fn is(marker: &str, test: &str) -> bool {
    std::env::var(marker).is_ok_and(|v| v == test)
}
