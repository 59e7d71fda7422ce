// The example page's own use of the JS API: the planner module the widgets loaded, shared.
import { ready } from './stage-plan.js';
import { plan } from './stageplan.js';

await ready();
const result = plan({
  model: { preset: 'llama-3.1-70b', weights: 'q4_k_m' },
  workload: { context: 8192 },
  nodes: [{ name: 'desk', device: 'rtx-4090' }, { name: 'gamer', device: 'rtx-3090' }],
});
document.getElementById('api-example').textContent =
  `desk + gamer: ${Number(result.stream_tokens_per_s.toPrecision(3))} tok/s for one user, ${result.stages.length} stages`;
