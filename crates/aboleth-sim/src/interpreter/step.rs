//! One step of a program: [`World::step_thread`] runs a thread's instructions until the first
//! effect, wait or its end, and [`World::execute`] runs one instruction, dispatching it to
//! its handler: the scalar and control instructions, handles (`ab.endpoint`, `ab.remote`,
//! `ab.at`) and the threads of a program (doorbell-scope lanes and the other threads whose
//! stores a barrier orders) are here; memory instructions in `memory_access.rs`, waits in
//! `waits.rs`, the queue protocol in `queue.rs`, and each transport's commands in `mlx5.rs`,
//! `efa.rs`, `ionic.rs`, `proxy.rs`, `p2p.rs` and `packets.rs`. A queue command is read once (`queue.rs`) and
//! encoded by the handler of the kernel's transport; no shared handler branches on it.
//!
//! It does not schedule (`mod.rs` picks which agent moves) and checks nothing itself beyond
//! an instruction's own operands.

use std::rc::Rc;

use aboleth_abi::{EndpointHandle, Transport};
use aboleth_ir::scalar::{evaluate_binary, truncate_signed};

use super::{
    Block, EndpointValue, Frame, RemotePointerValue, RemoteValue, SimulationError, Step, Thread,
    Value, World, setup::ENDPOINT_HANDLE_BYTES,
};
use crate::{
    GpuStoreBuffer,
    program::{FenceScope, Instruction, InstructionKind, Register},
};

