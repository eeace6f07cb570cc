//! Loading a causal language model (Llama, Mistral, Qwen2, Qwen3 from candle-transformers)
//! from a Hugging Face model folder or a named shape, and one interface over the four.

use std::path::{Path, PathBuf};
use std::time::Duration;

use candle_core::{D, DType, Device, IndexOp, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{
    llama, mistral, quantized_llama, quantized_qwen2, quantized_qwen3, qwen2, qwen3,
};
use serde_json::Value;

use crate::codec::TextCodec;
use crate::gguf::Header;
use crate::graph_decode::GraphDecoder;
use crate::shapes::{BYTE_TOKENIZER_KEY, Shape};
use crate::static_cache::StaticLlama;
use crate::tensor_parallel::{Collectives, TensorParallelLlama, WeightSource};
use crate::{AppResult, app_error, timed, weights};

/// The static KV cache a graph-decoding model starts with, before [`Model::reserve`] sizes
/// it to a request.
const GRAPH_CACHE_POSITIONS: usize = 256;

/// The architectures this program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama 2 and 3 (`LlamaForCausalLM`).
    Llama,
    /// Mistral (`MistralForCausalLM`).
    Mistral,
    /// Qwen2 and Qwen2.5 (`Qwen2ForCausalLM`).
    Qwen2,
    /// Qwen3 (`Qwen3ForCausalLM`).
    Qwen3,
}

impl Arch {
    /// The architecture a `config.json` names (`architectures[0]`, else `model_type`).
    pub fn of(config: &Value) -> AppResult<Arch> {
        let named = config["architectures"][0]
            .as_str()
            .or_else(|| config["model_type"].as_str())
            .unwrap_or("");
        match named {
            "LlamaForCausalLM" | "llama" => Ok(Arch::Llama),
            "MistralForCausalLM" | "mistral" => Ok(Arch::Mistral),
            "Qwen2ForCausalLM" | "qwen2" => Ok(Arch::Qwen2),
            "Qwen3ForCausalLM" | "qwen3" => Ok(Arch::Qwen3),
            "" => Err(app_error(
                "config.json names no architecture (`architectures` or `model_type`)",
            )),
            other => Err(app_error(format!(
                "unknown architecture `{other}`: this program runs Llama, Mistral, Qwen2 and Qwen3"
            ))),
        }
    }
}

/// The dtype called `name` (`f32`, `f16`, `bf16`).
pub fn parse_dtype(name: &str) -> AppResult<DType> {
    match name {
        "f32" => Ok(DType::F32),
        "f16" => Ok(DType::F16),
        "bf16" => Ok(DType::BF16),
        other => Err(app_error(format!(
            "unknown dtype `{other}` (f32, f16 or bf16)"
        ))),
    }
}

/// Whether candle-hip's fused attention kernels serve `device` in `dtype`:
/// a HIP device in f16 or bf16 (candle-flash-attn's API computes anything
/// else unfused, and the CPU keeps candle-transformers' own attention).
pub fn fused_attention_runs(device: &Device, dtype: DType) -> bool {
    !device.is_cpu() && matches!(dtype, DType::F16 | DType::BF16)
}

/// The short name of a model dtype.
pub fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        _ => "f32",
    }
}

/// Where a model comes from.
#[derive(Clone, Debug)]
pub enum Source {
    /// A Hugging Face layout folder.
    Dir(PathBuf),
    /// A named shape with seeded random weights built in memory.
    Shape(Shape, u64),
    /// A GGUF file (quantized weights); its tokenizer is `tokenizer.json` next to it unless
    /// the file marks the byte-level tokenizer of the seeded models.
    Gguf(PathBuf),
}

/// A model's files checked before anything is loaded: the config and the weight files.
pub struct Folder {
    /// The parsed `config.json`.
    pub config: Value,
    /// `model.safetensors`, or every shard the index names.
    pub weights: Vec<PathBuf>,
}

