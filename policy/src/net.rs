//! The Q-network of seed 001: a Transformer encoder over one token per candidate node, then a
//! linear layer and an output neuron per token, giving one Q-value per candidate.
//!
//! Tokens attend to each other, so a node's score can depend on the others (a node holding the
//! data is worth less when it is also the busiest). Any number of candidates works: the network
//! never sees a fixed action count. Weights start Gaussian (the seed), biases at zero.

use tch::nn;
use tch::{Kind, Tensor};

use crate::features::FEATURES;

/// Shape of the network. The seed's configuration is `d_model = 512, heads = 4, dropout = 0.25`;
/// the default is smaller, chosen by measured decision latency (see `ARCHITECTURE.md`).
#[derive(Clone, Debug, PartialEq)]
pub struct NetConfig {
    pub d_model: i64,
    pub heads: i64,
    pub ff: i64,
    pub layers: i64,
    pub dropout: f64,
    /// Standard deviation of the Gaussian weight initialisation.
    pub init_std: f64,
}

impl Default for NetConfig {
    fn default() -> Self {
        // Measured with `cargo run --release -p plexus-bench --bin policy-latency`: d = 64 keeps
        // p99 decision latency under 1 ms at 64 candidates while the training thread trains,
        // on a 2-core machine; d = 512 (the seed's) does not.
        NetConfig { d_model: 64, heads: 4, ff: 128, layers: 2, dropout: 0.1, init_std: 0.02 }
    }
}

impl NetConfig {
    /// The seed's example configuration.
    pub fn seed() -> Self {
        NetConfig { d_model: 512, heads: 4, ff: 2048, layers: 2, dropout: 0.25, init_std: 0.02 }
    }
}

fn linear(p: nn::Path, i: i64, o: i64, std: f64) -> nn::Linear {
    nn::linear(
        p,
        i,
        o,
        nn::LinearConfig {
            ws_init: nn::Init::Randn { mean: 0.0, stdev: std },
            bs_init: Some(nn::Init::Const(0.0)),
            bias: true,
        },
    )
}

/// One standard (post-norm) Transformer encoder layer: self-attention, then a feed-forward
/// block, each with dropout, a residual connection and layer norm.
#[derive(Debug)]
struct EncoderLayer {
    qkv: nn::Linear,
    out: nn::Linear,
    ff1: nn::Linear,
    ff2: nn::Linear,
    ln1: nn::LayerNorm,
    ln2: nn::LayerNorm,
    heads: i64,
    dropout: f64,
}

impl EncoderLayer {
    fn new(p: nn::Path, c: &NetConfig) -> Self {
        let d = c.d_model;
        EncoderLayer {
            qkv: linear(&p / "qkv", d, 3 * d, c.init_std),
            out: linear(&p / "out", d, d, c.init_std),
            ff1: linear(&p / "ff1", d, c.ff, c.init_std),
            ff2: linear(&p / "ff2", c.ff, d, c.init_std),
            ln1: nn::layer_norm(&p / "ln1", vec![d], Default::default()),
            ln2: nn::layer_norm(&p / "ln2", vec![d], Default::default()),
            heads: c.heads,
            dropout: c.dropout,
        }
    }

    /// `x`: [B, N, D]; `pad`: [B, N], true where a token is padding (not a node).
    fn forward(&self, x: &Tensor, pad: &Tensor, train: bool) -> Tensor {
        let (b, n, d) = x.size3().expect("encoder input is [B, N, D]");
        let h = self.heads;
        let hd = d / h;
        let qkv = x.apply(&self.qkv).view([b, n, 3, h, hd]).permute([2, 0, 3, 1, 4]);
        let (q, k, v) = (qkv.get(0), qkv.get(1), qkv.get(2));
        let scores = q.matmul(&k.transpose(-2, -1)) / (hd as f64).sqrt();
        let scores = scores.masked_fill(&pad.view([b, 1, 1, n]), f64::NEG_INFINITY);
        let att = scores.softmax(-1, Kind::Float).dropout(self.dropout, train);
        let y =
            att.matmul(&v).transpose(1, 2).contiguous().view([b, n, d]).apply(&self.out).dropout(self.dropout, train);
        let x = (x + y).apply(&self.ln1);
        let f = x.apply(&self.ff1).relu().dropout(self.dropout, train).apply(&self.ff2).dropout(self.dropout, train);
        (x + f).apply(&self.ln2)
    }
}

/// The Q-network.
#[derive(Debug)]
pub struct QNet {
    embed: nn::Linear,
    layers: Vec<EncoderLayer>,
    hidden: nn::Linear,
    head: nn::Linear,
}

