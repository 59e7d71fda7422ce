//! stageplan for JavaScript: the planner as a wasm-bindgen API for browsers and Node, which
//! the `<stage-plan>` element (`web/embed/stage-plan.js`, plain DOM) draws from through
//! `planView`: one module for a page's widgets and API calls (`api`). What only some pages
//! need — model files, re-planning, model summaries — is the `more` feature, a second module
//! loaded on demand.
//!
//! Values cross the boundary as plain objects (JSON text parsed by `JSON.parse`);
//! inputs may be objects or JSON text and are read by the core's own parsers, so errors are
//! JS `Error`s with the CLI's messages; a scenario's error also has `path` (the field's JSON
//! path, `nodes[2].bandwidth`) and `value` (what was written there, as JSON text). The declarations appended to wasm-bindgen's are
//! `outputs.d.ts` (what the functions return, generated from the core's types by
//! `tests/typescript.rs`), `stageplan.d.ts` (what they take, hand-written) and `api.d.ts`
//! and `more.d.ts` (each feature's functions); the functions skip wasm-bindgen's own
//! signatures, which cannot say "optional".

// Exported functions take JavaScript values by value, as wasm-bindgen passes them.
#![allow(clippy::needless_pass_by_value)]

use serde::Serialize;
use serde::de::DeserializeOwned;
use wasm_bindgen::prelude::*;

pub mod api;

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &str = concat!(include_str!("stageplan.d.ts"), include_str!("outputs.d.ts"));
#[cfg(feature = "api")]
#[wasm_bindgen(typescript_custom_section)]
const API_TYPES: &str = include_str!("api.d.ts");
#[cfg(feature = "more")]
#[wasm_bindgen(typescript_custom_section)]
const MORE_TYPES: &str = include_str!("more.d.ts");

/// Plans a scenario: the same plan as `stageplan plan --format json`.
///
/// `modelFile` supplies the header of the model file a scenario names (`model.file`); only
/// the `more` module reads one.
///
/// # Errors
/// A JS `Error` with the CLI's message, the field's `path` and its `value` when the scenario
/// is invalid.
#[wasm_bindgen(skip_typescript)]
pub fn plan(
    scenario: JsValue,
    #[wasm_bindgen(js_name = modelFile)] model_file: Option<JsValue>,
) -> Result<JsValue, JsValue> {
    let scenario = text(&scenario, "scenario")?;
    let planned = match model_file.filter(|f| !f.is_undefined() && !f.is_null()) {
        None => api::plan(&scenario),
        #[cfg(feature = "more")]
        Some(file) => {
            let (name, bytes, size) = model_file_parts(&file)?;
            api::plan_with_file(&scenario, api::ModelFile { name: &name, bytes: &bytes, size, config: None })
        }
        #[cfg(not(feature = "more"))]
        Some(_) => Err(api::Failure::from(
            "`modelFile`: model files are read by the `stageplan/more` module; call its `plan`".to_owned(),
        )),
    };
    Ok(output(&planned.map_err(js_failure)?)?)
}

/// A scenario planned and laid out for drawing, as `<stage-plan>` shows it: bands across
/// the layer axis, memory bars, stage rows and the verdict's texts, all computed here.
/// `options.enabled` switches scenario nodes off (one boolean per node).
///
/// # Errors
/// A JS `Error` with the CLI's message, the field's `path` and its `value` when the scenario
/// is invalid.
#[wasm_bindgen(js_name = planView, skip_typescript)]
pub fn plan_view(scenario: JsValue, options: Option<JsValue>) -> Result<JsValue, JsValue> {
    let scenario = text(&scenario, "scenario")?;
    let options: ViewOptions = read_options(options)?;
    Ok(output(&api::plan_view(&scenario, options.enabled.as_deref()).map_err(js_failure)?)?)
}

/// `planView`'s and `usersView`'s options: which scenario nodes are on.
#[derive(Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ViewOptions {
    enabled: Option<Vec<bool>>,
}

/// The users chart of a scenario's plan, laid out for drawing as `<stage-plan>`'s users
/// panel shows it: p95 time to first token and per token for 1, 2, 4, … users of one
/// llama-server (each count planned and simulated as `stageplan plan --users N`), and how
/// many see their first token within 2 s (`stageplan plan --ttft 2s`).
///
/// # Errors
/// A JS `Error` with the CLI's message: an invalid scenario (with `path` and `value`), or
/// what stops the simulation.
#[wasm_bindgen(js_name = usersView, skip_typescript)]
pub fn users_view(scenario: JsValue, options: Option<JsValue>) -> Result<JsValue, JsValue> {
    let scenario = text(&scenario, "scenario")?;
    let options: ViewOptions = read_options(options)?;
    Ok(output(&api::users_view(&scenario, options.enabled.as_deref()).map_err(js_failure)?)?)
}

