//! `plexus submit --set KEY=VALUE`: a job file's values overridden at submit, without editing
//! the file.
//!
//! `KEY` is a dotted path into the file: `priority`, `name`, or, through a task chosen by its
//! name, `task.train.replicas`, `task.train.env.LR`, `task.train.sweep.lr`. `VALUE` is read as a
//! TOML value (`8`, `0.3`, `true`, `[0.1, 0.3]`, `"text"`), and as plain text when it is not one
//! (`--set name=run-2`). Missing tables on the way are created; a key that names a task that does
//! not exist, or goes through a value that is not a table, is refused naming it. The file is then
//! written out again (TOML as TOML, JSON as JSON) and submitted as usual, so the coordinator checks
//! the result like any file and keeps it for `plexus resubmit`.

use anyhow::{Context, bail};
use serde_json::{Map, Value};

/// The most `--set`s one submit takes, and the longest key path.
const MAX_SETS: usize = 64;
const MAX_DEPTH: usize = 16;

/// `source` (in `format`, `toml` or `json`) with every `KEY=VALUE` of `sets` applied, in order.
pub fn apply(source: &str, format: &str, sets: &[String]) -> anyhow::Result<String> {
    if sets.is_empty() {
        return Ok(source.to_string());
    }
    if sets.len() > MAX_SETS {
        bail!("{} --set options: at most {MAX_SETS}", sets.len());
    }
    let mut root: Value = match format {
        "json" => serde_json::from_str(source).context("--set: the job file is not valid JSON")?,
        _ => toml::from_str(source).context("--set: the job file is not valid TOML")?,
    };
    for set in sets {
        let (key, value) = set
            .split_once('=')
            .with_context(|| format!("--set {set:?}: expected KEY=VALUE, e.g. task.train.replicas=8"))?;
        let path: Vec<&str> = key.trim().split('.').collect();
        if path.iter().any(|p| p.is_empty()) || path.len() > MAX_DEPTH {
            bail!("--set {key:?}: a key is dotted names (at most {MAX_DEPTH}), e.g. task.train.env.LR");
        }
        set_path(&mut root, &path, parse_value(value)).with_context(|| format!("--set {key}"))?;
    }
    match format {
        "json" => Ok(serde_json::to_string_pretty(&root)?),
        _ => toml::to_string(&root).context("--set: the changed job cannot be written as TOML"),
    }
}

/// A value as TOML reads it, else the text itself.
fn parse_value(text: &str) -> Value {
    toml::from_str::<Map<String, Value>>(&format!("v = {text}"))
        .ok()
        .and_then(|mut m| m.remove("v"))
        .unwrap_or_else(|| Value::String(text.to_string()))
}

/// Sets `path` under `at` to `value`: `task`/`tasks` followed by a name goes into that task.
fn set_path(at: &mut Value, path: &[&str], value: Value) -> anyhow::Result<()> {
    let Value::Object(table) = at else { bail!("{} is not a table", kind(at)) };
    let (first, rest) = path.split_first().context("an empty key")?;
    if rest.is_empty() {
        table.insert(first.to_string(), value);
        return Ok(());
    }
    if matches!(*first, "task" | "tasks")
        && let Some(Value::Array(tasks)) = table.get_mut(*first)
    {
        let (name, rest) = rest.split_first().context("an empty key")?;
        let names: Vec<String> =
            tasks.iter().filter_map(|t| t.get("name").and_then(Value::as_str)).map(str::to_string).collect();
        let Some(task) = tasks.iter_mut().find(|t| t.get("name").and_then(Value::as_str) == Some(name)) else {
            bail!("no task named {name:?} (tasks: {})", names.join(", "));
        };
        if rest.is_empty() {
            bail!("names the whole task {name:?}; name one of its fields, e.g. {first}.{name}.replicas");
        }
        return set_path(task, rest, value);
    }
    let next = table.entry(first.to_string()).or_insert_with(|| Value::Object(Map::new()));
    if !next.is_object() {
        bail!("{first} is {}, not a table", kind(next));
    }
    set_path(next, rest, value)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a table",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: &str = "name = \"sweep\"\n[[task]]\nname = \"train\"\ncommand = \"python train.py\"\nenv = { A = \"1\" }\n\n[[task]]\nname = \"eval\"\ncommand = \"true\"\n";

    fn toml_of(s: &str) -> Value {
        toml::from_str(s).unwrap()
    }

    #[test]
    fn sets_values_by_path_and_task_name() {
        let sets = [
            "priority=5",
            "name=run-2",
            "task.train.replicas=8",
            "task.train.env.LR=0.3",
            "task.eval.sweep.lr=[0.1, 0.3]",
            "task.eval.constraints.rack=\"r1\"",
        ]
        .map(String::from);
        let v = toml_of(&apply(JOB, "toml", &sets).unwrap());
        assert_eq!(v["priority"], 5);
        assert_eq!(v["name"], "run-2");
        assert_eq!(v["task"][0]["replicas"], 8);
        assert_eq!(v["task"][0]["env"]["A"], "1", "the rest of the table stays");
        assert_eq!(v["task"][0]["env"]["LR"], 0.3);
        assert_eq!(v["task"][1]["sweep"]["lr"], serde_json::json!([0.1, 0.3]));
        assert_eq!(v["task"][1]["constraints"]["rack"], "r1");
        let json = r#"{"tasks": [{"name": "a", "command": "true"}]}"#;
        let v: Value = serde_json::from_str(&apply(json, "json", &["tasks.a.cpu=0.5".into()]).unwrap()).unwrap();
        assert_eq!(v["tasks"][0]["cpu"], 0.5);
        assert_eq!(apply(JOB, "toml", &[]).unwrap(), JOB, "no --set: the file as written");
    }

    #[test]
    fn bad_keys_are_refused_naming_them() {
        for (set, says) in [
            ("replicas", "expected KEY=VALUE"),
            ("task.nope.replicas=2", "no task named \"nope\" (tasks: train, eval)"),
            ("task.train=3", "names the whole task"),
            ("name.x=1", "name is a string, not a table"),
            ("a..b=1", "dotted names"),
            (".=1", "dotted names"),
        ] {
            let e = format!("{:#}", apply(JOB, "toml", &[set.to_string()]).unwrap_err());
            assert!(e.contains(says), "{set}: {e}");
        }
        let e = format!("{:#}", apply("not = = toml", "toml", &["a=1".into()]).unwrap_err());
        assert!(e.contains("not valid TOML"), "{e}");
        let many: Vec<String> = (0..65).map(|i| format!("k{i}=1")).collect();
        assert!(apply(JOB, "toml", &many).unwrap_err().to_string().contains("at most 64"));
    }
}
