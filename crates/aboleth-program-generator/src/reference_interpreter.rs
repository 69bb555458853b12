//! The validity checker: a small reference interpreter of the semantic `ab` IR
//! ([`check_validity`]). It runs every (rank, program) of a launch from the harness attributes,
//! records puts, signals, waits and stores, and checks the rules of the crate documentation:
//! no byte written twice in a launch, no flag both set and added to, every wait matched by
//! sends that never depend on it, no source stored to before its put completed. It models no
//! timing: puts are checked as if every predicate were true (the conservative case for
//! overlaps), and deadlock freedom is checked by letting programs run while the signals sent
//! so far satisfy their waits. It is not the simulator and says nothing about compiled code.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aboleth_ir::{
    ab::{attributes::Comparison, ops::BinaryOp},
    attrs,
    pliron::{
        basic_block::BasicBlock,
        common_traits::Named,
        context::{Context, Ptr},
        operation::Operation,
        value::Value,
    },
    scalar::{constant_value, evaluate_binary, integer_width, truncate_signed},
    text::{op_name, parse_module},
    verify::{ValueKind, kind_of},
    walk::{block_ops, kernels, region_block},
};

/// What a kernel argument receives (the `bind` attribute).
#[derive(Clone, Debug)]
enum Binding {
    Endpoints,
    Regions(String),
    Local(String),
    Key(String),
    Value(i64),
}

/// A runtime value of the interpreter.
#[derive(Clone, Debug, PartialEq)]
enum Runtime {
    Integer(i64),
    Pointer {
        region: String,
        offset: i64,
    },
    EndpointTable,
    RegionTable(String),
    Endpoint {
        peer: i64,
    },
    Remote {
        region: String,
        peer: i64,
        element: i64,
    },
    RemotePointer {
        region: String,
        peer: i64,
        offset: i64,
    },
    Token(usize),
}

/// A put's source bytes, while its token is not waited for and its endpoint not drained.
#[derive(Clone, Debug)]
struct Outstanding {
    token: usize,
    peer: i64,
    source_offset: i64,
    bytes: i64,
}

/// The events deadlock checking needs, in one program's order.
#[derive(Clone, Debug)]
enum SyncEvent {
    Signal {
        peer: i64,
        word: i64,
        add: bool,
        value: i64,
    },
    WaitSignal {
        word: i64,
        value: i64,
        comparison: Comparison,
    },
}

/// A range of a receiver's region written by one put (sorted by offset).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Write {
    offset: i64,
    bytes: i64,
    writer: String,
}

/// Everything the launch did, collected over all (rank, program) runs.
#[derive(Default)]
struct LaunchRecord {
    /// (receiver, region) -> the puts into it.
    writes: BTreeMap<(i64, String), Vec<Write>>,
    /// (receiver, flag word) -> (add, value).
    signals: BTreeMap<(i64, i64), Vec<(bool, i64)>>,
    /// rank -> (program, source offset, bytes) of every put.
    source_reads: BTreeMap<i64, Vec<(i64, i64, i64)>>,
    /// rank -> (program, offset) of every store.
    stores: BTreeMap<i64, Vec<(i64, i64)>>,
    /// (rank, program) -> its signals and waits in order.
    traces: BTreeMap<(i64, i64), Vec<SyncEvent>>,
}

struct Launch {
    ranks: i64,
    programs: i64,
    region_bytes: BTreeMap<String, i64>,
    bindings: Vec<Binding>,
    choice_modulus: BTreeMap<String, i64>,
}

/// Evaluates a harness expression: integers and `ranks` with `+ - *`.
fn evaluate_expression(text: &str, ranks: i64) -> Result<i64, String> {
    let text: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let mut total = 0i64;
    let mut sign = 1i64;
    let mut term_start = 0;
    let bytes = text.as_bytes();
    let evaluate_term = |term: &str| -> Result<i64, String> {
        term.split('*').try_fold(1i64, |product, factor| {
            let factor = if factor == "ranks" {
                ranks
            } else {
                factor
                    .parse::<i64>()
                    .map_err(|_| format!("bad factor '{factor}' in '{text}'"))?
            };
            Ok(product * factor)
        })
    };
    for index in 0..=bytes.len() {
        if index == bytes.len() || bytes[index] == b'+' || bytes[index] == b'-' {
            total += sign * evaluate_term(&text[term_start..index])?;
            if index < bytes.len() {
                sign = if bytes[index] == b'+' { 1 } else { -1 };
            }
            term_start = index + 1;
        }
    }
    Ok(total)
}

