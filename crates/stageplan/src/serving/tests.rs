use super::draws::{arrivals, lengths};
use super::*;

fn cost() -> ServingCost {
    ServingCost { step_s: 0.05, sequence_s: 0.02, token_s: 0.01, stage_shares: vec![1.0], kv_tokens: 1 << 20 }
}

const LLAMA_SERVER: Scheduler = Scheduler::LlamaServer { n_batch: 2048, n_ubatch: 512 };

fn load(users: u32) -> Load {
    Load { users, prompt: 128, response: 64, requests_per_user: 3, scheduler: LLAMA_SERVER, rate: None, spread: 0.0 }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9 * b.abs().max(1.0)
}

#[test]
fn one_user_waits_for_its_prompt_then_one_step_a_token() {
    let served = simulate(load(1), &cost()).unwrap();
    let ttft = 0.05 + 127.0 * 0.01;
    assert!(close(served.ttft_s[0], ttft) && close(served.ttft_s[1], ttft), "{served:?}");
    assert!(close(served.tpot_s[0], 0.05), "{served:?}");
    // Three requests one after another: each its prompt and 63 steps.
    assert!(close(served.wall_s, 3.0 * (ttft + 63.0 * 0.05)), "{served:?}");
    assert!(close(served.tokens_per_s, 192.0 / served.wall_s));
}

#[test]
fn users_who_start_together_share_their_prompts_step_and_every_decode_step() {
    // Four prompts in one step (one graph) of 512 tokens, then steps of four sequences.
    let served = simulate(load(4), &cost()).unwrap();
    assert!(close(served.ttft_s[0], 0.05 + 511.0 * 0.01), "{served:?}");
    assert!(close(served.tpot_s[0], 0.05 + 3.0 * 0.02), "{served:?}");
    assert!(close(served.tpot_s[1], 0.05 + 3.0 * 0.02), "{served:?}");
}

#[test]
fn a_prompt_past_n_batch_takes_several_steps() {
    let served = simulate(Load { prompt: 5000, ..load(1) }, &cost()).unwrap();
    // 2048 + 2048 + 904 tokens in three steps, of four, four and two graphs of 512.
    let ttft = 10.0 * 0.05 + (5000.0 - 3.0) * 0.01;
    assert!(close(served.ttft_s[0], ttft), "{served:?}");
}

#[test]
fn a_prompt_that_arrives_mid_stream_slows_the_others_tokens() {
    // Two 3000-token prompts and a 2048-token step put the users a step apart: each
    // one's next prompt then lands among the other's tokens.
    let staggered = Load {
        users: 2,
        prompt: 3000,
        response: 10,
        requests_per_user: 4,
        scheduler: LLAMA_SERVER,
        rate: None,
        spread: 0.0,
    };
    let (two, one) =
        (simulate(staggered, &cost()).unwrap(), simulate(Load { users: 1, ..staggered }, &cost()).unwrap());
    assert!(close(one.tpot_s[1], 0.05), "alone, every gap is one step: {one:?}");
    assert!(two.tpot_s[1] > 10.0 * one.tpot_s[1], "{two:?} vs {one:?}");
    assert!(two.tokens_per_s > one.tokens_per_s, "two users are served faster in all");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// Any load ends, every request counted: its first token after one step at least,
    /// no gap between tokens shorter than one sequence's step, no more tokens a second
    /// than every user stepping alone in parallel would get, and the percentiles in order.
    #[test]
    fn every_load_ends_and_its_figures_hold_together(
        users in 1u32..=12,
        prompt in 1u32..=3000,
        response in 1u32..=40,
        requests_per_user in 1u32..=3,
        n_batch in 1u32..=4096,
        n_ubatch in 1u32..=1024,
        step_s in 1e-3..1.0f64,
        sequence_s in 0.0..1e-1f64,
        token_s in 1e-5..1e-1f64,
    ) {
        let load = Load { users, prompt, response, requests_per_user, scheduler: Scheduler::LlamaServer { n_batch, n_ubatch }, rate: None, spread: 0.0 };
        let cost = ServingCost { step_s, sequence_s, token_s, stage_shares: vec![1.0], kv_tokens: 0 };
        let served = simulate(load, &cost).unwrap();
        // Times are differences of one clock summed step by step: each sum rounds by up
        // to half an ulp of the clock, so a gap of a 1 ms step read at 127 s is off by
        // about 1e-14 s, far more than 1e-12 of the step (a 1,369-token prompt at 93 ms a
        // token, then 33 tokens of 1 ms, failed so).
        let rounding = 4.0 * f64::EPSILON * served.wall_s;
        proptest::prop_assert!(served.ttft_s[0] >= step_s * (1.0 - 1e-12) - rounding);
        proptest::prop_assert!(served.ttft_s[0] <= served.ttft_s[1] && served.tpot_s[0] <= served.tpot_s[1]);
        if response > 1 {
            proptest::prop_assert!(served.tpot_s[0] >= step_s * (1.0 - 1e-12) - rounding, "{served:?}");
        }
        let tokens = f64::from(users) * f64::from(requests_per_user) * f64::from(response);
        proptest::prop_assert!((served.tokens_per_s * served.wall_s - tokens).abs() <= 1e-6 * tokens);
        proptest::prop_assert!(served.tokens_per_s <= f64::from(users) / step_s * (1.0 + 1e-9));
    }
}

