//! Memory stays bounded on hostile headers: a header that claims 2^60 tensors, terabyte
//! strings or endless nested arrays costs an error, not an allocation. A counting
//! allocator measures the peak while each parser runs.

use stageplan::import::{gguf, safetensors};

#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// Peak heap bytes while `f` runs (dhat's testing profiler, one at a time).
fn peak_during(f: impl FnOnce()) -> u64 {
    let _profiler = dhat::Profiler::builder().testing().build();
    f();
    dhat::HeapStats::get().max_bytes as u64
}

fn gguf_prefix(tensors: u64, kvs: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(tensors.to_le_bytes());
    b.extend(kvs.to_le_bytes());
    b
}

fn hostile_inputs() -> Vec<(&'static str, Vec<u8>)> {
    let mut cases = Vec::new();
    cases.push(("2^60 tensors", gguf_prefix(1 << 60, 0)));
    cases.push(("2^60 metadata entries", gguf_prefix(0, 1 << 60)));
    let mut string = gguf_prefix(0, 1);
    string.extend((1u64 << 40).to_le_bytes()); // a 1 TB key
    cases.push(("a 1 TB key", string));
    let mut array = gguf_prefix(0, 1);
    array.extend(1u64.to_le_bytes());
    array.push(b'k');
    array.extend(9u32.to_le_bytes());
    array.extend(8u32.to_le_bytes()); // array of strings
    array.extend((1u64 << 50).to_le_bytes());
    cases.push(("2^50 strings", array));
    let mut nested = gguf_prefix(0, 1);
    nested.extend(1u64.to_le_bytes());
    nested.push(b'k');
    nested.extend(9u32.to_le_bytes());
    for _ in 0..10_000 {
        nested.extend(9u32.to_le_bytes());
        nested.extend(1u64.to_le_bytes());
    }
    cases.push(("arrays nested 10,000 deep", nested));
    // Many arrays short enough to keep: the total kept is capped (2^16 values).
    let mut many = gguf_prefix(0, 40);
    for i in 0..40u32 {
        let key = format!("k{i}");
        many.extend((key.len() as u64).to_le_bytes());
        many.extend(key.as_bytes());
        many.extend(9u32.to_le_bytes());
        many.extend(9u32.to_le_bytes()); // array of arrays
        many.extend(4000u64.to_le_bytes());
        for _ in 0..4000 {
            many.extend(0u32.to_le_bytes());
            many.extend(0u64.to_le_bytes());
        }
    }
    cases.push(("40 arrays of 4,000 empty arrays", many));
    let mut safetensors_huge = (99_999_999u64).to_le_bytes().to_vec();
    safetensors_huge.extend(b"{\"a\": {\"dtype\": \"F16\", \"shape\": [1], \"data_offsets\": [0, 2]}}");
    cases.push(("a safetensors header claiming 100 MB", safetensors_huge));
    cases
}

#[test]
fn hostile_headers_allocate_in_proportion_to_their_bytes() {
    for (what, bytes) in hostile_inputs() {
        for file_len in [Some(bytes.len() as u64), None] {
            let peak = peak_during(|| {
                let _ = gguf::parse(&bytes, file_len);
                let _ = safetensors::parse(&bytes, file_len);
            });
            // Values kept are bounded (a Value is 40 bytes; at most 2^16 kept per header),
            // everything else is proportional to the input.
            let bound = (4 << 20) + bytes.len() as u64 * 4;
            assert!(peak <= bound, "{what} ({file_len:?}): peaked at {peak} bytes for {} input bytes", bytes.len());
        }
    }
}