fn parse_launch(ctx: &Context, kernel: Ptr<Operation>, ranks: i64) -> Result<Launch, String> {
    let attribute = |name: &str| {
        attrs::get_string(ctx, kernel, name).ok_or_else(|| format!("the kernel has no '{name}'"))
    };
    let programs = evaluate_expression(&attribute("grid")?, ranks)?;
    let mut region_bytes = BTreeMap::new();
    for item in attribute("regions")?.split_whitespace() {
        let (name, size) = item.split_once('=').ok_or("bad regions item")?;
        region_bytes.insert(name.to_string(), evaluate_expression(size, ranks)?);
    }
    let entry = region_block(ctx, kernel, 0);
    let argument_count = entry.deref(ctx).get_num_arguments();
    let mut by_name = BTreeMap::new();
    for item in attribute("bind")?.split_whitespace() {
        let (argument, what) = item.split_once('=').ok_or("bad bind item")?;
        let binding = match what.split_once(':') {
            None if what == "endpoints" => Binding::Endpoints,
            Some(("regions", name)) => Binding::Regions(name.to_string()),
            Some(("local", name)) => Binding::Local(name.to_string()),
            Some(("lkey", name)) => Binding::Key(name.to_string()),
            Some(("value", value)) => Binding::Value(evaluate_expression(value, ranks)?),
            _ => return Err(format!("bad binding '{item}'")),
        };
        by_name.insert(argument.to_string(), binding);
    }
    let names = entry_argument_names(ctx, kernel);
    if names.len() != argument_count {
        return Err("could not read the kernel's argument names".into());
    }
    let mut bindings = Vec::new();
    for name in &names {
        let binding = by_name
            .get(name)
            .cloned()
            .ok_or_else(|| format!("kernel argument '{name}' is not bound"))?;
        if let Binding::Regions(region) | Binding::Local(region) | Binding::Key(region) = &binding
            && !region_bytes.contains_key(region)
        {
            return Err(format!(
                "binding of '{name}' names unknown region '{region}'"
            ));
        }
        bindings.push(binding);
    }
    let mut choice_modulus = BTreeMap::new();
    if let Some(init) = attrs::get_string(ctx, kernel, "init") {
        for item in init.split_whitespace() {
            let (name, how) = item.split_once('=').ok_or("bad init item")?;
            if !region_bytes.contains_key(name) {
                return Err(format!("init names unknown region '{name}'"));
            }
            if let Some(modulus) = how.strip_prefix("random_mod:") {
                choice_modulus.insert(name.to_string(), evaluate_expression(modulus, ranks)?);
            } else if how != "random" && how != "zero" {
                return Err(format!("bad init '{item}'"));
            }
        }
    }
    Ok(Launch {
        ranks,
        programs,
        region_bytes,
        bindings,
        choice_modulus,
    })
}

/// The kernel's argument names (the names the `bind` attribute uses).
fn entry_argument_names(ctx: &Context, kernel: Ptr<Operation>) -> Vec<String> {
    let entry = region_block(ctx, kernel, 0);
    let count = entry.deref(ctx).get_num_arguments();
    (0..count)
        .map(|index| {
            entry
                .deref(ctx)
                .get_argument(index)
                .given_name(ctx)
                .map(|name| name.to_string())
                .unwrap_or_default()
        })
        .collect()
}

struct ProgramRun<'a> {
    launch: &'a Launch,
    rank: i64,
    program: i64,
    values: HashMap<Value, Runtime>,
    next_token: usize,
    outstanding: Vec<Outstanding>,
    trace: Vec<SyncEvent>,
    steps: u64,
}

