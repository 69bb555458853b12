//! The simulator's form of a lowered kernel: a tree of instructions over numbered registers,
//! built once from the transport-level IR (mlx5, proxy, efa, ionic, p2p and gpu ops plus the scalar `ab`
//! ops) so that running it many times under many schedules does not touch pliron.
//!
//! What it does: maps every SSA value to a register, keeps loops and ifs as nested bodies,
//! resolves attributes (inline, atomic, fence, order, signal op) into fields, and records each
//! instruction's source location for reports. What it does not do: execute anything
//! ([`crate::interpreter`] does), or accept semantic communication ops: a kernel must be lowered
//! first, and an unlowered `ab.put` is an error naming its line.

use aboleth_abi::Transport;
use std::{collections::HashMap, rc::Rc};

use aboleth_ir::{
    Diagnostic,
    ab::{
        attributes::{BinaryOperator, Comparison, SignalOperation},
        ops::BinaryOp,
        types::RemoteType,
    },
    attrs,
    pliron::{
        common_traits::Named,
        context::{Context, Ptr},
        operation::Operation,
        r#type::Typed,
        value::Value,
    },
    scalar::{constant_value, integer_width},
    text::op_name,
    walk::{block_ops, kernel_name, region_block},
};

use crate::launch::{ArgumentBinding, LaunchSpec};

/// Threads a `doorbell_scope = "warp"` loop runs on.
pub const WARP_LANES: u32 = 32;
/// Threads a `doorbell_scope = "cta"` loop runs on: Triton's default program of 4 warps.
pub const CTA_LANES: u32 = 128;

/// A register number.
pub type Register = usize;

/// Where an instruction came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// `file:line:column` of the op (lowered ops carry their semantic op's location).
    pub location: String,
    /// The op's name, e.g. `mlx5.write`.
    pub op_name: String,
}

/// One instruction and its site.
#[derive(Clone, Debug)]
pub struct Instruction {
    /// Index into [`SimKernel::sites`].
    pub site: usize,
    /// What it does.
    pub kind: InstructionKind,
}

/// Whether a store orders the stores before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOrder {
    /// A plain (relaxed, volatile) store.
    Relaxed,
    /// `st.release.sys`: every earlier store of the program is visible first.
    Release,
}