impl Folder {
    /// Reads `dir`'s config and finds its weights; a missing file or shard is an error
    /// naming it.
    pub fn open(dir: &Path) -> AppResult<Folder> {
        if dir.is_file() {
            return Err(app_error(format!(
                "{} is a file, not a model folder (a GGUF file goes to --gguf)",
                dir.display()
            )));
        }
        if !dir.is_dir() {
            return Err(app_error(format!(
                "model folder {} does not exist",
                dir.display()
            )));
        }
        let config_file = dir.join("config.json");
        let text = std::fs::read_to_string(&config_file).map_err(|e| {
            app_error(format!(
                "{}: {e} (a model folder needs config.json)",
                config_file.display()
            ))
        })?;
        let config: Value = serde_json::from_str(&text)
            .map_err(|e| app_error(format!("{}: {e}", config_file.display())))?;
        let single = dir.join("model.safetensors");
        let index = dir.join("model.safetensors.index.json");
        let weights = if single.is_file() {
            vec![single]
        } else if index.is_file() {
            shards(dir, &index)?
        } else {
            return Err(app_error(format!(
                "{}: neither model.safetensors nor model.safetensors.index.json",
                dir.display()
            )));
        };
        Ok(Folder { config, weights })
    }
}

/// The shard files a safetensors index names, each checked to exist.
fn shards(dir: &Path, index: &Path) -> AppResult<Vec<PathBuf>> {
    let text = std::fs::read_to_string(index)
        .map_err(|e| app_error(format!("{}: {e}", index.display())))?;
    let json: Value =
        serde_json::from_str(&text).map_err(|e| app_error(format!("{}: {e}", index.display())))?;
    let map = json["weight_map"]
        .as_object()
        .ok_or_else(|| app_error(format!("{}: no weight_map", index.display())))?;
    let mut files: Vec<&str> = map.values().filter_map(Value::as_str).collect();
    files.sort_unstable();
    files.dedup();
    let mut out = Vec::new();
    for file in files {
        let path = dir.join(file);
        if !path.is_file() {
            return Err(app_error(format!(
                "{} names the shard {file}, which is missing (a partial download?)",
                index.display()
            )));
        }
        out.push(path);
    }
    Ok(out)
}

/// One of the supported models, with its KV cache.
enum Net {
    Llama(Box<llama::Llama>, Box<llama::Cache>, Box<llama::Config>),
    Mistral(Box<mistral::Model>),
    Qwen2(Box<qwen2::ModelForCausalLM>),
    Qwen3(Box<qwen3::ModelForCausalLM>),
    QuantizedLlama(Box<quantized_llama::ModelWeights>),
    QuantizedQwen2(Box<quantized_qwen2::ModelWeights>),
    QuantizedQwen3(Box<quantized_qwen3::ModelWeights>),
    /// A Llama split over several ranks (each with its own KV cache).
    TensorParallelLlama(Box<TensorParallelLlama>),
    /// A Llama with a static KV cache, decoding through a captured graph on HIP.
    GraphLlama(Box<GraphDecoder>),
}

/// A loaded model: the network, its tokenizer and what the config says.
pub struct Model {
    net: Net,
    /// The architecture.
    pub arch: Arch,
    /// The tokenizer.
    pub codec: TextCodec,
    /// Token ids that end generation.
    pub eos: Vec<u32>,
    /// The longest sequence the model takes (prompt and generated tokens).
    pub max_positions: usize,
    /// The vocabulary size (logits per token).
    pub vocab: usize,
    /// Bytes of all weights, in the model's dtype.
    pub weight_bytes: u64,
    /// The dtype the model computes in.
    pub dtype: DType,
    device: Device,
    /// A short description for reports.
    pub description: String,
}

impl Model {
    /// Loads the model from `source` in `dtype` onto `device` (a GGUF file computes in f32
    /// whatever `dtype` says).
    pub fn load(source: &Source, dtype: DType, device: &Device) -> AppResult<Model> {
        Model::load_with_flash_attn(source, dtype, device, false)
    }

