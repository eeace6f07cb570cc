//! [`AllReduce`]: an RCCL all-reduce as a Candle op, the one collective a
//! tensor-parallel layer needs at the tensor level.

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::custom_backend::{BoxedStorage, CustomStorage};
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape};
use hip_safe::ReduceOp;

use super::{boxed, hip_storage};
use crate::HipComm;

/// The elementwise reduction of a tensor over the ranks of a [`HipComm`],
/// each rank applying it to its own tensor of the same shape and dtype:
/// `x.apply_op1_no_bwd(&AllReduce::sum(comm))` returns the same sum on
/// every rank. The tensor must live on the communicator's device.
#[derive(Clone, Debug)]
pub struct AllReduce {
    comm: Arc<HipComm>,
    op: ReduceOp,
}

impl AllReduce {
    /// The reduction `op` over `comm`'s ranks.
    pub fn new(comm: Arc<HipComm>, op: ReduceOp) -> Self {
        AllReduce { comm, op }
    }

    /// The sum over `comm`'s ranks.
    pub fn sum(comm: Arc<HipComm>) -> Self {
        AllReduce::new(comm, ReduceOp::Sum)
    }

    /// The communicator.
    pub fn comm(&self) -> &Arc<HipComm> {
        &self.comm
    }
}

impl CustomOp1 for AllReduce {
    fn name(&self) -> &'static str {
        "hip-all-reduce"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        super::hip_only(self.name())
    }

    fn custom_fwd(
        &self,
        storage: &dyn CustomStorage,
        layout: &Layout,
    ) -> Result<(BoxedStorage, Shape)> {
        let storage = hip_storage(storage, self.name())?;
        let shape = layout.shape().clone();
        let reduced = if layout.is_contiguous() {
            self.comm.all_reduce(storage, layout, self.op)?
        } else {
            let count = shape.elem_count();
            // SAFETY: copy_strided_src writes every element before it is read.
            let mut dense = unsafe { storage.device().alloc_storage(storage.dtype(), count) }?;
            storage.copy_strided_src(&mut dense, 0, layout)?;
            self.comm
                .all_reduce(&dense, &Layout::contiguous(shape.clone()), self.op)?
        };
        Ok((boxed(reduced), shape))
    }
}
