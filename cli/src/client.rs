//! Connecting to the coordinator, and turning every failure into the one line the user sees.
//!
//! Two kinds of failure matter to a user: the coordinator said no (a `tonic::Status` it sent,
//! shown by its message alone), and the coordinator could not be reached (shown with the URL and
//! the underlying cause). Everything else is rendered from the anyhow chain, on one line.

use std::error::Error as _;
use std::fmt;
use std::time::Duration;

use std::path::{Path, PathBuf};

use plexus_proto::pb::job_service_client::JobServiceClient;
use plexus_security::Token;
use plexus_security::tls::Bearer;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// How long to wait for a TCP connection to the coordinator before giving up.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// While a call is in flight, the coordinator is pinged after this long without data, and the
/// call fails if the ping is not answered within as long again.
const KEEPALIVE: Duration = Duration::from_secs(10);

// Responses such as a large job with every subtask, or a 1 MiB log tail of each stream, can
// exceed tonic's 4 MiB default: the clients use the one message-size policy of the cluster.
use plexus_proto::rules::MAX_MESSAGE;

/// Every call goes through [`RetryShed`](crate::retry::RetryShed): a coordinator shedding load
/// is retried, within a budget.
pub type Client = JobServiceClient<InterceptedService<crate::retry::RetryShed<Channel>, Bearer>>;

/// Where `plexus up` keeps its cluster by default: the CLI looks there for the CA and the admin
/// token when it is given neither.
pub const UP_DIR: &str = ".plexus";

/// A coordinator and how to talk to it: TLS checked against the cluster CA, and a bearer token.
#[derive(Clone, Debug)]
pub struct Target {
    pub url: String,
    /// The CA certificate (PEM); `None` with `--insecure`.
    pub ca: Option<String>,
    pub token: Option<Token>,
}

/// Where the credentials come from, as the command line and environment say.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    pub insecure: bool,
    pub ca_file: Option<PathBuf>,
    pub token_file: Option<PathBuf>,
    /// `$PLEXUS_TOKEN`.
    pub token: Option<String>,
}

impl Target {
    /// Resolves the credentials: the token from `$PLEXUS_TOKEN`, else `--token-file`, else the
    /// admin token of a `plexus up` cluster in `./.plexus`; the CA from `--ca` / `$PLEXUS_CA`,
    /// else that cluster's. A missing token is not an error here: the coordinator says whether
    /// a call needs one.
    pub fn resolve(url: &str, sources: &Sources) -> anyhow::Result<Target> {
        let url =
            url.split(',').map(|u| normalise_url(u, sources.insecure)).collect::<anyhow::Result<Vec<_>>>()?.join(",");
        if sources.insecure {
            return Ok(Target { url, ca: None, token: None });
        }
        let up = Path::new(UP_DIR).join("coordinator");
        let read = |p: &Path, what: &str| {
            std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("cannot read {what} {}: {e}", p.display()))
        };
        let token_text = match (&sources.token, &sources.token_file) {
            (Some(t), _) if !t.trim().is_empty() => Some(t.clone()),
            (_, Some(f)) => {
                warn_if_shared(f);
                Some(read(f, "the token file")?)
            }
            _ => std::fs::read_to_string(up.join("admin.token")).ok(),
        };
        let token = token_text.map(|t| Token::parse(&t)).transpose().map_err(|e| anyhow::anyhow!("the token: {e}"))?;
        let ca = match &sources.ca_file {
            Some(f) => {
                let bytes = std::fs::read(f)
                    .map_err(|e| anyhow::anyhow!("cannot read the CA certificate {}: {e}", f.display()))?;
                let pem = String::from_utf8(bytes).unwrap_or_default();
                plexus_security::pki::pem_to_der(&pem).map_err(|e| {
                    anyhow::anyhow!(
                        "the CA certificate {} is not a PEM certificate ({e}): pass the cluster's ca.pem (--ca FILE or PLEXUS_CA)",
                        f.display()
                    )
                })?;
                Some(pem)
            }
            None => std::fs::read_to_string(up.join("ca.pem")).ok(),
        };
        Ok(Target { url, ca, token })
    }

    /// The target of a `plexus up` cluster whose coordinator keeps its data in `dir`.
    pub fn of_up(url: String, dir: &Path) -> anyhow::Result<Target> {
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).with_context_msg(dir.join(name));
        let token = Token::parse(&read("admin.token")?)
            .map_err(|e| anyhow::anyhow!("{}: {e}", dir.join("admin.token").display()))?;
        Ok(Target { url, ca: Some(read("ca.pem")?), token: Some(token) })
    }
}

