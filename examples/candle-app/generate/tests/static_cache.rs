//! The static-cache Llama on the CPU against candle-transformers' `llama` on the same seeded
//! weights: the prompt's logits, greedy decoding through the device-input step, the bounds
//! of the fixed cache, the step reused after a longer sequence (stale cache rows), and a
//! batch of sequences against each sequence alone; and, `#[ignore]`d, the same model on HIP
//! against the CPU, batches and graph replay included (run with `--include-ignored` on a
//! GPU machine).

use std::collections::HashMap;

use candle_app_generate::graph_decode::GraphDecoder;
use candle_app_generate::shapes::Shape;
use candle_app_generate::static_cache::StaticLlama;
use candle_app_generate::weights;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::llama;
use serde_json::Value;

mod common;

use common::relative_difference;

const SEED: u64 = 20_261_123;

/// The largest relative logit difference the f32 comparisons allow.
const TOLERANCE: f32 = 1e-4;

/// The embedded default: 4 layers, 8 heads over 2 key/value heads, separate `lm_head`,
/// plain RoPE.
fn tiny() -> Value {
    Shape::Tiny.config()
}

/// The tiny shape with tied embeddings and Llama 3's RoPE (theta and rescaling of
/// Llama-3.2-1B).
fn tiny_llama3() -> Value {
    let mut config = Shape::Tiny.config();
    let llama_3_2 = Shape::Llama3_2_1B.config();
    config["tie_word_embeddings"] = true.into();
    config["rope_theta"] = llama_3_2["rope_theta"].clone();
    config["rope_scaling"] = llama_3_2["rope_scaling"].clone();
    config
}

/// `config`'s seeded weights (f32, CPU), its Llama configuration, and a VarBuilder over them.
struct Weights {
    tensors: HashMap<String, Tensor>,
    cfg: llama::Config,
    dtype: DType,
    device: Device,
}

impl Weights {
    fn new(config: &Value) -> Weights {
        Weights::on(config, &Device::Cpu)
    }

    fn on(config: &Value, device: &Device) -> Weights {
        Weights::of(config, DType::F32, device)
    }

    fn of(config: &Value, dtype: DType, device: &Device) -> Weights {
        let tensors = weights::build(config, SEED, dtype, device).expect("weights");
        let cfg: llama::LlamaConfig =
            serde_json::from_value(config.clone()).expect("a Llama config");
        Weights {
            tensors,
            cfg: cfg.into_config(false),
            dtype,
            device: device.clone(),
        }
    }

    fn vb(&self) -> VarBuilder<'static> {
        VarBuilder::from_tensors(self.tensors.clone(), self.dtype, &self.device)
    }

    fn static_llama(&self, max_len: usize) -> StaticLlama {
        StaticLlama::load(self.vb(), &self.cfg, max_len).expect("static llama")
    }

    /// candle-transformers' model and a fresh cache of its own.
    fn reference(&self) -> Reference {
        Reference {
            model: llama::Llama::load(self.vb(), &self.cfg).expect("llama"),
            cache: llama::Cache::new(true, DType::F32, &self.cfg, &Device::Cpu).expect("cache"),
        }
    }
}

/// candle-transformers' Llama with its cat-based KV cache (on the CPU).
struct Reference {
    model: llama::Llama,
    cache: llama::Cache,
}

impl Reference {
    /// The last token's logits of `ids` at position `pos`.
    fn forward(&mut self, ids: &[u32], pos: usize) -> Vec<f32> {
        row(self
            .model
            .forward(&ids_tensor(ids), pos, &mut self.cache)
            .expect("reference forward"))
    }
}

fn ids_tensor(ids: &[u32]) -> Tensor {
    Tensor::new(ids, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap()
}

/// A `[1, vocab]` f32 tensor as a vector.
fn row(t: Tensor) -> Vec<f32> {
    t.squeeze(0).unwrap().to_vec1::<f32>().unwrap()
}

/// A `[batch, vocab]` f32 tensor (on any device) as a vector per sequence.
fn rows(t: &Tensor) -> Vec<Vec<f32>> {
    t.to_device(&Device::Cpu).unwrap().to_vec2::<f32>().unwrap()
}

fn prompt(len: usize) -> Vec<u32> {
    (0..len).map(|i| ((i * 31 + 7) % 256) as u32).collect()
}

/// The greedy choice.
fn argmax(logits: &[f32]) -> u32 {
    logits
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i as u32)
        .unwrap()
}

