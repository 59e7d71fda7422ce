//! The worker's answers read by hand. The worker writes them with the types' derived
//! `Serialize`; a derived `Deserialize` for [`Answer`] (a model read from a file with every
//! tensor, a probe's figures, an export) cost every first plan 15.6 KB gzip of the page's
//! wasm (BENCHMARKS.md, issue #45 item 7) for answers that come only after the reader asks.
//! The page parses JSON into a [`serde_json::Value`] anyway; reading the fields from it is
//! a few calls each. Every struct below is built with all its fields named, so a field
//! added to one of them does not compile until it is read here; `tests` round-trips each
//! reply through the derived writer.

use serde_json::{Map, Value};
use stageplan::model::{Arch, Mla, Moe, Place, Tensor, Transformer};
use stageplan::{Model, export::Export};

use super::{Answer, Calibrated, ConfigRead, Dropped, Measured, Reply, ShardedRun, StageRun};

/// What reading an answer says when a field is not what the worker writes: its path.
type Read<T> = Result<T, String>;

/// The answer in `text`, or a failure of the worker that says it could not be read.
pub(super) fn answer(text: &str) -> Answer {
    let read = serde_json::from_str::<Value>(text).map_err(|e| e.to_string()).and_then(|value| {
        let o = Obj::of(&value, "answer")?;
        Ok(Answer { id: o.opt_u64("id")?, reply: reply(o.field("reply")?)? })
    });
    read.unwrap_or_else(|e| Answer {
        id: None,
        reply: Reply::Failed(format!("the page's worker sent an unreadable answer: {e}")),
    })
}

fn reply(value: &Value) -> Read<Reply> {
    if value.as_str() == Some("ready") {
        return Ok(Reply::Ready);
    }
    let o = Obj::of(value, "reply")?;
    let Some((variant, body)) = o.map.iter().next().filter(|_| o.map.len() == 1) else {
        return Err("`reply` is not one variant".into());
    };
    let text = || body.as_str().map(str::to_owned).ok_or_else(|| format!("`reply.{variant}` is not text"));
    Ok(match variant.as_str() {
        "progress" => Reply::Progress(text()?),
        "swept" => Reply::Swept(text()?),
        "failed" => Reply::Failed(text()?),
        "probed" => Reply::Probed(measured(&Obj::of(body, "probed")?)?),
        "sharded" => Reply::Sharded(sharded(&Obj::of(body, "sharded")?)?),
        "exported" => Reply::Exported(export(&Obj::of(body, "exported")?)?),
        "model_read" => Reply::ModelRead(Box::new(dropped(&Obj::of(body, "model_read")?)?)),
        "calibrated" => Reply::Calibrated(calibrated(&Obj::of(body, "calibrated")?)?),
        "config_read" => Reply::ConfigRead(Box::new(config_read(&Obj::of(body, "config_read")?)?)),
        other => return Err(format!("`reply.{other}` is no reply the page knows")),
    })
}

fn measured(o: &Obj) -> Read<Measured> {
    Ok(Measured {
        adapter: o.string("adapter")?,
        memory_bytes: o.u64("memory_bytes")?,
        bandwidth: o.f64("bandwidth")?,
        bandwidth_spread: o.f64("bandwidth_spread")?,
        compute_f32: o.f64("compute_f32")?,
        compute_f32_spread: o.f64("compute_f32_spread")?,
        compute_f16: o.opt_f64("compute_f16")?,
        compute: o.f64("compute")?,
        max_buffer_size: o.u64("max_buffer_size")?,
        max_storage_buffer_binding_size: o.u64("max_storage_buffer_binding_size")?,
        seconds: o.f64("seconds")?,
        said: o.strings_or_empty("said")?,
    })
}

fn sharded(o: &Obj) -> Read<ShardedRun> {
    let stages = o.list("stages")?.iter().map(|s| stage_run(&Obj::of(s, "sharded.stages[]")?)).collect::<Read<_>>()?;
    Ok(ShardedRun { stages, summary: o.string("summary")? })
}

fn stage_run(o: &Obj) -> Read<StageRun> {
    let [start, end] = o.list("layers")? else { return Err(o.wrong("layers")) };
    let layer = |v: &Value| v.as_u64().and_then(|n| usize::try_from(n).ok()).ok_or_else(|| o.wrong("layers"));
    Ok(StageRun {
        node: o.string("node")?,
        layers: [layer(start)?, layer(end)?],
        predicted_s: o.opt_f64("predicted_s")?,
        measured_s: o.f64("measured_s")?,
        ratio: o.opt_f64("ratio")?,
    })
}

