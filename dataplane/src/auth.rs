//! The rail handshake's authentication: the cluster's rail key ([`RailKey`]), how an endpoint
//! uses it ([`RailAuth`]), and the messages that prove, at the start of a rail connection, that
//! both ends hold the key. Pure: the endpoint (`endpoint::connect`) does the I/O.
//!
//! # Protocol
//! With [`RailAuth::Key`], a rail connection starts with three fixed-size messages before the
//! [`Hello`](crate::wire::Hello) exchange of [`wire`](crate::wire); the connecting side is C,
//! the accepting side A, k the rail key, `‖` concatenation:
//!
//! | from | message | bytes |
//! | --- | --- | --- |
//! | C → A | [`OFFER_MAGIC`] `PLXA`, [`AUTH_VERSION`], nonce_c | 4 + 1 + 32 |
//! | A → C | nonce_a, HMAC-SHA256(k, `"plexus-rail-v1 acceptor"` ‖ nonce_c ‖ nonce_a) | 32 + 32 |
//! | C → A | HMAC-SHA256(k, `"plexus-rail-v1 connector"` ‖ nonce_a ‖ nonce_c) | 32 |
//!
//! C checks A's MAC before it sends its own, and A checks C's before it reads anything else;
//! both compare in constant time (`ring::hmac::verify`). Each side's fresh random nonce makes
//! the other's MAC unique to this connection, so a recorded handshake cannot be replayed, and
//! the two labels keep a MAC one side produced from serving as the other side's (reflection).
//! C sends its MAC and its `Hello` in one write, so authentication adds one round trip to the
//! start of a connection and nothing after it. A side that fails the handshake, or takes longer
//! than `connect_timeout` for it, closes the connection; nothing it sent reaches the message
//! code. A connection starting with the unauthenticated protocol's magic (`PLXD`) is refused
//! with a message that says so. With [`RailAuth::Open`] none of these bytes are sent: the wire
//! protocol is the one of [`wire`](crate::wire) alone.
//!
//! # What it does not protect
//! It authenticates the start of a connection, not each byte: after the handshake, frames
//! travel as plain TCP, checksummed (CRC-32C, against corruption) but neither encrypted nor
//! authenticated. An attacker on the path who can read the traffic sees the data, and one who
//! can hijack or inject into an established TCP connection can feed it frames; both are out of
//! scope (put the rails on a network only the cluster reaches, or under IPsec/WireGuard). What
//! the handshake does stop is anyone who can merely reach a rail port — another tenant, a
//! scanner, a worker of another cluster, a peer left on the unauthenticated protocol — from
//! having its messages accepted, or making this endpoint accept theirs. A peer's identity
//! (its `Hello`) is what it announces, proven only to belong to some holder of the key.

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use crate::error::{Error, Result};

/// Length of a rail key in bytes.
pub const KEY_LEN: usize = 32;
/// Length of each side's nonce.
pub const NONCE_LEN: usize = 32;
/// Length of an HMAC-SHA256 tag.
pub const MAC_LEN: usize = 32;
/// The four bytes an authenticated connection starts with (the unauthenticated protocol's
/// [`Hello`](crate::wire::Hello) starts with [`wire::MAGIC`](crate::wire::MAGIC), `PLXD`).
pub const OFFER_MAGIC: [u8; 4] = *b"PLXA";
/// The handshake's version; a connector announcing another is refused.
pub const AUTH_VERSION: u8 = 1;
/// The connector's first message: magic, version, its nonce.
pub const OFFER_LEN: usize = 4 + 1 + NONCE_LEN;
/// The part of the offer that identifies the protocol (magic and version), read and checked
/// before the rest, so that a peer speaking something else is refused at once.
pub const OFFER_PREFIX_LEN: usize = 4 + 1;
/// The acceptor's answer: its nonce and its MAC.
pub const ANSWER_LEN: usize = NONCE_LEN + MAC_LEN;

const ACCEPTOR_LABEL: &[u8] = b"plexus-rail-v1 acceptor";
const CONNECTOR_LABEL: &[u8] = b"plexus-rail-v1 connector";

/// The cluster's rail key: a 32-byte secret every worker of the cluster holds (the
/// coordinator hands it out over each worker's mTLS session). Its `Debug` does not show it.
#[derive(Clone)]
pub struct RailKey([u8; KEY_LEN]);

impl RailKey {
    /// A key from its bytes, which must be exactly [`KEY_LEN`] (32).
    pub fn from_bytes(b: &[u8]) -> Result<RailKey> {
        let k: [u8; KEY_LEN] = b.try_into().map_err(|_| Error::BadRailKey(b.len()))?;
        Ok(RailKey(k))
    }

