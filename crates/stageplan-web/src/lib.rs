//! The stageplan web planner: the core planner compiled to WebAssembly, behind a Leptos
//! page. Nothing leaves the page: plans are computed in it, model files are read in its
//! worker (headers only), and WebGPU measures the device it runs on.
//!
//! - [`state`]: what the user edits, the scenario it makes, the share link ([`base64url`]).
//! - [`fields`]: the core's messages placed on the page's fields, machines by name.
//! - [`sweeps`]: the weight-format table and the context chart (built in the worker).
//! - [`files`]: model files dropped on the page, header only (run in the worker).
//! - [`planning`]: from the edited state to a plan and its drawing.
//! - [`app`] and [`ui`]: the components.
//! - [`worker`]: the page's side of the worker that measures the device with WebGPU, runs
//!   the plan as kernels, makes the engine exports and reads model files, and the messages
//!   both sides exchange.

pub mod app;
pub mod base64url;
pub mod fields;
pub mod files;
pub mod planning;
pub mod state;
pub mod sweeps;
pub mod ui;
pub mod worker;

pub use app::App;
