//! The storage face: [`CustomStorage`] on top of [`BackendStorage`].

use std::any::Any;
use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::conv::{ParamsConv1D, ParamsConv2D, ParamsConvTranspose1D, ParamsConvTranspose2D};
use candle_core::custom_backend::{BoxedStorage, CustomDevice, CustomStorage, FusedOp};
use candle_core::op::{self, BinaryOp, CmpOp, ReduceOp, UnaryOp};
use candle_core::scalar::Scalar;
use candle_core::{CpuStorage, DType, Layout, Result};

use super::{Backend, BridgeDevice};

/// A storage of backend `B` seen as a Candle custom storage.
pub struct BridgeStorage<B: Backend> {
    storage: B::Storage,
}

impl<B: Backend> std::fmt::Debug for BridgeStorage<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {:?}", B::NAME, self.storage)
    }
}

impl<B: Backend> BridgeStorage<B> {
    /// Wraps `storage`.
    pub fn new(storage: B::Storage) -> Self {
        Self { storage }
    }

    /// The backend's own storage.
    pub fn inner(&self) -> &B::Storage {
        &self.storage
    }

    /// The backend's own storage of a custom storage of this backend (`op` names the
    /// operation in the error for a storage of another backend).
    pub fn downcast<'a>(storage: &'a dyn CustomStorage, op: &str) -> Result<&'a B::Storage> {
        match storage.as_any().downcast_ref::<Self>() {
            Some(s) => Ok(&s.storage),
            None => foreign_operand::<B, _>(storage, op),
        }
    }

    /// The backend's own storage of a mutable custom storage of this backend.
    pub fn downcast_mut<'a>(
        storage: &'a mut dyn CustomStorage,
        op: &str,
    ) -> Result<&'a mut B::Storage> {
        if !storage.as_any().is::<Self>() {
            return foreign_operand::<B, _>(storage, op);
        }
        let not_ours =
            || candle_core::Error::Msg(format!("{op}: not a storage of the {} backend", B::NAME));
        let storage = storage
            .as_any_mut()
            .downcast_mut::<Self>()
            .ok_or_else(not_ours)?;
        Ok(&mut storage.storage)
    }
}

/// The error for an operand that belongs to another custom backend.
fn foreign_operand<B: Backend, T>(storage: &dyn CustomStorage, op: &str) -> Result<T> {
    candle_core::bail!(
        "{op}: operand on {:?} is not a storage of the {} backend",
        storage.device().location(),
        B::NAME
    )
}

/// Wraps a storage of `B` as a boxed custom storage.
pub(crate) fn boxed<B: Backend>(storage: Result<B::Storage>) -> Result<BoxedStorage> {
    storage.map(|s| Box::new(BridgeStorage::<B>::new(s)) as BoxedStorage)
}

/// Calls `$storage.$method::<marker>$args` with the marker type named like the variant of
/// `$op` (candle names both the same).
macro_rules! with_marker {
    ($op:expr, $enum:ident, $storage:expr, $method:ident $args:tt; $($variant:ident),*) => {
        match $op {
            $($enum::$variant => $storage.$method::<op::$variant> $args,)*
        }
    };
}

impl<B: Backend> CustomStorage for BridgeStorage<B> {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn try_clone(&self, layout: &Layout) -> Result<BoxedStorage> {
        boxed::<B>(self.storage.try_clone(layout))
    }

    fn dtype(&self) -> DType {
        self.storage.dtype()
    }

    fn device(&self) -> Arc<dyn CustomDevice> {
        Arc::new(BridgeDevice::<B>::new(self.storage.device().clone()))
    }

    fn to_cpu_storage(&self) -> Result<CpuStorage> {
        self.storage.to_cpu_storage()
    }

    fn transfer_to_device(&self, device: &dyn CustomDevice) -> Result<Option<BoxedStorage>> {
        let Some(device) = device.as_any().downcast_ref::<BridgeDevice<B>>() else {
            return Ok(None);
        };
        Ok(B::transfer(&self.storage, device.inner())?
            .map(|copy| Box::new(BridgeStorage::<B>::new(copy)) as BoxedStorage))
    }

    fn affine(&self, layout: &Layout, mul: f64, add: f64) -> Result<BoxedStorage> {
        boxed::<B>(self.storage.affine(layout, mul, add))
    }

    fn powf(&self, layout: &Layout, e: f64) -> Result<BoxedStorage> {
        boxed::<B>(self.storage.powf(layout, e))
    }

    fn elu(&self, layout: &Layout, alpha: f64) -> Result<BoxedStorage> {
        boxed::<B>(self.storage.elu(layout, alpha))
    }

