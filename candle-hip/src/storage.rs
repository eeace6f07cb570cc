//! [`HipStorage`]: candle's `BackendStorage` on a device buffer.

use std::fmt;

use candle_core::backend::BackendStorage;
use candle_core::conv::{ParamsConv1D, ParamsConv2D, ParamsConvTranspose1D, ParamsConvTranspose2D};
use candle_core::op::{BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use candle_core::scalar::Scalar;
use candle_core::{CpuStorage, DType, Layout};
use hip_safe::{DeviceBuffer, DeviceView, DeviceViewMut};

use crate::device::HipDevice;
use crate::dtype;
use crate::error::{HipBackendError, Result, hip};
use crate::kernel::catalogue as cat;
use crate::ops::{conv, copy, elementwise, indexing, matmul, pool, reduce};
use crate::size;

/// Tensor data on a HIP device: an untyped device buffer and its dtype.
///
/// The buffer holds `len()` elements of `dtype()` as raw bytes, so one code
/// path serves every dtype; kernels receive typed pointers into it.
pub struct HipStorage {
    buffer: DeviceBuffer<u8>,
    dtype: DType,
    device: HipDevice,
}

impl fmt::Debug for HipStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipStorage")
            .field("dtype", &self.dtype)
            .field("len", &self.len())
            .field("device", &self.device)
            .finish()
    }
}

impl HipStorage {
    /// Wraps `buffer`, whose byte length is a multiple of `dtype`'s size.
    pub(crate) fn new(buffer: DeviceBuffer<u8>, dtype: DType, device: HipDevice) -> HipStorage {
        HipStorage {
            buffer,
            dtype,
            device,
        }
    }

    /// The raw bytes, e.g. to pass the data to a kernel of one's own.
    pub fn buffer(&self) -> &DeviceBuffer<u8> {
        &self.buffer
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.buffer.len() / dtype::elem_bytes(self.dtype)
    }

    /// Whether the storage holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of this storage on `device`, another HIP device, copied
    /// device to device (`hipMemcpyPeerAsync`) without the host. Peer
    /// access between the two devices is enabled on first use where the
    /// hardware allows it; elsewhere the runtime stages the copy itself.
    pub fn to_device(&self, device: &HipDevice) -> Result<HipStorage> {
        let (src, dst) = (self.device.hip_device(), device.hip_device());
        dst.try_enable_peer_access(src).map_err(hip)?;
        let buffer = device.stream().clone_dtod(&self.buffer).map_err(hip)?;
        Ok(HipStorage::new(buffer, self.dtype, device.clone()))
    }

    /// Byte range of elements `start..start + count`, checked against the buffer.
    fn byte_range(
        &self,
        op: &'static str,
        start: usize,
        count: usize,
    ) -> Result<std::ops::Range<usize>> {
        let size = dtype::elem_bytes(self.dtype);
        let out_of_bounds = || {
            candle_core::Error::from(HipBackendError::OutOfBounds {
                op,
                start,
                end: start.saturating_add(count),
                len: self.len(),
            })
        };
        let end = start.checked_add(count).ok_or_else(out_of_bounds)?;
        if end > self.len() {
            return Err(out_of_bounds());
        }
        Ok(start * size..end * size)
    }

