//! Attempt log files: written through a pipe that keeps each within the worker's `--log-cap`
//! ([`capture`]), and their tails read for final reports and for `ReadLog`.

use std::io::SeekFrom;
use std::path::{Path, PathBuf};

use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio::task::JoinHandle;

/// How much of stdout and of stderr a final report carries: the contract's "last 64 KiB".
pub const REPORT_TAIL_BYTES: u64 = 64 * 1024;

/// The last `max` bytes of a file and whether earlier bytes were cut; `None` when the file does
/// not exist.
pub async fn read_tail(path: &Path, max: u64) -> std::io::Result<Option<(Vec<u8>, bool)>> {
    let mut f = match tokio::fs::File::open(path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = f.metadata().await?.len();
    let start = len.saturating_sub(max);
    f.seek(SeekFrom::Start(start)).await?;
    let mut buf = Vec::with_capacity(usize::try_from(len - start).unwrap_or(0));
    // `take` bounds the read even if the file grows while we read it.
    (&mut f).take(max).read_to_end(&mut buf).await?;
    Ok(Some((buf, start > 0)))
}

/// Like [`read_tail`], but an absent or unreadable file is simply empty: used for final reports,
/// where a missing log must not turn into a second error.
pub async fn tail_or_empty(path: &Path, max: u64) -> Vec<u8> {
    match read_tail(path, max).await {
        Ok(Some((bytes, _))) => bytes,
        Ok(None) => Vec::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "could not read a log file");
            Vec::new()
        }
    }
}

/// The default of `--log-cap`: 64 MiB of each stream of each attempt.
pub const DEFAULT_LOG_CAP: u64 = 64 << 20;

/// One stream of an attempt being written to its log file: the pipe's write end, which the
/// process (or a collective) gets as its stdout or stderr, and the task copying the pipe into
/// the file.
pub struct Capture {
    pub writer: std::fs::File,
    copier: JoinHandle<std::io::Result<()>>,
}

/// How long the copy may go on after the attempt ended: what its processes wrote is in the pipe
/// by then, and only a process that escaped the attempt's confinement still holds it open.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl Capture {
    /// Waits (bounded) until everything written was copied, once the writer is closed.
    pub async fn finish(self, path: &Path) {
        let Capture { writer, mut copier } = self;
        drop(writer);
        match tokio::time::timeout(DRAIN_TIMEOUT, &mut copier).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(path = %path.display(), error = %e, "writing a log file failed"),
            Ok(Err(e)) => tracing::warn!(path = %path.display(), error = %e, "the log copier failed"),
            Err(_) => {
                copier.abort();
                tracing::warn!(path = %path.display(), "a process outside the attempt still holds its log open; no longer copied");
            }
        }
    }
}

/// Creates the log file `path` and a pipe into it whose copier keeps the file within `cap`
/// bytes: past it, the first quarter and the latest part (at least a quarter, from a line
/// start where one is near) are kept, with a line `[plexus: N bytes dropped]` between them, and
/// `N` kept in [`dropped_path`] for `ReadLog`.
pub fn capture(path: &Path, cap: u64) -> std::io::Result<Capture> {
    // Readable too: cutting the file reads back what it keeps.
    let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
    let (reader, writer) = std::io::pipe()?;
    let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(std::os::fd::OwnedFd::from(reader))?;
    let copier = tokio::spawn(copy_capped(reader, tokio::fs::File::from_std(file), path.to_path_buf(), cap));
    Ok(Capture { writer: std::fs::File::from(std::os::fd::OwnedFd::from(writer)), copier })
}

/// Where the count of bytes dropped from log `path` is kept (absent: none were).
pub fn dropped_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".dropped");
    PathBuf::from(name)
}

/// The bytes dropped from log `path` (0 when none were, or the count cannot be read).
pub async fn dropped_bytes(path: &Path) -> u64 {
    tokio::fs::read_to_string(dropped_path(path)).await.ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

async fn copy_capped(
    mut pipe: tokio::net::unix::pipe::Receiver,
    mut file: tokio::fs::File,
    path: PathBuf,
    cap: u64,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 << 10];
    let mut len = 0u64;
    let mut kept = Kept { head: cap / 4, marker: 0, dropped: 0 };
    loop {
        let n = pipe.read(&mut buf).await?;
        if n == 0 {
            return file.flush().await;
        }
        file.write_all(&buf[..n]).await?;
        len += n as u64;
        if len > cap {
            file.flush().await?;
            let std = file.try_clone().await?.into_std().await;
            let (new_len, k) = tokio::task::spawn_blocking(move || kept.compact(&std, len, cap / 4)).await??;
            (len, kept) = (new_len, k);
            file.seek(SeekFrom::Start(len)).await?;
            tokio::fs::write(dropped_path(&path), format!("{}\n", kept.dropped)).await?;
        }
    }
}

/// The layout of a log file that was cut: `head` bytes as written, a marker line of `marker`
/// bytes saying how many were `dropped`, then the latest part.
#[derive(Clone, Copy, Debug)]
struct Kept {
    head: u64,
    marker: u64,
    dropped: u64,
}

