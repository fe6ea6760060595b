//! The token commands' one implementation, shared by `plexus token` (which asks a coordinator
//! over gRPC) and `plexus-coordinator token` (which acts on the store, or asks the coordinator
//! that holds it): the scope a new token gets by default, how a scope and a lifetime are read,
//! and how a list of tokens and a revocation are shown.
//!
//! The default scope is [`DEFAULT_SCOPE`], `read`, the least a token can do: a token made
//! without saying what it is for can look but not act, and nothing more powerful is handed out
//! by omission.

use std::time::Duration;

use crate::Error;
use crate::token::Scope;

/// The scope `token create` gives without `--scope`.
pub const DEFAULT_SCOPE: Scope = Scope::Read;
/// [`DEFAULT_SCOPE`]'s name, for the commands' `--scope` default.
pub const DEFAULT_SCOPE_NAME: &str = "read";
/// The help of `--scope`, the same in both commands.
pub const SCOPE_HELP: &str = "read (status, logs, watch, explain, workers), submit (read + submit, cancel), admin \
     (submit + tokens, queues, draining, policy export), or worker (a join token for workers). Default: read, the \
     least a token can do";

/// Reads a `--scope` argument (a clap value parser in both commands).
pub fn scope(text: &str) -> Result<Scope, Error> {
    text.parse()
}

/// A `--ttl` as the lifetime a coordinator is asked for, in ms: 0 is "never expires".
pub fn ttl_ms(ttl: Option<Duration>) -> u64 {
    ttl.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)).unwrap_or(0)
}

/// What a coordinator tells of a token: never its secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenInfo {
    pub id: String,
    pub scope: String,
    pub name: String,
    pub created_ms: u64,
    /// 0: never.
    pub expires_ms: u64,
    /// 0: not revoked.
    pub revoked_ms: u64,
}

impl From<&plexus_proto::pb::TokenInfo> for TokenInfo {
    fn from(t: &plexus_proto::pb::TokenInfo) -> TokenInfo {
        TokenInfo {
            id: t.id.clone(),
            scope: t.scope.clone(),
            name: t.name.clone(),
            created_ms: t.created_ms,
            expires_ms: t.expires_ms,
            revoked_ms: t.revoked_ms,
        }
    }
}

impl TokenInfo {
    /// `revoked`, `expired` (as of `now_ms`) or `active`.
    pub fn state(&self, now_ms: u64) -> &'static str {
        if self.revoked_ms != 0 {
            "revoked"
        } else if self.expires_ms != 0 && self.expires_ms <= now_ms {
            "expired"
        } else {
            "active"
        }
    }
}

/// A time in ms since the epoch as RFC 3339 (to the second), `-` for 0 (never).
fn when(ms: u64) -> String {
    if ms == 0 {
        "-".into()
    } else {
        humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
    }
}

/// `token list`: a header, then one line per token: id, scope, state, created, expires, name.
pub fn table(tokens: &[TokenInfo], now_ms: u64) -> String {
    let mut out = format!("{:<12}  {:<6}  {:<7}  {:<20}  {:<20}  NAME\n", "ID", "SCOPE", "STATE", "CREATED", "EXPIRES");
    for t in tokens {
        out.push_str(&format!(
            "{:<12}  {:<6}  {:<7}  {:<20}  {:<20}  {}\n",
            t.id,
            t.scope,
            t.state(now_ms),
            when(t.created_ms),
            when(t.expires_ms),
            t.name
        ));
    }
    out
}

/// `token revoke`: which token stopped working.
pub fn revoked(t: &TokenInfo) -> String {
    format!("revoked {} ({} {})\n", t.id, t.scope, if t.name.is_empty() { "unnamed" } else { &t.name })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_scope_is_read_and_its_name_parses_to_it() {
        assert_eq!(DEFAULT_SCOPE, Scope::Read);
        assert_eq!(scope(DEFAULT_SCOPE_NAME).unwrap(), DEFAULT_SCOPE);
        assert!(SCOPE_HELP.contains("Default: read"), "the help states the default");
        let e = scope("root").unwrap_err().to_string();
        assert!(e.contains("unknown scope \"root\"") && e.contains("read, submit, admin, worker"), "{e}");
        assert_eq!(scope("worker").unwrap(), Scope::Worker);
    }

    #[test]
    fn a_ttl_is_ms_and_none_is_never() {
        assert_eq!(ttl_ms(None), 0);
        assert_eq!(ttl_ms(Some(Duration::from_secs(90))), 90_000);
        assert_eq!(ttl_ms(Some(Duration::MAX)), u64::MAX);
    }

    #[test]
    fn the_table_shows_states_and_times_and_never_a_secret() {
        let t = |id: &str, expires_ms, revoked_ms| TokenInfo {
            id: id.into(),
            scope: "read".into(),
            name: "ci".into(),
            created_ms: 1_000,
            expires_ms,
            revoked_ms,
        };
        let out = table(&[t("aaaaaaaaaaaa", 0, 0), t("bbbbbbbbbbbb", 5_000, 0), t("cccccccccccc", 0, 2_000)], 6_000);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("ID") && lines[0].ends_with("NAME"), "{out}");
        assert!(lines[1].contains("active") && lines[1].contains("1970-01-01T00:00:01Z"), "{out}");
        assert!(lines[1].contains("  -  "), "no expiry shows as -: {out}");
        assert!(lines[2].contains("expired"), "{out}");
        assert!(lines[3].contains("revoked"), "{out}");
        assert_eq!(revoked(&t("cccccccccccc", 0, 2_000)), "revoked cccccccccccc (read ci)\n");
        assert_eq!(revoked(&TokenInfo { name: String::new(), ..t("d", 0, 1) }), "revoked d (read unnamed)\n");
    }
}
