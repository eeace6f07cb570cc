//! Tensor-parallel Llama (Megatron layout) in one process, one thread per rank.
//!
//! Each rank owns a device, its slice of every projection, its own KV cache and a handle to
//! a collective ([`AllReduce`]) shared with the other ranks:
//!
//! - replicated on every rank: the token embedding, the RMS norms, the final norm and
//!   `lm_head` (only rank 0 computes the logits, the others' would be identical);
//! - column-parallel (rows of the `[out, in]` weight cut into equal parts): `q_proj`, `k_proj`
//!   and `v_proj` (rank `r` holds query heads `r*h/N..(r+1)*h/N` and the key/value heads they
//!   read, as grouped-query attention pairs them), `gate_proj` and `up_proj`
//!   (`intermediate_size/N` each);
//! - row-parallel (columns cut): `o_proj` and `down_proj`, whose partial outputs are summed
//!   over the ranks by [`AllReduce::all_reduce_sum`] before the residual is added. That is
//!   two all-reduces per layer and the only communication.
//!
//! Everything else (RoPE tables, RMS norm, the attention's dtype casts, causal mask and
//! softmax, the KV cache) is computed with the same candle-nn operations, in the same order,
//! as candle-transformers 0.11.1's `llama` model, so that one rank gives exactly its logits
//! and N ranks give them up to the order of the all-reduce's additions.
//!
//! [`TensorParallelLlama`] runs the ranks: every call hands the token ids to each rank's
//! thread and waits for all of them, so the ranks stay in step. [`HostAllReduce`] is the
//! collective for ranks on any device (it meets on the host); [`hip_collectives`] is where
//! the RCCL one plugs in (see [`Collectives`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use candle_core::{DType, Device, IndexOp, Module, Tensor};
use candle_hip::HipComm;
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Embedding, Linear, RmsNorm, VarBuilder};
use candle_transformers::models::llama::{Config, Llama3RopeType};
use candle_transformers::utils::{build_causal_mask, repeat_kv};
use serde_json::Value;

use crate::weights::{self, Param};
use crate::{AppResult, app_error};

/// A sum over the ranks of a tensor-parallel group: the collective the row-parallel layers
/// need.
///
/// Each rank holds its own handle (an `Arc<dyn AllReduce>` from a [`Collectives`] factory)
/// and calls it from its own thread. The contract an implementation must keep:
///
/// - every rank calls [`all_reduce_sum`](AllReduce::all_reduce_sum) the same number of
///   times, in the same order, with tensors of the same shape and dtype (the model's dtype,
///   contiguous, `[batch, tokens, hidden_size]`), each on its rank's device;
/// - the call returns the elementwise sum over all ranks, with `x`'s shape and dtype, on
///   `x`'s device, and the same values on every rank (sum in a fixed order, e.g. rank 0's
///   plus rank 1's plus ...); `x` itself is left as it is;
/// - it is reusable: a model makes two calls per layer per forward, for as long as it lives;
/// - it never waits forever for a rank that failed: after [`abort`](AllReduce::abort) on any
///   rank's handle, or after a rank's handle is dropped, the pending and later calls of every
///   rank return an error.
///
/// [`HostAllReduce`] implements it for ranks on any device. An RCCL implementation (one
/// communicator per rank, made by the factory that [`hip_collectives`] becomes) enqueues
/// `ncclAllReduce(sum)` on the stream of `x`'s HIP device, which orders it after the
/// kernels that produced `x` and before those that read the result, so it may return before
/// the sum is done; it aborts the communicators in [`abort`](AllReduce::abort) and when a
/// handle is dropped.
pub trait AllReduce: Send + Sync {
    /// The elementwise sum of `x` over all ranks of the group (see the trait's contract).
    fn all_reduce_sum(&self, x: &Tensor) -> candle_core::Result<Tensor>;

    /// Tells the group that this rank failed outside a collective (`reason` says how), so
    /// that no rank waits for it: every pending and later call of every rank returns an
    /// error. The runner calls it when its rank's forward fails. The default does nothing,
    /// which suits only implementations that never block.
    fn abort(&self, reason: &str) {
        let _ = reason;
    }
}

/// Makes the collectives of a group: one [`AllReduce`] per device, in rank order (rank `r`
/// runs on `devices[r]`).
///
/// [`host_collectives`] and [`hip_collectives`] are such factories; [`collectives`] picks
/// one for the devices.
pub type Collectives = fn(devices: &[Device]) -> AppResult<Vec<Arc<dyn AllReduce>>>;

/// The collectives for `devices`: [`hip_collectives`] when every device is a HIP device,
/// else [`host_collectives`] (CPU ranks, or a mix).
pub fn collectives(devices: &[Device]) -> AppResult<Vec<Arc<dyn AllReduce>>> {
    let all_hip = devices
        .iter()
        .all(|d| candle_hip::extension::as_hip_device(d).is_some());
    if all_hip && !devices.is_empty() {
        hip_collectives(devices)
    } else {
        host_collectives(devices)
    }
}

