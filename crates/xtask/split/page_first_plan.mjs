// The profile that splits the web planner's module (`crates/xtask/src/split.rs`): the page
// opened as a first visit opens it (no share link, no kept session), at desktop and at phone
// size, on the instrumented module, until its first plan is drawn and its start settles.
// Prints the index of every function that ran, one per line.
//
//   node page_first_plan.mjs DIR
//
// DIR is a built page (`dist/`) whose `stageplan-web_bg.wasm` is the instrumented module.
import path from 'node:path';

import { launch, serve } from '../../../tests/e2e/harness.mjs';

const dir = path.resolve(process.argv[2]);
const { origin, close } = await serve(dir);
const browser = await launch({ profile: 'stageplan-split-', viewport: { width: 1280, height: 1000 } });
const ran = new Set();
try {
  for (const viewport of [{ width: 1280, height: 1000 }, { width: 360, height: 740 }]) {
    const page = await browser.newPage();
    await page.setViewportSize(viewport);
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.addInitScript(() => addEventListener('TrunkApplicationStarted', (e) => { window.ranExports = e.detail.wasm; }));
    await page.goto(`${origin}/index.html`);
    await page.locator('#plan-headline').waitFor({ timeout: 60_000 });
    // What runs after the first plan while the rest loads: timers, effects, the first save.
    await page.waitForTimeout(2_000);
    const names = await page.evaluate(() => Object.keys(window.ranExports).filter((name) => name.startsWith('__ran') && window.ranExports[name].value === 1));
    if (errors.length > 0 || names.length === 0) throw new Error(`the page at ${viewport.width} px: ${names.length} functions ran; ${errors}`);
    for (const name of names) ran.add(name.slice('__ran'.length));
    await page.close();
  }
} finally {
  await browser.close();
  close();
}
process.stdout.write([...ran].join('\n') + '\n');
