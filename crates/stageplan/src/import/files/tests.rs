//! The reader driven over an in-memory folder, as each surface drives it over its own.

use std::collections::BTreeMap;

use super::*;
use crate::import::gguf::Builder;

/// Files by name: what a folder (or a drop) holds.
type Folder = BTreeMap<String, Vec<u8>>;

/// What reading gave: the model's name and layers, the reads made and the bytes read.
#[derive(Debug)]
struct Read {
    label: String,
    layers: usize,
    reads: usize,
    bytes_read: u64,
}

/// Drives the reader as a surface does: offers `offered`, answers finds from `folder`.
fn drive(folder: &Folder, offered: &[&str], dir: Option<&str>) -> Result<Read, String> {
    let entry = |name: &str| FileEntry { name: name.into(), size: folder.get(name).map(|b| b.len() as u64) };
    let mut reader = ModelReader::new(offered.iter().map(|n| entry(n)).collect(), None, dir.map(str::to_owned))
        .map_err(|e| e.to_string())?;
    let mut reads = 0;
    loop {
        match reader.step().map_err(|e| e.to_string())? {
            Step::Read { file, start, end } => {
                reads += 1;
                assert!(reads < 40, "a model takes a handful of reads");
                let bytes = &folder[&reader.files()[file].name];
                reader.supply(file, start, &bytes[start as usize..end as usize]);
            }
            Step::Find { name } => match folder.get(&name) {
                Some(bytes) => drop(reader.found(&name, Some(bytes.len() as u64))),
                None => reader.missing(&name),
            },
            Step::Done(model) => {
                return Ok(Read {
                    label: model.name.clone(),
                    layers: model.num_layers(),
                    reads,
                    bytes_read: reader.bytes_read(),
                });
            }
        }
    }
}

fn gguf(extra_keys: &[(&str, u32)], vocabulary: usize) -> Vec<u8> {
    let words: Vec<String> = (0..vocabulary).map(|i| format!("word-{i}")).collect();
    let mut b = Builder::new(3, 2, 3 + extra_keys.len() as u64 + u64::from(vocabulary > 0))
        .kv_str("general.architecture", "llama")
        .kv_u32("llama.block_count", 1)
        .kv_u32("llama.attention.head_count", 2);
    for &(k, v) in extra_keys {
        b = b.kv_u32(k, v);
    }
    if vocabulary > 0 {
        b = b.kv_strings("tokenizer.ggml.tokens", words.iter().map(String::as_str));
    }
    b.tensor("token_embd.weight", &[32, 10], 0, 0)
        .tensor("blk.0.attn_q.weight", &[32, 32], 8, 32 * 10 * 4)
        .padded(32 * 10 * 4 + 32 * 34)
}

fn safetensors(header: &str) -> Vec<u8> {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    bytes.extend(std::iter::repeat_n(0u8, 832));
    bytes
}

const SAFETENSORS_HEADER: &str = r#"{"model.embed_tokens.weight": {"dtype": "F32", "shape": [10, 8], "data_offsets": [0, 320]},
    "model.layers.0.self_attn.q_proj.weight": {"dtype": "F32", "shape": [8, 8], "data_offsets": [320, 576]},
    "model.layers.1.self_attn.q_proj.weight": {"dtype": "F32", "shape": [8, 8], "data_offsets": [576, 832]}}"#;

const CONFIG: &str = r#"{"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
    "intermediate_size": 16, "vocab_size": 10}"#;

fn folder(files: &[(&str, Vec<u8>)]) -> Folder {
    files.iter().map(|(n, b)| ((*n).to_owned(), b.clone())).collect()
}

