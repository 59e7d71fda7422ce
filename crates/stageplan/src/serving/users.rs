//! Users against latency: what one llama-server's users see as their number grows, each
//! count planned and simulated as `stageplan plan --users N` does — the page's users chart.

use super::{Found, Limit, Load, Served, ServingError, Targets, Trial, Trials, most_users};

/// How far past a target the users chart goes on: vLLM queues what it does not run, so its
/// plans always fit and the wait past its `--max-num-seqs` grows without end; a chart drawn
/// to that wait would flatten everything before it.
pub(super) const SWAMPED: f64 = 10.0;

/// One count of users on the enabled machines: what they saw, or `None` where their slots
/// and KV caches do not fit.
#[derive(Clone, Debug, PartialEq)]
pub struct UsersPoint {
    pub users: u32,
    pub served: Option<Served>,
}

/// Users 1, 2, 4, … up to [`most_users`] of its engine on the enabled machines (one entry
/// per problem node), until a count's slots do not fit or it misses a target by more than
/// ten times (that count is the last point); and the most users that meet `targets`,
/// and what stops one more.
///
/// # Errors
/// As [`super::capacity`]: an engine other than llama.cpp, targets it refuses, a plan for
/// one user that does not fit or has a tensor-parallel group.
pub fn by_users(
    problem: &crate::Problem,
    enabled: &[bool],
    targets: Targets,
) -> Result<(Vec<UsersPoint>, Found), ServingError> {
    let load = Load::llama_server(problem, 1);
    let mut trials = Trials::new(problem, Some(enabled), load, targets)?;
    let (mut points, mut met) = (Vec::new(), 0);
    let (mut users, most) = (1, most_users(problem.workload.engine));
    loop {
        let (served, swamped) = match trials.run(users)? {
            Trial::Met(ran) => {
                met = users;
                (Some(ran.2), false)
            }
            Trial::Missed(Limit::Target { missed, .. }, ran) => (Some(ran.2), missed.seen_s > SWAMPED * missed.asked_s),
            Trial::Missed(_, ran) => (Some(ran.2), false),
            Trial::Failed(_) => (None, false),
        };
        let fits = served.is_some();
        points.push(UsersPoint { users, served });
        if !fits || swamped || users >= most {
            break;
        }
        users = users.saturating_mul(2).min(most);
    }
    // The search starts at the most the points saw meet the targets.
    let found = super::search_on(problem, Some(enabled), load, targets, met.max(1))?;
    Ok((points, Found { users: found.users, limit: found.limit }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each point is what `plan --users N` answers, the line ends where the slots stop
    /// fitting, and the count found meets the targets as the capacity search's does.
    #[test]
    fn each_point_is_what_that_many_users_see() {
        let json = r#"{"model": {"preset": "llama-3.2-1b", "weights": "q8_0"},
            "workload": {"context": 4096, "prompt": 128, "response": 64},
            "nodes": [{"name": "gpu", "device": "rtx-3060-12gb", "memory": "4 GB"}]}"#;
        let problem = crate::check(json, crate::check::no_model_files).unwrap().problem;
        let targets = Targets { ttft_s: Some(2.0), tpot_s: None, percentile: super::super::Percentile::P95 };
        let (points, found) = by_users(&problem, &[true], targets).unwrap();
        let counts: Vec<u32> = points.iter().map(|p| p.users).collect();
        assert_eq!(counts[..4], [1, 2, 4, 8]);
        let last = points.last().unwrap();
        assert!(last.served.is_none() && points[..points.len() - 1].iter().all(|p| p.served.is_some()), "{counts:?}");
        for point in &points[..points.len() - 1] {
            let answered = super::super::answer(&problem, crate::demand::Demand::of_users(point.users)).unwrap();
            assert_eq!(point.served, answered.served, "{} users", point.users);
        }
        assert!(super::super::answer(&problem, crate::demand::Demand::of_users(last.users)).unwrap().served.is_none());
        let capacity = super::super::capacity(&problem, Load::llama_server(&problem, 1), targets).unwrap();
        assert_eq!((found.users, &found.limit), (capacity.users, &capacity.limit));
        assert!(found.users >= 1, "{found:?}");
    }

    /// vLLM queues what it does not run, so its plans fit at any count: the line ends at
    /// the first count whose wait is past [`SWAMPED`] times the target.
    #[test]
    fn a_vllm_line_ends_where_the_queue_swamps_the_target() {
        let json = r#"{"model": {"preset": "llama-3.2-1b", "weights": "q8_0"}, "engine": "vllm",
            "workload": {"context": 8192, "prompt": 512, "response": 64},
            "nodes": [{"name": "gpu", "device": "rtx-3060-12gb"}]}"#;
        let problem = crate::check(json, crate::check::no_model_files).unwrap().problem;
        let targets = Targets { ttft_s: Some(2.0), tpot_s: None, percentile: super::super::Percentile::P95 };
        let (points, found) = by_users(&problem, &[true], targets).unwrap();
        let p95 = |p: &UsersPoint| p.served.as_ref().unwrap().ttft_s[1];
        let (last, before) = points.split_last().unwrap();
        assert!(p95(last) > SWAMPED * 2.0 && before.iter().all(|p| p95(p) <= SWAMPED * 2.0), "{points:?}");
        assert!(last.users < super::super::MAX_VLLM_USERS && found.users > 0, "{points:?} {found:?}");
    }
}
