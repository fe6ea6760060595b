//! `plexus token create|list|revoke`: the coordinator's bearer tokens (admin scope).

use std::process::ExitCode;

use plexus_proto::pb;

use crate::args::TokenCommand;
use crate::client::{self, Target};
use crate::output;

pub async fn run(target: &Target, command: TokenCommand) -> anyhow::Result<ExitCode> {
    let mut client = client::connect(target).await?;
    match command {
        TokenCommand::Create { scope, name, ttl } => {
            let ttl_ms = ttl.map(|d| d.as_millis().min(u64::MAX as u128) as u64).unwrap_or(0);
            let r = client.create_token(pb::CreateTokenRequest { scope, name, ttl_ms }).await?.into_inner();
            output::print(&format!("{}\n", r.token))?;
        }
        TokenCommand::List => {
            let tokens = client.list_tokens(pb::ListTokensRequest {}).await?.into_inner().tokens;
            output::print(&table(&tokens))?;
        }
        TokenCommand::Revoke { id } => {
            let t = client.revoke_token(pb::RevokeTokenRequest { id }).await?.into_inner();
            output::print(&format!(
                "revoked {} ({} {})\n",
                t.id,
                t.scope,
                if t.name.is_empty() { "unnamed" } else { &t.name }
            ))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn when(ms: u64) -> String {
    if ms == 0 {
        "-".into()
    } else {
        humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)).to_string()
    }
}

/// One line per token: id, scope, state, created, expires, name.
fn table(tokens: &[pb::TokenInfo]) -> String {
    let now = plexus_proto::now_ms();
    let mut out = format!("{:<12}  {:<6}  {:<7}  {:<20}  {:<20}  NAME\n", "ID", "SCOPE", "STATE", "CREATED", "EXPIRES");
    for t in tokens {
        let state = if t.revoked_ms != 0 {
            "revoked"
        } else if t.expires_ms != 0 && t.expires_ms <= now {
            "expired"
        } else {
            "active"
        };
        out.push_str(&format!(
            "{:<12}  {:<6}  {:<7}  {:<20}  {:<20}  {}\n",
            t.id,
            t.scope,
            state,
            when(t.created_ms),
            when(t.expires_ms),
            t.name
        ));
    }
    out
}
