//! p2p code generation (NVLink/PCIe peer memory): `p2p.copy` as masked `tt.load`/`tt.store`
//! loops that Triton spreads over the program's threads, at the peer address read from the
//! region descriptor: words when source, destination and size are 8-byte aligned (when they
//! are 16-byte aligned the pointers also carry `tt.divisibility = 16`, so Triton emits 16-byte
//! vector accesses), bytes otherwise; the whole tiles (masked by a bound known to be a multiple of the tile), then the rest; each tile moves `P2P_COPY_CHUNK_ELEMENTS` elements, or, for a put of constant
//! size, the next power of two of its element count when that is fewer (a 256-byte put is one
//! 32-word tile, not a masked 1024-word one); `p2p.signal` as one leader store or reduction with the lowering's ordering
//! (release or volatile). Packet puts (flag in data) are in `packets.rs`; the flag wait is in
//! `waits.rs`. Nothing here decides the ordering: the `order` attribute does.

use aboleth_ir::{
    ab::attributes::SignalOperation,
    attrs,
    pliron::{context::Ptr, operation::Operation},
};

use super::{BridgeError, Generator, P2P_COPY_CHUNK_ELEMENTS};

impl Generator<'_> {
    pub(super) fn p2p_copy(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let destination = self.remote_address(self.operand(op, 1))?;
        let source = self.use_as(self.operand(op, 2), "i64")?;
        let bytes = self.i64(self.operand(op, 3))?;
        let predicate_value = self.operand(op, 4);
        let constant_true =
            aboleth_ir::scalar::constant_value(self.ctx, predicate_value) == Some(1);
        let zero = self.constant_i64(0);
        let mut open_ifs = 0;
        if !constant_true {
            let predicate = self.i64(predicate_value)?;
            let condition = self.assign(
                "ab_pred",
                format!("arith.cmpi ne, {predicate}, {zero} : i64"),
            );
            self.emit(format!("scf.if {condition} {{"));
            open_ifs += 1;
        }
        // Words when source, destination and size allow it (8x fewer accesses than bytes), as
        // 16-byte vectors when all three are 16-byte aligned; bytes otherwise.
        let constant_bytes = aboleth_ir::scalar::constant_value(self.ctx, self.operand(op, 3));
        // A constant size's mask is already known to Triton; only a run-time size needs the
        // whole tiles split from the rest (see `copy_loop`).
        let split = constant_bytes.is_none();
        let either = self.binary_i64("arith.ori", &source, &destination);
        let all = self.binary_i64("arith.ori", &either, &bytes);
        let three = self.constant_i64(3);
        let words = self.binary_i64("arith.shrsi", &bytes, &three);
        let word_chunk = copy_chunk_elements(constant_bytes.map(|length| length / 8));
        let fifteen = self.constant_i64(15);
        let low_bits_16 = self.binary_i64("arith.andi", &all, &fifteen);
        let aligned_16 = self.assign(
            "ab_aligned",
            format!("arith.cmpi eq, {low_bits_16}, {zero} : i64"),
        );
        self.emit(format!("scf.if {aligned_16} {{"));
        self.copy_loop(
            "i64",
            &source,
            &destination,
            &words,
            word_chunk,
            true,
            split,
        );
        self.emit("} else {".into());
        let seven = self.constant_i64(7);
        let low_bits_8 = self.binary_i64("arith.andi", &all, &seven);
        let aligned_8 = self.assign(
            "ab_aligned",
            format!("arith.cmpi eq, {low_bits_8}, {zero} : i64"),
        );
        self.emit(format!("scf.if {aligned_8} {{"));
        self.copy_loop(
            "i64",
            &source,
            &destination,
            &words,
            word_chunk,
            false,
            split,
        );
        self.emit("} else {".into());
        let byte_chunk = copy_chunk_elements(constant_bytes);
        self.copy_loop(
            "i8",
            &source,
            &destination,
            &bytes,
            byte_chunk,
            false,
            split,
        );
        self.emit("}".into());
        self.emit("}".into());
        for _ in 0..open_ifs {
            self.emit("}".into());
        }
        Ok(())
    }

    /// A loop copying `count` elements of `element` from `source` to `destination` (i64
    /// addresses), `chunk` per iteration; with `split`, the whole tiles, then the rest in one
    /// tile (for a count known only at run time; Triton 3.6's coalescing pass asserts on the
    /// split form of some constant-size copies, which need no split). With
    /// `aligned_16`, both addresses are known 16-byte aligned (the caller tested it) and the
    /// pointers say so to Triton. The split is why a put whose size is known only at run time
    /// still moves 16-byte vectors: Triton vectorizes a masked access only when it can prove the
    /// mask constant over a vector, which a bound of unknown divisibility defeats.
    #[allow(
        clippy::too_many_arguments,
        reason = "what is copied, where, how much, and how the copy may be shaped"
    )]
    pub(super) fn copy_loop(
        &mut self,
        element: &str,
        source: &str,
        destination: &str,
        count: &str,
        chunk: i64,
        aligned_16: bool,
        split: bool,
    ) {
        let zero = self.constant_i64(0);
        let step = self.constant_i64(chunk);
        let pointer_type = format!("!tt.ptr<{element}>");
        // Triton's axis analysis reads `tt.divisibility` on the op defining a value (what
        // `tl.multiple_of` sets): the vector width of the copy's loads and stores follows.
        let hint = if aligned_16 {
            " {tt.divisibility = dense<16> : tensor<1xi32>}"
        } else {
            ""
        };
        let source_pointer = self.assign(
            "ab_src",
            format!("tt.int_to_ptr {source}{hint} : i64 -> {pointer_type}"),
        );
        let destination_pointer = self.assign(
            "ab_dst",
            format!("tt.int_to_ptr {destination}{hint} : i64 -> {pointer_type}"),
        );
        let pointers = (source_pointer, destination_pointer);
        if !split {
            let start = self.fresh("ab_chunk");
            self.emit(format!(
                "scf.for {start} = {zero} to {count} step {step} : i64 {{"
            ));
            self.copy_tile(element, &pointers, &start, count, chunk);
            self.emit("}".into());
            return;
        }
        // `(count / chunk) * chunk`: Triton's axis analysis then knows the bound is a multiple of
        // the tile, so the whole tiles' mask is constant over any vector and the accesses widen.
        // (A mask is kept: Triton 3.6's coalescing asserts on these loops' unmasked loads.)
        let tiles = self.binary_i64("arith.divsi", count, &step);
        let whole = self.binary_i64("arith.muli", &tiles, &step);
        let start = self.fresh("ab_chunk");
        self.emit(format!(
            "scf.for {start} = {zero} to {whole} step {step} : i64 {{"
        ));
        self.copy_tile(element, &pointers, &start, &whole, chunk);
        self.emit("}".into());
        let has_rest = self.assign("ab_rest", format!("arith.cmpi slt, {whole}, {count} : i64"));
        self.emit(format!("scf.if {has_rest} {{"));
        self.copy_tile(element, &pointers, &whole, count, chunk);
        self.emit("}".into());
    }

    /// One tile of `chunk` elements at element `start` of the (source, destination) pointers,
    /// masked to `start + lane < limit`.
    fn copy_tile(
        &mut self,
        element: &str,
        (source_pointer, destination_pointer): &(String, String),
        start: &str,
        limit: &str,
        chunk: i64,
    ) {
        let pointer_type = format!("!tt.ptr<{element}>");
        let tensor = format!("tensor<{chunk}xi64>");
        let pointers = format!("tensor<{chunk}x{pointer_type}>");
        let lanes = self.assign(
            "ab_lanes",
            format!("tt.make_range {{end = {chunk} : i32, start = 0 : i32}} : tensor<{chunk}xi32>"),
        );
        let wide_lanes = self.assign(
            "ab_lanes",
            format!("arith.extsi {lanes} : tensor<{chunk}xi32> to {tensor}"),
        );
        let base = self.assign("ab_splat", format!("tt.splat {start} : i64 -> {tensor}"));
        let offsets = self.assign(
            "ab_offsets",
            format!("arith.addi {base}, {wide_lanes} : {tensor}"),
        );
        let limits = self.assign("ab_splat", format!("tt.splat {limit} : i64 -> {tensor}"));
        let mask = self.assign(
            "ab_mask",
            format!("arith.cmpi slt, {offsets}, {limits} : {tensor}"),
        );
        let mask = format!(", {mask}");
        let source_splat = self.assign(
            "ab_splat",
            format!("tt.splat {source_pointer} : {pointer_type} -> {pointers}"),
        );
        let source_pointers = self.assign(
            "ab_src",
            format!("tt.addptr {source_splat}, {offsets} : {pointers}, {tensor}"),
        );
        let destination_splat = self.assign(
            "ab_splat",
            format!("tt.splat {destination_pointer} : {pointer_type} -> {pointers}"),
        );
        let destination_pointers = self.assign(
            "ab_dst",
            format!("tt.addptr {destination_splat}, {offsets} : {pointers}, {tensor}"),
        );
        let data = self.assign(
            "ab_data",
            format!("tt.load {source_pointers}{mask} : {pointers}"),
        );
        self.emit(format!(
            "tt.store {destination_pointers}, {data}{mask} : {pointers}"
        ));
    }

    pub(super) fn p2p_signal(&mut self, op: Ptr<Operation>) -> Result<(), BridgeError> {
        let address = self.remote_address(self.operand(op, 1))?;
        let value = self.i64(self.operand(op, 2))?;
        let release = attrs::get_string(self.ctx, op, "order").as_deref() == Some("release");
        let operation =
            attrs::get_typed::<SignalOperation>(self.ctx, op, "op").unwrap_or(SignalOperation::Set);
        let store = super::signal_ptx(operation, release);
        self.asm(
            &Self::leader(store),
            &[(&address, "i64", 'l'), (&value, "i64", 'l')],
        );
        Ok(())
    }
}

/// Elements per copy iteration: `P2P_COPY_CHUNK_ELEMENTS`, or for a copy of a constant
/// `element_count`, the next power of two of it when that is fewer (Triton tensors have
/// power-of-two sizes), so a small put is one unmasked or lightly masked tile.
pub(super) fn copy_chunk_elements(element_count: Option<i64>) -> i64 {
    match element_count {
        Some(count) if count > 0 && count < P2P_COPY_CHUNK_ELEMENTS => {
            (count as u64).next_power_of_two() as i64
        }
        _ => P2P_COPY_CHUNK_ELEMENTS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_follow_constant_sizes_up_to_the_limit() {
        assert_eq!(copy_chunk_elements(None), P2P_COPY_CHUNK_ELEMENTS);
        assert_eq!(copy_chunk_elements(Some(0)), P2P_COPY_CHUNK_ELEMENTS);
        assert_eq!(copy_chunk_elements(Some(1)), 1);
        assert_eq!(copy_chunk_elements(Some(32)), 32);
        assert_eq!(copy_chunk_elements(Some(33)), 64);
        assert_eq!(copy_chunk_elements(Some(1024)), 1024);
        assert_eq!(copy_chunk_elements(Some(1 << 20)), 1024);
    }
}
