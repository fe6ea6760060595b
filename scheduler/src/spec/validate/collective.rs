//! A collective task's fields: which belong to which kind, its one input and output, its
//! members, and what it computes (a reduction, or an exchange with its split, counts and
//! redistribution).

use std::collections::HashMap;

use plexus_proto::rules::{self, COLLECTIVE_KINDS, MAX_COUNTS_MEMBERS, MAX_REDISTRIBUTE_BLOCK, REDUCING_KINDS};
use plexus_proto::{Algorithm, DType, ExchangeSchedule, ReduceOp, Split};

use super::Validator;
use crate::error::SpecError;
use crate::spec::model::{CollectiveSpec, ExchangeSpec, InputSpec, Redistribution, Remap, Work};
use crate::spec::raw::{RawRemap, RawTask};

/// Picks a named value of a field: only the names themselves are accepted in a job file (not the
/// data plane's aliases), and `default` when the field is absent (an error when there is none).
fn pick<T: std::str::FromStr>(
    at: &dyn Fn(String) -> SpecError,
    kind: &str,
    field: &str,
    value: &Option<String>,
    allowed: &[&str],
    default: Option<T>,
) -> Result<T, SpecError> {
    match (value.as_deref(), default) {
        (Some(v), _) if allowed.contains(&v) => {
            v.parse().map_err(|_| at(format!("{field} = {v:?} is not one of {}", allowed.join(", "))))
        }
        (Some(v), _) => Err(at(format!("{field} = {v:?} is not one of {}", allowed.join(", ")))),
        (None, Some(d)) => Ok(d),
        (None, None) => Err(at(format!("{kind} needs `{field}` (one of {})", allowed.join(", ")))),
    }
}