/// One GPU of 12 GB and a 1B model: about 80 users' slots of 4,096 tokens fit.
fn one_gpu(memory: &str, extra_nodes: &str) -> crate::Problem {
    let json = format!(
        r#"{{"model": {{"preset": "llama-3.2-1b", "weights": "q8_0"}},
            "workload": {{"context": 4096, "prompt": 128, "response": 64}},
            "nodes": [{{"name": "gpu", "device": "rtx-3060-12gb", "memory": "{memory}"}}{extra_nodes}]}}"#
    );
    crate::check(json.as_str(), crate::check::no_model_files).unwrap().problem
}

fn targets(ttft_s: Option<f64>, tpot_s: Option<f64>) -> Targets {
    Targets { ttft_s, tpot_s, percentile: Percentile::P95 }
}

/// What `users` users of `problem` see, planned and simulated as [`capacity`] does.
fn served_by(problem: &crate::Problem, users: u32) -> Option<Served> {
    let problem = with_batch(problem, users);
    let plan = crate::plan_with(&problem, crate::planner::PlanOptions::bare());
    let cost = ServingCost::of(&problem, &plan).ok()?;
    simulate(Load { users, ..load(1) }, &cost).ok()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 12, ..Default::default() })]

    /// The search's answer is what trying every count gives: each count up to it meets
    /// the targets and the next does not; and started at any count (as replicas start
    /// it at what fewer machines met), it finds the same.
    #[test]
    fn capacity_is_what_trying_every_count_gives(
        tpot_steps in 1.0..2.5f64,
        ttft_prompts in proptest::option::of(1.0..12.0f64),
        p50 in proptest::bool::ANY,
        from in 0.0..1.5f64,
    ) {
        let problem = one_gpu("12 GB", "");
        let one = served_by(&problem, 1).unwrap();
        let targets = Targets {
            ttft_s: ttft_prompts.map(|n| one.ttft_s[0] * n),
            tpot_s: Some(one.tpot_s[0] * tpot_steps),
            percentile: if p50 { Percentile::P50 } else { Percentile::P95 },
        };
        let found = capacity(&problem, load(1), targets).unwrap();
        for users in 1..=found.users + 1 {
            let meets = served_by(&problem, users).is_some_and(|s| targets.missed(&s).is_none());
            proptest::prop_assert_eq!(meets, users <= found.users, "{} users; found {}", users, found.users);
        }
        proptest::prop_assert_eq!(found.load.users, found.users.max(1));
        let from = (f64::from(found.users) * from).round() as u32;
        let started = search_on(&problem, None, load(1), targets, from).unwrap();
        proptest::prop_assert_eq!(started.users, found.users, "started at {}", from);
        proptest::prop_assert_eq!(started.load.users, found.users.max(1));
    }
}

