//! How the simulator launches a kernel: its grid, its regions, what each argument receives and
//! how memory starts, read from the kernel's `grid`, `regions`, `bind` and `init` attributes.
//!
//! The attributes are small languages: sizes are expressions over `ranks` with integers, `+`,
//! `-`, `*` and parentheses; `regions` is `NAME=EXPR ...` (bytes per rank, every region on every
//! rank); `bind` is `ARG=endpoints | regions:NAME | local:NAME | lkey:NAME | value:N ...`;
//! `init` is `NAME=zero | random | random_mod:EXPR | sequence:EXPR ...`, where `NAME[START:END]=...` sets only
//! those bytes (expressions; entries apply in order, so a range after a whole-region entry
//! overrides part of it: `pool=random_mod:5 pool[0:1024]=zero`). This module parses and checks them
//! (naming the attribute, the entry and the fix on error); it allocates nothing: that is
//! [`crate::interpreter`]'s job. Real launches (the runtime) get the same facts from Python.

use std::collections::BTreeMap;

/// What one kernel argument receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgumentBinding {
    /// The address of this rank's endpoint-handle table (one 128-byte handle per peer rank).
    Endpoints,
    /// The address of this rank's copy of a region's remote-descriptor table (one per rank).
    RegionTable(String),
    /// This rank's local address of a region.
    LocalAddress(String),
    /// The lkey of this rank's registration of a region.
    LocalKey(String),
    /// A constant; `value:epoch` means the launch's epoch (1 for the first round).
    Value(ValueBinding),
}

/// A constant argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueBinding {
    /// A fixed integer.
    Constant(i64),
    /// The round number plus one: increases by one per launch, as epochs do.
    Epoch,
}

/// How a region's bytes start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegionInit {
    /// All zero.
    Zero,
    /// Random bytes from the data seed (the same in every configuration and schedule).
    Random,
    /// Random little-endian `i64` words in `[0, modulus)`.
    RandomModulo(Expression),
    /// Little-endian `i64` words `0, step, 2 * step, ...`, counted from the start of the entry's
    /// range: tables of disjoint indices (a block table whose destinations never overlap).
    Sequence(Expression),
}

/// One `init` entry: how bytes `[start, end)` of a region start (the whole region when `range`
/// is `None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitEntry {
    /// The byte range, as expressions over `ranks`; `None`: the whole region.
    pub range: Option<(Expression, Expression)>,
    /// What the bytes hold.
    pub how: RegionInit,
}

/// A size expression over `ranks`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expression {
    /// An integer.
    Integer(i64),
    /// The number of ranks.
    Ranks,
    /// `lhs + rhs`.
    Add(Box<Expression>, Box<Expression>),
    /// `lhs - rhs`.
    Subtract(Box<Expression>, Box<Expression>),
    /// `lhs * rhs`.
    Multiply(Box<Expression>, Box<Expression>),
}

impl Expression {
    /// The value for `ranks` ranks.
    pub fn evaluate(&self, ranks: u32) -> i64 {
        match self {
            Expression::Integer(value) => *value,
            Expression::Ranks => i64::from(ranks),
            Expression::Add(lhs, rhs) => lhs.evaluate(ranks).wrapping_add(rhs.evaluate(ranks)),
            Expression::Subtract(lhs, rhs) => lhs.evaluate(ranks).wrapping_sub(rhs.evaluate(ranks)),
            Expression::Multiply(lhs, rhs) => lhs.evaluate(ranks).wrapping_mul(rhs.evaluate(ranks)),
        }
    }

