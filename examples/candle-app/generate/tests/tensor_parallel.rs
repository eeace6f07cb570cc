//! Tensor parallelism on CPU ranks: a Llama split over 1, 2 and 4 ranks against
//! candle-transformers' model on one device, bad splits, the host all-reduce, and failures
//! that must not hang; and, `#[ignore]`d, two HIP ranks against one HIP device and tensors
//! moving between two HIP devices (run with
//! `--include-ignored` on a machine with two GPUs).

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use candle_app_generate::generation::{self, Outcome};
use candle_app_generate::model::{Model, Source};
use candle_app_generate::shapes::Shape;
use candle_app_generate::tensor_parallel::{self, AllReduce, HostAllReduce};
use candle_app_generate::{AppResult, weights};
use candle_core::{DType, Device, Tensor};

mod common;

use common::{greedy, relative_difference};

const SEED: u64 = 20_261_123;

/// The embedded default (8 heads, 2 key/value heads, intermediate size 688).
fn tiny() -> Source {
    Source::Shape(Shape::Tiny, SEED)
}

fn prompt(len: usize) -> Vec<u32> {
    (0..len).map(|i| ((i * 31 + 7) % 256) as u32).collect()
}

/// `source` on one device in f32, candle-transformers' model.
fn single(source: &Source, device: &Device) -> Model {
    Model::load(source, DType::F32, device).expect("single-device model")
}

/// `source` in f32 over `devices`, one rank each.
fn split(source: &Source, devices: &[Device]) -> AppResult<Model> {
    Model::load_tensor_parallel(
        source,
        DType::F32,
        devices.len(),
        devices,
        tensor_parallel::collectives,
    )
}

fn load_error(source: &Source, tp: usize, devices: &[Device]) -> String {
    match Model::load_tensor_parallel(
        source,
        DType::F32,
        tp,
        devices,
        tensor_parallel::collectives,
    ) {
        Ok(_) => panic!("tp {tp} loaded"),
        Err(e) => e.to_string(),
    }
}

/// `steps` greedy tokens after an 11-token prompt, with every step's logits.
fn decode(model: &mut Model, steps: usize) -> Outcome {
    generation::generate(model, &prompt(11), &greedy(steps), true, |_| Ok(())).expect("generate")
}

/// Runs `f` on a thread and fails the test if it takes longer than `seconds` (a hang).
fn within<T: Send + 'static>(seconds: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(f());
    });
    result
        .recv_timeout(Duration::from_secs(seconds))
        .expect("hung, or panicked")
}

/// Checks that the model split over `devices` gives the single model's (on `devices[0]`)
/// greedy tokens for 64 steps and logits within `tolerance`; returns the largest relative
/// difference.
fn check_against_single(source: &Source, devices: &[Device], tolerance: f32) -> f32 {
    let reference = decode(&mut single(source, &devices[0]), 64);
    let mut model = split(source, devices).expect("split model");
    assert_eq!(model.ranks(), devices.len());
    let parallel = decode(&mut model, 64);
    let worst = reference
        .logits
        .iter()
        .zip(&parallel.logits)
        .map(|(r, p)| relative_difference(p, r))
        .fold(0f32, f32::max);
    println!(
        "tp {} on {:?}: 64 greedy steps, tokens identical: {}, largest relative logit \
         difference {worst:.2e}",
        devices.len(),
        devices[0].location(),
        parallel.generated == reference.generated
    );
    assert_eq!(parallel.generated, reference.generated);
    assert!(worst < tolerance, "{worst}");
    worst
}

#[test]
fn two_ranks_give_the_single_device_tokens_for_64_greedy_steps() {
    // The seeded shape, each rank making its weights.
    check_against_single(&tiny(), &[Device::Cpu, Device::Cpu], 1e-4);
}