/// One decode step through the device inputs: `token` at `pos`, returning the fixed
/// output's logits.
fn step(model: &StaticLlama, token: u32, pos: usize) -> Vec<f32> {
    model.set_step_inputs(&[token], pos).expect("step inputs");
    model.step().expect("step");
    row(model.step_logits().clone())
}

/// A 7-token prompt, then `steps` greedy tokens, through both models from their current
/// caches (the static one's may hold rows of an earlier, longer sequence); panics unless
/// the tokens are identical and the logits within [`TOLERANCE`]. Returns the largest
/// relative difference of the prompt's logits and of the decode steps'.
fn prompt_then_greedy(
    model: &mut StaticLlama,
    reference: &mut Reference,
    prompt_ids: &[u32],
    steps: usize,
) -> (f32, f32) {
    let expected = reference.forward(prompt_ids, 0);
    let got = row(model.forward(&ids_tensor(prompt_ids), 0).expect("forward"));
    let prefill = relative_difference(&got, &expected);
    assert!(prefill < TOLERANCE, "prompt logits differ by {prefill}");

    let (mut expected, mut got) = (expected, got);
    let mut worst = 0f32;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for i in 0..steps {
        let pos = prompt_ids.len() + i;
        let (mine, reference_token) = (argmax(&got), argmax(&expected));
        ours.push(mine);
        theirs.push(reference_token);
        assert_eq!(mine, reference_token, "greedy tokens part at step {i}");
        expected = reference.forward(&[reference_token], pos);
        got = step(model, mine, pos);
        let diff = relative_difference(&got, &expected);
        assert!(diff < TOLERANCE, "step {i}: logits differ by {diff}");
        worst = worst.max(diff);
    }
    assert_eq!(ours, theirs);
    (prefill, worst)
}

/// Tests (1) and (2) on `config`: the 7-token prompt and 24 greedy steps.
fn check_prompt_and_decode(config: &Value, label: &str) {
    let weights = Weights::new(config);
    let mut model = weights.static_llama(64);
    let (prefill, decode) =
        prompt_then_greedy(&mut model, &mut weights.reference(), &prompt(7), 24);
    println!(
        "{label}: 7-token prompt, largest relative logit difference {prefill:.2e}; 24 greedy \
         steps, tokens identical, largest relative logit difference {decode:.2e}"
    );
}

#[test]
fn prompt_and_greedy_steps_match_candle_transformers() {
    check_prompt_and_decode(&tiny(), "tiny");
}

#[test]
fn prompt_and_greedy_steps_match_with_tied_embeddings_and_llama3_rope() {
    check_prompt_and_decode(&tiny_llama3(), "tiny, tied, llama3 rope");
}

#[test]
fn forward_refuses_positions_past_the_cache() {
    let weights = Weights::new(&tiny());
    let mut model = weights.static_llama(16);
    assert_eq!(model.max_len(), 16);
    let err = |model: &mut StaticLlama, len: usize, pos: usize| match model
        .forward(&ids_tensor(&prompt(len)), pos)
    {
        Ok(_) => panic!("{len} tokens at {pos} accepted by a cache of 16"),
        Err(e) => e.to_string(),
    };
    let message = err(&mut model, 17, 0);
    assert!(message.contains("16"), "{message}");
    err(&mut model, 4, 13);
    err(&mut model, 1, 16);
    // Exactly filling the cache is fine.
    model.forward(&ids_tensor(&prompt(3)), 13).expect("3 at 13");
    // Bad ids and batches are errors too.
    assert!(model.forward(&ids_tensor(&[258]), 0).is_err());
    let batch = Tensor::zeros((2, 3), DType::U32, &Device::Cpu).unwrap();
    assert!(model.forward(&batch, 0).is_err());
    // A cache longer than the model's context, or empty, is refused at load.
    assert!(StaticLlama::load(weights.vb(), &weights.cfg, 8193).is_err());
    assert!(StaticLlama::load(weights.vb(), &weights.cfg, 0).is_err());
}

