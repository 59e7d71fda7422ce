//! Calibration tooling: how the core's fitted speed terms are made.
//!
//! The core plans with constants (`stageplan::calibration::FITTED`, in its `fitted.rs`) and
//! the cost terms that apply them; it does not carry the means of fitting them. This crate
//! does, for `cargo xtask calibrate` and for the tests that hold the constants to the
//! published figures:
//!
//! - [`table`] reads the measurement table (`tests/calibration/`: `measurements.csv`,
//!   `devices.csv`, `models.csv` and the model configs it names) into [`fit::Sample`]s, each
//!   row's problem built from the core's types and planned by the core's cost model at
//!   spec-sheet peaks;
//! - [`fit`] fits the terms to those samples (a Huber fit of log ratios, each source's rows
//!   weighted by `1 ÷ √rows`) and measures what they are worth with each source left out.
//!
//! Like the core, it does no I/O: the caller reads the files and passes their text.

pub mod fit;
pub mod table;

#[cfg(test)]
mod tests;
