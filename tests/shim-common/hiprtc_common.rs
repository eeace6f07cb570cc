//! The parts of hipRTC every shim shares: the status type at the C
//! boundary, the version and error strings, reading C arguments, and the
//! getters of a compiled program's log and code object.

use std::ffi::{CStr, c_char, c_int};

use hip_sys::{hiprtcProgram, hiprtcResult};

use crate::ffi::{FfiReturn, Status, copy_c_string, non_null, write_out};

/// The result type of the hipRTC implementations.
pub(crate) type RtcResult<T = ()> = Result<T, hiprtcResult>;

impl FfiReturn for hiprtcResult {
    fn panicked() -> Self {
        hiprtcResult::HIPRTC_ERROR_INTERNAL_ERROR
    }
}

impl Status for hiprtcResult {
    const SUCCESS: Self = hiprtcResult::HIPRTC_SUCCESS;
}

/// A C string argument as an owned string, or `INVALID_INPUT` when null.
///
/// # Safety
/// `s` must be null or NUL-terminated.
pub(crate) unsafe fn c_text(s: *const c_char) -> RtcResult<String> {
    non_null(s, hiprtcResult::HIPRTC_ERROR_INVALID_INPUT)?;
    // SAFETY: non-null and NUL-terminated per the contract.
    Ok(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
}

/// `hiprtcVersion`: the hipRTC of HIP 6.4 (see the HIP runtime version).
pub(crate) unsafe fn hiprtcVersion(major: *mut c_int, minor: *mut c_int) -> RtcResult {
    let invalid = hiprtcResult::HIPRTC_ERROR_INVALID_INPUT;
    non_null(major, invalid)?;
    non_null(minor, invalid)?;
    // SAFETY: both out-pointers are non-null and, per the caller, valid.
    unsafe {
        write_out(major, 6, invalid)?;
        write_out(minor, 4, invalid)
    }
}

/// `hiprtcGetErrorString`: a static description.
pub(crate) unsafe fn hiprtcGetErrorString(result: hiprtcResult) -> *const c_char {
    let text: &CStr = match result {
        hiprtcResult::HIPRTC_SUCCESS => c"HIPRTC_SUCCESS",
        hiprtcResult::HIPRTC_ERROR_OUT_OF_MEMORY => c"HIPRTC_ERROR_OUT_OF_MEMORY",
        hiprtcResult::HIPRTC_ERROR_PROGRAM_CREATION_FAILURE => {
            c"HIPRTC_ERROR_PROGRAM_CREATION_FAILURE"
        }
        hiprtcResult::HIPRTC_ERROR_INVALID_INPUT => c"HIPRTC_ERROR_INVALID_INPUT",
        hiprtcResult::HIPRTC_ERROR_INVALID_PROGRAM => c"HIPRTC_ERROR_INVALID_PROGRAM",
        hiprtcResult::HIPRTC_ERROR_INVALID_OPTION => c"HIPRTC_ERROR_INVALID_OPTION",
        hiprtcResult::HIPRTC_ERROR_COMPILATION => c"HIPRTC_ERROR_COMPILATION",
        hiprtcResult::HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE => {
            c"HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE"
        }
        hiprtcResult::HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION => {
            c"HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION"
        }
        hiprtcResult::HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION => {
            c"HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION"
        }
        hiprtcResult::HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID => {
            c"HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID"
        }
        hiprtcResult::HIPRTC_ERROR_INTERNAL_ERROR => c"HIPRTC_ERROR_INTERNAL_ERROR",
        hiprtcResult::HIPRTC_ERROR_LINKING => c"HIPRTC_ERROR_LINKING",
        _ => c"HIPRTC_ERROR_INVALID",
    };
    text.as_ptr()
}

/// The program behind a handle.
///
/// # Safety
/// `prog` must be null or a live handle made by the shim's
/// `hiprtcCreateProgram` from a boxed `P`, not used concurrently by another
/// call on the same program (hipRTC requires that too).
pub(crate) unsafe fn program<'a, P>(prog: hiprtcProgram) -> RtcResult<&'a mut P> {
    non_null(prog, hiprtcResult::HIPRTC_ERROR_INVALID_PROGRAM)?;
    // SAFETY: per the contract.
    Ok(unsafe { &mut *prog.cast::<P>() })
}

/// What `hiprtcCreateProgram` is given: the source, the program's name
/// (`default_program` when null) and the headers as `(include name,
/// contents)`.
pub(crate) struct ProgramInputs {
    pub(crate) source: String,
    pub(crate) name: String,
    pub(crate) headers: Vec<(String, String)>,
}

/// Reads the arguments of `hiprtcCreateProgram` (after checking `prog`).
///
/// # Safety
/// `src` must be a C string, `name` null or a C string, and both arrays
/// hold `num_headers` C strings.
pub(crate) unsafe fn program_inputs(
    prog: *mut hiprtcProgram,
    src: *const c_char,
    name: *const c_char,
    num_headers: c_int,
    headers: *mut *const c_char,
    include_names: *mut *const c_char,
) -> RtcResult<ProgramInputs> {
    let invalid = hiprtcResult::HIPRTC_ERROR_INVALID_INPUT;
    non_null(prog, invalid)?;
    let count = usize::try_from(num_headers).map_err(|_| invalid)?;
    if count > 0 {
        non_null(headers, invalid)?;
        non_null(include_names, invalid)?;
    }
    // SAFETY: per the contract.
    let source = unsafe { c_text(src) }?;
    let name = if name.is_null() {
        "default_program".to_string()
    } else {
        // SAFETY: per the contract.
        unsafe { c_text(name) }?
    };
    let headers = (0..count)
        // SAFETY: both arrays hold `count` C strings.
        .map(|i| unsafe { Ok((c_text(*include_names.add(i))?, c_text(*headers.add(i))?)) })
        .collect::<RtcResult<Vec<_>>>()?;
    Ok(ProgramInputs {
        source,
        name,
        headers,
    })
}

/// The option strings of `hiprtcCompileProgram`.
///
/// # Safety
/// `options` must hold `num_options` NUL-terminated strings.
pub(crate) unsafe fn option_list(
    num_options: c_int,
    options: *mut *const c_char,
) -> RtcResult<Vec<String>> {
    let count =
        usize::try_from(num_options).map_err(|_| hiprtcResult::HIPRTC_ERROR_INVALID_INPUT)?;
    if count > 0 {
        non_null(options, hiprtcResult::HIPRTC_ERROR_INVALID_INPUT)?;
    }
    (0..count)
        // SAFETY: `options` holds `count` NUL-terminated strings.
        .map(|i| unsafe { c_text(*options.add(i)) })
        .collect()
}

/// What a compiled program holds.
pub(crate) trait Compiled {
    /// The compilation log.
    fn log(&self) -> &[u8];
    /// The code object, after a successful compilation.
    fn code(&self) -> Option<&[u8]>;
}

/// `hiprtcGetProgramLogSize`: the log size including its NUL.
///
/// # Safety
/// As [`program`]; `out` valid or null.
pub(crate) unsafe fn log_size<P: Compiled>(prog: hiprtcProgram, out: *mut usize) -> RtcResult {
    // SAFETY: per the contract.
    let size = unsafe { program::<P>(prog) }?.log().len() + 1;
    // SAFETY: per the contract.
    unsafe { write_out(out, size, hiprtcResult::HIPRTC_ERROR_INVALID_INPUT) }
}

/// `hiprtcGetProgramLog`: copies the log and its NUL.
///
/// # Safety
/// As [`program`]; `log` sized with [`log_size`].
pub(crate) unsafe fn copy_log<P: Compiled>(prog: hiprtcProgram, log: *mut c_char) -> RtcResult {
    // SAFETY: per the contract.
    let program = unsafe { program::<P>(prog) }?;
    non_null(log, hiprtcResult::HIPRTC_ERROR_INVALID_INPUT)?;
    // SAFETY: the caller sized `log` with hiprtcGetProgramLogSize.
    unsafe { copy_c_string(program.log(), log) };
    Ok(())
}

/// `hiprtcGetCodeSize`: invalid before a successful compilation.
///
/// # Safety
/// As [`program`]; `out` valid or null.
pub(crate) unsafe fn code_size<P: Compiled>(prog: hiprtcProgram, out: *mut usize) -> RtcResult {
    // SAFETY: per the contract.
    let program = unsafe { program::<P>(prog) }?;
    let code = program
        .code()
        .ok_or(hiprtcResult::HIPRTC_ERROR_INVALID_PROGRAM)?;
    // SAFETY: per the contract.
    unsafe { write_out(out, code.len(), hiprtcResult::HIPRTC_ERROR_INVALID_INPUT) }
}

/// `hiprtcGetCode`: copies the code object.
///
/// # Safety
/// As [`program`]; `code` sized with [`code_size`].
pub(crate) unsafe fn copy_code<P: Compiled>(prog: hiprtcProgram, code: *mut c_char) -> RtcResult {
    // SAFETY: per the contract.
    let program = unsafe { program::<P>(prog) }?;
    non_null(code, hiprtcResult::HIPRTC_ERROR_INVALID_INPUT)?;
    let bytes = program
        .code()
        .ok_or(hiprtcResult::HIPRTC_ERROR_INVALID_PROGRAM)?;
    // SAFETY: the caller sized `code` with hiprtcGetCodeSize.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), code.cast::<u8>(), bytes.len()) };
    Ok(())
}
