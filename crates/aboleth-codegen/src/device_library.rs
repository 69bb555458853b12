//! The tier-1 device library: `aboleth/device.cuh` for one transport, generated from the same
//! pipeline as tier 2.
//!
//! Each operation ([`OPERATIONS`]) is a small `ab` function (its semantic ops, written here
//! once), run through the default pipeline for the target (every call is its own program, so
//! nothing is planned across calls: library style) and encoded as C++ for each calling scope
//! by [`crate::cuda`]. [`generate`] assembles the header: the types (written from
//! `aboleth-abi`'s layouts, with size and offset assertions), then every operation's
//! declaration with its one-line contract, then the implementation, apart, in
//! `aboleth/detail/device_<target>.cuh`. Wrappers only unpack the argument structs, check what
//! cannot be checked at compile time (a flag's alignment) and pick the signal operation; the
//! transport code is the generated body. [`archive_commands`] are the nvcc steps that turn it
//! into `libaboleth_device.a`. This module does not run nvcc or know where the host keeps
//! tables (the CLI, Python and `aboleth-runtime` do).

use std::fmt::Write as _;

use aboleth_abi::Transport;
use aboleth_abi::c_declarations::{Declaration, device_library_declarations, struct_text};
use aboleth_ir::{
    ab::attributes::Comparison,
    parse_module,
    pliron::context::Context,
    walk::{kernel_name, kernels},
};
use aboleth_passes::pipeline::{PipelineOptions, run_pipeline};

use crate::BridgeError;
use crate::cuda::{CudaMutation, Parameter, ProgramScope, generate_function};

/// The header users include.
pub const HEADER_PATH: &str = "include/aboleth/device.cuh";
/// The translation unit that defines every function once, for the archive.
pub const ARCHIVE_SOURCE_PATH: &str = "src/aboleth_device.cu";
/// The archive's file name.
pub const ARCHIVE_NAME: &str = "libaboleth_device.a";

/// A value a public operation takes, and how the generated function receives it.
struct Argument {
    /// C++ parameter of the public function (`RemoteRegion dst`).
    public: &'static str,
    /// The generated function's parameters it becomes: (C++ type, name, expression).
    lowered: &'static [(&'static str, &'static str, &'static str)],
    /// The scalars a bitcode entry point takes for it (what a Triton or CuTe call passes), and
    /// the C++ expression that makes the public argument from them.
    scalars: &'static [(&'static str, &'static str)],
    from_scalars: &'static str,
}

/// The forms an operation is generated in, each its own program (a form is a static
/// parameter of the lowering; the public function picks one at run time, which the compiler
/// folds when the argument is a constant).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Forms {
    /// One form.
    One,
    /// `SignalOp::set` and `SignalOp::add`.
    SignalOperations,
    /// One per [`Comparison`], NVSHMEM's `signal_wait_until` comparisons.
    Comparisons,
}

/// One form of an operation: its suffix in generated names, and what it puts in the body.
struct Form {
    suffix: String,
    signal_operation: &'static str,
    comparison: Comparison,
}

impl Forms {
    fn list(self) -> Vec<Form> {
        match self {
            Forms::One => vec![Form {
                suffix: String::new(),
                signal_operation: "Set",
                comparison: Comparison::Ge,
            }],
            Forms::SignalOperations => ["Set", "Add"]
                .into_iter()
                .map(|operation| Form {
                    suffix: format!("_{}", operation.to_lowercase()),
                    signal_operation: operation,
                    comparison: Comparison::Ge,
                })
                .collect(),
            Forms::Comparisons => Comparison::ALL
                .into_iter()
                .map(|comparison| Form {
                    suffix: format!("_{}", comparison.name()),
                    signal_operation: "Set",
                    comparison,
                })
                .collect(),
        }
    }
}

