//! The decode loop: prefill the prompt, then one token at a time against the KV cache,
//! greedy or sampled, with the timings a user compares (time to first token, prefill and
//! decode tokens/s); and the benchmark of prefill and decode at a given batch and context.

use std::time::{Duration, Instant};

use candle_core::{D, DType, Device, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling};

use crate::model::Model;
use crate::{AppResult, app_error, device, timed};

/// How tokens are chosen and when generation stops.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// Sampling temperature; `None` or 0 is greedy.
    pub temperature: Option<f64>,
    /// Keep only the k most likely tokens.
    pub top_k: Option<usize>,
    /// Keep the most likely tokens up to this cumulative probability.
    pub top_p: Option<f64>,
    /// Divides the logits of recently generated tokens (1 = off).
    pub repeat_penalty: f32,
    /// How many recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    /// The sampler's seed.
    pub seed: u64,
    /// Go on past end-of-sequence tokens (for tests and benchmarks).
    pub ignore_eos: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_tokens: 64,
            temperature: None,
            top_k: None,
            top_p: None,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 299_792_458,
            ignore_eos: false,
        }
    }
}

impl Settings {
    /// Errors naming the option of a setting out of its range: no new tokens, a
    /// temperature that is not a number of at least 0, top-k of 0, top-p outside (0, 1],
    /// a repeat penalty that is not a positive number, or top-k / top-p without a
    /// temperature (greedy decoding would ignore them).
    pub fn check(&self) -> AppResult<()> {
        let bad = |message: String| Err(app_error(message));
        if self.max_tokens == 0 {
            return bad("--max-tokens 0: generate at least one token".into());
        }
        if let Some(t) = self.temperature
            && !(t.is_finite() && t >= 0.0)
        {
            return bad(format!("--temperature {t}: give a number of at least 0"));
        }
        if self.top_k == Some(0) {
            return bad("--top-k 0: keep at least one token".into());
        }
        if let Some(p) = self.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return bad(format!(
                "--top-p {p}: give a probability above 0, at most 1"
            ));
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad(format!(
                "--repeat-penalty {}: give a positive number (1 is off)",
                self.repeat_penalty
            ));
        }
        if (self.top_k.is_some() || self.top_p.is_some())
            && !self.temperature.is_some_and(|t| t > 0.0)
        {
            return bad("--top-k and --top-p sample: give a --temperature above 0 too".into());
        }
        Ok(())
    }

    /// candle-transformers' sampling mode for these settings.
    fn sampling(&self) -> Sampling {
        match self.temperature.filter(|t| *t > 0.0) {
            None => Sampling::ArgMax,
            Some(temperature) => match (self.top_k, self.top_p) {
                (None, None) => Sampling::All { temperature },
                (Some(k), None) => Sampling::TopK { k, temperature },
                (None, Some(p)) => Sampling::TopP { p, temperature },
                (Some(k), Some(p)) => Sampling::TopKThenTopP { k, p, temperature },
            },
        }
    }
}

/// What a generation produced and how long it took.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// The generated token ids.
    pub generated: Vec<u32>,
    /// From the start of prefill to the first token chosen.
    pub time_to_first_token: Duration,
    /// The decode steps after the first token.
    pub decode_time: Duration,
    /// The f32 logits of every step, when asked for.
    pub logits: Vec<Vec<f32>>,
}

impl Outcome {
    /// Prompt tokens per second of the prefill (time to first token).
    pub fn prefill_tokens_per_s(&self) -> f64 {
        self.prompt.len() as f64 / self.time_to_first_token.as_secs_f64()
    }

    /// Generated tokens per second after the first one.
    pub fn decode_tokens_per_s(&self) -> f64 {
        let steps = self.generated.len().saturating_sub(1);
        if steps == 0 {
            return 0.0;
        }
        steps as f64 / self.decode_time.as_secs_f64()
    }
}

