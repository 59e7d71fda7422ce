// Memory bandwidth: the STREAM triad, a[i] = b[i] + s * c[i], on vec4<f32>.
// Each invocation moves 48 bytes (two reads, one write of 16 bytes).

struct Params {
    count: u32,  // vec4 elements
    scale: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> a: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> c: array<vec4<f32>>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(256)
fn triad(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    // A grid-stride loop: any dispatch size covers the whole array.
    let stride = groups.x * 256u;
    var i = id.x;
    loop {
        if (i >= params.count) { break; }
        a[i] = b[i] + params.scale * c[i];
        i = i + stride;
    }
}
