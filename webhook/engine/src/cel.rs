//! CEL expressions for the CEL strategy, on the `cel` crate, with a bounded cost.
//!
//! An expression sees one variable, `object` (the whole source object), and must return a map
//! whose keys are destination paths (`{"spec.bitHigh": object.spec.packed / 256}`); nested maps
//! (`{"spec": {"bitHigh": …}}`) work too, the strategy reads its declared paths from either.
//!
//! The cost bound, in two layers:
//! - at compile time: source at most [`MAX_SOURCE_BYTES`], at most [`MAX_NODES`] syntax nodes
//!   (after macro expansion), nesting at most [`MAX_DEPTH`], only the variable `object`, no
//!   message (struct) literals;
//! - before each evaluation: a worst-case cost estimate computed from the expression and the
//!   actual sizes of the values it reads from `object` (list lengths, map sizes, string
//!   lengths). Each node costs one step; operators that copy or compare collections or strings
//!   cost their operands' sizes; a comprehension (`all`, `exists`, `exists_one`, `map`,
//!   `filter`) costs its body once per element of the range. An evaluation whose estimate
//!   exceeds [`COST_LIMIT`] steps is refused with an error naming the estimate, so a conversion
//!   never runs an unbounded amount of work. The estimate is an upper bound, never a sample.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, LiteralValue, operators};
use cel::objects::{Key, Map as CelMap};
use cel::parser::{Expression, Parser};
use cel::{Context, Env, Value as CelValue};
use serde_json::{Map, Number, Value};

use crate::value::{JsonContainerTrait, JsonValueTrait, Value as Json};

/// Longest expression source accepted.
pub const MAX_SOURCE_BYTES: usize = 8 * 1024;
/// Most syntax nodes (after macro expansion) in one expression.
pub const MAX_NODES: usize = 2_000;
/// Deepest nesting of syntax nodes. The interpreter recurses once per level with large frames
/// (tens of KiB in unoptimised builds), so this keeps evaluation well inside a 2 MiB thread
/// stack, the smallest the webhook's and the test harness's threads have.
pub const MAX_DEPTH: usize = 32;
/// Parser recursion limit (nested parentheses, calls, …).
const PARSER_RECURSION: u16 = 48;
/// Stack for the parser thread: the generated parser's frames are large in unoptimised builds
/// and it recurses before its own limit applies. Reserved, not committed, memory.
const PARSER_STACK_BYTES: usize = 64 << 20;
/// Most estimated evaluation steps per evaluation (Kubernetes uses the same order of magnitude
/// for one validation rule).
pub const COST_LIMIT: u64 = 1_000_000;

/// The only variable an expression may reference.
pub const OBJECT: &str = "object";

/// Type names CEL lets an expression use as values (`type(x) == string`).
const TYPE_NAMES: &[&str] =
    &["bool", "int", "uint", "double", "string", "bytes", "list", "map", "null_type", "type", "dyn"];

static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// Why an expression does not compile or an evaluation fails.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CelError {
    #[error("expression is {0} bytes; the limit is {MAX_SOURCE_BYTES}: split the work across rules")]
    TooLong(usize),
    #[error("expression does not parse: {0}")]
    Parse(String),
    #[error("expression has {0} syntax nodes after macro expansion; the limit is {MAX_NODES}")]
    TooManyNodes(usize),
    #[error("expression nests {0} levels deep; the limit is {MAX_DEPTH}")]
    TooDeep(usize),
    #[error("expression references `{0}`; only `object` (the source object) is available")]
    UnknownVariable(String),
    #[error("expression uses {0}, which conversion expressions do not support")]
    Unsupported(String),
    #[error(
        "evaluation would take up to {estimate} steps on this object; the limit is {COST_LIMIT}: simplify the expression or iterate over less"
    )]
    CostLimit { estimate: u64 },
    #[error("evaluation failed: {0}")]
    Eval(String),
    #[error(
        "expression must return a map of path to value, e.g. {{\"spec.size\": object.spec.size}}; it returned {0}"
    )]
    NotAMap(String),
    #[error("result value at {key:?} cannot be written to JSON: {message}")]
    Result { key: String, message: String },
}

