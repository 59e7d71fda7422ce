//! vLLM's V1 scheduler (`Scheduler.schedule` in `vllm/v1/core/sched/scheduler.py`), run over
//! the plan's step times as [`super::simulate`] runs llama-server's.
//!
//! Each step has a budget of `max_num_batched_tokens`. The running requests come first, in
//! the order they were admitted: each gets what it lacks (one token decoding, or the rest of
//! its prompt, cut to the budget: chunked prefill). A request whose tokens need a KV block
//! the pool has not got takes it from the newest running request, which is preempted: its
//! blocks freed, its tokens to be computed again, and it waits at the head of the queue.
//! Then, if nothing was preempted, waiting requests are admitted first come first served
//! while the budget lasts, fewer than `max_num_seqs` run and their blocks fit. A request
//! whose tokens are all computed samples one more; its first is its first token.
//!
//! A pipeline of several stages runs as many batches at once as it has stages (vLLM's
//! batch queue, `EngineCore.step_with_batch_queue`): a request in a batch in flight is not
//! scheduled again until that batch is out, and each stage works on one batch at a time.
//!
//! A request reaches the scheduler [`VLLM_REQUEST_S`] after it is sent: the API server's
//! part (HTTP, the chat template, tokens in and out, the hop to the engine's process),
//! which the steps do not see but its user does.

use std::collections::VecDeque;

use super::{Load, Served, ServingCost, ServingError};
use crate::engine::{VLLM_BLOCK_TOKENS, VLLM_REQUEST_S};

/// One request, as vLLM's `Request` counts it.
#[derive(Copy, Clone, Debug)]
struct Request {
    sent: f64,
    /// When it reaches the scheduler's queue.
    ready: f64,
    /// Its prompt's tokens and the tokens it generates.
    prompt: u64,
    response: u32,
    /// Tokens generated so far (the prompt's tokens come first).
    generated: u32,
    /// Tokens whose KV is computed (0 again after a preemption).
    computed: u64,
    /// KV blocks it holds.
    blocks: u64,
    first: Option<f64>,
    /// Requests its user has still to send after this one.
    after: u32,
    /// In a batch that is in flight.
    in_flight: bool,
    /// Preemptions so far: a batch in flight when its request was preempted comes out
    /// for nothing.
    epoch: u32,
}

impl Request {
    /// A request of `prompt` tokens generating `response`, sent at `sent`, its user sending
    /// `after` more.
    fn new(sent: f64, prompt: u64, response: u32, after: u32) -> Request {
        Request {
            sent,
            ready: sent + VLLM_REQUEST_S,
            prompt,
            response,
            generated: 0,
            computed: 0,
            blocks: 0,
            first: None,
            after,
            in_flight: false,
            epoch: 0,
        }
    }
}

/// A batch sent down the pipeline: its requests (each user's, at its epoch) and their
/// tokens, and when it is out.
struct Batch {
    scheduled: Vec<(usize, u64, u32)>,
    out: f64,
}

