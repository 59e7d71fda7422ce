//! The page's state: what it writes as a scenario, what it reads back, where errors land.

use super::*;
use stageplan::ScenarioError;

#[test]
fn the_default_state_plans() {
    let scenario = AppState::default().scenario().unwrap();
    let problem = stageplan::check(scenario.clone(), stageplan::check::no_model_files).unwrap().problem;
    assert!(stageplan::plan(&problem).feasible);
    // The page's link fields show the core's default link, as written by a person.
    let state = AppState::default();
    assert_eq!((state.link_bandwidth.as_str(), state.link_latency.as_str()), ("1.25 GB/s", "0.5 ms"));
    assert_eq!(problem.links.default, stageplan::problem::DEFAULT_LINK);
}

#[test]
fn an_imported_draft_and_projector_are_kept_and_planned() {
    let text = include_str!("../../../../tests/scenarios/home-70b.json").replacen(
        r#""weights": "q4_k_m"}"#,
        r#""weights": "q4_k_m", "draft": {"preset": "llama-3.2-1b", "weights": "q8_0"}, "mmproj": {"weights": "600 MiB", "compute": "300 MiB"}}"#,
        1,
    );
    let state = AppState::from_scenario(&Scenario::from_json(&text).unwrap());
    let fragment = state.to_fragment();
    assert_eq!(AppState::from_fragment(&format!("#{fragment}")).unwrap(), state);
    let problem = stageplan::check(state.scenario().unwrap(), stageplan::check::no_model_files).unwrap().problem;
    assert!(problem.riders.draft.is_some() && problem.riders.projector.is_some());
    assert_eq!(stageplan::plan(&problem).riders.len(), 2);
}

#[test]
fn a_projector_typed_field_by_field_is_planned_and_cleared() {
    let mut state = AppState::default();
    state.model.set_projector("weights", "600 MiB");
    // Without its compute buffer the core says so, at that field.
    let error = stageplan::check(state.scenario().unwrap(), stageplan::check::no_model_files).unwrap_err();
    assert_eq!(crate::fields::place(&[], false, &error).place, Some(Place::Field("mmproj-compute")), "{error}");
    state.model.set_projector("compute", "300 MiB");
    assert_eq!(
        (state.model.projector_field("weights"), state.model.projector_field("compute")),
        ("600 MiB".into(), "300 MiB".into())
    );
    let problem = stageplan::check(state.scenario().unwrap(), stageplan::check::no_model_files).unwrap().problem;
    assert!(problem.riders.projector.is_some());
    state.model.set_projector("weights", " ");
    state.model.set_projector("compute", "");
    assert_eq!(state.model.mmproj, "", "nothing typed: no projector");
}

#[test]
fn share_links_round_trip() {
    let mut state = AppState::default();
    state.nodes[1].enabled = false;
    state.objective = Objective::Latency;
    let fragment = state.to_fragment();
    assert!(fragment.starts_with("s1."));
    assert!(fragment.len() < 1024, "{} characters", fragment.len());
    assert_eq!(AppState::from_fragment(&format!("#{fragment}")).unwrap(), state);
}

/// A llama-bench fit (issue #15) is part of its machine: in the scenario, through the
/// JSON editor and a share link; a share link cannot use it to rewrite other fields; it
/// goes when the machine's device changes, since it was fitted to that device's figures.
#[test]
fn a_fit_travels_with_its_machine_until_its_device_changes() {
    let mut state = AppState::default();
    state.nodes[0].fit = r#"{"backend": "cuda", "efficiency": {"bandwidth": 0.9}, "name": "other", "count": 9}"#.into();
    let node = &state.scenario_json()["nodes"][0];
    assert_eq!((&node["backend"], &node["efficiency"]["bandwidth"]), (&json!("cuda"), &json!(0.9)));
    assert_eq!((&node["name"], node.get("count")), (&json!(state.nodes[0].name), None));
    let scenario = state.scenario().unwrap();
    let edited = AppState::from_scenario(&scenario);
    assert_eq!(edited.scenario().unwrap(), scenario);
    let shared = AppState::from_fragment(&edited.to_fragment()).unwrap();
    assert_eq!(shared.scenario().unwrap(), scenario);
    let mut machine = shared.nodes[0].clone();
    machine.choose_device("l4");
    assert!(machine.fit.is_empty());
}

