//! Text generation on HIP (or the CPU) with candle-transformers.
//!
//! ```text
//! generate [run] [--model DIR | --shape NAME | --gguf FILE] [--prompt TEXT | --prompt-ids 1,2,3]
//!          [--max-tokens N] [--dtype f32|f16|bf16] [--device cpu|hip|hip:N] [--tp N]
//!          [--temperature T] [--top-k K] [--top-p P] [--repeat-penalty R]
//!          [--repeat-last-n N] [--seed S] [--weights-seed S] [--ignore-eos] [--json]
//!          [--logits-out FILE] [--flash-attn | --no-flash-attn] [--graph]
//!     generates from the prompt, printing tokens as they come, then one line each for time
//!     to first token, prefill tokens/s, decode tokens/s and peak memory (--json: one JSON
//!     object instead). Without --model or --shape: the embedded default, a small Llama
//!     with random weights from a fixed seed and a byte-level tokenizer. --logits-out
//!     writes every step's f32 logits ([steps, vocab], little-endian) to FILE and the ids
//!     to FILE.json. --gguf runs a quantized GGUF file (Llama, Mistral, Qwen2, Qwen3) in f32.
//!     --tp N splits a Llama over N ranks (tensor parallelism, one thread per rank): HIP
//!     devices hip:0..N-1 (from hip:K with --device hip:K), or N CPU ranks with --device cpu;
//!     the default 1 runs on one device. --flash-attn runs attention fused (candle-flash-attn's
//!     API on candle-hip, `examples/candle-app/flash-attn`; Llama and Mistral; Qwen3 always
//!     takes it, as candle-transformers builds it with its flash-attn feature): the default
//!     on one HIP device in f16/bf16, --no-flash-attn runs candle-transformers' unfused
//!     attention there too. --graph runs a Llama with a static KV cache whose one-token decode step is
//!     captured into a HIP graph once and replayed for every token (bench --batch B: B
//!     sequences in one step; on the CPU the step runs eagerly); with --gguf, a `llama` file's matrices stay quantized and the
//!     model computes in --dtype.
//! generate write-model --shape NAME --out DIR [--dtype D] [--weights-seed S]
//!     writes a seeded random-weight model folder (config.json, model.safetensors)
//! generate write-gguf --shape NAME --quant SCHEME --out FILE [--weights-seed S]
//!     writes the same seeded weights as a GGUF file quantized by candle's quantizer:
//!     q4_0, q8_0, q4k, q6k, or q4km (Q4_K with Q6_K for the output and some layers)
//! generate bench [--model DIR | --shape NAME | --gguf FILE] [--dtype D] [--device D] [--tp N]
//!                [--batch B[,B..]] [--prompt-len P[,P..]] [--new-tokens N] [--iters I]
//!                [--json FILE] [--flash-attn | --no-flash-attn] [--graph]
//!     prefill and decode timings per (batch, prompt length), one JSON object per case
//! ```
//! Shapes: tiny, tinyllama-1.1b, llama-3.2-1b, llama-3.1-8b, qwen2.5-0.5b. Exit status: 0
//! on success, 1 when generation fails, 2 for bad arguments.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use candle_app_generate::generation::{self, Settings};
use candle_app_generate::gguf::{self, SCHEMES, Scheme};
use candle_app_generate::model::{self, Model, Source};
use candle_app_generate::shapes::{SHAPES, Shape};
use candle_app_generate::{AppResult, app_error, device, tensor_parallel, weights};
use candle_core::{DType, Device};
use serde_json::json;

/// The seed of the embedded default's weights.
const DEFAULT_WEIGHTS_SEED: u64 = 20_261_123;

/// The prompt when none is given.
const DEFAULT_PROMPT: &str = "The GPU said:";

/// Parsed `--flag value` pairs and bare `--flags`.
struct Args {
    values: HashMap<String, String>,
    flags: Vec<String>,
}

/// Flags that take no value.
const SWITCHES: [&str; 5] = [
    "--json",
    "--ignore-eos",
    "--flash-attn",
    "--no-flash-attn",
    "--graph",
];