    /// [`Model::load`], with fused attention (candle-flash-attn's API, which this workspace
    /// points at candle-hip) in the Llama and Mistral layers when `flash_attn` is set.
    /// candle-transformers' Qwen3 takes the fused path whenever its flash-attn feature is
    /// built, as it is here; Qwen2 and GGUF models have none.
    pub fn load_with_flash_attn(
        source: &Source,
        dtype: DType,
        device: &Device,
        flash_attn: bool,
    ) -> AppResult<Model> {
        if let Source::Gguf(path) = source {
            return Model::load_gguf(path, device, None);
        }
        check_dtype(dtype, device)?;
        let opened = Opened::new(source, dtype)?;
        let about = opened.about()?;
        opened.check_loadable(about.arch)?;
        let vb = opened.var_builder(dtype, device)?;
        let config = &opened.config;
        let bad =
            |e: serde_json::Error| app_error(format!("config.json for {:?}: {e}", about.arch));
        let net = match about.arch {
            Arch::Llama => {
                let cfg = opened.llama_config(flash_attn)?;
                let cache = llama::Cache::new(true, dtype, &cfg, device)?;
                let model = llama::Llama::load(vb, &cfg)?;
                Net::Llama(Box::new(model), Box::new(cache), Box::new(cfg))
            }
            Arch::Mistral => {
                let mut cfg: mistral::Config =
                    serde_json::from_value(config.clone()).map_err(bad)?;
                cfg.use_flash_attn = flash_attn;
                Net::Mistral(Box::new(mistral::Model::new(&cfg, vb)?))
            }
            Arch::Qwen2 => {
                let cfg: qwen2::Config = serde_json::from_value(config.clone()).map_err(bad)?;
                Net::Qwen2(Box::new(qwen2::ModelForCausalLM::new(&cfg, vb)?))
            }
            Arch::Qwen3 => {
                let cfg: qwen3::Config = serde_json::from_value(config.clone()).map_err(bad)?;
                Net::Qwen3(Box::new(qwen3::ModelForCausalLM::new(&cfg, vb)?))
            }
        };
        // The fused kernels run where the model calls candle-flash-attn's API and they serve
        // the device and dtype.
        let flash_api = match about.arch {
            Arch::Llama | Arch::Mistral => flash_attn,
            Arch::Qwen3 => true,
            Arch::Qwen2 => false,
        };
        let fused = flash_api && fused_attention_runs(device, dtype);
        let note = if fused { ", fused attention" } else { "" };
        Ok(opened.into_model(net, about, dtype, device, note))
    }

    /// Loads a Llama from `source` (a folder, a shape or a `llama` GGUF file) in `dtype`
    /// with a static KV cache whose one-token decode step is captured into a HIP graph and
    /// replayed (see [`crate::graph_decode`]; on the CPU the step runs eagerly). A GGUF
    /// file's matrices stay quantized (see [`StaticLlama::load_gguf`]). A batch of sequences
    /// of one length decodes together (the caches follow the prompt's batch); the cache
    /// length is set by [`Model::reserve`], which generation and the benchmark call.
    ///
    /// Errors: an architecture other than Llama, a dtype the device cannot compute in.
    pub fn load_graph_decode(source: &Source, dtype: DType, device: &Device) -> AppResult<Model> {
        if let Source::Gguf(path) = source {
            return Model::load_gguf(path, device, Some(dtype));
        }
        check_dtype(dtype, device)?;
        let opened = Opened::new(source, dtype)?;
        let about = opened.about()?;
        if about.arch != Arch::Llama {
            return Err(app_error(format!(
                "graph decoding runs Llama models; this one is {:?}",
                about.arch
            )));
        }
        let cfg = opened.llama_config(false)?;
        let vb = opened.var_builder(dtype, device)?;
        let initial = GRAPH_CACHE_POSITIONS.min(cfg.max_position_embeddings);
        let model = StaticLlama::load(vb, &cfg, initial)?;
        let net = Net::GraphLlama(Box::new(GraphDecoder::new(model)));
        Ok(opened.into_model(net, about, dtype, device, ", graph decoding"))
    }

