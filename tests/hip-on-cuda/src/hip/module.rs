//! Code objects and kernel launches. A "code object" here is what our hipRTC
//! produces (a CUBIN, or PTX text); module and function handles are the CUDA
//! handles themselves.

use std::ffi::{c_char, c_int, c_uint, c_void};

use cudarc::driver::sys::{self as cu_sys, CUfunction_attribute as CuAttr};
use hip_sys::{
    hipError_t, hipFunction_attribute as HipAttr, hipFunction_t, hipModule_t, hipStream_t,
};

use super::context::ensure_current;
use super::error::{HipResult, cu};
use super::memory::cu_stream;
use crate::ffi::{non_null, write_out};

const INVALID: hipError_t = hipError_t::hipErrorInvalidValue;
const INVALID_HANDLE: hipError_t = hipError_t::hipErrorInvalidHandle;

/// `HIP_LAUNCH_PARAM_BUFFER_POINTER`, `..._BUFFER_SIZE`, `..._END` (HIP ends
/// the `extra` array with 3, CUDA with 0).
const HIP_BUFFER_POINTER: usize = 1;
const HIP_BUFFER_SIZE: usize = 2;
const HIP_END: usize = 3;
/// The most `extra` entries read before giving up on a missing terminator.
const MAX_EXTRA_ENTRIES: usize = 16;

/// A CUDA `extra` array: buffer pointer, size pointer, terminator.
type CudaExtra = [*mut c_void; 5];

/// Translates HIP's `extra` launch array into CUDA's. Both the buffer and its
/// size are required; an unknown key or a missing terminator is invalid.
///
/// # Safety
/// `extra` must point to key/value pairs ending with `HIP_LAUNCH_PARAM_END`
/// (at most [`MAX_EXTRA_ENTRIES`] entries are read).
unsafe fn translate_extra(extra: *mut *mut c_void) -> HipResult<CudaExtra> {
    let (mut buffer, mut size) = (None, None);
    let mut i = 0;
    while i < MAX_EXTRA_ENTRIES {
        // SAFETY: within the caller's terminated array.
        let key = unsafe { extra.add(i).read() } as usize;
        if key == HIP_END {
            let (Some(buffer), Some(size)) = (buffer, size) else {
                return Err(INVALID);
            };
            let cuda_key = |k: u32| std::ptr::without_provenance_mut(k as usize);
            return Ok([
                cuda_key(cu_sys::CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT),
                buffer,
                cuda_key(cu_sys::CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT),
                size,
                cuda_key(cu_sys::CU_LAUNCH_PARAM_END_AS_INT),
            ]);
        }
        // SAFETY: a key other than END is followed by its value.
        let value = unsafe { extra.add(i + 1).read() };
        match key {
            HIP_BUFFER_POINTER => buffer = Some(value),
            HIP_BUFFER_SIZE => size = Some(value),
            _ => return Err(INVALID),
        }
        i += 2;
    }
    Err(INVALID)
}

/// The CUDA function attribute for a HIP one (same meanings, listed
/// explicitly); anything else is invalid.
fn cuda_function_attribute(attr: HipAttr) -> HipResult<CuAttr> {
    Ok(match attr {
        HipAttr::HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK => {
            CuAttr::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
        }
        HipAttr::HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES => {
            CuAttr::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
        }
        HipAttr::HIP_FUNC_ATTRIBUTE_CONST_SIZE_BYTES => CuAttr::CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES,
        HipAttr::HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES => CuAttr::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
        HipAttr::HIP_FUNC_ATTRIBUTE_NUM_REGS => CuAttr::CU_FUNC_ATTRIBUTE_NUM_REGS,
        HipAttr::HIP_FUNC_ATTRIBUTE_PTX_VERSION => CuAttr::CU_FUNC_ATTRIBUTE_PTX_VERSION,
        HipAttr::HIP_FUNC_ATTRIBUTE_BINARY_VERSION => CuAttr::CU_FUNC_ATTRIBUTE_BINARY_VERSION,
        HipAttr::HIP_FUNC_ATTRIBUTE_CACHE_MODE_CA => CuAttr::CU_FUNC_ATTRIBUTE_CACHE_MODE_CA,
        HipAttr::HIP_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES => {
            CuAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        }
        HipAttr::HIP_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT => {
            CuAttr::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
        }
        _ => return Err(INVALID),
    })
}

/// `hipModuleLoadData`: loads a CUBIN or NUL-terminated PTX image.
pub(crate) unsafe fn hipModuleLoadData(
    module: *mut hipModule_t,
    image: *const c_void,
) -> HipResult {
    non_null(module, INVALID)?;
    non_null(image, INVALID)?;
    ensure_current()?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: `handle` is a valid out-pointer; the caller passes an image.
    cu(unsafe { cu_sys::cuModuleLoadData(&mut handle, image) })?;
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(module, handle.cast(), INVALID) }
}

