//! What the generation package's test files share.

use candle_app_generate::generation::Settings;

/// Greedy decoding of `max_tokens` tokens, not stopped by EOS.
pub fn greedy(max_tokens: usize) -> Settings {
    Settings {
        max_tokens,
        ignore_eos: true,
        ..Settings::default()
    }
}

/// Largest |a - b| over largest |b|.
pub fn relative_difference(a: &[f32], b: &[f32]) -> f32 {
    let diff = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    diff / b.iter().map(|y| y.abs()).fold(0f32, f32::max)
}
