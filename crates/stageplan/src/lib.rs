//! stageplan: split a large model across mismatched machines, and prove the split is best.
//!
//! A [`Scenario`] names a model (a preset, a Hugging Face `config.json`, or later a file
//! header), a workload, the machines and the links between them. [`check()`], the one road
//! every surface takes, reads and checks it into a [`Problem`]; [`plan()`] returns the best contiguous split of layers over a
//! subset and order of the machines, with memory and time per stage, the bottleneck, the
//! nodes left out and why, and the splits other tools would choose on the same cost model.
//!
//! The crate is pure computation: no I/O, no threads, no clock. It builds unchanged for
//! `wasm32-unknown-unknown`, so the browser planner and the CLI run the same code.
//!
//! - [`model`]: tensors, weight formats, parameter counts.
//! - [`device`]: a machine's kind, backend and measured efficiency: plain vocabulary.
//! - [`cost`]: the cost model and its formulas.
//! - [`calibration`]: speed terms fitted to published llama.cpp measurements.
//! - [`planner`]: the `optimal` search and the baselines.
//! - [`fit`]: a user's llama-bench results fitted through the planner.
//! - [`mod@plan`]: the result and its JSON contract.
//! - [`planner::replan`]: re-planning a running cluster with the fewest moved bytes.
//! - [`view`]: a plan laid out for drawing, shared by the web page and the widget.
//! - [`export`]: a plan as llama.cpp, vLLM, exo, Kubernetes, DeepSpeed and Megatron inputs.
//! - [`limits`]: the largest input accepted, stated once.
//! - [`quote`]: text from input made safe for shells, YAML, comments and terminals.

pub mod calibration;
pub mod check;
pub mod cost;
pub mod demand;
pub mod device;
pub mod engine;
pub mod error;
pub mod export;
pub mod fit;
pub mod import;
mod json;
pub mod limits;
pub mod model;
pub mod plan;
pub mod planner;
pub mod presets;
pub mod problem;
pub mod quote;
pub mod scenario;
pub mod serving;
pub mod sweep;
pub mod tensor_type;
pub mod units;
pub mod verdict;
pub mod view;

pub use check::{Checked, ScenarioInput, check};
pub use cost::CostModel;
pub use error::{ModelError, ScenarioError};
pub use model::{Model, WeightFormat};
pub use plan::Plan;
pub use planner::replan::{Replan, ReplanOptions, replan};
pub use planner::{plan, plan_with};
pub use problem::Problem;
pub use scenario::{Objective, Policy, Scenario};
pub use tensor_type::TensorType;