    /// Loads a Llama from `source` (a folder or a shape) in `dtype`, split over the first
    /// `tp` of `devices` (rank `r` on `devices[r]`; the CPU may repeat) with one collective
    /// per rank from `collectives` (see [`crate::tensor_parallel`]). Generation, the timings
    /// and the benchmark run it as any model; its [`device`](Model::device) is rank 0's,
    /// where the logits come back, and `weight_bytes` counts the whole model.
    ///
    /// Errors: `tp` of 0 or more than `devices`, a GGUF file, an architecture other than
    /// Llama, sizes that `tp` does not divide, a dtype a device cannot compute in, and a
    /// rank's failure to load (naming it).
    pub fn load_tensor_parallel(
        source: &Source,
        dtype: DType,
        tp: usize,
        devices: &[Device],
        collectives: Collectives,
    ) -> AppResult<Model> {
        if tp == 0 {
            return Err(app_error(
                "tensor parallelism needs at least one rank (tp 0)",
            ));
        }
        if tp > devices.len() {
            return Err(app_error(format!(
                "tensor parallelism over {tp} ranks needs {tp} devices, {} given",
                devices.len()
            )));
        }
        if let Source::Gguf(path) = source {
            return Err(app_error(format!(
                "{}: GGUF models run on one device; tensor parallelism (tp {tp}) needs a \
                 model folder or a shape",
                path.display()
            )));
        }
        let opened = Opened::new(source, dtype)?;
        let about = opened.about()?;
        if about.arch != Arch::Llama {
            return Err(app_error(format!(
                "tensor parallelism (tp {tp}) runs Llama models; this one is {:?}",
                about.arch
            )));
        }
        let cfg = opened.llama_config(false)?;
        let devices = &devices[..tp];
        for device in devices {
            check_dtype(dtype, device)?;
        }
        let model = TensorParallelLlama::load(&cfg, dtype, devices, collectives, &opened.weights)?;
        let note = format!(", tensor parallel over {tp} ranks");
        let net = Net::TensorParallelLlama(Box::new(model));
        Ok(opened.into_model(net, about, dtype, &devices[0], &note))
    }

    /// Loads the GGUF file `path` onto `device`: Llama and Mistral files (architecture
    /// `llama`) through candle-transformers' `quantized_llama`, Qwen2 and Qwen3 through
    /// `quantized_qwen2` and `quantized_qwen3`, all computing in f32; with `graph` a dtype,
    /// a `llama` file as a [`StaticLlama`] computing in that dtype, decoding through a
    /// captured graph.
    fn load_gguf(path: &Path, device: &Device, graph: Option<DType>) -> AppResult<Model> {
        let dtype = graph.unwrap_or(DType::F32);
        check_dtype(dtype, device)?;
        let header = Header::read(path)?;
        let runnable = header.runnable_arch(path)?;
        let graph_config = match graph {
            Some(_) => Some(header.llama_config(path)?),
            None => None,
        };
        let max_positions = header.arch_number(path, "context_length")? as usize;
        let vocab = header.vocab(path)?;
        let eos: Vec<u32> = header
            .number("tokenizer.ggml.eos_token_id")
            .map(|v| v as u32)
            .into_iter()
            .collect();
        let codec = if header.byte_tokenizer() {
            let bos = header.number("tokenizer.ggml.bos_token_id").unwrap_or(0) as u32;
            TextCodec::Bytes { bos }
        } else {
            let dir = path.parent().unwrap_or(Path::new("."));
            TextCodec::from_dir(dir).map_err(|e| {
                app_error(format!(
                    "{}: the GGUF file needs tokenizer.json next to it: {e}",
                    path.display()
                ))
            })?
        };
        let (tensor_bytes, types) = (header.tensor_bytes, header.types.clone());
        let mut file =
            std::fs::File::open(path).map_err(|e| app_error(format!("{}: {e}", path.display())))?;
        let content = header.content;
        let (arch, net) = match (runnable, graph_config) {
            (_, Some(cfg)) => {
                let initial = GRAPH_CACHE_POSITIONS.min(cfg.max_position_embeddings);
                let model =
                    StaticLlama::load_gguf(&content, &mut file, &cfg, (dtype, device), initial)?;
                (
                    Arch::Llama,
                    Net::GraphLlama(Box::new(GraphDecoder::new(model))),
                )
            }
            (Arch::Llama | Arch::Mistral, None) => {
                let m = quantized_llama::ModelWeights::from_gguf(content, &mut file, device)?;
                (Arch::Llama, Net::QuantizedLlama(Box::new(m)))
            }
            (Arch::Qwen2, None) => {
                let m = quantized_qwen2::ModelWeights::from_gguf(content, &mut file, device)?;
                (Arch::Qwen2, Net::QuantizedQwen2(Box::new(m)))
            }
            (Arch::Qwen3, None) => {
                let m = quantized_qwen3::ModelWeights::from_gguf(content, &mut file, device)?;
                (Arch::Qwen3, Net::QuantizedQwen3(Box::new(m)))
            }
        };
        Ok(Model {
            net,
            arch,
            codec,
            eos,
            max_positions,
            vocab,
            weight_bytes: tensor_bytes,
            dtype,
            device: device.clone(),
            description: format!(
                "{arch:?} ({}: {types}){}",
                path.display(),
                if graph.is_some() {
                    ", graph decoding"
                } else {
                    ""
                }
            ),
        })
    }

