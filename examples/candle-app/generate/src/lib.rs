//! Text generation with candle-transformers' Llama, Mistral, Qwen2 and Qwen3 on a HIP device
//! through candle-hip (or on the CPU), as an LLM worker built on Candle runs it.
//!
//! - [`shapes`]: named configurations of real models and the embedded tiny default;
//! - [`weights`]: seeded random weights, in memory or written as a model folder;
//! - [`gguf`]: seeded models written as quantized GGUF files, and reading their headers;
//! - [`model`]: loading a model folder, a shape or a GGUF file, one interface over the
//!   architectures;
//! - [`codec`]: tokenizers (Hugging Face's, or bytes for the seeded models);
//! - [`generation`]: the decode loop with sampling, timings and the benchmark;
//! - [`device`]: choosing HIP or the CPU (one device, or one per tensor-parallel rank);
//! - [`tensor_parallel`]: a Llama split over several devices, one thread per rank, and the
//!   all-reduce its ranks meet in;
//! - [`static_cache`]: a Llama with fixed-size KV caches whose one-token decode step has
//!   static shapes and reads its token and position from the device (capturable into a
//!   graph).
//! - [`graph_decode`]: that step captured into a HIP graph once and replayed per token.

pub mod codec;
pub mod device;
pub mod generation;
pub mod gguf;
pub mod graph_decode;
pub mod model;
pub mod shapes;
pub mod static_cache;
pub mod tensor_parallel;
pub mod weights;

/// The program's errors: a message for the user (Candle's, the tokenizer's, or our own).
pub type AppError = Box<dyn std::error::Error + Send + Sync>;

/// A result with an [`AppError`].
pub type AppResult<T> = Result<T, AppError>;

/// `read`'s result, adding the time it took to `waited` (the host's waits for the device).
pub(crate) fn timed<T>(
    waited: &mut std::time::Duration,
    read: impl FnOnce() -> AppResult<T>,
) -> AppResult<T> {
    let start = std::time::Instant::now();
    let out = read();
    *waited += start.elapsed();
    out
}

/// An error carrying `message`.
pub fn app_error(message: impl Into<String>) -> AppError {
    message.into().into()
}
