//! The agent's `/metrics`, in Prometheus's text format, under the names the reconcile loop
//! queries by default: `stageplan_node_up` for its machine, each engine's state, each
//! receipt's planned and measured figures, and the `llama-server`s it runs with their own
//! counters (`llamacpp:tokens_predicted_total`, …) labelled with their deployment and
//! replica — so `stageplan reconcile --prometheus` measures each pipeline's token time.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::report::{AgentReport, ProcessState};

/// What `/metrics` draws from: the agent's last report and where its llama-servers listen,
/// by replica (`deployment/replica`).
#[derive(Clone, Debug, Default)]
pub struct Exposed {
    pub report: Option<AgentReport>,
    pub servers: Vec<(String, SocketAddr)>,
}

/// Shared between the agent's passes, which update it, and the thread that serves it.
pub type Shared = Arc<Mutex<Exposed>>;

/// Serves `/metrics` from `shared` on `listener`, one connection at a time, until the
/// process ends.
pub fn serve(listener: TcpListener, shared: Shared) {
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = answer(stream, &shared);
        }
    });
}

fn answer(mut stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut first = String::new();
    // The request line, and no more than a few KiB of it.
    BufReader::new((&stream).take(8192)).read_line(&mut first)?;
    let (status, body) = if first.starts_with("GET /metrics ") || first.starts_with("GET /metrics?") {
        let exposed = shared.lock().unwrap_or_else(PoisonError::into_inner).clone();
        ("200 OK", exposition(&exposed, &|address| crate::llama::metrics(address).ok()))
    } else {
        ("404 Not Found", "the agent serves /metrics\n".to_owned())
    };
    write!(
        stream,
        "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The text of `/metrics`: this agent's figures, then each llama-server's own (`fetch`ed),
/// each of its series labelled with its deployment and replica.
pub fn exposition(exposed: &Exposed, fetch: &dyn Fn(SocketAddr) -> Option<String>) -> String {
    let mut out = String::new();
    let Some(report) = &exposed.report else { return out };
    let node = escape(&report.node);
    let _ = writeln!(out, "# HELP stageplan_node_up 1 while this machine's agent runs what it is given.");
    let _ = writeln!(out, "# TYPE stageplan_node_up gauge");
    let up = u8::from(!report.stopped && report.runs_what_it_is_given());
    let _ = writeln!(out, "stageplan_node_up{{node=\"{node}\"}} {up}");
    let _ = writeln!(out, "# HELP stageplan_engine_serving 1 while the engine serves, 0 while it starts or fails.");
    let _ = writeln!(out, "# TYPE stageplan_engine_serving gauge");
    let _ = writeln!(out, "# HELP stageplan_engine_failures The engine's failures in a row.");
    let _ = writeln!(out, "# TYPE stageplan_engine_failures gauge");
    for (key, replica) in &report.replicas {
        let labels = replica_labels(key, &node);
        for p in &replica.processes {
            let process = escape(&p.name);
            let serving = u8::from(p.state == ProcessState::Serving);
            let _ = writeln!(out, "stageplan_engine_serving{{{labels},process=\"{process}\"}} {serving}");
            let _ = writeln!(out, "stageplan_engine_failures{{{labels},process=\"{process}\"}} {}", p.failures);
        }
    }
    let _ = writeln!(out, "# HELP stageplan_receipt_tokens_per_second A receipt's speed, planned and measured.");
    let _ = writeln!(out, "# TYPE stageplan_receipt_tokens_per_second gauge");
    let _ = writeln!(out, "# HELP stageplan_receipt_held_bytes A receipt's weights and caches per machine.");
    let _ = writeln!(out, "# TYPE stageplan_receipt_held_bytes gauge");
    let _ = writeln!(out, "# HELP stageplan_receipt_far 1 when something the receipt measured is outside its band.");
    let _ = writeln!(out, "# TYPE stageplan_receipt_far gauge");
    for (key, replica) in &report.replicas {
        let Some(receipt) = &replica.receipt else { continue };
        let labels = replica_labels(key, &node);
        for (phase, speed) in [("decode", &receipt.decode), ("prefill", &receipt.prefill)] {
            for (kind, value) in [("planned", speed.planned_per_s), ("measured", speed.measured_per_s)] {
                let _ = writeln!(
                    out,
                    "stageplan_receipt_tokens_per_second{{{labels},phase=\"{phase}\",kind=\"{kind}\"}} {}",
                    number(value)
                );
            }
        }
        for m in &receipt.machines {
            let machine = escape(&m.machine);
            for (kind, value) in [("planned", m.planned_held_bytes), ("allocated", m.allocated_held_bytes)] {
                let _ = writeln!(
                    out,
                    "stageplan_receipt_held_bytes{{{labels},machine=\"{machine}\",kind=\"{kind}\"}} {value}"
                );
            }
        }
        let _ = writeln!(out, "stageplan_receipt_far{{{labels}}} {}", u8::from(!receipt.far.is_empty()));
    }
    for (key, address) in &exposed.servers {
        if let Some(text) = fetch(*address) {
            out.push_str(&relabel(&text, &replica_labels(key, &node)));
        }
    }
    out
}

/// `deployment="…",replica="…",node="…"` of a replica key `deployment/replica`.
fn replica_labels(key: &str, node: &str) -> String {
    let (deployment, replica) = key.rsplit_once('/').unwrap_or((key, ""));
    format!("deployment=\"{}\",replica=\"{}\",node=\"{node}\"", escape(deployment), escape(replica))
}

/// A label value as the text format writes it.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A sample value: Prometheus spells the infinities and NaN its own way.
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf".to_owned() } else { "-Inf".to_owned() }
    } else {
        value.to_string()
    }
}

