//! What an agent tells the fleet, as the record `agents/<node>` in the store: where its
//! engines listen, each process's state, and the receipts of what it serves; and how the
//! loop tells from those records that an agent is gone.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::{Receipt, State};

/// Key prefix of the agents' records, `agents/<node>`.
pub const AGENTS: &str = "agents/";

/// An agent's record: rewritten every pass, so that a record that stops changing for
/// `lease_ms` is an agent that is gone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentReport {
    pub node: String,
    /// How the other machines reach this one's engines (a host name or an IP address).
    pub address: String,
    /// Passes since the agent started: it changes every pass.
    pub beat: u64,
    /// A record unchanged this long is an agent that is gone.
    pub lease_ms: u64,
    /// The agent stopped on request: its engines are stopped too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
    /// The replicas with a stage bound here, by `deployment/replica`.
    #[serde(default)]
    pub replicas: BTreeMap<String, ReplicaReport>,
}

/// One replica as this machine runs it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaReport {
    /// The first port of the replica's block here: its rpc-servers listen from it on.
    pub port: u16,
    /// llama-server's address, where this machine serves the replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Why this machine does not run its part, when it cannot (nothing is retried until the
    /// binding or the agent's engine folder changes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    #[serde(default)]
    pub processes: Vec<ProcessReport>,
    /// What llama.cpp measured serving it beside the plan, once measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Receipt>,
    /// Why the last measurement failed, while there is no receipt (tried again later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt_failed: Option<String>,
    /// Where the machine that serves the replica dials each machine's rpc-servers (`host:port`,
    /// by machine), and every machine's launches it planned with them: the others start
    /// theirs from here, so only this machine reads the model file.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hosts: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub launches: Vec<crate::launch::Published>,
}

impl ReplicaReport {
    /// Every process of it here serves (and there is one at least).
    pub fn serving(&self) -> bool {
        self.problem.is_none()
            && !self.processes.is_empty()
            && self.processes.iter().all(|p| p.state == ProcessState::Serving)
    }
}

/// One process's state, with why it last stopped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessReport {
    pub name: String,
    pub state: ProcessState,
    /// Failures in a row.
    #[serde(default)]
    pub failures: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// The last lines of its log when it last failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_tail: Vec<String>,
}

/// [`State`] as the record spells it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessState {
    Starting,
    Serving,
    Restarting,
    Failed,
}

impl ProcessReport {
    pub fn of(name: &str, state: &State) -> ProcessReport {
        let (state, failures, last) = match state {
            State::Starting => (ProcessState::Starting, 0, None),
            State::Serving => (ProcessState::Serving, 0, None),
            State::Restarting { failures, last } => (ProcessState::Restarting, *failures, Some(last)),
            State::Failed { failures, last } => (ProcessState::Failed, *failures, Some(last)),
        };
        ProcessReport {
            name: name.to_owned(),
            state,
            failures,
            why: last.map(|l| l.why.clone()),
            log_tail: last.map(|l| l.log_tail.clone()).unwrap_or_default(),
        }
    }
}

impl AgentReport {
    /// Whether it runs what it is given: no engine left failed, no replica it cannot run (a
    /// missing binary, a crash at every start). A machine that does not is taken for down,
    /// so the loop moves its stages rather than bind them there again.
    pub fn runs_what_it_is_given(&self) -> bool {
        self.replicas
            .values()
            .all(|r| r.problem.is_none() && r.processes.iter().all(|p| p.state != ProcessState::Failed))
    }
}

/// Whether each replica (deployment, replica) serves, from every agent's report: all its
/// engines on every machine serving, llama-server among them. A replica no agent reports is
/// left out (unknown).
pub fn replicas_serving<'a>(reports: impl IntoIterator<Item = &'a AgentReport>) -> BTreeMap<(String, u32), bool> {
    let mut seen: BTreeMap<(String, u32), (bool, bool)> = BTreeMap::new();
    for report in reports {
        for (key, replica) in &report.replicas {
            let Some((deployment, number)) = key.rsplit_once('/') else { continue };
            let Ok(number) = number.parse::<u32>() else { continue };
            let entry = seen.entry((deployment.to_owned(), number)).or_insert((true, false));
            entry.0 &= !report.stopped && replica.serving();
            entry.1 |=
                replica.processes.iter().any(|p| p.name.ends_with("/server") && p.state == ProcessState::Serving);
        }
    }
    seen.into_iter().map(|(key, (all, server))| (key, all && server)).collect()
}

