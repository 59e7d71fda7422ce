//! The page's components: inputs (model, workload, machines, links), results (plan,
//! sharing), this device (WebGPU), and the embed widget.

mod device;
mod export;
mod inputs;
mod results;
mod widget;

pub use device::DevicePanel;
pub use export::ExportPanel;
pub use inputs::{ClusterPanel, ModelPanel};
pub use results::{PlanPanel, SharePanel, StagesView};
pub use widget::Widget;