#[test]
fn capacity_names_what_stops_one_more_user() {
    let problem = one_gpu("12 GB", "");
    let one = served_by(&problem, 1).unwrap();
    // Per token: a user more than the target allows.
    let found = capacity(&problem, load(1), targets(None, Some(one.tpot_s[1] * 1.5))).unwrap();
    assert!(found.users > 1, "{found:?}");
    let Limit::Target { users, missed } = found.limit else { panic!("{:?}", found.limit) };
    assert_eq!((users, missed.target), (found.users + 1, "tpot"));
    assert!(missed.seen_s > missed.asked_s && found.served.tpot_s[1] <= missed.asked_s);
    assert_eq!(found.plan.stages.len(), 1);
    // Memory: no time target binds, the slots' KV caches fill the GPU.
    let found = capacity(&problem, load(1), targets(Some(crate::demand::MAX_TARGET_S), None)).unwrap();
    assert_eq!(found.limit, Limit::Memory { users: found.users + 1 }, "{found:?}");
    assert!((40..=200).contains(&found.users), "{found:?}");
    // None: one user misses the first-token target; the nearest is one user.
    let found = capacity(&problem, load(1), targets(Some(one.ttft_s[0] / 2.0), None)).unwrap();
    assert_eq!(found.users, 0);
    assert!(matches!(found.limit, Limit::Target { users: 1, missed: Missed { target: "ttft", .. } }));
    assert_eq!(found.load.users, 1);
}

#[test]
fn capacity_refuses_what_it_cannot_answer() {
    let problem = one_gpu("12 GB", "");
    assert_eq!(capacity(&problem, load(1), targets(None, None)), Err(ServingError::NoTarget));
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-7, 3601.0] {
        assert_eq!(
            capacity(&problem, load(1), targets(Some(1.0), Some(bad))),
            Err(ServingError::Target { field: "tpot" })
        );
    }
    assert_eq!(
        capacity(&problem, Load { prompt: 0, ..load(1) }, targets(Some(1.0), None)),
        Err(ServingError::Zero { field: "prompt" })
    );
    assert_eq!(capacity(&one_gpu("1 GB", ""), load(1), targets(Some(1.0), None)), Err(ServingError::NoPlan));
    // More slots than llama-server starts with; a request longer than a slot.
    let engine = problem.workload.engine;
    assert_eq!(
        answer(&problem, crate::demand::Demand::of_users(MAX_USERS + 1)),
        Err(ServingError::Slots { users: MAX_USERS + 1, engine })
    );
    let mut long = problem.clone();
    long.workload.response = long.workload.context - long.workload.prompt + 1;
    let (prompt, response, context) = (long.workload.prompt, long.workload.response, long.workload.context);
    let refused = ServingError::Request { prompt, response, context };
    assert_eq!(capacity(&long, load(1), targets(Some(1.0), None)).map(|found| found.users), Err(refused.clone()));
    assert_eq!(answer(&long, crate::demand::Demand::of_users(2)).map(|answer| answer.served), Err(refused));
}

/// Two GPUs of 2 GB over a 1 Gbit/s link: the model needs both, a pipeline.
fn pipeline() -> crate::Problem {
    let json = r#"{"model": {"preset": "llama-3.2-1b", "weights": "q8_0"},
        "workload": {"context": 1024, "prompt": 128, "response": 64},
        "nodes": [{"name": "gpu", "device": "rtx-3060-12gb", "memory": "2 GB"},
                  {"name": "other", "device": "rtx-3060-12gb", "memory": "2 GB"}],
        "links": {"default": {"bandwidth": "1 Gbit/s", "latency": "2 ms"}}}"#;
    crate::check(json, crate::check::no_model_files).unwrap().problem
}