impl ProgramRun<'_> {
    fn who(&self) -> String {
        format!("rank {} program {}", self.rank, self.program)
    }

    fn get(&self, value: Value) -> Result<Runtime, String> {
        self.values
            .get(&value)
            .cloned()
            .ok_or_else(|| format!("{}: use of a value with no runtime value", self.who()))
    }

    fn integer(&self, value: Value) -> Result<i64, String> {
        match self.get(value)? {
            Runtime::Integer(integer) => Ok(integer),
            other => Err(format!(
                "{}: expected an integer, got {other:?}",
                self.who()
            )),
        }
    }

    fn check_local(&self, region: &str, offset: i64, bytes: i64, what: &str) -> Result<(), String> {
        let size = self.launch.region_bytes[region];
        if offset < 0 || offset + bytes > size || offset % 8 != 0 {
            return Err(format!(
                "{}: {what} at {region}+{offset} ({bytes} B) is out of bounds (size {size}) or misaligned",
                self.who()
            ));
        }
        Ok(())
    }

    fn run_block(
        &mut self,
        ctx: &Context,
        block: Ptr<BasicBlock>,
        record: &mut LaunchRecord,
    ) -> Result<(), String> {
        for op in block_ops(ctx, block) {
            self.run_op(ctx, op, record)?;
        }
        Ok(())
    }

    fn run_op(
        &mut self,
        ctx: &Context,
        op: Ptr<Operation>,
        record: &mut LaunchRecord,
    ) -> Result<(), String> {
        self.steps += 1;
        if self.steps > 1_000_000 {
            return Err(format!("{}: runs too long", self.who()));
        }
        let name = op_name(ctx, op);
        let operation = op.deref(ctx);
        let operand = |index: usize| operation.get_operand(index);
        let operand_count = operation.get_num_operands();
        let result = (operation.get_num_results() > 0).then(|| operation.get_result(0));
        let produced = match name.as_str() {
            "builtin.constant" => Some(Runtime::Integer(
                constant_value(ctx, result.expect("constants have a result"))
                    .ok_or("a non-integer constant")?,
            )),
            "ab.rank" => Some(Runtime::Integer(self.rank)),
            "ab.world_size" => Some(Runtime::Integer(self.launch.ranks)),
            "ab.program_id" => Some(Runtime::Integer(self.program)),
            "ab.cast" => {
                let width = integer_width(ctx, result.expect("casts have a result")).unwrap_or(64);
                Some(Runtime::Integer(truncate_signed(
                    self.integer(operand(0))?,
                    width,
                )))
            }
            "ab.binop" => {
                let operator = Operation::get_op::<BinaryOp>(op, ctx)
                    .expect("named ab.binop")
                    .operator(ctx);
                let value = evaluate_binary(
                    operator,
                    self.integer(operand(0))?,
                    self.integer(operand(1))?,
                )
                .ok_or_else(|| format!("{}: division by zero", self.who()))?;
                Some(Runtime::Integer(value))
            }
            "ab.ptr_add" => match self.get(operand(0))? {
                Runtime::Pointer { region, offset } => Some(Runtime::Pointer {
                    region,
                    offset: offset + self.integer(operand(1))?,
                }),
                other => return Err(format!("ptr_add of {other:?}")),
            },
            "ab.load" => {
                let Runtime::Pointer { region, offset } = self.get(operand(0))? else {
                    return Err("load from a non-pointer".into());
                };
                self.check_local(&region, offset, 8, "load")?;
                let modulus = *self.launch.choice_modulus.get(&region).ok_or_else(|| {
                    format!(
                        "{}: load from '{region}', which may change during the launch",
                        self.who()
                    )
                })?;
                // Any fixed content will do: the checker's verdicts do not depend on it.
                let value = (self.rank * 7 + offset / 8 * 3 + 1) % modulus;
                Some(Runtime::Integer(value))
            }
            "ab.store" => {
                let Runtime::Pointer { region, offset } = self.get(operand(0))? else {
                    return Err("store to a non-pointer".into());
                };
                self.check_local(&region, offset, 8, "store")?;
                if integer_width(ctx, operand(1)) != Some(64) {
                    return Err("stores must be 8 bytes".into());
                }
                if region != "send" {
                    return Err(format!(
                        "{}: store into '{region}' (only sources are stored to)",
                        self.who()
                    ));
                }
                if let Some(busy) = self
                    .outstanding
                    .iter()
                    .find(|o| o.source_offset < offset + 8 && offset < o.source_offset + o.bytes)
                {
                    return Err(format!(
                        "{}: store to send+{offset} while put (token {}) may still be reading it",
                        self.who(),
                        busy.token
                    ));
                }
                record
                    .stores
                    .entry(self.rank)
                    .or_default()
                    .push((self.program, offset));
                None
            }
            "ab.for" => {
                let (lower, upper, step) = (
                    self.integer(operand(0))?,
                    self.integer(operand(1))?,
                    self.integer(operand(2))?,
                );
                if step <= 0 {
                    return Err("a loop step must be positive".into());
                }
                let body = region_block(ctx, op, 0);
                let induction = body.deref(ctx).get_argument(0);
                drop(operation);
                let mut index = lower;
                while index < upper {
                    self.values.insert(induction, Runtime::Integer(index));
                    self.run_block(ctx, body, record)?;
                    index += step;
                }
                return Ok(());
            }
            "ab.if" => {
                let condition = self.integer(operand(0))?;
                drop(operation);
                if condition != 0 {
                    self.run_block(ctx, region_block(ctx, op, 0), record)?;
                }
                return Ok(());
            }
            "ab.yield" | "ab.return" => None,
            "ab.endpoint" => {
                if self.get(operand(0))? != Runtime::EndpointTable {
                    return Err("ab.endpoint needs the endpoint table".into());
                }
                let peer = self.integer(operand(1))?;
                if peer < 0 || peer >= self.launch.ranks || peer == self.rank {
                    return Err(format!("{}: endpoint to peer {peer}", self.who()));
                }
                Some(Runtime::Endpoint { peer })
            }
            "ab.remote" => {
                let Runtime::RegionTable(region) = self.get(operand(0))? else {
                    return Err("ab.remote needs a region table".into());
                };
                let peer = self.integer(operand(1))?;
                if peer < 0 || peer >= self.launch.ranks || peer == self.rank {
                    return Err(format!("{}: remote region of peer {peer}", self.who()));
                }
                let length = attrs::get_int(ctx, op, "length_bytes");
                if length != Some(self.launch.region_bytes[&region]) {
                    return Err(format!(
                        "length_bytes {length:?} of '{region}' is not its size"
                    ));
                }
                let ValueKind::Remote(element) = kind_of(ctx, result.expect("has a result")) else {
                    return Err("ab.remote result is not ab.remote".into());
                };
                Some(Runtime::Remote {
                    region,
                    peer,
                    element: i64::from(element),
                })
            }
            "ab.at" => {
                let Runtime::Remote {
                    region,
                    peer,
                    element,
                } = self.get(operand(0))?
                else {
                    return Err("ab.at needs a remote region".into());
                };
                Some(Runtime::RemotePointer {
                    region,
                    peer,
                    offset: self.integer(operand(1))? * element,
                })
            }
            "ab.put" => {
                let Runtime::Endpoint { peer } = self.get(operand(0))? else {
                    return Err("put on a non-endpoint".into());
                };
                let Runtime::RemotePointer {
                    region,
                    peer: destination_peer,
                    offset,
                } = self.get(operand(1))?
                else {
                    return Err("put to a non-remote pointer".into());
                };
                let Runtime::Pointer {
                    region: source_region,
                    offset: source_offset,
                } = self.get(operand(2))?
                else {
                    return Err("put from a non-pointer".into());
                };
                let bytes = self.integer(operand(3))?;
                let key = operand(4);
                let key_region = self.key_region(ctx, key)?;
                if operand_count > 5 {
                    self.integer(operand(5))?;
                }
                if destination_peer != peer {
                    return Err(format!(
                        "{}: put on the queue to {peer} into peer {destination_peer}'s memory",
                        self.who()
                    ));
                }
                if key_region != source_region || source_region != "send" {
                    return Err(format!(
                        "{}: put source in '{source_region}' with the key of '{key_region}'",
                        self.who()
                    ));
                }
                if region == "send" || region == "flags" || region == "choices" {
                    return Err(format!("{}: put into '{region}'", self.who()));
                }
                if bytes <= 0 || bytes % 8 != 0 || bytes > 512 {
                    return Err(format!("{}: put of {bytes} bytes", self.who()));
                }
                self.check_local(&source_region, source_offset, bytes, "put source")?;
                let size = self.launch.region_bytes[&region];
                if offset < 0 || offset + bytes > size {
                    return Err(format!(
                        "{}: put into {region}+{offset} ({bytes} B) of {size}",
                        self.who()
                    ));
                }
                record
                    .writes
                    .entry((peer, region))
                    .or_default()
                    .push(Write {
                        offset,
                        bytes,
                        writer: self.who(),
                    });
                record.source_reads.entry(self.rank).or_default().push((
                    self.program,
                    source_offset,
                    bytes,
                ));
                let token = self.next_token;
                self.next_token += 1;
                self.outstanding.push(Outstanding {
                    token,
                    peer,
                    source_offset,
                    bytes,
                });
                Some(Runtime::Token(token))
            }
            "ab.signal" => {
                let Runtime::Endpoint { peer } = self.get(operand(0))? else {
                    return Err("signal on a non-endpoint".into());
                };
                let Runtime::RemotePointer {
                    region,
                    peer: flag_peer,
                    offset,
                } = self.get(operand(1))?
                else {
                    return Err("signal to a non-remote pointer".into());
                };
                if region != "flags" || flag_peer != peer || offset % 8 != 0 {
                    return Err(format!(
                        "{}: signal to {region}+{offset} of peer {flag_peer} on the queue to {peer}",
                        self.who()
                    ));
                }
                if offset < 0 || offset + 8 > self.launch.region_bytes["flags"] {
                    return Err(format!("{}: flag word {offset} out of bounds", self.who()));
                }
                let value = self.integer(operand(2))?;
                if operand_count > 3 && !matches!(self.get(operand(3))?, Runtime::Token(_)) {
                    return Err("a signal's after is not a token".into());
                }
                let add = attrs::get(ctx, op, "op")
                    .map(|attribute| attribute.disp(ctx).to_string().contains("Add"))
                    .unwrap_or(false);
                if value <= 0 {
                    return Err(format!("{}: signal value {value}", self.who()));
                }
                let word = offset / 8;
                record
                    .signals
                    .entry((peer, word))
                    .or_default()
                    .push((add, value));
                self.trace.push(SyncEvent::Signal {
                    peer,
                    word,
                    add,
                    value,
                });
                let token = self.next_token;
                self.next_token += 1;
                Some(Runtime::Token(token))
            }
            "ab.wait_signal" => {
                let Runtime::Pointer { region, offset } = self.get(operand(0))? else {
                    return Err("wait_signal on a non-pointer".into());
                };
                if region != "flags" {
                    return Err(format!("{}: wait_signal on '{region}'", self.who()));
                }
                self.check_local(&region, offset, 8, "wait_signal")?;
                let value = self.integer(operand(1))?;
                self.trace.push(SyncEvent::WaitSignal {
                    word: offset / 8,
                    value,
                    comparison: attrs::comparison(ctx, op),
                });
                None
            }
            "ab.wait" => {
                let Runtime::Token(token) = self.get(operand(0))? else {
                    return Err("wait on a non-token".into());
                };
                self.outstanding.retain(|o| o.token != token);
                None
            }
            "ab.drain" => {
                let Runtime::Endpoint { peer } = self.get(operand(0))? else {
                    return Err("drain of a non-endpoint".into());
                };
                self.outstanding.retain(|o| o.peer != peer);
                None
            }
            "ab.fence" => {
                let Runtime::Endpoint { .. } = self.get(operand(0))? else {
                    return Err("fence of a non-endpoint".into());
                };
                None
            }
            other => return Err(format!("the checker does not know op '{other}'")),
        };
        drop(operation);
        if let (Some(result), Some(value)) = (result, produced) {
            self.values.insert(result, value);
        }
        Ok(())
    }

    fn key_region(&self, _ctx: &Context, key: Value) -> Result<String, String> {
        match self.get(key)? {
            Runtime::Integer(key) => self
                .launch
                .bindings
                .iter()
                .filter_map(|binding| match binding {
                    Binding::Key(region) => Some(region.clone()),
                    _ => None,
                })
                .nth(usize::try_from(key).map_err(|_| "negative key")?)
                .ok_or_else(|| "an integer that is not a bound key".to_string()),
            other => Err(format!("key is {other:?}")),
        }
    }
}

