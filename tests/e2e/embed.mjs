// End-to-end tests of the embed package's example pages (web/embed/index.html and api.html,
// built into dist/embed/ by `cargo xtask embed`) in headless Chromium: two <stage-plan>
// widgets on a documentation page, and a page that calls the JS API beside a widget.
//
//   node tests/e2e/embed.mjs --embed dist/embed --cli path/to/stageplan
//
// Screenshots go to tests/e2e/artifacts/; sizes and timings to metrics-embed.json
// (BENCHMARKS.md). Exits non-zero when a check fails.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';

import { args, artifacts, check, failures, launch, serve } from './harness.mjs';

const embed = path.resolve(args.embed ?? 'dist/embed');
const cli = path.resolve(args.cli ?? 'target/debug/stageplan');

const { origin, served, close: stopServer } = await serve(embed);

/** Raw and gzip bytes of the files the server sent since `served[from]`, the page itself
 *  (a documentation page's own HTML) left out. */
function fetched(from) {
  const files = [...new Set(served.slice(from).filter((r) => r.status === 200 && !['/index.html', '/api.html'].includes(r.path)).map((r) => r.path))];
  const bytes = files.map((f) => fs.readFileSync(path.join(embed, f)));
  return {
    files,
    raw: bytes.reduce((n, b) => n + b.length, 0),
    gzip: bytes.reduce((n, b) => n + zlib.gzipSync(b, { level: 9 }).length, 0),
  };
}

const browser = await launch({ profile: 'stageplan-embed-', viewport: { width: 1000, height: 1400 } });

const metrics = {};

/** A page with its requests and console errors recorded. */
async function open({ blockWasm = false, at = 'index.html' } = {}) {
  const page = await browser.newPage();
  const requests = [];
  const errors = [];
  page.on('request', (r) => requests.push(r.url()));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
  if (blockWasm) await page.route('**/*.wasm', (route) => route.abort());
  await page.goto(`${origin}/${at}`);
  return { page, requests, errors };
}

const headline = (page, id) => page.locator(`#${id} .sp-headline`).textContent();
const stageRows = (page, id) => page.locator(`#${id} tr.stage-row`).evaluateAll((rows) => rows.map((r) => `${r.dataset.node} ${r.querySelector('.layers').textContent}`));

function cliPlan(scenario, ...flags) {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'stageplan-cli-')), 'scenario.json');
  fs.writeFileSync(file, JSON.stringify(scenario));
  try {
    return JSON.parse(execFileSync(cli, ['plan', file, ...flags, '--format', 'json'], { encoding: 'utf8' }));
  } catch (e) {
    // A question no plan answers exits 1 and still prints its answer.
    if (e.status === 1) return JSON.parse(e.stdout);
    throw e;
  }
}

const inlineScenario = JSON.parse(fs.readFileSync(path.join(embed, 'index.html'), 'utf8').match(/<script type="application\/json">([\s\S]*?)<\/script>/)[1]);
const linkedScenario = JSON.parse(fs.readFileSync(path.join(embed, 'scenarios/laptops-8b.json'), 'utf8'));
const sig3 = (x) => Number(x.toPrecision(3));
// The verdict's one-user speed: `fits · N tok/s for one user …`.
const tokens = (text) => Number(text.match(/([\d.]+) tok\/s for one user/)[1]);

