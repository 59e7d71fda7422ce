//! A receipt: what a plan predicted beside what llama.cpp measured running it — memory per
//! machine from its log, decode and prompt speed from a completion's timings — and what is
//! far from the plan.

use serde::{Deserialize, Serialize};
use stageplan::Plan;
use stageplan::export::Launch;

use crate::llama::{Buffer, Timings};

/// Memory a machine holds for the model's life (weights, caches) may differ from the plan's
/// by this fraction: the engine tests hold llama.cpp to it on every architecture family.
pub const HELD_BAND: f64 = 0.02;
/// A speed's band when the plan states none (a spec-sheet node).
pub const SPEED_BAND: f64 = 0.25;
/// Tokens of the warm-up completion, which loads what the measured one should not pay for.
const WARM_UP_TOKENS: u32 = 4;
/// The most tokens a measurement prompts with or generates.
const MAX_TOKENS: u64 = 4096;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    pub machines: Vec<MachineReceipt>,
    /// One sequence's decode after the prompt.
    pub decode: SpeedReceipt,
    /// The prompt's processing.
    pub prefill: SpeedReceipt,
    /// What is outside its band, in words; empty when the plan held.
    pub far: Vec<String>,
}

/// One machine's memory: planned and allocated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineReceipt {
    pub machine: String,
    /// Weights, KV cache and embedding the plan puts there.
    pub planned_held_bytes: u64,
    /// llama.cpp's model, KV and recurrent-state buffers there.
    pub allocated_held_bytes: u64,
    /// Everything the plan counts there but its reserve.
    pub planned_total_bytes: u64,
    /// Every buffer llama.cpp allocated there.
    pub allocated_total_bytes: u64,
}

/// A speed, planned and measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpeedReceipt {
    pub planned_per_s: f64,
    pub measured_per_s: f64,
    /// Tokens the measurement covered.
    pub tokens: u64,
    /// `planned ÷ measured − 1`: above 0, the plan was optimistic; `None` when nothing was
    /// measured.
    pub error: Option<f64>,
    /// The plan's stated typical error, the band `error` should fall in.
    pub band: f64,
}

impl Receipt {
    /// Measures `plan` served by llama-server at `address` as `launches`: a warm-up, then a
    /// completion of the workload's prompt and response, then the buffers its `log` reports.
    ///
    /// # Errors
    /// llama-server does not answer, or its log cannot be read.
    pub fn measure(
        plan: &Plan,
        launches: &[Launch],
        address: std::net::SocketAddr,
        log: &std::path::Path,
    ) -> Result<Receipt, String> {
        let prompt = crate::llama::prompt(plan.workload.prompt.clamp(1, MAX_TOKENS) as usize);
        let tokens = u32::try_from(plan.workload.response.clamp(1, MAX_TOKENS)).unwrap_or(128);
        crate::llama::complete(address, &prompt[..1], WARM_UP_TOKENS)?;
        let timings = crate::llama::complete(address, &prompt, tokens)?;
        // Lossy: a log quotes generated text, which need not be UTF-8 piece by piece.
        let log = std::fs::read(log).map_err(|e| format!("{}: {e}", log.display()))?;
        Ok(Receipt::new(plan, launches, &crate::llama::buffers(&String::from_utf8_lossy(&log)), &timings))
    }

