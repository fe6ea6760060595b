//! The command-line syntax of `plexus`: every subcommand and flag, declared with clap's derive
//! API. Job ids and task names are checked here, at parse time, so a malformed one is a usage
//! error with a clear message and never costs a round trip to the coordinator.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use plexus_proto::IdError;

/// A job as named on the command line: its id (`job-` + 32 hex digits), a unique prefix of it
/// (`job-1cb6`, or just `1cb6`), or its name when one job has it. Resolved against the
/// coordinator's job list ([`crate::client::resolve_job`]); only the form is checked here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRef(pub String);

/// The longest job reference accepted (a name is at most this long anyway).
const MAX_JOB_REF: usize = 256;

impl std::str::FromStr for JobRef {
    type Err = String;
    fn from_str(s: &str) -> Result<JobRef, String> {
        if s.is_empty() {
            return Err("an empty job reference: give a job id, a unique prefix of one, or a job's name".into());
        }
        if s.len() > MAX_JOB_REF || s.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(format!("{s:?} is not a job id, prefix or name (at most {MAX_JOB_REF} characters, no spaces)"));
        }
        if s.starts_with("wkr-") {
            return Err(format!("{s:?} is a worker id; expected the prefix \"job-\" (or a job's name)"));
        }
        if let Some(hex) = s.strip_prefix("job-")
            && (hex.len() > 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()))
        {
            return Err(format!("{s:?}: after \"job-\" a job id has up to 32 hex digits"));
        }
        Ok(JobRef(s.to_string()))
    }
}

impl std::fmt::Display for JobRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where the coordinator listens unless told otherwise (the port `plexus up` uses by default).
pub const DEFAULT_COORDINATOR: &str = "127.0.0.1:50051";

#[derive(Debug, Parser)]
#[command(name = "plexus", version, about = "Submit, watch and inspect Plexus jobs, or run a local cluster")]
pub struct Cli {
    /// URL of the coordinator (`https://host:port`; a bare `host:port` means https, or http
    /// with --insecure). With an HA control plane, several separated by commas: the client asks
    /// the first that answers who leads, and goes there. Default: the context's (--context), else
    /// the `plexus up` cluster in ./.plexus, else the current context, else 127.0.0.1:50051.
    #[arg(long, global = true, env = "PLEXUS_COORDINATOR", value_name = "URL")]
    pub coordinator: Option<String>,

    /// The context to use (`plexus context list`): its coordinator, CA, token and dashboard.
    #[arg(long, global = true, env = "PLEXUS_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,

    /// A file holding a token (`plexus token create`). `PLEXUS_TOKEN` may hold the token
    /// itself; without either, a `plexus up` cluster's admin token in ./.plexus is used.
    #[arg(long, global = true, env = "PLEXUS_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// The cluster CA's certificate (ca.pem in the coordinator's data dir); default: a
    /// `plexus up` cluster's in ./.plexus.
    #[arg(long, global = true, env = "PLEXUS_CA", value_name = "FILE")]
    pub ca: Option<PathBuf>,