/// A compiled, cost-checked expression.
#[derive(Clone, Debug)]
pub struct CelProgram {
    source: String,
    expr: Expression,
}

impl CelProgram {
    pub fn compile(source: &str) -> Result<CelProgram, CelError> {
        if source.len() > MAX_SOURCE_BYTES {
            return Err(CelError::TooLong(source.len()));
        }
        if source.trim().is_empty() {
            return Err(CelError::Parse("the expression is empty".into()));
        }
        let expr = parse_on_own_stack(source)?;
        let mut check = Check { nodes: 0, max_depth: 0, scopes: Vec::new() };
        check.walk(&expr, 1)?;
        if check.nodes > MAX_NODES {
            return Err(CelError::TooManyNodes(check.nodes));
        }
        if check.max_depth > MAX_DEPTH {
            return Err(CelError::TooDeep(check.max_depth));
        }
        Ok(CelProgram { source: source.to_string(), expr })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The worst-case number of steps evaluating over `object` could take.
    pub fn estimate_cost(&self, object: &Json) -> u64 {
        let mut est = Estimator { object, cache: HashMap::new(), vars: Vec::new() };
        est.bound(&self.expr).cost
    }

    /// Evaluates over `object` and returns the map it produces, as JSON.
    pub fn evaluate(&self, object: &Json) -> Result<Map<String, Value>, CelError> {
        let estimate = self.estimate_cost(object);
        if estimate > COST_LIMIT {
            return Err(CelError::CostLimit { estimate });
        }
        let mut ctx = Context::with_env(Arc::clone(&ENV));
        ctx.add_variable_from_value(OBJECT, to_cel(object));
        // The interpreter is third-party code: a panic inside it must fail this one conversion,
        // never the process serving it.
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| CelValue::resolve(&self.expr, &ctx)))
            .map_err(|_| CelError::Eval("the CEL interpreter failed internally on this input".into()))?
            .map_err(|e| CelError::Eval(e.to_string()))?;
        match result {
            CelValue::Map(m) => {
                let mut out = Map::new();
                for (k, v) in m.map.iter() {
                    let key = key_text(k);
                    let value =
                        to_json(v).map_err(|message| CelError::Result { key: key.clone(), message })?;
                    out.insert(key, value);
                }
                Ok(out)
            }
            other => Err(CelError::NotAMap(type_name(&other).to_string())),
        }
    }
}

/// Parses on a thread with a generous stack, so deep nesting becomes a parse error, never a
/// stack overflow. Compiles are rare (once per plan), so the thread costs nothing noticeable.
fn parse_on_own_stack(source: &str) -> Result<Expression, CelError> {
    let parse = || parser().parse(source).map_err(|e| CelError::Parse(summarize_parse_errors(&e)));
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("cel-parse".into())
            .stack_size(PARSER_STACK_BYTES)
            .spawn_scoped(scope, parse)
            .map_err(|e| CelError::Parse(format!("could not start the parser: {e}")))?;
        handle.join().unwrap_or_else(|_| {
            Err(CelError::Parse("the CEL parser failed internally on this expression".into()))
        })
    })
}

/// The first line of the first few parse errors, without the echoed source.
fn summarize_parse_errors(errors: &cel::ParseErrors) -> String {
    let mut parts: Vec<String> = errors
        .errors
        .iter()
        .take(3)
        .map(|e| {
            let line = e.to_string().lines().next().unwrap_or_default().trim().to_string();
            let line = line.strip_prefix("ERROR: ").unwrap_or(&line).to_string();
            if line.chars().count() > 200 { line.chars().take(200).collect::<String>() + "…" } else { line }
        })
        .collect();
    if errors.errors.len() > 3 {
        parts.push(format!("and {} more", errors.errors.len() - 3));
    }
    parts.join("; ")
}

/// Compile-time structure checks.
struct Check {
    nodes: usize,
    max_depth: usize,
    /// Comprehension variables in scope.
    scopes: Vec<String>,
}

