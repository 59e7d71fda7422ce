//! Several users on one engine (issue #47): what each waits for its first token and between
//! tokens, found by running the engine's scheduler over the plan's step times rather than by
//! a closed formula, which would hide the tail.
//!
//! The scheduler is llama-server's (`update_slots` in `tools/server/server-context.cpp`):
//! one slot per user (`--parallel`); each step, every generating slot adds its last sampled
//! token, then pending prompts join in slot order up to `n_batch` tokens (continuous
//! batching); the step is one `llama_decode`, after which each slot whose prompt is done has
//! its first token and each generating slot one more. A request that arrives while a step
//! runs joins the next. `llama_decode` runs a step in graphs of `n_ubatch` tokens; each
//! reads the weights ([`ServingCost::step_s`], one sequence's whole step, for the first
//! token), and each further token adds its own: a decoding sequence its KV cache and its
//! products ([`ServingCost::sequence_s`], as the cost model prices a step of many: on a
//! probed CPU at about its prompt's rate, the serve check's machine taking 102.6 ms for a
//! 4-user step against 55.2 for one), a prompt token its products at the prompt's rate
//! ([`ServingCost::token_s`]).
//!
//! The load is the serve check's and most published concurrency tables': `users` each send a
//! request, read it to its end and send the next at once (a fixed concurrency, as vLLM's
//! `benchmark_serving --max-concurrency`), all starting together.

use crate::calibration::quantile;

/// What a step of the engine costs: a whole step for its first token, then each further
/// sequence decoding and each prompt token.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ServingCost {
    /// One sequence's decode step (a one-user plan's `1 ÷ stream_tokens_per_s`).
    pub step_s: f64,
    /// Each further sequence a step decodes: its share of a step of many (its KV cache read
    /// and its products, as the cost model prices a step of `batch` sequences).
    pub sequence_s: f64,
    /// Each further prompt token of a step: the plan's `1 ÷ prefill_tokens_per_s`.
    pub token_s: f64,
}

impl ServingCost {
    /// The steps of `plan`, made for `problem`, as one llama-server runs them: one
    /// sequence's decode step on the plan's stage with the memory of all the problem's
    /// sequences (their KV cache placed, a step reading one), and the plan's prompt rate.
    ///
    /// # Errors
    /// A plan that does not fit, or that is not one stage on one device (a pipeline or a
    /// tensor-parallel group is not simulated yet).
    pub fn of(problem: &crate::Problem, plan: &crate::Plan) -> Result<ServingCost, ServingError> {
        let (Some(stage), true) = (plan.stages.first(), plan.feasible) else { return Err(ServingError::NoPlan) };
        let node = problem.nodes.iter().position(|n| n.name == stage.node);
        let (1, true, Some(node)) = (plan.stages.len(), stage.tensor_parallel.is_empty(), node) else {
            return Err(ServingError::Stages { stages: plan.stages.len() });
        };
        let all = crate::CostModel::new(problem);
        let batch = problem.workload.batch;
        let [start, end] = stage.layers;
        let step_s = all.micro_batched(batch).time(node, start, end, None).total();
        let token_s = 1.0 / plan.prefill_tokens_per_s;
        let sequence_s = match batch {
            0 | 1 => token_s,
            _ => ((all.time(node, start, end, None).total() - step_s) / (batch - 1) as f64).max(0.0),
        };
        Ok(ServingCost { step_s, sequence_s, token_s })
    }
}

/// A fixed number of users, each sending requests one after another.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Load {
    pub users: u32,
    /// Prompt tokens of every request.
    pub prompt: u32,
    /// Tokens generated for every request (the first included).
    pub response: u32,
    /// Requests each user sends.
    pub requests_per_user: u32,
    /// The most tokens one step takes (llama.cpp's `-b`, 2048 by default).
    pub n_batch: u32,
    /// The most tokens one graph of a step computes (`-ub`, 512 by default).
    pub n_ubatch: u32,
}

/// Requests each user sends, one after another, in `stageplan plan --users` and the serve
/// check that holds it to a real llama-server.
pub const REQUESTS_PER_USER: u32 = 3;

/// The most requests a simulation runs: `users × requests_per_user` past it is refused
/// before anything is allocated.
pub const MAX_REQUESTS: u64 = 1 << 20;

/// What the users saw.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Served {
    /// Time to first token, sent to first token: 50th and 95th percentiles, seconds.
    pub ttft_s: [f64; 2],
    /// Time per output token after the first: 50th and 95th percentiles, seconds.
    pub tpot_s: [f64; 2],
    /// Tokens generated over the time from the first request to the last token.
    pub tokens_per_s: f64,
    /// That time, seconds.
    pub wall_s: f64,
}

