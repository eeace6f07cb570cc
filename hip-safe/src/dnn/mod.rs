//! [`Dnn`]: MIOpen convolutions (forward and backward-data / transposed),
//! 1-D and 2-D, with groups, padding, stride and dilation.

mod config;
mod descriptor;

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::fmt;
use std::sync::Mutex;

use half::{bf16, f16};
use miopen_sys::{
    MiopenApi, miopenConvAlgoPerf_t, miopenConvBwdDataAlgorithm_t, miopenConvFwdAlgorithm_t,
    miopenDataType_t, miopenHandle_t,
};

use crate::buffer::{DeviceBuffer, DevicePtr, DevicePtrMut};
use crate::error::{DnnError, Result};
use crate::repr::DeviceRepr;
use crate::result::{CheckStatus, out, out_ptr};
use crate::stream::Stream;
use config::Sizes;
pub use config::{Conv1dConfig, ConvConfig, ConvTransposeConfig};
use descriptor::{ConvDescriptor, TensorDescriptor};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// Element types MIOpen convolves here: `f32`, `f16`, `bf16` (scaling
/// factors are `f32` for all three).
pub trait DnnType: DeviceRepr + sealed::Sealed {
    /// MIOpen's name for the type.
    const DATATYPE: miopenDataType_t;
    /// Short name for messages.
    const NAME: &'static str;
}

impl DnnType for f32 {
    const DATATYPE: miopenDataType_t = miopenDataType_t::miopenFloat;
    const NAME: &'static str = "f32";
}

impl DnnType for f16 {
    const DATATYPE: miopenDataType_t = miopenDataType_t::miopenHalf;
    const NAME: &'static str = "f16";
}

impl DnnType for bf16 {
    const DATATYPE: miopenDataType_t = miopenDataType_t::miopenBFloat16;
    const NAME: &'static str = "bf16";
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Direction {
    Forward,
    BackwardData,
}

/// Descriptors and the algorithm chosen by MIOpen's Find for one shape.
struct Plan {
    x: TensorDescriptor,
    w: TensorDescriptor,
    y: TensorDescriptor,
    conv: ConvDescriptor,
    /// `miopenConvFwdAlgorithm_t` or `miopenConvBwdDataAlgorithm_t` value.
    algo: u32,
    workspace: usize,
}

type PlanKey = (Direction, &'static str, ConvConfig);

/// Everything used under the lock: MIOpen handles must not be used
/// concurrently.
struct State {
    handle: miopenHandle_t,
    plans: HashMap<PlanKey, Plan>,
    workspace: Option<DeviceBuffer<u8>>,
}

// SAFETY: the MIOpen handle is not tied to the creating thread, and `State`
// is only reached through the mutex in `Dnn`, so it is never used
// concurrently; descriptors and the workspace buffer are Send.
unsafe impl Send for State {}

/// An MIOpen handle bound to one stream, with the algorithm choice cached
/// per shape and one workspace buffer grown on demand.
///
/// Safe to share between threads: calls are serialised internally.
///
/// ```no_run
/// use hip_safe::{ConvConfig, Device, Dnn};
/// let stream = Device::new(0)?.new_stream()?;
/// let dnn = Dnn::new(&stream)?;
/// let cfg = ConvConfig {
///     batch: 1, in_channels: 3, out_channels: 8, input: [32, 32], kernel: [3, 3],
///     padding: [1, 1], stride: [1, 1], dilation: [1, 1], groups: 1,
/// };
/// let x = stream.alloc_zeros::<f32>(3 * 32 * 32)?;
/// let w = stream.alloc_zeros::<f32>(8 * 3 * 3 * 3)?;
/// let mut y = stream.alloc_zeros::<f32>(8 * 32 * 32)?;
/// dnn.conv_forward(cfg, &x, &w, &mut y)?;
/// # Ok::<(), hip_safe::Error>(())
/// ```
pub struct Dnn {
    api: &'static MiopenApi,
    stream: Stream,
    state: Mutex<State>,
}

impl fmt::Debug for Dnn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dnn").field("stream", &self.stream).finish()
    }
}