fn export(o: &Obj) -> Read<Export> {
    Ok(Export {
        target: o.string("target")?.parse().map_err(|_| o.wrong("target"))?,
        file_name: o.string("file_name")?,
        text: o.string("text")?,
        notes: o.strings_or_empty("notes")?,
    })
}

fn calibrated(o: &Obj) -> Read<Calibrated> {
    Ok(Calibrated { node: o.string("node")?, fit: o.string("fit")?, said: o.string("said")? })
}

fn dropped(o: &Obj) -> Read<Dropped> {
    Ok(Dropped {
        model: model(&o.obj("model")?)?,
        names: o.strings_or_empty("names")?,
        bytes_read: o.u64("bytes_read")?,
        file_bytes: o.u64("file_bytes")?,
    })
}

fn config_read(o: &Obj) -> Read<ConfigRead> {
    let transformer = match o.map.get("transformer") {
        None | Some(Value::Null) => None,
        Some(t) => Some(transformer(&Obj::of(t, "config_read.transformer")?)?),
    };
    let error = match o.map.get("error") {
        None | Some(Value::Null) => None,
        Some(Value::Array(parts)) if parts.len() == 3 => {
            let text = |i: usize| parts[i].as_str().map(str::to_owned).ok_or_else(|| o.wrong("error"));
            Some((text(0)?, text(1)?, text(2)?))
        }
        Some(_) => return Err(o.wrong("error")),
    };
    Ok(ConfigRead { text: o.string("text")?, transformer, error })
}

fn model(o: &Obj) -> Read<Model> {
    let tensors = o.list("tensors")?.iter().map(|t| tensor(&Obj::of(t, "model.tensors[]")?)).collect::<Read<_>>()?;
    Ok(Model {
        name: o.string("name")?,
        weights: o.string("weights")?,
        arch: transformer(&o.obj("arch")?)?,
        tensors,
        head_shares_embedding: o.bool("head_shares_embedding")?,
    })
}

fn transformer(o: &Obj) -> Read<Transformer> {
    let moe = match o.map.get("moe") {
        None | Some(Value::Null) => None,
        Some(moe) => {
            let m = Obj::of(moe, "model.arch.moe")?;
            let sparse = m.list("sparse_layers")?.iter().map(|v| v.as_bool().ok_or_else(|| m.wrong("sparse_layers")));
            Some(Moe {
                experts: m.u64("experts")?,
                active: m.u64("active")?,
                expert_intermediate: m.u64("expert_intermediate")?,
                shared_intermediate: m.opt_u64("shared_intermediate")?,
                sparse_layers: sparse.collect::<Read<_>>()?,
            })
        }
    };
    let mla = match o.map.get("mla") {
        None | Some(Value::Null) => None,
        Some(mla) => {
            let m = Obj::of(mla, "model.arch.mla")?;
            Some(Mla {
                q_lora_rank: m.opt_u64("q_lora_rank")?,
                kv_lora_rank: m.u64("kv_lora_rank")?,
                qk_nope_head_dim: m.u64("qk_nope_head_dim")?,
                qk_rope_head_dim: m.u64("qk_rope_head_dim")?,
                v_head_dim: m.u64("v_head_dim")?,
            })
        }
    };
    Ok(Transformer {
        model_type: o.string("model_type")?,
        // The family's name as `Serialize` writes it (`qwen3_moe`) is one of its spellings.
        family: o.map.get("family").and_then(Value::as_str).map_or(Arch::default(), Arch::named),
        hidden_size: o.u64("hidden_size")?,
        intermediate_size: o.u64("intermediate_size")?,
        num_layers: o.u64("num_layers")?,
        num_heads: o.u64("num_heads")?,
        num_kv_heads: o.u64("num_kv_heads")?,
        head_dim: o.u64("head_dim")?,
        vocab_size: o.u64("vocab_size")?,
        tied_embeddings: o.bool("tied_embeddings")?,
        qkv_bias: o.bool("qkv_bias")?,
        o_bias: o.bool("o_bias")?,
        mlp_bias: o.bool("mlp_bias")?,
        extra_norms: o.u64("extra_norms")?,
        qk_norm: o.bool("qk_norm")?,
        windows: o.opt_u64s("windows")?,
        kv_elements: o.u64s("kv_elements")?,
        v_elements: o.u64s("v_elements")?,
        state_elements: o.u64s("state_elements")?,
        v_pad_elements: o.u64s("v_pad_elements")?,
        kv_from: o.opt_u64s("kv_from")?,
        nextn_layers: o.opt_u64("nextn_layers")?.unwrap_or(0),
        max_context: o.opt_u64("max_context")?,
        moe,
        mla,
    })
}