/// One operation of the library.
struct Operation {
    /// Public name (the thread variant; `_warp` and `_block` follow).
    name: &'static str,
    /// One-line contract, written above the declaration.
    contract: &'static str,
    /// Arguments after `DeviceContext ctx`.
    arguments: &'static [Argument],
    /// Its forms: one, a SET and an ADD form (`SignalOp op` selects), or one per comparison
    /// (`Comparison comparison` selects).
    forms: Forms,
    /// The `ab` body; `OP` stands for the signal operation (`Set`/`Add`), `[COMPARISON]` for the
    /// wait's attributes. Parameters are named as in `arguments`' lowered names, after
    /// `endpoints`.
    body: &'static str,
}

const PEER: Argument = Argument {
    public: "int peer",
    scalars: &[("int32_t", "peer")],
    from_scalars: "peer",
    lowered: &[("int64_t", "peer", "static_cast<int64_t>(peer)")],
};
const DESTINATION: Argument = Argument {
    public: "RemoteRegion dst",
    scalars: &[
        ("uint64_t", "dst_descriptors"),
        ("uint64_t", "dst_offset_bytes"),
    ],
    from_scalars: "aboleth::RemoteRegion{dst_descriptors, dst_offset_bytes}",
    lowered: &[
        ("uint64_t", "dst_table", "dst.descriptors_address"),
        (
            "int64_t",
            "dst_offset",
            "static_cast<int64_t>(dst.offset_bytes)",
        ),
    ],
};
const SOURCE: Argument = Argument {
    public: "LocalRegion src",
    scalars: &[("uint64_t", "src_address"), ("uint32_t", "src_key")],
    from_scalars: "aboleth::LocalRegion{src_address, src_key, 0}",
    lowered: &[
        ("uint64_t", "src", "src.address"),
        ("int32_t", "src_key", "static_cast<int32_t>(src.lkey)"),
    ],
};
const BYTES: Argument = Argument {
    public: "uint64_t bytes",
    scalars: &[("uint64_t", "bytes")],
    from_scalars: "bytes",
    lowered: &[("int64_t", "bytes", "static_cast<int64_t>(bytes)")],
};
const FLAG: Argument = Argument {
    public: "RemoteRegion flag",
    scalars: &[
        ("uint64_t", "flag_descriptors"),
        ("uint64_t", "flag_offset_bytes"),
    ],
    from_scalars: "aboleth::RemoteRegion{flag_descriptors, flag_offset_bytes}",
    lowered: &[
        ("uint64_t", "flag_table", "flag.descriptors_address"),
        (
            "int64_t",
            "flag_index",
            "static_cast<int64_t>(flag.offset_bytes / 8)",
        ),
    ],
};
const VALUE: Argument = Argument {
    public: "uint64_t value",
    scalars: &[("uint64_t", "value")],
    from_scalars: "value",
    lowered: &[("int64_t", "value", "static_cast<int64_t>(value)")],
};
const MY_FLAG: Argument = Argument {
    public: "const uint64_t* my_flag",
    scalars: &[("uint64_t", "my_flag")],
    from_scalars: "reinterpret_cast<const uint64_t*>(my_flag)",
    lowered: &[
        ("int64_t", "rank", "static_cast<int64_t>(ctx.rank)"),
        ("uint64_t", "my_flag", "reinterpret_cast<uint64_t>(my_flag)"),
    ],
};

