//! Measuring a device: memory bandwidth (STREAM triad), f32 and f16 matrix-multiply
//! throughput, and usable memory; every kernel's output checked against the CPU.
//!
//! Each measurement runs a warm-up, then `repetitions` timed submissions of several
//! dispatches each (so submission overhead is amortised), timed on the host from submit to
//! completion. The median is reported with the spread `(max − min) / median`.

use serde::Serialize;
use stageplan::scenario::{NodeSpec, ProbeProvenance};
use stageplan::units::{Bandwidth, Bytes, Compute};
use web_time::Instant;

use crate::context::{AdapterSummary, DeviceContext};
use crate::error::GpuError;
use crate::rng::Rng;

/// Sizes and effort of a probe.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProbeOptions {
    /// Bytes of each of the three triad arrays.
    pub stream_bytes: u64,
    /// The matrix multiply is `n × n × n`.
    pub matmul_n: u32,
    /// Timed runs per measurement (after one warm-up).
    pub repetitions: u32,
    /// Dispatches per timed run.
    pub dispatches: u32,
    /// Allocate up to this many bytes to find usable memory; `None` skips it (the default:
    /// WebGPU cannot say how much memory a device has, and probing must be asked for).
    pub memory_cap: Option<u64>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions { stream_bytes: 64 << 20, matmul_n: 1024, repetitions: 7, dispatches: 4, memory_cap: None }
    }
}

impl ProbeOptions {
    /// Small sizes: seconds on a software adapter (tests, the browser's first look).
    pub fn quick() -> ProbeOptions {
        ProbeOptions { stream_bytes: 8 << 20, matmul_n: 256, repetitions: 5, dispatches: 2, memory_cap: None }
    }
}

/// Repeated timings of one quantity.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Measurement {
    /// Median rate (bytes/s or FLOP/s).
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// `(max − min) / median`.
    pub spread: f64,
    /// Seconds per dispatch, per timed run.
    pub samples_s: Vec<f64>,
}

impl Measurement {
    fn from_times(work: f64, seconds: &[f64]) -> Measurement {
        let mut rates: Vec<f64> = seconds.iter().map(|s| work / s.max(1e-12)).collect();
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        let (min, max) = (rates[0], rates[rates.len() - 1]);
        Measurement { median, min, max, spread: (max - min) / median, samples_s: seconds.to_vec() }
    }
}

/// How much memory the device can use, and how that was found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemoryReport {
    pub bytes: u64,
    /// `allocation` (allocated up to the cap, then freed) or `max_buffer_size` (a lower bound:
    /// the largest single buffer the device allows).
    pub source: String,
}

/// A device's measured figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Probe {
    pub adapter: AdapterSummary,
    pub options: ProbeOptions,
    /// Bytes per second moved by the triad.
    pub bandwidth: Measurement,
    /// f32 FLOP/s of the tiled matrix multiply.
    pub compute_f32: Measurement,
    /// f16 FLOP/s, where the device has `shader-f16`.
    pub compute_f16: Option<Measurement>,
    /// The f32 matmul shape this device runs faster.
    pub matmul_shape: crate::context::MatmulShape,
    pub memory: MemoryReport,
}

impl Probe {
    /// The best compute rate measured (f16 where available: what model weights use).
    pub fn compute(&self) -> f64 {
        self.compute_f16.as_ref().map_or(self.compute_f32.median, |f| f.median.max(self.compute_f32.median))
    }

    /// A scenario node with the measured figures and where they came from.
    pub fn node(&self, name: &str) -> NodeSpec {
        NodeSpec {
            name: name.to_owned(),
            memory: Bytes::new(self.memory.bytes as f64).ok(),
            bandwidth: Bandwidth::new(self.bandwidth.median).ok(),
            compute: Compute::new(self.compute()).ok(),
            reserve: Bytes::new(0.0).ok(),
            probe: Some(ProbeProvenance {
                adapter: self.adapter.name.clone(),
                backend: self.adapter.backend.clone(),
                device_type: self.adapter.device_type.clone(),
                memory_source: self.memory.source.clone(),
                bandwidth_spread: self.bandwidth.spread,
                compute_spread: self.compute_f16.as_ref().unwrap_or(&self.compute_f32).spread,
                method: format!(
                    "stageplan probe: triad {} MiB × 3, matmul {n}×{n}×{n}, median of {} runs",
                    self.options.stream_bytes >> 20,
                    self.options.repetitions,
                    n = self.options.matmul_n
                ),
                engine: None,
            }),
            ..NodeSpec::default()
        }
    }
}

