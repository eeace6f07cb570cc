//! Prints what this machine offers to HIP: the runtime library that was
//! loaded, its version and every device (name, architecture, wave size,
//! compute units, memory). Without a usable GPU it prints one line with the
//! reason and exits successfully.
//!
//! ```text
//! cargo run --release --example hip-info
//! ```

use std::time::Instant;

fn main() {
    let start = Instant::now();
    let available = hip_safe::is_available();
    let elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
    let probe = hip_safe::probe();
    if available {
        println!("{probe}");
        println!("is_available() = true in {elapsed_ms:.1} ms");
    } else {
        println!("{probe} [is_available() = false in {elapsed_ms:.1} ms]");
    }
}
