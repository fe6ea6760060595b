//! The interference model's stored form: [`InterferenceMlp::to_bytes`] and
//! [`InterferenceMlp::from_bytes`], one self-describing, checksummed blob (see the parent
//! module's "Persistence"). It is apart from the model because reading untrusted bytes back is
//! its own concern, and long; the model's code never calls into it, so only this file imports
//! the parent.

use std::collections::VecDeque;

use plexus_scheduler::gpu::TaskVector;

use super::{Dense, InterferenceConfig, InterferenceMlp, Layer, MAX_SHARE, NUMERIC, Normaliser, Sample, SplitMix};
use crate::PolicyError;

/// Format of [`InterferenceMlp::to_bytes`].
const MAGIC: &[u8; 4] = b"PXIM";
const VERSION: u32 = 1;

impl InterferenceMlp {
    /// The whole model as bytes (little-endian): magic `PXIM`, version, configuration, counters
    /// and the batch sampler's state, the normaliser, every layer's weights and biases, the replay
    /// buffer, and an FNV-1a checksum of all that. The coordinator keeps it under one key.
    pub fn to_bytes(&self) -> Vec<u8> {
        let c = &self.config;
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        put_u32(&mut b, VERSION);
        put_u64(&mut b, c.seed);
        put_f64(&mut b, c.lambda);
        put_f64(&mut b, c.learning_rate);
        put_u32(&mut b, c.batch as u32);
        put_u32(&mut b, c.capacity as u32);
        put_u32(&mut b, c.hidden.len() as u32);
        for &w in &c.hidden {
            put_u32(&mut b, w as u32);
        }
        put_u64(&mut b, self.observed);
        put_u64(&mut b, self.steps);
        put_u64(&mut b, self.rng.0);
        put_u64(&mut b, self.norm.count);
        for x in self.norm.mean.iter().chain(&self.norm.m2) {
            put_f64(&mut b, *x);
        }
        for l in self.predictor.layers.iter().map(Layer::dense) {
            put_u32(&mut b, l.inp as u32);
            put_u32(&mut b, l.out as u32);
            for x in l.w.iter().chain(&l.b) {
                b.extend_from_slice(&x.to_le_bytes());
            }
        }
        put_u32(&mut b, self.buffer.len() as u32);
        for s in &self.buffer {
            put_u32(&mut b, s.tasks.len() as u32);
            put_u32(&mut b, s.slowdowns.len() as u32);
            put_f64(&mut b, s.weight);
            for t in &s.tasks {
                put_u64(&mut b, t.gpu_memory);
                put_u64(&mut b, t.device_memory);
                put_f64(&mut b, t.utilisation);
                put_f64(&mut b, t.solo_ms);
                put_u64(&mut b, t.model_bytes);
                put_u64(&mut b, t.signature);
            }
            for y in &s.slowdowns {
                put_f64(&mut b, *y);
            }
        }
        let sum = fnv1a(&b);
        put_u64(&mut b, sum);
        b
    }

