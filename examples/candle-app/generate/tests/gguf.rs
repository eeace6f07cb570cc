//! Quantized GGUF models: seeded models written by `gguf::write` in every scheme, run through
//! candle-transformers' quantized Llama on the CPU (and, `#[ignore]`d, on HIP against the
//! CPU), and the errors for bad files.
//!
//! The CPU reference is candle's portable quantized arithmetic: candle-core 0.11.1 also has
//! an AVX-512 path for Q8_0 weights that rounds the activations per 256 values instead of 32
//! (`MISTRALRS_FORCE_AVX2=1` turns it off; every test here sets it before any quantized
//! product runs, so the reference does not depend on the host's CPU).

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use candle_app_generate::generation;
use candle_app_generate::gguf::{self, SCHEMES, Scheme};
use candle_app_generate::model::{Model, Source};
use candle_app_generate::shapes::Shape;
use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor};

mod common;

use common::{
    divergence, greedy, relative_difference, same_prefix, teacher_forced, worst_step_difference,
};

const SEED: u64 = 20_261_123;

fn temp_file(label: &str) -> PathBuf {
    std::env::temp_dir().join(format!("generate-gguf-{label}-{}.gguf", std::process::id()))
}

/// The tiny shape written as a GGUF file in `scheme`.
fn tiny_gguf(name: &str, scheme: Scheme) -> PathBuf {
    portable_cpu_reference();
    let path = temp_file(name);
    gguf::write(Shape::Tiny, SEED, scheme, &path).expect("write gguf");
    path
}

/// Pins the CPU reference to candle's portable quantized arithmetic (see the module docs).
fn portable_cpu_reference() {
    static PIN: std::sync::Once = std::sync::Once::new();
    // SAFETY: set once, before any test of this file runs a quantized product (each calls
    // this first), and nothing in these tests reads the environment concurrently.
    PIN.call_once(|| unsafe { std::env::set_var("MISTRALRS_FORCE_AVX2", "1") });
}

fn load(path: &Path, device: &Device) -> Model {
    Model::load(&Source::Gguf(path.to_path_buf()), DType::F32, device).expect("load gguf")
}

fn prompt() -> Vec<u32> {
    (0..11).map(|i| ((i * 31 + 7) % 256) as u32).collect()
}

#[test]
fn every_scheme_writes_a_file_that_generates_on_the_cpu() {
    for (name, scheme) in SCHEMES {
        let path = tiny_gguf(name, scheme);
        let header = gguf::Header::read(&path).unwrap();
        assert_eq!(header.arch, "llama");
        let mut model = load(&path, &Device::Cpu);
        assert_eq!(model.vocab, 258);
        let out =
            generation::generate(&mut model, &prompt(), &greedy(8), false, |_| Ok(())).unwrap();
        assert_eq!(out.generated.len(), 8, "{name}");
        println!("{name}: {} -> {:?}", header.types, out.generated);
        // The matrices are quantized as the scheme says (the tiny shape's 688-wide
        // feed-forward rows are no whole number of blocks: f16).
        let expect = match name {
            "q4_0" => "Q4_0",
            "q8_0" => "Q8_0",
            "q6k" => "Q6K",
            _ => "Q4K",
        };
        assert!(header.types.contains(expect), "{name}: {}", header.types);
        if name == "q4km" {
            assert!(header.types.contains("Q6K"), "{}", header.types);
        }
        let _ = std::fs::remove_file(path);
    }
}

