//! Compiling a hipRTC program into a host shared object:
//!
//! 1. the source, its headers and our replacement headers (`device/`) are
//!    written to a private temporary folder; the translation unit is the
//!    source between `#include <hip/hip_runtime.h>` (hipRTC's implicit
//!    include) and `#include "hipcpu/exec.h"` (the scheduler);
//! 2. the host compiler (`HIP_ON_CPU_CXX`, default `c++`) preprocesses it
//!    with the target's wave size and macros;
//! 3. the preprocessed text is rewritten: every `extern "C"` kernel (marked
//!    by the `__global__` replacement) gets a launch entry
//!    `__hipcpu_launch_<name>` and a pack entry `__hipcpu_pack_<name>`
//!    (which copies its arguments for stream capture), `extern __shared__ T x[];` becomes a pointer
//!    to the launch's dynamic shared memory, other `__shared__` variables
//!    become block-local (thread-local) statics;
//! 4. it is compiled into a shared object, returned with its ELF machine
//!    stamped `EM_AMDGPU` (see `hip::module`).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::options::Parsed;
use crate::hip::module::{
    ABI_SYMBOL, E_MACHINE, EM_AMDGPU, LAUNCH_PREFIX, MODULE_ABI, PACK_PREFIX,
};

/// Environment variable naming the host C++ compiler.
pub const CXX_VAR: &str = "HIP_ON_CPU_CXX";

/// Optimisation level of kernel code (`HIP_ON_CPU_OPT`, default `-O1`:
/// compile time dominates the test suites).
pub const OPT_VAR: &str = "HIP_ON_CPU_OPT";

/// The replacement headers, by include name.
const DEVICE_HEADERS: &[(&str, &str)] = &[
    (
        "hip/hip_runtime.h",
        include_str!("../../device/hip/hip_runtime.h"),
    ),
    (
        "hip/hip_fp16.h",
        include_str!("../../device/hip/hip_fp16.h"),
    ),
    (
        "hip/hip_bf16.h",
        include_str!("../../device/hip/hip_bf16.h"),
    ),
    (
        "hipcpu/device.h",
        include_str!("../../device/hipcpu/device.h"),
    ),
    ("hipcpu/exec.h", include_str!("../../device/hipcpu/exec.h")),
    (
        "hipcpu/amdgcn.h",
        include_str!("../../device/hipcpu/amdgcn.h"),
    ),
];

/// Marker the `__global__` replacement expands to.
const KERNEL_MARKER: &str = "__hipcpu_kernel";
/// Marker the `__shared__` replacement expands to.
const SHARED_MARKER: &str = "__hipcpu_shared";

/// What a compilation produced.
pub(crate) struct Output {
    /// The code object, on success.
    pub(crate) code: Option<Vec<u8>>,
    /// Compiler messages and our notes.
    pub(crate) log: Vec<u8>,
}

/// A private temporary folder, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<TempDir> {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("hip-on-cpu-rtc-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `text` at `dir/name`, refusing names that leave `dir`.
fn write_file(dir: &Path, name: &str, text: &str) -> Result<(), String> {
    let relative = Path::new(name);
    if relative.is_absolute()
        || relative
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(format!("header name `{name}` leaves the program's folder"));
    }
    let path = dir.join(relative);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs the compiler; its stderr is appended to `log`.
fn run(command: &mut Command, log: &mut Vec<u8>) -> Result<(), String> {
    let output = command.output().map_err(|e| {
        format!(
            "cannot run {:?}: {e} (set {CXX_VAR})",
            command.get_program()
        )
    })?;
    log.extend_from_slice(&output.stderr);
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{:?} failed ({})",
            command.get_program(),
            output.status
        ))
    }
}

/// Compiles a program; see the module documentation.
pub(crate) fn compile(
    source: &str,
    name: &str,
    headers: &[(String, String)],
    options: &Parsed,
) -> Output {
    let mut log = Vec::new();
    let code = build(source, name, headers, options, &mut log);
    if !options.dropped.is_empty() {
        log.extend_from_slice(
            format!(
                "hip-on-cpu: dropped options: {}\n",
                options.dropped.join(" ")
            )
            .as_bytes(),
        );
    }
    match code {
        Ok(code) => Output {
            code: Some(code),
            log,
        },
        Err(why) => {
            log.extend_from_slice(format!("hip-on-cpu: {why}\n").as_bytes());
            Output { code: None, log }
        }
    }
}