    /// Read access to elements `start..start + count`.
    pub(crate) fn view_range(
        &self,
        op: &'static str,
        start: usize,
        count: usize,
    ) -> Result<DeviceView<'_, u8>> {
        let range = self.byte_range(op, start, count)?;
        self.buffer.slice(range).map_err(hip)
    }

    /// Write access to elements `start..start + count`.
    pub(crate) fn view_range_mut(
        &mut self,
        op: &'static str,
        start: usize,
        count: usize,
    ) -> Result<DeviceViewMut<'_, u8>> {
        let range = self.byte_range(op, start, count)?;
        self.buffer.slice_mut(range).map_err(hip)
    }

    /// Read access to every element `layout` reaches, starting at its first one.
    pub(crate) fn view(&self, op: &'static str, layout: &Layout) -> Result<DeviceView<'_, u8>> {
        let span = size::span(op, layout.dims(), layout.stride())?;
        self.view_range(op, layout.start_offset(), span)
    }

    /// Write access to every element `layout` reaches, starting at its first one.
    pub(crate) fn view_mut(
        &mut self,
        op: &'static str,
        layout: &Layout,
    ) -> Result<DeviceViewMut<'_, u8>> {
        let span = size::span(op, layout.dims(), layout.stride())?;
        self.view_range_mut(op, layout.start_offset(), span)
    }

    /// Write access to the whole buffer.
    pub(crate) fn view_all_mut(&mut self) -> DeviceViewMut<'_, u8> {
        self.buffer.as_view_mut()
    }

    /// Errors unless `other` lives on the same device.
    pub(crate) fn check_device(&self, other: &HipStorage, op: &'static str) -> Result<()> {
        self.device.check_same(&other.device, op)
    }

    /// Errors unless `other` has the same dtype.
    pub(crate) fn check_dtype(&self, other: &HipStorage, op: &'static str) -> Result<()> {
        if self.dtype == other.dtype {
            Ok(())
        } else {
            Err(candle_core::Error::DTypeMismatchBinaryOp {
                lhs: self.dtype,
                rhs: other.dtype,
                op,
            }
            .bt())
        }
    }
}

impl BackendStorage for HipStorage {
    type Device = HipDevice;

