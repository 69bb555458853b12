//! The checks a run makes, and the records they read: what each flag received and in which
//! order ([`World::deliver`]), what a passed wait guarantees (the puts guarded by the signals
//! it needed, and the reference run's observation: [`World::check_delivered_data`]), that a
//! put executed by a NIC or proxy delivered its source as posted
//! ([`World::on_command_executed`]), that a command goes through the endpoint of the rank it
//! writes, and at a launch's end: stale epochs, queue counters caught up, packet transfers
//! unpacked. Each failure is a [`SimulationError`] whose message names ranks, programs,
//! source lines and addresses.
//!
//! It does not run anything: the handlers call it when a put lands, a signal arrives or a
//! wait passes.

use std::rc::Rc;

use aboleth_abi::Transport;
use aboleth_ir::ab::attributes::{Comparison, SignalOperation};

use super::{
    EarlyWait, FlagHistory, FlagUpdate, Observation, ObservationKey, PostedCommand, PutRecord,
    SignalRecord, SimulationError, World,
};

impl<'k> World<'k> {
    /// The bytes at `put`'s destination now (as long as the put).
    fn landed_bytes(&self, put: &PutRecord) -> Result<Vec<u8>, SimulationError> {
        self.memory
            .read(
                put.destination_rank,
                put.destination_address,
                put.expected.len() as u64,
            )
            .map_err(|e| SimulationError::Program(e.to_string()))
    }

    /// The record of a put made by the program's own stores (a p2p copy, a packet put): what
    /// it must deliver; nothing older can be visible when it is posted.
    pub(super) fn stored_put_record(
        &self,
        thread: usize,
        site: usize,
        peer: u32,
        destination_address: u64,
        expected: Vec<u8>,
    ) -> Rc<PutRecord> {
        Rc::new(PutRecord {
            rank: self.threads[thread].rank,
            program: self.threads[thread].program,
            site,
            destination_rank: peer,
            destination_address,
            expected,
            visible_at_post: Vec::new(),
        })
    }

    /// At a launch's end every queue's publication counter must have caught up with its
    /// reservation counter, whichever protocol posted to it: the next kernel on the queue may
    /// post with the shared protocol, which waits until the counter equals its base.
    pub(super) fn check_queue_counters(&self, round: u32) -> Result<(), SimulationError> {
        if !matches!(
            self.transport,
            Transport::Mlx5 | Transport::Proxy | Transport::Efa | Transport::Ionic
        ) {
            return Ok(());
        }
        let mut handles: Vec<(&(u32, u64), &usize)> = self.endpoint_handle_index.iter().collect();
        handles.sort();
        for ((rank, _), index) in handles {
            let handle = &self.endpoint_handles[*index];
            let geometry = self.queue_geometry(handle);
            let read = |address| {
                self.memory
                    .read_u64(*rank, address)
                    .map_err(|e| SimulationError::Program(e.to_string()))
            };
            let reserved = read(geometry.reservation_counter_address)?;
            let published = read(geometry.ready_counter_address)?;
            if reserved != published {
                return Err(SimulationError::Program(format!(
                    "after launch {}: rank {rank}'s queue to rank {} has {reserved} slots reserved but its publication counter is at {published}: a later kernel posting to it with the shared protocol would wait forever",
                    round + 1,
                    handle.peer_rank
                )));
            }
        }
        Ok(())
    }

    /// A packet transfer must be unpacked by a wait of its receiver in the launch that sends
    /// it (`--packet-signals` declares so): nothing else sets its flag or moves its data.
    pub(super) fn check_packet_transfers_unpacked(
        &self,
        round: u32,
    ) -> Result<(), SimulationError> {
        match self.packet_transfers.iter().next() {
            None => Ok(()),
            Some(((rank, _), transfer)) => {
                let signal = &transfer.signal;
                Err(SimulationError::Program(format!(
                    "after launch {}: rank {} program {}'s packet signal at {} (value {}) to flag {} on rank {rank} was never unpacked: with packet signals every signal must be awaited by its receiver in the launch that sends it",
                    round + 1,
                    signal.rank,
                    signal.program,
                    self.site_of(signal.rank, signal.site),
                    transfer.value,
                    self.memory.describe_address(*rank, signal.flag.1),
                )))
            }
        }
    }