#[test]
fn four_ranks_give_the_single_device_tokens_for_64_greedy_steps() {
    // The tiny shape with 4 key/value heads (the default's 2 do not split 4 ways), tied
    // embeddings and Llama 3's RoPE (theta and rescaling of Llama-3.2-1B), written as a
    // folder: the ranks read the safetensors file.
    let dir = std::env::temp_dir().join(format!("generate-tp4-{}", std::process::id()));
    let mut config = Shape::Tiny.config();
    let llama_3_2 = Shape::Llama3_2_1B.config();
    config["num_key_value_heads"] = 4.into();
    config["tie_word_embeddings"] = true.into();
    config["rope_theta"] = llama_3_2["rope_theta"].clone();
    config["rope_scaling"] = llama_3_2["rope_scaling"].clone();
    weights::write_model(&config, SEED, DType::F32, &dir).expect("write model");
    check_against_single(&Source::Dir(dir.clone()), &vec![Device::Cpu; 4], 1e-4);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn one_rank_gives_the_single_device_logits_exactly() {
    let reference = decode(&mut single(&tiny(), &Device::Cpu), 16);
    let mut model = split(&tiny(), &[Device::Cpu]).expect("one rank");
    let parallel = decode(&mut model, 16);
    assert_eq!(parallel.generated, reference.generated);
    assert_eq!(parallel.logits, reference.logits);
}

#[test]
fn a_batch_through_the_cache_matches_and_bench_runs() {
    let mut one = single(&tiny(), &Device::Cpu);
    let mut two = split(&tiny(), &[Device::Cpu, Device::Cpu]).unwrap();
    // Two sequences: a 7-token prefill, then two single-token steps.
    let ids: Vec<u32> = prompt(18);
    let steps = [(&ids[..14], 7, 0), (&ids[14..16], 1, 7), (&ids[16..], 1, 8)];
    for model in [&mut one, &mut two] {
        model.reset().unwrap();
    }
    for (chunk, tokens, pos) in steps {
        let input = Tensor::from_slice(chunk, (2, tokens), &Device::Cpu).unwrap();
        let a = one.forward(&input, pos).unwrap();
        let b = two.forward(&input, pos).unwrap();
        assert_eq!(b.dims(), &[2, 258]);
        let rel = relative_difference(
            &b.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            &a.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        );
        println!("batch of 2, {tokens} tokens at {pos}: relative difference {rel:.2e}");
        assert!(rel < 1e-4, "{rel}");
    }
    let bench = generation::bench(&mut two, 2, 8, 4, 1).unwrap();
    assert!(bench.decode_ms_per_token > 0.0);
}

#[test]
fn bad_input_to_a_split_model_is_an_error_that_leaves_it_usable() {
    let mut model = split(&tiny(), &[Device::Cpu, Device::Cpu]).unwrap();
    let outside = Tensor::new(&[[300u32]], &Device::Cpu).unwrap();
    let err = model.forward(&outside, 0).unwrap_err().to_string();
    assert!(err.contains("outside the vocabulary of 258"), "{err}");
    let late = Tensor::new(&[[1u32, 2]], &Device::Cpu).unwrap();
    let err = model.forward(&late, 8191).unwrap_err().to_string();
    assert!(err.contains("context of 8192"), "{err}");
    let fine = Tensor::new(&[[1u32]], &Device::Cpu).unwrap();
    assert!(model.forward(&fine, 0).is_ok());
}

#[test]
fn bad_splits_are_clear_errors() {
    let cpus = vec![Device::Cpu; 4];
    let err = load_error(&tiny(), 3, &cpus);
    assert!(
        err.contains("over 3 ranks")
            && err.contains("num_attention_heads (8)")
            && err.contains("num_key_value_heads (2)")
            && err.contains("intermediate_size (688)"),
        "{err}"
    );
    // 4 divides the heads and the intermediate size, not the 2 key/value heads.
    let err = load_error(&tiny(), 4, &cpus);
    assert!(
        err.contains("num_key_value_heads (2) is not") && !err.contains("num_attention_heads"),
        "{err}"
    );
    assert!(load_error(&tiny(), 0, &cpus).contains("at least one rank"));
    let err = load_error(&tiny(), 2, &cpus[..1]);
    assert!(err.contains("needs 2 devices, 1 given"), "{err}");
    let err = load_error(&Source::Gguf("/nonexistent/model.gguf".into()), 2, &cpus);
    assert!(err.contains("GGUF models run on one device"), "{err}");
    let err = load_error(&Source::Shape(Shape::Qwen2_5_0_5B, SEED), 2, &cpus);
    assert!(
        err.contains("runs Llama models; this one is Qwen2"),
        "{err}"
    );
    let err = tensor_parallel::hip_collectives(&cpus)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("is not a HIP device"), "{err}");
}

