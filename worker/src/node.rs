//! What this node has and how busy it is: cores, memory, GPUs, hostname ([`detect_gpus`],
//! [`total_memory`], ...), which GPUs it offers (`--gpus`, [`GpuSelection`]), how they connect
//! ([`detect_topology`], [`topology_report`]), and the samplers behind the heartbeats
//! ([`CpuSampler`], [`GpuSampler`]).
//!
//! Everything read from `/proc` or from `nvidia-smi` is parsed defensively: a missing file, an
//! unexpected line or a failing command means "unknown" (or "no GPUs"), never a panic.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use plexus_proto::pb;
use plexus_proto::topology::{GpuTopo, MAX_TOPO_BYTES, parse_topo_matrix};
use tracing::{debug, warn};

use crate::error::{Error, Result};

/// How long `nvidia-smi` may take before we give up on it: it normally answers in well under a
/// second, but a wedged driver can make it hang, and a worker must still start without GPUs.
const NVIDIA_SMI_TIMEOUT: Duration = Duration::from_secs(10);

/// The number of cores this process may use (falls back to 1 when unknown).
pub fn available_cpus() -> u32 {
    std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1)
}

/// `MemTotal` from `/proc/meminfo`, in bytes.
pub fn total_memory() -> Option<u64> {
    meminfo_field(&std::fs::read_to_string("/proc/meminfo").ok()?, "MemTotal")
}

/// `MemAvailable` from `/proc/meminfo`, in bytes (0 when unknown).
pub fn available_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| meminfo_field(&t, "MemAvailable")).unwrap_or(0)
}

/// Reads one `Name:   1234 kB` field of `/proc/meminfo` text, in bytes.
pub fn meminfo_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, rest) = line.split_once(':')?;
        if key.trim() != name {
            return None;
        }
        let mut parts = rest.split_whitespace();
        let value: u64 = parts.next()?.parse().ok()?;
        let factor = match parts.next() {
            None => 1,
            Some(unit) if unit.eq_ignore_ascii_case("kb") => 1024,
            Some(unit) if unit.eq_ignore_ascii_case("mb") => 1024 * 1024,
            Some(_) => return None,
        };
        value.checked_mul(factor)
    })
}

/// The node's host name (empty when it cannot be read).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for `buf.len()` bytes and gethostname writes at most that many.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// What `nvidia-smi` is asked for: one line per device.
const NVIDIA_SMI_QUERY: &str = "--query-gpu=index,name,memory.total,memory.used,utilization.gpu";

/// One GPU as `nvidia-smi` describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuDevice {
    /// The device index as nvidia-smi numbers it (PCI bus order).
    pub index: u32,
    /// The model, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Bytes.
    pub memory_total: u64,
    /// Bytes.
    pub memory_used: u64,
    /// 0..1, over the driver's last sample period.
    pub utilisation: f64,
}

impl GpuDevice {
    pub fn info(&self) -> pb::GpuInfo {
        pb::GpuInfo { index: self.index, name: self.name.clone(), memory: self.memory_total }
    }

    pub fn state(&self) -> pb::GpuState {
        pb::GpuState { index: self.index, utilisation: self.utilisation, memory_used: self.memory_used }
    }
}

/// The GPUs `nvidia-smi` reports, or none when the command is absent, fails or hangs.
pub async fn detect_gpus() -> Vec<GpuDevice> {
    let mut cmd = tokio::process::Command::new("nvidia-smi");
    cmd.args([NVIDIA_SMI_QUERY, "--format=csv,noheader,nounits"]).stdin(std::process::Stdio::null()).kill_on_drop(true);
    match tokio::time::timeout(NVIDIA_SMI_TIMEOUT, cmd.output()).await {
        Err(_) => {
            warn!("nvidia-smi did not answer within {NVIDIA_SMI_TIMEOUT:?}; assuming no GPUs");
            Vec::new()
        }
        Ok(Err(e)) => {
            debug!("nvidia-smi not available ({e}); assuming no GPUs");
            Vec::new()
        }
        Ok(Ok(out)) if !out.status.success() => {
            warn!(status = %out.status, "nvidia-smi failed; assuming no GPUs");
            Vec::new()
        }
        Ok(Ok(out)) => parse_nvidia_smi(&String::from_utf8_lossy(&out.stdout)),
    }
}

