//! Proving a plan by running it: an MLP layer stack (matmul + bias + GELU per layer, f32)
//! split into a plan's stages, each stage on its own device.
//!
//! Activations cross stage boundaries the way they cross machines: read back to the host
//! from one device and uploaded to the next. Micro-batches stream through the pipeline:
//! at each tick every stage works on a different micro-batch, all submitted before any is
//! awaited, so separate devices overlap. Requests (micro-batches) are routed across
//! replicas of the pipeline by a [`Router`]. The output is checked against a CPU
//! reference computed in f64 on fresh random inputs.
//!
//! **Error bound.** With weights scaled to keep activations of order 1, an f32 dot product
//! of width `w` differs from the f64 one by about `w × 2^-24` relative; over `L` layers the
//! check allows `|gpu − cpu| ≤ 1e-3 × (1 + |cpu|)` per element, which f32 meets with a wide
//! margin for `w ≤ 4096`, `L ≤ 128`. NaN or infinity never passes.

use std::ops::Range;

use serde::Serialize;
use web_time::Instant;

use crate::context::DeviceContext;
use crate::error::GpuError;
use crate::rng::Rng;
use crate::router::Router;

/// The workload: `layers` MLP layers of `width`, `micro_batches` of `tokens` rows each.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MlpSpec {
    pub width: u32,
    pub layers: usize,
    pub tokens: u32,
    pub micro_batches: u32,
    pub seed: u64,
}

/// One stage: the layers it runs and the device (an index into the contexts) it runs on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageSpec {
    /// The plan's node this stage stands for.
    pub node: String,
    pub device: usize,
    pub layers: Range<usize>,
}

/// Per-stage results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageReport {
    pub node: String,
    pub device: String,
    pub layers: [usize; 2],
    /// Median seconds of this stage's layers on one micro-batch, measured alone.
    pub measured_s: f64,
    /// Seconds to read one micro-batch's activations back and upload them to the next
    /// device (0 for the last stage).
    pub transfer_s: f64,
    /// What the planner's cost model predicts for the same work, if asked.
    pub predicted_s: Option<f64>,
    /// `measured / predicted`.
    pub ratio: Option<f64>,
}

/// What a sharded run measured and checked.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShardedReport {
    pub spec: MlpSpec,
    pub stages: Vec<StageReport>,
    /// Micro-batches each replica served.
    pub requests_per_replica: Vec<u32>,
    /// Wall time of the pipelined run, all replicas one after another.
    pub pipeline_s: f64,
    /// Rows (tokens) per second through the pipeline.
    pub tokens_per_s: f64,
    /// Largest `|gpu − cpu| / (1 + |cpu|)` over every output element.
    pub max_error: f64,
}

/// The weights and biases of every layer, from the seed.
pub fn weights(spec: &MlpSpec) -> Vec<(Vec<f32>, Vec<f32>)> {
    let w = spec.width as usize;
    let mut rng = Rng::new(spec.seed ^ 0x5151_5151);
    // Variance 2/w keeps GELU activations of order 1 through many layers.
    let scale = (6.0 / w as f32).sqrt();
    (0..spec.layers)
        .map(|_| {
            let matrix = (0..w * w).map(|_| rng.uniform(-scale, scale)).collect();
            let bias = (0..w).map(|_| rng.uniform(-0.1, 0.1)).collect();
            (matrix, bias)
        })
        .collect()
}

/// The micro-batch inputs, from the seed.
pub fn inputs(spec: &MlpSpec) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(spec.seed);
    let rows = (spec.tokens * spec.width) as usize;
    (0..spec.micro_batches).map(|_| (0..rows).map(|_| rng.uniform(-1.0, 1.0)).collect()).collect()
}

/// GELU, tanh form, as the shader computes it.
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x)).tanh())
}

/// The CPU reference in f64: every layer on `input` (rows × width).
pub fn reference(spec: &MlpSpec, layers: &[(Vec<f32>, Vec<f32>)], input: &[f32]) -> Vec<f64> {
    let w = spec.width as usize;
    let mut x: Vec<f64> = input.iter().map(|&v| f64::from(v)).collect();
    for (matrix, bias) in layers {
        let mut y = vec![0.0f64; x.len()];
        for (row_in, row_out) in x.chunks(w).zip(y.chunks_mut(w)) {
            for (k, &xk) in row_in.iter().enumerate() {
                let weights = &matrix[k * w..(k + 1) * w];
                for (out, &wk) in row_out.iter_mut().zip(weights) {
                    *out += xk * f64::from(wk);
                }
            }
            for (out, &b) in row_out.iter_mut().zip(bias) {
                *out = gelu(*out + f64::from(b));
            }
        }
        x = y;
    }
    x
}

