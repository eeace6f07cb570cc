//! Candle's own CUDA backend as the baseline of the generation benchmark on the NVIDIA test
//! platform: candle-transformers 0.11.1's Llama (a Hugging Face folder of safetensors) or
//! quantized Llama (a GGUF file) on `Device::new_cuda`, crates.io Candle unmodified.
//!
//! ```text
//! candle-cuda-bench [bench] (--model DIR | --gguf FILE) [--dtype f32|f16|bf16]
//!                   [--device cuda|cuda:N] [--batch B[,B..]] [--prompt-len P[,P..]]
//!                   [--new-tokens N] [--iters I] [--json FILE]
//! ```
//!
//! Times prefill and decode exactly as `generate bench` (examples/candle-app) does and
//! prints one JSON object per (batch, prompt length) with the same fields, `framework`
//! being `candle-cuda`; `--json FILE` appends the rows to FILE too. Exit status: 0 on
//! success, 1 when loading or running fails, 2 for a bad command line.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use candle_core::cuda_backend::cudarc::driver::sys;
use candle_core::quantized::gguf_file;
use candle_core::{D, DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{llama, quantized_llama};
use serde_json::{Value, json};

/// Why the program stopped.
enum Failure {
    /// A bad command line (exit status 2).
    Usage(String),
    /// Loading or running failed (exit status 1).
    Run(String),
}

impl From<candle_core::Error> for Failure {
    fn from(e: candle_core::Error) -> Self {
        Failure::Run(e.to_string())
    }
}

type Result<T> = std::result::Result<T, Failure>;

/// A run failure with `message`.
fn fail<T>(message: impl Into<String>) -> Result<T> {
    Err(Failure::Run(message.into()))
}

/// A usage failure with `message`.
fn usage<T>(message: impl Into<String>) -> Result<T> {
    Err(Failure::Usage(message.into()))
}

const USAGE: &str = "usage: candle-cuda-bench [bench] (--model DIR | --gguf FILE) \
[--dtype f32|f16|bf16] [--device cuda|cuda:N] [--batch B[,B..]] [--prompt-len P[,P..]] \
[--new-tokens N] [--iters I] [--json FILE]";

/// The options every one of which takes a value.
const OPTIONS: [&str; 9] = [
    "--model",
    "--gguf",
    "--dtype",
    "--device",
    "--batch",
    "--prompt-len",
    "--new-tokens",
    "--iters",
    "--json",
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    // A panic inside Candle (an unsupported case, say) is one line and exit status 1 too.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("candle-cuda-bench: Candle panicked: {info}");
    }));
    let outcome = std::panic::catch_unwind(|| run(&args))
        .unwrap_or_else(|_| Err(Failure::Run("stopped by the panic above".to_string())));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("candle-cuda-bench: {message}\n{USAGE}");
            ExitCode::from(2)
        }
        Err(Failure::Run(message)) => {
            eprintln!("candle-cuda-bench: {message}");
            ExitCode::from(1)
        }
    }
}

/// Parses `--option value` pairs (after an optional leading `bench`).
fn parse(args: &[String]) -> Result<HashMap<String, String>> {
    let args = match args.first().map(String::as_str) {
        Some("bench") => &args[1..],
        _ => args,
    };
    let mut values = HashMap::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if !OPTIONS.contains(&arg.as_str()) {
            return usage(format!("unknown argument `{arg}`"));
        }
        let Some(value) = it.next() else {
            return usage(format!("{arg} needs a value"));
        };
        values.insert(arg.clone(), value.clone());
    }
    Ok(values)
}

/// The number of option `key`, or `default`.
fn number(values: &HashMap<String, String>, key: &str, default: usize) -> Result<usize> {
    match values.get(key) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .or_else(|_| usage(format!("{key} {v}: not a valid number"))),
    }
}

/// The comma-separated numbers of option `key`, or `default`.
fn list(values: &HashMap<String, String>, key: &str, default: &str) -> Result<Vec<usize>> {
    let text = values.get(key).map_or(default, String::as_str);
    text.split(',')
        .map(|v| {
            v.parse()
                .or_else(|_| usage(format!("{key}: `{v}` is not a number")))
        })
        .collect()
}

/// The CUDA ordinal of `--device` (`cuda`, `cuda:N`).
fn ordinal(spec: Option<&String>) -> Result<usize> {
    match spec.map(String::as_str) {
        None | Some("cuda") => Ok(0),
        Some(s) => match s.strip_prefix("cuda:").map(str::parse) {
            Some(Ok(n)) => Ok(n),
            _ => usage(format!("--device {s}: expected cuda or cuda:N")),
        },
    }
}

