//! The typed WQE builder: one WQE's segments (control, remote address, data, inline data,
//! atomic operands) stored big-endian (or, for Ionic's host-order fields, little-endian) into
//! its send-queue basic blocks by thread 0, as one inline-PTX statement whose operands are TTIR
//! values (the byte swaps happen in PTX). Callers give segment offsets within the WQE; which
//! segments a WQE has is `mlx5.rs`'s and `ionic.rs`'s choice (an Ionic WQE is one 64-byte
//! block).

use aboleth_abi::mlx5::WQE_BASIC_BLOCK_BYTES;

/// Inline PTX that stores one WQE's segments (big-endian fields) into its basic blocks, by
/// thread 0 of the program. Operands are TTIR values; the byte swaps happen in PTX.
pub(in crate::emit) struct WqePtx {
    operands: Vec<(String, &'static str, char)>,
    declarations: Vec<String>,
    body: Vec<String>,
    temporaries: usize,
    blocks: usize,
}

impl WqePtx {
    pub(in crate::emit) fn new(block_addresses: &[String]) -> Self {
        let mut wqe = WqePtx {
            operands: Vec::new(),
            declarations: vec![
                ".reg .pred %ab_leader;".into(),
                ".reg .u32 %ab_tid, %ab_zero;".into(),
            ],
            body: vec![
                "mov.u32 %ab_tid, %tid.x;".into(),
                "setp.eq.u32 %ab_leader, %ab_tid, 0;".into(),
                "mov.u32 %ab_zero, 0;".into(),
            ],
            temporaries: 0,
            blocks: block_addresses.len(),
        };
        for address in block_addresses {
            wqe.input(address);
        }
        wqe
    }

    /// Adds an i64 operand; returns its `$n`.
    pub(in crate::emit) fn input(&mut self, name: &str) -> String {
        self.operands.push((name.to_string(), "i64", 'l'));
        format!("${}", self.operands.len())
    }

    pub(in crate::emit) fn register32(&mut self) -> String {
        self.temporaries += 1;
        let name = format!("%ab_w{}", self.temporaries);
        self.declarations.push(format!(".reg .u32 {name};"));
        name
    }

    /// The address register of byte `offset` of the WQE (`$k+within`).
    pub(in crate::emit) fn at(&self, offset: u32) -> String {
        let block = offset as usize / WQE_BASIC_BLOCK_BYTES;
        assert!(
            block < self.blocks,
            "WQE offset {offset} past its basic blocks"
        );
        format!(
            "[${}+{}]",
            block + 1,
            offset as usize % WQE_BASIC_BLOCK_BYTES
        )
    }

    /// The big-endian bytes of the low 32 bits of `value` (an i64 operand).
    pub(in crate::emit) fn be32_of(&mut self, value: &str) -> String {
        let operand = self.input(value);
        let word = self.register32();
        self.body.push(format!("cvt.u32.u64 {word}, {operand};"));
        self.body
            .push(format!("prmt.b32 {word}, {word}, 0, 0x0123;"));
        word
    }

    /// The big-endian halves (high word first) of `value`.
    pub(in crate::emit) fn be64_of(&mut self, value: &str) -> (String, String) {
        let operand = self.input(value);
        let (low, high) = (self.register32(), self.register32());
        self.body
            .push(format!("mov.b64 {{{low}, {high}}}, {operand};"));
        self.body.push(format!("prmt.b32 {low}, {low}, 0, 0x0123;"));
        self.body
            .push(format!("prmt.b32 {high}, {high}, 0, 0x0123;"));
        (high, low)
    }

    pub(in crate::emit) fn store_words(&mut self, offset: u32, words: &[String]) {
        for (index, word) in words.iter().enumerate() {
            let address = self.at(offset + 4 * index as u32);
            self.body
                .push(format!("@%ab_leader st.global.b32 {address}, {word};"));
        }
    }