fn build(
    source: &str,
    name: &str,
    headers: &[(String, String)],
    options: &Parsed,
    log: &mut Vec<u8>,
) -> Result<Vec<u8>, String> {
    let dir = TempDir::new().map_err(|e| format!("temporary folder: {e}"))?;
    let (include, device) = (dir.0.join("include"), dir.0.join("device"));
    for (header, text) in headers {
        write_file(&include, header, text)?;
    }
    for (header, text) in DEVICE_HEADERS {
        write_file(&device, header, text)?;
    }
    let quoted: String = name
        .chars()
        .filter(|c| *c != '"' && *c != '\\' && !c.is_control())
        .collect();
    let unit = format!(
        "#include <hip/hip_runtime.h>\n#line 1 \"{quoted}\"\n{source}\n#include \"hipcpu/exec.h\"\n"
    );
    write_file(&dir.0, "unit.cpp", &unit)?;

    let cxx = std::env::var_os(CXX_VAR).unwrap_or_else(|| "c++".into());
    let std_given = options.pass.iter().any(|o| o.starts_with("-std="));
    let mut preprocess = Command::new(&cxx);
    preprocess
        .current_dir(&dir.0)
        .arg("-E")
        .args((!std_given).then_some("-std=c++17"))
        .arg(format!("-D__AMDGCN_WAVEFRONT_SIZE={}", options.wave))
        .arg(format!("-D__{}__", options.arch))
        .arg("-Iinclude")
        .arg("-Idevice")
        .args(&options.pass)
        .args(["unit.cpp", "-o", "unit.ii"]);
    run(&mut preprocess, log)?;
    let text =
        std::fs::read_to_string(dir.0.join("unit.ii")).map_err(|e| format!("unit.ii: {e}"))?;
    let (rewritten, kernels) = rewrite(&text)?;
    std::fs::write(dir.0.join("module.ii"), rewritten).map_err(|e| format!("module.ii: {e}"))?;

    let opt = std::env::var(OPT_VAR).unwrap_or_else(|_| "-O1".into());
    let mut build = Command::new(&cxx);
    build
        .current_dir(&dir.0)
        .args(["-x", "c++-cpp-output"])
        .args((!std_given).then_some("-std=c++17"))
        .args(options.pass.iter().filter(|o| o.starts_with("-std=")))
        .arg(opt)
        // Shared memory is a function-local static that other fibers change
        // across barriers: keep GCC from assuming calls leave it unchanged.
        .args(["-fno-ipa-reference", "-fno-ipa-reference-addressable"])
        // An attribute g++ ignores (clang's `ext_vector_type`, say) would
        // silently change a type: make it an error. `-flax-vector-conversions`
        // converts between integer vectors of one size as clang does.
        .args([
            "-Werror=attributes",
            "-Wno-psabi",
            "-flax-vector-conversions",
        ])
        .args(["-fPIC", "-shared", "-fvisibility=hidden"])
        .args(["module.ii", "-o", "module.so"]);
    run(&mut build, log)?;
    let mut code = std::fs::read(dir.0.join("module.so")).map_err(|e| format!("module.so: {e}"))?;
    if code.len() < 64 {
        return Err("the compiler wrote no shared object".into());
    }
    code[E_MACHINE..E_MACHINE + 2].copy_from_slice(&EM_AMDGPU.to_le_bytes());
    log.extend_from_slice(
        format!(
            "hip-on-cpu: {} kernel(s) for {} (wave {})\n",
            kernels.len(),
            options.arch,
            options.wave
        )
        .as_bytes(),
    );
    Ok(code)
}

/// Whether `b` can be part of a C identifier.
fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The identifier ending right before byte `end` of `text` (spaces skipped).
fn ident_before(text: &str, end: usize) -> &str {
    let bytes = text.as_bytes();
    let mut stop = end;
    while stop > 0 && bytes[stop - 1].is_ascii_whitespace() {
        stop -= 1;
    }
    let mut start = stop;
    while start > 0 && is_ident(bytes[start - 1]) {
        start -= 1;
    }
    &text[start..stop]
}

