// End-to-end tests of the web planner in headless Chromium (playwright-core driving
// Debian's /usr/bin/chromium, WebGPU on through SwiftShader).
//
//   node tests/e2e/planner.mjs --dist dist --cli path/to/stageplan --fixtures DIR
//
// DIR holds files written by tests/fixtures/write_models.py (the reference writers).
// Screenshots and measurements go to tests/e2e/artifacts/ (metrics.json feeds
// BENCHMARKS.md). Exits non-zero on the first failed check.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';

import { args, artifacts, check, failures, launch, root, serve } from './harness.mjs';

const dist = path.resolve(args.dist ?? 'dist');
const cli = path.resolve(args.cli ?? 'target/debug/stageplan');
const fixtures = path.resolve(args.fixtures ?? 'target/tmp/import-fixtures');

// Every request is recorded, so the test can prove the page fetches nothing but its own files.
const { origin, served, close: stopServer } = await serve(dist);

// `--viewport 360x740` runs every check at phone size (the suite runs at both sizes).
const [viewWidth, viewHeight] = (args.viewport ?? '1280x1000').split('x').map(Number);
const viewport = { width: viewWidth, height: viewHeight };
const suffix = viewWidth < 800 ? '-phone' : '';
const browser = await launch({ profile: 'stageplan-e2e-', viewport, webgpu: true });

const metrics = {};
const requests = [];
const consoleErrors = [];

async function open(hash = '') {
  const page = await browser.newPage();
  // Each check starts from the example: the session a previous check left in this browser
  // is forgotten, once per tab (a reload in the tab keeps it).
  await page.addInitScript(() => {
    if (!sessionStorage.getItem('e2e-fresh')) {
      localStorage.clear();
      sessionStorage.setItem('e2e-fresh', '1');
    }
  });
  page.on('request', (r) => requests.push(r.url()));
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(`${m.text()} (${page.url()})`); });
  page.on('pageerror', (e) => consoleErrors.push(`page error: ${e.message}`));
  // When the first plan was drawn, to compare with when the module's rest was asked for.
  await page.addInitScript(() => {
    new MutationObserver((_, observer) => {
      if (document.getElementById('plan-headline')?.textContent) {
        window.firstPlanAt = performance.now();
        observer.disconnect();
      }
    }).observe(document, { childList: true, subtree: true, characterData: true });
  });
  await page.goto(`${origin}/${hash}`);
  await page.waitForSelector('#plan-headline, #error', { timeout: 60_000 });
  // The page answers input once its module's rest is loaded (`crates/xtask/split/page.js`).
  await page.waitForFunction(() => !document.body.inert, null, { timeout: 60_000 });
  return page;
}

/** The module's rest (`crates/xtask/src/split.rs`), loaded after the first plan. */
const REST = '/stageplan-web_rest.wasm';

/** When the page drew its first plan and asked for the module's rest (ms since it opened),
 *  and whether a start reached the rest too early (`crates/xtask/split/page.js`). */
const startOrder = (page) => page.evaluate(() => ({
  plan: window.firstPlanAt,
  rest: performance.getEntriesByName('stageplan-rest')[0]?.startTime,
  whole: sessionStorage.getItem('stageplan.whole'),
}));

const shot = (page, name) => page.screenshot({ path: path.join(artifacts, `${name}${suffix}.png`), fullPage: true });
const text = (page, selector) => page.textContent(selector);
const sig3 = (x) => Number(x.toPrecision(3));

function cliPlan(scenarioJson) {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'stageplan-cli-')), 'scenario.json');
  fs.writeFileSync(file, scenarioJson);
  try {
    return JSON.parse(execFileSync(cli, ['plan', file, '--format', 'json'], { encoding: 'utf8' }));
  } catch (e) {
    // Exit status 1 (nothing fits) still prints the plan.
    if (e.status === 1) return JSON.parse(e.stdout);
    throw e;
  }
}

/** What `stageplan plan SCENARIO ARGS… --format json` answers (many users: `--ttft 2s`). */
function cliAnswer(scenarioJson, args) {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'stageplan-cli-')), 'scenario.json');
  fs.writeFileSync(file, scenarioJson);
  return JSON.parse(execFileSync(cli, ['plan', file, ...args, '--format', 'json'], { encoding: 'utf8' }));
}

function samePlan(page, cliPlanJson) {
  assert.deepEqual(page.stages.map((s) => [s.node, s.layers]), cliPlanJson.stages.map((s) => [s.node, s.layers]));
  assert.equal(sig3(page.tokens_per_s), sig3(cliPlanJson.tokens_per_s));
}

/** Raw and gzip bytes of the files the server sent since `served[from]`, `except` aside. */
function fetched(from, except = []) {
  const files = [...new Set(served.slice(from).filter((r) => r.status === 200).map((r) => (r.path === '/' ? '/index.html' : r.path)))]
    .filter((f) => !except.includes(f));
  const bytes = files.map((f) => fs.readFileSync(path.join(dist, f)));
  return {
    files,
    raw: bytes.reduce((n, b) => n + b.length, 0),
    gzip: bytes.reduce((n, b) => n + zlib.gzipSync(b, { level: 9 }).length, 0),
  };
}

