//! `etcd://host:port[,host:port…][/prefix]`: where an etcd store is.

use crate::error::Error;

/// `etcd://h1:2379,h2:2379[/prefix]`, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct EtcdUrl {
    pub endpoints: Vec<String>,
    /// Without a trailing `/`; default `/plexus`.
    pub prefix: String,
}

impl std::fmt::Display for EtcdUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "etcd://{}{}", self.endpoints.join(","), self.prefix)
    }
}

impl std::str::FromStr for EtcdUrl {
    type Err = Error;

    fn from_str(s: &str) -> Result<EtcdUrl, Error> {
        let rest = s.strip_prefix("etcd://").ok_or_else(|| {
            Error::Invalid(format!("{s:?} is not an etcd URL: write etcd://host:port[,host:port…][/prefix]"))
        })?;
        let (hosts, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/').to_string()),
            None => (rest, String::new()),
        };
        let prefix = if prefix.is_empty() { "/plexus".to_string() } else { prefix };
        if prefix.len() > 200 || prefix.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(Error::Invalid(format!(
                "the etcd key prefix {prefix:?} must be at most 200 characters, without spaces or control characters"
            )));
        }
        let mut endpoints = Vec::new();
        for h in hosts.split(',') {
            let h = h.trim();
            let Some((host, port)) = h.rsplit_once(':') else {
                return Err(Error::Invalid(format!(
                    "etcd endpoint {h:?} in {s:?} has no port: write host:port (etcd's client port is usually 2379)"
                )));
            };
            if host.is_empty() || port.parse::<u16>().is_err() {
                return Err(Error::Invalid(format!("etcd endpoint {h:?} in {s:?} is not host:port")));
            }
            endpoints.push(h.to_string());
        }
        Ok(EtcdUrl { endpoints, prefix })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_bad_ones_are_named() {
        let u: EtcdUrl = "etcd://h1:2379,h2:2379/pfx".parse().unwrap();
        assert_eq!(u.endpoints, vec!["h1:2379", "h2:2379"]);
        assert_eq!(u.prefix, "/pfx");
        let d: EtcdUrl = "etcd://127.0.0.1:2379".parse().unwrap();
        assert_eq!(d.prefix, "/plexus");
        assert_eq!(d.to_string(), "etcd://127.0.0.1:2379/plexus");
        for bad in ["http://h:1", "etcd://h", "etcd://:1", "etcd://h:x", "etcd://h:1/a b"] {
            assert!(bad.parse::<EtcdUrl>().is_err(), "{bad}");
        }
    }
}
