//! GGUF files: seeded random-weight models written as quantized GGUF files (the test and
//! benchmark inputs, made here since no real weights are reachable), and the quantized
//! architectures of candle-transformers that read them.
//!
//! A written file holds the tensors under llama.cpp's names (`token_embd.weight`,
//! `blk.N.attn_q.weight`, ...) with the metadata candle-transformers' `quantized_llama`,
//! `quantized_qwen2` and `quantized_qwen3` read. The matrices are the same seeded values as the
//! safetensors models of [`crate::weights`], in the Hugging Face row order: llama.cpp's
//! converter permutes the query and key rows of Llama models for its interleaved rotary
//! embedding, which changes what a model computes but not its cost, so for random weights it
//! is left out. The normalisation weights are seeded too, 1 ± 0.1 instead of exactly 1 (as in
//! trained models): with unit weights, the first layer's normalised embeddings are exact
//! multiples of a Q4_0/Q5_0 embedding's quantization step, so the 8-bit rounding of the
//! activations meets exact ties that the last bit of the normalisation decides, and two correct
//! implementations (candle's CPU and HIP) part ways there.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::gguf_file::{self, Value as GgufValue};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use candle_transformers::models::llama::Config;
use serde_json::Value;

use crate::model::{Arch, check_heads};
use crate::shapes::{BYTE_TOKENIZER_KEY, Shape};
use crate::weights::{Init, Param};
use crate::{AppResult, app_error, weights};

/// How the weight matrices of a written file are quantized (norms and biases stay f32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Every matrix in one block type.
    Uniform(GgmlDType),
    /// llama.cpp's Q4_K_M mix: Q4_K, with Q6_K for the output matrix and for `attn_v` and
    /// `ffn_down` in the first and last eighth of the layers and every third layer between.
    Q4KM,
}

/// The schemes by name.
pub const SCHEMES: [(&str, Scheme); 5] = [
    ("q4_0", Scheme::Uniform(GgmlDType::Q4_0)),
    ("q8_0", Scheme::Uniform(GgmlDType::Q8_0)),
    ("q4k", Scheme::Uniform(GgmlDType::Q4K)),
    ("q6k", Scheme::Uniform(GgmlDType::Q6K)),
    ("q4km", Scheme::Q4KM),
];

impl Scheme {
    /// The scheme called `name` (see [`SCHEMES`]).
    pub fn from_name(name: &str) -> Option<Scheme> {
        SCHEMES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
    }

    /// The block type of tensor `name` (llama.cpp's name) of a model with `layers` layers.
    fn block_type(self, name: &str, layers: usize) -> GgmlDType {
        match self {
            Scheme::Uniform(t) => t,
            Scheme::Q4KM => {
                let layer = name
                    .strip_prefix("blk.")
                    .and_then(|r| r.split('.').next())
                    .and_then(|n| n.parse::<usize>().ok());
                let more_bits = |i: usize| i < layers / 8 || i >= 7 * layers / 8 || i % 3 == 2;
                let sensitive =
                    name.ends_with("attn_v.weight") || name.ends_with("ffn_down.weight");
                match layer {
                    _ if name == "output.weight" => GgmlDType::Q6K,
                    Some(i) if sensitive && more_bits(i) => GgmlDType::Q6K,
                    _ => GgmlDType::Q4K,
                }
            }
        }
    }
}

/// The block type a matrix with rows of `cols` values gets instead of `wanted` when its rows
/// are not whole blocks, as llama.cpp falls back: a 32-value type of similar size, else f16.
fn fitting_type(wanted: GgmlDType, cols: usize) -> GgmlDType {
    if cols % wanted.block_size() == 0 {
        return wanted;
    }
    let fallback = match wanted {
        GgmlDType::Q2K | GgmlDType::Q3K | GgmlDType::Q4K => GgmlDType::Q5_0,
        GgmlDType::Q5K => GgmlDType::Q5_1,
        _ => GgmlDType::Q8_0,
    };
    if cols % fallback.block_size() == 0 {
        fallback
    } else {
        GgmlDType::F16
    }
}

