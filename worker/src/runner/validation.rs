//! The validation stage: an assignment from the network becomes a [`Work`] only when everything
//! in it that will become a path, an argument or an environment variable is checked.

use std::net::SocketAddr;
use std::time::Duration;

use plexus_proto::ids::{check_output_name, check_task_name};
use plexus_proto::rules::{MAX_PARAM_VALUE_LEN, MAX_PARAMS, check_env_key, is_collective, param_key_ok, parse_rails};
use plexus_proto::{Algorithm, AttemptRef, DType, Digest, ObjectId, ReduceOp, convert, pb};

use crate::error::{Error, Result};
use crate::exchange::Exchange;
use crate::peer;

/// A validated assignment: a command, or a collective member.
#[derive(Debug, Clone)]
pub struct Work {
    pub attempt: AttemptRef,
    pub replicas: u32,
    /// The command; empty for a collective member.
    pub argv: Vec<String>,
    /// Set for the collective kinds: the member's part, run inside the worker.
    pub collective: Option<CollectiveWork>,
    /// `None`: no limit.
    pub timeout: Option<Duration>,
    pub inputs: Vec<Input>,
    pub outputs: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Requested cores (the cgroup's cpu limit, and the thread count libraries are told).
    pub cpu: f64,
    /// Requested bytes (the cgroup's memory limit); 0 = none.
    pub memory: u64,
    /// The GPU device indices that are this attempt's alone.
    pub gpus: Vec<u32>,
    /// Set for a member of a `communicator = true` gang: it gets the collective endpoint.
    pub gang: Option<GangWork>,
    /// The replica's sweep parameters (`PLEXUS_PARAM_<KEY>`), by key.
    pub params: Vec<(String, String)>,
    /// The task's `checkpoint` output (one of `outputs`), kept when the attempt fails.
    pub checkpoint: Option<String>,
    /// The subtask's checkpoint kept from an earlier attempt (not among `inputs`: an attempt
    /// that cannot fetch it runs without it).
    pub resume: Option<Input>,
    /// The job's working dir: its archive's digest and size. A command runs in it.
    pub working_dir: Option<(Digest, u64)>,
    /// The requirements of the Python environment a command runs with (empty: none).
    pub python: Vec<String>,
    /// The container image a command runs in.
    pub image: Option<String>,
}

/// A command gang member's communicator: every member's rails, the gang's tag base, and the
/// secret its task proves itself with on the collective endpoint (random per attempt).
#[derive(Debug, Clone)]
pub struct GangWork {
    pub members: Vec<Vec<SocketAddr>>,
    pub tag: u64,
    pub secret: String,
}

impl GangWork {
    fn from_pb(rank: u32, c: pb::Collective) -> Result<GangWork> {
        let members = member_rails(&c, rank, "gang")?;
        Ok(GangWork { members, tag: c.tag, secret: uuid::Uuid::new_v4().simple().to_string() })
    }
}

/// Every member's rails of communicator `c` (a `what`: "gang" or "collective"), in rank order;
/// an error when one has none or `rank` is not among them.
fn member_rails(c: &pb::Collective, rank: u32, what: &str) -> Result<Vec<Vec<SocketAddr>>> {
    let invalid = |m: String| Error::InvalidAssignment(m);
    let members = c
        .members
        .iter()
        .enumerate()
        .map(|(r, m)| match parse_rails(&m.rails) {
            Ok(rails) if !rails.is_empty() => Ok(rails),
            Ok(_) => Err(invalid(format!("{what} member {r} has no rails"))),
            Err(e) => Err(invalid(format!("{what} member {r}: {e}"))),
        })
        .collect::<Result<Vec<_>>>()?;
    if rank as usize >= members.len() {
        return Err(invalid(format!("rank {rank} is not a member of a {what} of {}", members.len())));
    }
    Ok(members)
}

/// A collective member's part: what it reduces and with whom.
#[derive(Debug, Clone)]
pub struct CollectiveWork {
    /// `None`: allreduce (every member writes the result); `Some(root)`: reduce to `root` (the
    /// other members write an empty output).
    pub root: Option<usize>,
    pub dtype: DType,
    pub op: ReduceOp,
    pub algorithm: Algorithm,
    /// Every member's data-plane rails, in rank order; this member is `attempt.rank`.
    pub members: Vec<Vec<SocketAddr>>,
    pub tag: u64,
    /// Set for `alltoall` and `redistribute`, which exchange rather than reduce.
    pub exchange: Option<Exchange>,
}

impl CollectiveWork {
    fn from_pb(kind: &str, rank: u32, c: Option<pb::Collective>) -> Result<CollectiveWork> {
        let invalid = |m: String| Error::InvalidAssignment(m);
        let c = c.ok_or_else(|| invalid(format!("a {kind} assignment without its communicator")))?;
        let members = member_rails(&c, rank, "collective")?;
        let root = match kind {
            "reduce" if c.root as usize >= members.len() => {
                return Err(invalid(format!(
                    "reduce root {} is not a member of a collective of {}",
                    c.root,
                    members.len()
                )));
            }
            "reduce" => Some(c.root as usize),
            _ => None,
        };
        // The names are parsed with the enums of `plexus_proto::collective`, which the data plane
        // re-exports: one spelling of each name across job files, coordinator, worker and wire.
        let named = |field: &'static str| move |source| Error::CollectiveName { field, source };
        let exchange = match kind {
            "alltoall" | "redistribute" => Some(Exchange::from_pb(kind, members.len(), &c)?),
            _ => None,
        };
        let reducing = exchange.is_none();
        Ok(CollectiveWork {
            root,
            dtype: c.dtype.parse().map_err(named("dtype"))?,
            op: if reducing { c.op.parse().map_err(named("op"))? } else { ReduceOp::Sum },
            algorithm: if reducing { c.algorithm.parse().map_err(named("algorithm"))? } else { Algorithm::Halving },
            members,
            tag: c.tag,
            exchange,
        })
    }
}

/// A validated input object and where it goes under `$PLEXUS_IN`.
#[derive(Debug, Clone)]
pub struct Input {
    pub id: ObjectId,
    pub task: String,
    pub rank: u32,
    pub name: String,
    /// Workers holding it, best first.
    pub holders: Vec<peer::Source>,
    /// Its size as the assignment gives it; 0 when the coordinator does not know it (it sends 0
    /// for an output whose size no report gave). A holder announcing another size is refused.
    pub size: u64,
    /// Its digest as its producer reported it (`None`: not known). A copy that hashes to
    /// another is refused.
    pub digest: Option<Digest>,
}

impl Input {
    /// The size a holder must announce and the digest its copy must have, when known.
    pub(super) fn expected(&self) -> peer::Expected {
        peer::Expected { size: (self.size > 0).then_some(self.size), digest: self.digest }
    }
}

impl Work {
    /// Checks everything in a command assignment that will become a path, an argument or an
    /// environment variable.
    pub fn from_pb(attempt: AttemptRef, mut a: pb::Assignment) -> Result<Work> {
        let invalid = |m: String| Err(Error::InvalidAssignment(m));
        let mut gang = None;
        let collective = if is_collective(&a.kind) {
            let c = CollectiveWork::from_pb(&a.kind, attempt.rank, a.collective.take())?;
            let inputs = c.exchange.as_ref().map_or(1, |x| x.inputs(attempt.rank as usize));
            if a.inputs.len() != inputs || a.outputs.len() != 1 {
                return invalid(format!(
                    "a {} member of rank {} needs {inputs} input(s) and one output, not {} and {}",
                    a.kind,
                    attempt.rank,
                    a.inputs.len(),
                    a.outputs.len()
                ));
            }
            Some(c)
        } else {
            match a.command.first() {
                None => return invalid("it has neither a command nor a built-in kind".into()),
                Some(p) if p.is_empty() => return invalid("the program name (command[0]) is empty".into()),
                Some(_) => {}
            }
            gang = a.collective.take().map(|c| GangWork::from_pb(attempt.rank, c)).transpose()?;
            None
        };
        if let Some(arg) = a.command.iter().find(|s| s.contains('\0')) {
            return invalid(format!("command argument {arg:?} contains a NUL byte"));
        }
        let outputs = outputs_from_pb(a.outputs)?;
        let mut inputs = a.inputs.into_iter().map(input_from_pb).collect::<Result<Vec<_>>>()?;
        let checkpoint = checkpoint_from_pb(a.checkpoint, &outputs, collective.is_some())?;
        let resume = resume_from_pb(&a.resume, checkpoint.as_deref(), &attempt, &mut inputs)?;
        let env = env_from_pb(a.env)?;
        let params = params_from_pb(a.params)?;
        let res = a.resources.unwrap_or_default();
        if a.gpus.len() != res.gpu as usize {
            return invalid(format!(
                "it asks for {} GPUs but is given {} devices ({:?})",
                res.gpu,
                a.gpus.len(),
                a.gpus
            ));
        }
        if let Some(i) = a.gpus.iter().enumerate().find_map(|(n, g)| a.gpus[..n].contains(g).then_some(*g)) {
            return invalid(format!("GPU {i} is given twice"));
        }
        // Checked again here: these reach pip and the container runtime as arguments.
        plexus_proto::runtime_env::check_requirements(&a.python)
            .map_err(|e| Error::InvalidAssignment(format!("python{e}")))?;
        let image = (!a.image.is_empty()).then_some(a.image);
        if let Some(i) = &image {
            plexus_proto::runtime_env::check_image(i)
                .map_err(|e| Error::InvalidAssignment(format!("image {i:?}: {e}")))?;
        }
        if collective.is_some() && (image.is_some() || !a.python.is_empty()) {
            return invalid("a built-in collective runs no command: it takes no python or image".into());
        }
        Ok(Work {
            attempt,
            replicas: a.replicas,
            argv: if collective.is_some() { Vec::new() } else { a.command },
            collective,
            timeout: (a.timeout_ms > 0).then(|| Duration::from_millis(a.timeout_ms)),
            inputs,
            outputs,
            env,
            cpu: if res.cpu.is_finite() && res.cpu > 0.0 { res.cpu } else { 0.0 },
            memory: res.memory,
            gpus: a.gpus,
            gang,
            params,
            checkpoint,
            resume,
            working_dir: Digest::from_field("working_dir", &a.working_dir)?.map(|d| (d, a.working_dir_size)),
            python: a.python,
            image,
        })
    }
}

/// The replica's sweep parameters, sorted by key, each key and value within the rules (they
/// become `PLEXUS_PARAM_<KEY>` in the child's environment).
fn params_from_pb(params: impl IntoIterator<Item = (String, String)>) -> Result<Vec<(String, String)>> {
    let mut params: Vec<(String, String)> = params.into_iter().collect();
    params.sort();
    if params.len() > MAX_PARAMS {
        return Err(Error::InvalidAssignment(format!("{} sweep parameters: at most {MAX_PARAMS}", params.len())));
    }
    for (k, v) in &params {
        if !param_key_ok(k) {
            let shown: String = k.chars().take(64).collect();
            return Err(Error::InvalidAssignment(format!("sweep parameter key {shown:?} is not a valid name")));
        }
        if v.len() > MAX_PARAM_VALUE_LEN || v.contains('\0') {
            return Err(Error::InvalidAssignment(format!(
                "sweep parameter {k}: a value over {MAX_PARAM_VALUE_LEN} bytes or holding a NUL"
            )));
        }
    }
    Ok(params)
}

/// The declared outputs: each a valid name, none twice.
fn outputs_from_pb(names: Vec<String>) -> Result<Vec<String>> {
    let mut outputs: Vec<String> = Vec::with_capacity(names.len());
    for name in names {
        check_output_name(&name)?;
        if outputs.contains(&name) {
            return Err(Error::InvalidAssignment(format!("output {name:?} is declared twice")));
        }
        outputs.push(name);
    }
    Ok(outputs)
}

/// The `checkpoint` output: one of a command's `outputs` (empty: none).
fn checkpoint_from_pb(name: String, outputs: &[String], collective: bool) -> Result<Option<String>> {
    if name.is_empty() {
        return Ok(None);
    }
    if collective || !outputs.contains(&name) || name.len() > plexus_proto::ids::MAX_CHECKPOINT_NAME {
        return Err(Error::InvalidAssignment(format!(
            "checkpoint {name:?} is not one of a command's outputs (of at most {} characters)",
            plexus_proto::ids::MAX_CHECKPOINT_NAME
        )));
    }
    Ok(Some(name))
}

/// The input `resume` names (empty: none), taken out of `inputs`: a kept copy of `checkpoint`
/// from an earlier attempt of the same subtask.
fn resume_from_pb(
    resume: &str,
    checkpoint: Option<&str>,
    a: &AttemptRef,
    inputs: &mut Vec<Input>,
) -> Result<Option<Input>> {
    if resume.is_empty() {
        return Ok(None);
    }
    let id = convert::object_id("resume", resume)?;
    let earlier =
        checkpoint.and_then(|c| plexus_proto::ids::kept_checkpoint_attempt(&id.name, c)).is_some_and(|n| n < a.attempt);
    if id.job != a.job || id.task != a.task || id.rank != a.rank || !earlier {
        return Err(Error::InvalidAssignment(format!(
            "resume {id} is not a kept checkpoint of an earlier attempt of {a}"
        )));
    }
    match inputs.iter().position(|i| i.id == id) {
        Some(i) => Ok(Some(inputs.remove(i))),
        None => Err(Error::InvalidAssignment(format!("resume {id} is not one of its inputs"))),
    }
}

/// One input: its object id, where it goes under `$PLEXUS_IN`, and who holds it.
fn input_from_pb(i: pb::InputObject) -> Result<Input> {
    let id = convert::object_id("inputs.object_id", &i.object_id)?;
    // The layout under $PLEXUS_IN comes from the input's own task/rank/name; when the
    // coordinator leaves them empty, the object id's components are used.
    let (task, rank) = if i.task.is_empty() { (id.task.clone(), id.rank) } else { (i.task, i.rank) };
    let name = if i.name.is_empty() { id.name.clone() } else { i.name };
    check_task_name(&task)?;
    check_output_name(&name)?;
    // `sources` carries each holder's rails; a coordinator that sends only `holders`
    // gets the gRPC path. Rail addresses that do not parse are dropped with the rails
    // path for that holder, not the input.
    let holders = if i.sources.is_empty() {
        i.holders
            .into_iter()
            .map(|peer_addr| peer::Source { worker: String::new(), peer_addr, rails: vec![] })
            .collect()
    } else {
        i.sources
            .into_iter()
            .map(|h| peer::Source {
                worker: h.worker_id,
                rails: parse_rails(&h.rails).unwrap_or_default(),
                peer_addr: h.peer_addr,
            })
            .collect()
    };
    let digest = Digest::from_field("inputs.digest", &i.digest)?;
    Ok(Input { id, task, rank, name, holders, size: i.size, digest })
}

/// The job's environment, sorted by key, each key and value checked.
fn env_from_pb(env: impl IntoIterator<Item = (String, String)>) -> Result<Vec<(String, String)>> {
    let mut env: Vec<(String, String)> = env.into_iter().collect();
    env.sort();
    // The coordinator refuses these at submit; the worker checks again rather than trust
    // the network with what becomes its child's environment.
    for (k, _) in &env {
        check_env_key(k).map_err(Error::AssignmentRule)?;
    }
    if let Some((k, _)) = env.iter().find(|(_, v)| v.contains('\0')) {
        return Err(Error::InvalidAssignment(format!("environment variable {k} contains a NUL byte")));
    }
    Ok(env)
}
