//! The exchange kinds of seed 004, run inside the worker: `alltoall` (each member's input cut
//! into one part per member, member j receives part j of every input) and `redistribute` (an
//! array distributed cyclic(x) over the producer's P replicas becomes cyclic(y) over Q members).
//!
//! Both run on the data plane's [`Exchanger`] in two calls:
//! 1. every member says what it will send each member ([`Exchanger::gather_table`]), so every
//!    member knows the whole table and checks it the same way: a member whose input does not fit
//!    what the job declared sends a row of `u64::MAX` instead, fails with the reason, and every
//!    other member fails naming it, instead of waiting for bytes that never come;
//! 2. the exchange itself along the job's schedule (`css` by default, `shift`, `pairwise`, or a
//!    redistribute's `seed`: the seed's Algorithm 1 where its condition holds, else Algorithm 2).
//!
//! What a split or a layout can get wrong is named by the job file's field (`counts`, `split`,
//! `from_block`).

use bytes::Bytes;
use plexus_dataplane::{AffineRemap, BlockCyclic, CyclicLayout, ExchangeAlgorithm, Exchanger, Placement, ScheduleKind};
use plexus_proto::rules::{MAX_COUNTS_MEMBERS, MAX_REDISTRIBUTE_BLOCK};
use plexus_proto::{DType, ExchangeSchedule, ObjectId, Split, pb};

use crate::error::{Error, Result};

/// A row that says "this member cannot take part": no real row is all `u64::MAX` (no input is
/// 2⁶⁴ bytes).
const REFUSED: u64 = u64::MAX;

/// The most bytes of a split file: N counts of at most 20 digits and a separator, and room for
/// comments' worth of whitespace.
fn split_file_limit(n: usize) -> usize {
    n.saturating_mul(24).saturating_add(4096)
}

/// A validated `alltoall` or `redistribute` of an assignment.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub schedule: ExchangeSchedule,
    pub split: Split,
    /// `split = counts`: N × N elements, row-major.
    pub counts: Vec<u64>,
    /// A redistribute's layout (P = senders, Q = receivers).
    pub redistribute: Option<CyclicLayout>,
    /// A redistribute's remapping after loop partitioning (seed 004), instead of a plain
    /// cyclic(x) → cyclic(y).
    pub remap: Option<AffineRemap>,
}

/// What an exchange ran (a schedule's name) and why.
#[derive(Debug, Clone)]
pub struct Ran {
    pub algorithm: String,
    pub reason: String,
}

impl Exchange {
    /// Checks a coordinator's description for a gang of `members`.
    pub fn from_pb(kind: &str, members: usize, c: &pb::Collective) -> Result<Exchange> {
        let invalid = |m: String| Error::InvalidAssignment(format!("{kind}: {m}"));
        let named = |field: &'static str| move |source| Error::CollectiveName { field, source };
        let schedule: ExchangeSchedule = c.schedule.parse().map_err(named("schedule"))?;
        let split: Split = c.split.parse().map_err(named("split"))?;
        let redistribute = match (kind, &c.redistribute) {
            ("redistribute", Some(r)) => {
                let (p, q) = (r.senders as usize, r.receivers as usize);
                if p.max(q) != members {
                    return Err(invalid(format!("{p} senders and {q} receivers in a gang of {members}")));
                }
                if r.from_block > MAX_REDISTRIBUTE_BLOCK || r.to_block > MAX_REDISTRIBUTE_BLOCK {
                    return Err(invalid(format!(
                        "blocks of {} and {} elements (at most {MAX_REDISTRIBUTE_BLOCK})",
                        r.from_block, r.to_block
                    )));
                }
                Some(CyclicLayout::new(p, r.from_block, q, r.to_block).map_err(|e| invalid(e.to_string()))?)
            }
            ("redistribute", None) => return Err(invalid("no layout (senders, receivers, blocks)".into())),
            (_, Some(_)) => return Err(invalid("a layout is only for a redistribute".into())),
            (_, None) => None,
        };
        if schedule == ExchangeSchedule::Seed && redistribute.is_none() {
            return Err(invalid("schedule \"seed\" is only for a redistribute".into()));
        }
        let remap = match (&redistribute, c.redistribute.as_ref().and_then(|r| r.remap.as_ref())) {
            (Some(l), Some(m)) => {
                if schedule == ExchangeSchedule::Seed {
                    return Err(invalid("schedule \"seed\" is not for a remap".into()));
                }
                let r = AffineRemap::new((l.p, l.x), (l.q, l.y), m.len, (m.a1, m.b1), (m.a2, m.b2), m.iterations)
                    .map_err(|e| invalid(format!("remap: {}", plain(e))))?;
                Some(r)
            }
            _ => None,
        };
        if split == Split::Counts {
            if members > MAX_COUNTS_MEMBERS || c.counts.len() != members * members {
                return Err(invalid(format!("{} counts for a gang of {members} (N × N)", c.counts.len())));
            }
        } else if !c.counts.is_empty() {
            return Err(invalid(format!("counts with split {split:?}")));
        }
        Ok(Exchange { schedule, split, counts: c.counts.clone(), redistribute, remap })
    }

