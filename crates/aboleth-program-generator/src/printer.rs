//! Printing: a [`ProgramSpec`] as the `.abo` text of one kernel named `generated`, with the
//! harness attributes (`grid`, `regions`, `bind`, `init`), header comments that summarize
//! each channel, and the features it exercises. It decides nothing about validity: the spec
//! and its layout (`layout.rs`) already did.

use std::collections::BTreeSet;

use crate::layout::*;
use crate::*;

/// A scalar the printer knows statically (folded into offsets) or only by name.
#[derive(Clone, Debug)]
pub(crate) enum Operand {
    Constant(u32),
    Value(String),
}

impl Operand {
    fn value(name: &str) -> Operand {
        Operand::Value(name.to_string())
    }
}

/// Names of the values a channel's per-peer body uses.
pub(crate) struct PeerValues {
    endpoint: String,
    data: String,
    flags: Option<String>,
    key: Operand,
    data_base: Operand,
    slot: Option<String>,
    iteration_flag_base: Option<Operand>,
    final_flag_index: Option<Operand>,
}

/// Prints `spec` as `.abo` text.
pub fn print_program(spec: &ProgramSpec) -> GeneratedProgram {
    let layout = Layout::new(spec);
    let mut printer = Printer {
        spec,
        layout: &layout,
        lines: Vec::new(),
        indent: 0,
        constants: BTreeSet::new(),
        used_names: BTreeSet::new(),
        features: BTreeSet::new(),
        loop_depth: 0,
        scope_depth: 0,
        top_level_tokens: Vec::new(),
        phase_endpoints: Vec::new(),
        all_endpoints: Vec::new(),
    };
    printer.kernel_body();
    printer.finish()
}

pub(crate) struct Printer<'a> {
    spec: &'a ProgramSpec,
    layout: &'a Layout,
    lines: Vec<String>,
    indent: usize,
    constants: BTreeSet<u32>,
    used_names: BTreeSet<String>,
    features: BTreeSet<&'static str>,
    loop_depth: usize,
    /// `ab.for` and `ab.if` nesting: values defined at depth 0 dominate the rest of the kernel.
    scope_depth: usize,
    /// `(token, endpoint)` of puts at depth 0, for cross-channel `after` operands.
    top_level_tokens: Vec<(String, String)>,
    phase_endpoints: Vec<String>,
    all_endpoints: Vec<String>,
}

pub(crate) const I64: &str = "builtin.integer i64";

/// Names the kernel's prologue defines.
pub(crate) const PROLOGUE_NAMES: [&str; 15] = [
    "endpoints",
    "recv",
    "rows",
    "flags",
    "send",
    "send_key",
    "my_flags",
    "choices",
    "epoch",
    "rank",
    "ranks",
    "pid32",
    "pid",
    "my_send",
    "store_seed",
];