/// Rewrites the preprocessed unit (step 3); returns it and the kernels.
fn rewrite(text: &str) -> Result<(String, Vec<String>), String> {
    let mut kernels = Vec::new();
    for (at, _) in text.match_indices(KERNEL_MARKER) {
        let before = text[..at].trim_end();
        if !before.ends_with("extern \"C\"") {
            continue; // templates and C++-named kernels have no C name to look up
        }
        let rest = &text[at + KERNEL_MARKER.len()..];
        let open = rest
            .find('(')
            .ok_or("a kernel declaration without parameters")?;
        let name = ident_before(rest, open).to_string();
        if !name.is_empty() && !kernels.contains(&name) {
            kernels.push(name);
        }
    }
    let mut out = rewrite_dynamic_shared(&text.replace(KERNEL_MARKER, ""))?;
    out = out.replace(SHARED_MARKER, "static thread_local");
    out.push_str(&format!(
        "\nextern \"C\" __attribute__((visibility(\"default\"))) const int {ABI_SYMBOL} = {MODULE_ABI};\n"
    ));
    for k in &kernels {
        out.push_str(&format!(
            "extern \"C\" __attribute__((visibility(\"default\"))) int {LAUNCH_PREFIX}{k}(const ::hipcpu::Launch* l) {{ return ::hipcpu::launch_kernel(&{k}, *l); }}\n"
        ));
        out.push_str(&format!(
            "extern \"C\" __attribute__((visibility(\"default\"))) unsigned long long {PACK_PREFIX}{k}(void* const* a, char* o, unsigned long long c) {{ return ::hipcpu::pack_arguments(&{k}, a, o, c); }}\n"
        ));
    }
    Ok((out, kernels))
}

/// `extern __shared__ T name[];` → `T* const name = (dynamic shared memory);`
fn rewrite_dynamic_shared(text: &str) -> Result<String, String> {
    let pattern = format!("extern {SHARED_MARKER}");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&pattern) {
        out.push_str(&rest[..at]);
        let decl_end = rest[at..]
            .find(';')
            .ok_or("unterminated `extern __shared__` declaration")?
            + at;
        let decl = &rest[at + pattern.len()..decl_end];
        let bracket = decl
            .rfind('[')
            .ok_or_else(|| format!("`extern __shared__{decl};` is not an array"))?;
        let name = ident_before(decl, bracket);
        let ty = decl[..decl.len() - decl[bracket..].len()].trim_end();
        let ty = ty[..ty.len() - name.len()].trim();
        if name.is_empty() || ty.is_empty() {
            return Err(format!("cannot read `extern __shared__{decl};`"));
        }
        out.push_str(&format!(
            "{ty}* const {name} = static_cast<{ty}*>(::hipcpu::dynamic_shared());"
        ));
        rest = &rest[decl_end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_get_entries_and_shared_memory_is_rewritten() {
        let unit = "extern \"C\" __hipcpu_kernel void  add_f32 (const float* a, float* b) {\n\
                    __hipcpu_shared float tile[64];\n\
                    extern __hipcpu_shared unsigned long long smem [ ];\n}\n\
                    template <class T> __hipcpu_kernel void generic(T x) {}\n";
        let (out, kernels) = rewrite(unit).unwrap();
        assert_eq!(kernels, ["add_f32"]);
        assert!(out.contains("static thread_local float tile[64];"), "{out}");
        assert!(
            out.contains(
                "unsigned long long* const smem = static_cast<unsigned long long*>(::hipcpu::dynamic_shared());"
            ),
            "{out}"
        );
        assert!(out.contains("int __hipcpu_launch_add_f32(const ::hipcpu::Launch* l)"));
        assert!(out.contains("unsigned long long __hipcpu_pack_add_f32(void* const* a"));
        assert!(!out.contains(KERNEL_MARKER));
    }

    #[test]
    fn header_names_stay_inside() {
        let dir = TempDir::new().unwrap();
        assert!(write_file(&dir.0, "../escape.h", "").is_err());
        assert!(write_file(&dir.0, "/etc/x.h", "").is_err());
        write_file(&dir.0, "sub/ok.h", "x").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.0.join("sub/ok.h")).unwrap(),
            "x"
        );
    }
}
