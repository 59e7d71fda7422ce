//! The embed widget: a compact plan for documentation pages (`<stage-plan>`), editable in
//! place — context, weight format, machines — and re-planned on every edit.
//!
//! It holds an [`AppState`] like the page and plans with the page's [`compute`]; the stage
//! diagram and table are the page's [`StagesView`]. Class names carry an `sp-` prefix and
//! the element that mounts it keeps them in a shadow root, so nothing leaks either way.

use leptos::prelude::*;
use stageplan::WeightFormat;
use stageplan::presets::DEVICES;

use super::results::StagesView;
use crate::planning::compute;
use crate::state::{AppState, ModelSource, NodeDraft};

/// The widget, starting from `initial` (a scenario read by [`AppState::from_scenario`]).
#[component]
pub fn Widget(initial: AppState) -> impl IntoView {
    let state = RwSignal::new(initial);
    let outcome = Memo::new(move |_| state.with(|s| compute(s, None)));
    let weights_editable = state.with_untracked(|s| s.model.source != ModelSource::File);
    let set_weights = move |ev| state.update(|s| s.model.weights = event_target_value(&ev));
    let set_context = move |ev| state.update(|s| s.context = event_target_value(&ev));
    let add_node = move |ev: leptos::ev::Event| {
        let device = event_target_value(&ev);
        if device.is_empty() {
            return;
        }
        state.update(|s| {
            let name = unique_name(s, &device);
            let mut node = NodeDraft::preset(&name, &device);
            node.id = s.next_id();
            s.nodes.push(node);
        });
        // Back to the prompt, so the same device can be added again.
        event_target::<web_sys::HtmlSelectElement>(&ev).set_value("");
    };
    view! {
        <div class="sp-widget">
            <div class="sp-controls">
                <span class="sp-model">{move || outcome.with(|o| o.as_ref().map(|o| o.model.clone()).unwrap_or_default())}</span>
                {weights_editable.then(|| view! {
                    <label class="sp-field">"weights "
                        <select class="sp-weights" on:change=set_weights>
                            {WeightFormat::all().into_iter().map(|w| {
                                let name = w.to_string();
                                let selected = state.with_untracked(|s| s.model.weights == name);
                                view! { <option value=name.clone() selected=selected>{name.clone()}</option> }
                            }).collect_view()}
                        </select>
                    </label>
                })}
                <label class="sp-field">"context "
                    <input class="sp-context" type="number" min="1" step="1024"
                        prop:value=move || state.with(|s| s.context.clone()) on:change=set_context/>
                </label>
            </div>
            <ul class="sp-nodes" aria-label="machines">
                {move || state.with(|s| s.nodes.iter().map(|node| {
                    let id = node.id;
                    let toggle = move |_| state.update(|s| {
                        if let Some(n) = s.nodes.iter_mut().find(|n| n.id == id) {
                            n.enabled = !n.enabled;
                        }
                    });
                    let remove = move |_| state.update(|s| s.nodes.retain(|n| n.id != id));
                    let what = if node.device.is_empty() { node.memory.clone() } else { node.device.clone() };
                    view! {
                        <li class="sp-node" data-node=node.name.clone()>
                            <label><input type="checkbox" prop:checked=node.enabled on:change=toggle/>
                                " " {node.name.clone()} " " <small>{what}</small></label>
                            <button type="button" class="sp-remove" aria-label=format!("remove {}", node.name) on:click=remove>"×"</button>
                        </li>
                    }
                }).collect_view())}
                <li class="sp-add">
                    <select class="sp-add-device" aria-label="add a machine" on:change=add_node>
                        <option value="" selected=true>"+ add a machine"</option>
                        {DEVICES.iter().map(|d| view! { <option value=d.name>{d.title}</option> }).collect_view()}
                    </select>
                </li>
            </ul>
            {move || outcome.with(|o| match o {
                Err(error) => view! { <p class="sp-error" role="alert">{error.message.clone()}</p> }.into_any(),
                Ok(o) => {
                    let best_other = o.view.baselines.iter().filter(|b| b.feasible).max_by(|a, b| a.pct.total_cmp(&b.pct));
                    view! {
                        <p class="sp-headline" class:infeasible=!o.view.feasible>{super::results::prose(&o.view.headline)}</p>
                        <StagesView plan=o.plan.clone() view=o.view.clone()/>
                        <p class="sp-details">{o.view.details.iter().map(|line| view! { <span class="line">{super::results::prose(line)}</span> }).collect_view()}</p>
                        {best_other.map(|b| view! {
                            <p class="sp-baseline">"best split other tools make here (" {b.policy} "): " {b.figure.clone()}</p>
                        })}
                    }
                    .into_any()
                }
            })}
        </div>
    }
}

/// `device`, or `device-2`, `device-3`… whichever no node is called yet.
fn unique_name(state: &AppState, device: &str) -> String {
    let taken = |name: &str| state.nodes.iter().any(|n| n.name == name);
    if !taken(device) {
        return device.to_owned();
    }
    // Of `nodes + 1` candidates at least one is free.
    (2..=state.nodes.len() + 2).map(|k| format!("{device}-{k}")).find(|name| !taken(name)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_machines_get_names_no_node_has() {
        let state = AppState {
            nodes: vec![NodeDraft::preset("rtx-4090", "rtx-4090"), NodeDraft::preset("rtx-4090-2", "rtx-4090")],
            ..AppState::default()
        };
        assert_eq!(unique_name(&state, "rtx-4090"), "rtx-4090-3");
        assert_eq!(unique_name(&state, "h100"), "h100");
    }
}
