//! The scenario read by hand from a JSON tree (issue #45 item 7).
//!
//! serde's derived `Deserialize` for the scenario's twenty types was the largest piece of
//! every first plan: 43 kB of the widget's 194 kB gzip of WebAssembly, each type's visitor
//! instantiated for serde_json's reader. Here the text is read once into a [`Json`] tree
//! (serde_json's parser, its syntax errors with their line and column, as before), and each
//! type is read from the tree by a few lines that build the field's path as they go, so an
//! error names `nodes[1].host.memory` without scanning the text back.
//!
//! The rules are serde's, as the derive applied them: an unknown key is an error, a missing
//! optional field or `null` is `None`, a missing field with a default takes it (`null` there
//! is a wrong type), and the messages keep serde's words (`unknown field`, `missing field`,
//! `invalid type`, `unknown variant`). `Scenario` and `NodeSpec` deserialize through this
//! reader too, so the loop's stored specs and the llama-bench fit read them by one rule.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::*;
use crate::device::{Backend, DeviceKind, Efficiency};
use crate::engine::Engine;
use crate::units::{Bandwidth, Bytes, Compute, Dimension, QuantityError, Seconds};

/// A JSON value as written, objects in their order. A key given twice is refused where
/// serde_json reads it, with its line and column, so the path scan names the object.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    /// Counts and fractions apart, as serde_json reads them: a `u64` field takes the first.
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Json, D::Error> {
        struct Tree;
        impl<'de> Visitor<'de> for Tree {
            type Value = Json;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E>(self) -> Result<Json, E> {
                Ok(Json::Null)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
                Ok(Json::Bool(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
                Ok(Json::Unsigned(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
                Ok(Json::Signed(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Json, E> {
                Ok(Json::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Json, E> {
                Ok(Json::String(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Json, E> {
                Ok(Json::String(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Json::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
                let mut entries: Vec<(String, Json)> = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if entries.iter().any(|(k, _)| *k == key) {
                        return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
                    }
                    let value = map.next_value()?;
                    entries.push((key, value));
                }
                Ok(Json::Object(entries))
            }
        }
        deserializer.deserialize_any(Tree)
    }
}

impl Json {
    /// What serde calls it in "invalid type: …, expected …".
    fn unexpected(&self) -> String {
        match self {
            Json::Null => "null".to_owned(),
            Json::Bool(v) => format!("boolean `{v}`"),
            Json::Unsigned(v) => format!("integer `{v}`"),
            Json::Signed(v) => format!("integer `{v}`"),
            Json::Float(v) => format!("floating point `{v}`"),
            Json::String(v) => format!("string {v:?}"),
            Json::Array(_) => "sequence".to_owned(),
            Json::Object(_) => "map".to_owned(),
        }
    }

    /// Compact JSON text of the value (an inline `config.json`, read later by its own reader).
    fn text(&self) -> String {
        match self {
            Json::Null => "null".to_owned(),
            Json::Bool(v) => v.to_string(),
            Json::Unsigned(v) => v.to_string(),
            Json::Signed(v) => v.to_string(),
            Json::Float(v) => serde_json::Number::from_f64(*v).map_or_else(|| "null".to_owned(), |n| n.to_string()),
            Json::String(v) => quoted(v),
            Json::Array(items) => format!("[{}]", items.iter().map(Json::text).collect::<Vec<_>>().join(",")),
            Json::Object(entries) => format!(
                "{{{}}}",
                entries.iter().map(|(k, v)| format!("{}:{}", quoted(k), v.text())).collect::<Vec<_>>().join(",")
            ),
        }
    }
}

/// A string as JSON writes it.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// A field that cannot be read: where, and serde's words for why.
#[derive(Debug)]
pub(crate) struct Wrong {
    pub path: String,
    pub message: String,
}

type Read<T> = Result<T, Wrong>;

fn wrong(path: &str, message: String) -> Wrong {
    Wrong { path: path.to_owned(), message }
}

fn invalid_type(path: &str, json: &Json, expected: &str) -> Wrong {
    wrong(path, format!("invalid type: {}, expected {expected}", json.unexpected()))
}

/// serde's list of what was expected: `a`, `a` or `b`, one of `a`, `b`, `c`.
fn one_of(names: &[&str]) -> String {
    match names {
        [] => "nothing".to_owned(),
        [one] => format!("`{one}`"),
        [a, b] => format!("`{a}` or `{b}`"),
        _ => format!("one of {}", names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")),
    }
}

/// A child's path: `nodes[1]` and `memory` make `nodes[1].memory`.
fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

/// An object's entries, every key one of the type's fields.
struct Fields<'a> {
    entries: &'a [(String, Json)],
    path: &'a str,
}

impl<'a> Fields<'a> {
    fn of(json: &'a Json, path: &'a str, what: &str, known: &[&str]) -> Read<Fields<'a>> {
        let Json::Object(entries) = json else { return Err(invalid_type(path, json, what)) };
        if let Some((key, _)) = entries.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            return Err(wrong(&join(path, key), format!("unknown field `{key}`, expected {}", one_of(known))));
        }
        Ok(Fields { entries, path })
    }

    fn value(&self, key: &str) -> Option<(&'a Json, String)> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| (v, join(self.path, key)))
    }

    /// An `Option` field: absent or `null` is `None`.
    fn optional<T>(&self, key: &str, read: impl Fn(&Json, &str) -> Read<T>) -> Read<Option<T>> {
        match self.value(key) {
            None | Some((Json::Null, _)) => Ok(None),
            Some((json, path)) => read(json, &path).map(Some),
        }
    }

    /// A field with a default: absent takes it.
    fn or<T>(&self, key: &str, default: impl FnOnce() -> T, read: impl Fn(&Json, &str) -> Read<T>) -> Read<T> {
        match self.value(key) {
            None => Ok(default()),
            Some((json, path)) => read(json, &path),
        }
    }

    fn required<T>(&self, key: &str, read: impl Fn(&Json, &str) -> Read<T>) -> Read<T> {
        match self.value(key) {
            None => Err(wrong(self.path, format!("missing field `{key}`"))),
            Some((json, path)) => read(json, &path),
        }
    }
}

fn string(json: &Json, path: &str) -> Read<String> {
    match json {
        Json::String(v) => Ok(v.clone()),
        _ => Err(invalid_type(path, json, "a string")),
    }
}

fn boolean(json: &Json, path: &str) -> Read<bool> {
    match json {
        Json::Bool(v) => Ok(*v),
        _ => Err(invalid_type(path, json, "a boolean")),
    }
}

fn unsigned(json: &Json, path: &str) -> Read<u64> {
    match json {
        Json::Unsigned(v) => Ok(*v),
        Json::Signed(v) => Err(wrong(path, format!("invalid value: integer `{v}`, expected u64"))),
        _ => Err(invalid_type(path, json, "u64")),
    }
}

fn unsigned32(json: &Json, path: &str) -> Read<u32> {
    match json {
        Json::Unsigned(v) => {
            u32::try_from(*v).map_err(|_| wrong(path, format!("invalid value: integer `{v}`, expected u32")))
        }
        Json::Signed(v) => Err(wrong(path, format!("invalid value: integer `{v}`, expected u32"))),
        _ => Err(invalid_type(path, json, "u32")),
    }
}

fn float(json: &Json, path: &str) -> Read<f64> {
    match json {
        Json::Unsigned(v) => Ok(*v as f64),
        Json::Signed(v) => Ok(*v as f64),
        Json::Float(v) => Ok(*v),
        _ => Err(invalid_type(path, json, "f64")),
    }
}

/// Elements of an array, each with its path.
fn array<T>(json: &Json, path: &str, read: impl Fn(&Json, &str) -> Read<T>) -> Read<Vec<T>> {
    let Json::Array(items) = json else { return Err(invalid_type(path, json, "a sequence")) };
    // A loop, not `collect::<Result<_>>()`: its adapters were 14 kB of the widget's code.
    let mut read_items = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        read_items.push(read(item, &format!("{path}[{i}]"))?);
    }
    Ok(read_items)
}

fn pair<T>(json: &Json, path: &str, read: impl Fn(&Json, &str) -> Read<T>) -> Read<[T; 2]> {
    let mut items = array(json, path, read)?;
    match (items.pop(), items.pop(), items.is_empty()) {
        (Some(second), Some(first), true) => Ok([first, second]),
        _ => Err(wrong(path, format!("invalid length {}, expected an array of length 2", array_len(json)))),
    }
}

fn array_len(json: &Json) -> usize {
    if let Json::Array(items) = json { items.len() } else { 0 }
}

/// A quantity: a string with its unit, or a number in base units.
fn quantity<Q>(
    dimension: Dimension,
    new: fn(f64) -> Result<Q, QuantityError>,
    parse: fn(&str) -> Result<Q, QuantityError>,
) -> impl Fn(&Json, &str) -> Read<Q> {
    move |json, path| {
        let read = match json {
            Json::String(v) => parse(v),
            Json::Unsigned(v) => new(*v as f64),
            Json::Signed(v) => new(*v as f64),
            Json::Float(v) => new(*v),
            _ => return Err(invalid_type(path, json, &dimension.expecting())),
        };
        read.map_err(|e| wrong(path, e.to_string()))
    }
}

fn bytes(json: &Json, path: &str) -> Read<Bytes> {
    quantity(Dimension::Memory, Bytes::new, Bytes::parse)(json, path)
}

fn bandwidth(json: &Json, path: &str) -> Read<Bandwidth> {
    quantity(Dimension::Bandwidth, Bandwidth::new, Bandwidth::parse)(json, path)
}

fn compute(json: &Json, path: &str) -> Read<Compute> {
    quantity(Dimension::Compute, Compute::new, Compute::parse)(json, path)
}

fn seconds(json: &Json, path: &str) -> Read<Seconds> {
    quantity(Dimension::Time, Seconds::new, Seconds::parse)(json, path)
}

/// One of `variants` by its name.
fn variant<T: Copy>(variants: &[T], name: fn(T) -> &'static str) -> impl Fn(&Json, &str) -> Read<T> + '_ {
    move |json, path| {
        let Json::String(written) = json else { return Err(invalid_type(path, json, "a string")) };
        variants.iter().copied().find(|&v| name(v) == written).ok_or_else(|| {
            let names: Vec<&str> = variants.iter().map(|&v| name(v)).collect();
            wrong(path, format!("unknown variant `{written}`, expected {}", one_of(&names)))
        })
    }
}

fn workspace(json: &Json, path: &str) -> Read<Workspace> {
    match json {
        Json::String(v) if v == "auto" => Ok(Workspace::Auto(AutoWord::Auto)),
        Json::String(v) => {
            Bytes::parse(v).map(Workspace::Size).map_err(|e| wrong(path, format!("{e}, or write \"auto\"")))
        }
        Json::Unsigned(_) | Json::Signed(_) | Json::Float(_) => bytes(json, path).map(Workspace::Size),
        _ => Err(invalid_type(path, json, "a size like `2 GiB`, or \"auto\"")),
    }
}

fn inline_config(json: &Json, path: &str) -> Read<InlineConfig> {
    InlineConfig::from_text(&json.text()).map_err(|e| wrong(path, e.to_string()))
}

/// A whole scenario.
pub(crate) fn scenario(json: &Json) -> Read<Scenario> {
    let f = Fields::of(
        json,
        "",
        "struct Scenario",
        &["model", "workload", "nodes", "links", "objective", "policy", "engine", "stages", "serving"],
    )?;
    Ok(Scenario {
        model: f.required("model", model)?,
        workload: f.or("workload", WorkloadSpec::default, workload)?,
        nodes: f.required("nodes", |j, p| array(j, p, node))?,
        links: f.or("links", LinksSpec::default, links)?,
        objective: f.or("objective", Objective::default, variant(&Objective::ALL, Objective::name))?,
        policy: f.or("policy", Policy::default, variant(&Policy::ALL, Policy::name))?,
        engine: f.or("engine", Engine::default, variant(&Engine::ALL, Engine::name))?,
        stages: f.optional("stages", |j, p| array(j, p, stage))?,
        serving: f.optional("serving", serving)?,
    })
}

fn serving(json: &Json, path: &str) -> Read<ServingSpec> {
    use crate::demand::Percentile;
    let f = Fields::of(json, path, "struct ServingSpec", &["users", "rate", "spread", "ttft", "tpot", "percentile"])?;
    Ok(ServingSpec {
        users: f.optional("users", unsigned32)?,
        rate: f.optional("rate", float)?,
        spread: f.optional("spread", float)?,
        ttft: f.optional("ttft", seconds)?,
        tpot: f.optional("tpot", seconds)?,
        percentile: f.optional("percentile", variant(&Percentile::ALL, Percentile::name))?,
    })
}

fn model(json: &Json, path: &str) -> Read<ModelSpec> {
    let f = Fields::of(
        json,
        path,
        "struct ModelSpec",
        &["preset", "config", "file", "name", "weights", "draft", "mmproj"],
    )?;
    Ok(ModelSpec {
        preset: f.optional("preset", string)?,
        config: f.optional("config", inline_config)?,
        file: f.optional("file", string)?,
        name: f.optional("name", string)?,
        weights: f.optional("weights", string)?,
        draft: f.optional("draft", draft)?,
        mmproj: f.optional("mmproj", projector)?,
    })
}

fn draft(json: &Json, path: &str) -> Read<DraftSpec> {
    let f = Fields::of(json, path, "struct DraftSpec", &["preset", "config", "file", "name", "weights", "kv"])?;
    Ok(DraftSpec {
        preset: f.optional("preset", string)?,
        config: f.optional("config", inline_config)?,
        file: f.optional("file", string)?,
        name: f.optional("name", string)?,
        weights: f.optional("weights", string)?,
        kv: f.optional("kv", string)?,
    })
}

fn projector(json: &Json, path: &str) -> Read<ProjectorSpec> {
    let f = Fields::of(json, path, "struct ProjectorSpec", &["file", "weights", "compute"])?;
    Ok(ProjectorSpec {
        file: f.optional("file", string)?,
        weights: f.optional("weights", bytes)?,
        compute: f.optional("compute", bytes)?,
    })
}

fn workload(json: &Json, path: &str) -> Read<WorkloadSpec> {
    let f = Fields::of(
        json,
        path,
        "struct WorkloadSpec",
        &[
            "context",
            "batch",
            "kv",
            "kv_v",
            "workspace",
            "prefill_chunk",
            "flash_attention",
            "prompt",
            "depth",
            "response",
        ],
    )?;
    let d = WorkloadSpec::default();
    Ok(WorkloadSpec {
        context: f.or("context", || d.context, unsigned)?,
        batch: f.or("batch", || d.batch, unsigned)?,
        kv: f.or("kv", || d.kv.clone(), string)?,
        kv_v: f.optional("kv_v", string)?,
        workspace: f.optional("workspace", workspace)?,
        prefill_chunk: f.or("prefill_chunk", || d.prefill_chunk, unsigned)?,
        flash_attention: f.or("flash_attention", || d.flash_attention, boolean)?,
        prompt: f.optional("prompt", unsigned)?,
        depth: f.optional("depth", unsigned)?,
        response: f.optional("response", unsigned)?,
    })
}

/// One machine of `nodes`.
pub(crate) fn node(json: &Json, path: &str) -> Read<NodeSpec> {
    let f = Fields::of(
        json,
        path,
        "struct NodeSpec",
        &[
            "name",
            "device",
            "kind",
            "memory",
            "bandwidth",
            "compute",
            "reserve",
            "count",
            "efficiency",
            "backend",
            "threads",
            "probe",
            "host",
            "gpus",
            "gpu_link",
        ],
    )?;
    Ok(NodeSpec {
        name: f.required("name", string)?,
        device: f.optional("device", string)?,
        kind: f.optional("kind", variant(&DeviceKind::ALL, DeviceKind::name))?,
        memory: f.optional("memory", bytes)?,
        bandwidth: f.optional("bandwidth", bandwidth)?,
        compute: f.optional("compute", compute)?,
        reserve: f.optional("reserve", bytes)?,
        count: f.optional("count", unsigned32)?,
        efficiency: f.optional("efficiency", efficiency)?,
        backend: f.optional("backend", variant(&Backend::ALL, Backend::name))?,
        threads: f.optional("threads", unsigned32)?,
        probe: f.optional("probe", probe)?,
        host: f.optional("host", host)?,
        gpus: f.optional("gpus", |j, p| array(j, p, gpu))?,
        gpu_link: f.optional("gpu_link", string)?,
    })
}

fn gpu(json: &Json, path: &str) -> Read<GpuSpec> {
    let f = Fields::of(
        json,
        path,
        "struct GpuSpec",
        &["device", "memory", "bandwidth", "compute", "reserve", "backend", "count"],
    )?;
    Ok(GpuSpec {
        device: f.optional("device", string)?,
        memory: f.optional("memory", bytes)?,
        bandwidth: f.optional("bandwidth", bandwidth)?,
        compute: f.optional("compute", compute)?,
        reserve: f.optional("reserve", bytes)?,
        backend: f.optional("backend", variant(&Backend::ALL, Backend::name))?,
        count: f.optional("count", unsigned32)?,
    })
}

fn host(json: &Json, path: &str) -> Read<HostSpec> {
    let f = Fields::of(json, path, "struct HostSpec", &["ram", "memory", "reserve", "bandwidth", "threads", "link"])?;
    Ok(HostSpec {
        ram: f.optional("ram", string)?,
        memory: f.optional("memory", bytes)?,
        reserve: f.optional("reserve", bytes)?,
        bandwidth: f.optional("bandwidth", bandwidth)?,
        threads: f.optional("threads", unsigned32)?,
        link: f.optional("link", bandwidth)?,
    })
}

fn efficiency(json: &Json, path: &str) -> Read<Efficiency> {
    let f = Fields::of(json, path, "struct Efficiency", &["bandwidth", "compute"])?;
    let d = Efficiency::default();
    Ok(Efficiency {
        bandwidth: f.or("bandwidth", || d.bandwidth, float)?,
        compute: f.or("compute", || d.compute, float)?,
    })
}

fn probe(json: &Json, path: &str) -> Read<ProbeProvenance> {
    let f = Fields::of(
        json,
        path,
        "struct ProbeProvenance",
        &[
            "adapter",
            "backend",
            "device_type",
            "memory_source",
            "bandwidth_spread",
            "compute_spread",
            "method",
            "engine",
        ],
    )?;
    Ok(ProbeProvenance {
        adapter: f.or("adapter", String::new, string)?,
        backend: f.or("backend", String::new, string)?,
        device_type: f.or("device_type", String::new, string)?,
        memory_source: f.or("memory_source", String::new, string)?,
        bandwidth_spread: f.or("bandwidth_spread", || 0.0, float)?,
        compute_spread: f.or("compute_spread", || 0.0, float)?,
        method: f.or("method", String::new, string)?,
        engine: f.optional("engine", engine_fit)?,
    })
}

fn engine_fit(json: &Json, path: &str) -> Read<EngineFit> {
    let f =
        Fields::of(json, path, "struct EngineFit", &["float", "q8", "legacy", "kquant", "read", "prefill", "method"])?;
    Ok(EngineFit {
        float: f.optional("float", float)?,
        q8: f.optional("q8", float)?,
        legacy: f.optional("legacy", float)?,
        kquant: f.optional("kquant", float)?,
        read: f.optional("read", float)?,
        prefill: f.optional("prefill", float)?,
        method: f.or("method", String::new, string)?,
    })
}

fn links(json: &Json, path: &str) -> Read<LinksSpec> {
    let f = Fields::of(json, path, "struct LinksSpec", &["default", "pairs"])?;
    Ok(LinksSpec {
        default: f.optional("default", link)?,
        pairs: f.or("pairs", Vec::new, |j, p| array(j, p, pair_link))?,
    })
}

fn link(json: &Json, path: &str) -> Read<LinkSpec> {
    let f = Fields::of(json, path, "struct LinkSpec", &["bandwidth", "latency"])?;
    Ok(LinkSpec { bandwidth: f.required("bandwidth", bandwidth)?, latency: f.required("latency", seconds)? })
}

fn pair_link(json: &Json, path: &str) -> Read<PairLinkSpec> {
    let f = Fields::of(json, path, "struct PairLinkSpec", &["between", "bandwidth", "latency"])?;
    Ok(PairLinkSpec {
        between: f.required("between", |j, p| pair(j, p, string))?,
        bandwidth: f.required("bandwidth", bandwidth)?,
        latency: f.required("latency", seconds)?,
    })
}

fn stage(json: &Json, path: &str) -> Read<StageSpec> {
    let f = Fields::of(json, path, "struct StageSpec", &["node", "layers", "offload"])?;
    Ok(StageSpec {
        node: f.required("node", string)?,
        layers: f.required("layers", |j, p| pair(j, p, unsigned))?,
        offload: f.optional("offload", offload)?,
    })
}

fn offload(json: &Json, path: &str) -> Read<OffloadSpec> {
    let f = Fields::of(json, path, "struct OffloadSpec", &["host_layers", "host_ffn", "host_head"])?;
    Ok(OffloadSpec {
        host_layers: f.or("host_layers", || 0, unsigned)?,
        host_ffn: f.or("host_ffn", || 0, unsigned)?,
        host_head: f.or("host_head", || false, boolean)?,
    })
}

/// serde's reading of a value through the hand reader: the loop's stored specs and the
/// llama-bench fit's machine.
fn through<'de, D: Deserializer<'de>, T>(deserializer: D, read: impl FnOnce(&Json) -> Read<T>) -> Result<T, D::Error> {
    let json = Json::deserialize(deserializer)?;
    read(&json).map_err(|w| {
        if w.path.is_empty() {
            de::Error::custom(w.message)
        } else {
            de::Error::custom(format_args!("`{}`: {}", w.path, w.message))
        }
    })
}

impl<'de> Deserialize<'de> for Scenario {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Scenario, D::Error> {
        through(deserializer, scenario)
    }
}

impl<'de> Deserialize<'de> for NodeSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<NodeSpec, D::Error> {
        through(deserializer, |json| node(json, ""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#""model": {"preset": "llama-3.1-8b"}, "nodes": [{"name": "a", "device": "rtx-4090"}]"#;

    /// What reading `text` says, as `(path, message)`.
    fn refusal(text: &str) -> (String, String) {
        let error = Scenario::from_json(text).unwrap_err();
        (error.path.clone(), error.to_string())
    }

    #[test]
    fn each_kind_of_error_names_its_field_in_serdes_words() {
        for (extra, path, message) in [
            (
                r#""nodes": [{"name": "a", "memry": 1}]"#,
                "nodes[0].memry",
                "unknown field `memry`, expected one of `name`",
            ),
            (r#""nodes": [{"device": "h100"}]"#, "nodes[0]", "missing field `name`"),
            (r#""nodes": [{"name": 5}]"#, "nodes[0].name", "invalid type: integer `5`, expected a string"),
            (r#""nodes": {"name": "a"}"#, "nodes", "invalid type: map, expected a sequence"),
            (
                r#""nodes": [{"name": "a", "count": 1.5}]"#,
                "nodes[0].count",
                "invalid type: floating point `1.5`, expected u32",
            ),
            (
                r#""nodes": [{"name": "a", "count": 5000000000}]"#,
                "nodes[0].count",
                "invalid value: integer `5000000000`, expected u32",
            ),
            (r#""workload": {"context": -1}"#, "workload.context", "invalid value: integer `-1`, expected u64"),
            (r#""workload": null"#, "workload", "invalid type: null, expected struct WorkloadSpec"),
            (r#""serving": {"users": "8"}"#, "serving.users", "invalid type: string \"8\", expected u32"),
            (
                r#""serving": {"percentile": "p90"}"#,
                "serving.percentile",
                "unknown variant `p90`, expected `p50` or `p95`",
            ),
            (r#""serving": {"user": 8}"#, "serving.user", "unknown field `user`, expected one of `users`"),
            (r#""workload": {"flash_attention": "yes"}"#, "workload.flash_attention", "expected a boolean"),
            (r#""workload": {"workspace": true}"#, "workload.workspace", "expected a size like `2 GiB`, or \"auto\""),
            (
                r#""policy": "bogus""#,
                "policy",
                "unknown variant `bogus`, expected one of `optimal`, `memory-proportional`",
            ),
            (r#""policy": {"name": "a"}"#, "policy", "invalid type: map, expected a string"),
            (r#""objective": "speed""#, "objective", "unknown variant `speed`, expected `throughput` or `latency`"),
            (r#""engine": "vLLM""#, "engine", "unknown variant `vLLM`, expected one of `llama.cpp`, `vllm`, `generic`"),
            (
                r#""nodes": [{"name": "a", "host": {"memory": []}}]"#,
                "nodes[0].host.memory",
                "expected a memory size as a number or a string",
            ),
            (
                r#""links": {"pairs": [{"between": ["a"], "bandwidth": 1, "latency": 0}]}"#,
                "links.pairs[0].between",
                "invalid length 1, expected an array of length 2",
            ),
            (r#""links": {"default": {"bandwidth": "1 GB/s"}}"#, "links.default", "missing field `latency`"),
            (
                r#""stages": [{"node": "a", "layers": [0, 32], "offload": {"host_head": 1}}]"#,
                "stages[0].offload.host_head",
                "expected a boolean",
            ),
            (
                r#""nodes": [{"name": "a", "probe": {"engine": {"q8": "fast"}}}]"#,
                "nodes[0].probe.engine.q8",
                "invalid type: string \"fast\", expected f64",
            ),
        ] {
            // A later key of the same name would be refused as given twice: drop BASE's.
            let base = if extra.starts_with(r#""nodes""#) { r#""model": {"preset": "llama-3.1-8b"}"# } else { BASE };
            let text = format!("{{{base}, {extra}}}");
            let (got_path, got) = refusal(&text);
            assert_eq!(got_path, path, "{text}: {got}");
            assert!(got.contains(message), "{text}: {got}");
        }
        let (path, message) = refusal(r#"{"nodes": []}"#);
        assert_eq!(
            (path.as_str(), message.as_str()),
            ("", "missing field `model`; a scenario needs at least `model` and `nodes`")
        );
        // A key given twice is the object's, found by position as a syntax error is.
        let (path, message) = refusal(r#"{"model": {"preset": "a", "preset": "b"}, "nodes": []}"#);
        assert_eq!(path, "model");
        assert!(message.contains("duplicate field `preset`"), "{message}");
    }

    #[test]
    fn null_is_none_and_absent_takes_the_default() {
        let text = format!(r#"{{{BASE}, "stages": null, "workload": {{"kv_v": null, "batch": 4}}}}"#);
        let scenario = Scenario::from_json(&text).unwrap();
        assert_eq!((scenario.stages, scenario.workload.kv_v), (None, None));
        assert_eq!(scenario.workload.batch, 4);
        assert_eq!(scenario.workload.context, WorkloadSpec::default().context);
        assert_eq!((scenario.policy, scenario.objective, scenario.engine), Default::default());
    }

    /// The names read are the ones serde writes (plans and stored specs carry them).
    #[test]
    fn every_name_is_the_one_serde_writes() {
        fn same<T: serde::Serialize + Copy>(all: &[T], name: fn(T) -> &'static str) {
            for &v in all {
                assert_eq!(serde_json::to_string(&v).unwrap(), format!("\"{}\"", name(v)));
            }
        }
        same(&Policy::ALL, Policy::name);
        same(&Objective::ALL, Objective::name);
        same(&Engine::ALL, Engine::name);
        same(&DeviceKind::ALL, DeviceKind::name);
        same(&Backend::ALL, Backend::name);
    }
}
