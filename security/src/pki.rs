//! The cluster CA and the certificates it issues.
//!
//! The coordinator makes the CA on its first start ([`ClusterCa::create`]) and keeps its
//! certificate and key in the store; from then on [`ClusterCa::load`] rebuilds it. It issues:
//!
//! - the coordinator's own certificate, anew at every start, for [`crate::names::COORDINATOR_NAME`]
//!   plus the names and addresses it is reached by (server and client auth: the coordinator is a
//!   client of the workers' `PeerService` when it proxies logs);
//! - one certificate per worker, for [`crate::names::WORKER_NAME`] and `<worker id>.worker.plexus`,
//!   over a public key the worker made itself ([`WorkerKey`]): its private key never leaves the
//!   worker. The coordinator records each issued certificate's [`Fingerprint`] with the worker
//!   id, and recognises a caller by the fingerprint of the certificate it presented.
//!
//! Keys are ECDSA P-256 (rcgen's default); certificates are valid from a year before they are
//! made: the CA and the coordinator's for 10 years, a worker's for 5.

use std::time::{SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData, SanType, SignatureAlgorithm,
};

use crate::Error;
use crate::names::{COORDINATOR_NAME, WORKER_NAME};

/// A certificate and its private key, both PEM.
#[derive(Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").field("cert_pem", &self.cert_pem).field("key_pem", &"<redacted>").finish()
    }
}

/// SHA-256 of a certificate's DER, in hex: how the coordinator recognises an issued certificate.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub String);

impl Fingerprint {
    pub fn of_der(der: &[u8]) -> Fingerprint {
        Fingerprint(hex::encode(ring::digest::digest(&ring::digest::SHA256, der).as_ref()))
    }

    /// The fingerprint of the first certificate in a PEM text.
    pub fn of_pem(pem: &str) -> Result<Fingerprint, Error> {
        Ok(Fingerprint::of_der(&pem_to_der(pem)?))
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The DER of the first `CERTIFICATE` block of a PEM text.
pub fn pem_to_der(text: &str) -> Result<Vec<u8>, Error> {
    let blocks = pem::parse_many(text).map_err(|e| Error::Certificate(format!("not PEM: {e}")))?;
    blocks
        .into_iter()
        .find(|b| b.tag() == "CERTIFICATE")
        .map(|b| b.into_contents())
        .ok_or_else(|| Error::Certificate("no PEM certificate block".into()))
}

/// The current year (UTC), for validity periods.
fn this_year() -> i32 {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    1970 + (secs / 31_556_952) as i32
}

/// Sets the validity period; returns its end in Unix seconds.
fn validity(params: &mut CertificateParams, years: i32) -> i64 {
    let year = this_year();
    params.not_before = rcgen::date_time_ymd(year - 1, 1, 1);
    params.not_after = rcgen::date_time_ymd(year + years, 1, 1);
    params.not_after.unix_timestamp()
}

/// A worker's certificate as issued, and when it expires.
#[derive(Clone, Debug)]
pub struct WorkerCert {
    pub pem: String,
    /// The end of its validity, in Unix seconds.
    pub not_after_s: i64,
}

/// The CA of one cluster.
pub struct ClusterCa {
    params: CertificateParams,
    key: KeyPair,
    cert_pem: String,
}

impl std::fmt::Debug for ClusterCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterCa").field("cert_pem", &self.cert_pem).finish_non_exhaustive()
    }
}

fn ca_params(cluster: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("Plexus cluster CA {cluster}"));
    dn.push(DnType::OrganizationName, "Plexus");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params
}

impl ClusterCa {
    /// A new CA for the cluster named `cluster` (an id the coordinator makes once).
    pub fn create(cluster: &str) -> Result<ClusterCa, Error> {
        let mut params = ca_params(cluster);
        validity(&mut params, 10);
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(ClusterCa { params, key, cert_pem: cert.pem() })
    }