/// The table every surface shares: offered files, what lies beside them, and the label or
/// the message.
#[test]
fn which_files_make_a_model_and_what_failures_say() {
    let index = r#"{"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00001.safetensors",
        "model.layers.0.self_attn.q_proj.weight": "model-00001-of-00001.safetensors",
        "model.layers.1.self_attn.q_proj.weight": "model-00001-of-00001.safetensors"}}"#;
    let disk = folder(&[
        ("tiny.gguf", gguf(&[], 0)),
        ("notes.txt", b"hello".to_vec()),
        ("model.safetensors", safetensors(SAFETENSORS_HEADER)),
        ("config.json", CONFIG.as_bytes().to_vec()),
        ("model.safetensors.index.json", index.as_bytes().to_vec()),
        ("model-00001-of-00001.safetensors", safetensors(SAFETENSORS_HEADER)),
        ("set-00001-of-00002.gguf", gguf(&[("split.count", 2), ("split.no", 0)], 0)),
    ]);
    // Offered files, the folder's name when known, and the label and layers or the message.
    type Case<'a> = (&'a [&'a str], Option<&'a str>, Result<(&'a str, usize), &'a str>);
    let cases: &[Case<'_>] = &[
        (&["tiny.gguf"], None, Ok(("tiny", 1))),
        (&["tiny.gguf"], Some("models"), Ok(("tiny", 1))),
        (&["model.safetensors"], None, Ok(("model", 2))),
        (&["model.safetensors"], Some("tiny-llama"), Ok(("tiny-llama", 2))),
        (&["model.safetensors.index.json"], None, Ok(("model", 2))),
        (&["config.json"], None, Ok(("llama", 2))),
        (&["config.json"], Some("tiny-llama"), Ok(("tiny-llama", 2))),
        (&["config.json", "tiny.gguf"], None, Ok(("tiny", 1))),
        (&["notes.txt"], None, Err("`notes.txt`: not a model file stageplan reads (.gguf, .safetensors")),
        (
            &["set-00001-of-00002.gguf"],
            None,
            Err(
                "`set-00001-of-00002.gguf` is part of a set of 2; `set-00002-of-00002.gguf` is missing: give every part",
            ),
        ),
        (&[], None, Err("no model file was given")),
    ];
    for (offered, dir, expected) in cases {
        let got = drive(&disk, offered, *dir);
        match (expected, &got) {
            (Ok((label, layers)), Ok(read)) => {
                assert_eq!((read.label.as_str(), read.layers), (*label, *layers), "{offered:?}");
            }
            (Err(message), Err(error)) => assert!(error.contains(message), "{offered:?}: {error}"),
            _ => panic!("{offered:?}: expected {expected:?}, got {got:?}"),
        }
    }
    let shardless = folder(&[("model.safetensors.index.json", index.as_bytes().to_vec())]);
    let error = drive(&shardless, &["model.safetensors.index.json"], None).unwrap_err();
    assert!(error.contains("the index names the shard `model-00001-of-00001.safetensors`"), "{error}");
}

/// A header with a large vocabulary is read in a few growing reads, not whole.
#[test]
fn a_long_header_takes_a_few_growing_reads() {
    let bytes = gguf(&[], 40_000);
    let size = bytes.len() as u64;
    let mut disk = folder(&[("big.gguf", bytes)]);
    // Weights after the header that must never be read.
    disk.get_mut("big.gguf").unwrap().extend(std::iter::repeat_n(0u8, 8 << 20));
    let read = drive(&disk, &["big.gguf"], None).unwrap();
    assert!(read.reads <= 6, "{read:?}");
    assert!(read.bytes_read < 2 * size + (64 << 10), "{read:?} for a {size}-byte header");
}

#[test]
fn a_header_past_the_end_and_a_file_that_shrank_are_errors_naming_the_file() {
    let whole = gguf(&[], 2000);
    let disk = folder(&[("cut.gguf", whole[..whole.len() / 2].to_vec())]);
    let error = drive(&disk, &["cut.gguf"], None).unwrap_err();
    assert!(error.starts_with("`cut.gguf`: "), "{error}");

    let mut reader =
        ModelReader::new(vec![FileEntry { name: "gone.gguf".into(), size: Some(1000) }], None, None).unwrap();
    let Ok(Step::Read { file, start, .. }) = reader.step() else { panic!("asks to read") };
    reader.supply(file, start, &[]);
    let error = reader.step().unwrap_err().to_string();
    assert!(error.contains("`gone.gguf`: the file ends at byte 0"), "{error}");
}

/// A metadata value of GGUF type `ty` with its little-endian bytes, for split keys.
type Key<'a> = (&'a str, u32, Vec<u8>);

