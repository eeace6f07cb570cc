//! Test-only HIP-on-CUDA shim.