/// One [`HostAllReduce`] per device (a group of `devices.len()` ranks).
pub fn host_collectives(devices: &[Device]) -> AppResult<Vec<Arc<dyn AllReduce>>> {
    Ok(HostAllReduce::group(devices.len())
        .into_iter()
        .map(|h| Arc::new(h) as Arc<dyn AllReduce>)
        .collect())
}

/// The collectives of ranks on HIP devices: one RCCL communicator per device (a clique over
/// `devices` created by this thread, rank `r` on `devices[r]`), each all-reduce queued on its
/// device's stream ([`candle_hip::extension::AllReduce`]). Aborting any rank aborts every
/// communicator of the clique, so no rank waits for a failed one.
pub fn hip_collectives(devices: &[Device]) -> AppResult<Vec<Arc<dyn AllReduce>>> {
    let hip = devices
        .iter()
        .map(|d| {
            candle_hip::extension::as_hip_device(d)
                .cloned()
                .ok_or_else(|| app_error(format!("{d:?} is not a HIP device")))
        })
        .collect::<AppResult<Vec<_>>>()?;
    let clique: Arc<[Arc<HipComm>]> = HipComm::from_devices(&hip)?
        .into_iter()
        .map(Arc::new)
        .collect();
    Ok(clique
        .iter()
        .map(|comm| {
            Arc::new(RcclAllReduce {
                op: candle_hip::extension::AllReduce::sum(comm.clone()),
                clique: clique.clone(),
            }) as Arc<dyn AllReduce>
        })
        .collect())
}

/// One rank of [`hip_collectives`].
struct RcclAllReduce {
    op: candle_hip::extension::AllReduce,
    clique: Arc<[Arc<HipComm>]>,
}

impl AllReduce for RcclAllReduce {
    fn all_reduce_sum(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.apply_op1_no_bwd(&self.op)
    }

    fn abort(&self, reason: &str) {
        let _ = reason;
        for comm in self.clique.iter() {
            // A communicator that cannot be aborted is already unusable.
            let _ = comm.comm().abort();
        }
    }
}

/// An in-process all-reduce: the ranks meet under a mutex, the last to arrive adds the
/// inputs on the host in the tensors' dtype in rank order (rank 0's, plus rank 1's, ...),
/// and every rank takes the same sum back to its own device.
///
/// Works for ranks on any devices (each input is copied to the host); made for CPU ranks
/// and tests. A failure poisons the group: an input that cannot be copied, inputs that
/// cannot be added (shapes or dtypes differ), [`AllReduce::abort`], or a handle dropped (a
/// rank that left or whose thread panicked) make every pending and later call fail.
pub struct HostAllReduce {
    rank: usize,
    meeting: Arc<Meeting>,
}

/// What the ranks of a [`HostAllReduce`] group share.
struct Meeting {
    round: Mutex<Round>,
    changed: Condvar,
}

/// The state of the current round of a group.
struct Round {
    /// Rounds completed so far; a waiting rank is done when this moves on.
    completed: u64,
    /// Each rank's input (on the host) for the round in progress.
    inputs: Vec<Option<Tensor>>,
    /// The sum of the last completed round, kept until the next one completes (every rank
    /// reads it before it can contribute to the next round).
    sum: Option<Tensor>,
    /// Why the group is poisoned, if it is.
    failure: Option<String>,
}

impl HostAllReduce {
    /// The handles of a group of `world` ranks, in rank order.
    pub fn group(world: usize) -> Vec<HostAllReduce> {
        let meeting = Arc::new(Meeting {
            round: Mutex::new(Round {
                completed: 0,
                inputs: vec![None; world],
                sum: None,
                failure: None,
            }),
            changed: Condvar::new(),
        });
        (0..world)
            .map(|rank| HostAllReduce {
                rank,
                meeting: Arc::clone(&meeting),
            })
            .collect()
    }

    /// This handle's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The group's state; a panic while it was held (which the code under the lock does
    /// not do) reads as a failure.
    fn lock(&self) -> candle_core::Result<MutexGuard<'_, Round>> {
        self.meeting
            .round
            .lock()
            .map_err(|_| failure("all-reduce: a rank panicked in the group"))
    }

    /// Poisons the group with `reason` (the first reason stays) and wakes every rank.
    fn poison(&self, reason: String) {
        let mut round = match self.meeting.round.lock() {
            Ok(round) => round,
            Err(poisoned) => poisoned.into_inner(),
        };
        round.failure.get_or_insert(reason);
        self.meeting.changed.notify_all();
    }

    /// Adds this rank's host tensor to the round and returns the round's sum.
    fn meet(&self, input: Tensor) -> candle_core::Result<Tensor> {
        let mut round = self.lock()?;
        if let Some(failure) = &round.failure {
            return Err(aborted(failure));
        }
        if round.inputs[self.rank].is_some() {
            return Err(failure(format!(
                "all-reduce: rank {} called twice in one round (one handle per rank)",
                self.rank
            )));
        }
        round.inputs[self.rank] = Some(input);
        if round.inputs.iter().all(Option::is_some) {
            return self.complete(&mut round);
        }
        let mine = round.completed;
        loop {
            round = self
                .meeting
                .changed
                .wait(round)
                .map_err(|_| failure("all-reduce: a rank panicked in the group"))?;
            if round.completed != mine {
                return round
                    .sum
                    .clone()
                    .ok_or_else(|| failure("all-reduce: the sum is missing"));
            }
            if let Some(failure) = &round.failure {
                return Err(aborted(failure));
            }
        }
    }

    /// Sums the round's inputs in rank order (the last rank to arrive does it), publishes
    /// the sum and wakes the others; a failed sum poisons the group.
    fn complete(&self, round: &mut Round) -> candle_core::Result<Tensor> {
        let inputs: Vec<Tensor> = round.inputs.iter_mut().filter_map(Option::take).collect();
        match sum_in_order(&inputs) {
            Ok(sum) => {
                round.sum = Some(sum.clone());
                round.completed += 1;
                self.meeting.changed.notify_all();
                Ok(sum)
            }
            Err(e) => {
                let reason = format!("the ranks' inputs cannot be added: {e}");
                round.failure = Some(reason.clone());
                self.meeting.changed.notify_all();
                Err(aborted(&reason))
            }
        }
    }
}