    /// The device the model runs on (a tensor-parallel model's rank 0, which returns the
    /// logits).
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The number of tensor-parallel ranks (1 for a model on one device).
    pub fn ranks(&self) -> usize {
        match &self.net {
            Net::TensorParallelLlama(model) => model.world(),
            _ => 1,
        }
    }

    /// Runs `ids` (`[batch, tokens]`) at position `pos` (the tokens already in the KV cache)
    /// and returns the f32 logits of each sequence's last token, `[batch, vocab]`.
    pub fn forward(&mut self, ids: &Tensor, pos: usize) -> AppResult<Tensor> {
        let logits = match &mut self.net {
            Net::Llama(model, cache, _) => model.forward(ids, pos, cache)?,
            Net::Mistral(model) => model.forward(ids, pos)?.i((.., 0))?,
            Net::Qwen2(model) => model.forward(ids, pos)?.i((.., 0))?,
            Net::Qwen3(model) => model.forward(ids, pos)?.i((.., 0))?,
            Net::QuantizedLlama(model) => model.forward(ids, pos)?,
            Net::QuantizedQwen2(model) => model.forward(ids, pos)?,
            Net::QuantizedQwen3(model) => model.forward(ids, pos)?,
            Net::TensorParallelLlama(model) => model.forward(ids, pos)?,
            Net::GraphLlama(model) => model.forward(ids, pos)?,
        };
        Ok(logits.to_dtype(DType::F32)?)
    }

    /// Greedy decoding of one sequence: `steps` tokens after `token`, which sits at position
    /// `pos` (the prompt before it already run by [`forward`](Model::forward)), each the
    /// argmax of its logits on the device, handed to `on_token` as it reaches the host;
    /// `on_token` returning false stops. Returns how long the host waited for the tokens.
    /// A graph-decoding model chooses each token inside its captured step and reads it one
    /// step behind ([`GraphDecoder::decode_greedy`]); the others run
    /// [`forward`](Model::forward) and an argmax per step.
    pub fn decode_greedy(
        &mut self,
        token: u32,
        pos: usize,
        steps: usize,
        mut on_token: impl FnMut(u32) -> AppResult<bool>,
    ) -> AppResult<Duration> {
        if let Net::GraphLlama(model) = &mut self.net {
            return model.decode_greedy(token, pos, steps, on_token);
        }
        let (mut token, mut waited) = (token, Duration::ZERO);
        for step in 0..steps {
            let input = Tensor::new(&[[token]], &self.device)?;
            let chosen = self.forward(&input, pos + step)?.argmax(D::Minus1)?;
            token = timed(&mut waited, || Ok(chosen.to_vec1::<u32>()?[0]))?;
            if !on_token(token)? {
                break;
            }
        }
        Ok(waited)
    }

    /// Empties the KV cache (the next forward starts at position 0).
    pub fn reset(&mut self) -> AppResult<()> {
        match &mut self.net {
            Net::Llama(_, cache, cfg) => {
                **cache = llama::Cache::new(true, self.dtype, cfg, &self.device)?;
            }
            Net::Mistral(model) => model.clear_kv_cache(),
            Net::Qwen2(model) => model.clear_kv_cache(),
            Net::Qwen3(model) => model.clear_kv_cache(),
            Net::QuantizedLlama(model) => model.clear_kv_cache(),
            Net::QuantizedQwen2(model) => model.clear_kv_cache(),
            Net::QuantizedQwen3(model) => model.clear_kv_cache(),
            Net::TensorParallelLlama(model) => model.reset()?,
            // The prompt's forward overwrites the rows it uses; later rows are masked.
            Net::GraphLlama(_) => {}
        }
        Ok(())
    }