impl<'k> World<'k> {
    pub(super) fn step_thread(&mut self, thread: usize) -> Result<(), SimulationError> {
        self.threads[thread].blocked = None;
        // Pure instructions run on; a step ends at the first effect, wait or the end.
        for _ in 0..256 {
            let Some(instruction) = self.fetch(thread) else {
                self.threads[thread].finished = true;
                return Ok(());
            };
            match self.execute(thread, &instruction)? {
                Step::Continue => {}
                Step::Effect => return Ok(()),
                Step::Blocked(block) => {
                    // Undo the fetch: the instruction runs again once released.
                    self.threads[thread]
                        .frames
                        .last_mut()
                        .expect("fetched from a frame")
                        .pc -= 1;
                    self.threads[thread].blocked = Some(block);
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// The next instruction (advancing the pc), closing finished loop iterations and bodies.
    pub(super) fn fetch(&mut self, thread: usize) -> Option<Instruction> {
        let state = &mut self.threads[thread];
        loop {
            let frame = state.frames.last_mut()?;
            if frame.pc < frame.body.len() {
                frame.pc += 1;
                return Some(frame.body[frame.pc - 1].clone());
            }
            match frame.induction {
                Some((register, current, upper, step)) if current + step < upper => {
                    frame.induction = Some((register, current + step, upper, step));
                    frame.pc = 0;
                    state.registers[register] = Value::Integer(current + step);
                }
                _ => {
                    state.frames.pop();
                }
            }
        }
    }

    pub(super) fn integer(
        &self,
        thread: usize,
        register: Register,
    ) -> Result<i64, SimulationError> {
        match self.threads[thread].registers[register] {
            Value::Integer(value) => Ok(value),
            other => Err(self.program_error(
                thread,
                format!("expected an integer in a register, found {other:?}"),
            )),
        }
    }

    pub(super) fn endpoint(
        &self,
        thread: usize,
        register: Register,
    ) -> Result<(u32, EndpointHandle), SimulationError> {
        match self.threads[thread].registers[register] {
            Value::Endpoint(endpoint) => {
                Ok((endpoint.peer, self.endpoint_handles[endpoint.handle]))
            }
            other => {
                Err(self.program_error(thread, format!("expected an endpoint, found {other:?}")))
            }
        }
    }

    pub(super) fn remote_pointer(
        &self,
        thread: usize,
        register: Register,
    ) -> Result<RemotePointerValue, SimulationError> {
        match self.threads[thread].registers[register] {
            Value::RemotePointer(pointer) => Ok(pointer),
            other => Err(self.program_error(
                thread,
                format!("expected a remote pointer, found {other:?}"),
            )),
        }
    }

    pub(super) fn set(&mut self, thread: usize, register: Register, value: Value) {
        self.threads[thread].registers[register] = value;
    }

    pub(super) fn advance_clock(&mut self, thread: usize, nanoseconds: u64) {
        self.threads[thread].clock_nanoseconds += nanoseconds;
    }

    /// Runs one instruction of `thread`: the scalar and control instructions here, each memory,
    /// wait or transport instruction in the handler of its file (a queue command in the handler
    /// of the kernel's transport).
    pub(super) fn execute(
        &mut self,
        thread: usize,
        instruction: &Instruction,
    ) -> Result<Step, SimulationError> {
        let rank = self.threads[thread].rank;
        let site = instruction.site;
        let transport = self.transport;
        match &instruction.kind {
            InstructionKind::Constant { result, value } => {
                self.set(thread, *result, Value::Integer(*value))
            }
            InstructionKind::ProgramId { result } => {
                let program = self.threads[thread].program;
                self.set(thread, *result, Value::Integer(i64::from(program)));
            }
            InstructionKind::Rank { result } => {
                self.set(thread, *result, Value::Integer(i64::from(rank)))
            }
            InstructionKind::WorldSize { result } => {
                let ranks = self.options.ranks;
                self.set(thread, *result, Value::Integer(i64::from(ranks)));
            }
            InstructionKind::Binary {
                result,
                operator,
                lhs,
                rhs,
                width,
            } => {
                let (lhs, rhs) = (self.integer(thread, *lhs)?, self.integer(thread, *rhs)?);
                let value = evaluate_binary(*operator, lhs, rhs).ok_or_else(|| {
                    self.program_error(
                        thread,
                        format!("{:?} by zero at {}", operator, self.site_of(rank, site)),
                    )
                })?;
                self.set(
                    thread,
                    *result,
                    Value::Integer(truncate_signed(value, *width)),
                );
            }
            InstructionKind::Cast {
                result,
                source,
                width,
            } => {
                let value = self.integer(thread, *source)?;
                self.set(
                    thread,
                    *result,
                    Value::Integer(truncate_signed(value, *width)),
                );
            }
            InstructionKind::PointerAdd {
                result,
                base,
                offset,
            } => {
                let value = self
                    .integer(thread, *base)?
                    .wrapping_add(self.integer(thread, *offset)?);
                self.set(thread, *result, Value::Integer(value));
            }
            InstructionKind::Load {
                result,
                address,
                width_bytes,
            } => return self.execute_load(thread, site, *result, *address, *width_bytes),
            InstructionKind::Store {
                address,
                value,
                width_bytes,
            } => return self.execute_store(thread, site, *address, *value, *width_bytes),
            InstructionKind::For {
                lower,
                upper,
                step,
                induction,
                body,
                lanes,
            } => {
                let (lower, upper, step) = (
                    self.integer(thread, *lower)?,
                    self.integer(thread, *upper)?,
                    self.integer(thread, *step)?,
                );
                if step <= 0 {
                    return Err(self.program_error(
                        thread,
                        format!(
                            "loop step {step} at {} is not positive",
                            self.site_of(rank, site)
                        ),
                    ));
                }
                if lower < upper {
                    let trip = (upper - lower + step - 1) / step;
                    let lane_count = i64::from(*lanes).min(trip).max(1);
                    for lane in 1..lane_count {
                        self.spawn_lane(
                            thread,
                            *induction,
                            lower + lane * step,
                            upper,
                            step * lane_count,
                            body,
                        );
                    }
                    self.set(thread, *induction, Value::Integer(lower));
                    self.threads[thread].frames.push(Frame {
                        body: body.clone(),
                        pc: 0,
                        induction: Some((*induction, lower, upper, step * lane_count)),
                    });
                }
            }
            InstructionKind::If { condition, body } => {
                if self.integer(thread, *condition)? != 0 {
                    self.threads[thread].frames.push(Frame {
                        body: body.clone(),
                        pc: 0,
                        induction: None,
                    });
                }
            }
            InstructionKind::Return => {
                self.threads[thread].frames.clear();
            }
            InstructionKind::Endpoint {
                result,
                table,
                peer,
            } => self.execute_endpoint(thread, site, *result, *table, *peer)?,
            InstructionKind::Remote {
                result,
                table,
                peer,
                element_bytes,
            } => self.execute_remote(thread, site, *result, *table, *peer, *element_bytes)?,
            InstructionKind::At {
                result,
                remote,
                index,
            } => self.execute_at(thread, *result, *remote, *index)?,
            InstructionKind::Reserve {
                result,
                endpoint,
                slots,
                atomic,
            } => return self.reserve(thread, site, *result, *endpoint, *slots, *atomic),
            InstructionKind::Put(put) => {
                let prepared = self.prepare_put(thread, site, put)?;
                match transport {
                    Transport::Mlx5 => self.mlx5_put(thread, site, put, prepared)?,
                    Transport::Proxy => self.proxy_put(thread, site, prepared)?,
                    Transport::Efa => self.efa_put(thread, site, prepared)?,
                    Transport::Ionic => self.ionic_put(thread, put, prepared)?,
                    _ => unreachable!("p2p kernels have no queue commands"),
                }
                return Ok(Step::Effect);
            }
            InstructionKind::SignalCommand(signal) => {
                let prepared = self.prepare_signal(thread, site, signal)?;
                match transport {
                    Transport::Mlx5 => self.mlx5_signal(thread, signal, prepared)?,
                    Transport::Proxy => self.proxy_signal(thread, signal, prepared)?,
                    Transport::Efa => self.efa_signal(thread, site, signal, prepared)?,
                    Transport::Ionic => self.ionic_signal(thread, signal, prepared)?,
                    _ => unreachable!("p2p kernels have no queue commands"),
                }
                return Ok(Step::Effect);
            }
            InstructionKind::Publish {
                endpoint,
                base,
                count,
                owner_only,
            } => return self.publish(thread, site, *endpoint, *base, *count, *owner_only),
            InstructionKind::Lock { endpoint } => return self.mlx5_lock(thread, site, *endpoint),
            InstructionKind::Unlock { endpoint } => return self.mlx5_unlock(thread, *endpoint),
            InstructionKind::DoorbellRecord {
                endpoint,
                end,
                atomic_max,
                order,
            } => return self.mlx5_doorbell_record(thread, *endpoint, *end, *atomic_max, *order),
            InstructionKind::Doorbell {
                endpoint,
                end,
                atomic_max,
                order,
            } => {
                let (peer, handle) = self.endpoint(thread, *endpoint)?;
                let end = self.integer(thread, *end)? as u64;
                self.counts.doorbells += 1;
                match transport {
                    Transport::Mlx5 => self.mlx5_doorbell(thread, &handle, end)?,
                    Transport::Proxy => {
                        self.proxy_doorbell(thread, &handle, end, *atomic_max, *order)?
                    }
                    Transport::Efa => {
                        self.efa_doorbell(thread, (peer, &handle), end, *atomic_max, *order)?
                    }
                    Transport::Ionic => {
                        self.ionic_doorbell(thread, (peer, &handle), end, *atomic_max, *order)?
                    }
                    _ => unreachable!("p2p kernels have no doorbells"),
                }
                return Ok(Step::Effect);
            }
            InstructionKind::WaitCompletion { endpoint, slot } => {
                let (peer, handle) = self.endpoint(thread, *endpoint)?;
                let slot_given = slot.is_some();
                let (slot, end) = match slot {
                    Some((first, end)) => (
                        self.integer(thread, *first)? as u64,
                        self.integer(thread, *end)? as u64,
                    ),
                    None => match self.threads[thread].last_completion_slot.get(&peer) {
                        Some(command) => *command,
                        None => return Ok(Step::Continue),
                    },
                };
                return match transport {
                    Transport::Mlx5 => {
                        self.mlx5_wait_completion(thread, site, peer, &handle, slot, end)
                    }
                    Transport::Efa => {
                        // SRD completes WQEs out of order: a token waits for its own WQE, a
                        // drain for every WQE up to the program's last command.
                        let target = if slot_given {
                            super::queue::QueueWaitTarget::Wqe(slot)
                        } else {
                            super::queue::QueueWaitTarget::Prefix(end)
                        };
                        self.efa_wait_completion(thread, site, (peer, &handle), target)
                    }
                    Transport::Ionic => {
                        // RC: a CQE covers every WQE before it, so a token waits until the
                        // consumer index is past its WQE, a drain until it reaches the end of
                        // the program's last command with a completion.
                        let target = if slot_given {
                            super::queue::QueueWaitTarget::Wqe(slot)
                        } else {
                            super::queue::QueueWaitTarget::Prefix(end)
                        };
                        self.ionic_wait_completion(thread, site, (peer, &handle), target)
                    }
                    _ => self.proxy_wait_completion(thread, site, peer, &handle, slot),
                };
            }
            InstructionKind::P2pCopy {
                endpoint,
                destination,
                source,
                bytes,
                predicate,
            } => {
                return self.p2p_copy(
                    thread,
                    site,
                    [*endpoint, *destination, *source, *bytes, *predicate],
                );
            }
            InstructionKind::P2pPutPackets {
                endpoint,
                flag,
                destination,
                source,
                bytes,
                value,
            } => {
                return self.put_packets(
                    thread,
                    site,
                    [*endpoint, *flag, *destination, *source, *bytes, *value],
                );
            }
            InstructionKind::P2pSignal {
                endpoint,
                flag,
                value,
                operation,
                order,
            } => {
                return self.p2p_signal(
                    thread,
                    site,
                    [*endpoint, *flag, *value],
                    *operation,
                    *order,
                );
            }
            InstructionKind::Fence { scope } => {
                self.flush(thread)?;
                let cost = &self.options.cost_model;
                let nanoseconds = match scope {
                    FenceScope::Cta => {
                        self.counts.fences.cta += 1;
                        cost.gpu_global_store_nanoseconds
                    }
                    FenceScope::Gpu => {
                        self.counts.fences.gpu += 1;
                        cost.fence_gpu_nanoseconds
                    }
                    FenceScope::Sys => {
                        self.counts.fences.sys += 1;
                        cost.fence_sys_nanoseconds
                    }
                };
                self.advance_clock(thread, nanoseconds);
                return Ok(Step::Effect);
            }
            InstructionKind::Barrier => {
                self.counts.barriers += 1;
                self.order_other_threads(thread);
                if !self.threads[thread].lanes.is_empty() {
                    if !self.lanes_finished(thread) {
                        return Ok(Step::Blocked(Block::Lanes { site }));
                    }
                    self.join_lanes(thread);
                }
            }
            InstructionKind::WaitFlag {
                flag,
                value,
                comparison,
                acquire: _,
                receives,
            } => {
                return self.wait_flag(
                    thread,
                    site,
                    (*flag, *value, *comparison),
                    receives.as_ref(),
                );
            }
        }
        Ok(Step::Continue)
    }

    /// `ab.endpoint`: the handle of the endpoint to `peer` in the table at `table`, decoded and
    /// validated on first use (later uses of the same slot share it).
    fn execute_endpoint(
        &mut self,
        thread: usize,
        site: usize,
        result: Register,
        table: Register,
        peer: Register,
    ) -> Result<(), SimulationError> {
        let rank = self.threads[thread].rank;
        let table = self.integer(thread, table)? as u64;
        let peer = self.integer(thread, peer)?;
        if peer < 0 || peer >= i64::from(self.options.ranks) || peer == i64::from(rank) {
            return Err(self.program_error(
                thread,
                format!(
                    "endpoint to peer {peer} at {}: peers are the other ranks 0..{}",
                    self.site_of(rank, site),
                    self.options.ranks
                ),
            ));
        }
        let address = table + peer as u64 * ENDPOINT_HANDLE_BYTES;
        let handle = match self.endpoint_handle_index.get(&(rank, address)) {
            Some(&handle) => handle,
            None => {
                let bytes = self.load(thread, rank, address, ENDPOINT_HANDLE_BYTES)?;
                let decoded = EndpointHandle::from_bytes(
                    &bytes.try_into().expect("EndpointHandle::SIZE_BYTES bytes"),
                );
                decoded.validate().map_err(|e| {
                    self.program_error(
                        thread,
                        format!(
                            "the endpoint handle at {} is not valid: {e}",
                            self.memory.describe_address(rank, address)
                        ),
                    )
                })?;
                self.endpoint_handles.push(decoded);
                let index = self.endpoint_handles.len() - 1;
                self.endpoint_handle_index.insert((rank, address), index);
                index
            }
        };
        self.set(
            thread,
            result,
            Value::Endpoint(EndpointValue {
                peer: peer as u32,
                handle,
            }),
        );
        Ok(())
    }

    /// `ab.remote`: rank `peer`'s region from the descriptor table at `table`.
    fn execute_remote(
        &mut self,
        thread: usize,
        site: usize,
        result: Register,
        table: Register,
        peer: Register,
        element_bytes: u64,
    ) -> Result<(), SimulationError> {
        let rank = self.threads[thread].rank;
        let table = self.integer(thread, table)? as u64;
        let peer = self.integer(thread, peer)?;
        if peer < 0 || peer >= i64::from(self.options.ranks) {
            return Err(self.program_error(
                thread,
                format!(
                    "remote region of rank {peer} at {}: ranks are 0..{}",
                    self.site_of(rank, site),
                    self.options.ranks
                ),
            ));
        }
        let region_index = *self.region_tables.get(&(rank, table)).ok_or_else(|| {
            self.program_error(
                thread,
                format!(
                    "`ab.remote` at {} was given {}, which is not a region table",
                    self.site_of(rank, site),
                    self.memory.describe_address(rank, table)
                ),
            )
        })?;
        let descriptor = self.region_descriptor(thread, table, peer as u64)?;
        self.set(
            thread,
            result,
            Value::Remote(RemoteValue {
                peer: peer as u32,
                base_address: descriptor.base_address,
                length_bytes: descriptor.length_bytes,
                rkey: descriptor.rkey,
                region_index,
                element_bytes,
            }),
        );
        Ok(())
    }

    /// `ab.at`: element `index` of a remote region.
    fn execute_at(
        &mut self,
        thread: usize,
        result: Register,
        remote: Register,
        index: Register,
    ) -> Result<(), SimulationError> {
        let Value::Remote(region) = self.threads[thread].registers[remote] else {
            return Err(self.program_error(thread, "`ab.at` of a non-remote value".to_owned()));
        };
        let index = self.integer(thread, index)?;
        let offset_bytes = (index as u64).wrapping_mul(region.element_bytes);
        self.set(
            thread,
            result,
            Value::RemotePointer(RemotePointerValue {
                peer: region.peer,
                address: region.base_address.wrapping_add(offset_bytes),
                rkey: region.rkey,
                region_index: region.region_index,
                offset_bytes,
                region_length_bytes: region.length_bytes,
            }),
        );
        Ok(())
    }

    /// Adds `thread` with a store buffer of its own; returns its index.
    pub(super) fn add_thread(&mut self, thread: Thread) -> usize {
        self.store_buffers
            .push(GpuStoreBuffer::new(thread.rank, thread.program));
        self.threads.push(thread);
        self.threads.len() - 1
    }

    /// Starts a lane of `thread`'s `doorbell_scope` loop: a thread of the same program with a
    /// copy of its registers and its own store buffer, running the iterations from `first`.
    pub(super) fn spawn_lane(
        &mut self,
        thread: usize,
        induction: Register,
        first: i64,
        upper: i64,
        stride: i64,
        body: &Rc<[Instruction]>,
    ) {
        let parent = &self.threads[thread];
        let mut registers = parent.registers.clone();
        registers[induction] = Value::Integer(first);
        let frame = Frame {
            body: body.clone(),
            pc: 0,
            induction: Some((induction, first, upper, stride)),
        };
        let lane = Thread::new(
            parent.rank,
            parent.program,
            registers,
            vec![frame],
            parent.clock_nanoseconds,
        );
        let index = self.add_thread(lane);
        self.threads[thread].lanes.push(index);
    }

    /// The thread whose buffer holds `thread`'s stores not yet ordered by a barrier (made on
    /// first use; it never runs, only its buffer drains).
    pub(super) fn other_threads_of(&mut self, thread: usize) -> usize {
        if let Some(other) = self.threads[thread].other_threads {
            return other;
        }
        let parent = &self.threads[thread];
        let mut other = Thread::new(
            parent.rank,
            parent.program,
            Vec::new(),
            Vec::new(),
            parent.clock_nanoseconds,
        );
        other.finished = true;
        let index = self.add_thread(other);
        self.threads[thread].other_threads = Some(index);
        index
    }

    /// A barrier of `thread`'s program: its other threads' stores so far are ordered before
    /// what the program does next (its loads see them, its next release covers them).
    pub(super) fn order_other_threads(&mut self, thread: usize) {
        if let Some(other) = self.threads[thread].other_threads {
            let (rank, program) = (self.threads[other].rank, self.threads[other].program);
            let buffer = std::mem::replace(
                &mut self.store_buffers[other],
                GpuStoreBuffer::new(rank, program),
            );
            self.store_buffers[thread].absorb(buffer);
        }
    }

    pub(super) fn lanes_finished(&self, thread: usize) -> bool {
        self.threads[thread]
            .lanes
            .iter()
            .all(|lane| self.threads[*lane].finished)
    }

    /// The barrier after a `doorbell_scope` loop: the lanes' invisible stores now precede the
    /// program's later ones, their unsignaled puts are the program's, and its clock waits for
    /// the slowest lane.
    pub(super) fn join_lanes(&mut self, thread: usize) {
        for lane in std::mem::take(&mut self.threads[thread].lanes) {
            let (rank, program) = (self.threads[lane].rank, self.threads[lane].program);
            let buffer = std::mem::replace(
                &mut self.store_buffers[lane],
                GpuStoreBuffer::new(rank, program),
            );
            self.store_buffers[thread].absorb(buffer);
            let puts = std::mem::take(&mut self.threads[lane].unsignaled_puts);
            let completions = std::mem::take(&mut self.threads[lane].last_completion_slot);
            let clock = self.threads[lane].clock_nanoseconds;
            let state = &mut self.threads[thread];
            for (peer, records) in puts {
                state
                    .unsignaled_puts
                    .entry(peer)
                    .or_default()
                    .extend(records);
            }
            for (peer, command) in completions {
                let entry = state.last_completion_slot.entry(peer).or_insert(command);
                *entry = (*entry).max(command);
            }
            state.clock_nanoseconds = state.clock_nanoseconds.max(clock);
        }
    }
}
