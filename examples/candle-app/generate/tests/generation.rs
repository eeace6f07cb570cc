//! The generation program's library on the CPU (determinism, the KV cache against a full
//! forward, model folders, bad input) and, `#[ignore]`d, HIP against the CPU: run with
//! `--include-ignored` on a GPU machine.

use std::path::{Path, PathBuf};

use candle_app_generate::generation::{self, Settings};
use candle_app_generate::model::{Folder, Model, Source};
use candle_app_generate::shapes::Shape;
use candle_app_generate::weights;
use candle_core::{DType, Device, Tensor};

mod common;

use common::{
    divergence, greedy, relative_difference, same_prefix, teacher_forced, worst_step_difference,
};

const SEED: u64 = 20_261_123;

fn tiny(dtype: DType, device: &Device) -> Model {
    Model::load(&Source::Shape(Shape::Tiny, SEED), dtype, device).expect("tiny model")
}

fn hip() -> Device {
    candle_hip::extension::hip_device(0).expect("HIP device 0")
}

/// A fresh temporary folder.
fn temp_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("generate-test-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn prompt(len: usize) -> Vec<u32> {
    (0..len).map(|i| ((i * 31 + 7) % 256) as u32).collect()
}

/// Smallest gap between the two largest logits over the steps.
fn smallest_margin(steps: &[Vec<f32>]) -> f32 {
    steps
        .iter()
        .map(|row| {
            let mut sorted = row.clone();
            sorted.sort_by(|a, b| b.total_cmp(a));
            sorted[0] - sorted[1]
        })
        .fold(f32::INFINITY, f32::min)
}

/// The last-token logits after prefilling `len` tokens and decoding 3 more one at a time.
fn cached(model: &mut Model, len: usize) -> Vec<f32> {
    let dev = model.device().clone();
    let ids = prompt(len + 3);
    model.reset().unwrap();
    let mut logits = model
        .forward(
            &Tensor::new(&ids[..len], &dev)
                .unwrap()
                .unsqueeze(0)
                .unwrap(),
            0,
        )
        .unwrap();
    for (i, &id) in ids[len..].iter().enumerate() {
        let input = Tensor::new(&[id], &dev).unwrap().unsqueeze(0).unwrap();
        logits = model.forward(&input, len + i).unwrap();
    }
    model.reset().unwrap();
    logits.squeeze(0).unwrap().to_vec1::<f32>().unwrap()
}

/// [`cached`], and the last-token logits of one forward of the whole sequence without a
/// cache.
fn cached_and_full(model: &mut Model, len: usize) -> (Vec<f32>, Vec<f32>) {
    let cached = cached(model, len);
    let dev = model.device().clone();
    let ids = prompt(len + 3);
    let full = model
        .forward(
            &Tensor::new(ids.as_slice(), &dev)
                .unwrap()
                .unsqueeze(0)
                .unwrap(),
            0,
        )
        .unwrap();
    model.reset().unwrap();
    (cached, full.squeeze(0).unwrap().to_vec1::<f32>().unwrap())
}

fn check_kv_cache(device: &Device, lengths: &[usize]) {
    let mut model = tiny(DType::F32, device);
    for &len in lengths {
        let (cached, full) = cached_and_full(&mut model, len);
        let rel = relative_difference(&cached, &full);
        println!("kv cache, prompt {len}: relative difference {rel:.2e}");
        assert!(rel < 1e-4, "prompt {len}: {rel}");
    }
}

#[test]
fn the_embedded_default_is_deterministic() {
    let mut a = tiny(DType::F32, &Device::Cpu);
    let mut b = tiny(DType::F32, &Device::Cpu);
    let p = prompt(5);
    let x = generation::generate(&mut a, &p, &greedy(16), false, |_| Ok(())).unwrap();
    let y = generation::generate(&mut b, &p, &greedy(16), false, |_| Ok(())).unwrap();
    assert_eq!(x.generated.len(), 16);
    assert_eq!(x.generated, y.generated);
    // The same model again after a reset gives the same tokens.
    let z = generation::generate(&mut a, &p, &greedy(16), false, |_| Ok(())).unwrap();
    assert_eq!(x.generated, z.generated);
}

