//! How a node's GPUs connect, as `nvidia-smi topo -m` prints it (issue 16, item 1): the link
//! levels ([`LinkLevel`]), the parser of the whole matrix ([`parse_topo_matrix`] → [`GpuTopo`]),
//! the pairwise links a worker reports ([`GpuLink`]), and the worker labels (`--label rack=r1`,
//! [`check_label`]) that put a node in a rack of the cluster's topology tree.
//!
//! Pure (no tonic, no I/O): the worker parses its node's output, the coordinator checks what
//! arrives with the same rules, and the scheduler reads the levels back when it builds the tree.
//!
//! The text comes from a command that may be broken, replaced or garbled, so the parser is
//! bounded and hostile-safe: at most [`MAX_TOPO_BYTES`] of text, [`MAX_TOPO_GPUS`] GPUs and
//! [`MAX_TOPO_COLUMNS`] columns, no panic on any input, and every error names the line and the
//! token it could not read (quoted, cut to a few dozen characters).
//!
//! What it reads: an optional preamble (lines starting with `#`, a shell prompt, a tool's
//! "NVIDIA Topology:" line) up to the header (a line whose first field is `GPU0`-like and whose
//! second is not a link level); the header's device columns (`GPU<n>`, and NIC columns —
//! `NIC<n>`, `mlx5_<n>`, anything else — which are skipped) and its trailing columns (`CPU
//! Affinity`, `NUMA Affinity`, `GPU NUMA ID`); one row per GPU (NIC rows are skipped); and it
//! stops at the first blank line after the rows or at `Legend:`. Fields are separated by any
//! run of spaces and tabs. Every GPU of the header needs its row, the diagonal is `X` and only
//! the diagonal, and the matrix is symmetric.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::Error;

/// The most text [`parse_topo_matrix`] reads: an 8-GPU node with 18 NICs prints about 10 KiB.
pub const MAX_TOPO_BYTES: usize = 1 << 20;
/// The most GPUs of one matrix: the bound of a node's GPUs (`rules::MAX_NODE_GPUS`).
pub const MAX_TOPO_GPUS: usize = crate::rules::MAX_NODE_GPUS;
/// The most device columns (GPUs and NICs) of one header.
pub const MAX_TOPO_COLUMNS: usize = 1024;
/// The highest NUMA node number taken from a `NUMA Affinity` column (Linux allows 1024 nodes).
pub const MAX_NUMA_NODE: u32 = 4095;
/// The longest `CPU Affinity` text kept (a list of core ranges).
pub const MAX_CPU_AFFINITY_LEN: usize = 256;
/// The most bonded NVLinks one `NV#` may name: NV18 is the most a GPU has today (H100).
pub const MAX_NVLINKS: u8 = 64;
/// How much of a bad token an error repeats.
const ECHO_LEN: usize = 32;

/// How two GPUs of a node connect, from closest to farthest (the order of `Ord`): the device
/// itself; a bonded set of NVLinks (more links are closer); a path through at most one PCIe
/// bridge (`PIX`), through several (`PXB`), through the CPU's host bridge (`PHB`), between host
/// bridges of one NUMA node (`NODE`), and across the sockets' interconnect (`SYS`; older drivers
/// print `SOC`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkLevel {
    /// `X`.
    SameGpu,
    /// `NV#`: this many bonded NVLinks (1..=[`MAX_NVLINKS`]).
    NvLink(u8),
    Pix,
    Pxb,
    Phb,
    Node,
    /// `SYS`, or `SOC` from older drivers.
    Sys,
}

impl LinkLevel {
    fn rank(self) -> u8 {
        match self {
            LinkLevel::SameGpu => 0,
            LinkLevel::NvLink(_) => 1,
            LinkLevel::Pix => 2,
            LinkLevel::Pxb => 3,
            LinkLevel::Phb => 4,
            LinkLevel::Node => 5,
            LinkLevel::Sys => 6,
        }
    }

    /// The number of bonded NVLinks, 0 when the path is not NVLink.
    pub fn nvlinks(self) -> u8 {
        if let LinkLevel::NvLink(n) = self { n } else { 0 }
    }

    /// A path through PCIe switches only (`PIX`, `PXB`): the GPUs share a switch tree.
    pub fn is_pcie_switch(self) -> bool {
        matches!(self, LinkLevel::Pix | LinkLevel::Pxb)
    }

    /// A PCIe path that stays inside one NUMA node (`PIX` to `NODE`): the two GPUs hang off the
    /// same socket. NVLink says nothing about sockets (an NVSwitch joins GPUs of every socket).
    pub fn same_socket(self) -> bool {
        matches!(self, LinkLevel::Pix | LinkLevel::Pxb | LinkLevel::Phb | LinkLevel::Node)
    }
}

