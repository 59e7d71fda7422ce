//! Where the loop's measurements come from: `--metrics FILE` (re-read every pass) and
//! `--prometheus URL` (its query API, asked every pass). Reading fails soft: a source that
//! is down or answers garbage gives no measurements for that pass, and says so in one line.
//! One look at the sources has one deadline for all its queries, so a slow Prometheus
//! cannot stretch a pass to five timeouts in a row.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use stageplan_reconcile::observe::{Observations, Query, add_prometheus};

use crate::outcome::Failure;

/// Largest Prometheus answer read.
const ANSWER_LIMIT: u64 = 32 << 20;

/// What a source that gave nothing means, in the loop's log and in `status`.
const UNMEASURED: &str = "no measurements this pass; placement stays as it is";

/// How long one look at the sources may take, all queries together, unless the loop asks
/// for less (see [`Sources::within`]).
pub(crate) const MEASURE_BUDGET: Duration = Duration::from_secs(5);

/// The measurement sources a command was given.
pub(crate) struct Sources {
    file: Option<PathBuf>,
    prometheus: Option<Prometheus>,
    /// The time one look at the sources may take (every Prometheus query in it).
    budget: Duration,
}

struct Prometheus {
    base: String,
    queries: Vec<(Query, String)>,
    agent: ureq::Agent,
}

/// The longest query URL sent: the HTTP client refuses a URI over 64 KiB (`InvalidUri(TooLong)`).
const MAX_QUERY_URL: usize = 60_000;

/// Bytes of `text` once percent-encoded in a query string.
fn url_encoded_len(text: &str) -> usize {
    text.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-._~".contains(&b) { 1 } else { 3 }).sum()
}

/// Checks `--prometheus` and `--prometheus-query NAME=PROMQL`.
///
/// # Errors
/// A URL that is not `http://host:port[/path]`, a query name that is not one of the four,
/// a query without `=`, or queries without `--prometheus`.
pub(crate) fn sources(file: Option<PathBuf>, url: Option<String>, queries: &[String]) -> Result<Sources, Failure> {
    let Some(url) = url else {
        if !queries.is_empty() {
            return Err(Failure("`--prometheus-query` needs `--prometheus URL` to ask".into()));
        }
        return Ok(Sources { file, prometheus: None, budget: MEASURE_BUDGET });
    };
    let base = url.trim_end_matches('/');
    let host = base.strip_prefix("http://").ok_or_else(|| {
        Failure(format!(
            "`--prometheus {}` must start with `http://` (e.g. `http://127.0.0.1:9090`; this build speaks plain HTTP)",
            stageplan::quote::line(&url)
        ))
    })?;
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control() || c == '?' || c == '#') {
        return Err(Failure(format!(
            "`--prometheus {}` is not a server address; give `http://host:port`",
            stageplan::quote::line(&url)
        )));
    }
    // A port past 65535 would otherwise be dropped by the HTTP client, which then asks port 80.
    let authority = host.split('/').next().unwrap_or(host);
    let port = match authority.rsplit_once(':') {
        Some((name, port)) if !name.ends_with(':') && !port.contains(']') => Some(port),
        _ => None,
    };
    if let Some(port) = port
        && !port.parse::<u16>().is_ok_and(|p| p > 0)
    {
        return Err(Failure(format!(
            "`--prometheus {}`: `{}` is not a port; give one from 1 to 65535, e.g. `http://127.0.0.1:9090`",
            stageplan::quote::line(&url),
            stageplan::quote::line(port)
        )));
    }
    let mut chosen: Vec<(Query, String)> = Query::ALL.iter().map(|q| (*q, q.default_promql().to_owned())).collect();
    for given in queries {
        let names = || Query::ALL.map(Query::name).join("`, `");
        let (name, promql) = given.split_once('=').ok_or_else(|| {
            Failure(format!(
                "`--prometheus-query {}` must be `NAME=PROMQL`, NAME one of `{}`",
                stageplan::quote::line(given),
                names()
            ))
        })?;
        let query = Query::ALL.into_iter().find(|q| q.name() == name.trim()).ok_or_else(|| {
            Failure(format!(
                "`--prometheus-query {}`: `{}` is not a query name; use `{}`",
                stageplan::quote::line(given),
                stageplan::quote::line(name),
                names()
            ))
        })?;
        if let Some(slot) = chosen.iter_mut().find(|(q, _)| *q == query) {
            slot.1 = promql.trim().to_owned();
        }
    }
    // An empty query turns that measurement off.
    chosen.retain(|(_, promql)| !promql.is_empty());
    // Queries go in the URL of a GET, which the HTTP client caps: refuse one that cannot be
    // sent, here, rather than fail on every pass.
    for (query, promql) in &chosen {
        let encoded = base.len() + "/api/v1/query?query=".len() + url_encoded_len(promql);
        if encoded > MAX_QUERY_URL {
            return Err(Failure(format!(
                "`--prometheus-query {}=…` makes a {encoded}-byte URL with `--prometheus`; at most {MAX_QUERY_URL} can be sent: match fewer names (a label rather than a list)",
                query.name()
            )));
        }
    }
    // Each query's timeout is what is left of the look's deadline (`Prometheus::ask`).
    let config = ureq::Agent::config_builder().http_status_as_error(false).build();
    Ok(Sources {
        file,
        prometheus: Some(Prometheus { base: base.to_owned(), queries: chosen, agent: config.into() }),
        budget: MEASURE_BUDGET,
    })
}

