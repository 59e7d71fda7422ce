//! What many users ask of a server: how many of them, or the latency each must see, at a
//! percentile. The question alone, apart from [`crate::serving`], which answers it, so a
//! scenario and a problem can carry it without depending on the simulation.

/// The most users of one llama-server: a slot each, and llama.cpp refuses a context of more
/// sequences than `LLAMA_MAX_SEQ` (256, `src/llama-cparams.h`; `llama-context.cpp` throws
/// "n_seq_max must be <= 256" at start). [`crate::serving::capacity`] tries no more.
pub const MAX_USERS: u32 = 256;

/// The longest target taken, an hour: past it a target says nothing a person waits for.
pub(crate) const MAX_TARGET_S: f64 = 3600.0;
/// The shortest target taken, a microsecond: below it no step of any engine.
pub(crate) const MIN_TARGET_S: f64 = 1e-6;

/// What users must see, at one percentile of their requests: their first token within
/// `ttft_s` of sending, and each token after it within `tpot_s` of the one before.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Targets {
    pub ttft_s: Option<f64>,
    pub tpot_s: Option<f64>,
    pub percentile: Percentile,
}

/// What a scenario's `serving` asks, checked: users of one llama-server, targets, or both.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Demand {
    pub users: Option<u32>,
    pub targets: Option<Targets>,
}

/// Which of [`Served`](crate::serving::Served)'s percentiles a target holds.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "typescript", derive(ts_rs::TS))]
pub enum Percentile {
    P50,
    /// The tail most teams set targets on.
    #[default]
    P95,
}

impl Percentile {
    pub const ALL: [Percentile; 2] = [Percentile::P50, Percentile::P95];

    /// `p50` or `p95`.
    pub fn name(self) -> &'static str {
        match self {
            Percentile::P50 => "p50",
            Percentile::P95 => "p95",
        }
    }

    /// This percentile of [`Served`](crate::serving::Served)'s `[p50, p95]`.
    pub fn of(self, figures: [f64; 2]) -> f64 {
        figures[self as usize]
    }
}

impl Targets {
    /// The target outside 1 µs to 1 h, if one is.
    pub(crate) fn out_of_range(&self) -> Option<&'static str> {
        [("ttft", self.ttft_s), ("tpot", self.tpot_s)].into_iter().find_map(|(field, value)| {
            value.is_some_and(|s| !(MIN_TARGET_S..=MAX_TARGET_S).contains(&s)).then_some(field)
        })
    }
}