impl Ord for LinkLevel {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Within NVLink, more bonded links are closer.
        self.rank().cmp(&other.rank()).then_with(|| other.nvlinks().cmp(&self.nvlinks()))
    }
}

impl PartialOrd for LinkLevel {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for LinkLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkLevel::SameGpu => f.write_str("X"),
            LinkLevel::NvLink(n) => write!(f, "NV{n}"),
            LinkLevel::Pix => f.write_str("PIX"),
            LinkLevel::Pxb => f.write_str("PXB"),
            LinkLevel::Phb => f.write_str("PHB"),
            LinkLevel::Node => f.write_str("NODE"),
            LinkLevel::Sys => f.write_str("SYS"),
        }
    }
}

/// Reads `X`, `NV#`, `PIX`, `PXB`, `PHB`, `NODE`, `SYS` or `SOC` (in any case: some tools print
/// a lower-case `x`).
impl FromStr for LinkLevel {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let level = match s.to_ascii_uppercase().as_str() {
            "X" => LinkLevel::SameGpu,
            "PIX" => LinkLevel::Pix,
            "PXB" => LinkLevel::Pxb,
            "PHB" => LinkLevel::Phb,
            "NODE" => LinkLevel::Node,
            "SYS" | "SOC" => LinkLevel::Sys,
            u => {
                let n = u
                    .strip_prefix("NV")
                    .filter(|d| (1..=2).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit()));
                match n.and_then(|d| d.parse::<u8>().ok()) {
                    Some(n) if (1..=MAX_NVLINKS).contains(&n) => LinkLevel::NvLink(n),
                    _ => return Err(Error::Level(quote(s))),
                }
            }
        };
        Ok(level)
    }
}

/// In stored records and on the wire, a level is its text (`"NV12"`, `"PIX"`).
impl Serialize for LinkLevel {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for LinkLevel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One pair of a node's GPUs and how they connect, by device index (`a < b`): what a worker
/// reports in its registration (`NodeCapacity.gpu_links`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GpuLink {
    pub a: u32,
    pub b: u32,
    pub level: LinkLevel,
}

/// One GPU of a parsed matrix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopoGpu {
    /// The device index (the `n` of `GPU<n>`, nvidia-smi's numbering).
    pub index: u32,
    /// Its `NUMA Affinity` when that is a single node; `None` for `N/A`, a range such as `0-1`,
    /// or no such column.
    pub numa: Option<u32>,
    /// Its `CPU Affinity` (core ranges such as `0-11,24-35`); `None` for `N/A` or no column.
    pub cpu_affinity: Option<String>,
}

/// A parsed `nvidia-smi topo -m`: the GPUs in the header's order and the level of every pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuTopo {
    gpus: Vec<TopoGpu>,
    /// Row-major, `gpus.len()²` entries, in the order of `gpus`.
    levels: Vec<LinkLevel>,
}

impl GpuTopo {
    /// The GPUs, in the order of the header's columns.
    pub fn gpus(&self) -> &[TopoGpu] {
        &self.gpus
    }

    fn position(&self, device: u32) -> Option<usize> {
        self.gpus.iter().position(|g| g.index == device)
    }

    /// How devices `a` and `b` connect (`SameGpu` when `a == b`); `None` when either is not in
    /// the matrix.
    pub fn level(&self, a: u32, b: u32) -> Option<LinkLevel> {
        let (i, j) = (self.position(a)?, self.position(b)?);
        self.levels.get(i * self.gpus.len() + j).copied()
    }

    /// The NUMA node of device `index`, when the matrix says.
    pub fn numa(&self, index: u32) -> Option<u32> {
        self.position(index).and_then(|i| self.gpus[i].numa)
    }

    /// Every pair of the matrix's GPUs, `a < b`, in order.
    pub fn links(&self) -> Vec<GpuLink> {
        let n = self.gpus.len();
        let mut out = Vec::with_capacity(n * n.saturating_sub(1) / 2);
        for i in 0..n {
            for j in i + 1..n {
                let (a, b) = (self.gpus[i].index, self.gpus[j].index);
                out.push(GpuLink { a: a.min(b), b: a.max(b), level: self.levels[i * n + j] });
            }
        }
        out.sort();
        out
    }

    /// The pairs among `devices` only (the GPUs a worker offers, `--gpus`), `a < b`, in order;
    /// a device the matrix does not have has no links.
    pub fn links_among(&self, devices: &[u32]) -> Vec<GpuLink> {
        self.links().into_iter().filter(|l| devices.contains(&l.a) && devices.contains(&l.b)).collect()
    }
}

/// The old name of the crate's error for topology matrices and labels, kept for the crates that
/// still name it: the same type as [`Error`].
pub type TopoError = Error;

/// A token as an error repeats it: quoted with escapes (so control characters cannot reach a
/// terminal), cut to [`ECHO_LEN`] characters.
fn quote(s: &str) -> String {
    let n = s.chars().count();
    if n <= ECHO_LEN {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(ECHO_LEN).collect();
        format!("{head:?}… ({n} characters)")
    }
}

