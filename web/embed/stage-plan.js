// <stage-plan>: a live, editable plan for documentation pages.
//
//   <script type="module" src="stage-plan.js"></script>
//   <stage-plan>
//     <script type="application/json">{"model": {"preset": "llama-3.1-8b"}, "nodes": [...]}</script>
//     <!-- optional: a table shown while loading, and kept if WebAssembly cannot run -->
//   </stage-plan>
//   <stage-plan src="scenario.json"></stage-plan>
//
// Each element renders into its own shadow root, so several can share a page and neither the
// page's styles nor the widget's leak across. The planner is the package's one module
// (`stageplan.js`), loaded once per page and shared with any API call the page makes; a
// widget loads its first part and the rest only when an edit needs it. What
// the element draws — positions, colours, every text — is the planner's `planView`; this
// file only puts it in the DOM and turns edits into a changed scenario.

import init, { firstOrRest, initFirst, planView, presets, usersView } from './stageplan.js';

const here = import.meta.url;
const parts = { module_or_path: new URL('stageplan_bg.wasm', here), rest: new URL('stageplan_rest.wasm', here) };
let loading;
let first;

/** Loads the whole planner once for the page: a page that also calls the API
 *  (`import { plan } from 'stageplan'`) awaits this first, and every call answers at once.
 *  The widgets share its module. */
export function ready() {
  loading ??= init(parts);
  return loading;
}

/** The planner's first part, what a widget's first plan runs: a widget's calls go through
 *  `firstOrRest`, which loads the rest the first time a call needs it. */
function firstPart() {
  first ??= initFirst(parts);
  return first;
}

/** The planner that reads `scenario`: `view` (`planView`) and `users` (`usersView`), each
 *  returning a promise. This module's, or for a model (or draft) given as an inline
 *  `config.json`, whose reader is not in it, that of `stageplan/more`, loaded the first time
 *  a widget needs it. */
let more;
async function viewerFor(scenario) {
  const first = {
    view: (s, options) => firstOrRest(() => planView(s, options)),
    users: (s, options) => firstOrRest(() => usersView(s, options)),
  };
  try {
    await first.view(scenario);
    return first;
  } catch (error) {
    const config = error.path === 'model.config' || error.path === 'model.draft.config';
    if (!config || !String(error.message).includes('stageplan/more')) throw error;
    more ??= import('./more/stageplan.js').then(async (module) => {
      await module.default({ module_or_path: new URL('more/stageplan_bg.wasm', here) });
      return module;
    });
    const module = await more;
    module.planView(scenario);
    return { view: async (s, options) => module.planView(s, options), users: async (s, options) => module.usersView(s, options) };
  }
}

/** An element with attributes and children (strings become text: nothing is parsed as HTML). */
function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === false || value === undefined || value === null) continue;
    node.setAttribute(name, value === true ? '' : String(value));
  }
  node.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

/** A machine's name set apart from the text around it (`<bdi>`): a name holding a
 *  right-to-left override (U+202E) must not reverse the layers after it. `text` is the
 *  core's, beginning with `name` or not. */
function named(text, name) {
  return typeof name === 'string' && name !== '' && text.startsWith(name)
    ? [el('bdi', {}, name), text.slice(name.length)]
    : [text];
}

/** The core writes names and values between backticks; they are set as code (isolated
 *  from the text around them by the style sheet, as names are). */
function prose(text) {
  const parts = text.split('`');
  if (parts.length % 2 === 0) return [text];
  return parts.map((part, i) => (i % 2 === 1 ? el('code', {}, part) : part)).filter((p) => p !== '');
}

/** A readable table of the scenario, for when the planner is not (yet) there. */
function scenarioTable(scenario) {
  const table = el('table', { class: 'sp-fallback' });
  const model = scenario.model ?? {};
  table.createCaption().append(el('bdi', {}, `${model.preset ?? model.name ?? 'model'}`), ` · ${model.weights ?? 'bf16'} · context ${scenario.workload?.context ?? 4096}`);
  const head = table.createTHead().insertRow();
  for (const title of ['machine', 'device', 'memory']) head.append(el('th', { scope: 'col' }, title));
  const body = table.createTBody();
  for (const node of Array.isArray(scenario.nodes) ? scenario.nodes : []) {
    // Whatever the scenario holds: a machine that is not an object is a row of its own text.
    const machine = node !== null && typeof node === 'object' ? node : { name: JSON.stringify(node) };
    const row = body.insertRow();
    for (const value of [machine.name, machine.device ?? 'custom', machine.memory ?? '']) {
      row.insertCell().append(el('bdi', {}, `${value ?? ''}`), machine.count && value === machine.name ? ` × ${machine.count}` : '');
    }
  }
  return table;
}

