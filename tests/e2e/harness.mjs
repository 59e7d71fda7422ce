// What both browser tests share: their command-line flags, a static server that records
// every request (so a test can prove a page fetches nothing but its own files), headless
// Chromium, and named checks that report and count failures.

import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

/** `--name value` pairs of the command line. */
export const args = Object.fromEntries(process.argv.slice(2).reduce((pairs, a, i, all) => (a.startsWith('--') ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []));

export const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
export const artifacts = path.join(root, 'tests/e2e/artifacts');
fs.mkdirSync(artifacts, { recursive: true });

const types = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm', '.css': 'text/css', '.json': 'application/json' };

/** The worker's Content-Security-Policy, as `cargo xtask serve` sends it (one file for both). */
export const WORKER_CSP = fs.readFileSync(path.join(root, 'web/worker-csp.txt'), 'utf8').trim();

/** Serves `dir` on a free port of 127.0.0.1; `served` lists every request and its status. */
export async function serve(dir) {
  const served = [];
  const server = http.createServer((req, res) => {
    const pathname = decodeURIComponent(new URL(req.url, 'http://local').pathname);
    const file = path.join(dir, pathname === '/' ? 'index.html' : pathname);
    const ok = file.startsWith(dir) && fs.existsSync(file) && fs.statSync(file).isFile();
    served.push({ path: pathname, status: ok ? 200 : 404 });
    if (!ok) { res.writeHead(404); res.end(); return; }
    const headers = { 'content-type': types[path.extname(file)] ?? 'application/octet-stream', 'cache-control': 'no-store' };
    // The web planner's worker runs under its own policy, as `cargo xtask serve` sends it.
    if (/^\/stageplan-worker.*\.js$/.test(pathname)) headers['content-security-policy'] = WORKER_CSP;
    res.writeHead(200, headers);
    res.end(fs.readFileSync(file));
  }).listen(0, '127.0.0.1');
  await new Promise((resolve) => server.on('listening', resolve));
  return { origin: `http://127.0.0.1:${server.address().port}`, served, close: () => server.close() };
}

/** Debian's headless Chromium in a fresh profile; `webgpu` turns on its SwiftShader adapter. */
export function launch({ profile, viewport, webgpu = false }) {
  return chromium.launchPersistentContext(fs.mkdtempSync(path.join(os.tmpdir(), profile)), {
    executablePath: '/usr/bin/chromium',
    headless: true,
    viewport,
    args: ['--no-sandbox', '--disable-gpu', ...(webgpu ? ['--enable-unsafe-webgpu'] : []), '--disable-quic',
      '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--disable-dev-shm-usage'],
  });
}

let failed = 0;

/** Runs one named check, printing `ok` or `FAIL` with its time; a failure is counted, not thrown.
 *  `--only PATTERN` on the command line runs only the checks whose names match PATTERN (a
 *  regular expression). */
export async function check(name, body) {
  if (args.only !== undefined && !new RegExp(args.only).test(name)) {
    console.log(`skip ${name}`);
    return;
  }
  const started = Date.now();
  try {
    await body();
    console.log(`ok   ${name} (${Date.now() - started} ms)`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
  }
}

/** How many checks failed so far. */
export const failures = () => failed;