/// `inputs[0] + inputs[1] + ...`, left to right, in the inputs' dtype.
fn sum_in_order(inputs: &[Tensor]) -> candle_core::Result<Tensor> {
    let (first, rest) = inputs
        .split_first()
        .ok_or_else(|| failure("all-reduce over no ranks"))?;
    rest.iter().try_fold(first.clone(), |sum, x| sum.add(x))
}

/// The error of a call into a poisoned group.
fn aborted(reason: &str) -> candle_core::Error {
    failure(format!("all-reduce aborted: {reason}"))
}

/// A Candle error carrying `message` alone: these messages travel between ranks and nest,
/// so they carry no backtrace (which `Error::msg` adds when `RUST_BACKTRACE` is set).
fn failure(message: impl Into<String>) -> candle_core::Error {
    candle_core::Error::Msg(message.into())
}

impl AllReduce for HostAllReduce {
    fn all_reduce_sum(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let host = x.to_device(&Device::Cpu).inspect_err(|e| {
            self.poison(format!(
                "rank {} cannot copy its input to the host: {e}",
                self.rank
            ))
        })?;
        self.meet(host)?.to_device(x.device())
    }

    fn abort(&self, reason: &str) {
        self.poison(reason.to_string());
    }
}

impl Drop for HostAllReduce {
    /// A rank that leaves can never contribute again: the others must not wait for it.
    fn drop(&mut self) {
        self.poison(format!("rank {} left the group", self.rank));
    }
}

/// Where the ranks read their weights from: the same sources as the single-device model.
#[derive(Clone, Debug)]
pub enum WeightSource {
    /// A model folder's safetensors files (memory-mapped).
    Safetensors(Vec<PathBuf>),
    /// The seeded random weights of a configuration ([`weights::values`]), made one tensor
    /// at a time when a rank asks for it: the same values as [`weights::build`].
    Seeded {
        /// The configuration the parameters come from.
        config: Value,
        /// The seed.
        seed: u64,
    },
}

impl WeightSource {
    /// A VarBuilder over these weights that loads each tensor whole, in `dtype`, onto
    /// `device` when asked for it.
    pub fn var_builder(&self, dtype: DType, device: &Device) -> AppResult<VarBuilder<'static>> {
        match self {
            WeightSource::Safetensors(files) => {
                // SAFETY: the weight files are memory-mapped; they must not change while the
                // program runs, which holds for a model folder nobody writes to meanwhile.
                Ok(unsafe { VarBuilder::from_mmaped_safetensors(files, dtype, device)? })
            }
            WeightSource::Seeded { config, seed } => {
                let params = weights::params(config)?
                    .into_iter()
                    .enumerate()
                    .map(|(index, p)| (p.name.clone(), (index, p)))
                    .collect();
                let backend = SeededBackend {
                    params,
                    seed: *seed,
                };
                Ok(VarBuilder::from_backend(
                    Box::new(backend),
                    dtype,
                    device.clone(),
                ))
            }
        }
    }
}

/// Seeded weights made on demand: parameter name to (index, parameter).
struct SeededBackend {
    params: HashMap<String, (usize, Param)>,
    seed: u64,
}

impl SimpleBackend for SeededBackend {
    fn get(
        &self,
        shape: candle_core::Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        device: &Device,
    ) -> candle_core::Result<Tensor> {
        if let Some((_, param)) = self.params.get(name)
            && param.dims != shape.dims()
        {
            return Err(failure(format!(
                "{name}: the configuration makes it {:?}, the model expects {shape:?}",
                param.dims
            )));
        }
        self.get_unchecked(name, dtype, device)
    }