/// "This device" adds a measured machine (issue #33): its probe reaches the scenario, so
/// the plan uses the figures as measured, and survives the editor and a share link.
#[test]
fn a_probe_travels_with_its_machine() {
    let mut state = AppState::default();
    state.nodes[0].fit = r#"{"probe": {"adapter": "SwiftShader", "bandwidth_spread": 0.2}}"#.into();
    let scenario = state.scenario().unwrap();
    assert_eq!(scenario.nodes[0].probe.as_ref().map(|p| p.bandwidth_spread), Some(0.2));
    let edited = AppState::from_scenario(&scenario);
    assert_eq!(edited.scenario().unwrap(), scenario);
    let shared = AppState::from_fragment(&edited.to_fragment()).unwrap();
    assert_eq!(shared.scenario().unwrap(), scenario);
}

/// A machine's system RAM (#34) is edited beside its device, plans with the experts in
/// RAM, and survives the editor and a share link; a missing size is placed at its field.
#[test]
fn system_ram_travels_with_its_machine() {
    let mut state = AppState::default();
    state.model.preset = "qwen3-30b-a3b".into();
    state.model.weights = "q4_k_m".into();
    state.nodes.truncate(1);
    state.nodes[0].ram = "ddr5-6000-2ch".into();
    state.nodes[0].ram_memory = "64".into();
    let scenario = state.scenario().unwrap();
    let host = scenario.nodes[0].host.clone().unwrap();
    assert_eq!(
        (host.ram.as_deref(), host.memory.map(stageplan::units::Bytes::get)),
        (Some("ddr5-6000-2ch"), Some(64.0 * 1073741824.0))
    );
    let edited = AppState::from_scenario(&scenario);
    assert_eq!(edited.scenario().unwrap(), scenario);
    let shared = AppState::from_fragment(&edited.to_fragment()).unwrap();
    assert_eq!(shared.scenario().unwrap(), scenario);
    state.nodes[0].ram_memory.clear();
    let machines: Vec<(u64, &str)> = state.nodes.iter().map(|n| (n.id, n.name.as_str())).collect();
    let error = stageplan::check(state.scenario().unwrap(), stageplan::check::no_model_files).unwrap_err();
    let placed = crate::fields::place(&machines, false, &error);
    assert_eq!(placed.place, Some(Place::Node(state.nodes[0].id, "ram-memory")), "{placed:?}");
}