    fn reduce_op(&self, op: ReduceOp, layout: &Layout, dims: &[usize]) -> Result<BoxedStorage> {
        boxed::<B>(self.storage.reduce_op(op, layout, dims))
    }

    fn cmp(
        &self,
        op: CmpOp,
        rhs: &dyn CustomStorage,
        lhs_l: &Layout,
        rhs_l: &Layout,
    ) -> Result<BoxedStorage> {
        let rhs = Self::downcast(rhs, "cmp")?;
        boxed::<B>(self.storage.cmp(op, rhs, lhs_l, rhs_l))
    }

    fn to_dtype(&self, layout: &Layout, dtype: DType) -> Result<BoxedStorage> {
        boxed::<B>(self.storage.to_dtype(layout, dtype))
    }

    fn unary(&self, op: UnaryOp, layout: &Layout) -> Result<BoxedStorage> {
        let result = with_marker!(op, UnaryOp, self.storage, unary_impl(layout);
            Exp, Log, Sin, Cos, Abs, Neg, Recip, Sqr, Sqrt, Gelu, GeluErf, Erf, Relu, Silu, Tanh,
            Floor, Ceil, Round, Sign);
        boxed::<B>(result)
    }

    fn binary(
        &self,
        op: BinaryOp,
        rhs: &dyn CustomStorage,
        lhs_l: &Layout,
        rhs_l: &Layout,
    ) -> Result<BoxedStorage> {
        let rhs = Self::downcast(rhs, "binary op")?;
        let result = with_marker!(op, BinaryOp, self.storage, binary_impl(rhs, lhs_l, rhs_l);
            Add, Sub, Mul, Div, Maximum, Minimum);
        boxed::<B>(result)
    }

    fn where_cond(
        &self,
        layout: &Layout,
        on_true: &dyn CustomStorage,
        on_true_l: &Layout,
        on_false: &dyn CustomStorage,
        on_false_l: &Layout,
    ) -> Result<BoxedStorage> {
        let on_true = Self::downcast(on_true, "where_cond")?;
        let on_false = Self::downcast(on_false, "where_cond")?;
        boxed::<B>(
            self.storage
                .where_cond(layout, on_true, on_true_l, on_false, on_false_l),
        )
    }

    fn conv1d(
        &self,
        layout: &Layout,
        kernel: &dyn CustomStorage,
        kernel_l: &Layout,
        params: &ParamsConv1D,
    ) -> Result<BoxedStorage> {
        let kernel = Self::downcast(kernel, "conv1d")?;
        boxed::<B>(self.storage.conv1d(layout, kernel, kernel_l, params))
    }

    fn conv_transpose1d(
        &self,
        layout: &Layout,
        kernel: &dyn CustomStorage,
        kernel_l: &Layout,
        params: &ParamsConvTranspose1D,
    ) -> Result<BoxedStorage> {
        let kernel = Self::downcast(kernel, "conv_transpose1d")?;
        boxed::<B>(
            self.storage
                .conv_transpose1d(layout, kernel, kernel_l, params),
        )
    }

    fn conv2d(
        &self,
        layout: &Layout,
        kernel: &dyn CustomStorage,
        kernel_l: &Layout,
        params: &ParamsConv2D,
    ) -> Result<BoxedStorage> {
        let kernel = Self::downcast(kernel, "conv2d")?;
        boxed::<B>(self.storage.conv2d(layout, kernel, kernel_l, params))
    }

    fn conv_transpose2d(
        &self,
        layout: &Layout,
        kernel: &dyn CustomStorage,
        kernel_l: &Layout,
        params: &ParamsConvTranspose2D,
    ) -> Result<BoxedStorage> {
        let kernel = Self::downcast(kernel, "conv_transpose2d")?;
        boxed::<B>(
            self.storage
                .conv_transpose2d(layout, kernel, kernel_l, params),
        )
    }

    fn avg_pool2d(
        &self,
        layout: &Layout,
        kernel_size: (usize, usize),
        stride: (usize, usize),
    ) -> Result<BoxedStorage> {
        boxed::<B>(self.storage.avg_pool2d(layout, kernel_size, stride))
    }

    fn max_pool2d(
        &self,
        layout: &Layout,
        kernel_size: (usize, usize),
        stride: (usize, usize),
    ) -> Result<BoxedStorage> {
        boxed::<B>(self.storage.max_pool2d(layout, kernel_size, stride))
    }

    fn upsample_nearest1d(&self, layout: &Layout, size: usize) -> Result<BoxedStorage> {
        boxed::<B>(self.storage.upsample_nearest1d(layout, size))
    }