await check('the page loads, plans at once, and sets a Content-Security-Policy', async () => {
  const started = Date.now();
  const from = served.length;
  const page = await open();
  metrics.first_plan_ms = await page.evaluate(() => performance.now());
  metrics.first_plan_wall_ms = Date.now() - started;
  // The verdict first (#18 point 2): fits, one user's speed, the first token; then the
  // throughput with the concurrency it assumes — the CLI's words and figures.
  const verdict = await text(page, '#plan-headline');
  assert.match(verdict, /^fits · [\d.]+ tok\/s for one user .*· first token in .+ for a 512-token prompt$/, verdict);
  assert.match(await text(page, '#plan-details'), /^throughput [\d.]+ tok\/s for 1 sequence/);
  const cliVerdict = cliPlan(await text(page, '#scenario-json'));
  assert.equal(Number(verdict.match(/([\d.]+) tok\/s for one user/)[1]), sig3(cliVerdict.stream_tokens_per_s));
  // Everything a reader downloads to plan: 325 kB gzip. Issue #34 set 320 kB for a
  // machine's every memory (300 kB before; 301.6 kB with #33's measured nodes and #34's
  // device presets; 316.5 kB after #34); #35's memory per architecture and its 16 model
  // presets of 2026 took 323.6 kB, and picking those models on the page is worth 3.6 kB
  // more (BENCHMARKS.md). #35's riders (a draft model and a vision projector, placed on the
  // one road every plan takes, kept through an imported scenario, a draft chosen on the
  // page): 334.8 kB measured, 340 kB, chosen over a core without them on the page (closing
  // note of 2026-12-04, second). Gemma 3n's shared caches and a quantized cache's
  // rotations in the core (1.8 kB, as the widget measures it) and the projector's two
  // fields: 339.4 kB measured, 345 kB. #45's decode at a stated depth (a second placed
  // cost model on every plan's road): 345.8 kB measured, 350 kB — a ratchet at the measured
  // size while #45 item 7 (300 kB by loading on demand what the first plan does not use) is
  // open; a share link read by hand, not by a derived Deserialize, took 5.1 kB off: 345 kB;
  // the worker's answers read by hand (a dropped model with every tensor, a probe, an
  // export) about 8 kB more, with the V cache's select: 340 kB. #46's machines with several
  // GPUs on the one road (their fields parsed and checked): 341.4 kB measured, 340.2 kB
  // trimmed (`.ci/run` of 76fadcc, 2026-12-06): 341 kB, a ratchet while #45 item 7 is open.
  // #46's tensor-parallel groups (formed, priced and compared with the layer split on every
  // plan's road): +4.9 kB of wasm measured by hand (334,418 bytes gzip -9 after wasm-opt,
  // 329,518 before): 347 kB, the same ratchet; 345,461 in the `.ci/run` of 03735cd. vLLM's
  // pipelines of groups (TP × PP) on the same road: +2.0 kB by hand (336,427): 349 kB;
  // 347,541 in the `.ci/run` of b2e9658. A machine row's GPUs field and GPU-link select
  // (the view code of an input and a select of 15 links, the state's reading of `gpus`):
  // +4.2 kB by hand (340,646): 353 kB. A machine's one RAM serving each of its GPUs (#46
  // item 2: the relaxation, the divisions, a memo per alike GPUs, on every plan's road):
  // 341,262 → 344,433 bytes by hand (+3.2 kB; 352,339 in the `.ci/run` of 85a290d): 357 kB,
  // the same ratchet while #45 item 7 is open. A probed CPU's prompt rate (`probe.engine
  // .prefill`, read and priced on the one road: its prompts were planned 4–8× too slow)
  // and a vLLM plan's own error band: 345,407 → 345,867 bytes by hand, yet 356,638 in the
  // `.ci/run` of 20d6117 (356,369 in that of ffb5cea): within 357 kB, kept. #45 item 7,
  // loading on demand what the first plan does not use: presets planned from their shapes
  // (constant data, not config.json text read at each plan) and a pasted config read by the
  // worker: 352,599 measured: 353.1 kB. The scenario read by hand from a JSON tree, not by
  // serde's derived readers: 345,095 measured: 345.5 kB. A machine's name used twice and
  // links given twice refused, fixes that keep hand-given stages, groups judged per
  // degree (the third wave's defects on the one road): 334,371 → 334,918 by hand (+0.5
  // kB): 346.1 kB, the same ratchet while #45 item 7 is open. Quantities' numbers read by
  // serde_json's reader, not core's float parser and its 10 KB table of powers of five, and
  // wasm-opt told the lowest kilobyte is unused: 337,240 → 322,545 bytes of wasm (zlib -9,
  // as counted here, by hand with Trunk's settings), with the reserve note back: 331.8 kB;
  // 331,264 in the `.ci/run` of 2151c5b. #47's serving question in the scenario (read and
  // checked on the one road: users, targets, percentile): 323,806 bytes of wasm by hand
  // (+1.3 kB): 332.7 kB, the same ratchet while #45 item 7 is open. vLLM's tensor parallel
  // dividing each routed and shared expert's FFN width (a degree it refuses was planned) and
  // a stage's nodes read in one place: 323,946 → 324,098 bytes of wasm by hand (+152 B):
  // 332.85 kB, the same ratchet.
  // #45 item 7 done: the module split in two by a profile of this first plan at desktop and
  // phone size (`crates/xtask/src/split.rs`); the rest is asked for once the plan is drawn,
  // and the page answers input when it is there: 300 kB, the bound.
  // The worker (WebGPU, exports, model-file and config parsers) is fetched only when asked for.
  metrics.load_to_plan = fetched(from, [REST]);
  assert.ok(metrics.load_to_plan.gzip <= 300_000, `the page loads ${metrics.load_to_plan.gzip} bytes gzip to plan`);
  const order = await startOrder(page);
  assert.ok(order.plan < order.rest, `the first plan was drawn before the rest was asked for: ${JSON.stringify(order)}`);
  assert.equal(order.whole, null, 'no call reached the rest before it was loaded');
  await page.waitForLoadState('networkidle');
  const settled = fetched(from).files;
  assert.ok(!settled.some((f) => f.includes('worker')), `fetched without being asked: ${settled}`);
  const csp = await page.getAttribute('meta[http-equiv="Content-Security-Policy"]', 'content');
  assert.ok(csp && csp.includes("default-src 'self'"), `CSP: ${csp}`);
  await shot(page, '01-first-plan');
  await page.setViewportSize({ width: 390, height: 844 });
  await shot(page, '02-phone-width');
  await page.close();
});

await check('a cluster built by typing and clicking plans exactly as the CLI does', async () => {
  const page = await open();
  // Start from nothing: remove every machine.
  while ((await page.locator('.node-remove').count()) > 0) await page.locator('.node-remove').first().click();
  await page.waitForSelector('#error');
  await page.selectOption('#preset', 'llama-3.1-70b');
  await page.selectOption('#weights', 'q4_k_m');
  await page.fill('#context', '8192');
  for (const device of ['rtx-4090', 'rtx-3090', 'cpu-ddr5-dual-channel']) {
    await page.selectOption('#add-device', device);
    await page.click('#add-node');
  }
  await page.selectOption('#add-device', '');
  await page.click('#add-node');
  const custom = page.locator('li.node').last();
  await custom.locator('.node-name').fill('mac');
  await custom.locator('.node-memory').fill('64 GiB');
  await custom.locator('.node-bandwidth').fill('400 GB/s');
  await custom.locator('.node-compute').fill('27 TFLOPS');
  await custom.locator('.node-reserve').fill('16 GiB');
  await page.check('#objective-latency');
  await page.waitForFunction(() => document.querySelectorAll('.stage-band').length > 0);
  const scenario = await text(page, '#scenario-json');
  const shown = JSON.parse(await text(page, '#plan-json'));
  samePlan(shown, cliPlan(scenario));
  assert.equal(shown.objective, 'latency');
  await shot(page, '03-typed-cluster');

  // What-if: switch the 4090 off; the plan changes and no stage uses it.
  const before = await text(page, '#plan-headline');
  await page.locator('li.node').first().locator('.node-enabled').uncheck();
  await page.waitForFunction((b) => document.querySelector('#plan-headline').textContent !== b, before);
  const without = JSON.parse(await text(page, '#plan-json'));
  const off = await page.locator('li.node.off .node-name').first().inputValue();
  assert.ok(!without.stages.some((s) => s.node === off), `${off} is switched off but still used`);
  await shot(page, '04-node-switched-off');
  await page.close();
});

await check('a machine\'s system RAM beside its GPU: experts in RAM, drawn and planned exactly as the CLI does (#34)', async () => {
  const page = await open();
  while ((await page.locator('.node-remove').count()) > 1) await page.locator('.node-remove').last().click();
  await page.selectOption('#preset', 'qwen3-30b-a3b');
  await page.selectOption('#weights', 'q4_k_m');
  await page.fill('#context', '8192');
  const desk = page.locator('li.node').first();
  await desk.locator('.node-device').selectOption('rtx-5070');
  await desk.locator('.node-ram').selectOption('ddr5-6000-2ch');
  // A size left out is marked at its field.
  await page.waitForSelector('.node-ram-memory[aria-invalid="true"]');
  await desk.locator('.node-ram-memory').fill('64 GiB');
  await page.waitForFunction(() => document.querySelector('.bar.ram') !== null);
  const scenario = await text(page, '#scenario-json');
  const shown = JSON.parse(await text(page, '#plan-json'));
  samePlan(shown, cliPlan(scenario));
  const kept = shown.stages[0].offload;
  assert.ok(kept.host_ffn > 0, `experts in RAM: ${JSON.stringify(kept)}`);
  assert.ok((await text(page, '.ram-kept')).includes(`experts of layers ${kept.ffn_layers[0]}–${kept.ffn_layers[1] - 1}`));
  await shot(page, '03b-system-ram');
  await page.close();
});

