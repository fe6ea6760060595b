//! `plexus context list|use NAME|show [NAME]`: the clusters the CLI knows by name
//! ([`crate::context`]).

use std::process::ExitCode;

use anyhow::Context as _;

use crate::args::ContextCommand;
use crate::context::{Contexts, check_name, file};
use crate::output;

pub fn run(cmd: &ContextCommand) -> anyhow::Result<ExitCode> {
    let path = file().context("no folder for the contexts file: set HOME or PLEXUS_CONFIG_DIR")?;
    let mut all = Contexts::load(&path)?;
    let text = match cmd {
        ContextCommand::List => {
            if all.contexts.is_empty() {
                format!("no contexts in {} (`plexus up` makes one)\n", path.display())
            } else {
                let mut t = output::Table::new(&["CURRENT", "NAME", "COORDINATOR", "DASHBOARD"]);
                for (name, c) in &all.contexts {
                    let current = if all.current.as_deref() == Some(name) { "*" } else { "" };
                    t.row(vec![
                        current.to_string(),
                        name.clone(),
                        c.coordinator.clone(),
                        c.dashboard.clone().unwrap_or_else(|| "-".into()),
                    ]);
                }
                t.render()
            }
        }
        ContextCommand::Use { name } => {
            check_name(name)?;
            all.get(name)?;
            all.current = Some(name.clone());
            all.save(&path)?;
            format!("using context {name}\n")
        }
        ContextCommand::Set { name, coordinator, ca, token_file, dashboard } => {
            let abs = |p: &Option<std::path::PathBuf>| {
                p.as_ref().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
            };
            let ctx = crate::context::Context {
                coordinator: coordinator.clone(),
                ca: abs(ca),
                token_file: abs(token_file),
                dashboard: dashboard.clone(),
            };
            crate::context::remember(name, ctx)?;
            format!("context {name} set and current\n")
        }
        ContextCommand::Delete { name } => {
            all.get(name)?;
            all.contexts.remove(name);
            if all.current.as_deref() == Some(name) {
                all.current = None;
            }
            all.save(&path)?;
            format!("context {name} deleted\n")
        }
        ContextCommand::Show { name } => {
            let name = match name.as_deref().or(all.current.as_deref()) {
                Some(n) => n.to_string(),
                None => anyhow::bail!("no current context (`plexus context use NAME`, or `plexus up` makes one)"),
            };
            let c = all.get(&name)?;
            let show = |p: &Option<std::path::PathBuf>| p.as_ref().map_or("-".to_string(), |p| p.display().to_string());
            format!(
                "name:        {name}\ncoordinator: {}\nca:          {}\ntoken file:  {}\ndashboard:   {}\n",
                c.coordinator,
                show(&c.ca),
                show(&c.token_file),
                c.dashboard.as_deref().unwrap_or("-")
            )
        }
    };
    output::print(&text)?;
    Ok(ExitCode::SUCCESS)
}