impl QNet {
    pub fn new(p: &nn::Path, c: &NetConfig) -> Self {
        assert!(c.d_model % c.heads == 0, "d_model must be a multiple of heads");
        QNet {
            embed: linear(p / "embed", FEATURES as i64, c.d_model, c.init_std),
            layers: (0..c.layers).map(|i| EncoderLayer::new(p / format!("layer{i}"), c)).collect(),
            hidden: linear(p / "hidden", c.d_model, c.d_model, c.init_std),
            head: linear(p / "head", c.d_model, 1, c.init_std),
        }
    }

    /// Q-values [B, N] for tokens [B, N, FEATURES]; padding tokens (`pad` true) are excluded from
    /// attention; their Q-values are meaningless and must be masked by the caller.
    pub fn forward(&self, tokens: &Tensor, pad: &Tensor, train: bool) -> Tensor {
        let mut x = tokens.apply(&self.embed);
        for l in &self.layers {
            x = l.forward(&x, pad, train);
        }
        x.apply(&self.hidden).relu().apply(&self.head).squeeze_dim(-1)
    }
}

/// The loss of seed 001 (claim 15) on a batch: `mean(|p − h| · c)` with the criticality factor
/// `c = log(1 + e^{−|p − h|})`.
///
/// `c` is applied as a per-sample weight (no gradient flows through it). Differentiated through
/// as a whole, `x·log(1 + e^{−x})` falls for x > 1.28, so gradient descent would push large errors
/// further out instead of ignoring them; as a weight, every error is reduced, the large ones
/// (outliers) slowly and the small ones (the good schedules) with full weight — the effect the
/// seed describes.
pub fn criticality_loss(p: &Tensor, h: &Tensor) -> Tensor {
    let err = (p - h).abs();
    let c = (-&err).exp().log1p().detach();
    (err * c).mean(Kind::Float)
}

/// The same loss for one sample, in plain numbers (for tests and explanations).
pub fn criticality_loss_value(p: f64, h: f64) -> f64 {
    let e = (p - h).abs();
    e * (1.0 + (-e).exp()).ln()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn q_values_have_one_per_candidate_and_ignore_padding() {
        tch::manual_seed(1);
        let vs = nn::VarStore::new(Device::Cpu);
        let net = QNet::new(&vs.root(), &NetConfig::default());
        let tokens = Tensor::rand([2, 5, FEATURES as i64], (Kind::Float, Device::Cpu));
        let no_pad = Tensor::zeros([2, 5], (Kind::Bool, Device::Cpu));
        let q = net.forward(&tokens, &no_pad, false);
        assert_eq!(q.size(), vec![2, 5]);
        // Padding the second sample's last two tokens must not change the first three's Q-values
        // computed alone.
        let pad =
            Tensor::from_slice(&[false, false, false, false, false, false, false, false, true, true]).view([2, 5]);
        let q_pad = net.forward(&tokens, &pad, false);
        let alone = net.forward(
            &tokens.narrow(0, 1, 1).narrow(1, 0, 3),
            &Tensor::zeros([1, 3], (Kind::Bool, Device::Cpu)),
            false,
        );
        let diff = (q_pad.get(1).narrow(0, 0, 3) - alone.get(0)).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "padding leaked into attention: {diff}");
    }

    #[test]
    fn loss_matches_hand_computed_values() {
        // |δ| = 1: 1·ln(1 + e^−1) = 0.31326168751822286
        assert!((criticality_loss_value(2.0, 1.0) - 0.313_261_687_518_222_86).abs() < 1e-12);
        assert_eq!(criticality_loss_value(1.0, 1.0), 0.0);
        // |δ| = 3: 3·ln(1 + e^−3) = 0.14546133...
        assert!((criticality_loss_value(-1.0, 2.0) - 3.0 * (1.0 + (-3.0f64).exp()).ln()).abs() < 1e-12);
        let p = Tensor::from_slice(&[2.0f32, -1.0]);
        let h = Tensor::from_slice(&[1.0f32, 2.0]);
        let l = criticality_loss(&p, &h).double_value(&[]);
        let want = (criticality_loss_value(2.0, 1.0) + criticality_loss_value(-1.0, 2.0)) / 2.0;
        assert!((l - want).abs() < 1e-6, "{l} vs {want}");
    }

    #[test]
    fn loss_gradient_always_shrinks_the_error() {
        for (p0, h) in [(5.0f32, 0.0f32), (0.5, 0.0), (-4.0, 1.0)] {
            let p = Tensor::from_slice(&[p0]).set_requires_grad(true);
            let l = criticality_loss(&p, &Tensor::from_slice(&[h]));
            l.backward();
            let g = p.grad().double_value(&[0]);
            assert!(g * (p0 - h) as f64 > 0.0, "gradient {g} at error {} would grow it", p0 - h);
        }
    }
}