/// Parses `nvidia-smi --query-gpu=index,name,memory.total,memory.used,utilization.gpu
/// --format=csv,noheader,nounits` output: one `index, name, MiB, MiB, percent` line per GPU. A
/// line without a numeric index is skipped; a number that is not one (`[N/A]`, `[Not
/// Supported]`) reads as 0, because the device is still there.
pub fn parse_nvidia_smi(text: &str) -> Vec<GpuDevice> {
    let mut gpus = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() < 5 {
            warn!(line, "unexpected nvidia-smi line (expected index, name, memory total, memory used, utilisation)");
            continue;
        }
        let Ok(index) = fields[0].parse::<u32>() else {
            warn!(line, "unexpected nvidia-smi line (index is not a number)");
            continue;
        };
        let n = fields.len();
        // A name may itself contain commas; everything between the index and the three numbers is it.
        let name = fields[1..n - 3].join(", ");
        let mib = |s: &str| s.parse::<u64>().ok().and_then(|m| m.checked_mul(1024 * 1024)).unwrap_or(0);
        let utilisation =
            fields[n - 1].parse::<f64>().ok().filter(|u| u.is_finite()).map_or(0.0, |u| (u / 100.0).clamp(0.0, 1.0));
        gpus.push(GpuDevice {
            index,
            name,
            memory_total: mib(fields[n - 3]),
            memory_used: mib(fields[n - 2]),
            utilisation,
        });
    }
    gpus
}

/// How long `nvidia-smi topo -m` may take before the worker gives up on it: it asks the driver
/// about every pair of devices and NICs, a second or two on an 8-GPU node with many NICs; a
/// wedged driver must not keep the worker from starting, so past this it reports no links.
const NVIDIA_SMI_TOPO_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads this node's GPU topology from `nvidia-smi topo -m`, bounded in time
/// ([`NVIDIA_SMI_TOPO_TIMEOUT`]) and output ([`MAX_TOPO_BYTES`]). An error says why (no
/// nvidia-smi, a failure, a hang, too much or unreadable output); the caller logs it and reports
/// no links, which the coordinator reads as every pair at `SYS`.
pub async fn detect_topology() -> Result<GpuTopo> {
    read_topology("nvidia-smi", &["topo", "-m"], NVIDIA_SMI_TOPO_TIMEOUT).await
}

/// [`detect_topology`] with the command and the time limit as parameters, for tests.
async fn read_topology(program: &str, args: &[&str], limit: Duration) -> Result<GpuTopo> {
    use tokio::io::AsyncReadExt;
    let what = std::iter::once(program).chain(args.iter().copied()).collect::<Vec<_>>().join(" ");
    let io = |action: &'static str| {
        let command = what.clone();
        move |source| Error::TopologyIo { action, command, source }
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(io("cannot run"))?;
    let stdout = child.stdout.take().ok_or_else(|| io("reading")(std::io::Error::other("no stdout")))?;
    let run = async {
        let mut out = Vec::new();
        // One byte past the bound tells "too much" from "exactly the bound".
        stdout.take(MAX_TOPO_BYTES as u64 + 1).read_to_end(&mut out).await.map_err(io("reading"))?;
        if out.len() > MAX_TOPO_BYTES {
            return Err(Error::TopologyTooLong { command: what.clone(), max: MAX_TOPO_BYTES });
        }
        let status = child.wait().await.map_err(io("waiting for"))?;
        if !status.success() {
            return Err(Error::TopologyFailed { command: what.clone(), status });
        }
        Ok(out)
    };
    // On every early return the child is dropped, and `kill_on_drop` ends it.
    let out = tokio::time::timeout(limit, run)
        .await
        .map_err(|_| Error::TopologyTimeout { command: what.clone(), after: limit })??;
    parse_topo_matrix(&String::from_utf8_lossy(&out)).map_err(|source| Error::TopologyOutput { command: what, source })
}

