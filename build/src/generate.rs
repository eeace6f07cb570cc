//! `bindgen`: regenerates the committed bindings of the three -sys crates from
//! the real ROCm 6.4 headers fetched by `fetch`.
//!
//! Each library produces two files under `<crate>/src/generated/`:
//! - `types.rs`: types and constants (status codes and enums as
//!   `#[repr(transparent)]` integer newtypes with associated constants);
//! - `functions.rs`: one `hip_sys::dynamic_api!` table per shared library,
//!   whose entries are bindgen's own declarations, resolved at run time.

use std::path::{Path, PathBuf};
use std::process::Command;

use quote::ToTokens;

use crate::{Result, fetch, run_checked};

/// One shared library's function table inside a generated crate.
struct Table {
    /// Rust struct name of the table.
    api: &'static str,
    /// What the table's doc comment says it binds.
    doc: &'static str,
    /// C functions bound under their own names.
    functions: &'static [&'static str],
    /// `(exported_name, declared_name)`: bind `exported_name` with the
    /// signature of `declared_name` (legacy entry points whose header
    /// declaration has been renamed).
    aliases: &'static [(&'static str, &'static str)],
}

/// One -sys crate: its headers, its tables and how it reuses hip-sys types.
struct Crate {
    dir: &'static str,
    headers: &'static [&'static str],
    /// Where headers outside the ROCm 6.4 development packages come from
    /// (searched before them), and the label naming that release.
    own_release: Option<(&'static fetch::Release, &'static str)>,
    tables: &'static [Table],
    extra_types: &'static [&'static str],
    /// Types taken from hip-sys instead of being generated again.
    reuse_from_hip: &'static [&'static str],
}

const HIP_FUNCTIONS: &[&str] = &[
    "hipInit",
    "hipDriverGetVersion",
    "hipRuntimeGetVersion",
    "hipGetDeviceCount",
    "hipGetDevice",
    "hipSetDevice",
    "hipGetDevicePropertiesR0600",
    "hipDeviceGetAttribute",
    "hipDeviceSynchronize",
    "hipMemGetInfo",
    "hipGetErrorName",
    "hipGetErrorString",
    "hipGetLastError",
    "hipMalloc",
    "hipFree",
    "hipMallocAsync",
    "hipFreeAsync",
    "hipDeviceGetDefaultMemPool",
    "hipMemPoolTrimTo",
    "hipMemPoolSetAttribute",
    "hipMemPoolGetAttribute",
    "hipMemPoolSetAccess",
    "hipHostMalloc",
    "hipHostFree",
    "hipMemcpy",
    "hipMemcpyAsync",
    "hipMemcpyPeerAsync",
    "hipDeviceCanAccessPeer",
    "hipDeviceEnablePeerAccess",
    "hipMemset",
    "hipMemsetAsync",
    "hipMemsetD16Async",
    "hipMemsetD32Async",
    "hipStreamCreateWithFlags",
    "hipStreamDestroy",
    "hipStreamSynchronize",
    "hipStreamQuery",
    "hipStreamWaitEvent",
    "hipLaunchHostFunc",
    "hipStreamBeginCapture",
    "hipStreamEndCapture",
    "hipStreamIsCapturing",
    "hipGraphInstantiateWithFlags",
    "hipGraphLaunch",
    "hipGraphExecDestroy",
    "hipGraphDestroy",
    "hipGraphGetNodes",
    "hipEventCreateWithFlags",
    "hipEventDestroy",
    "hipEventRecord",
    "hipEventSynchronize",
    "hipEventQuery",
    "hipEventElapsedTime",
    "hipModuleLoadData",
    "hipModuleUnload",
    "hipModuleGetFunction",
    "hipModuleLaunchKernel",
    "hipFuncGetAttribute",
];

const HIPRTC_FUNCTIONS: &[&str] = &[
    "hiprtcVersion",
    "hiprtcGetErrorString",
    "hiprtcCreateProgram",
    "hiprtcDestroyProgram",
    "hiprtcCompileProgram",
    "hiprtcGetProgramLogSize",
    "hiprtcGetProgramLog",
    "hiprtcGetCodeSize",
    "hiprtcGetCode",
];