    /// A fresh key from the system's random source (`ring::rand::SystemRandom`).
    ///
    /// # Panics
    /// If the operating system's random source fails (`getrandom` unavailable), since no key
    /// can be made without it.
    pub fn random() -> RailKey {
        let mut k = [0u8; KEY_LEN];
        SystemRandom::new().fill(&mut k).expect("the system random source failed; cannot make a rail key");
        RailKey(k)
    }

    /// The secret itself, to hand to a worker over an authenticated, encrypted channel.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    fn hmac_key(&self) -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, &self.0)
    }
}

impl std::fmt::Debug for RailKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RailKey(<redacted>)")
    }
}

/// Whether and how an endpoint authenticates its rail connections.
#[derive(Clone, Debug)]
pub enum RailAuth {
    /// No authentication: the unauthenticated wire protocol, without a byte of the handshake
    /// (`--insecure`, tests, benchmarks).
    Open,
    /// Every connection, in and out, starts with the handshake under this key.
    Key(RailKey),
    /// Authentication is required but the key has not arrived yet (a worker before it
    /// registered with the coordinator): every incoming connection is dropped (and counted),
    /// every outgoing one fails with [`Error::NoRailKey`].
    Pending,
}

/// A fresh nonce from `rng`.
pub fn nonce(rng: &impl SecureRandom) -> Result<[u8; NONCE_LEN]> {
    let mut n = [0u8; NONCE_LEN];
    rng.fill(&mut n).map_err(|_| Error::Io(std::io::Error::other("the system random source failed")))?;
    Ok(n)
}

/// The connector's first message.
pub fn offer(nonce_c: &[u8; NONCE_LEN]) -> [u8; OFFER_LEN] {
    let mut b = [0u8; OFFER_LEN];
    b[..4].copy_from_slice(&OFFER_MAGIC);
    b[4] = AUTH_VERSION;
    b[OFFER_PREFIX_LEN..].copy_from_slice(nonce_c);
    b
}

/// Checks the first bytes of an offer (magic and version). Refuses, with a message that says
/// what it saw, a connection that speaks the unauthenticated protocol, another version, or
/// anything else.
pub fn check_offer_prefix(b: &[u8; OFFER_PREFIX_LEN]) -> Result<()> {
    if b[..4] == crate::wire::MAGIC {
        return Err(Error::Protocol(
            "the peer speaks the unauthenticated rail protocol, but this endpoint requires the rail key (is the peer running with --insecure?)".into(),
        ));
    }
    if b[..4] != OFFER_MAGIC {
        return Err(Error::Protocol(format!("not a rail handshake (starts {:02x?})", &b[..4])));
    }
    if b[4] != AUTH_VERSION {
        return Err(Error::Protocol(format!("peer speaks rail handshake version {}, we speak {AUTH_VERSION}", b[4])));
    }
    Ok(())
}

/// The transcript a MAC covers: `label ‖ first ‖ second`.
fn transcript(label: &[u8], first: &[u8; NONCE_LEN], second: &[u8; NONCE_LEN]) -> Vec<u8> {
    let mut m = Vec::with_capacity(label.len() + 2 * NONCE_LEN);
    m.extend_from_slice(label);
    m.extend_from_slice(first);
    m.extend_from_slice(second);
    m
}

fn sign(key: &RailKey, msg: &[u8]) -> [u8; MAC_LEN] {
    let tag = hmac::sign(&key.hmac_key(), msg);
    tag.as_ref().try_into().expect("HMAC-SHA256 is 32 bytes")
}

/// The acceptor's answer to an offer carrying `nonce_c`: its own nonce and its MAC.
pub fn answer(key: &RailKey, nonce_c: &[u8; NONCE_LEN], nonce_a: &[u8; NONCE_LEN]) -> [u8; ANSWER_LEN] {
    let mut b = [0u8; ANSWER_LEN];
    b[..NONCE_LEN].copy_from_slice(nonce_a);
    b[NONCE_LEN..].copy_from_slice(&sign(key, &transcript(ACCEPTOR_LABEL, nonce_c, nonce_a)));
    b
}

/// The connector's check of the acceptor's answer to its `nonce_c`: the acceptor's nonce if its
/// MAC is right, else an error (the peer does not hold `key`).
pub fn check_answer(key: &RailKey, nonce_c: &[u8; NONCE_LEN], answer: &[u8; ANSWER_LEN]) -> Result<[u8; NONCE_LEN]> {
    let nonce_a: [u8; NONCE_LEN] = answer[..NONCE_LEN].try_into().expect("32 bytes");
    hmac::verify(&key.hmac_key(), &transcript(ACCEPTOR_LABEL, nonce_c, &nonce_a), &answer[NONCE_LEN..])
        .map_err(|_| Error::Protocol("the peer does not hold this cluster's rail key".into()))?;
    Ok(nonce_a)
}

