//! Kernel compile cost: the time a fresh process takes to open the device
//! and load every kernel module, first with an empty code-object cache
//! (every source compiled by hipRTC), then again with the cache it filled.
//!
//! Each measurement runs in a child process (this executable with
//! [`CHILD_FLAG`]) so that nothing is loaded beforehand and the cache folder
//! is chosen with `HIP_SAFE_CACHE_DIR` before hip-safe reads it.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use candle_core::backend::BackendDevice;
use candle_hip::HipDevice;

use crate::output::{Outcome, Row, one_line};

/// The argument that makes this executable measure one start-up and exit.
pub const CHILD_FLAG: &str = "--compile-cost-child";

/// Whether this process is a measuring child.
pub fn is_child() -> bool {
    std::env::args().nth(1).as_deref() == Some(CHILD_FLAG)
}

/// The child: opens device 0, loads every kernel module and prints
/// `open_us=<t> load_us=<t>`.
pub fn child_main() -> ExitCode {
    let started = Instant::now();
    let device = match HipDevice::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("opening HIP device 0: {}", one_line(&e.to_string()));
            return ExitCode::FAILURE;
        }
    };
    let open_us = started.elapsed().as_secs_f64() * 1e6;
    let started = Instant::now();
    if let Err(e) = device.load_all_kernels() {
        eprintln!("loading the kernel modules: {}", one_line(&e.to_string()));
        return ExitCode::FAILURE;
    }
    let load_us = started.elapsed().as_secs_f64() * 1e6;
    println!("open_us={open_us:.0} load_us={load_us:.0}");
    ExitCode::SUCCESS
}

/// Start-up times of one child: device open and module loading, in µs.
struct Startup {
    open_us: f64,
    load_us: f64,
}

/// The start-up rows: device open, loading all modules cold and warm.
pub fn rows() -> Vec<Row> {
    let dir = fresh_dir();
    let (cold, warm) = match std::fs::create_dir_all(&dir) {
        Ok(()) => {
            let cold = run_child(&dir);
            let warm = run_child(&dir);
            // A leftover temporary folder is harmless.
            let _ = std::fs::remove_dir_all(&dir);
            (cold, warm)
        }
        Err(e) => {
            let err = format!("creating {}: {e}", dir.display());
            (Err(err.clone()), Err(err))
        }
    };
    let outcome = |r: &Result<Startup, String>, pick: fn(&Startup) -> f64| match r {
        Ok(s) => Outcome::Time(pick(s)),
        Err(e) => Outcome::Error(e.clone()),
    };
    vec![
        Row::startup("device_open", outcome(&warm, |s| s.open_us)),
        Row::startup("load_all_kernels_cold", outcome(&cold, |s| s.load_us)),
        Row::startup("load_all_kernels_warm", outcome(&warm, |s| s.load_us)),
    ]
}

/// A new, unused folder name under the system's temporary folder.
fn fresh_dir() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    std::env::temp_dir().join(format!(
        "candle-hip-bench-cache-{}-{nanos}",
        std::process::id()
    ))
}

/// Runs a measuring child with its code-object cache in `cache_dir`.
fn run_child(cache_dir: &Path) -> Result<Startup, String> {
    let exe = std::env::current_exe().map_err(|e| format!("locating this executable: {e}"))?;
    let output = Command::new(exe)
        .arg(CHILD_FLAG)
        .env(hip_safe::CACHE_DIR_VAR, cache_dir)
        .output()
        .map_err(|e| format!("starting the measuring child: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!(
            "measuring child failed ({}): {}",
            output.status,
            one_line(&stderr)
        ));
    }
    parse(&stdout).ok_or_else(|| format!("unexpected child output {:?}", stdout.trim()))
}

/// Reads `open_us=<t> load_us=<t>` from the child's output.
fn parse(stdout: &str) -> Option<Startup> {
    let line = stdout.lines().rev().find(|l| l.starts_with("open_us="))?;
    let mut fields = line.split_whitespace().map(|f| f.split_once('='));
    let open_us = fields.next()??.1.parse().ok()?;
    let load_us = fields.next()??.1.parse().ok()?;
    Some(Startup { open_us, load_us })
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn child_output_is_parsed() {
        let s = parse("noise\nopen_us=1200 load_us=35000\n").expect("parsed");
        assert_eq!((s.open_us, s.load_us), (1200.0, 35000.0));
        assert!(parse("open_us=x load_us=1").is_none());
        assert!(parse("").is_none());
    }
}
