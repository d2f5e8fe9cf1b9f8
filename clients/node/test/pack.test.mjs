// What users get: `npm pack` makes a tarball that carries the proto (the
// same bytes as the repository's proto/), the CommonJS and ES module builds
// and their types; installed with `npm install <tarball>` in an empty folder
// outside the repository (its dependencies from the npm registry), it
// type-checks and compiles a TypeScript user's file (test/smoke/usage.mts),
// and both entry points acquire and release against a real broker. And
// `npm install --install-links <this folder>` works as well.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startBroker } from './helpers.mjs';

const run = promisify(execFile);
const here = fileURLToPath(new URL('..', import.meta.url));
const repoProto = fileURLToPath(new URL('../../../proto/leasehold/v1/leasehold.proto', import.meta.url));
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const quiet = ['--no-audit', '--no-fund', '--loglevel=error'];

test('npm pack makes a tarball that installs in an empty folder and runs against a real broker (and so does an install from the folder)', { timeout: 300_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-node-pack-'));
  const broker = await startBroker();
  try {
    // Pack (its prepare script builds: proto copied, tsc, the ES module entry point).
    const { stdout } = await run(npm, ['pack', '--json', '--pack-destination', dir, ...quiet], { cwd: here, maxBuffer: 1 << 24 });
    const [packed] = JSON.parse(stdout.slice(stdout.indexOf('[')));
    const files = packed.files.map((f) => f.path).sort();
    for (const f of ['proto/leasehold/v1/leasehold.proto', 'proto/google/rpc/status.proto', 'proto/google/rpc/error_details.proto', 'dist/index.js', 'dist/index.mjs', 'dist/index.d.ts', 'dist/index.d.mts', 'package.json', 'README.md']) {
      assert.ok(files.includes(f), `${f} missing from the tarball: ${files.join(' ')}`);
    }
    assert.ok(!files.some((f) => f.startsWith('test/') || f.startsWith('src/') || f.startsWith('node_modules/')), files.join(' '));
    const tarball = join(dir, packed.filename);

    // The proto in the tarball is the repository's, byte for byte.
    await run('tar', ['-xzf', tarball, '-C', dir]);
    assert.ok(readFileSync(join(dir, 'package', 'proto', 'leasehold', 'v1', 'leasehold.proto')).equals(readFileSync(repoProto)),
      'the packed proto differs from proto/leasehold/v1/leasehold.proto: run npm run build');

    // An empty project outside the repository installs it, with TypeScript
    // and Node's types as a TypeScript user has them.
    const app = join(dir, 'app');
    await run('mkdir', ['-p', app]);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'smoke', version: '1.0.0', private: true }));
    const typescript = JSON.parse(readFileSync(join(here, 'package.json'), 'utf8')).devDependencies.typescript;
    await run(npm, ['install', ...quiet, tarball, `typescript@${typescript}`, '@types/node@18'], { cwd: app, maxBuffer: 1 << 24 });
    copyFileSync(new URL('smoke/usage.mts', import.meta.url), join(app, 'usage.mts'));
    copyFileSync(new URL('smoke/usage.cjs', import.meta.url), join(app, 'usage.cjs'));
    copyFileSync(new URL('smoke/tsconfig.json', import.meta.url), join(app, 'tsconfig.json'));
    await run(process.execPath, [join(app, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', app], { cwd: app }).catch((err) => {
      throw new Error(`tsc failed on usage.mts against the installed package:\n${err.stdout}${err.stderr}`);
    });

    // ES module (compiled from TypeScript) and CommonJS, each against the broker.
    const esm = JSON.parse((await run(process.execPath, ['usage.mjs', broker.address], { cwd: app })).stdout);
    assert.equal(esm.held, true);
    assert.equal(esm.current, true);
    assert.equal(esm.busy, true);
    assert.equal(esm.afterRelease, 'RELEASED');
    assert.equal(esm.scopedReleased, true, 'await using released the lease');
    assert.equal(esm.listed, true, 'listPage and list found the lease');
    const cjs = JSON.parse((await run(process.execPath, ['usage.cjs', broker.address], { cwd: app })).stdout);
    assert.deepEqual({ ...cjs, fence: undefined }, { fence: undefined, lease: true, busy: true, free: true });
    assert.ok(BigInt(cjs.fence) > BigInt(esm.fence), 'one broker, one sequence: the later grant has the higher fence');

    // Installed from this folder (a copy built by its prepare script, not a
    // symlink into the checkout), as the README shows too.
    const fromFolder = join(dir, 'from-folder');
    await run('mkdir', ['-p', fromFolder]);
    writeFileSync(join(fromFolder, 'package.json'), JSON.stringify({ name: 'smoke-folder', version: '1.0.0', private: true }));
    await run(npm, ['install', ...quiet, '--install-links', here], { cwd: fromFolder, maxBuffer: 1 << 24 });
    copyFileSync(new URL('smoke/usage.cjs', import.meta.url), join(fromFolder, 'usage.cjs'));
    const folder = JSON.parse((await run(process.execPath, ['usage.cjs', broker.address], { cwd: fromFolder })).stdout);
    assert.deepEqual({ ...folder, fence: undefined }, { fence: undefined, lease: true, busy: true, free: true });
  } finally {
    await broker.kill();
    rmSync(dir, { recursive: true, force: true });
  }
});
