//! Import of real files written by the reference writers: llama.cpp's `gguf` Python package
//! and the `safetensors` package (`tests/fixtures/write_models.py`, run once per test run).
//! Every tensor's type, shape, bytes and offset must agree exactly with what the reference
//! readers report, and the layer mapping must account for every byte.

// The harness runs the reference writers and reads their files; `clippy.toml` keeps I/O
// out of the library itself.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;
use stageplan::import::gguf::{self, GgufHeader};
use stageplan::import::safetensors::{self, SafetensorsHeader};
use stageplan::import::{self as import, Parse};
use stageplan::model::{HfConfig, Model, Place};

/// Writes the fixtures with the reference packages, once.
fn fixtures() -> &'static (PathBuf, Value) {
    static FIXTURES: OnceLock<(PathBuf, Value)> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("import-fixtures");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/write_models.py");
        let _ = std::fs::remove_dir_all(&dir);
        let status = std::process::Command::new(python()).arg(&script).arg(&dir).status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "writing fixtures failed; install the reference writers: pip install -r tests/fixtures/requirements.txt"
        );
        let manifest = std::fs::read_to_string(dir.join("manifest.json")).expect("manifest written");
        (dir, serde_json::from_str(&manifest).expect("manifest is JSON"))
    })
}

/// Reads a header the way the browser and CLI do: a small prefix, then exactly what the
/// parser asks for. Returns the header and how many bytes were read.
fn read_incrementally<T>(
    bytes: &[u8],
    parse: impl Fn(&[u8], Option<u64>) -> Result<Parse<T>, import::ImportError>,
) -> (T, u64) {
    let len = bytes.len() as u64;
    let mut have = 64u64.min(len);
    loop {
        match parse(&bytes[..have as usize], Some(len)).expect("parses") {
            Parse::Done(header) => return (header, have),
            Parse::NeedMore(needed) => {
                assert!(needed > have && needed <= len, "asks for {needed} having {have} of {len}");
                have = needed;
            }
        }
    }
}

fn gguf_header(path: &Path) -> (GgufHeader, u64, u64) {
    let bytes = std::fs::read(path).expect("fixture exists");
    let (header, read) = read_incrementally(&bytes, gguf::parse);
    (header, read, bytes.len() as u64)
}

