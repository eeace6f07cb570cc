//! hipRTC on NVRTC.
//!
//! A `hiprtcProgram` is a boxed [`Program`] holding the NVRTC program, the
//! strings handed to it, and after compilation the log and the code object:
//! a CUBIN when compiled for an `sm_XY` target (the default: the current
//! device's architecture), PTX text when compiled for a `compute_XY` target.
//! Either loads with `hipModuleLoadData`.

#[path = "../../../shim-common/hiprtc_common.rs"]
mod common;
mod headers;
mod options;

use std::ffi::{CString, c_char, c_int};

use cudarc::nvrtc::sys::{self as nvrtc, nvrtcProgram, nvrtcResult};
use hip_sys::{hiprtcProgram, hiprtcResult};

use crate::ffi::{non_null, write_out};

use common::{Compiled, RtcResult};
pub(crate) use common::{hiprtcGetErrorString, hiprtcVersion};

/// The hipRTC status for an NVRTC status (same meanings for 0–11).
fn rtc(result: nvrtcResult) -> RtcResult {
    use nvrtcResult as N;
    let status = match result {
        N::NVRTC_SUCCESS => return Ok(()),
        N::NVRTC_ERROR_OUT_OF_MEMORY => hiprtcResult::HIPRTC_ERROR_OUT_OF_MEMORY,
        N::NVRTC_ERROR_PROGRAM_CREATION_FAILURE => {
            hiprtcResult::HIPRTC_ERROR_PROGRAM_CREATION_FAILURE
        }
        N::NVRTC_ERROR_INVALID_INPUT => hiprtcResult::HIPRTC_ERROR_INVALID_INPUT,
        N::NVRTC_ERROR_INVALID_PROGRAM => hiprtcResult::HIPRTC_ERROR_INVALID_PROGRAM,
        N::NVRTC_ERROR_INVALID_OPTION => hiprtcResult::HIPRTC_ERROR_INVALID_OPTION,
        N::NVRTC_ERROR_COMPILATION => hiprtcResult::HIPRTC_ERROR_COMPILATION,
        N::NVRTC_ERROR_BUILTIN_OPERATION_FAILURE => {
            hiprtcResult::HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE
        }
        N::NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION => {
            hiprtcResult::HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION
        }
        N::NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION => {
            hiprtcResult::HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION
        }
        N::NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID => {
            hiprtcResult::HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID
        }
        _ => hiprtcResult::HIPRTC_ERROR_INTERNAL_ERROR,
    };
    Err(status)
}

/// One hipRTC program.
struct Program {
    handle: nvrtcProgram,
    /// Source, name and headers given to NVRTC, kept alive with the program.
    _strings: Vec<CString>,
    /// The compilation log (NVRTC's, plus the shim's notes on failure).
    log: Vec<u8>,
    /// The code object after a successful compilation.
    code: Option<Vec<u8>>,
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: `handle` came from nvrtcCreateProgram and is destroyed once.
        let _ = unsafe { nvrtc::nvrtcDestroyProgram(&mut self.handle) };
    }
}

/// A string for NVRTC; interior NULs cannot come from C strings.
fn c_string(s: String) -> RtcResult<CString> {
    CString::new(s).map_err(|_| hiprtcResult::HIPRTC_ERROR_INVALID_INPUT)
}

/// The program behind a handle.
///
/// # Safety
/// `prog` must be null or a live handle from [`hiprtcCreateProgram`].
unsafe fn program<'a>(prog: hiprtcProgram) -> RtcResult<&'a mut Program> {
    // SAFETY: per the contract.
    unsafe { common::program(prog) }
}

impl Compiled for Program {
    fn log(&self) -> &[u8] {
        &self.log
    }
    fn code(&self) -> Option<&[u8]> {
        self.code.as_deref()
    }
}

/// Fails (and says why on stderr, once) when libnvrtc cannot be loaded.
fn require_nvrtc() -> RtcResult {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let present = *PRESENT.get_or_init(|| {
        // SAFETY: probing for the library has no preconditions.
        let present = unsafe { nvrtc::is_culib_present() };
        if !present {
            eprintln!(
                "hip-on-cuda: libnvrtc could not be loaded; add CUDA's lib64 directory to LD_LIBRARY_PATH"
            );
        }
        present
    });
    if present {
        Ok(())
    } else {
        Err(hiprtcResult::HIPRTC_ERROR_PROGRAM_CREATION_FAILURE)
    }
}