/// The coordinator to talk to when `coordinator` (`--coordinator`/`PLEXUS_COORDINATOR`) is not
/// given, first found: the context `context` names (`--context`/`PLEXUS_CONTEXT`), the `plexus
/// up` cluster in `./.plexus` (its URL file), the current context, `127.0.0.1:50051`. A context
/// also gives its CA and token file to `sources`, unless they were given.
pub fn pick_coordinator(
    coordinator: Option<&str>,
    context: Option<&str>,
    sources: &mut Sources,
) -> anyhow::Result<String> {
    if let Some(url) = coordinator {
        return Ok(url.to_string());
    }
    let use_context = |name: &str, all: &crate::context::Contexts, sources: &mut Sources| -> anyhow::Result<String> {
        let c = all.get(name)?;
        sources.ca_file = sources.ca_file.take().or_else(|| c.ca.clone());
        sources.token_file = sources.token_file.take().or_else(|| c.token_file.clone());
        Ok(c.coordinator.clone())
    };
    let load = || match crate::context::file() {
        Some(f) => crate::context::Contexts::load(&f),
        None => Ok(crate::context::Contexts::default()),
    };
    if let Some(name) = context {
        return use_context(name, &load()?, sources);
    }
    if let Ok(url) = std::fs::read_to_string(crate::context::up_url_file(Path::new(UP_DIR))) {
        return Ok(url.trim().to_string());
    }
    let all = load()?;
    match all.current.clone() {
        Some(name) => use_context(&name, &all, sources),
        None => Ok(crate::args::DEFAULT_COORDINATOR.to_string()),
    }
}

/// Warns (on stderr, once) when the token file `path` can be read by its group or by others:
/// whoever can read it can act as its holder.
fn warn_if_shared(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        eprintln!(
            "warning: the token file {} can be read by other users (mode {:o}); make it owner-only: chmod 600 {}",
            path.display(),
            meta.permissions().mode() & 0o777,
            path.display()
        );
    }
}

trait ReadContext<T> {
    fn with_context_msg(self, path: PathBuf) -> anyhow::Result<T>;
}

impl<T> ReadContext<T> for std::io::Result<T> {
    fn with_context_msg(self, path: PathBuf) -> anyhow::Result<T> {
        self.map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))
    }
}

/// The coordinator did not answer at all.
#[derive(Debug)]
pub struct Unreachable {
    pub url: String,
    pub cause: String,
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if is_certificate_failure(&self.cause) {
            // It answered, with a certificate of another cluster: the CA is wrong, not the URL.
            return write!(
                f,
                "the coordinator at {} presented a certificate that the CA given did not sign ({}): pass the ca.pem of that coordinator's cluster (--ca FILE or PLEXUS_CA)",
                self.url, self.cause
            );
        }
        write!(
            f,
            "cannot reach the coordinator at {}: {} (is it running? start one with `plexus up`, or point at it with --coordinator URL or PLEXUS_COORDINATOR)",
            self.url, self.cause
        )
    }
}

/// A TLS failure over the coordinator's certificate (rustls's and BoringSSL's words).
fn is_certificate_failure(cause: &str) -> bool {
    ["UnknownIssuer", "invalid peer certificate", "CERTIFICATE_VERIFY_FAILED"].iter().any(|w| cause.contains(w))
}