await check('a machine with several GPUs, typed as people say it ("2× RTX 3090, PCIe 4.0 x8"): planned as the CLI does, its errors at their fields (#46)', async () => {
  const page = await open();
  while ((await page.locator('.node-remove').count()) > 1) await page.locator('.node-remove').last().click();
  await page.selectOption('#preset', 'llama-3.1-70b');
  await page.selectOption('#weights', 'q4_k_m');
  await page.fill('#context', '8192');
  const box = page.locator('li.node').first();
  await box.locator('.node-device').selectOption('rtx-3090');
  await box.locator('.node-gpus').fill('2');
  await box.locator('.node-gpu-link').selectOption('pcie4-x8');
  await page.waitForFunction(() => JSON.parse(document.querySelector('#scenario-json').textContent).nodes[0].gpu_link === 'pcie4-x8');
  const scenario = await text(page, '#scenario-json');
  assert.deepEqual(JSON.parse(scenario).nodes[0].gpus, [{ device: 'rtx-3090', count: 2 }]);
  await page.waitForFunction(() => JSON.parse(document.querySelector('#plan-json').textContent).stages.length > 0);
  const shown = JSON.parse(await text(page, '#plan-json'));
  samePlan(shown, cliPlan(scenario));
  // Both GPUs hold the model as one tensor-parallel group, named as the CLI's table names it.
  assert.deepEqual(shown.stages[0].tensor_parallel, [0, 1]);
  assert.ok((await text(page, '.stage-row')).includes('/gpu0+gpu1'), await text(page, '.stage-row'));
  // Mixed GPUs as people say them: each a preset in the scenario, planned as the CLI does.
  await box.locator('.node-gpus').fill('RTX 5090 + 2× RTX 4090');
  await page.waitForFunction(() => JSON.parse(document.querySelector('#scenario-json').textContent).nodes[0].gpus.length === 2);
  const mixed = await text(page, '#scenario-json');
  assert.deepEqual(JSON.parse(mixed).nodes[0].gpus, [{ device: 'rtx-5090' }, { device: 'rtx-4090', count: 2 }]);
  await page.waitForFunction((s) => JSON.parse(document.querySelector('#plan-json').textContent).stages.length > 0
    && document.querySelector('#scenario-json').textContent === s, mixed);
  samePlan(JSON.parse(await text(page, '#plan-json')), cliPlan(mixed));
  assert.ok(await box.locator('.node-device').isDisabled(), 'the row\'s device stands for none of mixed GPUs');
  await shot(page, '03d-mixed-gpus');
  // More GPUs than a machine takes is marked at the field.
  await box.locator('.node-gpus').fill('17');
  await page.waitForSelector('.node-gpus[aria-invalid="true"]');
  await shot(page, '03c-several-gpus');
  await page.close();
});

await check('a draft model rides along: placed, drawn and counted as the CLI does (#35)', async () => {
  const page = await open();
  const before = await text(page, '#plan-json');
  await page.selectOption('#draft', 'llama-3.2-1b');
  await page.waitForFunction((b) => document.querySelector('#plan-json').textContent !== b, before);
  const scenario = JSON.parse(await text(page, '#scenario-json'));
  assert.deepEqual(scenario.model.draft, { preset: 'llama-3.2-1b', weights: 'q8_0' });
  const shown = JSON.parse(await text(page, '#plan-json'));
  const cli = cliPlan(JSON.stringify(scenario));
  samePlan(shown, cli);
  assert.deepEqual(shown.riders, cli.riders);
  // Its bytes are in the stages' memory: its device's, and the server's host buffers.
  const riding = shown.stages.reduce((n, s) => n + (s.memory.riders ?? 0), 0);
  assert.ok(riding >= shown.riders[0].memory.total && shown.stages.some((s) => s.node === shown.riders[0].node && s.memory.riders > 0), JSON.stringify(shown.stages));
  // Its bytes are a segment of its machine's bar.
  await page.waitForSelector('.segment.draft-mmproj');
  await page.selectOption('#draft-weights', 'q4_0');
  await page.waitForFunction(() => JSON.parse(document.querySelector('#scenario-json').textContent).model.draft.weights === 'q4_0');
  await page.selectOption('#draft', '');
  await page.waitForFunction(() => !('draft' in JSON.parse(document.querySelector('#scenario-json').textContent).model));
  await page.close();
});

await check('a pasted config.json is read by the worker, planned as the CLI plans it, its errors at the field (#45)', async () => {
  const page = await open();
  const fetchedBefore = requests.length;
  await page.click('label:has(#source-config)');
  await page.fill('#config', fs.readFileSync('crates/stageplan/presets/models/llama-3.1-8b.json', 'utf8'));
  // The config's reader is in the worker, fetched now (the first plan does without it).
  await page.waitForFunction(() => document.querySelector('#plan-json')?.textContent.includes('"name": "llama"'), null, { timeout: 60_000 });
  assert.ok(requests.slice(fetchedBefore).some((url) => url.includes('stageplan-worker')), 'the worker reads the config');
  const scenario = JSON.parse(await text(page, '#scenario-json'));
  assert.equal(scenario.model.config.hidden_size, 4096);
  samePlan(JSON.parse(await text(page, '#plan-json')), cliPlan(JSON.stringify(scenario)));
  // A wrong config is marked at its field with the CLI's words.
  await page.fill('#config', '{"hidden_size": 0, "num_hidden_layers": 2, "num_attention_heads": 2}');
  await page.waitForFunction(() => document.querySelector('#config-error')?.textContent.includes('hidden_size'), null, { timeout: 30_000 });
  assert.match(await text(page, "#config-error"), /model\.config\.hidden_size is 0; it must be at least 1/);
  await page.close();
});

await check('a model file and a draft model file each plan from their own file, or the missing one is marked at its field (#44)', async () => {
  const page = await open();
  const imported = { model: { file: 'dense.gguf', draft: { file: 'tied.gguf' } }, nodes: [{ name: 'a', device: 'rtx-4090' }, { name: 'b', device: 'rtx-3090' }] };
  await page.fill('#import-json', JSON.stringify(imported));
  await page.click('#import');
  // Nothing dropped yet: the model's file is asked for at its field.
  await page.waitForFunction(() => document.querySelector('#model-file-error')?.textContent.includes('dense.gguf'));
  // The model's file dropped: the draft's, not the model's again, is asked for at its field.
  await page.setInputFiles('#model-file', path.join(fixtures, 'dense.gguf'));
  await page.waitForFunction(() => document.querySelector('#draft-error')?.textContent.includes('tied.gguf'));
  assert.equal(await page.locator('#model-file-error').count(), 0, 'the model is read');
  // The draft's file dropped: each from its own file, as the CLI plans them.
  await page.setInputFiles('#model-file', path.join(fixtures, 'tied.gguf'));
  await page.waitForFunction(() => !document.querySelector('#draft-error') && JSON.parse(document.querySelector('#plan-json').textContent).riders?.length === 1);
  const scenario = JSON.parse(await text(page, '#scenario-json'));
  assert.equal(scenario.model.file, 'dense.gguf', 'the draft does not replace the model');
  assert.equal(scenario.model.draft.file, 'tied.gguf');
  const onDisk = { ...scenario, model: { ...scenario.model, file: path.join(fixtures, 'dense.gguf'), draft: { ...scenario.model.draft, file: path.join(fixtures, 'tied.gguf') } } };
  const shown = JSON.parse(await text(page, '#plan-json'));
  const cli = cliPlan(JSON.stringify(onDisk));
  samePlan(shown, cli);
  const riders = (plan) => plan.riders.map(({ file, ...rider }) => rider);
  assert.deepEqual(riders(shown), riders(cli));
  assert.equal(shown.riders[0].name, 'tied', 'the draft is planned from its own file');
  assert.equal(shown.model.name, 'dense');
  await page.close();
});