    /// The CA made by [`ClusterCa::create`] for `cluster`, from its stored certificate and key.
    pub fn load(cluster: &str, cert_pem: &str, key_pem: &str) -> Result<ClusterCa, Error> {
        let key = KeyPair::from_pem(key_pem)?;
        pem_to_der(cert_pem)?;
        Ok(ClusterCa { params: ca_params(cluster), key, cert_pem: cert_pem.to_string() })
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    fn issuer(&self) -> Issuer<'_, &KeyPair> {
        Issuer::from_params(&self.params, &self.key)
    }

    /// The coordinator's certificate: [`COORDINATOR_NAME`], `localhost`, 127.0.0.1, ::1, and
    /// `names` (host names or IP addresses it is reached by).
    pub fn issue_coordinator(&self, names: &[String]) -> Result<Issued, Error> {
        let mut sans = vec![COORDINATOR_NAME.to_string(), "localhost".into(), "127.0.0.1".into(), "::1".into()];
        for n in names {
            if !sans.contains(n) {
                sans.push(n.clone());
            }
        }
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.subject_alt_names = sans.iter().map(|s| san(s)).collect::<Result<_, _>>()?;
        params.distinguished_name.push(DnType::CommonName, COORDINATOR_NAME);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, 10);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer())?;
        Ok(Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    /// A worker's certificate over the public key it sent (`WorkerKey::public_key`): the raw
    /// uncompressed P-256 point, 65 bytes starting with 4.
    pub fn issue_worker(&self, worker_id: &str, public_key: &[u8]) -> Result<WorkerCert, Error> {
        if !worker_id.starts_with("wkr-")
            || worker_id.len() > 40
            || !worker_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(Error::Certificate(format!("{worker_id:?} is not a worker id")));
        }
        let key = RawP256::new(public_key)?;
        let mut params = CertificateParams::new(vec![WORKER_NAME.to_string(), format!("{worker_id}.{WORKER_NAME}")])?;
        params.distinguished_name.push(DnType::CommonName, worker_id);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let not_after_s = validity(&mut params, 5);
        Ok(WorkerCert { pem: params.signed_by(&key, &self.issuer())?.pem(), not_after_s })
    }
}

fn san(name: &str) -> Result<SanType, Error> {
    Ok(match name.parse::<std::net::IpAddr>() {
        Ok(ip) => SanType::IpAddress(ip),
        Err(_) => SanType::DnsName(
            name.try_into()
                .map_err(|e: rcgen::Error| Error::Certificate(format!("{name:?} is not a DNS name: {e}")))?,
        ),
    })
}

/// Checks that `bytes` are a public key as a worker sends it: an uncompressed ECDSA P-256 point
/// (65 bytes starting with 4) that lies on the curve and is not the point at infinity. ring's
/// ECDH validates the peer's point fully (NIST SP 800-56A's public key validation), so one
/// agreement with a throw-away key is the check.
pub fn check_worker_key(bytes: &[u8]) -> Result<(), Error> {
    use ring::agreement;
    if bytes.len() != 65 || bytes[0] != 4 {
        return Err(Error::Certificate(format!(
            "the public key is {} bytes{}; a worker sends an uncompressed ECDSA P-256 point (65 bytes starting with 4)",
            bytes.len(),
            bytes.first().map(|b| format!(" starting with {b}")).unwrap_or_default()
        )));
    }
    let rng = ring::rand::SystemRandom::new();
    let mine = agreement::EphemeralPrivateKey::generate(&agreement::ECDH_P256, &rng)
        .map_err(|_| Error::Certificate("cannot make a key to check the public key with".into()))?;
    let peer = agreement::UnparsedPublicKey::new(&agreement::ECDH_P256, bytes);
    agreement::agree_ephemeral(mine, &peer, |_| ()).map_err(|_| {
        Error::Certificate(format!(
            "the public key {}… is not a point on the P-256 curve: a worker sends the public half of the key pair it made",
            hex::encode(&bytes[..9])
        ))
    })
}

