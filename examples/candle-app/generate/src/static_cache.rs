//! A Llama whose one-token decode step has static shapes, so that it can be recorded once
//! into a HIP graph and replayed for every token.
//!
//! [`StaticLlama`] holds the weights of candle-transformers' `llama` (same tensor names, same
//! operations: RMS norm, RoPE with Llama 3's rescaling, grouped-query attention with f32
//! softmax, SwiGLU, tied or separate `lm_head`) and, per layer and per sequence of its batch,
//! a key and a value cache of a fixed `max_len` positions, allocated once and zeroed. Two ways
//! in:
//!
//! - [`StaticLlama::forward`] runs a chunk of tokens at a host-known position (the prompt):
//!   it writes the chunk's keys and values into the caches with `slice_set` and attends,
//!   causally, over cache positions `0..pos + tokens`. Its shapes follow the chunk.
//! - [`StaticLlama::step`] runs one token of each sequence, whose ids and position it reads
//!   from fixed device tensors, which [`StaticLlama::set_step_inputs`] fills before each
//!   step. Nothing in it depends on the position on the host: the RoPE row is an
//!   `index_select` of the tables at the device position and the keys and values are
//!   written with `scatter_set` at indices made from that position (on HIP, one kernel
//!   reads the position and does both, see below), and the attention reads the number of
//!   filled positions from the device too. Every call therefore launches the same kernels
//!   with the same shapes and arguments, reads nothing back to the host, and leaves its
//!   results only in the caches and in a fixed logits tensor ([`StaticLlama::step_logits`]),
//!   which is what graph capture needs.
//!
//! Attention never repeats the caches per query head (candle-transformers' `repeat_kv`
//! copies them). On a HIP device in f16/bf16 it is candle-hip's fused kernel: the prompt's
//! through candle-flash-attn's API, the step's through flash-decoding over the caches with
//! their filled length read on the device (`flash_attn_with_key_lens`), so a step reads
//! only the filled positions. Elsewhere it is `attend`: the query heads that share a
//! key/value head (consecutive heads, as `repeat_kv` pairs them) are stacked as rows of one
//! product with that head's keys, and the scores are computed in the model's dtype, scaled,
//! masked and softmaxed; in f32 that is candle-transformers' computation (its masked keys
//! weigh exactly 0 here too). The step then spans the whole cache, the positions after the
//! current one masked with -inf (from a comparison with a precomputed `arange`).
//!
//! Fewer launches per layer, which is what a one-token step costs: the q, k and v
//! projections are one product, as are gate and up (weights concatenated at load); on HIP
//! each norm and each residual addition ride on the product next to them (candle-hip's
//! `fused_linear`, see `project`); and RoPE rotates the query and key heads in one launch.
//! On HIP the step also rotates its query and key heads and writes the keys and values
//! into the caches (into each layer's `LayerCache`) in the qkv product's own launch
//! (candle-hip's `fused_linear_rope_append`; `rope_append`, one launch after the product,
//! against GGML blocks), and SwiGLU's activation rides on the gate/up product
//! (`fused_linear_swiglu`; `silu_mul` where that does not take the operands). A layer's
//! step is then six launches: the norm-qkv-RoPE product, flash-decoding and its merge,
//! the output projection with the residual, the norm-gate/up-SwiGLU product, and the down
//! projection with the residual.
//!
//! [`StaticLlama::load_gguf`] builds the same model from a `llama` GGUF file, computing as
//! candle-transformers' `quantized_llama` does (interleaved RoPE): its matrices stay in
//! their GGML blocks and go through candle's `QMatMul` (on HIP, candle-hip's activation
//! rounding and quantized mat-vec, two launches). In the step on HIP the norm or SwiGLU's
//! activation before a product rides on its activation rounding, the residual addition
//! on its mat-vec (`fused_quantized_linear`), and RoPE with the cache writes on the qkv
//! mat-vec's store (`fused_quantized_linear_rope_append`: each wave of it holds an
//! interleaved rotary pair), and flash-decoding's merge rounds the o product's input itself
//! (`flash_attn_quantized_linear`), so a layer's step is nine launches: the qkv, gate/up
//! and down products take two each, flash-decoding, its merge with the rounding and the o
//! mat-vec one each. Where q, k and v have different block
//! types (Q4_K_M's Q6_K values) the three share one activation rounding and each writes
//! its rows of the step (`fused_quantized_linear_parts`): one launch more than a stacked
//! product.
//!
//! A batch of sequences at one position: the products take every sequence's row at once
//! (one read of the weights), each sequence has its own caches and RoPE write, and the
//! step's fused attention reads every sequence's caches in one launch (they share one
//! storage at a fixed stride, `BatchCache`). Against GGML blocks the products of a batch
//! take each row's norm or SwiGLU and the residual as at batch 1 (`fused_quantized_linear`
//! takes a few rows; q/k/v of different block types take one); the other one-row fusions
//! above (RoPE in the q/k/v product, the merge rounding the o product's input, the dense
//! products' norms, SwiGLU and residuals) serve batch 1 only, and a larger batch runs
//! those steps as launches of their own. A prompt of up to 32 tokens takes the fused
//! GGML products the same way, a row per token.

use std::io::{Read, Seek};

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::{GgmlDType, QMatMul, QTensor, gguf_file};
use candle_core::{D, DType, Device, IndexOp, Module, Tensor};
use candle_hip::extension::{
    FusedInput, StepCache, fused_linear, fused_linear_rope_append, fused_linear_swiglu,
    fused_quantized_linear_parts, fused_quantized_linear_rope_append, rope_append, silu_mul,
};
use candle_nn::{Embedding, Linear, RmsNorm, VarBuilder};
use candle_transformers::models::llama::Config;

use crate::tensor_parallel::{Layer, Split, load_embedding_and_head, load_norm, rope_tables};
use crate::{AppResult, app_error};

/// A Llama with KV caches of a fixed length and a capturable one-token step (see the
/// module documentation).
pub struct StaticLlama {
    /// The token embedding table (`[vocab, hidden]`), also `lm_head`'s weight when tied.
    embed: Embedding,
    layers: Vec<Block>,
    norm: RmsNorm,
    lm_head: Projection,
    /// Whether RoPE rotates interleaved pairs (`rope_i`: GGUF files, as candle-transformers'
    /// `quantized_llama` reads them) rather than the two halves of each head (`rope`).
    interleaved_rope: bool,
    /// RoPE's cosine table of every position the model takes (`[max_position_embeddings,
    /// head_dim / 2]`, model dtype).
    cos: Tensor,
    /// The sine table, likewise.
    sin: Tensor,
    /// Each layer's key and value caches (and its step's rotated query) for each sequence
    /// of the batch, written in place.
    caches: Vec<BatchCache>,
    /// `0..max_len` as u32: compared with the step's position to mask later keys.
    key_positions: Tensor,
    /// `max_len` zeros (model dtype): the step's mask where a key is visible. Made once, with
    /// `neg_inf`, so that the step uploads nothing.
    zeros: Tensor,
    /// `max_len` times -inf (model dtype): the step's mask where a key comes later.
    neg_inf: Tensor,
    /// The step's fixed inputs and logits, for as many sequences as the caches hold.
    step: StepTensors,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    vocab: usize,
    max_len: usize,
    /// Whether attention takes candle-hip's fused kernels (a HIP device and a 16-bit
    /// dtype, what they run); otherwise [`attend`].
    fused_attention: bool,
    /// Whether the step rotates and writes the caches in one launch (candle-hip's
    /// `rope_append`: a HIP device); otherwise RoPE and two `scatter_set`s.
    fused_append: bool,
    /// `max_position_embeddings`: the longest cache the RoPE tables cover.
    max_positions: usize,
    device: Device,
}

