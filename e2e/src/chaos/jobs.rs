//! The chaos run's jobs: a seeded stream of job files (DAGs, gangs, a collective, large
//! outputs) whose every task appends its life to the ledger, and the bytes each output must hold.
//!
//! Every command task writes `start`, then a `step` line every 0.2 s while it works, then `end`,
//! each as `<what> <job id> <task> <rank> <attempt> <unix ns>`, appended (`>>`, one short write:
//! `O_APPEND` keeps lines whole). An attempt was alive at least from its first line to its last,
//! so two attempts of one subtask whose spans intersect ran at the same time.
//!
//! Every output is a pure function of the job's seed, so the checker knows its bytes without
//! trusting anything the cluster says.

use std::path::Path;

use rand::Rng;
use rand::rngs::StdRng;

/// How long one `step` of a task lasts.
pub const STEP_S: f64 = 0.2;

/// The kinds of jobs in the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    /// gen (1–3 replicas) → mid (reads every gen output) → last (reads mid).
    Dag,
    /// One task of 2–3 members that start together (`min_members`).
    Gang,
    /// 2–3 producers of f32 vectors, their sum by the built-in `allreduce` on every member.
    Collective,
    /// One task writing a few MiB, and a consumer on (likely) another worker reading it.
    Large,
}

impl JobKind {
    pub fn name(self) -> &'static str {
        match self {
            JobKind::Dag => "dag",
            JobKind::Gang => "gang",
            JobKind::Collective => "collective",
            JobKind::Large => "large",
        }
    }
}

/// One output the checker fetches and compares: `task/rank/output` must hold `bytes`.
#[derive(Clone, Debug)]
pub struct Expected {
    pub task: String,
    pub rank: u32,
    pub output: String,
    pub bytes: Vec<u8>,
}

impl Expected {
    pub fn object(&self) -> String {
        format!("{}/{}/{}", self.task, self.rank, self.output)
    }
}

/// A job of the stream: its file's text and what its outputs must be.
#[derive(Clone, Debug)]
pub struct JobPlan {
    pub n: u64,
    pub kind: JobKind,
    pub name: String,
    pub source: String,
    pub expected: Vec<Expected>,
}

/// `token\n` repeated and cut to `size` bytes: what `yes token | head -c size` writes.
pub fn yes_bytes(token: &str, size: usize) -> Vec<u8> {
    let line = format!("{token}\n").into_bytes();
    line.iter().copied().cycle().take(size).collect()
}

/// The shell lines that bracket a task's work with ledger records: (before, after). The work runs
/// `steps` steps of [`STEP_S`], one `step` line each.
fn ledger_lines(ledger: &Path, steps: u32) -> (String, String) {
    let l = ledger.display();
    let rec = |what: &str| format!("echo \"{what} $K $(date +%s%N)\" >> {l}");
    let before = format!(
        "K=\"$PLEXUS_JOB $PLEXUS_TASK $PLEXUS_RANK $PLEXUS_ATTEMPT\"\n{}\nfor i in $(seq {steps}); do sleep {STEP_S}; {}; done\n",
        rec("start"),
        rec("step")
    );
    (before, format!("{}\n", rec("end")))
}

/// A command task's TOML: `name`, its `body` between the ledger lines, and the extra `fields`.
fn task(name: &str, ledger: &Path, steps: u32, body: &str, fields: &str) -> String {
    let (before, after) = ledger_lines(ledger, steps);
    format!(
        "[[task]]\nname = \"{name}\"\ncommand = '''\nset -e\n{before}{body}\n{after}'''\ncpu = 0.5\ntimeout = \"120s\"\nmax_retries = 6\nretry_backoff = \"1s\"\n{fields}\n"
    )
}