    /// Prepares for a sequence of `positions` tokens (prompt and generated): sizes the
    /// static KV cache of a graph-decoding model to it (see
    /// [`GraphDecoder::reserve`]); nothing for the other models.
    pub fn reserve(&mut self, positions: usize) -> AppResult<()> {
        if let Net::GraphLlama(model) = &mut self.net {
            model.reserve(positions, self.max_positions)?;
        }
        Ok(())
    }

    /// The operations of the captured decode step (the greedy one where it was captured), for
    /// a graph-decoding model that has decoded a token.
    pub fn graph_nodes(&self) -> Option<usize> {
        match &self.net {
            Net::GraphLlama(model) => model.graph_nodes(),
            _ => None,
        }
    }
}

/// A model folder or shape opened before any weight is loaded: its config, where its
/// weights are, and what the report says about it.
struct Opened {
    config: Value,
    weights: WeightSource,
    /// Bytes of all weights (the files' sizes, or the shape's parameters in the dtype).
    weight_bytes: u64,
    description: String,
    /// The folder, which holds the tokenizer (none for a shape).
    dir: Option<PathBuf>,
}

impl Opened {
    /// Opens `source` (a folder or a shape) for weights in `dtype`.
    fn new(source: &Source, dtype: DType) -> AppResult<Opened> {
        match source {
            Source::Dir(dir) => {
                let folder = Folder::open(dir)?;
                let weight_bytes = folder
                    .weights
                    .iter()
                    .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
                    .sum();
                Ok(Opened {
                    config: folder.config,
                    weights: WeightSource::Safetensors(folder.weights),
                    weight_bytes,
                    description: dir.display().to_string(),
                    dir: Some(dir.clone()),
                })
            }
            Source::Shape(shape, seed) => {
                let config = shape.config();
                let weight_bytes = weights::params(&config)?
                    .iter()
                    .map(|p| (p.dims.iter().product::<usize>() * dtype.size_in_bytes()) as u64)
                    .sum();
                Ok(Opened {
                    weights: WeightSource::Seeded {
                        config: config.clone(),
                        seed: *seed,
                    },
                    config,
                    weight_bytes,
                    description: format!("{} shape, random weights from seed {seed}", shape.name()),
                    dir: None,
                })
            }
            Source::Gguf(path) => Err(app_error(format!(
                "{}: a GGUF file is not a model folder or shape",
                path.display()
            ))),
        }
    }

    /// What the config says about the model around the network: the architecture, the
    /// context, the vocabulary, the end-of-sequence ids and the tokenizer.
    fn about(&self) -> AppResult<About> {
        let config = &self.config;
        let arch = Arch::of(config)?;
        let number = |key: &str| config[key].as_u64().map(|v| v as usize);
        let max_positions = number("max_position_embeddings")
            .ok_or_else(|| app_error("config.json: no max_position_embeddings"))?;
        let vocab = number("vocab_size").ok_or_else(|| app_error("config.json: no vocab_size"))?;
        let eos = match &config["eos_token_id"] {
            Value::Array(ids) => ids
                .iter()
                .filter_map(|v| v.as_u64())
                .map(|v| v as u32)
                .collect(),
            v => v.as_u64().map(|v| v as u32).into_iter().collect(),
        };
        let codec = if config[BYTE_TOKENIZER_KEY] == Value::Bool(true) {
            let bos = config["bos_token_id"].as_u64().unwrap_or(0) as u32;
            TextCodec::Bytes { bos }
        } else {
            match &self.dir {
                Some(dir) => TextCodec::from_dir(dir)?,
                None => return Err(app_error("a shape without a tokenizer")),
            }
        };
        Ok(About {
            arch,
            codec,
            eos,
            max_positions,
            vocab,
        })
    }

