//! A vision projector (llama.cpp's `--mmproj` file, architecture `clip`) from its GGUF
//! header: its weights to the byte and the buffers its image encoder reserves.
//!
//! llama.cpp's clip loader puts every tensor in one buffer on one device and, at start-up,
//! reserves the compute buffers of a warm-up image of `clip.vision.image_size` pixels
//! (`tools/mtmd/clip.cpp`, `warmup`). The estimate below is of that graph: the ViT's tokens,
//! `(image ÷ patch)²`, through its widest step.

use super::ImportError;
use super::gguf::GgufHeader;

/// What a projector holds on its device.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ProjectorSize {
    /// Bytes of all its tensors (what clip logs as `model size`).
    pub weights: u64,
    /// Bytes of the compute buffer on its device for one image.
    pub compute: u64,
}

/// The ViT's widths, from the header.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct VisionDims {
    pub image: u64,
    pub patch: u64,
    pub hidden: u64,
    pub ffn: u64,
    pub heads: u64,
    pub blocks: u64,
    pub projection: u64,
    /// The text model's width, the projector's output.
    pub text_hidden: u64,
}

/// The projector a header describes.
///
/// # Errors
/// Not a `clip` file with a vision encoder, or a key llama.cpp needs missing or out of its range.
pub fn gguf_projector(header: &GgufHeader) -> Result<ProjectorSize, ImportError> {
    let arch = header.get("general.architecture").and_then(super::gguf::Value::as_str).unwrap_or_default();
    if arch != "clip" {
        return Err(ImportError::Model(format!(
            "`general.architecture` is `{}`, not `clip`: give a vision projector (`mmproj-*.gguf`) as `mmproj`",
            crate::quote::line(arch)
        )));
    }
    if !matches!(header.get("clip.has_vision_encoder"), Some(super::gguf::Value::Bool(true))) {
        return Err(ImportError::Model(
            "has no vision encoder (`clip.has_vision_encoder`); an audio projector is not sized yet".to_owned(),
        ));
    }
    let key = |name: &str| -> Result<u64, ImportError> {
        let key = format!("clip.vision.{name}");
        header
            .get(&key)
            .and_then(super::gguf::Value::as_u64)
            .ok_or_else(|| ImportError::Model(format!("`{key}` is missing; llama.cpp needs it to load the projector")))
    };
    let dims = VisionDims {
        image: key("image_size")?,
        patch: key("patch_size")?,
        hidden: key("embedding_length")?,
        ffn: key("feed_forward_length")?,
        heads: key("attention.head_count")?,
        blocks: key("block_count")?,
        projection: key("projection_dim")?,
        // `mm.2.weight`'s output: the text model's width (llava's `mlp` projector).
        text_hidden: header
            .tensors
            .iter()
            .find(|t| t.name == "mm.2.weight")
            .and_then(|t| t.dims.get(1).copied())
            .unwrap_or(0),
    };
    // llama.cpp's own checks (`clip.cpp`, `load_hparams`).
    if dims.image > 8192 || dims.patch == 0 || dims.patch >= 65536 || dims.hidden == 0 || dims.heads == 0 {
        return Err(ImportError::Model(format!(
            "has image size {}, patch size {}, width {} and {} heads; llama.cpp loads 1 to 8,192 pixels, patches of 1 to 65,535 and a width and heads above 0",
            dims.image, dims.patch, dims.hidden, dims.heads
        )));
    }
    Ok(ProjectorSize { weights: header.tensor_bytes(), compute: compute_bytes(&dims) })
}

/// Bytes of the compute buffers clip reserves for one warm-up image: on its device, and the
/// graph's inputs the CPU holds beside it (counted on the device too, to be safe).
///
/// From llama.cpp's llava graph and ggml-alloc (tools/mtmd/clip.cpp, models/llava.cpp): the
/// inputs (the f32 image, positions and patch ids) stay live to the end; above them the
/// patch embeddings and, at the widest step, a block's three activations and its FFN's up
/// projection, or the projector's two outputs. Flash attention on, as `-fa auto` resolves on
/// every backend that has it. Measured with `tests/engine/write_mmproj.py` on 15 shapes
/// (CLIP ViT-L/14-336, SigLIP-378, ViT-H, up to 4,096 tokens): never under, and within
/// 10% on ViT-L and SigLIP (`the_estimate_is_never_under_what_llama_cpp_reserved`).
pub fn compute_bytes(dims: &VisionDims) -> u64 {
    use crate::engine::element::{F32, I32};
    let side = (dims.image / dims.patch.max(1)) as f64;
    let tokens = side * side;
    let with_class = tokens + 1.0;
    let (e, f) = (dims.hidden as f64, dims.ffn as f64);
    // The image's three channels in f32, and two i32 rows per token (positions, patch ids).
    let inputs = 3.0 * F32 * (dims.image as f64).powi(2) + 2.0 * I32 * tokens;
    let patches = F32 * tokens * e;
    let x = F32 * with_class * e;
    let up = F32 * with_class * f;
    let projector = F32 * tokens * (dims.projection as f64 + dims.text_hidden as f64) + x;
    let widest = (5.0 * x).max(3.0 * x + up).max(projector);
    // One mebibyte for ggml-alloc's rounding and the holes its best fit leaves.
    (2.0 * inputs + patches + widest + 1048576.0).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_never_under_what_llama_cpp_reserved() {
        // (image, patch, width, ffn, heads, blocks, projection, text width) and the device's
        // plus the CPU's compute buffers llama-server logged (MiB, `-fa auto`, pinned build).
        let measured = [
            ((336, 14, 1024, 4096, 16, 24, 4096, 4096), 21.55 + 1.30),
            ((378, 14, 1152, 4304, 16, 27, 4096, 4096), 27.63 + 1.64),
            ((336, 14, 512, 2048, 8, 3, 1024, 1024), 8.06 + 1.30),
            ((224, 14, 1280, 5120, 16, 5, 2048, 2048), 10.61 + 0.58),
            ((512, 8, 512, 2048, 8, 4, 1024, 1024), 67.04 + 3.03),
            ((224, 16, 768, 3072, 12, 12, 768, 2048), 4.62 + 0.58),
            ((512, 16, 768, 3072, 12, 2, 1536, 768), 18.02 + 3.01),
            ((672, 14, 256, 1024, 4, 2, 512, 256), 14.19 + 5.19),
        ];
        for ((image, patch, hidden, ffn, heads, blocks, projection, text_hidden), mib) in measured {
            let dims = VisionDims { image, patch, hidden, ffn, heads, blocks, projection, text_hidden };
            let estimate = compute_bytes(&dims) as f64 / 1048576.0;
            assert!(estimate >= mib, "{dims:?}: {estimate:.2} MiB under llama.cpp's {mib:.2}");
            assert!(estimate <= 1.6 * mib + 1.0, "{dims:?}: {estimate:.2} MiB, far over llama.cpp's {mib:.2}");
        }
    }
}
