//! One hipRTC compilation: create, compile, read log and code, destroy.

use std::ffi::{CString, c_char, c_int};

use hip_sys::{HiprtcApi, hiprtcProgram, hiprtcResult};

use super::copies::Lease;
use crate::error::{Error, Result, RtcError};
use crate::result::{CheckStatus, Status, out, out_ptr};

/// Owns a `hiprtcProgram` and destroys it exactly once.
struct ProgramHandle {
    api: &'static HiprtcApi,
    raw: hiprtcProgram,
}

impl Drop for ProgramHandle {
    fn drop(&mut self) {
        // SAFETY: created by hiprtcCreateProgram, destroyed once.
        unsafe { self.api.hiprtcDestroyProgram(&mut self.raw) }.discard();
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

/// Compiles `job` with hipRTC (a copy of it while another compile runs,
/// see [`copies`](super::copies)) and returns the code object. A copy that
/// fails otherwise than with a compile error (it loads AMD's compiler
/// again on first use, which could fail where the first copy's loaded)
/// hands the job to the first hipRTC.
pub(crate) fn compile(job: &Job<'_>) -> Result<Vec<u8>> {
    let first = hip_sys::hiprtc()?;
    let lease = Lease::take(first);
    match compile_on(lease.api(), job) {
        Err(e) if lease.is_copy() && !matches!(e, Error::Rtc(RtcError::Compilation { .. })) => {
            drop(lease);
            compile_on(first, job)
        }
        done => done,
    }
}

/// Compiles `job` with the hipRTC `api`.
fn compile_on(api: &'static HiprtcApi, job: &Job<'_>) -> Result<Vec<u8>> {
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

    let header_count = len_c(header_ptrs.len())?;
    let raw = out_ptr(format_args!("hiprtcCreateProgram(`{}`)", job.name), |raw| {
        // SAFETY: every pointer is a live NUL-terminated string, the
        // arrays hold `headers.len()` entries, and `raw` is a valid
        // out-pointer.
        unsafe {
            api.hiprtcCreateProgram(
                raw,
                source.as_ptr(),
                name.as_ptr(),
                header_count,
                header_ptrs.as_mut_ptr(),
                name_ptrs.as_mut_ptr(),
            )
        }
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
    if !status.is_success() {
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
        return Err(status.error(format_args!("hiprtcCompileProgram(`{}`): {log}", job.name)));
    }
    read_code(&program, job.name)
}

fn read_log(program: &ProgramHandle) -> Result<String> {
    let size: usize = out("hiprtcGetProgramLogSize", |size| {
        // SAFETY: live program and valid out-pointer.
        unsafe { program.api.hiprtcGetProgramLogSize(program.raw, size) }
    })?;
    let mut log = vec![0u8; size.max(1)];
    // SAFETY: `log` has room for `size` bytes, as hipRTC requires.
    unsafe {
        program
            .api
            .hiprtcGetProgramLog(program.raw, log.as_mut_ptr().cast())
    }
    .check("hiprtcGetProgramLog")?;
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    Ok(String::from_utf8_lossy(&log[..end]).trim_end().to_string())
}

fn read_code(program: &ProgramHandle, name: &str) -> Result<Vec<u8>> {
    let size: usize = out(format_args!("hiprtcGetCodeSize(`{name}`)"), |size| {
        // SAFETY: live program and valid out-pointer.
        unsafe { program.api.hiprtcGetCodeSize(program.raw, size) }
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
    unsafe {
        program
            .api
            .hiprtcGetCode(program.raw, code.as_mut_ptr().cast())
    }
    .check(format_args!("hiprtcGetCode(`{name}`)"))?;
    Ok(code)
}

fn len_c(n: usize) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| Error::invalid("hipRTC", "too many options or headers"))
}