const ROCBLAS_FUNCTIONS: &[&str] = &[
    "rocblas_create_handle",
    "rocblas_destroy_handle",
    "rocblas_set_stream",
    "rocblas_get_stream",
    "rocblas_set_pointer_mode",
    "rocblas_status_to_string",
    "rocblas_get_version_string_size",
    "rocblas_get_version_string",
    "rocblas_gemm_ex",
    "rocblas_gemm_strided_batched_ex",
];

const MIOPEN_FUNCTIONS: &[&str] = &[
    "miopenGetVersion",
    "miopenGetErrorString",
    "miopenCreate",
    "miopenDestroy",
    "miopenSetStream",
    "miopenGetStream",
    "miopenCreateTensorDescriptor",
    "miopenSetTensorDescriptor",
    "miopenDestroyTensorDescriptor",
    "miopenCreateConvolutionDescriptor",
    "miopenInitConvolutionNdDescriptor",
    "miopenSetConvolutionGroupCount",
    "miopenSetTransposeConvNdOutputPadding",
    "miopenDestroyConvolutionDescriptor",
    "miopenGetConvolutionNdForwardOutputDim",
    "miopenConvolutionForwardGetWorkSpaceSize",
    "miopenFindConvolutionForwardAlgorithm",
    "miopenConvolutionForward",
    "miopenConvolutionBackwardDataGetWorkSpaceSize",
    "miopenFindConvolutionBackwardDataAlgorithm",
    "miopenConvolutionBackwardData",
];

const RCCL_FUNCTIONS: &[&str] = &[
    "ncclGetVersion",
    "ncclGetErrorString",
    "ncclGetLastError",
    "ncclGetUniqueId",
    "ncclCommInitRank",
    "ncclCommInitAll",
    "ncclCommDestroy",
    "ncclCommAbort",
    "ncclCommGetAsyncError",
    "ncclCommCount",
    "ncclCommCuDevice",
    "ncclCommUserRank",
    "ncclAllReduce",
    "ncclBroadcast",
    "ncclReduce",
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclSend",
    "ncclRecv",
    "ncclGroupStart",
    "ncclGroupEnd",
];

const CRATES: &[Crate] = &[
    Crate {
        dir: "hip-sys",
        headers: &[
            "hip/hip_runtime_api.h",
            "hip/hip_deprecated.h",
            "hip/hiprtc.h",
        ],
        own_release: None,
        tables: &[
            Table {
                api: "HipApi",
                doc: "Functions of the HIP runtime (`libamdhip64`).",
                functions: HIP_FUNCTIONS,
                aliases: &[("hipGetDeviceProperties", "hipGetDevicePropertiesR0000")],
            },
            Table {
                api: "HiprtcApi",
                doc: "Functions of hipRTC (`libhiprtc`, or `libamdhip64` on ROCm 5).",
                functions: HIPRTC_FUNCTIONS,
                aliases: &[],
            },
        ],
        extra_types: &[
            "hipDeviceProp_tR0000",
            "hipDeviceAttribute_t",
            "hipMemcpyKind",
            "hipFunction_attribute",
        ],
        reuse_from_hip: &[],
    },
    Crate {
        dir: "rocblas-sys",
        headers: &["rocblas/rocblas.h"],
        own_release: None,
        tables: &[Table {
            api: "RocblasApi",
            doc: "Functions of rocBLAS (`librocblas`).",
            functions: ROCBLAS_FUNCTIONS,
            aliases: &[],
        }],
        extra_types: &["rocblas_gemm_flags", "rocblas_gemm_algo"],
        reuse_from_hip: &["hipStream_t", "ihipStream_t"],
    },
    Crate {
        dir: "miopen-sys",
        headers: &["miopen/miopen.h"],
        own_release: None,
        tables: &[Table {
            api: "MiopenApi",
            doc: "Functions of MIOpen (`libMIOpen`).",
            functions: MIOPEN_FUNCTIONS,
            aliases: &[],
        }],
        extra_types: &[
            "miopenConvolutionMode_t",
            "miopenConvFwdAlgorithm_t",
            "miopenConvBwdDataAlgorithm_t",
        ],
        reuse_from_hip: &["hipStream_t", "ihipStream_t"],
    },
    Crate {
        dir: "rccl-sys",
        headers: &["rccl/rccl.h"],
        own_release: Some((&fetch::DEV_RCCL_7_2, "RCCL 7.2")),
        tables: &[Table {
            api: "RcclApi",
            doc: "Functions of RCCL (`librccl`), under NCCL's names.",
            functions: RCCL_FUNCTIONS,
            aliases: &[],
        }],
        extra_types: &["ncclDataType_t", "ncclRedOp_t", "ncclResult_t"],
        reuse_from_hip: &["hipStream_t", "ihipStream_t"],
    },
];