/// The device index of a `GPU<n>` label (no sign, no leading zero, at most 4 digits).
fn gpu_label(token: &str) -> Option<u32> {
    let digits = token.strip_prefix("GPU")?;
    let ok = (1..=4).contains(&digits.len())
        && digits.bytes().all(|b| b.is_ascii_digit())
        && !(digits.len() > 1 && digits.starts_with('0'));
    if ok { digits.parse().ok() } else { None }
}

/// The columns after the device columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trailing {
    CpuAffinity,
    NumaAffinity,
    /// `GPU NUMA ID`, or a column this parser does not know.
    Other,
}

fn cpu_affinity(token: &str) -> Option<String> {
    let ok = !token.is_empty()
        && token.len() <= MAX_CPU_AFFINITY_LEN
        && token.bytes().all(|b| b.is_ascii_digit() || b == b',' || b == b'-');
    ok.then(|| token.to_string())
}

fn numa_node(token: &str) -> Option<u32> {
    if token.is_empty() || token.len() > 4 || !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    token.parse().ok().filter(|n| *n <= MAX_NUMA_NODE)
}

/// Parses the whole output of `nvidia-smi topo -m` (see the module docs for what it accepts).
pub fn parse_topo_matrix(text: &str) -> Result<GpuTopo, Error> {
    if text.len() > MAX_TOPO_BYTES {
        return Err(Error::TooLarge { len: text.len(), max: MAX_TOPO_BYTES });
    }
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let (header_line, header) = find_header(&mut lines)?;
    let mut m = Matrix::from_header(header_line, header)?;
    let mut rows = 0;
    for (line, text) in lines {
        let t = text.trim();
        if t.is_empty() {
            if rows > 0 {
                break;
            }
            continue;
        }
        if t.starts_with("Legend") {
            break;
        }
        if m.read_row(line, t)? {
            rows += 1;
        }
    }
    m.finish()
}

/// The header: the first line that starts with a GPU label not followed by a link level.
fn find_header<'t>(lines: &mut impl Iterator<Item = (usize, &'t str)>) -> Result<(usize, &'t str), Error> {
    loop {
        let Some((n, line)) = lines.next() else { return Err(Error::NoHeader) };
        let t = line.trim();
        if t.starts_with('#') {
            continue;
        }
        let mut fields = t.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if gpu_label(first).is_some() && fields.next().is_none_or(|f| f.parse::<LinkLevel>().is_err()) {
            return Ok((n, t));
        }
    }
}

/// A matrix being read: its columns from the header, and what the GPU rows read so far said.
struct Matrix {
    /// Device columns: Some(device) for a GPU, None for a NIC.
    columns: Vec<Option<u32>>,
    /// The columns after the device columns.
    trailing: Vec<Trailing>,
    /// The GPUs of the columns, in column order.
    devices: Vec<u32>,
    /// `levels[row * n + col]`, set as the rows are read.
    levels: Vec<Option<LinkLevel>>,
    gpus: Vec<TopoGpu>,
    /// Which GPUs' rows were read.
    seen: Vec<bool>,
}

impl Matrix {
    fn from_header(header_line: usize, header: &str) -> Result<Matrix, Error> {
        let (columns, trailing) = header_columns(header_line, header)?;
        let devices: Vec<u32> = columns.iter().flatten().copied().collect();
        let n = devices.len();
        if n > MAX_TOPO_GPUS {
            return Err(Error::Line { line: header_line, reason: format!("{n} GPU columns; at most {MAX_TOPO_GPUS}") });
        }
        let gpus = devices.iter().map(|&index| TopoGpu { index, numa: None, cpu_affinity: None }).collect();
        Ok(Matrix { columns, trailing, levels: vec![None; n * n], gpus, seen: vec![false; n], devices })
    }

    fn position(&self, device: u32) -> Option<usize> {
        self.devices.iter().position(|d| *d == device)
    }

