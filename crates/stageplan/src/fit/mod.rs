//! A user's own measurements fitted through the planner: llama-bench results turned into
//! the scenario node that predicts them ([`bench`](mod@bench)), and a probed CPU's decode rates fitted
//! to its own llama-bench runs ([`engine`]). Each prediction is a plan, so this module sits
//! above the planner; the constants plans use are [`crate::calibration`]'s, below it.

pub mod bench;
pub mod engine;

pub use engine::{EngineRun, fit_engine};
