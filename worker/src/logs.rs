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

#[cfg(test)]
mod tests {
    use super::*;

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