/// Regenerates every crate's bindings from the headers under `include` and
/// formats them with rustfmt.
pub fn run(repo: &Path, include: &Path, release_label: &str) -> Result<()> {
    for krate in CRATES {
        let mut includes = Vec::new();
        let mut label = format!("ROCm {release_label}");
        if let Some((release, name)) = krate.own_release {
            includes.push(include_dir(&fetch::ensure(repo, release)?));
            label = format!("{name} and ROCm {release_label}");
        }
        includes.push(include.to_path_buf());
        let (types, functions) = generate_crate(krate, &includes, &label)?;
        let dir = repo.join(krate.dir).join("src").join("generated");
        std::fs::create_dir_all(&dir)?;
        let files = [dir.join("types.rs"), dir.join("functions.rs")];
        std::fs::write(&files[0], types)?;
        std::fs::write(&files[1], functions)?;
        run_checked(
            Command::new("rustfmt")
                .args(["--edition", "2024"])
                .args(&files),
        )?;
        eprintln!("generated {}", dir.display());
    }
    Ok(())
}

/// The exported names of legacy entry points bound with the signature of a
/// renamed declaration (for example `hipGetDeviceProperties`, kept for ROCm 5).
#[cfg(test)]
pub fn legacy_entry_points() -> impl Iterator<Item = &'static str> {
    CRATES
        .iter()
        .flat_map(|c| c.tables)
        .flat_map(|t| t.aliases)
        .map(|(exported, _)| *exported)
}

fn header_text(krate: &Crate) -> String {
    krate
        .headers
        .iter()
        .map(|h| format!("#include <{h}>\n"))
        .collect()
}

fn generate_crate(krate: &Crate, includes: &[PathBuf], label: &str) -> Result<(String, String)> {
    let mut builder = bindgen::Builder::default()
        .header_contents("wrapper.hpp", &header_text(krate))
        .clang_args([
            "-x",
            "c++",
            "-std=c++17",
            "-D__HIP_PLATFORM_AMD__",
            "-DMIOPEN_BETA_API",
        ])
        .clang_args(includes.iter().map(|i| format!("-I{}", i.display())))
        .newtype_enum(".*")
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_eq(true)
        .derive_hash(true)
        .layout_tests(false)
        .generate_comments(true)
        .size_t_is_usize(true)
        .use_core()
        .formatter(bindgen::Formatter::Prettyplease)
        .respect_cxx_access_specs(false);
    for table in krate.tables {
        for f in table.functions {
            builder = builder.allowlist_function(f);
        }
        for (_, declared) in table.aliases {
            builder = builder.allowlist_function(declared);
        }
    }
    for t in krate.extra_types {
        builder = builder.allowlist_type(t);
    }
    for t in krate.reuse_from_hip {
        builder = builder.blocklist_type(t);
    }
    let bindings = builder
        .generate()
        .map_err(|e| format!("bindgen failed for {}: {e}", krate.dir))?
        .to_string();
    split(krate, &bindings, label)
}