/// A model's parameters, bytes per layer, type mix and KV bytes per token, from a preset name
/// or a `config.json` (object or text): what `stageplan model --format json` prints.
///
/// # Errors
/// An unknown preset, a malformed config, or an unknown weight or KV format.
#[cfg(feature = "more")]
#[wasm_bindgen(skip_typescript)]
pub fn model(
    #[wasm_bindgen(js_name = presetOrConfig)] preset_or_config: JsValue,
    options: Option<JsValue>,
) -> Result<JsValue, JsError> {
    let input = text(&preset_or_config, "presetOrConfig")?;
    let options: Options = read_options(options)?;
    let summary = api::model(
        &input,
        options.weights.as_deref(),
        api::Caches { kv: options.kv.as_deref(), kv_v: options.kv_v.as_deref() },
    )
    .map_err(|e| JsError::new(&e))?;
    output(&summary)
}

/// Every model preset, device preset, weight format and KV-cache format.
///
/// # Errors
/// None in practice (conversion to JS values).
#[cfg(feature = "api")]
#[wasm_bindgen(skip_typescript)]
pub fn presets() -> Result<JsValue, JsError> {
    output(&stageplan::presets::catalog())
}

/// Re-plans a changed cluster from the plan running now (what `plan` returned): the new
/// plan and the fewest moves that reach it, as `stageplan replan` prints.
///
/// # Errors
/// A current plan or scenario that does not parse, or options out of range.
#[cfg(feature = "more")]
#[wasm_bindgen(skip_typescript)]
pub fn replan(current: JsValue, scenario: JsValue, options: Option<JsValue>) -> Result<JsValue, JsValue> {
    let current = text(&current, "current")?;
    let scenario = text(&scenario, "scenario")?;
    let options = options.filter(|o| !o.is_undefined() && !o.is_null()).map(|o| text(&o, "options")).transpose()?;
    Ok(output(&api::replan(&current, &scenario, options.as_deref()).map_err(js_failure)?)?)
}

/// How many users of one llama-server meet `options.ttft`/`options.tpot` (at
/// `options.percentile`, `p95` by default), or with `options.users` what that many see: the
/// plan for them, what they saw, the targets held and how many meet them, as `stageplan plan
/// --users`/`--ttft`/`--tpot --format json` prints; without options, what the scenario's
/// `serving` asks.
///
/// # Errors
/// A JS `Error` with the CLI's message (and the field's `path` for the scenario's).
#[cfg(feature = "more")]
#[wasm_bindgen(skip_typescript)]
pub fn serve(scenario: JsValue, options: Option<JsValue>) -> Result<JsValue, JsValue> {
    let scenario = text(&scenario, "scenario")?;
    let options = options.filter(|o| !o.is_undefined() && !o.is_null()).map(|o| text(&o, "options")).transpose()?;
    Ok(output(&api::serve(&scenario, options.as_deref().unwrap_or("{}")).map_err(js_failure)?)?)
}

/// Reads a model file's header from its first bytes (`.gguf`, `.safetensors`,
/// `config.json`): `{ model }` when they hold the whole header, else `{ needMore: n }`, the
/// number of bytes to read from the start of the file before calling again.
///
/// # Errors
/// Bytes that are not a model file, or a malformed header (with the byte offset).
#[cfg(feature = "more")]
#[wasm_bindgen(js_name = importHeader, skip_typescript)]
pub fn import_header(
    bytes: &[u8],
    #[wasm_bindgen(js_name = fileName)] file_name: &str,
    options: Option<JsValue>,
) -> Result<JsValue, JsError> {
    let options: Options = read_options(options)?;
    let config = options
        .config
        .as_ref()
        .map(|c| {
            let text = c.as_str().map_or_else(|| c.to_string(), str::to_owned);
            stageplan::model::HfConfig::from_json(&text).map_err(|e| JsError::new(&format!("`config`: {e}")))
        })
        .transpose()?;
    let file = api::ModelFile { name: file_name, bytes, size: options.file_size, config: config.as_ref() };
    output(
        &api::import_header(
            file,
            options.weights.as_deref(),
            api::Caches { kv: options.kv.as_deref(), kv_v: options.kv_v.as_deref() },
        )
        .map_err(|e| JsError::new(&e))?,
    )
}