impl std::error::Error for Unreachable {}

/// Adds `https://` (`http://` when `insecure`) to a bare `host:port`, the form people type
/// most. An empty value (an exported but empty `PLEXUS_COORDINATOR`) and a scheme other than
/// http(s) are refused: they would otherwise mean a coordinator nobody asked for. A scheme that
/// contradicts `insecure` is an error that says which flag to change.
pub fn normalise_url(url: &str, insecure: bool) -> anyhow::Result<String> {
    let url = url.trim();
    let scheme = if insecure { "http" } else { "https" };
    if url.is_empty() {
        anyhow::bail!(
            "the coordinator URL is empty (--coordinator, or PLEXUS_COORDINATOR set but empty): give HOST:PORT or {scheme}://HOST:PORT, or unset PLEXUS_COORDINATOR for {}",
            crate::args::DEFAULT_COORDINATOR
        );
    }
    let url = match url.split_once("://") {
        Some(("http" | "https", rest)) if !rest.is_empty() => url.to_string(),
        Some((other, _)) => {
            anyhow::bail!(
                "the coordinator URL {url:?} is not http(s) (scheme {other:?}): give HOST:PORT or {scheme}://HOST:PORT"
            )
        }
        None => format!("{scheme}://{url}"),
    };
    if !insecure && url.starts_with("http://") {
        anyhow::bail!(
            "the coordinator URL {url} is plaintext http: write https:// (the default), or pass --insecure for a coordinator run with --insecure"
        );
    }
    if insecure && url.starts_with("https://") {
        anyhow::bail!("the coordinator URL {url} is https, and --insecure turns TLS off: write http://");
    }
    Ok(url)
}

/// Connects eagerly, so an unreachable coordinator is reported as such before any call. The
/// URL may list several coordinators (an HA control plane), separated by commas: the first that
/// answers is asked who leads, and the client goes to the leader's advertised URL; when that does
/// not answer from here (a name only a container network resolves), the next URLs of the list are
/// tried in turn until one leads. No leader reached: the first standby, whose refusals name it.
pub async fn connect(target: &Target) -> anyhow::Result<Client> {
    let mut last = None;
    // A standby reached first, kept in case no URL reaches the leader: its refusals name it.
    let mut standby = None;
    for url in target.url.split(',') {
        let mut client = match connect_one(target, url).await {
            Ok(client) => client,
            Err(e) => {
                last = Some(e);
                continue;
            }
        };
        match leader_of(&mut client).await {
            // Connected, and then no answer (a frozen coordinator fails the call by keepalive):
            // the next URL may answer.
            Leader::Gone(why) => {
                last = Some(Unreachable { url: url.trim().to_string(), cause: why }.into());
            }
            Leader::Me | Leader::Unknown => return Ok(client),
            Leader::Other(leader) => {
                if leader != url.trim()
                    && let Ok(client) = connect_one(target, &leader).await
                {
                    return Ok(client);
                }
                // The leader's advertised URL does not reach it from here (e.g. a name inside a
                // container network): the other URLs given may.
                standby.get_or_insert(client);
            }
            Leader::None => {
                standby.get_or_insert(client);
            }
        }
    }
    match standby {
        Some(client) => Ok(client),
        None => Err(last.unwrap_or_else(|| anyhow::anyhow!("no coordinator URL given"))),
    }
}

/// Who leads, as the coordinator behind `client` says.
enum Leader {
    /// It does (or there is only one coordinator).
    Me,
    /// Another one, at this URL.
    Other(String),
    /// None yet: an election is under way.
    None,
    /// It cannot say (an older coordinator without ListCoordinators, or a token without the scope).
    Unknown,
    /// It did not answer at all: the connection failed or timed out.
    Gone(String),
}