impl Check {
    fn walk(&mut self, e: &Expression, depth: usize) -> Result<(), CelError> {
        self.nodes += 1;
        self.max_depth = self.max_depth.max(depth);
        // Stop early so a pathological expression costs little to reject.
        if self.nodes > MAX_NODES {
            return Err(CelError::TooManyNodes(self.nodes));
        }
        if depth > MAX_DEPTH {
            return Err(CelError::TooDeep(depth));
        }
        let d = depth + 1;
        match &e.expr {
            Expr::Unspecified => return Err(CelError::Parse("incomplete expression".into())),
            Expr::Literal(_) => {}
            Expr::Ident(name) => {
                let known = name == OBJECT
                    || self.scopes.iter().any(|s| s == name)
                    || TYPE_NAMES.contains(&name.as_str());
                if !known {
                    return Err(CelError::UnknownVariable(name.clone()));
                }
            }
            Expr::Select(s) => self.walk(&s.operand, d)?,
            Expr::Call(c) => {
                if let Some(t) = &c.target {
                    self.walk(t, d)?;
                }
                for a in &c.args {
                    self.walk(a, d)?;
                }
            }
            Expr::List(l) => {
                for el in &l.elements {
                    self.walk(el, d)?;
                }
            }
            Expr::Map(m) => {
                for entry in &m.entries {
                    match &entry.expr {
                        EntryExpr::MapEntry(me) => {
                            self.walk(&me.key, d)?;
                            self.walk(&me.value, d)?;
                        }
                        EntryExpr::StructField(_) => {
                            return Err(CelError::Unsupported("a struct field in a map literal".into()));
                        }
                    }
                }
            }
            Expr::Struct(s) => {
                return Err(CelError::Unsupported(format!("the message literal `{}{{…}}`", s.type_name)));
            }
            Expr::Comprehension(c) => {
                self.walk(&c.iter_range, d)?;
                self.walk(&c.accu_init, d)?;
                let pushed = 2 + usize::from(c.iter_var2.is_some());
                self.scopes.push(c.iter_var.clone());
                self.scopes.push(c.accu_var.clone());
                if let Some(v2) = &c.iter_var2 {
                    self.scopes.push(v2.clone());
                }
                let body = self
                    .walk(&c.loop_cond, d)
                    .and_then(|_| self.walk(&c.loop_step, d))
                    .and_then(|_| self.walk(&c.result, d));
                self.scopes.truncate(self.scopes.len() - pushed);
                body?;
            }
        }
        Ok(())
    }
}

/// Upper bounds for one sub-expression: evaluation steps, the value's own size (list length,
/// map entries, string bytes) and the largest such size strictly inside it (its elements').
#[derive(Clone, Copy, Debug, Default)]
struct Bound {
    cost: u64,
    len: u64,
    inner: u64,
}

impl Bound {
    fn scalar(cost: u64) -> Bound {
        Bound { cost, len: 1, inner: 0 }
    }

    /// The largest size anywhere in the value, itself included.
    fn deep(&self) -> u64 {
        self.len.max(self.inner)
    }

    /// A bound for any element (or field) of this value.
    fn element(&self) -> Bound {
        Bound { cost: 1, len: self.inner, inner: self.inner }
    }
}

struct Estimator<'a> {
    object: &'a Json,
    /// Sizes of `object` paths already measured.
    cache: HashMap<Vec<String>, (u64, u64)>,
    /// Comprehension variables and their bounds, innermost last.
    vars: Vec<(String, Bound)>,
}