fn check_gguf_against_reference(header: &GgufHeader, reference: &Value) {
    let tensors = reference["tensors"].as_array().expect("tensors");
    assert_eq!(header.tensors.len(), tensors.len());
    for (ours, theirs) in header.tensors.iter().zip(tensors) {
        assert_eq!(ours.name, theirs["name"].as_str().unwrap());
        assert_eq!(ours.ty.ggml_id(), Some(theirs["type"].as_u64().unwrap() as u32), "{}", ours.name);
        let dims: Vec<u64> = theirs["dims"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
        assert_eq!(ours.dims, dims, "{}", ours.name);
        assert_eq!(ours.bytes, theirs["bytes"].as_u64().unwrap(), "{}", ours.name);
        assert_eq!(header.data_offset + ours.offset, theirs["offset"].as_u64().unwrap(), "{}", ours.name);
    }
}

fn assert_every_byte_placed(model: &Model) {
    let layers: u64 = model.layers().iter().map(|l| l.bytes).sum();
    let placed = layers + model.bytes_at(Place::Embedding) + model.bytes_at(Place::Head);
    assert_eq!(placed, model.weight_bytes(), "every byte lands in a layer, the embedding or the head");
    assert_eq!(model.weight_bytes(), model.tensors.iter().map(|t| t.bytes).sum::<u64>());
}

#[test]
fn gguf_files_match_the_reference_reader() {
    let (dir, manifest) = fixtures();
    let mut seen_types = std::collections::BTreeSet::new();
    for reference in manifest["gguf"].as_array().unwrap() {
        let file = reference["file"].as_str().unwrap();
        let (header, read, size) = gguf_header(&dir.join(file));
        check_gguf_against_reference(&header, reference);
        assert!(
            read <= header.data_offset,
            "{file}: read {read} bytes, only the header ({} bytes) is needed",
            header.data_offset
        );
        assert_eq!(size, reference["size"].as_u64().unwrap());
        seen_types.extend(header.tensors.iter().map(|t| t.ty.name()));

        let model = import::gguf_model(file, std::slice::from_ref(&header)).expect("a model");
        assert_every_byte_placed(&model);
        assert_eq!(model.weight_bytes(), header.tensor_bytes());
        let case = &reference["case"];
        assert_eq!(model.num_layers() as u64, case["layers"].as_u64().unwrap(), "{file}");
        assert_eq!(model.head_shares_embedding, case["tied"].as_bool().unwrap(), "{file}");
        assert_eq!(model.arch.hidden_size, 256);
        match case.get("head_count_kv").and_then(Value::as_array) {
            // Per-layer KV heads: K and V of 32 dims each per head.
            Some(heads) => {
                let expected: Vec<u64> = heads.iter().map(|h| h.as_u64().unwrap() * 64).collect();
                assert_eq!(model.arch.kv_elements, expected);
                // The file states a window, but llama.cpp's `llama` architecture attends to
                // the whole context: the window is not applied.
                assert_eq!(model.arch.windows, vec![None; 3]);
            }
            None => assert!(model.arch.kv_elements.iter().all(|&e| e == 2 * 2 * 32)),
        }
        if let Some(moe) = case["moe"].as_array() {
            let arch_moe = model.arch.moe.as_ref().expect("moe metadata read");
            assert_eq!((arch_moe.experts, arch_moe.active), (moe[0].as_u64().unwrap(), moe[1].as_u64().unwrap()));
            assert!(model.layers().iter().all(|l| l.expert_bytes > 0 && l.expert_bytes < l.bytes));
        }
    }
    for ty in ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "q2_k", "iq4_xs"] {
        assert!(seen_types.contains(ty), "fixtures cover `{ty}`");
    }
}

#[test]
fn a_split_gguf_set_is_one_model() {
    let (dir, manifest) = fixtures();
    let parts = manifest["split"].as_array().unwrap();
    assert_eq!(parts.len(), 3);
    let mut headers = Vec::new();
    for reference in parts {
        let file = reference["file"].as_str().unwrap();
        let (prefix, _, count) = import::split_name(file).expect("llama.cpp split naming");
        assert_eq!((prefix, count), ("big", 3));
        let (header, _, _) = gguf_header(&dir.join("split").join(file));
        check_gguf_against_reference(&header, reference);
        headers.push(header);
    }
    let model = import::gguf_model("big", &headers).expect("the set is one model");
    assert_every_byte_placed(&model);
    assert_eq!(model.num_layers(), 5);
    assert_eq!(model.tensors.len(), 48);
    // A missing part is an error that says so.
    let error = import::gguf_model("big", &headers[..2]).unwrap_err().to_string();
    assert!(error.contains("3 parts"), "{error}");
}

fn safetensors_header(path: &Path) -> (SafetensorsHeader, u64) {
    let bytes = std::fs::read(path).expect("fixture exists");
    read_incrementally(&bytes, safetensors::parse)
}