/// Every operation, in the order the header lists them.
const OPERATIONS: &[Operation] = &[
    Operation {
        name: "put",
        contract: "Copies `bytes` from `src` to `dst` on `peer`. `src` may be reused after `quiet(ctx, peer)`.",
        arguments: &[PEER, DESTINATION, SOURCE, BYTES],
        forms: Forms::One,
        body: "endpoint = ab.endpoint endpoints, peer [] : ab.endpoint;
      dst = ab.remote dst_table, peer [] : ab.remote <1>;
      dst_at = ab.at dst, dst_offset : ab.remote_ptr <1>;
      token = ab.put endpoint, dst_at, src, bytes, src_key [] : ab.token;",
    },
    Operation {
        name: "put_signal",
        contract: "`put`, then updates the 8-byte `flag` on `peer` with `value` (`op`: set or add) once the data is visible there.",
        arguments: &[PEER, DESTINATION, SOURCE, BYTES, FLAG, VALUE],
        forms: Forms::SignalOperations,
        body: "endpoint = ab.endpoint endpoints, peer [] : ab.endpoint;
      dst = ab.remote dst_table, peer [] : ab.remote <1>;
      flag = ab.remote flag_table, peer [] : ab.remote <8>;
      dst_at = ab.at dst, dst_offset : ab.remote_ptr <1>;
      token = ab.put endpoint, dst_at, src, bytes, src_key [] : ab.token;
      flag_at = ab.at flag, flag_index : ab.remote_ptr <8>;
      sent = ab.signal endpoint, flag_at, value, token [op: ab.signal_op OP] : ab.token;",
    },
    Operation {
        name: "signal",
        contract: "Updates the 8-byte `flag` on `peer` with `value` (`op`: set or add) after every earlier put and signal of this thread to `peer`.",
        arguments: &[PEER, FLAG, VALUE],
        forms: Forms::SignalOperations,
        body: "endpoint = ab.endpoint endpoints, peer [] : ab.endpoint;
      flag = ab.remote flag_table, peer [] : ab.remote <8>;
      flag_at = ab.at flag, flag_index : ab.remote_ptr <8>;
      sent = ab.signal endpoint, flag_at, value [op: ab.signal_op OP] : ab.token;",
    },
    Operation {
        name: "fence",
        contract: "Orders every earlier put and signal to `peer` before every later one.",
        arguments: &[PEER],
        forms: Forms::One,
        body: "endpoint = ab.endpoint endpoints, peer [] : ab.endpoint;
      ab.fence endpoint [];",
    },
    Operation {
        name: "quiet",
        contract: "Returns once every earlier put and signal to `peer` is complete: their sources may be reused.",
        arguments: &[PEER],
        forms: Forms::One,
        body: "endpoint = ab.endpoint endpoints, peer [] : ab.endpoint;
      ab.drain endpoint [];",
    },
    Operation {
        name: "wait_signal",
        contract: "Returns once `*my_flag >= value` (or `*my_flag` compares with `value` as `comparison` says: NVSHMEM's signal_wait_until, unsigned 64-bit); later reads see what the signalling put wrote. Bounded: a wait past ABOLETH_WAIT_TIMEOUT_MS is recorded for World.check_waits() and the thread exits.",
        arguments: &[MY_FLAG, VALUE],
        forms: Forms::Comparisons,
        body: "own = ab.endpoint endpoints, rank [] : ab.endpoint;
      ab.wait_signal my_flag, value [COMPARISON];",
    },
];

/// What the library of one transport is made of: its files, by path under the output
/// directory, and what each bounded wait's site id stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceLibrary {
    /// The transport it is specialized to.
    pub target: Transport,
    /// `(relative path, contents)` of every file.
    pub files: Vec<(String, String)>,
    /// `(site id, operation variant, what it waits for)` of every bounded wait.
    pub wait_sites: Vec<(u32, String, &'static str)>,
    /// The operations' public names (thread variants; `_warp` and `_block` exist for each).
    pub operations: Vec<&'static str>,
}

/// Site ids of the library's waits start here, apart from tier 2's per-kernel ids.
pub const FIRST_WAIT_SITE: u32 = 0x1000;

fn ab_type(c_type: &str) -> &'static str {
    match c_type {
        "int64_t" => "builtin.integer i64",
        "int32_t" => "builtin.integer i32",
        _ => "ab.ptr",
    }
}

/// The lowered parameters of `operation` (the endpoint table first).
fn parameters(operation: &Operation) -> Vec<(&'static str, &'static str, &'static str)> {
    let mut parameters = vec![("uint64_t", "endpoints", "ctx.endpoint_handles_address")];
    for argument in operation.arguments {
        parameters.extend(argument.lowered.iter().copied());
    }
    parameters
}

