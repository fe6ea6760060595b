//! Tests of job files: parsing, validation, and the line each error names.

use plexus_proto::rules;
use plexus_proto::{Algorithm, DType, ExchangeSchedule, ReduceOp, Resources, Split};

use super::*;

fn toml(src: &str) -> Result<JobSpec, SpecError> {
    parse(src, Format::Toml, "job.toml")
}

const FAN: &str = r#"
name = "fan"

[[task]]
name = "gen"
command = ["sh", "-c", "echo $PLEXUS_RANK > $PLEXUS_OUT/numbers"]
replicas = 8
outputs = ["numbers"]
memory = "64MiB"
timeout = "30s"
max_retries = 2

[[task]]
name = "sum"
command = "cat $PLEXUS_IN/gen/*/numbers | paste -sd+ | bc > $PLEXUS_OUT/total"
inputs = ["gen/numbers"]
outputs = ["total"]
cpu = 0.5
"#;

#[test]
fn parses_a_fan_out_fan_in_job() {
    let j = toml(FAN).unwrap();
    assert_eq!(j.name, "fan");
    assert_eq!(j.total_subtasks(), 9);
    let gen_task = &j.tasks[0];
    assert_eq!(gen_task.replicas, 8);
    assert_eq!(gen_task.resources, Resources { cpu: 1.0, memory: 64 << 20, gpu: 0 });
    assert_eq!(gen_task.timeout_ms, 30_000);
    assert_eq!(gen_task.max_retries, 2);
    let sum = &j.tasks[1];
    assert_eq!(sum.after, vec!["gen".to_string()], "an input implies a dependency");
    assert_eq!(
        sum.work,
        Work::Command(vec![
            "sh".into(),
            "-c".into(),
            "cat $PLEXUS_IN/gen/*/numbers | paste -sd+ | bc > $PLEXUS_OUT/total".into()
        ])
    );
    assert_eq!(sum.inputs, vec![InputSpec { task: "gen".into(), output: "numbers".into(), rank: InputRank::All }]);
}

#[test]
fn json_is_accepted_too() {
    let src = r#"{"name": "j", "tasks": [{"name": "a", "kind": "noop", "replicas": 3, "cpu": 0}]}"#;
    let j = parse(src, Format::Json, "j.json").unwrap();
    assert_eq!(j.tasks[0].work, Work::Kind("noop".into()));
    assert_eq!(j.tasks[0].resources.cpu, 0.0);
}

#[test]
fn bad_toml_names_the_line() {
    let e = toml("name = \"x\"\n[[task]]\nname = \"a\"\ncommand = [\"true\"\n").unwrap_err();
    assert_eq!(e.line, Some(4), "{e}");
    assert!(e.to_string().starts_with("job.toml:4:"), "{e}");
}

#[test]
fn unknown_field_is_rejected_with_its_line() {
    let e = toml("[[task]]\nname = \"a\"\ncommand = [\"true\"]\ncpus = 2\n").unwrap_err();
    assert!(e.message.contains("unknown field `cpus`"), "{e}");
    assert_eq!(e.line, Some(4));
}

#[test]
fn duplicate_task_names_point_at_the_second() {
    let e = toml("[[task]]\nname = \"a\"\nkind = \"noop\"\n[[task]]\nname = \"a\"\nkind = \"noop\"\n").unwrap_err();
    assert_eq!(e.message, "duplicate task name \"a\"");
    assert_eq!(e.line, Some(5));
}

#[test]
fn unknown_dependency() {
    let e = toml("[[task]]\nname = \"a\"\nkind = \"noop\"\nafter = [\"b\"]\n").unwrap_err();
    assert_eq!(e.message, "task \"a\": unknown dependency \"b\" in `after`");
    assert_eq!(e.line, Some(4));
}

#[test]
fn cycles_are_named() {
    let src = "[[task]]\nname = \"a\"\nkind = \"noop\"\nafter = [\"c\"]\n[[task]]\nname = \"b\"\nkind = \"noop\"\nafter = [\"a\"]\n[[task]]\nname = \"c\"\nkind = \"noop\"\nafter = [\"b\"]\n";
    let e = toml(src).unwrap_err();
    assert!(e.message.starts_with("dependency cycle: "), "{e}");
    // Every member appears and the cycle closes on its first name.
    let names: Vec<&str> = e.message["dependency cycle: ".len()..].split(" -> ").collect();
    assert_eq!(names.len(), 4);
    assert_eq!(names[0], names[3]);
    for n in ["a", "b", "c"] {
        assert!(names.contains(&n));
    }
    let self_loop = toml("[[task]]\nname = \"a\"\nkind = \"noop\"\nafter = [\"a\"]\n").unwrap_err();
    assert_eq!(self_loop.message, "dependency cycle: a -> a");
}