impl Args {
    /// Parses `args`; `json_takes_file` for `bench`, whose `--json` names a file.
    fn parse(args: &[String], json_takes_file: bool) -> AppResult<Args> {
        let mut values = HashMap::new();
        let mut flags = Vec::new();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            if !arg.starts_with("--") {
                return Err(app_error(format!("unexpected argument `{arg}`")));
            }
            if SWITCHES.contains(&arg.as_str()) && !(arg == "--json" && json_takes_file) {
                flags.push(arg.clone());
                continue;
            }
            let value = it
                .next()
                .ok_or_else(|| app_error(format!("{arg} needs a value")))?;
            values.insert(arg.clone(), value.clone());
        }
        Ok(Args { values, flags })
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    fn flag(&self, key: &str) -> bool {
        self.flags.iter().any(|f| f == key)
    }

    fn number<T: std::str::FromStr>(&self, key: &str) -> AppResult<Option<T>> {
        self.get(key)
            .map(|v| {
                v.parse()
                    .map_err(|_| app_error(format!("{key} {v}: not a valid number")))
            })
            .transpose()
    }

    fn list(&self, key: &str, default: &str) -> AppResult<Vec<usize>> {
        self.get(key)
            .unwrap_or(default)
            .split(',')
            .map(|v| {
                v.parse()
                    .map_err(|_| app_error(format!("{key}: `{v}` is not a number")))
            })
            .collect()
    }

    fn reject_unknown(&self, known: &[&str]) -> AppResult<()> {
        for key in self.values.keys().chain(&self.flags) {
            if !known.contains(&key.as_str()) {
                return Err(app_error(format!("unknown option {key}")));
            }
        }
        Ok(())
    }
}

/// A bad command line: exit status 2.
struct Usage(String);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (command, rest) = match args.first().map(String::as_str) {
        Some(c @ ("run" | "write-model" | "write-gguf" | "bench")) => (c, &args[1..]),
        _ => ("run", &args[..]),
    };
    if rest.iter().any(|a| a == "--help" || a == "-h") {
        println!("{}", usage());
        return ExitCode::SUCCESS;
    }
    // `bench` takes `--json FILE`, where `run` takes a bare `--json`.
    let parsed = match Args::parse(rest, command == "bench") {
        Ok(a) => a,
        Err(e) => return fail(Err(Usage(e.to_string()))),
    };
    let result = match command {
        "write-model" => write_model(&parsed),
        "write-gguf" => write_gguf(&parsed),
        "bench" => bench(&parsed),
        _ => run(&parsed),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => match e.downcast::<UsageError>() {
            Ok(u) => fail(Err(Usage(u.0))),
            Err(e) => fail(Ok(e.to_string())),
        },
    }
}

