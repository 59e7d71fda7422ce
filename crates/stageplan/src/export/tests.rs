//! Exports of real plans, and plans that cannot be exported.

use super::*;
use crate::Scenario;

fn planned(json: &str) -> (Plan, ExportOptions) {
    let problem = Scenario::from_json(json).unwrap().problem().unwrap();
    (crate::plan(&problem), ExportOptions::for_problem(&problem))
}

const HOME: &str = include_str!("../../../../tests/scenarios/home-70b.json");

#[test]
fn every_target_exports_a_real_plan() {
    let (plan, options) = planned(HOME);
    for target in Target::ALL {
        let export = export(&plan, target, &options).unwrap();
        assert!(export.text.contains("stageplan"), "{target}: {}", export.text);
        assert_eq!(target.name().parse::<Target>().unwrap(), target);
    }
}

#[test]
fn broken_plans_are_refused_with_the_field() {
    let (plan, options) = planned(HOME);
    let mut gap = plan.clone();
    gap.stages[1].layers[0] += 1;
    let error = export(&gap, Target::Vllm, &options).unwrap_err().to_string();
    assert!(error.starts_with("`stages[1].layers`") && error.contains("on no machine"), "{error}");
    let mut overlap = plan.clone();
    overlap.stages[1].layers[0] -= 1;
    assert!(export(&overlap, Target::Exo, &options).unwrap_err().to_string().contains("overlaps"));
    let mut short = plan.clone();
    short.stages.pop();
    assert!(export(&short, Target::Megatron, &options).unwrap_err().to_string().contains("the model has 80"));
    let mut twice = plan.clone();
    twice.stages[1].node = twice.stages[0].node.clone();
    assert!(export(&twice, Target::LlamaCpp, &options).unwrap_err().to_string().contains("holds two stages"));
    let mut spaced = plan.clone();
    spaced.stages[0].node = "my desk".into();
    assert!(export(&spaced, Target::Kubernetes, &options).unwrap_err().to_string().contains("cannot be a host"));
    let mut none = plan.clone();
    none.stages.clear();
    assert!(export(&none, Target::DeepSpeed, &options).unwrap_err().to_string().contains("no stages"));
    let unknown = ExportOptions { main: Some("laptop".into()), ..options.clone() };
    let error = export(&plan, Target::LlamaCpp, &unknown).unwrap_err().to_string();
    assert!(error.starts_with("`main` names `laptop`"), "{error}");
    assert!("ollama".parse::<Target>().unwrap_err().to_string().contains("llama.cpp, vllm"));
}
