//! One wgpu device and everything built on it once: queue, pipelines, timing.
//!
//! The same code runs natively (Vulkan, Metal, DX12, GL) and in the browser (WebGPU).
//! Waiting differs: natively `Device::poll` drives callbacks; in the browser the JS event
//! loop does, so every wait is an `.await` on a channel the callback completes.

use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::error::GpuError;

/// What an adapter is and can do.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AdapterSummary {
    /// Position in [`Gpu::adapters`].
    pub index: usize,
    pub name: String,
    pub vendor: u32,
    pub device_id: u32,
    pub backend: String,
    /// `discrete_gpu`, `integrated_gpu`, `virtual_gpu`, `cpu` or `other`.
    pub device_type: String,
    /// A software adapter (lavapipe, SwiftShader, WARP): correct, but not a GPU's speed.
    pub software: bool,
    pub driver: String,
    pub limits: LimitsSummary,
    pub features: FeaturesSummary,
}

/// The limits that matter for compute.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LimitsSummary {
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_compute_workgroup_size_x: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroups_per_dimension: u32,
    pub max_compute_workgroup_storage_size: u32,
}

/// Optional features that change what can be measured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FeaturesSummary {
    pub shader_f16: bool,
    pub subgroups: bool,
    pub timestamp_query: bool,
}

/// The entry point: a wgpu instance over every backend this build has.
#[derive(Debug)]
pub struct Gpu {
    instance: wgpu::Instance,
}

impl Default for Gpu {
    fn default() -> Self {
        Gpu::new()
    }
}

impl Gpu {
    /// An instance over all backends (natively narrowed by `WGPU_BACKEND`, e.g. `gl`).
    pub fn new() -> Gpu {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: backends(),
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        Gpu { instance }
    }

    async fn raw_adapters(&self) -> Vec<wgpu::Adapter> {
        #[cfg(target_arch = "wasm32")]
        {
            // The browser offers one adapter, through `requestAdapter`.
            let options = wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            };
            self.instance.request_adapter(&options).await.into_iter().collect()
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.instance.enumerate_adapters(backends()).await
        }
    }

    /// Every adapter, described.
    pub async fn adapters(&self) -> Vec<AdapterSummary> {
        self.raw_adapters().await.iter().enumerate().map(|(i, a)| summarize(i, a)).collect()
    }

    /// Opens a device on adapter `index` with everything that adapter offers.
    ///
    /// # Errors
    /// [`GpuError::NoAdapter`] when there is none at `index`; [`GpuError::Device`] when the
    /// adapter refuses a device.
    pub async fn open(&self, index: usize) -> Result<DeviceContext, GpuError> {
        let adapters = self.raw_adapters().await;
        let count = adapters.len();
        let adapter =
            adapters.into_iter().nth(index).ok_or(GpuError::NoAdapter { requested: index, available: count })?;
        DeviceContext::new(index, adapter).await
    }
}

fn backends() -> wgpu::Backends {
    #[cfg(target_arch = "wasm32")]
    {
        wgpu::Backends::BROWSER_WEBGPU
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        wgpu::Backends::from_env().unwrap_or(wgpu::Backends::all())
    }
}

fn summarize(index: usize, adapter: &wgpu::Adapter) -> AdapterSummary {
    let info = adapter.get_info();
    let limits = adapter.limits();
    let features = adapter.features();
    let device_type = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => "discrete_gpu",
        wgpu::DeviceType::IntegratedGpu => "integrated_gpu",
        wgpu::DeviceType::VirtualGpu => "virtual_gpu",
        wgpu::DeviceType::Cpu => "cpu",
        wgpu::DeviceType::Other => "other",
    };
    AdapterSummary {
        index,
        name: if info.name.is_empty() { format!("{:?} adapter", info.backend) } else { info.name.clone() },
        vendor: info.vendor,
        device_id: info.device,
        backend: format!("{:?}", info.backend).to_lowercase(),
        device_type: device_type.to_owned(),
        software: info.device_type == wgpu::DeviceType::Cpu,
        driver: [info.driver.as_str(), info.driver_info.as_str()].join(" ").trim().to_owned(),
        limits: LimitsSummary {
            max_buffer_size: limits.max_buffer_size,
            max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
            max_compute_workgroup_size_x: limits.max_compute_workgroup_size_x,
            max_compute_invocations_per_workgroup: limits.max_compute_invocations_per_workgroup,
            max_compute_workgroups_per_dimension: limits.max_compute_workgroups_per_dimension,
            max_compute_workgroup_storage_size: limits.max_compute_workgroup_storage_size,
        },
        features: FeaturesSummary {
            shader_f16: features.contains(wgpu::Features::SHADER_F16),
            subgroups: features.contains(wgpu::Features::SUBGROUP),
            timestamp_query: features.contains(wgpu::Features::TIMESTAMP_QUERY),
        },
    }
}

