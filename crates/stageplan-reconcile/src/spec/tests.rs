use super::*;

#[test]
fn keys_round_trip_even_with_dots_and_dashes() {
    let key = assignment_key("llama-3.1-70b.prod", 12, 3);
    assert_eq!(key, "llama-3.1-70b.prod/12/3");
    assert_eq!(parse_assignment_key(&key), Some(("llama-3.1-70b.prod", 12, 3)));
    assert_eq!(parse_assignment_key("a/b/c"), None);
}

#[test]
fn bad_specs_name_the_field() {
    let mut d = Deployment {
        name: "a b".into(),
        model: String::new(),
        replicas: 2,
        min_replicas: None,
        max_replicas: None,
        placement: Placement::BinPack,
        stages: vec![StageRequest { layers: [0, 1], memory: 1, gpus: 1, node: None, gpu_ids: Vec::new() }],
        autoscale: None,
        last_scaled_ms: None,
        planned: None,
    };
    assert!(d.check().unwrap_err().to_string().starts_with("`name` `a b`"));
    d.name = "ok".into();
    d.max_replicas = Some(1);
    assert!(d.check().unwrap_err().to_string().starts_with("`replicas`"));
    d.max_replicas = None;
    d.check().unwrap();
    assert!(Node { name: "n".into(), memory: 1, gpus: 129 }.check().is_err());
    // A bound the loop could scale to must pass the check that reads the result back.
    d.max_replicas = Some(2_000_000);
    assert_eq!(d.check().unwrap_err().to_string(), "`max_replicas` `2000000` is more than 1,000,000");
    d.max_replicas = Some(u32::MAX);
    assert!(d.check().unwrap_err().to_string().starts_with("`max_replicas`"));
    d.max_replicas = Some(MAX_REPLICAS);
    d.check().unwrap();
}

#[test]
fn the_hourly_limit_is_bounded_so_the_moves_it_counts_are() {
    let mut options = BalanceOptions { max_moves_per_hour: MAX_MOVES_PER_HOUR, ..BalanceOptions::default() };
    options.check().unwrap();
    options.max_moves_per_hour += 1;
    let error = options.check().unwrap_err().to_string();
    assert!(error.contains(&format!("from 0 to {MAX_MOVES_PER_HOUR} ")), "{error}");
}

/// A machine offers its devices' memory less what each keeps back, as a plan's stage asks
/// for its own, and a GPU a device; a Mac's memory is RAM, with no GPU to take.
#[test]
fn a_machine_offers_its_devices_memory_less_their_reserve() {
    let machine = |text: &str| {
        let spec = stageplan::scenario::NodeSpec::from_json(text).unwrap();
        stageplan::check::machine_nodes(&spec).unwrap()
    };
    let gib = 1u64 << 30;
    let box_ = machine(r#"{"name": "box", "gpus": [{"device": "rtx-3090", "count": 2, "reserve": "2 GiB"}]}"#);
    assert_eq!(Node::offered("box", &box_), Node { name: "box".into(), memory: 2 * 22 * gib, gpus: 2 });
    let desk = machine(
        r#"{"name": "desk", "device": "rtx-4090", "memory": "24 GiB", "host": {"ram": "ddr5-6000-2ch", "memory": "64 GiB"}}"#,
    );
    assert_eq!(Node::offered("desk", &desk), Node { name: "desk".into(), memory: 23 * gib, gpus: 1 });
    let mac = machine(r#"{"name": "mac", "device": "m2-max-96gb", "reserve": "16 GiB"}"#);
    assert_eq!(Node::offered("mac", &mac), Node { name: "mac".into(), memory: 80 * gib, gpus: 0 });
}