impl Estimator<'_> {
    fn var(&self, name: &str) -> Option<Bound> {
        self.vars.iter().rev().find(|(n, _)| n == name).map(|(_, b)| *b)
    }

    /// `object.a.b…` as its field names, if `e` is such a path (and `object` is not shadowed).
    fn object_path(&self, e: &Expression) -> Option<Vec<String>> {
        let mut fields = Vec::new();
        let mut cur = e;
        loop {
            match &cur.expr {
                Expr::Select(s) if !s.test => {
                    fields.push(s.field.clone());
                    cur = &s.operand;
                }
                Expr::Ident(n) if n == OBJECT && self.var(OBJECT).is_none() => {
                    fields.reverse();
                    return Some(fields);
                }
                _ => return None,
            }
        }
    }

    fn measure(&mut self, path: Vec<String>) -> (u64, u64) {
        if let Some(v) = self.cache.get(&path) {
            return *v;
        }
        let mut cur = Some(self.object);
        for f in &path {
            cur = cur.and_then(|v| v.get(f.as_str()));
        }
        let sizes = cur.map_or((1, 0), |v| (top_size(v), inner_size(v)));
        self.cache.insert(path, sizes);
        sizes
    }

    fn bound(&mut self, e: &Expression) -> Bound {
        match &e.expr {
            Expr::Unspecified => Bound::scalar(1),
            Expr::Literal(l) => {
                let len = match l {
                    LiteralValue::String(s) => s.inner().len() as u64,
                    LiteralValue::Bytes(b) => b.inner().len() as u64,
                    _ => 1,
                };
                Bound { cost: 1, len, inner: 0 }
            }
            Expr::Ident(name) => {
                if let Some(b) = self.var(name) {
                    Bound { cost: 1, ..b }
                } else if name == OBJECT {
                    let (len, inner) = self.measure(Vec::new());
                    Bound { cost: 1, len, inner }
                } else {
                    Bound::scalar(1)
                }
            }
            Expr::Select(s) => {
                if s.test {
                    let b = self.bound(&s.operand);
                    return Bound::scalar(b.cost.saturating_add(1));
                }
                if let Some(path) = self.object_path(e) {
                    let cost = path.len() as u64 + 1;
                    let (len, inner) = self.measure(path);
                    return Bound { cost, len, inner };
                }
                let b = self.bound(&s.operand);
                Bound { cost: b.cost.saturating_add(1), ..b.element() }
            }
            Expr::List(l) => {
                let mut out = Bound { cost: 1, len: l.elements.len() as u64, inner: 0 };
                for el in &l.elements {
                    let b = self.bound(el);
                    out.cost = out.cost.saturating_add(b.cost).saturating_add(1);
                    out.inner = out.inner.max(b.deep());
                }
                out
            }
            Expr::Map(m) => {
                let mut out = Bound { cost: 1, len: m.entries.len() as u64, inner: 0 };
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        let k = self.bound(&me.key);
                        let v = self.bound(&me.value);
                        out.cost = out.cost.saturating_add(k.cost).saturating_add(v.cost).saturating_add(1);
                        out.inner = out.inner.max(k.deep()).max(v.deep());
                    }
                }
                out
            }
            Expr::Struct(_) => Bound::scalar(1),
            Expr::Call(c) => self.call(c),
            Expr::Comprehension(c) => self.comprehension(c),
        }
    }

    fn call(&mut self, c: &cel::common::ast::CallExpr) -> Bound {
        let func = c.func_name.as_str();
        let mut args: Vec<Bound> = Vec::with_capacity(c.args.len() + 1);
        if let Some(t) = &c.target {
            args.push(self.bound(t));
        }
        for a in &c.args {
            args.push(self.bound(a));
        }
        let arg_cost = args.iter().fold(0u64, |acc, b| acc.saturating_add(b.cost));
        let arg_len = args.iter().fold(0u64, |acc, b| acc.saturating_add(b.len));
        let arg_inner = args.iter().map(|b| b.inner).max().unwrap_or(0);
        let arg_deep = args.iter().map(Bound::deep).max().unwrap_or(0);
        match func {
            operators::CONDITIONAL => {
                let cond = args.first().copied().unwrap_or_default();
                let a = args.get(1).copied().unwrap_or_default();
                let b = args.get(2).copied().unwrap_or_default();
                Bound {
                    cost: cond.cost.saturating_add(a.cost.max(b.cost)).saturating_add(1),
                    len: a.len.max(b.len),
                    inner: a.inner.max(b.inner),
                }
            }
            operators::LOGICAL_AND
            | operators::LOGICAL_OR
            | operators::LOGICAL_NOT
            | operators::NOT_STRICTLY_FALSE => Bound::scalar(arg_cost.saturating_add(1)),
            operators::INDEX | operators::OPT_INDEX | operators::OPT_SELECT => {
                let container = args.first().copied().unwrap_or_default();
                Bound { cost: arg_cost.saturating_add(1), ..container.element() }
            }
            operators::ADD => {
                // Concatenation copies both sides.
                Bound {
                    cost: arg_cost.saturating_add(arg_len).saturating_add(1),
                    len: arg_len,
                    inner: arg_inner,
                }
            }
            "size"
            | "has"
            | "contains"
            | "startsWith"
            | "endsWith"
            | "matches"
            | "exists"
            | "all"
            | "exists_one"
            | "int"
            | "uint"
            | "double"
            | "bool"
            | "type"
            | operators::IN
            | operators::EQUALS
            | operators::NOT_EQUALS
            | operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS
            | operators::SUBSTRACT
            | operators::MULTIPLY
            | operators::DIVIDE
            | operators::MODULO
            | operators::NEGATE => {
                // Scalar results; comparing, searching or converting reads the operands once.
                Bound::scalar(arg_cost.saturating_add(arg_len).saturating_add(1))
            }
            _ => {
                // Anything else (string(), max(), …): assume it reads its operands and its
                // result is no larger than their sum (plus room for a number's text).
                Bound {
                    cost: arg_cost.saturating_add(arg_len).saturating_add(1),
                    len: arg_len.saturating_add(32),
                    inner: arg_deep,
                }
            }
        }
    }

    fn comprehension(&mut self, c: &cel::common::ast::ComprehensionExpr) -> Bound {
        let range = self.bound(&c.iter_range);
        let init = self.bound(&c.accu_init);
        let n = range.len;
        let element = range.element();
        let depth = self.vars.len();
        self.vars.push((c.iter_var.clone(), element));
        if let Some(v2) = &c.iter_var2 {
            self.vars.push((v2.clone(), element));
        }

        let bound = if let Some((guard, items)) = append_step(c) {
            // map/filter: the interpreter appends to one list in place.
            self.vars.push((c.accu_var.clone(), init));
            let g = guard.map(|g| self.bound(g)).unwrap_or_default();
            let it = self.bound(items);
            let cond = self.bound(&c.loop_cond);
            let per = g.cost.saturating_add(it.cost).saturating_add(cond.cost).saturating_add(1);
            Bound {
                cost: range.cost.saturating_add(init.cost).saturating_add(n.saturating_mul(per)),
                len: init.len.saturating_add(n.saturating_mul(it.len)),
                inner: it.inner.max(init.inner),
            }
        } else {
            // Any other fold: grow the accumulator by the step's growth once per element,
            // and charge each step with the accumulator at its final size.
            self.vars.push((c.accu_var.clone(), init));
            let first = self.bound(&c.loop_step);
            let growth = first.len.saturating_sub(init.len);
            let accu = Bound {
                cost: 1,
                len: init.len.saturating_add(n.saturating_mul(growth)),
                inner: first.inner.max(init.inner),
            };
            self.vars.pop();
            self.vars.push((c.accu_var.clone(), accu));
            let step = self.bound(&c.loop_step);
            let cond = self.bound(&c.loop_cond);
            let result = self.bound(&c.result);
            let per = step.cost.saturating_add(cond.cost).saturating_add(1);
            Bound {
                cost: range
                    .cost
                    .saturating_add(init.cost)
                    .saturating_add(n.saturating_mul(per))
                    .saturating_add(result.cost),
                len: result.len,
                inner: result.inner,
            }
        };
        self.vars.truncate(depth);
        bound
    }
}