/// The instruction set: the scalar `ab` ops and the transport ops.
#[derive(Clone, Debug)]
#[allow(
    missing_docs,
    reason = "fields are the op's operands, named as in transport.rs"
)]
pub enum InstructionKind {
    /// `builtin.constant`.
    Constant { result: Register, value: i64 },
    /// `ab.program_id`.
    ProgramId { result: Register },
    /// `ab.rank`.
    Rank { result: Register },
    /// `ab.world_size`.
    WorldSize { result: Register },
    /// `ab.binop`, wrapped to `width` bits.
    Binary {
        result: Register,
        operator: BinaryOperator,
        lhs: Register,
        rhs: Register,
        width: u32,
    },
    /// `ab.cast` to `width` bits.
    Cast {
        result: Register,
        source: Register,
        width: u32,
    },
    /// `ab.ptr_add`.
    PointerAdd {
        result: Register,
        base: Register,
        offset: Register,
    },
    /// `ab.load` of `width_bytes` (sign-extended).
    Load {
        result: Register,
        address: Register,
        width_bytes: u64,
    },
    /// `ab.store` of `width_bytes`: by the program's other threads (the compute around the
    /// communication), ordered before the program's next barrier or reservation.
    Store {
        address: Register,
        value: Register,
        width_bytes: u64,
    },
    /// `ab.for`. With `lanes > 1` (a `doorbell_scope` loop) its iterations are spread over
    /// that many threads of the program, iteration `i` on lane `i mod lanes`, the program's
    /// own thread being lane 0; the others join it at the next `gpu.barrier`.
    For {
        lower: Register,
        upper: Register,
        step: Register,
        induction: Register,
        body: Rc<[Instruction]>,
        lanes: u32,
    },
    /// `ab.if`.
    If {
        condition: Register,
        body: Rc<[Instruction]>,
    },
    /// `ab.return`.
    Return,
    /// `ab.endpoint`: the handle at `table + peer * 128`.
    Endpoint {
        result: Register,
        table: Register,
        peer: Register,
    },
    /// `ab.remote`: the descriptor at `table + peer * 32`.
    Remote {
        result: Register,
        table: Register,
        peer: Register,
        element_bytes: u64,
    },
    /// `ab.at`: element `index`.
    At {
        result: Register,
        remote: Register,
        index: Register,
    },
    /// `mlx5.reserve` / `proxy.reserve`.
    Reserve {
        result: Register,
        endpoint: Register,
        slots: Register,
        atomic: bool,
    },
    /// `mlx5.write` / `proxy.put`.
    Put(PutOperands),
    /// `mlx5.atomic` / `proxy.signal`.
    SignalCommand(SignalOperands),
    /// `mlx5.publish` / `proxy.publish`: wait until the ready head is `base`, then advance it.
    Publish {
        endpoint: Register,
        base: Register,
        count: Register,
        /// A one-owner queue's publication: a plain store keeping the counter in step.
        owner_only: bool,
    },
    /// `mlx5.lock`.
    Lock { endpoint: Register },
    /// `mlx5.unlock`.
    Unlock { endpoint: Register },
    /// `mlx5.doorbell_record`.
    DoorbellRecord {
        endpoint: Register,
        end: Register,
        atomic_max: bool,
        order: StoreOrder,
    },
    /// `mlx5.doorbell` / `proxy.doorbell`.
    Doorbell {
        endpoint: Register,
        end: Register,
        atomic_max: bool,
        order: StoreOrder,
    },
    /// `mlx5.wait_completion` / `proxy.wait_completion` (everything reserved when no slot).
    WaitCompletion {
        endpoint: Register,
        /// The command's first slot and the slot after it (a token wait), or none (a drain).
        slot: Option<(Register, Register)>,
    },
    /// `p2p.copy`.
    P2pCopy {
        endpoint: Register,
        destination: Register,
        source: Register,
        bytes: Register,
        predicate: Register,
    },
    /// `p2p.signal`.
    P2pSignal {
        endpoint: Register,
        flag: Register,
        value: Register,
        operation: SignalOperation,
        order: StoreOrder,
    },
    /// `p2p.put_packets`.
    P2pPutPackets {
        endpoint: Register,
        flag: Register,
        destination: Register,
        source: Register,
        bytes: Register,
        value: Register,
    },
    /// `gpu.fence` with its scope (`cta`, `gpu`, `sys`).
    Fence { scope: FenceScope },
    /// `gpu.barrier`: the program's lanes (see `For`) join its thread here, and its other
    /// threads' stores (`Store`) are ordered before what it does next.
    Barrier,
    /// `gpu.wait_flag`: spin until the local flag compares with `value` as `comparison` says
    /// (`>=` for most waits).
    WaitFlag {
        flag: Register,
        value: Register,
        comparison: Comparison,
        acquire: bool,
        /// What the poll also does when the kernel's signals need the receiver's help.
        receives: Option<WaitReceives>,
    },
}

#[allow(
    missing_docs,
    reason = "fields are the op's operands, named as in transport.rs"
)]
/// The operands of a queued put (`mlx5.write` / `proxy.put`): what both transports read
/// before encoding it as a WQE or a ring entry.
#[derive(Clone, Debug)]
pub struct PutOperands {
    pub endpoint: Register,
    pub slot: Register,
    pub destination: Register,
    pub source: Register,
    pub bytes: Register,
    pub key: Register,
    pub predicate: Register,
    pub completion: Register,
    pub inline: bool,
    /// `with_immediate` (mlx5): the immediate (an `ImmediateSignal`) and the flag it
    /// signals, for the checks.
    pub immediate: Option<(Register, Register)>,
    /// mlx5 `periodic_completion`: also ask for a CQE at ring-quarter boundaries.
    pub periodic_completion: bool,
}

#[allow(
    missing_docs,
    reason = "fields are the op's operands, named as in transport.rs"
)]
/// The operands of a queued signal (`mlx5.atomic` / `proxy.signal`).
#[derive(Clone, Debug)]
pub struct SignalOperands {
    pub endpoint: Register,
    pub slot: Register,
    pub flag: Register,
    pub value: Register,
    pub completion: Register,
    pub operation: SignalOperation,
    pub fenced: bool,
    /// efa: an add's immediate (an `ImmediateSignal`), computed by the lowering.
    pub immediate: Option<Register>,
    /// mlx5 `periodic_completion` (see [`PutOperands`]).
    pub periodic_completion: bool,
}