/// Splits bindgen's output into the types file and the function tables.
fn split(krate: &Crate, bindings: &str, label: &str) -> Result<(String, String)> {
    let file: syn::File = syn::parse_str(bindings)?;
    let mut types = Vec::new();
    let mut decls: Vec<syn::ForeignItemFn> = Vec::new();
    collect(file.items, &mut types, &mut decls);

    let header = format!(
        "// @generated by `cargo run -p rocm-tools -- bindgen` from the {label} headers.\n// Do not edit: change build/src/generate.rs and regenerate.\n"
    );
    let mut types_out = header.clone();
    for t in krate.reuse_from_hip {
        if !t.starts_with('i') {
            types_out.push_str(&format!("pub use hip_sys::types::{t};\n"));
        }
    }
    let types_file = syn::File {
        shebang: None,
        attrs: vec![],
        items: types,
    };
    types_out.push_str(&prettyplease::unparse(&types_file));

    let mut fns_out = header;
    let hip = if krate.dir == "hip-sys" {
        "crate"
    } else {
        "hip_sys"
    };
    for table in krate.tables {
        fns_out.push_str(&format!(
            "\n{hip}::dynamic_api! {{\n    /// {}\n    pub struct {};\n",
            table.doc, table.api
        ));
        let mut entries: Vec<(String, syn::ForeignItemFn)> = Vec::new();
        for name in table.functions {
            let decl =
                find(&decls, name).ok_or_else(|| format!("{name} not declared in the headers"))?;
            entries.push((name.to_string(), decl.clone()));
        }
        for (exported, declared) in table.aliases {
            let mut decl = find(&decls, declared)
                .ok_or_else(|| format!("{declared} not declared in the headers"))?
                .clone();
            decl.sig.ident = syn::Ident::new(exported, decl.sig.ident.span());
            decl.attrs.clear();
            let doc = format!(" Legacy entry point, bound with the signature of `{declared}`.");
            decl.attrs.push(syn::parse_quote!(#[doc = #doc]));
            entries.push((exported.to_string(), decl));
        }
        for (name, mut decl) in entries {
            if decl.sig.ident == name && !table.aliases.iter().any(|(e, _)| *e == name) {
                decl.attrs.clear();
            }
            decl.vis = syn::parse_quote!(pub);
            let text = decl.to_token_stream().to_string();
            fns_out.push_str(&format!("    {text}\n"));
        }
        fns_out.push_str("}\n");
    }
    Ok((types_out, reformat_macro_body(&fns_out)))
}

fn find<'a>(decls: &'a [syn::ForeignItemFn], name: &str) -> Option<&'a syn::ForeignItemFn> {
    decls.iter().find(|d| d.sig.ident == name)
}

/// Flattens bindgen's namespaced output into plain type items and foreign
/// function declarations.
fn collect(items: Vec<syn::Item>, types: &mut Vec<syn::Item>, decls: &mut Vec<syn::ForeignItemFn>) {
    for item in items {
        match item {
            syn::Item::Mod(m) => {
                if let Some((_, inner)) = m.content {
                    collect(inner, types, decls);
                }
            }
            syn::Item::ForeignMod(fm) => {
                for fi in fm.items {
                    if let syn::ForeignItem::Fn(f) = fi {
                        decls.push(f);
                    }
                }
            }
            other => types.push(other),
        }
    }
}

/// Token streams print on one line; run each entry through prettyplease by
/// parsing it as a function signature and re-emitting it.
fn reformat_macro_body(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("# [doc") || trimmed.starts_with("pub fn") {
            out.push_str(&pretty_decl(trimmed));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn pretty_decl(tokens: &str) -> String {
    let wrapped = format!("unsafe extern \"C\" {{ {tokens} }}");
    match syn::parse_str::<syn::File>(&wrapped) {
        Ok(file) => {
            let printed = prettyplease::unparse(&file);
            let inner: Vec<&str> = printed.lines().collect();
            let body = &inner[1..inner.len().saturating_sub(1)];
            body.iter().map(|l| format!("{l}\n")).collect()
        }
        Err(_) => format!("    {tokens}\n"),
    }
}

/// The include directory of an unpacked release.
pub fn include_dir(unpacked: &Path) -> PathBuf {
    unpacked.join("usr").join("include")
}