/// Which machines are up, as the reconcile loop sees their agents: an agent whose record has
/// not changed for its `lease_ms` of the loop's own clock is gone (no clocks compared across
/// machines), as is one that says it stopped; a machine whose agent cannot run what it is
/// given is down too ([`AgentReport::runs_what_it_is_given`]). A loop that starts waits a
/// lease before it calls anyone gone.
#[derive(Debug, Default)]
pub struct Liveness {
    /// Per node: the beat last seen and when, on this clock.
    seen: BTreeMap<String, (u64, Instant)>,
}

impl Liveness {
    /// Whether each agent of `reports` is up at `now`.
    pub fn up<'a>(
        &mut self,
        reports: impl IntoIterator<Item = &'a AgentReport>,
        now: Instant,
    ) -> BTreeMap<String, bool> {
        let mut up = BTreeMap::new();
        for report in reports {
            let seen = self.seen.entry(report.node.clone()).or_insert((report.beat, now));
            if seen.0 != report.beat {
                *seen = (report.beat, now);
            }
            let fresh = now.saturating_duration_since(seen.1) < Duration::from_millis(report.lease_ms);
            up.insert(report.node.clone(), fresh && !report.stopped && report.runs_what_it_is_given());
        }
        self.seen.retain(|node, _| up.contains_key(node));
        up
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(beat: u64, stopped: bool) -> AgentReport {
        AgentReport {
            node: "m0".into(),
            address: "127.0.0.1".into(),
            beat,
            lease_ms: 1000,
            stopped,
            replicas: BTreeMap::new(),
        }
    }

    #[test]
    fn an_agent_is_gone_once_its_record_stops_changing_for_a_lease() {
        let mut liveness = Liveness::default();
        let t0 = Instant::now();
        assert!(liveness.up([&report(1, false)], t0)["m0"]);
        assert!(liveness.up([&report(1, false)], t0 + Duration::from_millis(999))["m0"]);
        assert!(!liveness.up([&report(1, false)], t0 + Duration::from_millis(1000))["m0"]);
        // A new beat: back.
        assert!(liveness.up([&report(2, false)], t0 + Duration::from_millis(1500))["m0"]);
        // Stopped on request: gone at once.
        assert!(!liveness.up([&report(3, true)], t0 + Duration::from_millis(1600))["m0"]);
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let mut r = report(7, false);
        r.replicas.insert(
            "chat/0".into(),
            ReplicaReport {
                port: 50052,
                endpoint: Some("127.0.0.1:50054".into()),
                problem: None,
                processes: vec![ProcessReport {
                    name: "chat/0/rpc0".into(),
                    state: ProcessState::Failed,
                    failures: 5,
                    why: Some("exited with status 1".into()),
                    log_tail: vec!["bind failed".into()],
                }],
                receipt: None,
                receipt_failed: None,
                hosts: BTreeMap::new(),
                launches: Vec::new(),
            },
        );
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<AgentReport>(&text).unwrap(), r);
        assert!(!r.replicas["chat/0"].serving());
        // A replica with an engine failed does not serve; nor one without llama-server.
        assert_eq!(replicas_serving([&r]), BTreeMap::from([(("chat".to_owned(), 0), false)]));
        let mut ok = r.clone();
        ok.replicas.get_mut("chat/0").unwrap().processes[0].state = ProcessState::Serving;
        assert_eq!(replicas_serving([&ok]), BTreeMap::from([(("chat".to_owned(), 0), false)]));
        ok.replicas.get_mut("chat/0").unwrap().processes[0].name = "chat/0/server".into();
        assert_eq!(replicas_serving([&ok]), BTreeMap::from([(("chat".to_owned(), 0), true)]));
        // An engine left failed: the machine is down for the loop.
        assert!(!r.runs_what_it_is_given());
        assert!(!Liveness::default().up([&r], Instant::now())["m0"]);
    }
}
