//! What `plexus submit --dry-run` prints: the job's tasks, how many replicas of each would start
//! now and where, or why they would wait; and what is ahead of it in its queue.

use plexus_proto::pb;

use super::format::{Table, human_bytes, number};
use crate::client::one_line;

/// The plan of a dry run, `subtasks` in all; `code`: what its working dir would ship.
pub fn dry_run_text(plan: &pb::DryRun, subtasks: u32, code: Option<&str>) -> String {
    let mut out = format!(
        "dry run: nothing was stored. {subtasks} subtask(s) in {} task(s); queue {:?}, priority {}\n",
        plan.tasks.len(),
        plan.queue,
        plan.priority
    );
    let mut t = Table::new(&["TASK", "REPLICAS", "ASKS (EACH)", "NOW"]);
    for task in &plan.tasks {
        let r = task.resources.unwrap_or_default();
        let mut asks = format!("cpu={}", number(r.cpu));
        if r.memory > 0 {
            asks.push_str(&format!(" memory={}", human_bytes(r.memory)));
        }
        if r.gpu > 0 {
            asks.push_str(&format!(" gpu={}", r.gpu));
        }
        t.row(vec![task.task.clone(), task.replicas.to_string(), asks, now_text(task)]);
    }
    out.push_str(&t.render());
    out.push_str(&format!(
        "asks for {} core(s) at once; the live workers have {}\n",
        number(plan.cores),
        number(plan.cluster_cores)
    ));
    out.push_str(&match plan.ahead {
        0 => format!("nothing waits ahead of it in queue {:?}\n", plan.queue),
        n => format!(
            "{n} ready subtask(s) of {} job(s) would be placed before it in queue {:?}\n",
            plan.ahead_jobs, plan.queue
        ),
    });
    if let Some(c) = code {
        out.push_str(c);
        out.push('\n');
    }
    out
}

/// `4 of 6 start now on w1, w2; 2 would wait for room (...)`, `all 3 start now on ...`, or why
/// none would.
fn now_text(t: &pb::TaskPlan) -> String {
    let on = if t.workers.is_empty() {
        String::new()
    } else {
        let short: Vec<&str> = t.workers.iter().map(|w| &w[..w.len().min(12)]).collect();
        format!(" on {}", short.join(", "))
    };
    let waits = one_line(&t.waits);
    match (t.start_now, t.start_now == t.replicas) {
        (0, _) => waits,
        (n, true) => format!("all {n} start now{on}"),
        (n, false) => format!("{n} of {} start now{on}; {waits}", t.replicas),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_says_what_starts_where_and_what_waits() {
        let task = |name: &str, replicas, start_now, workers: &[&str], waits: &str| pb::TaskPlan {
            task: name.into(),
            replicas,
            resources: Some(pb::Resources { cpu: 1.0, memory: 1 << 30, gpu: 0 }),
            start_now,
            workers: workers.iter().map(|w| w.to_string()).collect(),
            waits: waits.into(),
        };
        let plan = pb::DryRun {
            queue: "default".into(),
            priority: 0,
            tasks: vec![
                task(
                    "train",
                    6,
                    4,
                    &["wkr-0123456789abcdef", "wkr-fedcba9876543210"],
                    "2 would wait for room (cpu=1 memory=1.0 GiB gpu=0 each)",
                ),
                task("report", 1, 0, &[], "after task train: starts when it succeeds"),
                task("small", 2, 2, &["wkr-0123456789abcdef"], ""),
            ],
            ahead: 3,
            ahead_jobs: 1,
            cores: 8.0,
            cluster_cores: 4.0,
        };
        let text =
            dry_run_text(&plan, 9, Some("working_dir ./: 3 entries, 400 bytes packed, digest ab (not uploaded)"));
        for part in [
            "dry run: nothing was stored. 9 subtask(s) in 3 task(s); queue \"default\", priority 0\n",
            "train   6         cpu=1 memory=1.0 GiB  4 of 6 start now on wkr-01234567, wkr-fedcba98; 2 would wait for room",
            "report  1         cpu=1 memory=1.0 GiB  after task train: starts when it succeeds",
            "small   2         cpu=1 memory=1.0 GiB  all 2 start now on wkr-01234567",
            "asks for 8 core(s) at once; the live workers have 4\n",
            "3 ready subtask(s) of 1 job(s) would be placed before it in queue \"default\"\n",
            "(not uploaded)\n",
        ] {
            assert!(text.contains(part), "{part}\nin:\n{text}");
        }
    }
}