/// The `n`-th job of the stream of `seed`, its kind and sizes drawn from `rng`; tasks append to
/// `ledger`. A collective has one member per worker, at most `workers - 1` (2 or 3) so it is
/// accepted while one worker is down.
pub fn plan(n: u64, seed: u64, workers: usize, rng: &mut StdRng, ledger: &Path) -> JobPlan {
    let kind = match rng.random_range(0..10) {
        0..=4 => JobKind::Dag,
        5..=6 => JobKind::Gang,
        7 => JobKind::Collective,
        _ => JobKind::Large,
    };
    let name = format!("chaos-{seed}-{n}-{}", kind.name());
    let token = |task: &str, rank: u32| format!("{name}/{task}/{rank}");
    let (body, expected) = match kind {
        JobKind::Dag => dag(rng, ledger, &token),
        JobKind::Gang => gang(rng, ledger, &token),
        JobKind::Collective => collective(rng, ledger, n, (workers.saturating_sub(1) as u32).clamp(2, 3)),
        JobKind::Large => large(rng, ledger, &token),
    };
    JobPlan { n, kind, source: format!("name = \"{name}\"\n\n{body}"), name, expected }
}

type Token<'a> = &'a dyn Fn(&str, u32) -> String;

fn dag(rng: &mut StdRng, ledger: &Path, token: Token) -> (String, Vec<Expected>) {
    let replicas = rng.random_range(1..=3u32);
    let size = rng.random_range(1..=64usize) << 10;
    let mut expected = Vec::new();
    // Some attempts outlive a worker's heartbeat timeout (3 s), so a worker declared lost while
    // they run shows whether they are fenced.
    let mut text = task(
        "gen",
        ledger,
        rng.random_range(2..=40),
        &format!("yes \"{}/$PLEXUS_RANK\" | head -c {size} > $PLEXUS_OUT/out", token("gen", 0).trim_end_matches("/0")),
        &format!("replicas = {replicas}\noutputs = [\"out\"]"),
    );
    let mut mid = Vec::new();
    for r in 0..replicas {
        let b = yes_bytes(&token("gen", r), size);
        mid.extend_from_slice(&b);
        expected.push(Expected { task: "gen".into(), rank: r, output: "out".into(), bytes: b });
    }
    let ins: Vec<String> = (0..replicas).map(|r| format!("$PLEXUS_IN/gen/{r}/out")).collect();
    mid.extend(yes_bytes(&token("mid", 0), 1000));
    text += &task(
        "mid",
        ledger,
        rng.random_range(1..=6),
        &format!(
            "cat {} > $PLEXUS_OUT/out\nyes \"{}\" | head -c 1000 >> $PLEXUS_OUT/out",
            ins.join(" "),
            token("mid", 0)
        ),
        "inputs = [\"gen/out\"]\noutputs = [\"out\"]",
    );
    let mut last = mid[..mid.len().min(4096)].to_vec();
    last.extend(yes_bytes(&token("last", 0), 100));
    expected.push(Expected { task: "mid".into(), rank: 0, output: "out".into(), bytes: mid });
    text += &task(
        "last",
        ledger,
        rng.random_range(1..=4),
        &format!(
            "head -c 4096 $PLEXUS_IN/mid/0/out > $PLEXUS_OUT/out\nyes \"{}\" | head -c 100 >> $PLEXUS_OUT/out",
            token("last", 0)
        ),
        "inputs = [\"mid/out\"]\noutputs = [\"out\"]",
    );
    expected.push(Expected { task: "last".into(), rank: 0, output: "out".into(), bytes: last });
    (text, expected)
}

fn gang(rng: &mut StdRng, ledger: &Path, token: Token) -> (String, Vec<Expected>) {
    let members = rng.random_range(2..=3u32);
    let prefix = token("member", 0);
    let prefix = prefix.trim_end_matches("/0");
    let text = task(
        "member",
        ledger,
        rng.random_range(5..=40),
        &format!("yes \"{prefix}/$PLEXUS_RANK\" | head -c 2000 > $PLEXUS_OUT/out"),
        &format!("replicas = {members}\nmin_members = {members}\noutputs = [\"out\"]"),
    );
    let expected = (0..members)
        .map(|r| Expected {
            task: "member".into(),
            rank: r,
            output: "out".into(),
            bytes: yes_bytes(&token("member", r), 2000),
        })
        .collect();
    (text, expected)
}