    /// The control segment: BE32 words 0 and 1, `fm_ce_se` in byte 11.
    pub(in crate::emit) fn control(&mut self, word0: &str, word1: &str, flags: &str) {
        let first = self.be32_of(word0);
        let second = self.be32_of(word1);
        let third = self.flags_word(flags);
        self.store_words(0, &[first, second, third, "%ab_zero".into()]);
    }

    /// The control segment of an RDMA_WRITE_IMM: the immediate (big-endian) in its last word.
    pub(in crate::emit) fn control_with_immediate(
        &mut self,
        word0: &str,
        word1: &str,
        flags: &str,
        immediate: &str,
    ) {
        let first = self.be32_of(word0);
        let second = self.be32_of(word1);
        let third = self.flags_word(flags);
        let fourth = self.be32_of(immediate);
        self.store_words(0, &[first, second, third, fourth]);
    }

    /// The control segment's third word: signature 0, `dci_stream_channel_id` 0, `fm_ce_se`.
    pub(in crate::emit) fn flags_word(&mut self, flags: &str) -> String {
        let operand = self.input(flags);
        let third = self.register32();
        self.body.push(format!("cvt.u32.u64 {third}, {operand};"));
        self.body.push(format!("shl.b32 {third}, {third}, 24;"));
        third
    }

    /// A remote-address segment: BE64 address, BE32 rkey, 0.
    pub(in crate::emit) fn remote(&mut self, offset: u32, address: &str, rkey: &str) {
        let (high, low) = self.be64_of(address);
        let key = self.be32_of(rkey);
        self.store_words(offset, &[high, low, key, "%ab_zero".into()]);
    }

    /// A data segment: BE32 byte count, BE32 lkey, BE64 address.
    pub(in crate::emit) fn data(&mut self, offset: u32, bytes: &str, key: &str, address: &str) {
        let count = self.be32_of(bytes);
        let lkey = self.be32_of(key);
        let (high, low) = self.be64_of(address);
        self.store_words(offset, &[count, lkey, high, low]);
    }

    /// The low 32 bits of `value` stored as they are (little-endian: Ionic's WQE id and the
    /// header word its code assembles itself, an inline payload).
    pub(in crate::emit) fn word_le32(&mut self, offset: u32, value: &str) {
        let operand = self.input(value);
        let word = self.register32();
        self.body.push(format!("cvt.u32.u64 {word}, {operand};"));
        self.store_words(offset, &[word]);
    }

    /// `value` stored little-endian, low word first.
    pub(in crate::emit) fn le64(&mut self, offset: u32, value: &str) {
        let operand = self.input(value);
        let (low, high) = (self.register32(), self.register32());
        self.body
            .push(format!("mov.b64 {{{low}, {high}}}, {operand};"));
        self.store_words(offset, &[low, high]);
    }

    pub(in crate::emit) fn word_be32(&mut self, offset: u32, value: &str) {
        let word = self.be32_of(value);
        self.store_words(offset, &[word]);
    }

    pub(in crate::emit) fn be64(&mut self, offset: u32, value: &str) {
        let (high, low) = self.be64_of(value);
        self.store_words(offset, &[high, low]);
    }

    /// `length` bytes from the source into the WQE at `offset` (inline data).
    pub(in crate::emit) fn copy_bytes(&mut self, source: &str, offset: u32, length: u32) {
        let operand = self.input(source);
        self.declarations.push(".reg .u16 %ab_byte;".into());
        for index in 0..length {
            let address = self.at(offset + index);
            self.body.push(format!(
                "@%ab_leader ld.global.u8 %ab_byte, [{operand}+{index}];"
            ));
            self.body
                .push(format!("@%ab_leader st.global.u8 {address}, %ab_byte;"));
        }
    }

    pub(in crate::emit) fn finish(self) -> (String, Vec<(String, &'static str, char)>) {
        let ptx = format!(
            "{{ {} {} mov.u32 $0, 0; }}",
            self.declarations.join(" "),
            self.body.join(" ")
        );
        (ptx, self.operands)
    }
}