    fn get_unchecked(
        &self,
        name: &str,
        dtype: DType,
        device: &Device,
    ) -> candle_core::Result<Tensor> {
        let (index, param) = self
            .params
            .get(name)
            .ok_or_else(|| candle_core::Error::CannotFindTensor { path: name.into() })?;
        // As weights::build does: f32 values on the host, then the dtype, then the device.
        Tensor::from_vec(
            weights::values(param, *index, self.seed),
            param.dims.as_slice(),
            &Device::Cpu,
        )?
        .to_dtype(dtype)?
        .to_device(device)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.params.contains_key(name)
    }
}

/// The per-rank sizes of a configuration split over `world` ranks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Split {
    world: usize,
    /// Query heads per rank.
    pub(crate) heads: usize,
    /// Key/value heads per rank.
    pub(crate) kv_heads: usize,
    /// As candle-transformers' Llama: `hidden_size / num_attention_heads`.
    pub(crate) head_dim: usize,
}

impl Split {
    /// The split, or an error naming every size that `world` does not divide.
    pub(crate) fn new(cfg: &Config, world: usize) -> AppResult<Split> {
        if world == 0 {
            return Err(app_error(
                "tensor parallelism needs at least one rank (got 0)",
            ));
        }
        if cfg.num_attention_heads == 0 {
            return Err(app_error("the configuration has no attention heads"));
        }
        let sizes = [
            ("num_attention_heads", cfg.num_attention_heads),
            ("num_key_value_heads", cfg.num_key_value_heads),
            ("intermediate_size", cfg.intermediate_size),
        ];
        let bad: Vec<String> = sizes
            .iter()
            .filter(|(_, size)| size % world != 0)
            .map(|(name, size)| format!("{name} ({size})"))
            .collect();
        if !bad.is_empty() {
            return Err(app_error(format!(
                "tensor parallelism over {world} ranks needs sizes divisible by {world}: {} {} not",
                bad.join(", "),
                if bad.len() == 1 { "is" } else { "are" }
            )));
        }
        Ok(Split {
            world,
            heads: cfg.num_attention_heads / world,
            kv_heads: cfg.num_key_value_heads / world,
            head_dim: cfg.hidden_size / cfg.num_attention_heads,
        })
    }
}

/// How a `[out, in]` weight is cut over the ranks.
#[derive(Clone, Copy, Debug)]
enum Parallel {
    /// Output features cut (rows): each rank computes its part of the outputs.
    Column,
    /// Input features cut (columns): each rank computes a partial sum of every output.
    Row,
}

/// Rank `rank`'s part of the `[out, in]` weight `name` of a layer cut `how` over `world`
/// ranks. The whole tensor is loaded onto the rank's device, cut, copied and dropped, so a
/// rank holds at most its shards and one whole tensor.
fn shard(
    vb: &VarBuilder,
    name: &str,
    whole: (usize, usize),
    how: Parallel,
    split: Split,
    rank: usize,
) -> candle_core::Result<Linear> {
    let dim = match how {
        Parallel::Column => 0,
        Parallel::Row => 1,
    };
    let weight = vb.get(whole, name)?;
    let size = weight.dim(dim)? / split.world;
    let part = weight.narrow(dim, rank * size, size)?.contiguous()?;
    Ok(Linear::new(part, None))
}

/// A rank's part of a layer's attention.
pub(crate) struct Attention {
    pub(crate) q: Linear,
    pub(crate) k: Linear,
    pub(crate) v: Linear,
    pub(crate) o: Linear,
    split: Split,
}

/// A rank's part of a layer's feed-forward network.
pub(crate) struct Mlp {
    pub(crate) gate: Linear,
    pub(crate) up: Linear,
    pub(crate) down: Linear,
}

/// A rank's part of a decoder layer (the norms are whole).
pub(crate) struct Layer {
    pub(crate) input_norm: RmsNorm,
    pub(crate) attention: Attention,
    pub(crate) post_norm: RmsNorm,
    pub(crate) mlp: Mlp,
}

/// What the layers of one forward share: the RoPE rows and the causal mask of its tokens,
/// and the rank's collective.
struct Step<'a> {
    cos: Tensor,
    sin: Tensor,
    /// `None` for one token, which sees the whole cache.
    mask: Option<Tensor>,
    all_reduce: &'a dyn AllReduce,
}

impl Step<'_> {
    /// The sum over the ranks of a row-parallel layer's partial output (made contiguous, as
    /// [`AllReduce`] promises its implementations).
    fn sum_over_ranks(&self, partial: Tensor) -> candle_core::Result<Tensor> {
        self.all_reduce.all_reduce_sum(&partial.contiguous()?)
    }
}

/// The token embedding table (`[vocab, hidden]`) and `lm_head` (the table itself when the
/// embeddings are tied), whole, with candle-transformers' names.
pub(crate) fn load_embedding_and_head(
    vb: &VarBuilder,
    cfg: &Config,
) -> candle_core::Result<(Tensor, Linear)> {
    let (vocab, hidden) = (cfg.vocab_size, cfg.hidden_size);
    let table = vb.get((vocab, hidden), "model.embed_tokens.weight")?;
    let lm_head = if cfg.tie_word_embeddings {
        Linear::new(table.clone(), None)
    } else {
        Linear::new(vb.get((vocab, hidden), "lm_head.weight")?, None)
    };
    Ok((table, lm_head))
}

