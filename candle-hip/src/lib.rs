//! A Candle backend for AMD GPUs on ROCm.
