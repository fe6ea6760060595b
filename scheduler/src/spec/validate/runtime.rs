//! What a command runs with: `python = { pip = [..], requirements = [..] }` (a Python environment
//! the worker builds) and `image = "name:tag"` (a container it runs in), the task's own or else
//! the job's. A `requirements = "file"` is the client's to read: `plexus submit` and the Python
//! client put the file's lines in its place before the job reaches the coordinator.

use plexus_proto::runtime_env::{RUNTIME_LABEL, check_image, check_requirements};
use serde_json::Value;

use super::Validator;
use crate::error::SpecError;
use crate::spec::constraints::{Constraint, LabelTest};
use crate::spec::model::{PythonEnv, Work};
use crate::spec::raw::RawTask;

/// Where a `python` or `image` value came from: the job (top level) or a task.
#[derive(Clone, Copy)]
enum Scope<'a> {
    Job,
    Task(&'a RawTask),
}

impl Validator<'_> {
    /// The task's Python environment and image: its own, else the job's (which only command
    /// tasks take; a task's own one of the two keeps the job's other off it). Both are checked
    /// wherever they are written, even where unused. With an image, `constraints` (the task's,
    /// checked) get the runtime's ([`runtime_constraint`]).
    pub(super) fn runtime(
        &self,
        t: &RawTask,
        work: &Work,
        job: (&Option<Value>, &Option<Value>),
        constraints: &mut Vec<Constraint>,
    ) -> Result<(Option<PythonEnv>, Option<String>), SpecError> {
        let job_python = job.0.as_ref().map(|v| self.python(Scope::Job, v)).transpose()?;
        let job_image = job.1.as_ref().map(|v| self.image(Scope::Job, v)).transpose()?;
        let own_python = t.python.as_ref().map(|v| self.python(Scope::Task(t), v)).transpose()?;
        let own_image = t.image.as_ref().map(|v| self.image(Scope::Task(t), v)).transpose()?;
        if !matches!(work, Work::Command(_)) {
            if own_python.is_some() || own_image.is_some() {
                return Err(
                    self.at(t, "`python` and `image` are for command tasks (a built-in kind runs no command)".into())
                );
            }
            return Ok((None, None));
        }
        // A task's own image keeps the job's Python environment off it, and its own Python
        // environment the job's image; both its own, or both the job's, are refused below.
        let python = if own_image.is_some() { own_python.clone() } else { own_python.clone().or(job_python) };
        let image = if own_python.is_some() { own_image } else { own_image.or(job_image) };
        if python.is_some() && image.is_some() {
            return Err(self.at(
                t,
                "`python` and `image` together: a Python environment is built with the worker's own interpreter, which the image does not have; install the packages in the image".into(),
            ));
        }
        if image.is_some() {
            runtime_constraint(constraints);
        }
        Ok((python, image))
    }

    fn bad(&self, scope: Scope<'_>, key: &str, msg: String) -> SpecError {
        match scope {
            Scope::Job => self.err(self.line_of_key(key), format!("{key}{msg}")),
            Scope::Task(t) => self.at(t, format!("{key}{msg}")),
        }
    }

    fn python(&self, scope: Scope<'_>, v: &Value) -> Result<PythonEnv, SpecError> {
        let bad = |msg: String| self.bad(scope, "python", msg);
        let Value::Object(table) = v else {
            return Err(bad(format!(
                " = {}: expected a table, e.g. python = {{ requirements = \"requirements.txt\" }} or {{ pip = [\"six==1.16.0\"] }}",
                shown(v)
            )));
        };
        let (mut file, mut pip) = (Vec::new(), Vec::new());
        for (key, value) in table {
            let into = match key.as_str() {
                "requirements" => &mut file,
                "pip" => &mut pip,
                other => {
                    let k: String = other.chars().take(64).collect();
                    return Err(bad(format!(".{k}: not a field of python (requirements, pip)")));
                }
            };
            match value {
                Value::String(f) if key == "requirements" => {
                    return Err(bad(format!(
                        ".requirements = {f:?}: a file that the client reads at submit; submit the job with `plexus submit` or the Python client, which send its lines"
                    )));
                }
                Value::Array(items) => {
                    for item in items {
                        match item {
                            Value::String(s) => into.push(s.clone()),
                            other => return Err(bad(format!(".{key}: {} is not a requirement string", shown(other)))),
                        }
                    }
                }
                other => return Err(bad(format!(".{key} = {}: expected a list of requirements", shown(other)))),
            }
        }
        // The file's lines first, as the client put them there; `pip` adds to them.
        let mut packages = file;
        packages.append(&mut pip);
        if packages.is_empty() {
            return Err(bad(" lists no requirement: name a requirements file or pip packages".into()));
        }
        check_requirements(&packages).map_err(|e| bad(format!(": requirement {e}")))?;
        Ok(PythonEnv { packages })
    }

    fn image(&self, scope: Scope<'_>, v: &Value) -> Result<String, SpecError> {
        let bad = |msg: String| self.bad(scope, "image", msg);
        let Value::String(image) = v else {
            return Err(bad(format!(" = {}: expected an image name, e.g. \"python:3.11-slim\"", shown(v))));
        };
        check_image(image).map_err(|why| bad(format!(" {:?}: {why}", image.chars().take(80).collect::<String>())))?;
        Ok(image.clone())
    }
}

/// An `image` task runs only where a container runtime is ([`RUNTIME_LABEL`] present), unless
/// its own constraints already test that label (`container-runtime = "podman"`).
fn runtime_constraint(constraints: &mut Vec<Constraint>) {
    if constraints.iter().all(|c| c.key != RUNTIME_LABEL) {
        constraints.push(Constraint { key: RUNTIME_LABEL.to_string(), test: LabelTest::Present });
        constraints.sort_by(|a, b| a.key.cmp(&b.key));
    }
}

fn shown(v: &Value) -> String {
    v.to_string().chars().take(64).collect()
}