/// The connector's proof, sent once the answer checked out.
pub fn proof(key: &RailKey, nonce_c: &[u8; NONCE_LEN], nonce_a: &[u8; NONCE_LEN]) -> [u8; MAC_LEN] {
    sign(key, &transcript(CONNECTOR_LABEL, nonce_a, nonce_c))
}

/// The acceptor's check of the connector's proof.
pub fn check_proof(
    key: &RailKey,
    nonce_c: &[u8; NONCE_LEN],
    nonce_a: &[u8; NONCE_LEN],
    proof: &[u8; MAC_LEN],
) -> Result<()> {
    hmac::verify(&key.hmac_key(), &transcript(CONNECTOR_LABEL, nonce_a, nonce_c), proof)
        .map_err(|_| Error::Protocol("the peer does not hold this cluster's rail key".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> RailKey {
        RailKey::from_bytes(&[b; 32]).unwrap()
    }

    #[test]
    fn a_key_is_exactly_32_bytes() {
        assert!(RailKey::from_bytes(&[7; 32]).is_ok());
        for n in [0, 16, 31, 33, 64] {
            let e = RailKey::from_bytes(&vec![7; n]).unwrap_err();
            assert!(matches!(e, Error::BadRailKey(m) if m == n), "{e:?}");
            assert!(e.to_string().contains("32 bytes"), "{e}");
            assert!(e.to_string().contains(&n.to_string()), "{e}");
        }
    }

    #[test]
    fn debug_never_shows_the_key() {
        let k = RailKey::from_bytes(&[0xc3; 32]).unwrap();
        for s in [format!("{k:?}"), format!("{k:#?}"), format!("{:?}", RailAuth::Key(k.clone()))] {
            assert!(s.contains("redacted"), "{s}");
            for leak in ["195, 195", "c3c3", "C3C3", "c3, 0xc3"] {
                assert!(!s.contains(leak), "{s} shows the key ({leak})");
            }
        }
    }

    #[test]
    fn random_keys_differ() {
        assert_ne!(RailKey::random().as_bytes(), RailKey::random().as_bytes());
        assert_ne!(RailKey::random().as_bytes(), &[0; 32]);
    }

    /// The whole exchange in memory: the same key passes both checks; another key, a changed
    /// nonce, a flipped MAC bit, or a MAC replayed from another connection fails them; and one
    /// side's MAC never passes as the other's.
    #[test]
    fn the_exchange_checks_key_nonces_and_roles() {
        let (k, other) = (key(1), key(2));
        let (nc, na) = ([3u8; 32], [4u8; 32]);
        let ans = answer(&k, &nc, &na);
        assert_eq!(check_answer(&k, &nc, &ans).unwrap(), na);
        let p = proof(&k, &nc, &na);
        check_proof(&k, &nc, &na, &p).unwrap();

        assert!(check_answer(&other, &nc, &ans).is_err(), "another key");
        assert!(check_answer(&k, &[5; 32], &ans).is_err(), "another nonce_c");
        let mut bad = ans;
        bad[ANSWER_LEN - 1] ^= 1;
        assert!(check_answer(&k, &nc, &bad).is_err(), "a flipped bit");
        let mut bad = ans;
        bad[0] ^= 1;
        assert!(check_answer(&k, &nc, &bad).is_err(), "a changed nonce_a");
        assert!(check_proof(&other, &nc, &na, &p).is_err(), "another key");
        assert!(check_proof(&k, &nc, &[6; 32], &p).is_err(), "replayed: another nonce_a");
        // Reflection: the acceptor's MAC over the same nonces is not the connector's proof.
        let a_mac: [u8; 32] = ans[32..].try_into().unwrap();
        assert!(check_proof(&k, &nc, &na, &a_mac).is_err());
        let swapped = answer(&k, &na, &nc);
        assert!(check_proof(&k, &nc, &na, swapped[32..].try_into().unwrap()).is_err());
    }

    #[test]
    fn the_offer_prefix_names_what_it_saw() {
        let o = offer(&[9; 32]);
        check_offer_prefix(o[..5].try_into().unwrap()).unwrap();
        let e = check_offer_prefix(b"PLXD\x01").unwrap_err().to_string();
        assert!(e.contains("unauthenticated"), "{e}");
        let e = check_offer_prefix(b"GET /").unwrap_err().to_string();
        assert!(e.contains("not a rail handshake"), "{e}");
        let e = check_offer_prefix(b"PLXA\x02").unwrap_err().to_string();
        assert!(e.contains("version 2"), "{e}");
    }
}
