//! Host time per exported function, for finding where a program's host time
//! goes: with `HIP_SHIM_PROFILE=<file>` set when the shim loads, every
//! export counts its calls and the wall time spent inside it, and the
//! totals are written to `<file>` as a table when the process exits
//! (`-` for stderr). Unset, an export pays one atomic load.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::time::Instant;

/// The variable that turns profiling on and names the report.
pub const PROFILE_VAR: &str = "HIP_SHIM_PROFILE";

/// One export's totals.
pub struct Stat {
    calls: AtomicU64,
    nanos: AtomicU64,
    registered: Once,
}

impl Stat {
    /// Zero calls.
    pub const fn new() -> Stat {
        Stat {
            calls: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
            registered: Once::new(),
        }
    }
}

static STATS: OnceLock<Mutex<Vec<(&'static str, &'static Stat)>>> = OnceLock::new();

unsafe extern "C" {
    fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
}

/// Where the report goes (`-`: stderr), or `None` when profiling is off;
/// read from the environment once, which also registers the report.
fn report_path() -> Option<&'static str> {
    static PATH: OnceLock<Option<String>> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = std::env::var_os(PROFILE_VAR)?;
        // SAFETY: registers a plain function that only reads statics.
        unsafe { atexit(write_report) };
        Some(path.to_string_lossy().into_owned())
    })
    .as_deref()
}

/// Runs `body`, adding its wall time to `stat` (named `name`) when profiling
/// is on.
pub fn timed<R>(stat: &'static Stat, name: &'static str, body: impl FnOnce() -> R) -> R {
    if report_path().is_none() {
        return body();
    }
    stat.registered.call_once(|| {
        let list = STATS.get_or_init(|| Mutex::new(Vec::new()));
        list.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name, stat));
    });
    let start = Instant::now();
    let out = body();
    let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    stat.calls.fetch_add(1, Ordering::Relaxed);
    stat.nanos.fetch_add(nanos, Ordering::Relaxed);
    out
}

/// The table, most time first.
fn report() -> String {
    let mut rows: Vec<(&str, u64, u64)> = STATS
        .get()
        .map(|list| {
            let list = list.lock().unwrap_or_else(|e| e.into_inner());
            list.iter()
                .map(|(name, s)| {
                    (
                        *name,
                        s.calls.load(Ordering::Relaxed),
                        s.nanos.load(Ordering::Relaxed),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    rows.sort_by_key(|r| std::cmp::Reverse(r.2));
    let total: u64 = rows.iter().map(|r| r.2).sum();
    let mut out = format!(
        "{:<40} {:>10} {:>12} {:>10}\n",
        "function", "calls", "total ms", "us/call"
    );
    for (name, calls, nanos) in rows {
        out += &format!(
            "{name:<40} {calls:>10} {:>12.3} {:>10.2}\n",
            nanos as f64 / 1e6,
            nanos as f64 / 1e3 / calls.max(1) as f64
        );
    }
    out + &format!("{:<40} {:>10} {:>12.3}\n", "total", "", total as f64 / 1e6)
}

extern "C" fn write_report() {
    let text = report();
    match report_path() {
        Some("-") | None => {
            let _ = std::io::stderr().write_all(text.as_bytes());
        }
        Some(path) => {
            let _ = std::fs::write(path, text);
        }
    }
}