#[test]
fn a_pipeline_steps_through_every_stage_and_hop_in_turn() {
    let problem = pipeline();
    let plan = crate::plan_with(&with_batch(&problem, 1), crate::planner::PlanOptions::bare());
    assert_eq!(plan.stages.len(), 2, "{plan:?}");
    let cost = ServingCost::of(&with_batch(&problem, 1), &plan).unwrap();
    // One user: a step is the plan's latency at the requests' depth (its prompt and half its
    // answer, the plan's `at_depth`), both stages and both hops (2 ms each).
    let latency = 1.0 / plan.at_depth.as_ref().unwrap().stream_tokens_per_s;
    assert!(close(cost.step_s, latency), "{cost:?} against {latency}");
    assert!(cost.step_s > 4e-3 + plan.stages.iter().map(|s| s.time.memory_s).sum::<f64>());
    let prefill: f64 = plan.stages.iter().map(|s| s.time.prefill_s).sum();
    assert!(close(cost.token_s, prefill) && cost.token_s > 1.0 / plan.prefill_tokens_per_s);
    // Four users: their further sequences add each stage's share; the hops are paid once.
    let four = with_batch(&problem, 4);
    let plan = crate::plan_with(&four, crate::planner::PlanOptions::bare());
    let cost = ServingCost::of(&four, &plan).unwrap();
    assert!(cost.sequence_s > 0.0 && cost.sequence_s < cost.step_s / 2.0, "{cost:?}");
    // And the pipeline's users are counted as one server's.
    let one = served_by(&problem, 1).unwrap();
    let found = capacity(&problem, load(1), targets(None, Some(one.tpot_s[1] * 1.5))).unwrap();
    assert!(found.users > 1 && found.plan.stages.len() == 2, "{found:?}");
}

/// Two 3090s on an NVLink bridge that plan Qwen3 32B as one tensor-parallel group
/// (llama.cpp's `--split-mode tensor`): the group is one device of each step, its GPUs
/// running each layer together, and its users are simulated as one server's.
#[test]
fn a_tensor_parallel_stage_is_one_device_of_the_step() {
    let json = r#"{"model": {"preset": "qwen3-32b", "weights": "q4_k_m"},
        "workload": {"context": 4096, "prompt": 128, "response": 64},
        "nodes": [{"name": "box", "gpus": [{"device": "rtx-3090", "count": 2}], "gpu_link": "nvlink-bridge"}]}"#;
    let problem = crate::check(json, crate::check::no_model_files).unwrap().problem;
    let one = with_batch(&problem, 1);
    let plan = crate::plan_with(&one, crate::planner::PlanOptions::bare());
    assert!(plan.stages.len() == 1 && plan.stages[0].tensor_parallel.len() == 2, "{:?}", plan.stages);
    let cost = ServingCost::of(&one, &plan).unwrap();
    let latency = 1.0 / plan.at_depth.as_ref().unwrap().stream_tokens_per_s;
    assert!(close(cost.step_s, latency), "{cost:?} against {latency}");
    assert!(close(cost.token_s, plan.stages[0].time.prefill_s), "{cost:?}");
    let served = answer(&problem, crate::demand::Demand::of_users(4)).unwrap().served.expect("four users served");
    assert!(served.tpot_s[0] > cost.step_s && served.tokens_per_s > 1.0 / cost.step_s, "{served:?}");
}