/// The dtype called `name`.
fn parse_dtype(name: &str) -> Result<DType> {
    match name {
        "f32" => Ok(DType::F32),
        "f16" => Ok(DType::F16),
        "bf16" => Ok(DType::BF16),
        other => usage(format!("--dtype {other}: expected f32, f16 or bf16")),
    }
}

/// The short name of a model dtype.
fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        _ => "f32",
    }
}

fn run(args: &[String]) -> Result<()> {
    let values = parse(args)?;
    let batches = list(&values, "--batch", "1")?;
    let prompts = list(&values, "--prompt-len", "512")?;
    let new_tokens = number(&values, "--new-tokens", 128)?;
    let iters = number(&values, "--iters", 3)?;
    let dtype = parse_dtype(values.get("--dtype").map_or("bf16", String::as_str))?;
    let ordinal = ordinal(values.get("--device"))?;
    let source = match (values.get("--model"), values.get("--gguf")) {
        (Some(dir), None) => Source::Dir(PathBuf::from(dir)),
        (None, Some(file)) => Source::Gguf(PathBuf::from(file)),
        _ => return usage("give one of --model DIR and --gguf FILE"),
    };
    let device = Device::new_cuda(ordinal)
        .or_else(|e| fail(format!("CUDA device {ordinal} is not available: {e}")))?;
    let mut model = Model::load(&source, dtype, &device)?;
    let copy = copy_bandwidth(&device)?;
    let description = describe(&device);
    for &batch in &batches {
        for &prompt_len in &prompts {
            let r = bench(&mut model, batch, prompt_len, new_tokens, iters)?;
            let row = json!({
                "framework": "candle-cuda",
                "backend": "cuda",
                "device": description,
                "tp": 1,
                "model": model.description,
                "dtype": dtype_name(model.dtype),
                "batch": r.batch,
                "prompt_len": r.prompt_len,
                "new_tokens": r.new_tokens,
                "prefill_ms": r.prefill_ms,
                "prefill_tokens_per_s": (r.batch * r.prompt_len) as f64 / r.prefill_ms * 1e3,
                "decode_ms_per_token": r.decode_ms_per_token,
                "decode_tokens_per_s": r.batch as f64 / r.decode_ms_per_token * 1e3,
                "host_ms_per_token": r.host_ms_per_token,
                "weight_bytes": model.weight_bytes,
                "copy_gb_per_s": copy,
                "peak_memory_bytes": peak_memory(&device),
                "graph_nodes": Value::Null,
            });
            println!("{row}");
            if let Some(file) = values.get("--json") {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(file)
                    .or_else(|e| fail(format!("{file}: {e}")))?;
                writeln!(f, "{row}").or_else(|e| fail(format!("{file}: {e}")))?;
            }
        }
    }
    Ok(())
}

/// Where the model comes from.
enum Source {
    /// A Hugging Face folder: config.json and model.safetensors or its shards.
    Dir(PathBuf),
    /// A GGUF file.
    Gguf(PathBuf),
}

/// The network and its KV cache.
enum Net {
    /// candle-transformers' Llama with its cache (rebuilt to empty it).
    Llama(Box<llama::Llama>, Box<llama::Cache>, Box<llama::Config>),
    /// candle-transformers' quantized Llama, whose layers hold their caches.
    Quantized(Box<quantized_llama::ModelWeights>),
}

/// A loaded model and what the report says of it.
struct Model {
    net: Net,
    dtype: DType,
    device: Device,
    max_positions: usize,
    weight_bytes: u64,
    description: String,
}

impl Model {
    /// Loads `source` onto `device` (a GGUF file computes in f32 whatever `dtype` says).
    fn load(source: &Source, dtype: DType, device: &Device) -> Result<Model> {
        match source {
            Source::Dir(dir) => Model::load_dir(dir, dtype, device),
            Source::Gguf(path) => Model::load_gguf(path, device),
        }
    }

    fn load_dir(dir: &Path, dtype: DType, device: &Device) -> Result<Model> {
        let config_path = dir.join("config.json");
        let text = std::fs::read_to_string(&config_path)
            .or_else(|e| fail(format!("{}: {e}", config_path.display())))?;
        let config: Value = serde_json::from_str(&text)
            .or_else(|e| fail(format!("{}: {e}", config_path.display())))?;
        let model_type = config["model_type"].as_str().unwrap_or("");
        if model_type != "llama" {
            return fail(format!(
                "{}: model_type `{model_type}`; this program runs Llama models only",
                config_path.display()
            ));
        }
        let cfg: llama::LlamaConfig = serde_json::from_value(config)
            .or_else(|e| fail(format!("{}: {e}", config_path.display())))?;
        let cfg = cfg.into_config(false);
        let files = weight_files(dir)?;
        let weight_bytes = files
            .iter()
            .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
            .sum();
        // SAFETY: the files are memory-mapped read-only and not changed while loading.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&files, dtype, device)? };
        let model = llama::Llama::load(vb, &cfg)?;
        let cache = llama::Cache::new(true, dtype, &cfg, device)?;
        Ok(Model {
            max_positions: cfg.max_position_embeddings,
            net: Net::Llama(Box::new(model), Box::new(cache), Box::new(cfg)),
            dtype,
            device: device.clone(),
            weight_bytes,
            description: format!("Llama ({})", dir.display()),
        })
    }