await check('a vision projector typed beside the model: placed and counted as the CLI does, its fields marked (#35)', async () => {
  const page = await open();
  await page.fill('#mmproj-weights', '600 MiB');
  // Its compute buffer left out is marked at its own field.
  await page.waitForSelector('#mmproj-compute[aria-invalid="true"]');
  const before = await text(page, '#plan-json');
  await page.fill('#mmproj-compute', '40 MiB');
  await page.waitForFunction((b) => document.querySelector('#plan-json').textContent !== b, before);
  const scenario = JSON.parse(await text(page, '#scenario-json'));
  assert.deepEqual(scenario.model.mmproj, { weights: '600 MiB', compute: '40 MiB' });
  const shown = JSON.parse(await text(page, '#plan-json'));
  const cli = cliPlan(JSON.stringify(scenario));
  samePlan(shown, cli);
  assert.deepEqual(shown.riders, cli.riders);
  await page.waitForSelector('.segment.draft-mmproj');
  await page.fill('#mmproj-weights', '');
  await page.fill('#mmproj-compute', '');
  await page.waitForFunction(() => !('mmproj' in JSON.parse(document.querySelector('#scenario-json').textContent).model));
  await page.close();
});

await check('a preset replaces figures typed for another device; a bare number in Memory is GiB; laptop presets (#18: 1, 4, 5)', async () => {
  const page = await open();
  const mac = page.locator('li.node[data-node="mac"]');
  const node = async () => JSON.parse(await text(page, '#scenario-json')).nodes.find((n) => n.name === 'mac');
  const before = await text(page, '#plan-json');
  // A stage row shows the figures its machine was planned with, a preset's included.
  assert.equal(await text(page, 'tr.stage-row[data-node="desk"] .figures'), '1.01 TB/s · 165 TFLOPS');
  // The default "mac" has typed figures (64 GiB, 400 GB/s, 27 TFLOPS); an M2 Max preset
  // must plan with the preset's 96 GB, not keep them.
  await mac.locator('.node-device').selectOption('m2-max-96gb');
  await page.waitForFunction((b) => document.querySelector('#plan-json').textContent !== b, before);
  const chosen = await node();
  assert.equal(chosen.device, 'm2-max-96gb');
  assert.ok(!('memory' in chosen) && !('bandwidth' in chosen) && !('compute' in chosen), JSON.stringify(chosen));
  assert.equal(await mac.locator('.node-memory').inputValue(), '');
  samePlan(JSON.parse(await text(page, '#plan-json')), cliPlan(await text(page, '#scenario-json')));
  // Back to custom figures: the preset's, written out to edit.
  await mac.locator('.node-device').selectOption('');
  assert.match(await mac.locator('.node-memory').inputValue(), /GiB$/);
  // "64" in Memory is 64 GiB, not 64 bytes: with the 4090 switched off the plan needs the
  // mac, and gets it.
  await mac.locator('.node-memory').fill('64');
  await page.waitForFunction(() => JSON.parse(document.querySelector('#scenario-json').textContent).nodes.find((n) => n.name === 'mac').memory === '64 GiB');
  samePlan(JSON.parse(await text(page, '#plan-json')), cliPlan(await text(page, '#scenario-json')));
  const withDesk = await text(page, '#plan-json');
  await page.locator('li.node[data-node="desk"] .node-enabled').uncheck();
  await page.waitForFunction((b) => document.querySelector('#plan-json').textContent !== b, withDesk);
  const planned = JSON.parse(await text(page, '#plan-json'));
  assert.ok(planned.feasible && planned.stages.some((s) => s.node === 'mac'), `mac dropped out: ${JSON.stringify(planned.stages.map((s) => s.node))}`);
  // Laptops and small machines are presets (#18: 4), and plan as the CLI does (every
  // machine switched on: the scenario JSON does not carry the what-if switches).
  await page.locator('li.node[data-node="desk"] .node-enabled').check();
  const options = await page.locator('#add-device option').evaluateAll((os) => os.map((o) => o.value));
  for (const device of ['laptop-ddr5-16gb', 'core-ultra-7-155h-32gb', 'mac-mini-m4-16gb', 'jetson-agx-orin-64gb', 'raspberry-pi-5-8gb']) {
    assert.ok(options.includes(device), `${device} is not offered`);
  }
  const withoutLaptop = await text(page, '#plan-json');
  await page.selectOption('#add-device', 'laptop-ddr5-16gb');
  await page.click('#add-node');
  await page.waitForFunction((b) => document.querySelector('#plan-json').textContent !== b, withoutLaptop);
  samePlan(JSON.parse(await text(page, '#plan-json')), cliPlan(await text(page, '#scenario-json')));
  await page.close();
});

await check('a wrong input is marked at its field, by machine name, over the last plan dimmed (#18: 5)', async () => {
  const page = await open();
  // "32k" is a context people write: 32,768 tokens.
  await page.fill('#context', '32k');
  await page.waitForFunction(() => JSON.parse(document.querySelector('#scenario-json').textContent || '{}').workload?.context === 32768);
  const good = await text(page, '#plan-headline');
  // A context the page cannot read: the field says so, the plan stays, dimmed.
  await page.fill('#context', 'lots');
  await page.waitForSelector('#context[aria-invalid="true"]');
  // (backticked names are set as code, so the text has no backticks)
  assert.match(await text(page, '#context-error'), /^lots is not a number of tokens; write a whole number, e\.g\. 8192 or 32k$/);
  assert.equal(await page.getAttribute('#context', 'aria-describedby'), 'context-error');
  assert.equal(await text(page, '.plan-body.stale #plan-headline'), good);
  assert.match(await text(page, '#error'), /the plan below is the last one that planned/);
  await page.fill('#context', '32k');
  await page.waitForSelector('.plan-body:not(.stale)');
  assert.equal(await page.locator('[aria-invalid="true"]').count(), 0);
  // A machine's figure: the message names the machine, not `nodes[2]`, beside its field.
  const mac = page.locator('li.node[data-node="mac"]');
  await mac.locator('.node-memory').fill('-3 GiB');
  await mac.locator('.node-memory[aria-invalid="true"]').waitFor();
  const beside = await mac.locator('.field-error').textContent();
  assert.match(beside, /^mac memory[: ]/, beside);
  assert.equal(await mac.locator('.field-error code').first().textContent(), 'mac');
  assert.ok(!(await text(page, '#error')).includes('nodes['), await text(page, '#error'));
  await shot(page, '05b-field-error');
  // A check after parsing (the third machine's bandwidth is 0): placed by the error's path
  // data (`nodes[2].bandwidth`), even with a machine name that reads like another path.
  await mac.locator('.node-memory').fill('64');
  await mac.locator('.node-name').fill('nodes[0].memory');
  const renamed = page.locator('li.node[data-node="nodes[0].memory"]');
  await renamed.locator('.node-bandwidth').fill('0');
  await renamed.locator('.node-bandwidth[aria-invalid="true"]').waitFor();
  assert.match(await renamed.locator('.field-error').textContent(), /^nodes\[0\]\.memory bandwidth is 0/);
  assert.equal(await page.locator('li.node[data-node="desk"] [aria-invalid="true"]').count(), 0);
  await page.close();
});

await check('when nothing fits, memory bars show each machine\'s overflow and each fix is a button that applies it (#18: 6)', async () => {
  const page = await open();
  await page.selectOption('#weights', 'f16');
  await page.waitForFunction(() => document.querySelector('#plan-headline').textContent.startsWith('does not fit'));
  // The memory bars stay, for the split in proportion to memory, with each machine's overflow.
  assert.ok((await page.locator('#overflow .bar.over').count()) >= 1, 'a machine over its memory');
  assert.match(await page.locator('#overflow td small').first().textContent(), /(free|over)$/);
  const fixes = await page.locator('#notes .apply-fix').allTextContents();
  assert.ok(fixes.some((f) => /^Use \S+ weights$/.test(f)), `fixes: ${fixes}`);
  await page.locator('#notes .apply-fix', { hasText: 'weights' }).first().click();
  await page.waitForFunction(() => document.querySelector('#plan-headline').textContent.startsWith('fits'));
  const weights = JSON.parse(await text(page, '#scenario-json')).model.weights;
  assert.notEqual(weights, 'f16');
  assert.equal(await page.inputValue('#weights'), weights, 'the field shows the applied fix');
  await page.close();
});