#[test]
fn collectives_take_one_member_per_producer_replica() {
    let producer = "[[task]]\nname = \"g\"\ncommand = \"true\"\nreplicas = 4\noutputs = [\"x\"]\n";
    let j = toml(&format!("{producer}[[task]]\nname = \"s\"\nkind = \"allreduce\"\ninputs = [\"g/x\"]\noutputs = [\"y\"]\ndtype = \"f32\"\n")).unwrap();
    let s = &j.tasks[1];
    assert_eq!(s.replicas, 4);
    assert_eq!(
        s.collective,
        Some(CollectiveSpec {
            dtype: DType::F32,
            op: ReduceOp::Sum,
            root: 0,
            algorithm: Algorithm::Auto,
            exchange: None
        })
    );
    assert_eq!(j.total_subtasks(), 8);
    let r = toml(&format!(
        "{producer}[[task]]\nname = \"r\"\nkind = \"reduce\"\ninputs = [\"g/x\"]\noutputs = [\"y\"]\ndtype = \"i64\"\nop = \"max\"\nroot = 3\nalgorithm = \"ring\"\nreplicas = 4\n"
    ))
    .unwrap();
    assert_eq!(
        r.tasks[1].collective.as_ref().map(|c| (c.op.name(), c.root, c.algorithm.name())),
        Some(("max", 3, "ring"))
    );

    let bad = |task: &str| toml(&format!("{producer}[[task]]\nname = \"s\"\n{task}")).unwrap_err().message;
    let ar = "kind = \"allreduce\"\noutputs = [\"y\"]\n";
    assert!(bad(&format!("{ar}inputs = [\"g/x\"]\n")).contains("needs `dtype`"));
    assert!(
        bad(&format!("{ar}inputs = [\"g/x\"]\ndtype = \"f16\"\n"))
            .contains("dtype = \"f16\" is not one of f32, f64, i32, i64")
    );
    assert!(bad(&format!("{ar}inputs = [\"g/x\"]\ndtype = \"f32\"\nop = \"avg\"\n")).contains("op = \"avg\""));
    assert!(
        bad(&format!("{ar}inputs = [\"g/x\"]\ndtype = \"f32\"\nroot = 1\n")).contains("`root` is only for a reduce")
    );
    assert!(
        bad(&format!("{ar}inputs = [\"g/x\"]\ndtype = \"f32\"\nreplicas = 3\n"))
            .contains("one member per replica of \"g\", which has 4")
    );
    assert!(bad(&format!("{ar}dtype = \"f32\"\n")).contains("exactly one input"));
    assert!(
        bad("kind = \"reduce\"\ninputs = [\"g/x\"]\noutputs = [\"y\"]\ndtype = \"f32\"\nroot = 4\n")
            .contains("root = 4 is not a member's rank")
    );
    assert!(bad("kind = \"reduce\"\ninputs = [\"g/x\"]\ndtype = \"f32\"\n").contains("exactly one output"));
    assert!(bad("command = \"true\"\ndtype = \"f32\"\n").contains("`dtype` is only for the collective kinds"));
}

#[test]
fn a_communicator_command_is_a_gang_of_all_its_members() {
    let job = |task: &str| toml(&format!("[[task]]\nname = \"t\"\nreplicas = 4\n{task}"));
    let j = job("command = \"python train.py\"\ncommunicator = true\n").unwrap();
    let t = &j.tasks[0];
    assert!(t.collective.is_some(), "placed and restarted as a collective");
    assert_eq!(t.gang.as_ref().map(|g| g.min_members), Some(4), "a gang of all its members");
    let plain = job("command = \"true\"\ncommunicator = false\n").unwrap();
    assert!(plain.tasks[0].collective.is_none() && plain.tasks[0].gang.is_none());
    let err = |task: &str| job(task).unwrap_err().message;
    assert!(err("kind = \"noop\"\ncommunicator = true\n").contains("`communicator = true` is for command tasks"));
    assert!(
        err("command = \"true\"\ncommunicator = true\nmin_members = 2\n").contains("already a gang of all its members")
    );
}

#[test]
fn a_checkpoint_is_one_of_the_command_tasks_outputs() {
    let job = |task: &str| toml(&format!("[[task]]\nname = \"t\"\nreplicas = 2\n{task}"));
    let j = job("command = \"true\"\noutputs = [\"ckpt\", \"log\"]\ncheckpoint = \"ckpt\"\n").unwrap();
    assert_eq!(j.tasks[0].checkpoint.as_deref(), Some("ckpt"));
    assert_eq!(job("command = \"true\"\n").unwrap().tasks[0].checkpoint, None);
    let err = |task: &str| job(task).unwrap_err().message;
    assert!(
        err("command = \"true\"\noutputs = [\"log\"]\ncheckpoint = \"ckpt\"\n")
            .contains("checkpoint \"ckpt\" is not one of its outputs")
    );
    assert!(
        err("kind = \"noop\"\noutputs = [\"c\"]\ncheckpoint = \"c\"\n").contains("`checkpoint` is for command tasks")
    );
    assert!(
        err("command = \"true\"\noutputs = [\"c\", \"c.attempt-2\"]\ncheckpoint = \"c\"\n")
            .contains("output \"c.attempt-2\" is named like a kept copy of checkpoint \"c\"")
    );
    let long = "c".repeat(101);
    assert!(
        err(&format!("command = \"true\"\noutputs = [\"{long}\"]\ncheckpoint = \"{long}\"\n"))
            .contains("is longer than 100 characters")
    );
}

