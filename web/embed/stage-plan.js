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
// page's styles nor the widget's leak across. The planner (WebAssembly) loads once per page:
// `widget/`, the widget's own build, without the JS API's importers.

import init, { mountWidget } from './widget/stageplan.js';

const here = import.meta.url;
let loading;

/** Loads the planner once for every widget on the page. */
function planner() {
  loading ??= init({ module_or_path: new URL('widget/stageplan_bg.wasm', here) });
  return loading;
}

/** A readable table of the scenario, for when the planner is not (yet) there. */
function scenarioTable(text) {
  let scenario;
  try {
    scenario = JSON.parse(text);
  } catch {
    return null;
  }
  const table = document.createElement('table');
  table.className = 'sp-fallback';
  const model = scenario.model ?? {};
  const caption = table.createCaption();
  caption.textContent = `${model.preset ?? model.name ?? 'model'} · ${model.weights ?? 'bf16'} · context ${scenario.workload?.context ?? 4096}`;
  const head = table.createTHead().insertRow();
  for (const title of ['machine', 'device', 'memory']) {
    const cell = document.createElement('th');
    cell.scope = 'col';
    cell.textContent = title;
    head.append(cell);
  }
  const body = table.createTBody();
  for (const node of Array.isArray(scenario.nodes) ? scenario.nodes : []) {
    const row = body.insertRow();
    for (const value of [node.name, node.device ?? 'custom', node.memory ?? '']) {
      row.insertCell().textContent = `${value}${node.count && value === node.name ? ` × ${node.count}` : ''}`;
    }
  }
  return table;
}

class StagePlan extends HTMLElement {
  async connectedCallback() {
    if (this.shadowRoot) return;
    const root = this.attachShadow({ mode: 'open' });
    const style = document.createElement('link');
    style.rel = 'stylesheet';
    style.href = new URL('stage-plan.css', here).href;
    const fallback = document.createElement('div');
    fallback.append(document.createElement('slot'));
    const status = document.createElement('p');
    status.className = 'sp-status';
    status.setAttribute('role', 'status');
    status.textContent = 'Loading the planner…';
    root.append(style, fallback, status);

    let text;
    try {
      text = await this.scenarioText();
    } catch (error) {
      status.textContent = `No plan: ${error.message}`;
      return;
    }
    if (!this.querySelector('table')) {
      const table = scenarioTable(text);
      if (table) fallback.append(table);
    }
    try {
      await planner();
      const mount = document.createElement('div');
      mountWidget(mount, text);
      fallback.remove();
      status.remove();
      root.append(mount);
    } catch (error) {
      status.textContent = `The live planner could not run (${error.message ?? error}); the table shows the scenario.`;
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