/// `hipModuleUnload`.
pub(crate) unsafe fn hipModuleUnload(module: hipModule_t) -> HipResult {
    non_null(module, INVALID_HANDLE)?;
    ensure_current()?;
    // SAFETY: the caller passes a module from hipModuleLoadData.
    cu(unsafe { cu_sys::cuModuleUnload(module.cast()) })
}

/// `hipModuleGetFunction`: `hipErrorNotFound` for an unknown name.
pub(crate) unsafe fn hipModuleGetFunction(
    function: *mut hipFunction_t,
    module: hipModule_t,
    kname: *const c_char,
) -> HipResult {
    non_null(function, INVALID)?;
    non_null(kname, INVALID)?;
    non_null(module, INVALID_HANDLE)?;
    ensure_current()?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: valid out-pointer, module and NUL-terminated name.
    cu(unsafe { cu_sys::cuModuleGetFunction(&mut handle, module.cast(), kname) })?;
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(function, handle.cast(), INVALID) }
}

/// `hipModuleLaunchKernel`: arguments through `kernelParams` or through
/// HIP's `extra` array (translated to CUDA's terminator).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn hipModuleLaunchKernel(
    f: hipFunction_t,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_mem_bytes: c_uint,
    stream: hipStream_t,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> HipResult {
    non_null(f, INVALID_HANDLE)?;
    if [grid_x, grid_y, grid_z, block_x, block_y, block_z].contains(&0) {
        return Err(INVALID);
    }
    let mut cuda_extra = if extra.is_null() {
        None
    } else {
        // SAFETY: the caller passes a terminated HIP extra array.
        Some(unsafe { translate_extra(extra) }?)
    };
    let extra_ptr = cuda_extra
        .as_mut()
        .map_or(std::ptr::null_mut(), |e| e.as_mut_ptr());
    ensure_current()?;
    // SAFETY: the caller guarantees the function, stream and argument
    // arrays; the driver validates the launch configuration.
    cu(unsafe {
        cu_sys::cuLaunchKernel(
            f.cast(),
            grid_x,
            grid_y,
            grid_z,
            block_x,
            block_y,
            block_z,
            shared_mem_bytes,
            cu_stream(stream),
            kernel_params,
            extra_ptr,
        )
    })
}

/// `hipFuncGetAttribute`: one attribute of a kernel.
pub(crate) unsafe fn hipFuncGetAttribute(
    value: *mut c_int,
    attrib: HipAttr,
    hfunc: hipFunction_t,
) -> HipResult {
    non_null(value, INVALID)?;
    non_null(hfunc, INVALID_HANDLE)?;
    let attr = cuda_function_attribute(attrib)?;
    ensure_current()?;
    let mut v = 0;
    // SAFETY: `v` is a valid out-pointer and `hfunc` the caller's function.
    cu(unsafe { cu_sys::cuFuncGetAttribute(&mut v, attr, hfunc.cast()) })?;
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(value, v, INVALID) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: usize) -> *mut c_void {
        std::ptr::without_provenance_mut(k)
    }

    #[test]
    fn extra_arrays_get_cuda_terminators() {
        let mut args = [0_u8; 8];
        let mut size = args.len();
        let mut hip = [
            key(HIP_BUFFER_POINTER),
            args.as_mut_ptr().cast(),
            key(HIP_BUFFER_SIZE),
            (&raw mut size).cast(),
            key(HIP_END),
        ];
        // SAFETY: a terminated array of valid pointers.
        let cuda = unsafe { translate_extra(hip.as_mut_ptr()) }.unwrap();
        assert_eq!(cuda[0], key(1));
        assert_eq!(cuda[1], hip[1]);
        assert_eq!(cuda[2], key(2));
        assert_eq!(cuda[3], hip[3]);
        assert_eq!(cuda[4], key(0));
    }

    #[test]
    fn bad_extra_arrays_are_rejected() {
        let mut only_end = [key(HIP_END)];
        let mut unknown = [key(7), key(0), key(HIP_END)];
        let mut unterminated: Vec<_> = (0..MAX_EXTRA_ENTRIES)
            .map(|i| key(if i % 2 == 0 { HIP_BUFFER_POINTER } else { 8 }))
            .collect();
        // SAFETY: each array is terminated or at least MAX_EXTRA_ENTRIES long.
        unsafe {
            assert_eq!(translate_extra(only_end.as_mut_ptr()), Err(INVALID));
            assert_eq!(translate_extra(unknown.as_mut_ptr()), Err(INVALID));
            assert_eq!(translate_extra(unterminated.as_mut_ptr()), Err(INVALID));
        }
    }

    #[test]
    fn unknown_function_attributes_are_invalid() {
        assert!(cuda_function_attribute(HipAttr(4)).is_ok());
        assert_eq!(cuda_function_attribute(HipAttr(10)), Err(INVALID));
    }
}
