//! Decoding a [`StaticLlama`] through a captured HIP graph: the one-token step is recorded
//! once ([`candle_hip::HipDevice::capture`]) and replayed for every later token, so a token
//! costs one graph launch instead of hundreds of kernel launches queued by Candle's host
//! code. On the CPU the same step runs eagerly.

use candle_core::Tensor;
use candle_hip::HipGraph;

use crate::static_cache::StaticLlama;
use crate::{AppResult, app_error};

/// Cache lengths are rounded up to a multiple of this, so that nearby requests share one
/// cache and one graph.
const CACHE_STEP: usize = 256;

/// A [`StaticLlama`] whose decode steps replay a captured graph on HIP devices.
pub struct GraphDecoder {
    /// The captured step; declared before `model` so that it is dropped first (it names
    /// the model's buffers).
    graph: Option<HipGraph>,
    model: StaticLlama,
}

impl GraphDecoder {
    /// Wraps `model`; the graph is captured at the first decode step.
    pub fn new(model: StaticLlama) -> GraphDecoder {
        GraphDecoder { graph: None, model }
    }

    /// Makes room for `positions` tokens (prompt and generated): a cache shorter than
    /// that, or more than twice as long as needed, is replaced (rounded up to a multiple
    /// of 256, at most `max_positions`), and the graph is captured again at the next
    /// step. The unfused attention (the CPU, f32) of a step reads the whole cache, so a
    /// cache sized to the request keeps decode cheap.
    pub fn reserve(&mut self, positions: usize, max_positions: usize) -> AppResult<()> {
        let len = positions.next_multiple_of(CACHE_STEP).min(max_positions);
        let current = self.model.max_len();
        if current < positions || current > 2 * len {
            self.graph = None;
            self.model.set_max_len(len)?;
        }
        Ok(())
    }

    /// How many operations the captured step holds, once it is captured.
    pub fn graph_nodes(&self) -> Option<usize> {
        self.graph.as_ref().map(HipGraph::node_count)
    }

    /// Runs `ids` (`[1, tokens]`) at position `pos` and returns the last token's f32
    /// logits, `[1, vocab]`: one token after the prompt goes through the static step
    /// (replayed from the graph on HIP), anything else through the chunk path.
    pub fn forward(&mut self, ids: &Tensor, pos: usize) -> AppResult<Tensor> {
        let (batch, tokens) = ids.dims2()?;
        if batch != 1 {
            return Err(app_error(format!(
                "graph decoding runs batch size 1, not {batch}"
            )));
        }
        if tokens != 1 || pos == 0 {
            return self.model.forward(ids, pos);
        }
        let token = ids.flatten_all()?.to_vec1::<u32>()?[0];
        self.model.set_step_inputs(token, pos)?;
        self.step()?;
        // A copy: the next replay rewrites the step's logits in place.
        Ok(self.model.step_logits().copy()?)
    }

    /// One decode step: eager at first (it also loads every kernel), captured after that
    /// on a HIP device, replayed from then on.
    fn step(&mut self) -> AppResult<()> {
        if let Some(graph) = &self.graph {
            return Ok(graph.launch()?);
        }
        let hip = candle_hip::extension::as_hip_device(self.model.device()).cloned();
        self.model.step()?;
        if let Some(hip) = hip {
            let model = &self.model;
            // SAFETY: the graph names the model's weights, caches and step tensors, which
            // live as long as the model; the graph is dropped before them (field order)
            // and before the caches are replaced (`reserve`).
            let ((), graph) = unsafe { hip.capture(|| model.step()) }?;
            self.graph = Some(graph);
        }
        Ok(())
    }
}