impl Dnn {
    /// Creates an MIOpen handle on `stream`'s device, bound to `stream`.
    pub fn new(stream: &Stream) -> Result<Dnn> {
        let api = miopen_sys::miopen()?;
        stream.bind()?;
        let handle = out_ptr("miopenCreate", |handle| {
            // SAFETY: valid out-pointer.
            unsafe { api.miopenCreate(handle) }
        })?;
        let dnn = Dnn {
            api,
            stream: stream.clone(),
            state: Mutex::new(State {
                handle,
                plans: HashMap::new(),
                workspace: None,
            }),
        };
        // SAFETY: live handle; the stream outlives it (`dnn` holds a clone).
        unsafe { api.miopenSetStream(handle, stream.raw()) }.check("miopenSetStream")?;
        Ok(dnn)
    }

    /// The stream the handle queues work on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// `y = conv(x, w)` (cross-correlation); takes a [`ConvConfig`] or a
    /// [`Conv1dConfig`]. The first call for a shape runs MIOpen's Find.
    pub fn conv_forward<T: DnnType>(
        &self,
        cfg: impl Into<ConvConfig>,
        x: &impl DevicePtr<T>,
        w: &impl DevicePtr<T>,
        y: &mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        self.run(Direction::Forward, cfg.into(), x, w, y)
    }

    /// `dx = ∂conv/∂x` applied to `dy`: the backward-data pass of the forward
    /// convolution `cfg` (whose input has the shape of `dx`).
    pub fn conv_backward_data<T: DnnType>(
        &self,
        cfg: impl Into<ConvConfig>,
        dy: &impl DevicePtr<T>,
        w: &impl DevicePtr<T>,
        dx: &mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        self.run(Direction::BackwardData, cfg.into(), dy, w, dx)
    }

    /// `y = conv_transpose(x, w)` (see [`ConvTransposeConfig`]), computed as
    /// the backward-data pass of the equivalent forward convolution.
    pub fn conv_transpose<T: DnnType>(
        &self,
        cfg: &ConvTransposeConfig,
        x: &impl DevicePtr<T>,
        w: &impl DevicePtr<T>,
        y: &mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        let forward = cfg
            .as_forward()
            .map_err(|reason| DnnError::InvalidArgument {
                op: format!("conv_transpose({}, {cfg:?})", T::NAME),
                reason,
            })?;
        self.conv_backward_data(forward, x, w, y)
    }