/// A whole RMS norm of `size` features (weight `name`).
pub(crate) fn load_norm(
    vb: &VarBuilder,
    name: &str,
    size: usize,
    eps: f64,
) -> candle_core::Result<RmsNorm> {
    Ok(RmsNorm::new(vb.get(size, name)?, eps))
}

impl Layer {
    /// Rank `rank`'s part of the layer whose weights `vb` holds under its prefix.
    pub(crate) fn load(
        vb: &VarBuilder,
        cfg: &Config,
        split: Split,
        rank: usize,
    ) -> candle_core::Result<Layer> {
        let hidden = cfg.hidden_size;
        let q_size = split.head_dim * cfg.num_attention_heads;
        let kv_size = split.head_dim * cfg.num_key_value_heads;
        let inter = cfg.intermediate_size;
        let part = |name: &str, whole, how| shard(vb, name, whole, how, split, rank);
        let attention = Attention {
            q: part(
                "self_attn.q_proj.weight",
                (q_size, hidden),
                Parallel::Column,
            )?,
            k: part(
                "self_attn.k_proj.weight",
                (kv_size, hidden),
                Parallel::Column,
            )?,
            v: part(
                "self_attn.v_proj.weight",
                (kv_size, hidden),
                Parallel::Column,
            )?,
            o: part("self_attn.o_proj.weight", (hidden, q_size), Parallel::Row)?,
            split,
        };
        let mlp = Mlp {
            gate: part("mlp.gate_proj.weight", (inter, hidden), Parallel::Column)?,
            up: part("mlp.up_proj.weight", (inter, hidden), Parallel::Column)?,
            down: part("mlp.down_proj.weight", (hidden, inter), Parallel::Row)?,
        };
        let eps = cfg.rms_norm_eps;
        Ok(Layer {
            input_norm: load_norm(vb, "input_layernorm.weight", hidden, eps)?,
            attention,
            post_norm: load_norm(vb, "post_attention_layernorm.weight", hidden, eps)?,
            mlp,
        })
    }

    /// The layer on `x` (`[batch, tokens, hidden]`), whole on every rank.
    fn forward(
        &self,
        x: &Tensor,
        step: &Step,
        kv: &mut Option<(Tensor, Tensor)>,
    ) -> candle_core::Result<Tensor> {
        let attended = self
            .attention
            .forward(&self.input_norm.forward(x)?, step, kv)?;
        let x = (attended + x)?;
        let mixed = self.mlp.forward(&self.post_norm.forward(&x)?, step)?;
        mixed + x
    }
}

impl Attention {
    /// Causal self-attention of this rank's heads, summed over the ranks.
    fn forward(
        &self,
        x: &Tensor,
        step: &Step,
        kv: &mut Option<(Tensor, Tensor)>,
    ) -> candle_core::Result<Tensor> {
        let Split {
            heads,
            kv_heads,
            head_dim,
            ..
        } = self.split;
        let (batch, tokens, _) = x.dims3()?;
        // [batch, tokens, n * head_dim] -> [batch, n, tokens, head_dim]
        let by_head =
            |t: Tensor, n: usize| t.reshape((batch, tokens, n, head_dim))?.transpose(1, 2);
        let q = by_head(self.q.forward(x)?, heads)?.contiguous()?;
        let k = by_head(self.k.forward(x)?, kv_heads)?.contiguous()?;
        let v = by_head(self.v.forward(x)?, kv_heads)?;
        let q = candle_nn::rotary_emb::rope(&q, &step.cos, &step.sin)?;
        let k = candle_nn::rotary_emb::rope(&k, &step.cos, &step.sin)?;
        // The cache grows by concatenation. (candle-transformers also narrows it when
        // `k.dims()[1]`, the head count, exceeds max_position_embeddings, which no real
        // config reaches; the runner's context check bounds the positions instead.)
        let (k, v) = match kv.take() {
            Some((cached_k, cached_v)) => (
                Tensor::cat(&[&cached_k, &k], 2)?.contiguous()?,
                Tensor::cat(&[&cached_v, &v], 2)?.contiguous()?,
            ),
            None => (k, v),
        };
        *kv = Some((k.clone(), v.clone()));
        let k = repeat_kv(k, heads / kv_heads)?;
        let v = repeat_kv(v, heads / kv_heads)?;
        // Scores, mask and softmax in f32, as candle-transformers does.
        let dtype = q.dtype();
        let q = q.to_dtype(DType::F32)?;
        let k = k.to_dtype(DType::F32)?;
        let v = v.to_dtype(DType::F32)?;
        let scores = (q.matmul(&k.t()?)? / (head_dim as f64).sqrt())?;
        let scores = match &step.mask {
            Some(mask) => mask_future(&scores, mask)?,
            None => scores,
        };
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let y = weights.matmul(&v.contiguous()?)?.to_dtype(dtype)?;
        let y = y
            .transpose(1, 2)?
            .reshape((batch, tokens, heads * head_dim))?;
        step.sum_over_ranks(self.o.forward(&y)?)
    }
}