/// Why a load cannot be simulated.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ServingError {
    #[error("`{field}` is 0; give at least 1")]
    Zero { field: &'static str },
    #[error(
        "{requests} requests (users × requests per user) is past the {MAX_REQUESTS} a simulation runs; simulate fewer"
    )]
    TooMany { requests: u64 },
    #[error(
        "the step costs {step_s} s and each further prompt token {token_s} s; both must be finite and above 0, and a further sequence's cost finite"
    )]
    Cost { step_s: f64, token_s: f64 },
    #[error("nothing fits, so no users are served; see the plan's fixes")]
    NoPlan,
    #[error(
        "the plan has {stages} stages or a tensor-parallel group; serving is simulated for one llama-server on one device: plan the users on one machine"
    )]
    Stages { stages: usize },
}

/// One slot's request.
#[derive(Copy, Clone, Debug)]
struct Slot {
    sent: f64,
    /// Prompt tokens not yet in a step.
    prompt_left: u32,
    /// Tokens generated so far.
    generated: u32,
    first: f64,
    /// Requests this slot's user has still to send after this one.
    after: u32,
}

/// Runs `load` through llama-server's scheduler with steps priced by `cost`.
///
/// # Errors
/// A zero in `load`, more than [`MAX_REQUESTS`] requests, or a step that costs nothing or
/// forever.
pub fn simulate(load: Load, cost: ServingCost) -> Result<Served, ServingError> {
    for (field, value) in [
        ("users", load.users),
        ("prompt", load.prompt),
        ("response", load.response),
        ("requests_per_user", load.requests_per_user),
        ("n_batch", load.n_batch),
        ("n_ubatch", load.n_ubatch),
    ] {
        if value == 0 {
            return Err(ServingError::Zero { field });
        }
    }
    let requests = u64::from(load.users) * u64::from(load.requests_per_user);
    if requests > MAX_REQUESTS {
        return Err(ServingError::TooMany { requests });
    }
    let positive = |s: f64| s.is_finite() && s > 0.0;
    if !(positive(cost.step_s) && positive(cost.token_s) && cost.sequence_s.is_finite() && cost.sequence_s >= 0.0) {
        return Err(ServingError::Cost { step_s: cost.step_s, token_s: cost.token_s });
    }
    let fresh = |sent: f64, after: u32| Slot { sent, prompt_left: load.prompt, generated: 0, first: 0.0, after };
    let mut slots: Vec<Option<Slot>> = vec![Some(fresh(0.0, load.requests_per_user - 1)); load.users as usize];
    let (mut ttft, mut tpot) = (Vec::with_capacity(requests as usize), Vec::with_capacity(requests as usize));
    let (mut now, mut tokens) = (0.0_f64, 0_u64);
    while slots.iter().any(Option::is_some) {
        // The step: each generating slot's token, then prompts in slot order up to n_batch.
        let decoding: u64 = slots.iter().flatten().filter(|s| s.generated > 0).count() as u64;
        let mut batch = decoding;
        let mut fed = vec![0_u32; slots.len()];
        for (slot, fed) in slots.iter().zip(&mut fed) {
            if let Some(s) = slot.filter(|s| s.prompt_left > 0) {
                let room = u64::from(load.n_batch).saturating_sub(batch);
                *fed = s.prompt_left.min(u32::try_from(room).unwrap_or(u32::MAX));
                batch += u64::from(*fed);
            }
        }
        let graphs = batch.div_ceil(u64::from(load.n_ubatch)).max(1);
        // The first graph's whole step carries one token: a decoding sequence's if any.
        let (decoding, prompt) = (decoding as f64, (batch - decoding) as f64);
        let (decoding, prompt) = if decoding > 0.0 { (decoding - 1.0, prompt) } else { (0.0, prompt - 1.0) };
        now += graphs as f64 * cost.step_s + decoding * cost.sequence_s + prompt.max(0.0) * cost.token_s;
        for (slot, fed) in slots.iter_mut().zip(fed) {
            let Some(s) = slot else { continue };
            if s.generated > 0 {
                s.generated += 1;
            } else if fed > 0 {
                s.prompt_left -= fed;
                if s.prompt_left == 0 {
                    s.generated = 1;
                    s.first = now;
                    ttft.push(now - s.sent);
                }
            }
            if s.generated == load.response {
                tokens += u64::from(load.response);
                tpot.push((now - s.first) / f64::from(load.response.saturating_sub(1).max(1)));
                // The user sends the next at once; it joins the next step.
                *slot = (s.after > 0).then(|| fresh(now, s.after - 1));
            }
        }
    }
    Ok(Served {
        ttft_s: [quantile(&ttft, 0.5), quantile(&ttft, 0.95)],
        tpot_s: [quantile(&tpot, 0.5), quantile(&tpot, 0.95)],
        tokens_per_s: tokens as f64 / now,
        wall_s: now,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const COST: ServingCost = ServingCost { step_s: 0.05, sequence_s: 0.02, token_s: 0.01 };

    fn load(users: u32) -> Load {
        Load { users, prompt: 128, response: 64, requests_per_user: 3, n_batch: 2048, n_ubatch: 512 }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn one_user_waits_for_its_prompt_then_one_step_a_token() {
        let served = simulate(load(1), COST).unwrap();
        let ttft = 0.05 + 127.0 * 0.01;
        assert!(close(served.ttft_s[0], ttft) && close(served.ttft_s[1], ttft), "{served:?}");
        assert!(close(served.tpot_s[0], 0.05), "{served:?}");
        // Three requests one after another: each its prompt and 63 steps.
        assert!(close(served.wall_s, 3.0 * (ttft + 63.0 * 0.05)), "{served:?}");
        assert!(close(served.tokens_per_s, 192.0 / served.wall_s));
    }

    #[test]
    fn users_who_start_together_share_their_prompts_step_and_every_decode_step() {
        // Four prompts in one step (one graph) of 512 tokens, then steps of four sequences.
        let served = simulate(load(4), COST).unwrap();
        assert!(close(served.ttft_s[0], 0.05 + 511.0 * 0.01), "{served:?}");
        assert!(close(served.tpot_s[0], 0.05 + 3.0 * 0.02), "{served:?}");
        assert!(close(served.tpot_s[1], 0.05 + 3.0 * 0.02), "{served:?}");
    }

    #[test]
    fn a_prompt_past_n_batch_takes_several_steps() {
        let served = simulate(Load { prompt: 5000, n_batch: 2048, ..load(1) }, COST).unwrap();
        // 2048 + 2048 + 904 tokens in three steps, of four, four and two graphs of 512.
        let ttft = 10.0 * 0.05 + (5000.0 - 3.0) * 0.01;
        assert!(close(served.ttft_s[0], ttft), "{served:?}");
    }

    #[test]
    fn a_prompt_that_arrives_mid_stream_slows_the_others_tokens() {
        // Two 3000-token prompts and a 2048-token step put the users a step apart: each
        // one's next prompt then lands among the other's tokens.
        let staggered =
            Load { users: 2, prompt: 3000, response: 10, requests_per_user: 4, n_batch: 2048, n_ubatch: 512 };
        let (two, one) = (simulate(staggered, COST).unwrap(), simulate(Load { users: 1, ..staggered }, COST).unwrap());
        assert!(close(one.tpot_s[1], 0.05), "alone, every gap is one step: {one:?}");
        assert!(two.tpot_s[1] > 10.0 * one.tpot_s[1], "{two:?} vs {one:?}");
        assert!(two.tokens_per_s > one.tokens_per_s, "two users are served faster in all");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

        /// Any load ends, every request counted: its first token after one step at least,
        /// no gap between tokens shorter than one sequence's step, no more tokens a second
        /// than every user stepping alone in parallel would get, and the percentiles in order.
        #[test]
        fn every_load_ends_and_its_figures_hold_together(
            users in 1u32..=12,
            prompt in 1u32..=3000,
            response in 1u32..=40,
            requests_per_user in 1u32..=3,
            n_batch in 1u32..=4096,
            n_ubatch in 1u32..=1024,
            step_s in 1e-3..1.0f64,
            sequence_s in 0.0..1e-1f64,
            token_s in 1e-5..1e-1f64,
        ) {
            let load = Load { users, prompt, response, requests_per_user, n_batch, n_ubatch };
            let served = simulate(load, ServingCost { step_s, sequence_s, token_s }).unwrap();
            proptest::prop_assert!(served.ttft_s[0] >= step_s * (1.0 - 1e-12));
            proptest::prop_assert!(served.ttft_s[0] <= served.ttft_s[1] && served.tpot_s[0] <= served.tpot_s[1]);
            if response > 1 {
                proptest::prop_assert!(served.tpot_s[0] >= step_s * (1.0 - 1e-12));
            }
            let tokens = f64::from(users) * f64::from(requests_per_user) * f64::from(response);
            proptest::prop_assert!((served.tokens_per_s * served.wall_s - tokens).abs() <= 1e-6 * tokens);
            proptest::prop_assert!(served.tokens_per_s <= f64::from(users) / step_s * (1.0 + 1e-9));
        }
    }

    #[test]
    fn a_load_that_cannot_run_says_which_field() {
        assert_eq!(simulate(Load { users: 0, ..load(1) }, COST), Err(ServingError::Zero { field: "users" }));
        assert_eq!(simulate(Load { response: 0, ..load(1) }, COST), Err(ServingError::Zero { field: "response" }));
        let many = Load { users: u32::MAX, requests_per_user: u32::MAX, ..load(1) };
        assert!(matches!(simulate(many, COST), Err(ServingError::TooMany { .. })));
        for step_s in [0.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(simulate(load(1), ServingCost { step_s, ..COST }), Err(ServingError::Cost { .. })));
        }
    }
}