#[test]
fn sampling_settings_out_of_range_name_their_option() {
    let error = |settings: Settings| settings.check().unwrap_err().to_string();
    let t = |temperature| Settings {
        temperature: Some(temperature),
        ..Settings::default()
    };
    assert!(Settings::default().check().is_ok());
    assert!(
        error(Settings {
            max_tokens: 0,
            ..Settings::default()
        })
        .contains("--max-tokens 0")
    );
    assert!(t(0.8).check().is_ok());
    assert!(error(t(-1.0)).contains("--temperature"));
    assert!(error(t(f64::NAN)).contains("--temperature"));
    for p in [0.0, 1.5, f64::NAN] {
        let e = error(Settings {
            top_p: Some(p),
            ..t(0.8)
        });
        assert!(e.contains("--top-p"), "{e}");
    }
    assert!(
        error(Settings {
            top_k: Some(0),
            ..t(0.8)
        })
        .contains("--top-k 0")
    );
    assert!(
        error(Settings {
            repeat_penalty: 0.0,
            ..Settings::default()
        })
        .contains("--repeat-penalty")
    );
    // top-k without a temperature would be ignored by greedy decoding.
    assert!(
        error(Settings {
            top_k: Some(5),
            ..Settings::default()
        })
        .contains("--temperature")
    );
}

#[test]
fn seeded_sampling_is_reproducible_and_differs_from_greedy() {
    let mut model = tiny(DType::F32, &Device::Cpu);
    let sampled = Settings {
        temperature: Some(1.5),
        top_k: Some(50),
        top_p: Some(0.95),
        repeat_penalty: 1.1,
        seed: 42,
        ..greedy(24)
    };
    let p = prompt(4);
    let run = |model: &mut Model, s: &Settings| {
        generation::generate(model, &p, s, false, |_| Ok(()))
            .unwrap()
            .generated
    };
    let first = run(&mut model, &sampled);
    assert_eq!(first, run(&mut model, &sampled));
    assert_ne!(first, run(&mut model, &greedy(24)));
}

#[test]
fn the_kv_cache_matches_a_full_forward_on_the_cpu() {
    check_kv_cache(&Device::Cpu, &[1, 7, 512]);
}

#[test]
fn a_written_model_loads_with_the_in_memory_weights() {
    let dir = temp_dir("write");
    weights::write_model(&Shape::Tiny.config(), SEED, DType::F32, &dir).unwrap();
    let mut from_disk = Model::load(&Source::Dir(dir.clone()), DType::F32, &Device::Cpu).unwrap();
    let mut in_memory = tiny(DType::F32, &Device::Cpu);
    let p = prompt(9);
    let keep = |m: &mut Model| generation::generate(m, &p, &greedy(4), true, |_| Ok(())).unwrap();
    let (a, b) = (keep(&mut from_disk), keep(&mut in_memory));
    assert_eq!(a.generated, b.generated);
    assert_eq!(a.logits, b.logits);
    let _ = std::fs::remove_dir_all(dir);
}