fn tensor(o: &Obj) -> Read<Tensor> {
    let place = match o.field("place")? {
        Value::String(s) if s == "embedding" => Place::Embedding,
        Value::String(s) if s == "head" => Place::Head,
        place => {
            let layer = Obj::of(place, "place")?.u64("layer")?;
            Place::Layer(u32::try_from(layer).map_err(|_| o.wrong("place"))?)
        }
    };
    Ok(Tensor {
        name: o.string("name")?,
        shape: o.u64s("shape")?,
        ty: o.string("ty")?.parse().map_err(|_| o.wrong("ty"))?,
        bytes: o.u64("bytes")?,
        place,
        expert: o.bool("expert")?,
        ffn: o.bool("ffn")?,
    })
}

/// An object of an answer and its path, for what reading it says.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    at: &'static str,
}

impl<'a> Obj<'a> {
    fn of(value: &'a Value, at: &'static str) -> Read<Obj<'a>> {
        value.as_object().map(|map| Obj { map, at }).ok_or_else(|| format!("`{at}` is not an object"))
    }

    fn wrong(&self, key: &str) -> String {
        format!("`{}.{key}` is missing or not what the worker writes", self.at)
    }

    fn field(&self, key: &str) -> Read<&'a Value> {
        self.map.get(key).ok_or_else(|| self.wrong(key))
    }

    fn obj(&self, key: &'static str) -> Read<Obj<'a>> {
        Obj::of(self.field(key)?, key)
    }

    fn list(&self, key: &str) -> Read<&'a [Value]> {
        self.field(key)?.as_array().map(Vec::as_slice).ok_or_else(|| self.wrong(key))
    }

    /// A list the writer leaves out when it is empty.
    fn list_or_empty(&self, key: &str) -> Read<&'a [Value]> {
        if self.map.contains_key(key) { self.list(key) } else { Ok(&[]) }
    }

    fn string(&self, key: &str) -> Read<String> {
        self.field(key)?.as_str().map(str::to_owned).ok_or_else(|| self.wrong(key))
    }

    fn u64(&self, key: &str) -> Read<u64> {
        self.field(key)?.as_u64().ok_or_else(|| self.wrong(key))
    }

    fn f64(&self, key: &str) -> Read<f64> {
        self.field(key)?.as_f64().ok_or_else(|| self.wrong(key))
    }

    fn bool(&self, key: &str) -> Read<bool> {
        self.field(key)?.as_bool().ok_or_else(|| self.wrong(key))
    }

    /// Left out or `null`: `None`.
    fn opt_u64(&self, key: &str) -> Read<Option<u64>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| self.wrong(key)),
        }
    }

    fn opt_f64(&self, key: &str) -> Read<Option<f64>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| self.wrong(key)),
        }
    }

    fn u64s(&self, key: &str) -> Read<Vec<u64>> {
        self.list_or_empty(key)?.iter().map(|v| v.as_u64().ok_or_else(|| self.wrong(key))).collect()
    }

    fn opt_u64s(&self, key: &str) -> Read<Vec<Option<u64>>> {
        let one = |v: &Value| if v.is_null() { Ok(None) } else { v.as_u64().map(Some).ok_or_else(|| self.wrong(key)) };
        self.list_or_empty(key)?.iter().map(one).collect()
    }

    fn strings_or_empty(&self, key: &str) -> Read<Vec<String>> {
        let one = |v: &Value| v.as_str().map(str::to_owned).ok_or_else(|| self.wrong(key));
        self.list_or_empty(key)?.iter().map(one).collect()
    }
}

#[cfg(test)]
mod tests {
    use stageplan::export::{ExportOptions, Target};
    use stageplan::model::WeightFormat;
    use stageplan::presets;

    use super::*;

    fn round_trip(reply: Reply) {
        let sent = Answer { id: Some(7), reply };
        let text = serde_json::to_string(&sent).unwrap();
        assert_eq!(answer(&text), sent, "{text:.300}");
    }