#[test]
fn machines_that_each_hold_the_model_serve_more_as_replicas() {
    let problem = one_gpu("12 GB", r#", {"name": "twin", "device": "rtx-3060-12gb"}"#);
    let one = served_by(&problem, 1).unwrap();
    let targets = targets(None, Some(one.tpot_s[1] * 1.5));
    let found = answer(&problem, crate::demand::Demand::of_targets(targets)).unwrap();
    let one_server = found.capacity.unwrap().users;
    let split = found.replicas.expect("two GPUs that each hold the model serve more apart");
    // Each replica serves what its machine alone serves, and together more than one server.
    let alone = |name: &str| {
        let enabled: Vec<bool> = problem.nodes.iter().map(|n| n.name == name).collect();
        search_on(&problem, Some(&enabled), load(1), targets, 1).unwrap().users
    };
    let names: Vec<&[String]> = split.replicas.iter().map(|r| r.machines.as_slice()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    for replica in &split.replicas {
        assert_eq!(replica.users, alone(&replica.machines[0]), "{replica:?}");
        assert_eq!(replica.plan.stages.len(), 1);
        assert_eq!(replica.plan.stages[0].node, replica.machines[0]);
        assert!(targets.missed(&replica.served).is_none(), "{replica:?}");
    }
    assert_eq!(split.users, split.replicas.iter().map(|r| r.users).sum::<u32>());
    assert!(split.users > one_server, "{} against {one_server}", split.users);
    // A model that needs both machines has no replicas, nor has a count of users asked.
    let both = answer(&pipeline(), crate::demand::Demand::of_targets(targets)).unwrap();
    assert!(both.capacity.is_some() && both.replicas.is_none(), "{:?}", both.replicas);
    assert!(
        answer(
            &problem,
            crate::demand::Demand { users: Some(2), targets: Some(targets), ..crate::demand::Demand::default() }
        )
        .unwrap()
        .replicas
        .is_none()
    );
}

/// Asked a count one server misses, the users spread over the replicas: each its share,
/// in proportion to what it serves and never more, meeting the targets at that share.
/// Asked more than any split serves, the split at what it serves: the nearest.
#[test]
fn users_one_server_misses_spread_over_replicas() {
    let problem = one_gpu("12 GB", r#", {"name": "twin", "device": "rtx-3060-12gb"}"#);
    let one = served_by(&problem, 1).unwrap();
    let targets = targets(None, Some(one.tpot_s[1] * 1.5));
    let most = answer(&problem, crate::demand::Demand::of_targets(targets)).unwrap();
    let (one_server, split) = (most.capacity.unwrap().users, most.replicas.unwrap());
    let asked = one_server + 1;
    assert!(asked < split.users, "{asked} of {split:?}");
    let spread = answer(
        &problem,
        crate::demand::Demand { users: Some(asked), targets: Some(targets), ..crate::demand::Demand::default() },
    )
    .unwrap();
    assert!(spread.targets.unwrap().missed.is_some(), "one server misses {asked}");
    assert_eq!(spread.capacity.map(|found| found.users), Some(one_server));
    let replicas = spread.replicas.expect("spread over replicas");
    assert_eq!(replicas.users, asked);
    assert_eq!(replicas.replicas.iter().map(|r| r.users).sum::<u32>(), asked);
    for replica in &replicas.replicas {
        let most = split.replicas.iter().find(|r| r.machines == replica.machines).unwrap().users;
        assert!(replica.users <= most && replica.served.users == replica.users, "{replica:?}");
        assert!(targets.missed(&replica.served).is_none(), "{replica:?}");
    }
    let beyond = answer(
        &problem,
        crate::demand::Demand {
            users: Some(split.users + 1),
            targets: Some(targets),
            ..crate::demand::Demand::default()
        },
    )
    .unwrap();
    assert_eq!(beyond.replicas, Some(split), "the nearest");
    // Met on one server: nothing to spread.
    assert!(
        answer(
            &problem,
            crate::demand::Demand {
                users: Some(one_server),
                targets: Some(targets),
                ..crate::demand::Demand::default()
            }
        )
        .unwrap()
        .replicas
        .is_none()
    );
}

#[test]
fn a_load_that_cannot_run_says_which_field() {
    assert_eq!(simulate(Load { users: 0, ..load(1) }, &cost()), Err(ServingError::Zero { field: "users" }));
    assert_eq!(simulate(Load { response: 0, ..load(1) }, &cost()), Err(ServingError::Zero { field: "response" }));
    let many = Load { users: u32::MAX, requests_per_user: u32::MAX, ..load(1) };
    assert!(matches!(simulate(many, &cost()), Err(ServingError::TooMany { .. })));
    for step_s in [0.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(simulate(load(1), &ServingCost { step_s, ..cost() }), Err(ServingError::Cost { .. })));
    }
}

/// A 12 GB GPU and Llama 3.1 8B with a context of 8,192: llama-server's slots each hold the
/// whole context, so a handful fit; vLLM pages its cache, so the same GPU holds the blocks of
/// many more users' 640-token requests — simulated by its own scheduler, its server the
/// export's.
#[test]
fn vllm_serves_users_from_its_pool_of_blocks_where_llama_servers_slots_run_out() {
    let scenario = |engine: &str| {
        let json = format!(
            r#"{{"model": {{"preset": "llama-3.1-8b", "weights": "q4_k_m"}}, "engine": "{engine}",
                "workload": {{"context": 8192, "prompt": 512, "response": 128}},
                "nodes": [{{"name": "gpu", "device": "rtx-3060-12gb"}}]}}"#
        );
        crate::check(json.as_str(), crate::check::no_model_files).unwrap().problem
    };
    let (llama, vllm) = (scenario("llama.cpp"), scenario("vllm"));
    let users = 16;
    assert!(
        answer(&llama, crate::demand::Demand::of_users(users)).unwrap().served.is_none(),
        "16 slots of 8,192 tokens do not fit 12 GB"
    );
    let answered = answer(&vllm, crate::demand::Demand::of_users(users)).unwrap();
    let served = answered.served.expect("16 users of vLLM");
    assert!(matches!(served.scheduler, Scheduler::Vllm { max_num_batched_tokens: 2048, .. }), "{served:?}");
    // The plan holds their requests at once: 640 tokens each (or the context's share).
    assert_eq!((answered.plan.workload.batch, answered.plan.workload.context), (16, 640));
    // And the capacity search runs on vLLM's scheduler too: where llama-server's slots stop
    // at memory, vLLM's users stop at the target.
    let patient = targets(Some(10.0), None);
    let slots = capacity(&llama, Load::llama_server(&llama, 1), patient).unwrap();
    assert!(matches!(slots.limit, Limit::Memory { .. }), "{:?}", slots.limit);
    let found = capacity(&vllm, Load::llama_server(&vllm, 1), patient).unwrap();
    assert!(found.users > users && found.users > slots.users, "{} against {}", found.users, slots.users);
    assert!(matches!(found.limit, Limit::Target { .. }) && matches!(found.served.scheduler, Scheduler::Vllm { .. }));
}

