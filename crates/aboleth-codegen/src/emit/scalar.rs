//! Values and scalar code: how an `ab` value exists in the TTIR ([`Repr`]), conversions between
//! TTIR integer and pointer types, constants and arithmetic, and the TTIR for the scalar and
//! handle ops of the `ab` dialect that survive lowering (constants, `ab.binop`, `ab.cast`,
//! pointer arithmetic, loads and stores, endpoint and region-descriptor addresses, `ab.at`).
//! Also the little-endian field loads every transport uses to read handles and descriptors
//! (offsets from `aboleth-abi`). It does not generate any communication.

use super::*;

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

    pub(super) fn operand(&self, op: Ptr<Operation>, index: usize) -> Value {
        op.deref(self.ctx).get_operand(index)
    }

    /// The remote address of a remote element: the descriptor's base address plus the offset.
    pub(super) fn remote_address(&mut self, value: Value) -> Result<String, BridgeError> {
        let Repr::RemotePointer { descriptor, offset } = self.repr(value)? else {
            return Err(BridgeError::plain("internal: expected a remote pointer"));
        };
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
}