#[test]
fn alltoall_and_redistribute_are_gangs_with_their_own_fields() {
    let producer = "[[task]]\nname = \"g\"\ncommand = \"true\"\nreplicas = 4\noutputs = [\"x\", \"split\"]\n";
    let job = |task: &str| toml(&format!("{producer}[[task]]\nname = \"s\"\noutputs = [\"y\"]\n{task}"));
    let a = job("kind = \"alltoall\"\ninputs = [\"g/x\"]\ndtype = \"i32\"\n").unwrap();
    let s = &a.tasks[1];
    let x = s.collective.as_ref().and_then(|c| c.exchange.clone()).expect("an exchange");
    assert_eq!((s.replicas, x.schedule, x.split), (4, ExchangeSchedule::Auto, Split::Equal), "auto by default");
    for name in ["css", "pairwise", "shift", "direct"] {
        let o =
            job(&format!("kind = \"alltoall\"\ninputs = [\"g/x\"]\ndtype = \"i32\"\nschedule = \"{name}\"\n")).unwrap();
        let x = o.tasks[1].collective.as_ref().and_then(|c| c.exchange.clone()).unwrap();
        assert_eq!(x.schedule.name(), name, "the job file overrides the cost model");
    }
    assert_eq!(s.gang.as_ref().map(|g| g.min_members), Some(4), "a gang of all its members");
    let t = job("kind = \"alltoall\"\ninputs = [\"g/x\"]\ndtype = \"f64\"\nschedule = \"shift\"\ncounts = [[1,2,3,4],[0,0,0,0],[5,5,5,5],[9,0,0,1]]\n").unwrap();
    let x = t.tasks[1].collective.as_ref().and_then(|c| c.exchange.clone()).unwrap();
    assert_eq!((x.split, x.schedule, x.counts.len(), x.counts[8]), (Split::Counts, ExchangeSchedule::Shift, 16, 5));
    let f = job("kind = \"alltoall\"\ninputs = [\"g/x\", \"g/split\"]\ndtype = \"i64\"\nsplit = \"file\"\n").unwrap();
    assert_eq!(f.tasks[1].inputs.len(), 2);

    // A redistribute's gang is max(P, Q).
    let r = job(
        "kind = \"redistribute\"\ninputs = [\"g/x\"]\ndtype = \"f32\"\nfrom_block = 3\nto_block = 5\nreplicas = 6\n",
    )
    .unwrap();
    let red = r.tasks[1].collective.as_ref().and_then(|c| c.exchange.as_ref()).and_then(|x| x.redistribute).unwrap();
    assert_eq!(
        (r.tasks[1].replicas, red),
        (6, Redistribution { senders: 4, from_block: 3, receivers: 6, to_block: 5, remap: None })
    );
    // Seed 004's remapping after loop partitioning: the strides default to 1, offsets to 0.
    let m = job("kind = \"redistribute\"\ninputs = [\"g/x\"]\ndtype = \"f32\"\nfrom_block = 3\nto_block = 4\nreplicas = 5\nremap = { a1 = 3, b1 = 4, a2 = 2, iterations = 60, len = 182 }\n").unwrap();
    let red = m.tasks[1].collective.as_ref().and_then(|c| c.exchange.as_ref()).and_then(|x| x.redistribute).unwrap();
    assert_eq!(red.remap, Some(Remap { a1: 3, b1: 4, a2: 2, b2: 0, iterations: 60, len: 182 }));
    let r = job("kind = \"redistribute\"\ninputs = [\"g/x\"]\ndtype = \"f32\"\nfrom_block = 3\nto_block = 5\nreplicas = 2\nschedule = \"seed\"\n").unwrap();
    assert_eq!(r.tasks[1].replicas, 4);
    // A collective over a redistribute's output has one member per member of its gang.
    let chained = toml(&format!(
        "{producer}[[task]]\nname = \"r\"\nkind = \"redistribute\"\ninputs = [\"g/x\"]\noutputs = [\"y\"]\ndtype = \"f32\"\nfrom_block = 1\nto_block = 2\nreplicas = 7\n\
         [[task]]\nname = \"s\"\nkind = \"allreduce\"\ninputs = [\"r/y\"]\noutputs = [\"z\"]\ndtype = \"f32\"\n"
    ))
    .unwrap();
    assert_eq!(chained.tasks[2].replicas, 7);

    let bad = |task: &str| job(task).unwrap_err().message;
    let a2a = "kind = \"alltoall\"\ninputs = [\"g/x\"]\ndtype = \"i32\"\n";
    let red = "kind = \"redistribute\"\ninputs = [\"g/x\"]\ndtype = \"i32\"\n";
    for (task, want) in [
        (format!("{a2a}counts = [[1,2,3,4],[1,2,3,4]]\n"), "counts has 2 rows; it needs one per member (4"),
        (format!("{a2a}counts = [[1,2,3,4],[1,2,3],[1,2,3,4],[1,2,3,4]]\n"), "counts[1] has 3 entries"),
        (format!("{a2a}split = \"counts\"\n"), "split = \"counts\" needs a `counts` table"),
        (format!("{a2a}split = \"equal\"\ncounts = [[1]]\n"), "split = \"equal\" is not one of counts"),
        (format!("{a2a}split = \"file\"\n"), "split = \"file\" takes two inputs"),
        (format!("{a2a}split = \"thirds\"\n"), "split = \"thirds\" is not one of equal, counts, file"),
        (format!("{a2a}schedule = \"seed\"\n"), "schedule = \"seed\" is not one of css, shift, pairwise"),
        (format!("{a2a}op = \"sum\"\n"), "`op` is not a field of an alltoall"),
        (format!("{a2a}from_block = 2\n"), "`from_block` is not a field of an alltoall"),
        (format!("{a2a}remap = {{ iterations = 1, len = 1 }}\n"), "`remap` is not a field of an alltoall"),
        (format!("{red}from_block = 2\nto_block = 2\nremap = {{ len = 4 }}\n"), "remap.iterations is missing"),
        (
            format!("{red}from_block = 2\nto_block = 2\nremap = {{ a1 = 0, iterations = 2, len = 4 }}\n"),
            "remap.a1 = 0 must be at least 1",
        ),
        (
            format!("{red}from_block = 2\nto_block = 2\nremap = {{ a1 = 3, iterations = 2, len = 3 }}\n"),
            "the loop writes A[3·1 + 0] = A[3], but len = 3",
        ),
        (
            format!("{red}from_block = 2\nto_block = 2\nschedule = \"seed\"\nremap = {{ iterations = 2, len = 3 }}\n"),
            "not of a `remap`",
        ),
        (format!("{a2a}replicas = 2\n"), "one member per replica of \"g\", which has 4"),
        ("kind = \"alltoall\"\ninputs = [\"g/x\"]\n".to_string(), "needs `dtype`"),
        (format!("{red}to_block = 5\n"), "a redistribute needs `from_block`"),
        (format!("{red}from_block = 5\n"), "a redistribute needs `to_block`"),
        (format!("{red}from_block = 0\nto_block = 5\n"), "from_block = 0: a block size must be at least 1 element"),
        (format!("{red}from_block = 2\nto_block = -5\n"), "to_block = -5: a block size must be at least 1 element"),
        (
            format!("{red}from_block = 2\nto_block = 99999999999\n"),
            "to_block = 99999999999 is larger than the largest block",
        ),
        (format!("{red}from_block = 2\nto_block = 2\nsplit = \"equal\"\n"), "`split` is not a field of a redistribute"),
        (
            format!("{red}from_block = 2\nto_block = 2\nalgorithm = \"ring\"\n"),
            "`algorithm` is not a field of a redistribute",
        ),
        (
            "kind = \"allreduce\"\ninputs = [\"g/x\"]\ndtype = \"i32\"\nschedule = \"css\"\n".to_string(),
            "`schedule` is not a field of an allreduce",
        ),
        ("command = \"true\"\nfrom_block = 3\n".to_string(), "`from_block` is only for the collective kinds"),
    ] {
        let e = bad(&task);
        assert!(e.contains(want), "{task}: {e}");
    }
    let e = toml(&format!("{producer}[[task]]\nname = \"h\"\ncommand = \"true\"\noutputs = [\"s\"]\n[[task]]\nname = \"s\"\noutputs = [\"y\"]\nkind = \"alltoall\"\ninputs = [\"g/x\", \"h/s\"]\ndtype = \"i32\"\nsplit = \"file\"\n"))
        .unwrap_err()
        .message;
    assert!(e.contains("the split file must come from the data's producer \"g\", not \"h\""), "{e}");
}

