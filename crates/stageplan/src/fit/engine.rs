//! A probed CPU's decode rates fitted to the user's own llama-bench runs
//! (`stageplan probe --cpu --engine`): each run planned as the node's one stage, the rate
//! that makes the plan predict it.

use crate::calibration::{Measured, WeightClass, measured::class_of, quantile};
use crate::scenario::EngineFit;

/// A decode run of llama-bench on a measured CPU node: the one-node problem it was (the
/// model read from its file, the node with its probe, the run's context) and its tokens/s.
#[derive(Clone, Debug)]
pub struct EngineRun {
    pub problem: crate::Problem,
    pub tokens_per_s: f64,
    /// The same model's prompt processing, when the run measured it (llama-bench's `pp`):
    /// the prompt's tokens and their rate.
    pub prompt: Option<(u64, f64)>,
}

/// The rates that make the node's plan of each run predict it, per weight class: the median
/// over the runs whose model is mostly of that class. A run fits the rate of its model's
/// whole type mix, which is the class's rate (of its reference type) scaled by the prior
/// shares of the types the model holds (`calibration::measured::products_rate`). A run faster
/// than the probe's bandwidth allows shows that llama.cpp reads faster than the probe did:
/// `read` is that factor (the median over such runs), and the run's rate the least that keeps
/// its products within its time — a lower bound, as the read explains the run.
///
/// # Errors
/// A run whose problem is not one measured CPU stage, or a rate that is not a positive number.
pub fn fit_engine(runs: &[EngineRun]) -> Result<EngineFit, String> {
    let mut by_class: [Vec<f64>; 4] = Default::default();
    let mut reads = Vec::new();
    for run in runs {
        let model = &run.problem.model.name;
        if !(run.tokens_per_s.is_finite() && run.tokens_per_s > 0.0) {
            return Err(format!("`{}`: {} tok/s is not a measured rate", crate::quote::line(model), run.tokens_per_s));
        }
        let plan = crate::plan(&run.problem);
        let (Some(stage), Some(node)) = (plan.stages.first(), run.problem.nodes.first()) else {
            return Err(format!("`{}` does not fit the probed machine's memory", crate::quote::line(model)));
        };
        let measured = Measured::of_node(node);
        let (Some(rate), Some(rates)) = (
            measured.as_ref().and_then(|m| m.decode_rate(&run.problem.model)),
            measured.as_ref().and_then(|m| m.decode_rates),
        ) else {
            return Err("the machine is not a probed CPU node".to_owned());
        };
        let t = &stage.time;
        // The products' time at `rate` is `t.compute_s`; the run leaves `needed` for them.
        let needed = 1.0 / run.tokens_per_s - t.overhead_s - t.send_s;
        // The mix's rate that explains the run, as the rate of the class's reference type
        // (every class scales together on a node fitted to nothing yet).
        let class = class_of(&run.problem.model);
        let fitted = rate * t.compute_s / needed * rates[class as usize] / rate;
        // A run faster than the probe's bandwidth allows read faster than the probe did.
        if needed > 0.0 && needed < t.memory_s {
            reads.push((t.memory_s / needed).min(*crate::limits::READ_FACTORS.end()));
        }
        // A rate `plan` would refuse in the node it goes into.
        if fitted.is_finite() && fitted > 0.0 && !crate::limits::MEASURED_RATES.contains(&fitted) {
            return Err(format!(
                "`{}` at {} tok/s gives a rate of {fitted:e} weights/s, outside what a CPU reaches ({:e} to {:e}); check the run",
                crate::quote::line(model),
                run.tokens_per_s,
                crate::limits::MEASURED_RATES.start(),
                crate::limits::MEASURED_RATES.end()
            ));
        }
        if fitted.is_finite() && fitted > 0.0 {
            by_class[class as usize].push(fitted);
        }
    }
    let mut fit = EngineFit::default();
    for class in WeightClass::ALL {
        let rates = &by_class[class as usize];
        if !rates.is_empty() {
            fit.set_rate(class, quantile(rates, 0.5));
        }
    }
    fit.read = (!reads.is_empty()).then(|| quantile(&reads, 0.5));
    let prefills: Vec<f64> = runs.iter().filter_map(prefill_rate).collect();
    fit.prefill = (!prefills.is_empty()).then(|| quantile(&prefills, 0.5));
    Ok(fit)
}

