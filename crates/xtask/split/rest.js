
// Appended by `cargo xtask embed` (crates/xtask/src/split.rs): this module is split in two.
// `stageplan_bg.wasm` holds what a widget's first plans run; `stageplan_rest.wasm` the rest,
// whose functions fill the first part's `split` table once instantiated. `init` and
// `initSync` load both, so every call answers at once; the widget loads the first part
// (`initFirst`) and runs its calls through `firstOrRest`.

let restSource, restLoaded = false, restLoading;

/** Where the rest is: `rest` if given, else beside the first part's URL, else beside this file. */
function restFrom(options) {
  if (options?.rest !== undefined) return options.rest;
  const first = options?.module_or_path ?? options;
  if (typeof first === 'string' || first instanceof URL) return new URL('stageplan_rest.wasm', first);
  return new URL('stageplan_rest.wasm', import.meta.url);
}

/** Instantiates the rest once: a URL or path is fetched, bytes or a `WebAssembly.Module` used. */
function loadRest() {
  restLoading ??= (async () => {
    let source = restSource;
    if (typeof source === 'string' || source instanceof URL) {
      const response = await fetch(source);
      if (!response.ok) throw new Error(`failed to fetch Wasm: ${response.status} ${response.statusText} fetching '${response.url}'`);
      source = await response.arrayBuffer();
    }
    await WebAssembly.instantiate(source, { first: wasm });
    restLoaded = true;
  })();
  restLoading.catch(() => { restLoading = undefined; });
  return restLoading;
}

/** Loads the first part only; `options` as the default export's, and `rest`: where the rest is. */
async function initFirst(options) {
  restSource ??= restFrom(options);
  return __wbg_init(options);
}

/** Loads the whole module: `{ module_or_path, rest }`, each optional (`rest`: its URL, bytes or
 *  `WebAssembly.Module`; beside the first part by default). */
async function initWhole(options) {
  const exports = await initFirst(options);
  await loadRest();
  return exports;
}

/** Loads the whole module at once: `{ module, rest }`, the two parts' bytes or `WebAssembly.Module`s. */
function initWholeSync(options) {
  if (options?.rest === undefined) {
    throw new Error('initSync: `rest` is missing: pass `{ module, rest }`, the bytes of stageplan_bg.wasm and of stageplan_rest.wasm (since 0.5.0)');
  }
  const exports = initSync({ module: options.module });
  if (!restLoaded) {
    const rest = options.rest instanceof WebAssembly.Module ? options.rest : new WebAssembly.Module(options.rest);
    new WebAssembly.Instance(rest, { first: wasm });
    restLoaded = true;
  }
  return exports;
}

/** Runs `call` (a call of this module's functions); if it reached the rest before the rest
 *  was loaded — a trap at an empty slot of the `split` table — loads the rest and runs it
 *  again. The planner's calls are pure, so the abandoned one leaves nothing behind but its
 *  heap blocks (lost once) and its stack, given back here. */
async function firstOrRest(call) {
  const stack = wasm.__stack_pointer.value;
  try {
    return call();
  } catch (error) {
    if (restLoaded || !(error instanceof WebAssembly.RuntimeError)) throw error;
    wasm.__stack_pointer.value = stack;
    await loadRest();
    return call();
  }
}

export { initWholeSync as initSync, initWhole as default, initFirst, firstOrRest };
