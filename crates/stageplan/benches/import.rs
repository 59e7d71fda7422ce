//! Header import benchmark: `cargo bench -p stageplan --bench import`.
//!
//! A 100-layer Llama-shaped GGUF header as llama.cpp writes one: 903 tensor infos and the
//! tokenizer a Llama 3 file carries (128,256 tokens, their types, 280,147 merges), about
//! 6 MB of header. Timed: parsing it and building the model. The file (with tiny tensor
//! data) is also written to the temporary directory so `cargo xtask bench` can time the
//! reference reader (`gguf.GGUFReader`) on the same file.

// The harness reads its fixture files; `clippy.toml` keeps I/O out of the library itself.
#![allow(clippy::disallowed_methods)]

use criterion::{Criterion, criterion_group, criterion_main};
use stageplan::import::{self, Parse, gguf};

const LAYERS: u64 = 100;
const HIDDEN: u64 = 256;
const VOCAB: u64 = 128_256;
const MERGES: u64 = 280_147;
const Q4_K: u32 = 12;
const F32: u32 = 0;

/// The header and the file length its tensor offsets imply.
fn llama_header() -> (Vec<u8>, u64) {
    let mut tensors: Vec<(String, Vec<u64>, u32)> = vec![("token_embd.weight".into(), vec![HIDDEN, VOCAB], Q4_K)];
    for i in 0..LAYERS {
        for (name, dims, ty) in [
            ("attn_norm.weight", vec![HIDDEN], F32),
            ("attn_q.weight", vec![HIDDEN, HIDDEN], Q4_K),
            ("attn_k.weight", vec![HIDDEN, HIDDEN / 8], Q4_K),
            ("attn_v.weight", vec![HIDDEN, HIDDEN / 8], Q4_K),
            ("attn_output.weight", vec![HIDDEN, HIDDEN], Q4_K),
            ("ffn_norm.weight", vec![HIDDEN], F32),
            ("ffn_gate.weight", vec![HIDDEN, HIDDEN], Q4_K),
            ("ffn_up.weight", vec![HIDDEN, HIDDEN], Q4_K),
            ("ffn_down.weight", vec![HIDDEN, HIDDEN], Q4_K),
        ] {
            tensors.push((format!("blk.{i}.{name}"), dims, ty));
        }
    }
    tensors.push(("output_norm.weight".into(), vec![HIDDEN], F32));
    tensors.push(("output.weight".into(), vec![HIDDEN, VOCAB], Q4_K));

    let tokens: Vec<String> = (0..VOCAB).map(|i| format!("tok{i:x}")).collect();
    let merges: Vec<String> = (0..MERGES).map(|i| format!("m{} m{}", i % 997, i / 997)).collect();
    let mut b = gguf::Builder::new(3, tensors.len() as u64, 9)
        .kv_str("general.architecture", "llama")
        .kv_str("general.name", "bench-100")
        .kv_u32("llama.block_count", LAYERS as u32)
        .kv_u32("llama.embedding_length", HIDDEN as u32)
        .kv_u32("llama.attention.head_count", 8)
        .kv_u32("llama.attention.head_count_kv", 1)
        .kv_strings("tokenizer.ggml.tokens", tokens.iter().map(String::as_str))
        .kv_strings("tokenizer.ggml.merges", merges.iter().map(String::as_str))
        .string("tokenizer.ggml.token_type")
        .u32(9)
        .u32(5)
        .u64(VOCAB);
    for _ in 0..VOCAB {
        b = b.u32(1);
    }
    let mut offset = 0u64;
    for (name, dims, ty) in &tensors {
        b = b.tensor(name, dims, *ty, offset);
        let elements: u64 = dims.iter().product();
        let bytes = if *ty == Q4_K { elements / 256 * 144 } else { elements * 4 };
        offset += bytes.next_multiple_of(32);
    }
    let header = b.padded(0);
    let len = header.len() as u64 + offset;
    (header, len)
}

fn bench(c: &mut Criterion) {
    let (header, file_len) = llama_header();
    let path = std::env::temp_dir().join("stageplan-bench-llama-100.gguf");
    let mut file = header.clone();
    file.resize(file_len as usize, 0);
    std::fs::write(&path, &file).expect("bench file written");
    drop(file);

    let mut group = c.benchmark_group("import");
    group.sample_size(20);
    group.bench_function("gguf-100-layers-parse", |b| {
        b.iter(|| match gguf::parse(&header, Some(file_len)) {
            Ok(Parse::Done(h)) => h,
            other => panic!("{other:?}"),
        });
    });
    group.bench_function("gguf-100-layers-parse-and-model", |b| {
        b.iter(|| {
            let Ok(Parse::Done(h)) = gguf::parse(&header, Some(file_len)) else { panic!("parses") };
            import::gguf_model("bench", &[h]).expect("a model")
        });
    });
    group.finish();
    #[allow(clippy::print_stdout)] // a benchmark reports what it measured
    {
        println!("header: {} bytes; bench file: {}", header.len(), path.display());
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
