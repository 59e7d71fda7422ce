// The profile that splits the widget's module (`crates/xtask/src/split.rs`): what a widget
// runs to draw its first plan (`web/embed/stage-plan.js`: the catalog for its controls, then
// the plan's view, then the view with every machine on) for each scenario given, on the
// instrumented module. Prints the index of every function that ran, one per line.
//
//   node first_plans.mjs DIR SCENARIO...
//
// DIR holds the instrumented `stageplan_bg.wasm` and wasm-bindgen's glue `stageplan.js`; a
// SCENARIO is a JSON file, or an HTML page whose widgets' inline scenarios are read.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [dir, ...files] = process.argv.slice(2);
const glue = await import(pathToFileURL(join(dir, 'stageplan.js')));
const wasm = glue.initSync({ module: readFileSync(join(dir, 'stageplan_bg.wasm')) });

/** A JSON file's scenario, or each inline scenario of an HTML page's widgets. */
function scenarios(file) {
  const text = readFileSync(file, 'utf8');
  if (!file.endsWith('.html')) return [text];
  return [...text.matchAll(/<script type="application\/json">([\s\S]*?)<\/script>/g)].map((m) => m[1]);
}

glue.presets();
let planned = 0;
for (const file of files) {
  for (const text of scenarios(file)) {
    const scenario = JSON.parse(text);
    glue.planView(scenario);
    glue.planView(scenario, { enabled: scenario.nodes.map(() => true) });
    planned += 1;
  }
}
const ran = Object.keys(wasm).filter((name) => name.startsWith('__ran') && wasm[name].value === 1);
if (planned === 0 || ran.length === 0) throw new Error(`${planned} scenarios planned, ${ran.length} functions ran`);
process.stdout.write(ran.map((name) => name.slice('__ran'.length)).join('\n') + '\n');