await check('notes set names as code, and each what-if switch names its machine (#18: 10)', async () => {
  const page = await open();
  // The first plan's notes name `desk` (the core writes names between backticks).
  const notes = await text(page, '#notes');
  assert.ok(!notes.includes('`'), `literal backticks in the notes: ${notes}`);
  assert.ok((await page.locator('#notes code', { hasText: 'desk' }).count()) > 0, notes);
  const switches = await page.locator('.node-enabled + .visually-hidden').allTextContents();
  assert.deepEqual(switches, ['use desk', 'use gamer', 'use mac']);
  const removes = await page.locator('.node-remove').evaluateAll((bs) => bs.map((b) => b.getAttribute('aria-label')));
  assert.deepEqual(removes, ['remove desk', 'remove gamer', 'remove mac']);
  // "Use the plan" comes before "This device".
  const above = await page.evaluate(() => Boolean(document.querySelector('#export-panel').compareDocumentPosition(document.querySelector('#device')) & Node.DOCUMENT_POSITION_FOLLOWING));
  assert.ok(above, 'the export panel is above the device panel');
  // The drop zone shows that it takes files held over it.
  const files = await page.evaluateHandle(() => new DataTransfer());
  await page.dispatchEvent('#drop-zone', 'dragover', { dataTransfer: files });
  await page.waitForSelector('#drop-zone.dragging');
  await page.dispatchEvent('#drop-zone', 'dragleave', { dataTransfer: files });
  await page.waitForSelector('#drop-zone:not(.dragging)');
  await page.close();
});

await check('a machine name with a right-to-left override reverses nothing drawn after it (#32: 22)', async () => {
  const page = await open();
  const evil = '\u202Eevil';
  await page.fill('#import-json', JSON.stringify({ model: { preset: 'llama-3.1-8b' }, nodes: [{ name: evil, device: 'rtx-4090' }, { name: 'b', device: 'rtx-3090' }] }));
  await page.click('#import');
  await page.locator(`tr.stage-row[data-node="${evil}"]`).waitFor();
  // The panels drawn on demand name the machines too: the sweeps' legend, the export's refusal.
  await page.click('#sweeps > summary');
  await page.waitForSelector('#sweeps-body #context-chart');
  await page.click('#export-panel > summary');
  await page.waitForSelector('#export-error, #export-text');
  // As drawn: the characters after the name are on screen left to right, in reading order.
  const drawnInOrder = (selector, text) => page.locator(selector).first().evaluate((element, text) => {
    const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const at = node.textContent.indexOf(text);
      if (at < 0) continue;
      const lefts = [...text].map((_, i) => {
        const range = document.createRange();
        range.setStart(node, at + i);
        range.setEnd(node, at + i + 1);
        return Math.round(range.getBoundingClientRect().left);
      });
      return { lefts, inOrder: lefts.every((x, i) => i === 0 || x > lefts[i - 1]) };
    }
    return { lefts: [], inOrder: false, missing: element.textContent };
  }, text);
  for (const [selector, text] of [[`.stage-band[data-node="${evil}"] span`, '0–32'], ['#sweeps-body .legend', 'the grey line']]) {
    const drawn = await drawnInOrder(selector, text);
    assert.ok(drawn.inOrder, `${selector}: '${text}' drawn at ${JSON.stringify(drawn)}`);
  }
  // Every text holding the override sits alone in an element that isolates it (alone: no
  // other text there; Leptos leaves empty comments beside it).
  const { loose, isolated } = await page.evaluate(() => {
    const found = { loose: [], isolated: 0 };
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const parent = node.parentElement;
      if (!node.textContent.includes('\u202E') || parent.closest('script, style, textarea')) continue;
      if (getComputedStyle(parent).unicodeBidi === 'isolate' && parent.textContent === node.textContent) found.isolated += 1;
      else found.loose.push(`${parent.tagName}.${parent.className}: ${JSON.stringify(parent.textContent)}`);
    }
    return found;
  });
  assert.deepEqual(loose, []);
  // The stage's band, its row, its switch's label and the chart's legend at least.
  assert.ok(isolated >= 4, `${isolated} isolated names`);
  // Text shown as the CLI prints it (the scenario's JSON) escapes the override, as the CLI does.
  assert.ok((await text(page, '#scenario-json')).includes('"\\u202eevil"'), await text(page, '#scenario-json'));
  await shot(page, '05c-bidi-name');
  await page.close();
});

await check('any screen: no sideways scrolling and the verdict in view, from 360 px to desktop; machine rows readable (#18: 3, 4, 7)', async () => {
  for (const [width, height] of [[360, 740], [390, 844], [1440, 900]]) {
    const page = await open();
    await page.setViewportSize({ width, height });
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    const layout = await page.evaluate(() => {
      const verdict = document.querySelector('#plan-headline').getBoundingClientRect();
      return { scrollWidth: document.documentElement.scrollWidth, innerWidth, innerHeight, top: verdict.top, bottom: verdict.bottom };
    });
    assert.ok(layout.scrollWidth <= layout.innerWidth, `${width} px: the page is ${layout.scrollWidth} px wide`);
    assert.ok(layout.top >= 0 && layout.bottom <= layout.innerHeight, `${width}×${height}: the verdict is at ${layout.top}–${layout.bottom} px`);
    // The bottleneck is marked in words in its table row, not by colour alone.
    assert.match(await text(page, 'tr.stage-row.bottleneck th'), /◀ bottleneck/);
    if (width >= 1000) {
      // Machine rows (#18: 4): each device select shows its whole name, a preset's kind is named.
      const cut = await page.evaluate(() => [...document.querySelectorAll('.node-device')].filter((select) => {
        const context = document.createElement('canvas').getContext('2d');
        context.font = getComputedStyle(select).font;
        return context.measureText(select.selectedOptions[0].textContent).width + 28 > select.clientWidth;
      }).map((select) => select.selectedOptions[0].textContent));
      assert.deepEqual(cut, [], 'device names cut off');
      const kind = await page.$eval('li.node[data-node="desk"] .node-kind', (select) => select.selectedOptions[0].textContent);
      assert.equal(kind, 'GPU (device)');
    }
    await shot(page, `02-screen-${width}`);
    // What a reader sees first, at phone and desktop size: the README's screenshots.
    await page.screenshot({ path: path.join(artifacts, `readme-${width}.png`) });
    await page.close();
  }
});

await check('axe-core finds no serious accessibility violations, on a plan and on a wrong input (#18)', async () => {
  const axe = fs.readFileSync(path.join(root, 'node_modules/axe-core/axe.min.js'), 'utf8');
  const page = await open();
  // Evaluated through the debugging protocol, which the page's Content-Security-Policy
  // does not govern (a <script> tag would be refused, as it should be).
  await page.evaluate(axe);
  const serious = async (state) => {
    const result = await page.evaluate(() => axe.run(document, { resultTypes: ['violations'] }));
    return result.violations
      .filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => `${state}: ${v.id} (${v.impact}) ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', ')}`);
  };
  const found = await serious('first plan');
  await page.fill('#context', 'lots');
  await page.waitForSelector('#context[aria-invalid="true"]');
  found.push(...(await serious('wrong input')));
  await page.fill('#context', '8192');
  await page.setViewportSize({ width: 360, height: 740 });
  await page.waitForSelector('.plan-body:not(.stale)');
  found.push(...(await serious('phone')));
  metrics.axe_serious = found.length;
  assert.deepEqual(found, []);
  await page.close();
});

