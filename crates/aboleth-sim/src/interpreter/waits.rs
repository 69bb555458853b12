//! Waits: `gpu.wait_flag` (with the receives a wait drains first: flag-in-data packets,
//! write-with-immediate CQEs), when a blocked program may run again ([`World::block_released`]
//! for every [`Block`]: a flag, a completion, ring space, in-order publication, the post lock,
//! lanes at a barrier), and what a deadlock or step-limit report says each waiting program
//! waits for and why its flag is still short.
//!
//! A wait's completion-side counterparts (`mlx5.wait_completion`, `efa.wait_completion`,
//! `proxy.wait_completion`) are in the transport's file; what a passed wait guarantees is checked in `checks.rs`.

use aboleth_abi::ProxyRingHeader;
use aboleth_ir::ab::attributes::{Comparison, SignalOperation};

use super::{Block, PacketSlot, SimulationError, Step, World};
use crate::{
    CqPollResult,
    program::{Register, WaitReceives},
};

impl<'k> World<'k> {
    /// `gpu.wait_flag` for `flag C value` (`C` the wait's comparison, `>=` for most waits):
    /// drains the receives it names first (packets
    /// unpacked into their data region, or write-with-immediate CQEs applied to their flags),
    /// then passes (checking the data the value guarantees) or blocks until the flag, a receive
    /// CQE or a landed packet transfer can change the answer.
    pub(super) fn wait_flag(
        &mut self,
        thread: usize,
        site: usize,
        (flag, value, comparison): (Register, Register, Comparison),
        receives: Option<&WaitReceives>,
    ) -> Result<Step, SimulationError> {
        let rank = self.threads[thread].rank;
        let address = self.integer(thread, flag)? as u64;
        self.check_in_user_region(thread, site, "waits on", address, 8)?;
        let expected = self.integer(thread, value)?;
        let mut packet_slot = None;
        let receive_context = match receives {
            Some(WaitReceives::Packets {
                flag_table,
                data_table,
                check_payload_flags,
                payload_bytes_max,
            }) => {
                packet_slot = self
                    .packet_slot_of(thread, address, *flag_table, *data_table)?
                    .map(|slot| PacketSlot {
                        check_payload_flags: *check_payload_flags,
                        payload_bytes_max: *payload_bytes_max,
                        ..slot
                    });
                if let Some(slot) = packet_slot {
                    self.unpack_packets(thread, site, address, &slot)?;
                }
                None
            }
            Some(WaitReceives::Immediates(flag_table, endpoint_table)) => {
                let flag_table = self.integer(thread, *flag_table)? as u64;
                let endpoint_table = self.integer(thread, *endpoint_table)? as u64;
                Some(self.receive_immediates(thread, flag_table, endpoint_table)?)
            }
            None => None,
        };
        let seen = self.load_i64(thread, rank, address)?;
        if !comparison.holds(seen, expected) {
            return Ok(Step::Blocked(Block::Flag {
                address,
                expected,
                comparison,
                site,
                receive_context,
                packet_slot,
            }));
        }
        self.check_delivered_data(thread, address, site, seen, (comparison, expected))?;
        let written_at = self.write_times.get(&(rank, address)).copied().unwrap_or(0);
        let state = &mut self.threads[thread];
        state.clock_nanoseconds = state.clock_nanoseconds.max(written_at);
        Ok(Step::Effect)
    }

