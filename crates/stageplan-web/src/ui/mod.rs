//! The page's components: inputs (model, workload, machines, links), results (plan,
//! sharing), this device (WebGPU, with the `gpu` feature), and the embed widget.

#[cfg(feature = "gpu")]
mod device;
mod export;
mod inputs;
mod results;
mod widget;

#[cfg(feature = "gpu")]
pub use device::DevicePanel;
pub use export::ExportPanel;
pub use inputs::{ClusterPanel, ModelPanel};
pub use results::{PlanPanel, SharePanel, StagesView};
pub use widget::Widget;
