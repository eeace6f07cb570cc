//! Project tooling, not shipped: fetches ROCm packages from Debian,
//! regenerates the committed -sys bindings and records exported symbols.
//! See `build/README.md`.

mod candle_patch;
mod fetch;
mod generate;
mod kernel_bundle;
mod symbols;
mod text_generation;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Errors of this tool are reported as text.
pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Runs a command, failing with its name and exit status when it fails.
pub fn run_checked(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().map_err(|e| format!("{cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed: {status}").into())
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

const USAGE: &str = "usage: rocm-tools <command>
  fetch     download and unpack the ROCm 6.4 development packages into build/.rocm/6.4
  bindgen   fetch (if needed), then regenerate */src/generated/{types,functions}.rs (rustfmt-formatted)
  symbols   download the ROCm 5.x, 6.4 and 7.x runtime packages into build/.rocm and write
            their exported function names to build/symbols/<library>-<version>.txt
  candle-patch  write the patched Candle sources into build/.candle-patched
  kernel-bundle --out FILE [--archs a,b] [--sources a.hip,b.hip] [--jobs N] [--threads] [--per-unit]
            compile every candle-hip kernel unit (or the named sources' units) for the
            targets with the loaded hipRTC (real one: run inside build/sandbox.sh exec),
            N worker processes (--threads: threads of this process) at a time, into a
            kernel bundle; prints times
  generate [ARGS]  apply the Candle patches, then run examples/candle-app's text generation
            program with ARGS (no ARGS: the embedded default model; `-- --help` lists them)";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let repo = repo_root();
    let result = match args.first().map(String::as_str) {
        Some("fetch") => fetch::ensure(&repo, &fetch::DEV_6_4).map(|p| println!("{}", p.display())),
        Some("bindgen") => fetch::ensure(&repo, &fetch::DEV_6_4)
            .and_then(|dir| generate::run(&repo, &generate::include_dir(&dir), "6.4")),
        Some("symbols") => symbols::run(&repo),
        Some("kernel-bundle") => kernel_bundle::run(&args[1..]),
        Some("kernel-bundle-worker") => kernel_bundle::worker(&args[1..]),
        Some("candle-patch") => candle_patch::run(&repo).map(|dirs| {
            for dir in dirs {
                println!("{}", dir.display());
            }
        }),
        Some("generate") => match text_generation::run(&repo, &args[1..]) {
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = result {
        eprintln!("rocm-tools: {e}");
        std::process::exit(1);
    }
}