/// What a `gpu.wait_flag` also does while it polls.
#[derive(Clone, Copy, Debug)]
pub enum WaitReceives {
    /// (flag table, endpoint table): the kernel sends write-with-immediate signals, so the poll
    /// also drains this rank's receive CQ, applying each immediate to its flag in the table's
    /// region on this rank.
    Immediates(Register, Register),
    /// The kernel sends packet signals, so the poll also unpacks the flag's packet slot into
    /// this rank's data region and sets the flag.
    Packets {
        /// The flag region's descriptor table.
        flag_table: Register,
        /// The destination region's descriptor table.
        data_table: Register,
        /// Whether every payload packet's flags are checked before unpacking (always, unless
        /// the `unpack-without-checking-packets` mutation cleared `check_payload_flags`).
        check_payload_flags: bool,
        /// The longest transfer it unpacks (`packet_bytes_max`, as generated code does).
        payload_bytes_max: u64,
    },
}

/// A fence's scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceScope {
    /// `fence.acq_rel.cta`.
    Cta,
    /// `fence.acq_rel.gpu`.
    Gpu,
    /// `fence.sc.sys`.
    Sys,
}

/// A parameter of the kernel.
#[derive(Clone, Debug)]
pub struct Parameter {
    /// Its name in the IR (what `bind` refers to).
    pub name: String,
    /// Its register.
    pub register: Register,
}

/// A lowered kernel ready to run.
#[derive(Clone, Debug)]
pub struct SimKernel {
    /// Kernel name.
    pub name: String,
    /// The transport it was lowered for.
    pub target: Transport,
    /// Grid, regions, bindings and initial contents.
    pub launch: LaunchSpec,
    /// Parameters in order.
    pub parameters: Vec<Parameter>,
    /// The body.
    pub body: Rc<[Instruction]>,
    /// Registers needed.
    pub register_count: usize,
    /// Source sites, indexed by [`Instruction::site`].
    pub sites: Vec<Site>,
    /// Regions that carry packet slots after their bytes (the flag region of packet signals).
    pub packet_staging_regions: Vec<String>,
}

/// Builds the simulator form of `kernel`, lowered for `target`.
pub fn build_kernel(
    ctx: &Context,
    kernel: Ptr<Operation>,
    target: Transport,
) -> Result<SimKernel, Diagnostic> {
    let string_attribute = |name: &str| attrs::get_string(ctx, kernel, name);
    let launch = LaunchSpec::parse(
        string_attribute("grid").as_deref(),
        string_attribute("regions").as_deref(),
        string_attribute("bind").as_deref(),
        string_attribute("init").as_deref(),
    )
    .map_err(|message| Diagnostic::at_op(ctx, kernel, format!("cannot simulate: {message}")))?;
    let mut builder = KernelBuilder {
        ctx,
        registers: HashMap::new(),
        sites: Vec::new(),
    };
    let entry = region_block(ctx, kernel, 0);
    let mut parameters = Vec::new();
    for index in 0..entry.deref(ctx).get_num_arguments() {
        let argument = entry.deref(ctx).get_argument(index);
        let name = argument
            .given_name(ctx)
            .map(|name| name.to_string())
            .unwrap_or_else(|| format!("arg{index}"));
        if !launch.bindings.contains_key(&name) {
            return Err(Diagnostic::at_op(
                ctx,
                kernel,
                format!(
                    "cannot simulate: argument `{name}` is not bound; add `{name}=...` to the kernel's `bind` attribute"
                ),
            ));
        }
        parameters.push(Parameter {
            name,
            register: builder.register(argument),
        });
    }
    for argument in launch.bindings.keys() {
        if !parameters
            .iter()
            .any(|parameter| &parameter.name == argument)
        {
            return Err(Diagnostic::at_op(
                ctx,
                kernel,
                format!("cannot simulate: `bind` names `{argument}`, which is not an argument"),
            ));
        }
    }
    let mut packet_staging_regions = Vec::new();
    if let Some(index) = attrs::get_int(
        ctx,
        kernel,
        aboleth_passes::lower_p2p::PACKET_STAGING_ATTRIBUTE,
    ) {
        let binding = parameters
            .get(index as usize)
            .and_then(|parameter| launch.bindings.get(&parameter.name));
        match binding {
            Some(ArgumentBinding::RegionTable(region)) => {
                packet_staging_regions.push(region.clone())
            }
            _ => {
                return Err(Diagnostic::at_op(
                    ctx,
                    kernel,
                    format!(
                        "cannot simulate: argument {index} carries the packet signals' flag table, so bind it as `regions:NAME`"
                    ),
                ));
            }
        }
    }
    let body = builder.build_block(entry_ops(ctx, kernel))?;
    Ok(SimKernel {
        packet_staging_regions,
        name: kernel_name(ctx, kernel),
        target,
        launch,
        parameters,
        body,
        register_count: builder.registers.len(),
        sites: builder.sites,
    })
}

