//! The quantized face: [`CustomQStorage`] on top of a backend's
//! [`QuantizedBlocks`].

use std::any::Any;
use std::sync::Arc;

use candle_core::custom_backend::{BoxedStorage, CustomDevice, CustomQStorage, CustomStorage};
use candle_core::quantized::GgmlDType;
use candle_core::{DType, Layout, Result, Shape};

use super::storage::{BridgeStorage, boxed};
use super::{Backend, BridgeDevice};

/// The blocks of a quantized tensor (GGML's block types) held by a backend:
/// what `QTensor` needs of them, in the backend's own storage type.
pub trait QuantizedBlocks<B: Backend>: std::fmt::Debug + Send + Sync + 'static {
    /// The block type.
    fn dtype(&self) -> GgmlDType;

    /// The size of the blocks in bytes.
    fn size_in_bytes(&self) -> usize;

    /// The blocks copied to host memory, in GGML's layout.
    fn to_host(&self) -> Result<Vec<u8>>;

    /// The first `elem_count` values as a contiguous storage of `dtype`.
    fn dequantize(&self, elem_count: usize, dtype: DType) -> Result<B::Storage>;

    /// `xs · Wᵀ` for a weight `W` of shape `w_shape` held by these blocks
    /// (see `CustomQStorage::matmul_t`).
    fn matmul_t(
        &self,
        w_shape: &Shape,
        xs: &B::Storage,
        layout: &Layout,
    ) -> Result<(B::Storage, Shape)>;
}

/// The quantized tensors of a backend that has none: no value of it exists.
#[derive(Debug)]
pub enum NoQuantized {}

impl<B: Backend> QuantizedBlocks<B> for NoQuantized {
    fn dtype(&self) -> GgmlDType {
        match *self {}
    }

    fn size_in_bytes(&self) -> usize {
        match *self {}
    }

    fn to_host(&self) -> Result<Vec<u8>> {
        match *self {}
    }

    fn dequantize(&self, _: usize, _: DType) -> Result<B::Storage> {
        match *self {}
    }

    fn matmul_t(&self, _: &Shape, _: &B::Storage, _: &Layout) -> Result<(B::Storage, Shape)> {
        match *self {}
    }
}

/// Quantized blocks of backend `B` seen as a Candle custom quantized storage.
pub struct BridgeQStorage<B: Backend> {
    blocks: B::Quantized,
    device: B::Device,
}

impl<B: Backend> BridgeQStorage<B> {
    /// Wraps `blocks`, which live on `device`.
    pub fn new(blocks: B::Quantized, device: B::Device) -> Self {
        Self { blocks, device }
    }

    /// The backend's own blocks.
    pub fn inner(&self) -> &B::Quantized {
        &self.blocks
    }
}

impl<B: Backend> std::fmt::Debug for BridgeQStorage<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {:?}", B::NAME, self.blocks)
    }
}

impl<B: Backend> CustomQStorage for BridgeQStorage<B> {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn dtype(&self) -> GgmlDType {
        self.blocks.dtype()
    }

    fn device(&self) -> Arc<dyn CustomDevice> {
        Arc::new(BridgeDevice::<B>::new(self.device.clone()))
    }

    fn storage_size_in_bytes(&self) -> usize {
        self.blocks.size_in_bytes()
    }

    fn data(&self) -> Result<Vec<u8>> {
        self.blocks.to_host()
    }

    fn dequantize(&self, elem_count: usize, dtype: DType) -> Result<BoxedStorage> {
        boxed::<B>(self.blocks.dequantize(elem_count, dtype))
    }

    fn matmul_t(
        &self,
        self_shape: &Shape,
        xs: &dyn CustomStorage,
        xs_layout: &Layout,
    ) -> Result<(BoxedStorage, Shape)> {
        let xs = BridgeStorage::<B>::downcast(xs, "qmatmul")?;
        let (out, shape) = self.blocks.matmul_t(self_shape, xs, xs_layout)?;
        Ok((boxed::<B>(Ok(out))?, shape))
    }
}

/// Shared by both faces: the bridge's quantized storage of `blocks`.
pub(super) fn boxed_q<B: Backend>(
    blocks: Result<B::Quantized>,
    device: &B::Device,
) -> Result<Box<dyn CustomQStorage>> {
    Ok(Box::new(BridgeQStorage::<B>::new(blocks?, device.clone())))
}