await check('both widgets render the plans the CLI computes', async () => {
  const started = Date.now();
  const from = served.length;
  const { page, requests, errors } = await open();
  await page.locator('#home-70b .sp-headline').waitFor({ timeout: 60_000 });
  metrics.first_widget_plan_ms = await page.evaluate(() => performance.now());
  metrics.first_widget_plan_wall_ms = Date.now() - started;
  // Issue #20: what a reader downloads to see the first plan, the page's HTML aside. 150 kB
  // until #31/#32 gave errors their field's path and value as data and the widget names set
  // apart for right-to-left text: 2.6 kB more (152.4 kB), chosen over the bound (closing note
  // of 2026-12-03); 155 kB then. 155.8 kB with #33's measured nodes (a probed node plans as
  // measured in the widget as everywhere) and #34's device presets: 160 kB, the budget the
  // page's API call already had. 168.9 kB with #34's host tier (a machine's GPU and system
  // RAM, its placement search and exports: every plan runs it, so it cannot load on demand):
  // 175 kB, chosen over splitting the core this round (closing note of 2026-12-03, fourth).
  // #35's memory per architecture and 16 model presets grow the core the widget plans with
  // as they grow the page's (+7.1 kB there): 180 kB, as the page's budget went to 325 kB.
  // #35's riders (a draft model, a vision projector) are in every plan's road: 184.2 kB
  // measured, 190 kB, as the page's went to 340 kB. #45's decode at a stated depth and a
  // quantized cache's reads per query head: 190.2 kB measured (2026-12-05), 195 kB — a
  // ratchet, as the page's 350 kB, while #45 item 7 (150 kB by loading on demand) is open.
  // #46's machines with several GPUs (their fields parsed and checked on the one road, a
  // plan's GPU of its machine): 198.7 kB measured (`.ci/run` of b5c7810, 2026-12-06),
  // 201 kB, a ratchet while #45 item 7 is open. #46's tensor-parallel groups on the same
  // road: +4.9 kB of the page's wasm measured by hand: 206 kB, the same ratchet; 204,320
  // in the `.ci/run` of 03735cd. vLLM's pipelines of groups: +2.0 kB by hand: 208 kB.
  // #46's one RAM of a machine with several GPUs, each GPU's share (the relaxation, the
  // divisions, a memo per alike GPUs) on every plan's road: the widget's module 197,657 →
  // 201,533 bytes gzip -9 by hand (+3.9 kB; 206,408 in the `.ci/run` of 85a290d): 211 kB,
  // the same ratchet; 210,208 in the `.ci/run` of 964f078. vLLM's all-reduce and its KV
  // heads kept on several GPUs: 202,117 by hand (+0.6 kB): 212 kB. vLLM's NCCL priced as
  // NCCL, its plans' own error band, a probed CPU's prompt rate: 202,969 by hand (+0.9 kB),
  // yet 211,483 in the `.ci/run` of 20d6117 (211,164 in that of ffb5cea): within 212 kB, kept.
  // #45 item 7, loading on demand what the first plan does not use: presets planned from
  // their shapes (constant data, not config.json text read at each plan) and an inline
  // config's reader moved to `more`, loaded for such a scenario: 202,610 measured: 203.1 kB.
  // The scenario read by hand from a JSON tree, not by serde's derived readers: 193,181
  // measured: 193.6 kB. The third wave's serving refusals (256 slots, a request past its
  // slot, target bounds), a machine's name used twice, links given twice, fixes that keep
  // hand-given stages, groups judged per degree: 184,534 → 185,717 by hand (+1.2 kB):
  // 194.6 kB, the same ratchet while #45 item 7 is open. Quantities' numbers read by
  // serde_json's reader, not core's float parser and its 10 KB table, and wasm-opt told the
  // lowest kilobyte is unused: 187,468 → 173,059 bytes of wasm (zlib -9, by hand): 180.6 kB;
  // 180,039 in the `.ci/run` of 2151c5b. #47's serving question in the scenario, read and
  // checked on the one road: 174,482 by hand (+1.4 kB): 181.7 kB, the same ratchet.
  // #45 item 7 done: the module split in two by a profile of these two widgets' first plans
  // (`crates/xtask/src/split.rs`), the rest loaded by the first call that needs it: 150 kB,
  // the issue's bound, and the page's API example on a page of its own (below), since the
  // API loads the whole planner so that its calls answer at once.
  metrics.load_to_plan = fetched(from);
  assert.ok(metrics.load_to_plan.gzip <= 150_000, `the widget loads ${metrics.load_to_plan.gzip} bytes gzip to plan`);
  await page.locator('#laptops-8b .sp-headline').waitFor({ timeout: 60_000 });
  const wasm = served.slice(from).filter((r) => r.path.endsWith('.wasm')).map((r) => r.path);
  assert.deepEqual(wasm, ['/stageplan_bg.wasm'], 'the first part of the planner, fetched once, and nothing else');
  for (const [id, scenario] of [['home-70b', inlineScenario], ['laptops-8b', linkedScenario]]) {
    const expected = cliPlan(scenario);
    assert.equal(tokens(await headline(page, id)), sig3(expected.stream_tokens_per_s), id);
    assert.deepEqual(await stageRows(page, id), expected.stages.map((s) => `${s.node} ${s.layers[0]}–${s.layers[1]}`), id);
  }
  await page.screenshot({ path: path.join(artifacts, 'embed-page.png'), fullPage: true });
  assert.deepEqual(errors, [], 'no console errors');
  const foreign = requests.filter((url) => !url.startsWith(origin) && !url.startsWith('data:'));
  assert.deepEqual(foreign, [], 'no requests beyond the page\'s own files');
  metrics.embed_requests = requests.map((url) => url.slice(origin.length));
  await page.close();
});