/// The FLOP/s over a prompt that makes `run`'s plan predict its prompt's rate: a prompt on
/// a CPU is compute-bound, so the plan's rate is nearly proportional to it; scaled by
/// measured ÷ planned from the node's `compute`, and again until the per-layer terms no
/// longer move it. `None` without a prompt, or with a rate past what a CPU reaches.
fn prefill_rate(run: &EngineRun) -> Option<f64> {
    let (tokens, measured) = run.prompt?;
    if !(measured.is_finite() && measured > 0.0) {
        return None;
    }
    let mut problem = run.problem.clone();
    problem.workload.prompt = tokens.max(1);
    problem.workload.context = problem.workload.context.max(tokens);
    let mut rate = problem.nodes.first()?.compute;
    for _ in 0..4 {
        let engine = problem.nodes.first_mut()?.probe.as_mut()?.engine.get_or_insert_default();
        engine.prefill = Some(rate);
        let planned = crate::plan(&problem).prefill_tokens_per_s;
        if !(planned.is_finite() && planned > 0.0) {
            return None;
        }
        rate *= measured / planned;
    }
    crate::limits::MEASURED_RATES.contains(&rate).then_some(rate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scenario;

    /// A 1B model in `weights` on one CPU node with `node` fields (JSON, after the name).
    fn problem(weights: &str, node: &str) -> crate::Problem {
        let json = format!(
            r#"{{"model": {{"preset": "llama-3.2-1b", "weights": "{weights}"}}, "workload": {{"context": 16}},
                "nodes": [{{"name": "box", "kind": "cpu", "memory": "64 GiB", "bandwidth": "30 GB/s",
                            "compute": "50 GFLOPS", "threads": 2{node}}}]}}"#
        );
        Scenario::from_json(&json).unwrap().problem().unwrap()
    }

    const PROBE: &str = r#", "probe": {"adapter": "EPYC", "backend": "cpu", "bandwidth_spread": 0.04}"#;

    #[test]
    fn the_fit_recovers_the_rate_that_made_a_run() {
        for (weights, rate) in [("f16", 8e9), ("q8_0", 1.2e10), ("q4_0", 2.5e10), ("q4_k_m", 3e10)] {
            let class = WeightClass::of(weights);
            let engine = format!(r#"{{"{}": {rate}}}"#, class.name());
            let made = problem(weights, &PROBE.replace("0.04", &format!("0.04, \"engine\": {engine}")));
            let tokens_per_s = crate::plan(&made).stream_tokens_per_s;
            // Fitted from a node at the defaults.
            let fit =
                fit_engine(&[EngineRun { problem: problem(weights, PROBE), tokens_per_s, prompt: None }]).unwrap();
            let got = fit.rate(class).unwrap();
            // Compute-bound runs give the rate back; a memory-bound one the least rate that
            // keeps it memory-bound, which predicts the same.
            let refit =
                problem(weights, &PROBE.replace("0.04", &format!("0.04, \"engine\": {{\"{}\": {got}}}", class.name())));
            let again = crate::plan(&refit).stream_tokens_per_s;
            assert!((again / tokens_per_s - 1.0).abs() < 1e-9, "{weights}: {again} vs {tokens_per_s}");
            assert!(got <= rate * (1.0 + 1e-9), "{weights}: {got} > {rate}");
        }
        let bad = fit_engine(&[EngineRun { problem: problem("f16", PROBE), tokens_per_s: f64::NAN, prompt: None }]);
        assert!(bad.unwrap_err().contains("not a measured rate"));
        let spec = fit_engine(&[EngineRun { problem: problem("f16", ""), tokens_per_s: 5.0, prompt: None }]);
        assert!(spec.unwrap_err().contains("not a probed CPU node"));
        // A run so slow its rate is under any CPU's: refused, not printed in a node that
        // `plan` would refuse (#45).
        let absurd = fit_engine(&[EngineRun { problem: problem("f16", PROBE), tokens_per_s: 1e-12, prompt: None }]);
        assert!(absurd.unwrap_err().contains("outside what a CPU reaches"));
    }

    #[test]
    fn the_fit_recovers_the_prompt_rate_that_made_a_run() {
        // A node whose prompts run at 2.4e11 FLOP/s (the EPYC of BENCHMARKS.md's serve check,
        // 4.6× its f32 matmul), measured over a 32-token prompt, fitted from a node without it.
        let made = problem("q8_0", &PROBE.replace("0.04", "0.04, \"engine\": {\"prefill\": 2.4e11}"));
        let mut prompted = made.clone();
        prompted.workload.prompt = 32;
        prompted.workload.context = 32;
        let measured = crate::plan(&prompted).prefill_tokens_per_s;
        let run = EngineRun { problem: problem("q8_0", PROBE), tokens_per_s: 20.0, prompt: Some((32, measured)) };
        let fit = fit_engine(&[run]).unwrap();
        let got = fit.prefill.expect("a prompt rate");
        assert!((got / 2.4e11 - 1.0).abs() < 1e-6, "{got}");
        // Without a prompt in the run, no rate: the node's `compute` prices its prompts.
        let run = EngineRun { problem: problem("q8_0", PROBE), tokens_per_s: 20.0, prompt: None };
        assert_eq!(fit_engine(&[run]).unwrap().prefill, None);
    }

    #[test]
    fn a_run_faster_than_the_probes_read_proves_a_faster_read() {
        // llama.cpp streaming a Q8_0 file 15% faster than the probe's bandwidth allows (as
        // on the CI's Xeon, one thread): the fit says so, and the node it writes predicts
        // the run — before, the rate could not lift a memory-bound plan (#45).
        let fast = PROBE.replace("0.04", "0.04, \"engine\": {\"q8\": 1e12}");
        let bound = crate::plan(&problem("q8_0", &fast));
        assert_eq!(bound.stages[0].time.bound, crate::plan::Bound::Memory);
        let tokens_per_s = bound.stream_tokens_per_s * 1.15;
        let fit = fit_engine(&[EngineRun { problem: problem("q8_0", PROBE), tokens_per_s, prompt: None }]).unwrap();
        let read = fit.read.expect("a read factor");
        assert!(read > 1.15 && read < 1.2, "{read}");
        let engine = serde_json::to_string(&fit).unwrap();
        let refit = problem("q8_0", &PROBE.replace("0.04", &format!("0.04, \"engine\": {engine}")));
        let again = crate::plan(&refit).stream_tokens_per_s;
        assert!((again / tokens_per_s - 1.0).abs() < 1e-9, "{again} vs {tokens_per_s}");
        // A run the probe's read explains proves nothing more.
        let slow = fit_engine(&[EngineRun {
            problem: problem("q8_0", PROBE),
            tokens_per_s: tokens_per_s / 2.0,
            prompt: None,
        }]);
        assert_eq!(slow.unwrap().read, None);
    }
}
