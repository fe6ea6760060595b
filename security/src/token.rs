//! Bearer tokens: what users (and workers joining) present, and what the coordinator keeps.
//!
//! A token reads `plx_<id>_<secret>`: `id` is 12 hex digits, public (it names the token in
//! `plexus token list` and `revoke`), `secret` is 64 hex digits (256 random bits). The
//! coordinator stores only the SHA-256 of the secret; a 256-bit random secret needs no slow
//! password hash. A token carries one [`Scope`].

use crate::Error;

/// What a token allows. Each user scope includes the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Status, logs, watch, explain, workers.
    Read,
    /// `Read`, plus submitting and cancelling jobs.
    Submit,
    /// `Submit`, plus tokens, draining and removing workers, exporting the policy.
    Admin,
    /// A join token: only lets a worker obtain its certificate (`WorkerService.Join`).
    Worker,
}

impl Scope {
    pub const ALL: [Scope; 4] = [Scope::Read, Scope::Submit, Scope::Admin, Scope::Worker];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Submit => "submit",
            Scope::Admin => "admin",
            Scope::Worker => "worker",
        }
    }

    /// Whether a token of scope `self` may call something that needs `needed`.
    pub fn allows(self, needed: Scope) -> bool {
        match (self, needed) {
            (Scope::Worker, Scope::Worker) => true,
            (Scope::Worker, _) | (_, Scope::Worker) => false,
            (have, need) => have >= need,
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Scope {
    type Err = Error;
    fn from_str(s: &str) -> Result<Scope, Error> {
        Scope::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| Error::Token(format!("unknown scope {s:?}: one of read, submit, admin, worker")))
    }
}

const PREFIX: &str = "plx_";
const ID_HEX: usize = 12;
const SECRET_HEX: usize = 64;

/// A token in full, as its holder has it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    pub id: String,
    secret: String,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({}, <secret>)", self.id)
    }
}

impl Token {
    /// A new random token.
    pub fn generate() -> Token {
        let id = hex::encode(crate::random_bytes::<{ ID_HEX / 2 }>());
        let secret = hex::encode(crate::random_bytes::<{ SECRET_HEX / 2 }>());
        Token { id, secret }
    }

    /// Reads a token's text (surrounding whitespace, such as a file's newline, is ignored).
    pub fn parse(text: &str) -> Result<Token, Error> {
        let text = text.trim();
        let bad = || {
            Error::Token(format!(
                "this is not a Plexus token: it should read plx_ followed by {ID_HEX} hex digits, _ and {SECRET_HEX} hex digits ({} characters in all)",
                PREFIX.len() + ID_HEX + 1 + SECRET_HEX
            ))
        };
        let rest = text.strip_prefix(PREFIX).ok_or_else(bad)?;
        let (id, secret) = rest.split_once('_').ok_or_else(bad)?;
        let hex =
            |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex(id, ID_HEX) || !hex(secret, SECRET_HEX) {
            return Err(bad());
        }
        Ok(Token { id: id.to_string(), secret: secret.to_string() })
    }

    /// SHA-256 of the secret: what the coordinator stores and compares.
    pub fn hash(&self) -> [u8; 32] {
        let d = ring::digest::digest(&ring::digest::SHA256, self.secret.as_bytes());
        d.as_ref().try_into().expect("SHA-256 is 32 bytes")
    }

    /// Whether this token's secret hashes to `stored`, compared in constant time.
    pub fn matches(&self, stored: &[u8]) -> bool {
        let h = self.hash();
        stored.len() == h.len() && stored.iter().zip(h.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    /// The full text, `plx_<id>_<secret>`.
    pub fn expose(&self) -> String {
        format!("{PREFIX}{}_{}", self.id, self.secret)
    }

    /// Whether `id` has the form of a token id (for `revoke ID` arguments).
    pub fn is_id(id: &str) -> bool {
        id.len() == ID_HEX && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_round_trips_and_only_its_secret_matches() {
        let t = Token::generate();
        let again = Token::parse(&format!("  {}\n", t.expose())).unwrap();
        assert_eq!(again, t);
        assert!(t.matches(&t.hash()));
        let other = Token::generate();
        assert!(!other.matches(&t.hash()));
        assert!(!t.matches(&t.hash()[..31]));
        assert!(!format!("{t:?}").contains(&t.expose()[17..]), "Debug must not show the secret");
    }

    #[test]
    fn malformed_tokens_are_refused_with_the_expected_form() {
        for bad in [
            "",
            "plx_",
            "abc",
            "plx_0123456789ab",
            "plx_0123456789ab_xyz",
            "plx_0123456789AB_0000000000000000000000000000000000000000000000000000000000000000",
        ] {
            let err = Token::parse(bad).unwrap_err().to_string();
            assert!(err.contains("not a Plexus token"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn scopes_nest_and_join_tokens_stand_apart() {
        assert!(Scope::Admin.allows(Scope::Submit) && Scope::Submit.allows(Scope::Read));
        assert!(!Scope::Read.allows(Scope::Submit) && !Scope::Submit.allows(Scope::Admin));
        assert!(Scope::Worker.allows(Scope::Worker));
        assert!(!Scope::Worker.allows(Scope::Read) && !Scope::Admin.allows(Scope::Worker));
        assert_eq!("submit".parse::<Scope>().unwrap(), Scope::Submit);
        assert!("root".parse::<Scope>().is_err());
    }
}