/// The guard and appended list of a `map`/`filter` step (`@result + [x]`, optionally
/// `g ? @result + [x] : @result`), which the interpreter evaluates without copying.
fn append_step(c: &cel::common::ast::ComprehensionExpr) -> Option<(Option<&Expression>, &Expression)> {
    let is_accu = |e: &Expression| matches!(&e.expr, Expr::Ident(n) if *n == c.accu_var);
    let items_of = |e: &'_ Expression| -> Option<()> {
        match &e.expr {
            Expr::Call(call) if call.func_name == operators::ADD && call.target.is_none() => {
                match call.args.as_slice() {
                    [lhs, rhs] if is_accu(lhs) && matches!(rhs.expr, Expr::List(_)) => Some(()),
                    _ => None,
                }
            }
            _ => None,
        }
    };
    if !is_accu(&c.result) || !matches!(c.loop_cond.expr, Expr::Literal(_)) {
        return None;
    }
    let Expr::Call(call) = &c.loop_step.expr else { return None };
    if call.func_name == operators::CONDITIONAL && call.target.is_none() {
        if let [guard, step, otherwise] = call.args.as_slice()
            && is_accu(otherwise)
        {
            items_of(step)?;
            let Expr::Call(add) = &step.expr else { return None };
            return Some((Some(guard), &add.args[1]));
        }
        return None;
    }
    items_of(&c.loop_step)?;
    Some((None, &call.args[1]))
}