/// Fails unless a cache of `max_len` positions fits the model's `max_positions`.
fn check_max_len(max_len: usize, max_positions: usize) -> AppResult<()> {
    if max_len == 0 || max_len > max_positions {
        return Err(app_error(format!(
            "a static KV cache needs 1 to {max_positions} positions (max_position_embeddings), \
             not {max_len}"
        )));
    }
    Ok(())
}

/// The sizes of `cfg` as one rank holding everything (the tensor-parallel loader's sizes),
/// checked: a cache of `max_len` positions that fits, head counts that divide.
fn checked_split(cfg: &Config, max_len: usize) -> AppResult<Split> {
    check_max_len(max_len, cfg.max_position_embeddings)?;
    let split = Split::new(cfg, 1)?;
    if split.kv_heads == 0 || split.heads % split.kv_heads != 0 {
        return Err(app_error(format!(
            "num_attention_heads ({}) must be a multiple of num_key_value_heads ({})",
            split.heads, split.kv_heads
        )));
    }
    if split.head_dim * split.heads != cfg.hidden_size {
        return Err(app_error(format!(
            "hidden_size ({}) is not a multiple of num_attention_heads ({})",
            cfg.hidden_size, split.heads
        )));
    }
    Ok(split)
}

/// One sequence's caches of one layer: a storage laid out as candle-hip's [`StepCache`]
/// (keys, values, the step's rotated query), so that `rope_append` writes all three in one
/// launch, and views of its parts.
struct LayerCache {
    /// The whole storage, 1-D (a view of the batch's storage).
    state: Tensor,
    /// The key cache, `[1, kv_heads, max_len, head_dim]`.
    keys: Tensor,
    /// The value cache, likewise.
    values: Tensor,
    /// The step's rotated query heads, `[1, heads, 1, head_dim]` (written by
    /// `rope_append`; unused elsewhere).
    query: Tensor,
}

impl LayerCache {
    /// The views of `state` (`layout`'s [`StepCache::state_len`] elements, 1-D; `cache` its
    /// [`StepCache::cache_len`]).
    fn of(state: Tensor, cache: usize, layout: StepCache) -> candle_core::Result<LayerCache> {
        let len = state.elem_count();
        let cache_shape = (1, layout.kv_heads, layout.max_len, layout.head_dim);
        Ok(LayerCache {
            keys: state.narrow(0, 0, cache)?.reshape(cache_shape)?,
            values: state.narrow(0, cache, cache)?.reshape(cache_shape)?,
            query: state.narrow(0, 2 * cache, len - 2 * cache)?.reshape((
                1,
                layout.heads,
                1,
                layout.head_dim,
            ))?,
            state,
        })
    }
}

/// One layer's caches for a batch of sequences: one zeroed storage holding each sequence's
/// [`LayerCache`] at a fixed stride, and views of all sequences at once for the step's
/// attention (one launch for the batch).
///
/// A sequence's share is `2 kv_heads + ceil(heads / max_len)` blocks of `max_len *
/// head_dim` elements: its keys, its values, then its query heads padded to whole blocks,
/// so that the storage reshapes to `[batch, blocks, max_len, head_dim]` and the keys (or
/// values) of every sequence are one strided view of it. The padding costs
/// `ceil(heads / max_len) * max_len - heads` heads' worth of elements per sequence, at most
/// one block beside the `2 kv_heads` of the caches.
struct BatchCache {
    sequences: Vec<LayerCache>,
    /// Every sequence's keys, `[batch, kv_heads, max_len, head_dim]`.
    keys: Tensor,
    /// Every sequence's values, likewise.
    values: Tensor,
    /// Every sequence's rotated query heads, `[batch, heads, 1, head_dim]`.
    query: Tensor,
}