    pub(super) fn block_released(
        &self,
        thread: usize,
        block: &Block,
    ) -> Result<bool, SimulationError> {
        let rank = self.threads[thread].rank;
        Ok(match block {
            Block::Flag {
                address,
                expected,
                comparison,
                receive_context,
                packet_slot,
                ..
            } => {
                comparison.holds(self.load_i64(thread, rank, *address)?, *expected)
                    || receive_context
                        .is_some_and(|context| self.next_receive_cqe(rank, context).is_some())
                    || match packet_slot {
                        Some(slot) => self.landed_packets(thread, rank, slot)?.is_some(),
                        None => false,
                    }
            }
            Block::Mlx5Completion { qpn, slot, .. } => !matches!(
                self.nic
                    .poll_cq_for_index(&self.memory, rank, *qpn, *slot)
                    .map_err(|e| SimulationError::Nic(e.to_string()))?,
                CqPollResult::Pending
            ),
            Block::EfaCompletion { queue, target, .. } => {
                self.efa_wait_done(rank, *queue, *target)?
                    || self.efa_completion_ready(rank, *queue)?
            }
            Block::IonicCompletion { queue, target, .. } => {
                self.ionic_wait_done(rank, *queue, *target)?
                    || self.ionic_completion_ready(rank, *queue)?
            }
            Block::ProxyCompletion {
                ring_address,
                ticket,
                ..
            } => {
                self.memory
                    .read_u64(
                        rank,
                        ring_address + ProxyRingHeader::COMPLETION_COUNTER_OFFSET_BYTES,
                    )
                    .map_err(|e| SimulationError::Proxy(e.to_string()))?
                    > *ticket
            }
            // Re-evaluated by running the instruction again.
            Block::Space {
                consumer_address,
                needed,
                cq_counter_address,
                efa_queue,
                ionic_queue,
                ..
            } => {
                if let Some(queue) = ionic_queue
                    && self.ionic_completion_ready(rank, *queue)?
                {
                    return Ok(true);
                }
                if let Some(queue) = efa_queue
                    && self.efa_completion_ready(rank, *queue)?
                {
                    // A completion to poll: reclaiming it may free the space.
                    return Ok(true);
                }
                let consumer = self
                    .memory
                    .read_u64(rank, *consumer_address)
                    .map_err(|e| SimulationError::Program(e.to_string()))?;
                consumer >= *needed
                    || cq_counter_address.is_some_and(|address| {
                        // A CQE past the consumer position: reclaiming it makes progress.
                        self.collapsed_cqe(rank, address)
                            .is_ok_and(|(counter, opcode)| {
                                opcode != aboleth_abi::mlx5::cqe::CQE_OPCODE_INVALID
                                    && counter.wrapping_sub(consumer as u16) < 0x8000
                            })
                    })
            }
            Block::Publication { address, base, .. } => {
                self.memory
                    .read_u64(rank, *address)
                    .map_err(|e| SimulationError::Program(e.to_string()))?
                    == *base
            }
            Block::Lock { address, .. } => {
                self.memory
                    .read_u64(rank, *address)
                    .map_err(|e| SimulationError::Program(e.to_string()))?
                    == 0
            }
            Block::Lanes { .. } => self.lanes_finished(thread),
        })
    }

    pub(super) fn describe_waits(&self) -> Result<String, SimulationError> {
        let mut lines = Vec::new();
        for (index, thread) in self.threads.iter().enumerate() {
            if thread.finished {
                continue;
            }
            let who = format!("rank {} program {}", thread.rank, thread.program);
            let line = match &thread.blocked {
                None => format!("{who} is runnable"),
                Some(Block::Flag {
                    address,
                    expected,
                    comparison,
                    site,
                    ..
                }) => {
                    let seen = self.load_i64(index, thread.rank, *address)?;
                    let awaited = match comparison {
                        Comparison::Ge => format!("to reach {expected}"),
                        other => format!("to become {} {expected}", other.symbol()),
                    };
                    let why = match comparison {
                        Comparison::Ge => self.why_flag_short(thread.rank, *address, *expected),
                        other => {
                            self.why_flag_unsatisfied(thread.rank, *address, (*other, *expected))
                        }
                    };
                    format!(
                        "{who} waits at {} for flag {} on rank {} {awaited} (epoch {}); it holds {seen}: {why}",
                        self.site_of(thread.rank, *site),
                        self.memory.describe_address(thread.rank, *address),
                        thread.rank,
                        self.epoch,
                    )
                }
                Some(Block::Mlx5Completion {
                    qpn,
                    peer,
                    slot,
                    site,
                }) => format!(
                    "{who} waits at {} for the completion of the WQE at slot {slot} on its QP to rank {peer}; {}",
                    self.site_of(thread.rank, *site),
                    self.nic.describe_queue(thread.rank, *qpn)
                ),
                Some(Block::EfaCompletion {
                    peer, target, site, ..
                }) => format!(
                    "{who} waits at {} for {} on its EFA queue to rank {peer}, and the device has no completion left to write for it",
                    self.site_of(thread.rank, *site),
                    target.describe()
                ),
                Some(Block::IonicCompletion {
                    peer, target, site, ..
                }) => format!(
                    "{who} waits at {} for {} on its Ionic queue to rank {peer}, and the device has no CQE left to write for it",
                    self.site_of(thread.rank, *site),
                    target.describe()
                ),
                Some(Block::ProxyCompletion {
                    peer, ticket, site, ..
                }) => format!(
                    "{who} waits at {} for the proxy to complete ticket {ticket} of its ring to rank {peer}; {}",
                    self.site_of(thread.rank, *site),
                    self.proxies[thread.rank as usize].describe_rings(&self.memory)
                ),
                Some(Block::Space {
                    peer,
                    site,
                    consumer_address,
                    needed,
                    ..
                }) => format!(
                    "{who} waits at {} for free slots in its queue to rank {peer}: the consumer position is {} and must reach {needed}, and no completion it can see frees more",
                    self.site_of(thread.rank, *site),
                    self.memory
                        .read_u64(thread.rank, *consumer_address)
                        .unwrap_or(u64::MAX)
                ),
                Some(Block::Publication { base, site, .. }) => format!(
                    "{who} waits at {} for the commands before slot {base} to be published by another program",
                    self.site_of(thread.rank, *site)
                ),
                Some(Block::Lock { site, .. }) => {
                    format!(
                        "{who} waits at {} for the post lock",
                        self.site_of(thread.rank, *site)
                    )
                }
                Some(Block::Lanes { site }) => format!(
                    "{who} waits at the barrier at {} for its lanes to finish the loop",
                    self.site_of(thread.rank, *site)
                ),
            };
            lines.push(line);
        }
        Ok(lines.join("; "))
    }

