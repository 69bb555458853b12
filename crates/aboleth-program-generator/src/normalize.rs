//! Normalization: the combinations the strategies may draw that would break a validity rule
//! (of the crate documentation) are reshaped here, and programs are kept under the per-queue
//! basic-block budget and the operation limit; [`with_a_signal_per_put`] reshapes a spec into
//! one that flag-in-data packets can carry. It draws nothing and prints nothing.

use std::collections::BTreeMap;

use crate::*;

pub(crate) fn normalize_channel(mut channel: ChannelSpec) -> ChannelSpec {
    // Intermediate counts mean something only on a flag that one sender adds to.
    channel.counter_waits &= matches!(
        channel.iteration_signal,
        Some(SignalSpec {
            operation: SignalOperation::Add { shared_flag: false },
            ..
        })
    );
    let single_sender = matches!(
        channel.route,
        Route::Fixed {
            senders: Senders::OneProgram(_),
            ..
        } | Route::PeerLoop {
            senders: Senders::OneProgram(_),
            ..
        }
    );
    if single_sender && channel.waiter == Waiter::MatchingProgram {
        channel.waiter = Waiter::EveryProgram;
    }
    let single = channel.iterations == Iterations::Single;
    // Reusing after the puts needs their tokens in scope (no loop); reusing in a loop needs one.
    channel.reuse = match (channel.reuse, single) {
        (Reuse::EachIteration, true) => Reuse::AfterPuts { drain: false },
        (Reuse::AfterPuts { .. }, false) => Reuse::EachIteration,
        (reuse, _) => reuse,
    };
    if let IterationCompletion::WaitPut(index) = channel.iteration_completion {
        channel.iteration_completion =
            IterationCompletion::WaitPut(index % channel.puts.len() as u32);
    }
    if channel.iteration_signal.is_none()
        && channel.iteration_completion == IterationCompletion::WaitSignal
    {
        channel.iteration_completion = IterationCompletion::None;
    }
    // The slot is stored to at the top of the next iteration: the put that read it must be
    // complete by the end of this one.
    if channel.reuse == Reuse::EachIteration
        && !matches!(
            channel.iteration_completion,
            IterationCompletion::WaitPut(0) | IterationCompletion::Drain
        )
    {
        channel.iteration_completion = IterationCompletion::WaitPut(0);
    }
    if (channel.body_completion == BodyCompletion::WaitPut && !single)
        || (channel.body_completion == BodyCompletion::WaitSignal && channel.final_signal.is_none())
    {
        channel.body_completion = BodyCompletion::None;
    }
    // In a loop over peers the next peer's first put reads the slot and its reuse stores to
    // it: the second put of the slot must be complete before the body repeats.
    if matches!(channel.route, Route::PeerLoop { .. })
        && matches!(channel.reuse, Reuse::AfterPuts { .. })
        && !matches!(
            channel.body_completion,
            BodyCompletion::WaitPut | BodyCompletion::Drain
        )
    {
        channel.body_completion = BodyCompletion::WaitPut;
    }
    channel
}

pub(crate) fn normalize_program(mut spec: ProgramSpec) -> ProgramSpec {
    // At most MAX_CHANNELS channels, in program order; no empty phase.
    let mut remaining = MAX_CHANNELS;
    for phase in &mut spec.phases {
        phase.channels.truncate(remaining);
        remaining -= phase.channels.len();
    }
    spec.phases.retain(|phase| !phase.channels.is_empty());
    // Simplify until every queue is under budget: first the iteration counts, then the
    // second put and the iteration signal, then whole channels from the end.
    let mut step = 0;
    while max_queue_basic_blocks(&spec) > QUEUE_BASIC_BLOCK_BUDGET {
        let channel_count: usize = spec.phases.iter().map(|p| p.channels.len()).sum();
        let channels = spec.phases.iter_mut().flat_map(|p| p.channels.iter_mut());
        match step {
            0 => channels.for_each(shrink_iterations),
            1 => channels.for_each(|channel| {
                channel.puts.truncate(1);
                channel.iteration_signal = None;
                *channel = normalize_channel(channel.clone());
            }),
            _ if channel_count > 1 => {
                if let Some(phase) = spec.phases.last_mut() {
                    phase.channels.pop();
                }
                spec.phases.retain(|phase| !phase.channels.is_empty());
            }
            _ => unreachable!(
                "one channel with one put and no iteration signal is always under budget"
            ),
        }
        step += 1;
    }
    while spec.phases.iter().map(|p| p.channels.len()).sum::<usize>() > 1
        && print_program(&spec).operations > MAX_OPERATIONS
    {
        if let Some(phase) = spec.phases.last_mut() {
            phase.channels.pop();
        }
        spec.phases.retain(|phase| !phase.channels.is_empty());
    }
    spec
}