#[test]
fn hostile_fragments_are_refused_with_a_reason() {
    let long = format!("s1.{}", "A".repeat(MAX_FRAGMENT));
    let cases = [
        ("", "not a stageplan link"),
        ("s2.abc", "not a stageplan link"),
        ("s1.!!!", "damaged"),
        ("s1.W10", "does not hold a plan"),
        (long.as_str(), "over the"),
    ];
    for (fragment, expected) in cases {
        let error = AppState::from_fragment(fragment).unwrap_err().to_string();
        assert!(error.contains(expected), "{fragment:.20}: {error}");
    }
    let not_state = format!("s1.{}", crate::base64url::encode(br#"{"nodes": 5}"#));
    assert!(AppState::from_fragment(&not_state).unwrap_err().to_string().contains("does not hold a plan"));
    let many = AppState { nodes: vec![NodeDraft::preset("x", "l4"); MAX_SHARED_NODES + 1], ..AppState::default() };
    assert!(AppState::from_fragment(&many.to_fragment()).unwrap_err().to_string().contains("over"));
}

#[test]
fn bad_fields_are_reported_as_the_cli_reports_them_at_the_field() {
    let mut state = AppState::default();
    state.nodes[2].memory = "-3 GiB".into();
    let error = state.scenario().unwrap_err();
    assert!(error.message.starts_with("`mac` memory"), "{error:?}");
    assert_eq!(error.place, Some(Place::Node(state.nodes[2].id, "memory")));
    // A count the page cannot read is said in its words; `32k` reads as 32768 tokens.
    state = AppState { context: "lots".into(), ..AppState::default() };
    let error = state.scenario().unwrap_err();
    assert_eq!(error.place, Some(Place::Field("context")));
    assert!(error.message.contains("e.g. `8192` or `32k`"), "{error:?}");
    state.context = "32k".into();
    assert_eq!(state.scenario().unwrap().workload.context, 32768);
}

#[test]
fn quantities_print_back_exactly() {
    for (value, dimension, text) in [
        (24.0 * 1073741824.0, Dimension::Memory, "24 GiB"),
        (1.25e9, Dimension::Bandwidth, "1.25 GB/s"),
        (1.652e14, Dimension::Compute, "165.2 TFLOPS"),
        (5e-4, Dimension::Time, "0.5 ms"),
        (12345.0, Dimension::Memory, "12345 B"),
    ] {
        assert_eq!(quantity_text(value, dimension), text);
        assert_eq!(parse_quantity(text, dimension).unwrap(), value);
    }
}

/// Issue #18, point 5: "64" in Memory once meant 64 bytes and the machine dropped out.
#[test]
fn a_bare_number_is_read_in_the_unit_the_field_shows() {
    let mut state = AppState::default();
    let node = &mut state.nodes[0];
    (node.device, node.memory, node.bandwidth, node.compute, node.reserve) =
        (String::new(), "64".into(), "400".into(), "27".into(), "0".into());
    let problem = stageplan::check(state.scenario().unwrap(), stageplan::check::no_model_files).unwrap().problem;
    let planned = &problem.nodes[0];
    assert_eq!(planned.memory, 64 << 30);
    assert_eq!((planned.bandwidth, planned.compute), (400e9, 27e12));
}

/// Issue #18, point 1: a preset chosen after typed figures plans with its own figures; a
/// switch to custom figures starts from the preset's, written out.
#[test]
fn choosing_a_device_replaces_the_figures_typed_for_another() {
    let mut node = NodeDraft { memory: "64 GiB".into(), bandwidth: "400 GB/s".into(), ..NodeDraft::preset("mac", "") };
    node.choose_device("m2-max-96gb");
    assert_eq!((node.memory.as_str(), node.bandwidth.as_str()), ("", ""));
    node.choose_device("");
    let preset = stageplan::presets::DevicePreset::find("m2-max-96gb").unwrap();
    assert_eq!(parse_quantity(&node.memory, Dimension::Memory).unwrap(), preset.memory);
    assert_eq!(parse_quantity(&node.bandwidth, Dimension::Bandwidth).unwrap(), preset.bandwidth);
    assert_eq!(node.kind, "unified");
}

#[test]
fn an_imported_scenario_round_trips_through_the_state() {
    let text = include_str!("../../../../tests/scenarios/home-70b.json");
    let scenario = Scenario::from_json(text).unwrap();
    let state = AppState::from_scenario(&scenario);
    let again = state.scenario().unwrap();
    let checked = |s: Scenario| stageplan::check(s, stageplan::check::no_model_files).unwrap().problem;
    let (a, b) = (checked(scenario), checked(again));
    assert_eq!(a.nodes, b.nodes);
    assert_eq!(a.links, b.links);
    assert_eq!(a.workload, b.workload);
}

#[test]
fn core_messages_land_on_their_fields_with_machine_names() {
    let state = AppState::default();
    let mac = state.nodes[2].id;
    let machines: Vec<(u64, &str)> = state.nodes.iter().map(|n| (n.id, n.name.as_str())).collect();
    let place = |error: ScenarioError| crate::fields::place(&machines, false, &error);
    let placed = place(ScenarioError::field("nodes[2].memory", "is 64 bytes; write a unit, e.g. `64 GiB`"));
    assert_eq!(
        placed,
        InputError::at(Place::Node(mac, "memory"), "`mac` memory is 64 bytes; write a unit, e.g. `64 GiB`")
    );
    // The place comes from the path, never from the words: a message that starts with
    // another field's name in backticks is still placed by its path.
    let placed = place(ScenarioError::field("nodes[2].bandwidth", "`nodes[0].memory` is not this field"));
    assert_eq!(placed.place, Some(Place::Node(mac, "bandwidth")));
    let text = r#"{"model": {"preset": "llama-3.1-8b"}, "workload": {"context": "x"}, "nodes": []}"#;
    let placed = place(Scenario::from_json(text).unwrap_err());
    assert_eq!(
        placed,
        InputError::at(Place::Field("context"), "`workload.context`: invalid type: string \"x\", expected u64")
    );
    let placed = place(ScenarioError::field("nodes[0]", "is named twice"));
    assert_eq!(placed.place, Some(Place::Node(state.nodes[0].id, "name")));
    assert_eq!(placed.message, "`desk` is named twice");
    assert_eq!(place(ScenarioError::field("", "the scenario has no nodes")).place, None);
    assert_eq!(
        place(ScenarioError::field("nodes[9].memory", "is wrong")).place,
        None,
        "no such machine: left unplaced"
    );
    assert_eq!(
        place(ScenarioError::field("links.default.latency", "is negative")).place,
        Some(Place::Field("link-latency"))
    );
}

#[test]
fn a_v_cache_apart_reaches_the_scenario_and_its_refusal_its_select() {
    let mut state = AppState { kv: "q8_0".into(), kv_v: "f16".into(), ..AppState::default() };
    let scenario = state.scenario().unwrap();
    assert_eq!((scenario.workload.kv.as_str(), scenario.workload.kv_v.as_deref()), ("q8_0", Some("f16")));
    assert_eq!(AppState::from_scenario(&scenario).kv_v, "f16", "an imported V format fills the select");
    // Latent attention keeps V in K's cache: the core's refusal lands on the V select.
    state.model.preset = "deepseek-v3".into();
    let error = crate::planning::compute(&state, &[], &[]).unwrap_err();
    assert_eq!(error.place, Some(Place::Field("kv-v")), "{error:?}");
    // The fix "one format for both" leaves no V apart.
    state.apply(&Change::Kv("q4_0".into()));
    assert_eq!((state.kv.as_str(), state.kv_v.as_str()), ("q4_0", ""));
    assert_eq!(state.scenario().unwrap().workload.kv_v, None);
}

#[test]
fn a_fix_applies_to_the_fields_it_names() {
    let mut state =
        AppState { model: ModelDraft { weights: "f16".into(), ..ModelDraft::default() }, ..AppState::default() };
    let checked = |state: &AppState| {
        stageplan::check(state.scenario().unwrap(), stageplan::check::no_model_files).unwrap().problem
    };
    let plan = stageplan::plan(&checked(&state));
    assert!(!plan.feasible, "a 70B model in f16 does not fit 24 + 24 + 48 GiB");
    let change = plan.diagnostics.iter().find_map(|d| d.change.clone()).expect("a fix to apply");
    state.apply(&change);
    assert!(stageplan::plan(&checked(&state)).feasible, "{change:?} makes it fit");
    state.apply(&Change::CopyNode("mac".into()));
    state.apply(&Change::CopyNode("mac".into()));
    let names: Vec<&str> = state.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["desk", "gamer", "mac", "mac-2", "mac-3"]);
    assert_eq!(state.clone().with_unique_ids(), state, "ids stay distinct");
    state.apply(&Change::Context(4096));
    assert_eq!(state.context, "4096");
}

/// A machine with several GPUs, typed as people say it ("2× RTX 3090, PCIe 4.0 x8"): the
/// count and link reach the scenario's `gpus` and `gpu_link`, read back, travel in a share
/// link, and their errors land on their fields; mixed GPUs from a scenario are kept whole.
#[test]
fn a_machines_gpus_travel_with_it() {
    let mut state = AppState::default();
    state.nodes.truncate(1);
    state.nodes[0].choose_device("rtx-3090");
    state.nodes[0].gpus = "2".into();
    state.nodes[0].gpu_link = "pcie4-x8".into();
    let scenario = state.scenario().unwrap();
    let gpus = scenario.nodes[0].gpus.clone().unwrap();
    assert_eq!((gpus.len(), gpus[0].device.as_deref(), gpus[0].count), (1, Some("rtx-3090"), Some(2)));
    assert_eq!(scenario.nodes[0].device, None);
    assert_eq!(scenario.nodes[0].gpu_link.as_deref(), Some("pcie4-x8"));
    let edited = AppState::from_scenario(&scenario);
    assert_eq!(edited.scenario().unwrap(), scenario);
    let shared = AppState::from_fragment(&edited.to_fragment()).unwrap();
    assert_eq!(shared.scenario().unwrap(), scenario);
    // Each GPU is a node of the checked scenario, on when its machine is: the plan uses both.
    state.model.preset = "llama-3.1-70b".into();
    state.model.weights = "q4_k_m".into();
    assert_eq!(state.enabled(), [true, true]);
    let outcome = crate::planning::compute(&state, &[], &[]).unwrap();
    assert!(outcome.plan.feasible && outcome.plan.stages[0].tensor_parallel == [0, 1], "{:?}", outcome.plan.stages);
    // A second such machine's stages take its colour, not the first machine's.
    let mut two = state.clone();
    let mut second = two.nodes[0].clone();
    (second.id, second.name) = (two.next_id(), "rack".into());
    two.nodes.push(second);
    two.nodes[0].enabled = false;
    let outcome = crate::planning::compute(&two, &[], &[]).unwrap();
    let hue = |node: &str| outcome.view.bands.iter().find(|b| b.node.starts_with(node)).map(|b| b.hue);
    assert_eq!(hue("rack/"), Some(stageplan::view::hue(1)), "{:?}", outcome.view.bands);
    // Mixed GPUs: the list kept as written, and planned as the CLI plans it.
    let text = include_str!("../../../../tests/cli/export-gpus-vllm/scenario.json");
    let mixed = Scenario::from_json(text).unwrap();
    let again = AppState::from_scenario(&mixed).scenario().unwrap();
    let checked = |s: Scenario| stageplan::check(s, stageplan::check::no_model_files).unwrap().problem;
    assert_eq!(AppState::from_scenario(&mixed).enabled().len(), 4);
    assert_eq!(checked(again).nodes, checked(mixed).nodes);
    // Errors at their fields: past 16 GPUs, and a link that is not a preset.
    let id = state.nodes[0].id;
    let name = state.nodes[0].name.clone();
    let machines = [(id, name.as_str())];
    for (gpus, link, part) in [("17", "pcie4-x8", "gpus"), ("2", "pcie9", "gpu-link")] {
        (state.nodes[0].gpus, state.nodes[0].gpu_link) = (gpus.into(), link.into());
        let error = stageplan::check(state.scenario().unwrap(), stageplan::check::no_model_files).unwrap_err();
        let placed = crate::fields::place(&machines, false, &error);
        assert_eq!(placed.place, Some(Place::Node(id, part)), "{placed:?}");
    }
}

/// Mixed GPUs typed as people say them ("RTX 5090 + 2× RTX 4090"): each a preset in the
/// scenario's `gpus`, each a node of the checked scenario, planned as the CLI plans the same
/// list; a scenario's list of presets reads back in the same words; an unknown one is an
/// error on the machine.
#[test]
fn mixed_gpus_typed_as_people_say_them() {
    let mut state = AppState::default();
    state.nodes.truncate(1);
    state.nodes[0].gpus = "RTX 5090 + 2× RTX 4090".into();
    let scenario = state.scenario().unwrap();
    let gpus = scenario.nodes[0].gpus.clone().unwrap();
    let written: Vec<(Option<&str>, Option<u32>)> = gpus.iter().map(|g| (g.device.as_deref(), g.count)).collect();
    assert_eq!(written, [(Some("rtx-5090"), None), (Some("rtx-4090"), Some(2))]);
    assert_eq!(state.nodes[0].devices(), 3);
    assert!(state.nodes[0].mixed_gpus() && !NodeDraft { gpus: "2".into(), ..NodeDraft::default() }.mixed_gpus());
    assert_eq!(state.enabled(), [true, true, true]);
    let json = r#"{"model": {"preset": "llama-3.1-70b", "weights": "q4_k_m"}, "nodes": [{"name": "box",
        "gpus": [{"device": "rtx-5090"}, {"device": "rtx-4090", "count": 2}]}]}"#;
    let listed = Scenario::from_json(json).unwrap();
    let read_back = AppState::from_scenario(&listed);
    assert_eq!(read_back.nodes[0].gpus, "rtx-5090 + 2× rtx-4090");
    let checked = |s: Scenario| stageplan::check(s, stageplan::check::no_model_files).unwrap().problem;
    assert_eq!(checked(read_back.scenario().unwrap()).nodes.len(), 3);
    state.model.preset = "llama-3.1-70b".into();
    state.model.weights = "q4_k_m".into();
    let outcome = crate::planning::compute(&state, &[], &[]).unwrap();
    let cli = stageplan::plan(&checked(state.scenario().unwrap()));
    assert!(outcome.plan.feasible && outcome.plan.stream_tokens_per_s == cli.stream_tokens_per_s);
    state.nodes[0].gpus = "rtx-5090 + rtx-9999".into();
    let error = stageplan::check(state.scenario().unwrap(), stageplan::check::no_model_files).unwrap_err();
    assert!(error.path.starts_with("nodes[0].gpus[1]"), "{error:?}");
}