fn load_error(dir: &Path) -> String {
    match Model::load(&Source::Dir(dir.to_path_buf()), DType::F32, &Device::Cpu) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_model_folders_are_clear_errors() {
    let dir = temp_dir("bad");
    assert!(load_error(&dir.join("absent")).contains("does not exist"));
    assert!(load_error(&dir).contains("config.json"));

    let mut config = Shape::Tiny.config();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    assert!(load_error(&dir).contains("neither model.safetensors"));

    let index = r#"{"weight_map": {"a": "model-00001-of-00002.safetensors",
                                    "b": "model-00002-of-00002.safetensors"}}"#;
    std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
    std::fs::write(dir.join("model-00001-of-00002.safetensors"), b"").unwrap();
    let partial = load_error(&dir);
    assert!(
        partial.contains("model-00002-of-00002.safetensors, which is missing"),
        "{partial}"
    );

    // Weights that the configuration does not describe, and heads that do not divide:
    // errors naming them (candle-transformers' Llama loader would panic on them).
    std::fs::remove_file(dir.join("model.safetensors.index.json")).unwrap();
    weights::write_model(&config, SEED, DType::F32, &dir).unwrap();
    let layers = config["num_hidden_layers"].as_u64().unwrap();
    let mut deeper = config.clone();
    deeper["num_hidden_layers"] = serde_json::json!(layers + 1);
    std::fs::write(dir.join("config.json"), deeper.to_string()).unwrap();
    let missing = load_error(&dir);
    assert!(
        missing.contains(&format!("no model.layers.{layers}.self_attn.q_proj.weight")),
        "{missing}"
    );
    let mut wider = config.clone();
    wider["intermediate_size"] = serde_json::json!(8);
    std::fs::write(dir.join("config.json"), wider.to_string()).unwrap();
    let shape = load_error(&dir);
    assert!(
        shape.contains("model.layers.0.mlp.gate_proj.weight as"),
        "{shape}"
    );
    let mut headless = config.clone();
    headless["num_attention_heads"] = serde_json::json!(0);
    std::fs::write(dir.join("config.json"), headless.to_string()).unwrap();
    assert!(load_error(&dir).contains("num_attention_heads (0)"));

    config["architectures"] = serde_json::json!(["GPT2LMHeadModel"]);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    assert!(load_error(&dir).contains("unknown architecture `GPT2LMHeadModel`"));

    std::fs::write(dir.join("config.json"), "{ not json").unwrap();
    assert!(load_error(&dir).contains("config.json"));
    let _ = std::fs::remove_dir_all(dir);
    assert!(Folder::open(Path::new("/nonexistent/model")).is_err());
}