/// What the registration reports of the offered GPUs' topology: the links among them
/// (`NodeCapacity.gpu_links`, `a < b`) and their NUMA nodes where known (`gpu_numa`). An offered
/// device the matrix does not list has no links (the coordinator counts its pairs as `SYS`).
pub fn topology_report(topo: &GpuTopo, offered: &[u32]) -> (Vec<pb::GpuLink>, HashMap<u32, u32>) {
    let links = topo
        .links_among(offered)
        .into_iter()
        .map(|l| pb::GpuLink { a: l.a, b: l.b, level: l.level.to_string() })
        .collect();
    let numa = offered.iter().filter_map(|&d| Some((d, topo.numa(d)?))).collect();
    (links, numa)
}

/// Which of the node's GPUs the worker offers (`--gpus`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum GpuSelection {
    /// Every GPU nvidia-smi lists (the default).
    #[default]
    All,
    /// None (`--gpus none`): subtasks see no GPU at all.
    None,
    /// These indices, as nvidia-smi numbers them (`--gpus 0,2`).
    Only(Vec<u32>),
}

/// Parses `--gpus`: `all`, `none`, or comma-separated device indices (`0,2`).
pub fn parse_gpu_selection(s: &str) -> Result<GpuSelection> {
    match s.trim() {
        "all" => return Ok(GpuSelection::All),
        "none" => return Ok(GpuSelection::None),
        "" => return Err(Error::NoGpuSelection),
        _ => {}
    }
    let mut list = Vec::new();
    for part in s.split(',').map(str::trim) {
        let i: u32 = part.parse().map_err(|_| Error::NotAGpuIndex { part: part.to_string() })?;
        if list.contains(&i) {
            return Err(Error::GpuListedTwice { index: i });
        }
        list.push(i);
    }
    Ok(GpuSelection::Only(list))
}

impl GpuSelection {
    /// The devices offered out of those detected, in index order; an index the node does not
    /// have is an error naming it.
    pub fn apply(&self, detected: &[GpuDevice]) -> Result<Vec<GpuDevice>> {
        let mut offered: Vec<GpuDevice> = match self {
            GpuSelection::All => detected.to_vec(),
            GpuSelection::None => Vec::new(),
            GpuSelection::Only(list) => {
                let mut v = Vec::new();
                for i in list {
                    match detected.iter().find(|d| d.index == *i) {
                        Some(d) => v.push(d.clone()),
                        None => {
                            let have = detected.iter().map(|d| d.index).collect();
                            return Err(Error::NoSuchGpu { index: *i, have });
                        }
                    }
                }
                v
            }
        };
        offered.sort_by_key(|d| d.index);
        Ok(offered)
    }
}

/// The latest load of the offered GPUs, refreshed in the background for the heartbeats (running
/// nvidia-smi takes tens of milliseconds, too long for every heartbeat).
#[derive(Debug, Default)]
pub struct GpuSampler {
    offered: Vec<u32>,
    latest: Mutex<Vec<pb::GpuState>>,
}

impl GpuSampler {
    pub fn new(offered: &[GpuDevice]) -> GpuSampler {
        GpuSampler {
            offered: offered.iter().map(|d| d.index).collect(),
            latest: Mutex::new(offered.iter().map(GpuDevice::state).collect()),
        }
    }

