//! Mounting the `<stage-plan>` widget: `stage-plan.js` defines the element and calls this
//! with a container inside the element's shadow root.

use leptos::prelude::*;
use stageplan::Scenario;
use stageplan_web::state::AppState;
use stageplan_web::ui::Widget;
use wasm_bindgen::prelude::*;

/// Mounts a live, editable plan of `scenario` into `container`; each call is independent,
/// so a page can hold several.
///
/// # Errors
/// A JS `Error` with the CLI's message when the scenario is invalid (nothing is mounted).
#[wasm_bindgen(js_name = mountWidget, skip_typescript)]
pub fn mount_widget(container: web_sys::HtmlElement, scenario: JsValue) -> Result<(), JsError> {
    let text = super::text(&scenario, "scenario")?;
    let scenario = Scenario::from_json(&text).map_err(|e| JsError::new(&e.to_string()))?;
    // Check it plans before mounting: a broken scenario shows the element's fallback.
    scenario.problem().map_err(|e| JsError::new(&e.to_string()))?;
    let initial = AppState::from_scenario(&scenario);
    leptos::mount::mount_to(container, move || view! { <Widget initial=initial/> }).forget();
    Ok(())
}