/// llama.cpp's name of a Hugging Face parameter of the Llama family.
fn gguf_name(hf: &str) -> AppResult<String> {
    let unknown = || app_error(format!("no GGUF name for parameter {hf}"));
    let fixed = match hf {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(name) = fixed {
        return Ok(name.to_string());
    }
    let rest = hf.strip_prefix("model.layers.").ok_or_else(unknown)?;
    let (layer, part) = rest.split_once('.').ok_or_else(unknown)?;
    let part = match part {
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.q_proj.bias" => "attn_q.bias",
        "self_attn.k_proj.bias" => "attn_k.bias",
        "self_attn.v_proj.bias" => "attn_v.bias",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "self_attn.q_norm.weight" => "attn_q_norm.weight",
        "self_attn.k_norm.weight" => "attn_k_norm.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        "input_layernorm.weight" => "attn_norm.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        _ => return Err(unknown()),
    };
    Ok(format!("blk.{layer}.{part}"))
}

/// The GGUF metadata of `config` under architecture `arch` (`llama` or `qwen2`).
fn metadata(config: &Value, arch: &str) -> AppResult<Vec<(String, GgufValue)>> {
    let num = |key: &str| {
        config[key]
            .as_u64()
            .map(|v| v as u32)
            .ok_or_else(|| app_error(format!("config: no {key}")))
    };
    let hidden = num("hidden_size")?;
    let heads = num("num_attention_heads")?;
    let head_dim = config["head_dim"]
        .as_u64()
        .map_or(hidden / heads, |v| v as u32);
    let key = |k: &str| format!("{arch}.{k}");
    let eps = config["rms_norm_eps"].as_f64().unwrap_or(1e-5) as f32;
    let theta = config["rope_theta"].as_f64().unwrap_or(10_000.0) as f32;
    Ok(vec![
        (
            "general.architecture".into(),
            GgufValue::String(arch.into()),
        ),
        (key("attention.head_count"), GgufValue::U32(heads)),
        (
            key("attention.head_count_kv"),
            GgufValue::U32(num("num_key_value_heads").unwrap_or(heads)),
        ),
        (key("attention.key_length"), GgufValue::U32(head_dim)),
        (
            key("block_count"),
            GgufValue::U32(num("num_hidden_layers")?),
        ),
        (key("embedding_length"), GgufValue::U32(hidden)),
        (
            key("feed_forward_length"),
            GgufValue::U32(num("intermediate_size")?),
        ),
        (
            key("context_length"),
            GgufValue::U32(num("max_position_embeddings")?),
        ),
        (key("vocab_size"), GgufValue::U32(num("vocab_size")?)),
        (key("rope.dimension_count"), GgufValue::U32(head_dim)),
        (key("rope.freq_base"), GgufValue::F32(theta)),
        (key("attention.layer_norm_rms_epsilon"), GgufValue::F32(eps)),
        (
            "tokenizer.ggml.bos_token_id".into(),
            GgufValue::U32(num("bos_token_id")?),
        ),
        (
            "tokenizer.ggml.eos_token_id".into(),
            GgufValue::U32(num("eos_token_id")?),
        ),
        (BYTE_TOKENIZER_KEY.into(), GgufValue::Bool(true)),
    ])
}

/// Writes `shape` with weights from `seed`, quantized by `scheme`, as the GGUF file `path`.
/// Returns the bytes of tensor data written.
pub fn write(shape: Shape, seed: u64, scheme: Scheme, path: &Path) -> AppResult<u64> {
    let config = shape.config();
    let arch = match config["model_type"].as_str() {
        Some("qwen2") => "qwen2",
        _ => "llama",
    };
    let layers = config["num_hidden_layers"].as_u64().unwrap_or(0) as usize;
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    for (index, param) in weights::params(&config)?.into_iter().enumerate() {
        let name = gguf_name(&param.name)?;
        let values = match param.init {
            Init::Ones => {
                let spread = Param {
                    init: Init::Uniform(0.1 / 3f64.sqrt()),
                    ..param.clone()
                };
                let noise = weights::values(&spread, index, seed);
                noise.into_iter().map(|v| 1.0 + v).collect()
            }
            Init::Uniform(_) => weights::values(&param, index, seed),
        };
        let t = Tensor::from_vec(values, param.dims.as_slice(), &Device::Cpu)?;
        let block = match param.dims.as_slice() {
            [_, cols] => fitting_type(scheme.block_type(&name, layers), *cols),
            _ => GgmlDType::F32,
        };
        let q = match block {
            GgmlDType::F32 => QTensor::quantize(&t, GgmlDType::F32)?,
            GgmlDType::F16 => QTensor::quantize(&t.to_dtype(DType::F16)?, GgmlDType::F16)?,
            block => quantize_rows(&t, block)?,
        };
        tensors.push((name, q));
    }
    let bytes = tensors
        .iter()
        .map(|(_, t)| t.storage_size_in_bytes() as u64)
        .sum();
    let meta = metadata(&config, arch)?;
    let meta_refs: Vec<(&str, &GgufValue)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut file = std::fs::File::create(path)
        .map_err(|e| app_error(format!("cannot create {}: {e}", path.display())))?;
    gguf_file::write(&mut file, &meta_refs, &tensor_refs)?;
    Ok(bytes)
}

/// `t` (`[rows, cols]` f32, rows of whole `block` blocks) quantized by candle's quantizer,
/// chunks of rows on all cores at once: blocks never span rows, so the bytes are those of
/// quantizing `t` whole (an 8B shape's Q4_K matrices take minutes on one core).
fn quantize_rows(t: &Tensor, block: GgmlDType) -> AppResult<QTensor> {
    let (rows, cols) = t.dims2()?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = rows.div_ceil(threads).max(1);
    let parts: Vec<AppResult<Vec<u8>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..rows)
            .step_by(chunk)
            .map(|r0| {
                scope.spawn(move || -> AppResult<Vec<u8>> {
                    // A copy of its own: candle's quantizer reads a tensor's storage
                    // from its start, whatever the view's offset.
                    let part = t.narrow(0, r0, chunk.min(rows - r0))?.force_contiguous()?;
                    Ok(QTensor::quantize(&part, block)?.data()?.into_owned())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(app_error("a quantizing thread panicked")))
            })
            .collect()
    });
    let mut bytes = Vec::new();
    for part in parts {
        bytes.extend_from_slice(&part?);
    }
    Ok(qtensor_from_ggml(
        block,
        &bytes,
        vec![rows, cols],
        &Device::Cpu,
    )?)
}

