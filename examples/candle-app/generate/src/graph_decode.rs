//! Decoding a [`StaticLlama`] through a captured HIP graph: the one-token step is recorded
//! once ([`candle_hip::HipDevice::capture`]) and replayed for every later token, so a token
//! costs one graph launch instead of hundreds of kernel launches queued by Candle's host
//! code. On the CPU the same step runs eagerly.
//!
//! Greedy decoding ([`GraphDecoder::decode_greedy`]) goes further: the step chooses its
//! token on the device and feeds it to the next step itself, and the host reads each token
//! one step behind, while the next step runs.

use std::time::Duration;

use candle_core::{DType, Storage, Tensor};
use candle_hip::{HipDevice, HipGraph};
use hip_safe::{DeviceBuffer, Stream};

use crate::static_cache::StaticLlama;
use crate::{AppResult, app_error, timed};

/// Cache lengths are rounded up to a multiple of this, so that nearby requests share one
/// cache and one graph.
const CACHE_STEP: usize = 256;

/// Which of the two steps a graph holds.
#[derive(Clone, Copy)]
enum Step {
    /// [`StaticLlama::step`]: logits for a token the host chose.
    Logits,
    /// [`StaticLlama::step_greedy`]: the step choosing the next token itself.
    Greedy,
}

/// A [`StaticLlama`] whose decode steps replay a captured graph on HIP devices.
pub struct GraphDecoder {
    /// The captured steps, each at its first use; declared before `model` so that they
    /// are dropped first (they name the model's buffers).
    logits_graph: Option<HipGraph>,
    greedy_graph: Option<HipGraph>,
    model: StaticLlama,
    /// Greedy decoding's token reader on HIP, made at its first use and kept.
    reader: Option<TokenReader>,
}

impl GraphDecoder {
    /// Wraps `model`; each graph is captured at the first decode step that needs it.
    pub fn new(model: StaticLlama) -> GraphDecoder {
        GraphDecoder {
            logits_graph: None,
            greedy_graph: None,
            model,
            reader: None,
        }
    }

    /// Makes room for `positions` tokens (prompt and generated): a cache shorter than
    /// that, or more than twice as long as needed, is replaced (rounded up to a multiple
    /// of 256, at most `max_positions`), and the graphs are captured again at their next
    /// steps. The unfused attention (the CPU, f32) of a step reads the whole cache, so a
    /// cache sized to the request keeps decode cheap.
    pub fn reserve(&mut self, positions: usize, max_positions: usize) -> AppResult<()> {
        let len = positions.next_multiple_of(CACHE_STEP).min(max_positions);
        let current = self.model.max_len();
        if current < positions || current > 2 * len {
            self.logits_graph = None;
            self.greedy_graph = None;
            self.model.set_max_len(len)?;
        }
        Ok(())
    }

    /// How many operations the captured step holds, once it is captured: the greedy step
    /// where it was captured, else the logits step.
    pub fn graph_nodes(&self) -> Option<usize> {
        self.greedy_graph
            .as_ref()
            .or(self.logits_graph.as_ref())
            .map(HipGraph::node_count)
    }

    /// Runs `ids` (`[batch, tokens]`, a row per sequence) at position `pos` and returns
    /// each sequence's last f32 logits, `[batch, vocab]`: one token per sequence after the
    /// prompt goes through the static step (replayed from the graph on HIP), anything else
    /// through the chunk path. A prompt (`pos` 0) of another batch than the model's makes
    /// new caches for that batch, to be captured again.
    pub fn forward(&mut self, ids: &Tensor, pos: usize) -> AppResult<Tensor> {
        let (batch, tokens) = ids.dims2()?;
        if pos == 0 && batch != self.model.batch() {
            self.logits_graph = None;
            self.greedy_graph = None;
            self.model.set_batch(batch)?;
        }
        if tokens != 1 || pos == 0 {
            return self.model.forward(ids, pos);
        }
        let tokens = ids.to_dtype(DType::U32)?.flatten_all()?.to_vec1::<u32>()?;
        self.model.set_step_inputs(&tokens, pos)?;
        self.step(Step::Logits)?;
        // A copy: the next replay rewrites the step's logits in place.
        Ok(self.model.step_logits().copy()?)
    }

