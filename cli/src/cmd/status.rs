//! `plexus status [JOB] [-o table|json] [--subtasks]`: the job list, or one job in detail.

use std::process::ExitCode;

use plexus_proto::pb::{GetJobRequest, ListCoordinatorsRequest, ListJobsRequest};

use crate::args::{OutputFormat, StateFilter, StatusArgs};
use crate::output::Detail;
use crate::{client, output};
use plexus_proto::pb::JobStatus;

pub async fn run(target: &crate::client::Target, args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let mut client = client::connect(target).await?;
    let now = plexus_proto::now_ms();
    let text = match &args.job {
        None => {
            let mut jobs = client.list_jobs(ListJobsRequest {}).await?.into_inner().jobs;
            filter_jobs(&mut jobs, args);
            match args.output {
                OutputFormat::Table | OutputFormat::Wide => {
                    // With several coordinators, which one leads comes first.
                    let coordinators = client
                        .list_coordinators(ListCoordinatorsRequest {})
                        .await
                        .map(|r| r.into_inner().coordinators)
                        .unwrap_or_default();
                    let mut text = String::new();
                    if coordinators.len() > 1 {
                        let leader = coordinators.iter().find(|c| c.leader).map(|c| c.url.as_str()).unwrap_or("none");
                        text.push_str(&format!(
                            "control plane: {} coordinators, leader {leader} (plexus coordinators)\n",
                            coordinators.len()
                        ));
                    }
                    text.push_str(&output::jobs_table(&jobs, now, args.output == OutputFormat::Wide));
                    text
                }
                OutputFormat::Json => output::json(&output::job_list_view(&jobs)),
            }
        }
        Some(job) => {
            let job = client::resolve_job(&mut client, job).await?;
            // JSON always carries the subtasks: a script should not need a second call.
            let detail = match (args.output, args.subtasks) {
                (OutputFormat::Json, _) | (_, true) => Detail::WithSubtasks,
                (OutputFormat::Table | OutputFormat::Wide, false) => Detail::Summary,
            };
            let request = GetJobRequest { job_id: job.to_string(), subtasks: detail == Detail::WithSubtasks };
            let status = client.get_job(request).await?.into_inner();
            match args.output {
                OutputFormat::Table | OutputFormat::Wide => output::job_detail(&status, detail, now),
                OutputFormat::Json => output::json(&output::job_view(&status, detail)),
            }
        }
    };
    output::print(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// `--state`, `--name` (substring) and `--limit` (the newest N, by submission time) on the list.
pub fn filter_jobs(jobs: &mut Vec<JobStatus>, args: &StatusArgs) {
    if let Some(state) = args.state {
        let want = match state {
            StateFilter::Pending => "pending",
            StateFilter::Blocked => "blocked",
            StateFilter::Running => "running",
            StateFilter::Succeeded => plexus_proto::JobState::Succeeded.as_str(),
            StateFilter::Failed => plexus_proto::JobState::Failed.as_str(),
            StateFilter::Cancelled => plexus_proto::JobState::Cancelled.as_str(),
            StateFilter::CompletedWithFailures => plexus_proto::JobState::CompletedWithFailures.as_str(),
        };
        jobs.retain(|j| output::job_phase(j) == want);
    }
    if let Some(name) = &args.name {
        jobs.retain(|j| j.name.contains(name.as_str()));
    }
    if let Some(limit) = args.limit
        && jobs.len() > limit
    {
        // Keep the newest `limit`, in the order listed.
        let mut newest_first: Vec<usize> = (0..jobs.len()).collect();
        newest_first.sort_by_key(|&i| std::cmp::Reverse(jobs[i].submitted_at));
        let keep: std::collections::HashSet<usize> = newest_first.into_iter().take(limit).collect();
        let mut i = 0;
        jobs.retain(|_| {
            i += 1;
            keep.contains(&(i - 1))
        });
    }
}

/// `plexus coordinators`: every coordinator of the control plane, the leader first.
pub async fn coordinators(
    target: &crate::client::Target,
    format: crate::args::OutputFormat,
) -> anyhow::Result<ExitCode> {
    let mut client = client::connect(target).await?;
    let r = client.list_coordinators(ListCoordinatorsRequest {}).await?.into_inner();
    if format == crate::args::OutputFormat::Json {
        let list: Vec<serde_json::Value> = r
            .coordinators
            .iter()
            .map(|c| serde_json::json!({ "id": c.id, "url": c.url, "leader": c.leader, "started_at_ms": c.started_ms, "answered": c.me }))
            .collect();
        output::print(&output::json(&serde_json::json!({ "store": r.store, "coordinators": list })))?;
        return Ok(ExitCode::SUCCESS);
    }
    let now = plexus_proto::now_ms();
    let mut text = format!("store: {}\n{:<8} {:<40} {:<10} {}\n", r.store, "ROLE", "URL", "UP", "ID");
    for c in &r.coordinators {
        let up = humantime::format_duration(std::time::Duration::from_secs(now.saturating_sub(c.started_ms) / 1000))
            .to_string();
        let role = if c.leader { "leader" } else { "standby" };
        text.push_str(&format!("{role:<8} {:<40} {up:<10} {}\n", c.url, c.id));
    }
    if !r.coordinators.iter().any(|c| c.leader) {
        text.push_str("no coordinator leads right now (an election is under way, or etcd is unreachable)\n");
    }
    output::print(&text)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use plexus_proto::pb::JobState;

    fn job(name: &str, state: JobState, at: u64) -> JobStatus {
        JobStatus {
            job_id: format!("job-{at:032x}"),
            name: name.into(),
            state: state as i32,
            submitted_at: at,
            ..Default::default()
        }
    }

    fn args(extra: &[&str]) -> StatusArgs {
        let cli = crate::args::Cli::try_parse_from([&["plexus", "status"], extra].concat()).unwrap();
        match cli.command {
            crate::args::Command::Status(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn filters_by_state_name_and_newest() {
        let all = vec![
            job("etl-a", JobState::Running, 1),
            job("train", JobState::Running, 5),
            job("etl-b", JobState::Failed, 3),
            job("etl-c", JobState::Running, 4),
        ];
        let names = |v: &[JobStatus]| v.iter().map(|j| j.name.clone()).collect::<Vec<_>>();
        let mut v = all.clone();
        filter_jobs(&mut v, &args(&["--state", "running", "--name", "etl"]));
        assert_eq!(names(&v), ["etl-a", "etl-c"]);
        let mut v = all.clone();
        filter_jobs(&mut v, &args(&["--limit", "2"]));
        assert_eq!(names(&v), ["train", "etl-c"], "the two newest, in listed order");
        let mut v = all.clone();
        filter_jobs(&mut v, &args(&["--limit", "0"]));
        assert!(v.is_empty());
        let mut v = all;
        filter_jobs(&mut v, &args(&["--state", "cancelled"]));
        assert!(v.is_empty());
    }
}