    pub(super) fn deliver(&mut self, rank: u32, address: u64, signal: Rc<SignalRecord>, time: u64) {
        // Called right after the update reached memory; a relaxed store may drain together
        // with a later one to the same word, so a set's value is its own.
        let value_after = match signal.operation {
            SignalOperation::Set => signal.operand,
            SignalOperation::Add => self
                .memory
                .read_u64(rank, address)
                .map_or(signal.operand, |value| value as i64),
        };
        self.flag_histories
            .entry((rank, address))
            .or_default()
            .updates
            .push(FlagUpdate {
                signal,
                value_after,
            });
        let entry = self.write_times.entry((rank, address)).or_insert(0);
        *entry = (*entry).max(time);
    }

    /// At a launch's start: what each flag received becomes the previous launch's, and its
    /// value now is where this launch's updates start from.
    pub(super) fn start_flag_histories(&mut self) -> Result<(), SimulationError> {
        self.checked_updates.clear();
        self.early_waits.clear();
        self.landed_puts.clear();
        for (&(rank, address), history) in &mut self.flag_histories {
            history.previous_launch = std::mem::take(&mut history.updates);
            history.launch_start_value = Some(
                self.memory
                    .read_u64(rank, address)
                    .map_err(|e| SimulationError::Program(e.to_string()))? as i64,
            );
        }
        Ok(())
    }

    /// The updates of this launch a wait for `flag C expected` needs (`C` its comparison), as a
    /// range of [`FlagHistory::updates`]: for `>=`, the first update (in arrival order) that
    /// brought the flag to `expected` or more; for another comparison, the last update that
    /// arrived (the value the wait read, which need not be the first that satisfied it); and,
    /// when it is an add, every update since the last set before it (the sum needs them all;
    /// the set heads the chain). None when no update of this launch satisfied it, or the flag
    /// already did when the launch started (the wait may pass on a value from before the
    /// launch: then it guards nothing of this launch).
    pub(super) fn needed_updates(
        history: &FlagHistory,
        (comparison, expected): (Comparison, i64),
    ) -> Option<(usize, usize)> {
        // A flag first signaled in this launch: its value before an add is known; before a
        // set it is not, and the set is taken to have crossed the awaited value.
        let start = history.launch_start_value.or_else(|| {
            let first = history.updates.first()?;
            (first.signal.operation == SignalOperation::Add)
                .then(|| first.value_after.wrapping_sub(first.signal.operand))
        });
        let reached = if comparison == Comparison::Ge {
            if start.is_some_and(|start| start >= expected) {
                return None;
            }
            history
                .updates
                .iter()
                .position(|update| update.value_after >= expected)?
        } else {
            // A flag another comparison waits on may go down and up again: the wait passed on
            // what the last update that arrived left, so that update (and its chain) is what
            // it guarantees. None when nothing of this launch arrived (a value from before).
            let last = history.updates.len().checked_sub(1)?;
            if !comparison.holds(history.updates[last].value_after, expected) {
                return None;
            }
            last
        };
        let chain_start = history.updates[..=reached]
            .iter()
            .rposition(|update| update.signal.operation == SignalOperation::Set)
            .unwrap_or(0);
        Some((chain_start, reached))
    }