/// An ECDSA P-256 public key as a worker sends it.
struct RawP256(Vec<u8>);

impl RawP256 {
    fn new(bytes: &[u8]) -> Result<RawP256, Error> {
        check_worker_key(bytes)?;
        Ok(RawP256(bytes.to_vec()))
    }
}

impl PublicKeyData for RawP256 {
    fn der_bytes(&self) -> &[u8] {
        &self.0
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

/// A worker's key pair, made on the worker; only its public half is sent to the coordinator.
pub struct WorkerKey(KeyPair);

impl WorkerKey {
    pub fn generate() -> Result<WorkerKey, Error> {
        Ok(WorkerKey(KeyPair::generate()?))
    }

    pub fn from_pem(pem: &str) -> Result<WorkerKey, Error> {
        Ok(WorkerKey(KeyPair::from_pem(pem)?))
    }

    pub fn public_key(&self) -> Vec<u8> {
        self.0.public_key_raw().to_vec()
    }

    pub fn to_pem(&self) -> String {
        self.0.serialize_pem()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_survives_a_round_trip_through_its_pem() {
        let ca = ClusterCa::create("c1").unwrap();
        let again = ClusterCa::load("c1", ca.cert_pem(), &ca.key_pem()).unwrap();
        let key = WorkerKey::generate().unwrap();
        let cert = again.issue_worker("wkr-0123456789abcdef0123456789abcdef", &key.public_key()).unwrap();
        assert!(cert.not_after_s > (this_year() as i64 - 1970) * 31_556_952);
        let cert = cert.pem;
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_ne!(Fingerprint::of_pem(&cert).unwrap(), Fingerprint::of_pem(ca.cert_pem()).unwrap());
    }

    #[test]
    fn a_bad_public_key_or_worker_id_is_refused() {
        let ca = ClusterCa::create("c1").unwrap();
        let err = ca.issue_worker("wkr-01", &[4u8; 10]).unwrap_err();
        assert!(err.to_string().contains("65 bytes"), "{err}");
        let key = WorkerKey::generate().unwrap();
        let err = ca.issue_worker("../etc", &key.public_key()).unwrap_err();
        assert!(err.to_string().contains("not a worker id"), "{err}");
    }

    #[test]
    fn a_public_key_off_the_curve_is_refused() {
        let good = WorkerKey::generate().unwrap().public_key();
        check_worker_key(&good).unwrap();
        // The right length and prefix, but (almost surely) not on the curve: y changed.
        let mut off = good.clone();
        off[64] ^= 1;
        let err = check_worker_key(&off).unwrap_err().to_string();
        assert!(err.contains("is not a point on the P-256 curve") && err.contains(&hex::encode(&off[..9])), "{err}");
        // All zeros after the prefix: (0, 0) is not on the curve either.
        let mut zero = [0u8; 65];
        zero[0] = 4;
        assert!(check_worker_key(&zero).unwrap_err().to_string().contains("not a point"));
        // Coordinates past the field's prime.
        let mut big = [0xffu8; 65];
        big[0] = 4;
        assert!(check_worker_key(&big).is_err());
        // A compressed point, and nothing at all.
        let err = check_worker_key(&good[..33]).unwrap_err().to_string();
        assert!(err.contains("33 bytes starting with 4"), "{err}");
        assert!(check_worker_key(&[]).unwrap_err().to_string().contains("0 bytes;"));
        let ca = ClusterCa::create("c1").unwrap();
        assert!(ca.issue_worker("wkr-0123456789abcdef0123456789abcdef", &off).is_err());
    }

    #[test]
    fn pem_decoding_matches_the_der() {
        let ca = ClusterCa::create("c1").unwrap();
        let der = pem_to_der(ca.cert_pem()).unwrap();
        assert_eq!(der[0], 0x30, "a DER SEQUENCE");
        assert!(pem_to_der("nothing here").is_err());
        assert!(pem_to_der("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----").is_err());
    }
}