pub(crate) fn shrink_iterations(channel: &mut ChannelSpec) {
    channel.iterations = match channel.iterations {
        Iterations::Constant { step, .. } => Iterations::Constant { count: 1, step },
        Iterations::Nested { .. } => Iterations::Constant { count: 1, step: 1 },
        Iterations::RankDependent(_) => Iterations::RankDependent(RankTrip::Parity),
        Iterations::Single => Iterations::Single,
    };
}

/// mlx5 basic blocks (64 B) of one put: inline up to 64 B, else one gather WQE.
pub(crate) fn put_basic_blocks(bytes: u32) -> u32 {
    if bytes <= INLINE_BYTES_LIMIT {
        let data_segment_units = (4 + bytes).div_ceil(16);
        ((2 + data_segment_units) * 16).div_ceil(64)
    } else {
        1
    }
}

pub(crate) fn signal_basic_blocks(signal: &Option<SignalSpec>) -> u32 {
    match signal {
        None => 0,
        Some(SignalSpec {
            operation: SignalOperation::Set(_),
            ..
        }) => 2,
        Some(SignalSpec {
            operation: SignalOperation::Add { .. },
            ..
        }) => 1,
    }
}

/// The peers program `pid` of rank `rank` sends to on `route`.
pub(crate) fn peers_of(route: Route, rank: u32, pid: u32, ranks: u32) -> Vec<u32> {
    match route {
        Route::Fixed { offset, senders } => match senders {
            Senders::OneProgram(sender) if sender != pid => Vec::new(),
            _ => vec![(rank + offset) % ranks],
        },
        Route::ProgramOffset { base } => vec![(rank + base + pid) % ranks],
        Route::AllToAll => vec![pid + u32::from(pid >= rank)],
        Route::PeerLoop { senders, .. } => match senders {
            Senders::OneProgram(sender) if sender != pid => Vec::new(),
            _ => (1..ranks).map(|j| (rank + j) % ranks).collect(),
        },
    }
}

/// The most mlx5 basic blocks one queue receives over the launch (all predicates true: a
/// false one still takes its slot as a NOP).
pub fn max_queue_basic_blocks(spec: &ProgramSpec) -> u32 {
    let mut per_queue: BTreeMap<(u32, u32), u32> = BTreeMap::new();
    for rank in 0..spec.ranks {
        for pid in 0..spec.programs {
            for channel in spec.phases.iter().flat_map(|p| &p.channels) {
                let trips = channel.iterations.trips_on(rank, spec.ranks);
                let per_iteration: u32 = channel
                    .puts
                    .iter()
                    .map(|put| put_basic_blocks(put.bytes))
                    .sum::<u32>()
                    + signal_basic_blocks(&channel.iteration_signal);
                let reuse = match channel.reuse {
                    Reuse::AfterPuts { .. } => put_basic_blocks(channel.puts[0].bytes),
                    _ => 0,
                };
                let per_peer =
                    trips * per_iteration + reuse + signal_basic_blocks(&channel.final_signal);
                for peer in peers_of(channel.route, rank, pid, spec.ranks) {
                    *per_queue.entry((rank, peer)).or_default() += per_peer;
                }
            }
        }
    }
    per_queue.values().copied().max().unwrap_or(0)
}

/// `spec` reshaped so that every put is published by a `Set` of its own that directly follows
/// it: one unpredicated put per iteration, signalled `after` it, with no fence between them, no
/// final signal and no reused source (which would add puts without a signal of their own). Such
/// programs are what flag-in-data packets need (`--packet-signals`), so the random validation
/// runs that path too; they stay valid programs for every transport.
pub fn with_a_signal_per_put(mut spec: ProgramSpec) -> ProgramSpec {
    for phase in &mut spec.phases {
        for channel in &mut phase.channels {
            channel.puts.truncate(1);
            for put in &mut channel.puts {
                put.predicate = None;
            }
            channel.fence = FencePlacement::None;
            channel.final_signal = None;
            channel.reuse = Reuse::None;
            let value = match channel.iteration_signal.map(|signal| signal.operation) {
                Some(SignalOperation::Set(value)) => value,
                _ => SetValue::Epoch,
            };
            channel.iteration_signal = Some(SignalSpec {
                operation: SignalOperation::Set(value),
                after: SignalAfter::LastPut,
            });
            if let IterationCompletion::WaitPut(index) = &mut channel.iteration_completion {
                *index = 0;
            }
            if channel.body_completion == BodyCompletion::WaitSignal {
                // The final signal is gone.
                channel.body_completion = BodyCompletion::Drain;
            }
        }
    }
    spec
}