/// Measures `context`'s device. `progress` hears each step's name as it starts.
///
/// # Errors
/// Sizes beyond the device's limits, a lost device, or kernel results that differ from the
/// CPU reference.
pub async fn probe(
    context: &DeviceContext,
    options: &ProbeOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Probe, GpuError> {
    if options.repetitions == 0 || options.dispatches == 0 || options.matmul_n == 0 || options.stream_bytes < 16 {
        return Err(GpuError::Invalid("probe sizes and repetitions must be positive".into()));
    }
    progress("memory bandwidth");
    let bandwidth = measure_bandwidth(context, options).await?;
    progress("f32 matrix multiply");
    let compute_f32 = measure_matmul(context, options, false).await?;
    let compute_f16 = if context.matmul_f16.is_some() {
        progress("f16 matrix multiply");
        Some(measure_matmul(context, options, true).await?)
    } else {
        None
    };
    progress("usable memory");
    let memory = match options.memory_cap {
        Some(cap) => allocation_probe(context, cap).await?,
        None => MemoryReport { bytes: context.adapter.limits.max_buffer_size, source: "max_buffer_size".to_owned() },
    };
    Ok(Probe {
        adapter: context.adapter.clone(),
        options: options.clone(),
        bandwidth,
        compute_f32,
        compute_f16,
        matmul_shape: context.matmul_shape,
        memory,
    })
}

fn limit(context: &DeviceContext, what: &str, requested: u64, maximum: u64) -> Result<(), GpuError> {
    if requested > maximum {
        return Err(GpuError::Limit {
            adapter: context.adapter.name.clone(),
            what: what.to_owned(),
            requested,
            maximum,
        });
    }
    Ok(())
}

/// Times `runs` submissions of `dispatches` copies of the work `encode` records; returns
/// seconds per dispatch, one value per run, after a warm-up run.
async fn time<F>(context: &DeviceContext, options: &ProbeOptions, mut encode: F) -> Result<Vec<f64>, GpuError>
where
    F: FnMut(&mut wgpu::CommandEncoder),
{
    let mut seconds = Vec::with_capacity(options.repetitions as usize);
    for run in 0..=options.repetitions {
        let mut encoder = context.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        for _ in 0..options.dispatches {
            encode(&mut encoder);
        }
        let started = Instant::now();
        context.queue.submit([encoder.finish()]);
        context.finish().await?;
        if run > 0 {
            seconds.push(started.elapsed().as_secs_f64() / f64::from(options.dispatches));
        }
    }
    Ok(seconds)
}

/// Memory bandwidth: the triad over `options.stream_bytes` arrays, checked against the CPU.
///
/// # Errors
/// Sizes over the device's limits, a lost device, or wrong results.
pub async fn measure_bandwidth(context: &DeviceContext, options: &ProbeOptions) -> Result<Measurement, GpuError> {
    let limits = &context.adapter.limits;
    let bytes = options.stream_bytes / 16 * 16;
    limit(context, "a triad array", bytes, limits.max_storage_buffer_binding_size.min(limits.max_buffer_size))?;
    let count = (bytes / 4) as usize;
    let mut rng = Rng::new(0x5eed_0001);
    let b: Vec<f32> = (0..count).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let c: Vec<f32> = (0..count).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let scale = 0.75f32;
    let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let a_buf = context.buffer("triad a", bytes, storage);
    let b_buf = context.buffer_from("triad b", &b, storage);
    let c_buf = context.buffer_from("triad c", &c, storage);
    let params: [u32; 4] = [(count / 4) as u32, scale.to_bits(), 0, 0];
    let p_buf = context.buffer_from("triad params", &params, wgpu::BufferUsages::UNIFORM);
    let group = context.bind(&context.triad, &[&a_buf, &b_buf, &c_buf, &p_buf]);
    let workgroups = ((count / 4).div_ceil(256) as u32).clamp(1, limits.max_compute_workgroups_per_dimension);
    let seconds = time(context, options, |encoder| {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(&context.triad);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(workgroups, 1, 1);
    })
    .await?;
    // Check a spread of elements against the CPU.
    let a: Vec<f32> = context.read(&a_buf).await?;
    for i in (0..count).step_by((count / 997).max(1)) {
        let expected = f64::from(b[i]) + f64::from(scale) * f64::from(c[i]);
        let got = f64::from(a[i]);
        if !got.is_finite() || (got - expected).abs() > 1e-5 * (1.0 + expected.abs()) {
            return Err(GpuError::Mismatch(format!("triad element {i}: {got} instead of {expected}")));
        }
    }
    Ok(Measurement::from_times(3.0 * bytes as f64, &seconds))
}

/// Matrix-multiply throughput at `options.matmul_n` (f16 when `half`), checked against the CPU.
///
/// # Errors
/// Sizes over the device's limits, no `shader-f16` for `half`, a lost device, or wrong results.
pub async fn measure_matmul(
    context: &DeviceContext,
    options: &ProbeOptions,
    half: bool,
) -> Result<Measurement, GpuError> {
    let n = options.matmul_n as usize;
    let element = if half { 2 } else { 4 };
    let bytes = (n * n * element) as u64;
    let limits = &context.adapter.limits;
    limit(context, "a matrix", bytes, limits.max_storage_buffer_binding_size.min(limits.max_buffer_size))?;
    let mut rng = Rng::new(if half { 0x5eed_0016 } else { 0x5eed_0032 });
    let a: Vec<f32> = (0..n * n).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let b: Vec<f32> = (0..n * n).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let (a_buf, b_buf) = if half {
        let to_half = |v: &[f32]| v.iter().map(|&x| f16_bits(x)).collect::<Vec<u16>>();
        (context.buffer_from("a", &to_half(&a), storage), context.buffer_from("b", &to_half(&b), storage))
    } else {
        (context.buffer_from("a", &a, storage), context.buffer_from("b", &b, storage))
    };
    let c_buf = context.buffer("c", bytes, storage);
    let dims: [u32; 4] = [n as u32, n as u32, n as u32, 0];
    let d_buf = context.buffer_from("dims", &dims, wgpu::BufferUsages::UNIFORM);
    let kernel = context.matmul_for(n as u32);
    let pipeline = if half {
        context.matmul_f16.as_ref().ok_or_else(|| GpuError::Invalid("the device has no shader-f16".into()))?
    } else {
        &kernel.matmul
    };
    let group = if half {
        context.bind(pipeline, &[&a_buf, &b_buf, &c_buf, &d_buf])
    } else {
        // The f32 shader also declares the MLP bias; bind a dummy row.
        let bias = context.buffer_from("bias", &vec![0f32; n], storage);
        context.bind(pipeline, &[&a_buf, &b_buf, &c_buf, &d_buf, &bias])
    };
    // The f16 kernel is tiled.
    let (x, y) =
        if half { ((n as u32).div_ceil(64), (n as u32).div_ceil(64)) } else { kernel.workgroups(n as u32, n as u32) };
    let seconds = time(context, options, |encoder| {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(x, y, 1);
    })
    .await?;
    // Check sampled entries against an f64 product of the same (rounded) inputs.
    let round = |x: f32| if half { f32_from_half(f16_bits(x)) } else { x };
    let got: Vec<f32> = if half {
        context.read::<u16>(&c_buf).await?.into_iter().map(f32_from_half).collect()
    } else {
        context.read(&c_buf).await?
    };
    let tolerance = if half { 2e-2 } else { 1e-4 } * (n as f64).sqrt();
    for sample in 0..64 {
        let (i, j) = ((sample * 131) % n, (sample * 197 + 7) % n);
        let expected: f64 = (0..n).map(|k| f64::from(round(a[i * n + k])) * f64::from(round(b[k * n + j]))).sum();
        let value = f64::from(got[i * n + j]);
        if !value.is_finite() || (value - expected).abs() > tolerance * (1.0 + expected.abs()) {
            return Err(GpuError::Mismatch(format!(
                "{} matmul C[{i}][{j}] = {value}, CPU says {expected}",
                if half { "f16" } else { "f32" }
            )));
        }
    }
    Ok(Measurement::from_times(2.0 * (n as f64).powi(3), &seconds))
}

/// Allocates buffers until `cap` bytes (or the first failure), touching each, then frees them.
async fn allocation_probe(context: &DeviceContext, cap: u64) -> Result<MemoryReport, GpuError> {
    let chunk = context.adapter.limits.max_buffer_size.clamp(4, 256 << 20);
    let mut held = Vec::new();
    let mut total = 0u64;
    while total < cap {
        let size = chunk.min(cap - total) / 4 * 4;
        if size == 0 {
            break;
        }
        let scope = context.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buffer =
            context.buffer("allocation probe", size, wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST);
        let mut encoder = context.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        encoder.clear_buffer(&buffer, 0, None);
        context.queue.submit([encoder.finish()]);
        if scope.pop().await.is_some() {
            break;
        }
        total += size;
        held.push(buffer);
    }
    context.finish().await?;
    for buffer in held {
        buffer.destroy();
    }
    Ok(MemoryReport { bytes: total, source: "allocation".to_owned() })
}

/// IEEE binary16 bits of `x` (round to nearest, ties away from zero).
pub(crate) fn f16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exponent = ((bits >> 23) & 0xff) as i32;
    let mantissa = bits & 0x7f_ffff;
    if exponent == 0xff {
        return sign | 0x7c00 | if mantissa != 0 { 0x200 } else { 0 };
    }
    let e = exponent - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        // Subnormal: the value is m × 2^-24 with m = (1.mantissa) >> (14 − e).
        let m = mantissa | 0x80_0000;
        let shift = (14 - e) as u32;
        return sign | ((m + (1 << (shift - 1))) >> shift) as u16;
    }
    // A carry out of the mantissa rounds up into the exponent, as it should.
    sign | ((((e as u32) << 10) | (mantissa >> 13)) + ((mantissa >> 12) & 1)) as u16
}

/// The f32 value of binary16 bits.
pub(crate) fn f32_from_half(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((h >> 10) & 0x1f);
    let mantissa = f32::from(h & 0x3ff);
    match exponent {
        0 => sign * mantissa * 2f32.powi(-24),
        0x1f => sign * f32::INFINITY,
        e => sign * (1.0 + mantissa / 1024.0) * 2f32.powi(e - 15),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_precision_round_trips() {
        for x in [0.0f32, 1.0, -2.5, 0.333, 1e-3, 65504.0, -0.000061] {
            let back = f32_from_half(f16_bits(x));
            assert!((back - x).abs() <= x.abs() * 1e-3 + 1e-7, "{x} -> {back}");
        }
        assert_eq!(f16_bits(1.0), 0x3c00);
        assert_eq!(f16_bits(-2.0), 0xc000);
    }
}