async fn leader_of(client: &mut Client) -> Leader {
    let r = match client.list_coordinators(plexus_proto::pb::ListCoordinatorsRequest {}).await {
        Ok(r) => r,
        // Made on this side from a transport failure (it has a source), not a coordinator's answer.
        Err(s) if s.code() == tonic::Code::Unavailable && std::error::Error::source(&s).is_some() => {
            return Leader::Gone(format!("connected, then no answer ({})", s.message()));
        }
        Err(_) => return Leader::Unknown,
    };
    let list = r.into_inner().coordinators;
    if list.is_empty() || list.iter().any(|c| c.me && c.leader) {
        return Leader::Me;
    }
    match list.iter().find(|c| c.leader) {
        Some(leader) => Leader::Other(leader.url.clone()),
        None => Leader::None,
    }
}

async fn connect_one(target: &Target, url: &str) -> anyhow::Result<Client> {
    let url = url.trim().to_string();
    let mut endpoint = Endpoint::from_shared(url.clone())
        .map_err(|e| anyhow::anyhow!("invalid coordinator URL {url:?}: {e}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        // A coordinator that stops answering (frozen, cut off) fails the call after
        // KEEPALIVE + KEEPALIVE, where TCP alone would wait for ever.
        .http2_keep_alive_interval(KEEPALIVE)
        .keep_alive_timeout(KEEPALIVE);
    if url.starts_with("https://") {
        let Some(ca) = &target.ca else {
            anyhow::bail!(
                "no CA certificate to check the coordinator with: pass --ca FILE or set PLEXUS_CA (ca.pem in the coordinator's data dir), \
                 or --insecure for a coordinator run with --insecure"
            );
        };
        endpoint =
            endpoint.tls_config(plexus_security::tls::client(ca, plexus_security::tls::COORDINATOR_NAME, None))?;
    }
    let channel = match plexus_security::tls::connect_within(&endpoint, CONNECT_TIMEOUT).await {
        Ok(c) => c,
        Err(plexus_security::Error::Transport(e)) => {
            return Err(Unreachable { url, cause: root_cause(&e) }.into());
        }
        Err(e) => return Err(Unreachable { url, cause: e.to_string() }.into()),
    };
    Ok(JobServiceClient::with_interceptor(crate::retry::RetryShed::new(channel), Bearer::new(target.token.as_ref()))
        .max_decoding_message_size(MAX_MESSAGE))
}

/// The job a [`JobRef`](crate::args::JobRef) names: a full id as is; else the one job whose id
/// starts with it (with or without `job-`) or whose name it is, from the coordinator's list. No
/// match, or several, is an error that says which and what to type instead.
pub async fn resolve_job(client: &mut Client, r: &crate::args::JobRef) -> anyhow::Result<plexus_proto::JobId> {
    if let Ok(id) = r.0.parse::<plexus_proto::JobId>() {
        return Ok(id);
    }
    let jobs = client.list_jobs(plexus_proto::pb::ListJobsRequest {}).await?.into_inner().jobs;
    let parse =
        |id: &str| id.parse().map_err(|e| anyhow::anyhow!("the coordinator listed a malformed job id {id:?}: {e}"));
    if let Some(id) = by_name(&jobs, &r.0, |j| (j.job_id.as_str(), j.name.as_str(), j.submitted_at))? {
        return parse(id);
    }
    let job = resolve_ref(
        &jobs,
        &r.0,
        Named { prefix: "job-", what: "job", name: "name", listed_by: "plexus status" },
        |j| (&j.job_id, &j.name),
    )?;
    job.job_id.parse().map_err(|e| anyhow::anyhow!("the coordinator listed a malformed job id {:?}: {e}", job.job_id))
}

/// A job named by its name, as git names commits: `NAME` is the newest job of that name,
/// `NAME~N` the one N runs before it. `None` when no job has the name (the reference may be an
/// id prefix); an error when `~N` goes past the oldest, or is not a number.
pub fn by_name<'a, T>(
    jobs: &'a [T],
    reference: &str,
    of: impl Fn(&'a T) -> (&'a str, &'a str, u64),
) -> anyhow::Result<Option<&'a str>> {
    let (name, back) = match reference.rsplit_once('~') {
        Some((n, k)) => {
            let k = k.parse::<usize>().map_err(|_| {
                anyhow::anyhow!("{reference:?}: after '~' comes how many runs back, e.g. {n}~1 (the run before {n})")
            })?;
            (n, k)
        }
        None => (reference, 0),
    };
    let mut runs: Vec<(u64, &str)> =
        jobs.iter().map(of).filter(|(_, n, _)| *n == name).map(|(id, _, at)| (at, id)).collect();
    if runs.is_empty() {
        if back > 0 || reference.contains('~') {
            anyhow::bail!("no job is named {name:?} (`plexus status` lists them)");
        }
        return Ok(None);
    }
    runs.sort_by(|a, b| b.cmp(a));
    match runs.get(back) {
        Some((_, id)) => Ok(Some(id)),
        None => anyhow::bail!(
            "{reference:?}: {name:?} has {} run(s); {name} is the newest and {name}~{} the oldest",
            runs.len(),
            runs.len() - 1
        ),
    }
}

/// How the things a reference may name are called, for [`resolve_ref`] and its errors.
pub struct Named {
    /// Their ids' prefix (`job-`, `wkr-`), before the hex digits.
    pub prefix: &'static str,
    pub what: &'static str,
    /// What else names one (`name`, `host name`).
    pub name: &'static str,
    /// The command that lists them.
    pub listed_by: &'static str,
}

/// The one item `reference` names among `items`, each given as (id, name) by `of`: its id, a
/// prefix of its id's hex digits (with or without the id's prefix), or its name. None, or
/// several, is an error naming the matches (at most five) and what to type instead.
pub fn resolve_ref<'a, T>(
    items: &'a [T],
    reference: &str,
    n: Named,
    of: impl Fn(&T) -> (&str, &str),
) -> anyhow::Result<&'a T> {
    let hex = reference.strip_prefix(n.prefix).unwrap_or(reference).to_ascii_lowercase();
    let by_id = hex.chars().all(|c| c.is_ascii_hexdigit()) && (reference.starts_with(n.prefix) || !hex.is_empty());
    let matches: Vec<&T> = items
        .iter()
        .filter(|x| {
            let (id, name) = of(x);
            id == reference
                || (by_id && id.strip_prefix(n.prefix).is_some_and(|h| h.starts_with(&hex)))
                || name == reference
        })
        .collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => anyhow::bail!(
            "no {} matches {reference:?}: it is neither a prefix of a {} id nor a {}'s {} (`{}` lists them)",
            n.what,
            n.what,
            n.what,
            n.name,
            n.listed_by
        ),
        many => {
            let shown: Vec<String> =
                many.iter().take(5).map(|x| of(x)).map(|(id, name)| format!("{id} ({name})")).collect();
            let more = if many.len() > 5 { format!(" and {} more", many.len() - 5) } else { String::new() };
            anyhow::bail!(
                "{reference:?} matches {} {}s: {}{more}; give more of the id",
                many.len(),
                n.what,
                shown.join(", ")
            )
        }
    }
}