    /// Greedy decoding: `steps` tokens after `token`, which sits at position `pos` (the
    /// positions before it already in the cache), each handed to `on_token` as it is read;
    /// `on_token` returning false stops the decoding. Returns how long the host waited for
    /// the tokens to reach it (the rest of the time was its own). On HIP the steps replay
    /// the captured [`StaticLlama::step_greedy`], each queued before the host reads the
    /// previous step's token (`TokenReader`), so the device does not wait for the host
    /// while the host's work per token (`on_token` included) takes less than a step; a stop
    /// leaves the step after it computed and unread.
    ///
    /// Errors, before any step runs: a model holding another batch than one sequence,
    /// steps whose positions would pass the cache (`pos + steps > max_len`) and, for at
    /// least one step, a token outside the vocabulary.
    pub fn decode_greedy(
        &mut self,
        token: u32,
        pos: usize,
        steps: usize,
        mut on_token: impl FnMut(u32) -> AppResult<bool>,
    ) -> AppResult<Duration> {
        if self.model.batch() != 1 {
            return Err(app_error(format!(
                "greedy decoding continues one sequence; the caches hold {}",
                self.model.batch()
            )));
        }
        let max_len = self.model.max_len();
        if pos.checked_add(steps).is_none_or(|end| end > max_len) {
            return Err(app_error(format!(
                "{steps} steps from position {pos} pass the static KV cache of {max_len} positions"
            )));
        }
        let mut waited = Duration::ZERO;
        if steps == 0 {
            return Ok(waited);
        }
        self.model.set_step_inputs(&[token], pos)?;
        let Some(hip) = candle_hip::extension::as_hip_device(self.model.device()).cloned() else {
            // The CPU runs each step before returning: nothing to overlap.
            for _ in 0..steps {
                self.step(Step::Greedy)?;
                let token = self.model.step_token();
                let chosen = timed(&mut waited, || Ok(token.to_vec1::<u32>()?[0]))?;
                if !on_token(chosen)? {
                    break;
                }
            }
            return Ok(waited);
        };
        let mut reader = match self.reader.take() {
            Some(reader) => reader,
            None => TokenReader::new(hip)?,
        };
        self.step(Step::Greedy)?;
        reader.queue(self.model.step_token())?;
        for i in 0..steps {
            let more = i + 1 < steps;
            if more {
                self.step(Step::Greedy)?;
            }
            // Waits for step i and its copy only: step i + 1 is queued behind them.
            let chosen = timed(&mut waited, || reader.read())?;
            if more {
                reader.queue(self.model.step_token())?;
            }
            if !on_token(chosen)? {
                break;
            }
        }
        self.reader = Some(reader);
        Ok(waited)
    }

    /// One decode step of `kind`: eager at first (it also loads every kernel), captured
    /// after that on a HIP device, replayed from then on.
    fn step(&mut self, kind: Step) -> AppResult<()> {
        let GraphDecoder {
            logits_graph,
            greedy_graph,
            model,
            ..
        } = self;
        let slot = match kind {
            Step::Logits => logits_graph,
            Step::Greedy => greedy_graph,
        };
        if let Some(graph) = slot {
            return Ok(graph.launch()?);
        }
        let run = || match kind {
            Step::Logits => model.step(),
            Step::Greedy => model.step_greedy(),
        };
        run()?;
        if let Some(hip) = candle_hip::extension::as_hip_device(model.device()) {
            // SAFETY: the graph names the model's weights, caches and step tensors, which
            // live as long as the model; the graph is dropped before them (field order)
            // and before the caches are replaced (`reserve`, and `forward` on a batch of
            // another size).
            let ((), graph) = unsafe { hip.capture(run) }?;
            *slot = Some(graph);
        }
        Ok(())
    }
}

/// Reads the tokens of greedy steps back to the host without waiting for the steps queued
/// after them. A copy of a step's token, queued on the device's stream right after the
/// step, lands in a slot owned by a stream of the reader's own; the host's read of the slot
/// waits on that stream, that is for the step and its copy only, while the next step runs.
/// One slot is enough: the next copy into it is queued after the read has returned.
struct TokenReader {
    device: HipDevice,
    stream: Stream,
    /// One u32, as bytes (a token's storage is read as bytes).
    slot: DeviceBuffer<u8>,
}

impl TokenReader {
    const TOKEN_BYTES: usize = std::mem::size_of::<u32>();

    fn new(device: HipDevice) -> AppResult<TokenReader> {
        let stream = device.stream().device().new_stream()?;
        let slot = stream.alloc_zeros::<u8>(Self::TOKEN_BYTES)?;
        Ok(TokenReader {
            device,
            stream,
            slot,
        })
    }

    /// Queues, after the work queued so far on the device's stream, the copy of `token`
    /// (one u32 on the device) into the slot; the reader's stream waits for the copy.
    fn queue(&mut self, token: &Tensor) -> AppResult<()> {
        if token.dtype() != DType::U32 || token.elem_count() != 1 {
            return Err(app_error(format!(
                "the step's token is one u32, not {:?} {:?}",
                token.dtype(),
                token.dims()
            )));
        }
        let (storage, layout) = token.storage_and_layout();
        let Storage::Custom(custom) = &*storage else {
            return Err(app_error("the step's token is not on the HIP device"));
        };
        let storage = candle_hip::extension::hip_storage(custom.as_ref(), "read the token")?;
        let start = layout.start_offset() * Self::TOKEN_BYTES;
        let src = storage.buffer().slice(start..start + Self::TOKEN_BYTES)?;
        self.device.stream().memcpy_dtod(&src, &mut self.slot)?;
        Ok(())
    }

    /// The token in the slot, once the copy last queued into it has finished.
    fn read(&self) -> AppResult<u32> {
        let mut bytes = [0u8; Self::TOKEN_BYTES];
        self.stream.memcpy_dtoh(&self.slot, &mut bytes)?;
        Ok(u32::from_ne_bytes(bytes))
    }
}