/// Runs every (rank, program) of `text` on `ranks` ranks and checks the validity rules.
pub fn check_validity(text: &str, ranks: u32) -> Result<(), String> {
    let ctx = &mut Context::new();
    let module = parse_module(ctx, text, "checked.abo").map_err(|d| d.to_string())?;
    let kernel = *kernels(ctx, module).first().ok_or("no kernel")?;
    let launch = parse_launch(ctx, kernel, i64::from(ranks))?;
    let entry = region_block(ctx, kernel, 0);
    let mut record = LaunchRecord::default();
    for rank in 0..launch.ranks {
        for program in 0..launch.programs {
            let mut run = ProgramRun {
                launch: &launch,
                rank,
                program,
                values: HashMap::new(),
                next_token: 0,
                outstanding: Vec::new(),
                trace: Vec::new(),
                steps: 0,
            };
            // Keys are integers: the index of the bound key, so a put can name its region.
            let mut key_index = 0;
            for (position, binding) in launch.bindings.iter().enumerate() {
                let argument = entry.deref(ctx).get_argument(position);
                let value = match binding {
                    Binding::Endpoints => Runtime::EndpointTable,
                    Binding::Regions(region) => Runtime::RegionTable(region.clone()),
                    Binding::Local(region) => Runtime::Pointer {
                        region: region.clone(),
                        offset: 0,
                    },
                    Binding::Key(_) => {
                        key_index += 1;
                        Runtime::Integer(key_index - 1)
                    }
                    Binding::Value(value) => Runtime::Integer(*value),
                };
                run.values.insert(argument, value);
            }
            run.run_block(ctx, entry, &mut record)?;
            record.traces.insert((rank, program), run.trace);
        }
    }
    check_record(&record)
}