#[test]
fn gpu_sharing_and_profile_fields_are_checked() {
    let one = |extra: &str| toml(&format!("[[task]]\nname = \"t\"\ncommand = \"true\"\n{extra}"));
    let t = one("gpu_share = true\ngpu_memory = \"10GiB\"\ngpu_util = 0.6\nmodel_size = \"100MiB\"\n").unwrap();
    let task = &t.tasks[0];
    assert_eq!(task.resources.gpu, 0, "a sharing task holds no whole device");
    assert!(task.shares_gpu());
    assert_eq!(
        task.gpu_profile,
        Some(GpuProfile { share: true, memory: 10 << 30, utilisation: Some(0.6), model_bytes: 100 << 20 })
    );
    let t = one("gpu = 2\nmodel_size = 1000\n").unwrap();
    assert_eq!((t.tasks[0].resources.gpu, t.tasks[0].shares_gpu(), t.tasks[0].shared_gpu_memory()), (2, false, 0));
    assert_eq!(one("gpu = 1\n").unwrap().tasks[0].gpu_profile, None);
    for (extra, want) in [
        ("gpu_share = true\n", "gpu_share = true needs `gpu_memory`"),
        ("gpu_share = true\ngpu = 2\ngpu_memory = \"1GiB\"\n", "gpu_share = true shares one GPU; gpu = 2"),
        ("gpu_memory = \"1GiB\"\n", "`gpu_memory` describes GPU use; the task asks for no GPU"),
        ("gpu = 1\ngpu_util = 1.5\n", "gpu_util = 1.5 is not a utilisation in (0, 1]"),
        ("gpu = 1\ngpu_util = 0\n", "gpu_util = 0 is not a utilisation"),
        ("gpu = 1\ngpu_memory = \"lots\"\n", "gpu_memory: \"lots\" is not a size"),
    ] {
        let e = one(extra).unwrap_err().message;
        assert!(e.contains(want), "{extra}: {e}");
    }
}

#[test]
fn inputs_must_be_produced() {
    let e = toml("[[task]]\nname = \"a\"\nkind = \"noop\"\ninputs = [\"x/y\"]\n").unwrap_err();
    assert!(e.message.contains("no task named \"x\" produces it"), "{e}");
    let e = toml("[[task]]\nname = \"g\"\nkind = \"noop\"\noutputs = [\"o\"]\n[[task]]\nname = \"a\"\nkind = \"noop\"\ninputs = [\"g/p\"]\n").unwrap_err();
    assert!(e.message.contains("task \"g\" has no output \"p\" (its outputs: o)"), "{e}");
    assert_eq!(e.line, Some(8));
    let e = toml("[[task]]\nname = \"a\"\nkind = \"noop\"\ninputs = [\"nos\"]\n").unwrap_err();
    assert!(e.message.contains("must be written <task>/<output>"), "{e}");
}

#[test]
fn other_mistakes() {
    let cases = [
        ("[[task]]\nname = \"a\"\n", "needs a `command`"),
        ("[[task]]\nname = \"a\"\nkind = \"noop\"\ncommand = [\"x\"]\n", "not both"),
        ("[[task]]\nname = \"a\"\ncommand = []\n", "must not be empty"),
        ("[[task]]\nname = \"a\"\nkind = \"frobnicate\"\n", "unknown kind \"frobnicate\""),
        ("[[task]]\nname = \"a\"\nkind = \"noop\"\nreplicas = 0\n", "replicas = 0 is out of range"),
        ("[[task]]\nname = \"a\"\nkind = \"noop\"\nmemory = \"lots\"\n", "is not a size"),
        ("[[task]]\nname = \"a\"\nkind = \"noop\"\ntimeout = \"soon\"\n", "timeout \"soon\""),
        ("[[task]]\nname = \"a\"\nkind = \"noop\"\ncpu = -1\n", "not a non-negative number"),
        ("[[task]]\nname = \"a/b\"\nkind = \"noop\"\n", "invalid task name"),
        ("[[task]]\nname = \"a\"\nkind = \"noop\"\noutputs = [\"o\", \"o\"]\n", "listed twice"),
        ("[[task]]\nname = \"a\"\nkind = \"noop\"\nenv = { PLEXUS_RANK = \"1\" }\n", "reserved"),
        ("name = \"x\"\n", "no tasks"),
    ];
    for (src, want) in cases {
        let e = toml(src).unwrap_err();
        assert!(e.message.contains(want), "{src:?}: got {e}");
    }
}

#[test]
fn json_errors_have_lines() {
    let e = parse("{\n\"tasks\": [\n{\"name\": \"a\", \"kind\": \"noop\", \"bogus\": 1}\n]}", Format::Json, "j.json")
        .unwrap_err();
    assert!(e.message.contains("unknown field `bogus`"), "{e}");
    assert_eq!(e.line, Some(3));
}

#[test]
fn format_inference() {
    assert_eq!(Format::infer("", "a.JSON").unwrap(), Format::Json);
    assert_eq!(Format::infer("", "a.toml").unwrap(), Format::Toml);
    assert_eq!(Format::infer("json", "a.toml").unwrap(), Format::Json);
    assert!(Format::infer("yaml", "a").is_err());
}