/// Element `i` of producer `r`'s vector in job `n`: a small integer, so every sum is exact in f32.
fn element(n: u64, r: u32, i: usize) -> f32 {
    ((i as u64 * 7 + r as u64 * 13 + n * 3) % 101) as f32
}

fn collective(rng: &mut StdRng, ledger: &Path, n: u64, most: u32) -> (String, Vec<Expected>) {
    let members = rng.random_range(2..=most);
    let len = 65_536usize;
    let mut text = task(
        "grads",
        ledger,
        rng.random_range(1..=5),
        &format!(
            // (A write that fails, on a full disk say, fails the task: perl checks its print
            // and the close that flushes it.)
            "perl -e 'my $r = $ENV{{PLEXUS_RANK}}; print(pack(\"f<*\", map {{ ($_ * 7 + $r * 13 + {n} * 3) % 101 }} 0 .. {})) or die \"write: $!\"; close(STDOUT) or die \"close: $!\"' > $PLEXUS_OUT/grad",
            len - 1
        ),
        &format!("replicas = {members}\noutputs = [\"grad\"]"),
    );
    text += "[[task]]\nname = \"sum\"\nkind = \"allreduce\"\ninputs = [\"grads/grad\"]\noutputs = [\"grad\"]\ndtype = \"f32\"\nop = \"sum\"\nalgorithm = \"halving\"\ncpu = 0.5\ntimeout = \"120s\"\nmax_retries = 6\nretry_backoff = \"1s\"\n";
    let sum: Vec<u8> =
        (0..len).flat_map(|i| (0..members).map(|r| element(n, r, i)).sum::<f32>().to_le_bytes()).collect();
    let mut expected: Vec<Expected> = (0..members)
        .map(|r| Expected {
            task: "grads".into(),
            rank: r,
            output: "grad".into(),
            bytes: (0..len).flat_map(|i| element(n, r, i).to_le_bytes()).collect(),
        })
        .collect();
    expected.extend((0..members).map(|r| Expected {
        task: "sum".into(),
        rank: r,
        output: "grad".into(),
        bytes: sum.clone(),
    }));
    (text, expected)
}

fn large(rng: &mut StdRng, ledger: &Path, token: Token) -> (String, Vec<Expected>) {
    let size = rng.random_range(2..=5usize) << 20;
    let big = yes_bytes(&token("big", 0), size);
    let mut text = task(
        "big",
        ledger,
        rng.random_range(1..=5),
        &format!("yes \"{}\" | head -c {size} > $PLEXUS_OUT/out", token("big", 0)),
        "outputs = [\"out\"]",
    );
    text += &task(
        "ends",
        ledger,
        rng.random_range(1..=3),
        "head -c 4096 $PLEXUS_IN/big/0/out > $PLEXUS_OUT/out\ntail -c 4096 $PLEXUS_IN/big/0/out >> $PLEXUS_OUT/out",
        "inputs = [\"big/out\"]\noutputs = [\"out\"]",
    );
    let mut ends = big[..4096].to_vec();
    ends.extend_from_slice(&big[size - 4096..]);
    let expected = vec![
        Expected { task: "big".into(), rank: 0, output: "out".into(), bytes: big },
        Expected { task: "ends".into(), rank: 0, output: "out".into(), bytes: ends },
    ];
    (text, expected)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn yes_bytes_is_what_yes_and_head_write() {
        assert_eq!(yes_bytes("ab", 7), b"ab\nab\na");
    }

    #[test]
    fn the_stream_is_a_function_of_the_seed() {
        let ledger = Path::new("/l");
        let a: Vec<String> = {
            let mut rng = StdRng::seed_from_u64(7);
            (0..20).map(|n| plan(n, 7, 4, &mut rng, ledger).source).collect()
        };
        let mut rng = StdRng::seed_from_u64(7);
        let b: Vec<String> = (0..20).map(|n| plan(n, 7, 4, &mut rng, ledger).source).collect();
        assert_eq!(a, b);
    }
}
