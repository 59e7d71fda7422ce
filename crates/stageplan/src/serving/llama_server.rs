//! llama-server's scheduler (`update_slots` in `tools/server/server-context.cpp`), run over
//! the plan's step times as the module doc of [`super`] tells.

use super::draws::{arrivals, lengths};
use super::{Load, Served, ServingCost};

/// One slot's request.
#[derive(Copy, Clone, Debug)]
struct Slot {
    sent: f64,
    /// Prompt tokens not yet in a step.
    prompt_left: u32,
    /// Tokens it generates.
    response: u32,
    /// Tokens generated so far.
    generated: u32,
    first: f64,
    /// Requests this slot's user has still to send after this one.
    after: u32,
}

/// llama-server's `update_slots`, step by step (see the module doc).
pub(super) fn steps(load: Load, n_batch: u32, n_ubatch: u32, cost: &ServingCost) -> Served {
    let requests = u64::from(load.users) * u64::from(load.requests_per_user);
    let mut drawn = lengths(&load, requests as usize).into_iter();
    let mut fresh = |sent: f64, after: u32| {
        let (prompt, response) = drawn.next().unwrap_or((load.prompt, load.response));
        Slot { sent, prompt_left: prompt, response, generated: 0, first: 0.0, after }
    };
    // A closed loop starts every user's first request at once; an open one fills slots as
    // requests arrive.
    let open = load.rate.map(|rate| arrivals(rate, requests as usize));
    let mut slots: Vec<Option<Slot>> = match open {
        None => (0..load.users).map(|_| Some(fresh(0.0, load.requests_per_user - 1))).collect(),
        Some(_) => vec![None; load.users as usize],
    };
    let mut arrived = 0;
    let (mut ttft, mut tpot) = (Vec::with_capacity(requests as usize), Vec::with_capacity(requests as usize));
    let (mut now, mut tokens) = (0.0_f64, 0_u64);
    loop {
        if let Some(open) = &open {
            // A free slot takes the first request waiting (llama-server's queue of tasks).
            for slot in slots.iter_mut().filter(|s| s.is_none()) {
                match open.get(arrived) {
                    Some(&sent) if sent <= now => {
                        *slot = Some(fresh(sent, 0));
                        arrived += 1;
                    }
                    _ => break,
                }
            }
            if slots.iter().all(Option::is_none) {
                // Idle until the next request arrives.
                match open.get(arrived) {
                    Some(&sent) => {
                        now = sent;
                        continue;
                    }
                    None => break,
                }
            }
        } else if slots.iter().all(Option::is_none) {
            break;
        }
        // The step: each generating slot's token, then prompts in slot order up to n_batch.
        let decoding: u64 = slots.iter().flatten().filter(|s| s.generated > 0).count() as u64;
        let mut batch = decoding;
        let mut fed = vec![0_u32; slots.len()];
        for (slot, fed) in slots.iter().zip(&mut fed) {
            if let Some(s) = slot.filter(|s| s.prompt_left > 0) {
                let room = u64::from(n_batch).saturating_sub(batch);
                *fed = s.prompt_left.min(u32::try_from(room).unwrap_or(u32::MAX));
                batch += u64::from(*fed);
            }
        }
        let graphs = batch.div_ceil(u64::from(n_ubatch)).max(1);
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
            if s.generated == s.response {
                tokens += u64::from(s.response);
                tpot.push((now - s.first) / f64::from(s.response.saturating_sub(1).max(1)));
                // The user sends the next at once; it joins the next step.
                *slot = (s.after > 0).then(|| fresh(now, s.after - 1));
            }
        }
    }
    Served::of(load, &ttft, &tpot, tokens, now)
}
