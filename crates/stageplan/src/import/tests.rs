//! Hostile and malformed headers: errors with a place, never a panic or a large allocation.
//! (Real files written by the reference packages are checked in `tests/import.rs`.)

use super::gguf::{self, Value};
use super::safetensors;
use super::*;

fn gguf_error(bytes: &[u8]) -> String {
    match gguf::parse(bytes, Some(bytes.len() as u64)) {
        Err(e) => e.to_string(),
        Ok(other) => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn a_minimal_gguf_parses_and_maps() {
    let bytes = gguf::Builder::new(3, 2, 3)
        .kv_str("general.architecture", "llama")
        .kv_u32("llama.block_count", 1)
        .kv_u32("llama.attention.head_count", 2)
        .tensor("token_embd.weight", &[32, 10], 0, 0)
        .tensor("blk.0.attn_q.weight", &[32, 32], 8, 32 * 10 * 4)
        .padded(32 * 10 * 4 + 32 * 34);
    let Parse::Done(header) = gguf::parse(&bytes, Some(bytes.len() as u64)).unwrap() else { panic!("complete") };
    assert_eq!(header.get("llama.block_count"), Some(&Value::U32(1)));
    assert_eq!(header.tensors[1].bytes, 32 * 34);
    let model = gguf_model("t", &[header]).unwrap();
    assert_eq!(model.arch.num_layers, 1);
    assert_eq!(model.arch.hidden_size, 32);
    assert!(model.head_shares_embedding);
    assert_eq!(model.layers()[0].bytes, 32 * 34);
}

#[test]
fn a_short_prefix_asks_for_more() {
    let bytes = gguf::Builder::new(3, 0, 1).kv_str("general.architecture", "llama").padded(0);
    for cut in [0, 3, 10, 30] {
        match gguf::parse(&bytes[..cut], None).unwrap() {
            Parse::NeedMore(n) => assert!(n as usize > cut && n as usize <= bytes.len()),
            done => panic!("{cut}: {done:?}"),
        }
    }
}

#[test]
fn hostile_gguf_headers_are_errors() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"GGML\x03\0\0\0".to_vec(), "not a GGUF file"),
        (gguf::Builder::new(1, 0, 0).padded(0), "version 1"),
        (gguf::Builder::new(0x0300_0000, 0, 0).padded(0), "big-endian"),
        (gguf::Builder::new(3, 1 << 60, 0).padded(0), "tensor count is 1152921504606846976"),
        (gguf::Builder::new(3, 0, u64::MAX).padded(0), "more than any file could hold"),
        (gguf::Builder::new(3, 0, 1).u64(1 << 40).padded(64), "metadata key length is 1099511627776"),
        (
            gguf::Builder::new(3, 0, 1).string("k").u32(9).u32(8).u64(1 << 59).padded(0),
            "array `k` length is 576460752303423488",
        ),
        (gguf::Builder::new(3, 0, 1).string("k").u32(13).padded(8), "unknown value type 13"),
        (gguf::Builder::new(3, 0, 1).string("k").u32(7).u8(7).padded(32), "must be 0 or 1"),
        (gguf::Builder::new(3, 0, 2).kv_u32("a", 1).kv_u32("a", 2).padded(0), "appears twice"),
        (gguf::Builder::new(3, 1, 0).tensor("t", &[32, 2, 1, 1, 1], 0, 0).padded(256), "5 dimensions"),
        (gguf::Builder::new(3, 1, 0).tensor("t", &[32], 77, 0).padded(128), "unknown GGML type 77"),
        (gguf::Builder::new(3, 1, 0).tensor("t", &[100], 12, 0).padded(512), "not a whole number of `q4_k` blocks"),
        (gguf::Builder::new(3, 1, 0).tensor("t", &[1 << 40, 1 << 40], 0, 0).padded(0), "overflows"),
        (gguf::Builder::new(3, 1, 0).tensor("t", &[32], 0, 64).padded(256), "expected 0"),
        (gguf::Builder::new(3, 1, 0).tensor("t", &[1 << 20], 0, 0).padded(16), "past the end of the file"),
        (gguf::Builder::new(3, 2, 0).tensor("t", &[8], 0, 0).tensor("t", &[8], 0, 32).padded(64), "appears twice"),
        (gguf::Builder::new(3, 0, 1).kv_u32("general.alignment", 24).padded(0), "power of two"),
    ];
    for (bytes, expected) in cases {
        let error = gguf_error(&bytes);
        assert!(error.contains(expected), "{expected:?} not in {error:?}");
        assert!(error.starts_with("byte "), "{error}");
    }
}