    /// Checks, when a wait for `flag C expected` at `(rank, address)` passes, the data the
    /// awaited value guarantees: the puts guarded by the signals whose updates were needed to
    /// reach it ([`Self::needed_updates`]) and that no earlier wait of this thread on the flag
    /// checked, must be visible; and the data the reference run's same wait guarded must be
    /// here. Signals that arrived but were not needed guard nothing yet: a later wait that needs
    /// them checks them.
    pub(super) fn check_delivered_data(
        &mut self,
        thread: usize,
        address: u64,
        site: usize,
        seen: i64,
        (comparison, expected): (Comparison, i64),
    ) -> Result<(), SimulationError> {
        let (rank, program) = (self.threads[thread].rank, self.threads[thread].program);
        let round = (self.epoch - 1) as u32;
        let key: ObservationKey = (round, rank, program, self.threads[thread].waits_passed);
        self.threads[thread].waits_passed += 1;
        let describe_wait = |world: &Self| {
            format!(
                "rank {rank} program {program} passed the wait at {} (flag {} = {seen}, awaited {} {expected})",
                world.site_of(rank, site),
                world.memory.describe_address(rank, address),
                comparison.symbol()
            )
        };
        let mut observation = Observation {
            flag: (rank, address),
            ranges: Vec::new(),
        };
        let needed = self
            .flag_histories
            .get(&(rank, address))
            .and_then(|history| Self::needed_updates(history, (comparison, expected)));
        let mut signals = Vec::new();
        match needed {
            Some((first, last)) => {
                let checked = self
                    .checked_updates
                    .entry((thread, rank, address))
                    .or_default();
                let history = &self.flag_histories[&(rank, address)];
                for index in first..=last {
                    if !checked.contains(&index) {
                        checked.push(index);
                        signals.push(history.updates[index].signal.clone());
                    }
                }
            }
            None => {
                // Stale epochs are the hazard of a wait for a growing value (`>=`, `>`); the
                // other comparisons look for a value, not a launch.
                if matches!(comparison, Comparison::Ge | Comparison::Gt)
                    && self
                        .flag_histories
                        .get(&(rank, address))
                        .and_then(|history| history.launch_start_value)
                        .is_some_and(|value| comparison.holds(value, expected))
                {
                    self.early_waits.push(EarlyWait {
                        rank,
                        program,
                        site,
                        flag: (rank, address),
                        expected,
                        comparison,
                    });
                }
            }
        }
        for signal in signals {
            for put in &signal.guarded {
                let landed = self.landed_bytes(put)?;
                if let Some(offset) = first_difference(&landed, &put.expected) {
                    let at = put.destination_address + offset as u64;
                    if let Some(writer) =
                        self.overwriting_put(put.destination_rank, at, landed[offset], Some(put))
                    {
                        return Err(SimulationError::DataOverwritten(format!(
                            "{}, which guards {} on rank {} (byte {offset} of the put at {} from rank {} program {}), but the put at {} from rank {} program {} has overwritten it ({:#04x} where the guarded put carried {:#04x}) while rank {rank} program {program} is still reading it: the writer must wait until the reader is done (e.g. for an acknowledgement flag) before reusing the destination",
                            describe_wait(self),
                            self.memory.describe_address(put.destination_rank, at),
                            put.destination_rank,
                            self.site_of(put.rank, put.site),
                            put.rank,
                            put.program,
                            self.site_of(writer.rank, writer.site),
                            writer.rank,
                            writer.program,
                            landed[offset],
                            put.expected[offset],
                        )));
                    }
                    return Err(SimulationError::DataNotVisible(format!(
                        "{}, but the put at {} from rank {} program {} to {} on rank {} is not visible yet (byte {offset} is {:#04x}, the put carries {:#04x}); its signal at {} (rank {} program {}) was published before its data",
                        describe_wait(self),
                        self.site_of(put.rank, put.site),
                        put.rank,
                        put.program,
                        self.memory
                            .describe_address(put.destination_rank, put.destination_address),
                        put.destination_rank,
                        landed[offset],
                        put.expected[offset],
                        self.site_of(signal.rank, signal.site),
                        signal.rank,
                        signal.program,
                    )));
                }
                observation
                    .ranges
                    .push((put.destination_rank, put.destination_address, landed));
            }
        }
        if let Some(expected) = self
            .options
            .expected_observations
            .as_ref()
            .and_then(|observations| observations.get(&key))
        {
            if expected.flag != (rank, address) {
                return Err(SimulationError::DataNotVisible(format!(
                    "{}, which is wait number {} of this program; in the library-style run that wait was on flag {} of rank {}",
                    describe_wait(self),
                    key.3,
                    self.memory
                        .describe_address(expected.flag.0, expected.flag.1),
                    expected.flag.0
                )));
            }
            for (range_rank, range_address, bytes) in &expected.ranges {
                let here = self
                    .memory
                    .read(*range_rank, *range_address, bytes.len() as u64)
                    .map_err(|e| SimulationError::Program(e.to_string()))?;
                if let Some(offset) = first_difference(&here, bytes) {
                    let at = *range_address + offset as u64;
                    if let Some(writer) = self.overwriting_put(*range_rank, at, here[offset], None)
                    {
                        return Err(SimulationError::DataOverwritten(format!(
                            "{}, which guards {} on rank {range_rank} (the library-style run had {:#04x} there when this wait passed), but the put at {} from rank {} program {} has overwritten it ({:#04x}) while rank {rank} program {program} is still reading it: the writer must wait until the reader is done (e.g. for an acknowledgement flag) before reusing the destination",
                            describe_wait(self),
                            self.memory.describe_address(*range_rank, at),
                            bytes[offset],
                            self.site_of(writer.rank, writer.site),
                            writer.rank,
                            writer.program,
                            here[offset],
                        )));
                    }
                    return Err(SimulationError::DataNotVisible(format!(
                        "{}, but {} on rank {} holds {:#04x} at byte {offset} where the library-style run had {:#04x} when this wait passed: data the signal guards was issued or published after the signal",
                        describe_wait(self),
                        self.memory.describe_address(*range_rank, *range_address),
                        range_rank,
                        here[offset],
                        bytes[offset],
                    )));
                }
            }
        }
        self.observations.insert(key, observation);
        Ok(())
    }