impl BatchCache {
    /// Zeroed caches of `layout`'s sizes for `batch` sequences.
    fn new(
        layout: StepCache,
        batch: usize,
        dtype: DType,
        device: &Device,
    ) -> candle_core::Result<BatchCache> {
        let too_large = || candle_core::Error::Msg(format!("a KV cache of {layout:?} overflows"));
        let StepCache {
            heads,
            kv_heads,
            head_dim,
            max_len,
            ..
        } = layout;
        let state_len = layout.state_len().ok_or_else(too_large)?;
        let cache_len = layout.cache_len().ok_or_else(too_large)?;
        let blocks = 2 * kv_heads + heads.div_ceil(max_len);
        let block = max_len.checked_mul(head_dim).ok_or_else(too_large)?;
        let share = blocks.checked_mul(block).ok_or_else(too_large)?;
        let total = share.checked_mul(batch).ok_or_else(too_large)?;
        let storage = Tensor::zeros(total, dtype, device)?;
        let sequences = (0..batch)
            .map(|b| {
                let state = storage.narrow(0, b * share, state_len)?;
                LayerCache::of(state, cache_len, layout)
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let grid = storage.reshape((batch, blocks, max_len, head_dim))?;
        let rows = storage.reshape((batch, share / head_dim, head_dim))?;
        Ok(BatchCache {
            sequences,
            keys: grid.narrow(1, 0, kv_heads)?,
            values: grid.narrow(1, kv_heads, kv_heads)?,
            query: rows
                .narrow(1, 2 * kv_heads * max_len, heads)?
                .unsqueeze(2)?,
        })
    }
}

/// What depends on the cache length and the batch: the zeroed caches and the step's mask
/// operands.
struct PositionBuffers {
    caches: Vec<BatchCache>,
    key_positions: Tensor,
    zeros: Tensor,
    neg_inf: Tensor,
}

impl PositionBuffers {
    /// Buffers for `layers` layers of `batch` sequences' caches of `layout` (its `max_len`
    /// positions).
    fn new(
        layers: usize,
        batch: usize,
        layout: StepCache,
        dtype: DType,
        device: &Device,
    ) -> candle_core::Result<PositionBuffers> {
        let max_len = layout.max_len;
        let caches = (0..layers)
            .map(|_| BatchCache::new(layout, batch, dtype, device))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(PositionBuffers {
            caches,
            key_positions: Tensor::arange(0, max_len as u32, device)?,
            zeros: Tensor::zeros(max_len, dtype, device)?,
            neg_inf: Tensor::full(f32::NEG_INFINITY, max_len, device)?.to_dtype(dtype)?,
        })
    }
}

/// The step's fixed inputs and output for a batch of sequences.
struct StepTensors {
    /// The inputs, one u32 tensor `[token of each sequence.., position, position + 1 for
    /// each sequence..]`, so that [`StaticLlama::set_step_inputs`] makes a single
    /// host-to-device copy.
    inputs: Tensor,
    /// The token ids: a view of `inputs`, shape `[batch]`.
    token: Tensor,
    /// Their position: a view of `inputs`, shape `[1]`.
    pos: Tensor,
    /// The filled cache positions once the step's keys are written (position + 1), for
    /// each sequence: a view of `inputs`, shape `[batch]`, the fused attention's key
    /// lengths.
    key_len: Tensor,
    /// The step's output logits, `[batch, vocab]` f32, overwritten by every step.
    logits: Tensor,
}

impl StepTensors {
    /// Zeroed inputs (`batch` tokens, the position and `batch` key lengths, one u32
    /// tensor) and `[batch, vocab]` f32 logits.
    fn new(batch: usize, vocab: usize, device: &Device) -> candle_core::Result<StepTensors> {
        let inputs = Tensor::zeros(2 * batch + 1, DType::U32, device)?;
        Ok(StepTensors {
            token: inputs.narrow(0, 0, batch)?,
            pos: inputs.narrow(0, batch, 1)?,
            key_len: inputs.narrow(0, batch + 1, batch)?,
            inputs,
            logits: Tensor::zeros((batch, vocab), DType::F32, device)?,
        })
    }

    /// The sequences they hold.
    fn batch(&self) -> usize {
        self.token.elem_count()
    }
}

/// A [`StaticLlama`]'s weights, however they were read.
struct Weights {
    /// The embedding table, `[vocab, hidden]`, in the model's dtype.
    table: Tensor,
    lm_head: Projection,
    norm: RmsNorm,
    layers: Vec<Block>,
    /// See [`StaticLlama::interleaved_rope`].
    interleaved_rope: bool,
}

impl StaticLlama {
    /// Loads the weights of `cfg`'s Llama (2, 3, 3.2: tied embeddings and Llama 3's RoPE
    /// rescaling as candle-transformers computes them; candle-transformers' tensor names)
    /// from `vb`, in `vb`'s dtype on its device, and allocates zeroed KV caches of
    /// `max_len` positions per layer (`[1, kv_heads, max_len, head_dim]`) and the step's
    /// fixed inputs and output. `cfg.use_flash_attn` is ignored: the attention is always
    /// the one described in the module documentation.
    ///
    /// Errors: a `max_len` of 0 or past `cfg.max_position_embeddings`, head counts that do
    /// not divide (hidden size by query heads, query heads by key/value heads), and a
    /// missing or misshapen tensor.
    pub fn load(vb: VarBuilder, cfg: &Config, max_len: usize) -> AppResult<StaticLlama> {
        let split = checked_split(cfg, max_len)?;
        let (table, lm_head) = load_embedding_and_head(&vb, cfg)?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::load(&vb.pp(format!("model.layers.{i}")), cfg, split, 0))
            .map(|layer| Block::fuse(layer?))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let norm = load_norm(&vb, "model.norm.weight", cfg.hidden_size, cfg.rms_norm_eps)?;
        let weights = Weights {
            table,
            lm_head: Projection::Dense(lm_head),
            norm,
            layers,
            interleaved_rope: false,
        };
        StaticLlama::new(weights, cfg, split, (vb.dtype(), vb.device()), max_len)
    }

    /// Loads the GGUF Llama whose header is `content` (its configuration `cfg`, from
    /// [`crate::gguf::Header::llama_config`]) from `reader` onto `device`, computing in
    /// `dtype`, as candle-transformers' `quantized_llama` computes it: the matrices stay in
    /// their GGML blocks (multiplied by candle's `QMatMul`, which candle-hip's quantized
    /// mat-vec runs on HIP), the embedding table and the norms are dequantized to `dtype`,
    /// and RoPE rotates interleaved pairs. The q, k and v matrices of a layer (and gate and
    /// up) are concatenated into one product where they share a block type. Caches as
    /// [`StaticLlama::load`] makes them.
    ///
    /// Errors: those of [`StaticLlama::load`], and a missing tensor or one whose shape is
    /// not the configuration's (naming it).
    pub fn load_gguf<R: Read + Seek>(
        content: &gguf_file::Content,
        reader: &mut R,
        cfg: &Config,
        (dtype, device): (DType, &Device),
        max_len: usize,
    ) -> AppResult<StaticLlama> {
        let split = checked_split(cfg, max_len)?;
        let mut file = GgufTensors {
            content,
            reader,
            dtype,
            device,
        };
        let (hidden, inter) = (cfg.hidden_size, cfg.intermediate_size);
        let (q_rows, kv_rows) = (
            split.heads * split.head_dim,
            split.kv_heads * split.head_dim,
        );
        let table = file.dense("token_embd.weight", (cfg.vocab_size, hidden))?;
        let head_name = if cfg.tie_word_embeddings {
            "token_embd.weight"
        } else {
            "output.weight"
        };
        let lm_head = file.projection(&[(head_name, cfg.vocab_size)], hidden)?;
        let norm = file.norm("output_norm.weight", hidden, cfg.rms_norm_eps)?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| {
                let name = |part: &str| format!("blk.{i}.{part}.weight");
                let (q, k, v) = (name("attn_q"), name("attn_k"), name("attn_v"));
                let (gate, up) = (name("ffn_gate"), name("ffn_up"));
                Ok(Block {
                    input_norm: file.norm(&name("attn_norm"), hidden, cfg.rms_norm_eps)?,
                    qkv: file.projection(&[(&q, q_rows), (&k, kv_rows), (&v, kv_rows)], hidden)?,
                    o: file.projection(&[(&name("attn_output"), hidden)], q_rows)?,
                    post_norm: file.norm(&name("ffn_norm"), hidden, cfg.rms_norm_eps)?,
                    gate_up: file.projection(&[(&gate, inter), (&up, inter)], hidden)?,
                    down: file.projection(&[(&name("ffn_down"), hidden)], inter)?,
                })
            })
            .collect::<AppResult<Vec<_>>>()?;
        let weights = Weights {
            table,
            lm_head,
            norm,
            layers,
            interleaved_rope: true,
        };
        StaticLlama::new(weights, cfg, split, (dtype, device), max_len)
    }

    /// The model around `weights`: RoPE tables, zeroed caches of `max_len` positions, the
    /// step's fixed tensors.
    fn new(
        weights: Weights,
        cfg: &Config,
        split: Split,
        (dtype, device): (DType, &Device),
        max_len: usize,
    ) -> AppResult<StaticLlama> {
        let device = device.clone();
        let vocab = cfg.vocab_size;
        // The tables of every position the model takes (the step selects its row).
        let (cos, sin) = rope_tables(cfg, dtype, &device)?;
        let layout = StepCache {
            heads: split.heads,
            kv_heads: split.kv_heads,
            head_dim: split.head_dim,
            max_len,
            interleaved: weights.interleaved_rope,
        };
        let positions = PositionBuffers::new(cfg.num_hidden_layers, 1, layout, dtype, &device)?;
        let step = StepTensors::new(1, vocab, &device)?;
        Ok(StaticLlama {
            embed: Embedding::new(weights.table, cfg.hidden_size),
            layers: weights.layers,
            norm: weights.norm,
            lm_head: weights.lm_head,
            interleaved_rope: weights.interleaved_rope,
            cos,
            sin,
            caches: positions.caches,
            key_positions: positions.key_positions,
            zeros: positions.zeros,
            neg_inf: positions.neg_inf,
            step,
            heads: split.heads,
            kv_heads: split.kv_heads,
            head_dim: split.head_dim,
            vocab,
            max_len,
            fused_attention: !device.is_cpu() && matches!(dtype, DType::F16 | DType::BF16),
            fused_append: candle_hip::extension::as_hip_device(&device).is_some(),
            max_positions: cfg.max_position_embeddings,
            device,
        })
    }