/// The `.abo` text of `operation` in `form`.
fn program_text(operation: &Operation, function: &str, form: &Form) -> String {
    let parameters = parameters(operation);
    let types: Vec<&str> = parameters.iter().map(|(c, _, _)| ab_type(c)).collect();
    let arguments: Vec<String> = parameters
        .iter()
        .map(|(c, name, _)| format!("{name}: {}", ab_type(c)))
        .collect();
    format!(
        "builtin.module @aboleth_device {{\n  ^entry():\n  builtin.func @{function}: builtin.function <({}) -> ()>\n  {{\n    ^entry({}):\n      {}\n      ab.return\n  }}\n}}\n",
        types.join(", "),
        arguments.join(", "),
        operation.body.replace("OP", form.signal_operation).replace(
            "[COMPARISON]",
            &match form.comparison {
                Comparison::Ge => "[]".to_string(),
                other => format!("[comparison: ab.comparison {other:?}]"),
            }
        )
    )
}

/// The library for `target`: the header and its implementation, and the archive's source.
pub fn generate(target: Transport) -> Result<DeviceLibrary, BridgeError> {
    generate_mutated(target, None)
}

/// [`generate`] with a deliberately broken encoding ([`CudaMutation`]), for the GPU check that
/// catches it; the header says so in its first line.
pub fn generate_mutated(
    target: Transport,
    mutation: Option<CudaMutation>,
) -> Result<DeviceLibrary, BridgeError> {
    if !target.has_device_library() {
        return Err(BridgeError::not_built(format!(
            "the device library is generated for --target p2p, proxy and mlx5; --target {} has no device library yet",
            target.name()
        )));
    }
    if let Some(mutation) = mutation
        && mutation.target() != target
    {
        return Err(BridgeError::plain(format!(
            "--mutate {} breaks the {} library, not the {} one",
            mutation.name(),
            mutation.target().name(),
            target.name()
        )));
    }
    let mut declarations = String::new();
    let mut implementation = String::new();
    let mut wrappers = String::new();
    let mut wait_sites = Vec::new();
    let mut next_site = FIRST_WAIT_SITE;
    for operation in OPERATIONS {
        let forms = operation.forms.list();
        let lowered: Vec<Parameter> = parameters(operation)
            .iter()
            .map(|(c_type, name, _)| Parameter {
                name: (*name).to_string(),
                c_type: (*c_type).to_string(),
            })
            .collect();
        for form in &forms {
            let function = format!("{}{}", operation.name, form.suffix);
            let text = program_text(operation, &function, form);
            let ctx = &mut Context::new();
            let file = format!("<device library: {function}>");
            let module = parse_module(ctx, &text, &file)
                .map_err(|error| BridgeError::plain(format!("internal: {error}\n{text}")))?;
            run_pipeline(ctx, module, &PipelineOptions::new(target))
                .map_err(|error| BridgeError::plain(format!("internal: {error}")))?;
            let lowered_function = kernels(ctx, module)
                .into_iter()
                .find(|kernel| kernel_name(ctx, *kernel) == function)
                .ok_or_else(|| BridgeError::plain("internal: the operation's function vanished"))?;
            for scope in ProgramScope::ALL {
                let generated = generate_function(
                    ctx,
                    lowered_function,
                    &lowered,
                    scope,
                    target,
                    next_site,
                    mutation,
                )?;
                let variant = format!("{function}_{}", scope.name());
                for (index, what) in generated.wait_sites.iter().enumerate() {
                    wait_sites.push((next_site + index as u32, variant.clone(), *what));
                }
                next_site += generated.wait_sites.len() as u32;
                let parameter_list: Vec<String> = lowered
                    .iter()
                    .map(|parameter| format!("{} {}", parameter.c_type, parameter.name))
                    .collect();
                let _ = write!(
                    implementation,
                    "__device__ __forceinline__ void {variant}({}) {{\n{}}}\n\n",
                    parameter_list.join(", "),
                    generated.body
                );
            }
        }
        for scope in ProgramScope::ALL {
            let public_name = format!("{}{}", operation.name, scope.suffix());
            let mut public_parameters = vec!["DeviceContext ctx".to_string()];
            public_parameters.extend(operation.arguments.iter().map(|a| a.public.to_string()));
            let mut declared = public_parameters.clone();
            match operation.forms {
                Forms::SignalOperations => {
                    declared.push("SignalOp op = SignalOp::set".into());
                    public_parameters.push("SignalOp op".into());
                }
                Forms::Comparisons => {
                    declared.push("Comparison comparison = Comparison::ge".into());
                    public_parameters.push("Comparison comparison".into());
                }
                Forms::One => {}
            }
            let _ = write!(
                declarations,
                "// {} ({} scope{})\nABOLETH_DEVICE_API void {public_name}({});\n\n",
                operation.contract,
                scope.name(),
                match scope {
                    ProgramScope::Thread => "",
                    ProgramScope::Warp =>
                        ": every lane of the warp calls it with the same arguments",
                    ProgramScope::Block =>
                        ": every thread of the block calls it with the same arguments",
                },
                declared.join(", ")
            );
            let call_arguments: Vec<&str> =
                parameters(operation).iter().map(|(_, _, e)| *e).collect();
            let mut body = String::new();
            if operation.arguments.iter().any(|a| a.public == FLAG.public) {
                let _ = writeln!(
                    body,
                    "  if (flag.offset_bytes % 8 != 0) detail::refuse(\"aboleth::{public_name}: the flag's offset is not a multiple of 8 bytes (flags are aligned 64-bit words)\");"
                );
            }
            let call = |suffix: &str| {
                format!(
                    "generated::{}{suffix}_{}({});",
                    operation.name,
                    scope.name(),
                    call_arguments.join(", ")
                )
            };
            match operation.forms {
                Forms::SignalOperations => {
                    let _ = writeln!(
                        body,
                        "  if (op == SignalOp::add) {{\n    {}\n  }} else {{\n    {}\n  }}",
                        call("_add"),
                        call("_set")
                    );
                }
                Forms::Comparisons => {
                    let _ = writeln!(body, "  switch (comparison) {{");
                    for form in &forms {
                        let _ = writeln!(
                            body,
                            "    case Comparison::{}: {} return;",
                            form.comparison.name(),
                            call(&form.suffix)
                        );
                    }
                    let _ = writeln!(
                        body,
                        "  }}\n  detail::refuse(\"aboleth::{public_name}: the comparison is not one of Comparison::eq, ne, gt, le, lt, ge (NVSHMEM_CMP_* 0 to 5)\");"
                    );
                }
                Forms::One => {
                    let _ = writeln!(body, "  {}", call(""));
                }
            }
            let _ = write!(
                wrappers,
                "ABOLETH_DEVICE_DEFINITION void {public_name}({}) {{\n{body}}}\n\n",
                public_parameters.join(", ")
            );
        }
    }
    let pointer_body = match target {
        Transport::P2p => {
            "  const RemoteRegionDescriptor* descriptor =\n      reinterpret_cast<const RemoteRegionDescriptor*>(region.descriptors_address) + peer;\n  return reinterpret_cast<void*>(descriptor->base_address + region.offset_bytes);\n"
        }
        Transport::Mlx5 => {
            "  (void)ctx; (void)region; (void)peer;\n  return nullptr;  // the NIC reaches peers: no load/store address\n"
        }
        _ => {
            "  (void)ctx; (void)region; (void)peer;\n  return nullptr;  // the proxy reaches peers through the host: no load/store address\n"
        }
    };
    let _ = write!(
        declarations,
        "// The address on `peer` of `region` that loads and stores of this GPU reach directly, or nullptr where the transport has none (p2p: the peer's mapped address; proxy and mlx5: nullptr).\nABOLETH_DEVICE_API void* ptr(DeviceContext ctx, int peer, RemoteRegion region);\n\n"
    );
    let _ = write!(
        wrappers,
        "ABOLETH_DEVICE_DEFINITION void* ptr(DeviceContext ctx, int peer, RemoteRegion region) {{\n  (void)ctx;\n{pointer_body}}}\n\n"
    );
    let name = target.name();
    let mut types = String::new();
    for declaration in device_library_declarations()
        .iter()
        .chain(transport_declarations(target).iter())
    {
        types.push_str(&struct_text(declaration));
        types.push('\n');
    }
    let mutated = match mutation {
        Some(mutation) => format!(
            "// DELIBERATELY BROKEN ({}): a test build that must fail its checks; never use it.\n",
            mutation.name()
        ),
        None => String::new(),
    };
    let header = format!(
        r#"{mutated}// aboleth/device.cuh: Aboleth's tier-1 device library for the {name} transport.
// Generated by aboleth {version} (`aboleth device-library --target {name}`, or world.device_library());
// do not edit. Every operation is the lowering of one Aboleth program (docs/TIERS.md): calls are
// library-style, each reserves, publishes and completes on its own.
//
// Use: `#include <aboleth/device.cuh>` and compile with nvcc for sm_90 or later (header only),
// or define ABOLETH_DEVICE_EXTERN, compile with -rdc=true and link libaboleth_device.a.
// Arguments come from the host: DeviceContext from the endpoint handle table of
// `world.exchange_regions(...)`, RemoteRegion from `table.regions(name)`, LocalRegion from
// `table.local(name)` (aboleth.device_library has their byte forms).
#pragma once
#include <cstddef>
#include <cstdint>

#if defined(ABOLETH_DEVICE_EXTERN) || defined(ABOLETH_DEVICE_ARCHIVE_BUILD)
#define ABOLETH_DEVICE_API __device__
#else
#define ABOLETH_DEVICE_API __device__ inline
#endif

namespace aboleth {{

// The transport this header is specialized to.
constexpr const char* transport = "{name}";

// How a signal updates its flag.
enum class SignalOp : uint32_t {{ set = 0, add = 1 }};

// What wait_signal compares the flag with the value by (`flag C value`, unsigned), numbered as
// NVSHMEM's NVSHMEM_CMP_*.
enum class Comparison : uint32_t {{ {comparisons} }};

{types}// ---- Operations. Each exists for a thread (`name`), a warp (`name_warp`) and a block
// (`name_block`). Waits are bounded and report through World.check_waits(). ----

{declarations}}}  // namespace aboleth

#if !defined(ABOLETH_DEVICE_EXTERN) || defined(ABOLETH_DEVICE_ARCHIVE_BUILD)
#include "detail/device_{name}.cuh"
#endif
"#,
        version = env!("CARGO_PKG_VERSION"),
        comparisons = Comparison::ALL
            .iter()
            .map(|comparison| format!("{} = {}", comparison.name(), comparison.nvshmem_code()))
            .collect::<Vec<_>>()
            .join(", "),
    );
    let mut sites_comment = String::new();
    for (site, variant, what) in &wait_sites {
        let _ = writeln!(
            sites_comment,
            "//   site {site}: {variant}, waiting for {what}"
        );
    }
    let detail = format!(
        r#"// aboleth/detail/device_{name}.cuh: the implementation of aboleth/device.cuh (generated; do not edit).
// The bodies in `generated` are the {name} lowering of each operation, encoded for a thread, a
// warp and a block. Wait sites (the site ids World.check_waits() reports):
{sites_comment}#pragma once
#include <cstdio>

#if defined(ABOLETH_DEVICE_ARCHIVE_BUILD)
#define ABOLETH_DEVICE_DEFINITION __device__
#else
#define ABOLETH_DEVICE_DEFINITION __device__ inline
#endif

namespace aboleth {{

{helpers}
namespace detail {{

// A call the library cannot carry out: say why, then stop the kernel (the host sees the launch fail).
static __device__ __noinline__ void refuse(const char* why) {{
  printf("%s\n", why);
  __trap();
}}

}}  // namespace detail

namespace generated {{

{implementation}}}  // namespace generated

{wrappers}}}  // namespace aboleth
"#,
        helpers = if target == Transport::Mlx5 {
            format!(
                "{}\n{}",
                crate::cuda::helpers(),
                crate::cuda::mlx5_helpers(mutation)
            )
        } else {
            crate::cuda::helpers()
        },
    );
    let archive_source = "// The archive's translation unit: every operation of aboleth/device.cuh defined once, with\n// external linkage (nvcc -rdc=true -c, then nvcc -lib).\n#define ABOLETH_DEVICE_ARCHIVE_BUILD\n#include <aboleth/device.cuh>\n"
    .to_string();
    let mut files = vec![
        (HEADER_PATH.to_string(), header),
        (format!("include/aboleth/detail/device_{name}.cuh"), detail),
        (ARCHIVE_SOURCE_PATH.to_string(), archive_source),
        (CLANG_PRELUDE_PATH.to_string(), CLANG_PRELUDE.to_string()),
    ];
    for operation in OPERATIONS {
        files.push((
            bitcode_source_path(operation.name),
            bitcode_source(operation),
        ));
    }
    Ok(DeviceLibrary {
        target,
        files,
        wait_sites,
        operations: OPERATIONS.iter().map(|operation| operation.name).collect(),
    })
}