/// Runs `load` through vLLM's scheduler of `max_num_seqs` requests and `budget` tokens a
/// step over `cost`'s pool of KV blocks.
pub(super) fn simulate(load: Load, max_num_seqs: u32, budget: u32, cost: &ServingCost) -> Result<Served, ServingError> {
    let pool = cost.kv_tokens / VLLM_BLOCK_TOKENS;
    let requests = u64::from(load.users) * u64::from(load.requests_per_user);
    let drawn = super::draws::lengths(&load, requests as usize);
    // A request at its longest holds its prompt and every token but the last.
    let longest = drawn.iter().map(|&(p, r)| u64::from(p) + u64::from(r) - 1).max().unwrap_or(0);
    if longest.div_ceil(VLLM_BLOCK_TOKENS) > pool {
        return Err(ServingError::Pool { tokens: longest, pool: pool * VLLM_BLOCK_TOKENS });
    }
    if max_num_seqs == 0 || budget == 0 {
        return Err(ServingError::Zero { field: if budget == 0 { "max_num_batched_tokens" } else { "max_num_seqs" } });
    }
    let mut drawn = drawn.into_iter();
    let mut fresh = |sent: f64, after: u32| {
        let (prompt, response) = drawn.next().unwrap_or((load.prompt, load.response));
        Request::new(sent, u64::from(prompt), response, after)
    };
    // One request a user at a time, a user's next taking its place; or every request as it
    // arrives.
    let mut all: Vec<Request> = match load.rate {
        None => (0..load.users).map(|_| fresh(0.0, load.requests_per_user - 1)).collect(),
        Some(rate) => super::draws::arrivals(rate, requests as usize).into_iter().map(|sent| fresh(sent, 0)).collect(),
    };
    let mut waiting: VecDeque<usize> = (0..all.len()).collect();
    let mut running: Vec<usize> = Vec::new();
    let mut free = pool;
    let stages = cost.stage_shares.len().max(1);
    let mut stage_free = vec![0.0_f64; stages];
    let mut in_flight: VecDeque<Batch> = VecDeque::new();
    let (mut ttft, mut tpot) = (Vec::with_capacity(requests as usize), Vec::with_capacity(requests as usize));
    let (mut now, mut tokens, mut done) = (0.0_f64, 0_u64, 0_u64);
    while done < requests {
        let batch = if in_flight.len() < stages {
            schedule(&mut all, &mut running, &mut waiting, &mut free, Limits { max_num_seqs, budget, now })
        } else {
            Vec::new()
        };
        if !batch.is_empty() {
            let seconds = step_seconds(&all, &batch, cost);
            // Down the pipeline: each stage as soon as it is free and the batch has left the one before.
            let mut at = now;
            for (stage, free_at) in stage_free.iter_mut().enumerate() {
                let share = cost.stage_shares.get(stage).copied().unwrap_or(1.0);
                at = at.max(*free_at) + seconds * share;
                *free_at = at;
            }
            for &(k, _) in &batch {
                all[k].in_flight = true;
            }
            let scheduled = batch.into_iter().map(|(k, n)| (k, n, all[k].epoch)).collect();
            in_flight.push_back(Batch { scheduled, out: at });
            continue;
        }
        // Nothing more to send: the oldest batch comes out.
        let Some(out) = in_flight.pop_front() else {
            // Nothing in flight and nothing scheduled: the engine idles until the next
            // request reaches it. Else only a request too large for the pool stops here,
            // and that was refused above.
            match waiting.front().map(|&k| all[k].ready).filter(|&ready| ready > now) {
                Some(ready) => {
                    now = ready;
                    continue;
                }
                None => return Err(ServingError::Pool { tokens: longest, pool: pool * VLLM_BLOCK_TOKENS }),
            }
        };
        now = now.max(out.out);
        for (k, n, epoch) in out.scheduled {
            let r = &mut all[k];
            r.in_flight = false;
            if r.epoch != epoch {
                continue;
            }
            r.computed += n;
            if r.computed < r.prompt + u64::from(r.generated) {
                continue;
            }
            r.generated += 1;
            let first = *r.first.get_or_insert(now);
            if r.generated == 1 {
                ttft.push(now - r.sent);
            }
            if r.generated == r.response {
                tokens += u64::from(r.response);
                done += 1;
                tpot.push((now - first) / f64::from(r.response.saturating_sub(1).max(1)));
                free += r.blocks;
                let after = r.after;
                running.retain(|&j| j != k);
                // The user sends the next at once; it waits for the next step.
                if after > 0 {
                    all[k] = fresh(now, after - 1);
                    waiting.push_back(k);
                }
            }
        }
    }
    Ok(Served::of(load, &ttft, &tpot, tokens, now))
}

/// What one `schedule()` works within: the server's limits and the time (a request not yet
/// at the queue is not in it).
#[derive(Copy, Clone)]
struct Limits {
    max_num_seqs: u32,
    budget: u32,
    now: f64,
}