    fn load_gguf(path: &Path, device: &Device) -> Result<Model> {
        let name = path.display();
        let mut file = File::open(path).or_else(|e| fail(format!("{name}: {e}")))?;
        let content = gguf_file::Content::read(&mut file)
            .or_else(|e| fail(format!("{name}: not a GGUF file: {e}")))?;
        let arch = match content.metadata.get("general.architecture") {
            Some(gguf_file::Value::String(s)) => s.clone(),
            _ => return fail(format!("{name}: no general.architecture")),
        };
        if arch != "llama" && arch != "mistral" {
            return fail(format!(
                "{name}: GGUF architecture `{arch}`; this program runs llama (and mistral) only"
            ));
        }
        let key = format!("{arch}.context_length");
        let max_positions = match content.metadata.get(&key).map(|v| v.to_u64()) {
            Some(Ok(n)) => n as usize,
            _ => return fail(format!("{name}: no {key}")),
        };
        let mut counts: HashMap<String, usize> = HashMap::new();
        let mut weight_bytes = 0u64;
        for info in content.tensor_infos.values() {
            *counts.entry(format!("{:?}", info.ggml_dtype)).or_default() += 1;
            let elems = info.shape.elem_count();
            weight_bytes +=
                (elems / info.ggml_dtype.block_size() * info.ggml_dtype.type_size()) as u64;
        }
        let mut counts: Vec<(String, usize)> = counts.into_iter().collect();
        counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let types: Vec<String> = counts.iter().map(|(t, n)| format!("{t} x {n}")).collect();
        let model = quantized_llama::ModelWeights::from_gguf(content, &mut file, device)?;
        Ok(Model {
            net: Net::Quantized(Box::new(model)),
            dtype: DType::F32,
            device: device.clone(),
            max_positions,
            weight_bytes,
            description: format!("Llama ({name}: {})", types.join(", ")),
        })
    }

    /// Runs `ids` (`[batch, tokens]`) at position `pos`; the f32 logits of each sequence's
    /// last token, `[batch, vocab]`.
    fn forward(&mut self, ids: &Tensor, pos: usize) -> Result<Tensor> {
        let logits = match &mut self.net {
            Net::Llama(model, cache, _) => model.forward(ids, pos, cache)?,
            Net::Quantized(model) => model.forward(ids, pos)?,
        };
        Ok(logits.to_dtype(DType::F32)?)
    }

    /// Empties the KV cache.
    fn reset(&mut self) -> Result<()> {
        match &mut self.net {
            Net::Llama(_, cache, cfg) => {
                **cache = llama::Cache::new(true, self.dtype, cfg, &self.device)?;
            }
            Net::Quantized(model) => model.clear_kv_cache(),
        }
        Ok(())
    }
}

/// `model.safetensors`, or the shards `model.safetensors.index.json` names (each once).
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index).or_else(|_| {
        fail(format!(
            "{}: neither model.safetensors nor model.safetensors.index.json",
            dir.display()
        ))
    })?;
    let index_json: Value =
        serde_json::from_str(&text).or_else(|e| fail(format!("{}: {e}", index.display())))?;
    let Some(map) = index_json["weight_map"].as_object() else {
        return fail(format!("{}: no weight_map", index.display()));
    };
    let shards: BTreeSet<&str> = map.values().filter_map(Value::as_str).collect();
    let mut files = Vec::new();
    for shard in shards {
        let file = dir.join(shard);
        if !file.is_file() {
            return fail(format!("{}: missing shard {shard}", dir.display()));
        }
        files.push(file);
    }
    Ok(files)
}

/// One benchmark case's results.
struct BenchResult {
    batch: usize,
    prompt_len: usize,
    new_tokens: usize,
    prefill_ms: f64,
    decode_ms_per_token: f64,
    host_ms_per_token: f64,
}