#[test]
fn bad_gguf_files_are_clear_errors() {
    let path = tiny_gguf(
        "bad",
        Scheme::Uniform(candle_core::quantized::GgmlDType::Q4_0),
    );
    let bytes = std::fs::read(&path).unwrap();
    // The same error through quantized_llama and through the graph model's own loader.
    let err = |p: &Path| {
        let source = Source::Gguf(p.to_path_buf());
        let eager = Model::load(&source, DType::F32, &Device::Cpu)
            .err()
            .expect("an error")
            .to_string();
        let graph = Model::load_graph_decode(&source, DType::F32, &Device::Cpu)
            .err()
            .expect("an error from the graph loader")
            .to_string();
        [eager, graph]
    };

    // Truncated inside the tensor before the last (quantized_llama takes the token
    // embedding when the last, `output.weight`, does not load): the error names the tensor
    // and its type.
    let cut = temp_file("truncated");
    let output_bytes = 258 * 256 / 32 * 18;
    std::fs::write(&cut, &bytes[..bytes.len() - output_bytes - 200]).unwrap();
    for e in err(&cut) {
        assert!(e.contains("tensor ") && e.contains("bytes"), "{e}");
    }
    // Truncated inside `output.weight`: an error, not the embeddings in its place.
    let cut_last = temp_file("truncated-last");
    std::fs::write(&cut_last, &bytes[..bytes.len() - 100]).unwrap();
    for e in err(&cut_last) {
        assert!(e.contains("truncated: tensor output.weight"), "{e}");
    }

    // An unknown block type code in the tensor table: the error names the tensor.
    let mut file = std::fs::File::open(&path).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    let (name, _) = content.tensor_infos.iter().next().unwrap();
    let mut header = vec![0u8; content.tensor_data_offset as usize];
    file.seek(SeekFrom::Start(0)).unwrap();
    file.read_exact(&mut header).unwrap();
    // The tensor's entry: its name, then rank, dims, the type (u32) and the offset (u64).
    let at = header
        .windows(name.len())
        .position(|w| w == name.as_bytes())
        .unwrap();
    let rank_at = at + name.len();
    let rank = u32::from_le_bytes(header[rank_at..rank_at + 4].try_into().unwrap()) as usize;
    let type_at = rank_at + 4 + 8 * rank;
    let mut odd = bytes.clone();
    odd[type_at..type_at + 4].copy_from_slice(&77u32.to_le_bytes());
    let bad_type = temp_file("badtype");
    std::fs::write(&bad_type, &odd).unwrap();
    for e in err(&bad_type) {
        assert!(e.contains(name.as_str()), "{e}");
    }

    // Not a GGUF file; no tokenizer next to a file that needs one.
    let junk = temp_file("junk");
    std::fs::File::create(&junk)
        .unwrap()
        .write_all(b"not a gguf file at all")
        .unwrap();
    let missing = temp_file("missing");
    for (file, what) in [(&junk, "GGUF"), (&missing, "missing")] {
        for e in err(file) {
            assert!(e.contains(what), "{e}");
        }
    }

    for p in [path, cut, cut_last, bad_type, junk] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn hip_matches_the_cpu_on_the_same_gguf_for_64_greedy_steps() {
    let hip = candle_hip::extension::hip_device(0).expect("HIP device 0");
    for (name, scheme) in SCHEMES {
        let path = tiny_gguf(&format!("hip-{name}"), scheme);
        let mut cpu_model = load(&path, &Device::Cpu);
        let mut hip_model = load(&path, &hip);
        let cpu =
            generation::generate(&mut cpu_model, &prompt(), &greedy(64), true, |_| Ok(())).unwrap();
        let free = generation::generate(&mut hip_model, &prompt(), &greedy(64), false, |_| Ok(()))
            .unwrap();
        let same_run = same_prefix(&free.generated, &cpu.generated);
        // Fed the CPU's tokens, step by step, the logits of every step. Both round the
        // activations to 8 bits the same way and take the same integer products, but the
        // float sums before a rounding differ in order: a last-bit difference moves an
        // activation that lies on a rounding boundary by one 8-bit step (1/127 of its block's
        // largest value), which shows in the logits as differences of that order; 5e-2 of the
        // largest logit bounds them. Free-running, the tokens must be the CPU's until a step
        // whose choice the CPU made by less than the two devices' difference there.
        let forced = teacher_forced(&mut hip_model, &prompt(), &cpu.generated);
        let worst = worst_step_difference(&forced, &cpu.logits);
        let divergence = divergence(&cpu.logits, &forced, same_run, name);
        println!(
            "{name}: 64 greedy steps, the first {same_run} tokens the CPU's, then {divergence}; \
             fed the CPU's tokens, largest relative logit difference {worst:.2e}"
        );
        assert!(worst < 5e-2, "{name}: {worst}");
        let _ = std::fs::remove_file(path);
    }
}

/// The tiny shape's GGUF file in each of `schemes`, decoded greedily through a captured
/// graph (`Model::load_graph_decode`, f32 on `device`) against candle-transformers'
/// `quantized_llama` on the CPU: the largest relative logit difference of any step, fed
/// the CPU's tokens (printed with how many free-running tokens are the CPU's). With
/// `near_ties`, also checks that the free-running tokens leave the CPU's only at a near
/// tie (see `common::divergence`).
fn graph_against_quantized_llama(device: &Device, schemes: &[&str], near_ties: bool) -> Vec<f32> {
    let mut results = Vec::new();
    for name in schemes {
        let scheme = Scheme::from_name(name).unwrap();
        let path = tiny_gguf(&format!("graph-{name}-{:?}", device.location()), scheme);
        let mut cpu_model = load(&path, &Device::Cpu);
        let cpu =
            generation::generate(&mut cpu_model, &prompt(), &greedy(64), true, |_| Ok(())).unwrap();
        let source = Source::Gguf(path.clone());
        let mut graph = Model::load_graph_decode(&source, DType::F32, device).unwrap();
        assert!(
            graph.description.contains("graph decoding"),
            "{}",
            graph.description
        );
        let free =
            generation::generate(&mut graph, &prompt(), &greedy(64), false, |_| Ok(())).unwrap();
        let same_run = same_prefix(&free.generated, &cpu.generated);
        let forced = teacher_forced(&mut graph, &prompt(), &cpu.generated);
        let worst = worst_step_difference(&forced, &cpu.logits);
        let then = if near_ties {
            format!(
                ", then {}",
                divergence(&cpu.logits, &forced, same_run, name)
            )
        } else {
            String::new()
        };
        println!(
            "{name} graph on {:?}: the first {same_run} of 64 tokens the CPU's{then}; fed the \
             CPU's tokens, largest relative logit difference {worst:.2e}; graph of {:?} nodes",
            device.location(),
            graph.graph_nodes()
        );
        results.push(worst);
        let _ = std::fs::remove_file(path);
    }
    results
}

#[test]
fn graph_decoding_of_a_gguf_file_matches_quantized_llama_on_the_cpu() {
    // The same quantized products on the same device: only the attention's arithmetic
    // differs (grouped heads against repeated ones), at rounding level, which can still move
    // an activation that lies on an 8-bit rounding boundary by one step, as between HIP and
    // the CPU (see hip_matches_the_cpu_on_the_same_gguf_for_64_greedy_steps): the same bound,
    // and the CPU's tokens until a near tie. Which step that is depends on the host's CPU
    // (the dense products' kernels are picked by its instruction set): all 64 tokens on one
    // machine, 48 for q4k on another. q4km mixes block types within a layer's q, k and v; the
    // tiny shape's feed-forward rows (688 values) are no whole number of blocks, so its down
    // matrix is f16 (dense).
    for worst in graph_against_quantized_llama(&Device::Cpu, &["q4_0", "q4k", "q4km"], true) {
        assert!(worst < 5e-2, "{worst}");
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn hip_graph_decoding_of_a_gguf_file_matches_quantized_llama_on_the_cpu() {
    let hip = candle_hip::extension::hip_device(0).expect("HIP device 0");
    // Within the bound of hip_matches_the_cpu_on_the_same_gguf_for_64_greedy_steps: the
    // same products, whose float sums differ in order, move an activation on a rounding
    // boundary by one 8-bit step.
    for worst in graph_against_quantized_llama(&hip, &["q4_0", "q8_0", "q4k", "q6k", "q4km"], false)
    {
        assert!(worst < 5e-2, "{worst}");
    }
    // In bf16 the graph runs the fused attention: it generates, and a loaded graph model
    // reports its dtype.
    let path = tiny_gguf("graph-bf16", Scheme::from_name("q4k").unwrap());
    let source = Source::Gguf(path.clone());
    let mut model = Model::load_graph_decode(&source, DType::BF16, &hip).unwrap();
    assert_eq!(model.dtype, DType::BF16);
    let out = generation::generate(&mut model, &prompt(), &greedy(32), false, |_| Ok(())).unwrap();
    assert_eq!(out.generated.len(), 32);
    assert!(model.graph_nodes().is_some_and(|n| n > 0));
    let _ = std::fs::remove_file(path);
}

/// Three 7-token prompts of the tiny shape's GGUF file in scheme `name` as one batch of a
/// graph-decoding model (f32 on `device`; its step captured on HIP), the prompt and 12
/// teacher-forced steps, against candle-transformers' `quantized_llama` on the CPU running
/// each sequence alone: the largest relative logit difference, and how many of the batch's
/// greedy choices (3 a pass) are the CPU's.
fn gguf_batch_against_each_alone(device: &Device, name: &str) -> (f32, usize) {
    let scheme = Scheme::from_name(name).unwrap();
    let path = tiny_gguf(&format!("batch-{name}-{:?}", device.location()), scheme);
    let prompts: Vec<Vec<u32>> = (0..3)
        .map(|b| {
            (0..7)
                .map(|i| ((i * 31 + 7 + 50 * b) % 256) as u32)
                .collect()
        })
        .collect();
    let mut alone: Vec<Model> = prompts.iter().map(|_| load(&path, &Device::Cpu)).collect();
    let mut batch = Model::load_graph_decode(&Source::Gguf(path.clone()), DType::F32, device)
        .expect("graph model");
    let forward = |model: &mut Model, ids: Vec<u32>, rows: usize, pos: usize| {
        let cols = ids.len() / rows;
        let ids = Tensor::from_vec(ids, (rows, cols), model.device()).unwrap();
        let logits = model.forward(&ids, pos).expect("forward");
        logits
            .to_device(&Device::Cpu)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap()
    };
    let argmax = |row: &[f32]| {
        (0..row.len())
            .max_by(|&a, &b| row[a].total_cmp(&row[b]))
            .unwrap() as u32
    };
    let mut expected: Vec<Vec<f32>> = alone
        .iter_mut()
        .zip(&prompts)
        .map(|(m, p)| forward(m, p.clone(), 1, 0).remove(0))
        .collect();
    let mut got = forward(&mut batch, prompts.concat(), 3, 0);
    let (mut worst, mut same) = (0f32, 0);
    for step in 0..=12 {
        for (g, e) in got.iter().zip(&expected) {
            worst = worst.max(relative_difference(g, e));
            same += usize::from(argmax(g) == argmax(e));
        }
        if step == 12 {
            break;
        }
        let tokens: Vec<u32> = expected.iter().map(|e| argmax(e)).collect();
        let pos = 7 + step;
        expected = alone
            .iter_mut()
            .zip(&tokens)
            .map(|(m, &t)| forward(m, vec![t], 1, pos).remove(0))
            .collect();
        got = forward(&mut batch, tokens, 3, pos);
    }
    println!(
        "{name} batch of 3 on {:?}: largest relative logit difference {worst:.2e}, same greedy \
         choice {same} of 39, graph of {:?} nodes",
        device.location(),
        batch.graph_nodes()
    );
    let _ = std::fs::remove_file(path);
    (worst, same)
}

#[test]
fn a_batch_of_gguf_sequences_decodes_as_each_alone() {
    // The bound and the reason of graph_decoding_of_a_gguf_file_matches_quantized_llama_on_
    // the_cpu: the same products, the attention's arithmetic at rounding level.
    let (worst, _) = gguf_batch_against_each_alone(&Device::Cpu, "q4k");
    assert!(worst < 5e-2, "{worst}");
}

#[test]
#[ignore = "needs a HIP device"]
fn hip_a_batch_of_gguf_sequences_decodes_as_each_alone() {
    let hip = candle_hip::extension::hip_device(0).expect("HIP device 0");
    for name in ["q4_0", "q8_0", "q4k", "q4km"] {
        let (worst, _) = gguf_batch_against_each_alone(&hip, name);
        assert!(worst < 5e-2, "{name}: {worst}");
    }
}