impl Printer<'_> {
    fn line(&mut self, text: impl AsRef<str>) {
        let indent = 6 + 4 * self.indent;
        self.lines.push(format!("{:indent$}{}", "", text.as_ref()));
    }

    fn label(&mut self, text: String) {
        let indent = 8 + 4 * self.indent;
        self.lines.push(format!("{:indent$}{text}", ""));
    }

    fn comment(&mut self, text: impl AsRef<str>) {
        self.line(format!("// {}", text.as_ref()));
    }

    /// A name not used before in the kernel (pliron needs unique value and block names).
    fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut counter = 2;
        while self.used_names.contains(&name) {
            name = format!("{base}_n{counter}");
            counter += 1;
        }
        self.used_names.insert(name.clone());
        name
    }

    fn constant(&mut self, value: u32) -> String {
        self.constants.insert(value);
        format!("c_{value}")
    }

    fn name(&mut self, operand: &Operand) -> String {
        match operand {
            Operand::Constant(value) => self.constant(*value),
            Operand::Value(name) => name.clone(),
        }
    }

    fn binop(&mut self, base: &str, operator: &str, lhs: &str, rhs: &str) -> String {
        let name = self.fresh(base);
        self.line(format!(
            "{name} = ab.binop {operator} {lhs}, {rhs} : {I64};"
        ));
        name
    }

    fn pointer_add(&mut self, base: &str, pointer: &str, offset: &str) -> String {
        let name = self.fresh(base);
        self.line(format!("{name} = ab.ptr_add {pointer}, {offset} : ab.ptr;"));
        name
    }

    /// `base + index * factor + extra`, folding every part known statically.
    fn affine(
        &mut self,
        name: &str,
        base: Option<&Operand>,
        index: &Operand,
        factor: u32,
        extra: u32,
    ) -> Operand {
        let mut constant = extra;
        let mut terms: Vec<String> = Vec::new();
        match base {
            Some(Operand::Constant(value)) => constant += value,
            Some(Operand::Value(value)) => terms.push(value.clone()),
            None => {}
        }
        match index {
            Operand::Constant(value) => constant += value * factor,
            Operand::Value(_) if factor == 0 => {}
            Operand::Value(value) if factor == 1 => terms.push(value.clone()),
            Operand::Value(value) => {
                let factor = self.constant(factor);
                let scaled = self.binop(&format!("{name}_scaled"), "Mul", value, &factor);
                terms.push(scaled);
            }
        }
        let Some(first) = terms.first().cloned() else {
            return Operand::Constant(constant);
        };
        let mut current = first;
        for term in &terms[1..] {
            current = self.binop(name, "Add", &current, term);
        }
        if constant != 0 {
            let constant = self.constant(constant);
            current = self.binop(name, "Add", &current, &constant);
        }
        Operand::Value(current)
    }

    /// Opens `ab.for lower, upper, step` and returns the induction variable.
    fn open_for(
        &mut self,
        base: &str,
        lower: u32,
        upper: &str,
        step: u32,
        constant_trip_count: bool,
    ) -> String {
        self.features.insert(feature::LOOP);
        if self.loop_depth > 0 {
            self.features.insert(feature::NESTED_LOOP);
        }
        if !constant_trip_count {
            self.features.insert(feature::RUNTIME_TRIP_COUNT);
        }
        let lower = self.constant(lower);
        let step = self.constant(step);
        let label = self.fresh(&format!("{base}_body"));
        let variable = self.fresh(base);
        self.line(format!("ab.for {lower}, {upper}, {step} [] {{"));
        self.label(format!("^{label}({variable}: {I64}):"));
        self.indent += 1;
        self.loop_depth += 1;
        self.scope_depth += 1;
        variable
    }

    fn close_for(&mut self) {
        self.line("ab.yield");
        self.indent -= 1;
        self.loop_depth -= 1;
        self.scope_depth -= 1;
        self.line("};");
    }

    fn open_if(&mut self, base: &str, condition: &str) {
        let label = self.fresh(&format!("{base}_then"));
        self.line(format!("ab.if {condition} {{"));
        self.label(format!("^{label}():"));
        self.indent += 1;
        self.scope_depth += 1;
    }

    fn close_if(&mut self) {
        self.line("ab.yield");
        self.indent -= 1;
        self.scope_depth -= 1;
        self.line("};");
    }

    fn kernel_body(&mut self) {
        let spec = self.spec;
        if spec.programs > 1 {
            self.features.insert(feature::MULTIPLE_PROGRAMS);
        }
        for name in PROLOGUE_NAMES {
            self.used_names.insert(name.to_string());
        }
        self.line(format!("rank = ab.rank : {I64};"));
        self.line(format!("ranks = ab.world_size : {I64};"));
        self.line("pid32 = ab.program_id : builtin.integer i32;");
        self.line(format!("pid = ab.cast pid32 : {I64};"));
        let partition = self.constant(self.layout.partition_bytes);
        let share = self.binop("send_share", "Mul", "pid", &partition);
        self.line(format!("my_send = ab.ptr_add send, {share} : ab.ptr;"));
        // Values stored into reuse slots: distinct per rank, program, channel and iteration.
        let rank_factor = self.constant(1_000_000);
        let pid_factor = self.constant(100_000);
        let rank_part = self.binop("seed_rank", "Mul", "rank", &rank_factor);
        let pid_part = self.binop("seed_pid", "Mul", "pid", &pid_factor);
        self.line(format!(
            "store_seed = ab.binop Add {rank_part}, {pid_part} : {I64};"
        ));
        let mut channel_index = 0;
        for (phase_index, phase) in spec.phases.iter().enumerate() {
            self.comment(format!("phase {phase_index}: sends"));
            self.phase_endpoints.clear();
            let first = channel_index;
            for channel in &phase.channels {
                self.sender(channel_index, channel);
                channel_index += 1;
            }
            if phase.drain_before_waits {
                for endpoint in self.phase_endpoints.clone() {
                    self.drain(&endpoint);
                }
            }
            self.comment(format!("phase {phase_index}: waits"));
            for (offset, channel) in phase.channels.iter().enumerate() {
                self.receiver(first + offset, channel);
            }
        }
        if spec.final_drain {
            for endpoint in self.all_endpoints.clone() {
                self.drain(&endpoint);
            }
        }
        self.line("ab.return");
    }

    fn drain(&mut self, endpoint: &str) {
        self.features.insert(feature::DRAIN);
        self.line(format!("ab.drain {endpoint} [];"));
    }

    fn wait(&mut self, token: &str) {
        self.line(format!("ab.wait {token} [];"));
    }

    fn element_bytes(channel: &ChannelSpec) -> u32 {
        match channel.data_region {
            DataRegion::Bytes => 1,
            DataRegion::Words => 8,
        }
    }

    // --- Sender side ------------------------------------------------------------------------

    fn sender(&mut self, index: usize, channel: &ChannelSpec) {
        let programs = self.spec.programs;
        let prefix = format!("ch{index}");
        self.comment(format!("channel {index} sends"));
        let gate = match channel.route {
            Route::Fixed {
                senders: Senders::OneProgram(sender),
                ..
            }
            | Route::PeerLoop {
                senders: Senders::OneProgram(sender),
                ..
            } if programs > 1 => Some(sender),
            _ => None,
        };
        if let Some(sender) = gate {
            self.features.insert(feature::GATED_SENDER);
            let sender = self.constant(sender);
            let condition = self.binop(&format!("{prefix}_is_sender"), "Eq", "pid", &sender);
            self.open_if(&format!("{prefix}_send"), &condition);
        }
        match channel.route {
            Route::Fixed { offset, .. } => {
                self.features.insert(feature::FIXED_PEER);
                let distance = self.constant(offset);
                let next = self.binop(&format!("{prefix}_next"), "Add", "rank", &distance);
                let peer = self.binop(&format!("{prefix}_peer"), "Rem", &next, "ranks");
                self.peer_body(index, channel, &peer, &Operand::Constant(offset));
            }
            Route::ProgramOffset { base } => {
                self.features.insert(feature::PROGRAM_SELECTED_PEER);
                let base = self.constant(base);
                let distance = self.binop(&format!("{prefix}_distance"), "Add", "pid", &base);
                let next = self.binop(&format!("{prefix}_next"), "Add", "rank", &distance);
                let peer = self.binop(&format!("{prefix}_peer"), "Rem", &next, "ranks");
                self.peer_body(index, channel, &peer, &Operand::Value(distance));
            }
            Route::AllToAll => {
                self.features.insert(feature::PROGRAM_SELECTED_PEER);
                self.features.insert(feature::ALL_TO_ALL);
                let skip = self.binop(&format!("{prefix}_skip"), "Ge", "pid", "rank");
                let peer = self.binop(&format!("{prefix}_peer"), "Add", "pid", &skip);
                let difference = self.binop(&format!("{prefix}_difference"), "Sub", &peer, "rank");
                let wrapped = self.binop(&format!("{prefix}_wrapped"), "Add", &difference, "ranks");
                let distance = self.binop(&format!("{prefix}_distance"), "Rem", &wrapped, "ranks");
                self.peer_body(index, channel, &peer, &Operand::Value(distance));
            }
            Route::PeerLoop { bound, .. } => {
                self.features.insert(feature::PEER_LOOP);
                let upper = self.ranks_bound(bound);
                let distance = self.open_for(
                    &format!("{prefix}_distance"),
                    1,
                    &upper,
                    1,
                    bound == LoopBound::Constant,
                );
                let next = self.binop(&format!("{prefix}_next"), "Add", "rank", &distance);
                let peer = self.binop(&format!("{prefix}_peer"), "Rem", &next, "ranks");
                self.peer_body(index, channel, &peer, &Operand::Value(distance));
                self.close_for();
            }
        }
        if gate.is_some() {
            self.close_if();
        }
    }

    fn ranks_bound(&mut self, bound: LoopBound) -> String {
        match bound {
            LoopBound::Constant => self.constant(self.spec.ranks),
            LoopBound::WorldSize => "ranks".to_string(),
        }
    }

    /// `(distance - 1) * programs + program`: unique per (sender rank, program) at a receiver.
    fn sender_key(&mut self, prefix: &str, distance: &Operand, program: &Operand) -> Operand {
        let programs = self.spec.programs;
        match distance {
            Operand::Constant(distance) => self.affine(
                &format!("{prefix}_key"),
                None,
                program,
                1,
                (distance - 1) * programs,
            ),
            Operand::Value(distance) => {
                let one = self.constant(1);
                let lower = self.binop(&format!("{prefix}_distance_index"), "Sub", distance, &one);
                self.affine(
                    &format!("{prefix}_key"),
                    Some(program),
                    &Operand::Value(lower),
                    programs,
                    0,
                )
            }
        }
    }

    /// The flag word of `signal`'s first iteration for `key` (`None` without a signal).
    fn flag_base(
        &mut self,
        name: &str,
        signal: &Option<SignalSpec>,
        key: &Operand,
        base: u32,
        per_key_words: u32,
    ) -> Option<Operand> {
        let signal = signal.as_ref()?;
        Some(match signal.operation {
            SignalOperation::Add { shared_flag: true } => Operand::Constant(base),
            SignalOperation::Add { shared_flag: false } => self.affine(name, None, key, 1, base),
            SignalOperation::Set(_) => self.affine(name, None, key, per_key_words, base),
        })
    }

    fn peer_body(&mut self, index: usize, channel: &ChannelSpec, peer: &str, distance: &Operand) {
        let prefix = format!("ch{index}");
        let layouts = self.layout;
        let layout = &layouts.channels[index];
        let endpoint = self.fresh(&format!("{prefix}_endpoint"));
        self.line(format!(
            "{endpoint} = ab.endpoint endpoints, {peer} [] : ab.endpoint;"
        ));
        if self.scope_depth == 0 {
            self.phase_endpoints.push(endpoint.clone());
            self.all_endpoints.push(endpoint.clone());
        }
        let element = Self::element_bytes(channel);
        let (region, region_bytes) = match channel.data_region {
            DataRegion::Bytes => ("recv", layouts.recv_bytes),
            DataRegion::Words => {
                self.features.insert(feature::WORD_REMOTE);
                ("rows", layouts.rows_bytes)
            }
        };
        let data = self.fresh(&format!("{prefix}_data"));
        self.line(format!(
            "{data} = ab.remote {region}, {peer} [length_bytes: builtin.integer <{region_bytes}: i64>] : ab.remote <{element}>;"
        ));
        let has_signal = channel.iteration_signal.is_some() || channel.final_signal.is_some();
        let flags = has_signal.then(|| {
            let flags = self.fresh(&format!("{prefix}_flags"));
            let flag_bytes = layouts.flag_words * 8;
            self.line(format!(
                "{flags} = ab.remote flags, {peer} [length_bytes: builtin.integer <{flag_bytes}: i64>] : ab.remote <8>;"
            ));
            flags
        });
        let key = self.sender_key(&prefix, distance, &Operand::value("pid"));
        let data_base = self.affine(
            &format!("{prefix}_data_base"),
            None,
            &key,
            layout.sender_stride / element,
            layout.segment_base / element,
        );
        let slot = layout.slot_offset.map(|offset| {
            let offset = self.constant(offset);
            self.pointer_add(&format!("{prefix}_slot"), "my_send", &offset)
        });
        let iteration_flag_base = self.flag_base(
            &format!("{prefix}_iteration_flag"),
            &channel.iteration_signal,
            &key,
            layout.iteration_flag_base,
            layout.max_trips,
        );
        let final_flag_index = self.flag_base(
            &format!("{prefix}_final_flag"),
            &channel.final_signal,
            &key,
            layout.final_flag_base,
            1,
        );
        let values = PeerValues {
            endpoint,
            data,
            flags,
            key,
            data_base,
            slot,
            iteration_flag_base,
            final_flag_index,
        };
        let single_tokens = self.iterations(index, channel, &values);
        self.after_iterations(index, channel, &values, single_tokens);
    }

    /// Emits the iteration structure; returns the put tokens when there is no loop.
    fn iterations(
        &mut self,
        index: usize,
        channel: &ChannelSpec,
        values: &PeerValues,
    ) -> Vec<String> {
        let prefix = format!("ch{index}");
        match channel.iterations {
            Iterations::Single => {
                return self.iteration(index, channel, values, &Operand::Constant(0));
            }
            Iterations::Constant { count, step } => {
                let upper = self.constant(count * step);
                let variable = self.open_for(&format!("{prefix}_step"), 0, &upper, step, true);
                let iteration = if step == 1 {
                    variable
                } else {
                    let step = self.constant(step);
                    self.binop(&format!("{prefix}_iteration"), "Div", &variable, &step)
                };
                self.iteration(index, channel, values, &Operand::Value(iteration));
                self.close_for();
            }
            Iterations::Nested { outer, inner } => {
                let outer_upper = self.constant(outer);
                let inner_upper = self.constant(inner);
                let outer_variable =
                    self.open_for(&format!("{prefix}_outer"), 0, &outer_upper, 1, true);
                let inner_variable =
                    self.open_for(&format!("{prefix}_inner"), 0, &inner_upper, 1, true);
                let iteration = self.affine(
                    &format!("{prefix}_iteration"),
                    Some(&Operand::Value(inner_variable)),
                    &Operand::Value(outer_variable),
                    inner,
                    0,
                );
                self.iteration(index, channel, values, &iteration);
                self.close_for();
                self.close_for();
            }
            Iterations::RankDependent(trip) => {
                let trips = self.rank_trips(&format!("{prefix}_trips"), trip, "rank");
                let variable = self.open_for(&format!("{prefix}_iteration"), 0, &trips, 1, false);
                self.iteration(index, channel, values, &Operand::Value(variable));
                self.close_for();
            }
        }
        Vec::new()
    }

    /// The trip count of `trip` on the rank named `rank`.
    fn rank_trips(&mut self, name: &str, trip: RankTrip, rank: &str) -> String {
        let one = self.constant(1);
        let two = self.constant(2);
        match trip {
            RankTrip::ParityPlusOne => {
                let parity = self.binop(&format!("{name}_parity"), "Rem", rank, &two);
                self.binop(name, "Add", &parity, &one)
            }
            RankTrip::RankPlusOne => self.binop(name, "Add", rank, &one),
            RankTrip::WorldMinusRank => self.binop(name, "Sub", "ranks", rank),
            RankTrip::Parity => self.binop(name, "Rem", rank, &two),
        }
    }

    /// One iteration: refill, puts, iteration signal, iteration completion. Returns the put
    /// tokens.
    fn iteration(
        &mut self,
        index: usize,
        channel: &ChannelSpec,
        values: &PeerValues,
        iteration: &Operand,
    ) -> Vec<String> {
        let prefix = format!("ch{index}");
        let layouts = self.layout;
        let layout = &layouts.channels[index];
        let element = Self::element_bytes(channel);
        if channel.reuse == Reuse::EachIteration {
            let slot = values.slot.clone().expect("reuse has a slot");
            self.features.insert(feature::REUSE_IN_LOOP);
            self.features.insert(match channel.iteration_completion {
                IterationCompletion::Drain => feature::REUSE_AFTER_DRAIN,
                _ => feature::REUSE_AFTER_WAIT,
            });
            self.store_slot(
                &prefix,
                &slot,
                channel.puts[0].bytes,
                index,
                iteration,
                false,
            );
        }
        let mut tokens = Vec::new();
        for (put_index, put) in channel.puts.iter().enumerate() {
            let put_prefix = format!("{prefix}_put{put_index}");
            let destination_index = self.affine(
                &format!("{put_prefix}_index"),
                Some(&values.data_base),
                iteration,
                layout.iteration_stride / element,
                layout.put_offsets[put_index] / element,
            );
            let destination_index = self.name(&destination_index);
            let destination = self.fresh(&format!("{put_prefix}_destination"));
            self.line(format!(
                "{destination} = ab.at {}, {destination_index} : ab.remote_ptr <{element}>;",
                values.data
            ));
            let source = match (&values.slot, put_index) {
                (Some(slot), 0) => slot.clone(),
                _ => {
                    let offset = self.affine(
                        &format!("{put_prefix}_source_offset"),
                        None,
                        iteration,
                        8,
                        layout.source_offsets[put_index],
                    );
                    let offset = self.name(&offset);
                    self.pointer_add(&format!("{put_prefix}_source"), "my_send", &offset)
                }
            };
            let predicate = put
                .predicate
                .map(|predicate| self.predicate(&put_prefix, predicate, iteration, &values.key));
            let token = self.put(
                &put_prefix,
                values,
                &destination,
                &source,
                put.bytes,
                predicate,
            );
            tokens.push(token);
            if channel.fence == FencePlacement::BetweenPuts && put_index == 0 {
                self.features.insert(feature::FENCE);
                self.line(format!("ab.fence {} [];", values.endpoint));
            }
        }
        let signal = channel.iteration_signal.map(|signal| {
            let flag_base = values
                .iteration_flag_base
                .clone()
                .expect("a signal has a flag");
            let flag_index = match signal.operation {
                SignalOperation::Set(_) => self.affine(
                    &format!("{prefix}_iteration_flag_index"),
                    Some(&flag_base),
                    iteration,
                    1,
                    0,
                ),
                SignalOperation::Add { .. } => flag_base,
            };
            self.signal(
                &format!("{prefix}_iteration_signal"),
                values,
                signal,
                &flag_index,
                iteration,
                tokens.last().map(String::as_str),
            )
        });
        match channel.iteration_completion {
            IterationCompletion::None => {}
            IterationCompletion::WaitPut(put_index) => {
                self.features.insert(feature::WAIT_PUT_TOKEN);
                self.wait(&tokens[put_index as usize]);
            }
            IterationCompletion::WaitSignal => {
                self.features.insert(feature::WAIT_SIGNAL_TOKEN);
                self.wait(signal.as_deref().expect("normalized: a signal exists"));
            }
            IterationCompletion::Drain => self.drain(&values.endpoint),
        }
        tokens
    }

    fn put(
        &mut self,
        prefix: &str,
        values: &PeerValues,
        destination: &str,
        source: &str,
        bytes: u32,
        predicate: Option<String>,
    ) -> String {
        self.features.insert(if bytes <= INLINE_BYTES_LIMIT {
            feature::INLINE_PUT
        } else {
            feature::LARGE_PUT
        });
        let bytes = self.constant(bytes);
        let token = self.fresh(prefix);
        let predicate = predicate.map(|p| format!(", {p}")).unwrap_or_default();
        self.line(format!(
            "{token} = ab.put {}, {destination}, {source}, {bytes}, send_key{predicate} [] : ab.token;",
            values.endpoint
        ));
        if self.scope_depth == 0 {
            self.top_level_tokens
                .push((token.clone(), values.endpoint.clone()));
        }
        token
    }

    fn predicate(
        &mut self,
        prefix: &str,
        predicate: PredicateSpec,
        iteration: &Operand,
        key: &Operand,
    ) -> String {
        self.features.insert(feature::PREDICATE);
        let two = self.constant(2);
        match predicate {
            PredicateSpec::LoadedChoice { comparison, salt } => {
                self.features.insert(feature::LOADED_PREDICATE);
                let word = self.affine(&format!("{prefix}_word"), Some(key), iteration, 1, salt);
                let offset = match word {
                    Operand::Constant(word) => self.constant(word % CHOICE_WORDS * 8),
                    Operand::Value(word) => {
                        let words = self.constant(CHOICE_WORDS);
                        let word =
                            self.binop(&format!("{prefix}_choice_index"), "Rem", &word, &words);
                        let eight = self.constant(8);
                        self.binop(&format!("{prefix}_choice_offset"), "Mul", &word, &eight)
                    }
                };
                let address =
                    self.pointer_add(&format!("{prefix}_choice_address"), "choices", &offset);
                let choice = self.fresh(&format!("{prefix}_choice"));
                self.line(format!("{choice} = ab.load {address} : {I64};"));
                let modulus = match self.spec.choice_modulus {
                    ChoiceModulus::Constant(modulus) => modulus,
                    ChoiceModulus::Ranks => self.spec.ranks,
                };
                match comparison {
                    ChoiceComparison::NonZero => choice,
                    ChoiceComparison::LessThan(threshold) => {
                        let threshold = self.constant(1 + threshold % modulus);
                        self.binop(&format!("{prefix}_predicate"), "Lt", &choice, &threshold)
                    }
                    ChoiceComparison::Equal(value) => {
                        let value = self.constant(value % modulus);
                        self.binop(&format!("{prefix}_predicate"), "Eq", &choice, &value)
                    }
                }
            }
            PredicateSpec::RankParity { salt } => {
                let sum = self.affine(
                    &format!("{prefix}_parity_input"),
                    Some(&Operand::value("rank")),
                    iteration,
                    1,
                    0,
                );
                let sum = self.name(&sum);
                let parity = self.binop(&format!("{prefix}_parity"), "Rem", &sum, &two);
                let wanted = self.constant(salt % 2);
                self.binop(&format!("{prefix}_predicate"), "Eq", &parity, &wanted)
            }
            PredicateSpec::IterationBelowRank => {
                let iteration = self.name(iteration);
                self.binop(&format!("{prefix}_predicate"), "Lt", &iteration, "rank")
            }
            PredicateSpec::ProgramParity => {
                let parity = self.binop(&format!("{prefix}_program_parity"), "Rem", "pid", &two);
                let zero = self.constant(0);
                self.binop(&format!("{prefix}_predicate"), "Eq", &parity, &zero)
            }
        }
    }

    /// The value a `Set` writes in iteration `iteration` (a final signal passes 0).
    fn set_value(&mut self, name: &str, value: SetValue, iteration: &Operand) -> String {
        match value {
            SetValue::Epoch => "epoch".to_string(),
            SetValue::Constant(value) => self.constant(value),
            SetValue::IterationPlusOne => {
                let value = self.affine(name, None, iteration, 1, 1);
                self.name(&value)
            }
        }
    }

    fn signal(
        &mut self,
        prefix: &str,
        values: &PeerValues,
        signal: SignalSpec,
        flag_index: &Operand,
        iteration: &Operand,
        last_put: Option<&str>,
    ) -> String {
        let flags = values.flags.clone().expect("signals have a flag region");
        let flag_index = self.name(flag_index);
        let flag = self.fresh(&format!("{prefix}_flag"));
        self.line(format!(
            "{flag} = ab.at {flags}, {flag_index} : ab.remote_ptr <8>;"
        ));
        let (value, operation) = match signal.operation {
            SignalOperation::Set(value) => {
                self.features.insert(feature::SET_SIGNAL);
                (
                    self.set_value(&format!("{prefix}_value"), value, iteration),
                    "Set",
                )
            }
            SignalOperation::Add { shared_flag } => {
                self.features.insert(feature::ADD_SIGNAL);
                if shared_flag {
                    self.features.insert(feature::SHARED_ADD_FLAG);
                }
                (self.constant(1), "Add")
            }
        };
        let after = match signal.after {
            SignalAfter::None => None,
            SignalAfter::LastPut => last_put.map(str::to_string),
            SignalAfter::EarlierChannelPut(choice) if !self.top_level_tokens.is_empty() => {
                // Prefer a put on another endpoint value: its ordering needs a completion.
                let other_endpoint: Vec<&(String, String)> = self
                    .top_level_tokens
                    .iter()
                    .filter(|(_, endpoint)| *endpoint != values.endpoint)
                    .collect();
                let (token, endpoint) = if other_endpoint.is_empty() {
                    self.top_level_tokens[choice as usize % self.top_level_tokens.len()].clone()
                } else {
                    other_endpoint[choice as usize % other_endpoint.len()].clone()
                };
                if endpoint != values.endpoint {
                    self.features.insert(feature::CROSS_ENDPOINT_AFTER);
                }
                Some(token)
            }
            SignalAfter::EarlierChannelPut(_) => None,
        };
        self.features.insert(if after.is_some() {
            feature::SIGNAL_AFTER
        } else {
            feature::SIGNAL_WITHOUT_AFTER
        });
        let token = self.fresh(prefix);
        let after = after.map(|a| format!(", {a}")).unwrap_or_default();
        self.line(format!(
            "{token} = ab.signal {}, {flag}, {value}{after} [op: ab.signal_op {operation}] : ab.token;",
            values.endpoint
        ));
        token
    }

    /// Stores new values into the first and the last word of a reuse slot (enough to change
    /// what the next put sends; a loop over every word would only cost simulation time).
    fn store_slot(
        &mut self,
        prefix: &str,
        slot: &str,
        bytes: u32,
        channel_index: usize,
        iteration: &Operand,
        second_round: bool,
    ) {
        let salt = channel_index as u32 * 10_000 + if second_round { 5_000 } else { 0 } + 1;
        let base = self.affine(
            &format!("{prefix}_fill"),
            Some(&Operand::value("store_seed")),
            iteration,
            100,
            salt,
        );
        let base = self.name(&base);
        self.line(format!("ab.store {slot}, {base};"));
        let last_word = bytes / 8 - 1;
        if last_word > 0 {
            let offset = self.constant(last_word * 8);
            let address = self.pointer_add(&format!("{prefix}_fill_address"), slot, &offset);
            let word = self.constant(last_word);
            let value = self.binop(&format!("{prefix}_fill_value"), "Add", &base, &word);
            self.line(format!("ab.store {address}, {value};"));
        }
    }

    fn after_iterations(
        &mut self,
        index: usize,
        channel: &ChannelSpec,
        values: &PeerValues,
        mut tokens: Vec<String>,
    ) {
        let prefix = format!("ch{index}");
        let layouts = self.layout;
        let layout = &layouts.channels[index];
        let element = Self::element_bytes(channel);
        if channel.fence == FencePlacement::BeforeFinalSignal {
            self.features.insert(feature::FENCE);
            self.line(format!("ab.fence {} [];", values.endpoint));
        }
        if let Reuse::AfterPuts { drain } = channel.reuse {
            let slot = values.slot.clone().expect("reuse has a slot");
            if drain {
                self.features.insert(feature::REUSE_AFTER_DRAIN);
                self.drain(&values.endpoint);
            } else {
                self.features.insert(feature::REUSE_AFTER_WAIT);
                self.features.insert(feature::WAIT_PUT_TOKEN);
                self.wait(&tokens[0]);
            }
            self.store_slot(
                &prefix,
                &slot,
                channel.puts[0].bytes,
                index,
                &Operand::Constant(0),
                true,
            );
            let destination_index = self.affine(
                &format!("{prefix}_again_index"),
                Some(&values.data_base),
                &Operand::Constant(0),
                0,
                layout.reuse_offset / element,
            );
            let destination_index = self.name(&destination_index);
            let destination = self.fresh(&format!("{prefix}_again_destination"));
            self.line(format!(
                "{destination} = ab.at {}, {destination_index} : ab.remote_ptr <{element}>;",
                values.data
            ));
            let token = self.put(
                &format!("{prefix}_again"),
                values,
                &destination,
                &slot,
                channel.puts[0].bytes,
                None,
            );
            tokens.push(token);
        }
        let final_token = channel.final_signal.map(|signal| {
            let flag_index = values
                .final_flag_index
                .clone()
                .expect("a signal has a flag");
            self.signal(
                &format!("{prefix}_final_signal"),
                values,
                signal,
                &flag_index,
                &Operand::Constant(0),
                tokens.last().map(String::as_str),
            )
        });
        match channel.body_completion {
            BodyCompletion::None => {}
            BodyCompletion::WaitPut => {
                let token = tokens
                    .last()
                    .cloned()
                    .expect("normalized: a single iteration has put tokens");
                self.features.insert(feature::WAIT_PUT_TOKEN);
                self.wait(&token);
            }
            BodyCompletion::WaitSignal => {
                self.features.insert(feature::WAIT_SIGNAL_TOKEN);
                self.wait(
                    final_token
                        .as_deref()
                        .expect("normalized: a final signal exists"),
                );
            }
            BodyCompletion::Drain => self.drain(&values.endpoint),
        }
    }

    // --- Receiver side ----------------------------------------------------------------------

    fn receiver(&mut self, index: usize, channel: &ChannelSpec) {
        let prefix = format!("ch{index}_rx");
        let signals = [channel.iteration_signal, channel.final_signal];
        if signals.iter().all(Option::is_none) {
            self.comment(format!(
                "channel {index} has no signals: nothing to wait for"
            ));
            return;
        }
        self.comment(format!("channel {index} waits"));
        let gate = match channel.waiter {
            Waiter::OneProgram(waiter) if self.spec.programs > 1 => Some(waiter),
            _ => None,
        };
        if let Some(waiter) = gate {
            self.features.insert(feature::GATED_WAITER);
            let waiter = self.constant(waiter);
            let condition = self.binop(&format!("{prefix}_is_waiter"), "Eq", "pid", &waiter);
            self.open_if(&format!("{prefix}_wait"), &condition);
        }
        self.shared_add_waits(index, channel);
        let per_sender = signals.iter().any(|signal| {
            matches!(
                signal,
                Some(SignalSpec {
                    operation: SignalOperation::Set(_)
                        | SignalOperation::Add { shared_flag: false },
                    ..
                })
            )
        });
        if per_sender {
            self.for_each_sender(index, channel);
        }
        if gate.is_some() {
            self.close_if();
        }
    }

    fn wait_flag(&mut self, prefix: &str, flag_index: &Operand, value: &str) {
        let offset = match flag_index {
            Operand::Constant(index) => self.constant(index * 8),
            Operand::Value(index) => {
                let eight = self.constant(8);
                self.binop(&format!("{prefix}_flag_offset"), "Mul", index, &eight)
            }
        };
        let address = self.pointer_add(&format!("{prefix}_flag_address"), "my_flags", &offset);
        self.line(format!("ab.wait_signal {address}, {value} [];"));
    }

    /// `(distance, programs)` of the senders to any one receiver: the sender rank is
    /// `(rank - distance) mod ranks`, and `programs` of its programs send.
    fn sender_distances(&self, channel: &ChannelSpec) -> Vec<(u32, u32)> {
        let (ranks, programs) = (self.spec.ranks, self.spec.programs);
        let count = |senders: Senders| match senders {
            Senders::AllPrograms => programs,
            Senders::OneProgram(_) => 1,
        };
        match channel.route {
            Route::Fixed { offset, senders } => vec![(offset, count(senders))],
            Route::ProgramOffset { base } => (0..programs).map(|pid| (base + pid, 1)).collect(),
            Route::AllToAll => (1..ranks).map(|distance| (distance, 1)).collect(),
            Route::PeerLoop { senders, .. } => (1..ranks)
                .map(|distance| (distance, count(senders)))
                .collect(),
        }
    }

    /// The rank `distance` behind this one: `(rank - distance) mod ranks`.
    fn sender_rank(&mut self, prefix: &str, distance: &Operand) -> String {
        let wrapped = match distance {
            Operand::Constant(distance) => {
                let ahead = self.constant(self.spec.ranks - distance);
                self.binop(&format!("{prefix}_behind"), "Add", "rank", &ahead)
            }
            Operand::Value(distance) => {
                let behind = self.binop(&format!("{prefix}_behind"), "Sub", "rank", distance);
                self.binop(&format!("{prefix}_behind_wrapped"), "Add", &behind, "ranks")
            }
        };
        self.binop(&format!("{prefix}_sender"), "Rem", &wrapped, "ranks")
    }

    /// Waits for the total of every shared `Add` flag of the channel.
    fn shared_add_waits(&mut self, index: usize, channel: &ChannelSpec) {
        let layouts = self.layout;
        let layout = &layouts.channels[index];
        let prefix = format!("ch{index}_rx");
        let senders = self.sender_distances(channel);
        let instances: u32 = senders.iter().map(|(_, count)| count).sum();
        for (signal, base, per_iteration) in [
            (channel.iteration_signal, layout.iteration_flag_base, true),
            (channel.final_signal, layout.final_flag_base, false),
        ] {
            let Some(SignalSpec {
                operation: SignalOperation::Add { shared_flag: true },
                ..
            }) = signal
            else {
                continue;
            };
            let name = if per_iteration { "iteration" } else { "final" };
            let total = match (per_iteration, channel.iterations) {
                (false, _) => self.constant(instances),
                (true, Iterations::RankDependent(trip)) => {
                    // The senders' trip counts depend on each sender's rank: sum them.
                    let mut total: Option<String> = None;
                    for (distance, count) in &senders {
                        let sender = self.sender_rank(
                            &format!("{prefix}_{name}"),
                            &Operand::Constant(*distance),
                        );
                        let trips =
                            self.rank_trips(&format!("{prefix}_{name}_trips"), trip, &sender);
                        let term = if *count == 1 {
                            trips
                        } else {
                            let count = self.constant(*count);
                            self.binop(&format!("{prefix}_{name}_term"), "Mul", &trips, &count)
                        };
                        total = Some(match total {
                            None => term,
                            Some(sum) => {
                                self.binop(&format!("{prefix}_{name}_total"), "Add", &sum, &term)
                            }
                        });
                    }
                    total.expect("every channel has a sender")
                }
                (true, iterations) => {
                    self.constant(instances * iterations.trips_on(0, self.spec.ranks))
                }
            };
            self.wait_flag(
                &format!("{prefix}_{name}_shared"),
                &Operand::Constant(base),
                &total,
            );
        }
    }

    /// The sender program to wait for: this program (matching), a constant, or a loop.
    fn sender_program(
        &mut self,
        prefix: &str,
        senders: Senders,
        matching: bool,
        open_loops: &mut usize,
    ) -> Operand {
        let programs = self.spec.programs;
        match senders {
            _ if matching => Operand::value("pid"),
            Senders::OneProgram(sender) => Operand::Constant(sender),
            Senders::AllPrograms if programs == 1 => Operand::Constant(0),
            Senders::AllPrograms => {
                let upper = self.constant(programs);
                *open_loops += 1;
                Operand::Value(self.open_for(&format!("{prefix}_program"), 0, &upper, 1, true))
            }
        }
    }

    /// Enumerates the senders this program waits for, and waits for each one's flags.
    fn for_each_sender(&mut self, index: usize, channel: &ChannelSpec) {
        let prefix = format!("ch{index}_rx");
        let matching = channel.waiter == Waiter::MatchingProgram;
        let mut open_loops = 0;
        let (distance, program) = match channel.route {
            Route::Fixed { offset, senders } => {
                let program = self.sender_program(&prefix, senders, matching, &mut open_loops);
                (Operand::Constant(offset), program)
            }
            Route::ProgramOffset { base } => {
                let program =
                    self.sender_program(&prefix, Senders::AllPrograms, matching, &mut open_loops);
                let distance = self.affine(&format!("{prefix}_distance"), None, &program, 1, base);
                (distance, program)
            }
            Route::AllToAll => {
                let distance = if matching {
                    // This program's own peer is the sender it waits for.
                    let skip = self.binop(&format!("{prefix}_skip"), "Ge", "pid", "rank");
                    let peer = self.binop(&format!("{prefix}_peer"), "Add", "pid", &skip);
                    let difference =
                        self.binop(&format!("{prefix}_difference"), "Sub", "rank", &peer);
                    let wrapped =
                        self.binop(&format!("{prefix}_wrapped"), "Add", &difference, "ranks");
                    self.binop(&format!("{prefix}_distance"), "Rem", &wrapped, "ranks")
                } else {
                    let upper = self.ranks_bound(channel.receive_bound);
                    open_loops += 1;
                    self.open_for(
                        &format!("{prefix}_distance"),
                        1,
                        &upper,
                        1,
                        channel.receive_bound == LoopBound::Constant,
                    )
                };
                let distance = Operand::Value(distance);
                // The sender's program that targets this rank: rank - (rank > sender).
                let sender = self.sender_rank(&format!("{prefix}_pair"), &distance);
                let above = self.binop(&format!("{prefix}_above"), "Gt", "rank", &sender);
                let program = self.binop(&format!("{prefix}_program"), "Sub", "rank", &above);
                (distance, Operand::Value(program))
            }
            Route::PeerLoop { senders, .. } => {
                let upper = self.ranks_bound(channel.receive_bound);
                open_loops += 1;
                let distance = self.open_for(
                    &format!("{prefix}_distance"),
                    1,
                    &upper,
                    1,
                    channel.receive_bound == LoopBound::Constant,
                );
                let program = self.sender_program(&prefix, senders, matching, &mut open_loops);
                (Operand::Value(distance), program)
            }
        };
        let key = self.sender_key(&prefix, &distance, &program);
        self.sender_waits(index, channel, &distance, &key);
        for _ in 0..open_loops {
            self.close_for();
        }
    }

    /// Waits for the per-key flags of the sender at `distance` with key `key`.
    fn sender_waits(
        &mut self,
        index: usize,
        channel: &ChannelSpec,
        distance: &Operand,
        key: &Operand,
    ) {
        let layouts = self.layout;
        let layout = &layouts.channels[index];
        let prefix = format!("ch{index}_rx");
        let ranks = self.spec.ranks;
        let rank_independent_trips = channel.iterations.trips_on(0, ranks);
        match channel.iteration_signal.map(|s| s.operation) {
            None | Some(SignalOperation::Add { shared_flag: true }) => {}
            Some(SignalOperation::Add { shared_flag: false }) => {
                let trips = match channel.iterations {
                    Iterations::RankDependent(trip) => {
                        let sender = self.sender_rank(&prefix, distance);
                        self.rank_trips(&format!("{prefix}_trips"), trip, &sender)
                    }
                    _ => self.constant(rank_independent_trips),
                };
                let flag_index = self.affine(
                    &format!("{prefix}_iteration_flag"),
                    None,
                    key,
                    1,
                    layout.iteration_flag_base,
                );
                if channel.counter_waits {
                    // Every intermediate count: the wait for `k + 1` guards iteration k's puts.
                    if channel.iterations.max_trips(ranks) > 1 {
                        self.features.insert(feature::COUNTER_FLAG);
                    }
                    let constant_trip_count =
                        !matches!(channel.iterations, Iterations::RankDependent(_));
                    let count = self.open_for(
                        &format!("{prefix}_count"),
                        0,
                        &trips,
                        1,
                        constant_trip_count,
                    );
                    let value = self.affine(
                        &format!("{prefix}_count_value"),
                        None,
                        &Operand::Value(count),
                        1,
                        1,
                    );
                    let value = self.name(&value);
                    self.wait_flag(&format!("{prefix}_iteration"), &flag_index, &value);
                    self.close_for();
                } else {
                    self.wait_flag(&format!("{prefix}_iteration"), &flag_index, &trips);
                }
            }
            Some(SignalOperation::Set(value)) => {
                let flag_base = self.affine(
                    &format!("{prefix}_iteration_flag"),
                    None,
                    key,
                    layout.max_trips,
                    layout.iteration_flag_base,
                );
                let (trips, constant_trip_count) = match channel.iterations {
                    Iterations::RankDependent(trip) => {
                        let sender = self.sender_rank(&prefix, distance);
                        (
                            self.rank_trips(&format!("{prefix}_trips"), trip, &sender),
                            false,
                        )
                    }
                    _ => (self.constant(rank_independent_trips), true),
                };
                if constant_trip_count && rank_independent_trips == 1 {
                    let value = self.set_value(
                        &format!("{prefix}_iteration_value"),
                        value,
                        &Operand::Constant(0),
                    );
                    self.wait_flag(&format!("{prefix}_iteration"), &flag_base, &value);
                } else {
                    let iteration = self.open_for(
                        &format!("{prefix}_iteration"),
                        0,
                        &trips,
                        1,
                        constant_trip_count,
                    );
                    let iteration = Operand::Value(iteration);
                    let flag_index = self.affine(
                        &format!("{prefix}_iteration_flag_index"),
                        Some(&flag_base),
                        &iteration,
                        1,
                        0,
                    );
                    let value =
                        self.set_value(&format!("{prefix}_iteration_value"), value, &iteration);
                    self.wait_flag(&format!("{prefix}_iteration"), &flag_index, &value);
                    self.close_for();
                }
            }
        }
        match channel.final_signal.map(|s| s.operation) {
            None | Some(SignalOperation::Add { shared_flag: true }) => {}
            Some(operation) => {
                let flag_index = self.affine(
                    &format!("{prefix}_final_flag"),
                    None,
                    key,
                    1,
                    layout.final_flag_base,
                );
                let value = match operation {
                    SignalOperation::Set(value) => self.set_value(
                        &format!("{prefix}_final_value"),
                        value,
                        &Operand::Constant(0),
                    ),
                    SignalOperation::Add { .. } => self.constant(1),
                };
                self.wait_flag(&format!("{prefix}_final"), &flag_index, &value);
            }
        }
    }

    // --- Assembly -----------------------------------------------------------------------------

    fn finish(self) -> GeneratedProgram {
        let spec = self.spec;
        let layout = self.layout;
        let grid = grid_text(spec);
        let modulus = match spec.choice_modulus {
            ChoiceModulus::Constant(modulus) => modulus.to_string(),
            ChoiceModulus::Ranks => "ranks".to_string(),
        };
        let mut body = Vec::new();
        for value in &self.constants {
            body.push(format!(
                "      c_{value} = builtin.constant <builtin.integer <{value}: i64>> : {I64};"
            ));
        }
        let operations = self
            .lines
            .iter()
            .filter(|line| {
                let line = line.trim_start();
                !line.starts_with("//") && !line.starts_with('^') && !line.starts_with('}')
            })
            .count();
        body.extend(self.lines);
        let features: Vec<&'static str> = self.features.into_iter().collect();
        let channels: usize = spec.phases.iter().map(|p| p.channels.len()).sum();
        let description = format!(
            "ranks={} grid={} ({} programs) phases={} channels={} ops={} constants={} features={}",
            spec.ranks,
            grid,
            spec.programs,
            spec.phases.len(),
            channels,
            operations,
            self.constants.len(),
            features.join(",")
        );
        let mut text = String::new();
        text.push_str("// Generated by aboleth_program_generator: a valid program (race- and\n");
        text.push_str("// deadlock-free by construction) for translation validation.\n");
        text.push_str(&format!("// {description}\n"));
        let mut index = 0;
        for (phase_index, phase) in spec.phases.iter().enumerate() {
            for channel in &phase.channels {
                text.push_str(&format!(
                    "// phase {phase_index} channel {index}: {}\n",
                    channel_summary(channel)
                ));
                index += 1;
            }
        }
        text.push_str("builtin.module @generated {\n  ^entry():\n");
        text.push_str(
            "  builtin.func @generated: builtin.function <(ab.ptr, ab.ptr, ab.ptr, ab.ptr, ab.ptr, builtin.integer i32, ab.ptr, ab.ptr, builtin.integer i64) -> ()>\n",
        );
        text.push_str(&format!("    [grid: builtin.string \"{grid}\",\n"));
        text.push_str(&format!(
            "     regions: builtin.string \"send={} recv={} rows={} flags={} choices={}\",\n",
            layout.partition_bytes * spec.programs,
            layout.recv_bytes,
            layout.rows_bytes,
            layout.flag_words * 8,
            CHOICE_WORDS * 8
        ));
        text.push_str(&format!(
            "     bind: builtin.string \"endpoints=endpoints recv=regions:recv rows=regions:rows flags=regions:flags send=local:send send_key=lkey:send my_flags=local:flags choices=local:choices epoch=value:{}\",\n",
            spec.epoch
        ));
        text.push_str(&format!(
            "     init: builtin.string \"send=random choices=random_mod:{modulus} flags=zero\"]\n"
        ));
        text.push_str("  {\n");
        text.push_str(
            "    ^entry(endpoints: ab.ptr, recv: ab.ptr, rows: ab.ptr, flags: ab.ptr, send: ab.ptr, send_key: builtin.integer i32, my_flags: ab.ptr, choices: ab.ptr, epoch: builtin.integer i64):\n",
        );
        for line in body {
            text.push_str(&line);
            text.push('\n');
        }
        text.push_str("  }\n}\n");
        GeneratedProgram {
            text,
            description,
            ranks: spec.ranks,
            programs: spec.programs,
            operations,
            features,
        }
    }
}