impl Validator<'_> {
    /// Checks the fields of a collective kind (and that other tasks, and the other collective
    /// kinds, use none of its fields).
    pub(super) fn collective(
        &self,
        t: &RawTask,
        work: &Work,
        replicas: u32,
        inputs: &[InputSpec],
        replicas_of: &HashMap<&str, u32>,
    ) -> Result<Option<CollectiveSpec>, SpecError> {
        let at = |msg: String| self.at(t, msg);
        let Some(kind) = self.collective_kind(t, work)? else { return Ok(None) };
        let a_kind = if kind.starts_with('a') { format!("an {kind}") } else { format!("a {kind}") };
        let split = self.collective_io(t, kind, &a_kind, inputs)?;
        let producer = inputs[0].task.as_str();
        let members = replicas_of.get(producer).copied().unwrap_or(1);
        if t.replicas.is_some() && replicas != members && kind != "redistribute" {
            return Err(at(format!(
                "replicas = {replicas}, but {a_kind} has one member per replica of {producer:?}, which has {members}"
            )));
        }
        let dtype: DType = pick(&at, &a_kind, "dtype", &t.dtype, DType::NAMES, None)?;
        if REDUCING_KINDS.contains(&kind) {
            let op = pick(&at, &a_kind, "op", &t.op, ReduceOp::NAMES, Some(ReduceOp::Sum))?;
            let algorithm = pick(&at, &a_kind, "algorithm", &t.algorithm, Algorithm::NAMES, Some(Algorithm::Auto))?;
            let root = match (kind, t.root) {
                ("allreduce", Some(_)) => {
                    return Err(at(
                        "`root` is only for a reduce (an allreduce leaves the result on every member)".into()
                    ));
                }
                (_, Some(r)) if r >= members => {
                    return Err(at(format!("root = {r} is not a member's rank (0..{members})")));
                }
                (_, r) => r.unwrap_or(0),
            };
            return Ok(Some(CollectiveSpec { dtype, op, root, algorithm, exchange: None }));
        }
        let exchange = self.exchange(t, kind, &a_kind, split, dtype, members, producer)?;
        Ok(Some(CollectiveSpec {
            dtype,
            op: ReduceOp::Sum,
            root: 0,
            algorithm: Algorithm::Auto,
            exchange: Some(exchange),
        }))
    }

    /// The collective kind the task runs, if it runs one, with no field of another kind set;
    /// a task of another kind (or a command) sets none of the collective fields.
    fn collective_kind<'w>(&self, t: &RawTask, work: &'w Work) -> Result<Option<&'w str>, SpecError> {
        let at = |msg: String| self.at(t, msg);
        let fields = [
            ("dtype", t.dtype.is_some()),
            ("op", t.op.is_some()),
            ("root", t.root.is_some()),
            ("algorithm", t.algorithm.is_some()),
            ("schedule", t.schedule.is_some()),
            ("split", t.split.is_some()),
            ("counts", t.counts.is_some()),
            ("from_block", t.from_block.is_some()),
            ("to_block", t.to_block.is_some()),
            ("remap", t.remap.is_some()),
        ];
        let set = |names: &[&str]| fields.iter().find(|(n, set)| *set && names.contains(n)).map(|(n, _)| *n);
        let kind = match work {
            Work::Kind(k) if rules::is_collective(k) => k.as_str(),
            _ => {
                if let Some(first) = fields.iter().find(|(_, set)| *set).map(|(n, _)| n) {
                    return Err(at(format!(
                        "`{first}` is only for the collective kinds ({})",
                        COLLECTIVE_KINDS.join(", ")
                    )));
                }
                return Ok(None);
            }
        };
        let a_kind = if kind.starts_with('a') { format!("an {kind}") } else { format!("a {kind}") };
        // Which fields belong to which kind.
        let (foreign, owner): (&[&str], &str) = match kind {
            "allreduce" | "reduce" => {
                (&["schedule", "split", "counts", "from_block", "to_block", "remap"], "alltoall and redistribute")
            }
            "alltoall" => {
                (&["op", "root", "algorithm", "from_block", "to_block", "remap"], "the other collective kinds")
            }
            _ => (&["op", "root", "algorithm", "split", "counts"], "the other collective kinds"),
        };
        if let Some(f) = set(foreign) {
            return Err(at(format!("`{f}` is not a field of {a_kind} (it belongs to {owner})")));
        }
        Ok(Some(kind))
    }

    /// A collective's split (an alltoall's; `equal` for the others), checked with its inputs and
    /// its one output.
    fn collective_io(&self, t: &RawTask, kind: &str, a_kind: &str, inputs: &[InputSpec]) -> Result<Split, SpecError> {
        let at = |msg: String| self.at(t, msg);
        let split = match (kind, &t.counts) {
            ("alltoall", Some(_)) => pick(&at, a_kind, "split", &t.split, &["counts"], Some(Split::Counts))?,
            ("alltoall", None) => pick(&at, a_kind, "split", &t.split, Split::NAMES, Some(Split::Equal))?,
            _ => Split::Equal,
        };
        if split == Split::Counts && t.counts.is_none() {
            return Err(at(
                "split = \"counts\" needs a `counts` table (counts[i][j]: elements member i sends member j)".into(),
            ));
        }
        if split == Split::File {
            if inputs.len() != 2 {
                return Err(at(format!(
                    "split = \"file\" takes two inputs, the data and the split file of the same producer (e.g. inputs = [\"p/data\", \"p/split\"]); it has {}",
                    inputs.len()
                )));
            }
            if inputs[1].task != inputs[0].task {
                return Err(at(format!(
                    "split = \"file\": the split file must come from the data's producer {:?}, not {:?}",
                    inputs[0].task, inputs[1].task
                )));
            }
        } else if inputs.len() != 1 {
            let what = if REDUCING_KINDS.contains(&kind) {
                "the object each member reduces"
            } else {
                "the object each member sends"
            };
            return Err(at(format!(
                "{a_kind} takes exactly one input, {what} (e.g. inputs = [\"grads/grad\"]); it has {}",
                inputs.len()
            )));
        }
        if t.outputs.len() != 1 {
            return Err(at(format!("{a_kind} writes exactly one output, its result; it declares {}", t.outputs.len())));
        }
        if inputs.iter().any(|i| !i.rank.is_all()) {
            return Err(at(format!(
                "{a_kind} member already reads its own rank's object; write its input without a [..] selector"
            )));
        }
        Ok(split)
    }

    /// An exchange's schedule, counts and redistribution.
    #[allow(clippy::too_many_arguments)]
    fn exchange(
        &self,
        t: &RawTask,
        kind: &str,
        a_kind: &str,
        split: Split,
        dtype: DType,
        members: u32,
        producer: &str,
    ) -> Result<ExchangeSpec, SpecError> {
        let at = |msg: String| self.at(t, msg);
        let schedules: &[&str] = if kind == "redistribute" {
            ExchangeSchedule::NAMES
        } else {
            &["css", "shift", "pairwise", "direct", "auto"]
        };
        let schedule = pick(&at, a_kind, "schedule", &t.schedule, schedules, Some(ExchangeSchedule::Auto))?;
        let counts = self.counts(t, dtype, members, producer)?;
        let redistribute = if kind == "redistribute" {
            let block = |field: &str, v: Option<i64>| match v {
                None => Err(at(format!("a redistribute needs `{field}`, the block size in elements"))),
                Some(b) if b <= 0 => Err(at(format!("{field} = {b}: a block size must be at least 1 element"))),
                Some(b) if b as u64 > MAX_REDISTRIBUTE_BLOCK => Err(at(format!(
                    "{field} = {b} is larger than the largest block ({MAX_REDISTRIBUTE_BLOCK} elements)"
                ))),
                Some(b) => Ok(b as u64),
            };
            let from_block = block("from_block", t.from_block)?;
            let to_block = block("to_block", t.to_block)?;
            let receivers = t.replicas.unwrap_or(members);
            let remap = match &t.remap {
                None => None,
                Some(_) if schedule == ExchangeSchedule::Seed => {
                    return Err(at(
                        "schedule = \"seed\" is the seed's schedule of a plain redistribution, not of a `remap`".into(),
                    ));
                }
                Some(r) => Some(remap_of(&at, r)?),
            };
            Some(Redistribution { senders: members, from_block, receivers, to_block, remap })
        } else {
            None
        };
        Ok(ExchangeSpec { schedule, split, counts, redistribute })
    }

    /// An alltoall's `counts` table (counts[i][j]: elements member i sends member j), flattened;
    /// empty when it has none.
    fn counts(&self, t: &RawTask, dtype: DType, members: u32, producer: &str) -> Result<Vec<u64>, SpecError> {
        let at = |msg: String| self.at(t, msg);
        let Some(table) = &t.counts else { return Ok(Vec::new()) };
        let n = members as usize;
        if n > MAX_COUNTS_MEMBERS {
            return Err(at(format!(
                "a `counts` table is for at most {MAX_COUNTS_MEMBERS} members; this alltoall has {n} (use split = \"file\")"
            )));
        }
        if table.len() != n {
            return Err(at(format!(
                "counts has {} rows; it needs one per member ({n}, the replicas of {producer:?})",
                table.len()
            )));
        }
        if let Some((i, row)) = table.iter().enumerate().find(|(_, r)| r.len() != n) {
            return Err(at(format!("counts[{i}] has {} entries; it needs one per member ({n})", row.len())));
        }
        let limit = rules::MAX_NODE_BYTES / dtype.size() as u64;
        if let Some((i, _)) = table
            .iter()
            .enumerate()
            .find(|(_, r)| r.iter().try_fold(0u64, |a, &c| a.checked_add(c)).is_none_or(|sum| sum > limit))
        {
            return Err(at(format!("counts[{i}] adds up to more elements than any input can hold")));
        }
        Ok(table.concat())
    }
}

