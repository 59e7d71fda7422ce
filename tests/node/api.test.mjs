// The Node build of stageplan's JS API against the CLI, with Node's own test runner:
//
//   STAGEPLAN_EMBED=dist/embed STAGEPLAN_CLI=target/debug/stageplan \
//   STAGEPLAN_FIXTURES=DIR node --test tests/node/
//
// DIR holds model files written by tests/fixtures/write_models.py (the reference writers);
// `cargo xtask test` sets all three.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
const embed = path.resolve(root, process.env.STAGEPLAN_EMBED ?? 'dist/embed');
const cli = path.resolve(root, process.env.STAGEPLAN_CLI ?? 'target/debug/stageplan');
const fixtures = process.env.STAGEPLAN_FIXTURES;
const stageplan = createRequire(import.meta.url)(path.join(embed, 'node/stageplan.js'));

const read = (file) => fs.readFileSync(path.join(root, file), 'utf8');
const runCli = (...args) => JSON.parse(execFileSync(cli, args, { cwd: root, encoding: 'utf8' }));

/** `stageplan plan` of a scenario object, as JSON (a plan that does not fit exits 1 and still prints). */
function runCliPlan(scenario) {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'stageplan-node-')), 'scenario.json');
  fs.writeFileSync(file, JSON.stringify(scenario));
  try {
    return runCli('plan', file, '--format', 'json');
  } catch (e) {
    if (e.status === 1) return JSON.parse(e.stdout);
    throw e;
  }
}

/** The object shapes the declarations give: name → { required, optional } field names, from
 *  the hand-written `export interface X { … }` and the generated `export type X = { … };`. */