    pub fn kind(&self) -> &'static str {
        if self.redistribute.is_some() { "redistribute" } else { "alltoall" }
    }

    /// How many inputs member `rank` reads: a split file is the second; a redistribute's members
    /// past the producer's replicas have none.
    pub fn inputs(&self, rank: usize) -> usize {
        match (&self.redistribute, self.split) {
            (Some(l), _) if rank >= l.p => 0,
            (_, Split::File) => 2,
            _ => 1,
        }
    }

    /// Runs this member's part: `data` is its input (empty when it has none), `split_file` the
    /// split file's bytes. Returns what it writes as its output, and what ran.
    pub async fn run(
        &self,
        x: &Exchanger,
        dtype: DType,
        data: Bytes,
        input: Option<&ObjectId>,
        split_file: Option<&[u8]>,
    ) -> Result<(Bytes, Ran)> {
        let (n, rank, e) = (x.size(), x.rank(), dtype.size());
        let row = self.row(n, rank, dtype, data.len(), input, split_file);
        let mine: Vec<u64> = match &row {
            Ok(r) => r.iter().map(|&c| c * e as u64).collect(),
            Err(_) => vec![REFUSED; n],
        };
        let failed = |source| Error::Collective { kind: self.kind(), source };
        let table = x.gather_table(&mine).await.map_err(failed)?;
        if let Some(bad) = (0..n).find(|&i| table.row(i).iter().all(|&c| c == REFUSED)) {
            // Every member saw the refusal: one more exchange carries each member's reason, so
            // every member's error names the cause, not just the member that found it.
            let reason = match &row {
                Err(e) => e.to_string(),
                Ok(_) => String::new(),
            };
            let reasons = self.reasons(x, &reason).await;
            return Err(match row {
                Err(e) => e,
                Ok(_) => {
                    let why = reasons.and_then(|r| r.into_iter().nth(bad)).filter(|r| !r.is_empty());
                    let why = why.unwrap_or_else(|| format!("its input does not fit the {}", self.what()));
                    Error::ExchangeInput(format!("member {bad} could not take part: {why}"))
                }
            });
        }
        row?;
        let how = match self.schedule {
            ExchangeSchedule::Css | ExchangeSchedule::Seed => Some(ExchangeAlgorithm::Steps(ScheduleKind::Css)),
            ExchangeSchedule::Shift => Some(ExchangeAlgorithm::Steps(ScheduleKind::Shift)),
            ExchangeSchedule::Pairwise => Some(ExchangeAlgorithm::Steps(ScheduleKind::Pairwise)),
            ExchangeSchedule::Direct => Some(ExchangeAlgorithm::Direct),
            ExchangeSchedule::Auto => None,
        };
        let ran = |c: plexus_dataplane::Chosen| Ran { algorithm: c.algorithm.to_string(), reason: c.reason };
        match (&self.redistribute, &self.remap) {
            (None, _) => {
                let sends = x.parts(&table, &data).map_err(failed)?;
                let (got, chosen) = x.alltoallv_chosen(&table, sends, how).await.map_err(failed)?;
                Ok((concat(&got), ran(chosen)))
            }
            (Some(l), Some(r)) => {
                let mut sends: Vec<Bytes> = if rank < l.p {
                    r.pack(rank, &data, e).map_err(failed)?.into_iter().map(Bytes::from).collect()
                } else {
                    Vec::new()
                };
                sends.resize(n, Bytes::new());
                let (got, chosen) = x.alltoallv_chosen(&table, sends, how).await.map_err(failed)?;
                if rank >= l.q {
                    return Ok((Bytes::new(), ran(chosen)));
                }
                let parts: Vec<&[u8]> = got[..l.p].iter().map(|b| b.as_ref()).collect();
                let out = r.unpack(rank, &parts, e).map_err(failed)?;
                Ok((Bytes::from(out), ran(chosen)))
            }
            (Some(l), None) => {
                let lens: Vec<u64> = (0..l.p).map(|s| table.row(s).iter().sum::<u64>() / e as u64).collect();
                l.check_sources(&lens)
                    .map_err(|err| Error::ExchangeInput(format!("from_block = {}: {}", l.x, plain(err))))?;
                let mut sends: Vec<Bytes> = if rank < l.p {
                    l.pack(rank, &data, e).map_err(failed)?.into_iter().map(Bytes::from).collect()
                } else {
                    Vec::new()
                };
                sends.resize(n, Bytes::new());
                let (got, done) = if self.schedule == ExchangeSchedule::Seed {
                    let schedule = BlockCyclic::new(l.p, l.x, l.q, l.y)
                        .and_then(|b| b.seed_schedule(&table, Placement::Shared))
                        .map_err(failed)?;
                    let got = x.alltoallv_with(&table, &schedule, sends).await.map_err(failed)?;
                    let why = "the seed's Algorithm 1 where its condition holds, else Algorithm 2: set by the job file";
                    (got, Ran { algorithm: "seed".into(), reason: format!("seed: {why}") })
                } else {
                    let (got, chosen) = x.alltoallv_chosen(&table, sends, how).await.map_err(failed)?;
                    (got, ran(chosen))
                };
                if rank >= l.q {
                    return Ok((Bytes::new(), done));
                }
                let parts: Vec<&[u8]> = got[..l.p].iter().map(|b| b.as_ref()).collect();
                l.unpack(rank, &parts, e)
                    .map(|b| (Bytes::from(b), done))
                    .map_err(|err| Error::ExchangeInput(format!("from_block = {}: {}", l.x, plain(err))))
            }
        }
    }

    /// This member's row of the exchange's table, in elements, from its input of `bytes` bytes;
    /// or why it cannot take part.
    fn row(
        &self,
        n: usize,
        rank: usize,
        dtype: DType,
        bytes: usize,
        input: Option<&ObjectId>,
        split_file: Option<&[u8]>,
    ) -> Result<Vec<u64>> {
        let e = dtype.size();
        let shape = |len: usize| match input {
            Some(object) => Error::InputShape { object: object.clone(), len, dtype },
            None => Error::ExchangeInput(format!("{len} bytes of input where none was expected")),
        };
        if !bytes.is_multiple_of(e) {
            Err(shape(bytes))
        } else {
            let len = (bytes / e) as u64;
            match (&self.redistribute, self.split) {
                (Some(l), _) if self.remap.is_some() && rank < l.p => {
                    let r = self.remap.as_ref().expect("a remap");
                    let need = r.local_needed(rank);
                    if len < need {
                        return Err(Error::ExchangeInput(format!(
                            "remap: member {rank}'s input has {len} {dtype} elements, the loop reads its element {}",
                            need - 1
                        )));
                    }
                    let mut row = r.send_counts(rank);
                    row.resize(n, 0);
                    Ok(row)
                }
                (Some(l), _) => {
                    let mut row = if rank < l.p { l.send_counts(rank, len) } else { Vec::new() };
                    row.resize(n, 0);
                    Ok(row)
                }
                (None, Split::Equal) => {
                    Ok((0..n as u64).map(|j| len / n as u64 + u64::from(j < len % n as u64)).collect())
                }
                (None, Split::Counts) => {
                    let row = self.counts[rank * n..(rank + 1) * n].to_vec();
                    let sum: u128 = row.iter().map(|&c| u128::from(c)).sum();
                    if sum == u128::from(len) {
                        Ok(row)
                    } else {
                        Err(Error::ExchangeInput(format!(
                            "counts[{rank}] adds up to {sum} elements, but member {rank}'s input has {len} {dtype} elements"
                        )))
                    }
                }
                (None, Split::File) => parse_split_file(split_file.unwrap_or_default(), n, rank, len),
            }
        }
    }

    /// Every member's reason for refusing (empty when it did not), by one exchange of
    /// [`REASON_BYTES`] from each member to each; `None` when that exchange fails too.
    async fn reasons(&self, x: &Exchanger, mine: &str) -> Option<Vec<String>> {
        let mut block = vec![0u8; REASON_BYTES];
        let mut end = mine.len().min(REASON_BYTES);
        while !mine.is_char_boundary(end) {
            end -= 1;
        }
        block[..end].copy_from_slice(&mine.as_bytes()[..end]);
        let send: Vec<u8> = block.repeat(x.size());
        let got = x.alltoall(Bytes::from(send), ScheduleKind::Shift).await.ok()?;
        Some(got.iter().map(|b| String::from_utf8_lossy(b).trim_end_matches('\0').to_string()).collect())
    }

    /// What a member's input must fit, for messages.
    fn what(&self) -> &'static str {
        match (&self.redistribute, self.split) {
            (Some(_), _) => "layout (dtype, from_block)",
            (None, Split::Equal) => "dtype",
            (None, Split::Counts) => "counts table",
            (None, Split::File) => "split file",
        }
    }

    /// The table this member's row came from, for the log.
    pub fn describe(&self, table_n: usize) -> String {
        match &self.redistribute {
            Some(l) => match &self.remap {
                Some(r) => format!(
                    "A[{}i+{}] = B[{}i+{}] for {} iterations, B cyclic({}) over {} -> A cyclic({}) over {} ({table_n} members)",
                    r.a1, r.b1, r.a2, r.b2, r.iterations, l.x, l.p, l.y, l.q
                ),
                None => format!("cyclic({}) over {} -> cyclic({}) over {} ({table_n} members)", l.x, l.p, l.y, l.q),
            },
            None => format!("split {} over {table_n} members", self.split),
        }
    }
}