/// Checks that `needed` positions fit the model's context.
pub fn check_context(model: &Model, prompt: usize, new_tokens: usize) -> AppResult<()> {
    if prompt == 0 {
        return Err(app_error("the prompt is empty"));
    }
    let needed = prompt + new_tokens;
    if needed > model.max_positions {
        return Err(app_error(format!(
            "the prompt ({prompt} tokens) and {new_tokens} new tokens need {needed} positions; \
             the model's context is {} (max_position_embeddings)",
            model.max_positions
        )));
    }
    Ok(())
}

/// Generates from `prompt`, calling `on_token` with each new id as soon as it is chosen.
/// Generation stops at the end of the model's context, as at `max_tokens` (a prompt that
/// leaves no room is an error). With `keep_logits`, the logits of every step are returned.
pub fn generate(
    model: &mut Model,
    prompt: &[u32],
    settings: &Settings,
    keep_logits: bool,
    mut on_token: impl FnMut(u32) -> AppResult<()>,
) -> AppResult<Outcome> {
    check_context(model, prompt.len(), 1)?;
    let max_tokens = settings.max_tokens.min(model.max_positions - prompt.len());
    model.reserve(prompt.len() + max_tokens)?;
    model.reset()?;
    let mut sampler = LogitsProcessor::from_sampling(settings.seed, settings.sampling());
    // Greedy with nothing to apply to the logits on the host: every token is the argmax on
    // the device, and the steps after the first go through `Model::decode_greedy`.
    let on_device = matches!(settings.sampling(), Sampling::ArgMax)
        && settings.repeat_penalty == 1.0
        && !keep_logits;
    let eos = model.eos.clone();
    let mut generated = Vec::new();
    let mut logits_kept = Vec::new();
    // Takes a chosen token; false once generation is to stop.
    let mut accept = |generated: &mut Vec<u32>, token: u32| -> AppResult<bool> {
        generated.push(token);
        on_token(token)?;
        Ok(settings.ignore_eos || !eos.contains(&token))
    };
    let start = Instant::now();
    let mut time_to_first_token = Duration::ZERO;
    let mut input = Tensor::new(prompt, model.device())?.unsqueeze(0)?;
    let mut pos = 0;
    for step in 0..max_tokens {
        let len = input.dim(1)?;
        let logits = model.forward(&input, pos)?.squeeze(0)?;
        pos += len;
        if step == 0 {
            check_finite(&logits)?;
        }
        let token = if on_device {
            logits.argmax(D::Minus1)?.to_scalar::<u32>()?
        } else {
            let logits = if settings.repeat_penalty != 1.0 {
                let seen = [prompt, &generated].concat();
                let recent = &seen[seen.len().saturating_sub(settings.repeat_last_n)..];
                candle_transformers::utils::apply_repeat_penalty(
                    &logits,
                    settings.repeat_penalty,
                    recent,
                )?
            } else {
                logits
            };
            if keep_logits {
                logits_kept.push(logits.to_vec1::<f32>()?);
            }
            sampler.sample(&logits)?
        };
        if step == 0 {
            time_to_first_token = start.elapsed();
        }
        if !accept(&mut generated, token)? {
            break;
        }
        if on_device {
            let steps = max_tokens - 1 - step;
            model.decode_greedy(token, pos, steps, |t| accept(&mut generated, t))?;
            break;
        }
        input = Tensor::new(&[token], model.device())?.unsqueeze(0)?;
    }
    Ok(Outcome {
        prompt: prompt.to_vec(),
        generated,
        time_to_first_token,
        decode_time: start.elapsed() - time_to_first_token,
        logits: logits_kept,
    })
}

/// Errors when the prompt's logits hold a NaN or an infinity (their sum is then not
/// finite): weights or a configuration (a RoPE base of 0, a negative norm epsilon) that
/// give no usable numbers, which greedy decoding would turn into token 0 after token 0.
fn check_finite(logits: &Tensor) -> AppResult<()> {
    let sum = logits.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()?;
    if sum.is_finite() {
        return Ok(());
    }
    Err(app_error(
        "the model's logits after the prompt are not finite (NaN or infinite): the weights \
         or the configuration give no usable numbers",
    ))
}

