// Register-blocked f32 matrix multiply without workgroup memory, C[m×n] = A[m×k] · B[k×n]
// (row-major), with the same optional MLP epilogue as matmul.wgsl (bias + GELU).
//
// Each invocation computes a 4×4 block of C straight from storage: per step of k, four
// scalars of A and one vec4 of B feed sixteen multiply-adds. No barriers: on CPU
// implementations of WebGPU/Vulkan (lavapipe, SwiftShader), where a workgroup barrier
// switches every invocation's context, this is the faster shape; on GPUs the tiled kernel
// usually wins. The device context times both once and keeps the faster.
// B is read as vec4 rows, so n must be a multiple of 4 (callers pad).

struct Dims {
    m: u32,
    n: u32,
    k: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> lhs: array<f32>;
@group(0) @binding(1) var<storage, read> rhs: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> dims: Dims;
@group(0) @binding(4) var<storage, read> bias: array<f32>;

fn gelu(x: f32) -> f32 {
    let inner = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + tanh(inner));
}

fn multiply(id: vec3<u32>, epilogue: bool) {
    let col4 = id.x;            // which vec4 column block
    let row0 = id.y * 4u;
    let n4 = dims.n / 4u;
    if (col4 >= n4 || row0 >= dims.m) { return; }
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    let r1 = min(row0 + 1u, dims.m - 1u);
    let r2 = min(row0 + 2u, dims.m - 1u);
    let r3 = min(row0 + 3u, dims.m - 1u);
    for (var kk = 0u; kk < dims.k; kk = kk + 1u) {
        let b = rhs[kk * n4 + col4];
        acc0 = acc0 + lhs[row0 * dims.k + kk] * b;
        acc1 = acc1 + lhs[r1 * dims.k + kk] * b;
        acc2 = acc2 + lhs[r2 * dims.k + kk] * b;
        acc3 = acc3 + lhs[r3 * dims.k + kk] * b;
    }
    var rows = array<vec4<f32>, 4>(acc0, acc1, acc2, acc3);
    for (var i = 0u; i < 4u; i = i + 1u) {
        let r = row0 + i;
        if (r >= dims.m) { break; }
        for (var j = 0u; j < 4u; j = j + 1u) {
            let c = col4 * 4u + j;
            var v = rows[i][j];
            if (epilogue) {
                v = gelu(v + bias[c]);
            }
            out[r * dims.n + c] = v;
        }
    }
}

@compute @workgroup_size(16, 4)
fn matmul(@builtin(global_invocation_id) id: vec3<u32>) {
    multiply(id, false);
}

@compute @workgroup_size(16, 4)
fn mlp(@builtin(global_invocation_id) id: vec3<u32>) {
    multiply(id, true);
}