    /// Errors for what candle-transformers' loaders panic on: a configuration without
    /// attention heads or whose key/value heads do not divide them, and (for Llama, whose
    /// loader unwraps every layer's tensors) a layer tensor that the weight files lack or
    /// hold in another shape than the configuration makes it.
    fn check_loadable(&self, arch: Arch) -> AppResult<()> {
        let number = |key: &str| self.config[key].as_u64();
        let heads = number("num_attention_heads").unwrap_or(0);
        check_heads(
            "config.json",
            ("num_attention_heads", heads),
            (
                "num_key_value_heads",
                number("num_key_value_heads").unwrap_or(heads),
            ),
        )?;
        let WeightSource::Safetensors(files) = &self.weights else {
            return Ok(());
        };
        if arch != Arch::Llama {
            return Ok(());
        }
        // SAFETY: as for the VarBuilder over the same files (WeightSource::var_builder):
        // memory-mapped files nobody writes to while the program runs.
        let tensors = unsafe { candle_core::safetensors::MmapedSafetensors::multi(files)? };
        let layers = number("num_hidden_layers").unwrap_or(0);
        for param in weights::params(&self.config)? {
            if !param.name.starts_with("model.layers.") {
                continue;
            }
            let dims = tensors.get(&param.name).map(|view| view.shape().to_vec());
            match dims {
                Ok(dims) if dims == param.dims => {}
                Ok(dims) => {
                    return Err(app_error(format!(
                        "the weights hold {} as {dims:?}; config.json makes it {:?}",
                        param.name, param.dims
                    )));
                }
                Err(_) => {
                    return Err(app_error(format!(
                        "the weights have no {} (config.json has {layers} layers)",
                        param.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// The weights in `dtype` on `device` (a shape's are built whole in memory).
    fn var_builder(&self, dtype: DType, device: &Device) -> AppResult<VarBuilder<'static>> {
        Ok(match &self.weights {
            WeightSource::Seeded { config, seed } => {
                let tensors = weights::build(config, *seed, dtype, device)?;
                VarBuilder::from_tensors(tensors, dtype, device)
            }
            files => files.var_builder(dtype, device)?,
        })
    }

    /// The config as candle-transformers' Llama configuration, with fused attention when
    /// `flash_attn` is set.
    fn llama_config(&self, flash_attn: bool) -> AppResult<llama::Config> {
        let cfg: llama::LlamaConfig = serde_json::from_value(self.config.clone())
            .map_err(|e| app_error(format!("config.json for Llama: {e}")))?;
        Ok(cfg.into_config(flash_attn))
    }

    /// The model around `net`, whose config said `about`.
    fn into_model(
        self,
        net: Net,
        about: About,
        dtype: DType,
        device: &Device,
        note: &str,
    ) -> Model {
        Model {
            net,
            arch: about.arch,
            codec: about.codec,
            eos: about.eos,
            max_positions: about.max_positions,
            vocab: about.vocab,
            weight_bytes: self.weight_bytes,
            dtype,
            device: device.clone(),
            description: format!("{:?} ({}){note}", about.arch, self.description),
        }
    }
}

/// What a config says besides the network (see [`Opened::about`]).
struct About {
    arch: Arch,
    codec: TextCodec,
    eos: Vec<u32>,
    max_positions: usize,
    vocab: usize,
}

/// Fails unless the `(name, count)` of attention heads is a positive multiple of that of
/// key/value heads, which candle-transformers' loaders divide by; `source` (a file) starts
/// the message.
pub(crate) fn check_heads(
    source: &str,
    (heads_key, heads): (&str, u64),
    (kv_key, kv_heads): (&str, u64),
) -> AppResult<()> {
    if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 {
        return Err(app_error(format!(
            "{source}: {heads_key} ({heads}) must be a positive multiple of {kv_key} \
             ({kv_heads})"
        )));
    }
    Ok(())
}

/// Fails clearly when `device` cannot compute in `dtype` (a small matmul is tried).
fn check_dtype(dtype: DType, device: &Device) -> AppResult<()> {
    let probe = Tensor::ones((2, 2), dtype, device).and_then(|t| t.matmul(&t));
    probe.map(|_| ()).map_err(|e| {
        app_error(format!(
            "dtype {} cannot run on {:?}: {e}",
            dtype_name(dtype),
            device.location()
        ))
    })
}
