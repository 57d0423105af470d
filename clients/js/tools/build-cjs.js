#!/usr/bin/env node
/**
 * Build the CommonJS form of the package: `dist/index.cjs`, one file holding every module of
 * `index.js` and `src/`, and `dist/index.d.cts`, the declarations for `require`. Run by
 * `npm pack` (the `prepare` script); no dependencies.
 *
 *   node tools/build-cjs.js [--output DIR]
 *
 * The sources are ES modules written in a small subset that this script converts exactly: named
 * imports and re-exports of relative modules (`import { a, b as c } from "./x.js"`,
 * `export { a } from "./x.js"`) and exported declarations (`export function|class|const`).
 * Anything else (a default or namespace import, `export *`, `import.meta`, a dynamic import, an
 * import of a package or a cycle among the modules) stops the build with the reason, so the
 * bundle cannot silently differ from the modules. Each module becomes a function evaluated once,
 * dependencies first, as the ES module loader evaluates them.
 */

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const PACKAGE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const ENTRY = "index.js";
const IMPORT = /^import\s*\{([^}]*)\}\s*from\s*"([^"]+)";[ \t]*$/gm;
const REEXPORT = /^export\s*\{([^}]*)\}\s*from\s*"([^"]+)";[ \t]*$/gm;
const DECLARATION = /^export\s+(function\*?|class|const|let)\s+([A-Za-z_$][\w$]*)/gm;

/** `a, b as c` -> [["a", "a"], ["b", "c"]] (imported name, local name). */
function specifiers(list, where) {
  return list.split(",").map((s) => s.trim()).filter(Boolean).map((s) => {
    const match = /^([A-Za-z_$][\w$]*)(?:\s+as\s+([A-Za-z_$][\w$]*))?$/.exec(s);
    if (!match) throw new Error(`${where}: cannot convert the specifier ${JSON.stringify(s)}`);
    return [match[1], match[2] ?? match[1]];
  });
}

function resolve(from, specifier, where) {
  if (!specifier.startsWith("./") && !specifier.startsWith("../")) {
    throw new Error(`${where}: imports ${specifier}; the package has no dependencies`);
  }
  return path.posix.normalize(path.posix.join(path.posix.dirname(from), specifier));
}

/** One module as the body of a function of (exports, require), and the modules it needs. */
function convert(id, source) {
  const needs = [];
  let counter = 0;
  let body = source.replace(IMPORT, (_, list, specifier) => {
    const target = resolve(id, specifier, id);
    needs.push(target);
    const names = specifiers(list, id).map(([name, local]) => (name === local ? name : `${name}: ${local}`));
    return `const { ${names.join(", ")} } = __require(${JSON.stringify(target)});`;
  });
  const exported = [];
  body = body.replace(REEXPORT, (_, list, specifier) => {
    const target = resolve(id, specifier, id);
    needs.push(target);
    const module = `__reexport${counter++}`;
    for (const [name, as] of specifiers(list, id)) exported.push([as, `${module}.${name}`]);
    return `const ${module} = __require(${JSON.stringify(target)});`;
  });
  body = body.replace(DECLARATION, (_, kind, name) => {
    exported.push([name, name]);
    return `${kind} ${name}`;
  });
  const left = /^\s*(import|export)\b.*$/m.exec(body) ?? /\bimport\s*(\(|\.meta)/.exec(body);
  if (left) throw new Error(`${id}: cannot convert ${JSON.stringify(left[0].trim())}`);
  const assignments = exported.map(([name, value]) => `  exports.${name} = ${value};`).join("\n");
  return { needs, body: `${body.trimEnd()}\n${assignments}\n` };
}

/** The modules reachable from the entry, dependencies first; refuses a cycle. */
function collect(entry, read) {
  const order = [];
  const state = new Map();  // id -> "open" | "done"
  const modules = new Map();
  const visit = (id, chain) => {
    if (state.get(id) === "done") return;
    if (state.get(id) === "open") throw new Error(`import cycle: ${[...chain, id].join(" -> ")}`);
    state.set(id, "open");
    const module = convert(id, read(id));
    modules.set(id, module);
    for (const need of module.needs) visit(need, [...chain, id]);
    state.set(id, "done");
    order.push(id);
  };
  visit(entry, []);
  return order.map((id) => [id, modules.get(id)]);
}

const readSource = (id) => fs.readFileSync(path.join(PACKAGE_DIR, id), "utf8");

/** The text of `dist/index.cjs` (`read(id)`: the source of module `id`, e.g. `src/pem.js`). */
export function bundle(read = readSource) {
  const version = JSON.parse(fs.readFileSync(path.join(PACKAGE_DIR, "package.json"), "utf8")).version;
  const parts = collect(ENTRY, read).map(([id, { body }]) =>
    `// ${id}\n__define(${JSON.stringify(id)}, function (exports, __require) {\n"use strict";\n${body}});\n`);
  return `// ldpflow-client ${version}, CommonJS build of the ES modules (tools/build-cjs.js): do not edit.
"use strict";
const __modules = new Map();
const __cache = new Map();
function __define(id, factory) {
  __modules.set(id, factory);
}
function __require(id) {
  if (!__cache.has(id)) {
    const exports = {};
    __cache.set(id, exports);
    __modules.get(id)(exports, __require);
    Object.freeze(exports);
  }
  return __cache.get(id);
}

${parts.join("\n")}
module.exports = __require(${JSON.stringify(ENTRY)});
`;
}

export function build(output = path.join(PACKAGE_DIR, "dist")) {
  fs.mkdirSync(output, { recursive: true });
  fs.writeFileSync(path.join(output, "index.cjs"), bundle());
  // The same declarations serve require(): TypeScript reads .d.cts as those of a CommonJS module.
  fs.copyFileSync(path.join(PACKAGE_DIR, "index.d.ts"), path.join(output, "index.d.cts"));
  return output;
}

if (process.argv[1] && import.meta.url === pathToFileURL(fs.realpathSync(process.argv[1])).href) {
  const { values } = parseArgs({ options: { output: { type: "string" } } });
  const output = build(values.output ? path.resolve(values.output) : undefined);
  process.stderr.write(`wrote ${path.join(output, "index.cjs")} and index.d.cts\n`);
}