/// The layouts the bodies of `target` write besides the tables: the proxy ring's, or the mlx5
/// queue's and WQE segments'.
fn transport_declarations(target: Transport) -> Vec<Declaration> {
    match target {
        Transport::Proxy => vec![
            aboleth_abi::declaration!(aboleth_abi::ProxyRingHeader, "ProxyRingHeader"),
            aboleth_abi::declaration!(aboleth_abi::ProxyRingEntry, "ProxyRingEntry"),
        ],
        Transport::Mlx5 => crate::cuda::mlx5_declarations(),
        _ => Vec::new(),
    }
}

/// The `nvcc` commands that build the archive from a library written to `directory`: compile
/// the archive source with `-rdc=true`, then `nvcc -lib`.
pub fn archive_commands(directory: &str, architecture: &str) -> Vec<Vec<String>> {
    let include = format!("{directory}/include");
    let object = format!("{directory}/aboleth_device.o");
    vec![
        vec![
            format!("-arch={architecture}"),
            "-rdc=true".into(),
            "-std=c++17".into(),
            // Position-independent host code, so the archive links into shared libraries too.
            "-Xcompiler".into(),
            "-fPIC".into(),
            "-I".into(),
            include,
            "-c".into(),
            format!("{directory}/{ARCHIVE_SOURCE_PATH}"),
            "-o".into(),
            object.clone(),
        ],
        vec![
            format!("-arch={architecture}"),
            "-lib".into(),
            object,
            "-o".into(),
            format!("{directory}/{ARCHIVE_NAME}"),
        ],
    ]
}

