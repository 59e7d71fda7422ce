
// Appended by `cargo xtask web` (crates/xtask/src/split.rs): the page's module in two parts.
// `stageplan-web_bg.wasm` holds what the page runs to draw its first plan from the example;
// `stageplan-web_rest.wasm` the rest, whose functions fill the first part's `split` table.
// Started from the example, the page starts on the first part, answers no input (`inert`)
// until the rest is loaded, and asks for the rest once the first plan is drawn. A share link
// or a kept session starts once both are loaded. A call that reaches the rest before it is
// loaded cannot run again in a page half-drawn: the page starts over, with both parts.

/** The kept session's key (`crates/stageplan-web/src/app.rs`), and the mark of a start that
 *  reached the rest too early: this tab then starts with both parts. */
const SESSION = 'stageplan.session';
const WHOLE = 'stageplan.whole';
let restLoaded = false;
let restLoading;

function loadRest() {
  restLoading ??= (async () => {
    performance.mark('stageplan-rest');
    const response = await fetch(new URL('stageplan-web_rest.wasm', import.meta.url));
    if (!response.ok) throw new Error(`failed to fetch Wasm: ${response.status} ${response.statusText} fetching '${response.url}'`);
    await WebAssembly.instantiate(await response.arrayBuffer(), { first: wasm });
    restLoaded = true;
  })();
  return restLoading;
}

function stored(storage, key) {
  try {
    return globalThis[storage].getItem(key);
  } catch {
    return null;
  }
}

/** A call reached the rest before it loaded: start over with both parts (once per tab). */
function startOver(event) {
  const error = event.error ?? event.reason;
  if (restLoaded || !(error instanceof WebAssembly.RuntimeError) || stored('sessionStorage', WHOLE) !== null) return false;
  try {
    sessionStorage.setItem(WHOLE, '1');
  } catch {
    return false;
  }
  event.preventDefault?.();
  location.reload();
  return true;
}

/** In place of wasm-bindgen's start: see above. */
function startPage() {
  const fromExample = location.hash.replace(/^#/, '') === '' && stored('localStorage', SESSION) === null
    && stored('sessionStorage', WHOLE) === null;
  if (!fromExample) {
    loadRest().catch((error) => console.error(error)).finally(() => wasm.__wbindgen_start());
    return;
  }
  addEventListener('error', startOver);
  addEventListener('unhandledrejection', startOver);
  document.body.inert = true;
  try {
    wasm.__wbindgen_start();
  } catch (error) {
    if (startOver({ error })) return;
    throw error;
  } finally {
    // The first plan is drawn in this task; the rest is asked for after it is painted.
    requestAnimationFrame(() => setTimeout(() => {
      loadRest().catch((error) => console.error(error)).finally(() => { document.body.inert = false; });
    }, 0));
  }
}
