// Tokenizes every real .agent file of the conformance corpus with the grammar (vscode-textmate,
// the engine VS Code uses) and checks what a reader relies on: each node header names its node
// as entity.name.type, and each @variables.x reference outside comments is a namespace plus a
// member. Usage: node tests/corpus.js [CORPUS_DIR]. Exits 1 on any miss.
"use strict";
const fs = require("fs");
const path = require("path");
const vsctm = require("vscode-textmate");
const oniguruma = require("vscode-oniguruma");

const root = process.argv[2] || path.resolve(__dirname, "../../../../shared/conformance/agentscript");
const grammarPath = path.resolve(__dirname, "../syntaxes/agentscript.tmLanguage.json");

function agentFiles(dir) {
  const out = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...agentFiles(full));
    else if (entry.name.endsWith(".agent")) out.push(full);
  }
  return out;
}

async function main() {
  if (!fs.existsSync(root)) {
    console.log(`corpus not found at ${root}: skipped`);
    return 0;
  }
  const wasm = fs.readFileSync(require.resolve("vscode-oniguruma/release/onig.wasm")).buffer;
  await oniguruma.loadWASM(wasm);
  const registry = new vsctm.Registry({
    onigLib: Promise.resolve({
      createOnigScanner: (patterns) => new oniguruma.OnigScanner(patterns),
      createOnigString: (s) => new oniguruma.OnigString(s),
    }),
    loadGrammar: async () => vsctm.parseRawGrammar(fs.readFileSync(grammarPath, "utf8"), grammarPath),
  });
  const grammar = await registry.loadGrammar("source.agentscript");
  const failures = [];
  let headers = 0;
  let references = 0;
  const files = agentFiles(root);
  for (const file of files) {
    const lines = fs.readFileSync(file, "utf8").replace(/\r\n/g, "\n").split("\n");
    let stack = vsctm.INITIAL;
    lines.forEach((line, number) => {
      const result = grammar.tokenizeLine(line, stack);
      stack = result.ruleStack;
      const scopesAt = (column) => {
        const token = result.tokens.find((t) => t.startIndex <= column && column < t.endIndex);
        return token ? token.scopes : [];
      };
      const where = `${path.relative(root, file)}:${number + 1}`;
      const header = /^\s*(start_agent|subagent|topic|connected_subagent)\s+(\w+)\s*:/.exec(line);
      if (header) {
        headers += 1;
        const column = line.indexOf(header[2], header.index + header[1].length);
        if (!scopesAt(column).includes("entity.name.type.agentscript")) {
          failures.push(`${where}: node name not entity.name.type`);
        }
      }
      const pattern = /@variables\.(\w+)/g;
      let match;
      while ((match = pattern.exec(line)) !== null) {
        const scopes = scopesAt(match.index + "@variables.".length);
        if (scopes.includes("comment.line.number-sign.agentscript")) continue;
        // Prose inside a plain string ("bound to @variables.x") is text, not a reference.
        if (scopes.includes("string.quoted.double.agentscript") &&
            !scopes.includes("meta.interpolation.agentscript")) continue;
        references += 1;
        if (!scopes.includes("variable.other.member.agentscript")) {
          failures.push(`${where}: @variables.${match[1]} scopes ${scopes.join(" ")}`);
        }
      }
    });
  }
  console.log(`${files.length} corpus files: ${headers} node headers, ${references} @variables references checked`);
  if (failures.length) {
    console.log(failures.slice(0, 20).join("\n"));
    console.log(`${failures.length} failures`);
    return 1;
  }
  return 0;
}

main().then((code) => process.exit(code), (error) => { console.error(error); process.exit(1); });