    /// Rebuilds a model from [`InterferenceMlp::to_bytes`]: it predicts exactly as the one saved,
    /// and goes on training from the same buffer and sampler state (the optimiser keeps no state:
    /// plain gradient descent).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, PolicyError> {
        if bytes.len() < MAGIC.len() + 4 + 8 || &bytes[..4] != MAGIC {
            return Err(PolicyError::Corrupt { at: 0, what: "not an interference model (no PXIM header)".into() });
        }
        let version = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        if version != VERSION {
            return Err(PolicyError::Version { found: version, supported: VERSION });
        }
        let body = bytes.len() - 8;
        let stored = u64::from_le_bytes(bytes[body..].try_into().expect("8 bytes"));
        if fnv1a(&bytes[..body]) != stored {
            return Err(PolicyError::Corrupt { at: body, what: "checksum mismatch".into() });
        }
        let mut r = Reader { b: &bytes[..body], at: 8 };
        let seed = r.u64("seed")?;
        let lambda = r.f64("lambda")?;
        let learning_rate = r.f64("learning rate")?;
        let batch = r.u32("batch")? as usize;
        let capacity = r.u32("capacity")? as usize;
        let layers = r.u32("hidden layer count")? as usize;
        if layers > 8 {
            return Err(r.corrupt(format!("{layers} hidden layers")));
        }
        let hidden = (0..layers).map(|_| r.u32("hidden width").map(|w| w as usize)).collect::<Result<Vec<_>, _>>()?;
        let config = InterferenceConfig { hidden, lambda, learning_rate, batch, capacity, seed };
        config.validate().map_err(|e| r.corrupt(e.to_string()))?;
        let observed = r.u64("observed")?;
        let steps = r.u64("steps")?;
        let rng = r.u64("sampler state")?;
        let mut norm = Normaliser { count: r.u64("normaliser count")?, ..Default::default() };
        for i in 0..NUMERIC {
            norm.mean[i] = r.finite("normaliser mean")?;
        }
        for i in 0..NUMERIC {
            norm.m2[i] = r.finite("normaliser variance")?;
        }
        let mut dense = Vec::new();
        for (i, (inp, out)) in config.shapes().into_iter().enumerate() {
            let (si, so) = (r.u32("layer inputs")? as usize, r.u32("layer outputs")? as usize);
            if (si, so) != (inp, out) {
                return Err(r.corrupt(format!("layer {i} is {si} → {so}; the configuration says {inp} → {out}")));
            }
            let w = (0..inp * out).map(|_| r.f32("weight")).collect::<Result<Vec<_>, _>>()?;
            let b = (0..out).map(|_| r.f32("bias")).collect::<Result<Vec<_>, _>>()?;
            dense.push(Dense { inp, out, w, b });
        }
        let n = r.u32("buffer length")? as usize;
        if n > capacity {
            return Err(r.corrupt(format!("{n} buffered samples exceed the capacity {capacity}")));
        }
        let mut buffer = VecDeque::with_capacity(n);
        for _ in 0..n {
            let k = r.u32("sample size")? as usize;
            if k == 0 || k > MAX_SHARE {
                return Err(r.corrupt(format!("a sample of {k} tasks")));
            }
            let measured = r.u32("measured count")? as usize;
            if measured == 0 || measured > k {
                return Err(r.corrupt(format!("{measured} slowdowns for {k} tasks")));
            }
            let weight = r.f64("sample weight")?;
            let mut s = Sample { tasks: Vec::with_capacity(k), slowdowns: Vec::with_capacity(measured), weight };
            for _ in 0..k {
                s.tasks.push(TaskVector {
                    gpu_memory: r.u64("gpu memory")?,
                    device_memory: r.u64("device memory")?,
                    utilisation: r.f64("utilisation")?,
                    solo_ms: r.f64("solo ms")?,
                    model_bytes: r.u64("model bytes")?,
                    signature: r.u64("signature")?,
                });
            }
            for _ in 0..measured {
                s.slowdowns.push(r.f64("slowdown")?);
            }
            s.validate().map_err(|e| match e {
                PolicyError::Sample(why) => r.corrupt(why),
                other => other,
            })?;
            buffer.push_back(s);
        }
        if r.at != body {
            return Err(r.corrupt(format!("{} bytes left over", body - r.at)));
        }
        let mut m = InterferenceMlp::new(config)?;
        m.norm = norm;
        m.buffer = buffer;
        m.rng = SplitMix(rng);
        m.observed = observed;
        m.steps = steps;
        m.load_dense(&dense)?;
        Ok(m)
    }
}

fn put_u32(b: &mut Vec<u8>, x: u32) {
    b.extend_from_slice(&x.to_le_bytes());
}
fn put_u64(b: &mut Vec<u8>, x: u64) {
    b.extend_from_slice(&x.to_le_bytes());
}
fn put_f64(b: &mut Vec<u8>, x: f64) {
    b.extend_from_slice(&x.to_le_bytes());
}

/// FNV-1a, 64-bit: a checksum whose definition cannot change with the Rust release (std's
/// `DefaultHasher` may).
pub(super) fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| (h ^ x as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn corrupt(&self, what: impl Into<String>) -> PolicyError {
        PolicyError::Corrupt { at: self.at, what: what.into() }
    }
    fn take<const N: usize>(&mut self, what: &str) -> Result<[u8; N], PolicyError> {
        let s = self.b.get(self.at..self.at + N).ok_or_else(|| self.corrupt(format!("truncated reading {what}")))?;
        self.at += N;
        Ok(s.try_into().expect("N bytes"))
    }
    fn u32(&mut self, what: &str) -> Result<u32, PolicyError> {
        Ok(u32::from_le_bytes(self.take(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64, PolicyError> {
        Ok(u64::from_le_bytes(self.take(what)?))
    }
    fn f64(&mut self, what: &str) -> Result<f64, PolicyError> {
        Ok(f64::from_le_bytes(self.take(what)?))
    }
    fn finite(&mut self, what: &str) -> Result<f64, PolicyError> {
        let x = self.f64(what)?;
        if x.is_finite() { Ok(x) } else { Err(self.corrupt(format!("{what} is {x}"))) }
    }
    fn f32(&mut self, what: &str) -> Result<f32, PolicyError> {
        let x = f32::from_le_bytes(self.take(what)?);
        if x.is_finite() { Ok(x) } else { Err(self.corrupt(format!("{what} is {x}"))) }
    }
}
