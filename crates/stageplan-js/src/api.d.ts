
// ---- stageplan's API (src/api.d.ts; the Node tests check results against it) ----

/** Plans a scenario: the same plan as `stageplan plan --format json`. Throws an `Error`
 *  with the CLI's message when the scenario is invalid. A scenario whose `model.file`
 *  names a model file, or gives an inline `config.json`, is planned by `plan` from
 *  `stageplan/more`. */
export function plan(scenario: Scenario | string): Plan;

/** Every model preset, device preset, weight format and KV-cache format. */
export function presets(): Catalog;

/** A scenario planned and laid out for drawing, as `<stage-plan>` shows it: bands across the
 *  layer axis, memory bars, stage rows and the verdict's texts. `enabled` switches scenario
 *  nodes off (one boolean per node; a node with `count` switches all its copies). */
export function planView(scenario: Scenario | string, options?: { enabled?: boolean[] }): PlanView;

/** The users chart of a scenario's plan, as `<stage-plan>`'s users panel draws it: p95 time
 *  to first token and per token for 1, 2, 4, … users of one server, and how many see
 *  their first token within 2 s (`stageplan plan --ttft 2s`). `enabled` as `planView`'s. */
export function usersView(scenario: Scenario | string, options?: { enabled?: boolean[] }): UsersView;
