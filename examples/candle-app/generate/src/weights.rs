//! Seeded random weights for a configuration: the same values on every machine and device
//! (they are made on the host from a counter-based generator), built in memory or written as
//! a Hugging Face model folder. Decode speed does not depend on weight values; correctness
//! checks only need both sides to load the same ones.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use serde_json::Value;

use crate::{AppResult, app_error};

/// One parameter: its name, shape and how it is initialised.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    /// The Hugging Face name, e.g. `model.layers.0.self_attn.q_proj.weight`.
    pub name: String,
    /// Its dimensions.
    pub dims: Vec<usize>,
    /// Its initialisation.
    pub init: Init,
}

/// How a parameter is initialised.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Every element 1 (normalisation weights).
    Ones,
    /// Uniform with mean 0 and this standard deviation.
    Uniform(f64),
}

/// A number the configuration must hold.
fn field(config: &Value, key: &str) -> AppResult<usize> {
    config[key]
        .as_u64()
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(|| app_error(format!("config.json: `{key}` is missing or not a number")))
}

/// The parameters of a Llama-family configuration (Llama, Mistral, Qwen2: the same names;
/// Qwen2 adds q/k/v biases). Projections have standard deviation 1/sqrt(fan-in), so that
/// activations stay of order one; the output embedding has 4/sqrt(hidden), so that logits
/// spread over several units and greedy choices are clear rather than near ties.
pub fn params(config: &Value) -> AppResult<Vec<Param>> {
    let hidden = field(config, "hidden_size")?;
    let inter = field(config, "intermediate_size")?;
    let layers = field(config, "num_hidden_layers")?;
    let heads = field(config, "num_attention_heads")?;
    let kv_heads = config["num_key_value_heads"]
        .as_u64()
        .map_or(heads, |v| v as usize);
    let vocab = field(config, "vocab_size")?;
    if heads == 0 || hidden % heads != 0 {
        return Err(app_error(format!(
            "config.json: hidden_size {hidden} is not a multiple of num_attention_heads {heads}"
        )));
    }
    let head_dim = config["head_dim"]
        .as_u64()
        .map_or(hidden / heads, |v| v as usize);
    let qkv_bias = config["model_type"] == "qwen2";
    let tied = config["tie_word_embeddings"].as_bool().unwrap_or(false);
    let std = |fan_in: usize| Init::Uniform(1.0 / (fan_in as f64).sqrt());
    let out_std = Init::Uniform(4.0 / (hidden as f64).sqrt());
    let p = |name: String, dims: Vec<usize>, init| Param { name, dims, init };

    let mut out = vec![p(
        "model.embed_tokens.weight".into(),
        vec![vocab, hidden],
        out_std,
    )];
    for i in 0..layers {
        let l = format!("model.layers.{i}");
        for (proj, rows) in [
            ("q_proj", heads * head_dim),
            ("k_proj", kv_heads * head_dim),
            ("v_proj", kv_heads * head_dim),
        ] {
            out.push(p(
                format!("{l}.self_attn.{proj}.weight"),
                vec![rows, hidden],
                std(hidden),
            ));
            if qkv_bias {
                out.push(p(
                    format!("{l}.self_attn.{proj}.bias"),
                    vec![rows],
                    Init::Uniform(0.02),
                ));
            }
        }
        out.push(p(
            format!("{l}.self_attn.o_proj.weight"),
            vec![hidden, heads * head_dim],
            std(heads * head_dim),
        ));
        out.push(p(
            format!("{l}.mlp.gate_proj.weight"),
            vec![inter, hidden],
            std(hidden),
        ));
        out.push(p(
            format!("{l}.mlp.up_proj.weight"),
            vec![inter, hidden],
            std(hidden),
        ));
        out.push(p(
            format!("{l}.mlp.down_proj.weight"),
            vec![hidden, inter],
            std(inter),
        ));
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            out.push(p(format!("{l}.{norm}.weight"), vec![hidden], Init::Ones));
        }
    }
    out.push(p("model.norm.weight".into(), vec![hidden], Init::Ones));
    if !tied {
        out.push(p("lm_head.weight".into(), vec![vocab, hidden], out_std));
    }
    Ok(out)
}

