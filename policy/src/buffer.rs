//! The experience buffer of seed 001: 1024 entries, duplicates dropped on insert, entries removed
//! when sampled. Pure; the sampling generator is passed in so tests and runs repeat.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};

use rand::Rng;

use crate::features::{FEATURES, Observation};

/// One transition: in state `state` the policy chose candidate `action`, got `reward`, and the
/// next decision saw `next`.
#[derive(Clone, Debug, PartialEq)]
pub struct Experience {
    pub state: Observation,
    pub action: usize,
    pub reward: f32,
    pub next: Observation,
}

impl Experience {
    /// A stable fingerprint of the whole transition, for duplicate detection and as a store key.
    pub fn fingerprint(&self) -> u64 {
        // DefaultHasher::new() has fixed keys, so fingerprints are stable across processes.
        let mut h = DefaultHasher::new();
        self.encode().hash(&mut h);
        h.finish()
    }

    /// Little-endian binary form: action u32, reward f32, then each observation as
    /// n u32, n×FEATURES f32, n feasibility bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(16 + (self.state.len() + self.next.len()) * (FEATURES * 4 + 1));
        b.extend_from_slice(&(self.action as u32).to_le_bytes());
        b.extend_from_slice(&self.reward.to_le_bytes());
        for o in [&self.state, &self.next] {
            b.extend_from_slice(&(o.len() as u32).to_le_bytes());
            for t in &o.tokens {
                for x in t {
                    b.extend_from_slice(&x.to_le_bytes());
                }
            }
            b.extend(o.feasible.iter().map(|&f| f as u8));
        }
        b
    }

    /// Decodes [`Experience::encode`]'s form; `None` for anything malformed.
    pub fn decode(b: &[u8]) -> Option<Experience> {
        let mut r = Reader { b, at: 0 };
        let action = r.u32()? as usize;
        let reward = f32::from_bits(r.u32()?);
        let state = r.observation()?;
        let next = r.observation()?;
        if r.at != b.len() || action >= state.len() || !reward.is_finite() {
            return None;
        }
        Some(Experience { state, action, reward, next })
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn observation(&mut self) -> Option<Observation> {
        let n = self.u32()? as usize;
        if n > 1 << 16 {
            return None;
        }
        let mut tokens = Vec::with_capacity(n);
        for _ in 0..n {
            let mut t = [0f32; FEATURES];
            for x in &mut t {
                *x = f32::from_bits(self.u32()?);
            }
            tokens.push(t);
        }
        let feasible = self.take(n)?.iter().map(|&f| f != 0).collect();
        Some(Observation { tokens, feasible })
    }
}

/// The bounded buffer.
pub struct ExperienceBuffer {
    capacity: usize,
    entries: Vec<(u64, Experience)>,
    seen: HashSet<u64>,
}

/// What an insert did.
#[derive(Debug, PartialEq, Eq)]
pub enum Inserted {
    Added(u64),
    Duplicate,
    /// The buffer is full; the experience was not kept (it fills again as training samples).
    Full,
}

impl ExperienceBuffer {
    pub fn new(capacity: usize) -> Self {
        ExperienceBuffer { capacity, entries: Vec::with_capacity(capacity), seen: HashSet::new() }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.capacity
    }

    pub fn insert(&mut self, e: Experience) -> Inserted {
        let id = e.fingerprint();
        if self.seen.contains(&id) {
            return Inserted::Duplicate;
        }
        if self.is_full() {
            return Inserted::Full;
        }
        self.seen.insert(id);
        self.entries.push((id, e));
        Inserted::Added(id)
    }

    /// Removes and returns `n` uniformly chosen entries (fewer if there are fewer).
    pub fn sample(&mut self, n: usize, rng: &mut impl Rng) -> Vec<(u64, Experience)> {
        let mut out = Vec::with_capacity(n.min(self.entries.len()));
        for _ in 0..n {
            if self.entries.is_empty() {
                break;
            }
            let i = rng.random_range(0..self.entries.len());
            let (id, e) = self.entries.swap_remove(i);
            self.seen.remove(&id);
            out.push((id, e));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn exp(i: usize) -> Experience {
        let obs =
            |v: f32| Observation { tokens: vec![[v; FEATURES], [v + 1.0; FEATURES]], feasible: vec![true, false] };
        Experience { state: obs(i as f32), action: 0, reward: i as f32 * 0.5, next: obs(i as f32 + 0.25) }
    }

    #[test]
    fn duplicates_are_dropped_and_capacity_holds() {
        let mut b = ExperienceBuffer::new(3);
        assert!(matches!(b.insert(exp(1)), Inserted::Added(_)));
        assert_eq!(b.insert(exp(1)), Inserted::Duplicate);
        b.insert(exp(2));
        b.insert(exp(3));
        assert!(b.is_full());
        assert_eq!(b.insert(exp(4)), Inserted::Full);
        assert_eq!(b.len(), 3);
    }

    #[test]
    fn sampled_entries_are_removed_and_may_come_back() {
        let mut b = ExperienceBuffer::new(10);
        for i in 0..10 {
            b.insert(exp(i));
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let s = b.sample(4, &mut rng);
        assert_eq!(s.len(), 4);
        assert_eq!(b.len(), 6);
        let ids: HashSet<u64> = s.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids.len(), 4, "no entry sampled twice");
        assert!(b.entries.iter().all(|(id, _)| !ids.contains(id)));
        // A sampled experience is no longer a duplicate.
        assert!(matches!(b.insert(s[0].1.clone()), Inserted::Added(_)));
        assert_eq!(b.sample(100, &mut rng).len(), 7);
        assert!(b.is_empty());
    }

    #[test]
    fn codec_round_trips_and_rejects_garbage() {
        let e = exp(7);
        let bytes = e.encode();
        assert_eq!(Experience::decode(&bytes), Some(e.clone()));
        assert_eq!(Experience::decode(&bytes[..bytes.len() - 1]), None);
        assert_eq!(Experience::decode(&[1, 2, 3]), None);
        let mut bad = bytes.clone();
        bad[0] = 9; // action out of range
        assert_eq!(Experience::decode(&bad), None);
        assert_eq!(e.fingerprint(), Experience::decode(&bytes).unwrap().fingerprint());
    }
}
