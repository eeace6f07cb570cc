//! The one launch path: a [`Launcher`] owns a device's kernel registry and
//! stream, and every kernel of the backend starts through
//! [`Launcher::launch`], with hip-safe's [`KernelArg`] arguments.

use hip_safe::{Device, DeviceView, DeviceViewMut, KernelArg, LaunchConfig, Stream};

use crate::error::{Result, hip, invalid};
use crate::kernel::catalogue::Kernel;
use crate::kernel::registry::Registry;

/// Launches the kernels of one device on one stream.
pub(crate) struct Launcher {
    registry: Registry,
    stream: Stream,
}

impl Launcher {
    /// A launcher for `stream`'s device, with an empty registry.
    pub(crate) fn new(stream: Stream) -> Launcher {
        Launcher {
            registry: Registry::new(stream.device().clone()),
            stream,
        }
    }

    /// The stream every launch is queued on.
    pub(crate) fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The device the kernels run on.
    pub(crate) fn device(&self) -> &Device {
        self.stream.device()
    }

    /// The device's wave size, which launch shapes are whole multiples of.
    pub(crate) fn wave_size(&self) -> u32 {
        self.device().wave_size()
    }

    /// The device's number of compute units, which grids are sized to fill.
    pub(crate) fn compute_units(&self) -> u32 {
        self.device().compute_units()
    }

    /// Compiles (or takes from the code-object cache) and loads every
    /// kernel source now instead of on first use.
    pub(crate) fn load_all(&self) -> Result<()> {
        self.registry.load_all()
    }

    /// The registers a lane of `kernel` uses (loading its module first).
    pub(crate) fn registers(&self, kernel: Kernel) -> Result<u32> {
        self.registry.registers(kernel)
    }

    /// Launches `kernel` on the stream with `args` in order.
    ///
    /// # Safety
    /// `args` must match the kernel's parameter list in number, order and
    /// type, and the sizes among them must keep every access of the kernel
    /// inside the views passed (each op derives both from the same layouts).
    pub(crate) unsafe fn launch(
        &self,
        kernel: Kernel,
        cfg: LaunchConfig,
        args: &[&dyn KernelArg],
    ) -> Result<()> {
        let function = self.registry.function(kernel)?;
        let mut builder = self.stream.launch_builder(&function);
        for &arg in args {
            builder.arg(arg);
        }
        // SAFETY: forwarded to the caller.
        unsafe { builder.launch(cfg) }.map_err(hip)
    }
}

/// The null device pointer an absent optional operand passes.
static NULL_POINTER: u64 = 0;

/// `view` as a kernel's pointer argument, or a null pointer when there is
/// none (the kernels' optional operands: a residual, a norm weight, ALiBi
/// slopes, key lengths).
pub(crate) fn view_or_null<'a>(view: Option<&'a DeviceView<'_, u8>>) -> &'a dyn KernelArg {
    arg_or_null(view)
}

/// [`view_or_null`] of a view the kernel writes.
pub(crate) fn mut_view_or_null<'a>(view: Option<&'a DeviceViewMut<'_, u8>>) -> &'a dyn KernelArg {
    arg_or_null(view)
}

/// `arg`, or a null pointer when there is none.
fn arg_or_null<A: KernelArg>(arg: Option<&A>) -> &dyn KernelArg {
    match arg {
        Some(arg) => arg,
        None => &NULL_POINTER,
    }
}

/// `v` as a kernel's 32-bit unsigned parameter, or an error naming `what`.
pub(crate) fn to_u32(op: &'static str, what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| {
        invalid(
            op,
            format!("{what} = {v} exceeds the kernels' 32-bit limit"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_beyond_32_bits_are_refused() {
        let err = to_u32("softmax", "cols", 1 << 32).unwrap_err().to_string();
        assert!(err.contains("softmax") && err.contains("cols"), "{err}");
        assert_eq!(to_u32("t", "cols", 7).unwrap(), 7);
    }
}
