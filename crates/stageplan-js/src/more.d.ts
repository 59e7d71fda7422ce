
// ---- what only some pages need (src/more.d.ts): `stageplan/more`, and the Node build ----

/** Plans a scenario, with the header of the model file its `model.file` names. */
export function plan(scenario: Scenario | string, modelFile?: ModelFile): Plan;

/** `planView` for a scenario whose model (or draft) is an inline `config.json`, which the
 *  first module does not read: what `<stage-plan>` loads this module for. */
export function planView(scenario: Scenario | string, options?: { enabled?: boolean[] }): PlanView;

/** `usersView` for such a scenario: the users chart `<stage-plan>`'s users panel draws. */
export function usersView(scenario: Scenario | string, options?: { enabled?: boolean[] }): UsersView;

/** Reads a model file's header from its first bytes (`.gguf`, `.safetensors`,
 *  `config.json`): `{ model }` when they hold the whole header, else `{ needMore }`, the
 *  number of bytes to read from the start of the file before calling again. */
export function importHeader(bytes: Uint8Array, fileName: string, options?: HeaderOptions): Header;

/** A model's parameters, bytes per layer, type mix and KV bytes per token, from a preset
 *  name or a `config.json` (object or text): `stageplan model --format json`. */
export function model(presetOrConfig: string | HfConfig, options?: ModelOptions): ModelSummary;

/** Re-plans a changed cluster from the plan running now (what `plan` returned): the new
 *  plan and the fewest moves that reach it, as `stageplan replan` prints. */
export function replan(
  current: Plan | { stages: { node: string; layers: [number, number] }[] } | string,
  scenario: Scenario | string,
  options?: ReplanOptions,
): Replan;

/** How many users of one server meet `ttft`/`tpot` (at `percentile`, `p95` by
 *  default), or with `users` what that many see: the plan for them, what they saw, the
 *  targets held and how many meet them, as `stageplan plan --ttft … --format json`.
 *  Without options, what the scenario's `serving` asks. */
export function serve(scenario: Scenario | string, options?: ServeOptions): Answer;