/// A usage error raised inside a command.
#[derive(Debug)]
struct UsageError(String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn usage_error(message: impl Into<String>) -> candle_app_generate::AppError {
    Box::new(UsageError(message.into()))
}

/// Writes `text` to stdout now; a closed pipe is an error, not a panic.
fn emit(text: impl std::fmt::Display) -> AppResult<()> {
    let mut out = std::io::stdout().lock();
    write!(out, "{text}")?;
    out.flush()?;
    Ok(())
}

/// Prints the error; exit status 2 for usage, 1 otherwise.
fn fail(error: Result<String, Usage>) -> ExitCode {
    match error {
        Ok(message) => {
            eprintln!("generate: error: {message}");
            ExitCode::from(1)
        }
        Err(Usage(message)) => {
            eprintln!("generate: {message}\n\n{}", usage());
            ExitCode::from(2)
        }
    }
}

fn usage() -> String {
    let names: Vec<&str> = SHAPES.iter().map(|(n, _)| *n).collect();
    let schemes: Vec<&str> = SCHEMES.iter().map(|(n, _)| *n).collect();
    format!(
        "usage: generate [run] [--model DIR | --shape NAME | --gguf FILE] \
         [--prompt TEXT | --prompt-ids IDS] \
         [--max-tokens N] [--dtype f32|f16|bf16] [--device cpu|hip|hip:N] [--tp N] \
         [--temperature T] \
         [--top-k K] [--top-p P] [--repeat-penalty R] [--repeat-last-n N] [--seed S] \
         [--weights-seed S] [--ignore-eos] [--json] [--logits-out FILE] \
         [--flash-attn | --no-flash-attn] [--graph]\n       \
         generate write-model --shape NAME --out DIR [--dtype D] [--weights-seed S]\n       \
         generate write-gguf --shape NAME --quant SCHEME --out FILE [--weights-seed S]\n       \
         generate bench [--model DIR | --shape NAME | --gguf FILE] [--dtype D] [--device D] \
         [--tp N] [--batch B,..] [--prompt-len P,..] [--new-tokens N] [--iters I] [--json FILE] \
         [--flash-attn | --no-flash-attn] [--graph]\n\
         --flash-attn (the default on one HIP device in f16/bf16): fused attention; \
         --no-flash-attn: candle-transformers' unfused attention\n\
         --tp N: split a Llama over N ranks, HIP devices hip:K..K+N-1 (K from --device hip:K, \
         else 0) or N CPU ranks with --device cpu\n\
         shapes: {}\nquantization schemes: {}",
        names.join(", "),
        schemes.join(", ")
    )
}

/// The model source the arguments name; the embedded default without either.
fn source(args: &Args) -> AppResult<(Source, bool)> {
    let seed = args
        .number("--weights-seed")?
        .unwrap_or(DEFAULT_WEIGHTS_SEED);
    match (args.get("--model"), args.get("--shape"), args.get("--gguf")) {
        (Some(dir), None, None) => Ok((Source::Dir(PathBuf::from(dir)), false)),
        (None, Some(name), None) => Ok((Source::Shape(shape(name)?, seed), false)),
        (None, None, Some(file)) => Ok((Source::Gguf(PathBuf::from(file)), false)),
        (None, None, None) => Ok((Source::Shape(Shape::Tiny, seed), true)),
        _ => Err(usage_error("give one of --model, --shape and --gguf")),
    }
}

fn shape(name: &str) -> AppResult<Shape> {
    Shape::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = SHAPES.iter().map(|(n, _)| *n).collect();
        usage_error(format!(
            "unknown shape `{name}` (one of {})",
            names.join(", ")
        ))
    })
}

/// The ranks' devices (one without --tp) and the dtype: --device, else HIP when present
/// (saying why not); --dtype, else bf16 on HIP and f32 on the CPU.
fn devices_and_dtype(args: &Args) -> AppResult<(Vec<Device>, DType)> {
    let tp = args.number::<usize>("--tp")?.unwrap_or(1);
    if tp == 0 {
        return Err(usage_error(
            "--tp 0: tensor parallelism needs at least one rank",
        ));
    }
    let (devices, reason) = device::select_ranks(args.get("--device"), tp)?;
    if let Some(reason) = reason {
        eprintln!("generate: running on the CPU: {reason}");
    }
    let dtype = match args.get("--dtype") {
        Some(name) => model::parse_dtype(name).map_err(|e| usage_error(e.to_string()))?,
        None if devices[0].is_cpu() => DType::F32,
        None => DType::BF16,
    };
    Ok((devices, dtype))
}

/// Whether attention runs fused: --flash-attn or --no-flash-attn, else on one device that
/// candle-hip's kernels serve in `dtype` ([`model::fused_attention_runs`]); elsewhere the
/// crate's unfused reference is slower than candle-transformers' own attention.
fn flash_attn(devices: &[Device], dtype: DType, args: &Args) -> AppResult<bool> {
    match (args.flag("--flash-attn"), args.flag("--no-flash-attn")) {
        (true, true) => Err(usage_error(
            "give --flash-attn or --no-flash-attn, not both",
        )),
        (true, false) => Ok(true),
        (false, true) => Ok(false),
        (false, false) => {
            Ok(matches!(devices, [device] if model::fused_attention_runs(device, dtype)))
        }
    }
}