impl Sources {
    /// Whether any source was given.
    pub(crate) fn any(&self) -> bool {
        self.file.is_some() || self.prometheus.is_some()
    }

    /// Gives each look at the sources at most `budget` (at most [`MEASURE_BUDGET`]), all its
    /// queries together: the loop gives its interval, so passes keep their pace.
    pub(crate) fn within(mut self, budget: Duration) -> Sources {
        self.budget = budget.min(MEASURE_BUDGET);
        self
    }

    /// This pass's measurements; a source that is down, unreadable or too slow gives none,
    /// and the placement stays as it is (one warning per source per pass, never a stop).
    pub(crate) fn measure(&self) -> Observations {
        let (seen, problems) = self.read(Instant::now() + self.budget);
        for problem in problems {
            let problem = stageplan::quote::line(&problem);
            // The loop logs; a one-off command (`status`) has no log, and says it plainly.
            if tracing::dispatcher::has_been_set() {
                tracing::warn!(problem = %problem, "{UNMEASURED}");
            } else {
                eprintln!("warning: {problem}; {UNMEASURED}");
            }
        }
        seen
    }

    /// This moment's measurements, and one line per source that gave none (and why).
    /// Prometheus's queries share `deadline`: those it leaves no time for are not asked.
    pub(crate) fn read(&self, deadline: Instant) -> (Observations, Vec<String>) {
        let mut seen = Observations::default();
        let mut problems = Vec::new();
        if let Some(path) = &self.file {
            let read = crate::input::read_text(path)
                .map_err(|e| e.to_string())
                .and_then(|text| Observations::from_json(&text));
            match read {
                Ok(found) => seen = found,
                Err(e) => problems.push(format!("`--metrics {}`: {e}", path.display())),
            }
        }
        if let Some(prometheus) = &self.prometheus {
            // All queries or none: half a picture (times without memory) could mislead.
            let mut asked = Observations::default();
            match prometheus.ask_all(deadline, self.budget, &mut asked) {
                Ok(()) => {
                    seen.utilization.extend(asked.utilization);
                    seen.steps.extend(asked.steps);
                    seen.memory_free.extend(asked.memory_free);
                    seen.token_s.extend(asked.token_s);
                    seen.up.extend(asked.up);
                }
                Err(e) => problems.push(format!("Prometheus at {}: {e}", stageplan::quote::line(&prometheus.base))),
            }
        }
        (seen, problems)
    }
}