/// The two shapes of f32 matrix multiply (`shaders/matmul.wgsl`, `shaders/matmul_direct.wgsl`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MatmulShape {
    /// 64×64 tiles staged in workgroup memory: the GPU shape.
    Tiled,
    /// 4×4 register blocks straight from storage, no barriers: the CPU-implementation shape.
    Direct,
}

/// The matmul and MLP pipelines of one shape.
#[derive(Debug)]
pub(crate) struct Matmul {
    pub shape: MatmulShape,
    pub matmul: wgpu::ComputePipeline,
    pub mlp: wgpu::ComputePipeline,
}

impl Matmul {
    /// Workgroups for an `m × n` output.
    pub(crate) fn workgroups(&self, m: u32, n: u32) -> (u32, u32) {
        match self.shape {
            MatmulShape::Tiled => (n.div_ceil(64), m.div_ceil(64)),
            MatmulShape::Direct => ((n / 4).div_ceil(16), m.div_ceil(4).div_ceil(4)),
        }
    }
}

/// A device with its queue and pipelines, built once and reused for every measurement and
/// every stage it runs.
#[derive(Debug)]
pub struct DeviceContext {
    pub adapter: AdapterSummary,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) triad: wgpu::ComputePipeline,
    tiled: Matmul,
    direct: Matmul,
    /// The faster shape on this device, timed once when the context was built.
    pub matmul_shape: MatmulShape,
    pub(crate) matmul_f16: Option<wgpu::ComputePipeline>,
    /// Errors the device reported outside any scope; checked after each piece of work.
    lost: Arc<Mutex<Option<String>>>,
}