/// `scores` with -inf where `mask` (`[tokens, kv_len]`, 1 = a later position) is set.
fn mask_future(scores: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let mask = mask.broadcast_as(scores.shape())?;
    let minus_inf =
        Tensor::new(f32::NEG_INFINITY, scores.device())?.broadcast_as(scores.shape())?;
    mask.where_cond(&minus_inf, scores)
}

impl Mlp {
    /// SwiGLU over this rank's part of the intermediate features, summed over the ranks.
    fn forward(&self, x: &Tensor, step: &Step) -> candle_core::Result<Tensor> {
        let gated = (candle_nn::ops::silu(&self.gate.forward(x)?)? * self.up.forward(x)?)?;
        step.sum_over_ranks(self.down.forward(&gated)?)
    }
}

/// RoPE's inverse frequencies, with Llama 3's rescaling when the config asks for it (as
/// candle-transformers' `llama::Cache::new` computes them).
fn inverse_frequencies(cfg: &Config) -> Vec<f32> {
    let head_dim = cfg.hidden_size / cfg.num_attention_heads;
    let plain = (0..head_dim)
        .step_by(2)
        .map(|i| 1f32 / cfg.rope_theta.powf(i as f32 / head_dim as f32));
    let Some(scaling) = cfg
        .rope_scaling
        .as_ref()
        .filter(|s| matches!(s.rope_type, Llama3RopeType::Llama3))
    else {
        return plain.collect();
    };
    let original = scaling.original_max_position_embeddings as f32;
    let low_freq_wavelen = original / scaling.low_freq_factor;
    let high_freq_wavelen = original / scaling.high_freq_factor;
    plain
        .map(|freq| {
            let wavelen = 2. * std::f32::consts::PI / freq;
            if wavelen < high_freq_wavelen {
                freq
            } else if wavelen > low_freq_wavelen {
                freq / scaling.factor
            } else {
                let smooth = (original / wavelen - scaling.low_freq_factor)
                    / (scaling.high_freq_factor - scaling.low_freq_factor);
                (1. - smooth) * freq / scaling.factor + smooth * freq
            }
        })
        .collect()
}

/// The cos and sin tables of every position (`[max_position_embeddings, head_dim / 2]`),
/// computed in f32 on `device` and cast to `dtype`.
pub(crate) fn rope_tables(
    cfg: &Config,
    dtype: DType,
    device: &Device,
) -> candle_core::Result<(Tensor, Tensor)> {
    let freqs = Tensor::new(inverse_frequencies(cfg), device)?;
    let positions = cfg.max_position_embeddings;
    let angles = Tensor::arange(0, positions as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((positions, 1))?
        .matmul(&freqs.reshape((1, freqs.elem_count()))?)?;
    Ok((
        angles.cos()?.to_dtype(dtype)?,
        angles.sin()?.to_dtype(dtype)?,
    ))
}

/// Everything one rank holds: its device, its shard of the model, its KV cache and its
/// collective.
struct Shard {
    rank: usize,
    device: Device,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    lm_head: Linear,
    cos: Tensor,
    sin: Tensor,
    /// Each layer's cached keys and values (`[batch, kv_heads, positions, head_dim]`).
    kv: Vec<Option<(Tensor, Tensor)>>,
    /// Causal masks by (tokens, start position).
    masks: HashMap<(usize, usize), Tensor>,
    all_reduce: Arc<dyn AllReduce>,
}

/// What a rank needs to load its shard.
struct RankSetup {
    rank: usize,
    split: Split,
    config: Config,
    dtype: DType,
    device: Device,
    weights: WeightSource,
    all_reduce: Arc<dyn AllReduce>,
}

impl RankSetup {
    /// Loads the rank's shard: the replicated tensors whole, the projections cut.
    fn load(self) -> AppResult<Shard> {
        let RankSetup {
            rank,
            split,
            config: cfg,
            dtype,
            device,
            weights,
            all_reduce,
        } = self;
        let vb = weights.var_builder(dtype, &device)?;
        let hidden = cfg.hidden_size;
        let (table, lm_head) = load_embedding_and_head(&vb, &cfg)?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::load(&vb.pp(format!("model.layers.{i}")), &cfg, split, rank))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let (cos, sin) = rope_tables(&cfg, dtype, &device)?;
        Ok(Shard {
            rank,
            embed: Embedding::new(table, hidden),
            layers,
            norm: load_norm(&vb, "model.norm.weight", hidden, cfg.rms_norm_eps)?,
            lm_head,
            cos,
            sin,
            kv: vec![None; cfg.num_hidden_layers],
            masks: HashMap::new(),
            all_reduce,
            device,
        })
    }
}