    /// Replaces the KV caches (and the step's mask operands, inputs and logits) with zeroed
    /// ones of `max_len` positions, keeping the weights and the batch: the next forward
    /// starts new sequences, and [`step_token`](Self::step_token) and
    /// [`step_logits`](Self::step_logits) give the new tensors. A graph captured from
    /// [`step`](StaticLlama::step) before names the old buffers and must be captured again.
    /// The old buffers are freed once the new ones exist (both are held for a moment).
    ///
    /// Errors: a `max_len` of 0 or past `max_position_embeddings`.
    pub fn set_max_len(&mut self, max_len: usize) -> AppResult<()> {
        self.resize(self.batch(), max_len)
    }

    /// Replaces the KV caches and the step's inputs and logits with zeroed ones for
    /// `batch` sequences, keeping the weights and the cache length, as
    /// [`set_max_len`](Self::set_max_len) replaces them.
    ///
    /// Errors: a batch of 0.
    pub fn set_batch(&mut self, batch: usize) -> AppResult<()> {
        if batch == 0 {
            return Err(app_error("a batch needs at least one sequence"));
        }
        self.resize(batch, self.max_len)
    }

    /// Zeroed caches of `max_len` positions for `batch` sequences, and the step's tensors
    /// for that batch (both checked by the callers but the cache length).
    fn resize(&mut self, batch: usize, max_len: usize) -> AppResult<()> {
        check_max_len(max_len, self.max_positions)?;
        let layout = StepCache {
            max_len,
            ..self.step_cache()
        };
        let (dtype, layers) = (self.cos.dtype(), self.layers.len());
        let positions = PositionBuffers::new(layers, batch, layout, dtype, &self.device)?;
        let step = StepTensors::new(batch, self.vocab, &self.device)?;
        self.caches = positions.caches;
        self.key_positions = positions.key_positions;
        self.zeros = positions.zeros;
        self.neg_inf = positions.neg_inf;
        self.max_len = max_len;
        self.step = step;
        Ok(())
    }

    /// The sequences the caches and the step hold (1 until [`set_batch`](Self::set_batch)).
    pub fn batch(&self) -> usize {
        self.step.batch()
    }

    /// The layout of each layer's [`LayerCache`].
    fn step_cache(&self) -> StepCache {
        StepCache {
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            max_len: self.max_len,
            interleaved: self.interleaved_rope,
        }
    }

    /// The number of positions the KV caches hold (prompt and generated tokens together).
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The vocabulary size (the logits per token).
    pub fn vocab_size(&self) -> usize {
        self.vocab
    }

    /// The device the weights, caches and step tensors live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Runs the chunk `ids` (`[batch, tokens]`, u32, a row per sequence) at positions
    /// `pos..pos + tokens`: writes its keys and values into rows `pos..pos + tokens` of
    /// each sequence's caches (rows after it are left as they are and never read by this
    /// call), attends causally over positions `0..pos + tokens`, and returns each
    /// sequence's last position's logits, `[batch, vocab]` f32. The shapes follow the chunk
    /// (this is the prompt's path, driven from the host; the ids are read back to check
    /// them).
    ///
    /// Errors, before anything is written: a batch other than the model's
    /// ([`set_batch`](Self::set_batch)), no tokens, `pos + tokens > max_len`, and an id
    /// outside the vocabulary.
    pub fn forward(&mut self, ids: &Tensor, pos: usize) -> AppResult<Tensor> {
        let (batch, tokens) = ids.dims2()?;
        if batch != self.batch() {
            return Err(app_error(format!(
                "the static caches hold {} sequences, not {batch} (set_batch)",
                self.batch()
            )));
        }
        if tokens == 0 {
            return Err(app_error("a forward needs at least one token"));
        }
        let end = pos + tokens;
        if end > self.max_len {
            return Err(app_error(format!(
                "positions {pos}..{end} are past the static KV cache of {} positions",
                self.max_len
            )));
        }
        let ids = ids.to_dtype(DType::U32)?.to_device(&self.device)?;
        if let Some(id) = ids
            .flatten_all()?
            .to_vec1::<u32>()?
            .into_iter()
            .find(|&id| id as usize >= self.vocab)
        {
            return Err(app_error(format!(
                "token {id} is outside the vocabulary of {}",
                self.vocab
            )));
        }
        // Query `s` (at position pos + s) sees keys 0..=pos + s; the fused kernel masks
        // causally itself.
        let bias = if self.fused_attention {
            None
        } else {
            let mask: Vec<f32> = (0..tokens)
                .flat_map(|s| {
                    (0..end).map(move |j| if j > pos + s { f32::NEG_INFINITY } else { 0. })
                })
                .collect();
            let mask = Tensor::from_vec(mask, (tokens, end), &self.device)?;
            Some(mask.to_dtype(self.cos.dtype())?)
        };
        let pass = Pass {
            cos: self.cos.narrow(0, pos, tokens)?,
            sin: self.sin.narrow(0, pos, tokens)?,
            bias,
            write: CacheWrite::Rows { start: pos },
        };
        Ok(self.run(self.embed.forward(&ids)?, &pass)?)
    }

    /// Writes the next step's token ids (one per sequence) and their position into the
    /// step's fixed device inputs (one host-to-device copy into the existing storage). Call
    /// it outside any graph capture, before each [`step`](StaticLlama::step).
    ///
    /// Errors: not one token per sequence, `pos >= max_len` and a token outside the
    /// vocabulary (the step itself cannot check them, it never reads them on the host).
    pub fn set_step_inputs(&self, tokens: &[u32], pos: usize) -> AppResult<()> {
        if tokens.len() != self.batch() {
            return Err(app_error(format!(
                "a step of {} sequences takes as many tokens, not {}",
                self.batch(),
                tokens.len()
            )));
        }
        if pos >= self.max_len {
            return Err(app_error(format!(
                "position {pos} is past the static KV cache of {} positions",
                self.max_len
            )));
        }
        if let Some(token) = tokens.iter().find(|&&t| t as usize >= self.vocab) {
            return Err(app_error(format!(
                "token {token} is outside the vocabulary of {}",
                self.vocab
            )));
        }
        // max_len fits u32 (the key positions are a u32 arange), so pos + 1 does too.
        let mut inputs = tokens.to_vec();
        inputs.push(pos as u32);
        inputs.extend(std::iter::repeat_n(pos as u32 + 1, self.batch()));
        let inputs = Tensor::new(inputs, &self.device)?;
        self.step.inputs.slice_set(&inputs, 0, 0)?;
        Ok(())
    }