    /// Reads one line of the matrix's body; true when it was a GPU's row. NIC rows, and
    /// anything else that is not a GPU's row, are not read.
    fn read_row(&mut self, line: usize, t: &str) -> Result<bool, Error> {
        let n = self.devices.len();
        let mut fields = t.split_whitespace();
        let Some(label) = fields.next() else { return Ok(false) };
        let Some(device) = gpu_label(label) else { return Ok(false) };
        let Some(row) = self.position(device) else {
            return Err(Error::Token {
                line,
                token: quote(label),
                reason: "a row for a GPU the header has no column for",
            });
        };
        if self.seen[row] {
            return Err(Error::Token { line, token: quote(label), reason: "a second row for this GPU" });
        }
        self.seen[row] = true;
        for (k, column) in self.columns.iter().enumerate() {
            let Some(field) = fields.next() else {
                return Err(Error::Line {
                    line,
                    reason: format!(
                        "{label} has {k} link fields; the header has {} device columns",
                        self.columns.len()
                    ),
                });
            };
            // NIC columns are not read: a damaged NIC cell does not cost the GPUs' links.
            let Some(other) = column else { continue };
            let level = field.parse::<LinkLevel>().map_err(|_| Error::Token {
                line,
                token: quote(field),
                reason: "not a link level (X, NV#, PIX, PXB, PHB, NODE, SYS)",
            })?;
            let col = self.devices.iter().position(|d| d == other).unwrap_or(row);
            if (col == row) != (level == LinkLevel::SameGpu) {
                return Err(Error::Token {
                    line,
                    token: quote(field),
                    reason: "X must be on the diagonal, and only there",
                });
            }
            self.levels[row * n + col] = Some(level);
        }
        for (k, field) in fields.enumerate() {
            match self.trailing.get(k) {
                None => {
                    return Err(Error::Token {
                        line,
                        token: quote(field),
                        reason: "a field past the header's last column",
                    });
                }
                Some(Trailing::CpuAffinity) => self.gpus[row].cpu_affinity = cpu_affinity(field),
                Some(Trailing::NumaAffinity) => self.gpus[row].numa = numa_node(field),
                Some(Trailing::Other) => {}
            }
        }
        Ok(true)
    }

    /// The topology, once every GPU's row was read and the matrix is symmetric.
    fn finish(self) -> Result<GpuTopo, Error> {
        let (n, devices, levels) = (self.devices.len(), &self.devices, &self.levels);
        if let Some(missing) = self.seen.iter().position(|s| !s) {
            return Err(Error::MissingRow(devices[missing]));
        }
        let mut full = Vec::with_capacity(n * n);
        for i in 0..n {
            for j in 0..n {
                // Every row read all the GPU columns, so every cell is set; a hole is a parser
                // bug, reported as the missing row rather than a panic.
                let Some(ab) = levels[i * n + j] else { return Err(Error::MissingRow(devices[i])) };
                let ba = levels[j * n + i].unwrap_or(ab);
                if ab != ba {
                    return Err(Error::Asymmetric {
                        a: devices[i],
                        b: devices[j],
                        ab: ab.to_string(),
                        ba: ba.to_string(),
                    });
                }
                full.push(ab);
            }
        }
        Ok(GpuTopo { gpus: self.gpus, levels: full })
    }
}

/// The header's device columns (Some(device) for a GPU, None for a NIC), then its trailing
/// columns.
fn header_columns(header_line: usize, header: &str) -> Result<(Vec<Option<u32>>, Vec<Trailing>), Error> {
    let mut columns: Vec<Option<u32>> = Vec::new();
    let mut trailing: Vec<Trailing> = Vec::new();
    let fields: Vec<&str> = header.split_whitespace().take(MAX_TOPO_COLUMNS + 16).collect();
    let mut i = 0;
    while i < fields.len() {
        let f = fields[i];
        if trailing.is_empty() && !matches!(f, "CPU" | "NUMA" | "GPU") {
            if columns.len() == MAX_TOPO_COLUMNS {
                return Err(Error::Line {
                    line: header_line,
                    reason: format!("more than {MAX_TOPO_COLUMNS} device columns"),
                });
            }
            let gpu = gpu_label(f);
            if gpu.is_some() && columns.contains(&gpu) {
                return Err(Error::Token { line: header_line, token: quote(f), reason: "a GPU column listed twice" });
            }
            columns.push(gpu);
            i += 1;
            continue;
        }
        let (kind, width) = match (f, fields.get(i + 1).copied(), fields.get(i + 2).copied()) {
            ("CPU", Some("Affinity"), _) => (Trailing::CpuAffinity, 2),
            ("NUMA", Some("Affinity"), _) => (Trailing::NumaAffinity, 2),
            ("GPU", Some("NUMA"), Some("ID")) => (Trailing::Other, 3),
            _ => (Trailing::Other, 1),
        };
        trailing.push(kind);
        i += width;
    }
    Ok((columns, trailing))
}

/// The label that names a node's rack: workers with the same value share a rack.
pub const RACK_LABEL: &str = "rack";
/// The most labels one worker may carry.
pub const MAX_LABELS: usize = 32;
/// The longest label key or value.
pub const MAX_LABEL_LEN: usize = 63;