/// The `grid` attribute text.
pub(crate) fn grid_text(spec: &ProgramSpec) -> String {
    match spec.grid_expression {
        GridExpression::Literal => spec.programs.to_string(),
        GridExpression::Ranks => "ranks".to_string(),
        GridExpression::RanksMinusOne => "ranks-1".to_string(),
        GridExpression::RanksMinusTwo => "ranks-2".to_string(),
        GridExpression::TwiceRanksMinus(n) => format!("2*ranks-{n}"),
    }
}

/// A short description of a channel for the header comments.
pub(crate) fn channel_summary(channel: &ChannelSpec) -> String {
    let route = match channel.route {
        Route::Fixed { offset, senders } => format!("peer rank+{offset} from {senders:?}"),
        Route::ProgramOffset { base } => format!("peer rank+{base}+pid"),
        Route::AllToAll => "all-to-all peer pid+(pid>=rank)".to_string(),
        Route::PeerLoop { senders, bound } => {
            format!("loop over peers ({bound:?} bound) from {senders:?}")
        }
    };
    let puts: Vec<String> = channel
        .puts
        .iter()
        .map(|put| match put.predicate {
            Some(predicate) => format!("{} B if {predicate:?}", put.bytes),
            None => format!("{} B", put.bytes),
        })
        .collect();
    let signal = |signal: &Option<SignalSpec>| match signal {
        Some(signal) => format!("{:?} after {:?}", signal.operation, signal.after),
        None => "none".to_string(),
    };
    format!(
        "{route}; {:?}; puts [{}]; iteration signal {}; final signal {}; {:?}; {:?}; {:?}; fence {:?}",
        channel.iterations,
        puts.join(", "),
        signal(&channel.iteration_signal),
        signal(&channel.final_signal),
        channel.reuse,
        channel.iteration_completion,
        channel.body_completion,
        channel.fence
    )
}
