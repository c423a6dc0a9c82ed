// A thin client: `agentscript lsp` does the work; two commands call the CLI.
"use strict";
const vscode = require("vscode");
const { execFile } = require("child_process");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");

let client;

function command() {
  return vscode.workspace.getConfiguration("agentscript").get("command") || "agentscript";
}

function activate(context) {
  client = new LanguageClient(
    "agentscript",
    "Agent Script",
    { command: command(), args: ["lsp"], transport: TransportKind.stdio },
    { documentSelector: [{ scheme: "file", language: "agentscript" }] }
  );
  client.start();

  context.subscriptions.push(
    vscode.commands.registerCommand("agentscript.showPrompts", async () => {
      const editor = vscode.window.activeTextEditor;
      if (!editor) return;
      const file = editor.document.uri.fsPath;
      execFile(command(), ["prompts", file, "--format", "markdown"], async (error, stdout, stderr) => {
        if (error && !stdout) {
          vscode.window.showErrorMessage(stderr || String(error));
          return;
        }
        const doc = await vscode.workspace.openTextDocument({ content: stdout, language: "markdown" });
        vscode.window.showTextDocument(doc, vscode.ViewColumn.Beside);
      });
    }),
    vscode.commands.registerCommand("agentscript.runConversation", async () => {
      const editor = vscode.window.activeTextEditor;
      if (!editor) return;
      const picked = await vscode.window.showOpenDialog({
        canSelectMany: false,
        filters: { "Conversation files": ["yaml", "yml"] },
      });
      if (!picked || picked.length === 0) return;
      const terminal = vscode.window.createTerminal("agentscript run");
      terminal.show();
      terminal.sendText(
        `${command()} run "${editor.document.uri.fsPath}" --conversation "${picked[0].fsPath}"`
      );
    })
  );
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
