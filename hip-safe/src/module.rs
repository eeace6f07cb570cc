//! [`Module`] (a loaded code object) and [`Function`] (a kernel in it).

use std::ffi::{CString, c_int};
use std::fmt;
use std::sync::Arc;

use hip_sys::{hipFunction_attribute, hipFunction_t, hipModule_t};

use crate::code_object::{self, CodeTarget};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::result::{out, out_ptr};

/// A code object loaded on one device; unloaded when the module and every
/// [`Function`] taken from it are dropped.
///
/// ```no_run
/// use hip_safe::{Device, Module};
/// let dev = Device::new(0)?;
/// let code = std::fs::read("kernels.hsaco").expect("code object");
/// let module = Module::from_code_object(&dev, &code)?;
/// let scale = module.function("scale")?;
/// # Ok::<(), hip_safe::Error>(())
/// ```
#[derive(Clone)]
pub struct Module {
    inner: Arc<ModuleInner>,
}

struct ModuleInner {
    handle: hipModule_t,
    device: Device,
}

// SAFETY: a hipModule_t is a handle into the thread-safe HIP runtime,
// unloaded exactly once when the last `Arc` owner drops.
unsafe impl Send for ModuleInner {}
// SAFETY: shared access only looks up functions, which HIP allows concurrently.
unsafe impl Sync for ModuleInner {}

/// A kernel of a [`Module`]; keeps its module loaded. Cheap to clone.
#[derive(Clone)]
pub struct Function {
    handle: hipFunction_t,
    name: Arc<str>,
    module: Arc<ModuleInner>,
}

// SAFETY: a hipFunction_t is an immutable handle owned by the module, which
// this value keeps alive; HIP allows launching it from any thread.
unsafe impl Send for Function {}
// SAFETY: as above.
unsafe impl Sync for Function {}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module")
            .field("device", &self.inner.device.ordinal())
            .finish()
    }
}

impl fmt::Debug for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Function")
            .field("name", &self.name)
            .field("device", &self.module.device.ordinal())
            .finish()
    }
}

impl Module {
    /// Loads a code object on `device`: what hipRTC produces, or an offload
    /// bundle written by `hipcc --genco` (on the NVIDIA test platform, a
    /// CUBIN or NUL-terminated PTX text).
    ///
    /// `hipModuleLoadData` takes no length and follows the offsets written
    /// in the image, so the image is checked first, with checked arithmetic:
    /// for an ELF64 image (of the device's machine) its header, program and
    /// section header tables, every segment and section, string tables,
    /// symbol tables and note records; for a clang offload bundle its entry
    /// table, every entry, and every `amdgcn` entry as an ELF image
    /// (compressed `CCOB` bundles are refused: their content cannot be
    /// checked); PTX text (NVIDIA test platform only) must end with a NUL
    /// byte. Everything the loader locates through the image's own offsets
    /// must lie inside `image`. A truncated or malformed image is an
    /// [`Error::InvalidArgument`] that says what is wrong, and nothing is
    /// passed to the runtime.
    pub fn from_code_object(device: &Device, image: &[u8]) -> Result<Module> {
        let op = || format!("hipModuleLoadData ({} byte code object)", image.len());
        code_object::validate(image, CodeTarget::for_arch(device.arch())).map_err(|reason| {
            Error::invalid(op(), format_args!("invalid code object: {reason}"))
        })?;
        device.bind_to_thread()?;
        // ELF readers may expect an aligned image: copy into u64 storage.
        let mut aligned = vec![0u64; image.len().div_ceil(8)];
        // SAFETY: `aligned` has at least `image.len()` bytes and does not
        // overlap `image`.
        unsafe {
            std::ptr::copy_nonoverlapping(image.as_ptr(), aligned.as_mut_ptr().cast(), image.len())
        };
        let handle = out_ptr(op(), |handle| {
            // SAFETY: valid out-pointer; the image was validated above, so
            // every offset the loader follows stays inside `aligned`, which
            // is only read during the call.
            unsafe {
                device
                    .api()
                    .hipModuleLoadData(handle, aligned.as_ptr().cast())
            }
        })?;
        Ok(Module {
            inner: Arc::new(ModuleInner {
                handle,
                device: device.clone(),
            }),
        })
    }

    /// Looks up the kernel `name` (an `extern "C"` name, unmangled).
    pub fn function(&self, name: &str) -> Result<Function> {
        let c_name = CString::new(name)
            .map_err(|_| Error::invalid("hipModuleGetFunction", "name contains a NUL byte"))?;
        self.inner.device.bind_to_thread()?;
        let handle = out_ptr(format_args!("hipModuleGetFunction(\"{name}\")"), |handle| {
            // SAFETY: valid out-pointer, live module, NUL-terminated name.
            unsafe {
                self.inner.device.api().hipModuleGetFunction(
                    handle,
                    self.inner.handle,
                    c_name.as_ptr(),
                )
            }
        })?;
        Ok(Function {
            handle,
            name: name.into(),
            module: Arc::clone(&self.inner),
        })
    }

    /// The device the module is loaded on.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }
}

impl Function {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device the kernel's module is loaded on.
    pub fn device(&self) -> &Device {
        &self.module.device
    }

    /// Registers used per thread.
    pub fn num_registers(&self) -> Result<u32> {
        self.attribute(
            hipFunction_attribute::HIP_FUNC_ATTRIBUTE_NUM_REGS,
            "NUM_REGS",
        )
    }

    /// Private (scratch) memory per thread in bytes; non-zero usually means
    /// register spills.
    pub fn local_size_bytes(&self) -> Result<u32> {
        self.attribute(
            hipFunction_attribute::HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
            "LOCAL_SIZE_BYTES",
        )
    }

    /// The largest block this kernel can be launched with.
    pub fn max_threads_per_block(&self) -> Result<u32> {
        self.attribute(
            hipFunction_attribute::HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
            "MAX_THREADS_PER_BLOCK",
        )
    }

    fn attribute(&self, attr: hipFunction_attribute, label: &str) -> Result<u32> {
        self.module.device.bind_to_thread()?;
        let value: c_int = out(
            format_args!("hipFuncGetAttribute({label}) of `{}`", self.name),
            |value| {
                // SAFETY: valid out-pointer and live function handle.
                unsafe {
                    self.module
                        .device
                        .api()
                        .hipFuncGetAttribute(value, attr, self.handle)
                }
            },
        )?;
        Ok(u32::try_from(value).unwrap_or(0))
    }

    pub(crate) fn raw(&self) -> hipFunction_t {
        self.handle
    }
}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        self.device.release(|api| {
            // SAFETY: loaded by us, unloaded exactly once after every
            // `Function` (which holds this Arc) is gone.
            unsafe { api.hipModuleUnload(self.handle) }
        });
    }
}
