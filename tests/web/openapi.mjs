// openapi.mjs - api/openapi.yaml checked by two validators that web/package.json
// pins (web/package-lock.json; `make deps` runs `npm ci`), offline:
//   node openapi.mjs validate WEB_DIR FILE.yaml
//     swagger-parser: the document against the OpenAPI 3.0 JSON schema, plus
//     its semantic checks (unique operationIds, path parameters, $refs);
//     redocly's linter (@redocly/openapi-core, the engine of `redocly lint`)
//     with its "recommended" rules. Exit 0 when neither finds a problem (a
//     warning counts), 1 otherwise.
//   node openapi.mjs json WEB_DIR FILE.yaml
//     prints the validated document with every $ref resolved, as JSON (read
//     by tests/api/test_openapi_conformance.py, which has no YAML parser).
// Exit 77 (ctest: skipped) when WEB_DIR/node_modules lacks the validators.
import { createRequire } from "node:module";
import path from "node:path";

const [mode, webDir, file] = process.argv.slice(2);

// Exit codes go through process.exitCode: process.exit() could cut a piped
// stdout short (at 64 KiB) before it is written.
async function main() {
  if (!["validate", "json"].includes(mode) || !webDir || !file) {
    console.error("usage: node openapi.mjs validate|json WEB_DIR FILE.yaml");
    return 2;
  }
  const require = createRequire(path.join(path.resolve(webDir), "package.json"));
  let SwaggerParser, redocly;
  try {
    SwaggerParser = require("@apidevtools/swagger-parser");
    redocly = require("@redocly/openapi-core");
  } catch (e) {
    console.log(`SKIP: ${webDir}/node_modules lacks the OpenAPI validators (run \`make deps\`, which runs npm ci in web/): ${e.message}`);
    return 77;
  }
  if (mode === "json") {
    // validate() dereferences too; on a document it rejects, it throws
    process.stdout.write(JSON.stringify(await SwaggerParser.validate(path.resolve(file))));
    return 0;
  }

  let problems = 0;
  try {
    const api = await SwaggerParser.validate(path.resolve(file));
    console.log(`swagger-parser: valid (${Object.keys(api.paths).length} paths)`);
  } catch (e) {
    problems++;
    console.log(`swagger-parser: INVALID\n${e.message}`);
  }
  // The recommended rules, with one exception: info-license, since the
  // project states no licence to put there.
  const config = await redocly.createConfig({ extends: ["recommended"], rules: { "info-license": "off" } });
  try {
    const found = await redocly.lint({ ref: path.resolve(file), config });
    const totals = redocly.getTotals(found);
    if (found.length) redocly.formatProblems(found, { format: "codeframe", totals, version: "openapi-core" });
    console.log(`redocly lint (recommended): ${totals.errors} errors, ${totals.warnings} warnings`);
    problems += totals.errors + totals.warnings;
  } catch (e) { // not YAML at all
    problems++;
    console.log(`redocly lint: ${e.message}`);
  }
  return problems ? 1 : 0;
}

process.exitCode = await main();