await check('weight formats side by side, speed and memory against context length, users against latency (#18, #47: charts)', async () => {
  const page = await open();
  await page.click('#sweeps > summary');
  await page.waitForSelector('#formats tr.format-row');
  const rows = await page.$$eval('#formats tr.format-row', (trs) => trs.map((tr) => ({
    weights: tr.dataset.weights, current: tr.classList.contains('current'), fits: tr.querySelector('.fits').textContent, speed: tr.querySelector('.speed').textContent,
  })));
  assert.ok(rows.length >= 8, JSON.stringify(rows));
  assert.equal(rows.find((r) => r.weights === 'f16').fits, 'does not fit');
  const chosen = rows.find((r) => r.current);
  assert.equal(chosen.weights, 'q4_k_m');
  const headline = await text(page, '#plan-headline');
  assert.equal(`${headline.match(/([\d.]+) tok\/s for one user/)[1]} tok/s`, chosen.speed);
  // Another format's row is what the CLI plans for that format.
  const scenario = JSON.parse(await text(page, '#scenario-json'));
  const q8 = cliPlan(JSON.stringify({ ...scenario, model: { ...scenario.model, weights: 'q8_0' } }));
  const q8row = rows.find((r) => r.weights === 'q8_0');
  assert.equal(q8row.fits, q8.feasible ? 'fits' : 'does not fit');
  if (q8.feasible) assert.equal(q8row.speed, `${sig3(q8.stream_tokens_per_s)} tok/s`);
  // The chart: a speed line and a memory line per machine of the plan.
  const chart = await page.$eval('#context-chart', (svg) => ({
    speed: svg.querySelector('polyline.speed').getAttribute('points').split(' ').length,
    memory: [...svg.querySelectorAll('polyline.memory')].map((p) => p.dataset.node),
    label: svg.getAttribute('aria-label'),
  }));
  // A line for every machine some context's plan uses: at least this plan's machines.
  const stages = JSON.parse(await text(page, '#plan-json')).stages.map((s) => s.node);
  assert.ok(stages.every((n) => chart.memory.includes(n)) && chart.memory.every((n) => ['desk', 'gamer', 'mac'].includes(n)), JSON.stringify(chart.memory));
  assert.ok(chart.speed >= 5, `${chart.speed} points`);
  assert.match(chart.label, /for contexts from 1k to 128k/);
  // Users against latency (#47): a line each for p95 first token and per token, and the
  // users of one llama-server the CLI's `plan --ttft 2s` finds.
  await page.waitForSelector('#users-chart polyline.ttft');
  const users = await page.$eval('#users-chart', (svg) => ({
    ttft: svg.querySelector('polyline.ttft').getAttribute('points').split(' ').length,
    tpot: svg.querySelector('polyline.tpot').getAttribute('points').split(' ').length,
  }));
  assert.ok(users.ttft >= 2 && users.ttft === users.tpot, JSON.stringify(users));
  const answered = cliAnswer(JSON.stringify(scenario), ['--ttft', '2s']);
  const n = answered.capacity.users;
  assert.match(await text(page, '#users-found'), new RegExp(`: ${n} users? of one llama-server`));
  await page.locator('#sweeps').screenshot({ path: path.join(artifacts, '05c-sweeps.png') });
  await page.close();
});

await check('keyboard paths: Tab reaches the fields and a fix, Enter applies it (#18)', async () => {
  const page = await open();
  // Tab to the context field and type over it.
  const tabTo = async (matches) => {
    for (let i = 0; i < 80; i += 1) {
      await page.keyboard.press('Tab');
      if (await page.evaluate(matches)) return;
    }
    throw new Error(`Tab never reached ${matches}`);
  };
  await tabTo(() => document.activeElement?.id === 'context');
  await page.keyboard.press('Control+A');
  await page.keyboard.type('1M');
  // A million tokens fit nowhere: the fixes appear as buttons, reached by Tab, applied by Enter.
  await page.waitForSelector('#notes .apply-fix');
  await tabTo(() => document.activeElement?.classList.contains('apply-fix'));
  const label = await page.evaluate(() => document.activeElement.textContent);
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.querySelector('#plan-headline').textContent.startsWith('fits'));
  assert.match(label, /^(Use|Add)/, label);
  await page.close();
});

await check('an imported scenario says what its form leaves out, never drops it silently; the V cache apart is kept (#45)', async () => {
  const page = await open();
  const imported = { model: { preset: 'llama-3.1-8b' }, workload: { kv: 'q8_0', kv_v: 'f16', flash_attention: false }, nodes: [{ name: 'a', device: 'rtx-4090' }] };
  await page.fill('#import-json', JSON.stringify(imported));
  await page.click('#import');
  await page.waitForFunction(() => document.querySelector('#notice')?.textContent.includes('workload.flash_attention'));
  assert.doesNotMatch(await text(page, '#notice'), /kv_v/);
  // What it keeps, it plans: the K and V caches' formats, each in its select.
  const workload = JSON.parse(await text(page, '#scenario-json')).workload;
  assert.deepEqual([workload.kv, workload.kv_v], ['q8_0', 'f16']);
  assert.equal(await page.inputValue('#kv-v'), 'f16');
  // "As K" leaves the V format out of the scenario.
  await page.selectOption('#kv-v', '');
  await page.waitForFunction(() => !document.querySelector('#scenario-json').textContent.includes('kv_v'));
  await page.close();
});

await check('re-planning 80 layers on 8 machines fits in a frame', async () => {
  const page = await open();
  const scenario = fs.readFileSync(path.join(root, 'tests/scenarios/home-70b-8.json'), 'utf8');
  await page.fill('#import-json', scenario);
  await page.click('#import');
  await page.waitForFunction(() => document.querySelectorAll('li.node').length === 8);
  samePlan(JSON.parse(await text(page, '#plan-json')), cliPlan(await text(page, '#scenario-json')));
  const times = [];
  for (let i = 0; i < 15; i += 1) {
    await page.fill('#context', String(4096 + 512 * i));
    await page.waitForFunction((c) => document.querySelector('#scenario-json').textContent.includes(`"context": ${c}`), 4096 + 512 * i);
    times.push(Number(await page.getAttribute('#plan', 'data-plan-ms')));
  }
  times.sort((a, b) => a - b);
  metrics.replan_ms_median = times[Math.floor(times.length / 2)];
  metrics.replan_ms_max = times[times.length - 1];
  // Throughput objective, then latency (left-out nodes explained: more searches).
  await page.check('#objective-latency');
  await page.waitForFunction(() => JSON.parse(document.querySelector('#plan-json').textContent).objective === 'latency');
  metrics.replan_latency_objective_ms = Number(await page.getAttribute('#plan', 'data-plan-ms'));
  await shot(page, '05-eight-machines');
  // Timings are recorded (metrics.json, BENCHMARKS.md), never held to a fixed limit: the
  // bound is an order of magnitude, so it holds on any machine and still catches a
  // re-plan that stopped being interactive (a frame is 16 ms; this is 250 ms).
  assert.ok(metrics.replan_ms_median < 250, `median re-plan ${metrics.replan_ms_median} ms`);
  await page.close();
});