    /// The receipt of `plan` run as `launches` (their rpc-servers' ports name the devices
    /// in llama.cpp's log), with the `buffers` its log reports and one completion's `timings`.
    pub fn new(plan: &Plan, launches: &[Launch], buffers: &[Buffer], timings: &Timings) -> Receipt {
        let main = launches.iter().find(|l| l.program == "llama-server").map(|l| l.machine.clone()).unwrap_or_default();
        // An RPC device is the rpc-server llama-server dialed at its endpoint (`RPC0[host:port]`).
        let machine_of = |endpoint: &str| {
            launches
                .iter()
                .find(|l| l.dialed.as_deref() == Some(endpoint))
                .map_or_else(|| main.clone(), |l| l.machine.clone())
        };
        let mut machines: Vec<MachineReceipt> = Vec::new();
        for stage in &plan.stages {
            let machine = stage.gpu_of.as_ref().map_or_else(|| stage.node.clone(), |g| g.machine.clone());
            let i = entry(&mut machines, machine);
            let m = &stage.memory;
            machines[i].planned_held_bytes += m.weights.saturating_add(m.kv).saturating_add(m.embed_head);
            machines[i].planned_total_bytes += m.total.saturating_sub(m.reserve);
        }
        for buffer in buffers {
            let machine = buffer.rpc_endpoint().map_or_else(|| main.clone(), machine_of);
            let i = entry(&mut machines, machine);
            let bytes = buffer.bytes.max(0.0) as u64;
            machines[i].allocated_total_bytes += bytes;
            if buffer.held() {
                machines[i].allocated_held_bytes += bytes;
            }
        }
        let band = plan.accuracy.as_ref().map_or(SPEED_BAND, |a| a.typical_error);
        let speed = |planned: f64, measured: f64, tokens: u64| SpeedReceipt {
            planned_per_s: planned,
            measured_per_s: measured,
            tokens,
            error: (measured > 0.0).then(|| planned / measured - 1.0),
            band,
        };
        let planned_decode = plan.at_depth.as_ref().map_or(plan.stream_tokens_per_s, |d| d.stream_tokens_per_s);
        let decode = speed(planned_decode, timings.predicted_per_second, timings.predicted_tokens);
        let prefill = speed(plan.prefill_tokens_per_s, timings.prompt_per_second, timings.prompt_tokens);
        let mut far = Vec::new();
        for m in &machines {
            let error = m.allocated_held_bytes as f64 / m.planned_held_bytes.max(1) as f64 - 1.0;
            if error.abs() > HELD_BAND {
                far.push(format!(
                    "`{}` holds {} of weights and caches where the plan says {} ({:+.1}%, beyond ±{:.0}%)",
                    m.machine,
                    stageplan::units::format_bytes(m.allocated_held_bytes as f64),
                    stageplan::units::format_bytes(m.planned_held_bytes as f64),
                    error * 100.0,
                    HELD_BAND * 100.0
                ));
            }
            if m.allocated_total_bytes > m.planned_total_bytes {
                far.push(format!(
                    "`{}` allocated {} in all, more than the plan's {}",
                    m.machine,
                    stageplan::units::format_bytes(m.allocated_total_bytes as f64),
                    stageplan::units::format_bytes(m.planned_total_bytes as f64)
                ));
            }
        }
        for (what, s) in [("decode", &decode), ("prompt processing", &prefill)] {
            if s.error.is_none_or(|e| e.abs() > s.band) {
                far.push(format!(
                    "{what}: planned {:.1} tok/s, measured {:.1} ({:+.0}%, beyond the plan's ±{:.0}%)",
                    s.planned_per_s,
                    s.measured_per_s,
                    s.error.unwrap_or(f64::INFINITY) * 100.0,
                    s.band * 100.0
                ));
            }
        }
        Receipt { machines, decode, prefill, far }
    }
}

/// The index of `machine`'s receipt, added when new.
fn entry(machines: &mut Vec<MachineReceipt>, machine: String) -> usize {
    if let Some(i) = machines.iter().position(|m| m.machine == machine) {
        return i;
    }
    machines.push(MachineReceipt {
        machine,
        planned_held_bytes: 0,
        allocated_held_bytes: 0,
        planned_total_bytes: 0,
        allocated_total_bytes: 0,
    });
    machines.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two machines whose rpc-servers listen on the same port, at different hosts: each
    /// device's buffers go to the machine llama-server dialed for it.
    #[test]
    fn buffers_go_to_the_machine_dialed_at_their_endpoint() {
        let text = r#"{"model": {"preset": "llama-3.2-1b", "weights": "q8_0"}, "workload": {"context": 2048},
            "nodes": [{"name": "a", "kind": "cpu", "memory": "1.2 GiB", "bandwidth": "20 GB/s", "compute": "1 TFLOPS"},
                      {"name": "b", "kind": "cpu", "memory": "1.2 GiB", "bandwidth": "20 GB/s", "compute": "1 TFLOPS"}]}"#;
        let checked = stageplan::check(text, stageplan::check::no_model_files).unwrap();
        let plan = stageplan::plan(&checked.problem);
        assert_eq!(plan.stages.len(), 2, "{:?}", plan.diagnostics);
        let mut options = stageplan::export::ExportOptions::for_problem(&checked.problem);
        options.model = Some("model.gguf".into());
        options.hosts = [("a".to_owned(), "10.0.0.1:50052".to_owned()), ("b".to_owned(), "10.0.0.2:50052".to_owned())]
            .into_iter()
            .collect();
        let launches = stageplan::export::llama_cpp_launches(&plan, &options).unwrap();
        let log = "load_tensors: RPC0[127.0.0.1:50052] model buffer size = 10.00 MiB\n\
                   load_tensors: RPC1[10.0.0.2:50052] model buffer size = 20.00 MiB\n";
        let timings =
            Timings { prompt_tokens: 1, prompt_per_second: 1.0, predicted_tokens: 1, predicted_per_second: 1.0 };
        let receipt = Receipt::new(&plan, &launches, &crate::llama::buffers(log), &timings);
        let held = |m: &str| receipt.machines.iter().find(|r| r.machine == m).unwrap().allocated_held_bytes;
        assert_eq!((held("a"), held("b")), (10 << 20, 20 << 20), "{receipt:?}");
    }
}
