//! What many users ask of a server: how many of them, or the latency each must see, at a
//! percentile. The question alone, apart from [`crate::serving`], which answers it, so a
//! scenario and a problem can carry it without depending on the simulation.

use crate::engine::Engine;

/// The most users of one llama-server: a slot each, and llama.cpp refuses a context of more
/// sequences than `LLAMA_MAX_SEQ` (256, `src/llama-cparams.h`; `llama-context.cpp` throws
/// "n_seq_max must be <= 256" at start). [`crate::serving::capacity`] tries no more.
pub const MAX_USERS: u32 = 256;

/// The most users of one vLLM server simulated. vLLM has no such limit: it runs up to
/// `--max-num-seqs` requests at once ([`crate::engine::vllm_max_num_seqs`], 1024 at most
/// by default) and queues the rest. This is four times that, past the 2,048 users of the
/// largest published run in `tests/calibration/serving.csv`, and keeps a capacity search
/// to a few dozen simulations of at most 12,288 requests.
pub const MAX_VLLM_USERS: u32 = 4096;

/// The most users of one server of `engine` that are simulated: llama-server's slots, or
/// [`MAX_VLLM_USERS`].
pub fn most_users(engine: Engine) -> u32 {
    if engine == Engine::Vllm { MAX_VLLM_USERS } else { MAX_USERS }
}

/// Why a count past [`most_users`] is refused, and the fix: the scenario's `serving.users`
/// and the answer's [`ServingError::Slots`](crate::serving::ServingError::Slots) say it
/// alike.
pub(crate) fn past_most(engine: Engine) -> String {
    if engine == Engine::Vllm {
        return format!(
            "past the {MAX_VLLM_USERS} users of one vLLM server that are simulated; give at most {MAX_VLLM_USERS}, or give targets and let the plan split the machines into replicas"
        );
    }
    format!(
        "past llama-server's {MAX_USERS} slots (`--parallel` above llama.cpp's `LLAMA_MAX_SEQ` does not start); give at most {MAX_USERS} a server"
    )
}

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

/// What a scenario's `serving` asks, checked: users of one server, targets, or both; and
/// whether requests come at a rate.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct Demand {
    pub users: Option<u32>,
    pub targets: Option<Targets>,
    /// Requests a second arriving at random, `users` the server's slots; `None`: each user
    /// sends the next when the last ends.
    pub rate: Option<f64>,
    /// Each request's prompt and response drawn within `±spread` of the workload's; 0: the
    /// workload's exactly.
    pub spread: f64,
}

impl Demand {
    /// `users` users of one server, each sending the next when the last ends.
    pub fn of_users(users: u32) -> Demand {
        Demand { users: Some(users), ..Demand::default() }
    }

    /// How many users of one server meet `targets`.
    pub fn of_targets(targets: Targets) -> Demand {
        Demand { targets: Some(targets), ..Demand::default() }
    }
}

/// Why `spread` cannot be asked: it is a share of the lengths, from 0 up to (not) 1, so
/// every request keeps a token.
pub fn check_spread(spread: f64) -> Result<(), String> {
    if (0.0..1.0).contains(&spread) {
        return Ok(());
    }
    Err(format!("is {spread}; give a share of the workload's lengths from 0 up to, not including, 1 (0.5: ±50%)"))
}

/// Why `rate` cannot be asked with `users`, and the fix: it must be a number of requests a
/// second within [`REQUEST_RATES`](crate::limits::REQUEST_RATES), and go with a count of
/// users (the server's slots).
pub fn check_rate(rate: f64, users: Option<u32>) -> Result<(), String> {
    let rates = crate::limits::REQUEST_RATES;
    if !rates.contains(&rate) {
        // Far outside, as `1e-300` rather than its three hundred digits.
        let given =
            if rate == 0.0 || (1e-3..1e9).contains(&rate.abs()) { format!("{rate}") } else { format!("{rate:e}") };
        return Err(format!("is {given}; give requests a second from {} to {}", rates.start(), rates.end()));
    }
    if users.is_none() {
        return Err("needs `users` too, the server's slots the requests are served in".to_owned());
    }
    Ok(())
}

/// The question a surface answers: its own (flags or options) when it asks one, else the
/// scenario's `serving`. One rule for the CLI's `plan` and the JS API's `serve`.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Asked {
    pub demand: Demand,
    /// The scenario's `serving` asked it: the surface asked nothing.
    pub from_scenario: bool,
}

impl Asked {
    /// `given` when it asks anything, else `scenario`'s (a problem's `serving`).
    pub fn of(given: Demand, scenario: Option<Demand>) -> Asked {
        match scenario {
            Some(demand) if given.users.is_none() && given.targets.is_none() && given.rate.is_none() => {
                // The surface's spread, where it gives one, over the scenario's.
                let spread = if given.spread > 0.0 { given.spread } else { demand.spread };
                Asked { demand: Demand { spread, ..demand }, from_scenario: true }
            }
            _ => Asked { demand: given, from_scenario: false },
        }
    }

    /// Where an error of the answer is: the scenario's `serving.users` or `serving`, else
    /// the surface's own name for `users` or for the targets.
    pub fn field<'a>(&self, users: &'a str, targets: &'a str) -> &'a str {
        match (self.demand.users.is_some(), self.from_scenario) {
            (true, false) => users,
            (false, false) => targets,
            (true, true) => "serving.users",
            (false, true) => "serving",
        }
    }
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
