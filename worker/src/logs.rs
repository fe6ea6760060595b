//! Reading the tails of attempt log files, for final reports and for `ReadLog`.

use std::io::SeekFrom;
use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncSeekExt};

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
}