/** The stage diagram and the stage table, as the planner laid them out. */
function stages(view) {
  const diagram = el('div', { class: 'diagram', role: 'img', 'aria-label': `stage diagram: ${view.bands.map((b) => b.label).join('; ')}` },
    view.bands.map((b) => {
      const band = el('div', { class: `stage-band${b.bottleneck ? ' bottleneck' : ''}`, 'data-node': b.node, title: b.label },
        el('span', {}, named(b.label, b.node), b.bottleneck ? ' ◀ bottleneck' : ''));
      band.style.left = `${b.left_pct.toFixed(4)}%`;
      band.style.width = `${b.width_pct.toFixed(4)}%`;
      band.style.background = `hsl(${b.hue} 70% 78%)`;
      return band;
    }));
  const rows = view.rows.map((row, i) => {
    const bar = view.bars[i];
    const band = view.bands[i];
    const track = el('div', { class: `bar${bar.over ? ' over' : ''}`, role: 'img', 'aria-label': `${bar.used} of ${bar.budget} used, ${bar.headroom}` },
      bar.segments.map((s) => {
        const segment = el('span', { class: `segment ${s.part.replace('/', '-')}`, title: `${s.part}: ${s.bytes}` });
        segment.style.width = `${s.pct.toFixed(4)}%`;
        return segment;
      }));
    // A machine with system RAM: what the RAM holds, beneath the GPU's bar.
    const ram = view.ram_bars[i];
    const ramText = ram ? el('small', { class: 'ram-kept' }, `RAM ${ram.used} / ${ram.budget} · ${row.ram}`) : null;
    return el('tr', { class: `stage-row${band.bottleneck ? ' bottleneck' : ''}`, 'data-node': row.node },
      el('th', { scope: 'row' }, el('bdi', {}, row.node), band.bottleneck ? el('span', { class: 'bottleneck-mark' }, ' ◀ bottleneck') : null),
      el('td', { class: 'layers' }, row.layers),
      el('td', {}, track, el('small', {}, `${bar.used} / ${bar.budget} · ${bar.headroom}`), ramText),
      el('td', { class: 'time' }, row.time),
      el('td', {}, row.bound));
  });
  const table = el('table', { class: 'stages' },
    el('caption', { class: 'visually-hidden' }, 'stages'),
    el('thead', {}, el('tr', {}, ['node', 'layers', 'memory', 'time/step', 'bound'].map((t) => el('th', { scope: 'col' }, t)))),
    el('tbody', {}, rows));
  // Focusable: a region that scrolls sideways on a phone must be reachable by keyboard.
  return [diagram, el('div', { class: 'table-scroll', tabindex: 0, role: 'region', 'aria-label': 'stages' }, table)];
}

/** An SVG element with attributes and children (strings become text). */
function svg(tag, attributes = {}, ...children) {
  const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  node.append(...children);
  return node;
}