/// A chain of `n` tasks as JSON, listed dependants-first (the order that made a recursive
/// cycle check recurse `n` deep), closed into a cycle when asked.
fn reversed_chain(n: usize, cycle: bool) -> String {
    let tasks: Vec<String> = (0..n)
        .rev()
        .map(|i| {
            let after = if i > 0 {
                format!("[\"t{}\"]", i - 1)
            } else if cycle {
                format!("[\"t{}\"]", n - 1)
            } else {
                "[]".into()
            };
            format!("{{\"name\": \"t{i}\", \"command\": [\"true\"], \"after\": {after}}}")
        })
        .collect();
    format!("{{\"name\": \"chain\", \"tasks\": [\n{}\n]}}", tasks.join(",\n"))
}

#[test]
fn a_ten_thousand_task_chain_listed_backwards_is_checked_without_recursion() {
    // Run on a thread with a small stack: a recursive walk of 10,000 tasks would overflow it.
    let check = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(|| {
            let ok = parse(&reversed_chain(10_000, false), Format::Json, "chain.json").map(|j| j.tasks.len());
            let cyclic = parse(&reversed_chain(10_000, true), Format::Json, "chain.json").map(|j| j.tasks.len());
            (ok, cyclic)
        })
        .unwrap()
        .join()
        .expect("the check did not overflow its stack");
    assert_eq!(check.0, Ok(10_000));
    let e = check.1.unwrap_err();
    assert!(e.message.starts_with("dependency cycle: "), "{e}");
    // The first ten tasks and the count: an error text names a long cycle without growing with it.
    assert!(e.message.ends_with("-> ... (10000 tasks in the cycle)"), "{e}");
    assert_eq!(e.message.matches(" -> ").count(), 10, "{e}");
    assert!(e.message.len() < 200, "{e}");
}

#[test]
fn task_lines_are_found_for_every_task_of_a_large_file() {
    // Lines come from one pass over the file; the last task's error still names its line.
    let mut src = String::new();
    for i in 0..5_000 {
        src.push_str(&format!("[[task]]\nname = \"t{i}\"\ncommand = [\"true\"]\n"));
    }
    src.push_str("[[task]]\nname = \"last\"\ncommand = [\"true\"]\nafter = [\"nope\"]\n");
    let e = toml(&src).unwrap_err();
    assert_eq!(e.line, Some(15_004), "{e}");
    assert!(e.message.contains("unknown dependency \"nope\""), "{e}");
}

#[test]
fn job_names_follow_the_task_name_rules() {
    for bad in ["evil\u{1b}[31mred", "two\nlines", "nul\u{0}", "", "a b"] {
        let src =
            format!("name = {}\n[[task]]\nname = \"a\"\ncommand = [\"true\"]\n", serde_json::to_string(bad).unwrap());
        let e = toml(&src).unwrap_err();
        assert!(e.message.contains("invalid job name"), "{bad:?}: {e}");
    }
    // A default name made from an odd file name is cleaned, not refused.
    let j = parse("[[task]]\nname = \"a\"\ncommand = [\"true\"]\n", Format::Toml, "dir/my job.v2.toml").unwrap();
    assert_eq!(j.name, "my-job-v2");
    let j = parse("[[task]]\nname = \"a\"\ncommand = [\"true\"]\n", Format::Toml, ".toml").unwrap();
    assert_eq!(j.name, "job");
}

#[test]
fn nul_bytes_huge_commands_and_endless_retries_are_refused_at_submit() {
    let task = |extra: &str| format!("[[task]]\nname = \"a\"\n{extra}\n");
    let e = toml(&task("command = [\"echo\", \"a\\u0000b\"]")).unwrap_err();
    assert!(e.message.contains("command argument 1 contains a NUL byte"), "{e}");
    let e = toml(&task("command = [\"true\"]\nenv = { X = \"a\\u0000\" }")).unwrap_err();
    assert!(e.message.contains("env \"X\"") && e.message.contains("NUL"), "{e}");
    let big = "x".repeat(rules::MAX_TASK_SPEC_BYTES + 1);
    let e = toml(&task(&format!("command = \"echo {big}\""))).unwrap_err();
    assert!(e.message.contains("at most 1024 KiB per task"), "{}", &e.message[..200.min(e.message.len())]);
    let e =
        toml(&task(&format!("command = [\"true\"]\nenv = {{ BIG = \"{}\" }}", "y".repeat(rules::MAX_TASK_SPEC_BYTES))))
            .unwrap_err();
    assert!(e.message.contains("per task"), "{}", &e.message[..200.min(e.message.len())]);
    let e = toml(&task("command = [\"false\"]\nmax_retries = 4294967295")).unwrap_err();
    assert!(e.message.contains("max_retries = 4294967295 is out of range (0..=100)"), "{e}");
    assert_eq!(toml(&task("command = [\"false\"]\nmax_retries = 100")).unwrap().tasks[0].max_retries, 100);
}

#[test]
fn failure_policy_and_back_off_are_parsed_and_checked() {
    let t = |extra: &str| toml(&format!("[[task]]\nname = \"a\"\ncommand = [\"true\"]\n{extra}\n"));
    let d = t("").unwrap();
    assert_eq!((d.tasks[0].on_failure, d.tasks[0].retry_backoff_ms), (OnFailure::FailJob, DEFAULT_RETRY_BACKOFF_MS));
    let c = t("on_failure = \"continue\"\nretry_backoff = \"250ms\"").unwrap();
    assert_eq!((c.tasks[0].on_failure, c.tasks[0].retry_backoff_ms), (OnFailure::Continue, 250));
    assert_eq!(t("retry_backoff = 0").unwrap().tasks[0].retry_backoff_ms, 0);
    let e = t("on_failure = \"ignore\"").unwrap_err();
    assert!(e.message.contains("on_failure = \"ignore\" is not one of fail-job, continue"), "{e}");
    let e = t("retry_backoff = \"soon\"").unwrap_err();
    assert!(e.message.contains("retry_backoff \"soon\""), "{e}");
    assert!(t("retry_backoff = \"2days\"").unwrap_err().message.contains("longer than a day"));
}

