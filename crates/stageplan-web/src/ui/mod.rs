//! The page's components: inputs (model, workload, machines, links), results (plan,
//! sharing), and this device (WebGPU); `text` holds what they all use to show a core
//! message and to save a file.

// Leptos' `#[component]` moves each component's body into a hidden inner function that
// keeps the `pub` written on it; the public component is the wrapper it generates.
#[allow(unreachable_pub)]
mod device;
#[allow(unreachable_pub)]
mod export;
#[allow(unreachable_pub)]
mod inputs;
// Components take their props by value: that is Leptos' calling convention.
#[allow(unreachable_pub, clippy::needless_pass_by_value)]
mod results;
#[allow(unreachable_pub)]
mod sweeps;
mod text;

pub use device::DevicePanel;
pub use export::ExportPanel;
pub use inputs::{ClusterPanel, ModelPanel};
pub use results::{PlanPanel, SharePanel, StagesView};
pub use sweeps::SweepsPanel;
pub(crate) use text::prose;