/// A 64-bit mix of `x` (SplitMix64's finaliser): element `i` of parameter `k` under seed `s`
/// is a function of `(s, k, i)` alone, so any chunk can be filled on any thread.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The values of parameter number `index` as f32, filled in parallel.
pub fn values(param: &Param, index: usize, seed: u64) -> Vec<f32> {
    let n: usize = param.dims.iter().product();
    let Init::Uniform(std) = param.init else {
        return vec![1.0; n];
    };
    // Uniform on [-a, a) has standard deviation a / sqrt(3).
    let half_width = (std * 3f64.sqrt()) as f32;
    let stream = mix(seed ^ mix(index as u64 + 1));
    let mut data = vec![0f32; n];
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let chunk = n.div_ceil(threads).max(1 << 16);
    std::thread::scope(|scope| {
        for (c, part) in data.chunks_mut(chunk).enumerate() {
            scope.spawn(move || {
                let base = (c * chunk) as u64;
                for (i, v) in part.iter_mut().enumerate() {
                    let bits = mix(stream.wrapping_add(base + i as u64));
                    // 24 random bits to a float in [0, 1).
                    let unit = (bits >> 40) as f32 / (1u64 << 24) as f32;
                    *v = (2.0 * unit - 1.0) * half_width;
                }
            });
        }
    });
    data
}

/// Every parameter of `config` as a tensor of `dtype` on `device`, from `seed`.
pub fn build(
    config: &Value,
    seed: u64,
    dtype: DType,
    device: &Device,
) -> AppResult<HashMap<String, Tensor>> {
    let mut out = HashMap::new();
    for (index, param) in params(config)?.into_iter().enumerate() {
        let data = values(&param, index, seed);
        let tensor = Tensor::from_vec(data, param.dims.as_slice(), &Device::Cpu)?
            .to_dtype(dtype)?
            .to_device(device)?;
        out.insert(param.name, tensor);
    }
    Ok(out)
}

/// Writes a model folder: `config.json` (with the dtype) and `model.safetensors` holding the
/// seeded weights. The tokenizer is the byte-level codec the config marks.
pub fn write_model(config: &Value, seed: u64, dtype: DType, dir: &Path) -> AppResult<u64> {
    std::fs::create_dir_all(dir)
        .map_err(|e| app_error(format!("cannot create {}: {e}", dir.display())))?;
    let mut config = config.clone();
    let name = crate::model::dtype_name(dtype);
    config["torch_dtype"] = Value::from(hf_dtype(dtype));
    config["dtype"] = Value::from(hf_dtype(dtype));
    config["candle_app_seed"] = Value::from(seed);
    config["candle_app_dtype"] = Value::from(name);
    let tensors = build(&config, seed, dtype, &Device::Cpu)?;
    let bytes: u64 = tensors
        .values()
        .map(|t| (t.elem_count() * t.dtype().size_in_bytes()) as u64)
        .sum();
    let weights = dir.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &weights)
        .map_err(|e| app_error(format!("cannot write {}: {e}", weights.display())))?;
    let text = serde_json::to_string_pretty(&config)?;
    std::fs::write(dir.join("config.json"), text)
        .map_err(|e| app_error(format!("cannot write config.json: {e}")))?;
    Ok(bytes)
}

/// The dtype's name in a Hugging Face config.
fn hf_dtype(dtype: DType) -> &'static str {
    match dtype {
        DType::BF16 => "bfloat16",
        DType::F16 => "float16",
        _ => "float32",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shapes::Shape;

    #[test]
    fn parameter_count_of_llama_3_1_8b() {
        let total: usize = params(&Shape::Llama3_1_8B.config())
            .unwrap()
            .iter()
            .map(|p| p.dims.iter().product::<usize>())
            .sum();
        assert_eq!(total, 8_030_261_248);
    }

    #[test]
    fn values_depend_on_seed_and_index_only() {
        let p = Param {
            name: "w".into(),
            dims: vec![300, 1000],
            init: Init::Uniform(0.5),
        };
        let a = values(&p, 3, 7);
        assert_eq!(a, values(&p, 3, 7));
        assert_ne!(a, values(&p, 4, 7));
        let mean = a.iter().map(|&v| v as f64).sum::<f64>() / a.len() as f64;
        let var = a.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / a.len() as f64;
        assert!(
            mean.abs() < 0.01 && (var.sqrt() - 0.5).abs() < 0.01,
            "{mean} {var}"
        );
    }
}