fn check_safetensors_against_reference(header: &SafetensorsHeader, reference: &Value) {
    let written = reference["header"].as_object().unwrap();
    assert_eq!(header.header_len, reference["header_len"].as_u64().unwrap());
    assert_eq!(header.tensors.len(), written.len() - usize::from(written.contains_key("__metadata__")));
    for t in &header.tensors {
        let info = &written[&t.name];
        assert_eq!(t.dtype, info["dtype"].as_str().unwrap());
        let shape: Vec<u64> = info["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
        assert_eq!(t.shape, shape);
        let offsets = info["data_offsets"].as_array().unwrap();
        assert_eq!(t.offsets, [offsets[0].as_u64().unwrap(), offsets[1].as_u64().unwrap()]);
    }
    assert_eq!(header.data_offset() + header.tensor_bytes(), reference["size"].as_u64().unwrap());
}

#[test]
fn a_safetensors_file_with_its_config() {
    let (dir, manifest) = fixtures();
    let reference = &manifest["safetensors"][0];
    let folder = dir.join("single");
    let (header, read) = safetensors_header(&folder.join("model.safetensors"));
    check_safetensors_against_reference(&header, reference);
    assert_eq!(read, header.data_offset(), "exactly the header is read");
    assert!(header.tensors.iter().any(|t| t.dtype == "F4"), "sub-byte dtypes covered");
    let config = HfConfig::from_json(&std::fs::read_to_string(folder.join("config.json")).unwrap()).unwrap();
    let shards = vec![("model.safetensors".to_owned(), header.clone())];
    let model = import::safetensors_model("single", &shards, None, Some(&config)).expect("a model");
    assert_every_byte_placed(&model);
    assert!(!model.head_shares_embedding);
    assert_eq!(model.num_layers(), 3);
    // Without the config, the shapes say as much about KV per token.
    let inferred = import::safetensors_model("single", &shards, None, None).expect("inferred");
    assert_eq!(inferred.arch.kv_elements, model.arch.kv_elements);
    assert_eq!(inferred.weight_bytes(), model.weight_bytes());
}

#[test]
fn a_sharded_safetensors_set_with_its_index() {
    let (dir, manifest) = fixtures();
    let folder = dir.join("sharded");
    let index =
        safetensors::parse_index(&std::fs::read_to_string(folder.join("model.safetensors.index.json")).unwrap())
            .unwrap();
    assert_eq!(index.total_size, manifest["sharded"]["total_size"].as_u64());
    let mut shards = Vec::new();
    for (name, reference) in index.shards().into_iter().zip(manifest["sharded"]["shards"].as_array().unwrap()) {
        let (header, _) = safetensors_header(&folder.join(name));
        check_safetensors_against_reference(&header, reference);
        shards.push((name.to_owned(), header));
    }
    let config = HfConfig::from_json(&std::fs::read_to_string(folder.join("config.json")).unwrap()).unwrap();
    let model = import::safetensors_model("sharded", &shards, Some(&index), Some(&config)).expect("a model");
    assert_every_byte_placed(&model);
    assert!(model.head_shares_embedding, "no lm_head: tied");
    assert_eq!(Some(model.weight_bytes()), index.total_size);
    // Shards that disagree with the index are refused.
    let error =
        import::safetensors_model("sharded", &shards[..1], Some(&index), Some(&config)).unwrap_err().to_string();
    assert!(error.contains("does not hold it"), "{error}");
}

#[test]
fn an_imported_file_plans() {
    let (dir, _) = fixtures();
    let (header, _, _) = gguf_header(&dir.join("dense.gguf"));
    let model = import::gguf_model("dense", &[header]).unwrap();
    let problem = stageplan::check(
        r#"{"model": {"file": "dense.gguf"}, "nodes": [{"name": "a", "memory": "6 MiB", "bandwidth": "100 GB/s", "compute": "1 TFLOPS", "reserve": 0},
            {"name": "b", "memory": "6 MiB", "bandwidth": "100 GB/s", "compute": "1 TFLOPS", "reserve": 0}],
            "workload": {"context": 64, "workspace": 0}}"#,
        |_, _: &str| Ok::<_, stageplan::ScenarioError>(model.clone()),
    )
    .unwrap()
    .problem;
    let plan = stageplan::plan(&problem);
    assert!(plan.feasible, "{:?}", plan.diagnostics);
    assert_eq!(plan.stages.last().unwrap().layers[1], 4);
}

/// The Python with the reference writers: `STAGEPLAN_PYTHON` (set by `cargo xtask test`),
/// else `python3` on the path.
fn python() -> String {
    std::env::var("STAGEPLAN_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}