await check('a dropped GGUF and a safetensors set are read by their headers only', async () => {
  const page = await open();
  const gguf = path.join(fixtures, 'dense.gguf');
  await page.setInputFiles('#model-file', gguf);
  await page.waitForFunction(() => /read .* of/.test(document.querySelector('#file-status').textContent));
  const status = await text(page, '#file-status');
  const [, pct] = status.match(/\(([\d.]+)%\)/);
  assert.ok(Number(pct) < 10, status);
  assert.match(await text(page, '.model-line'), /dense · gguf · 4 layers/);
  const sharded = ['model.safetensors.index.json', 'model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', 'config.json']
    .map((f) => path.join(fixtures, 'sharded', f));
  await page.setInputFiles('#model-file', sharded);
  await page.waitForFunction(() => document.querySelector('#file-status').textContent.includes('index.json'));
  assert.match(await text(page, '.model-line'), /safetensors · 4 layers/);
  await shot(page, '06-dropped-files');
  await page.close();
});

await check('a model file of each architecture family is sized as the CLI sizes it (#35)', async () => {
  const page = await open();
  const dir = path.join(fixtures, 'arches');
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.gguf'));
  assert.ok(files.length >= 12, `${files.length} families`);
  for (const file of files) {
    const family = file.replace(/\.gguf$/, '');
    await page.setInputFiles('#model-file', path.join(dir, file));
    await page.waitForFunction((name) => document.querySelector('.model-line')?.textContent.startsWith(`stageplan-${name} `), family);
    await page.waitForFunction((f) => JSON.parse(document.querySelector('#scenario-json').textContent).model.file === f, file);
    const scenario = JSON.parse(await text(page, '#scenario-json'));
    const shown = JSON.parse(await text(page, '#plan-json'));
    const cli = cliPlan(JSON.stringify({ ...scenario, model: { ...scenario.model, file: path.join(dir, file) } }));
    const memory = (plan) => plan.stages.map((s) => [s.node, s.layers, s.memory]);
    assert.deepEqual(memory(shown), memory(cli), file);
  }
  await page.close();
});

await check('llama-bench results dropped on a machine fit it, as `stageplan calibrate` does (#15: 5)', async () => {
  const page = await open();
  const file = path.join(root, 'tests/cli/calibrate-llama-bench/results.json');
  const expected = JSON.parse(execFileSync(cli, ['calibrate', file, '--device', 'rtx-4090', '--format', 'json'], { encoding: 'utf8' })).node;
  const drop = (name, body) => page.evaluateHandle(([name, body]) => {
    const transfer = new DataTransfer();
    transfer.items.add(new File([body], name, { type: 'application/json' }));
    return transfer;
  }, [name, body]);
  const desk = '.node[data-node="desk"] .node-head';
  await page.dispatchEvent(desk, 'drop', { dataTransfer: await drop('results.json', fs.readFileSync(file, 'utf8')) });
  await page.waitForFunction(() => document.querySelector('#machines-said')?.textContent.startsWith('`desk` fitted'));
  assert.match(await text(page, '#machines-said'), /^`desk` fitted to 1 decode test on llama.cpp CUDA in `results.json`: \d+% of its figures' bandwidth/);
  const scenario = JSON.parse(await text(page, '#scenario-json'));
  const fitted = scenario.nodes.find((n) => n.name === 'desk');
  assert.deepEqual({ backend: fitted.backend, efficiency: fitted.efficiency }, { backend: expected.backend, efficiency: expected.efficiency });
  // The page plans with the fit, as the CLI does with the same scenario.
  const verdict = await text(page, '#plan-headline');
  assert.equal(Number(verdict.match(/([\d.]+) tok\/s for one user/)[1]), sig3(cliPlan(JSON.stringify(scenario)).stream_tokens_per_s));
  // A file that is not llama-bench's: one line at the notice, the fit kept.
  await page.dispatchEvent(desk, 'drop', { dataTransfer: await drop('notes.json', '{"hello": "world"}\n') });
  await page.waitForFunction(() => document.querySelector('#notice')?.textContent.includes('notes.json'));
  assert.ok(!(await text(page, '#notice')).includes('\n'));
  const kept = JSON.parse(await text(page, '#scenario-json')).nodes.find((n) => n.name === 'desk');
  assert.equal(kept.backend, expected.backend);
  // Another device: the fit was to the old one's figures, so it goes.
  await page.selectOption('.node[data-node="desk"] .node-device', 'rtx-3090');
  const moved = JSON.parse(await text(page, '#scenario-json')).nodes.find((n) => n.name === 'desk');
  assert.equal(moved.efficiency, undefined);
  await page.close();
});

await check('hostile share links and files get a message, never a blank page', async () => {
  for (const [hash, expected] of [['#s1.!!!', /damaged/], ['#nonsense', /not a stageplan link/], [`#s1.${'A'.repeat(40000)}`, /over the/]]) {
    const page = await open(hash);
    const order = await startOrder(page);
    assert.ok(order.rest < order.plan, `a share link starts with the whole module: ${JSON.stringify(order)}`);
    assert.match(await text(page, '#notice'), expected);
    assert.match(await text(page, '#plan-headline'), /tok\/s/, 'the example still plans');
    await page.close();
  }
  const page = await open();
  await page.setInputFiles('#model-file', path.join(root, 'tests/cli/bad-gguf-header/model.gguf'));
  await page.waitForSelector('#notice');
  assert.match(await text(page, '#notice'), /tensor count/);
  await shot(page, '07-hostile-file');
  await page.close();
});

await check('"Use the plan" shows what `stageplan export` prints for every engine, and copies it', async () => {
  await browser.grantPermissions(['clipboard-read', 'clipboard-write'], { origin });
  const page = await open();
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'stageplan-cli-')), 'scenario.json');
  fs.writeFileSync(file, await text(page, '#scenario-json'));
  // Closed until asked for; opening it starts the page's worker, which makes the exports.
  assert.equal(await page.locator('#export-text').count(), 0);
  const from = served.length;
  await page.click('#export-panel > summary');
  await page.waitForSelector('#export-text[data-target="llama.cpp"]');
  metrics.load_on_demand = fetched(from);
  assert.ok(metrics.load_on_demand.files.some((f) => f.includes('worker')), `fetched on opening: ${metrics.load_on_demand.files}`);
  for (const target of ['llama.cpp', 'vllm', 'exo', 'kubernetes', 'deepspeed', 'megatron']) {
    await page.click(`#export-tab-${target.replace('.', '-')}`);
    await page.waitForSelector(`#export-text[data-target="${target}"]`);
    const shown = await text(page, '#export-text');
    const printed = execFileSync(cli, ['export', file, '--to', target], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    assert.equal(shown, printed, `${target}: the page and the CLI differ`);
    await page.click('#copy-export');
    await page.waitForFunction(() => document.querySelector('#copy-export').textContent === 'Copied');
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), printed, `${target}: the copied text`);
  }
  await shot(page, '09-use-the-plan');
  await page.close();
});

await check("a call that reaches the module's rest before it is loaded starts the page over, whole (#45 item 7)", async () => {
  const page = await browser.newPage();
  await page.addInitScript(() => {
    if (!sessionStorage.getItem('e2e-fresh')) {
      localStorage.clear();
      sessionStorage.setItem('e2e-fresh', '1');
    }
  });
  // The rest held back while a script opens the exports, which the first plan never runs.
  let release;
  const held = new Promise((resolve) => { release = resolve; });
  await page.route(`**${REST}`, async (route) => { await held; await route.continue(); });
  await page.goto(`${origin}/`);
  await page.waitForSelector('#plan-headline');
  assert.equal(await page.evaluate(() => document.body.inert), true, 'no input before the rest is loaded');
  const reloaded = page.waitForEvent('load');
  await page.evaluate(() => document.querySelector('#export-panel > summary').click());
  await reloaded;
  release();
  await page.waitForSelector('#plan-headline');
  await page.waitForFunction(() => !document.body.inert);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('stageplan.whole')), '1');
  const rest = await page.evaluate(() => performance.getEntriesByName('stageplan-rest')[0]?.startTime);
  assert.ok(rest !== undefined, 'the second start asked for the rest first');
  await page.click('#export-panel > summary');
  await page.waitForSelector('#export-text[data-target="llama.cpp"]');
  await page.close();
});

