//! A plan in the words a person asks in first: does it fit, how fast for one user, how long
//! until the first token, and what the machines reach together — with the concurrency that
//! needs. The CLI, the page and the widget print these lines, so they cannot disagree.

use crate::plan::{PipelineFull, Plan};
use crate::units::{format_bytes, format_seconds, group_digits, sig3};

/// What a plan comes to, as figures; [`Verdict::headline`] and [`Verdict::details`] word them.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub fits: bool,
    /// The machine with the least free memory and its free bytes (negative: over budget).
    pub tightest: Option<(String, i64)>,
    /// One interactive stream's decode speed, tokens/s (0 when it does not fit).
    pub one_user_tokens_per_s: f64,
    /// The calibration's typical error on that figure and the class it is for.
    pub accuracy: Option<(f64, String)>,
    pub time_to_first_token_s: Option<f64>,
    /// The prompt length the time to first token is for.
    pub prompt: u64,
    /// What the workload's sequences reach together, and how many they are.
    pub tokens_per_s: f64,
    pub sequences: u64,
    pub micro_batches: u64,
    /// The same split with the pipeline kept full, when that is faster.
    pub pipeline_full: Option<PipelineFull>,
    pub prefill_tokens_per_s: f64,
    pub max_context: Option<u64>,
}

impl Verdict {
    pub fn of(plan: &Plan) -> Verdict {
        let tightest = plan
            .stages
            .iter()
            .min_by_key(|s| s.memory.headroom)
            .map(|s| (crate::quote::line(&s.node).into_owned(), s.memory.headroom));
        Verdict {
            fits: plan.feasible,
            tightest,
            one_user_tokens_per_s: plan.stream_tokens_per_s,
            accuracy: plan.accuracy.as_ref().map(|a| (a.typical_error, a.class.clone())),
            time_to_first_token_s: plan.time_to_first_token_s,
            prompt: plan.workload.prompt,
            tokens_per_s: plan.tokens_per_s,
            sequences: plan.workload.batch,
            micro_batches: plan.micro_batches,
            pipeline_full: plan.pipeline_full.clone().filter(|f| f.tokens_per_s > plan.tokens_per_s * (1.0 + 1e-9)),
            prefill_tokens_per_s: plan.prefill_tokens_per_s,
            max_context: plan.max_context,
        }
    }

    /// The first line: fits or not, one user's speed, the time to first token.
    pub fn headline(&self) -> String {
        if !self.fits {
            return match &self.tightest {
                Some((node, headroom)) if *headroom < 0 => {
                    format!(
                        "does not fit: `{node}` is {} over its memory",
                        format_bytes(headroom.unsigned_abs() as f64)
                    )
                }
                _ => "does not fit: no split of the model fits these machines".to_owned(),
            };
        }
        let mut line = format!("fits · {} tok/s for one user", sig3(self.one_user_tokens_per_s));
        if let Some((error, class)) = &self.accuracy {
            line += &format!(" (±{:.0}%, {class})", error * 100.0);
        }
        if let Some(ttft) = self.time_to_first_token_s.filter(|_| self.prompt > 0) {
            line +=
                &format!(" · first token in {} for a {}-token prompt", format_seconds(ttft), group_digits(self.prompt));
        }
        line
    }

    /// The lines after the headline: the workload's throughput and what a full pipeline
    /// needs, then prefill, the longest context and the tightest machine. Empty when it
    /// does not fit (the plan's notes say what would).
    pub fn details(&self) -> Vec<String> {
        if !self.fits {
            return Vec::new();
        }
        let mut lines = vec![format!(
            "throughput {} tok/s for {} sequence{}{} · {} per token",
            sig3(self.tokens_per_s),
            group_digits(self.sequences),
            if self.sequences == 1 { "" } else { "s" },
            if self.micro_batches > 1 { format!(" in {} micro-batches", self.micro_batches) } else { String::new() },
            format_seconds(self.sequences as f64 / self.tokens_per_s),
        )];
        if let Some(full) = &self.pipeline_full {
            lines.push(format!(
                "with the pipeline full: {} tok/s, with {} sequences in flight ({})",
                sig3(full.tokens_per_s),
                group_digits(full.sequences),
                if full.kv_fits { "their KV cache fits" } else { "their KV cache does not fit this split" },
            ));
        }
        let mut last = format!(
            "prefill {} tok/s · longest context that fits this split: {}",
            sig3(self.prefill_tokens_per_s),
            self.max_context.map_or_else(|| "–".to_owned(), |c| format!("{} tokens", group_digits(c)))
        );
        if let Some((node, headroom)) = &self.tightest {
            last += &format!(" · tightest memory: {} free on `{node}`", format_bytes((*headroom).max(0) as f64));
        }
        lines.push(last);
        lines
    }
}

#[cfg(test)]
mod tests {
    use crate::Scenario;

    use super::Verdict;

    fn verdict(scenario: &str) -> Verdict {
        let problem = Scenario::from_json(scenario).unwrap().problem().unwrap();
        Verdict::of(&crate::plan(&problem))
    }

    const HOME: &str = include_str!("../../../tests/scenarios/home-70b.json");

    #[test]
    fn a_fitting_plan_leads_with_one_user_and_the_first_token() {
        let v = verdict(HOME);
        let head = v.headline();
        assert!(head.starts_with("fits · "), "{head}");
        assert!(head.contains(" tok/s for one user"), "{head}");
        assert!(head.contains("for a 512-token prompt"), "{head}");
        let ttft = v.time_to_first_token_s.unwrap();
        // 512 tokens at the pipelined prefill rate, plus the first chunk's trip: never less
        // than the rate alone gives, and at most one trip through every stage per token.
        assert!(ttft >= 512.0 / v.prefill_tokens_per_s * (1.0 - 1e-9), "{ttft}");
        let details = v.details();
        assert!(details[0].starts_with("throughput "), "{details:?}");
        assert!(details.last().unwrap().contains("tightest memory: "), "{details:?}");
    }

    #[test]
    fn the_prompt_is_the_scenarios_and_the_first_token_grows_with_it() {
        let with = |prompt: u64| {
            let mut scenario: serde_json::Value = serde_json::from_str(HOME).unwrap();
            scenario["workload"]["prompt"] = prompt.into();
            verdict(&scenario.to_string())
        };
        let (short, long) = (with(100), with(4000));
        assert_eq!((short.prompt, long.prompt), (100, 4000));
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
        let v = verdict(&scenario.to_string());
        assert!(!v.fits);
        assert!(v.headline().starts_with("does not fit"), "{}", v.headline());
        assert!(v.details().is_empty());
    }
}
