//! Safe RAII layer over the HIP runtime, hipRTC, rocBLAS and MIOpen.