fn entry_ops(ctx: &Context, kernel: Ptr<Operation>) -> Vec<Ptr<Operation>> {
    block_ops(ctx, region_block(ctx, kernel, 0))
}

struct KernelBuilder<'a> {
    ctx: &'a Context,
    registers: HashMap<Value, Register>,
    sites: Vec<Site>,
}

impl KernelBuilder<'_> {
    fn register(&mut self, value: Value) -> Register {
        let next = self.registers.len();
        *self.registers.entry(value).or_insert(next)
    }

    fn build_block(&mut self, ops: Vec<Ptr<Operation>>) -> Result<Rc<[Instruction]>, Diagnostic> {
        let mut instructions = Vec::with_capacity(ops.len());
        for op in ops {
            if let Some(instruction) = self.build_op(op)? {
                instructions.push(instruction);
            }
        }
        Ok(instructions.into())
    }

    fn build_op(&mut self, op: Ptr<Operation>) -> Result<Option<Instruction>, Diagnostic> {
        let ctx = self.ctx;
        let name = op_name(ctx, op);
        let (operands, results): (Vec<Value>, Vec<Value>) = {
            let operation = op.deref(ctx);
            (
                operation.operands().collect(),
                (0..operation.get_num_results())
                    .map(|index| operation.get_result(index))
                    .collect(),
            )
        };
        let operand = |builder: &mut Self, index: usize| -> Result<Register, Diagnostic> {
            operands
                .get(index)
                .map(|value| builder.register(*value))
                .ok_or_else(|| {
                    Diagnostic::at_op(ctx, op, format!("`{name}` lacks operand {index}"))
                })
        };
        let result = |builder: &mut Self| -> Result<Register, Diagnostic> {
            results
                .first()
                .map(|value| builder.register(*value))
                .ok_or_else(|| Diagnostic::at_op(ctx, op, format!("`{name}` has no result")))
        };
        let string = |key: &str| attrs::get_string(ctx, op, key);
        let order = |key: &str| match string(key).as_deref() {
            Some("relaxed") | Some("volatile") => StoreOrder::Relaxed,
            _ => StoreOrder::Release,
        };
        let signal_operation =
            || attrs::get_typed::<SignalOperation>(ctx, op, "op").unwrap_or(SignalOperation::Set);
        let kind = match name.as_str() {
            "builtin.constant" => InstructionKind::Constant {
                result: result(self)?,
                value: constant_value(ctx, results[0]).ok_or_else(|| {
                    Diagnostic::at_op(ctx, op, "the simulator handles integer constants only")
                })?,
            },
            "ab.program_id" => InstructionKind::ProgramId {
                result: result(self)?,
            },
            "ab.rank" => InstructionKind::Rank {
                result: result(self)?,
            },
            "ab.world_size" => InstructionKind::WorldSize {
                result: result(self)?,
            },
            "ab.binop" => {
                let operator = Operation::get_op::<BinaryOp>(op, ctx)
                    .expect("ab.binop is a BinaryOp")
                    .operator(ctx);
                InstructionKind::Binary {
                    result: result(self)?,
                    operator,
                    lhs: operand(self, 0)?,
                    rhs: operand(self, 1)?,
                    width: integer_width(ctx, results[0]).unwrap_or(64),
                }
            }
            "ab.cast" => InstructionKind::Cast {
                result: result(self)?,
                source: operand(self, 0)?,
                width: integer_width(ctx, results[0]).unwrap_or(64),
            },
            "ab.ptr_add" => InstructionKind::PointerAdd {
                result: result(self)?,
                base: operand(self, 0)?,
                offset: operand(self, 1)?,
            },
            "ab.load" => InstructionKind::Load {
                result: result(self)?,
                address: operand(self, 0)?,
                width_bytes: u64::from(integer_width(ctx, results[0]).unwrap_or(64) / 8),
            },
            "ab.store" => InstructionKind::Store {
                address: operand(self, 0)?,
                value: operand(self, 1)?,
                width_bytes: u64::from(integer_width(ctx, operands[1]).unwrap_or(64) / 8),
            },
            "ab.for" => {
                let block = region_block(ctx, op, 0);
                let induction = self.register(block.deref(ctx).get_argument(0));
                InstructionKind::For {
                    lower: operand(self, 0)?,
                    upper: operand(self, 1)?,
                    step: operand(self, 2)?,
                    induction,
                    body: self.build_block(block_ops(ctx, block))?,
                    lanes: match attrs::get_string(ctx, op, "doorbell_scope").as_deref() {
                        Some("warp") => WARP_LANES,
                        Some("cta") => CTA_LANES,
                        _ => 1,
                    },
                }
            }
            "ab.if" => InstructionKind::If {
                condition: operand(self, 0)?,
                body: self.build_block(block_ops(ctx, region_block(ctx, op, 0)))?,
            },
            "ab.yield" => return Ok(None),
            "ab.return" => InstructionKind::Return,
            "ab.endpoint" => InstructionKind::Endpoint {
                result: result(self)?,
                table: operand(self, 0)?,
                peer: operand(self, 1)?,
            },
            "ab.remote" => {
                let ty = results[0].get_type(ctx);
                let element_bytes = ty
                    .deref(ctx)
                    .downcast_ref::<RemoteType>()
                    .map_or(1, |remote| u64::from(remote.element_bytes));
                InstructionKind::Remote {
                    result: result(self)?,
                    table: operand(self, 0)?,
                    peer: operand(self, 1)?,
                    element_bytes,
                }
            }
            "ab.at" => InstructionKind::At {
                result: result(self)?,
                remote: operand(self, 0)?,
                index: operand(self, 1)?,
            },
            "mlx5.reserve" | "proxy.reserve" | "efa.reserve" | "ionic.reserve" => {
                InstructionKind::Reserve {
                    result: result(self)?,
                    endpoint: operand(self, 0)?,
                    slots: operand(self, 1)?,
                    atomic: attrs::get_bool(ctx, op, "atomic"),
                }
            }
            "mlx5.write" | "proxy.put" | "efa.write" | "ionic.write" => {
                InstructionKind::Put(PutOperands {
                    endpoint: operand(self, 0)?,
                    slot: operand(self, 1)?,
                    destination: operand(self, 2)?,
                    source: operand(self, 3)?,
                    bytes: operand(self, 4)?,
                    key: operand(self, 5)?,
                    predicate: operand(self, 6)?,
                    completion: operand(self, 7)?,
                    inline: attrs::get_bool(ctx, op, "inline"),
                    immediate: if attrs::get_bool(ctx, op, "with_immediate") {
                        Some((operand(self, 8)?, operand(self, 9)?))
                    } else {
                        None
                    },
                    periodic_completion: attrs::get_bool(ctx, op, "periodic_completion"),
                })
            }
            "mlx5.atomic" | "proxy.signal" | "efa.signal" | "ionic.signal" => {
                InstructionKind::SignalCommand(SignalOperands {
                    endpoint: operand(self, 0)?,
                    slot: operand(self, 1)?,
                    flag: operand(self, 2)?,
                    value: operand(self, 3)?,
                    completion: operand(self, 4)?,
                    immediate: if operands.len() > 5 {
                        Some(operand(self, 5)?)
                    } else {
                        None
                    },
                    operation: signal_operation(),
                    fenced: attrs::get_bool(ctx, op, "fence"),
                    periodic_completion: attrs::get_bool(ctx, op, "periodic_completion"),
                })
            }
            "mlx5.publish" | "proxy.publish" | "efa.publish" | "ionic.publish" => {
                InstructionKind::Publish {
                    endpoint: operand(self, 0)?,
                    base: operand(self, 1)?,
                    count: operand(self, 2)?,
                    owner_only: attrs::get_bool(ctx, op, "owner_only"),
                }
            }
            "mlx5.lock" | "efa.lock" | "ionic.lock" => InstructionKind::Lock {
                endpoint: operand(self, 0)?,
            },
            "mlx5.unlock" | "efa.unlock" | "ionic.unlock" => InstructionKind::Unlock {
                endpoint: operand(self, 0)?,
            },
            "mlx5.doorbell_record" => InstructionKind::DoorbellRecord {
                endpoint: operand(self, 0)?,
                end: operand(self, 1)?,
                atomic_max: attrs::get_bool(ctx, op, "atomic_max"),
                order: order("order"),
            },
            "mlx5.doorbell" | "proxy.doorbell" | "efa.doorbell" | "ionic.doorbell" => {
                InstructionKind::Doorbell {
                    endpoint: operand(self, 0)?,
                    end: operand(self, 1)?,
                    atomic_max: attrs::get_bool(ctx, op, "atomic_max"),
                    order: order("order"),
                }
            }
            "mlx5.wait_completion"
            | "proxy.wait_completion"
            | "efa.wait_completion"
            | "ionic.wait_completion" => InstructionKind::WaitCompletion {
                endpoint: operand(self, 0)?,
                slot: if operands.len() > 2 {
                    Some((operand(self, 1)?, operand(self, 2)?))
                } else {
                    None
                },
            },
            "p2p.copy" => InstructionKind::P2pCopy {
                endpoint: operand(self, 0)?,
                destination: operand(self, 1)?,
                source: operand(self, 2)?,
                bytes: operand(self, 3)?,
                predicate: operand(self, 4)?,
            },
            "p2p.put_packets" => InstructionKind::P2pPutPackets {
                endpoint: operand(self, 0)?,
                flag: operand(self, 1)?,
                destination: operand(self, 2)?,
                source: operand(self, 3)?,
                bytes: operand(self, 4)?,
                value: operand(self, 5)?,
            },
            "p2p.signal" => InstructionKind::P2pSignal {
                endpoint: operand(self, 0)?,
                flag: operand(self, 1)?,
                value: operand(self, 2)?,
                operation: signal_operation(),
                order: order("order"),
            },
            "gpu.fence" => InstructionKind::Fence {
                scope: match string("scope").as_deref() {
                    Some("cta") => FenceScope::Cta,
                    Some("sys") => FenceScope::Sys,
                    _ => FenceScope::Gpu,
                },
            },
            "gpu.barrier" => InstructionKind::Barrier,
            "gpu.wait_flag" => InstructionKind::WaitFlag {
                flag: operand(self, 0)?,
                value: operand(self, 1)?,
                comparison: attrs::comparison(ctx, op),
                acquire: string("order").as_deref() == Some("acquire"),
                receives: if operands.len() > 3 {
                    let tables = (operand(self, 2)?, operand(self, 3)?);
                    Some(if attrs::get_bool(ctx, op, "packets") {
                        WaitReceives::Packets {
                            flag_table: tables.0,
                            data_table: tables.1,
                            check_payload_flags: attrs::get(ctx, op, "check_payload_flags")
                                .is_none()
                                || attrs::get_bool(ctx, op, "check_payload_flags"),
                            payload_bytes_max: attrs::get_int(ctx, op, "packet_bytes_max")
                                .map_or(aboleth_abi::packet::PACKET_PUT_BYTES_LIMIT, |bytes| {
                                    bytes.max(0) as u64
                                }),
                        }
                    } else {
                        WaitReceives::Immediates(tables.0, tables.1)
                    })
                } else {
                    None
                },
            },
            other if other.starts_with("ab.") => {
                return Err(Diagnostic::at_op(
                    ctx,
                    op,
                    format!(
                        "cannot simulate `{other}`: the simulator runs lowered kernels; run the pipeline (with lowering) first"
                    ),
                ));
            }
            other => {
                return Err(Diagnostic::at_op(
                    ctx,
                    op,
                    format!("cannot simulate `{other}`: the simulator does not model this op"),
                ));
            }
        };
        let diagnostic = Diagnostic::at_op(ctx, op, "");
        self.sites.push(Site {
            location: format!(
                "{}:{}:{}",
                diagnostic.file, diagnostic.line, diagnostic.column
            ),
            op_name: name,
        });
        Ok(Some(Instruction {
            site: self.sites.len() - 1,
            kind,
        }))
    }
}