    /// Every reply the worker writes reads back as it was, models of every preset (MoE,
    /// latent attention, windows, recurrent state, shared caches) among them.
    #[test]
    fn every_reply_reads_back_as_the_worker_wrote_it() {
        for text in ["a step", ""] {
            round_trip(Reply::Progress(text.into()));
            round_trip(Reply::Swept(text.into()));
            round_trip(Reply::Failed(text.into()));
        }
        round_trip(Reply::Ready);
        round_trip(Reply::Probed(Measured {
            adapter: "BrowserWebGpu adapter (browserwebgpu, cpu)".into(),
            memory_bytes: u64::MAX,
            bandwidth: 1.5e10,
            bandwidth_spread: 0.04,
            compute_f32: 2e11,
            compute_f32_spread: 0.1,
            compute_f16: None,
            compute: 2e11,
            max_buffer_size: 1 << 30,
            max_storage_buffer_binding_size: 1 << 27,
            seconds: 3.5,
            said: vec!["measured".into(), "a software adapter".into()],
        }));
        round_trip(Reply::Probed(Measured { compute_f16: Some(4e11), said: vec![], ..probe() }));
        round_trip(Reply::Sharded(ShardedRun {
            stages: vec![
                StageRun {
                    node: "desk".into(),
                    layers: [0, 40],
                    predicted_s: Some(0.01),
                    measured_s: 0.012,
                    ratio: Some(1.2),
                },
                StageRun { node: "mac".into(), layers: [40, 80], predicted_s: None, measured_s: 0.02, ratio: None },
            ],
            summary: "two stages".into(),
        }));
        let scenario =
            stageplan::Scenario::from_json(include_str!("../../../../tests/export/home-70b/scenario.json")).unwrap();
        let plan = stageplan::plan(&stageplan::check(scenario, stageplan::check::no_model_files).unwrap().problem);
        for target in Target::ALL {
            let export = stageplan::export::export(&plan, target, &ExportOptions::default()).unwrap();
            round_trip(Reply::Exported(export));
        }
        round_trip(Reply::Calibrated(Calibrated { node: "desk".into(), fit: "{}".into(), said: "fitted".into() }));
        for preset in presets::MODELS {
            let model = preset.model("q4_k_m".parse::<WeightFormat>().unwrap()).unwrap();
            let read = Dropped { model, names: vec!["a.gguf".into()], bytes_read: 1 << 20, file_bytes: 1 << 34 };
            round_trip(Reply::ModelRead(Box::new(read)));
            let text = preset.config_json().to_owned();
            let read = ConfigRead::of(text.clone(), stageplan::check::read_config(&text));
            assert!(read.transformer.is_some(), "{}", preset.name);
            round_trip(Reply::ConfigRead(Box::new(read)));
        }
        for text in [
            r#"{"hidden_size": 0}"#,
            r#"{"hidden_size": "x"}"#,
            "[1]",
            r#"{"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 8, "kv_lora_rank": 4}"#,
        ] {
            let read = stageplan::check::read_config(text);
            let sent = ConfigRead::of(text.to_owned(), read.clone());
            assert_eq!(sent.result(), read, "{text}: the page gives the core's error back");
            round_trip(Reply::ConfigRead(Box::new(sent)));
        }
    }

    fn probe() -> Measured {
        let Reply::Probed(m) = answer(r#"{"id": 1, "reply": {"probed": {"adapter": "a", "memory_bytes": 1, "bandwidth": 1, "bandwidth_spread": 0, "compute_f32": 1, "compute_f32_spread": 0, "compute_f16": null, "compute": 1, "max_buffer_size": 1, "max_storage_buffer_binding_size": 1, "seconds": 1}}}"#).reply else {
            panic!("a probe with `said` left out reads")
        };
        m
    }

    #[test]
    fn an_answer_the_page_cannot_read_says_where() {
        for (text, said) in [
            ("not json", "unreadable answer"),
            (r#"{"id": 1, "reply": {"nothing": 1}}"#, "`reply.nothing`"),
            (r#"{"id": 1, "reply": {"progress": 3}}"#, "`reply.progress` is not text"),
            (r#"{"id": 1, "reply": {"calibrated": {"node": "a", "fit": 1, "said": ""}}}"#, "`calibrated.fit`"),
            (r#"{"id": 1, "reply": {"probed": {}}}"#, "`probed.adapter`"),
            (r#"{"id": "x", "reply": "ready"}"#, "`answer.id`"),
        ] {
            let got = answer(text);
            assert_eq!(got.id, None, "{text}");
            let Reply::Failed(message) = got.reply else { panic!("{text}: read") };
            assert!(message.contains(said), "{text}: {message}");
        }
    }
}