/// A stage's buffers on its device, built once.
struct Resident<'a> {
    context: &'a DeviceContext,
    layers: Range<usize>,
    /// Activations ping-pong between these two.
    buffers: [wgpu::Buffer; 2],
    groups: Vec<wgpu::BindGroup>,
    rows: u32,
    width: u32,
}

impl<'a> Resident<'a> {
    fn new(
        context: &'a DeviceContext,
        spec: &MlpSpec,
        layers: Range<usize>,
        all: &[(Vec<f32>, Vec<f32>)],
    ) -> Result<Resident<'a>, GpuError> {
        let (rows, width) = (spec.tokens, spec.width);
        let activation = u64::from(rows) * u64::from(width) * 4;
        let weight = u64::from(width) * u64::from(width) * 4;
        let limits = &context.adapter.limits;
        let maximum = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size);
        for (what, bytes) in [("an activation buffer", activation), ("a weight matrix", weight)] {
            if bytes > maximum {
                return Err(GpuError::Limit {
                    adapter: context.adapter.name.clone(),
                    what: what.into(),
                    requested: bytes,
                    maximum,
                });
            }
        }
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        let buffers =
            [context.buffer("activations 0", activation, usage), context.buffer("activations 1", activation, usage)];
        let dims = context.buffer_from("dims", &[rows, width, width, 0u32], wgpu::BufferUsages::UNIFORM);
        let mut groups = Vec::with_capacity(layers.len());
        for (step, layer) in layers.clone().enumerate() {
            let (matrix, bias) = &all[layer];
            let w = context.buffer_from("weights", matrix, wgpu::BufferUsages::STORAGE);
            let b = context.buffer_from("bias", bias, wgpu::BufferUsages::STORAGE);
            let (input, output) = (&buffers[step % 2], &buffers[(step + 1) % 2]);
            groups.push(context.bind(&context.matmul_for(width).mlp, &[input, &w, output, &dims, &b]));
        }
        Ok(Resident { context, layers, buffers, groups, rows, width })
    }

    /// The buffer holding this stage's output after its layers ran.
    fn output(&self) -> &wgpu::Buffer {
        &self.buffers[self.layers.len() % 2]
    }

    /// Records every layer of the stage.
    fn encode(&self, encoder: &mut wgpu::CommandEncoder) {
        let kernel = self.context.matmul_for(self.width);
        let (x, y) = kernel.workgroups(self.rows, self.width);
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(&kernel.mlp);
        for group in &self.groups {
            pass.set_bind_group(0, group, &[]);
            pass.dispatch_workgroups(x, y, 1);
        }
    }

    /// Uploads `input`, runs the stage and submits; the output stays on the device.
    fn submit(&self, input: &[f32]) {
        self.context.queue.write_buffer(&self.buffers[0], 0, bytemuck::cast_slice(input));
        let mut encoder = self.context.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        self.encode(&mut encoder);
        self.context.queue.submit([encoder.finish()]);
    }
}