#[test]
fn per_rank_inputs_are_parsed_and_checked_against_the_producer() {
    let producer = "[[task]]\nname = \"prep\"\ncommand = [\"true\"]\nreplicas = 4\noutputs = [\"shard\"]\n";
    let job =
        |consumer: &str| toml(&format!("{producer}[[task]]\nname = \"train\"\ncommand = [\"true\"]\n{consumer}\n"));
    let j = job("replicas = 4\ninputs = [\"prep/shard[rank]\", \"prep/shard[0]\", \"prep/shard\"]").unwrap();
    let ranks: Vec<InputRank> = j.tasks[1].inputs.iter().map(|i| i.rank).collect();
    assert_eq!(ranks, vec![InputRank::Same, InputRank::Fixed(0), InputRank::All]);
    assert!(j.tasks[1].inputs.iter().all(|i| i.output == "shard"));
    assert_eq!(j.tasks[1].after, vec!["prep".to_string()]);
    assert_eq!(InputRank::Same.ranks(2, 4), 2..3);
    assert_eq!(InputRank::Fixed(0).ranks(2, 4), 0..1);
    assert_eq!(InputRank::All.ranks(2, 4), 0..4);

    let e = job("replicas = 5\ninputs = [\"prep/shard[rank]\"]").unwrap_err();
    assert!(e.message.contains("it has 5 replicas but task \"prep\" has 4"), "{e}");
    assert_eq!(e.line, Some(10), "{e}");
    let e = job("inputs = [\"prep/shard[4]\"]").unwrap_err();
    assert!(e.message.contains("task \"prep\" has 4 replica(s), so there is no rank 4"), "{e}");
    for bad in ["prep/shard[", "prep/shard[r]", "prep/shard[-1]", "prep/shard[rank"] {
        let e = job(&format!("inputs = [{bad:?}]")).unwrap_err();
        assert!(e.message.contains("a rank selector is [rank]"), "{bad}: {e}");
    }
    let e = job("inputs = [\"prep/nope[rank]\"]").unwrap_err();
    assert!(e.message.contains("has no output \"nope\""), "{e}");
    // Stored jobs without a selector read as every replica.
    let old: InputSpec = serde_json::from_str("{\"task\": \"a\", \"output\": \"b\"}").unwrap();
    assert_eq!(old.rank, InputRank::All);
    assert_eq!(serde_json::to_string(&old).unwrap(), "{\"task\":\"a\",\"output\":\"b\"}");
}