#[test]
fn deep_and_huge_arrays_stay_bounded() {
    // An array of arrays nested past the depth limit.
    let mut g = gguf::Builder::new(3, 0, 1).string("deep").u32(9);
    for _ in 0..20 {
        g = g.u32(9).u64(1);
    }
    assert!(gguf_error(&g.u32(4).u64(1).u32(0).padded(0)).contains("deeper than"));
    // A large array of u32 is skipped, not kept.
    let mut bytes = gguf::Builder::new(3, 0, 1).string("big").u32(9).u32(4).u64(100_000).into_bytes();
    bytes.extend(std::iter::repeat_n(0u8, 400_000));
    let Parse::Done(h) = gguf::parse(&bytes, Some(bytes.len() as u64)).unwrap() else { panic!() };
    assert_eq!(h.get("big"), Some(&Value::Array { item: 4, len: 100_000, items: None }));
}

fn safetensors_bytes(header: &str, data: usize) -> Vec<u8> {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    bytes.extend(std::iter::repeat_n(0u8, data));
    bytes
}

#[test]
fn safetensors_layout_rules() {
    let ok = safetensors_bytes(
        r#"{"__metadata__": {"format": "pt"}, "b": {"dtype": "F16", "shape": [2, 2], "data_offsets": [8, 16]}, "a": {"dtype": "F4", "shape": [4, 4], "data_offsets": [0, 8]}}"#,
        16,
    );
    let Parse::Done(h) = safetensors::parse(&ok, Some(ok.len() as u64)).unwrap() else { panic!() };
    assert_eq!(h.tensors[0].name, "a");
    assert_eq!(h.metadata["format"], "pt");
    let cases = [
        (
            r#"{"a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}, "a": {"dtype": "F16", "shape": [2], "data_offsets": [4, 8]}}"#,
            8,
            "appears twice",
        ),
        (
            r#"{"a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}, "b": {"dtype": "F16", "shape": [2], "data_offsets": [2, 6]}}"#,
            6,
            "overlaps",
        ),
        (
            r#"{"a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}, "b": {"dtype": "F16", "shape": [2], "data_offsets": [6, 10]}}"#,
            10,
            "leaves a hole",
        ),
        (r#"{"a": {"dtype": "F16", "shape": [3], "data_offsets": [0, 4]}}"#, 4, "needs 6"),
        (r#"{"a": {"dtype": "F6_E2M3", "shape": [3], "data_offsets": [0, 2]}}"#, 2, "not a whole number of bytes"),
        (r#"{"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 1]}}"#, 1, "unknown dtype"),
        (r#"{"a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}"#, 9, "the file has"),
        (
            r#"{"a": {"dtype": "F16", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 4]}}"#,
            4,
            "overflows",
        ),
        (r#"[1, 2]"#, 0, "does not start with"),
        (r#"{"a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4], "extra": 1}}"#, 4, "unknown field"),
    ];
    for (header, data, expected) in cases {
        let bytes = safetensors_bytes(header, data);
        let error = safetensors::parse(&bytes, Some(bytes.len() as u64)).unwrap_err().to_string();
        assert!(error.contains(expected), "{expected:?} not in {error:?}");
    }
    let mut huge = (safetensors::MAX_HEADER + 1).to_le_bytes().to_vec();
    huge.push(b'{');
    assert!(safetensors::parse(&huge, None).unwrap_err().to_string().contains("over the"));
    assert_eq!(safetensors::parse(&ok[..20], None).unwrap(), Parse::NeedMore(8 + (ok.len() as u64 - 8 - 16)));
}

#[test]
fn split_names_follow_llama_cpp() {
    assert_eq!(split_name("Llama-3.1-70B-Q4_K_M-00002-of-00005.gguf"), Some(("Llama-3.1-70B-Q4_K_M", 2, 5)));
    assert_eq!(split_part_name("m", 3, 12), "m-00003-of-00012.gguf");
    assert_eq!(split_name("model.gguf"), None);
    assert_eq!(split_name("m-00006-of-00005.gguf"), None);
    // Only `gguf-split`'s five-digit fields name a split set: anything else is one file, so a
    // name can never ask for billions of parts (issue #14, cases 8 and 18).
    assert_eq!(split_name("m-1-of-1.gguf"), None);
    assert_eq!(split_name("m-00001-of-4294967295.gguf"), None);
    assert_eq!(split_name("m-00001-of-99999.gguf"), Some(("m", 1, 99_999)));
}

/// A tensor at layer index 2^32 − 1 named a 4-billion-layer model (34 GB of per-layer
/// tables; 0 layers on 32-bit wasm): now an error naming the tensor (issue #14, case 7).
#[test]
fn a_layer_index_past_the_limit_is_an_error_naming_the_tensor() {
    let bytes = gguf::Builder::new(3, 2, 2)
        .kv_str("general.architecture", "llama")
        .kv_u32("llama.attention.head_count", 2)
        .tensor("token_embd.weight", &[32, 10], 0, 0)
        .tensor("blk.4294967295.attn_norm.weight", &[32], 0, 32 * 10 * 4)
        .padded(32 * 10 * 4 + 32 * 4);
    let Parse::Done(header) = gguf::parse(&bytes, Some(bytes.len() as u64)).unwrap() else { panic!("complete") };
    let error = gguf_model("t", &[header]).unwrap_err().to_string();
    assert!(error.contains("blk.4294967295.attn_norm.weight") && error.contains("at most 10000 layers"), "{error}");

    let header = r#"{"model.embed_tokens.weight": {"dtype": "F32", "shape": [10, 4], "data_offsets": [0, 160]},
                     "model.layers.4294967295.input_layernorm.weight": {"dtype": "F32", "shape": [4], "data_offsets": [160, 176]}}"#;
    let bytes = safetensors_bytes(header, 176);
    let Parse::Done(h) = safetensors::parse(&bytes, Some(bytes.len() as u64)).unwrap() else { panic!("complete") };
    let error = safetensors_model("t", &[("m.safetensors".into(), h)], None, None).unwrap_err().to_string();
    assert!(error.contains("model.layers.4294967295") && error.contains("at most 10000 layers"), "{error}");
}

/// Head counts and sizes from GGUF metadata are unbounded: the cost model's products of them
/// saturate (debug builds once panicked on `head_count × key_length`).
#[test]
fn huge_gguf_hyperparameters_cost_no_overflow() {
    let bytes = gguf::Builder::new(3, 2, 3)
        .kv_str("general.architecture", "llama")
        .string("llama.attention.head_count")
        .u32(10)
        .u64(1 << 32)
        .string("llama.attention.key_length")
        .u32(10)
        .u64(1 << 32)
        .tensor("token_embd.weight", &[32, 10], 0, 0)
        .tensor("blk.0.attn_q.weight", &[32, 32], 8, 32 * 10 * 4)
        .padded(32 * 10 * 4 + 32 * 34);
    let Parse::Done(header) = gguf::parse(&bytes, Some(bytes.len() as u64)).unwrap() else { panic!("complete") };
    let model = gguf_model("t", &[header]).unwrap();
    let scenario = crate::Scenario::from_json(
        r#"{"model": {"preset": "llama-3.2-1b"}, "nodes": [{"name": "a", "device": "rtx-4090"}]}"#,
    )
    .unwrap();
    let problem = scenario.problem_with_models(model, None, &mut crate::check::read_config).unwrap();
    let plan = crate::plan(&problem);
    assert!(!plan.feasible, "a KV cache of 2^64 bytes per token fits nowhere");
}

/// A header that claims a 1 GiB string is refused before the caller reads that much.
#[test]
fn a_header_past_the_limit_is_refused_not_read() {
    let bytes = gguf::Builder::new(3, 0, 1).u64(1 << 30).padded(64);
    let error = gguf::parse(&bytes, Some(u64::MAX)).unwrap_err().to_string();
    assert!(error.contains("past 256 MiB"), "{error}");
}

/// 150,000 metadata keys (a 3.8 MB header) were checked for duplicates pairwise: 48 s.
/// Parsing is linear now; `cargo bench -p stageplan --bench import` times it.
#[test]
fn many_metadata_keys_parse_and_duplicates_are_still_found() {
    let keys: Vec<String> = (0..150_000).map(|i| format!("k.{i}")).collect();
    let mut builder = gguf::Builder::new(3, 0, keys.len() as u64 + 1);
    for key in &keys {
        builder = builder.kv_u32(key, 1);
    }
    let bytes = builder.clone().kv_u32("k.7", 2).padded(0);
    assert!(gguf_error(&bytes).contains("`k.7` appears twice"));
    let bytes = builder.kv_u32("last", 2).padded(0);
    let Parse::Done(h) = gguf::parse(&bytes, Some(bytes.len() as u64)).unwrap() else { panic!("complete") };
    assert_eq!(h.metadata.len(), 150_001);
}

/// Inputs the fuzzers found; each once crashed or over-allocated.
#[test]
fn fuzz_regressions_are_errors() {
    // A JSON error's column inside a two-byte character: the error path was sliced there.
    let text = include_bytes!("../../../../tests/fixtures/fuzz-regressions/scenario-column-inside-a-character.json");
    let error = crate::Scenario::from_json(&String::from_utf8_lossy(text)).unwrap_err().to_string();
    assert!(error.contains("model.config"), "{error}");
    // `llama.block_count` claimed billions of layers and sized per-layer vectors.
    let bytes = include_bytes!("../../../../tests/fixtures/fuzz-regressions/gguf-block-count-oom.bin");
    if let Ok(Parse::Done(header)) = gguf::parse(bytes, Some(bytes.len() as u64)) {
        let error = gguf_model("fuzz", &[header]).unwrap_err().to_string();
        assert!(error.contains("block_count") || error.contains("no `blk.N.*` tensors"), "{error}");
    }
}

#[test]
fn nextn_layers_as_many_as_the_blocks_are_refused() {
    // A file whose multi-token-prediction layers would leave no block of its own (#45).
    for (nextn, blocks) in [(2, 2), (5, 2), (1 << 40, 2)] {
        let bytes = gguf::Builder::new(3, 2, 4)
            .kv_str("general.architecture", "glm4moe")
            .kv_u32("glm4moe.block_count", blocks)
            .kv_u32("glm4moe.attention.head_count", 2)
            .string("glm4moe.nextn_predict_layers")
            .u32(10)
            .u64(nextn)
            .tensor("token_embd.weight", &[32, 10], 0, 0)
            .tensor("blk.0.attn_q.weight", &[32, 32], 8, 32 * 10 * 4)
            .padded(32 * 10 * 4 + 32 * 34);
        let Parse::Done(header) = gguf::parse(&bytes, Some(bytes.len() as u64)).unwrap() else { panic!("complete") };
        let error = gguf_model("t", &[header]).unwrap_err().to_string();
        assert!(error.contains("nextn_predict_layers"), "{nextn}: {error}");
    }
}