await check('a page calling the API loads the whole planner once and shares it with its widget', async () => {
  const from = served.length;
  const { page, errors } = await open({ at: 'api.html' });
  await page.waitForFunction(() => document.getElementById('api-example').textContent.includes('tok/s'));
  const direct = cliPlan({
    model: { preset: 'llama-3.1-70b', weights: 'q4_k_m' },
    workload: { context: 8192 },
    nodes: [{ name: 'desk', device: 'rtx-4090' }, { name: 'gamer', device: 'rtx-3090' }],
  });
  assert.equal(await page.locator('#api-example').textContent(), `desk + gamer: ${sig3(direct.stream_tokens_per_s)} tok/s for one user, ${direct.stages.length} stages`);
  await page.locator('#laptops-8b .sp-headline').waitFor({ timeout: 60_000 });
  assert.equal(tokens(await headline(page, 'laptops-8b')), sig3(cliPlan(linkedScenario).stream_tokens_per_s));
  // Both parts of the module (the whole planner, 181.7 kB in one module before the split;
  // 188.3 kB split; 198.1 kB with #47's `usersView`, whose llama-server simulation the
  // widget's users panel loads with the rest only when opened; 201.8 kB with vLLM's
  // scheduler beside it, which `serve` and `usersView` run for a vLLM scenario; 204.5 kB
  // with `serve`'s requests at a rate and lengths drawn about the workload's, vLLM's queue
  // past its `--max-num-seqs` and its API server's part of the first token). A page that
  // calls the sync API takes the whole planner; the widget page's bound is below.
  metrics.load_with_api = fetched(from);
  assert.ok(metrics.load_with_api.gzip <= 205_500, `widget and API load ${metrics.load_with_api.gzip} bytes gzip`);
  const wasm = served.slice(from).filter((r) => r.path.endsWith('.wasm')).map((r) => r.path).sort();
  assert.deepEqual(wasm, ['/stageplan_bg.wasm', '/stageplan_rest.wasm'], 'each part fetched once');
  assert.ok(!metrics.load_with_api.files.some((f) => f.startsWith('/more/')), 'the model-file module loads only on use');
  assert.deepEqual(errors, [], 'no console errors');
  await page.close();
});