    /// Parses `text`; the error says what was expected where.
    pub fn parse(text: &str) -> Result<Expression, String> {
        let tokens = tokenize(text)?;
        let mut position = 0;
        let expression = parse_sum(&tokens, &mut position)?;
        if position != tokens.len() {
            return Err(format!(
                "unexpected `{}` in `{text}`",
                tokens[position].text()
            ));
        }
        Ok(expression)
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Integer(i64),
    Ranks,
    Symbol(char),
}

impl Token {
    fn text(&self) -> String {
        match self {
            Token::Integer(value) => value.to_string(),
            Token::Ranks => "ranks".into(),
            Token::Symbol(symbol) => symbol.to_string(),
        }
    }
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let characters: Vec<char> = text.chars().collect();
    let mut index = 0;
    while index < characters.len() {
        let character = characters[index];
        if character.is_whitespace() {
            index += 1;
        } else if character.is_ascii_digit() {
            let start = index;
            while index < characters.len() && characters[index].is_ascii_digit() {
                index += 1;
            }
            let digits: String = characters[start..index].iter().collect();
            let value = digits
                .parse()
                .map_err(|_| format!("`{digits}` does not fit in 64 bits"))?;
            tokens.push(Token::Integer(value));
        } else if text[index..].starts_with("ranks") {
            tokens.push(Token::Ranks);
            index += "ranks".len();
        } else if "+-*()".contains(character) {
            tokens.push(Token::Symbol(character));
            index += 1;
        } else {
            return Err(format!(
                "unexpected `{character}` in `{text}` (sizes use integers, `ranks`, + - * and parentheses)"
            ));
        }
    }
    Ok(tokens)
}

fn parse_sum(tokens: &[Token], position: &mut usize) -> Result<Expression, String> {
    let mut lhs = parse_product(tokens, position)?;
    while let Some(Token::Symbol(symbol @ ('+' | '-'))) = tokens.get(*position) {
        *position += 1;
        let rhs = parse_product(tokens, position)?;
        lhs = if *symbol == '+' {
            Expression::Add(Box::new(lhs), Box::new(rhs))
        } else {
            Expression::Subtract(Box::new(lhs), Box::new(rhs))
        };
    }
    Ok(lhs)
}

fn parse_product(tokens: &[Token], position: &mut usize) -> Result<Expression, String> {
    let mut lhs = parse_atom(tokens, position)?;
    while let Some(Token::Symbol('*')) = tokens.get(*position) {
        *position += 1;
        let rhs = parse_atom(tokens, position)?;
        lhs = Expression::Multiply(Box::new(lhs), Box::new(rhs));
    }
    Ok(lhs)
}

fn parse_atom(tokens: &[Token], position: &mut usize) -> Result<Expression, String> {
    let token = tokens
        .get(*position)
        .ok_or("expected an integer, `ranks` or `(` at the end")?;
    *position += 1;
    match token {
        Token::Integer(value) => Ok(Expression::Integer(*value)),
        Token::Ranks => Ok(Expression::Ranks),
        Token::Symbol('(') => {
            let inner = parse_sum(tokens, position)?;
            match tokens.get(*position) {
                Some(Token::Symbol(')')) => {
                    *position += 1;
                    Ok(inner)
                }
                _ => Err("missing `)`".into()),
            }
        }
        other => Err(format!(
            "expected an integer, `ranks` or `(`, found `{}`",
            other.text()
        )),
    }
}

/// A kernel's launch description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchSpec {
    /// Programs per rank.
    pub grid: Expression,
    /// Regions in declaration order: name and bytes per rank.
    pub regions: Vec<(String, Expression)>,
    /// Argument name -> binding.
    pub bindings: BTreeMap<String, ArgumentBinding>,
    /// Region name -> its `init` entries in order (absent: zero).
    pub init: BTreeMap<String, Vec<InitEntry>>,
}