await check('a share link reloads the same state', async () => {
  const page = await open();
  await page.locator('li.node').nth(1).locator('.node-enabled').uncheck();
  await page.fill('#context', '12288');
  await page.click('#share');
  const link = await page.inputValue('#share-link');
  assert.ok(link.startsWith(origin) && link.includes('#s1.'), link);
  await page.waitForFunction(() => document.querySelector('#share-status').textContent === 'Link copied');
  const scenario = await text(page, '#scenario-json');
  const planJson = await text(page, '#plan-json');
  const again = await browser.newPage();
  again.on('request', (r) => requests.push(r.url()));
  await again.goto(link);
  await again.waitForSelector('#plan-headline');
  assert.equal(await text(again, '#scenario-json'), scenario);
  assert.equal(await text(again, '#plan-json'), planJson);
  assert.equal(await again.locator('li.node.off').count(), 1);
  await again.close();
  await page.close();
});

await check('every edit follows into the URL and is kept for the next visit (#18: 8)', async () => {
  const page = await open();
  await page.fill('#context', '16384');
  await page.waitForFunction(() => location.hash.startsWith('#s1.'));
  const followed = await page.evaluate(() => location.href);
  // A visit without a link opens the last session; a reload of the link, that state.
  await page.goto(`${origin}/`);
  await page.waitForSelector('#plan-headline, #error');
  assert.equal(await page.inputValue('#context'), '16384');
  await page.goto(followed);
  await page.reload();
  await page.waitForSelector('#plan-headline, #error');
  assert.equal(await page.inputValue('#context'), '16384');
  await page.close();
});

await check('a link made from a model file names the file to drop again (#18: 8)', async () => {
  const page = await open();
  await page.fill('#import-json', JSON.stringify({ model: { file: 'llama-8b-q4.gguf' }, nodes: [{ name: 'a', device: 'rtx-4090' }] }));
  await page.click('#import');
  await page.waitForSelector('#error');
  assert.match(await text(page, '#error'), /`?llama-8b-q4\.gguf`?.*drop it on the page again/);
  await page.close();
});

await check('this device: the WebGPU probe, adding it, and the plan run as kernels', async () => {
  const page = await open();
  await page.click('#probe');
  await page.waitForSelector('#probe-result', { timeout: 120_000 });
  metrics.webgpu_adapter = await text(page, '#probe-result dd');
  metrics.webgpu_bandwidth = await text(page, '#probe-bandwidth');
  metrics.webgpu_compute_f32 = await text(page, '#probe-compute');
  // Said in people's words, with a warning for SwiftShader's software adapter (#18: 9).
  const said = await page.locator('#probe-said p').allTextContents();
  assert.match(said[0], /^This browser's GPU reads [\d.]+ [kMGT]?B\/s and computes [\d.]+ [kMGTP]?FLOPS/);
  assert.ok(said.some((line) => /software adapter/.test(line)), said.join(' | '));
  const nodes = await page.locator('li.node').count();
  await page.click('#add-this-device');
  await page.waitForFunction((n) => document.querySelectorAll('li.node').length === n + 1, nodes);
  const added = page.locator('li.node').last();
  assert.match(await added.locator('.node-bandwidth').inputValue(), / [kMGT]?B\/s$/, 'bandwidth with its unit');
  assert.match(await added.locator('.node-compute').inputValue(), / [kMGTP]?FLOPS$/, 'compute with its unit');
  // Measured, so planned as what the device reaches with the probe's band (#33).
  const measured = JSON.parse(await text(page, '#scenario-json')).nodes.at(-1);
  assert.equal(measured.probe?.backend, 'webgpu', JSON.stringify(measured));
  await page.click('#run-sharded');
  await page.waitForSelector('#sharded-result', { timeout: 180_000 });
  const rows = await page.$$eval('#sharded-result tbody tr', (trs) => trs.map((tr) => [...tr.children].map((c) => c.textContent)));
  assert.ok(rows.length >= 1);
  metrics.webgpu_sharded = rows;
  metrics.webgpu_sharded_note = await text(page, '#sharded-status');
  assert.match(metrics.webgpu_sharded_note, /^The plan's split, run on this GPU: .*checked against the CPU/);
  await shot(page, '08-this-device');
  await page.close();
});

await check('a worker that fails to load is reported, and asking again tries again', async () => {
  // Not `open()`: the blocked fetch is logged as an error on purpose.
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.route('**/stageplan-worker_bg.wasm', (route) => route.abort());
  await page.goto(`${origin}/`);
  await page.waitForSelector('#plan-headline');
  for (let attempt = 0; attempt < 2; attempt += 1) {
    await page.click('#probe');
    await page.waitForFunction(() => /worker failed/.test(document.querySelector('#probe-status').textContent), null, { timeout: 30_000 });
    await page.waitForFunction(() => !document.querySelector('#probe').disabled);
  }
  metrics.worker_failure_message = await text(page, '#probe-status');
  await page.click('#export-panel > summary');
  await page.waitForFunction(() => /worker failed/.test(document.querySelector('#export-error')?.textContent ?? ''), null, { timeout: 30_000 });
  assert.deepEqual(errors, []);
  await page.close();
});

await check('without WebGPU the device panel says why, and the page still plans', async () => {
  const plain = await launch({ profile: 'stageplan-e2e-nogpu-', viewport });
  try {
    await withoutWebGpu(plain);
  } finally {
    await plain.close();
  }
});

async function withoutWebGpu(plain) {
  const page = await plain.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('request', (r) => requests.push(r.url()));
  await page.goto(`${origin}/`);
  await page.waitForSelector('#plan-headline');
  await page.click('#probe');
  await page.waitForFunction(() => /not available/.test(document.querySelector('#probe-status').textContent), null, { timeout: 60_000 });
  metrics.no_webgpu_message = await text(page, '#probe-status');
  assert.equal(await page.locator('#probe-result').count(), 0);
  assert.equal(await page.isDisabled('#probe'), false, 'the button is usable again');
  await page.locator('.node-enabled').first().click();
  await page.waitForSelector('li.node.off');
  assert.match(await text(page, '#plan-headline'), /tok\/s/);
  // Opening "Use the plan" meanwhile shows the export, not the device's failure.
  await page.click('#export-panel > summary');
  await page.waitForSelector('#export-text[data-target="llama.cpp"]');
  assert.deepEqual(errors, []);
  await shot(page, '10-no-webgpu');
}

await check('the page fetched nothing but its own files, and logged no errors', async () => {
  const foreign = requests.filter((u) => !u.startsWith(origin) && !u.startsWith('blob:') && !u.startsWith('data:'));
  assert.deepEqual(foreign, []);
  const missing = served.filter((r) => r.status !== 200);
  assert.deepEqual(missing, []);
  assert.deepEqual(consoleErrors.filter((e) => !e.includes('integrity')), []);
});

for (const file of fs.readdirSync(dist).filter((f) => fs.statSync(path.join(dist, f)).isFile())) {
  const bytes = fs.readFileSync(path.join(dist, file));
  metrics[`size_${file}`] = { raw: bytes.length, gzip: zlib.gzipSync(bytes, { level: 9 }).length };
}
fs.writeFileSync(path.join(artifacts, `metrics${suffix}.json`), `${JSON.stringify(metrics, null, 2)}\n`);
console.log(JSON.stringify(metrics, null, 2));
await browser.close();
stopServer();
process.exit(failures() === 0 ? 0 : 1);