/// Each handle's `all_reduce_sum` of its input, on a thread per rank, `rounds` times (the
/// inputs scaled by the round number plus one); every rank's results in rank order.
fn reduce_on_threads(
    handles: Vec<HostAllReduce>,
    inputs: Vec<Tensor>,
    rounds: usize,
) -> Vec<Vec<candle_core::Result<Tensor>>> {
    within(30, move || {
        let threads: Vec<_> = handles
            .into_iter()
            .zip(inputs)
            .map(|(handle, x)| {
                std::thread::spawn(move || {
                    (0..rounds)
                        .map(|round| {
                            let scaled = x.affine(round as f64 + 1.0, 0.0)?;
                            handle.all_reduce_sum(&scaled)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    })
}

#[test]
fn the_host_all_reduce_sums_over_three_ranks_in_rank_order() {
    for dtype in [DType::F32, DType::BF16] {
        // bf16 keeps 8 significant bits: 1 + 2^-8 rounds to 1 (to even), so adding rank 1's
        // 2^-8 and then rank 2's leaves 1, where 2^-8 + 2^-8 first would give 1 + 2^-7.
        let tiny = 2f32.powi(-8);
        let rows = [[1.0f32, 2.0, -3.0], [tiny, 0.5, 4.0], [tiny, 0.25, -1.0]];
        let inputs: Vec<Tensor> = rows
            .iter()
            .map(|r| {
                Tensor::new(r, &Device::Cpu)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap()
            })
            .collect();
        let results = reduce_on_threads(HostAllReduce::group(3), inputs.clone(), 3);
        for round in 0..3 {
            let scale = round as f64 + 1.0;
            let scaled: Vec<Tensor> = inputs
                .iter()
                .map(|x| x.affine(scale, 0.0).unwrap())
                .collect();
            let expected = ((&scaled[0] + &scaled[1]).unwrap() + &scaled[2]).unwrap();
            let expected = expected
                .to_dtype(DType::F32)
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            for (rank, rank_results) in results.iter().enumerate() {
                let sum = rank_results[round].as_ref().expect("sum");
                assert_eq!(sum.dtype(), dtype);
                assert_eq!(sum.dims(), &[3]);
                let got = sum.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap();
                assert_eq!(got, expected, "{dtype:?}, rank {rank}, round {round}");
            }
        }
        if dtype == DType::BF16 {
            let first = results[0][0]
                .as_ref()
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap();
            assert_eq!(first.to_vec1::<f32>().unwrap()[0], 1.0);
        }
    }
}

#[test]
fn a_failing_rank_makes_the_others_fail_instead_of_hanging() {
    let x = || Tensor::ones(4, DType::F32, &Device::Cpu).unwrap();

    // Rank 2 aborts while ranks 0 and 1 wait for it; later calls fail at once.
    let mut handles = HostAllReduce::group(3);
    let last = handles.pop().unwrap();
    let waiting = std::thread::spawn(move || reduce_on_threads(handles, vec![x(), x()], 2));
    std::thread::sleep(Duration::from_millis(100));
    last.abort("rank 2 failed: out of memory");
    for rank_results in waiting.join().unwrap() {
        for result in rank_results {
            let err = result.unwrap_err().to_string();
            assert!(err.contains("rank 2 failed: out of memory"), "{err}");
        }
    }
    assert!(last.all_reduce_sum(&x()).is_err());

    // Inputs that cannot be added fail on every rank.
    let odd = Tensor::ones(5, DType::F32, &Device::Cpu).unwrap();
    for rank_results in reduce_on_threads(HostAllReduce::group(3), vec![x(), x(), odd], 1) {
        let err = rank_results[0].as_ref().unwrap_err().to_string();
        assert!(err.contains("cannot be added"), "{err}");
    }

    // A rank that goes away (its handle dropped, e.g. its thread panicked).
    let mut handles = HostAllReduce::group(2);
    drop(handles.pop());
    let err = reduce_on_threads(handles, vec![x()], 1)[0][0]
        .as_ref()
        .unwrap_err()
        .to_string();
    assert!(err.contains("rank 1 left the group"), "{err}");
}

/// A collective that fails on `fail` and otherwise forwards to the host all-reduce.
struct FailOn {
    inner: Arc<dyn AllReduce>,
    fail: bool,
}

impl AllReduce for FailOn {
    fn all_reduce_sum(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if self.fail {
            candle_core::bail!("injected failure");
        }
        self.inner.all_reduce_sum(x)
    }

    fn abort(&self, reason: &str) {
        self.inner.abort(reason);
    }
}

/// Host collectives whose rank 1 fails.
fn failing_rank_1(devices: &[Device]) -> AppResult<Vec<Arc<dyn AllReduce>>> {
    Ok(tensor_parallel::host_collectives(devices)?
        .into_iter()
        .enumerate()
        .map(|(rank, inner)| {
            Arc::new(FailOn {
                inner,
                fail: rank == 1,
            }) as Arc<dyn AllReduce>
        })
        .collect())
}

#[test]
fn a_rank_failing_in_a_forward_is_named_and_nobody_hangs() {
    within(60, || {
        let cpus = [Device::Cpu, Device::Cpu];
        let mut model =
            Model::load_tensor_parallel(&tiny(), DType::F32, 2, &cpus, failing_rank_1).unwrap();
        let input = Tensor::new(&[[1u32, 2, 3]], &Device::Cpu).unwrap();
        let err = model.forward(&input, 0).unwrap_err().to_string();
        println!("{err}");
        assert!(
            err.contains("rank 1 failed: injected failure") && err.contains("ranks that failed"),
            "{err}"
        );
        // The group stays aborted: later forwards fail too, without waiting.
        assert!(model.forward(&input, 0).is_err());
        assert!(model.reset().is_ok());
    });
}

#[test]
#[ignore = "needs two HIP devices"]
fn two_hip_ranks_give_one_hip_device_s_tokens_for_64_greedy_steps() {
    let hip = |ordinal| candle_hip::extension::hip_device(ordinal).expect("HIP device");
    check_against_single(&tiny(), &[hip(0), hip(1)], 1e-4);
}

#[test]
#[ignore = "needs two HIP devices"]
fn tensors_move_between_hip_devices_without_the_host() {
    let (a, b) = (
        candle_hip::extension::hip_device(0).expect("hip:0"),
        candle_hip::extension::hip_device(1).expect("hip:1"),
    );
    let host = Tensor::arange(0f32, 4096., &Device::Cpu)
        .unwrap()
        .reshape((64, 64))
        .unwrap();
    for dtype in [DType::F32, DType::BF16, DType::U32] {
        let want = host.to_dtype(dtype).unwrap();
        let on_a = want.to_device(&a).unwrap();
        // A strided view: the whole storage moves, the layout stays.
        let on_b = on_a.t().unwrap().to_device(&b).unwrap();
        assert!(
            on_b.device().same_device(&b),
            "{dtype:?} landed on {:?}",
            on_b.device()
        );
        let back = on_b.to_device(&a).unwrap();
        assert_eq!(
            back.to_dtype(DType::F32).unwrap().to_vec2::<f32>().unwrap(),
            want.t()
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap(),
            "{dtype:?} round trip hip:0 -> hip:1 -> hip:0"
        );
    }
}