#[test]
fn an_engine_whose_scheduler_is_not_simulated_is_refused_naming_the_two_that_are() {
    let mut problem = one_gpu("12 GB", "");
    problem.workload.engine = crate::engine::Engine::Generic;
    let refused = answer(&problem, crate::demand::Demand::of_users(2)).unwrap_err();
    assert_eq!(refused, ServingError::Engine);
    assert!(refused.to_string().contains(r#"`"vllm"`"#), "{refused}");
}

/// vLLM runs up to its `--max-num-seqs` at once (256, or 1024 on a GPU of 70 GiB or more
/// that is not an A100) and queues the rest, so its users go past llama-server's 256 slots:
/// the split is planned for the requests it runs, the others wait for their first token.
#[test]
fn vllm_runs_its_own_max_num_seqs_at_once_and_queues_the_rest() {
    let scenario = |engine: &str, device: &str| {
        let json = format!(
            r#"{{"model": {{"preset": "llama-3.2-1b", "weights": "q8_0"}}, "engine": "{engine}",
                "workload": {{"context": 8192, "prompt": 64, "response": 16}},
                "nodes": [{{"name": "gpu", "device": "{device}"}}]}}"#
        );
        crate::check(json.as_str(), crate::check::no_model_files).unwrap().problem
    };
    let ran = |problem: &crate::Problem, users: u32| {
        let answered = answer(problem, crate::demand::Demand::of_users(users)).unwrap();
        let served = answered.served.expect("served");
        let Scheduler::Vllm { max_num_seqs, .. } = served.scheduler else { panic!("{served:?}") };
        (answered.plan.workload.batch, max_num_seqs, served)
    };
    let small = scenario("vllm", "rtx-3060-12gb");
    let (batch, running, served) = ran(&small, 600);
    assert_eq!((batch, running, served.users), (256, 256, 600));
    // Past the requests running the rest wait in the queue, longer than a request decodes.
    let decoding = |served: &Served| f64::from(served.response - 1) * served.tpot_s[0];
    assert!(served.ttft_s[0] > decoding(&served), "{served:?}");
    let (batch, running, _) = ran(&scenario("vllm", "h100"), 2000);
    assert_eq!((batch, running), (1024, 1024));
    assert_eq!(ran(&scenario("vllm", "a100-80gb"), 2000).1, 256);
    // Below vLLM's count every user's request runs at once, and none waits so.
    let (batch, _, served) = ran(&small, 200);
    assert!(batch == 200 && served.ttft_s[0] < decoding(&served), "{served:?}");
    // The most simulated, per engine, named in the refusal.
    let engine = crate::engine::Engine::Vllm;
    let refused = answer(&small, crate::demand::Demand::of_users(MAX_VLLM_USERS + 1)).unwrap_err();
    assert_eq!(refused, ServingError::Slots { users: MAX_VLLM_USERS + 1, engine });
    assert!(refused.to_string().contains("4096 users of one vLLM server"), "{refused}");
    let llama = scenario("llama.cpp", "rtx-3060-12gb");
    assert!(
        answer(&llama, crate::demand::Demand::of_users(MAX_USERS + 1)).unwrap_err().to_string().contains("256 slots")
    );
}