/// A GGUF file's header, read and checked before its tensors are loaded.
pub struct Header {
    /// The parsed header (metadata and tensor table).
    pub content: gguf_file::Content,
    /// `general.architecture`.
    pub arch: String,
    /// Bytes of tensor data.
    pub tensor_bytes: u64,
    /// How many tensors each block type has, for reports (`q4k x 112, f32 x 45`).
    pub types: String,
}

impl Header {
    /// Reads the header of `path`.
    pub fn read(path: &Path) -> AppResult<Header> {
        let mut file =
            std::fs::File::open(path).map_err(|e| app_error(format!("{}: {e}", path.display())))?;
        let content = gguf_file::Content::read(&mut file)
            .map_err(|e| app_error(format!("{}: not a readable GGUF file: {e}", path.display())))?;
        let arch = match content.metadata.get("general.architecture") {
            Some(GgufValue::String(a)) => a.clone(),
            _ => {
                return Err(app_error(format!(
                    "{}: no general.architecture",
                    path.display()
                )));
            }
        };
        let file_len = file
            .metadata()
            .map_err(|e| app_error(format!("{}: {e}", path.display())))?
            .len();
        let mut counts: HashMap<GgmlDType, usize> = HashMap::new();
        let mut tensor_bytes = 0u64;
        for (name, info) in &content.tensor_infos {
            *counts.entry(info.ggml_dtype).or_default() += 1;
            let elems = info.shape.elem_count();
            let bytes = (elems / info.ggml_dtype.block_size() * info.ggml_dtype.type_size()) as u64;
            tensor_bytes += bytes;
            // Loaders skip some tensors they fail to read (quantized_llama ties a missing
            // output.weight to the embeddings), so a cut file is refused here.
            let end = content
                .tensor_data_offset
                .checked_add(info.offset)
                .and_then(|start| start.checked_add(bytes));
            if end.is_none_or(|end| end > file_len) {
                return Err(app_error(format!(
                    "{}: truncated: tensor {name} ends past the file's {file_len} bytes",
                    path.display()
                )));
            }
        }
        let mut counts: Vec<(GgmlDType, usize)> = counts.into_iter().collect();
        counts.sort_by_key(|(t, n)| (std::cmp::Reverse(*n), format!("{t:?}")));
        let types = counts
            .iter()
            .map(|(t, n)| format!("{t:?} x {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        Ok(Header {
            content,
            arch,
            tensor_bytes,
            types,
        })
    }

    /// The metadata number `key`.
    pub fn number(&self, key: &str) -> Option<u64> {
        match self.content.metadata.get(key)? {
            GgufValue::U32(n) => Some(u64::from(*n)),
            GgufValue::U64(n) => Some(*n),
            GgufValue::I32(n) => u64::try_from(*n).ok(),
            GgufValue::I64(n) => u64::try_from(*n).ok(),
            _ => None,
        }
    }

