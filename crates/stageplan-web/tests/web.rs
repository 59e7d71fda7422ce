//! Component tests in a real browser (`wasm-bindgen-test`, headless Chromium): the pieces
//! with logic — share-link encoding, the plan's view model — and the page itself mounted,
//! edited and re-planned.
#![cfg(target_arch = "wasm32")]

use leptos::mount::mount_to;
use leptos::prelude::*;
use leptos::task::tick;
use stageplan::view::plan_view;
use stageplan_web::state::{AppState, NodeDraft};
use wasm_bindgen::JsCast;
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

fn container() -> web_sys::HtmlElement {
    let element = document().create_element("div").expect("a div");
    document().body().expect("a body").append_child(&element).expect("appended");
    element.unchecked_into()
}

#[wasm_bindgen_test]
fn share_links_round_trip_in_the_browser() {
    let mut state = AppState::default();
    state.nodes[0].enabled = false;
    state.nodes.push(NodeDraft {
        id: 9,
        name: "mini".into(),
        device: "m4-pro-64gb".into(),
        enabled: true,
        ..NodeDraft::default()
    });
    let back = AppState::from_fragment(&state.to_fragment()).expect("decodes");
    assert_eq!(back, state);
    for hostile in ["#s1.%%%", "#s1.W10", "#hello", "#s1.eyJub2RlcyI6IDV9"] {
        assert!(AppState::from_fragment(hostile).is_err(), "{hostile}");
    }
}

#[wasm_bindgen_test]
fn the_view_model_lays_out_the_default_plan() {
    let state = AppState::default();
    let problem = stageplan::check(state.scenario().expect("valid"), stageplan::check::no_model_files)
        .expect("plannable")
        .problem;
    let plan = stageplan::plan_with(&problem, stageplan::planner::PlanOptions::default().enabled(&state.enabled()));
    let view = plan_view(&plan, problem.model.num_layers(), &|_| 0);
    let covered: f64 = view.bands.iter().map(|b| b.width_pct).sum();
    assert!((covered - 100.0).abs() < 1e-9);
    assert_eq!(view.baselines.len(), 3);
    assert!((view.ours_pct - 100.0).abs() < 1e-9);
}

#[wasm_bindgen_test]
async fn the_page_replans_when_a_field_changes() {
    let root = container();
    let _mounted = mount_to(root.clone(), stageplan_web::App);
    let headline =
        || root.query_selector("#plan-headline").expect("query").map(|e| e.text_content().unwrap_or_default());
    let first = headline().expect("a plan on first render");
    assert!(first.contains("tok/s"), "{first}");

    let context: web_sys::HtmlInputElement =
        root.query_selector("#context").expect("query").expect("field").unchecked_into();
    context.set_value("131072");
    context.dispatch_event(&web_sys::Event::new("input").expect("event")).expect("dispatched");
    tick().await;
    let longer = headline().expect("still a plan");
    assert_ne!(longer, first, "a 16× longer context changes the plan");

    context.set_value("-1");
    context.dispatch_event(&web_sys::Event::new("input").expect("event")).expect("dispatched");
    tick().await;
    let error = root.query_selector("#error").expect("query").expect("the problem above the plan");
    assert!(error.text_content().unwrap_or_default().contains("is not a number of tokens"));
    // At the field too, and the last plan stays, dimmed.
    assert_eq!(context.get_attribute("aria-invalid").as_deref(), Some("true"));
    assert!(root.query_selector("#context-error").expect("query").is_some(), "the message beside the field");
    assert!(root.query_selector(".plan-body.stale #plan-headline").expect("query").is_some(), "the last plan, dimmed");
}