impl DeviceContext {
    async fn new(index: usize, adapter: wgpu::Adapter) -> Result<DeviceContext, GpuError> {
        let summary = summarize(index, &adapter);
        let wanted = wgpu::Features::SHADER_F16;
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("stageplan"),
                required_features: adapter.features() & wanted,
                required_limits: adapter.limits(),
                ..Default::default()
            })
            .await
            .map_err(|e| GpuError::Device { adapter: summary.name.clone(), message: e.to_string() })?;
        let lost = Arc::new(Mutex::new(None));
        let sink = Arc::clone(&lost);
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut slot) = sink.lock() {
                slot.get_or_insert_with(|| e.to_string());
            }
        }));
        let sink = Arc::clone(&lost);
        device.set_device_lost_callback(move |reason, message| {
            if let Ok(mut slot) = sink.lock() {
                slot.get_or_insert_with(|| format!("device lost ({reason:?}): {message}"));
            }
        });

        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let stream = device.create_shader_module(wgpu::include_wgsl!("shaders/stream.wgsl"));
        let matmul_module = device.create_shader_module(wgpu::include_wgsl!("shaders/matmul.wgsl"));
        let pipeline = |module: &wgpu::ShaderModule, entry: &str| {
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: None,
                module,
                entry_point: Some(entry),
                compilation_options: wgpu::PipelineCompilationOptions::default(),
                cache: None,
            })
        };
        let direct_module = device.create_shader_module(wgpu::include_wgsl!("shaders/matmul_direct.wgsl"));
        let triad = pipeline(&stream, "triad");
        let tiled = Matmul {
            shape: MatmulShape::Tiled,
            matmul: pipeline(&matmul_module, "matmul"),
            mlp: pipeline(&matmul_module, "mlp"),
        };
        let direct = Matmul {
            shape: MatmulShape::Direct,
            matmul: pipeline(&direct_module, "matmul"),
            mlp: pipeline(&direct_module, "mlp"),
        };
        let matmul_f16 = summary.features.shader_f16.then(|| {
            let module = device.create_shader_module(wgpu::include_wgsl!("shaders/matmul_f16.wgsl"));
            pipeline(&module, "matmul")
        });
        if let Some(error) = scope.pop().await {
            return Err(GpuError::Shader { adapter: summary.name.clone(), message: error.to_string() });
        }
        let mut context = DeviceContext {
            adapter: summary,
            device,
            queue,
            triad,
            tiled,
            direct,
            matmul_shape: MatmulShape::Tiled,
            matmul_f16,
            lost,
        };
        context.matmul_shape = context.faster_shape().await?;
        Ok(context)
    }

    /// Times both matmul shapes once on a 256³ product and returns the faster.
    async fn faster_shape(&self) -> Result<MatmulShape, GpuError> {
        const N: u32 = 256;
        let storage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        let a = self.buffer("tune a", u64::from(N * N) * 4, storage);
        let b = self.buffer("tune b", u64::from(N * N) * 4, storage);
        let c = self.buffer("tune c", u64::from(N * N) * 4, storage);
        let bias = self.buffer("tune bias", u64::from(N) * 4, storage);
        let dims = self.buffer_from("tune dims", &[N, N, N, 0], wgpu::BufferUsages::UNIFORM);
        let mut best = (f64::INFINITY, MatmulShape::Tiled);
        for kernel in [&self.tiled, &self.direct] {
            let group = self.bind(&kernel.matmul, &[&a, &b, &c, &dims, &bias]);
            let (x, y) = kernel.workgroups(N, N);
            let mut fastest = f64::INFINITY;
            for _ in 0..3 {
                let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
                {
                    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                    pass.set_pipeline(&kernel.matmul);
                    pass.set_bind_group(0, &group, &[]);
                    pass.dispatch_workgroups(x, y, 1);
                }
                let started = web_time::Instant::now();
                self.queue.submit([encoder.finish()]);
                self.finish().await?;
                fastest = fastest.min(started.elapsed().as_secs_f64());
            }
            if fastest < best.0 {
                best = (fastest, kernel.shape);
            }
        }
        Ok(best.1)
    }

    /// The matmul pipelines to use for an output of width `n`: the faster shape, unless it
    /// needs `n` to be a multiple of 4 and it is not.
    pub(crate) fn matmul_for(&self, n: u32) -> &Matmul {
        if self.matmul_shape == MatmulShape::Direct && n.is_multiple_of(4) { &self.direct } else { &self.tiled }
    }

    /// A storage buffer holding `data`.
    pub(crate) fn buffer_from<T: bytemuck::Pod>(
        &self,
        label: &str,
        data: &[T],
        usage: wgpu::BufferUsages,
    ) -> wgpu::Buffer {
        use wgpu::util::DeviceExt;
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: bytemuck::cast_slice(data),
            usage,
        })
    }

    /// An uninitialised buffer of `size` bytes.
    pub(crate) fn buffer(&self, label: &str, size: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage,
            mapped_at_creation: false,
        })
    }

    /// A bind group for `pipeline`'s group 0 over `buffers`, bound in order from 0.
    pub(crate) fn bind(&self, pipeline: &wgpu::ComputePipeline, buffers: &[&wgpu::Buffer]) -> wgpu::BindGroup {
        let entries: Vec<wgpu::BindGroupEntry<'_>> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    /// Waits until everything submitted so far has run.
    pub(crate) async fn finish(&self) -> Result<(), GpuError> {
        // A one-byte map after the work completes only when the work does, natively and in
        // the browser alike.
        let marker = self.buffer("marker", 8, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        encoder.clear_buffer(&marker, 0, None);
        self.queue.submit([encoder.finish()]);
        self.map(&marker).await?;
        marker.unmap();
        self.check()
    }

    /// Maps `buffer` for reading and waits for it.
    pub(crate) async fn map(&self, buffer: &wgpu::Buffer) -> Result<(), GpuError> {
        let (tx, rx) = futures_channel::oneshot::channel();
        buffer.slice(..).map_async(wgpu::MapMode::Read, move |result| {
            let _ = tx.send(result);
        });
        #[cfg(not(target_arch = "wasm32"))]
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| self.failure(e.to_string()))?;
        rx.await
            .map_err(|_| self.failure("the map callback was dropped".into()))?
            .map_err(|e| self.failure(e.to_string()))
    }

    /// Copies `source` into a staging buffer and reads it back as `T`s.
    pub(crate) async fn read<T: bytemuck::Pod>(&self, source: &wgpu::Buffer) -> Result<Vec<T>, GpuError> {
        let size = source.size();
        let staging = self.buffer("staging", size, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        encoder.copy_buffer_to_buffer(source, 0, &staging, 0, size);
        self.queue.submit([encoder.finish()]);
        self.map(&staging).await?;
        let data = {
            let view = staging.slice(..).get_mapped_range().map_err(|e| self.failure(e.to_string()))?;
            bytemuck::cast_slice::<u8, T>(&view).to_vec()
        };
        staging.unmap();
        self.check()?;
        Ok(data)
    }

    fn failure(&self, message: String) -> GpuError {
        GpuError::Lost { adapter: self.adapter.name.clone(), message }
    }

    /// Reports an error the device raised outside any scope.
    pub(crate) fn check(&self) -> Result<(), GpuError> {
        let message = self.lost.lock().ok().and_then(|slot| slot.clone());
        match message {
            Some(message) => Err(self.failure(message)),
            None => Ok(()),
        }
    }
}