#[test]
fn a_size_or_duration_of_the_wrong_type_names_its_field() {
    let task = |extra: &str| toml(&format!("[[task]]\nname = \"a\"\ncommand = [\"true\"]\n{extra}\n"));
    let e = task("memory = -5").unwrap_err();
    assert!(e.message.contains("memory = -5 is not a size"), "{e}");
    assert!(!e.message.contains("untagged"), "{e}");
    assert_eq!(e.line, Some(2), "{e}");
    let e = task("timeout = 1e300").unwrap_err();
    assert!(e.message.contains("timeout = 1e+300 is not a duration"), "{e}");
    let e = task("retry_backoff = -1").unwrap_err();
    assert!(e.message.contains("retry_backoff = -1 is not a duration"), "{e}");
    let e = task("gpu = 1\ngpu_memory = 1.5").unwrap_err();
    assert!(e.message.contains("gpu_memory = 1.5 is not a size"), "{e}");
    let e = task("gang = \"g\"\ngang_timeout = true").unwrap_err();
    assert!(e.message.contains("gang_timeout = true is not a duration"), "{e}");
    let e = parse(r#"{"tasks": [{"name": "a", "kind": "noop", "memory": -5}]}"#, Format::Json, "j.json").unwrap_err();
    assert!(e.message.contains("memory = -5 is not a size"), "{e}");
    // The valid forms still parse.
    let j = task("memory = 1024\ntimeout = 90\nretry_backoff = \"2s\"").unwrap();
    assert_eq!((j.tasks[0].resources.memory, j.tasks[0].timeout_ms, j.tasks[0].retry_backoff_ms), (1024, 90_000, 2000));
    assert!(task("timeout = 0").unwrap_err().message.contains("timeout must be positive"));
    assert!(task("timeout = \"0s\"").unwrap_err().message.contains("timeout must be positive"));
    assert_eq!(task("timeout = \"10us\"").unwrap().tasks[0].timeout_ms, 1);
}

#[test]
fn a_command_or_env_past_what_execve_takes_is_refused_at_submit() {
    let task = |extra: &str| toml(&format!("[[task]]\nname = \"a\"\n{extra}\n"));
    // One argument over Linux's 128 KiB per string, well under the per-task total.
    let arg = "x".repeat(rules::MAX_ARG_BYTES + 1);
    let e = task(&format!("command = [\"echo\", \"{arg}\"]")).unwrap_err();
    assert!(e.message.contains("task \"a\": command argument 1 is 131072 bytes"), "{}", &e.message[..200]);
    let e = task(&format!("command = \"echo {arg}\"")).unwrap_err();
    assert!(e.message.contains("command argument 2 is 131077 bytes"), "{}", &e.message[..200]);
    let e =
        task(&format!("command = [\"true\"]\nenv = {{ BIG = \"{}\" }}", &arg[..rules::MAX_ARG_BYTES - 3])).unwrap_err();
    assert!(e.message.contains("env \"BIG\" is 131072 bytes as KEY=VALUE"), "{}", &e.message[..200]);
    // Many small arguments: each takes its NUL and its pointer too.
    let many = vec!["\"a\""; 110_000].join(", ");
    let e = task(&format!("command = [{many}]")).unwrap_err();
    assert!(e.message.contains("command and env take 1100000 bytes"), "{}", &e.message[..200]);
    // Right at the limits is accepted, and runs (exec'd for real).
    let fits = "y".repeat(rules::MAX_ARG_BYTES - 7);
    let j = task(&format!("command = [\"sh\", \"-c\", \"exit 0\"]\nenv = {{ BIG = \"{fits}\" }}")).unwrap();
    let Work::Command(argv) = &j.tasks[0].work else { panic!("a command") };
    let status = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env("BIG", &j.tasks[0].env["BIG"])
        .status()
        .expect("execve accepts what validation accepts");
    assert!(status.success());
    let e = std::process::Command::new("true").arg(&arg).status().expect_err("the OS refuses what validation refuses");
    assert_eq!(e.raw_os_error(), Some(7), "E2BIG: {e}");
}

/// Issue 32, item 4: `constraints` on a task and on the job (the task's own test of a key wins);
/// bad ones are refused naming the constraint.
#[test]
fn constraints_are_parsed_merged_and_checked() {
    use crate::spec::constraints::{Constraint, LabelTest};
    let file = "constraints = { rack = \"r1\", spot = false }\n[[task]]\nname = \"a\"\ncommand = \"true\"\n\
                constraints = { rack = \"!=r2\", gpu_model = \"A100\", ssd = true }\n\
                [[task]]\nname = \"b\"\ncommand = \"true\"\n";
    let j = parse(file, Format::Toml, "j.toml").unwrap();
    let c = |key: &str, test| Constraint { key: key.into(), test };
    assert_eq!(
        j.tasks[0].constraints,
        vec![
            c("gpu_model", LabelTest::Equals("A100".into())),
            c("rack", LabelTest::NotEquals("r2".into())),
            c("spot", LabelTest::Absent),
            c("ssd", LabelTest::Present),
        ]
    );
    assert_eq!(j.tasks[1].constraints, vec![c("rack", LabelTest::Equals("r1".into())), c("spot", LabelTest::Absent)]);
    let bad = |constraints: &str| {
        parse(
            &format!("[[task]]\nname = \"a\"\ncommand = \"true\"\nconstraints = {constraints}\n"),
            Format::Toml,
            "j.toml",
        )
        .unwrap_err()
        .to_string()
    };
    for (constraints, says) in [
        ("{ rack = 3 }", "constraints.rack: 3 is not a label test"),
        ("{ rack = \"r 1\" }", "constraints.rack: label \"rack=r 1\": the value must be"),
        ("{ rack = \"!=\" }", "the value must be"),
        ("{ \"ra ck\" = true }", "the key must be"),
        ("{ rack = [\"a\"] }", "is not a label test"),
    ] {
        let e = bad(constraints);
        assert!(e.contains(says) && e.contains("task \"a\""), "{constraints}: {e}");
    }
    let many: Vec<String> = (0..40).map(|i| format!("k{i} = true")).collect();
    assert!(bad(&format!("{{ {} }}", many.join(", "))).contains("40 constraints: at most 32"));
}

/// Issue 32, item 5: a sweep expands into replicas (product by default, or zip), each with its
/// row of parameters; bad sweeps are refused naming the problem.
#[test]
fn sweeps_expand_into_replicas_and_bad_ones_are_refused() {
    let job = |extra: &str| format!("[[task]]\nname = \"train\"\ncommand = \"python train.py\"\n{extra}\n");
    let j = parse(&job("sweep = { lr = [0.1, 0.3, 1.0], batch = [32, 64] }"), Format::Toml, "j.toml").unwrap();
    let t = &j.tasks[0];
    assert_eq!(t.replicas, 6);
    let s = t.sweep.as_ref().unwrap();
    assert_eq!(s.keys, ["batch", "lr"]);
    assert_eq!(s.params(0), vec![("batch".into(), "32".into()), ("lr".into(), "0.1".into())]);
    assert_eq!(s.params(5), vec![("batch".into(), "64".into()), ("lr".into(), "1.0".into())]);
    let z = parse(
        &job("sweep = { lr = [0.1, 0.3], opt = [\"sgd\", \"adam\"], on = [true, false] }\nsweep_mode = \"zip\""),
        Format::Toml,
        "j.toml",
    )
    .unwrap();
    assert_eq!(z.tasks[0].replicas, 2);
    assert_eq!(z.tasks[0].sweep.as_ref().unwrap().keys, ["lr", "on", "opt"], "keys in alphabetical order");
    assert_eq!(z.tasks[0].sweep.as_ref().unwrap().rows[1], ["0.3", "false", "adam"]);
    // A consumer reading its rank's output sees the sweep's replicas.
    let chain = "[[task]]\nname = \"a\"\ncommand = \"true\"\noutputs = [\"o\"]\nsweep = { x = [1, 2, 3] }\n\
                 [[task]]\nname = \"b\"\ncommand = \"true\"\ninputs = [\"a/o[rank]\"]\nreplicas = 3\n";
    assert!(parse(chain, Format::Toml, "j.toml").is_ok());

    for (extra, says) in [
        ("sweep = { lr = [0.1], batch = [1, 2] }\nsweep_mode = \"zip\"", "\"batch\" has 2 values and \"lr\" has 1"),
        ("sweep = { lr = [0.1, 0.2] }\nreplicas = 3", "replicas = 3, but the sweep expands to 2"),
        ("sweep = { lr = [] }", "sweep.lr is an empty list"),
        ("sweep = { lr = 0.1 }", "sweep.lr: expected a list of values"),
        ("sweep = { lr = [[1]] }", "sweep.lr: [1] is not a string, number or boolean"),
        ("sweep = { \"l-r\" = [1] }", "sweep key \"l-r\": 1 to 32 letters"),
        ("sweep = { lr = [1], LR = [2] }", "are both PLEXUS_PARAM_LR"),
        ("sweep = {}", "names no parameter"),
        ("sweep_mode = \"zip\"", "sweep_mode without a sweep"),
        ("sweep = { lr = [1] }\nsweep_mode = \"grid\"", "sweep_mode = \"grid\": expected \"product\""),
        (
            "sweep = { a = [1,2,3,4,5,6,7,8,9,10], b = [1,2,3,4,5,6,7,8,9,10], c = [1,2,3,4,5,6,7,8,9,10], d = [1,2,3,4,5,6,7,8,9,10], e = [1,2,3,4,5,6,7,8,9,10], f = [1,2] }",
            "expands to 200000 replicas (10 x 10 x 10 x 10 x 10 x 2), more than 100000",
        ),
        ("sweep = { lr = [1, 2] }\nreplicas = 2\ncommunicator = true", "a sweep's replicas are independent runs"),
    ] {
        let e = parse(&job(extra), Format::Toml, "j.toml").unwrap_err().to_string();
        assert!(e.contains(says) && e.contains("task \"train\""), "{extra}: {e}");
    }
}

#[test]
fn working_dir_and_excludes_are_job_level_and_named_when_wrong() {
    let task = "[[task]]\nname = \"t\"\ncommand = \"python main.py\"\n";
    let s = parse(&format!("working_dir = \".\"\nexcludes = [\"data/\", \"*.log\"]\n{task}"), Format::Toml, "j.toml")
        .unwrap();
    let w = s.working_dir.unwrap();
    assert_eq!(
        (w.path.as_str(), w.excludes.as_slice(), w.digest),
        (".", &["data/".to_string(), "*.log".into()][..], None)
    );
    assert!(parse(task, Format::Toml, "j.toml").unwrap().working_dir.is_none());
    for (head, says) in [
        ("working_dir = \"\"\n", "2: working_dir \"\": expected a directory path"),
        ("working_dir = 3\n", "2: working_dir = 3: expected a directory path"),
        ("excludes = [\"x\"]\n", "excludes: given without a working_dir"),
        ("working_dir = \".\"\nexcludes = [\"\"]\n", "excludes: \"\" is not a pattern"),
    ] {
        let e = parse(&format!("name = \"j\"\n{head}{task}"), Format::Toml, "j.toml").unwrap_err().to_string();
        assert!(e.contains(says), "{head}: {e}");
    }
}

#[test]
fn python_and_image_are_the_tasks_or_else_the_jobs() {
    let src = "python = { requirements = [\"six==1.16.0\"], pip = [\"tomli\"] }\n\
               [[task]]\nname = \"a\"\ncommand = \"python a.py\"\n\
               [[task]]\nname = \"b\"\ncommand = \"python b.py\"\npython = { pip = [\"attrs>=23\"] }\n\
               [[task]]\nname = \"c\"\ncommand = \"python c.py\"\nimage = \"plexus/worker:debug\"\n\
               [[task]]\nname = \"n\"\nkind = \"noop\"\n";
    let s = parse(src, Format::Toml, "j.toml").unwrap();
    let (a, b, c, n) = (&s.tasks[0], &s.tasks[1], &s.tasks[2], &s.tasks[3]);
    assert_eq!(a.python.as_ref().unwrap().packages, ["six==1.16.0", "tomli"], "the file's lines, then pip");
    assert_eq!(b.python.as_ref().unwrap().packages, ["attrs>=23"], "a task's own wins");
    assert_eq!(
        (&c.python, c.image.as_deref()),
        (&None, Some("plexus/worker:debug")),
        "its own image keeps the job's python off"
    );
    assert_eq!((&n.python, &n.image), (&None, &None), "a built-in kind takes neither from the job");
    let jobs_image =
        parse("image = \"busybox\"\n[[task]]\nname = \"t\"\ncommand = \"x\"\n", Format::Toml, "j.toml").unwrap();
    assert_eq!(jobs_image.tasks[0].image.as_deref(), Some("busybox"));
    let plain = parse("[[task]]\nname = \"t\"\ncommand = \"x\"\n", Format::Toml, "j.toml").unwrap();
    assert_eq!((&plain.tasks[0].python, &plain.tasks[0].image), (&None, &None));
}

#[test]
fn bad_python_and_image_values_are_named() {
    let task = "[[task]]\nname = \"t\"\ncommand = \"x\"\n";
    for (head, says) in [
        ("python = \"3.11\"\n", "1: python = \"3.11\": expected a table"),
        (
            "python = { requirements = \"req.txt\" }\n",
            "python.requirements = \"req.txt\": a file that the client reads",
        ),
        ("python = { pip = [\"-e .\"] }\n", "python: requirement [0] = \"-e .\": options"),
        ("python = { pip = [\"six\", \"import os\"] }\n", "python: requirement [1] = \"import os\""),
        ("python = { pip = [3] }\n", "python.pip: 3 is not a requirement string"),
        ("python = { pip = [] }\n", "python lists no requirement"),
        ("python = { conda = [\"x\"] }\n", "python.conda: not a field of python"),
        ("image = \"--privileged\"\n", "1: image \"--privileged\": "),
        ("image = \"Ubuntu\"\n", "image \"Ubuntu\": \"Ubuntu\" is not a name component"),
        ("image = 3\n", "image = 3: expected an image name"),
    ] {
        let e = parse(&format!("{head}{task}"), Format::Toml, "j.toml").unwrap_err().to_string();
        assert!(e.contains(says), "{head}: {e}");
    }
    let e = parse("[[task]]\nname = \"n\"\nkind = \"noop\"\nimage = \"busybox\"\n", Format::Toml, "j.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("task \"n\": `python` and `image` are for command tasks"), "{e}");
}

#[test]
fn an_image_task_requires_a_runtime_and_takes_no_python_environment() {
    let s = parse("[[task]]\nname = \"t\"\ncommand = \"x\"\nimage = \"busybox\"\n", Format::Toml, "j.toml").unwrap();
    let c = &s.tasks[0].constraints;
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].key.as_str(), &c[0].test), ("container-runtime", &crate::spec::constraints::LabelTest::Present));
    let podman = "[[task]]\nname = \"t\"\ncommand = \"x\"\nimage = \"busybox\"\nconstraints = { container-runtime = \"podman\" }\n";
    let c = &parse(podman, Format::Toml, "j.toml").unwrap().tasks[0].constraints;
    assert_eq!(c.len(), 1, "its own test of the label stays: {c:?}");
    for both in [
        "[[task]]\nname = \"t\"\ncommand = \"x\"\nimage = \"busybox\"\npython = { pip = [\"six\"] }\n",
        "python = { pip = [\"six\"] }\nimage = \"busybox\"\n[[task]]\nname = \"t\"\ncommand = \"x\"\n",
    ] {
        let e = parse(both, Format::Toml, "j.toml").unwrap_err().to_string();
        assert!(e.contains("`python` and `image` together"), "{both}: {e}");
    }
}