    /// The put of this launch that last wrote `byte` at `(rank, address)`, landing after
    /// `guarded` (when given): the writer that overwrote data a wait guards.
    pub(super) fn overwriting_put(
        &self,
        rank: u32,
        address: u64,
        byte: u8,
        guarded: Option<&Rc<PutRecord>>,
    ) -> Option<Rc<PutRecord>> {
        let after = match guarded {
            Some(guarded) => {
                self.landed_puts
                    .iter()
                    .position(|put| Rc::ptr_eq(put, guarded))?
                    + 1
            }
            None => 0,
        };
        self.landed_puts[after..]
            .iter()
            .rev()
            .find(|put| {
                put.destination_rank == rank
                    && address >= put.destination_address
                    && address < put.destination_address + put.expected.len() as u64
                    && put.expected[(address - put.destination_address) as usize] == byte
                    && guarded.is_none_or(|guarded| !Rc::ptr_eq(put, guarded))
            })
            .cloned()
    }

    /// At a launch's end: a wait that passed on the value its flag held from the previous
    /// launch, when this launch's signals bring the flag to no more than that value, could not
    /// tell the launches apart (a stale epoch).
    pub(super) fn check_stale_epochs(&self, round: u32) -> Result<(), SimulationError> {
        for wait in &self.early_waits {
            let Some(history) = self.flag_histories.get(&wait.flag) else {
                continue;
            };
            let Some(start) = history.launch_start_value else {
                continue;
            };
            let Some(this_launch) = history
                .updates
                .iter()
                .find(|update| wait.comparison.holds(update.value_after, wait.expected))
            else {
                continue;
            };
            let Some(previous) = history
                .previous_launch
                .iter()
                .rev()
                .find(|update| update.value_after == start)
            else {
                continue;
            };
            if this_launch.value_after > start {
                continue;
            }
            let flag = self.memory.describe_address(wait.flag.0, wait.flag.1);
            let received = if this_launch.value_after == start {
                format!(
                    "flag {flag} on rank {} receives the same value {start} in launch {} (the signal at {} from rank {} program {}) as in launch {round} (the signal at {})",
                    wait.flag.0,
                    round + 1,
                    self.site_of(this_launch.signal.rank, this_launch.signal.site),
                    this_launch.signal.rank,
                    this_launch.signal.program,
                    self.site_of(previous.signal.rank, previous.signal.site),
                )
            } else {
                format!(
                    "flag {flag} on rank {} receives {} in launch {} (the signal at {} from rank {} program {}) but already holds {start} from launch {round} (the signal at {})",
                    wait.flag.0,
                    this_launch.value_after,
                    round + 1,
                    self.site_of(this_launch.signal.rank, this_launch.signal.site),
                    this_launch.signal.rank,
                    this_launch.signal.program,
                    self.site_of(previous.signal.rank, previous.signal.site),
                )
            };
            return Err(SimulationError::StaleEpoch(format!(
                "{received}; waits cannot tell the launches apart: the wait at {} (rank {} program {}, for {} {}) passes on launch {round}'s value in launch {}; make the value grow with the launch (e.g. set the epoch, or wait for epoch * count with adds)",
                self.site_of(wait.rank, wait.site),
                wait.rank,
                wait.program,
                wait.comparison.symbol(),
                wait.expected,
                round + 1,
            )));
        }
        Ok(())
    }