/** The users chart as the planner laid it out (`usersView`), its legend and its count. */
function usersChart(users) {
  const found = el('p', { class: 'sp-users-found' }, users.found);
  const chart = users.chart;
  if (!chart) return [found];
  const { width, height } = users;
  const marks = [];
  if (chart.target_y !== null && chart.target_y !== undefined) {
    marks.push(svg('line', { x1: 0, x2: width, y1: chart.target_y, y2: chart.target_y }),
      svg('text', { x: 4, y: chart.target_y - 4 }, 'first token 2 s'));
  }
  if (chart.limit) {
    marks.push(svg('line', { x1: chart.limit.x, x2: chart.limit.x, y1: 8, y2: height - 20 }),
      svg('text', { x: chart.limit.x - 4, y: 16, 'text-anchor': 'end' }, chart.limit.label));
  }
  marks.push(svg('polyline', { class: 'ttft', points: chart.ttft }), svg('polyline', { class: 'tpot', points: chart.tpot }));
  for (const tick of chart.ticks) marks.push(svg('text', { x: tick.x, y: height - 6, 'text-anchor': 'middle' }, tick.label));
  return [
    svg('svg', { class: 'sp-users-chart', viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': users.label }, ...marks),
    el('p', { class: 'sp-details' }, el('span', { class: 'key ttft' }), users.legend[0], el('span', { class: 'key tpot' }), users.legend[1], ' · users along the bottom'),
    found,
  ];
}

/** One widget: the scenario as edited, and which machines are on. */
class Widget {
  constructor(root, scenario, catalog, viewer) {
    this.root = root;
    this.planView = viewer.view;
    this.usersView = viewer.users;
    this.scenario = scenario;
    this.enabled = scenario.nodes.map(() => true);
    this.catalog = catalog;
    this.box = el('div', { class: 'sp-widget' });
    root.append(this.box);
    this.render();
  }

  /** Plans the edited scenario and draws it; a planner error is shown in its place. A
   *  later edit's drawing wins over an earlier one still waiting for the planner's rest. */
  async render() {
    this.drawing = (this.drawing ?? 0) + 1;
    const drawing = this.drawing;
    let view;
    let error;
    try {
      view = await this.planView(this.scenario, { enabled: this.enabled });
    } catch (e) {
      error = e.message ?? String(e);
    }
    if (drawing !== this.drawing) return;
    const focused = this.root.activeElement?.dataset?.focus;
    this.box.replaceChildren(this.controls(view), this.machines(),
      ...(error ? [el('p', { class: 'sp-error', role: 'alert' }, prose(error))] : this.results(view)));
    // Keep the keyboard where it was across a redraw.
    if (focused) this.box.querySelector(`[data-focus="${CSS.escape(focused)}"]`)?.focus();
  }

  edit(change) {
    change(this.scenario);
    this.render();
  }

  controls(view) {
    const model = this.scenario.model ?? {};
    const weights = model.file ? null : el('label', { class: 'sp-field' }, 'weights ',
      el('select', { class: 'sp-weights', 'data-focus': 'weights' },
        this.catalog.weights.map((w) => el('option', { value: w, selected: w === (model.weights ?? 'bf16') }, w))));
    weights?.querySelector('select').addEventListener('change', (e) => this.edit((s) => { s.model = { ...s.model, weights: e.target.value }; }));
    const context = el('input', { class: 'sp-context', type: 'number', min: 1, step: 1024, 'data-focus': 'context', 'aria-label': 'context' });
    context.value = this.scenario.workload?.context ?? '';
    context.addEventListener('change', () => this.edit((s) => {
      s.workload = { ...s.workload, context: context.value === '' ? undefined : Number(context.value) };
    }));
    return el('div', { class: 'sp-controls' },
      el('span', { class: 'sp-model' }, el('bdi', {}, view?.model ?? model.preset ?? model.name ?? '')),
      weights,
      el('label', { class: 'sp-field' }, 'context ', context));
  }

  machines() {
    const list = el('ul', { class: 'sp-nodes', 'aria-label': 'machines' });
    this.scenario.nodes.forEach((node, i) => {
      const toggle = el('input', { type: 'checkbox', checked: this.enabled[i], 'data-focus': `on:${node.name}` });
      toggle.addEventListener('change', () => { this.enabled[i] = toggle.checked; this.render(); });
      const remove = el('button', { type: 'button', class: 'sp-remove', 'aria-label': `remove ${node.name}`, 'data-focus': `remove:${node.name}` }, '×');
      remove.addEventListener('click', () => {
        this.enabled.splice(i, 1);
        this.edit((s) => s.nodes.splice(i, 1));
      });
      list.append(el('li', { class: 'sp-node', 'data-node': node.name },
        el('label', {}, toggle, ' ', el('bdi', {}, node.name), ' ', el('small', {}, el('bdi', {}, node.device ?? node.memory ?? ''))), remove));
    });
    const add = el('select', { class: 'sp-add-device', 'aria-label': 'add a machine', 'data-focus': 'add' },
      el('option', { value: '', selected: true }, '+ add a machine'),
      this.catalog.devices.map((d) => el('option', { value: d.name }, d.title)));
    add.addEventListener('change', () => {
      const device = add.value;
      if (!device) return;
      const taken = new Set(this.scenario.nodes.map((n) => n.name));
      let name = device;
      for (let k = 2; taken.has(name); k += 1) name = `${device}-${k}`;
      this.enabled.push(true);
      this.edit((s) => s.nodes.push({ name, device }));
    });
    list.append(el('li', { class: 'sp-add' }, add));
    return list;
  }

  results(view) {
    const best = view.best_other;
    return [
      el('p', { class: `sp-headline${view.feasible ? '' : ' infeasible'}` }, prose(view.headline)),
      ...stages(view),
      el('p', { class: 'sp-details' }, view.details.map((line) => el('span', { class: 'line' }, prose(line)))),
      best ? el('p', { class: 'sp-baseline' }, `best split other tools make here (${best.policy}): ${best.figure}`) : null,
      this.users(),
    ].filter(Boolean);
  }

  /** How many users fit, and what they see: simulated when opened (the planner's rest
   *  loads then), kept open across edits. */
  users() {
    const body = el('div', {});
    const panel = el('details', { class: 'sp-users', open: this.usersOpen },
      el('summary', { 'data-focus': 'users' }, 'Users against latency'), body);
    let filled = false;
    const fill = async () => {
      if (filled) return;
      filled = true;
      const drawing = this.drawing;
      body.replaceChildren(el('p', { class: 'sp-status', role: 'status' }, 'Simulating…'));
      let drawn;
      try {
        drawn = usersChart(await this.usersView(this.scenario, { enabled: this.enabled }));
      } catch (e) {
        drawn = [el('p', { class: 'sp-error' }, prose(e.message ?? String(e)))];
      }
      if (drawing === this.drawing) body.replaceChildren(...drawn);
    };
    panel.addEventListener('toggle', () => {
      this.usersOpen = panel.open;
      if (panel.open) fill();
    });
    if (this.usersOpen) fill();
    return panel;
  }
}

class StagePlan extends HTMLElement {
  async connectedCallback() {
    if (this.shadowRoot) return;
    const root = this.attachShadow({ mode: 'open' });
    const style = el('link', { rel: 'stylesheet', href: new URL('stage-plan.css', here).href });
    const fallback = el('div', {}, el('slot'));
    const status = el('p', { class: 'sp-status', role: 'status' }, 'Loading the planner…');
    root.append(style, fallback, status);

    let scenario;
    try {
      scenario = JSON.parse(await this.scenarioText());
      if (!scenario || typeof scenario !== 'object' || !Array.isArray(scenario.nodes)) {
        throw new Error('the scenario is not an object with `nodes`');
      }
    } catch (error) {
      status.textContent = `No plan: ${error.message}`;
      return;
    }
    let loaded = false;
    try {
      // Inside the `try`: a scenario the table cannot show still ends in a message.
      if (!this.querySelector('table')) fallback.append(scenarioTable(scenario));
      await firstPart();
      loaded = true;
      // A scenario that does not plan keeps the fallback and says why.
      const viewer = await viewerFor(scenario);
      const catalog = await firstOrRest(presets);
      fallback.remove();
      status.remove();
      new Widget(root, scenario, catalog, viewer);
    } catch (error) {
      status.textContent = loaded
        ? `No plan: ${error.message ?? error}`
        : `The live planner could not run (${error.message ?? error}); the table shows the scenario.`;
    }
  }

  /** The scenario's JSON text: inline, or fetched from `src` (same origin as the page). */
  async scenarioText() {
    const inline = this.querySelector('script[type="application/json"]');
    if (inline) return inline.textContent;
    const src = this.getAttribute('src');
    if (!src) throw new Error('give a scenario in <script type="application/json"> or a src attribute');
    const response = await fetch(new URL(src, document.baseURI));
    if (!response.ok) throw new Error(`${src}: HTTP ${response.status}`);
    return response.text();
  }
}

customElements.define('stage-plan', StagePlan);
