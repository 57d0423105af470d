// The package as users get it: the CommonJS build equals the ES modules, the declarations name
// every export, and `npm pack` makes a tarball that installs offline into a new project and runs
// there with `import` and with `require` (and, when npm can fetch TypeScript, type-checks).
import assert from "node:assert/strict";
import { execFile, spawnSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";

import * as esm from "../index.js";
import { build, bundle } from "../tools/build-cjs.js";
import {
  PACKAGE_DIR, REPO_DIR, clientParameters, readVectors, replayHeavyHitterVector, wireForm,
} from "../testing/helpers.js";

const run = promisify(execFile);
const NPM = process.platform === "win32" ? "npm.cmd" : "npm";
const NPM_SKIP = spawnSync(NPM, ["--version"], { stdio: "ignore" }).status === 0 ? false
  : "npm is not installed: packing and installing the tarball need it";
const temporary = [];
const tempDir = (prefix) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  temporary.push(dir);
  return dir;
};
after(() => temporary.forEach((dir) => fs.rmSync(dir, { recursive: true, force: true })));

/** The vectors' reports made by a module namespace (the ES modules or the CommonJS build). */
function replayVectors(lib) {
  for (const c of readVectors("client_reports.json")) {
    const oracle = lib.makeOracle(c.oracle, clientParameters(c.parameters));
    const extra = c.column === undefined ? undefined : { column: c.column };
    assert.deepEqual(wireForm(oracle.perturb(c.value, new lib.SplitMix64TestingRandom(c.client_seed), extra)),
      c.report, JSON.stringify(c));
  }
  for (const c of readVectors("heavy_hitter_reports.json")) {
    assert.deepEqual(replayHeavyHitterVector(lib, c).wire, c.report, JSON.stringify(c));
  }
}

test("the CommonJS build exports what the ES modules export and replays the test vectors", () => {
  const out = build(tempDir("ldpflow-js-cjs-"));
  const cjs = createRequire(import.meta.url)(path.join(out, "index.cjs"));
  assert.deepEqual(Object.keys(cjs).sort(), Object.keys(esm).sort());
  for (const name of Object.keys(esm)) assert.equal(typeof cjs[name], typeof esm[name], name);
  assert.equal(cjs.VERSION, esm.VERSION);
  replayVectors(cjs);
  // The secure default works there too.
  const grr = cjs.makeOracle("grr", { epsilon: 1, domainSize: 10 });
  assert.ok(Number.isInteger(grr.perturb(3).value));
});

