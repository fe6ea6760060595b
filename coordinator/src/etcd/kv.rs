//! The small namespaces of [`crate::store::Spaces`] in etcd, one key per record under
//! `P/kv/<space>/`; a value over [`PART`] bytes is stored in parts under `P/chunks/<space>/…`
//! with a pointer written last.

use std::sync::Arc;

use etcd_client::{DeleteOptions, TxnOp};

use super::client::{Etcd, prefix_end};
use super::frame::{MAX_DECOMPRESSED, PART};
use crate::error::Error;
use crate::store::{Kv, Pairs, SharedKv, Spaces};

impl Etcd {
    /// The namespaces of [`Spaces`], in `P/kv/…`.
    pub fn spaces(&self) -> Spaces {
        let kv = |name: &str| -> SharedKv { Arc::new(EtcdKv { etcd: self.clone(), space: name.to_string() }) };
        Spaces { security: kv("security"), policy: kv("policy"), queues: kv("queues"), archives: kv("archives") }
    }
}

/// One namespace of [`Spaces`] in etcd.
pub(super) struct EtcdKv {
    pub(super) etcd: Etcd,
    pub(super) space: String,
}

/// The first byte of a stored value: the value follows…
const INLINE: u8 = 0;
/// … or it is in parts: generation (u64 BE), parts (u32 BE), length (u64 BE).
const CHUNKED: u8 = 1;

impl EtcdKv {
    fn data_key(&self, key: &[u8]) -> Vec<u8> {
        let mut k = self.etcd.key(&format!("/kv/{}/", self.space));
        k.extend_from_slice(key);
        k
    }

    /// Where the parts of one generation of `key`'s value live.
    fn chunk_prefix(&self, key: &[u8], generation: Option<u64>) -> Vec<u8> {
        let hex = hex::encode(key);
        let mut p = self.etcd.key(&format!("/chunks/{}/{hex}/", self.space));
        if let Some(g) = generation {
            p.extend_from_slice(format!("{g:016x}/").as_bytes());
        }
        p
    }

    fn decode(&self, key: &[u8], stored: Vec<u8>) -> Result<Vec<u8>, Error> {
        let corrupt = |reason: &str| Error::Corrupt {
            key: format!("{}/{}", self.space, String::from_utf8_lossy(key)),
            reason: reason.into(),
        };
        match stored.split_first() {
            Some((&INLINE, rest)) => Ok(rest.to_vec()),
            Some((&CHUNKED, rest)) if rest.len() == 20 => {
                let generation = u64::from_be_bytes(rest[0..8].try_into().expect("8 bytes"));
                let parts = u32::from_be_bytes(rest[8..12].try_into().expect("4 bytes")) as usize;
                let len = u64::from_be_bytes(rest[12..20].try_into().expect("8 bytes")) as usize;
                if len > MAX_DECOMPRESSED || parts > len / PART + 1 {
                    return Err(corrupt("implausible chunked value"));
                }
                let prefix = self.chunk_prefix(key, Some(generation));
                let chunks = self.etcd.range(prefix.clone(), prefix_end(&prefix))?;
                if chunks.len() != parts {
                    return Err(corrupt("parts missing"));
                }
                let value: Vec<u8> = chunks.into_iter().flat_map(|(_, v)| v).collect();
                if value.len() != len {
                    return Err(corrupt("parts do not add up"));
                }
                Ok(value)
            }
            _ => Err(corrupt("unknown value encoding")),
        }
    }
}

impl Kv for EtcdKv {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.etcd.get(self.data_key(key))?.map(|v| self.decode(key, v)).transpose()
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        // Parts of earlier generations go with the write that replaces them.
        let all_chunks = self.chunk_prefix(key, None);
        let mut ops = Vec::new();
        let header = if value.len() < PART {
            let mut v = Vec::with_capacity(value.len() + 1);
            v.push(INLINE);
            v.extend_from_slice(value);
            ops.push(TxnOp::delete(all_chunks.clone(), Some(DeleteOptions::new().with_range(prefix_end(&all_chunks)))));
            v
        } else {
            let generation = plexus_proto::now_ms() << 16 | (rand::random::<u16>() as u64);
            let prefix = self.chunk_prefix(key, Some(generation));
            let parts = value.chunks(PART).count();
            for (i, part) in value.chunks(PART).enumerate() {
                let mut k = prefix.clone();
                k.extend_from_slice(format!("{i:08x}").as_bytes());
                self.etcd.write(vec![TxnOp::put(k, part.to_vec(), None)])?;
            }
            // Older generations: everything under the key's chunk prefix before this one.
            ops.push(TxnOp::delete(all_chunks.clone(), Some(DeleteOptions::new().with_range(prefix.clone()))));
            let mut v = vec![CHUNKED];
            v.extend_from_slice(&generation.to_be_bytes());
            v.extend_from_slice(&(parts as u32).to_be_bytes());
            v.extend_from_slice(&(value.len() as u64).to_be_bytes());
            v
        };
        ops.push(TxnOp::put(self.data_key(key), header, None));
        self.etcd.write(ops).map(|_| ())
    }

    fn put_many(&self, items: &[(Vec<u8>, Vec<u8>)]) -> Result<(), Error> {
        // Small values: two operations a key (the value, and the delete of any chunks an
        // earlier large value left), up to 60 keys and 1 MiB of values a transaction, inside
        // etcd's 128 operations and 1.5 MiB. Large ones go alone, through `put`.
        let (small, large): (Vec<_>, Vec<_>) = items.iter().partition(|(_, v)| v.len() < PART);
        let mut ops = Vec::new();
        let mut bytes = 0;
        for (key, value) in small {
            if !ops.is_empty() && (ops.len() >= 120 || bytes + key.len() + value.len() > PART) {
                self.etcd.write(std::mem::take(&mut ops))?;
                bytes = 0;
            }
            let chunks = self.chunk_prefix(key, None);
            ops.push(TxnOp::delete(chunks.clone(), Some(DeleteOptions::new().with_range(prefix_end(&chunks)))));
            let mut v = Vec::with_capacity(value.len() + 1);
            v.push(INLINE);
            v.extend_from_slice(value);
            ops.push(TxnOp::put(self.data_key(key), v, None));
            bytes += value.len() + key.len();
        }
        if !ops.is_empty() {
            self.etcd.write(ops)?;
        }
        large.into_iter().try_for_each(|(k, v)| self.put(k, v))
    }

    fn remove(&self, keys: &[Vec<u8>]) -> Result<(), Error> {
        // Two operations a key, inside etcd's 128 a transaction.
        for batch in keys.chunks(60) {
            let mut ops = Vec::new();
            for key in batch {
                let chunks = self.chunk_prefix(key, None);
                ops.push(TxnOp::delete(self.data_key(key), None));
                ops.push(TxnOp::delete(chunks.clone(), Some(DeleteOptions::new().with_range(prefix_end(&chunks)))));
            }
            self.etcd.write(ops)?;
        }
        Ok(())
    }

    fn scan(&self, prefix: &[u8]) -> Result<Pairs, Error> {
        let from = self.data_key(prefix);
        let base = self.data_key(b"").len();
        self.etcd
            .range(from.clone(), prefix_end(&from))?
            .into_iter()
            .map(|(k, v)| {
                let key = k[base..].to_vec();
                let value = self.decode(&key, v)?;
                Ok((key, value))
            })
            .collect()
    }
}
