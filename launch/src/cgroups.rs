//! What a worker leaves behind when it is killed rather than stopped: cgroups of its subtasks
//! (maybe with processes in them). Its next start would clean them; a launcher that will not
//! start it again does it instead.

use std::path::Path;
use std::time::Duration;

/// Kills whatever is left in the cgroups of worker `id` (`<cgroup mount>/plexus/<id>/…`, in every
/// cgroup hierarchy mounted here) and removes them, and the shared `plexus` parent if it is empty
/// then. What the worker's next start would do; a test's worker has none.
pub fn remove_worker_cgroups(id: &str) {
    if !id.starts_with("wkr-") || id.contains('/') {
        return;
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for line in mounts.lines() {
        let Some((left, right)) = line.split_once(" - ") else { continue };
        if !(right.starts_with("cgroup ") || right.starts_with("cgroup2 ")) {
            continue;
        }
        let Some(point) = left.split(' ').nth(4) else { continue };
        let shared = Path::new(point).join("plexus");
        let parent = shared.join(id);
        // Parents before children, then removed children first.
        let mut dirs = Vec::new();
        let mut stack = vec![parent];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else { continue };
            stack.extend(rd.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
            dirs.push(d);
        }
        for d in dirs.iter().rev() {
            for _ in 0..100 {
                let pids: Vec<i32> = std::fs::read_to_string(d.join("cgroup.procs"))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .filter(|&p: &i32| p > 1 && p != std::process::id() as i32)
                    .collect();
                if pids.is_empty() {
                    break;
                }
                for p in pids {
                    // SAFETY: kill(2); the pid is in a cgroup a test's worker made for its tasks.
                    unsafe { libc::kill(p, libc::SIGKILL) };
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = std::fs::remove_dir(d);
        }
        let _ = std::fs::remove_dir(&shared);
    }
}
