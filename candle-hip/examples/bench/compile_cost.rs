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

/// The child: opens device 0 and prints `open_us=<t>`, then loads every
/// kernel module and prints `load_us=<t>`.
pub fn child_main() -> ExitCode {
    let started = Instant::now();
    let device = match HipDevice::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("opening HIP device 0: {}", one_line(&e.to_string()));
            return ExitCode::FAILURE;
        }
    };
    println!("open_us={:.0}", started.elapsed().as_secs_f64() * 1e6);
    let started = Instant::now();
    if let Err(e) = device.load_all_kernels() {
        eprintln!("loading the kernel modules: {}", one_line(&e.to_string()));
        return ExitCode::FAILURE;
    }
    println!("load_us={:.0}", started.elapsed().as_secs_f64() * 1e6);
    ExitCode::SUCCESS
}

/// What one child measured: device open and module loading, in µs, or
/// why it could not.
struct Startup {
    open: Result<f64, String>,
    load: Result<f64, String>,
}

impl Startup {
    /// Both measurements failed for the same reason.
    fn failed(reason: String) -> Startup {
        Startup {
            open: Err(reason.clone()),
            load: Err(reason),
        }
    }
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
            let reason = format!("creating {}: {e}", dir.display());
            (Startup::failed(reason.clone()), Startup::failed(reason))
        }
    };
    let outcome = |r: Result<f64, String>| match r {
        Ok(us) => Outcome::Time(us),
        Err(e) => Outcome::Error(e),
    };
    vec![
        Row::startup("device_open", outcome(warm.open)),
        Row::startup("load_all_kernels_cold", outcome(cold.load)),
        Row::startup("load_all_kernels_warm", outcome(warm.load)),
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
fn run_child(cache_dir: &Path) -> Startup {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return Startup::failed(format!("locating this executable: {e}")),
    };
    let output = match Command::new(exe)
        .arg(CHILD_FLAG)
        .env(hip_safe::CACHE_DIR_VAR, cache_dir)
        .output()
    {
        Ok(output) => output,
        Err(e) => return Startup::failed(format!("starting the measuring child: {e}")),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let failure = || {
        let stderr = String::from_utf8_lossy(&output.stderr);
        format!(
            "measuring child failed ({}): {}",
            output.status,
            one_line(&stderr)
        )
    };
    Startup {
        open: field(&stdout, "open_us").ok_or_else(failure),
        load: field(&stdout, "load_us").ok_or_else(failure),
    }
}

/// The value of the child's output line `<name>=<microseconds>`.
fn field(stdout: &str, name: &str) -> Option<f64> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('=')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn child_output_is_parsed() {
        let out = "noise\nopen_us=1200\nload_us=35000\n";
        assert_eq!(field(out, "open_us"), Some(1200.0));
        assert_eq!(field(out, "load_us"), Some(35000.0));
        assert_eq!(field("open_us=1200\n", "load_us"), None);
        assert_eq!(field("open_us=x", "open_us"), None);
    }
}