/// Runs the MLP split into `stages` on `contexts`, `replicas` times over (each replica a
/// list of stages on its own devices), routes the micro-batches with `router`, checks the
/// outputs, and times each stage. `predicted` holds the cost model's seconds per stage.
///
/// # Errors
/// Stages that do not tile the layers, sizes over a device's limits, a lost device, or
/// outputs that differ from the CPU reference.
pub async fn run_sharded(
    contexts: &[DeviceContext],
    replicas: &[Vec<StageSpec>],
    spec: &MlpSpec,
    router: &mut dyn Router,
    predicted: Option<&[f64]>,
) -> Result<ShardedReport, GpuError> {
    if spec.width == 0 || spec.tokens == 0 || spec.micro_batches == 0 || spec.layers == 0 {
        return Err(GpuError::Invalid("width, tokens, micro-batches and layers must be positive".into()));
    }
    let first = replicas.first().ok_or_else(|| GpuError::Invalid("no replica to run".into()))?;
    for stages in replicas {
        let mut next = 0;
        for stage in stages {
            if stage.layers.start != next || stage.layers.end <= stage.layers.start || stage.device >= contexts.len() {
                return Err(GpuError::Invalid(format!(
                    "stage `{}` (layers {:?}, device {}) does not continue the pipeline at layer {next}",
                    stage.node, stage.layers, stage.device
                )));
            }
            next = stage.layers.end;
        }
        if next != spec.layers {
            return Err(GpuError::Invalid(format!("the stages end at layer {next}, the stack has {}", spec.layers)));
        }
    }
    let all = weights(spec);
    let inputs = inputs(spec);
    let built: Vec<Vec<Resident<'_>>> = replicas
        .iter()
        .map(|stages| stages.iter().map(|s| Resident::new(&contexts[s.device], spec, s.layers.clone(), &all)).collect())
        .collect::<Result<_, _>>()?;

    // Each stage alone, on the first micro-batch, to time it.
    let mut reports = Vec::new();
    let mut boundary = inputs[0].clone();
    for (stage, resident) in first.iter().zip(&built[0]) {
        let mut samples = Vec::new();
        let mut transfers = Vec::new();
        let mut output = Vec::new();
        for run in 0..4 {
            let started = Instant::now();
            resident.submit(&boundary);
            resident.context.finish().await?;
            let ran = started.elapsed().as_secs_f64();
            let started = Instant::now();
            output = resident.context.read::<f32>(resident.output()).await?;
            let moved = started.elapsed().as_secs_f64();
            if run > 0 {
                samples.push(ran);
                transfers.push(moved);
            }
        }
        samples.sort_by(f64::total_cmp);
        transfers.sort_by(f64::total_cmp);
        let measured = samples[samples.len() / 2];
        let last = stage.layers.end == spec.layers;
        let prediction = predicted.and_then(|p| p.get(reports.len()).copied());
        reports.push(StageReport {
            node: stage.node.clone(),
            device: resident.context.adapter.name.clone(),
            layers: [stage.layers.start, stage.layers.end],
            measured_s: measured,
            transfer_s: if last { 0.0 } else { transfers[transfers.len() / 2] },
            predicted_s: prediction,
            ratio: prediction.map(|p| measured / p),
        });
        boundary = output;
    }

    // The pipelined run: route each micro-batch, then stream each replica's share.
    let mut assigned: Vec<Vec<usize>> = vec![Vec::new(); replicas.len()];
    for m in 0..spec.micro_batches as usize {
        let replica = router.route(format!("request-{m}").as_bytes()).min(replicas.len() - 1);
        assigned[replica].push(m);
    }
    let started = Instant::now();
    let mut outputs: Vec<Option<Vec<f32>>> = vec![None; spec.micro_batches as usize];
    for (stages, batches) in built.iter().zip(&assigned) {
        let count = stages.len();
        // in_flight[s]: the micro-batch stage s works on this tick, with its input.
        let mut carry: Vec<Option<(usize, Vec<f32>)>> = vec![None; count];
        let mut queue = batches.iter().copied();
        for _tick in 0..batches.len() + count - 1 {
            // Shift: each stage takes what the one before produced last tick.
            let mut work: Vec<Option<(usize, Vec<f32>)>> = vec![None; count];
            work[0] = queue.next().map(|m| (m, inputs[m].clone()));
            for s in 1..count {
                work[s] = carry[s - 1].take();
            }
            for (resident, item) in stages.iter().zip(&work) {
                if let Some((_, input)) = item {
                    resident.submit(input);
                }
            }
            for (s, (resident, item)) in stages.iter().zip(work).enumerate() {
                if let Some((m, _)) = item {
                    let out = resident.context.read::<f32>(resident.output()).await?;
                    if s + 1 == count {
                        outputs[m] = Some(out);
                    } else {
                        carry[s] = Some((m, out));
                    }
                }
            }
        }
    }
    let pipeline_s = started.elapsed().as_secs_f64();

    let mut max_error = 0.0f64;
    for (m, output) in outputs.iter().enumerate() {
        let output =
            output.as_ref().ok_or_else(|| GpuError::Mismatch(format!("micro-batch {m} produced no output")))?;
        let expected = reference(spec, &all, &inputs[m]);
        for (i, (&got, &want)) in output.iter().zip(&expected).enumerate() {
            let got = f64::from(got);
            let error = (got - want).abs() / (1.0 + want.abs());
            if !got.is_finite() || error > 1e-3 {
                return Err(GpuError::Mismatch(format!(
                    "micro-batch {m}, element {i}: {got} where the CPU has {want}"
                )));
            }
            max_error = max_error.max(error);
        }
    }
    Ok(ShardedReport {
        spec: spec.clone(),
        stages: reports,
        requests_per_replica: assigned.iter().map(|a| a.len() as u32).collect(),
        pipeline_s,
        tokens_per_s: f64::from(spec.micro_batches * spec.tokens) / pipeline_s,
        max_error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_keeps_activations_bounded() {
        let spec = MlpSpec { width: 32, layers: 24, tokens: 4, micro_batches: 1, seed: 3 };
        let out = reference(&spec, &weights(&spec), &inputs(&spec)[0]);
        let peak = out.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(peak > 1e-3 && peak < 1e3, "{peak}");
    }
}