    fn try_clone(&self, _: &Layout) -> Result<Self> {
        let buffer = self.device.stream().clone_dtod(&self.buffer).map_err(hip)?;
        Ok(HipStorage::new(buffer, self.dtype, self.device.clone()))
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn device(&self) -> &HipDevice {
        &self.device
    }

    fn to_cpu_storage(&self) -> Result<CpuStorage> {
        let stream = self.device.stream();
        let cpu = dtype::cpu_from_bytes(self.dtype, self.len(), |bytes| {
            debug_assert_eq!(bytes.len(), self.buffer.num_bytes());
            stream.memcpy_dtoh(&self.buffer, bytes).map_err(hip)
        })?;
        self.device.check_faults()?;
        Ok(cpu)
    }

    fn affine(&self, layout: &Layout, mul: f64, add: f64) -> Result<Self> {
        elementwise::affine(self, layout, mul, add)
    }

    fn powf(&self, layout: &Layout, e: f64) -> Result<Self> {
        elementwise::with_param(self, layout, &cat::POWF, "powf", e)
    }

    fn elu(&self, layout: &Layout, alpha: f64) -> Result<Self> {
        elementwise::with_param(self, layout, &cat::ELU, "elu", alpha)
    }

    fn reduce_op(&self, op: ReduceOp, layout: &Layout, dims: &[usize]) -> Result<Self> {
        reduce::reduce(self, op, layout, dims)
    }

    fn cmp(&self, op: CmpOp, rhs: &Self, lhs_l: &Layout, rhs_l: &Layout) -> Result<Self> {
        elementwise::cmp(self, op, rhs, lhs_l, rhs_l)
    }

    fn to_dtype(&self, layout: &Layout, dtype: DType) -> Result<Self> {
        elementwise::cast(self, layout, dtype)
    }

    fn unary_impl<B: UnaryOpT>(&self, layout: &Layout) -> Result<Self> {
        elementwise::unary(
            self,
            layout,
            elementwise::candle_family(B::KERNEL, B::NAME)?,
            B::NAME,
        )
    }

    fn binary_impl<B: BinaryOpT>(
        &self,
        rhs: &Self,
        lhs_l: &Layout,
        rhs_l: &Layout,
    ) -> Result<Self> {
        let family = elementwise::candle_family(B::KERNEL, B::NAME)?;
        elementwise::binary(self, rhs, lhs_l, rhs_l, family, B::NAME)
    }

    fn where_cond(
        &self,
        layout: &Layout,
        on_true: &Self,
        true_l: &Layout,
        on_false: &Self,
        false_l: &Layout,
    ) -> Result<Self> {
        elementwise::where_cond(self, layout, on_true, true_l, on_false, false_l)
    }

    fn conv1d(
        &self,
        layout: &Layout,
        kernel: &Self,
        kernel_l: &Layout,
        params: &ParamsConv1D,
    ) -> Result<Self> {
        conv::params::conv1d(self, layout, kernel, kernel_l, params)
    }

    fn conv_transpose1d(
        &self,
        layout: &Layout,
        kernel: &Self,
        kernel_l: &Layout,
        params: &ParamsConvTranspose1D,
    ) -> Result<Self> {
        conv::params::conv_transpose1d(self, layout, kernel, kernel_l, params)
    }

    fn conv2d(
        &self,
        layout: &Layout,
        kernel: &Self,
        kernel_l: &Layout,
        params: &ParamsConv2D,
    ) -> Result<Self> {
        conv::params::conv2d(self, layout, kernel, kernel_l, params)
    }

    fn conv_transpose2d(
        &self,
        layout: &Layout,
        kernel: &Self,
        kernel_l: &Layout,
        params: &ParamsConvTranspose2D,
    ) -> Result<Self> {
        conv::params::conv_transpose2d(self, layout, kernel, kernel_l, params)
    }

    fn avg_pool2d(
        &self,
        layout: &Layout,
        kernel: (usize, usize),
        stride: (usize, usize),
    ) -> Result<Self> {
        pool::avg_pool2d(self, layout, kernel, stride)
    }

    fn max_pool2d(
        &self,
        layout: &Layout,
        kernel: (usize, usize),
        stride: (usize, usize),
    ) -> Result<Self> {
        pool::max_pool2d(self, layout, kernel, stride)
    }

    fn upsample_nearest1d(&self, layout: &Layout, size: usize) -> Result<Self> {
        pool::upsample_nearest1d(self, layout, size)
    }

    fn upsample_nearest2d(&self, layout: &Layout, h: usize, w: usize) -> Result<Self> {
        pool::upsample_nearest2d(self, layout, h, w)
    }

    fn upsample_bilinear2d(
        &self,
        layout: &Layout,
        h: usize,
        w: usize,
        align_corners: bool,
        scale_h: Option<f64>,
        scale_w: Option<f64>,
    ) -> Result<Self> {
        pool::upsample_bilinear2d(self, layout, h, w, align_corners, scale_h, scale_w)
    }

    fn gather(&self, layout: &Layout, ids: &Self, ids_l: &Layout, dim: usize) -> Result<Self> {
        indexing::gather(self, layout, ids, ids_l, dim)
    }

    fn scatter_set(
        &mut self,
        layout: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<()> {
        indexing::scatter(
            self,
            layout,
            ids,
            ids_l,
            src,
            src_l,
            dim,
            indexing::Scatter::Set,
        )
    }

    fn scatter_add_set(
        &mut self,
        layout: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<()> {
        indexing::scatter(
            self,
            layout,
            ids,
            ids_l,
            src,
            src_l,
            dim,
            indexing::Scatter::Add,
        )
    }

    fn index_select(
        &self,
        ids: &Self,
        layout: &Layout,
        ids_l: &Layout,
        dim: usize,
    ) -> Result<Self> {
        indexing::index_select(self, ids, layout, ids_l, dim)
    }

    fn index_add(
        &self,
        layout: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<Self> {
        indexing::index_add(self, layout, ids, ids_l, src, src_l, dim)
    }

    fn matmul(
        &self,
        rhs: &Self,
        bmnk: (usize, usize, usize, usize),
        lhs_l: &Layout,
        rhs_l: &Layout,
    ) -> Result<Self> {
        matmul::matmul(self, rhs, bmnk, lhs_l, rhs_l)
    }

    fn copy_strided_src(&self, dst: &mut Self, dst_offset: usize, src_l: &Layout) -> Result<()> {
        copy::copy_strided(self, dst, dst_offset, src_l)
    }

    fn copy2d(
        &self,
        dst: &mut Self,
        d1: usize,
        d2: usize,
        src_stride1: usize,
        dst_stride1: usize,
        src_offset: usize,
        dst_offset: usize,
    ) -> Result<()> {
        let shape = copy::Copy2d {
            rows: d1,
            cols: d2,
            src_stride: src_stride1,
            dst_stride: dst_stride1,
            src_offset,
            dst_offset,
        };
        copy::copy2d(self, dst, shape)
    }

    fn const_set(&mut self, value: Scalar, layout: &Layout) -> Result<()> {
        copy::const_set(self, value, layout)
    }
}