/// One `schedule()`: the requests of the next batch and the tokens each computes.
fn schedule(
    all: &mut [Request],
    running: &mut Vec<usize>,
    waiting: &mut VecDeque<usize>,
    free: &mut u64,
    limits: Limits,
) -> Vec<(usize, u64)> {
    let Limits { max_num_seqs, budget, now } = limits;
    let mut budget = u64::from(budget);
    let mut batch: Vec<(usize, u64)> = Vec::new();
    let lacks = |r: &Request| r.prompt + u64::from(r.generated) - r.computed;
    // Blocks for `n` more of the request's tokens, if the pool has them.
    let grow = |r: &mut Request, n: u64, free: &mut u64| -> bool {
        let need = (r.computed + n).div_ceil(VLLM_BLOCK_TOKENS).saturating_sub(r.blocks);
        if need > *free {
            return false;
        }
        *free -= need;
        r.blocks += need;
        true
    };
    let mut preempted = false;
    let mut i = 0;
    while i < running.len() && budget > 0 {
        let k = running[i];
        if all[k].in_flight {
            i += 1;
            continue;
        }
        let n = lacks(&all[k]).min(budget);
        let mut scheduled = true;
        while !grow(&mut all[k], n, free) {
            // The newest running request gives its blocks back and starts over.
            let Some(newest) = running.pop() else { break };
            preempted = true;
            // One in a batch in flight gives them back too; that batch's tokens for it
            // are then computed for nothing.
            let r = &mut all[newest];
            *free += r.blocks;
            r.blocks = 0;
            r.computed = 0;
            r.epoch += 1;
            batch.retain(|&(j, m)| {
                if j == newest {
                    budget += m;
                }
                j != newest
            });
            waiting.push_front(newest);
            if newest == k {
                scheduled = false;
                break;
            }
        }
        if !scheduled {
            break;
        }
        batch.push((k, n));
        budget -= n;
        i += 1;
    }
    if !preempted {
        while budget > 0 && running.len() < max_num_seqs as usize {
            // Users' requests join the queue in the order they reach it.
            let Some(&k) = waiting.front().filter(|&&k| !all[k].in_flight && all[k].ready <= now) else { break };
            let n = lacks(&all[k]).min(budget);
            if !grow(&mut all[k], n, free) {
                break;
            }
            waiting.pop_front();
            running.push(k);
            batch.push((k, n));
            budget -= n;
        }
    }
    batch
}

/// What a batch costs: its first token a whole step, each further decoding request its
/// share, each further prompt token the prompt's rate (one forward pass, as vLLM runs a step).
fn step_seconds(all: &[Request], batch: &[(usize, u64)], cost: &ServingCost) -> f64 {
    let decoding = batch.iter().filter(|&&(k, n)| n == 1 && all[k].computed >= all[k].prompt).count() as f64;
    let prompt_tokens = batch.iter().map(|&(_, n)| n).sum::<u64>() as f64 - decoding;
    let (decoding, prompt_tokens) =
        if decoding > 0.0 { (decoding - 1.0, prompt_tokens) } else { (0.0, prompt_tokens - 1.0) };
    cost.step_s + decoding * cost.sequence_s + prompt_tokens.max(0.0) * cost.token_s
}

#[cfg(test)]
mod tests {
    use super::super::{Load, Scheduler, ServingCost, ServingError, simulate};
    use crate::engine::VLLM_REQUEST_S;

    fn cost(kv_tokens: u64) -> ServingCost {
        ServingCost { step_s: 0.05, sequence_s: 0.02, token_s: 0.01, stage_shares: vec![1.0], kv_tokens }
    }

