//! The requests of a load drawn at random, the same every run: when they arrive at a rate,
//! and their lengths about the workload's.

use super::Load;

/// Numbers drawn uniformly from (0, 1), the same every run (SplitMix64 from `seed`), so an
/// answer does not change from one run to the next.
struct Draws(u64);

impl Draws {
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        // 53 bits and a half: never 0 or 1.
        (((z ^ (z >> 31)) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

/// When each of `n` requests arrives at `rate` a second at random (a Poisson process: gaps
/// drawn from the exponential law), the first at 0.
pub(super) fn arrivals(rate: f64, n: usize) -> Vec<f64> {
    let mut draws = Draws(0x5EED);
    let mut at = 0.0;
    (0..n)
        .map(|i| {
            if i > 0 {
                at += -draws.uniform().ln() / rate;
            }
            at
        })
        .collect()
}

/// The prompt and response of each of `n` requests of `load`, in the order they are sent:
/// each drawn within `±spread` of the load's, at least one token.
pub(super) fn lengths(load: &Load, n: usize) -> Vec<(u32, u32)> {
    let mut draws = Draws(0x1E57);
    let mut draw = |mean: u32| {
        if load.spread == 0.0 {
            return mean;
        }
        let drawn = f64::from(mean) * (1.0 + load.spread * (2.0 * draws.uniform() - 1.0));
        (drawn.round() as u32).max(1)
    };
    (0..n).map(|_| (draw(load.prompt), draw(load.response))).collect()
}

/// The longest prompt and response `spread` draws from `prompt` and `response`.
pub(super) fn longest(prompt: u64, response: u64, spread: f64) -> (u64, u64) {
    let most = |mean: u64| (mean as f64 * (1.0 + spread)).round() as u64;
    (most(prompt), most(response))
}