#[test]
fn step_at_the_last_position_works_and_inputs_past_it_are_refused() {
    let weights = Weights::new(&tiny());
    let max_len = 16;
    let mut model = weights.static_llama(max_len);
    let mut reference = weights.reference();
    let ids = prompt(max_len);
    let (head, last) = ids.split_at(max_len - 1);
    reference.forward(head, 0);
    model.forward(&ids_tensor(head), 0).expect("forward");
    let expected = reference.forward(last, max_len - 1);
    let got = step(&model, last[0], max_len - 1);
    let diff = relative_difference(&got, &expected);
    println!(
        "step at position {}: relative difference {diff:.2e}",
        max_len - 1
    );
    assert!(diff < TOLERANCE, "{diff}");

    assert!(model.set_step_inputs(&[1], max_len).is_err());
    assert!(model.set_step_inputs(&[1], max_len + 100).is_err());
    assert!(model.set_step_inputs(&[258], 0).is_err());
    assert!(model.set_step_inputs(&[1, 2], 0).is_err());
    // A refused input leaves the last accepted one: the step still gives the same logits.
    model.step().expect("step");
    assert_eq!(row(model.step_logits().clone()), got);
}

#[test]
fn a_prompt_through_steps_alone_gives_the_forward_logits() {
    // The step from an empty cache, one prompt token at a time, against one forward.
    let weights = Weights::new(&tiny());
    let ids = prompt(9);
    let expected = row(weights
        .static_llama(32)
        .forward(&ids_tensor(&ids), 0)
        .expect("forward"));
    let model = weights.static_llama(32);
    let mut got = Vec::new();
    for (pos, &id) in ids.iter().enumerate() {
        got = step(&model, id, pos);
    }
    let diff = relative_difference(&got, &expected);
    println!("9 prompt tokens through step vs one forward: relative difference {diff:.2e}");
    assert!(diff < TOLERANCE, "{diff}");
}

#[test]
fn a_new_sequence_over_a_longer_old_one_ignores_the_stale_rows() {
    // 30 positions filled, then a fresh 7-token prompt and 12 steps in the same caches:
    // the rows after the new sequence hold the old one's keys and values, which the
    // forward never reads and the step's mask must hide.
    let weights = Weights::new(&tiny_llama3());
    let mut model = weights.static_llama(40);
    prompt_then_greedy(&mut model, &mut weights.reference(), &prompt(10), 20);
    let other: Vec<u32> = (0..7).map(|i| (i * 17 + 100) % 256).collect();
    let (prefill, decode) = prompt_then_greedy(&mut model, &mut weights.reference(), &other, 12);
    println!("reused caches: prompt {prefill:.2e}, 12 greedy steps {decode:.2e}, tokens identical");
}

/// The prompt and 64 teacher-forced steps (the CPU's greedy tokens) of the static model on
/// HIP in `dtype` against the same model in f32 on the CPU; returns the largest relative
/// logit difference.
fn hip_against_the_cpu(dtype: DType) -> f32 {
    let hip = candle_hip::extension::hip_device(0).expect("HIP device 0");
    let config = tiny_llama3();
    let mut cpu = Weights::new(&config).static_llama(80);
    let mut gpu = Weights::of(&config, dtype, &hip).static_llama(80);
    let ids = prompt(7);
    let on = |device: &Device| {
        Tensor::new(ids.as_slice(), device)
            .unwrap()
            .unsqueeze(0)
            .unwrap()
    };
    let mut expected = row(cpu.forward(&on(&Device::Cpu), 0).expect("CPU forward"));
    let got = row(gpu
        .forward(&on(&hip), 0)
        .expect("HIP forward")
        .to_device(&Device::Cpu)
        .unwrap());
    let mut worst = relative_difference(&got, &expected);
    let mut same_choice = usize::from(argmax(&got) == argmax(&expected));
    for i in 0..64 {
        let (token, pos) = (argmax(&expected), ids.len() + i);
        expected = step(&cpu, token, pos);
        gpu.set_step_inputs(&[token], pos).expect("HIP step inputs");
        gpu.step().expect("HIP step");
        let got = row(gpu.step_logits().to_device(&Device::Cpu).unwrap());
        worst = worst.max(relative_difference(&got, &expected));
        same_choice += usize::from(argmax(&got) == argmax(&expected));
    }
    println!(
        "HIP {dtype:?} vs CPU f32, 65 teacher-forced steps: largest relative logit difference \
         {worst:.2e}, same greedy choice {same_choice} of 65"
    );
    worst
}

