//! hipRTC on the host C++ compiler (see [`compile`]).
//!
//! A `hiprtcProgram` is a boxed [`Program`]: the source, its name and
//! headers as given, and after compilation the log and the code object.

mod compile;
mod options;

use std::ffi::{c_char, c_int};

use hip_sys::{hiprtcProgram, hiprtcResult};

#[path = "../../../shim-common/hiprtc_common.rs"]
mod common;

use common::{Compiled, RtcResult};
pub(crate) use common::{hiprtcGetErrorString, hiprtcVersion};

use crate::ffi::{non_null, write_out};

/// One hipRTC program.
struct Program {
    source: String,
    name: String,
    /// `(include name, contents)` of the headers given at creation.
    headers: Vec<(String, String)>,
    log: Vec<u8>,
    code: Option<Vec<u8>>,
}

impl Compiled for Program {
    fn log(&self) -> &[u8] {
        &self.log
    }
    fn code(&self) -> Option<&[u8]> {
        self.code.as_deref()
    }
}

/// `hiprtcCreateProgram`: keeps the source, name and headers.
pub(crate) unsafe fn hiprtcCreateProgram(
    prog: *mut hiprtcProgram,
    src: *const c_char,
    name: *const c_char,
    num_headers: c_int,
    headers: *mut *const c_char,
    include_names: *mut *const c_char,
) -> RtcResult {
    // SAFETY: the caller passes the strings hipRTC documents.
    let inputs =
        unsafe { common::program_inputs(prog, src, name, num_headers, headers, include_names) }?;
    let program = Box::new(Program {
        source: inputs.source,
        name: inputs.name,
        headers: inputs.headers,
        log: Vec::new(),
        code: None,
    });
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe {
        write_out(
            prog,
            Box::into_raw(program).cast(),
            hiprtcResult::HIPRTC_ERROR_INVALID_INPUT,
        )
    }
}

/// `hiprtcDestroyProgram`: frees the program and nulls the handle.
pub(crate) unsafe fn hiprtcDestroyProgram(prog: *mut hiprtcProgram) -> RtcResult {
    non_null(prog, hiprtcResult::HIPRTC_ERROR_INVALID_PROGRAM)?;
    // SAFETY: the caller passes a valid pointer to a handle.
    let handle = unsafe { prog.read() };
    non_null(handle, hiprtcResult::HIPRTC_ERROR_INVALID_PROGRAM)?;
    // SAFETY: a live handle from hiprtcCreateProgram, freed once.
    drop(unsafe { Box::from_raw(handle.cast::<Program>()) });
    // SAFETY: as above.
    unsafe { prog.write(std::ptr::null_mut()) };
    Ok(())
}

/// `hiprtcCompileProgram`: compiles with the host compiler and keeps the
/// log and the code object.
pub(crate) unsafe fn hiprtcCompileProgram(
    prog: hiprtcProgram,
    num_options: c_int,
    options: *mut *const c_char,
) -> RtcResult {
    // SAFETY: the caller passes a live program.
    let program = unsafe { common::program::<Program>(prog) }?;
    // SAFETY: the caller passes `num_options` option strings.
    let given = unsafe { common::option_list(num_options, options) }?;
    let parsed = match options::parse(&given) {
        Ok(parsed) => parsed,
        Err(message) => {
            program.log = message.into_bytes();
            program.code = None;
            return Err(hiprtcResult::HIPRTC_ERROR_INVALID_OPTION);
        }
    };
    let output = compile::compile(&program.source, &program.name, &program.headers, &parsed);
    program.log = output.log;
    program.code = output.code;
    if program.code.is_some() {
        Ok(())
    } else {
        Err(hiprtcResult::HIPRTC_ERROR_COMPILATION)
    }
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