function declaredShapes() {
  const text = fs.readFileSync(path.join(embed, 'stageplan.d.ts'), 'utf8').replace(/\/\*[\s\S]*?\*\//g, '');
  const shapes = {};
  for (const match of text.matchAll(/export interface (\w+)(?: extends \w+)? \{([\s\S]*?)\n\}/g)) {
    const required = [];
    const optional = [];
    for (const line of match[2].split('\n')) {
      const field = line.match(/^ {2,4}(\w+)(\??):/);
      if (field) (field[2] ? optional : required).push(field[1]);
    }
    shapes[match[1]] = { required, optional };
  }
  for (const match of text.matchAll(/export type (\w+) = \{/g)) {
    // The body up to its closing brace; fields split at commas outside brackets.
    let depth = 0;
    let field = '';
    const fields = [];
    for (const ch of text.slice(match.index + match[0].length)) {
      if ('{[(<'.includes(ch)) depth += 1;
      if ('}])>'.includes(ch)) {
        if (depth === 0) break;
        depth -= 1;
      }
      if (ch === ',' && depth === 0) {
        fields.push(field);
        field = '';
      } else {
        field += ch;
      }
    }
    fields.push(field);
    const required = [];
    const optional = [];
    for (const f of fields) {
      const named = f.trim().match(/^"?(\w+)"?(\??):/);
      if (named) (named[2] ? optional : required).push(named[1]);
    }
    shapes[match[1]] = { required, optional };
  }
  return shapes;
}
const shapes = declaredShapes();

/** Checks `value`'s keys against the declared interface: every required field present, none undeclared. */
function conforms(value, name) {
  const shape = shapes[name];
  assert.ok(shape, `the declarations give ${name}`);
  const keys = Object.keys(value);
  for (const field of shape.required) assert.ok(keys.includes(field), `${name}.${field} is declared but missing`);
  for (const key of keys) {
    assert.ok(shape.required.includes(key) || shape.optional.includes(key), `${name}.${key} is returned but not declared`);
  }
}

test('plan() returns exactly the CLI plan, from text or an object', () => {
  const text = read('tests/scenarios/home-70b.json');
  const cliPlan = runCli('plan', 'tests/scenarios/home-70b.json', '--format', 'json');
  assert.deepStrictEqual(stageplan.plan(text), cliPlan);
  assert.deepStrictEqual(stageplan.plan(JSON.parse(text)), cliPlan);
  for (const file of fs.readdirSync(path.join(root, 'tests/scenarios')).filter((f) => f.endsWith('.json') && !f.startsWith('experts'))) {
    const ours = stageplan.plan(read(`tests/scenarios/${file}`));
    const theirs = runCli('plan', `tests/scenarios/${file}`, '--format', 'json');
    assert.deepStrictEqual(ours, theirs, file);
  }
});

test('planView() lays out the CLI plan, with every field declared', () => {
  const text = read('tests/scenarios/home-70b.json');
  const cliPlan = runCli('plan', 'tests/scenarios/home-70b.json', '--format', 'json');
  const view = stageplan.planView(text);
  conforms(view, 'PlanView');
  for (const [row, band, bar] of view.rows.map((r, i) => [r, view.bands[i], view.bars[i]])) {
    conforms(row, 'StageRow');
    conforms(band, 'Band');
    conforms(bar, 'MemoryBar');
  }
  assert.deepStrictEqual(view.rows.map((r) => `${r.node} ${r.layers}`), cliPlan.stages.map((s) => `${s.node} ${s.layers[0]}–${s.layers[1]}`));
  const shown = view.headline.match(/([\d.]+) tok\/s for one user/);
  assert.ok(shown, view.headline);
  assert.equal(Number(shown[1]), Number(cliPlan.stream_tokens_per_s.toPrecision(3)));
  const without = stageplan.planView(JSON.parse(text), { enabled: [false, true, true, true] });
  assert.ok(without.rows.every((r) => r.node !== 'desk'));
  assert.throws(() => stageplan.planView(text, { enabled: [true] }), /`enabled` has 1 entries for 4 nodes/);
  // A machine with system RAM (#34): its RAM's bar beside the GPU's, and what it keeps there.
  const ram = stageplan.planView(read('tests/scenarios/desktop-moe-ram.json'));
  conforms(ram.ram_bars[0], 'MemoryBar');
  const kept = runCli('plan', 'tests/scenarios/desktop-moe-ram.json', '--format', 'json').stages[0].offload.ffn_layers;
  assert.equal(ram.rows[0].ram, `experts of layers ${kept[0]}–${kept[1] - 1}`);
  assert.equal(view.ram_bars.length, view.rows.length);
  assert.ok(view.ram_bars.every((b) => b === null), 'machines without system RAM have no RAM bar');
});

test('bad scenarios throw Errors with the CLI message', () => {
  let compared = 0;
  for (const dir of fs.readdirSync(path.join(root, 'tests/cli')).filter((d) => d.startsWith('bad-'))) {
    const folder = path.join(root, 'tests/cli', dir);
    if (fs.readFileSync(path.join(folder, 'cmd'), 'utf8').trim() !== 'plan scenario.json') continue;
    // Cases about the file itself (a directory in its place) are the CLI's alone.
    if (!fs.statSync(path.join(folder, 'scenario.json')).isFile()) continue;
    const expected = fs.readFileSync(path.join(folder, 'expected'), 'utf8');
    const message = expected.split('--- stderr\n')[1].replace(/^error: /, '').trimEnd();
    assert.throws(() => stageplan.plan(fs.readFileSync(path.join(folder, 'scenario.json'), 'utf8')), (error) => {
      assert.ok(error instanceof Error, `${dir}: an Error`);
      assert.equal(error.message, message, dir);
      // The field a message names first is the error's `path`, as data.
      const named = message.match(/^`((?:model|workload|nodes|links|objective|policy|engine|stages)\b[^`]*)`/);
      if (named) assert.equal(error.path, named[1], dir);
      return true;
    });
    compared += 1;
  }
  assert.ok(compared >= 15, `compared ${compared} cases`);
  assert.throws(() => stageplan.plan(undefined), /`scenario` is missing/);
  // A nested field: the third machine's bandwidth, with the value as it was written.
  const third = JSON.parse(fs.readFileSync(path.join(root, 'tests/scenarios/home-70b.json'), 'utf8'));
  third.nodes[2].bandwidth = '0 GB/s';
  assert.throws(() => stageplan.plan(third), (e) => e.path === 'nodes[2].bandwidth' && e.value === '"0 GB/s"' && /^`nodes\[2\]\.bandwidth` is 0/.test(e.message));
  assert.throws(() => stageplan.plan({ model: { preset: 'llama-3.1-8b' }, nodes: [{ name: 'a', device: 'rtx-4090' }] }, { name: 'x.gguf', bytes: new Uint8Array(4) }), /`modelFile` `x.gguf` was given/);
});

test('model() and presets() match the CLI', () => {
  assert.deepStrictEqual(stageplan.model('llama-3.2-1b', { weights: 'q4_k_m' }), runCli('model', 'llama-3.2-1b', '--weights', 'q4_k_m', '--format', 'json'));
  const config = read('tests/cli/model-config-json/config.json');
  const cliSummary = runCli('model', 'tests/cli/model-config-json/config.json', '--format', 'json');
  delete cliSummary.read;
  const ours = stageplan.model(JSON.parse(config));
  // The CLI names a config by its folder; the API by its model type.
  assert.deepStrictEqual({ ...ours, name: cliSummary.name }, cliSummary);
  assert.deepStrictEqual(stageplan.presets(), runCli('presets', '--format', 'json'));
  assert.throws(() => stageplan.model('llama-9000'), (e) => e instanceof Error && /llama-9000/.test(e.message));
  assert.throws(() => stageplan.model('llama-3.1-8b', { weigths: 'q4_k_m' }), /unknown field `weigths`/);
  // K and V apart (-ctk q8_0 -ctv f16), as the CLI prices them; refused where V lives in K's row.
  assert.deepStrictEqual(stageplan.model('llama-3.1-8b', { kv: 'q8_0', kvV: 'f16' }), runCli('model', 'llama-3.1-8b', '--kv', 'q8_0', '--kv-v', 'f16', '--format', 'json'));
  assert.throws(() => stageplan.model('deepseek-v3', { kv: 'q8_0', kvV: 'f16' }), /`kvV` is `f16` beside a `q8_0` K cache/);
});

test('replan() matches stageplan replan', () => {
  const dir = 'tests/cli/replan-node-lost';
  const cliReplan = runCli('replan', `${dir}/current.json`, `${dir}/scenario.json`, '--format', 'json');
  const ours = stageplan.replan(JSON.parse(read(`${dir}/current.json`)), read(`${dir}/scenario.json`));
  assert.deepStrictEqual(ours, cliReplan);
  assert.ok(ours.moves.length > 0 && !ours.kept);
  assert.throws(() => stageplan.replan(read(`${dir}/current.json`), read(`${dir}/scenario.json`), { tolerance: 3 }), /`tolerance` is 3/);
});

test('serve() answers as stageplan plan --users/--ttft/--tpot', () => {
  const scenario = read('tests/cli/plan-users/scenario.json');
  // How many users fit at a p50 time per token, and what four users see against targets.
  const found = stageplan.serve(JSON.parse(scenario), { tpot: '30ms', percentile: 'p50' });
  assert.deepStrictEqual(found, runCli('plan', 'tests/cli/plan-users/scenario.json', '--tpot', '30ms', '--percentile', 'p50', '--format', 'json'));
  assert.equal(found.capacity.limit.reason, 'target');
  assert.equal(found.served.users, found.capacity.users);
  const four = stageplan.serve(scenario, { users: 4, ttft: 1, tpot: '5 ms' });
  assert.deepStrictEqual(four, runCli('plan', 'tests/cli/plan-users/scenario.json', '--users', '4', '--ttft', '1s', '--tpot', '5ms', '--format', 'json'));
  assert.equal(four.targets.missed.target, 'tpot');
  conforms(found, 'Answer');
  conforms(found.served, 'Served');
  conforms(found.targets, 'TargetsHeld');
  conforms(found.capacity, 'Found');
  assert.throws(() => stageplan.serve(scenario, {}), /no target/);
  assert.throws(() => stageplan.serve(scenario, { users: 0 }), /`users` is 0/);
  // vLLM's users, from its own scheduler, as the CLI simulates them.
  const vllm = stageplan.serve(read('tests/cli/plan-users-vllm/scenario.json'), { users: 4 });
  assert.deepStrictEqual(vllm, runCli('plan', 'tests/cli/plan-users-vllm/scenario.json', '--users', '4', '--format', 'json'));
  assert.equal(vllm.served.scheduler.server, 'vllm');
  conforms(vllm.served, 'Served');
  // vLLM queues what its --max-num-seqs does not run: users past llama-server's 256 slots.
  const queued = stageplan.serve(read('tests/cli/plan-users-vllm/scenario.json'), { users: 600 });
  assert.equal(queued.served.users, 600);
  assert.equal(queued.served.scheduler.max_num_seqs, queued.plan.workload.batch);
  assert.ok(queued.plan.workload.batch < 600);
  // Requests at a rate into the users' slots, as `--users 4 --rate 5`.
  const rated = stageplan.serve(read('tests/cli/plan-users-rate/scenario.json'), { users: 4, rate: 5 });
  assert.deepStrictEqual(rated, runCli('plan', 'tests/cli/plan-users-rate/scenario.json', '--users', '4', '--rate', '5', '--format', 'json'));
  assert.equal(rated.served.rate, 5);
  assert.throws(() => stageplan.serve(read('tests/cli/plan-users-rate/scenario.json'), { rate: 5 }), /`rate` needs `users` too/);
  // Lengths drawn about the workload's, as `--spread 0.5`.
  const strayed = stageplan.serve(read('tests/cli/plan-users-lengths/scenario.json'), { users: 4, spread: 0.5 });
  assert.deepStrictEqual(strayed, runCli('plan', 'tests/cli/plan-users-lengths/scenario.json', '--users', '4', '--spread', '0.5', '--format', 'json'));
  assert.equal(strayed.served.spread, 0.5);
});

test('results have the shapes stageplan.d.ts declares', () => {
  const plan = stageplan.plan(read('tests/scenarios/home-70b-8.json'));
  conforms(plan, 'Plan');
  for (const stage of plan.stages) {
    conforms(stage, 'Stage');
    conforms(stage.memory, 'MemoryBreakdown');
    conforms(stage.time, 'TimeBreakdown');
  }
  plan.left_out.forEach((l) => conforms(l, 'LeftOut'));
  plan.baselines.forEach((b) => conforms(b, 'Baseline'));
  plan.diagnostics.forEach((d) => conforms(d, 'Diagnostic'));
  conforms(plan.search, 'Search');
  conforms(plan.model, 'PlannedModel');
  conforms(plan.workload, 'PlannedWorkload');
  const summary = stageplan.model('gemma-2-9b');
  conforms(summary, 'ModelSummary');
  summary.layers.forEach((l) => conforms(l, 'LayerSummary'));
  const catalog = stageplan.presets();
  conforms(catalog, 'Catalog');
  catalog.devices.forEach((d) => conforms(d, 'DevicePreset'));
  const dir = 'tests/cli/replan-node-lost';
  const replan = stageplan.replan(read(`${dir}/current.json`), read(`${dir}/scenario.json`));
  conforms(replan, 'Replan');
  replan.moves.forEach((m) => conforms(m, 'Move'));
  conforms(JSON.parse(read('tests/scenarios/home-70b-8.json')), 'Scenario');
  const users = stageplan.usersView(read('web/embed/scenarios/laptops-8b.json'));
  conforms(users, 'UsersView');
  conforms(users.chart, 'UsersChart');
  users.chart.ticks.forEach((t) => conforms(t, 'Tick'));
});

test('usersView() counts the users `stageplan plan --ttft 2s` finds, its lines in their box', () => {
  const scenario = JSON.parse(read('web/embed/scenarios/laptops-8b.json'));
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'stageplan-node-')), 'scenario.json');
  fs.writeFileSync(file, JSON.stringify(scenario));
  let cliAnswer;
  try {
    cliAnswer = runCli('plan', file, '--ttft', '2s', '--format', 'json');
  } catch (e) {
    if (e.status !== 1) throw e;
    cliAnswer = JSON.parse(e.stdout);
  }
  const view = stageplan.usersView(scenario);
  assert.equal(view.users, cliAnswer.capacity.users);
  for (const pair of `${view.chart.ttft} ${view.chart.tpot}`.split(' ')) {
    const [x, y] = pair.split(',').map(Number);
    assert.ok(x >= 0 && x <= view.width && y >= 0 && y <= view.height, pair);
  }
  // The wrong count of switches is refused, naming the option.
  assert.throws(() => stageplan.usersView(scenario, { enabled: [true] }), /`enabled` has 1 entries/);
});

test('importHeader() reads the reference writers\' files as the CLI does', { skip: !fixtures && 'STAGEPLAN_FIXTURES is not set' }, () => {
  const files = ['dense.gguf', 'tied.gguf', 'moe.gguf', 'single/model.safetensors'];
  for (const file of files) {
    const bytes = fs.readFileSync(path.join(fixtures, file));
    let length = 16;
    let result;
    let calls = 0;
    // Read as a browser would: a prefix, then as many bytes as the parser asks for.
    for (;;) {
      const options = { fileSize: bytes.length };
      // As the CLI does, read the config.json beside a safetensors file.
      const config = path.join(fixtures, path.dirname(file), 'config.json');
      if (file.endsWith('.safetensors') && fs.existsSync(config)) options.config = fs.readFileSync(config, 'utf8');
      result = stageplan.importHeader(bytes.subarray(0, length), path.basename(file), options);
      calls += 1;
      if (!('needMore' in result)) break;
      assert.ok(result.needMore > length && result.needMore <= bytes.length, `${file}: asks for ${result.needMore}`);
      length = result.needMore;
    }
    assert.ok(calls >= 2 && length < bytes.length, `${file}: ${calls} reads, ${length} of ${bytes.length} bytes`);
    const cliSummary = runCli('model', path.join(fixtures, file), '--format', 'json');
    delete cliSummary.read;
    conforms(result.model, 'ModelSummary');
    // The CLI names a safetensors file by its folder; the API by its file name.
    assert.deepStrictEqual({ ...result.model, name: cliSummary.name }, cliSummary, file);
  }
  assert.throws(() => stageplan.importHeader(new Uint8Array([1, 2, 3]), 'notes.txt'), /not a model file/);
  const truncated = fs.readFileSync(path.join(fixtures, 'dense.gguf')).subarray(0, 64);
  assert.throws(() => stageplan.plan({ model: { file: 'dense.gguf' }, nodes: [{ name: 'a', device: 'h100' }] }, { name: 'dense.gguf', bytes: truncated }), /needs the first \d+ bytes/);
  const whole = fs.readFileSync(path.join(fixtures, 'dense.gguf'));
  const plan = stageplan.plan({ model: { file: 'dense.gguf' }, nodes: [{ name: 'a', device: 'h100' }] }, { name: 'dense.gguf', bytes: whole });
  assert.ok(plan.feasible);
});

// Memory on every architecture (#35): the JS API (the widget's core) sizes a model of each
// family as the CLI does, weights and KV cache or state on every stage.
test('a model of each architecture family is planned as the CLI plans it', { skip: !fixtures && 'STAGEPLAN_FIXTURES is not set' }, () => {
  const dir = path.join(fixtures, 'arches');
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.gguf'));
  assert.ok(files.length >= 12, `${files.length} families`);
  for (const file of files) {
    const scenario = { model: { file }, workload: { context: 4096 }, nodes: [{ name: 'a', device: 'rtx-4090' }, { name: 'b', device: 'rtx-3060-12gb' }], policy: 'even' };
    const ours = stageplan.plan(scenario, { name: file, bytes: fs.readFileSync(path.join(dir, file)) });
    const theirs = runCliPlan({ ...scenario, model: { file: path.join(dir, file) } });
    const memory = (plan) => plan.stages.map((s) => [s.node, s.layers, s.memory]);
    assert.deepStrictEqual(memory(ours), memory(theirs), file);
  }
});

// One reader, one verdict (issue #32, items 19-20): each model file the CLI refuses in a
// `bad-model-*` case is refused by importHeader() on wasm32 (a 32-bit usize) word for word.
test('model files the CLI refuses throw Errors with the CLI message', () => {
  let compared = 0;
  for (const dir of fs.readdirSync(path.join(root, 'tests/cli')).filter((d) => d.startsWith('bad-model-'))) {
    const folder = path.join(root, 'tests/cli', dir);
    const args = fs.readFileSync(path.join(folder, 'cmd'), 'utf8').trim().split(/\s+/);
    if (args.length !== 2 || args[0] !== 'model' || !args[1].endsWith('.gguf')) continue;
    const bytes = fs.readFileSync(path.join(folder, args[1]));
    const expected = fs.readFileSync(path.join(folder, 'expected'), 'utf8');
    const message = expected.split('--- stderr\n')[1].replace(/^error: /, '').trimEnd();
    assert.throws(() => stageplan.importHeader(bytes, args[1], { fileSize: bytes.length }), (error) => {
      assert.equal(error.message, message, dir);
      return true;
    });
    compared += 1;
  }
  assert.ok(compared >= 3, `compared ${compared} cases`);
});

// Hostile input (issue #14): every bad value is an Error naming its field, never a crash.
test('non-finite numbers are refused naming the field, not read as "not given"', () => {
  for (const bad of [Infinity, -Infinity, NaN]) {
    const scenario = { model: { preset: 'llama-3.1-8b' }, nodes: [{ name: 'a', device: 'rtx-4090', memory: bad }] };
    assert.throws(() => stageplan.plan(scenario), (e) => e instanceof Error && /`nodes\[0\]\.memory` is not a finite number/.test(e.message));
  }
});

test('a cluster past the limit is an Error, not a trapped wasm abort', () => {
  const scenario = { model: { preset: 'llama-3.1-8b' }, nodes: [{ name: 'a', device: 'rtx-4090', count: 10000 }] };
  assert.throws(() => stageplan.plan(scenario), (e) => e instanceof Error && !(e instanceof WebAssembly.RuntimeError) && /`nodes\[0\]\.count`/.test(e.message));
  const long = { model: { preset: 'llama-3.1-8b' }, nodes: [{ name: 'n'.repeat(70000), device: 'rtx-4090' }] };
  assert.throws(() => stageplan.plan(long), /`nodes\[0\]\.name` is 70000 characters long/);
});

test('figures above 2^53 come back as numbers', () => {
  const scenario = { model: { preset: 'llama-3.2-1b' }, workload: { workspace: 1e16 }, nodes: [{ name: 'a', memory: '1000 PB', bandwidth: '1 TB/s', compute: '1 TFLOPS' }] };
  const plan = stageplan.plan(scenario);
  assert.equal(typeof plan.stages[0].memory.workspace, 'number');
  assert.equal(plan.stages[0].memory.workspace, 1e16);
});

test("the package resolves by its name: require('stageplan') and import('stageplan')", () => {
  const dir = fs.mkdtempSync(path.join(fs.realpathSync(process.env.TMPDIR ?? '/tmp'), 'stageplan-pkg-'));
  fs.mkdirSync(path.join(dir, 'node_modules'));
  fs.symlinkSync(embed, path.join(dir, 'node_modules/stageplan'), 'dir');
  const run = (args) => execFileSync(process.execPath, args, { cwd: dir, encoding: 'utf8' }).trim();
  assert.equal(run(['-e', "console.log(typeof require('stageplan').plan)"]), 'function');
  assert.equal(run(['--input-type=module', '-e', "import('stageplan').then((m) => console.log(typeof (m.plan ?? m.default.plan)))"]), 'function');
  assert.equal(run(['-e', "console.log(typeof require('stageplan/more').importHeader)"]), 'function');
  fs.rmSync(dir, { recursive: true, force: true });
});

test('the package packs clean: every export and the types are in it, nothing else of the build is', () => {
  // `npm pack --dry-run` lists what a publish would upload, without the network.
  const [packed] = JSON.parse(execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: embed, encoding: 'utf8' }));
  const files = new Set(packed.files.map((f) => f.path));
  const manifest = JSON.parse(fs.readFileSync(path.join(embed, 'package.json'), 'utf8'));
  // Export targets, conditions nested to any depth (`node: {types, default}`).
  const leaves = (e) => (typeof e === 'string' ? [e] : Object.values(e).flatMap(leaves));
  const targets = [manifest.main, manifest.types, ...leaves(manifest.exports)];
  for (const target of targets) assert.ok(files.has(target.replace(/^\.\//, '')), `${target} is exported but not packed`);
  for (const needed of ['stageplan_bg.wasm', 'stageplan_rest.wasm', 'node/stageplan_bg.wasm', 'more/stageplan_bg.wasm', 'README.md', 'package.json']) {
    assert.ok(files.has(needed), `${needed} is not packed`);
  }
  assert.ok(![...files].some((f) => f === 'index.html' || f === 'api.html' || f.startsWith('scenarios/')), 'the example pages are not part of the package');
  assert.equal(packed.name, 'stageplan');
});

/** Every scenario file of the tests and the example pages: the example page's inline one too. */
function scenarioFiles() {
  const found = [];
  const walk = (dir) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const file = path.join(dir, entry.name);
      if (entry.isDirectory() && !['node_modules', 'artifacts'].includes(entry.name)) walk(file);
      else if (entry.name.endsWith('.json') && fs.statSync(file).size < 65_536) found.push(file);
    }
  };
  walk(path.join(root, 'tests'));
  walk(path.join(root, 'web/embed/scenarios'));
  return found;
}

test("the browser module's two parts plan every fixture as the whole module does, the rest loaded once, on the first call that needs it", async () => {
  // The widget's module (`crates/xtask/src/split.rs`): its first part alone plans the example
  // page's widgets; a call that needs more traps, `firstOrRest` loads the rest and runs it again.
  const glue = await import(pathToFileURL(path.join(embed, 'stageplan.js')));
  const instantiate = WebAssembly.instantiate;
  let rests = 0;
  WebAssembly.instantiate = (source, imports) => {
    if (imports?.first) rests += 1;
    return instantiate(source, imports);
  };
  try {
    await glue.initFirst({
      module_or_path: fs.readFileSync(path.join(embed, 'stageplan_bg.wasm')),
      rest: fs.readFileSync(path.join(embed, 'stageplan_rest.wasm')),
    });
    const page = fs.readFileSync(path.join(embed, 'index.html'), 'utf8');
    const inline = JSON.parse(page.match(/<script type="application\/json">([\s\S]*?)<\/script>/)[1]);
    for (const scenario of [inline, JSON.parse(read('web/embed/scenarios/laptops-8b.json'))]) {
      const view = await glue.firstOrRest(() => glue.planView(scenario, { enabled: scenario.nodes.map(() => true) }));
      assert.deepEqual(view, stageplan.planView(scenario, { enabled: scenario.nodes.map(() => true) }));
    }
    assert.equal(rests, 0, "the example page's first plans need only the first part");
    const outcome = async (call) => {
      try {
        return { view: await call() };
      } catch (e) {
        return { error: e.message, path: e.path };
      }
    };
    let compared = 0;
    for (const file of scenarioFiles()) {
      const text = fs.readFileSync(file, 'utf8');
      const split = await outcome(() => glue.firstOrRest(() => glue.planView(text)));
      // An inline config.json is read by `stageplan/more`, which the Node build includes.
      if (split.error?.includes('stageplan/more')) continue;
      assert.deepEqual(split, await outcome(async () => stageplan.planView(text)), path.relative(root, file));
      compared += 1;
    }
    assert.ok(compared > 150, `${compared} fixtures compared`);
    assert.equal(rests, 1, 'the rest loads once');
  } finally {
    WebAssembly.instantiate = instantiate;
  }
});
