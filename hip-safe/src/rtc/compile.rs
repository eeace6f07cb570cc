//! One hipRTC compilation: create, compile, read log and code, destroy.

use std::ffi::{CString, c_char, c_int};

use hip_sys::{HiprtcApi, MissingSymbol, hiprtcProgram, hiprtcResult};

use crate::error::{Error, Result, RtcError, c_str_to_string};

/// Owns a `hiprtcProgram` and destroys it exactly once.
struct ProgramHandle {
    api: &'static HiprtcApi,
    raw: hiprtcProgram,
}

impl Drop for ProgramHandle {
    fn drop(&mut self) {
        // Nothing to report from Drop: a failed destroy only leaks host memory.
        // SAFETY: created by hiprtcCreateProgram, destroyed once.
        let _ = unsafe { self.api.hiprtcDestroyProgram(&mut self.raw) };
    }
}

/// What to compile.
pub(crate) struct Job<'a> {
    pub name: &'a str,
    pub source: &'a str,
    pub headers: &'a [(String, String)],
    /// Complete option list, the `--offload-arch=` option included.
    pub options: &'a [String],
    /// The target, for messages.
    pub arch: &'a str,
}

/// Compiles `job` with hipRTC and returns the code object.
pub(crate) fn compile(job: &Job<'_>) -> Result<Vec<u8>> {
    let api = hip_sys::hiprtc()?;
    let cstr = |what: &str, s: &str| {
        CString::new(s)
            .map_err(|_| Error::invalid("hipRTC", format_args!("{what} contains a NUL byte")))
    };
    let source = cstr("the source", job.source)?;
    let name = cstr("the program name", job.name)?;
    let header_texts = job
        .headers
        .iter()
        .map(|(_, text)| cstr("a header", text))
        .collect::<Result<Vec<_>>>()?;
    let header_names = job
        .headers
        .iter()
        .map(|(n, _)| cstr("a header name", n))
        .collect::<Result<Vec<_>>>()?;
    let options = job
        .options
        .iter()
        .map(|o| cstr("an option", o))
        .collect::<Result<Vec<_>>>()?;
    let mut header_ptrs: Vec<*const c_char> = header_texts.iter().map(|c| c.as_ptr()).collect();
    let mut name_ptrs: Vec<*const c_char> = header_names.iter().map(|c| c.as_ptr()).collect();
    let mut option_ptrs: Vec<*const c_char> = options.iter().map(|c| c.as_ptr()).collect();

    let mut raw: hiprtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer is a live NUL-terminated string, the arrays hold
    // `headers.len()` entries, and `raw` is a valid out-pointer.
    let status = unsafe {
        api.hiprtcCreateProgram(
            &mut raw,
            source.as_ptr(),
            name.as_ptr(),
            len_c(header_ptrs.len())?,
            header_ptrs.as_mut_ptr(),
            name_ptrs.as_mut_ptr(),
        )
    };
    rtc_check(api, status, || {
        format!("hiprtcCreateProgram(`{}`)", job.name)
    })?;
    let program = ProgramHandle { api, raw };

    // SAFETY: live program; `option_ptrs` holds that many valid strings.
    let status = unsafe {
        api.hiprtcCompileProgram(
            program.raw,
            len_c(option_ptrs.len())?,
            option_ptrs.as_mut_ptr(),
        )
    }?;
    if status != hiprtcResult::HIPRTC_SUCCESS {
        let log = read_log(&program)
            .unwrap_or_else(|e| format!("(the compile log could not be read: {e})"));
        if status == hiprtcResult::HIPRTC_ERROR_COMPILATION {
            return Err(RtcError::Compilation {
                program: job.name.to_string(),
                arch: job.arch.to_string(),
                code: status.0,
                log,
            }
            .into());
        }
        return Err(rtc_error(
            api,
            status,
            format!("hiprtcCompileProgram(`{}`): {log}", job.name),
        )
        .into());
    }
    read_code(&program, job.name)
}

fn read_log(program: &ProgramHandle) -> Result<String> {
    let mut size = 0usize;
    // SAFETY: live program and valid out-pointer.
    let status = unsafe { program.api.hiprtcGetProgramLogSize(program.raw, &mut size) };
    rtc_check(program.api, status, || "hiprtcGetProgramLogSize".into())?;
    let mut log = vec![0u8; size.max(1)];
    // SAFETY: `log` has room for `size` bytes, as hipRTC requires.
    let status = unsafe {
        program
            .api
            .hiprtcGetProgramLog(program.raw, log.as_mut_ptr().cast())
    };
    rtc_check(program.api, status, || "hiprtcGetProgramLog".into())?;
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    Ok(String::from_utf8_lossy(&log[..end]).trim_end().to_string())
}

fn read_code(program: &ProgramHandle, name: &str) -> Result<Vec<u8>> {
    let mut size = 0usize;
    // SAFETY: live program and valid out-pointer.
    let status = unsafe { program.api.hiprtcGetCodeSize(program.raw, &mut size) };
    rtc_check(program.api, status, || {
        format!("hiprtcGetCodeSize(`{name}`)")
    })?;
    if size == 0 {
        return Err(RtcError::Failed {
            op: format!("hiprtcGetCodeSize(`{name}`)"),
            code: 0,
            message: "hipRTC produced an empty code object".into(),
        }
        .into());
    }
    let mut code = vec![0u8; size];
    // SAFETY: `code` has room for `size` bytes.
    let status = unsafe {
        program
            .api
            .hiprtcGetCode(program.raw, code.as_mut_ptr().cast())
    };
    rtc_check(program.api, status, || format!("hiprtcGetCode(`{name}`)"))?;
    Ok(code)
}

fn len_c(n: usize) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| Error::invalid("hipRTC", "too many options or headers"))
}

fn rtc_check(
    api: &HiprtcApi,
    status: std::result::Result<hiprtcResult, MissingSymbol>,
    op: impl FnOnce() -> String,
) -> Result<()> {
    let status = status?;
    if status == hiprtcResult::HIPRTC_SUCCESS {
        return Ok(());
    }
    Err(rtc_error(api, status, op()).into())
}

fn rtc_error(api: &HiprtcApi, status: hiprtcResult, op: String) -> RtcError {
    // SAFETY: hiprtcGetErrorString accepts any code and returns a pointer to
    // a static NUL-terminated string (or null), read at once.
    let message = unsafe {
        api.hiprtcGetErrorString(status)
            .ok()
            .and_then(|p| c_str_to_string(p))
    }
    .unwrap_or_else(|| "unknown hiprtcResult".into());
    RtcError::Failed {
        op,
        code: status.0,
        message,
    }
}
