//! What the agent reads from llama.cpp: a completion's timings from llama-server, and the
//! buffers each device allocated from its log.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A completion's own timings, as llama-server reports them (`timings` of `/completion`).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Timings {
    pub prompt_tokens: u64,
    pub prompt_per_second: f64,
    pub predicted_tokens: u64,
    pub predicted_per_second: f64,
}

/// The longest a completion may take.
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(600);
/// The most of a completion's answer read.
const COMPLETION_LIMIT: u64 = 16 << 20;

/// How long llama-server's `/metrics` may take to answer.
const METRICS_TIMEOUT: Duration = Duration::from_secs(2);
/// The most of a `/metrics` answer read.
const METRICS_LIMIT: u64 = 1 << 20;

/// llama-server's own Prometheus metrics (`/metrics`, on with `LLAMA_ARG_ENDPOINT_METRICS`).
///
/// # Errors
/// The server cannot be reached or does not answer 200.
pub fn metrics(address: SocketAddr) -> Result<String, String> {
    exchange(address, "GET", "/metrics", "", METRICS_TIMEOUT, METRICS_LIMIT)
}

/// One HTTP/1.0 exchange with llama-server: the body of a 200 answer.
fn exchange(
    address: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    timeout: Duration,
    limit: u64,
) -> Result<String, String> {
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let fail = |e: std::io::Error| format!("llama-server at {address}: {e}");
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5)).map_err(fail)?;
    stream.set_read_timeout(Some(timeout)).map_err(fail)?;
    stream.write_all(request.as_bytes()).map_err(fail)?;
    let mut response = Vec::new();
    stream.take(limit).read_to_end(&mut response).map_err(fail)?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").ok_or(format!("llama-server at {address}: no HTTP response"))?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        let status = head.lines().next().unwrap_or_default();
        return Err(format!("llama-server at {address} answered `{}`", stageplan::quote::line(status)));
    }
    Ok(body.to_owned())
}

/// A prompt of exactly `tokens` tokens, as ids llama-server takes in place of text (any
/// vocabulary of a hundred tokens has them): text would tokenize to a length no one chose.
pub fn prompt(tokens: usize) -> Vec<u32> {
    (0..tokens).map(|i| 16 + (i % 64) as u32).collect()
}

/// Asks llama-server at `address` for `tokens` tokens after `prompt`, token ids (greedy, the
/// end of text ignored, nothing cached from an earlier request) and returns its timings.
///
/// # Errors
/// The server cannot be reached, answers with another status than 200, or without timings.
pub fn complete(address: SocketAddr, prompt: &[u32], tokens: u32) -> Result<Timings, String> {
    let body = serde_json::json!({
        "prompt": prompt,
        "n_predict": tokens,
        "temperature": 0,
        "ignore_eos": true,
        "cache_prompt": false,
    })
    .to_string();
    let body = exchange(address, "POST", "/completion", &body, COMPLETION_TIMEOUT, COMPLETION_LIMIT)?;
    let json: serde_json::Value =
        serde_json::from_str(&body).map_err(|e| format!("llama-server at {address}: its answer is not JSON: {e}"))?;
    let timings = &json["timings"];
    let number = |field: &str| timings[field].as_f64().ok_or(format!("llama-server's answer has no `timings.{field}`"));
    Ok(Timings {
        prompt_tokens: number("prompt_n")? as u64,
        prompt_per_second: number("prompt_per_second")?,
        predicted_tokens: number("predicted_n")? as u64,
        predicted_per_second: number("predicted_per_second")?,
    })
}

/// One buffer llama.cpp allocated: `RPC0[127.0.0.1:50052] model buffer size = 31.25 MiB`.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    /// `CPU`, `CUDA0`, `RPC0[127.0.0.1:50052]`, …
    pub device: String,
    /// `model`, `KV`, `RS`, `compute`, `output`, …
    pub kind: String,
    pub bytes: f64,
}

impl Buffer {
    /// Held for the model's life: weights and caches (what a plan's weights, KV and embedding
    /// count), not the compute and output buffers.
    pub fn held(&self) -> bool {
        matches!(self.kind.as_str(), "model" | "KV" | "RS")
    }

    /// An RPC device's endpoint, `host:port`.
    pub fn rpc_endpoint(&self) -> Option<&str> {
        let (_, endpoint) = self.device.split_once('[')?;
        endpoint.strip_suffix(']')
    }
}

/// Every buffer a llama.cpp log reports (`… buffer size = N MiB`).
pub fn buffers(log: &str) -> Vec<Buffer> {
    log.lines()
        .filter_map(|line| {
            let (head, value) = line.split_once(" buffer size =")?;
            let mib: f64 = value.trim().strip_suffix("MiB")?.trim().parse().ok()?;
            let mut words = head.split_whitespace().rev();
            let kind = words.next()?.to_owned();
            let device = words.next()?.to_owned();
            Some(Buffer { device, kind, bytes: mib * 1024.0 * 1024.0 })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_as_llama_cpp_logs_them() {
        let log = "load_tensors: RPC0[127.0.0.1:50052] model buffer size =    31.25 MiB\n\
                   load_tensors:   CPU_Mapped model buffer size =     4.00 MiB\n\
                   llama_kv_cache:        CPU KV buffer size =     2.50 MiB\n\
                   sched_reserve: RPC0[127.0.0.1:50052] compute buffer size = 1.5 MiB\n\
                   a line that says buffer size = nothing\n";
        let got = buffers(log);
        assert_eq!(got.len(), 4);
        assert_eq!(
            (got[0].device.as_str(), got[0].kind.as_str(), got[0].rpc_endpoint()),
            ("RPC0[127.0.0.1:50052]", "model", Some("127.0.0.1:50052"))
        );
        assert_eq!(got[1].bytes, 4.0 * 1024.0 * 1024.0);
        assert!(got[2].held() && !got[3].held());
        assert_eq!(got[2].rpc_endpoint(), None);
    }
}
