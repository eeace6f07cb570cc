//! The CPU platform emulating `gfx942` (wave 64): its own checks, and the
//! wave-semantics test shared with every GPU platform.

#[macro_use]
mod emulation;

#[path = "../../../hip-safe/tests/wave.rs"]
mod wave;

emulation_tests!("gfx942");