impl Kept {
    /// Drops what lies between the marker and the last `keep` bytes of the `len` written (from
    /// the next line start, when one is within 4 KiB), rewrites the marker, and returns the new
    /// length.
    fn compact(mut self, f: &std::fs::File, len: u64, keep: u64) -> std::io::Result<(u64, Kept)> {
        use std::os::unix::fs::FileExt;
        let mut from = len.saturating_sub(keep).max(self.head + self.marker);
        let mut probe = vec![0u8; 4096];
        let n = f.read_at(&mut probe, from)?;
        if let Some(i) = probe[..n].iter().position(|&b| b == b'\n') {
            from += i as u64 + 1;
        }
        self.dropped += from - (self.head + self.marker);
        let mut last = [0u8; 1];
        let newline =
            if self.head > 0 && f.read_at(&mut last, self.head - 1)? == 1 && last[0] != b'\n' { "\n" } else { "" };
        let marker = format!("{newline}[plexus: {} bytes dropped]\n", self.dropped);
        f.write_all_at(marker.as_bytes(), self.head)?;
        self.marker = marker.len() as u64;
        // Forward, chunk by chunk: the destination lies before the source.
        let mut to = self.head + self.marker;
        let mut chunk = vec![0u8; 1 << 20];
        while from < len {
            let n = f.read_at(&mut chunk, from)?;
            if n == 0 {
                break;
            }
            f.write_all_at(&chunk[..n], to)?;
            (from, to) = (from + n as u64, to + n as u64);
        }
        f.set_len(to)?;
        Ok((to, self))
    }
}

/// The prefix of the lines a task prints to report one iteration's time in milliseconds:
/// `plexus:iter_ms=12.5`.
pub const ITER_MS_PREFIX: &str = "plexus:iter_ms=";

/// The median of the iteration times a task printed (lines starting with [`ITER_MS_PREFIX`],
/// values finite, positive and below a day) in `stdout`, and how many there were; (0, 0) when
/// none.
pub fn iteration_times(stdout: &[u8]) -> (f64, u32) {
    let mut v: Vec<f64> = stdout
        .split(|&b| b == b'\n')
        .filter_map(|line| std::str::from_utf8(line).ok())
        .filter_map(|line| line.trim().strip_prefix(ITER_MS_PREFIX))
        .filter_map(|ms| ms.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms > 0.0 && *ms < 86_400_000.0)
        .collect();
    if v.is_empty() {
        return (0.0, 0);
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    (median, u32::try_from(n).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iteration_times_are_the_median_of_well_formed_lines() {
        let out = b"epoch 1\nplexus:iter_ms=12.5\nplexus:iter_ms=10\n  plexus:iter_ms=11 \nplexus:iter_ms=NaN\nplexus:iter_ms=-3\nplexus:iter_ms=x\nplexus:iter_ms=14\n";
        assert_eq!(iteration_times(out), (11.75, 4));
        assert_eq!(iteration_times(b"no lines\n"), (0.0, 0));
        assert_eq!(iteration_times(b"plexus:iter_ms=1e300\n\xff\xfe\n"), (0.0, 0));
    }

    #[tokio::test]
    async fn tails_are_cut_from_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        assert!(read_tail(&p, 10).await.unwrap().is_none());
        assert!(tail_or_empty(&p, 10).await.is_empty());
        std::fs::write(&p, b"0123456789abcdef").unwrap();
        assert_eq!(read_tail(&p, 4).await.unwrap(), Some((b"cdef".to_vec(), true)));
        assert_eq!(read_tail(&p, 16).await.unwrap(), Some((b"0123456789abcdef".to_vec(), false)));
        assert_eq!(read_tail(&p, 100).await.unwrap(), Some((b"0123456789abcdef".to_vec(), false)));
        assert_eq!(tail_or_empty(&p, 2).await, b"ef".to_vec());
    }

    /// A stream far past the cap leaves a file within it: the first quarter, the marker, the
    /// latest part from a line start; what is kept and what was dropped add up to what was
    /// written, and the count is kept beside the log.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_capture_keeps_the_start_and_the_end_within_the_cap() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.1.out");
        let cap = 16 << 10;
        let c = capture(&p, cap).unwrap();
        let mut w = c.writer.try_clone().unwrap();
        let writer = tokio::task::spawn_blocking(move || {
            let mut written = 0u64;
            for i in 0..20_000u32 {
                let line = format!("line {i:010}\n");
                w.write_all(line.as_bytes()).unwrap();
                written += line.len() as u64;
            }
            written
        });
        let written = writer.await.unwrap();
        c.finish(&p).await;
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.len() as u64 <= cap, "{} bytes", text.len());
        assert!(text.starts_with("line 0000000000\n") && text.ends_with("line 0000019999\n"));
        let marker = text.lines().find(|l| l.starts_with("[plexus: ")).expect("a marker");
        let dropped = dropped_bytes(&p).await;
        assert_eq!(marker, format!("[plexus: {dropped} bytes dropped]"));
        let kept = text.len() as u64 - marker.len() as u64 - 1;
        assert_eq!(kept + dropped, written);
        // Under the cap: the file as written, nothing dropped.
        let q = dir.path().join("0.2.out");
        let mut c = capture(&q, cap).unwrap();
        c.writer.write_all(b"short\n").unwrap();
        c.finish(&q).await;
        assert_eq!(std::fs::read_to_string(&q).unwrap(), "short\n");
        assert_eq!(dropped_bytes(&q).await, 0);
    }
}
