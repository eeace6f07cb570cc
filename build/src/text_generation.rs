//! `rocm-tools generate`: the README's main job in one command. Applies the Candle patches
//! (quick when they are up to date), then builds and runs the application workspace's
//! `generate` program (examples/candle-app/generate) with the given arguments, and exits
//! with its status.

use std::path::Path;
use std::process::Command;

use crate::{Result, candle_patch};

/// Runs `generate` with `args`; returns its exit code.
pub fn run(repo: &Path, args: &[String]) -> Result<i32> {
    candle_patch::run(repo)?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = repo.join("examples/candle-app/Cargo.toml");
    let status = Command::new(cargo)
        .args(["run", "--release", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .args(["-p", "candle-app-generate", "--bin", "generate", "--"])
        .args(args)
        .status()
        .map_err(|e| format!("cargo run {}: {e}", manifest.display()))?;
    Ok(status.code().unwrap_or(1))
}