#[test]
fn logits_that_are_not_finite_are_an_error() {
    // A RoPE base of 0 turns every attention score into NaN.
    let dir = temp_dir("nan");
    let mut config = Shape::Tiny.config();
    weights::write_model(&config, SEED, DType::F32, &dir).unwrap();
    config["rope_theta"] = serde_json::json!(0.0);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let mut model = Model::load(&Source::Dir(dir.clone()), DType::F32, &Device::Cpu).unwrap();
    let err = generation::generate(&mut model, &prompt(5), &greedy(3), false, |_| Ok(()))
        .expect_err("an error")
        .to_string();
    assert!(err.contains("not finite"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_prompt_that_fills_the_context_is_an_error_and_generation_stops_at_its_end() {
    // The tiny shape with a context of 64 positions.
    let dir = temp_dir("context");
    let mut config = Shape::Tiny.config();
    config["max_position_embeddings"] = 64.into();
    weights::write_model(&config, SEED, DType::F32, &dir).unwrap();
    let mut model = Model::load(&Source::Dir(dir.clone()), DType::F32, &Device::Cpu).unwrap();
    let err = generation::generate(&mut model, &prompt(64), &greedy(8), false, |_| Ok(()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("the model's context is 64"), "{err}");
    // Generation stops at the end of the context.
    let near_end =
        generation::generate(&mut model, &prompt(62), &greedy(8), false, |_| Ok(())).unwrap();
    assert_eq!(near_end.generated.len(), 2);
    let err = generation::generate(&mut model, &[], &greedy(8), false, |_| Ok(()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("empty"), "{err}");
    assert!(generation::bench(&mut model, 0, 4, 4, 1).is_err());
    drop(model);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
#[ignore = "needs a HIP device"]
fn hip_matches_the_cpu_for_64_greedy_steps() {
    let p = prompt(11);
    let settings = greedy(64);
    let run = |dtype, device: &Device| {
        let mut model = tiny(dtype, device);
        generation::generate(&mut model, &p, &settings, true, |_| Ok(())).unwrap()
    };
    let cpu = run(DType::F32, &Device::Cpu);
    let gpu = run(DType::F32, &hip());
    let worst = worst_step_difference(&gpu.logits, &cpu.logits);
    println!(
        "f32: 64 greedy steps, largest relative logit difference {worst:.2e}, smallest top-1 \
         margin {:.3}",
        smallest_margin(&cpu.logits)
    );
    assert_eq!(gpu.generated, cpu.generated);
    assert!(worst < 1e-4, "{worst}");

    // bf16 on HIP against f32 on the CPU, fed the same tokens: bf16 keeps 8 bits of
    // mantissa (relative rounding 2^-9 per value), and the logits pass through 4 layers of
    // bf16 matmuls and normalisations; 5e-2 of the largest logit bounds that with margin.
    let mut bf16 = tiny(DType::BF16, &hip());
    let mut f32_cpu = tiny(DType::F32, &Device::Cpu);
    let ids = [p.as_slice(), &cpu.generated[..16]].concat();
    let logits = |m: &mut Model| {
        m.reset().unwrap();
        let dev = m.device().clone();
        let t = Tensor::new(ids.as_slice(), &dev)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        m.forward(&t, 0)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    };
    let rel = relative_difference(&logits(&mut bf16), &logits(&mut f32_cpu));
    println!("bf16 on HIP vs f32 on the CPU: relative logit difference {rel:.2e}");
    assert!(rel < 5e-2, "{rel}");
}

#[test]
#[ignore = "needs a HIP device"]
fn the_kv_cache_matches_a_full_forward_on_hip() {
    check_kv_cache(&hip(), &[1, 7, 512, 4096]);
}

#[test]
#[ignore = "needs a HIP device"]
fn the_kv_cache_on_hip_matches_the_cpu() {
    let mut gpu = tiny(DType::F32, &hip());
    let mut cpu = tiny(DType::F32, &Device::Cpu);
    for len in [1, 7, 512, 4096] {
        let (g, c) = (cached(&mut gpu, len), cached(&mut cpu, len));
        let rel = relative_difference(&g, &c);
        println!("kv cache, prompt {len}: HIP vs CPU relative difference {rel:.2e}");
        assert!(rel < 1e-4, "prompt {len}: {rel}");
    }
}

/// The tiny model (head dim 32) on HIP with fused attention (candle-flash-attn's API on
/// candle-hip) against the same model without, in f16 and bf16. Fed the same tokens, the
/// logits of every step agree within 5e-2 of the largest (the fused kernels round the
/// probabilities to the input type before P·V, the unfused path computes attention in
/// f32; the bound of the bf16-against-f32 check above); free-running, the tokens are the
/// same until a step the unfused model chose by less than the two runs' difference there.
#[test]
#[ignore = "needs a HIP device"]
fn hip_flash_attention_keeps_the_greedy_tokens() {
    let device = hip();
    let source = Source::Shape(Shape::Tiny, SEED);
    let p = prompt(11);
    for dtype in [DType::F16, DType::BF16] {
        let load =
            |flash_attn| Model::load_with_flash_attn(&source, dtype, &device, flash_attn).unwrap();
        let (mut plain, mut fused) = (load(false), load(true));
        let reference =
            generation::generate(&mut plain, &p, &greedy(64), true, |_| Ok(())).unwrap();
        let free = generation::generate(&mut fused, &p, &greedy(64), false, |_| Ok(())).unwrap();
        let same_run = same_prefix(&free.generated, &reference.generated);
        let forced = teacher_forced(&mut fused, &p, &reference.generated);
        let worst = worst_step_difference(&forced, &reference.logits);
        let label = format!("{dtype:?}");
        let divergence = divergence(&reference.logits, &forced, same_run, &label);
        println!(
            "flash attention, tiny {label}: 64 greedy steps, the first {same_run} tokens the \
             unfused model's, then {divergence}; fed its tokens, largest relative logit \
             difference {worst:.2e}"
        );
        assert!(worst < 5e-2, "{label}: {worst}");
    }
}

/// Graph decoding in f16 and bf16 on HIP, where the static model's attention is candle-hip's
/// fused kernels (the prompt's, and flash-decoding over the cache length held on the
/// device in the captured step), fed the unfused eager model's greedy tokens: every step's
/// logits within 5e-2 of the largest, the bound of the flash-attention check above (the
/// fused kernels round the probabilities to the input type before P·V).
#[test]
#[ignore = "needs a HIP device"]
fn hip_graph_decoding_in_half_precision_matches_the_eager_model() {
    let device = hip();
    let source = Source::Shape(Shape::Tiny, SEED);
    let p = prompt(11);
    for dtype in [DType::F16, DType::BF16] {
        let mut plain = Model::load(&source, dtype, &device).unwrap();
        let reference =
            generation::generate(&mut plain, &p, &greedy(64), true, |_| Ok(())).unwrap();
        let mut graph = Model::load_graph_decode(&source, dtype, &device).unwrap();
        let forced = teacher_forced(&mut graph, &p, &reference.generated);
        let worst = worst_step_difference(&forced, &reference.logits);
        println!(
            "graph decoding, tiny {dtype:?}: fed the eager model's 64 greedy tokens, largest \
             relative logit difference {worst:.2e}, graph of {:?} nodes",
            graph.graph_nodes()
        );
        assert!(graph.graph_nodes().is_some_and(|n| n > 0));
        assert!(worst < 5e-2, "{dtype:?}: {worst}");
    }
}

/// Graph decoding (a static KV cache, the step captured once and replayed) of the tiny
/// model against candle-transformers' Llama on the same weights, f32, 64 greedy steps;
/// returns the captured step's node count (none on the CPU, where the step runs eagerly).
fn check_graph_decoding(device: &Device) -> Option<usize> {
    let p = prompt(11);
    let settings = greedy(64);
    let mut reference = tiny(DType::F32, &Device::Cpu);
    let want = generation::generate(&mut reference, &p, &settings, true, |_| Ok(())).unwrap();
    let source = Source::Shape(Shape::Tiny, SEED);
    let mut model = Model::load_graph_decode(&source, DType::F32, device).unwrap();
    // Twice: the second run reuses the cache and, on HIP, the captured graph.
    for run in 0..2 {
        let got = generation::generate(&mut model, &p, &settings, true, |_| Ok(())).unwrap();
        let worst = worst_step_difference(&got.logits, &want.logits);
        println!(
            "graph decoding on {:?}, run {run}: {} steps, largest relative logit difference \
             {worst:.2e}, graph of {:?} nodes",
            device.location(),
            got.generated.len(),
            model.graph_nodes()
        );
        assert_eq!(got.generated, want.generated);
        assert!(worst < 1e-4, "{worst}");
    }
    // Greedy without the logits kept: each token is chosen on the device (on HIP inside the
    // captured step, read one step behind); twice, the second replaying that step's graph.
    for run in 0..2 {
        let got = generation::generate(&mut model, &p, &settings, false, |_| Ok(())).unwrap();
        assert_eq!(got.generated, want.generated, "device-greedy run {run}");
    }
    // Stopped after 5 tokens (the step after the stop is left computed), then in full: the
    // same tokens. Steps past the cache are refused before any runs.
    model.reset().unwrap();
    let ids = Tensor::new(p.as_slice(), device).unwrap().unsqueeze(0);
    model.forward(&ids.unwrap(), 0).unwrap();
    let mut first = Vec::new();
    let first_token = want.generated[0];
    model
        .decode_greedy(first_token, p.len(), 20, |t| {
            first.push(t);
            Ok(first.len() < 5)
        })
        .unwrap();
    assert_eq!(first, want.generated[1..6]);
    let err = model
        .decode_greedy(first_token, 250, 7, |_| Ok(true))
        .unwrap_err()
        .to_string();
    assert!(err.contains("pass the static KV cache of 256"), "{err}");
    let got = generation::generate(&mut model, &p, &settings, false, |_| Ok(())).unwrap();
    assert_eq!(got.generated, want.generated, "after a stopped decode");
    model.graph_nodes()
}

#[test]
fn graph_decoding_matches_the_reference_on_the_cpu() {
    assert_eq!(check_graph_decoding(&Device::Cpu), None);
}

#[test]
#[ignore = "needs a HIP device"]
fn hip_graph_decoding_matches_the_cpu_reference() {
    let nodes = check_graph_decoding(&hip());
    assert!(nodes.is_some_and(|n| n > 0), "{nodes:?}");
}