impl Shard {
    /// Runs the rank's part of a forward of `ids` at position `pos`; rank 0 returns the f32
    /// logits of each sequence's last token (`[batch, vocab]`), the others `None`.
    fn forward(&mut self, input: &Input) -> candle_core::Result<Option<Tensor>> {
        let Input {
            ids,
            batch,
            tokens,
            pos,
        } = input;
        let (batch, tokens, pos) = (*batch, *tokens, *pos);
        let ids = Tensor::from_slice(ids, (batch, tokens), &self.device)?;
        let step = Step {
            cos: self.cos.narrow(0, pos, tokens)?,
            sin: self.sin.narrow(0, pos, tokens)?,
            mask: if tokens > 1 {
                Some(self.mask(tokens, pos)?)
            } else {
                None
            },
            all_reduce: self.all_reduce.as_ref(),
        };
        let mut x = self.embed.forward(&ids)?;
        for (layer, kv) in self.layers.iter().zip(self.kv.iter_mut()) {
            x = layer.forward(&x, &step, kv)?;
        }
        if self.rank != 0 {
            return Ok(None);
        }
        let last = self
            .norm
            .forward(&x)?
            .i((.., tokens - 1, ..))?
            .contiguous()?;
        Ok(Some(self.lm_head.forward(&last)?.to_dtype(DType::F32)?))
    }

    /// The causal mask of `tokens` new tokens after `pos` cached ones, built once per size.
    fn mask(&mut self, tokens: usize, pos: usize) -> candle_core::Result<Tensor> {
        if let Some(mask) = self.masks.get(&(tokens, pos)) {
            return Ok(mask.clone());
        }
        let mask = build_causal_mask(tokens, pos, &self.device)?;
        self.masks.insert((tokens, pos), mask.clone());
        Ok(mask)
    }

    /// Does one job; a failure is reported to the group so that no rank waits for this one.
    fn run(&mut self, job: &Job) -> Reply {
        let result = match job {
            Job::Forward(input) => self.forward(input),
            Job::Reset => {
                self.kv.iter_mut().for_each(|kv| *kv = None);
                Ok(None)
            }
        };
        result.map_err(|e| {
            let message = e.to_string();
            self.all_reduce
                .abort(&format!("rank {} failed: {message}", self.rank));
            message
        })
    }
}

/// The token ids of one forward, as host data.
struct Input {
    ids: Arc<[u32]>,
    batch: usize,
    tokens: usize,
    pos: usize,
}

/// Work for a rank's thread.
#[derive(Clone)]
enum Job {
    /// A forward of these ids.
    Forward(Arc<Input>),
    /// Empty the KV cache.
    Reset,
}

/// A rank's answer: rank 0's logits, `None` from the others, or the error's message.
type Reply = Result<Option<Tensor>, String>;

/// The runner's end of a rank's thread.
struct Rank {
    /// Dropped first when the runner is dropped, which ends the thread's loop.
    jobs: Option<Sender<Job>>,
    replies: Receiver<Reply>,
    thread: Option<JoinHandle<()>>,
}

/// A rank's thread: loads the shard (the first reply says whether it did), then does jobs
/// until the runner goes away.
fn serve(setup: RankSetup, jobs: Receiver<Job>, replies: Sender<Reply>) {
    let mut shard = match setup.load() {
        Ok(shard) => shard,
        Err(e) => {
            let _ = replies.send(Err(e.to_string()));
            return;
        }
    };
    if replies.send(Ok(None)).is_err() {
        return;
    }
    for job in jobs {
        if replies.send(shard.run(&job)).is_err() {
            return;
        }
    }
}

/// A Llama split over N ranks, one thread per rank (see the module documentation).
///
/// Dropping it ends the threads (each finishes the job it has, if any, and exits) and waits
/// for them. After a failed forward the group's collectives are aborted, so every later
/// forward fails too: load the model again.
pub struct TensorParallelLlama {
    ranks: Vec<Rank>,
    devices: Vec<Device>,
    vocab: usize,
    max_positions: usize,
}

impl TensorParallelLlama {
    /// Loads `config`'s model in `dtype` from `weights` over `devices` (rank `r` on
    /// `devices[r]`, which may repeat, e.g. N times the CPU), with one collective per rank
    /// from `collectives`. The ranks load their shards in parallel.
    ///
    /// Errors: no devices, a head count or intermediate size that the number of ranks does
    /// not divide, a factory that fails or returns the wrong number of collectives, and any
    /// rank's loading error (naming the rank).
    pub fn load(
        config: &Config,
        dtype: DType,
        devices: &[Device],
        collectives: Collectives,
        weights: &WeightSource,
    ) -> AppResult<TensorParallelLlama> {
        let split = Split::new(config, devices.len())?;
        let all_reduces = collectives(devices)?;
        if all_reduces.len() != devices.len() {
            return Err(app_error(format!(
                "the collectives factory made {} all-reduces for {} ranks",
                all_reduces.len(),
                devices.len()
            )));
        }
        // Built first, so that a failure from here on stops the threads already started.
        let mut model = TensorParallelLlama {
            ranks: Vec::with_capacity(devices.len()),
            devices: devices.to_vec(),
            vocab: config.vocab_size,
            max_positions: config.max_position_embeddings,
        };
        for (rank, (device, all_reduce)) in devices.iter().zip(all_reduces).enumerate() {
            let setup = RankSetup {
                rank,
                split,
                config: config.clone(),
                dtype,
                device: device.clone(),
                weights: weights.clone(),
                all_reduce,
            };
            model.ranks.push(spawn(setup)?);
        }
        // Each thread's first reply: its shard is loaded.
        model.collect("loading")?;
        Ok(model)
    }