/// What nvcc's headers give the library, for clang's CUDA device compilation without them (the
/// bitcode build: `-nocudainc`, this file `-include`d).
pub const CLANG_PRELUDE_PATH: &str = "include/aboleth/detail/clang_device_prelude.h";
const CLANG_PRELUDE: &str = r#"// aboleth/detail/clang_device_prelude.h: what nvcc's headers give aboleth/device.cuh, for
// clang's CUDA device compilation without the CUDA headers (the per-operation bitcode build,
// `clang++ -x cuda --cuda-device-only -nocudainc -include` this file). Generated; do not edit.
#pragma once
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#include <__clang_cuda_builtin_vars.h>
extern "C" __device__ int printf(const char*, ...);
static __device__ __forceinline__ void __syncwarp(unsigned mask = 0xffffffffu) {
  asm volatile("bar.warp.sync %0;" ::"r"(mask) : "memory");
}
static __device__ __forceinline__ void __trap() { __builtin_trap(); }
struct __attribute__((aligned(16))) uint4 {
  unsigned int x, y, z, w;
};
"#;

/// Where the bitcode of `operation` is written, under the library's directory.
pub fn bitcode_path(operation: &str) -> String {
    format!("bitcode/{operation}.bc")
}

fn bitcode_source_path(operation: &str) -> String {
    format!("src/bitcode/{operation}.cu")
}