fn top_size(v: &Json) -> u64 {
    if let Some(a) = v.as_array() {
        a.len() as u64
    } else if let Some(m) = v.as_object() {
        m.len() as u64
    } else if let Some(s) = v.as_str() {
        s.len() as u64
    } else {
        1
    }
    .max(1)
}

/// The largest list length, map size, key or string length strictly inside `v`.
fn inner_size(v: &Json) -> u64 {
    if let Some(a) = v.as_array() {
        a.iter().map(|x| top_size(x).max(inner_size(x))).max().unwrap_or(0)
    } else if let Some(m) = v.as_object() {
        m.iter().map(|(k, x)| (k.len() as u64).max(top_size(x)).max(inner_size(x))).max().unwrap_or(0)
    } else {
        0
    }
}

/// JSON to CEL, straight from the engine's values (no serde_json copy in between): integers
/// that fit become `int`, larger ones `uint`, other numbers `double`.
pub fn to_cel(v: &Json) -> CelValue {
    if let Some(s) = v.as_str() {
        CelValue::String(Arc::new(s.to_string()))
    } else if let Some(a) = v.as_array() {
        CelValue::List(Arc::new(a.iter().map(to_cel).collect()))
    } else if let Some(m) = v.as_object() {
        let map: HashMap<Key, CelValue> =
            m.iter().map(|(k, v)| (Key::String(Arc::new(k.to_string())), to_cel(v))).collect();
        CelValue::Map(CelMap { map: Arc::new(map) })
    } else if let Some(b) = v.as_bool() {
        CelValue::Bool(b)
    } else if let Some(i) = v.as_i64() {
        CelValue::Int(i)
    } else if let Some(u) = v.as_u64() {
        CelValue::UInt(u)
    } else if let Some(f) = v.as_f64() {
        CelValue::Float(f)
    } else {
        CelValue::Null
    }
}

/// CEL to JSON. Map keys become strings; bytes, types and functions have no JSON form.
pub fn to_json(v: &CelValue) -> Result<Value, String> {
    Ok(match v {
        CelValue::Null => Value::Null,
        CelValue::Bool(b) => Value::Bool(*b),
        CelValue::Int(i) => Value::Number((*i).into()),
        CelValue::UInt(u) => Value::Number((*u).into()),
        CelValue::Float(f) => {
            Value::Number(Number::from_f64(*f).ok_or_else(|| format!("{f} is not a finite number"))?)
        }
        CelValue::String(s) => Value::String(s.as_str().to_string()),
        CelValue::List(l) => Value::Array(l.iter().map(to_json).collect::<Result<_, _>>()?),
        CelValue::Map(m) => {
            let mut out = Map::new();
            let mut keys: Vec<(&Key, &CelValue)> = m.map.iter().collect();
            keys.sort_by(|a, b| a.0.cmp(b.0));
            for (k, v) in keys {
                out.insert(key_text(k), to_json(v)?);
            }
            Value::Object(out)
        }
        other => return Err(format!("a {} value has no JSON form", type_name(other))),
    })
}

fn key_text(k: &Key) -> String {
    match k {
        Key::String(s) => s.as_str().to_string(),
        Key::Int(i) => i.to_string(),
        Key::Uint(u) => u.to_string(),
        Key::Bool(b) => b.to_string(),
    }
}

