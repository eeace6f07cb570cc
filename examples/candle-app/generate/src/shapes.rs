//! Named model shapes: the published configurations of real models (and the embedded tiny
//! default), as the `config.json` a Hugging Face model folder carries.

use serde_json::{Value, json};

/// A model configuration by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// The embedded default: a small Llama with a byte-level vocabulary.
    Tiny,
    /// TinyLlama-1.1B (Llama 2 architecture).
    TinyLlama1_1B,
    /// Llama-3.2-1B.
    Llama3_2_1B,
    /// Llama-3.1-8B.
    Llama3_1_8B,
    /// Qwen2.5-0.5B (Qwen2 architecture).
    Qwen2_5_0_5B,
}

/// Every shape with its command-line name.
pub const SHAPES: [(&str, Shape); 5] = [
    ("tiny", Shape::Tiny),
    ("tinyllama-1.1b", Shape::TinyLlama1_1B),
    ("llama-3.2-1b", Shape::Llama3_2_1B),
    ("llama-3.1-8b", Shape::Llama3_1_8B),
    ("qwen2.5-0.5b", Shape::Qwen2_5_0_5B),
];

/// Token ids of the byte-level vocabulary's specials in the tiny model: ids 0-255 are bytes.
pub const TINY_BOS: u32 = 256;
/// See [`TINY_BOS`].
pub const TINY_EOS: u32 = 257;

/// The `config.json` key that marks a folder whose tokenizer is the byte-level codec (the
/// seeded random-weight models): ids below 256 are bytes. Hugging Face transformers keeps
/// unknown keys as attributes and ignores them.
pub const BYTE_TOKENIZER_KEY: &str = "candle_app_byte_tokenizer";

impl Shape {
    /// The shape called `name` (see [`SHAPES`]).
    pub fn from_name(name: &str) -> Option<Shape> {
        SHAPES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
    }

    /// The command-line name.
    pub fn name(self) -> &'static str {
        SHAPES
            .iter()
            .find(|(_, s)| *s == self)
            .map_or("?", |(n, _)| *n)
    }

    /// The model's `config.json`, marked as using the byte-level tokenizer.
    pub fn config(self) -> Value {
        let llama3_rope = |factor: f64| {
            json!({
                "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192, "rope_type": "llama3"
            })
        };
        let mut config = match self {
            Shape::Tiny => llama(LlamaShape {
                hidden: 256,
                intermediate: 688,
                layers: 4,
                heads: 8,
                kv_heads: 2,
                vocab: 258,
                max_positions: 8192,
                rope_theta: 10_000.0,
                tied: false,
                bos: TINY_BOS,
                eos: TINY_EOS,
            }),
            Shape::TinyLlama1_1B => llama(LlamaShape {
                hidden: 2048,
                intermediate: 5632,
                layers: 22,
                heads: 32,
                kv_heads: 4,
                vocab: 32000,
                max_positions: 2048,
                rope_theta: 10_000.0,
                tied: false,
                bos: 1,
                eos: 2,
            }),
            Shape::Llama3_2_1B => {
                let mut c = llama(LlamaShape {
                    hidden: 2048,
                    intermediate: 8192,
                    layers: 16,
                    heads: 32,
                    kv_heads: 8,
                    vocab: 128_256,
                    max_positions: 131_072,
                    rope_theta: 500_000.0,
                    tied: true,
                    bos: 128_000,
                    eos: 128_001,
                });
                c["rope_scaling"] = llama3_rope(32.0);
                c
            }
            Shape::Llama3_1_8B => {
                let mut c = llama(LlamaShape {
                    hidden: 4096,
                    intermediate: 14336,
                    layers: 32,
                    heads: 32,
                    kv_heads: 8,
                    vocab: 128_256,
                    max_positions: 131_072,
                    rope_theta: 500_000.0,
                    tied: false,
                    bos: 128_000,
                    eos: 128_001,
                });
                c["rope_scaling"] = llama3_rope(8.0);
                c
            }
            Shape::Qwen2_5_0_5B => json!({
                "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151_936,
                "max_position_embeddings": 32768, "rope_theta": 1_000_000.0,
                "rms_norm_eps": 1e-6, "tie_word_embeddings": true, "hidden_act": "silu",
                "sliding_window": 32768, "max_window_layers": 21, "use_sliding_window": false,
                "bos_token_id": 151_643, "eos_token_id": 151_643, "attention_dropout": 0.0
            }),
        };
        config[BYTE_TOKENIZER_KEY] = Value::Bool(true);
        config
    }
}

/// The numbers that tell Llama configurations apart.
struct LlamaShape {
    hidden: usize,
    intermediate: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    vocab: usize,
    max_positions: usize,
    rope_theta: f64,
    tied: bool,
    bos: u32,
    eos: u32,
}

fn llama(s: LlamaShape) -> Value {
    json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": s.hidden, "intermediate_size": s.intermediate,
        "num_hidden_layers": s.layers, "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads, "vocab_size": s.vocab,
        "max_position_embeddings": s.max_positions, "rope_theta": s.rope_theta,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": s.tied, "hidden_act": "silu",
        "attention_bias": false, "mlp_bias": false,
        "bos_token_id": s.bos, "eos_token_id": s.eos
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (name, shape) in SHAPES {
            assert_eq!(Shape::from_name(name), Some(shape));
            assert_eq!(shape.name(), name);
        }
        assert_eq!(Shape::from_name("gpt-2"), None);
    }

    #[test]
    fn published_numbers() {
        let c = Shape::Llama3_1_8B.config();
        assert_eq!(c["hidden_size"], 4096);
        assert_eq!(c["num_hidden_layers"], 32);
        assert_eq!(c["rope_scaling"]["factor"], 8.0);
        assert_eq!(Shape::Qwen2_5_0_5B.config()["vocab_size"], 151_936);
    }
}