    /// Runs one convolution; `src` is x (forward) or dy (backward-data),
    /// `dst` is y or dx.
    fn run<T: DnnType>(
        &self,
        dir: Direction,
        cfg: ConvConfig,
        src: &impl DevicePtr<T>,
        w: &impl DevicePtr<T>,
        dst: &mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        let op = format!("{dir:?} convolution ({}, {cfg:?})", T::NAME);
        let invalid = |reason: String| DnnError::InvalidArgument {
            op: op.clone(),
            reason,
        };
        let sizes = cfg.validate().map_err(invalid)?;
        let (src_need, dst_need) = match dir {
            Direction::Forward => (("x", sizes.x), ("y", sizes.y)),
            Direction::BackwardData => (("dy", sizes.y), ("dx", sizes.x)),
        };
        for ((name, need), have) in [
            (src_need, src.len()),
            (("w", sizes.w), w.len()),
            (dst_need, dst.len()),
        ] {
            if have < need {
                return Err(invalid(format!("{name} needs {need} elements but has {have}")).into());
            }
        }
        for s in [src.stream(), w.stream(), dst.stream()] {
            if s.device() != self.stream.device() {
                return Err(invalid(format!(
                    "an operand lives on device {}, the handle on device {}",
                    s.device().ordinal(),
                    self.stream.device().ordinal()
                ))
                .into());
            }
            self.stream.join(s)?;
        }
        self.stream.bind()?;
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let state = &mut *state;
        let key = (dir, T::NAME, cfg);
        let buffers = Buffers {
            src: src.device_ptr(),
            w: w.device_ptr(),
            dst: dst.device_ptr_mut(),
        };
        if !state.plans.contains_key(&key) {
            let plan = self.find::<T>(dir, &cfg, &sizes, &buffers, state)?;
            state.plans.insert(key, plan);
        }
        let plan = &state.plans[&key];
        let (ws_ptr, ws_size) =
            ensure_workspace(&self.stream, &mut state.workspace, plan.workspace)?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (alpha, beta) = (
            std::ptr::from_ref(&alpha).cast::<c_void>(),
            std::ptr::from_ref(&beta).cast::<c_void>(),
        );
        // SAFETY: live handle (under the lock) and descriptors; the buffers
        // hold at least the element counts the descriptors describe
        // (validated above); alpha/beta are f32 host values, as MIOpen
        // expects for these data types; the workspace has `ws_size` bytes.
        unsafe {
            match dir {
                Direction::Forward => self.api.miopenConvolutionForward(
                    state.handle,
                    alpha,
                    plan.x.raw,
                    buffers.src,
                    plan.w.raw,
                    buffers.w,
                    plan.conv.raw,
                    miopenConvFwdAlgorithm_t(plan.algo),
                    beta,
                    plan.y.raw,
                    buffers.dst,
                    ws_ptr,
                    ws_size,
                ),
                Direction::BackwardData => self.api.miopenConvolutionBackwardData(
                    state.handle,
                    alpha,
                    plan.y.raw,
                    buffers.src,
                    plan.w.raw,
                    buffers.w,
                    plan.conv.raw,
                    miopenConvBwdDataAlgorithm_t(plan.algo),
                    beta,
                    plan.x.raw,
                    buffers.dst,
                    ws_ptr,
                    ws_size,
                ),
            }
        }
        .check(&op)?;
        for s in [src.stream(), w.stream(), dst.stream()] {
            s.join(&self.stream)?;
        }
        Ok(())
    }