    /// The configuration of a `llama` file as candle-transformers' Llama takes it, with
    /// `quantized_llama`'s reading of the metadata: RoPE over the whole head at
    /// `rope.freq_base` (10000 when absent) with no rescaling, `output.weight` or else the
    /// embeddings tied. `path` names the file in errors.
    ///
    /// Errors: another architecture, a missing or zero size, a RoPE dimension other than
    /// the head's, no epsilon.
    pub fn llama_config(&self, path: &Path) -> AppResult<Config> {
        if self.arch != "llama" {
            return Err(app_error(format!(
                "{}: a {} file, not llama",
                path.display(),
                self.arch
            )));
        }
        let size = |key: &str| match self.arch_number(path, key)? {
            0 => Err(app_error(format!("{}: llama.{key} is 0", path.display()))),
            n => Ok(n as usize),
        };
        let float = |key: &str| match self.content.metadata.get(&format!("llama.{key}")) {
            Some(GgufValue::F32(v)) => Some(*v),
            _ => None,
        };
        let (hidden, heads) = (size("embedding_length")?, size("attention.head_count")?);
        let rope_dim = size("rope.dimension_count")?;
        if rope_dim * heads != hidden {
            return Err(app_error(format!(
                "{}: RoPE over {rope_dim} of each head's {} dimensions (only whole heads \
                 are supported)",
                path.display(),
                hidden / heads
            )));
        }
        let vocab = self.vocab(path)?;
        Ok(Config {
            hidden_size: hidden,
            intermediate_size: size("feed_forward_length")?,
            vocab_size: vocab,
            num_hidden_layers: size("block_count")?,
            num_attention_heads: heads,
            num_key_value_heads: size("attention.head_count_kv")?,
            use_flash_attn: false,
            rms_norm_eps: float("attention.layer_norm_rms_epsilon").ok_or_else(|| {
                app_error(format!(
                    "{}: no llama.attention.layer_norm_rms_epsilon",
                    path.display()
                ))
            })? as f64,
            rope_theta: float("rope.freq_base").unwrap_or(10_000.0),
            bos_token_id: None,
            eos_token_id: None,
            rope_scaling: None,
            max_position_embeddings: size("context_length")?,
            tie_word_embeddings: !self.content.tensor_infos.contains_key("output.weight"),
        })
    }

    /// The metadata number `<architecture>.key`. `path` names the file in errors.
    pub fn arch_number(&self, path: &Path, key: &str) -> AppResult<u64> {
        let full = format!("{}.{key}", self.arch);
        self.number(&full)
            .ok_or_else(|| app_error(format!("{}: no {full}", path.display())))
    }

    /// The file's architecture, or an error unless it is one this program runs (llama,
    /// mistral, qwen2, qwen3) with attention heads that its key/value heads divide, which
    /// candle-transformers' loaders divide by. `path` names the file in errors.
    pub fn runnable_arch(&self, path: &Path) -> AppResult<Arch> {
        let arch = match self.arch.as_str() {
            "llama" => Arch::Llama,
            "mistral" => Arch::Mistral,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            other => {
                return Err(app_error(format!(
                    "{}: unknown GGUF architecture `{other}` (this program runs llama, \
                     mistral, qwen2 and qwen3)",
                    path.display()
                )));
            }
        };
        let (heads_key, kv_key) = (
            format!("{}.attention.head_count", self.arch),
            format!("{}.attention.head_count_kv", self.arch),
        );
        let heads = self.arch_number(path, "attention.head_count")?;
        let kv_heads = self.number(&kv_key).unwrap_or(heads);
        check_heads(
            &path.display().to_string(),
            (&heads_key, heads),
            (&kv_key, kv_heads),
        )?;
        Ok(arch)
    }

    /// The vocabulary size: the rows of `token_embd.weight`. `path` names the file in
    /// errors.
    pub fn vocab(&self, path: &Path) -> AppResult<usize> {
        self.content
            .tensor_infos
            .get("token_embd.weight")
            .and_then(|info| info.shape.dims().first().copied())
            .ok_or_else(|| app_error(format!("{}: no token_embd.weight", path.display())))
    }

    /// Whether the file marks the byte-level tokenizer of the seeded models.
    pub fn byte_tokenizer(&self) -> bool {
        matches!(
            self.content.metadata.get(BYTE_TOKENIZER_KEY),
            Some(GgufValue::Bool(true))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantizing_rows_in_parallel_gives_the_whole_tensors_bytes() {
        let values: Vec<f32> = (0..37 * 512)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let t = Tensor::from_vec(values, (37, 512), &Device::Cpu).unwrap();
        for block in [
            GgmlDType::Q4_0,
            GgmlDType::Q8_0,
            GgmlDType::Q4K,
            GgmlDType::Q6K,
        ] {
            let whole = QTensor::quantize(&t, block).unwrap();
            let rows = quantize_rows(&t, block).unwrap();
            assert_eq!(rows.shape().dims(), [37, 512]);
            assert_eq!(rows.dtype(), block);
            let (a, b) = (rows.data().unwrap(), whole.data().unwrap());
            let first = a.iter().zip(b.iter()).position(|(x, y)| x != y);
            assert!(a == b, "{block:?}: first difference at byte {first:?}");
        }
    }
}