/// Requests at a rate, whatever the replies: far apart, each is served alone as one user's
/// are; faster than the slots serve them, they wait in the server's queue and the wait
/// grows; the same draws every run.
#[test]
fn requests_at_a_rate_wait_for_a_free_slot() {
    let vllm = Scheduler::Vllm { max_num_seqs: 4, max_num_batched_tokens: 2048 };
    for scheduler in [LLAMA_SERVER, vllm] {
        let alone = simulate(Load { users: 1, scheduler, ..load(1) }, &cost()).unwrap();
        let sparse = Load { users: 4, requests_per_user: 25, scheduler, rate: Some(0.001), ..load(4) };
        let served = simulate(sparse, &cost()).unwrap();
        assert!(close(served.ttft_s[0], alone.ttft_s[0]) && close(served.tpot_s[0], alone.tpot_s[0]), "{served:?}");
        assert_eq!(served.rate, Some(0.001));
        // 100 requests in about a second where each takes seconds: the last wait for the first.
        let dense = Load { rate: Some(100.0), ..sparse };
        let queued = simulate(dense, &cost()).unwrap();
        assert!(queued.ttft_s[1] > 10.0 * alone.ttft_s[1], "{queued:?}");
        assert!(queued.tokens_per_s > served.tokens_per_s, "{queued:?} vs {served:?}");
        assert_eq!(simulate(dense, &cost()), Ok(queued));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let refused = simulate(Load { rate: Some(bad), ..sparse }, &cost());
            assert!(matches!(refused, Err(ServingError::Rate { .. })), "{bad}: {refused:?}");
        }
    }
}

