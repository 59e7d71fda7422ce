// Type-checks the declarations against the way a docs site uses the API
// (`tsc -p tests/node`, strict). It is compiled, never run.
import init, { plan, planView, presets, type Plan, type PlanView, type Scenario, type ScenarioError } from '../../dist/embed/stageplan.js';
import initMore, { importHeader, model, replan, serve, type Answer } from '../../dist/embed/more/stageplan.js';

export async function example(bytes: Uint8Array): Promise<string> {
  await init();
  await initMore();
  const scenario: Scenario = {
    model: { preset: 'llama-3.1-70b', weights: 'q4_k_m' },
    workload: { context: 8192 },
    nodes: [
      { name: 'desk', device: 'rtx-4090' },
      { name: 'mac', memory: '64 GiB', bandwidth: '400 GB/s', compute: '27 TFLOPS' },
    ],
  };
  const result: Plan = plan(scenario);
  const first = result.stages[0];
  const lines = [`${result.tokens_per_s.toFixed(1)} tok/s`, `${first.node}: layers ${first.layers[0]}–${first.layers[1]}`];
  lines.push(`${first.memory.total} of ${first.memory.budget} bytes, ${first.time.bound}-bound`);
  const latency: number | null = result.latency_s;
  if (latency !== null) lines.push(`${latency * 1000} ms per token`);
  for (const b of result.baselines ?? []) lines.push(`${b.policy}: ${b.feasible ? b.tokens_per_s : b.problem}`);
  const summary = model('llama-3.1-8b', { weights: 'q8_0', kv: 'q8_0' });
  lines.push(`${summary.params} params, ${summary.layers.length} layers, KV ${summary.kv_bytes_per_token} B/token`);
  const header = importHeader(bytes, 'model.gguf', { fileSize: 1 << 30 });
  lines.push('needMore' in header ? `read ${header.needMore} bytes` : header.model.name);
  const devices = presets().devices.filter((d) => d.kind === 'gpu').map((d) => d.name);
  const next = replan(result, { ...scenario, nodes: scenario.nodes.slice(1) }, { tolerance: 0.05 });
  lines.push(...next.moves.map((m) => `${m.from ?? 'storage'} → ${m.to}: ${m.bytes}`), devices.join(', '));
  try {
    plan({ ...scenario, nodes: [{ name: 'x', memory: '0 GiB' }] });
  } catch (e) {
    const error = e as ScenarioError;
    if (error.path !== undefined) lines.push(`${error.path}: ${error.value ?? ''} ${error.message}`);
  }
  const served: Answer = serve(scenario, { ttft: '2 s', tpot: 0.08, percentile: 'p95' });
  if (served.capacity) lines.push(`${served.capacity.users} users fit; then ${served.capacity.limit.reason}`);
  if (served.served) lines.push(`p95 first token ${served.served.ttft_s[1]} s`);
  const view: PlanView = planView(scenario, { enabled: [true, false] });
  lines.push(view.headline, ...view.rows.map((r) => `${r.node} ${r.layers} ${r.time} ${r.bound}`));
  lines.push(...view.bars.flatMap((b) => b.segments.map((s) => `${s.part} ${s.pct.toFixed(1)}% ${s.bytes}`)));
  return lines.join('\n');
}
