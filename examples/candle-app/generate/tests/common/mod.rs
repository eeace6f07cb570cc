//! What the generation package's test files share (each test file uses a part of it).
#![allow(dead_code)]

use candle_app_generate::generation::Settings;
use candle_app_generate::model::Model;

/// Greedy decoding of `max_tokens` tokens, not stopped by EOS.
pub fn greedy(max_tokens: usize) -> Settings {
    Settings {
        max_tokens,
        ignore_eos: true,
        ..Settings::default()
    }
}

/// How many tokens `got` and `want` agree on from the start.
pub fn same_prefix(got: &[u32], want: &[u32]) -> usize {
    got.iter().zip(want).take_while(|(a, b)| a == b).count()
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

/// The largest [`relative_difference`] of `got`'s steps against `want`'s.
pub fn worst_step_difference(got: &[Vec<f32>], want: &[Vec<f32>]) -> f32 {
    got.iter()
        .zip(want)
        .map(|(g, w)| relative_difference(g, w))
        .fold(0f32, f32::max)
}

/// The f32 logits of every step when `model` is fed `prompt` and then `tokens` one at a time.
pub fn teacher_forced(model: &mut Model, prompt: &[u32], tokens: &[u32]) -> Vec<Vec<f32>> {
    let dev = model.device().clone();
    model.reset().unwrap();
    let row = |t: candle_core::Tensor| t.squeeze(0).unwrap().to_vec1::<f32>().unwrap();
    let ids = candle_core::Tensor::new(prompt, &dev)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let mut out = vec![row(model.forward(&ids, 0).unwrap())];
    for (i, &id) in tokens
        .iter()
        .enumerate()
        .take(tokens.len().saturating_sub(1))
    {
        let ids = candle_core::Tensor::new(&[id], &dev)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        out.push(row(model.forward(&ids, prompt.len() + i).unwrap()));
    }
    out
}

/// The gap between the two largest values of `row`.
pub fn margin(row: &[f32]) -> f32 {
    let mut sorted = row.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    sorted[0] - sorted[1]
}

/// Where a free-running greedy generation first left the reference's tokens, `same_run`
/// steps in: "none", or a near tie, checked: the reference chose that step by less than
/// twice the largest difference between its logits and `forced` (the other run's logits
/// when fed the reference's tokens) there. `label` names the case in the panic.
pub fn divergence(
    reference: &[Vec<f32>],
    forced: &[Vec<f32>],
    same_run: usize,
    label: &str,
) -> String {
    match reference.get(same_run) {
        None => "none".to_string(),
        Some(c) => {
            let g = &forced[same_run];
            let diff = c
                .iter()
                .zip(g)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                margin(c) < 2.0 * diff,
                "{label}: step {same_run} differs with a top-2 margin of {} (difference {diff})",
                margin(c)
            );
            format!(
                "a near tie (top-2 margin {:.1e}, difference {diff:.1e})",
                margin(c)
            )
        }
    }
}