    /// The latest sample, in index order.
    pub fn latest(&self) -> Vec<pb::GpuState> {
        self.latest.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Keeps the offered devices of a fresh detection (a device that vanished drops out of the
    /// heartbeats until it is back).
    pub fn update(&self, detected: &[GpuDevice]) {
        let states = detected.iter().filter(|d| self.offered.contains(&d.index)).map(GpuDevice::state).collect();
        *self.latest.lock().unwrap_or_else(|p| p.into_inner()) = states;
    }

    /// Samples every `interval` until `stop` is cancelled. Nothing to do without GPUs.
    pub async fn run(&self, interval: Duration, stop: tokio_util::sync::CancellationToken) {
        if self.offered.is_empty() {
            return;
        }
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(interval) => {}
            }
            let detected = tokio::select! {
                () = stop.cancelled() => return,
                d = detect_gpus() => d,
            };
            self.update(&detected);
        }
    }
}

/// Aggregate CPU time counters from the first line of `/proc/stat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuTimes {
    /// Time spent doing anything but idling or waiting for I/O.
    pub busy: u64,
    /// All time.
    pub total: u64,
}

/// Parses the aggregate `cpu  user nice system idle iowait irq softirq steal ...` line.
pub fn parse_proc_stat(text: &str) -> Option<CpuTimes> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let values: Vec<u64> = line.split_whitespace().skip(1).map_while(|v| v.parse().ok()).collect();
    if values.len() < 4 {
        return None;
    }
    // guest and guest_nice (fields 9 and 10) are already included in user and nice.
    let total: u64 = values.iter().take(8).sum();
    let idle = values[3] + values.get(4).copied().unwrap_or(0);
    Some(CpuTimes { busy: total.saturating_sub(idle), total })
}

/// Utilisation (0..1) between two samples; 0 when no time passed.
pub fn utilisation(prev: CpuTimes, now: CpuTimes) -> f64 {
    let total = now.total.saturating_sub(prev.total);
    if total == 0 {
        return 0.0;
    }
    let busy = now.busy.saturating_sub(prev.busy);
    (busy as f64 / total as f64).clamp(0.0, 1.0)
}

/// Measures CPU utilisation over the interval since its previous call.
#[derive(Debug)]
pub struct CpuSampler {
    prev: Mutex<Option<CpuTimes>>,
}

impl Default for CpuSampler {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuSampler {
    /// Takes the first sample now, so the first reading covers the time since start.
    pub fn new() -> CpuSampler {
        CpuSampler { prev: Mutex::new(read_proc_stat()) }
    }