test("the build refuses what it cannot convert exactly", () => {
  const sources = {
    "index.js": 'export { a } from "./src/a.js";\n',
    "src/a.js": 'import { b } from "./b.js";\nexport const a = b + 1;\n',
    "src/b.js": "export const b = 1;\n",
  };
  const bundleOf = (extra) => bundle((id) => ({ ...sources, ...extra })[id]);
  const cjs = bundleOf({});
  const module = { exports: {} };
  new Function("module", cjs)(module);  // eslint-disable-line no-new-func
  assert.deepEqual({ ...module.exports }, { a: 2 });
  for (const [source, reason] of [
    ['export * from "./x.js";\n', /cannot convert "export \* from/],
    ['import b from "./b.js";\n', /cannot convert "import b from/],
    ["export default 1;\n", /cannot convert "export default 1;"/],
    ["const here = import.meta.url;\n", /cannot convert "import.meta"/],
    ['import { x } from "left-pad";\n', /imports left-pad; the package has no dependencies/],
    ['import { a } from "./a.js";\nexport const b = 1;\n', /import cycle: index.js -> src\/a.js -> src\/b.js -> src\/a.js/],
  ]) {
    assert.throws(() => bundleOf({ "src/b.js": source }), reason, source);
  }
});

test("index.d.ts declares exactly the names the package exports", () => {
  const text = fs.readFileSync(path.join(PACKAGE_DIR, "index.d.ts"), "utf8");
  const values = [...text.matchAll(/^export declare (?:abstract )?(?:class|function|const) ([A-Za-z_$][\w$]*)/gm)]
    .map((m) => m[1]);
  assert.deepEqual([...new Set(values)].sort(), Object.keys(esm).sort());
});

test("the package's LICENSE is the repository's (Apache-2.0)", () => {
  const license = fs.readFileSync(path.join(PACKAGE_DIR, "LICENSE"));
  assert.ok(license.equals(fs.readFileSync(path.join(REPO_DIR, "LICENSE"))));
  assert.match(license.toString(), /Apache License\s+Version 2\.0/);
  const manifest = JSON.parse(fs.readFileSync(path.join(PACKAGE_DIR, "package.json"), "utf8"));
  assert.equal(manifest.license, "Apache-2.0");
  assert.equal(manifest.version, esm.VERSION);
  assert.deepEqual(manifest.dependencies ?? {}, {});
});

// The example a new user runs: one olh report and one spm report, both as JSON lines.
const EXAMPLE = `
const olh = makeOracle("olh", { epsilon: 1, domainSize: 1024 });
const spm = makeHeavyHitters("spm", { topK: 8, valueBits: 32, epsilon: 3 });
const meta = (userId) => ({ userId, reportId: "r-" + userId, eventTime: 1767225600000 });
const lines = [
  toJsonLine(olh, olh.perturb(751, new SplitMix64TestingRandom(1)), meta("u1")),
  toJsonLine(spm, spm.perturb(2812728242, "vector-user-2-1", new SplitMix64TestingRandom(1)),
    meta("vector-user-2-1")),
  toJsonLine(olh, olh.perturb(751), meta("u2")).length > 0 ? "secure default ok\\n" : "",
];
process.stdout.write(VERSION + "\\n" + lines.join(""));
`;
const NAMES = "VERSION, SplitMix64TestingRandom, makeHeavyHitters, makeOracle, toJsonLine";

describe("npm pack, then an offline install into a new project", { skip: NPM_SKIP }, () => {
  let tarball;
  let files;
  let project;

  before(async () => {
    const packs = tempDir("ldpflow-js-pack-");
    const { stdout } = await run(NPM, ["pack", "--json", "--pack-destination", packs],
      { cwd: PACKAGE_DIR, timeout: 120000 });
    const [info] = JSON.parse(stdout.slice(stdout.indexOf("[")));
    tarball = path.join(packs, info.filename);
    files = info.files.map((f) => f.path).sort();
    project = tempDir("ldpflow-js-consumer-");
    fs.writeFileSync(path.join(project, "package.json"),
      JSON.stringify({ name: "consumer", version: "1.0.0", private: true }));
    await run(NPM, ["install", tarball, "--offline", "--no-audit", "--no-fund"],
      { cwd: project, timeout: 120000 });
  });

  test("the tarball holds the modules, the CommonJS build, the declarations, README and LICENSE", () => {
    assert.equal(path.basename(tarball), `ldpflow-client-${esm.VERSION}.tgz`);
    for (const name of ["LICENSE", "README.md", "package.json", "index.js", "index.d.ts",
      "dist/index.cjs", "dist/index.d.cts", "src/pem.js", "src/spm.js", "src/mcm.js",
      "src/treehist.js", "src/sfp.js"]) {
      assert.ok(files.includes(name), `${name} missing from ${files.join(", ")}`);
    }
    assert.deepEqual(files.filter((f) => /^(test|testing|tools)\//.test(f)), []);
  });

  test("the installed package runs the example with import and with require", async () => {
    fs.writeFileSync(path.join(project, "example.mjs"),
      `import { ${NAMES} } from "ldpflow-client";\n${EXAMPLE}`);
    fs.writeFileSync(path.join(project, "example.cjs"),
      `const { ${NAMES} } = require("ldpflow-client");\n${EXAMPLE}`);
    const viaImport = (await run(process.execPath, ["example.mjs"], { cwd: project })).stdout;
    const viaRequire = (await run(process.execPath, ["example.cjs"], { cwd: project })).stdout;
    assert.equal(viaImport, viaRequire);
    const [version, olhLine, spmLine, secure] = viaImport.trim().split("\n");
    assert.equal(version, esm.VERSION);
    assert.equal(secure, "secure default ok");
    // The seeded reports are the vectors': olh's from client_reports.json's stream 1, spm's
    // from heavy_hitter_reports.json (the value is that case's).
    const exact = (line) => JSON.parse(line.replace(/("seed\w*":)(-?\d+)/g, '$1"$2"'));
    const olh = exact(olhLine);
    assert.deepEqual([olh.oracle, olh.hash_range, olh.seed], ["olh", 4, "-7995527694508729151"]);
    const spm = exact(spmLine);
    const c = readVectors("heavy_hitter_reports.json").find((v) => v.user_id === "vector-user-2-1");
    assert.equal(c.value, 2812728242);
    const unsigned = (s) => BigInt.asUintN(64, BigInt(s)).toString();
    assert.deepEqual([unsigned(spm.seed), spm.bucket, spm.spm.group, unsigned(spm.spm.seed_a),
      spm.spm.bucket_a, unsigned(spm.spm.seed_b), spm.spm.bucket_b],
    [c.report.seed, c.report.bucket, c.report.group, c.report.seed_a, c.report.bucket_a,
      c.report.seed_b, c.report.bucket_b]);
    // Resolved from the project's node_modules, not from this checkout.
    const resolved = createRequire(path.join(project, "x.js")).resolve("ldpflow-client");
    assert.equal(resolved, fs.realpathSync(path.join(project, "node_modules", "ldpflow-client", "dist", "index.cjs")));
  });

  test("a TypeScript consumer type-checks against the declarations (import and require)", async (t) => {
    const ts = tempDir("ldpflow-js-typescript-");
    try {
      await run(NPM, ["install", "--no-save", "--no-audit", "--no-fund", "--prefix", ts, "typescript@5"],
        { timeout: 180000 });
    } catch (error) {
      t.skip(`TypeScript could not be installed from the npm registry: ${String(error.stderr ?? error).slice(0, 200)}`);
      return;
    }
    const tsc = path.join(ts, "node_modules", "typescript", "bin", "tsc");
    const typed = `
const olh = makeOracle("olh", { epsilon: 1, domainSize: 1024 });
const report: { seed: bigint; bucket: number } | object = olh.perturb(751);
const spm: SegmentPairsMethod = makeHeavyHitters("spm", { topK: 8, valueBits: 32, epsilon: 3, numSegments: 4 });
const hh: HeavyHitterReport = spm.perturb(7n, "user", new SplitMix64TestingRandom(1));
const line: string = toJsonLine(spm, hh, { userId: "user" });
const groups: number = makeHeavyHitters("sfp", { topK: 4, valueBits: 64, epsilon: 2, hashSeed: 5n }).numGroups;
export const out = [report, line, groups, spm.pairs.length];
`;
    const types = "SegmentPairsMethod, HeavyHitterReport, SplitMix64TestingRandom, makeHeavyHitters, makeOracle, toJsonLine";
    fs.writeFileSync(path.join(project, "consumer.mts"), `import { ${types} } from "ldpflow-client";\n${typed}`);
    fs.writeFileSync(path.join(project, "consumer.cts"),
      `import lib = require("ldpflow-client");\nimport { ${types} } from "ldpflow-client";\nvoid lib;\n${typed}`);
    // A wrong option type and an unknown protocol must fail the check: it is not vacuous.
    fs.writeFileSync(path.join(project, "wrong.mts"), `import { makeHeavyHitters } from "ldpflow-client";
makeHeavyHitters("spm", { topK: "8", valueBits: 32, epsilon: 3 });
// @ts-expect-error an unknown protocol
makeHeavyHitters("xyz", { topK: 8, valueBits: 32, epsilon: 3 });
`);
    const config = (files) => JSON.stringify({ compilerOptions: { module: "nodenext",
      moduleResolution: "nodenext", target: "es2022", strict: true, noEmit: true, types: [] }, files });
    fs.writeFileSync(path.join(project, "tsconfig.json"), config(["consumer.mts", "consumer.cts"]));
    const good = spawnSync(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: project, encoding: "utf8" });
    assert.equal(good.status, 0, good.stdout + good.stderr);
    fs.writeFileSync(path.join(project, "tsconfig.json"), config(["wrong.mts"]));
    const bad = spawnSync(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: project, encoding: "utf8" });
    assert.notEqual(bad.status, 0);
    assert.match(bad.stdout, /wrong\.mts\(2,.*error TS2322/);
    assert.doesNotMatch(bad.stdout, /wrong\.mts\([34],/);
  });
});