#[test]
#[ignore = "needs a HIP device"]
fn hip_steps_match_the_cpu() {
    let worst = hip_against_the_cpu(DType::F32);
    assert!(worst < TOLERANCE, "{worst}");
}

/// f16 and bf16 take candle-hip's fused attention (the prompt's kernel and the step's
/// flash-decoding over the device length). Against f32: bf16 keeps 8 bits of mantissa,
/// so each rounding moves a value by up to 2^-9 relative, and the logits carry many of them
/// (weights, activations, the caches); 5e-2 of the largest logit bounds that with margin,
/// the bound of generation.rs's bf16 check. A step that read a stale or unwritten cache
/// row, or missed the current one, moves logits by far more.
#[test]
#[ignore = "needs a HIP device"]
fn hip_half_precision_steps_take_the_fused_attention_and_match_the_cpu() {
    for dtype in [DType::F16, DType::BF16] {
        let worst = hip_against_the_cpu(dtype);
        assert!(worst < 5e-2, "{dtype:?}: {worst}");
    }
}

/// A batch's logits, a row per sequence.
type Logits = Vec<Vec<f32>>;

/// The sequences of the batch tests: three 7-token prompts.
fn batch_prompts() -> Vec<Vec<u32>> {
    (0..3)
        .map(|b| {
            (0..7)
                .map(|i| ((i * 31 + 7 + 50 * b) % 256) as u32)
                .collect()
        })
        .collect()
}

/// The largest relative logit difference of a batch's rows against each sequence's
/// logits, and how many of the rows' greedy choices are the same.
fn compare_rows(got: &[Vec<f32>], expected: &[Vec<f32>]) -> (f32, usize) {
    assert_eq!(got.len(), expected.len(), "one row per sequence");
    got.iter()
        .zip(expected)
        .fold((0f32, 0), |(worst, same), (g, e)| {
            (
                worst.max(relative_difference(g, e)),
                same + usize::from(argmax(g) == argmax(e)),
            )
        })
}

/// [`batch_prompts`] as one batch through `forward` (`[3, 7]` on `device`), then `steps`
/// teacher-forced steps of all three (each sequence's token its reference's greedy choice)
/// through `step`, against candle-transformers' model on the CPU running each sequence
/// alone (its own cache); returns the largest relative logit difference and how many of
/// the batch's greedy choices (of 3 per pass) matched the references'.
fn batch_against_each_alone(
    forward: &mut dyn FnMut(&Tensor, usize) -> Logits,
    step: &mut dyn FnMut(&[u32], usize) -> Logits,
    cpu: &Weights,
    device: &Device,
    steps: usize,
) -> (f32, usize) {
    let prompts = batch_prompts();
    let mut references: Vec<Reference> = prompts.iter().map(|_| cpu.reference()).collect();
    let ids = Tensor::from_vec(prompts.concat(), (prompts.len(), 7), device).unwrap();
    let mut expected: Vec<Vec<f32>> = references
        .iter_mut()
        .zip(&prompts)
        .map(|(r, p)| r.forward(p, 0))
        .collect();
    let (mut worst, mut same) = compare_rows(&forward(&ids, 0), &expected);
    for i in 0..steps {
        let pos = 7 + i;
        let tokens: Vec<u32> = expected.iter().map(|l| argmax(l)).collect();
        expected = references
            .iter_mut()
            .zip(&tokens)
            .map(|(r, &t)| r.forward(&[t], pos))
            .collect();
        let (w, s) = compare_rows(&step(&tokens, pos), &expected);
        worst = worst.max(w);
        same += s;
    }
    (worst, same)
}