    /// Utilisation since the previous call (0 when `/proc/stat` cannot be read).
    pub fn sample(&self) -> f64 {
        let Some(now) = read_proc_stat() else { return 0.0 };
        let mut prev = self.prev.lock().unwrap_or_else(|p| p.into_inner());
        let u = prev.map(|p| utilisation(p, now)).unwrap_or(0.0);
        *prev = Some(now);
        u
    }
}

fn read_proc_stat() -> Option<CpuTimes> {
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_smi_output_is_parsed() {
        let text = "0, NVIDIA H100 80GB HBM3, 81559, 1024, 37\n1, NVIDIA H100 80GB HBM3, 81559, 0, 0\n";
        let gpus = parse_nvidia_smi(text);
        assert_eq!(gpus.len(), 2);
        assert_eq!((gpus[0].index, gpus[1].index), (0, 1));
        assert_eq!(gpus[0].name, "NVIDIA H100 80GB HBM3");
        assert_eq!((gpus[0].memory_total, gpus[0].memory_used), (81559 << 20, 1024 << 20));
        assert!((gpus[0].utilisation - 0.37).abs() < 1e-9);
        assert_eq!(gpus[0].info(), pb::GpuInfo { index: 0, name: "NVIDIA H100 80GB HBM3".into(), memory: 81559 << 20 });
        assert_eq!(gpus[1].state(), pb::GpuState { index: 1, utilisation: 0.0, memory_used: 0 });
    }

    #[test]
    fn nvidia_smi_parser_is_defensive() {
        let text = "\n  garbage line\nX, name, 10, 1, 1\n3, Tesla, V100, with commas, [N/A], [N/A], [Not Supported]\n2, A100 , 40536 , 7, 250\n0, old, 10\n";
        let gpus = parse_nvidia_smi(text);
        assert_eq!(gpus.len(), 2, "{gpus:?}");
        assert_eq!(
            (gpus[0].index, gpus[0].name.as_str(), gpus[0].memory_total, gpus[0].utilisation),
            (3, "Tesla, V100, with commas", 0, 0.0)
        );
        assert_eq!(
            (gpus[1].index, gpus[1].name.as_str(), gpus[1].memory_total, gpus[1].memory_used),
            (2, "A100", 40536 << 20, 7 << 20)
        );
        assert_eq!(gpus[1].utilisation, 1.0, "clamped");
        assert!(parse_nvidia_smi("").is_empty());
        assert!(parse_nvidia_smi("No devices were found").is_empty());
    }

    fn device(index: u32) -> GpuDevice {
        GpuDevice { index, name: "G".into(), memory_total: 1 << 30, memory_used: 0, utilisation: 0.0 }
    }

    #[test]
    fn gpu_selections_parse_and_name_what_is_missing() {
        assert_eq!(parse_gpu_selection("all").unwrap(), GpuSelection::All);
        assert_eq!(parse_gpu_selection("none").unwrap(), GpuSelection::None);
        assert_eq!(parse_gpu_selection("0,2").unwrap(), GpuSelection::Only(vec![0, 2]));
        assert_eq!(parse_gpu_selection(" 3 , 1 ").unwrap(), GpuSelection::Only(vec![3, 1]));
        assert!(parse_gpu_selection("").is_err());
        assert!(parse_gpu_selection("0,,1").unwrap_err().to_string().contains("\"\" is not a GPU index"));
        assert!(parse_gpu_selection("gpu0").unwrap_err().to_string().contains("\"gpu0\" is not a GPU index"));
        assert_eq!(parse_gpu_selection("1,1").unwrap_err().to_string(), "GPU 1 is listed twice");

        let node = [device(0), device(1), device(2)];
        let idx = |v: Vec<GpuDevice>| v.iter().map(|d| d.index).collect::<Vec<_>>();
        assert_eq!(idx(GpuSelection::All.apply(&node).unwrap()), [0, 1, 2]);
        assert_eq!(idx(GpuSelection::None.apply(&node).unwrap()), Vec::<u32>::new());
        assert_eq!(idx(GpuSelection::Only(vec![2, 0]).apply(&node).unwrap()), [0, 2]);
        assert_eq!(
            GpuSelection::Only(vec![0, 5]).apply(&node).unwrap_err().to_string(),
            "--gpus: this node has no GPU 5 (nvidia-smi lists: 0, 1, 2)"
        );
        assert_eq!(
            GpuSelection::Only(vec![0]).apply(&[]).unwrap_err().to_string(),
            "--gpus: this node has no GPU 0 (nvidia-smi lists: none)"
        );
    }

    #[test]
    fn the_sampler_keeps_only_offered_devices() {
        let s = GpuSampler::new(&[device(0), device(2)]);
        assert_eq!(s.latest().len(), 2);
        let mut busy = device(2);
        busy.utilisation = 0.5;
        busy.memory_used = 5 << 20;
        s.update(&[device(0), device(1), busy]);
        assert_eq!(s.latest(), [device(0).state(), pb::GpuState { index: 2, utilisation: 0.5, memory_used: 5 << 20 }]);
    }

    #[test]
    fn meminfo_fields_are_parsed_in_bytes() {
        let text = "MemTotal:       16318056 kB\nMemFree:         1000 kB\nMemAvailable:   8000000 kB\nHugePages_Total:       0\n";
        assert_eq!(meminfo_field(text, "MemTotal"), Some(16318056 * 1024));
        assert_eq!(meminfo_field(text, "MemAvailable"), Some(8000000 * 1024));
        assert_eq!(meminfo_field(text, "HugePages_Total"), Some(0));
        assert_eq!(meminfo_field(text, "Missing"), None);
        assert_eq!(meminfo_field("MemTotal: lots kB", "MemTotal"), None);
        assert!(total_memory().is_some_and(|m| m > 0));
    }

    #[test]
    fn proc_stat_gives_utilisation() {
        let a = parse_proc_stat("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!(a, CpuTimes { busy: 200, total: 1000 });
        let b = parse_proc_stat("cpu  200 0 200 1400 200 0 0 0 0 0\n").unwrap();
        assert!((utilisation(a, b) - 0.2).abs() < 1e-9);
        assert_eq!(utilisation(a, a), 0.0);
        assert!(parse_proc_stat("intr 1 2 3").is_none());
        let s = CpuSampler::new();
        let u = s.sample();
        assert!((0.0..=1.0).contains(&u));
    }

    fn fixture(name: &str) -> String {
        format!("{}/../proto/tests/fixtures/nvidia-smi-topo/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    #[tokio::test]
    async fn the_topology_is_read_from_the_command_and_cut_to_the_offered_gpus() {
        let path = fixture("dgx1-v100.txt");
        let topo = read_topology("cat", &[&path], Duration::from_secs(10)).await.unwrap();
        assert_eq!(topo.gpus().len(), 8);
        // `--gpus 0,3,5`: only their pairs.
        let (links, numa) = topology_report(&topo, &[0, 3, 5]);
        let named: Vec<(u32, u32, &str)> = links.iter().map(|l| (l.a, l.b, l.level.as_str())).collect();
        assert_eq!(named, [(0, 3, "NV2"), (0, 5, "SYS"), (3, 5, "SYS")]);
        assert!(numa.is_empty(), "this output has no NUMA Affinity column");
        let topo = read_topology("cat", &[&fixture("pcie-8x-rtx4090.txt")], Duration::from_secs(10)).await.unwrap();
        let (links, numa) = topology_report(&topo, &[1, 6, 9]);
        assert_eq!(links, [pb::GpuLink { a: 1, b: 6, level: "SYS".into() }], "GPU9 is not in the matrix");
        assert_eq!(numa, HashMap::from([(1, 0), (6, 1)]));
    }

    #[tokio::test]
    async fn a_broken_topology_command_is_an_error_not_a_hang() {
        let e = read_topology("/nonexistent/nvidia-smi", &["topo", "-m"], Duration::from_secs(10))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("cannot run /nonexistent/nvidia-smi topo -m"), "{e}");
        let e = read_topology("false", &[], Duration::from_secs(10)).await.unwrap_err().to_string();
        assert!(e.contains("false failed"), "{e}");
        let e =
            read_topology("echo", &["No devices were found"], Duration::from_secs(10)).await.unwrap_err().to_string();
        assert!(e.contains("no matrix header"), "{e}");
        let e = read_topology(
            "sh",
            &["-c", "printf '  GPU0 GPU1\\nGPU0 X NV9000\\nGPU1 NV1 X\\n'"],
            Duration::from_secs(10),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 2") && e.contains("NV9000"), "{e}");
        // Endless output is cut at the bound, and the command is killed.
        let e = read_topology("yes", &["GPU0"], Duration::from_secs(30)).await.unwrap_err().to_string();
        assert!(e.contains(&format!("printed more than {MAX_TOPO_BYTES} bytes")), "{e}");
        // A command that never answers: the limit (short here, so the test does not wait).
        let e = read_topology("sleep", &["30"], Duration::from_millis(200)).await.unwrap_err().to_string();
        assert!(e.contains("did not answer within 200ms"), "{e}");
    }

    #[test]
    fn machine_facts_are_available() {
        assert!(available_cpus() >= 1);
        assert!(!hostname().is_empty());
    }
}