    /// The number of ranks.
    pub fn world(&self) -> usize {
        self.ranks.len()
    }

    /// The ranks' devices, in rank order.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Runs `ids` (`[batch, tokens]`, integer ids on any device) at position `pos` (the
    /// tokens already in the KV caches) on every rank and returns rank 0's f32 logits of
    /// each sequence's last token, `[batch, vocab]`, on rank 0's device.
    ///
    /// Input the model cannot take (no tokens, ids outside the vocabulary, positions past
    /// the context) is an error before any rank starts, which leaves the model usable.
    pub fn forward(&mut self, ids: &Tensor, pos: usize) -> AppResult<Tensor> {
        let (batch, tokens) = ids.dims2()?;
        let ids: Arc<[u32]> = ids
            .flatten_all()?
            .to_dtype(DType::U32)?
            .to_vec1::<u32>()?
            .into();
        self.check(&ids, tokens, pos)?;
        let input = Input {
            ids,
            batch,
            tokens,
            pos,
        };
        self.send(Job::Forward(Arc::new(input)))?;
        let mut replies = self.collect("forward")?;
        replies
            .swap_remove(0)
            .ok_or_else(|| app_error("tensor-parallel rank 0 returned no logits"))
    }

    /// Empties every rank's KV cache (the next forward starts at position 0).
    pub fn reset(&mut self) -> AppResult<()> {
        self.send(Job::Reset)?;
        self.collect("reset").map(|_| ())
    }

    /// Rejects input that would fail on every rank (and abort the group).
    fn check(&self, ids: &[u32], tokens: usize, pos: usize) -> AppResult<()> {
        if tokens == 0 {
            return Err(app_error("a forward needs at least one token"));
        }
        if pos + tokens > self.max_positions {
            return Err(app_error(format!(
                "positions {pos}..{} are past the model's context of {}",
                pos + tokens,
                self.max_positions
            )));
        }
        match ids.iter().find(|&&id| id as usize >= self.vocab) {
            Some(id) => Err(app_error(format!(
                "token {id} is outside the vocabulary of {}",
                self.vocab
            ))),
            None => Ok(()),
        }
    }

    /// Hands `job` to every rank. When a rank's thread has ended, the ranks that already
    /// have the job are waited for (its dropped collective makes theirs fail), so that no
    /// reply is left over for the next job.
    fn send(&self, job: Job) -> AppResult<()> {
        for (rank, r) in self.ranks.iter().enumerate() {
            let sent = r
                .jobs
                .as_ref()
                .is_some_and(|jobs| jobs.send(job.clone()).is_ok());
            if !sent {
                for earlier in &self.ranks[..rank] {
                    let _ = earlier.replies.recv();
                }
                return Err(app_error(format!(
                    "tensor-parallel rank {rank} has stopped (its thread ended)"
                )));
            }
        }
        Ok(())
    }

    /// Every rank's reply to the last job, in rank order; else the lowest failing rank's
    /// error (when another rank's failure aborted it, its message names that rank).
    fn collect(&self, what: &str) -> AppResult<Vec<Option<Tensor>>> {
        let replies: Vec<Reply> = self
            .ranks
            .iter()
            .map(|r| {
                r.replies
                    .recv()
                    .unwrap_or_else(|_| Err("its thread ended".into()))
            })
            .collect();
        let failed: Vec<usize> = (0..replies.len())
            .filter(|&r| replies[r].is_err())
            .collect();
        let Some(&first) = failed.first() else {
            return Ok(replies.into_iter().flatten().collect());
        };
        let message = replies[first].as_ref().err().cloned().unwrap_or_default();
        let all = if failed.len() > 1 {
            format!(" (ranks that failed: {failed:?})")
        } else {
            String::new()
        };
        Err(app_error(format!(
            "tensor-parallel {what}: rank {first}: {message}{all}"
        )))
    }
}

/// Starts the thread of the rank `setup` describes.
fn spawn(setup: RankSetup) -> AppResult<Rank> {
    let (jobs, job_queue) = std::sync::mpsc::channel();
    let (reply_to, replies) = std::sync::mpsc::channel();
    let rank = setup.rank;
    let thread = std::thread::Builder::new()
        .name(format!("tp-rank-{rank}"))
        .spawn(move || serve(setup, job_queue, reply_to))
        .map_err(|e| app_error(format!("cannot start the thread of rank {rank}: {e}")))?;
    Ok(Rank {
        jobs: Some(jobs),
        replies,
        thread: Some(thread),
    })
}

impl Drop for TensorParallelLlama {
    fn drop(&mut self) {
        // Closing every queue first lets all threads finish, whatever order they end in.
        for rank in &mut self.ranks {
            rank.jobs = None;
        }
        for rank in &mut self.ranks {
            if let Some(thread) = rank.thread.take() {
                let _ = thread.join();
            }
        }
    }
}