impl Prometheus {
    /// Every query's answer into `into`, each within what is left before `deadline`; when
    /// time runs out, the queries not answered yet are not asked (`budget` is for the message).
    fn ask_all(&self, deadline: Instant, budget: Duration, into: &mut Observations) -> Result<(), String> {
        let late = |answered: usize| {
            format!(
                "answered {answered} of {} queries in the {:.1} s a look at the measurements may take, and the rest were not asked; check the server's load, or ask less (`--prometheus-query NAME=` turns a query off)",
                self.queries.len(),
                budget.as_secs_f64()
            )
        };
        for (answered, (query, promql)) in self.queries.iter().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(late(answered));
            }
            let text =
                self.ask(promql, left).map_err(|e| if Instant::now() >= deadline { late(answered) } else { e })?;
            add_prometheus(*query, &text, into)?;
        }
        Ok(())
    }

    /// One instant query's answer, as text, within `timeout` (the whole exchange).
    fn ask(&self, promql: &str, timeout: Duration) -> Result<String, String> {
        let url = format!("{}/api/v1/query", self.base);
        let mut response = self
            .agent
            .get(&url)
            .query("query", promql)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .call()
            .map_err(|e| format!("cannot be reached ({e})"))?;
        let status = response.status();
        let text = response
            .body_mut()
            .with_config()
            .limit(ANSWER_LIMIT)
            .read_to_string()
            .map_err(|e| format!("answer unreadable ({e})"))?;
        // Prometheus answers bad queries with 400 and its JSON error, which says more.
        if !status.is_success() && !text.trim_start().starts_with('{') {
            return Err(format!("answered HTTP {status}"));
        }
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_too_long_for_a_url_is_refused_at_the_flag() {
        // A regex over 9,000 node names: about 90 KB once URL-encoded.
        let names: Vec<String> = (0..9_000).map(|i| format!("node-{i}")).collect();
        let promql = format!("stage_step_seconds{{node=~\"{}\"}}", names.join("|"));
        let given = [format!("step={promql}")];
        let error = sources(None, Some("http://127.0.0.1:9090".into()), &given).err().expect("refused");
        assert!(error.0.contains("at most 60000 can be sent"), "{error}");
        // Non-ASCII text triples once encoded: 11,000 characters of it is refused too.
        let wide = [format!("step=up{{node=\"{}\"}}", "é".repeat(11_000))];
        let error = sources(None, Some("http://127.0.0.1:9090".into()), &wide).err().expect("refused");
        assert!(error.0.contains("can be sent"), "{error}");
        let short = [String::from("step=up")];
        assert!(sources(None, Some("http://127.0.0.1:9090".into()), &short).is_ok());
    }

    #[test]
    fn a_port_must_be_one() {
        for url in ["http://host:99999", "http://host:0", "http://host:x/api", "http://host:65536"] {
            let error = sources(None, Some(url.into()), &[]).err().unwrap_or_else(|| panic!("{url} was accepted"));
            assert!(error.0.contains("is not a port"), "{url}: {error}");
        }
        for url in ["http://host:9090", "http://host", "http://[::1]:9090/prom", "http://[::1]"] {
            assert!(sources(None, Some(url.into()), &[]).is_ok(), "{url}");
        }
    }

    /// A Prometheus on 127.0.0.1 that answers every query, correctly, after `delay`, and
    /// counts the queries it was asked.
    fn slow_prometheus(delay: Duration) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::{BufRead, BufReader, Write};
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = asked.clone();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = listener.local_addr().expect("bound").port();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut lines = BufReader::new(&stream).lines();
                    while lines.next().is_some_and(|l| l.is_ok_and(|l| !l.is_empty())) {}
                    std::thread::sleep(delay);
                    let body = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
                    let _ = write!(
                        &stream,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        (format!("http://127.0.0.1:{port}"), asked)
    }

    #[test]
    fn a_slow_prometheus_is_asked_within_one_deadline_for_the_pass() {
        use std::sync::atomic::Ordering;
        let delay = Duration::from_secs(1);
        let (url, asked) = slow_prometheus(delay);
        let sources = sources(None, Some(url), &[]).expect("a valid source").within(delay * 3 / 2);
        let (seen, problems) = sources.read(Instant::now() + sources.budget);
        // Each query answers after one delay: the first answers, the second meets the
        // deadline at 1.5 delays (on a slow machine the first may), and the rest are never
        // asked (all five were, one 5 s timeout each, before). Counted, not timed, so it
        // holds on any machine.
        let queries = asked.load(Ordering::SeqCst);
        assert!(matches!(queries, 1 | 2), "{queries} queries asked: {problems:?}");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("of 5 queries in the 1.5 s"), "{problems:?}");
        // All queries or none: the one answer is not used alone.
        assert!(seen.steps.is_empty() && seen.up.is_empty(), "{problems:?}");

        // A deadline already past asks nothing, and says so.
        let before = asked.load(Ordering::SeqCst);
        let (_, problems) = sources.read(Instant::now());
        assert_eq!(asked.load(Ordering::SeqCst), before, "asked after the deadline");
        assert!(problems[0].contains("answered 0 of 5 queries"), "{problems:?}");
    }
}