    /// The decode step: reads the tokens and their position from the inputs
    /// [`set_step_inputs`](StaticLlama::set_step_inputs) wrote, runs the model for them,
    /// writes their keys and values into each sequence's caches at that position and their
    /// logits into [`step_logits`](StaticLlama::step_logits), all in place.
    ///
    /// Capturable: the shapes and kernel arguments are the same on every call whatever the
    /// position, nothing is read back to the host, nothing is uploaded, and every tensor it
    /// makes is dropped before it returns (only the caches and the logits carry results).
    pub fn step(&self) -> candle_core::Result<()> {
        let (kv_heads, head_dim) = (self.kv_heads, self.head_dim);
        // What depends on the position, computed once for all layers from the device
        // position: without `rope_append`, the RoPE row and the scatter indices; for the
        // unfused attention, the mask of later keys.
        let index;
        let (cos, sin, write) = if self.fused_append {
            (self.cos.clone(), self.sin.clone(), CacheWrite::Appended)
        } else {
            index = self
                .step
                .pos
                .reshape((1, 1, 1, 1))?
                .broadcast_as((1, kv_heads, 1, head_dim))?
                .contiguous()?;
            (
                self.cos.index_select(&self.step.pos, 0)?,
                self.sin.index_select(&self.step.pos, 0)?,
                CacheWrite::At { index: &index },
            )
        };
        let bias = if self.fused_attention {
            None
        } else {
            let later = self
                .key_positions
                .gt(&self.step.pos.broadcast_as(self.max_len)?)?;
            Some(
                later
                    .where_cond(&self.neg_inf, &self.zeros)?
                    .reshape((1, self.max_len))?,
            )
        };
        let pass = Pass {
            cos,
            sin,
            bias,
            write,
        };
        let x = self.embed.embeddings().index_select(&self.step.token, 0)?;
        let logits = self.run(x.unsqueeze(1)?, &pass)?;
        self.step.logits.slice_set(&logits, 0, 0)
    }

    /// [`step`](StaticLlama::step), then the greedy choice made on the device: the logits'
    /// argmax (ties broken as Candle's `argmax` breaks them) becomes the step's token input
    /// and the position advances by one, so that the next call decodes the token this one
    /// chose with no host work in between. Capturable as `step` is. The host must not let
    /// the position reach `max_len`: the step cannot check it.
    pub fn step_greedy(&self) -> candle_core::Result<()> {
        self.step()?;
        let chosen = self.step.logits.argmax(D::Minus1)?;
        let advanced = self
            .step
            .inputs
            .narrow(0, self.batch(), self.batch() + 1)?
            .affine(1.0, 1.0)?;
        self.step.inputs.slice_set(&chosen, 0, 0)?;
        self.step.inputs.slice_set(&advanced, 0, self.batch())
    }

    /// The step's token inputs, `[batch]` u32: after
    /// [`step_greedy`](StaticLlama::step_greedy), the tokens it chose. Until
    /// [`set_batch`](Self::set_batch) or [`set_max_len`](Self::set_max_len), the same tensor (a
    /// view of the same storage) on every call.
    pub fn step_token(&self) -> &Tensor {
        &self.step.token
    }

    /// The fixed output of [`step`](StaticLlama::step): the last step's logits, `[batch,
    /// vocab]` f32 (zeros before the first step). Until [`set_batch`](Self::set_batch) or
    /// [`set_max_len`](Self::set_max_len), the same tensor (same storage) on every
    /// call.
    pub fn step_logits(&self) -> &Tensor {
        &self.step.logits
    }

    /// The layers, the final norm and `lm_head` on the embedded tokens `x`
    /// (`[batch, tokens, hidden]`): the f32 logits of each sequence's last token, `[batch,
    /// vocab]`. The norm of the last tokens only (a norm is per token), riding on `lm_head`
    /// ([`project`]).
    fn run(&self, mut x: Tensor, pass: &Pass) -> candle_core::Result<Tensor> {
        for (layer, caches) in self.layers.iter().zip(&self.caches) {
            x = self.layer(layer, caches, &x, pass)?;
        }
        let tokens = x.dim(1)?;
        let last = x.i((.., tokens - 1, ..))?.contiguous()?;
        project(&self.lm_head, &last, Input::Norm(&self.norm), None)?.to_dtype(DType::F32)
    }

    /// One decoder layer on `x` (`[batch, tokens, hidden]`, a row per sequence of
    /// `caches`), as candle-transformers' `Block`:
    /// `x + attention(norm(x))`, then that plus `down(silu(gate) * up)` of its norm. Each
    /// norm, each residual addition and (against quantized weights) SwiGLU's activation
    /// ride on a projection ([`project`]).
    fn layer(
        &self,
        layer: &Block,
        caches: &BatchCache,
        x: &Tensor,
        pass: &Pass,
    ) -> candle_core::Result<Tensor> {
        let x = self.attention(layer, caches, x, pass)?;
        let post_norm = Input::Norm(&layer.post_norm);
        // A dense gate/up product takes SwiGLU's activation into its launch.
        if let Projection::Dense(gate_up) = &layer.gate_up
            && let Some(act) = fused_linear_swiglu(&x, gate_up.weight(), post_norm.fused())?
        {
            return project(&layer.down, &act, Input::Plain, Some(&x));
        }
        let gate_up = project(&layer.gate_up, &x, post_norm, None)?;
        project(&layer.down, &gate_up, Input::SwiGlu, Some(&x))
    }

    /// `x` plus the self-attention of its norm (`x`: `[batch, tokens, hidden]`, a row per
    /// sequence of `caches`): projections, RoPE, the keys and values written into each
    /// sequence's caches as `pass` says, attention over the cached positions `pass` gives,
    /// and the output projection. The products take every sequence at once, and so does the
    /// step's fused attention; the caches are written per sequence.
    fn attention(
        &self,
        layer: &Block,
        caches: &BatchCache,
        x: &Tensor,
        pass: &Pass,
    ) -> candle_core::Result<Tensor> {
        let sequences = caches.sequences.as_slice();
        let appended = matches!(pass.write, CacheWrite::Appended);
        // One sequence's step: the product writes the step itself where it can (RoPE and
        // the cache writes in its launch).
        let qkv = match sequences {
            [cache] if appended && self.project_rope_append(layer, cache, x, pass)? => None,
            _ => Some(project(
                &layer.qkv,
                x,
                Input::Norm(&layer.input_norm),
                None,
            )?),
        };
        let qkv_of = |b: usize| qkv.as_ref().map(|qkv| qkv.narrow(0, b, 1)).transpose();
        // Several sequences' step with the fused attention: each sequence's rotated query,
        // keys and values go into its caches, then one launch attends for all of them.
        if sequences.len() > 1 && appended && pass.bias.is_none() {
            for (b, cache) in sequences.iter().enumerate() {
                self.write_cache(cache, qkv_of(b)?.as_ref(), pass)?;
            }
            let (q, keys, values) = (&caches.query, &caches.keys, &caches.values);
            let y = attend_fused(q, keys, values, Some(&self.step.key_len))?;
            return project(&layer.o, &y, Input::Plain, Some(x));
        }
        let mut outputs = Vec::with_capacity(sequences.len());
        for (b, cache) in sequences.iter().enumerate() {
            let (q, keys, values) = self.write_cache(cache, qkv_of(b)?.as_ref(), pass)?;
            let key_len = self.step.key_len.narrow(0, b, 1)?;
            let y = match (&pass.bias, pass.write) {
                (Some(bias), _) => attend(&q, &keys, &values, bias)?,
                (None, CacheWrite::Rows { .. }) => attend_fused(&q, &keys, &values, None)?,
                (None, CacheWrite::At { .. } | CacheWrite::Appended) => {
                    // Against GGML blocks the attention's merge rounds the o product's
                    // input (one sequence: the product then takes its only row).
                    if sequences.len() == 1
                        && let Some(ws) = quantized_weights(&layer.o)
                        && let Some(out) = attend_quantized_o(&q, &keys, &values, &key_len, &ws, x)?
                    {
                        return Ok(out);
                    }
                    attend_fused(&q, &keys, &values, Some(&key_len))?
                }
            };
            outputs.push(y);
        }
        let y = match outputs.len() {
            1 => outputs.swap_remove(0),
            _ => Tensor::cat(&outputs, 0)?,
        };
        project(&layer.o, &y, Input::Plain, Some(x))
    }

