//! The page's components: inputs (model, workload, machines, links) and results (plan,
//! this device, sharing).

mod inputs;
mod results;

pub use inputs::{ClusterPanel, ModelPanel};
pub use results::{DevicePanel, PlanPanel, SharePanel};