await check('a widget says how many users fit as `stageplan plan --ttft 2s` does, the planner\'s rest loaded when asked (#47)', async () => {
  const { page, errors } = await open();
  await page.locator('#laptops-8b .sp-headline').waitFor({ timeout: 60_000 });
  const from = served.length;
  await page.locator('#laptops-8b .sp-users summary').click();
  await page.locator('#laptops-8b .sp-users-found').waitFor({ timeout: 60_000 });
  const users = cliPlan(linkedScenario, '--ttft', '2s').capacity.users;
  const found = await page.locator('#laptops-8b .sp-users-found').textContent();
  assert.ok(found.startsWith(`At p95 first token ≤ 2 s: ${users} user${users === 1 ? '' : 's'} of one llama-server`), found);
  assert.equal(await page.locator('#laptops-8b .sp-users-chart polyline').count(), 2);
  assert.deepEqual(served.slice(from).map((r) => r.path), ['/stageplan_rest.wasm'], 'the rest, fetched for the simulation');
  // Open across an edit, and simulated again for it.
  await page.locator('#laptops-8b .sp-context').fill('4096');
  await page.locator('#laptops-8b .sp-context').dispatchEvent('change');
  await page.locator('#laptops-8b .sp-users[open] .sp-users-found').waitFor({ timeout: 60_000 });
  await page.screenshot({ path: path.join(artifacts, 'embed-users.png'), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});

await check('editing one widget re-plans it and leaves the other alone', async () => {
  const { page, errors } = await open();
  await page.locator('#laptops-8b .sp-headline').waitFor({ timeout: 60_000 });
  await page.locator('#home-70b .sp-headline').waitFor({ timeout: 60_000 });
  const other = { headline: await headline(page, 'laptops-8b'), rows: await stageRows(page, 'laptops-8b') };
  const before = await headline(page, 'home-70b');

  // Context: 8k → 64k makes the KV cache eight times larger.
  await page.locator('#home-70b .sp-context').fill('65536');
  await page.locator('#home-70b .sp-context').dispatchEvent('change');
  const longer = cliPlan({ ...inlineScenario, workload: { context: 65536 } });
  await page.waitForFunction(([id, text]) => document.querySelector(id).shadowRoot.querySelector('.sp-headline')?.textContent !== text, ['#home-70b', before]);
  assert.equal(tokens(await headline(page, 'home-70b')), sig3(longer.stream_tokens_per_s));

  // Weight format, then the machines: drop the Mac, add an H100.
  await page.locator('#home-70b .sp-weights').selectOption('q8_0');
  const q8 = cliPlan({ ...inlineScenario, model: { preset: 'llama-3.1-70b', weights: 'q8_0' }, workload: { context: 65536 } });
  await page.waitForFunction(([id, n]) => document.querySelector(id).shadowRoot.querySelector('.sp-headline')?.textContent.includes(n), ['#home-70b', `${sig3(q8.stream_tokens_per_s)} tok/s for one user`]);
  await page.locator('#home-70b .sp-node[data-node="mac"] .sp-remove').click();
  await page.locator('#home-70b .sp-add-device').selectOption('h100');
  const changed = cliPlan({
    model: { preset: 'llama-3.1-70b', weights: 'q8_0' },
    workload: { context: 65536 },
    nodes: [{ name: 'desk', device: 'rtx-4090' }, { name: 'gamer', device: 'rtx-3090' }, { name: 'h100', device: 'h100' }],
  });
  await page.waitForFunction(([id, n]) => document.querySelector(id).shadowRoot.querySelector('.sp-headline')?.textContent.includes(n), ['#home-70b', `${sig3(changed.stream_tokens_per_s)} tok/s for one user`]);
  assert.deepEqual(await stageRows(page, 'home-70b'), changed.stages.map((s) => `${s.node} ${s.layers[0]}–${s.layers[1]}`));

  // Switching a machine off re-plans without it.
  await page.locator('#home-70b .sp-node[data-node="h100"] input[type=checkbox]').uncheck();
  await page.waitForFunction((id) => ![...document.querySelector(id).shadowRoot.querySelectorAll('tr.stage-row')].some((r) => r.dataset.node === 'h100'), '#home-70b');

  assert.deepEqual({ headline: await headline(page, 'laptops-8b'), rows: await stageRows(page, 'laptops-8b') }, other, 'the other widget did not change');
  await page.screenshot({ path: path.join(artifacts, 'embed-edited.png'), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});

await check('the keyboard reaches every control, and keeps its place across a re-plan', async () => {
  const { page, errors } = await open();
  await page.locator('#home-70b .sp-headline').waitFor({ timeout: 60_000 });
  const active = () => page.evaluate(() => {
    const a = document.querySelector('#home-70b').shadowRoot.activeElement;
    return a ? `${a.tagName.toLowerCase()}.${a.className}${a.type ? `[${a.type}]` : ''}` : null;
  });
  await page.locator('#home-70b .sp-weights').focus();
  await page.keyboard.press('Tab');
  assert.equal(await active(), 'input.sp-context[number]');
  const before = await headline(page, 'home-70b');
  await page.keyboard.press('Control+A');
  await page.keyboard.type('32768');
  await page.keyboard.press('Enter');
  await page.waitForFunction(([id, text]) => document.querySelector(id).shadowRoot.querySelector('.sp-headline')?.textContent !== text, ['#home-70b', before]);
  assert.equal(await active(), 'input.sp-context[number]', 'focus stays on the field that re-planned');
  // On to the machines: a checkbox, then its remove button, by Tab alone.
  await page.keyboard.press('Tab');
  assert.equal(await active(), 'input.[checkbox]');
  await page.keyboard.press('Space');
  await page.waitForFunction((id) => document.querySelector(id).shadowRoot.querySelectorAll('.sp-node input:not(:checked)').length === 1, '#home-70b');
  assert.equal(await active(), 'input.[checkbox]', 'focus stays on the switch');
  await page.keyboard.press('Tab');
  assert.equal(await active(), 'button.sp-remove[button]');
  assert.deepEqual(errors, []);
  await page.close();
});

await check('no styles leak in or out', async () => {
  const { page } = await open();
  await page.locator('#home-70b .sp-headline').waitFor({ timeout: 60_000 });
  // The page styles every table cell with a red border; the widget's cells are not.
  const border = await page.locator('#home-70b tr.stage-row td').first().evaluate((td) => getComputedStyle(td).borderBottomColor);
  assert.notEqual(border, 'rgb(255, 0, 0)');
  // The widget adds no style sheet to the page itself.
  assert.equal(await page.evaluate(() => document.styleSheets.length), 1);
  await page.close();
});

await check('a widget whose scenario has a null machine says why instead of loading forever (#32: 21)', async () => {
  const { page } = await open();
  await page.locator('#home-70b .sp-headline').waitFor({ timeout: 60_000 });
  await page.evaluate(() => {
    const widget = document.createElement('stage-plan');
    widget.id = 'null-machine';
    const script = document.createElement('script');
    script.type = 'application/json';
    script.textContent = JSON.stringify({ model: { preset: 'llama-3.1-8b' }, nodes: [null, { name: 'a', device: 'rtx-4090' }] });
    widget.append(script);
    document.body.append(widget);
  });
  const status = page.locator('#null-machine .sp-status');
  await status.filter({ hasText: 'No plan' }).waitFor({ timeout: 30_000 });
  assert.match(await status.textContent(), /^No plan: `nodes\[0\]`/);
  await page.close();
});

await check('a widget whose model is an inline config.json loads `more` for it and plans as the preset does (#45)', async () => {
  const { page, errors } = await open();
  await page.locator('#home-70b .sp-headline').waitFor({ timeout: 60_000 });
  const from = served.length;
  const config = JSON.parse(fs.readFileSync('crates/stageplan/presets/models/llama-3.2-1b.json', 'utf8'));
  const nodes = [{ name: 'a', device: 'rtx-4090' }, { name: 'b', device: 'rtx-3090' }];
  const scenario = { model: { config, name: 'llama-3.2-1b', weights: 'q8_0' }, workload: { context: 8192 }, nodes };
  await page.evaluate((text) => {
    const widget = document.createElement('stage-plan');
    widget.id = 'from-config';
    const script = document.createElement('script');
    script.type = 'application/json';
    script.textContent = text;
    widget.append(script);
    document.body.append(widget);
  }, JSON.stringify(scenario));
  await page.locator('#from-config .sp-headline').waitFor({ timeout: 60_000 });
  const expected = cliPlan({ ...scenario, model: { preset: 'llama-3.2-1b', weights: 'q8_0' } });
  assert.equal(tokens(await headline(page, 'from-config')), sig3(expected.stream_tokens_per_s));
  assert.deepEqual(await stageRows(page, 'from-config'), expected.stages.map((s) => `${s.node} ${s.layers[0]}–${s.layers[1]}`));
  const more = served.slice(from).filter((r) => r.status === 200).map((r) => r.path);
  assert.ok(more.includes('/more/stageplan_bg.wasm'), `the config's reader loads on demand: ${more}`);
  assert.deepEqual(errors, []);
  await page.close();
});

await check('a name with a right-to-left override reverses nothing around it (#32: 22)', async () => {
  const { page } = await open();
  await page.locator('#home-70b .sp-headline').waitFor({ timeout: 60_000 });
  const evil = '\u202Eevil';
  await page.evaluate((name) => {
    const widget = document.createElement('stage-plan');
    widget.id = 'bidi';
    const script = document.createElement('script');
    script.type = 'application/json';
    script.textContent = JSON.stringify({ model: { preset: 'llama-3.1-8b' }, nodes: [{ name, device: 'rtx-4090' }, { name: 'b', device: 'rtx-3090' }] });
    widget.append(script);
    document.body.append(widget);
  }, evil);
  await page.locator('#bidi .sp-headline').waitFor({ timeout: 30_000 });
  // Every text holding the override sits alone in an element that isolates it.
  const loose = await page.locator('#bidi').evaluate((host) => {
    const found = [];
    const walk = (node) => {
      for (const child of node.childNodes) {
        if (child.nodeType === Node.TEXT_NODE && child.textContent.includes('\u202E')) {
          const parent = child.parentElement;
          const isolated = getComputedStyle(parent).unicodeBidi === 'isolate' && parent.childNodes.length === 1;
          if (!isolated) found.push(`${parent.tagName}: ${JSON.stringify(parent.textContent)}`);
        }
        walk(child);
      }
    };
    walk(host.shadowRoot);
    return found;
  });
  assert.deepEqual(loose, []);
  await page.close();
});

await check('without WebAssembly, each widget shows a readable table and says why', async () => {
  const { page } = await open({ blockWasm: true });
  for (const id of ['home-70b', 'laptops-8b']) {
    await page.locator(`#${id} .sp-status`).filter({ hasText: 'could not run' }).waitFor({ timeout: 30_000 });
  }
  // The author's table (light DOM, slotted) for the first; one made from the scenario for the second.
  assert.ok(await page.locator('#home-70b > table').isVisible());
  const cells = await page.locator('#laptops-8b table.sp-fallback td').allTextContents();
  for (const node of linkedScenario.nodes) assert.ok(cells.includes(node.name), `${node.name} in ${cells}`);
  await page.screenshot({ path: path.join(artifacts, 'embed-no-wasm.png'), fullPage: true });
  await page.close();
});

for (const file of ['stage-plan.js', 'stage-plan.css', 'stageplan_bg.wasm', 'stageplan_rest.wasm', 'stageplan.js', 'more/stageplan_bg.wasm', 'more/stageplan.js', 'node/stageplan_bg.wasm', 'node/stageplan.js']) {
  const bytes = fs.readFileSync(path.join(embed, file));
  metrics[`size_${file}`] = { raw: bytes.length, gzip: zlib.gzipSync(bytes, { level: 9 }).length };
}
fs.writeFileSync(path.join(artifacts, 'metrics-embed.json'), `${JSON.stringify(metrics, null, 2)}\n`);
console.log(JSON.stringify(metrics, null, 2));
await browser.close();
stopServer();
if (failures() > 0) {
  console.log(`${failures()} check(s) failed`);
  process.exit(1);
}