fn type_name(v: &CelValue) -> &'static str {
    match v {
        CelValue::List(_) => "list",
        CelValue::Map(_) => "map",
        CelValue::Function(..) => "function",
        CelValue::Int(_) => "int",
        CelValue::UInt(_) => "uint",
        CelValue::Float(_) => "double",
        CelValue::String(_) => "string",
        CelValue::Bytes(_) => "bytes",
        CelValue::Bool(_) => "bool",
        CelValue::Null => "null",
        _ => "opaque",
    }
}

/// A `Parser` configured as compile uses it (exposed for the fuzz target).
pub fn parser() -> Parser {
    ENV.parser().max_recursion_depth(PARSER_RECURSION)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(src: &str, obj: Value) -> Result<Map<String, Value>, CelError> {
        CelProgram::compile(src)?.evaluate(&from_serde(&obj))
    }

    fn from_serde(v: &Value) -> Json {
        crate::value::from_serde(v)
    }

    #[test]
    fn packs_and_unpacks_integers() {
        let out = eval(r#"{"spec.bitHigh": int(object.spec.packed) / 256, "spec.bitLow": int(object.spec.packed) % 256}"#, json!({"spec": {"packed": 1025}})).unwrap();
        assert_eq!(Value::Object(out), json!({"spec.bitHigh": 4, "spec.bitLow": 1}));
        let out = eval(
            r#"{"spec.packed": object.spec.bitHigh * 256 + object.spec.bitLow}"#,
            json!({"spec": {"bitHigh": 4, "bitLow": 1}}),
        )
        .unwrap();
        assert_eq!(out["spec.packed"], json!(1025));
    }

    #[test]
    fn strings_lists_maps_and_macros() {
        let obj = json!({"spec": {"name": "db", "items": [{"n": "a", "v": 1}, {"n": "b", "v": 2}], "labels": {"x": "1"}}});
        let out = eval(
            r#"{"spec": {"title": object.spec.name + "-prod", "names": object.spec.items.map(i, i.n), "big": object.spec.items.filter(i, i.v > 1).size(), "hasX": has(object.spec.labels.x), "all": object.spec.items.all(i, i.v > 0)}}"#,
            obj,
        )
        .unwrap();
        assert_eq!(
            Value::Object(out),
            json!({"spec": {"title": "db-prod", "names": ["a", "b"], "big": 1, "hasX": true, "all": true}})
        );
    }

    #[test]
    fn numbers_round_trip_types() {
        let out = eval(
            r#"{"a": object.i, "b": object.u, "c": object.f, "d": object.n, "e": object.b}"#,
            json!({"i": -3, "u": u64::MAX, "f": 1.5, "n": null, "b": true}),
        )
        .unwrap();
        assert_eq!(Value::Object(out), json!({"a": -3, "b": u64::MAX, "c": 1.5, "d": null, "e": true}));
    }

    #[test]
    fn compile_errors() {
        assert!(matches!(CelProgram::compile("{\"a\": "), Err(CelError::Parse(_))));
        assert!(matches!(CelProgram::compile("   "), Err(CelError::Parse(_))));
        assert!(
            matches!(CelProgram::compile("{\"a\": self.x}"), Err(CelError::UnknownVariable(v)) if v == "self")
        );
        assert!(matches!(CelProgram::compile("{\"a\": x}"), Err(CelError::UnknownVariable(_))));
        // Comprehension variables are in scope only inside the comprehension.
        assert!(CelProgram::compile("{\"a\": object.l.map(x, x + 1)}").is_ok());
        assert!(matches!(
            CelProgram::compile("{\"a\": object.l.map(x, x + 1), \"b\": x}"),
            Err(CelError::UnknownVariable(_))
        ));
        assert!(matches!(
            CelProgram::compile(&format!("{{\"a\": \"{}\"}}", "x".repeat(MAX_SOURCE_BYTES))),
            Err(CelError::TooLong(_))
        ));
        let wide = vec!["1"; 2100].join(",");
        assert!(matches!(
            CelProgram::compile(&format!("{{\"a\": [{wide}]}}")),
            Err(CelError::TooManyNodes(_))
        ));
        let long_sum = vec!["1"; 1000].join("+");
        assert!(matches!(CelProgram::compile(&format!("{{\"a\": {long_sum}}}")), Err(CelError::TooDeep(_))));
        // At the depth limit the expression still evaluates on a 2 MiB stack (the test thread's).
        let at_limit = vec!["object.x"; MAX_DEPTH - 3].join("+");
        assert_eq!(
            eval(&format!("{{\"a\": {at_limit}}}"), json!({"x": 1})).unwrap()["a"],
            json!(MAX_DEPTH - 3)
        );
        let parens = format!("{{\"a\": {}1{}}}", "(".repeat(5000), ")".repeat(5000));
        assert!(matches!(CelProgram::compile(&parens), Err(CelError::TooLong(_) | CelError::Parse(_))));
        let parens = format!("{{\"a\": {}1{}}}", "(".repeat(1000), ")".repeat(1000));
        let e = CelProgram::compile(&parens).unwrap_err().to_string();
        assert!(e.len() < 1000, "parse errors are summarized: {e}");
        let deep = format!("{{\"a\": {}1{}}}", "(".repeat(200), ")".repeat(200));
        assert!(CelProgram::compile(&deep).is_err());
        assert!(matches!(CelProgram::compile("{\"a\": Foo{x: 1}}"), Err(CelError::Unsupported(_))));
        assert!(CelProgram::compile("{\"a\": type(object) == map}").is_ok());
    }

    #[test]
    fn evaluation_errors() {
        assert!(matches!(eval("object.a", json!({"a": 1})), Err(CelError::NotAMap(t)) if t == "int"));
        assert!(matches!(eval("{\"a\": object.missing}", json!({})), Err(CelError::Eval(_))));
        assert!(matches!(eval("{\"a\": 1 / object.z}", json!({"z": 0})), Err(CelError::Eval(_))));
        assert!(
            matches!(eval("{\"a\": b\"xy\"}", json!({})), Err(CelError::Result { key, .. }) if key == "a")
        );
        assert!(matches!(eval("{\"a\": 1.0 / 0.0}", json!({})), Err(CelError::Result { .. })));
        assert!(matches!(
            eval("{\"a\": 9223372036854775807 + object.one}", json!({"one": 1})),
            Err(CelError::Eval(_))
        ));
    }

    #[test]
    fn cost_is_bounded_by_input_size() {
        let p = CelProgram::compile("{\"n\": object.l.map(x, object.l.map(y, x + y)).size()}").unwrap();
        let small = from_serde(&json!({"l": (0..10).collect::<Vec<_>>()}));
        assert!(p.evaluate(&small).is_ok());
        let big = from_serde(&json!({"l": (0..5000).collect::<Vec<_>>()}));
        let est = p.estimate_cost(&big);
        assert!(est > COST_LIMIT, "quadratic work over 5000 elements must exceed the limit, estimate {est}");
        assert!(matches!(p.evaluate(&big), Err(CelError::CostLimit { .. })));
        // A linear pass over the same list is fine.
        let linear = CelProgram::compile("{\"n\": object.l.filter(x, x % 2 == 0).size()}").unwrap();
        assert!(linear.estimate_cost(&big) < COST_LIMIT);
        assert_eq!(linear.evaluate(&big).unwrap()["n"], json!(2500));
    }

    #[test]
    fn cost_estimate_grows_with_strings() {
        let p = CelProgram::compile("{\"s\": object.l.map(x, object.s + object.s).size()}").unwrap();
        let small = from_serde(&json!({"l": [1, 2, 3], "s": "ab"}));
        let large = from_serde(&json!({"l": [1, 2, 3], "s": "a".repeat(1_000_000)}));
        assert!(p.estimate_cost(&small) < 1_000);
        assert!(p.estimate_cost(&large) > COST_LIMIT);
    }

    #[test]
    fn nested_comprehensions_and_exists_one() {
        let obj = json!({"g": [[1, 2], [3]], "l": [1, 2, 2]});
        let out = eval("{\"flat\": object.g.map(a, a.map(b, b * 10)), \"one\": object.l.exists_one(x, x == 1), \"any\": object.l.exists(x, x == 3)}", obj).unwrap();
        assert_eq!(Value::Object(out), json!({"flat": [[10, 20], [30]], "one": true, "any": false}));
    }
}