/// `model` (of [`tiny_llama3`]) decoding [`batch_prompts`] as one batch through its
/// `forward` and `step`, against each sequence alone on the CPU (see
/// [`batch_against_each_alone`]).
fn static_batch_against_each_alone(model: &mut StaticLlama, steps: usize) -> (f32, usize) {
    let cpu = Weights::new(&tiny_llama3());
    let device = model.device().clone();
    model.set_batch(3).expect("a batch of 3");
    let model = std::cell::RefCell::new(model);
    batch_against_each_alone(
        &mut |ids, pos| rows(&model.borrow_mut().forward(ids, pos).expect("batch forward")),
        &mut |tokens, pos| {
            let model = model.borrow();
            model.set_step_inputs(tokens, pos).expect("batch inputs");
            model.step().expect("batch step");
            rows(model.step_logits())
        },
        &cpu,
        &device,
        steps,
    )
}

#[test]
fn a_batch_of_sequences_matches_each_sequence_alone() {
    let mut model = Weights::new(&tiny_llama3()).static_llama(48);
    let (worst, same) = static_batch_against_each_alone(&mut model, 16);
    println!(
        "3 sequences as one batch, prompt and 16 steps: largest relative logit difference \
         {worst:.2e}, same greedy choice {same} of 51"
    );
    assert!(worst < TOLERANCE, "{worst}");
    assert_eq!(same, 51);
    // The batch's inputs are checked: one token per sequence, the model's batch.
    assert!(model.set_step_inputs(&[1], 7).is_err());
    assert!(model.set_step_inputs(&[1, 2, 258], 7).is_err());
    assert!(model.forward(&ids_tensor(&prompt(3)), 0).is_err());
    assert!(model.set_batch(0).is_err());
    // Back to one sequence, the step still matches candle-transformers.
    model.set_batch(1).expect("batch of 1");
    prompt_then_greedy(
        &mut model,
        &mut Weights::new(&tiny_llama3()).reference(),
        &prompt(5),
        4,
    );
}

/// A batch on HIP in `dtype` against each sequence alone on the CPU, through the static
/// model's step and through the graph decoder (captured after its first, eager step, replayed
/// after); returns the largest relative logit difference of the two.
fn hip_batch_against_each_alone(dtype: DType) -> f32 {
    let hip = candle_hip::extension::hip_device(0).expect("HIP device 0");
    let weights = Weights::of(&tiny_llama3(), dtype, &hip);
    let (direct, same) = static_batch_against_each_alone(&mut weights.static_llama(48), 16);
    println!("HIP {dtype:?} batch of 3, step: {direct:.2e}, same greedy choice {same} of 51");
    let decoder = std::cell::RefCell::new(GraphDecoder::new(weights.static_llama(48)));
    let cpu = Weights::new(&tiny_llama3());
    let (graph, same) = batch_against_each_alone(
        &mut |ids, pos| {
            rows(
                &decoder
                    .borrow_mut()
                    .forward(ids, pos)
                    .expect("graph forward"),
            )
        },
        &mut |tokens, pos| {
            let ids = Tensor::from_vec(tokens.to_vec(), (tokens.len(), 1), &hip).unwrap();
            rows(&decoder.borrow_mut().forward(&ids, pos).expect("graph step"))
        },
        &cpu,
        &hip,
        16,
    );
    let nodes = decoder.borrow().graph_nodes();
    println!(
        "HIP {dtype:?} batch of 3, graph ({nodes:?} nodes): {graph:.2e}, same greedy choice \
         {same} of 51"
    );
    assert!(nodes.is_some(), "the batch's step was captured");
    direct.max(graph)
}

#[test]
#[ignore = "needs a HIP device"]
fn hip_batch_steps_and_graph_replay_match_each_sequence_alone() {
    let worst = hip_batch_against_each_alone(DType::F32);
    assert!(worst < TOLERANCE, "f32: {worst}");
    // The bound of the half-precision test above.
    let worst = hip_batch_against_each_alone(DType::BF16);
    assert!(worst < 5e-2, "bf16: {worst}");
}