    fn load(users: u32, max_num_seqs: u32, max_num_batched_tokens: u32) -> Load {
        let scheduler = Scheduler::Vllm { max_num_seqs, max_num_batched_tokens };
        Load { users, prompt: 128, response: 64, requests_per_user: 3, scheduler, rate: None, spread: 0.0 }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn one_user_is_served_as_one_llama_server_slot_is() {
        // As a slot would, past the API server's part.
        let served = simulate(load(1, 256, 2048), &cost(1 << 20)).unwrap();
        let ttft = VLLM_REQUEST_S + 0.05 + 127.0 * 0.01;
        assert!(close(served.ttft_s[1], ttft) && close(served.tpot_s[1], 0.05), "{served:?}");
        assert!(close(served.wall_s, 3.0 * (ttft + 63.0 * 0.05)), "{served:?}");
    }

    #[test]
    fn a_long_prompt_is_chunked_by_the_budget_each_chunk_one_forward_pass() {
        // 2048 + 2048 + 904 tokens in three steps, each reading the weights once (llama-server
        // would run ten graphs of 512).
        let served = simulate(Load { prompt: 5000, ..load(1, 256, 2048) }, &cost(1 << 20)).unwrap();
        assert!(close(served.ttft_s[0], VLLM_REQUEST_S + 3.0 * 0.05 + 4997.0 * 0.01), "{served:?}");
    }

    #[test]
    fn users_past_max_num_seqs_wait_for_a_request_to_end() {
        let served = simulate(load(4, 2, 2048), &cost(1 << 20)).unwrap();
        // Two prompts in one step, then 63 steps of two sequences; only then may the others in.
        let first_two = 0.05 + 255.0 * 0.01 + 63.0 * (0.05 + 0.02);
        assert!(served.ttft_s[1] > first_two, "{served:?}");
        let all_in = simulate(load(4, 4, 2048), &cost(1 << 20)).unwrap();
        assert!(served.tokens_per_s < all_in.tokens_per_s, "{served:?} vs {all_in:?}");
    }

    #[test]
    fn a_pool_of_kv_blocks_admits_fewer_and_preempts_the_newest() {
        // Each request holds up to 191 tokens (12 blocks of 16); a pool of 24 blocks admits
        // three prompts of 8 blocks, then the ninth block of each needs one given back.
        let small = simulate(load(4, 256, 2048), &cost(24 * 16)).unwrap();
        let large = simulate(load(4, 256, 2048), &cost(1 << 20)).unwrap();
        assert!(small.tokens_per_s < large.tokens_per_s, "{small:?} vs {large:?}");
        assert!(small.ttft_s[1] > 2.0 * large.ttft_s[1], "{small:?} vs {large:?}");
        assert_eq!(small.requests_per_user * small.users, 12);
    }

    #[test]
    fn a_request_longer_than_the_pool_is_refused_naming_what_to_shorten() {
        let refused = simulate(load(1, 256, 2048), &cost(11 * 16));
        assert_eq!(refused, Err(ServingError::Pool { tokens: 191, pool: 176 }));
        assert!(refused.unwrap_err().to_string().contains("workload.prompt"));
    }

    #[test]
    fn a_pipeline_keeps_a_batch_in_each_stage() {
        // A budget of one prompt puts the two users' requests in batches of their own, which
        // then take turns in the two stages: each user a token a step, two tokens every step.
        let two = ServingCost { stage_shares: vec![0.5, 0.5], ..cost(1 << 20) };
        let once = Load { requests_per_user: 1, ..load(2, 256, 128) };
        let piped = simulate(once, &two).unwrap();
        assert!(close(piped.tpot_s[0], 0.05), "{piped:?}");
        let one = simulate(once, &cost(1 << 20)).unwrap();
        assert!(piped.tokens_per_s > 1.3 * one.tokens_per_s, "{piped:?} vs {one:?}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

        /// Any load ends with every token counted, its first token at least one step after it
        /// was sent, no faster than every user alone in parallel, whatever the pool (from one
        /// request's to plenty), budget, sequences and stages.
        #[test]
        fn every_load_ends_and_its_figures_hold_together(
            users in 1u32..=24,
            prompt in 1u32..=3000,
            response in 1u32..=40,
            requests_per_user in 1u32..=3,
            max_num_seqs in 1u32..=32,
            budget in 1u32..=4096,
            spare_blocks in 0u64..=400,
            stages in 1usize..=4,
            step_s in 1e-3..1.0f64,
            sequence_s in 0.0..1e-1f64,
            token_s in 1e-5..1e-1f64,
        ) {
            let scheduler = Scheduler::Vllm { max_num_seqs, max_num_batched_tokens: budget };
            let load = Load { users, prompt, response, requests_per_user, scheduler, rate: None, spread: 0.0 };
            let longest = u64::from(prompt) + u64::from(response) - 1;
            let kv_tokens = (longest.div_ceil(16) + spare_blocks) * 16;
            let stage_shares = vec![1.0 / stages as f64; stages];
            let cost = ServingCost { step_s, sequence_s, token_s, stage_shares, kv_tokens };
            let served = simulate(load, &cost).unwrap();
            let rounding = 4.0 * f64::EPSILON * served.wall_s;
            proptest::prop_assert!(served.ttft_s[0] >= step_s * (1.0 - 1e-12) - rounding, "{served:?}");
            proptest::prop_assert!(served.ttft_s[0] <= served.ttft_s[1] && served.tpot_s[0] <= served.tpot_s[1]);
            let tokens = f64::from(users) * f64::from(requests_per_user) * f64::from(response);
            proptest::prop_assert!((served.tokens_per_s * served.wall_s - tokens).abs() <= 1e-6 * tokens);
            // A token a step at most per request, each step at least a stage's share of one.
            let most = f64::from(users) / (step_s / stages as f64);
            proptest::prop_assert!(served.tokens_per_s <= most * (1.0 + 1e-9), "{served:?}");
        }
    }
}