/// The innermost error of a chain: tonic's outer layers only say "transport error", the useful
/// part ("Connection refused (os error 111)", "timeout expired") is at the bottom.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// Collapses a possibly multi-line message (a TOML parse error, say) into one line.
pub fn one_line(s: &str) -> String {
    s.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// The single stderr line for a failed command. `url` is the coordinator the command talked to,
/// named when the connection failed in the middle of a call.
pub fn render_error(err: &anyhow::Error, url: &str) -> String {
    if let Some(status) = err.downcast_ref::<tonic::Status>() {
        return format!("error: {}", status_text(status, url));
    }
    format!("error: {}", one_line(&format!("{err:#}")))
}

fn status_text(status: &tonic::Status, url: &str) -> String {
    let message = one_line(status.message());
    // A status the coordinator sent has no source; one with a source was made by tonic on this
    // side from a transport failure (connection refused or reset after the channel was up).
    if status.source().is_some() {
        let cause = status.source().map(root_cause).filter(|c| !c.is_empty()).unwrap_or(message);
        return Unreachable { url: url.to_string(), cause }.to_string();
    }
    if message.is_empty() { format!("the coordinator answered {:?} without a message", status.code()) } else { message }
}

#[cfg(test)]
mod tests {

    #[test]
    fn references_resolve_by_id_prefix_or_name() {
        let items = [("job-1a2b0000", "etl"), ("job-1a2c0000", "train"), ("job-ffff0000", "train")];
        let n = || Named { prefix: "job-", what: "job", name: "name", listed_by: "plexus status" };
        let get = |r: &str| resolve_ref(&items, r, n(), |x| (x.0, x.1)).map(|x| x.0);
        assert_eq!(get("job-1a2b").unwrap(), "job-1a2b0000");
        assert_eq!(get("1A2C").unwrap(), "job-1a2c0000", "without the prefix, any case");
        assert_eq!(get("etl").unwrap(), "job-1a2b0000");
        let e = get("train").unwrap_err().to_string();
        assert!(
            e.contains("matches 2 jobs") && e.contains("job-1a2c0000 (train)") && e.contains("job-ffff0000 (train)"),
            "{e}"
        );
        assert!(get("job-").unwrap_err().to_string().contains("matches 3 jobs"));
        assert!(get("nope").unwrap_err().to_string().starts_with("no job matches \"nope\""));
    }

    #[test]
    fn a_name_is_its_newest_job_and_name_tilde_n_the_ones_before() {
        let jobs = [("job-a", "train", 10), ("job-b", "train", 30), ("job-c", "etl", 20), ("job-d", "train", 20)];
        let get = |r: &str| by_name(&jobs, r, |j| (j.0, j.1, j.2)).map_err(|e| e.to_string());
        assert_eq!(get("train"), Ok(Some("job-b")), "the newest");
        assert_eq!(get("train~1"), Ok(Some("job-d")));
        assert_eq!(get("train~2"), Ok(Some("job-a")));
        assert_eq!(get("etl~0"), Ok(Some("job-c")));
        assert_eq!(get("1a2b"), Ok(None), "not a name: left to the id prefixes");
        let e = get("train~3").unwrap_err();
        assert!(e.contains("\"train\" has 3 run(s); train is the newest and train~2 the oldest"), "{e}");
        assert!(get("train~x").unwrap_err().contains("after '~' comes how many runs back"));
        assert!(get("nope~1").unwrap_err().starts_with("no job is named \"nope\""));
    }

    use super::*;

    const URL: &str = "http://127.0.0.1:50051";

    #[test]
    fn status_renders_as_its_message_on_one_line() {
        let err = anyhow::Error::from(tonic::Status::invalid_argument("job file x.toml: unknown task \"b\""));
        let line = render_error(&err, URL);
        assert_eq!(line, "error: job file x.toml: unknown task \"b\"");
        assert!(!line.contains('\n'));
        assert!(!line.contains("InvalidArgument"), "no debug form: {line}");
    }

    #[test]
    fn multi_line_status_becomes_one_line() {
        let msg = "TOML parse error at line 1, column 5\n  |\n1 | a =\n  |     ^\ninvalid string\n";
        let line = render_error(&tonic::Status::invalid_argument(msg).into(), URL);
        assert!(!line.contains('\n'), "{line}");
        assert!(line.starts_with("error: TOML parse error at line 1, column 5 "), "{line}");
        assert!(line.ends_with("invalid string"), "{line}");
    }

    #[test]
    fn empty_status_message_names_the_code() {
        let line = render_error(&tonic::Status::not_found("").into(), URL);
        assert_eq!(line, "error: the coordinator answered NotFound without a message");
    }

    #[test]
    fn transport_status_is_unreachable() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused (os error 111)");
        let status = tonic::Status::from_error(Box::new(io));
        let line = render_error(&status.into(), URL);
        assert_eq!(
            line,
            format!(
                "error: cannot reach the coordinator at {URL}: Connection refused (os error 111) (is it running? start one with `plexus up`, or point at it with --coordinator URL or PLEXUS_COORDINATOR)"
            )
        );
    }

    #[test]
    fn unreachable_and_context_chains_render_on_one_line() {
        let err = anyhow::Error::from(Unreachable { url: URL.into(), cause: "timeout expired".into() });
        assert_eq!(
            render_error(&err, URL),
            format!(
                "error: cannot reach the coordinator at {URL}: timeout expired (is it running? start one with `plexus up`, or point at it with --coordinator URL or PLEXUS_COORDINATOR)"
            )
        );
        let err = anyhow::Error::from(Unreachable {
            url: URL.into(),
            cause: "invalid peer certificate: UnknownIssuer".into(),
        });
        assert_eq!(
            render_error(&err, URL),
            format!(
                "error: the coordinator at {URL} presented a certificate that the CA given did not sign (invalid peer certificate: UnknownIssuer): pass the ca.pem of that coordinator's cluster (--ca FILE or PLEXUS_CA)"
            )
        );
        let err = anyhow::anyhow!("No such file or directory (os error 2)").context("cannot read job file \"a.toml\"");
        assert_eq!(
            render_error(&err, URL),
            "error: cannot read job file \"a.toml\": No such file or directory (os error 2)"
        );
    }

    #[test]
    fn urls_get_a_scheme() {
        assert_eq!(normalise_url("127.0.0.1:7000", false).unwrap(), "https://127.0.0.1:7000");
        assert_eq!(normalise_url("127.0.0.1:7000", true).unwrap(), "http://127.0.0.1:7000");
        assert_eq!(normalise_url(" http://h:1 ", true).unwrap(), "http://h:1");
        assert_eq!(normalise_url("https://h:1", false).unwrap(), "https://h:1");
        for empty in ["", "  "] {
            let e = normalise_url(empty, false).unwrap_err().to_string();
            assert!(e.contains("the coordinator URL is empty") && e.contains("PLEXUS_COORDINATOR"), "{e}");
        }
        for other in ["ftp://x", "unix:///run/p.sock", "https://", "://h:1"] {
            let e = normalise_url(other, false).unwrap_err().to_string();
            assert!(e.contains("is not http(s)"), "{other}: {e}");
        }
        let e = normalise_url("http://h:1", false).unwrap_err().to_string();
        assert!(e.contains("plaintext") && e.contains("--insecure"), "{e}");
        assert!(normalise_url("https://h:1", true).is_err());
    }

    fn insecure(url: &str) -> Target {
        Target { url: url.to_string(), ca: None, token: None }
    }

    #[tokio::test]
    async fn https_without_a_ca_says_where_to_find_one() {
        let err = connect(&insecure("https://127.0.0.1:1")).await.unwrap_err();
        let line = render_error(&err, URL);
        assert!(line.contains("--ca") && line.contains("PLEXUS_CA"), "{line}");
    }

    #[tokio::test]
    async fn bad_url_is_a_clear_error() {
        let err = connect(&insecure("http://exa mple:1")).await.unwrap_err();
        assert!(render_error(&err, URL).starts_with("error: invalid coordinator URL"), "{err:#}");
    }

    #[tokio::test]
    async fn refused_connection_is_unreachable() {
        // A port that was just free: nothing listens there, so the connection is refused at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}");
        let err = connect(&insecure(&url)).await.unwrap_err();
        let line = render_error(&err, &url);
        assert!(line.starts_with(&format!("error: cannot reach the coordinator at {url}: ")), "{line}");
    }
}