/// One benchmark case's results.
#[derive(Clone, Debug)]
pub struct BenchResult {
    /// Sequences per batch.
    pub batch: usize,
    /// Prompt tokens per sequence.
    pub prompt_len: usize,
    /// Decode steps timed.
    pub new_tokens: usize,
    /// Median time of one prefill forward, ms.
    pub prefill_ms: f64,
    /// Median time per decode step (all sequences of the batch), ms.
    pub decode_ms_per_token: f64,
    /// Host time per decode step outside its waits for the chosen tokens (queueing the
    /// work), ms.
    pub host_ms_per_token: f64,
}

/// Times prefill and decode: `batch` prompts of `prompt_len` tokens, then `new_tokens` greedy
/// steps (argmax on the device, every chosen token read back to the host as a generator
/// does: for one sequence through [`Model::decode_greedy`], as `generate` decodes greedily).
/// Medians of `iters` runs after one warm-up.
pub fn bench(
    model: &mut Model,
    batch: usize,
    prompt_len: usize,
    new_tokens: usize,
    iters: usize,
) -> AppResult<BenchResult> {
    if batch == 0 || new_tokens == 0 || iters == 0 {
        return Err(app_error(
            "batch, new tokens and iterations must be at least 1",
        ));
    }
    check_context(model, prompt_len, new_tokens)?;
    model.reserve(prompt_len + new_tokens)?;
    let dev = model.device().clone();
    // Byte-range ids, the same for every run.
    let ids: Vec<u32> = (0..batch * prompt_len)
        .map(|i| ((i * 7919 + 13) % 256) as u32)
        .collect();
    let prompt = Tensor::from_vec(ids, (batch, prompt_len), &dev)?;
    let mut prefill = Vec::new();
    let mut decode = Vec::new();
    let mut host = Vec::new();
    for _ in 0..=iters {
        model.reset()?;
        device::synchronize(&dev)?;
        let t0 = Instant::now();
        let logits = model.forward(&prompt, 0)?;
        let mut next = argmax(&logits)?;
        device::synchronize(&dev)?;
        prefill.push(t0.elapsed().as_secs_f64() * 1e3);
        let t1 = Instant::now();
        let waited = if batch == 1 {
            model.decode_greedy(next[0], prompt_len, new_tokens, |_| Ok(true))?
        } else {
            let mut waited = Duration::ZERO;
            for step in 0..new_tokens {
                let input = Tensor::from_vec(next, (batch, 1), &dev)?;
                let chosen = model
                    .forward(&input, prompt_len + step)?
                    .argmax(D::Minus1)?;
                next = timed(&mut waited, || Ok(chosen.to_vec1()?))?;
            }
            waited
        };
        let elapsed = t1.elapsed();
        decode.push(elapsed.as_secs_f64() * 1e3 / new_tokens as f64);
        host.push((elapsed - waited).as_secs_f64() * 1e3 / new_tokens as f64);
    }
    // The first run is the warm-up.
    Ok(BenchResult {
        batch,
        prompt_len,
        new_tokens,
        prefill_ms: median(&prefill[1..]),
        decode_ms_per_token: median(&decode[1..]),
        host_ms_per_token: median(&host[1..]),
    })
}

/// Each row's most likely token, read back to the host.
fn argmax(logits: &Tensor) -> AppResult<Vec<u32>> {
    Ok(logits.argmax(D::Minus1)?.to_dtype(DType::U32)?.to_vec1()?)
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The device's copy bandwidth in GB/s (bytes read + written by a 1 GiB device-to-device
/// copy, median of 5), or `None` on the CPU.
pub fn copy_bandwidth(device: &Device) -> AppResult<Option<f64>> {
    let Some(hip) = candle_hip::extension::as_hip_device(device) else {
        return Ok(None);
    };
    let stream = hip.stream();
    let n = 1usize << 30;
    let src = stream.alloc_zeros::<u8>(n)?;
    let mut dst = stream.alloc_zeros::<u8>(n)?;
    let mut times = Vec::new();
    for _ in 0..6 {
        stream.synchronize()?;
        let t = Instant::now();
        stream.memcpy_dtod(&src, &mut dst)?;
        stream.synchronize()?;
        times.push(t.elapsed().as_secs_f64());
    }
    Ok(Some(2.0 * n as f64 / median(&times[1..]) / 1e9))
}