/// Options of `model` and `importHeader`.
#[cfg_attr(not(feature = "more"), allow(dead_code))]
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Options {
    weights: Option<String>,
    kv: Option<String>,
    kv_v: Option<String>,
    file_size: Option<u64>,
    /// `config.json` (object or text) for a safetensors file.
    config: Option<serde_json::Value>,
}

/// A JS `Error` with the message, and `path` and `value` when the failure has them.
fn js_failure(failure: api::Failure) -> JsValue {
    let error = js_sys::Error::new(&failure.message);
    for (key, value) in [("path", failure.path), ("value", failure.value)] {
        if let Some(value) = value {
            // Setting a property on a fresh `Error` object cannot fail.
            let _ = js_sys::Reflect::set(&error, &JsValue::from_str(key), &JsValue::from_str(&value));
        }
    }
    error.into()
}

fn read_options<T: DeserializeOwned + Default>(options: Option<JsValue>) -> Result<T, JsError> {
    let Some(options) = options.filter(|o| !o.is_undefined() && !o.is_null()) else {
        return Ok(T::default());
    };
    let json = text(&options, "options")?;
    serde_json::from_str(&json).map_err(|e| JsError::new(&format!("options: {e}")))
}

/// A value as JSON text: strings as they are, objects through `JSON.stringify`, so the
/// core's parsers (with their field paths) read every input.
fn text(value: &JsValue, what: &str) -> Result<String, JsError> {
    if let Some(text) = value.as_string() {
        return Ok(text);
    }
    if value.is_undefined() || value.is_null() {
        return Err(JsError::new(&format!("`{what}` is missing; pass an object or its JSON text")));
    }
    let text = js_sys::JSON::stringify(value).ok().and_then(|s| s.as_string()).ok_or_else(|| {
        JsError::new(&format!("`{what}` cannot be written as JSON (does it hold a BigInt or a cycle?)"))
    })?;
    // JSON.stringify writes Infinity and NaN as `null`, which would read as "not given" (a
    // preset's figure in its place): find the number and name its field instead.
    if text.contains("null")
        && let Some(path) = non_finite(value, String::new(), 0)
    {
        return Err(JsError::new(&format!(
            "`{path}` is not a finite number; give a number or a quantity like \"24 GiB\""
        )));
    }
    Ok(text)
}

/// The path of the first non-finite number in `value` (objects and arrays, a bounded depth:
/// `JSON.stringify` has already refused cycles).
fn non_finite(value: &JsValue, path: String, depth: usize) -> Option<String> {
    if let Some(number) = value.as_f64() {
        return (!number.is_finite()).then_some(path);
    }
    if depth > 64 || !value.is_object() {
        return None;
    }
    if js_sys::Array::is_array(value) {
        let array = js_sys::Array::from(value);
        return (0..array.length()).find_map(|i| non_finite(&array.get(i), format!("{path}[{i}]"), depth + 1));
    }
    let object = js_sys::Object::from(value.clone());
    js_sys::Object::entries(&object).iter().find_map(|entry| {
        let pair = js_sys::Array::from(&entry);
        let key = pair.get(0).as_string()?;
        let inner = if path.is_empty() { key } else { format!("{path}.{key}") };
        non_finite(&pair.get(1), inner, depth + 1)
    })
}

#[cfg(feature = "more")]
/// `{ name, bytes, size? }` of a model file.
fn model_file_parts(value: &JsValue) -> Result<(String, Vec<u8>, Option<u64>), JsError> {
    let get = |key: &str| js_sys::Reflect::get(value, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED);
    let name = get("name").as_string().ok_or_else(|| JsError::new("`modelFile.name` must be the file's name"))?;
    let bytes = get("bytes")
        .dyn_into::<js_sys::Uint8Array>()
        .map_err(|_| JsError::new("`modelFile.bytes` must be a Uint8Array of the file's first bytes"))?
        .to_vec();
    let size = get("size").as_f64().filter(|s| s.is_finite() && *s >= 0.0).map(|s| s as u64);
    Ok((name, bytes, size))
}

/// A Rust value as a plain JS object: its JSON text, parsed by the engine's own `JSON.parse`
/// (one serializer in the module, and integers above 2^53 — sizes over 8 PiB — become the
/// nearest JavaScript number, as every other figure already is).
fn output<T: Serialize>(value: &T) -> Result<JsValue, JsError> {
    let json = serde_json::to_string(value).map_err(|e| JsError::new(&e.to_string()))?;
    js_sys::JSON::parse(&json).map_err(|_| JsError::new("the planner wrote JSON the engine could not read"))
}