/// Every sample line of `text` with `labels` added first; comments and anything that is not
/// a sample line are dropped (a second `# TYPE` for the same name across servers would be
/// an error to Prometheus).
fn relabel(text: &str, labels: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line.find(|c: char| c == '{' || c.is_whitespace()).unwrap_or(line.len());
        let (name, rest) = line.split_at(name_end);
        let valid_name = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        // Its labels (inside the braces), then a value and perhaps a timestamp.
        let (inner, sample) = match rest.strip_prefix('{') {
            Some(braced) => match braced.rfind('}') {
                Some(end) => (braced[..end].trim(), &braced[end + 1..]),
                None => continue,
            },
            None => ("", rest),
        };
        let mut words = sample.split_whitespace();
        let value_ok = words.next().is_some_and(|v| v.parse::<f64>().is_ok());
        let rest_ok = words.next().is_none_or(|t| t.parse::<i64>().is_ok()) && words.next().is_none();
        if !valid_name || !value_ok || !rest_ok {
            continue;
        }
        let joined = if inner.is_empty() { labels.to_owned() } else { format!("{labels},{inner}") };
        let _ = writeln!(out, "{name}{{{joined}}} {}", sample.trim());
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::report::{ProcessReport, ReplicaReport};

    #[test]
    fn the_exposition_labels_each_engine_and_each_llama_server_series() {
        let mut replicas = BTreeMap::new();
        replicas.insert(
            "chat/0".to_owned(),
            ReplicaReport {
                port: 50052,
                endpoint: Some("10.0.0.1:50054".into()),
                problem: None,
                processes: vec![ProcessReport {
                    name: "chat/0/server".into(),
                    state: ProcessState::Serving,
                    failures: 0,
                    why: None,
                    log_tail: Vec::new(),
                }],
                receipt: None,
                receipt_failed: None,
                hosts: BTreeMap::new(),
                launches: Vec::new(),
            },
        );
        let report = AgentReport {
            node: "m0".into(),
            address: "10.0.0.1".into(),
            beat: 3,
            lease_ms: 10_000,
            stopped: false,
            replicas,
        };
        let exposed =
            Exposed { report: Some(report), servers: vec![("chat/0".into(), "127.0.0.1:50054".parse().unwrap())] };
        let llama = "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.\n\
                     # TYPE llamacpp:tokens_predicted_total counter\n\
                     llamacpp:tokens_predicted_total 40\n\
                     llamacpp:requests_processing{slot=\"0\"} 1\n\
                     not a metric line { 1\n";
        let text = exposition(&exposed, &|_| Some(llama.to_owned()));
        assert!(text.contains("stageplan_node_up{node=\"m0\"} 1\n"), "{text}");
        assert!(
            text.contains(
                "stageplan_engine_serving{deployment=\"chat\",replica=\"0\",node=\"m0\",process=\"chat/0/server\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("llamacpp:tokens_predicted_total{deployment=\"chat\",replica=\"0\",node=\"m0\"} 40\n"),
            "{text}"
        );
        assert!(
            text.contains("llamacpp:requests_processing{deployment=\"chat\",replica=\"0\",node=\"m0\",slot=\"0\"} 1\n"),
            "{text}"
        );
        assert!(!text.contains("not a metric"), "{text}");
        assert_eq!(text.matches("# TYPE llamacpp").count(), 0, "{text}");
    }

    proptest::proptest! {
        /// Whatever a server answers, what passes on is sample lines only, each labelled
        /// first with the replica's labels: nothing it sends can break the exposition.
        #[test]
        fn whatever_llama_server_answers_only_labelled_samples_pass(
            text in proptest::string::string_regex("(([a-z_:]{1,8}(\\{[a-z=\"0-9,]{0,12}\\})?|#|.{0,6}) ?[-+0-9.eE]{0,6}( [0-9]{0,4})?\n){0,8}").unwrap(),
            noise in ".{0,40}",
        ) {
            let labels = "deployment=\"d\",replica=\"0\",node=\"m\"";
            for input in [text.clone(), noise.clone(), format!("{text}{noise}")] {
                for line in relabel(&input, labels).lines() {
                    let (name, rest) = line.split_once('{').expect("labelled");
                    proptest::prop_assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'), "{line}");
                    proptest::prop_assert!(rest.starts_with(labels), "{line}");
                    let value = line.rsplit_once("} ").expect("a value").1.split_whitespace().next().unwrap_or_default();
                    proptest::prop_assert!(value.parse::<f64>().is_ok(), "{line}");
                }
            }
        }
    }
}