/// A GGUF part: the model's keys when `first`, then `keys`, and tensors `blk.N.attn_q.weight`
/// for each N in `blocks` (and the embedding when `first`).
fn part(first: bool, keys: &[Key<'_>], blocks: std::ops::Range<u32>) -> Vec<u8> {
    let tensors = blocks.len() as u64 + u64::from(first);
    let mut b = Builder::new(3, tensors, keys.len() as u64 + if first { 3 } else { 0 });
    if first {
        b = b
            .kv_str("general.architecture", "llama")
            .kv_u32("llama.block_count", 3)
            .kv_u32("llama.attention.head_count", 2);
    }
    for (key, ty, bytes) in keys {
        b = b.string(key).u32(*ty);
        for &byte in bytes {
            b = b.u8(byte);
        }
    }
    let mut offset = 0;
    if first {
        b = b.tensor("token_embd.weight", &[32, 10], 0, 0);
        offset += 32 * 10 * 4;
    }
    for block in blocks {
        b = b.tensor(&format!("blk.{block}.attn_q.weight"), &[32, 32], 8, offset);
        offset += 32 * 34;
    }
    b.padded(offset as usize)
}

const U16: u32 = 2;
const U32: u32 = 4;
const I32: u32 = 5;
const F32: u32 = 6;
const STRING: u32 = 8;

/// llama.cpp's rule for split sets (`llama-model-loader.cpp`): the header's `split.count`,
/// a u16, says whether a file is one part of a set; the set's parts are found by the name
/// `PREFIX-%05d-of-%05d.gguf`, and each part's `split.no` is its place. A `split.count` of
/// 2^32 - 1 that was not an unsigned integer, and a file named as one part of a set whose
/// header says it is whole, were read as whole models (issue #32, item 19).
#[test]
fn split_sets_follow_llama_cpps_rule() {
    let count = |n: u16| ("split.count", U16, n.to_le_bytes().to_vec());
    let number = |n: u16| ("split.no", U16, n.to_le_bytes().to_vec());
    let whole = |keys: &[Key<'_>]| part(true, keys, 0..3);
    type Case<'a> = (&'a str, Vec<u8>, Result<&'a str, &'a str>);
    let cases: Vec<Case<'_>> = vec![
        ("m.gguf", whole(&[("split.count", I32, vec![0xff; 4])]), Err("`m.gguf`: `split.count` is -1; ")),
        (
            "m.gguf",
            whole(&[("split.count", F32, 0x4f80_0000u32.to_le_bytes().to_vec())]),
            Err("`split.count` is a float"),
        ),
        (
            "m.gguf",
            whole(&[("split.count", STRING, [&1u64.to_le_bytes()[..], b"3"].concat())]),
            Err("`split.count` is a string"),
        ),
        ("m.gguf", whole(&[("split.count", U32, vec![0xff; 4])]), Err("`split.count` is 4294967295; ")),
        ("m.gguf", whole(&[count(u16::MAX), number(0)]), Err("part 1 of 65535")),
        ("m-1-of-3.gguf", whole(&[]), Err("`m-1-of-3.gguf`: its name makes it part 1 of 3, but")),
        ("m-00001-of-00003.gguf", whole(&[]), Err("its name makes it part 1 of 3, but")),
        ("m-00001-of-00003.gguf", whole(&[count(1)]), Err("its name makes it part 1 of 3, but")),
        ("m-1-of-3.gguf", whole(&[count(3), number(0)]), Err("`m-00001-of-00003.gguf`")),
        ("m-00002-of-00003.gguf", whole(&[count(3), number(0)]), Err("`m-00001-of-00003.gguf`")),
        ("m-00001-of-00002.gguf", whole(&[count(3), number(0)]), Err("`m-00001-of-00003.gguf`")),
        ("m-00001-of-00003.gguf", whole(&[count(3)]), Err("`split.no` is missing")),
        ("m-00001-of-00003.gguf", whole(&[count(3), number(3)]), Err("`split.no` is 3; ")),
        ("m.gguf", whole(&[]), Ok("m")),
        ("m.gguf", whole(&[count(0)]), Ok("m")),
        ("m.gguf", whole(&[count(1), number(0)]), Ok("m")),
        ("m-1-of-1.gguf", whole(&[]), Ok("m-1-of-1")),
        // `llama-gguf-split` with one part writes `-00001-of-00001` and `split.count` 1.
        ("m-00001-of-00001.gguf", whole(&[count(1), number(0)]), Ok("m")),
    ];
    for (name, bytes, expected) in cases {
        let got = drive(&folder(&[(name, bytes)]), &[name], None).map(|read| read.label);
        match (&got, expected) {
            (Ok(label), Ok(expected)) => assert_eq!(label, expected, "{name}"),
            (Err(error), Err(expected)) => {
                assert!(error.contains(expected), "{name}: {expected:?} not in {error}");
                assert!(error.starts_with(&format!("`{name}`")), "{error}");
            }
            _ => panic!("{name}: expected {expected:?}, got {got:?}"),
        }
    }
    // A set of three, offered by any part, and each part's `split.no` its place.
    let set = |numbers: [u16; 3]| {
        folder(&[
            ("m-00001-of-00003.gguf", part(true, &[count(3), number(numbers[0])], 0..1)),
            ("m-00002-of-00003.gguf", part(false, &[count(3), number(numbers[1])], 1..2)),
            ("m-00003-of-00003.gguf", part(false, &[count(3), number(numbers[2])], 2..3)),
        ])
    };
    let good = set([0, 1, 2]);
    for offered in ["m-00001-of-00003.gguf", "m-00002-of-00003.gguf", "m-00003-of-00003.gguf"] {
        let read = drive(&good, &[offered], None).unwrap();
        assert_eq!((read.label.as_str(), read.layers), ("m", 3));
    }
    let swapped = set([0, 2, 1]);
    let error = drive(&swapped, &["m-00001-of-00003.gguf"], None).unwrap_err();
    assert!(error.contains("`m-00002-of-00003.gguf`: its header (`split.count` 3, `split.no` 2)"), "{error}");
}