    /// Why a flag wait with another comparison than `>=` still does not hold when nothing can
    /// move any more: the values the flag took in this launch, none of which satisfied it.
    pub(super) fn why_flag_unsatisfied(
        &self,
        rank: u32,
        address: u64,
        (comparison, expected): (Comparison, i64),
    ) -> String {
        let updates = self
            .flag_histories
            .get(&(rank, address))
            .map_or(&[][..], |history| &history.updates[..]);
        let Some(last) = updates.last() else {
            return "the signal that should set it never arrived".to_owned();
        };
        let values: Vec<String> = updates
            .iter()
            .map(|update| update.value_after.to_string())
            .collect();
        format!(
            "{} signal(s) reached it in this launch (the last at {} from rank {} program {}), taking it through {}, none {} {expected} when the wait looked, and nothing else will signal it",
            updates.len(),
            self.site_of(last.signal.rank, last.signal.site),
            last.signal.rank,
            last.signal.program,
            values.join(", "),
            comparison.symbol()
        )
    }

    /// Why a flag is still short of `expected` when nothing can move any more: it went down
    /// (an add of a negative amount, or a set to a smaller value), or the signals that arrived
    /// were not enough, or none arrived.
    pub(super) fn why_flag_short(&self, rank: u32, address: u64, expected: i64) -> String {
        let updates = self
            .flag_histories
            .get(&(rank, address))
            .map_or(&[][..], |history| &history.updates[..]);
        let mut before = self
            .flag_histories
            .get(&(rank, address))
            .and_then(|history| history.launch_start_value);
        for update in updates {
            let went_down = match update.signal.operation {
                SignalOperation::Add => update.signal.operand < 0,
                SignalOperation::Set => before.is_some_and(|before| update.value_after < before),
            };
            if went_down {
                let signal = &update.signal;
                let what = match signal.operation {
                    SignalOperation::Add => format!("added {}", signal.operand),
                    SignalOperation::Set => format!("set it to {}", signal.operand),
                };
                let from = before.map_or(String::new(), |before| format!(" from {before}"));
                return format!(
                    "the flag went down: the signal at {} (rank {} program {}) {what}, taking it{from} to {}, and nothing else will signal it, so this `>=` wait can never reach {expected}; signals a `>=` wait counts must add positive amounts or set growing values",
                    self.site_of(signal.rank, signal.site),
                    signal.rank,
                    signal.program,
                    update.value_after
                );
            }
            before = Some(update.value_after);
        }
        match updates.last() {
            None => "the signal that should set it never arrived".to_owned(),
            Some(last) => format!(
                "{} signal(s) reached it in this launch (the last at {} from rank {} program {}), and the ones that would bring it to {expected} never arrived",
                updates.len(),
                self.site_of(last.signal.rank, last.signal.site),
                last.signal.rank,
                last.signal.program
            ),
        }
    }
}