/// A `remap` table's values: strides at least 1, offsets at least 0, `iterations` and `len`
/// given, the loop's last write inside A.
fn remap_of(at: &dyn Fn(String) -> SpecError, r: &RawRemap) -> Result<Remap, SpecError> {
    let value = |field: &str, v: Option<i64>, default: Option<u64>, min: i64| match (v, default) {
        (None, Some(d)) => Ok(d),
        (None, None) => Err(at(format!("remap.{field} is missing"))),
        (Some(x), _) if x < min => Err(at(format!("remap.{field} = {x} must be at least {min}"))),
        (Some(x), _) => Ok(x as u64),
    };
    let m = Remap {
        a1: value("a1", r.a1, Some(1), 1)?,
        b1: value("b1", r.b1, Some(0), 0)?,
        a2: value("a2", r.a2, Some(1), 1)?,
        b2: value("b2", r.b2, Some(0), 0)?,
        iterations: value("iterations", r.iterations, None, 0)?,
        len: value("len", r.len, None, 0)?,
    };
    if m.iterations > 0 {
        let last = u128::from(m.a1) * u128::from(m.iterations - 1) + u128::from(m.b1);
        if last >= u128::from(m.len) {
            return Err(at(format!(
                "remap: the loop writes A[{}·{} + {}] = A[{last}], but len = {}",
                m.a1,
                m.iterations - 1,
                m.b1,
                m.len
            )));
        }
    }
    if m.iterations > MAX_REMAP_ITERATIONS {
        return Err(at(format!("remap.iterations = {} is more than {MAX_REMAP_ITERATIONS}", m.iterations)));
    }
    Ok(m)
}

/// The most iterations of a `remap` loop (every member walks them once).
const MAX_REMAP_ITERATIONS: u64 = 1 << 32;