    /// Builds descriptors, checks MIOpen agrees on the output shape, and
    /// runs Find (which writes to `dst`) to choose the algorithm.
    fn find<T: DnnType>(
        &self,
        dir: Direction,
        cfg: &ConvConfig,
        sizes: &Sizes,
        buffers: &Buffers,
        state: &mut State,
    ) -> Result<Plan> {
        let api = self.api;
        let x = TensorDescriptor::new(api, T::DATATYPE, sizes.x_dims)?;
        let w = TensorDescriptor::new(api, T::DATATYPE, sizes.w_dims)?;
        let y = TensorDescriptor::new(api, T::DATATYPE, sizes.y_dims)?;
        let conv = ConvDescriptor::new(api, cfg)?;
        let (n_dims, out_dims) = out(
            "miopenGetConvolutionNdForwardOutputDim",
            |(n_dims, out_dims): &mut (c_int, [c_int; 4])| {
                // SAFETY: live descriptors; `out_dims` has room for the 4
                // dims of a 4-D tensor.
                unsafe {
                    api.miopenGetConvolutionNdForwardOutputDim(
                        conv.raw,
                        x.raw,
                        w.raw,
                        n_dims,
                        out_dims.as_mut_ptr(),
                    )
                }
            },
        )?;
        let expected = sizes.y_dims.map(|d| d as i32);
        if n_dims != 4 || out_dims != expected {
            return Err(DnnError::InvalidArgument {
                op: format!("{dir:?} convolution ({}, {cfg:?})", T::NAME),
                reason: format!("MIOpen computes output dims {out_dims:?}, expected {expected:?}"),
            }
            .into());
        }
        let ws_query = out(
            format_args!("{dir:?} convolution workspace query"),
            |ws_query| {
                // SAFETY: live handle and descriptors, valid out-pointer.
                unsafe {
                    match dir {
                        Direction::Forward => api.miopenConvolutionForwardGetWorkSpaceSize(
                            state.handle,
                            w.raw,
                            x.raw,
                            conv.raw,
                            y.raw,
                            ws_query,
                        ),
                        Direction::BackwardData => api
                            .miopenConvolutionBackwardDataGetWorkSpaceSize(
                                state.handle,
                                y.raw,
                                w.raw,
                                conv.raw,
                                x.raw,
                                ws_query,
                            ),
                    }
                }
            },
        )?;
        let (ws_ptr, ws_size) = ensure_workspace(&self.stream, &mut state.workspace, ws_query)?;
        // Both directions' Find take the same arguments: the descriptor and
        // buffer read (x or dy), the weights, the descriptor and buffer
        // written (y or dx).
        let find = match dir {
            Direction::Forward => MiopenApi::miopenFindConvolutionForwardAlgorithm,
            Direction::BackwardData => MiopenApi::miopenFindConvolutionBackwardDataAlgorithm,
        };
        let (src, dst) = match dir {
            Direction::Forward => (&x, &y),
            Direction::BackwardData => (&y, &x),
        };
        let (returned, perf) = out(
            format_args!("{dir:?} convolution Find ({}, {cfg:?})", T::NAME),
            |(returned, perf): &mut (c_int, [miopenConvAlgoPerf_t; 4])| {
                // SAFETY: live handle and descriptors; the buffers hold what
                // the descriptors describe (validated by the caller); `perf`
                // has room for the 4 requested results; the workspace has
                // `ws_size` bytes.
                unsafe {
                    find(
                        api,
                        state.handle,
                        src.raw,
                        buffers.src,
                        w.raw,
                        buffers.w,
                        conv.raw,
                        dst.raw,
                        buffers.dst,
                        perf.len() as c_int,
                        returned,
                        perf.as_mut_ptr(),
                        ws_ptr,
                        ws_size,
                        false,
                    )
                }
            },
        )?;
        if returned < 1 {
            return Err(DnnError::Failed {
                op: format!("{dir:?} convolution Find ({}, {cfg:?})", T::NAME),
                code: 0,
                message: "MIOpen found no algorithm".into(),
            }
            .into());
        }
        let best = perf[0];
        // SAFETY: Find for this direction fills the union member of that
        // direction; both members are u32 newtypes, so either read is defined.
        let algo = unsafe {
            match dir {
                Direction::Forward => best.__bindgen_anon_1.fwd_algo.0,
                Direction::BackwardData => best.__bindgen_anon_1.bwd_data_algo.0,
            }
        };
        Ok(Plan {
            x,
            w,
            y,
            conv,
            algo,
            workspace: best.memory,
        })
    }
}

/// Raw device addresses of one call's operands.
struct Buffers {
    src: *const c_void,
    w: *const c_void,
    dst: *mut c_void,
}

/// Grows the workspace to at least `bytes` (freeing the old one in stream
/// order) and returns its address and size; `(null, 0)` when none is needed.
fn ensure_workspace(
    stream: &Stream,
    workspace: &mut Option<DeviceBuffer<u8>>,
    bytes: usize,
) -> Result<(*mut c_void, usize)> {
    if bytes == 0 {
        return Ok((std::ptr::null_mut(), 0));
    }
    if workspace.as_ref().is_none_or(|w| w.len() < bytes) {
        *workspace = None;
        // SAFETY: scratch memory; MIOpen never reads it before writing.
        *workspace = Some(unsafe { stream.alloc::<u8>(bytes) }?);
    }
    match workspace {
        Some(w) => Ok((w.device_ptr_mut(), w.len())),
        None => Ok((std::ptr::null_mut(), 0)),
    }
}

impl Drop for Dnn {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        // Descriptors go first, then the handle.
        state.plans.clear();
        let (api, handle) = (self.api, state.handle);
        self.stream.device().release(|_| {
            // SAFETY: created in `new`, destroyed exactly once here.
            unsafe { api.miopenDestroy(handle) }
        });
    }
}
