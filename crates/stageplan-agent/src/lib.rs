//! The agent: what runs on each machine of a fleet and starts the engines the reconcile loop
//! bound to it.
//!
//! - [`Supervisor`] runs a set of named processes ([`Spec`]: a program and its arguments,
//!   started without a shell), each in a process group of its own, with its output in a log
//!   file; it tells when each serves ([`Ready`]), restarts one that exits with a doubling
//!   backoff, gives up on one that keeps failing to start (reported with its last log lines,
//!   not retried in a tight loop), and stops what is no longer wanted — the whole group, with
//!   a grace period.
//! - [`guard`] is what [`Supervisor`] starts each engine under when given one (the
//!   `stageplan-guard` binary): it leads the engine's process group and kills it when the
//!   agent is gone, so nothing outlives an agent that was killed outright.
//! - [`llama`] reads what llama.cpp measured: a completion's timings from llama-server, the
//!   buffers each device allocated from its log; [`Receipt`] sets them beside the plan.

pub mod fleet;
pub mod guard;
pub mod launch;
pub mod llama;
pub mod metrics;
mod receipt;
pub mod report;
mod supervisor;

pub use receipt::{HELD_BAND, MachineReceipt, Receipt, SPEED_BAND, SpeedReceipt};
pub use supervisor::{Failure, Guard, Policy, Ready, Spec, State, Supervisor};
