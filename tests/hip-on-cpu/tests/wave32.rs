//! The CPU platform emulating `gfx1100` (wave 32): its own checks, and the
//! wave-semantics test shared with every GPU platform.

mod emulation;

#[path = "../../../hip-safe/tests/wave.rs"]
mod wave;

const ARCH: &str = "gfx1100";

#[test]
fn wave_operations_follow_hip_semantics() {
    emulation::use_platform(ARCH);
    wave::gpu_wave_operations_follow_hip_semantics();
}

#[test]
fn exited_lanes_are_inactive() {
    emulation::use_platform(ARCH);
    emulation::exited_lanes_are_inactive();
}

#[test]
fn branches_reconverge_at_barriers() {
    emulation::use_platform(ARCH);
    emulation::branches_reconverge_at_barriers();
}

#[test]
fn divergence_is_reported() {
    emulation::use_platform(ARCH);
    emulation::divergence_is_reported();
}

#[test]
fn writes_past_a_buffer_are_reported() {
    emulation::use_platform(ARCH);
    emulation::writes_past_a_buffer_are_reported();
}

#[test]
fn shared_memory_reductions_are_exact() {
    emulation::use_platform(ARCH);
    emulation::shared_memory_reductions_are_exact();
}
