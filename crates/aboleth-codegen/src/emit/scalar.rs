//! Values and scalar code: how an `ab` value exists in the TTIR ([`Repr`]), conversions between
//! TTIR integer and pointer types, constants and arithmetic, and the TTIR for the scalar and
//! handle ops of the `ab` dialect that survive lowering (constants, `ab.binop`, `ab.cast`,
//! pointer arithmetic, loads and stores, endpoint and region-descriptor addresses, `ab.at`).
//! Also the little-endian field loads every transport uses to read handles and descriptors
//! (offsets from `aboleth-abi`). It does not generate any communication.

use aboleth_ir::{
    ab::attributes::BinaryOperator,
    ab::ops::BinaryOp,
    pliron::{context::Ptr, operation::Operation, r#type::Typed, value::Value},
};

use aboleth_abi::Transport;

use super::{BridgeError, Generator, Repr, WaitLog, ab_type_text};

impl Generator<'_> {
    pub(super) fn repr(&self, value: Value) -> Result<Repr, BridgeError> {
        self.values.get(&value).cloned().ok_or_else(|| {
            BridgeError::plain(format!(
                "internal: no TTIR value for an operand of type {}",
                ab_type_text(self.ctx, value)
            ))
        })
    }

    /// `value` as a TTIR value of type `wanted`, converting when needed.
    pub(super) fn use_as(&mut self, value: Value, wanted: &str) -> Result<String, BridgeError> {
        let Repr::Scalar { name, type_text } = self.repr(value)? else {
            return Err(BridgeError::plain("internal: a handle used as a number"));
        };
        self.convert(&name, &type_text, wanted)
    }

    pub(super) fn convert(
        &mut self,
        name: &str,
        from: &str,
        to: &str,
    ) -> Result<String, BridgeError> {
        if from == to {
            return Ok(name.to_string());
        }
        let result = self.fresh("ab_cv");
        let width = |t: &str| t.strip_prefix('i').and_then(|w| w.parse::<u32>().ok());
        let line = match (from.starts_with("!tt.ptr"), to.starts_with("!tt.ptr")) {
            (true, true) => format!("{result} = tt.bitcast {name} : {from} -> {to}"),
            (true, false) => {
                let as_int = self.assign("ab_cv", format!("tt.ptr_to_int {name} : {from} -> i64"));
                return self.convert(&as_int, "i64", to);
            }
            (false, true) => {
                let wide = self.convert(name, from, "i64")?;
                format!("{result} = tt.int_to_ptr {wide} : i64 -> {to}")
            }
            (false, false) => match (width(from), width(to)) {
                (Some(1), Some(_)) => format!("{result} = arith.extui {name} : {from} to {to}"),
                (Some(a), Some(b)) if a < b => {
                    format!("{result} = arith.extsi {name} : {from} to {to}")
                }
                (Some(a), Some(b)) if a > b => {
                    format!("{result} = arith.trunci {name} : {from} to {to}")
                }
                _ => {
                    return Err(BridgeError::plain(format!(
                        "internal: cannot convert {from} to {to}"
                    )));
                }
            },
        };
        self.emit(line);
        Ok(result)
    }

    pub(super) fn i64(&mut self, value: Value) -> Result<String, BridgeError> {
        self.use_as(value, "i64")
    }

    pub(super) fn constant_i64(&mut self, value: i64) -> String {
        self.assign("ab_c", format!("arith.constant {value} : i64"))
    }

    pub(super) fn binary_i64(&mut self, operation: &str, lhs: &str, rhs: &str) -> String {
        self.assign("ab_v", format!("{operation} {lhs}, {rhs} : i64"))
    }

    pub(super) fn define(&mut self, op: Ptr<Operation>, repr: Repr) {
        let result = op.deref(self.ctx).get_result(0);
        self.values.insert(result, repr);
    }

    /// Defines `op`'s result as the TTIR value `name` of type `type_text`.
    pub(super) fn define_scalar(&mut self, op: Ptr<Operation>, name: String, type_text: String) {
        self.define(op, Repr::Scalar { name, type_text });
    }

    /// The address of entry `index` (i64) of a table of `entry_bytes`-byte entries at `table`.
    pub(super) fn table_entry(&mut self, table: &str, index: &str, entry_bytes: usize) -> String {
        let size = self.constant_i64(entry_bytes as i64);
        let offset = self.binary_i64("arith.muli", index, &size);
        self.binary_i64("arith.addi", table, &offset)
    }

    pub(super) fn operand(&self, op: Ptr<Operation>, index: usize) -> Value {
        op.deref(self.ctx).get_operand(index)
    }

    /// The remote address of a remote element: the descriptor's base address (read at its
    /// `ab.remote` on p2p, here otherwise) plus the offset.
    pub(super) fn remote_address(&mut self, value: Value) -> Result<String, BridgeError> {
        let Repr::RemotePointer { descriptor, offset } = self.repr(value)? else {
            return Err(BridgeError::plain("internal: expected a remote pointer"));
        };
        if let Some(base) = self.remote_bases.get(&descriptor).cloned() {
            return Ok(self.binary_i64("arith.addi", &base, &offset));
        }
        let pointer = self.assign(
            "ab_descriptor",
            format!("tt.int_to_ptr {descriptor} : i64 -> !tt.ptr<i64>"),
        );
        let base = self.assign("ab_base", format!("tt.load {pointer} : !tt.ptr<i64>"));
        Ok(self.binary_i64("arith.addi", &base, &offset))
    }

    /// A little-endian field of `width` bits at `address + offset`, as i64 (every thread
    /// reads it; the values are uniform).
    pub(super) fn load_field(&mut self, address: &str, offset: u64, width: u32) -> String {
        let offset_value = self.constant_i64(offset as i64);
        let field_address = self.binary_i64("arith.addi", address, &offset_value);
        let pointer = self.assign(
            "ab_field",
            format!("tt.int_to_ptr {field_address} : i64 -> !tt.ptr<i{width}>"),
        );
        let value = self.assign("ab_field", format!("tt.load {pointer} : !tt.ptr<i{width}>"));
        if width == 64 {
            value
        } else {
            // Unsigned fields: zero-extend.

            self.assign("ab_field", format!("arith.extui {value} : i{width} to i64"))
        }
    }

    /// `base + offset_bytes` as i64.
    pub(super) fn offset_address(&mut self, base: &str, offset_bytes: u64) -> String {
        let offset = self.constant_i64(offset_bytes as i64);
        self.binary_i64("arith.addi", base, &offset)
    }

    /// `builtin.constant`: an `arith.constant` of the same value and width.
    pub(super) fn constant(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let result = op.deref(self.ctx).get_result(0);
        let value = aboleth_ir::scalar::constant_value(self.ctx, result)
            .ok_or_else(|| BridgeError::plain("internal: a non-integer constant"))?;
        let type_text = ab_type_text(self.ctx, result);
        let fresh = self.assign("ab_c", format!("arith.constant {value} : {type_text}"));
        self.define_scalar(op, fresh, type_text);
        Ok(())
    }

    /// `ab.binop`: the `arith` op of the operator; a comparison is `arith.cmpi` widened to the
    /// result type.
    pub(super) fn binary(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let operator = Operation::get_op::<BinaryOp>(op, self.ctx)
            .expect("ab.binop")
            .operator(self.ctx);
        let result = op.deref(self.ctx).get_result(0);
        let type_text = ab_type_text(self.ctx, result);
        let lhs = self.use_as(self.operand(op, 0), &type_text)?;
        let rhs = self.use_as(self.operand(op, 1), &type_text)?;
        let fresh = self.fresh("ab_v");
        let arith = |name: &str| format!("{fresh} = {name} {lhs}, {rhs} : {type_text}");
        let line = match operator {
            BinaryOperator::Add => arith("arith.addi"),
            BinaryOperator::Sub => arith("arith.subi"),
            BinaryOperator::Mul => arith("arith.muli"),
            BinaryOperator::Div => arith("arith.divsi"),
            BinaryOperator::Rem => arith("arith.remsi"),
            BinaryOperator::Min => arith("arith.minsi"),
            BinaryOperator::Max => arith("arith.maxsi"),
            BinaryOperator::And => arith("arith.andi"),
            BinaryOperator::Or => arith("arith.ori"),
            comparison => {
                let predicate = match comparison {
                    BinaryOperator::Eq => "eq",
                    BinaryOperator::Ne => "ne",
                    BinaryOperator::Lt => "slt",
                    BinaryOperator::Le => "sle",
                    BinaryOperator::Gt => "sgt",
                    _ => "sge",
                };
                let flag = self.assign(
                    "ab_cmp",
                    format!("arith.cmpi {predicate}, {lhs}, {rhs} : {type_text}"),
                );
                format!("{fresh} = arith.extui {flag} : i1 to {type_text}")
            }
        };
        self.emit(line);
        self.define_scalar(op, fresh, type_text);
        Ok(())
    }

    /// `ab.cast`: a signed conversion (a zero extension from an i1).
    pub(super) fn cast(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let result = op.deref(self.ctx).get_result(0);
        let type_text = ab_type_text(self.ctx, result);
        let Repr::Scalar {
            name: source,
            type_text: from,
        } = self.repr(self.operand(op, 0))?
        else {
            return Err(BridgeError::plain("internal: cast of a handle"));
        };
        // ab.cast is a signed conversion; from a TTIR i1 it is a zero extension.
        let converted = self.convert(&source, &from, &type_text)?;
        self.define_scalar(op, converted, type_text);
        Ok(())
    }

    /// `ab.ptr_add`: `tt.addptr` on an `i8` pointer.
    pub(super) fn pointer_add(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let base = self.use_as(self.operand(op, 0), "!tt.ptr<i8>")?;
        let offset = self.i64(self.operand(op, 1))?;
        let fresh = self.assign(
            "ab_p",
            format!("tt.addptr {base}, {offset} : !tt.ptr<i8>, i64"),
        );
        self.define_scalar(op, fresh, "!tt.ptr<i8>".into());
        Ok(())
    }

    /// `ab.load`: a `tt.load` of the result type.
    pub(super) fn load(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let result = op.deref(self.ctx).get_result(0);
        let type_text = ab_type_text(self.ctx, result);
        let pointer = self.use_as(self.operand(op, 0), &format!("!tt.ptr<{type_text}>"))?;
        let fresh = self.assign("ab_v", format!("tt.load {pointer} : !tt.ptr<{type_text}>"));
        self.define_scalar(op, fresh, type_text);
        Ok(())
    }

    /// `ab.store`: a `tt.store` of the value's type.
    pub(super) fn store(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let value = self.operand(op, 1);
        let type_text = ab_type_text(self.ctx, value);
        let pointer = self.use_as(self.operand(op, 0), &format!("!tt.ptr<{type_text}>"))?;
        let stored = self.use_as(value, &type_text)?;
        self.emit(format!(
            "tt.store {pointer}, {stored} : !tt.ptr<{type_text}>"
        ));
        Ok(())
    }

    /// `ab.endpoint`: the address of the peer's endpoint handle in the table; the first top-level
    /// one also gives the wait-failure log, this rank and the waits' bound (the log's timeout,
    /// read here once: the log is host memory, and a read of it in front of every wait costs a
    /// PCIe round trip per wait) to every later wait, and on mlx5 the handle is checked before
    /// anything is posted.
    pub(super) fn endpoint(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let table = self.i64(self.operand(op, 0))?;
        let peer = self.i64(self.operand(op, 1))?;
        let address = self.table_entry(&table, &peer, aboleth_abi::EndpointHandle::SIZE_BYTES);
        if self.depth == 0 && self.wait_log.is_none() {
            // Every handle carries this rank's wait-failure log and its own rank: the
            // first top-level endpoint gives them to every later wait.
            let log = self.load_field(
                &address,
                core::mem::offset_of!(aboleth_abi::EndpointHandle, wait_failure_log_address) as u64,
                64,
            );
            let rank = self.load_field(
                &address,
                core::mem::offset_of!(aboleth_abi::EndpointHandle, local_rank) as u64,
                32,
            );
            let timeout = self.load_field(
                &log,
                aboleth_abi::WaitFailureLogHeader::TIMEOUT_NANOSECONDS_OFFSET_BYTES,
                64,
            );
            self.wait_log = Some(WaitLog { log, rank, timeout });
        }
        match self.target {
            Transport::Mlx5 => self.exit_unless_supported_mlx5_endpoint(op, &address),
            Transport::Ionic => self.exit_unless_supported_ionic_endpoint(op, &address),
            _ => {}
        }
        self.define_scalar(op, address, "i64".into());
        Ok(())
    }

    /// `ab.remote`: the address of the peer's region descriptor in the table. On p2p the
    /// region's base address is read here too, where the simulator reads the descriptor
    /// (`execute_remote`): an `ab.at` in a loop is then address arithmetic on a value read once,
    /// not a descriptor load after every round's wait.
    pub(super) fn remote(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let table = self.i64(self.operand(op, 0))?;
        let peer = self.i64(self.operand(op, 1))?;
        let address = self.table_entry(
            &table,
            &peer,
            aboleth_abi::RemoteRegionDescriptor::SIZE_BYTES,
        );
        if self.target == Transport::P2p {
            let base = self.load_field(
                &address,
                core::mem::offset_of!(aboleth_abi::RemoteRegionDescriptor, base_address) as u64,
                64,
            );
            self.remote_bases.insert(address.clone(), base);
        }
        self.define_scalar(op, address, "i64".into());
        Ok(())
    }

    /// `ab.at`: a remote element, kept as its descriptor and byte offset (on p2p the base address
    /// was read at the region's `ab.remote`; the queue transports read the descriptor's fields
    /// where the element is used).
    pub(super) fn at(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let remote = self.operand(op, 0);
        let Repr::Scalar {
            name: descriptor, ..
        } = self.repr(remote)?
        else {
            return Err(BridgeError::plain("internal: ab.at of a non-region"));
        };
        let element_bytes = at_element_bytes(self.ctx, op) as i64;
        let index = self.i64(self.operand(op, 1))?;
        let scale = self.constant_i64(element_bytes);
        let offset = self.binary_i64("arith.muli", &index, &scale);
        self.define(op, Repr::RemotePointer { descriptor, offset });
        Ok(())
    }
}

/// The element size in bytes of the remote pointer an `ab.at` makes (1 when untyped): what its
/// index is scaled by, in both encodings.
pub(crate) fn at_element_bytes(
    ctx: &aboleth_ir::pliron::context::Context,
    op: Ptr<Operation>,
) -> u64 {
    op.deref(ctx)
        .get_result(0)
        .get_type(ctx)
        .deref(ctx)
        .downcast_ref::<aboleth_ir::ab::types::RemotePointerType>()
        .map_or(1, |t| u64::from(t.element_bytes))
}
