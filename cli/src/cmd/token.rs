//! `plexus token create|list|revoke`: the coordinator's bearer tokens (admin scope). The default
//! scope, the reading of `--scope` and `--ttl`, and what is printed are
//! `plexus_security::tokens`, shared with `plexus-coordinator token`.

use std::process::ExitCode;

use plexus_proto::pb;
use plexus_security::tokens::{self, TokenInfo};

use crate::args::TokenCommand;
use crate::client::{self, Target};
use crate::output;

pub async fn run(target: &Target, command: TokenCommand) -> anyhow::Result<ExitCode> {
    let mut client = client::connect(target).await?;
    match command {
        TokenCommand::Create { scope, name, ttl } => {
            let req = pb::CreateTokenRequest { scope: scope.to_string(), name, ttl_ms: tokens::ttl_ms(ttl) };
            let r = client.create_token(req).await?.into_inner();
            output::print(&format!("{}\n", r.token))?;
        }
        TokenCommand::List => {
            let list = client.list_tokens(pb::ListTokensRequest {}).await?.into_inner().tokens;
            let list: Vec<TokenInfo> = list.iter().map(TokenInfo::from).collect();
            output::print(&tokens::table(&list, plexus_proto::now_ms()))?;
        }
        TokenCommand::Revoke { id } => {
            let t = client.revoke_token(pb::RevokeTokenRequest { id }).await?.into_inner();
            output::print(&tokens::revoked(&TokenInfo::from(&t)))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
