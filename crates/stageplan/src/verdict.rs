//! A plan in the words a person asks in first: does it fit, how fast for one user, how long
//! until the first token, and what the machines reach together — with the concurrency that
//! needs. The CLI, the page and the widget print these lines, so they cannot disagree.

use crate::plan::Plan;
use crate::units::{format_bytes, format_seconds, group_digits, sig3};

/// A plan's verdict: [`Verdict::headline`] and [`Verdict::details`] word its figures.
#[derive(Clone, Copy, Debug)]
pub struct Verdict<'a> {
    plan: &'a Plan,
}

impl<'a> Verdict<'a> {
    pub fn of(plan: &'a Plan) -> Verdict<'a> {
        Verdict { plan }
    }

    /// The machine with the least free memory and its free bytes (negative: over budget).
    fn tightest(self) -> Option<(std::borrow::Cow<'a, str>, i64)> {
        let stage = self.plan.stages.iter().min_by_key(|s| s.memory.headroom)?;
        Some((crate::quote::line(&stage.node), stage.memory.headroom))
    }

    /// The first line: fits or not, one user's speed, the time to first token.
    pub fn headline(self) -> String {
        let plan = self.plan;
        if !plan.feasible {
            return match self.tightest() {
                Some((node, headroom)) if headroom < 0 => {
                    format!(
                        "does not fit: `{node}` is {} over its memory",
                        format_bytes(headroom.unsigned_abs() as f64)
                    )
                }
                _ => "does not fit: no split of the model fits these machines".to_owned(),
            };
        }
        // What each sequence sees: with several, they step together (`stream_tokens_per_s` is
        // all of theirs).
        let sequences = plan.workload.batch.max(1);
        let each = |tokens_per_s: f64| sig3(tokens_per_s / sequences as f64);
        let mut line = match sequences {
            1 => format!("fits · {} tok/s for one user", each(plan.stream_tokens_per_s)),
            n => format!("fits · {} tok/s for each of {} sequences", each(plan.stream_tokens_per_s), group_digits(n)),
        };
        // Both labelled where they differ: at the full context, and a response into it.
        if let Some(shallow) = plan.at_depth.as_ref().filter(|d| d.tokens < plan.workload.context) {
            line += &format!(
                " at {} tokens of context, {} at {}",
                group_digits(plan.workload.context),
                each(shallow.stream_tokens_per_s),
                group_digits(shallow.tokens)
            );
        }
        if let Some(a) = &plan.accuracy {
            line += &format!(" (±{:.0}%, {})", a.typical_error * 100.0, a.class);
        }
        let prompt = plan.workload.prompt;
        if let Some(ttft) = plan.time_to_first_token_s.filter(|_| prompt > 0) {
            line += &format!(" · first token in {} for a {}-token prompt", format_seconds(ttft), group_digits(prompt));
        }
        line
    }

    /// The lines after the headline: the workload's throughput and what a full pipeline
    /// needs, then prefill, the longest context and the tightest machine. Empty when it
    /// does not fit (the plan's notes say what would).
    pub fn details(self) -> Vec<String> {
        let plan = self.plan;
        if !plan.feasible {
            return Vec::new();
        }
        let sequences = plan.workload.batch;
        let mut lines = vec![format!(
            "throughput {} tok/s for {} sequence{}{} · {} per token",
            sig3(plan.tokens_per_s),
            group_digits(sequences),
            if sequences == 1 { "" } else { "s" },
            if plan.micro_batches > 1 { format!(" in {} micro-batches", plan.micro_batches) } else { String::new() },
            format_seconds(sequences as f64 / plan.tokens_per_s),
        )];
        if let Some(full) = plan.pipeline_full.as_ref().filter(|f| f.tokens_per_s > plan.tokens_per_s * (1.0 + 1e-9)) {
            lines.push(format!(
                "with the pipeline full: {} tok/s, with {} sequences in flight ({})",
                sig3(full.tokens_per_s),
                group_digits(full.sequences),
                if full.kv_fits { "their KV cache fits" } else { "their KV cache does not fit this split" },
            ));
        }
        for stage in &plan.stages {
            if let Some((offload, kept)) = stage.offload.as_ref().and_then(|o| Some((o, o.kept()?))) {
                // How many of the stage's layers keep their experts (or FFN) on the GPU.
                let layers = stage.layers[1] - stage.layers[0];
                let on_gpu = layers - offload.host_layers - offload.host_ffn;
                let what = if offload.experts { "experts" } else { "FFN" };
                lines.push(format!(
                    "in RAM: `{}` keeps {kept} in its system RAM ({} of {}); {on_gpu} of {layers} layers keep their {what} on the GPU",
                    crate::quote::line(&stage.node),
                    format_bytes(offload.memory.total as f64),
                    format_bytes(offload.memory.budget as f64),
                ));
            }
        }
        let mut last = format!(
            "prefill {} tok/s · longest context that fits this split: {}",
            sig3(plan.prefill_tokens_per_s),
            plan.max_context.map_or_else(|| "–".to_owned(), |c| format!("{} tokens", group_digits(c)))
        );
        if let Some((node, headroom)) = self.tightest() {
            last += &format!(" · tightest memory: {} free on `{node}`", format_bytes(headroom.max(0) as f64));
        }
        lines.push(last);
        lines
    }
}

#[cfg(test)]
mod tests {
    use crate::Scenario;