/// The gaps between arrivals are the exponential law's: their mean is one over the rate.
#[test]
fn arrivals_at_a_rate_come_a_mean_gap_apart() {
    let at = arrivals(4.0, 20_001);
    assert_eq!(at[0], 0.0);
    assert!(at.windows(2).all(|w| w[1] > w[0]));
    let mean = at[20_000] / 20_000.0;
    assert!((mean - 0.25).abs() < 0.25 * 0.03, "{mean}");
    // Half the gaps are shorter than ln 2 over the rate (the law's median).
    let short = at.windows(2).filter(|w| w[1] - w[0] < std::f64::consts::LN_2 / 4.0).count();
    assert!((short as f64 / 20_000.0 - 0.5).abs() < 0.02, "{short}");
}

/// A rate is asked with a count of users (the server's slots): without one it is refused,
/// and with one the plan is that count's, the requests arriving at random.
#[test]
fn a_rate_is_answered_for_a_count_of_users() {
    let problem = one_gpu("24 GB", "");
    let demand = crate::demand::Demand { rate: Some(1.0), ..crate::demand::Demand::default() };
    assert_eq!(answer(&problem, demand).unwrap_err(), ServingError::RateWithoutUsers);
    let demand = crate::demand::Demand { users: Some(4), ..demand };
    let answered = answer(&problem, demand).unwrap();
    let served = answered.served.unwrap();
    assert_eq!((served.users, served.rate, answered.plan.workload.batch), (4, Some(1.0), 4));
    assert_eq!(served.users * served.requests_per_user, RATE_REQUESTS);
}

/// Requests whose lengths stray about the workload's: each drawn within `±spread`, the same
/// every run; one user's longest prompts wait longest for their first token.
#[test]
fn lengths_are_drawn_within_the_spread() {
    let spread = Load { spread: 0.5, ..load(1) };
    let drawn = lengths(&spread, 2000);
    assert!(drawn.iter().all(|&(p, r)| (64..=192).contains(&p) && (32..=96).contains(&r)), "{drawn:?}");
    let mean = |f: fn(&(u32, u32)) -> u32| drawn.iter().map(|d| f64::from(f(d))).sum::<f64>() / 2000.0;
    assert!((mean(|d| d.0) / 128.0 - 1.0).abs() < 0.03 && (mean(|d| d.1) / 64.0 - 1.0).abs() < 0.03);
    assert_eq!(lengths(&spread, 2000), drawn);
    assert!(lengths(&load(1), 10).iter().all(|&d| d == (128, 64)));
    for scheduler in [LLAMA_SERVER, Scheduler::Vllm { max_num_seqs: 4, max_num_batched_tokens: 2048 }] {
        let exact = simulate(Load { requests_per_user: 50, scheduler, ..load(1) }, &cost()).unwrap();
        let strayed = simulate(Load { requests_per_user: 50, scheduler, ..spread }, &cost()).unwrap();
        assert!(strayed.ttft_s[1] > exact.ttft_s[1] && strayed.spread == Some(0.5), "{strayed:?}");
        for bad in [1.0, -0.1, f64::NAN] {
            let refused = simulate(Load { spread: bad, ..spread }, &cost());
            assert!(matches!(refused, Err(ServingError::Spread { .. })), "{bad}: {refused:?}");
        }
    }
    // The longest request drawn must fit a user's context.
    let mut problem = one_gpu("24 GB", "");
    (problem.workload.prompt, problem.workload.response, problem.workload.context) = (512, 128, 800);
    let demand = |spread: f64| crate::demand::Demand { spread, ..crate::demand::Demand::of_users(2) };
    assert!(answer(&problem, demand(0.2)).is_ok());
    let refused = answer(&problem, demand(0.5)).unwrap_err();
    assert_eq!(refused, ServingError::Request { prompt: 768, response: 192, context: 800 });
}