    /// For a coordinator run with --insecure: plaintext, no token.
    #[arg(long, global = true)]
    pub insecure: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a local cluster (a coordinator and N workers) until Ctrl-C.
    Up(UpArgs),
    /// Submit a job file (TOML, or JSON when it ends in .json); prints the job id.
    Submit(SubmitArgs),
    /// List jobs, or show one job with its task groups (and subtasks).
    Status(StatusArgs),
    /// Submit a job's file again as a new job; prints the new job id.
    Resubmit(ResubmitArgs),
    /// Follow a job until it ends; exits 0 only if it succeeded.
    Watch(WatchArgs),
    /// Print the stdout and stderr of one subtask.
    Logs(LogsArgs),
    /// Download outputs of a job: TASK, TASK/RANK or TASK/RANK/OUTPUT, into DIR/TASK/RANK/OUTPUT.
    Get(GetArgs),
    /// Cancel a job.
    Cancel(CancelArgs),
    /// List the workers known to the coordinator.
    Workers(WorkersArgs),
    /// List the coordinators of the control plane and which one leads (with etcd, several).
    Coordinators(CoordinatorsArgs),
    /// Show why a subtask was placed where it was.
    Explain(ExplainArgs),
    /// Make, list and revoke tokens (needs an admin token).
    #[command(subcommand)]
    Token(TokenCommand),
    /// The clusters the CLI knows by name (`plexus up` adds its own and makes it current).
    #[command(subcommand)]
    Context(ContextCommand),
    /// Queues' shares of the cluster's cores: `set` needs an admin token, `list` any.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Print a shell completion script: `source <(plexus completions bash)`, or write it where
    /// your shell loads completions from (zsh: a file `_plexus` on `$fpath`; fish:
    /// `~/.config/fish/completions/plexus.fish`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a token and print it: the one time it is shown (the coordinator keeps its hash).
    Create {
        #[arg(
            long,
            default_value = plexus_security::tokens::DEFAULT_SCOPE_NAME,
            value_parser = plexus_security::tokens::scope,
            help = plexus_security::tokens::SCOPE_HELP
        )]
        scope: plexus_security::Scope,
        /// A label shown by `plexus token list`.
        #[arg(long, default_value = "")]
        name: String,
        /// Expire after this long, e.g. 30d or 12h (default: never).
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Option<std::time::Duration>,
    },
    /// List tokens: ids, scopes, names and times, never secrets.
    List,
    /// Revoke a token by id (the 12 hex digits after plx_): it stops working at once.
    Revoke { id: String },
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Number of workers to start.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=256))]
    pub workers: u32,
    /// Directory for the cluster's data and logs.
    #[arg(long, default_value = ".plexus")]
    pub dir: PathBuf,
    /// Port of the coordinator on 127.0.0.1; 0 picks a free one.
    #[arg(long, default_value_t = 50051)]
    pub port: u16,
    /// Placement policy of the coordinator (passed on as `--placer`).
    #[arg(long, value_name = "NAME")]
    pub placer: Option<String>,
    /// Cores each worker offers (passed on as `--cpus`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub cpus: Option<u32>,
    /// Object-cache bound of each worker, e.g. `512MiB` (passed on as `--cache`).
    #[arg(long, value_name = "SIZE")]
    pub cache: Option<String>,
    /// The data-plane rails of every worker, comma-separated IP addresses in rail order (each
    /// passed on as `--rail`), e.g. `127.0.0.2,127.0.0.3`: loopback addresses all reach this
    /// machine, so objects are striped over two sockets per peer. Default: 127.0.0.1 alone.
    #[arg(long, value_name = "IP,IP", value_delimiter = ',', num_args = 1..)]
    pub rails: Vec<std::net::IpAddr>,
    /// Who the workers run tasks as (passed on as `--task-user`): `worker` runs them as the
    /// workers' own user (as root: root, e.g. for a Python environment under /root). Default:
    /// the workers' default (as root, a uid per job), or `worker` when the cluster's directory
    /// lies below one other users cannot search.
    #[arg(long, value_name = "USER", value_parser = ["auto", "worker"])]
    pub task_user: Option<String>,
    /// Where the dashboard (and /metrics) listen on 127.0.0.1: a port, 127.0.0.1:PORT, or none.
    /// Default: the port the cluster had before (its URL stays the same across restarts), else
    /// 8265, else any free port.
    #[arg(long, value_name = "PORT|none")]
    pub http: Option<String>,
    /// The name of the context `up` writes for this cluster and makes current (`plexus context`).
    /// Default: the name of the folder that holds --dir.
    #[arg(long, value_name = "NAME")]
    pub context_name: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Every queue with a share, and the cores its attempts hold now.
    List,
    /// Give queue NAME a share of the cluster's cores (0 < SHARE <= 1): over it, the queue waits
    /// while another queue has work; or --clear it (the queue then only orders its jobs).
    Set {
        name: String,
        #[arg(long, required_unless_present = "clear", conflicts_with = "clear")]
        share: Option<f64>,
        #[arg(long)]
        clear: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ContextCommand {
    /// Every context, the current one marked `*`.
    List,
    /// Make NAME the current context.
    Use { name: String },
    /// A context's coordinator, CA, token file and dashboard (default: the current one).
    Show { name: Option<String> },
    /// Add or replace context NAME and make it current (the compose cluster's scripts do).
    Set {
        name: String,
        /// The coordinator's URL (several, comma-separated, for an HA control plane).
        #[arg(long = "to", value_name = "URL")]
        coordinator: String,
        /// The cluster CA's certificate file.
        #[arg(long = "ca-file", value_name = "FILE")]
        ca: Option<std::path::PathBuf>,
        /// A file holding the token to use.
        #[arg(long = "token", value_name = "FILE")]
        token_file: Option<std::path::PathBuf>,
        /// The dashboard's URL.
        #[arg(long, value_name = "URL")]
        dashboard: Option<String>,
    },
    /// Forget context NAME.
    Delete { name: String },
}

#[derive(Debug, Args)]
pub struct CoordinatorsArgs {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The job file.
    pub file: PathBuf,
    /// Start only after this job succeeded (id, unique prefix or name; repeatable); if it fails
    /// or is cancelled, so is the new job. Adds to the file's `after_jobs`.
    #[arg(long = "after", value_name = "JOB")]
    pub after: Vec<JobRef>,
    /// Override a value of the job file (repeatable): a dotted key, a task chosen by name
    /// (`task.train.replicas=8`, `task.train.env.LR=0.3`, `task.train.sweep.lr=[0.1,0.3]`,
    /// `priority=5`); the value is read as TOML, else as text.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Ship this directory with the job (relative to where `plexus` runs), as the file's
    /// `working_dir` would: packed (without what .gitignore and the file's `excludes` leave
    /// out), uploaded unless the coordinator holds it already, and every command runs in it.
    #[arg(long = "working-dir", value_name = "DIR")]
    pub working_dir: Option<PathBuf>,
    /// Follow the job after submitting it, as `plexus watch` does.
    #[arg(long)]
    pub watch: bool,
    /// With --watch (which it implies): stream the output of this task's subtask as it runs,
    /// TASK (rank 0) or TASK/RANK, instead of progress bars; the job's last line follows it.
    #[arg(long, value_name = "TASK[/RANK]", value_parser = logs_selection)]
    pub logs: Option<(String, u32)>,
    /// Check the job and say what it would do now — for each task, how many replicas would start
    /// and where, or why they would wait; what is ahead of it in its queue — without storing
    /// anything (a working_dir is packed, not uploaded).
    #[arg(long, conflicts_with_all = ["watch", "logs"])]
    pub dry_run: bool,
}

/// `TASK` or `TASK/RANK` of `submit --logs`.
fn logs_selection(s: &str) -> Result<(String, u32), String> {
    let (task, rank) = match s.split_once('/') {
        Some((t, r)) => (t, r.parse::<u32>().map_err(|_| format!("{r:?} is not a rank (TASK/RANK, e.g. train/0)"))?),
        None => (s, 0),
    };
    plexus_proto::ids::check_task_name(task).map_err(|e| e.to_string())?;
    Ok((task.to_string(), rank))
}

#[derive(Debug, Args)]
pub struct GetArgs {
    pub job: JobRef,
    /// TASK (every rank and output), TASK/RANK, or TASK/RANK/OUTPUT.
    pub what: String,
    /// Where to write them (as DIR/TASK/RANK/OUTPUT).
    #[arg(short = 'o', long = "output-dir", default_value = ".")]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct ResubmitArgs {
    /// The job whose file is submitted again (id, unique id prefix, or name).
    pub job: JobRef,
    /// Follow the new job, as `plexus watch` does.
    #[arg(long)]
    pub watch: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum OutputFormat {
    /// A table that fits 100 columns: short ids, the columns that matter most.
    #[default]
    Table,
    /// The table with every column and full ids.
    Wide,
    Json,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The job (id, unique id prefix, or name); without it, jobs are listed.
    pub job: Option<JobRef>,
    /// List only jobs in this state.
    #[arg(long, value_enum)]
    pub state: Option<StateFilter>,
    /// List only jobs whose name contains this.
    #[arg(long)]
    pub name: Option<String>,
    /// List at most this many jobs, the newest.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: OutputFormat,
    /// Also show one row per subtask (always included in JSON).
    #[arg(long)]
    pub subtasks: bool,
}

/// Job states `plexus status --state` filters by: `pending` (nothing of it started yet),
/// `blocked` (waiting for its after_jobs), `running`, and the ended ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StateFilter {
    Pending,
    Blocked,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    CompletedWithFailures,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    pub job: JobRef,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    pub job: JobRef,
    #[arg(value_parser = task_name)]
    pub task: String,
    /// Which replica of the task.
    #[arg(long, default_value_t = 0, conflicts_with = "all_ranks")]
    pub rank: u32,
    /// Every replica's logs, one after another, each under a `==> task/rank <==` header.
    #[arg(long)]
    pub all_ranks: bool,
    /// Which attempt (1 is the first; default: the latest that ran).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub attempt: Option<u32>,
    /// Keep printing what the subtask writes until it ends (a retry's output follows under a
    /// header); rides through a coordinator restart.
    #[arg(short = 'f', long, conflicts_with = "all_ranks")]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    pub job: JobRef,
}

#[derive(Debug, Args)]
pub struct WorkersArgs {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: OutputFormat,
    /// Also a table of each worker's data-plane rails: address and bytes sent and received on
    /// each since the worker started (as of its last heartbeat).
    #[arg(long)]
    pub rails: bool,
    /// Only the cluster's summary: how many workers, alive, lost and draining, and the cores,
    /// memory and GPUs they hold and offer (one request, whatever the cluster's size).
    #[arg(long, conflicts_with = "rails")]
    pub summary: bool,
    /// Workers asked for per request: a cluster of thousands comes in pages of this many, each
    /// well within a gRPC message (the coordinator builds one page at a time).
    #[arg(long, hide = true, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub page_size: u32,
    #[command(subcommand)]
    pub action: Option<WorkersAction>,
}

/// What to do to one worker (admin token). WORKER is its id, a unique prefix of it (the NAME
/// column of `plexus workers`, or fewer digits), or its host name when one worker has it.
#[derive(Debug, Subcommand)]
pub enum WorkersAction {
    /// Place nothing new on the worker; what runs there finishes.
    Drain { worker: String },
    /// Take work on the worker again.
    Undrain { worker: String },
    /// Forget a lost worker (its record and what it held); a live one is refused.
    Remove { worker: String },
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    pub job: JobRef,
    #[arg(value_parser = task_name)]
    pub task: String,
    /// Which replica of the task.
    #[arg(long, default_value_t = 0)]
    pub rank: u32,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// Checks a task name the way the coordinator does, so typos fail before any call.
fn task_name(s: &str) -> Result<String, IdError> {
    plexus_proto::ids::check_task_name(s)?;
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    const JOB: &str = "job-0123456789abcdef0123456789abcdef";

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("plexus").chain(args.iter().copied()))
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn up_defaults_and_flags() {
        let Command::Up(a) = parse(&["up"]).unwrap().command else { panic!("not up") };
        assert_eq!((a.workers, a.port), (3, 50051));
        assert_eq!(a.dir, PathBuf::from(".plexus"));
        assert!(a.placer.is_none() && a.cpus.is_none() && a.cache.is_none());

        let cli = parse(&[
            "up",
            "--workers",
            "5",
            "--dir",
            "/tmp/x",
            "--port",
            "0",
            "--placer",
            "greedy",
            "--cpus",
            "2",
            "--cache",
            "64MiB",
        ])
        .unwrap();
        let Command::Up(a) = cli.command else { panic!("not up") };
        assert_eq!((a.workers, a.port, a.cpus), (5, 0, Some(2)));
        assert_eq!(a.placer.as_deref(), Some("greedy"));
        assert_eq!(a.cache.as_deref(), Some("64MiB"));
        assert_eq!(a.dir, PathBuf::from("/tmp/x"));

        assert_eq!(parse(&["up", "--cpus", "0"]).unwrap_err().kind(), ErrorKind::ValueValidation);
        assert_eq!(parse(&["up", "--port", "70000"]).unwrap_err().kind(), ErrorKind::ValueValidation);
    }

    #[test]
    fn coordinator_flag_is_global() {
        let cli = parse(&["workers", "--coordinator", "http://h:1"]).unwrap();
        assert_eq!(cli.coordinator.as_deref(), Some("http://h:1"));
        let cli = parse(&["--coordinator", "http://h:2", "status"]).unwrap();
        assert_eq!(cli.coordinator.as_deref(), Some("http://h:2"));
    }

    #[test]
    fn submit_and_watch() {
        let Command::Submit(a) = parse(&["submit", "job.toml", "--watch"]).unwrap().command else { panic!() };
        assert_eq!(a.file, PathBuf::from("job.toml"));
        assert!(a.watch);
        assert_eq!(parse(&["submit"]).unwrap_err().kind(), ErrorKind::MissingRequiredArgument);
        let Command::Watch(a) = parse(&["watch", JOB]).unwrap().command else { panic!() };
        assert_eq!(a.job.to_string(), JOB);
    }

    #[test]
    fn status_forms() {
        let Command::Status(a) = parse(&["status"]).unwrap().command else { panic!() };
        assert!(a.job.is_none() && !a.subtasks);
        assert_eq!(a.output, OutputFormat::Table);
        let Command::Status(a) = parse(&["status", JOB, "-o", "json", "--subtasks"]).unwrap().command else { panic!() };
        assert_eq!(a.job.unwrap().to_string(), JOB);
        assert_eq!(a.output, OutputFormat::Json);
        assert!(a.subtasks);
        assert_eq!(parse(&["status", "-o", "yaml"]).unwrap_err().kind(), ErrorKind::InvalidValue);
    }

    #[test]
    fn malformed_job_references_are_usage_errors_naming_the_problem() {
        let err = parse(&["watch", "wkr-0123456789abcdef0123456789abcdef"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ValueValidation);
        assert!(err.to_string().contains("expected the prefix \"job-\""), "{err}");
        let err = parse(&["cancel", "job-12x"]).unwrap_err();
        assert!(err.to_string().contains("32 hex digits"), "{err}");
        let err = parse(&["cancel", "job-0123456789abcdef0123456789abcdef0"]).unwrap_err();
        assert!(err.to_string().contains("32 hex digits"), "{err}");
        assert!(parse(&["cancel", ""]).unwrap_err().to_string().contains("empty job reference"));
        assert!(parse(&["cancel", "a b"]).unwrap_err().to_string().contains("no spaces"));
        // Prefixes and names are accepted as written; the coordinator's list resolves them.
        let Command::Cancel(a) = parse(&["cancel", "job-1cb6"]).unwrap().command else { panic!() };
        assert_eq!(a.job, JobRef("job-1cb6".into()));
        let Command::Cancel(a) = parse(&["cancel", "nightly-etl"]).unwrap().command else { panic!() };
        assert_eq!(a.job.0, "nightly-etl");
    }

    #[test]
    fn status_filters() {
        let Command::Status(a) =
            parse(&["status", "--state", "running", "--name", "etl", "--limit", "5"]).unwrap().command
        else {
            panic!()
        };
        assert_eq!((a.state, a.name.as_deref(), a.limit), (Some(StateFilter::Running), Some("etl"), Some(5)));
        assert_eq!(parse(&["status", "--state", "sleeping"]).unwrap_err().kind(), ErrorKind::InvalidValue);
    }

    #[test]
    fn logs_and_explain() {
        let Command::Logs(a) = parse(&["logs", JOB, "gen"]).unwrap().command else { panic!() };
        assert_eq!((a.task.as_str(), a.rank), ("gen", 0));
        let Command::Logs(a) = parse(&["logs", JOB, "gen", "--rank", "7"]).unwrap().command else { panic!() };
        assert_eq!(a.rank, 7);
        let err = parse(&["logs", JOB, "a/b"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ValueValidation);
        let Command::Explain(a) = parse(&["explain", JOB, "sum", "--rank", "2", "-o", "json"]).unwrap().command else {
            panic!()
        };
        assert_eq!((a.task.as_str(), a.rank, a.output), ("sum", 2, OutputFormat::Json));
    }

    #[test]
    fn workers_and_cancel() {
        let Command::Workers(a) = parse(&["workers", "-o", "json"]).unwrap().command else { panic!() };
        assert_eq!(a.output, OutputFormat::Json);
        assert!(matches!(parse(&["cancel", JOB]).unwrap().command, Command::Cancel(_)));
        assert_eq!(parse(&["frobnicate"]).unwrap_err().kind(), ErrorKind::InvalidSubcommand);
    }
}