    use super::Verdict;

    fn plan(scenario: &str) -> crate::Plan {
        crate::plan(&Scenario::from_json(scenario).unwrap().problem().unwrap())
    }

    const HOME: &str = include_str!("../../../tests/scenarios/home-70b.json");

    #[test]
    fn sequences_that_step_together_each_see_their_share() {
        let mut scenario = Scenario::from_json(HOME).unwrap();
        scenario.workload.batch = 4;
        let p = crate::plan(&scenario.problem().unwrap());
        let head = Verdict::of(&p).headline();
        let each = crate::units::sig3(p.stream_tokens_per_s / 4.0);
        assert!(head.starts_with(&format!("fits · {each} tok/s for each of 4 sequences")), "{head}");
    }

    #[test]
    fn a_fitting_plan_leads_with_one_user_and_the_first_token() {
        let p = plan(HOME);
        let v = Verdict::of(&p);
        let head = v.headline();
        assert!(head.starts_with("fits · "), "{head}");
        assert!(head.contains(" tok/s for one user"), "{head}");
        assert!(head.contains("for a 512-token prompt"), "{head}");
        let ttft = p.time_to_first_token_s.unwrap();
        // 512 tokens at the pipelined prefill rate, plus the first chunk's trip: never less
        // than the rate alone gives, and at most one trip through every stage per token.
        assert!(ttft >= 512.0 / p.prefill_tokens_per_s * (1.0 - 1e-9), "{ttft}");
        let details = v.details();
        assert!(details[0].starts_with("throughput "), "{details:?}");
        assert!(details.last().unwrap().contains("tightest memory: "), "{details:?}");
    }

    #[test]
    fn the_prompt_is_the_scenarios_and_the_first_token_grows_with_it() {
        let with = |prompt: u64| {
            let mut scenario: serde_json::Value = serde_json::from_str(HOME).unwrap();
            scenario["workload"]["prompt"] = prompt.into();
            plan(&scenario.to_string())
        };
        let (short, long) = (with(100), with(4000));
        assert_eq!((short.workload.prompt, long.workload.prompt), (100, 4000));
        assert!(Verdict::of(&long).headline().contains("for a 4,000-token prompt"));
        assert!(long.time_to_first_token_s.unwrap() > 10.0 * short.time_to_first_token_s.unwrap() * 0.9);
        let mut scenario: serde_json::Value = serde_json::from_str(HOME).unwrap();
        scenario["workload"]["prompt"] = 1_000_000.into();
        let error = Scenario::from_json(&scenario.to_string()).unwrap().problem().unwrap_err().to_string();
        assert!(error.starts_with("`workload.prompt` is 1000000; give between 1 and"), "{error}");
    }

    #[test]
    fn a_plan_that_does_not_fit_names_the_machine_over_its_memory() {
        let mut scenario: serde_json::Value = serde_json::from_str(HOME).unwrap();
        scenario["policy"] = "even".into();
        for node in scenario["nodes"].as_array_mut().unwrap() {
            node["memory"] = "12 GiB".into();
        }
        let p = plan(&scenario.to_string());
        let v = Verdict::of(&p);
        assert!(!p.feasible);
        assert!(v.headline().starts_with("does not fit"), "{}", v.headline());
        assert!(v.details().is_empty());
    }
}