fn check_record(record: &LaunchRecord) -> Result<(), String> {
    // Every destination byte is written at most once.
    for ((receiver, region), writes) in &record.writes {
        let mut sorted = writes.clone();
        sorted.sort();
        for pair in sorted.windows(2) {
            let (first, second) = (&pair[0], &pair[1]);
            if first.offset + first.bytes > second.offset {
                return Err(format!(
                    "rank {receiver} {region}+{} is written twice ({}, {})",
                    second.offset, first.writer, second.writer
                ));
            }
        }
    }
    // No program stores into bytes another program's put reads.
    for (rank, stores) in &record.stores {
        for (program, offset) in stores {
            for (reader, source, bytes) in record.source_reads.get(rank).into_iter().flatten() {
                if reader != program && *source < offset + 8 && *offset < source + bytes {
                    return Err(format!(
                        "rank {rank}: program {program} stores into send+{offset}, which program {reader} puts from"
                    ));
                }
            }
        }
    }
    // A flag word is set by exactly one signal, or only added to.
    let mut final_values = BTreeMap::new();
    for ((receiver, word), updates) in &record.signals {
        let sets = updates.iter().filter(|(add, _)| !add).count();
        if sets > 0 && updates.len() > 1 {
            return Err(format!(
                "rank {receiver} flag {word}: {sets} sets among {} updates",
                updates.len()
            ));
        }
        final_values.insert(
            (*receiver, *word),
            updates.iter().map(|(_, v)| v).sum::<i64>(),
        );
    }
    // A wait asks for exactly the final value (a set flag's value, an added flag's total), or,
    // on a flag only added to (a counter), an intermediate count from 1 to the total.
    let added_only: BTreeSet<(i64, i64)> = record
        .signals
        .iter()
        .filter(|(_, updates)| updates.iter().all(|(add, _)| *add))
        .map(|(key, _)| *key)
        .collect();
    for ((rank, program), trace) in &record.traces {
        for event in trace {
            if let SyncEvent::WaitSignal {
                word,
                value,
                comparison,
            } = event
            {
                let reached = final_values.get(&(*rank, *word)).copied().unwrap_or(0);
                let counter = added_only.contains(&(*rank, *word)) && (1..=reached).contains(value);
                if *comparison != Comparison::Ge {
                    // Another comparison asks only that the final value satisfies it.
                    if !comparison.holds(reached, *value) {
                        return Err(format!(
                            "rank {rank} program {program} waits for flag {word} {} {value}, but it ends at {reached}",
                            comparison.symbol()
                        ));
                    }
                } else if *value != reached && !counter {
                    return Err(format!(
                        "rank {rank} program {program} waits for flag {word} >= {value}, but it ends at {reached}, not exactly {value}"
                    ));
                }
            }
        }
    }
    // No deadlock: run every program while the signals sent so far satisfy its waits.
    let mut flags: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    let mut positions: BTreeMap<(i64, i64), usize> = BTreeMap::new();
    loop {
        let mut progress = false;
        for (key, trace) in &record.traces {
            let position = positions.entry(*key).or_default();
            while let Some(event) = trace.get(*position) {
                match event {
                    SyncEvent::Signal {
                        peer,
                        word,
                        add,
                        value,
                    } => {
                        let flag = flags.entry((*peer, *word)).or_default();
                        *flag = if *add { *flag + value } else { *value };
                    }
                    SyncEvent::WaitSignal {
                        word,
                        value,
                        comparison,
                    } => {
                        let flag = flags.get(&(key.0, *word)).copied().unwrap_or(0);
                        if !comparison.holds(flag, *value) {
                            break;
                        }
                    }
                }
                *position += 1;
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }
    for (key, trace) in &record.traces {
        if positions[key] < trace.len() {
            return Err(format!(
                "deadlock: rank {} program {} waits forever at {:?}",
                key.0, key.1, trace[positions[key]]
            ));
        }
    }
    Ok(())
}