impl LaunchSpec {
    /// Parses the four attributes (`init` may be absent). Errors name the attribute and entry.
    pub fn parse(
        grid: Option<&str>,
        regions: Option<&str>,
        bind: Option<&str>,
        init: Option<&str>,
    ) -> Result<LaunchSpec, String> {
        let grid = Expression::parse(grid.unwrap_or("1")).map_err(|e| format!("grid: {e}"))?;
        let regions_text = regions.ok_or(
            "the kernel has no `regions` attribute: add e.g. `regions: builtin.string \"send=256 recv=256\"` so the simulator knows what to allocate",
        )?;
        let mut region_list = Vec::new();
        for entry in regions_text.split_whitespace() {
            let (name, size) = entry.split_once('=').ok_or_else(|| {
                format!("regions: `{entry}` is not NAME=BYTES (e.g. `recv=ranks*256`)")
            })?;
            if region_list.iter().any(|(existing, _)| existing == name) {
                return Err(format!("regions: `{name}` is declared twice"));
            }
            let size = Expression::parse(size).map_err(|e| format!("regions: {name}: {e}"))?;
            region_list.push((name.to_owned(), size));
        }
        let known = |name: &str, attribute: &str| -> Result<(), String> {
            if region_list.iter().any(|(region, _)| region == name) {
                Ok(())
            } else {
                Err(format!(
                    "{attribute}: `{name}` is not a region (declared: {})",
                    region_list
                        .iter()
                        .map(|(region, _)| region.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }
        };
        let bind_text = bind.ok_or(
            "the kernel has no `bind` attribute: add e.g. `bind: builtin.string \"endpoints=endpoints send=local:send ...\"` to say what each argument receives",
        )?;
        let mut bindings = BTreeMap::new();
        for entry in bind_text.split_whitespace() {
            let (argument, what) = entry
                .split_once('=')
                .ok_or_else(|| format!("bind: `{entry}` is not ARG=WHAT"))?;
            let binding = match what.split_once(':') {
                None if what == "endpoints" => ArgumentBinding::Endpoints,
                Some(("regions", name)) => {
                    known(name, "bind")?;
                    ArgumentBinding::RegionTable(name.to_owned())
                }
                Some(("local", name)) => {
                    known(name, "bind")?;
                    ArgumentBinding::LocalAddress(name.to_owned())
                }
                Some(("lkey", name)) => {
                    known(name, "bind")?;
                    ArgumentBinding::LocalKey(name.to_owned())
                }
                Some(("value", "epoch")) => ArgumentBinding::Value(ValueBinding::Epoch),
                Some(("value", value)) => {
                    ArgumentBinding::Value(ValueBinding::Constant(value.parse().map_err(|_| {
                        format!("bind: `{entry}`: `{value}` is not an integer or `epoch`")
                    })?))
                }
                _ => {
                    return Err(format!(
                        "bind: `{entry}`: expected endpoints, regions:NAME, local:NAME, lkey:NAME or value:N"
                    ));
                }
            };
            if bindings.insert(argument.to_owned(), binding).is_some() {
                return Err(format!("bind: argument `{argument}` is bound twice"));
            }
        }
        let mut init_map: BTreeMap<String, Vec<InitEntry>> = BTreeMap::new();
        for entry in init.unwrap_or("").split_whitespace() {
            let (target, how) = entry
                .split_once('=')
                .ok_or_else(|| format!("init: `{entry}` is not NAME=HOW"))?;
            let (name, range) = match target.split_once('[') {
                None => (target, None),
                Some((name, rest)) => {
                    let bounds = rest
                        .strip_suffix(']')
                        .and_then(|inner| inner.split_once(':'));
                    let (start, end) = bounds.ok_or_else(|| {
                        format!("init: `{entry}`: a byte range is NAME[START:END]")
                    })?;
                    let parse = |text: &str| {
                        Expression::parse(text).map_err(|e| format!("init: `{entry}`: {e}"))
                    };
                    (name, Some((parse(start)?, parse(end)?)))
                }
            };
            known(name, "init")?;
            let how = match how.split_once(':') {
                None if how == "zero" => RegionInit::Zero,
                None if how == "random" => RegionInit::Random,
                Some(("random_mod", modulus)) => RegionInit::RandomModulo(
                    Expression::parse(modulus).map_err(|e| format!("init: {name}: {e}"))?,
                ),
                Some(("sequence", step)) => RegionInit::Sequence(
                    Expression::parse(step).map_err(|e| format!("init: {name}: {e}"))?,
                ),
                _ => {
                    return Err(format!(
                        "init: `{entry}`: expected zero, random, random_mod:EXPR or sequence:EXPR"
                    ));
                }
            };
            init_map
                .entry(name.to_owned())
                .or_default()
                .push(InitEntry { range, how });
        }
        Ok(LaunchSpec {
            grid,
            regions: region_list,
            bindings,
            init: init_map,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_follow_precedence() {
        let expression = Expression::parse("ranks*16*128 + 8 - (ranks - 1)").unwrap();
        assert_eq!(expression.evaluate(4), 4 * 16 * 128 + 8 - 3);
        assert_eq!(
            Expression::parse("ranks ^ 2").unwrap_err(),
            "unexpected `^` in `ranks ^ 2` (sizes use integers, `ranks`, + - * and parentheses)"
        );
    }

    #[test]
    fn specs_parse_and_errors_name_the_entry() {
        let spec = LaunchSpec::parse(
            Some("ranks-1"),
            Some("send=ranks*256 flags=ranks*8"),
            Some("endpoints=endpoints s=local:send k=lkey:send f=regions:flags e=value:epoch n=value:7"),
            Some("send=random"),
        )
        .unwrap();
        assert_eq!(spec.grid.evaluate(8), 7);
        assert_eq!(
            spec.bindings["e"],
            ArgumentBinding::Value(ValueBinding::Epoch)
        );
        assert_eq!(
            spec.init["send"],
            vec![InitEntry {
                range: None,
                how: RegionInit::Random
            }]
        );
        let ranged = LaunchSpec::parse(
            None,
            Some("pool=ranks*64"),
            Some("p=local:pool"),
            Some("pool=random_mod:5 pool[8:ranks*8]=zero"),
        )
        .unwrap();
        assert_eq!(ranged.init["pool"].len(), 2);
        let sequence = LaunchSpec::parse(
            None,
            Some("table=64"),
            Some("t=local:table"),
            Some("table=sequence:ranks*3"),
        )
        .unwrap();
        assert_eq!(
            sequence.init["table"][0].how,
            RegionInit::Sequence(Expression::Multiply(
                Box::new(Expression::Ranks),
                Box::new(Expression::Integer(3))
            ))
        );
        assert_eq!(
            LaunchSpec::parse(None, Some("a=8"), Some("x=local:a"), Some("a=iota")).unwrap_err(),
            "init: `a=iota`: expected zero, random, random_mod:EXPR or sequence:EXPR"
        );
        let (start, end) = ranged.init["pool"][1].range.clone().unwrap();
        assert_eq!((start.evaluate(4), end.evaluate(4)), (8, 32));
        assert_eq!(
            LaunchSpec::parse(None, Some("a=8"), Some("x=local:a"), Some("a[0-8]=zero"))
                .unwrap_err(),
            "init: `a[0-8]=zero`: a byte range is NAME[START:END]"
        );
        assert_eq!(
            LaunchSpec::parse(None, Some("a=8"), Some("x=local:b"), None).unwrap_err(),
            "bind: `b` is not a region (declared: a)"
        );
        assert_eq!(
            LaunchSpec::parse(None, Some("a=8"), Some("x=value:many"), None).unwrap_err(),
            "bind: `x=value:many`: `many` is not an integer or `epoch`"
        );
    }
}