/// The bitcode entry points of one operation: `aboleth_tier1_<name>[_warp|_block]`, taking
/// scalars (the context's fields, then each argument's scalars, then the signal operation or
/// the comparison as a `uint32_t` where there is one) and returning 0, as Triton's and CuTe's
/// extern calls want.
fn bitcode_source(operation: &Operation) -> String {
    let mut text = format!(
        "// The bitcode entry points of aboleth::{} (generated; do not edit): scalar arguments, an int\n// result, C linkage, for Triton's extern_libs and CuTe DSL.\n#include <aboleth/device.cuh>\n\n",
        operation.name
    );
    for scope in ProgramScope::ALL {
        let mut parameters = vec![
            "uint64_t endpoint_handles".to_string(),
            "uint32_t rank".to_string(),
            "uint32_t world_size".to_string(),
        ];
        let mut arguments = vec!["ctx".to_string()];
        for argument in operation.arguments {
            parameters.extend(
                argument
                    .scalars
                    .iter()
                    .map(|(c_type, name)| format!("{c_type} {name}")),
            );
            arguments.push(argument.from_scalars.to_string());
        }
        match operation.forms {
            Forms::SignalOperations => {
                parameters.push("uint32_t op".into());
                arguments.push("static_cast<aboleth::SignalOp>(op)".into());
            }
            Forms::Comparisons => {
                parameters.push("uint32_t comparison".into());
                arguments.push("static_cast<aboleth::Comparison>(comparison)".into());
            }
            Forms::One => {}
        }
        let _ = write!(
            text,
            "extern \"C\" __device__ int aboleth_tier1_{name}{suffix}({parameters}) {{\n  const aboleth::DeviceContext ctx{{endpoint_handles, rank, world_size}};\n  aboleth::{name}{suffix}({arguments});\n  return 0;\n}}\n\n",
            name = operation.name,
            suffix = scope.suffix(),
            parameters = parameters.join(", "),
            arguments = arguments.join(", "),
        );
    }
    text
}

/// The clang steps that build every operation's bitcode from a library written to a directory,
/// each `(operation, arguments)` run there (relative paths, so the bitcode does not depend on
/// where): `clang++ -x cuda --cuda-device-only -emit-llvm` of the operation's entry points with
/// the prelude, for sm_90, denormals flushed as Triton's modules want (`nvvm-reflect-ftz` 1).
pub fn bitcode_commands() -> Vec<(&'static str, Vec<String>)> {
    OPERATIONS
        .iter()
        .map(|operation| {
            let arguments = [
                "-x",
                "cuda",
                "--cuda-device-only",
                "--cuda-gpu-arch=sm_90",
                "-nocudainc",
                "-nocudalib",
                "-fgpu-flush-denormals-to-zero",
                "-std=c++17",
                "-O2",
                "-emit-llvm",
                "-c",
                "-include",
                "aboleth/detail/clang_device_prelude.h",
                "-I",
                "include",
            ]
            .iter()
            .map(|argument| argument.to_string())
            .chain([
                bitcode_source_path(operation.name),
                "-o".to_string(),
                bitcode_path(operation.name),
            ])
            .collect();
            (operation.name, arguments)
        })
        .collect()
}