    fn upsample_nearest2d(&self, layout: &Layout, h: usize, w: usize) -> Result<BoxedStorage> {
        boxed::<B>(self.storage.upsample_nearest2d(layout, h, w))
    }

    fn upsample_bilinear2d(
        &self,
        layout: &Layout,
        h: usize,
        w: usize,
        align_corners: bool,
        scale_h: Option<f64>,
        scale_w: Option<f64>,
    ) -> Result<BoxedStorage> {
        boxed::<B>(
            self.storage
                .upsample_bilinear2d(layout, h, w, align_corners, scale_h, scale_w),
        )
    }

    fn gather(
        &self,
        layout: &Layout,
        ids: &dyn CustomStorage,
        ids_l: &Layout,
        dim: usize,
    ) -> Result<BoxedStorage> {
        let ids = Self::downcast(ids, "gather")?;
        boxed::<B>(self.storage.gather(layout, ids, ids_l, dim))
    }

    fn scatter_set(
        &mut self,
        layout: &Layout,
        ids: &dyn CustomStorage,
        ids_l: &Layout,
        src: &dyn CustomStorage,
        src_l: &Layout,
        dim: usize,
    ) -> Result<()> {
        let ids = Self::downcast(ids, "scatter_set")?;
        let src = Self::downcast(src, "scatter_set")?;
        self.storage
            .scatter_set(layout, ids, ids_l, src, src_l, dim)
    }

    fn scatter_add_set(
        &mut self,
        layout: &Layout,
        ids: &dyn CustomStorage,
        ids_l: &Layout,
        src: &dyn CustomStorage,
        src_l: &Layout,
        dim: usize,
    ) -> Result<()> {
        let ids = Self::downcast(ids, "scatter_add_set")?;
        let src = Self::downcast(src, "scatter_add_set")?;
        self.storage
            .scatter_add_set(layout, ids, ids_l, src, src_l, dim)
    }

    fn index_select(
        &self,
        ids: &dyn CustomStorage,
        layout: &Layout,
        ids_l: &Layout,
        dim: usize,
    ) -> Result<BoxedStorage> {
        let ids = Self::downcast(ids, "index_select")?;
        boxed::<B>(self.storage.index_select(ids, layout, ids_l, dim))
    }

    fn index_add(
        &self,
        layout: &Layout,
        ids: &dyn CustomStorage,
        ids_l: &Layout,
        src: &dyn CustomStorage,
        src_l: &Layout,
        dim: usize,
    ) -> Result<BoxedStorage> {
        let ids = Self::downcast(ids, "index_add")?;
        let src = Self::downcast(src, "index_add")?;
        boxed::<B>(self.storage.index_add(layout, ids, ids_l, src, src_l, dim))
    }

    fn matmul(
        &self,
        rhs: &dyn CustomStorage,
        bmnk: (usize, usize, usize, usize),
        lhs_l: &Layout,
        rhs_l: &Layout,
    ) -> Result<BoxedStorage> {
        let rhs = Self::downcast(rhs, "matmul")?;
        boxed::<B>(self.storage.matmul(rhs, bmnk, lhs_l, rhs_l))
    }

    fn copy_strided_src(
        &self,
        dst: &mut dyn CustomStorage,
        dst_offset: usize,
        src_l: &Layout,
    ) -> Result<()> {
        let dst = Self::downcast_mut(dst, "copy_strided_src")?;
        self.storage.copy_strided_src(dst, dst_offset, src_l)
    }

    fn copy2d(
        &self,
        dst: &mut dyn CustomStorage,
        d1: usize,
        d2: usize,
        src_stride1: usize,
        dst_stride1: usize,
        src_offset: usize,
        dst_offset: usize,
    ) -> Result<()> {
        let dst = Self::downcast_mut(dst, "copy2d")?;
        self.storage.copy2d(
            dst,
            d1,
            d2,
            src_stride1,
            dst_stride1,
            src_offset,
            dst_offset,
        )
    }

    fn const_set(&mut self, value: Scalar, layout: &Layout) -> Result<()> {
        self.storage.const_set(value, layout)
    }

    fn fused_op(
        &self,
        op: FusedOp,
        layout: &Layout,
        operands: &[(&dyn CustomStorage, &Layout)],
    ) -> Result<BoxedStorage> {
        let operands = operands
            .iter()
            .map(|(s, l)| Ok((Self::downcast(*s, "fused op")?, *l)))
            .collect::<Result<Vec<_>>>()?;
        boxed::<B>(B::fused_op(op, &self.storage, layout, &operands))
    }
}