/// `hiprtcCreateProgram`: the source (with `hip/hip_runtime.h` included
/// implicitly) and the caller's headers plus the replacement `hip/*.h`
/// headers the caller does not provide itself.
pub(crate) unsafe fn hiprtcCreateProgram(
    prog: *mut hiprtcProgram,
    src: *const c_char,
    name: *const c_char,
    num_headers: c_int,
    headers: *mut *const c_char,
    include_names: *mut *const c_char,
) -> RtcResult {
    let invalid = hiprtcResult::HIPRTC_ERROR_INVALID_INPUT;
    // SAFETY: the caller passes the strings hipRTC documents.
    let common::ProgramInputs {
        source,
        name,
        headers: given,
    } = unsafe { common::program_inputs(prog, src, name, num_headers, headers, include_names) }?;
    let mut header_list = given;
    for (include, text) in headers::REPLACEMENT_HEADERS {
        if !header_list.iter().any(|(given, _)| given == include) {
            header_list.push((include.to_string(), text.to_string()));
        }
    }
    require_nvrtc()?;

    let source = c_string(headers::wrap_source(&source, &name))?;
    let name = c_string(name)?;
    let mut strings = vec![source, name];
    let (mut contents, mut includes) = (Vec::new(), Vec::new());
    for (include, text) in header_list {
        let (text, include) = (c_string(text)?, c_string(include)?);
        contents.push(text.as_ptr());
        includes.push(include.as_ptr());
        strings.extend([text, include]);
    }
    let count = c_int::try_from(contents.len()).map_err(|_| invalid)?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: every pointer refers to a CString owned by `strings`, which
    // outlives the program.
    rtc(unsafe {
        nvrtc::nvrtcCreateProgram(
            &mut handle,
            strings[0].as_ptr(),
            strings[1].as_ptr(),
            count,
            contents.as_ptr(),
            includes.as_ptr(),
        )
    })?;
    let program = Box::new(Program {
        handle,
        _strings: strings,
        log: Vec::new(),
        code: None,
    });
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe { write_out(prog, Box::into_raw(program).cast(), invalid) }
}

/// `hiprtcDestroyProgram`: frees the program and nulls the handle.
pub(crate) unsafe fn hiprtcDestroyProgram(prog: *mut hiprtcProgram) -> RtcResult {
    non_null(prog, hiprtcResult::HIPRTC_ERROR_INVALID_PROGRAM)?;
    // SAFETY: the caller passes a valid pointer to a handle.
    let handle = unsafe { prog.read() };
    non_null(handle, hiprtcResult::HIPRTC_ERROR_INVALID_PROGRAM)?;
    // SAFETY: a live handle from hiprtcCreateProgram, destroyed once here.
    drop(unsafe { Box::from_raw(handle.cast::<Program>()) });
    // SAFETY: as above.
    unsafe { prog.write(std::ptr::null_mut()) };
    Ok(())
}

/// The NVRTC option list for a hipRTC one: translated options, then the
/// CUDA include directories, the current device's architecture when none
/// was given, and C++17 when no standard was given.
fn nvrtc_options(given: &[String]) -> (Vec<String>, Vec<String>) {
    let translated = options::translate(given);
    let mut out = translated.options;
    out.extend(
        headers::cuda_include_dirs()
            .iter()
            .map(|dir| format!("-I{}", dir.display())),
    );
    if !translated.has_arch
        && let Some(arch) = crate::hip::device::current_arch_name()
    {
        out.push(format!("--gpu-architecture={arch}"));
    }
    if !translated.has_std {
        out.push("-std=c++17".to_string());
    }
    (out, translated.dropped)
}

/// Reads NVRTC's log of a compiled program.
fn nvrtc_log(handle: nvrtcProgram) -> RtcResult<Vec<u8>> {
    let mut size = 0;
    // SAFETY: valid program and out-pointer.
    rtc(unsafe { nvrtc::nvrtcGetProgramLogSize(handle, &mut size) })?;
    let mut log = vec![0_u8; size.max(1)];
    // SAFETY: `log` has room for `size` bytes.
    rtc(unsafe { nvrtc::nvrtcGetProgramLog(handle, log.as_mut_ptr().cast()) })?;
    while log.last() == Some(&0) {
        log.pop();
    }
    Ok(log)
}

/// Reads the compiled code: the CUBIN when there is one, else the PTX
/// (with its terminating NUL, as `cuModuleLoadData` wants text).
fn nvrtc_code(handle: nvrtcProgram) -> RtcResult<Vec<u8>> {
    let mut size = 0;
    // SAFETY: valid program and out-pointer.
    let cubin = unsafe { nvrtc::nvrtcGetCUBINSize(handle, &mut size) };
    if cubin == nvrtcResult::NVRTC_SUCCESS && size > 0 {
        let mut code = vec![0_u8; size];
        // SAFETY: `code` has room for `size` bytes.
        rtc(unsafe { nvrtc::nvrtcGetCUBIN(handle, code.as_mut_ptr().cast()) })?;
        return Ok(code);
    }
    // SAFETY: valid program and out-pointer.
    rtc(unsafe { nvrtc::nvrtcGetPTXSize(handle, &mut size) })?;
    let mut code = vec![0_u8; size];
    // SAFETY: `code` has room for `size` bytes.
    rtc(unsafe { nvrtc::nvrtcGetPTX(handle, code.as_mut_ptr().cast()) })?;
    Ok(code)
}