    /// One sequence's qkv product with RoPE and the cache writes in its launch (candle-hip's
    /// `fused_linear_rope_append` or its GGML twin), writing `cache`; false, with nothing
    /// written, where those do not take the operands.
    fn project_rope_append(
        &self,
        layer: &Block,
        cache: &LayerCache,
        x: &Tensor,
        pass: &Pass,
    ) -> candle_core::Result<bool> {
        let input_norm = Input::Norm(&layer.input_norm);
        let (cos, sin, step) = (&pass.cos, &pass.sin, self.step_cache());
        let (state, fused) = (&cache.state, input_norm.fused());
        match (&layer.qkv, quantized_weights(&layer.qkv)) {
            (Projection::Dense(qkv), _) => fused_linear_rope_append(
                state,
                x,
                qkv.weight(),
                fused,
                cos,
                sin,
                &self.step.pos,
                step,
            ),
            (_, Some(ws)) => fused_quantized_linear_rope_append(
                state,
                x,
                &ws,
                fused,
                cos,
                sin,
                &self.step.pos,
                step,
            ),
            _ => Ok(false),
        }
    }

    /// One sequence's query, keys and values (`[1, heads, tokens, head_dim]` and its caches'
    /// `[1, kv_heads, len, head_dim]` views) for attention, with its keys and values written
    /// into `cache` as `pass` says: from its `qkv` product (`[1, tokens, (heads + 2
    /// kv_heads) * head_dim]`), or, with `qkv` `None`, already written by
    /// [`project_rope_append`](Self::project_rope_append).
    fn write_cache(
        &self,
        cache: &LayerCache,
        qkv: Option<&Tensor>,
        pass: &Pass,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let cached = || {
            (
                cache.query.clone(),
                cache.keys.clone(),
                cache.values.clone(),
            )
        };
        let Some(qkv) = qkv else {
            return Ok(cached());
        };
        if let CacheWrite::Appended = pass.write {
            let step = self.step_cache();
            rope_append(
                &cache.state,
                qkv,
                &pass.cos,
                &pass.sin,
                &self.step.pos,
                step,
            )?;
            return Ok(cached());
        }
        let (tokens, head_dim) = (qkv.dim(1)?, self.head_dim);
        // [1, tokens, n * head_dim] -> [1, n, tokens, head_dim], contiguous (RoPE and the
        // cache writes need it).
        let by_head = |t: Tensor, n: usize| {
            t.reshape((1, tokens, n, head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let (heads, kv_heads) = (self.heads, self.kv_heads);
        let (qk_width, kv_width) = ((heads + kv_heads) * head_dim, kv_heads * head_dim);
        let qk = by_head(qkv.narrow(2, 0, qk_width)?, heads + kv_heads)?;
        // The query and key heads are rotated together, one launch.
        let qk = if self.interleaved_rope {
            candle_nn::rotary_emb::rope_i(&qk, &pass.cos, &pass.sin)?
        } else {
            candle_nn::rotary_emb::rope(&qk, &pass.cos, &pass.sin)?
        };
        let (q, k) = (qk.narrow(1, 0, heads)?, qk.narrow(1, heads, kv_heads)?);
        let v = by_head(qkv.narrow(2, qk_width, kv_width)?, kv_heads)?;
        let (keys, values) = pass.write.store(cache, &k, &v)?;
        Ok((q, keys, values))
    }
}

/// What [`project`] multiplies a projection's weight with.
#[derive(Clone, Copy)]
enum Input<'a> {
    /// The activations themselves.
    Plain,
    /// Their RMS norm.
    Norm(&'a RmsNorm),
    /// `silu(gate) * up` of their halves `[gate, up]` (a gate/up product's output).
    SwiGlu,
}

impl Input<'_> {
    /// The same input as candle-hip's fused products take it.
    fn fused(&self) -> FusedInput<'_> {
        match *self {
            Input::Plain => FusedInput::Plain,
            Input::Norm(norm) => FusedInput::RmsNorm {
                weight: norm.weight(),
                eps: norm.eps() as f32,
            },
            Input::SwiGlu => FusedInput::SwiGlu,
        }
    }
}

/// `projection` applied to `input` of `x`, plus `residual` when given: on HIP, candle-hip's
/// fused one-token products where they take the operands (one launch against a dense
/// weight, two against GGML blocks), otherwise the norm or activation, the product and the
/// addition one after the other.
///
/// Against a dense weight SwiGLU's activation is not staged into the down product: there
/// it is recomputed by every block of that product, which measured slower on the test
/// platform (Nsight Compute, 1B shape: 41 us per layer fused against 27 for silu, mul,
/// product and addition; `results/h100-2026-11-27-fused`). [`StaticLlama`]'s layers have
/// the gate/up product compute it (`fused_linear_swiglu`); here it runs as its own launch
/// (`silu_mul`). Against GGML blocks it rides on the activation rounding, which runs once
/// per product.
fn project(
    projection: &Projection,
    x: &Tensor,
    input: Input,
    residual: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let fused_input = input.fused();
    let fused = match (projection, input) {
        (Projection::Dense(_), Input::SwiGlu) => {
            return project(projection, &swiglu(x)?, Input::Plain, residual);
        }
        (Projection::Dense(linear), _) => fused_linear(x, linear.weight(), fused_input, residual)?,
        _ => match quantized_weights(projection) {
            Some(weights) => fused_quantized_linear_parts(x, &weights, fused_input, residual)?,
            None => None,
        },
    };
    if let Some(y) = fused {
        return Ok(y);
    }
    let x = match input {
        Input::Plain => x.clone(),
        Input::Norm(norm) => norm.forward(x)?,
        Input::SwiGlu => swiglu(x)?,
    };
    let y = projection.forward(&x)?;
    match residual {
        Some(r) => y + r,
        None => Ok(y),
    }
}

/// The GGML blocks of a quantized projection (one weight, or its parts), or `None` when
/// it or a part is dense.
fn quantized_weights(projection: &Projection) -> Option<Vec<&QTensor>> {
    match projection {
        Projection::Quantized(QMatMul::QTensor(weight)) => Some(vec![weight.as_ref()]),
        Projection::Parts(parts) => quantized_parts(parts),
        _ => None,
    }
}

/// The GGML blocks of every part, or `None` when a part is dense.
fn quantized_parts(parts: &[Projection]) -> Option<Vec<&QTensor>> {
    parts
        .iter()
        .map(|p| match p {
            Projection::Quantized(QMatMul::QTensor(weight)) => Some(weight.as_ref()),
            _ => None,
        })
        .collect()
}

/// `silu(gate) * up` of `x = [gate, up]` along its last dimension (one launch on HIP).
fn swiglu(x: &Tensor) -> candle_core::Result<Tensor> {
    let inter = x.dim(D::Minus1)? / 2;
    silu_mul(
        &x.narrow(D::Minus1, 0, inter)?,
        &x.narrow(D::Minus1, inter, inter)?,
    )
}

/// A projection's weight, `[outputs, inputs]`.
enum Projection {
    /// Dense, in the model's dtype (candle-nn's `Linear`; candle-hip's fused one-token
    /// product takes it together with the norm before it and the residual after it).
    Dense(Linear),
    /// GGML blocks (candle's `QMatMul`; candle-hip's quantized mat-vec on HIP), product in
    /// the activations' dtype.
    Quantized(QMatMul),
    /// Products of one input concatenated along the outputs: the q, k and v (or gate and
    /// up) matrices of a GGUF layer whose block types differ.
    Parts(Vec<Projection>),
}

impl Module for Projection {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Projection::Dense(linear) => linear.forward(x),
            Projection::Quantized(matmul) => matmul.forward(x),
            Projection::Parts(parts) => {
                let outputs = parts
                    .iter()
                    .map(|p| p.forward(x))
                    .collect::<candle_core::Result<Vec<_>>>()?;
                Tensor::cat(&outputs, D::Minus1)
            }
        }
    }
}