fn label_text_ok(s: &str) -> bool {
    (1..=MAX_LABEL_LEN).contains(&s.len())
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A label a worker may carry: key and value of 1 to [`MAX_LABEL_LEN`] characters of `a-z`,
/// `A-Z`, `0-9`, `-`, `_` and `.`, starting with a letter or digit. Labels are shown in tables and
/// compared for racks, so nothing else is accepted.
pub fn check_label(key: &str, value: &str) -> Result<(), Error> {
    let rule =
        format!("1 to {MAX_LABEL_LEN} characters of a-z, A-Z, 0-9, '-', '_' and '.', starting with a letter or digit");
    let label = || quote(&format!("{key}={value}"));
    if !label_text_ok(key) {
        return Err(Error::Label { label: label(), reason: format!("the key must be {rule}") });
    }
    if !label_text_ok(value) {
        return Err(Error::Label { label: label(), reason: format!("the value must be {rule}") });
    }
    Ok(())
}

/// Parses `key=value` (`--label rack=r1`) and checks it with [`check_label`].
pub fn parse_label(s: &str) -> Result<(String, String), Error> {
    let Some((key, value)) = s.split_once('=') else {
        return Err(Error::Label { label: quote(s), reason: "expected key=value, e.g. rack=r1".into() });
    };
    check_label(key, value)?;
    Ok((key.to_string(), value.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! fixture {
        ($name:literal) => {
            ($name, include_str!(concat!("../tests/fixtures/nvidia-smi-topo/", $name)))
        };
    }

    /// Every recorded output, by file name.
    const FIXTURES: &[(&str, &str)] = &[
        fixture!("dgx1-v100.txt"),
        fixture!("dgx1-v100-tabs.txt"),
        fixture!("dgx-a100.txt"),
        fixture!("dgx-a100-damaged-paste.txt"),
        fixture!("pcie-4x-a10.txt"),
        fixture!("pcie-8x-rtx4090.txt"),
        fixture!("pcie-5gpu-phb-node.txt"),
        fixture!("two-gpu-phb.txt"),
        fixture!("two-gpu-nv12.txt"),
        fixture!("one-gpu.txt"),
        fixture!("old-driver-soc.txt"),
    ];

    fn parse(name: &str) -> GpuTopo {
        let text = FIXTURES.iter().find(|(n, _)| *n == name).map(|(_, t)| *t).unwrap();
        parse_topo_matrix(text).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn lv(s: &str) -> LinkLevel {
        s.parse().unwrap()
    }

    /// The matrix as its rows of level names, for comparing against the fixture by eye.
    fn rows(t: &GpuTopo) -> Vec<String> {
        let ids: Vec<u32> = t.gpus().iter().map(|g| g.index).collect();
        ids.iter()
            .map(|&a| ids.iter().map(|&b| t.level(a, b).unwrap().to_string()).collect::<Vec<_>>().join(" "))
            .collect()
    }

    #[test]
    fn levels_are_ordered_from_closest_to_farthest_and_read_back() {
        let order = ["X", "NV18", "NV12", "NV2", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS"];
        let levels: Vec<LinkLevel> = order.iter().map(|s| lv(s)).collect();
        assert!(levels.windows(2).all(|w| w[0] < w[1]), "{levels:?}");
        for s in order {
            assert_eq!(lv(s).to_string(), s);
        }
        assert_eq!(lv("SOC"), LinkLevel::Sys, "older drivers' name");
        assert_eq!(lv("x"), LinkLevel::SameGpu);
        assert_eq!((lv("NV12").nvlinks(), lv("PIX").nvlinks()), (12, 0));
        assert!(lv("PXB").is_pcie_switch() && !lv("PHB").is_pcie_switch() && !lv("NV1").is_pcie_switch());
        assert!(lv("NODE").same_socket() && !lv("SYS").same_socket() && !lv("NV12").same_socket());
        for bad in ["", "NV", "NV0", "NV65", "NV001", "NV1X", "NVX", "PCI", "SYS ", "N/A", "NV-1", "NV+1"] {
            assert!(bad.parse::<LinkLevel>().is_err(), "{bad:?}");
        }
        assert_eq!(
            "NV0".parse::<LinkLevel>().unwrap_err().to_string(),
            "\"NV0\" is not a link level (expected X, NV#, PIX, PXB, PHB, NODE, SYS or SOC)"
        );
        let link = GpuLink { a: 0, b: 3, level: LinkLevel::NvLink(2) };
        let json = serde_json::to_string(&link).unwrap();
        assert_eq!(json, r#"{"a":0,"b":3,"level":"NV2"}"#);
        assert_eq!(serde_json::from_str::<GpuLink>(&json).unwrap(), link);
        assert!(serde_json::from_str::<GpuLink>(r#"{"a":0,"b":3,"level":"NV99"}"#).is_err());
    }

    #[test]
    fn every_fixture_parses() {
        for (name, text) in FIXTURES {
            let t = parse_topo_matrix(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let n = t.gpus().len();
            assert!(n >= 1, "{name}");
            assert_eq!(t.links().len(), n * (n - 1) / 2, "{name}");
        }
    }

    #[test]
    fn dgx1_hybrid_cube_mesh() {
        let t = parse("dgx1-v100.txt");
        assert_eq!(
            rows(&t),
            [
                "X NV1 NV1 NV2 NV2 SYS SYS SYS",
                "NV1 X NV2 NV1 SYS NV2 SYS SYS",
                "NV1 NV2 X NV2 SYS SYS NV1 SYS",
                "NV2 NV1 NV2 X SYS SYS SYS NV1",
                "NV2 SYS SYS SYS X NV1 NV1 NV2",
                "SYS NV2 SYS SYS NV1 X NV2 NV1",
                "SYS SYS NV1 SYS NV1 NV2 X NV2",
                "SYS SYS SYS NV1 NV2 NV1 NV2 X",
            ]
        );
        assert_eq!(t.level(0, 3), Some(LinkLevel::NvLink(2)));
        assert_eq!(t.level(0, 1), Some(LinkLevel::NvLink(1)));
        assert_eq!(t.level(0, 5), Some(LinkLevel::Sys));
        assert_eq!(t.level(0, 8), None, "the mlx5_0 column is no GPU");
        assert_eq!(t.gpus()[0].cpu_affinity.as_deref(), Some("0-11,24-35"));
        assert_eq!(t.gpus()[7].cpu_affinity.as_deref(), Some("12-23,36-47"));
        assert_eq!(t.numa(0), None, "no NUMA Affinity column");

        // The tab-separated paste of another DGX-1 class machine, with a NUMA column.
        let t = parse("dgx1-v100-tabs.txt");
        assert_eq!(t.level(0, 7), Some(LinkLevel::NvLink(2)));
        assert_eq!(t.level(3, 4), Some(LinkLevel::NvLink(1)));
        assert_eq!(t.level(0, 4), Some(LinkLevel::Sys));
        assert_eq!(
            t.gpus().iter().map(|g| g.numa).collect::<Vec<_>>(),
            [Some(0), Some(0), Some(0), Some(0), Some(1), Some(1), Some(1), Some(1)]
        );
    }

    #[test]
    fn dgx_a100_nvswitch() {
        let t = parse("dgx-a100.txt");
        assert_eq!(t.gpus().len(), 8, "17 NIC columns skipped");
        assert!(t.links().iter().all(|l| l.level == LinkLevel::NvLink(12)));
        assert!(t.gpus().iter().all(|g| g.numa == Some(0) && g.cpu_affinity.as_deref() == Some("0-103")));

        // The damaged paste: the merged NIC columns do not cost the GPUs' links or affinities.
        let t = parse("dgx-a100-damaged-paste.txt");
        assert!(t.links().iter().all(|l| l.level == LinkLevel::NvLink(12)));
        assert_eq!(t.gpus().iter().map(|g| g.numa.unwrap()).collect::<Vec<_>>(), [3, 3, 1, 1, 7, 7, 5, 5]);
        assert_eq!(t.gpus()[6].cpu_affinity.as_deref(), Some("40-47,104-111"));
    }

    #[test]
    fn pcie_only_boxes() {
        let t = parse("pcie-4x-a10.txt");
        assert_eq!(t.links().len(), 6);
        assert!(t.links().iter().all(|l| l.level == LinkLevel::Sys));

        let t = parse("pcie-8x-rtx4090.txt");
        assert_eq!(t.level(0, 3), Some(LinkLevel::Pix));
        assert_eq!(t.level(4, 7), Some(LinkLevel::Pix));
        assert_eq!(t.level(3, 4), Some(LinkLevel::Sys));
        assert_eq!((t.numa(0), t.numa(4)), (Some(0), Some(1)));

        let t = parse("pcie-5gpu-phb-node.txt");
        assert_eq!(t.level(1, 2), Some(LinkLevel::Phb));
        assert_eq!(t.level(2, 3), Some(LinkLevel::Node));
        assert_eq!(t.level(0, 4), Some(LinkLevel::Sys));
        assert_eq!((t.numa(0), t.numa(1)), (Some(1), Some(0)));

        let t = parse("old-driver-soc.txt");
        assert_eq!(t.level(0, 1), Some(LinkLevel::Pix));
        assert_eq!(t.level(0, 2), Some(LinkLevel::Phb));
        assert_eq!(t.level(3, 4), Some(LinkLevel::Sys), "SOC");
        assert!(t.gpus().iter().all(|g| g.numa.is_none() && g.cpu_affinity.is_none()));
    }

    #[test]
    fn small_machines() {
        let t = parse("two-gpu-phb.txt");
        assert_eq!(t.links(), [GpuLink { a: 0, b: 1, level: LinkLevel::Phb }]);
        assert_eq!(t.numa(0), None, "N/A");
        assert_eq!(t.gpus()[1].cpu_affinity.as_deref(), Some("0-11"));

        let t = parse("two-gpu-nv12.txt");
        assert_eq!(t.links(), [GpuLink { a: 0, b: 1, level: LinkLevel::NvLink(12) }]);
        assert_eq!((t.numa(0), t.numa(1)), (Some(1), Some(1)));

        let t = parse("one-gpu.txt");
        assert_eq!(t.gpus(), [TopoGpu { index: 0, numa: Some(1), cpu_affinity: Some("32-63,96-127".into()) }]);
        assert!(t.links().is_empty());
        assert_eq!(t.level(0, 0), Some(LinkLevel::SameGpu));
    }

    #[test]
    fn offered_gpus_keep_only_their_links() {
        let t = parse("dgx1-v100.txt");
        assert_eq!(
            t.links_among(&[5, 0, 3, 42]),
            [
                GpuLink { a: 0, b: 3, level: LinkLevel::NvLink(2) },
                GpuLink { a: 0, b: 5, level: LinkLevel::Sys },
                GpuLink { a: 3, b: 5, level: LinkLevel::Sys }
            ]
        );
        assert!(t.links_among(&[]).is_empty());
    }

    #[test]
    fn affinity_columns_are_read_when_they_make_sense() {
        let text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tNV4\t0-14,16-30\t0-7\t\tN/A\nGPU1\tNV4\t X \tN/A\t9999\n";
        let t = parse_topo_matrix(text).unwrap();
        assert_eq!(
            t.gpus()[0],
            TopoGpu { index: 0, numa: None, cpu_affinity: Some("0-14,16-30".into()) },
            "a NUMA range is no single node"
        );
        assert_eq!(t.gpus()[1], TopoGpu { index: 1, numa: None, cpu_affinity: None }, "N/A, and a node past the bound");
        assert_eq!(t.level(1, 0), Some(LinkLevel::NvLink(4)));
        // Device indices need not start at 0 or be consecutive.
        let t = parse_topo_matrix("  GPU2 GPU5\nGPU5 PIX X\nGPU2 X PIX\n").unwrap();
        assert_eq!(t.links(), [GpuLink { a: 2, b: 5, level: LinkLevel::Pix }]);
    }

    #[test]
    fn errors_name_the_line_and_the_token() {
        let err = |text: &str| parse_topo_matrix(text).unwrap_err().to_string();
        assert_eq!(err(""), "no matrix header (a line starting with GPU0) in the output");
        assert_eq!(err("No devices were found\n"), "no matrix header (a line starting with GPU0) in the output");
        assert_eq!(
            err("  GPU0 GPU1\nGPU0 X NVX\nGPU1 NV1 X\n"),
            "line 2: not a link level (X, NV#, PIX, PXB, PHB, NODE, SYS): \"NVX\""
        );
        assert_eq!(
            err("  GPU0 GPU1\nGPU0 X\nGPU1 NV1 X\n"),
            "line 2: GPU0 has 1 link fields; the header has 2 device columns"
        );
        assert_eq!(err("  GPU0 GPU1\nGPU0 X PIX\n"), "GPU1 has a column in the header but no row");
        assert_eq!(
            err("  GPU0 GPU1\nGPU0 X PIX\nGPU1 PXB X\n"),
            "GPU0/GPU1 is PIX but GPU1/GPU0 is PXB: the matrix is not symmetric"
        );
        assert_eq!(err("  GPU0 GPU1\nGPU0 X PIX\nGPU0 X PIX\n"), "line 3: a second row for this GPU: \"GPU0\"");
        assert_eq!(
            err("  GPU0 GPU1\nGPU0 X PIX\nGPU1 PIX X\nGPU7 PIX X\n"),
            "line 4: a row for a GPU the header has no column for: \"GPU7\""
        );
        assert_eq!(
            err("  GPU0 GPU1\nGPU0 PIX X\nGPU1 X PIX\n"),
            "line 2: X must be on the diagonal, and only there: \"PIX\""
        );
        assert_eq!(err("  GPU0 GPU0\nGPU0 X X\n"), "line 1: a GPU column listed twice: \"GPU0\"");
        assert_eq!(
            err("  GPU0 CPU Affinity\nGPU0 X 0-3 surplus\n"),
            "line 2: a field past the header's last column: \"surplus\""
        );
        let long = format!("  GPU0 GPU1\nGPU0 X {}\nGPU1 SYS X\n", "\u{1b}[2J".repeat(40));
        let e = err(&long);
        assert!(
            e.starts_with("line 2: not a link level") && e.contains("\\u{1b}") && e.ends_with("… (160 characters)"),
            "{e}"
        );
        assert!(!e.contains('\u{1b}'), "no raw escape reaches a terminal");
        let huge = "x".repeat(MAX_TOPO_BYTES + 1);
        assert_eq!(
            parse_topo_matrix(&huge).unwrap_err(),
            Error::TooLarge { len: MAX_TOPO_BYTES + 1, max: MAX_TOPO_BYTES }
        );
        let wide =
            format!("GPU0 {}\nGPU0 X\n", (1..=MAX_TOPO_GPUS).map(|i| format!("GPU{i}")).collect::<Vec<_>>().join(" "));
        assert_eq!(err(&wide), format!("line 1: {} GPU columns; at most {MAX_TOPO_GPUS}", MAX_TOPO_GPUS + 1));
        let nics = format!(
            "GPU0 {}\nGPU0 X\n",
            (0..MAX_TOPO_COLUMNS).map(|i| format!("NIC{i}")).collect::<Vec<_>>().join(" ")
        );
        assert_eq!(err(&nics), format!("line 1: more than {MAX_TOPO_COLUMNS} device columns"));
    }

    /// A tiny deterministic generator, so the garbling below needs no dependency.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    /// A result of any input is either an error or a matrix that keeps the invariants.
    fn check_invariants(text: &str) {
        if let Ok(t) = parse_topo_matrix(text) {
            let ids: Vec<u32> = t.gpus().iter().map(|g| g.index).collect();
            assert!(!ids.is_empty() && ids.len() <= MAX_TOPO_GPUS);
            for &a in &ids {
                for &b in &ids {
                    let l = t.level(a, b).unwrap();
                    assert_eq!(l, t.level(b, a).unwrap());
                    assert_eq!(a == b, l == LinkLevel::SameGpu);
                }
            }
        }
    }

    #[test]
    fn truncated_and_garbled_outputs_never_panic() {
        let pieces = [
            "X",
            " X ",
            "NV",
            "NV12",
            "NV255",
            "PIX",
            "\t",
            "\n",
            "  ",
            "GPU9",
            "GPU0",
            "GPU",
            "CPU",
            "Affinity",
            "NUMA",
            "ID",
            "N/A",
            "99999999999",
            "-",
            "\u{0}",
            "é",
            "\u{1b}[31m",
            "Legend:",
            "#",
            "\r\n",
            "SYSSYS",
        ];
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        for (_, text) in FIXTURES {
            // Every truncation at a line end and at a sample of other places.
            let cuts: Vec<usize> =
                text.char_indices().map(|(i, _)| i).filter(|&i| i % 7 == 0 || text[..i].ends_with('\n')).collect();
            for cut in cuts {
                check_invariants(&text[..cut]);
            }
            // Garbled: replace, insert or delete a few spans, hundreds of times per fixture.
            for _ in 0..300 {
                let mut s: Vec<char> = text.chars().collect();
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(s.len());
                    match rng.below(3) {
                        0 => {
                            let end = (at + rng.below(8)).min(s.len());
                            s.drain(at..end);
                        }
                        1 => s.splice(at..at, pieces[rng.below(pieces.len())].chars()).for_each(drop),
                        _ => {
                            let end = (at + 1 + rng.below(4)).min(s.len());
                            s.splice(at..end, pieces[rng.below(pieces.len())].chars()).for_each(drop);
                        }
                    }
                }
                let garbled: String = s.into_iter().collect();
                check_invariants(&garbled);
            }
            // Lines shuffled: rows out of order still parse; a row before the header does not.
            let mut lines: Vec<&str> = text.lines().collect();
            for _ in 0..20 {
                let (i, j) = (rng.below(lines.len()), rng.below(lines.len()));
                lines.swap(i, j);
                check_invariants(&lines.join("\n"));
            }
        }
    }

    #[test]
    fn labels_are_checked() {
        assert_eq!(parse_label("rack=r1").unwrap(), ("rack".to_string(), "r1".to_string()));
        assert_eq!(parse_label("zone=eu-west.1_a").unwrap().1, "eu-west.1_a");
        assert_eq!(
            parse_label("a=b=c").unwrap_err().to_string(),
            "label \"a=b=c\": the value must be 1 to 63 characters of a-z, A-Z, 0-9, '-', '_' and '.', starting with a letter or digit"
        );
        assert_eq!(parse_label("rack").unwrap_err().to_string(), "label \"rack\": expected key=value, e.g. rack=r1");
        for bad in
            ["=r1", "rack=", "-rack=r1", "rack=-r1", "ra ck=r1", "rack=r 1", "räck=r1", "rack=r1\n", "rack=\u{1b}[2J"]
        {
            assert!(parse_label(bad).is_err(), "{bad:?}");
        }
        let key = "k".repeat(MAX_LABEL_LEN);
        assert!(parse_label(&format!("{key}=v")).is_ok());
        let e = parse_label(&format!("{key}k=v")).unwrap_err().to_string();
        assert!(e.contains("… (66 characters)") && e.contains("the key must be"), "{e}");
        let e = parse_label(&format!("rack={}", "v".repeat(100_000))).unwrap_err().to_string();
        assert!(e.len() < 300, "a huge label is not echoed whole: {} bytes", e.len());
    }
}