/// The most bytes of a member's reason for refusing that the others are told.
const REASON_BYTES: usize = 512;

/// A data-plane error's text without its "invalid configuration" prefix, for the errors that
/// name a job file's field.
fn plain(e: plexus_dataplane::Error) -> String {
    match e {
        plexus_dataplane::Error::Config(m) => m,
        e => e.to_string(),
    }
}

/// The parts received, in sender order, as one output.
fn concat(parts: &[Bytes]) -> Bytes {
    match parts {
        [one] => one.clone(),
        _ => {
            let mut out = Vec::with_capacity(parts.iter().map(Bytes::len).sum());
            for p in parts {
                out.extend_from_slice(p);
            }
            Bytes::from(out)
        }
    }
}

/// A split file: N counts in elements (decimal, separated by whitespace or commas, `#` starting
/// a comment to the end of the line) adding up to the input's `len` elements.
fn parse_split_file(text: &[u8], n: usize, rank: usize, len: u64) -> Result<Vec<u64>> {
    let bad = |m: String| Error::ExchangeInput(format!("split file of member {rank}: {m}"));
    if text.len() > split_file_limit(n) {
        return Err(bad(format!("{} bytes; N = {n} counts take at most {}", text.len(), split_file_limit(n))));
    }
    let text = std::str::from_utf8(text).map_err(|_| bad("not UTF-8 text".into()))?;
    let mut row = Vec::with_capacity(n);
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        for word in line.split(|c: char| c.is_whitespace() || c == ',').filter(|w| !w.is_empty()) {
            let c: u64 = word.parse().map_err(|_| bad(format!("{word:?} is not a count of elements")))?;
            row.push(c);
            if row.len() > n {
                return Err(bad(format!("more than {n} counts (one per member)")));
            }
        }
    }
    if row.len() != n {
        return Err(bad(format!("{} counts; it needs one per member ({n})", row.len())));
    }
    let sum: u128 = row.iter().map(|&c| u128::from(c)).sum();
    if sum != u128::from(len) {
        return Err(bad(format!("the counts add up to {sum} elements, the input has {len}")));
    }
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_file_is_n_counts_adding_up_to_the_input() {
        assert_eq!(parse_split_file(b"1 2, 3\n# note\n4\n", 4, 0, 10).unwrap(), vec![1, 2, 3, 4]);
        let e = parse_split_file(b"1 2 3", 4, 2, 6).unwrap_err().to_string();
        assert!(e.contains("split file of member 2: 3 counts; it needs one per member (4)"), "{e}");
        let e = parse_split_file(b"1 2 3 x", 4, 0, 6).unwrap_err().to_string();
        assert!(e.contains("\"x\" is not a count"), "{e}");
        let e = parse_split_file(b"1 1", 2, 0, 3).unwrap_err().to_string();
        assert!(e.contains("add up to 2 elements, the input has 3"), "{e}");
        assert!(parse_split_file(&vec![b' '; 10_000], 2, 0, 0).unwrap_err().to_string().contains("bytes"));
        assert!(parse_split_file(b"1 2 3", 2, 0, 6).unwrap_err().to_string().contains("more than 2"));
    }

    #[test]
    fn the_coordinator_description_is_checked() {
        let base = pb::Collective { schedule: "css".into(), split: "equal".into(), ..Default::default() };
        assert!(Exchange::from_pb("alltoall", 3, &base).is_ok());
        let seed = pb::Collective { schedule: "seed".into(), ..base.clone() };
        assert!(Exchange::from_pb("alltoall", 3, &seed).unwrap_err().to_string().contains("only for a redistribute"));
        let counts = pb::Collective { split: "counts".into(), counts: vec![1; 8], ..base.clone() };
        assert!(
            Exchange::from_pb("alltoall", 3, &counts).unwrap_err().to_string().contains("8 counts for a gang of 3")
        );
        let r = pb::Redistribution { senders: 4, from_block: 3, receivers: 3, to_block: 5, remap: None };
        let red = pb::Collective { redistribute: Some(r), ..base.clone() };
        let x = Exchange::from_pb("redistribute", 4, &red).unwrap();
        assert_eq!((x.inputs(3), x.inputs(0), x.kind()), (1, 1, "redistribute"));
        assert!(Exchange::from_pb("redistribute", 5, &red).unwrap_err().to_string().contains("gang of 5"));
        let r = pb::Redistribution { senders: 2, from_block: 3, receivers: 3, to_block: 5, remap: None };
        let x =
            Exchange::from_pb("redistribute", 3, &pb::Collective { redistribute: Some(r), ..base.clone() }).unwrap();
        assert_eq!(x.inputs(2), 0);
        // Seed 004's remapping: the seed's example 1, and a loop that writes past A named.
        let map = |len| pb::AffineMap { a1: 3, b1: 4, a2: 2, b2: 1, iterations: 60, len };
        let red = |len| pb::Collective {
            redistribute: Some(pb::Redistribution {
                senders: 5,
                from_block: 3,
                receivers: 5,
                to_block: 4,
                remap: Some(map(len)),
            }),
            ..base.clone()
        };
        let x = Exchange::from_pb("redistribute", 5, &red(182)).unwrap();
        assert!(x.remap.is_some() && x.describe(5).starts_with("A[3i+4] = B[2i+1] for 60 iterations"));
        let e = Exchange::from_pb("redistribute", 5, &red(100)).unwrap_err().to_string();
        assert!(e.contains("remap: the loop writes A[3·59 + 4] = A[181], but A has 100 elements"), "{e}");
        let zero = pb::Redistribution { senders: 2, from_block: 0, receivers: 3, to_block: 5, remap: None };
        assert!(Exchange::from_pb("redistribute", 3, &pb::Collective { redistribute: Some(zero), ..base }).is_err());
    }
}