/// `hiprtcCompileProgram`: compiles with translated options and keeps the
/// log and the code object.
pub(crate) unsafe fn hiprtcCompileProgram(
    prog: hiprtcProgram,
    num_options: c_int,
    options: *mut *const c_char,
) -> RtcResult {
    let invalid = hiprtcResult::HIPRTC_ERROR_INVALID_INPUT;
    // SAFETY: the caller passes a live program.
    let program = unsafe { program(prog) }?;
    // SAFETY: the caller passes `num_options` option strings.
    let given = unsafe { common::option_list(num_options, options) }?;
    let (nvrtc_opts, dropped) = nvrtc_options(&given);
    let c_opts = nvrtc_opts
        .iter()
        .map(|o| c_string(o.clone()))
        .collect::<RtcResult<Vec<_>>>()?;
    let ptrs: Vec<*const c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();
    let n = c_int::try_from(ptrs.len()).map_err(|_| invalid)?;
    // SAFETY: a live NVRTC program and `n` valid option strings.
    let status = rtc(unsafe { nvrtc::nvrtcCompileProgram(program.handle, n, ptrs.as_ptr()) });
    program.log = nvrtc_log(program.handle)?;
    if status.is_err() {
        let note = format!(
            "\nhip-on-cuda: NVRTC options: {}; dropped hipRTC options: {}\n",
            nvrtc_opts.join(" "),
            if dropped.is_empty() {
                "none".to_string()
            } else {
                dropped.join(" ")
            }
        );
        program.log.extend_from_slice(note.as_bytes());
        program.code = None;
        return status;
    }
    program.code = Some(nvrtc_code(program.handle)?);
    Ok(())
}

/// `hiprtcGetProgramLogSize`: the log size including its NUL.
pub(crate) unsafe fn hiprtcGetProgramLogSize(prog: hiprtcProgram, out: *mut usize) -> RtcResult {
    // SAFETY: the caller passes a live program and a valid out-pointer.
    unsafe { common::log_size::<Program>(prog, out) }
}

/// `hiprtcGetProgramLog`: copies the log and its NUL.
pub(crate) unsafe fn hiprtcGetProgramLog(prog: hiprtcProgram, log: *mut c_char) -> RtcResult {
    // SAFETY: the caller passes a live program and a sized buffer.
    unsafe { common::copy_log::<Program>(prog, log) }
}

/// `hiprtcGetCodeSize`: invalid before a successful compilation.
pub(crate) unsafe fn hiprtcGetCodeSize(prog: hiprtcProgram, out: *mut usize) -> RtcResult {
    // SAFETY: the caller passes a live program and a valid out-pointer.
    unsafe { common::code_size::<Program>(prog, out) }
}

/// `hiprtcGetCode`: copies the code object.
pub(crate) unsafe fn hiprtcGetCode(prog: hiprtcProgram, code: *mut c_char) -> RtcResult {
    // SAFETY: the caller passes a live program and a sized buffer.
    unsafe { common::copy_code::<Program>(prog, code) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_numbers_match_nvrtc() {
        assert_eq!(rtc(nvrtcResult::NVRTC_SUCCESS), Ok(()));
        assert_eq!(rtc(nvrtcResult::NVRTC_ERROR_COMPILATION).unwrap_err().0, 6);
        assert_eq!(
            rtc(nvrtcResult::NVRTC_ERROR_INVALID_OPTION).unwrap_err().0,
            5
        );
        assert_eq!(
            rtc(nvrtcResult::NVRTC_ERROR_CANCELLED),
            Err(hiprtcResult::HIPRTC_ERROR_INTERNAL_ERROR)
        );
    }

    #[test]
    fn null_programs_are_invalid() {
        let mut size = 0;
        // SAFETY: null handles are rejected before any use.
        unsafe {
            assert_eq!(
                hiprtcGetCodeSize(std::ptr::null_mut(), &mut size),
                Err(hiprtcResult::HIPRTC_ERROR_INVALID_PROGRAM)
            );
            assert_eq!(
                hiprtcDestroyProgram(std::ptr::null_mut()),
                Err(hiprtcResult::HIPRTC_ERROR_INVALID_PROGRAM)
            );
        }
        let (mut major, mut minor) = (0, 0);
        // SAFETY: valid out-pointers.
        assert_eq!(unsafe { hiprtcVersion(&mut major, &mut minor) }, Ok(()));
        assert_eq!((major, minor), (6, 4));
    }
}