/// A block index past u32 (`blk.4294967296.…`) was no block at all: its bytes went to the
/// embedding and the model was read, where `blk.4294967295.…` is refused. Every surface reads
/// through this reader (the JS API as the CLI, with a 32-bit `usize` on wasm32), so each
/// gives the one verdict: the index is read as digits, checked, and refused naming the
/// tensor (issue #32, item 20).
#[test]
fn a_block_index_past_u32_is_refused_naming_the_tensor() {
    for index in ["4294967295", "4294967296", "18446744073709551616", "99999999999999999999999999", "10000"] {
        let name = format!("blk.{index}.attn_q.weight");
        let bytes = Builder::new(3, 3, 3)
            .kv_str("general.architecture", "llama")
            .kv_u32("llama.block_count", 1)
            .kv_u32("llama.attention.head_count", 2)
            .tensor("token_embd.weight", &[32, 10], 0, 0)
            .tensor("blk.0.attn_q.weight", &[32, 32], 8, 32 * 10 * 4)
            .tensor(&name, &[32, 32], 8, 32 * 10 * 4 + 32 * 34)
            .padded(32 * 10 * 4 + 2 * 32 * 34);
        let error = drive(&folder(&[("m.gguf", bytes)]), &["m.gguf"], None).unwrap_err();
        assert_eq!(
            error,
            format!("`m.gguf`: tensor `{name}`: puts a layer at index {index}; a model has at most 10000 layers"),
        );
    }
    let header = |index: &str| {
        format!(
            r#"{{"model.embed_tokens.weight": {{"dtype": "F32", "shape": [10, 8], "data_offsets": [0, 320]}},
            "model.layers.0.self_attn.q_proj.weight": {{"dtype": "F32", "shape": [8, 8], "data_offsets": [320, 576]}},
            "model.layers.{index}.self_attn.q_proj.weight": {{"dtype": "F32", "shape": [8, 8], "data_offsets": [576, 832]}}}}"#
        )
    };
    for index in ["4294967296", "18446744073709551616"] {
        let disk = folder(&[("model.safetensors", safetensors(&header(index))), ("config.json", CONFIG.into())]);
        let error = drive(&disk, &["model.safetensors"], None).unwrap_err();
        assert!(
            error.contains(&format!("model.layers.{index}.self_attn.q_proj.weight`: puts a layer at index {index};")),
            "{error}"
        );
    }
}