/// The tensors of a GGUF file, read onto a device for a [`StaticLlama`].
struct GgufTensors<'a, R> {
    content: &'a gguf_file::Content,
    reader: &'a mut R,
    /// The model's dtype (of the dense tensors).
    dtype: DType,
    device: &'a Device,
}

impl<R: Read + Seek> GgufTensors<'_, R> {
    /// Tensor `name` in host memory, checked to be `[rows, cols]`.
    fn read(&mut self, name: &str, (rows, cols): (usize, usize)) -> AppResult<QTensor> {
        let t = self.content.tensor(self.reader, name, &Device::Cpu)?;
        if t.shape().dims() != [rows, cols] {
            return Err(app_error(format!(
                "tensor {name} is {:?}, the configuration makes it [{rows}, {cols}]",
                t.shape().dims()
            )));
        }
        Ok(t)
    }

    /// Tensor `name` (`[rows, cols]`) dequantized, in the model's dtype on the device.
    fn dense(&mut self, name: &str, shape: (usize, usize)) -> AppResult<Tensor> {
        let t = self.read(name, shape)?.dequantize(&Device::Cpu)?;
        Ok(t.to_dtype(self.dtype)?.to_device(self.device)?)
    }

    /// The RMS norm of `size` features with weight `name`.
    fn norm(&mut self, name: &str, size: usize, eps: f64) -> AppResult<RmsNorm> {
        let t = self.content.tensor(self.reader, name, &Device::Cpu)?;
        if t.shape().dims() != [size] {
            return Err(app_error(format!(
                "tensor {name} is {:?}, the configuration makes it [{size}]",
                t.shape().dims()
            )));
        }
        let weight = t.dequantize(&Device::Cpu)?.to_dtype(self.dtype)?;
        Ok(RmsNorm::new(weight.to_device(self.device)?, eps))
    }

    /// The product with the matrices `parts` (name, rows) of `cols` columns stacked along
    /// the outputs: one product when they share a block type ([`GgufTensors::stacked`]),
    /// else one per matrix, their outputs concatenated.
    fn projection(&mut self, parts: &[(&str, usize)], cols: usize) -> AppResult<Projection> {
        let tensors = parts
            .iter()
            .map(|&(name, rows)| self.read(name, (rows, cols)))
            .collect::<AppResult<Vec<_>>>()?;
        if tensors.windows(2).all(|w| w[0].dtype() == w[1].dtype()) {
            return self.stacked(&tensors);
        }
        let separate = tensors
            .iter()
            .map(|t| self.stacked(std::slice::from_ref(t)))
            .collect::<AppResult<Vec<_>>>()?;
        Ok(Projection::Parts(separate))
    }

    /// `tensors` (one GGML type, `[rows_i, cols]` each) stacked along the outputs into one
    /// projection on the device: dense in the model's dtype for a plain type (f32, f16,
    /// bf16), else their blocks concatenated (a row's blocks are contiguous).
    fn stacked(&self, tensors: &[QTensor]) -> AppResult<Projection> {
        let Some(first) = tensors.first() else {
            return Err(app_error("a projection needs at least one matrix"));
        };
        let (dtype, cols) = (first.dtype(), first.shape().dims()[1]);
        if matches!(dtype, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16) {
            let dense = tensors
                .iter()
                .map(|t| t.dequantize(&Device::Cpu)?.to_dtype(self.dtype))
                .collect::<candle_core::Result<Vec<_>>>()?;
            let weight = Tensor::cat(&dense, 0)?.to_device(self.device)?;
            return Ok(Projection::Dense(Linear::new(weight, None)));
        }
        let mut bytes = Vec::new();
        for t in tensors {
            bytes.extend_from_slice(&t.data()?);
        }
        let rows = tensors.iter().map(|t| t.shape().dims()[0]).sum();
        let blocks = qtensor_from_ggml(dtype, &bytes, vec![rows, cols], self.device)?;
        Ok(Projection::Quantized(QMatMul::from_qtensor(blocks)?))
    }
}

/// A decoder layer with its projections fused for decoding: q, k and v in one product,
/// gate and up in another (their weights concatenated along the outputs), so that a
/// one-token step launches two matrix-vector products where the separate weights take
/// five.
struct Block {
    input_norm: RmsNorm,
    /// `[q; k; v]` weights, `[(heads + 2 kv_heads) * head_dim, hidden]`.
    qkv: Projection,
    o: Projection,
    post_norm: RmsNorm,
    /// `[gate; up]` weights, `[2 * intermediate, hidden]`.
    gate_up: Projection,
    down: Projection,
}

impl Block {
    /// Concatenates `layer`'s projection weights (the separate ones are dropped).
    fn fuse(layer: Layer) -> candle_core::Result<Block> {
        let cat = |parts: &[&Linear]| {
            let weights: Vec<&Tensor> = parts.iter().map(|l| l.weight()).collect();
            let weight = Tensor::cat(&weights, 0)?;
            Ok::<_, candle_core::Error>(Projection::Dense(Linear::new(weight, None)))
        };
        let attention = &layer.attention;
        let mlp = &layer.mlp;
        Ok(Block {
            qkv: cat(&[&attention.q, &attention.k, &attention.v])?,
            gate_up: cat(&[&mlp.gate, &mlp.up])?,
            o: Projection::Dense(attention.o.clone()),
            down: Projection::Dense(mlp.down.clone()),
            input_norm: layer.input_norm,
            post_norm: layer.post_norm,
        })
    }
}

