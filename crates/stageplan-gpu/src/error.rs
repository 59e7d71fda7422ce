//! What can go wrong with a GPU, and what to do about it.

/// A GPU operation that failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GpuError {
    /// No adapter at the index asked for (or none at all).
    #[error("{}", no_adapter(*.requested, *.available))]
    NoAdapter { requested: usize, available: usize },
    /// The adapter would not give a device.
    #[error("`{adapter}` refused a device: {message}; update the GPU driver, or pick another adapter")]
    Device { adapter: String, message: String },
    /// A shader did not compile or a pipeline did not build.
    #[error("`{adapter}` rejected a shader: {message}")]
    Shader { adapter: String, message: String },
    /// A buffer or dispatch needs more than the device allows.
    #[error("`{what}` needs {requested} but `{adapter}` allows at most {maximum}; use smaller sizes")]
    Limit { adapter: String, what: String, requested: u64, maximum: u64 },
    /// The device was lost or reported an error while working.
    #[error("`{adapter}` failed while working: {message}; retry, and check the driver if it repeats")]
    Lost { adapter: String, message: String },
    /// Results that do not match the CPU reference.
    #[error("results differ from the CPU reference: {0}")]
    Mismatch(String),
    /// A plan or option that cannot run.
    #[error("{0}")]
    Invalid(String),
}

fn no_adapter(requested: usize, available: usize) -> String {
    if available == 0 {
        "no GPU adapter found: install a Vulkan, Metal, DX12 or GL driver (Mesa's lavapipe gives a software one), or in a browser enable WebGPU".to_owned()
    } else {
        format!(
            "no adapter {requested}: there are {available} (0 to {}); run `stageplan probe` to list them",
            available - 1
        )
    }
}
