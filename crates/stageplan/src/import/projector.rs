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

/// Bytes of the compute buffer clip reserves on its device for one warm-up image.
pub fn compute_bytes(dims: &VisionDims) -> u64 {
    let side = (dims.image / dims.patch) as f64;
    let tokens = side * side;
    let (e, f, h) = (dims.hidden as f64, dims.ffn as f64, dims.heads as f64);
    let pixels = 3.0 * (dims.image as f64).powi(2);
    // The image and its patches, then the widest of a block's steps, all in f32.
    let inputs = 4.0 * (pixels + tokens * 3.0 * (dims.patch as f64).powi(2));
    let attention = 4.0 * tokens * (4.0 * e + h * tokens);
    let mlp = 4.0 * tokens * (2.0 * e + 2.0 * f);
    (inputs + attention.max(mlp)).ceil() as u64
}
