//! Prints what this machine offers to HIP: the runtime library that was
//! loaded, its version and every device (name, architecture, wave size,
//! compute units, memory). Without a usable GPU it prints one line with the
//! reason and exits successfully.
//!
//! ```text
//! cargo run --release --example hip-info
//! ```

fn main() {
    println!("{}", hip_safe::probe());
}
