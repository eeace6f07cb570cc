//! The CPU platform emulating `gfx1100` (wave 32): its own checks, and the
//! wave-semantics test shared with every GPU platform.

#[macro_use]
mod emulation;

#[path = "../../../hip-safe/tests/wave.rs"]
mod wave;

emulation_tests!("gfx1100");