/// What the layers of one pass share: the RoPE rows of its tokens, the additive mask over
/// the keys they attend to, and how their keys and values reach the caches.
struct Pass<'a> {
    /// The RoPE cosines of the pass's positions, `[tokens, head_dim / 2]` (every position's
    /// with [`CacheWrite::Appended`], which selects its row on the device).
    cos: Tensor,
    /// The sines, likewise.
    sin: Tensor,
    /// `[tokens, keys]` (model dtype): 0 for a key the query sees, -inf for a later one;
    /// `None` when the fused kernels attend (they mask causally themselves).
    bias: Option<Tensor>,
    write: CacheWrite<'a>,
}

/// Where a pass's keys and values go in the caches, and which cached positions it reads.
#[derive(Clone, Copy)]
enum CacheWrite<'a> {
    /// A chunk at host-known positions from `start`: `slice_set` into those rows, then
    /// attention over positions `0..start + tokens`.
    Rows {
        /// The first position of the chunk.
        start: usize,
    },
    /// One token at a device position: `scatter_set` along the positions at `index`
    /// (`[1, kv_heads, 1, head_dim]` u32, every element the position), then attention
    /// over the whole cache (the mask hides the later positions).
    At {
        /// The scatter indices.
        index: &'a Tensor,
    },
    /// One token at the device position, rotated and written by candle-hip's
    /// `rope_append` (the pass's tables are whole, indexed on the device); attention as
    /// for [`CacheWrite::At`].
    Appended,
}

impl CacheWrite<'_> {
    /// Writes `k` and `v` (`[1, kv_heads, tokens, head_dim]`, contiguous) into `cache` in
    /// place and returns the keys and values to attend over.
    fn store(
        &self,
        cache: &LayerCache,
        k: &Tensor,
        v: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let (k_cache, v_cache) = (&cache.keys, &cache.values);
        match self {
            CacheWrite::Rows { start } => {
                k_cache.slice_set(k, 2, *start)?;
                v_cache.slice_set(v, 2, *start)?;
                let len = start + k.dim(2)?;
                Ok((k_cache.narrow(2, 0, len)?, v_cache.narrow(2, 0, len)?))
            }
            CacheWrite::At { index } => {
                k_cache.scatter_set(index, k, 2)?;
                v_cache.scatter_set(index, v, 2)?;
                Ok((k_cache.clone(), v_cache.clone()))
            }
            CacheWrite::Appended => candle_core::bail!("rope_append writes the caches itself"),
        }
    }
}

/// Grouped-query attention of `q` (`[1, heads, tokens, head_dim]`) over `keys` and
/// `values` (`[1, kv_heads, len, head_dim]`) with the additive `bias` (`[tokens, len]`, 0
/// or -inf, `q`'s dtype); returns `[1, tokens, heads * head_dim]` in `q`'s dtype. The
/// masked scores go to softmax in the model's dtype: adding 0 or -inf is exact, and
/// candle-hip's softmax (like Candle's CUDA one) computes in f32 and rounds once, so on
/// HIP this equals candle-transformers' f32 softmax rounded back, in two launches fewer.
///
/// The `heads / kv_heads` query heads of a key/value head are consecutive (as
/// candle-transformers' `repeat_kv` pairs them), so `q` reshapes to
/// `[1, kv_heads, group * tokens, head_dim]` and each key/value head is read once, without
/// copying it per query head.
fn attend(
    q: &Tensor,
    keys: &Tensor,
    values: &Tensor,
    bias: &Tensor,
) -> candle_core::Result<Tensor> {
    let (_, heads, tokens, head_dim) = q.dims4()?;
    let (_, kv_heads, len, _) = keys.dims4()?;
    let group = heads / kv_heads;
    let q = q.reshape((1, kv_heads, group * tokens, head_dim))?;
    // The prompt's keys are a narrowed view of the cache (a copy here); the step's are
    // the whole cache (no copy).
    let (keys, values) = (keys.contiguous()?, values.contiguous()?);
    let scores = (q.matmul(&keys.t()?)? / (head_dim as f64).sqrt())?
        .reshape((1, kv_heads, group, tokens, len))?
        .broadcast_add(bias)?;
    let weights =
        candle_nn::ops::softmax_last_dim(&scores)?.reshape((1, kv_heads, group * tokens, len))?;
    weights
        .matmul(&values)?
        .reshape((1, heads, tokens, head_dim))?
        .transpose(1, 2)?
        .reshape((1, tokens, heads * head_dim))
}

/// [`attend_fused`] over the first `key_len` cached positions, then the o projection
/// against the GGML blocks `o` plus `residual`, with candle-hip's
/// `flash_attn_quantized_linear` (the attention's merge rounds the product's input: one
/// launch fewer); `None` where that does not take the operands.
fn attend_quantized_o(
    q: &Tensor,
    keys: &Tensor,
    values: &Tensor,
    key_len: &Tensor,
    o: &[&QTensor],
    residual: &Tensor,
) -> candle_core::Result<Option<Tensor>> {
    let head_dim = q.dim(3)?;
    let scale = 1.0 / (head_dim as f32).sqrt();
    candle_hip::extension::flash_attn_quantized_linear(
        &q.transpose(1, 2)?,
        &keys.transpose(1, 2)?,
        &values.transpose(1, 2)?,
        key_len,
        candle_hip::fused::FlashAttnParams::new(scale, false),
        o,
        Some(residual),
    )
}

/// Attention through candle-hip's fused kernels: `q` (`[batch, heads, tokens, head_dim]`)
/// over the cached `keys` and `values` (`[batch, kv_heads, len, head_dim]` views, read in
/// place), O(tokens) memory instead of the `[tokens, len]` scores. Returns
/// `[batch, tokens, heads * head_dim]`.
///
/// - `key_len` `None` (the prompt): causal, through candle-flash-attn's API, the last query
///   aligned with the last key as the mask of [`attend`] aligns them.
/// - `key_len` a `[batch]` u32 device tensor (the step): flash-decoding over the caches
///   filled to that many positions, read on the device so that a captured step serves
///   every position (`len` is the whole cache).
fn attend_fused(
    q: &Tensor,
    keys: &Tensor,
    values: &Tensor,
    key_len: Option<&Tensor>,
) -> candle_core::Result<Tensor> {
    let (batch, heads, tokens, head_dim) = q.dims4()?;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let (q, keys, values) = (
        q.transpose(1, 2)?,
        keys.transpose(1, 2)?,
        values.transpose(1, 2)?,
    );
    let y = match key_len {
        None => candle_flash_attn::flash_attn(&q, &keys, &values, scale, true)?,
        Some(len) => candle_hip::extension::flash_attn_with_key_lens(
            &q,
            &keys,
            &values,
            len,
            candle_hip::fused::FlashAttnParams::new(scale, false),
        )?,
    };
    y.reshape((batch, tokens, heads * head_dim))
}
