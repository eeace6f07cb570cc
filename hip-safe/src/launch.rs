//! Kernel launches: [`LaunchConfig`], the [`KernelArg`] marker and the
//! [`LaunchArgs`] builder whose one unsafe call is [`LaunchArgs::launch`].

use std::ffi::c_void;

use crate::error::{Error, Result};
use crate::module::Function;
use crate::repr::DeviceRepr;
use crate::result::CheckStatus;
use crate::stream::Stream;

/// Grid and block shape plus dynamic shared memory of one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in x, y, z.
    pub grid_dim: (u32, u32, u32),
    /// Threads per block in x, y, z.
    pub block_dim: (u32, u32, u32),
    /// Dynamic shared memory per block in bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// Threads per block used by [`LaunchConfig::for_num_elems`]: a multiple
    /// of both wave sizes (32 and 64).
    pub const DEFAULT_BLOCK: u32 = 256;

    /// One thread per element in 1-D blocks of [`Self::DEFAULT_BLOCK`]
    /// threads (at least one block).
    pub fn for_num_elems(n: u32) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (n.div_ceil(Self::DEFAULT_BLOCK).max(1), 1, 1),
            block_dim: (Self::DEFAULT_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    fn validate(&self) -> Result<()> {
        let (g, b) = (self.grid_dim, self.block_dim);
        if [g.0, g.1, g.2, b.0, b.1, b.2].contains(&0) {
            return Err(Error::invalid(
                "kernel launch",
                format_args!("grid {g:?} and block {b:?} must not have a zero dimension"),
            ));
        }
        Ok(())
    }
}

/// A value that can be passed to a kernel parameter.
///
/// Implemented for every [`DeviceRepr`] type (passed by value) and for
/// device buffers and views (their device pointer is passed, so the kernel
/// parameter is `T*`).
///
/// # Safety
/// `kernel_param` must return the address of a value whose bytes are exactly
/// what the kernel parameter expects, valid while `self` is borrowed;
/// `owning_stream` must name the stream owning any device memory the value
/// refers to.
pub unsafe trait KernelArg {
    /// The address HIP copies the parameter's bytes from.
    fn kernel_param(&self) -> *mut c_void;
    /// The stream owning the device memory this argument points to, if any.
    fn owning_stream(&self) -> Option<&Stream> {
        None
    }
}

// SAFETY: a plain-data value is passed by value: its own address.
unsafe impl<T: DeviceRepr> KernelArg for T {
    fn kernel_param(&self) -> *mut c_void {
        std::ptr::from_ref(self).cast_mut().cast()
    }
}

/// Collects a kernel's arguments; built by [`Stream::launch_builder`].
///
/// ```no_run
/// # fn f(stream: &hip_safe::Stream, func: &hip_safe::Function) -> hip_safe::Result<()> {
/// use hip_safe::LaunchConfig;
/// let n = 1024u32;
/// let out = stream.alloc_zeros::<f32>(n as usize)?;
/// let mut launch = stream.launch_builder(func);
/// launch.arg(&out).arg(&2.0f32).arg(&n);
/// // SAFETY: the kernel is `(float* out, float a, unsigned n)` and writes
/// // only `out[0..n]`.
/// unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }?;
/// # Ok(()) }
/// ```
pub struct LaunchArgs<'a> {
    stream: &'a Stream,
    function: &'a Function,
    params: Vec<*mut c_void>,
    arg_streams: Vec<&'a Stream>,
}

impl Stream {
    /// Starts a launch of `function` on this stream.
    pub fn launch_builder<'a>(&'a self, function: &'a Function) -> LaunchArgs<'a> {
        LaunchArgs {
            stream: self,
            function,
            params: Vec::new(),
            arg_streams: Vec::new(),
        }
    }
}

impl<'a> LaunchArgs<'a> {
    /// Appends the next kernel argument (scalars by value, buffers and views
    /// as device pointers).
    pub fn arg<A: KernelArg + ?Sized>(&mut self, arg: &'a A) -> &mut Self {
        self.params.push(arg.kernel_param());
        if let Some(s) = arg.owning_stream().filter(|s| *s != self.stream) {
            if !self.arg_streams.contains(&s) {
                self.arg_streams.push(s);
            }
        }
        self
    }

    /// Launches the kernel with the arguments pushed so far.
    ///
    /// Buffers owned by other streams are ordered with events: the launch
    /// waits for their streams, and their streams wait for the launch, so
    /// nothing is freed while the kernel may still use it. When a stream
    /// cannot be made to wait for the launch, the host waits for the kernel
    /// before returning.
    ///
    /// # Safety
    /// The kernel's parameter list must match the pushed arguments in number,
    /// order and type, and the kernel must only access memory inside the
    /// buffers passed to it (for this grid), writing only to buffers that are
    /// not read concurrently elsewhere.
    pub unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<()> {
        cfg.validate()?;
        if self.function.device() != self.stream.device() {
            return Err(Error::invalid(
                format_args!("launch of `{}`", self.function.name()),
                format_args!(
                    "the kernel is loaded on device {} but the stream is on device {}",
                    self.function.device().ordinal(),
                    self.stream.device().ordinal()
                ),
            ));
        }
        self.stream.bind()?;
        for s in &self.arg_streams {
            self.stream.join(s)?;
        }
        let (g, b) = (cfg.grid_dim, cfg.block_dim);
        // SAFETY: live function and stream handles; `params` holds one valid
        // pointer per argument, borrowed for 'a; the caller guarantees the
        // signature and memory accesses match.
        unsafe {
            self.stream.api().hipModuleLaunchKernel(
                self.function.raw(),
                g.0,
                g.1,
                g.2,
                b.0,
                b.1,
                b.2,
                cfg.shared_mem_bytes,
                self.stream.raw(),
                self.params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .check(format_args!(
            "hipModuleLaunchKernel(`{}`, grid {g:?}, block {b:?}, {} B shared, {} args)",
            self.function.name(),
            cfg.shared_mem_bytes,
            self.params.len()
        ))?;
        // Every owner stream must wait for the kernel (or the host waits
        // for it, see `Stream::join_back`) before anything of theirs can be
        // freed or reused, so one failure does not skip the others.
        let joins: Vec<Result<()>> = self
            .arg_streams
            .iter()
            .map(|s| s.join_back(self.stream))
            .collect();
        joins.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn for_num_elems_covers_every_element() {
        let cfg = LaunchConfig::for_num_elems(1000);
        assert_eq!(cfg.block_dim, (256, 1, 1));
        assert_eq!(cfg.grid_dim, (4, 1, 1));
        assert_eq!(LaunchConfig::for_num_elems(0).grid_dim, (1, 1, 1));
        assert_eq!(LaunchConfig::for_num_elems(u32::MAX).grid_dim.0, 16_777_216);
    }

    #[test]
    fn zero_dimensions_are_rejected() {
        let mut cfg = LaunchConfig::for_num_elems(10);
        assert!(cfg.validate().is_ok());
        cfg.block_dim.1 = 0;
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("zero dimension"), "{err}");
    }

    #[test]
    fn scalars_pass_their_own_address() {
        let x = 7u32;
        assert_eq!(x.kernel_param() as usize, &x as *const u32 as usize);
        assert!(x.owning_stream().is_none());
    }
}