/// Times prefill and decode as `generate bench` does: `batch` prompts of `prompt_len`
/// byte-range ids, then `new_tokens` greedy steps (argmax on the device, the ids read
/// back every step). Medians of `iters` runs after one warm-up.
fn bench(
    model: &mut Model,
    batch: usize,
    prompt_len: usize,
    new_tokens: usize,
    iters: usize,
) -> Result<BenchResult> {
    if batch == 0 || prompt_len == 0 || new_tokens == 0 || iters == 0 {
        return usage("batch, prompt length, new tokens and iterations must be at least 1");
    }
    if prompt_len + new_tokens > model.max_positions {
        return fail(format!(
            "a prompt of {prompt_len} and {new_tokens} new tokens need {} positions; the \
             model's context is {}",
            prompt_len + new_tokens,
            model.max_positions
        ));
    }
    let dev = model.device.clone();
    let ids: Vec<u32> = (0..batch * prompt_len)
        .map(|i| ((i * 7919 + 13) % 256) as u32)
        .collect();
    let prompt = Tensor::from_vec(ids, (batch, prompt_len), &dev)?;
    let (mut prefill, mut decode, mut host) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..=iters {
        model.reset()?;
        dev.synchronize()?;
        let t0 = Instant::now();
        let logits = model.forward(&prompt, 0)?;
        let mut next = argmax(&logits)?;
        dev.synchronize()?;
        prefill.push(t0.elapsed().as_secs_f64() * 1e3);
        let mut in_forward = Duration::ZERO;
        let t1 = Instant::now();
        for step in 0..new_tokens {
            let input = Tensor::from_vec(next, (batch, 1), &dev)?;
            let f0 = Instant::now();
            let logits = model.forward(&input, prompt_len + step)?;
            in_forward += f0.elapsed();
            next = argmax(&logits)?;
        }
        decode.push(t1.elapsed().as_secs_f64() * 1e3 / new_tokens as f64);
        host.push(in_forward.as_secs_f64() * 1e3 / new_tokens as f64);
    }
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
fn argmax(logits: &Tensor) -> Result<Vec<u32>> {
    Ok(logits.argmax(D::Minus1)?.to_dtype(DType::U32)?.to_vec1()?)
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The device's copy bandwidth in GB/s: bytes read + written by a 1 GiB device-to-device
/// copy, median of 5 after one warm-up (as `generate bench` measures it).
fn copy_bandwidth(device: &Device) -> Result<Option<f64>> {
    let cuda = device.as_cuda_device()?;
    let n = 1usize << 30;
    let src = cuda.alloc_zeros::<u8>(n)?;
    let mut dst = cuda.alloc_zeros::<u8>(n)?;
    let mut times = Vec::new();
    for _ in 0..6 {
        device.synchronize()?;
        let t = Instant::now();
        cuda.memcpy_dtod(&src, &mut dst)?;
        device.synchronize()?;
        times.push(t.elapsed().as_secs_f64());
    }
    Ok(Some(2.0 * n as f64 / median(&times[1..]) / 1e9))
}

/// The device's name and compute capability.
fn describe(device: &Device) -> String {
    let Ok(cuda) = device.as_cuda_device() else {
        return format!("{:?}", device.location());
    };
    let stream = cuda.cuda_stream();
    let ctx = stream.context();
    let name = ctx.name().unwrap_or_else(|_| "?".to_string());
    match ctx.compute_capability() {
        Ok((major, minor)) => format!(
            "cuda:{} {name} (sm_{major}{minor}), Candle 0.11.1 CUDA backend",
            ctx.ordinal()
        ),
        Err(_) => format!("cuda:{} {name}, Candle 0.11.1 CUDA backend", ctx.ordinal()),
    }
}

/// The high-water mark of the memory that the device's current memory pool reserved
/// (cudarc allocates stream-ordered from it, and candle keeps no cache of its own), the
/// counterpart of candle-hip's pool size; `None` without memory pools.
fn peak_memory(device: &Device) -> Option<u64> {
    let cuda = device.as_cuda_device().ok()?;
    let stream = cuda.cuda_stream();
    let ctx = stream.context();
    if !ctx.has_async_alloc() || device.synchronize().is_err() {
        return None;
    }
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut high: u64 = 0;
    // SAFETY: the context is current on this thread (candle binds it); `pool` and `high`
    // are valid for the writes the driver makes.
    unsafe {
        if sys::cuDeviceGetMemPool(&mut pool, ctx.cu_device()) != sys::CUresult::CUDA_SUCCESS {
            return None;
        }
        let attr = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH;
        let out = (&mut high as *mut u64).cast();
        if sys::cuMemPoolGetAttribute(pool, attr, out) != sys::CUresult::CUDA_SUCCESS {
            return None;
        }
    }
    Some(high)
}