/// The model on one device (with fused attention as [`flash_attn`] says, graph decoding
/// for --graph), or split over several (one rank each) with the collectives that suit
/// them.
fn load(source: &Source, dtype: DType, devices: &[Device], args: &Args) -> AppResult<Model> {
    let flash_attn = flash_attn(devices, dtype, args)?;
    if args.flag("--graph") {
        if args.flag("--flash-attn") || args.flag("--no-flash-attn") || devices.len() > 1 {
            return Err(usage_error(
                "--graph runs on one device with its own attention: not with --flash-attn, \
                 --no-flash-attn or --tp",
            ));
        }
        return Model::load_graph_decode(source, dtype, &devices[0]);
    }
    match devices {
        [device] => Model::load_with_flash_attn(source, dtype, device, flash_attn),
        ranks => Model::load_tensor_parallel(
            source,
            dtype,
            ranks.len(),
            ranks,
            tensor_parallel::collectives,
        ),
    }
}

fn run(args: &Args) -> AppResult<()> {
    args.reject_unknown(&[
        "--model",
        "--shape",
        "--gguf",
        "--prompt",
        "--prompt-ids",
        "--max-tokens",
        "--dtype",
        "--device",
        "--tp",
        "--temperature",
        "--top-k",
        "--top-p",
        "--repeat-penalty",
        "--repeat-last-n",
        "--seed",
        "--weights-seed",
        "--ignore-eos",
        "--json",
        "--logits-out",
        "--flash-attn",
        "--no-flash-attn",
        "--graph",
    ])
    .map_err(|e| usage_error(e.to_string()))?;
    let json_out = args.flag("--json");
    let settings = Settings {
        max_tokens: args.number("--max-tokens")?.unwrap_or(64),
        temperature: args.number("--temperature")?,
        top_k: args.number("--top-k")?,
        top_p: args.number("--top-p")?,
        repeat_penalty: args.number("--repeat-penalty")?.unwrap_or(1.0),
        repeat_last_n: args.number("--repeat-last-n")?.unwrap_or(64),
        seed: args.number("--seed")?.unwrap_or(299_792_458),
        ignore_eos: args.flag("--ignore-eos"),
    };
    settings.check().map_err(|e| usage_error(e.to_string()))?;
    // The ids are read before the model loads, so that a typo costs no load.
    let prompt_ids = match (args.get("--prompt"), args.get("--prompt-ids")) {
        (Some(_), Some(_)) => return Err(usage_error("give --prompt or --prompt-ids, not both")),
        (_, Some(ids)) => Some(
            ids.split(',')
                .map(|v| {
                    v.trim()
                        .parse::<u32>()
                        .map_err(|_| usage_error(format!("--prompt-ids: `{v}` is not a token id")))
                })
                .collect::<AppResult<Vec<u32>>>()?,
        ),
        (_, None) => None,
    };
    let (source, embedded) = source(args)?;
    let (devices, dtype) = devices_and_dtype(args)?;
    if embedded && !json_out {
        eprintln!(
            "generate: no --model: using the embedded default, a small Llama-architecture model \
             with random weights (seed {DEFAULT_WEIGHTS_SEED}) and a byte-level tokenizer; its \
             text is noise, its speed and numerics are real"
        );
    }
    let mut model = load(&source, dtype, &devices, args)?;
    let prompt = match prompt_ids {
        Some(ids) => ids,
        None => model
            .codec
            .encode(args.get("--prompt").unwrap_or(DEFAULT_PROMPT))?,
    };
    if let Some(&bad) = prompt.iter().find(|&&id| id as usize >= model.vocab) {
        let vocab = model.vocab;
        return Err(if args.get("--prompt-ids").is_some() {
            usage_error(format!(
                "--prompt-ids: token {bad} is outside the vocabulary of {vocab}"
            ))
        } else {
            app_error(format!(
                "the tokenizer made token {bad} of the prompt, outside the model's vocabulary of \
                 {vocab}: the tokenizer and the configuration disagree"
            ))
        });
    }
    if !json_out {
        eprintln!(
            "generate: {} on {} in {}, {} prompt tokens",
            model.description,
            device::describe_ranks(&devices),
            model::dtype_name(model.dtype),
            prompt.len()
        );
        let room = model.max_positions.saturating_sub(prompt.len());
        if settings.max_tokens > room && room > 0 {
            eprintln!(
                "generate: --max-tokens {}: the model's context leaves room for {room}",
                settings.max_tokens
            );
        }
        emit(model.codec.decode(&prompt)?)?;
    }
    let mut stream = candle_app_generate::codec::TextStream::new();
    let keep_logits = args.get("--logits-out").is_some();
    let codec = std::mem::replace(
        &mut model.codec,
        candle_app_generate::codec::TextCodec::Bytes { bos: 0 },
    );
    let outcome = generation::generate(&mut model, &prompt, &settings, keep_logits, |id| {
        if !json_out {
            emit(stream.push(&codec, id)?)?;
        }
        Ok(())
    });
    model.codec = codec;
    let outcome = outcome?;
    if let Some(file) = args.get("--logits-out") {
        write_logits(file, &outcome, &model)?;
    }
    let peak = device::peak_memory_ranks(&devices);
    if json_out {
        let report = json!({
            "model": model.description,
            "device": device::describe_ranks(&devices),
            "tp": devices.len(),
            "dtype": model::dtype_name(model.dtype),
            "prompt_tokens": outcome.prompt.len(),
            "prompt_ids": outcome.prompt,
            "generated_ids": outcome.generated,
            "text": model.codec.decode(&outcome.generated)?,
            "time_to_first_token_ms": outcome.time_to_first_token.as_secs_f64() * 1e3,
            "prefill_tokens_per_s": outcome.prefill_tokens_per_s(),
            "decode_tokens_per_s": outcome.decode_tokens_per_s(),
            "peak_memory_bytes": peak.map(|p| p.0),
            "peak_memory_kind": peak.map(|p| p.1),
        });
        emit(format_args!("{report}\n"))?;
    } else {
        emit("\n")?;
        eprintln!(
            "time to first token: {:.1} ms",
            outcome.time_to_first_token.as_secs_f64() * 1e3
        );
        eprintln!("prefill: {:.1} tokens/s", outcome.prefill_tokens_per_s());
        eprintln!(
            "decode: {:.1} tokens/s ({} tokens)",
            outcome.decode_tokens_per_s(),
            outcome.generated.len()
        );
        match peak {
            Some((bytes, kind)) => eprintln!("peak memory: {:.1} MiB ({kind})", mib(bytes)),
            None => eprintln!("peak memory: unknown"),
        }
    }
    Ok(())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// Writes `outcome`'s logits to `file` and its ids to `file.json`.
fn write_logits(file: &str, outcome: &generation::Outcome, model: &Model) -> AppResult<()> {
    let mut bytes = Vec::with_capacity(outcome.logits.len() * model.vocab * 4);
    for row in &outcome.logits {
        for v in row {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
    }
    std::fs::write(file, bytes).map_err(|e| app_error(format!("{file}: {e}")))?;
    let meta = json!({
        "tokens": outcome.generated,
        "prompt_ids": outcome.prompt,
        "vocab": model.vocab,
        "device": device::describe(model.device()),
        "dtype": model::dtype_name(model.dtype),
    });
    std::fs::write(format!("{file}.json"), meta.to_string())
        .map_err(|e| app_error(format!("{file}.json: {e}")))?;
    Ok(())
}

fn write_model(args: &Args) -> AppResult<()> {
    args.reject_unknown(&["--shape", "--out", "--dtype", "--weights-seed"])
        .map_err(|e| usage_error(e.to_string()))?;
    let shape = shape(
        args.get("--shape")
            .ok_or_else(|| usage_error("write-model needs --shape"))?,
    )?;
    let out = args
        .get("--out")
        .ok_or_else(|| usage_error("write-model needs --out"))?;
    let dtype = model::parse_dtype(args.get("--dtype").unwrap_or("bf16"))
        .map_err(|e| usage_error(e.to_string()))?;
    let seed = args
        .number("--weights-seed")?
        .unwrap_or(DEFAULT_WEIGHTS_SEED);
    let start = std::time::Instant::now();
    let bytes = weights::write_model(&shape.config(), seed, dtype, std::path::Path::new(out))?;
    eprintln!(
        "generate: wrote {} ({}, seed {seed}, {:.2} GB of weights) to {out} in {:.1} s",
        shape.name(),
        model::dtype_name(dtype),
        bytes as f64 / 1e9,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn write_gguf(args: &Args) -> AppResult<()> {
    args.reject_unknown(&["--shape", "--quant", "--out", "--weights-seed"])
        .map_err(|e| usage_error(e.to_string()))?;
    let shape = shape(
        args.get("--shape")
            .ok_or_else(|| usage_error("write-gguf needs --shape"))?,
    )?;
    let name = args
        .get("--quant")
        .ok_or_else(|| usage_error("write-gguf needs --quant"))?;
    let scheme = Scheme::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = SCHEMES.iter().map(|(n, _)| *n).collect();
        usage_error(format!(
            "unknown --quant `{name}` (one of {})",
            names.join(", ")
        ))
    })?;
    let out = args
        .get("--out")
        .ok_or_else(|| usage_error("write-gguf needs --out"))?;
    let seed = args
        .number("--weights-seed")?
        .unwrap_or(DEFAULT_WEIGHTS_SEED);
    let start = std::time::Instant::now();
    let bytes = gguf::write(shape, seed, scheme, std::path::Path::new(out))?;
    eprintln!(
        "generate: wrote {} ({name}, seed {seed}, {:.2} GB of tensors) to {out} in {:.1} s",
        shape.name(),
        bytes as f64 / 1e9,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn bench(args: &Args) -> AppResult<()> {
    args.reject_unknown(&[
        "--model",
        "--shape",
        "--gguf",
        "--dtype",
        "--device",
        "--tp",
        "--batch",
        "--prompt-len",
        "--new-tokens",
        "--iters",
        "--json",
        "--weights-seed",
        "--flash-attn",
        "--no-flash-attn",
        "--graph",
    ])
    .map_err(|e| usage_error(e.to_string()))?;
    let (source, _) = source(args)?;
    let (devices, dtype) = devices_and_dtype(args)?;
    let batches = args.list("--batch", "1")?;
    if matches!(source, Source::Gguf(_)) && !args.flag("--graph") && batches.iter().any(|&b| b > 1)
    {
        return Err(usage_error(
            "--batch above 1 of a GGUF model needs --graph (candle-transformers' quantized \
             models decode one sequence)",
        ));
    }
    let prompts = args.list("--prompt-len", "512")?;
    let new_tokens = args.number("--new-tokens")?.unwrap_or(128);
    let iters = args.number("--iters")?.unwrap_or(3);
    let mut model = load(&source, dtype, &devices, args)?;
    let copy = generation::copy_bandwidth(&devices[0])?;
    for &batch in &batches {
        for &prompt_len in &prompts {
            let r = generation::bench(&mut model, batch, prompt_len, new_tokens, iters)?;
            let row = json!({
                "framework": "candle",
                "device": device::describe_ranks(&devices),
                "tp": devices.len(),
                "model": model.description,
                "dtype": model::dtype_name(model.dtype),
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
                "peak_memory_bytes": device::peak_memory_ranks(&devices).map(|p| p.0),
                "graph_nodes": model.graph_nodes(),
            });
            emit(format_args!("{row}\n"))?;
            if let Some(file) = args.get("--json") {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(file)
                    .map_err(|e| app_error(format!("{file}: {e}")))?;
                writeln!(f, "{row}").map_err(|e| app_error(format!("{file}: {e}")))?;
            }
        }
    }
    Ok(())
}
