//! Users against latency: what one llama-server's users see as their number grows, each
//! count planned and simulated as `stageplan plan --users N` does — the page's users chart.

use super::{Found, Load, MAX_USERS, Served, ServingError, Targets, Trial, Trials};

/// One count of users on the enabled machines: what they saw, or `None` where their slots
/// and KV caches do not fit.
#[derive(Clone, Debug, PartialEq)]
pub struct UsersPoint {
    pub users: u32,
    pub served: Option<Served>,
}

/// Users 1, 2, 4, … up to [`MAX_USERS`] on the enabled machines (one entry per problem
/// node), until a count's slots do not fit (that count is the last point); and the most
/// users that meet `targets`, and what stops one more.
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
    let mut users = 1;
    loop {
        let served = match trials.run(users)? {
            Trial::Met(ran) => {
                met = users;
                Some(ran.2)
            }
            Trial::Missed(_, ran) => Some(ran.2),
            Trial::Failed(_) => None,
        };
        let fits = served.is_some();
        points.push(UsersPoint { users, served });
        if !fits || users >= MAX_USERS {
            break;
        }
        users = users.saturating_mul(2).min(MAX_USERS);
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
            let answered = super::super::answer(&problem, Some(point.users), None).unwrap();
            assert_eq!(point.served, answered.served, "{} users", point.users);
        }
        assert!(super::super::answer(&problem, Some(last.users), None).unwrap().served.is_none());
        let capacity = super::super::capacity(&problem, Load::llama_server(&problem, 1), targets).unwrap();
        assert_eq!((found.users, &found.limit), (capacity.users, &capacity.limit));
        assert!(found.users >= 1, "{found:?}");
    }
}