    pub(super) fn take_signal_record(
        &mut self,
        thread: usize,
        peer: u32,
        site: usize,
        flag_address: u64,
        (operation, operand): (SignalOperation, i64),
    ) -> Rc<SignalRecord> {
        let state = &mut self.threads[thread];
        Rc::new(SignalRecord {
            rank: state.rank,
            program: state.program,
            site,
            flag: (peer, flag_address),
            operation,
            operand,
            guarded: state.unsignaled_puts.remove(&peer).unwrap_or_default(),
        })
    }

    pub(super) fn check_same_peer(
        &self,
        thread: usize,
        site: usize,
        endpoint_peer: u32,
        target_peer: u32,
    ) -> Result<(), SimulationError> {
        if endpoint_peer == target_peer {
            return Ok(());
        }
        Err(self.program_error(
            thread,
            format!(
                "the command at {} goes through the endpoint to rank {endpoint_peer} but targets memory of rank {target_peer}: use the endpoint of the rank whose region it writes",
                self.site_of(self.threads[thread].rank, site)
            ),
        ))
    }

    /// A NIC or proxy executed a command: check a put's bytes, deliver a signal.
    pub(super) fn on_command_executed(
        &mut self,
        posted: Option<PostedCommand>,
        now: u64,
    ) -> Result<(), SimulationError> {
        match posted {
            Some(PostedCommand::Put(put) | PostedCommand::PutWithImmediate(put, _)) => {
                let landed = self.landed_bytes(&put)?;
                if let Some(offset) = first_difference(&landed, &put.expected) {
                    // Older bytes than posted: the program's stores had not reached memory;
                    // anything else: something wrote the source after the put was posted.
                    let still_buffered = landed == put.visible_at_post;
                    let why = if still_buffered {
                        "the stores that wrote the source were not yet visible to the NIC or proxy (a missing fence before submission)"
                    } else {
                        "the source was overwritten before the transfer read it (a reuse without waiting for the put's completion)"
                    };
                    return Err(SimulationError::SourceChanged(format!(
                        "the put at {} from rank {} program {} delivered {:#04x} at byte {offset} of {} on rank {} where the source held {:#04x} when it was posted: {why}",
                        self.site_of(put.rank, put.site),
                        put.rank,
                        put.program,
                        landed[offset],
                        self.memory
                            .describe_address(put.destination_rank, put.destination_address),
                        put.destination_rank,
                        put.expected[offset],
                    )));
                }
                self.landed_puts.push(put);
            }
            Some(PostedCommand::Signal(signal)) => {
                let (rank, address) = signal.flag;
                self.deliver(rank, address, signal, now);
            }
            Some(PostedCommand::Other) | None => {}
        }
        Ok(())
    }
}

fn first_difference(landed: &[u8], expected: &[u8]) -> Option<usize> {
    landed
        .iter()
        .zip(expected)
        .position(|(landed, expected)| landed != expected)
}
