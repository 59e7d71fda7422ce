enable f16;

// Tiled f16 matrix multiply, C[m×n] = A[m×k] · B[k×n], row-major: the same tiling as
// matmul.wgsl with half-precision storage and arithmetic (the `shader-f16` feature), to
// measure the device's f16 throughput. No epilogue.
//
// A workgroup of 16×16 invocations computes a 64×64 tile of C; each invocation a 4×4
// block. K advances 16 at a time through tiles of A (64×16) and B (16×64) staged in
// workgroup memory. Edges are bounds-checked, so any m, n, k work.

struct Dims {
    m: u32,
    n: u32,
    k: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> lhs: array<f16>;
@group(0) @binding(1) var<storage, read> rhs: array<f16>;
@group(0) @binding(2) var<storage, read_write> out: array<f16>;
@group(0) @binding(3) var<uniform> dims: Dims;

const TILE: u32 = 64u;
const TK: u32 = 16u;

var<workgroup> tile_a: array<array<f16, 16>, 64>;  // [row][k]
var<workgroup> tile_b: array<array<f16, 64>, 16>;  // [k][col]

fn multiply(wg: vec3<u32>, local: vec3<u32>) {
    let row0 = wg.y * TILE + local.y * 4u;
    let col0 = wg.x * TILE + local.x * 4u;
    let flat = local.y * 16u + local.x;  // 0..255
    var acc: array<array<f16, 4>, 4>;
    for (var i = 0u; i < 4u; i = i + 1u) {
        for (var j = 0u; j < 4u; j = j + 1u) {
            acc[i][j] = 0.0h;
        }
    }
    var kk = 0u;
    loop {
        if (kk >= dims.k) { break; }
        // Stage 64×16 of A and 16×64 of B: 1024 values each, 4 per invocation.
        for (var s = 0u; s < 4u; s = s + 1u) {
            let e = flat * 4u + s;
            let ar = e / TK;
            let ac = e % TK;
            let ga = wg.y * TILE + ar;
            let gk = kk + ac;
            tile_a[ar][ac] = select(0.0h, lhs[ga * dims.k + gk], ga < dims.m && gk < dims.k);
            let br = e / TILE;
            let bc = e % TILE;
            let gb = kk + br;
            let gn = wg.x * TILE + bc;
            tile_b[br][bc] = select(0.0h, rhs[gb * dims.n + gn], gb < dims.k && gn < dims.n);
        }
        workgroupBarrier();
        for (var t = 0u; t < TK; t = t + 1u) {
            var a: array<f16, 4>;
            var b: array<f16, 4>;
            for (var i = 0u; i < 4u; i = i + 1u) {
                a[i] = tile_a[local.y * 4u + i][t];
                b[i] = tile_b[t][local.x * 4u + i];
            }
            for (var i = 0u; i < 4u; i = i + 1u) {
                for (var j = 0u; j < 4u; j = j + 1u) {
                    acc[i][j] = acc[i][j] + a[i] * b[j];
                }
            }
        }
        workgroupBarrier();
        kk = kk + TK;
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        let r = row0 + i;
        if (r >= dims.m) { continue; }
        for (var j = 0u; j < 4u; j = j + 1u) {
            let c = col0 + j;
            if (c >= dims.n) { continue; }
            out[r * dims.n + c] = acc[i][j];
        }
    }
}

@compute @workgroup_size(16, 16)
fn matmul(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) local: vec3<u32>) {
    multiply(wg, local);
}
