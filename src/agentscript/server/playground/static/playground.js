// agentscript playground: the page's logic. Plain JavaScript, no build step, no network but
// this server. It talks to the session API (v1/...) and the playground extras
// (playground/api/...), streams each turn over SSE and draws every step as it arrives.
// Every URL is relative to the server's root as the page sees it (see ROOT).
// Text from agents, models and users is only ever set with textContent (never as HTML).
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  // The page is ROOT + "playground/". A proxy may serve the server under a prefix, and may or
  // may not tell it so (root_path): the page's own URL has the prefix either way, while a
  // path the server computes has it only when told.
  const ROOT = new URL("../", document.baseURI).pathname;
  const at = (path) => ROOT + path;
  const S = {
    config: null,
    agent: null,        // the selected agent's description (+ guards)
    session: null,      // session id
    variables: {},      // what the current session started with
    edited: {},         // the variable editor's values (applied to the next session)
    script: null,       // {text, turns: [{user, model}]} of a loaded conversation file
    turns: 0,           // the session's turns as the server counts them (never a refused message)
    busy: false,
    turn: null,         // the turn in flight: {session, controller}; another session drops it
    starting: false,    // a new session was asked for and has not answered yet
    starts: 0,          // sessions asked for: only the last one asked is drawn
    ended: false,       // the session ended: no more messages until a new one
    visited: new Set(),
    taken: new Set(),   // "from->to" transitions seen
    current: null,
    graph: null,
    stepCount: 0,
    sent: null,         // the full messages of the session's last LLM_STEP (traces keep deltas)
    inputsTurn: 0,      // the last turn whose steps the page drew all of (-1: it missed some)
    key: sessionStorage.getItem("agentscript-key") || "",
  };

  // ------------------------------------------------------------------ helpers

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  // Bidi controls (LRM, RLM, LRE..RLO, LRI..PDI) in a value would reorder how the text after
  // them reads, other fields included: every JSON the page shows has them escaped (\u202e),
  // so a value reads as what it holds. (The CSS also isolates each value and message.)
  const BIDI = /[\u200E\u200F\u202A-\u202E\u2066-\u2069]/g;

  function json(value, indent) {
    const text = JSON.stringify(value, null, indent);
    if (text === undefined) return String(text);
    return text.replace(BIDI, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
  }

  function show(value) {
    if (value === undefined) return "—";
    return json(value);
  }

  function banner(text, kind) {
    const b = $("banner");
    if (!text) { b.hidden = true; return; }
    b.hidden = false;
    b.className = kind || "";
    b.textContent = text;
  }

  class ApiFailure extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    if (S.key) h["Authorization"] = "Bearer " + S.key;
    return h;
  }

  async function failure(response) {
    let code = "http_" + response.status, message = response.statusText || "request failed";
    try {
      const body = await response.json();
      if (body && body.error) { code = body.error.code || code; message = body.error.message || message; }
    } catch (e) { /* not JSON */ }
    if (response.status === 401) {
      $("key-box").hidden = false;
      message += " (enter the API key at the top)";
    }
    return new ApiFailure(response.status, code, message);
  }

  // fetch, with the browser's own words for a server it cannot reach ("Failed to fetch")
  // said plainly. A request the page aborted itself stays an AbortError.
  async function reach(url, init) {
    try {
      return await fetch(url, init);
    } catch (e) {
      if (e && e.name === "AbortError") throw e;
      throw new ApiFailure(0, "network", "the playground server cannot be reached (the browser says: " + e.message + ")");
    }
  }

  async function api(method, url, body) {
    const response = await reach(url, {
      method,
      headers: headers(body !== undefined ? { "Content-Type": "application/json" } : {}),
      body: body !== undefined ? JSON.stringify(body) : undefined,
    });
    if (!response.ok) throw await failure(response);
    return response.status === 204 ? null : response.json();
  }

  // ------------------------------------------------------------------ chat pane

  function addMessage(kind, text, extra) {
    const li = el("li", { class: "msg " + kind }, text);
    if (extra) li.append(extra);
    $("messages").append(li);
    li.scrollIntoView({ block: "end" });
    return li;
  }

  function errorMessage(prefix, err) {
    const code = err.code ? " [" + err.code + "]" : "";
    addMessage("error", prefix + code + ": " + err.message);
  }

  const PLACEHOLDER = "Type a message; Enter sends, Shift+Enter adds a line";
  const ENDED = "The session has ended. New session (Alt+N) starts another.";
  const STARTING = "Starting a session…";
  const NO_SESSION = "There is no session: New session (Alt+N) starts one.";

  // The composer and the controls as S says: Send needs a session that has not ended and no
  // turn in flight; the input says why it cannot send.
  function drawControls() {
    $("input").disabled = S.ended;
    $("send").disabled = S.busy || S.ended || !S.session;
    $("input").placeholder = S.ended ? ENDED : S.session ? PLACEHOLDER : S.starting ? STARTING : NO_SESSION;
    $("save").disabled = $("traces").disabled = !S.session;
    updateScriptButtons();
  }

  function setBusy(busy) {
    S.busy = busy;
    $("input").setAttribute("aria-busy", busy ? "true" : "false");
    drawControls();
  }

  function setEnded(ended) {
    S.ended = ended;
    drawControls();
  }

  function setSession(id) {
    S.session = id;
    drawControls();
  }

  // The buttons of the turn's responses, one row per response that has some: the variant
  // the engine chose (RESPONSE_STEP.buttons) and buttons a tool supplied at delivery (filled
  // into the same step at the end of the turn; buttonsError when that tool failed).
  function buttonRows(turn) {
    const rows = [];
    for (const step of turn.__steps || []) {
      if (step.type !== "RESPONSE_STEP") continue;
      if ((step.buttons || []).length) rows.push({ response: step.response, buttons: step.buttons });
      if (step.buttonsError) rows.push({ response: step.response, error: step.buttonsError });
    }
    if (!rows.some((r) => r.buttons) && (turn.buttons || []).length) rows.push({ response: null, buttons: turn.buttons });
    if (!rows.length) return null;
    const box = el("div", { class: "button-rows" });
    const named = rows.filter((r) => r.buttons).length > 1;
    for (const r of rows) {
      if (r.error) {
        box.append(el("div", { class: "error-text buttons-error" }, "Buttons of " + (r.response || "a response") + " are missing: " + r.error));
        continue;
      }
      const row = el("div", { class: "buttons", "data-response": r.response || "" },
        named && r.response ? el("span", { class: "muted" }, r.response + ":") : null);
      for (const b of r.buttons) {
        const payload = b.payload === null || b.payload === undefined || b.payload === "" ? b.title : b.payload;
        row.append(el("button", { class: "payload", title: "sends: " + payload, "data-payload": payload, onclick: () => send(payload, b.title) }, b.title));
      }
      box.append(row);
    }
    return box;
  }

  // Draws the end of the turn; returns the element that takes the focus (the Yes button of a
  // confirmation), or null for the input.
  function finishTurn(bubble, turn) {
    let focus = null;
    bubble.classList.remove("streaming");
    bubble.textContent = turn.response || "";
    const extra = buttonRows(turn);
    if (extra) bubble.append(extra);
    if (!turn.response && !extra) bubble.remove();
    if (turn.error) addMessage("error", "The turn failed: " + turn.error);
    if (turn.history_trimmed) {
      const n = turn.history_trimmed;
      addMessage("notice trimmed", "History trimmed: the oldest " + n + (n === 1 ? " message was" : " messages were") +
        " dropped before this turn to fit max_history_chars; the agent no longer sees them.");
    }
    if (turn.confirmation) {
      const row = el("div", { class: "buttons" },
        el("button", { class: "confirm-yes", onclick: () => send("yes") }, "Yes"),
        el("button", { class: "confirm-no", onclick: () => send("no") }, "No"));
      const box = addMessage("notice confirmation", "Confirmation needed: " + turn.confirmation, row);
      focus = box.querySelector("button.confirm-yes");
    }
    if (turn.escalated) addMessage("notice escalated", "Escalated: the conversation is handed to a human agent.");
    if (turn.ended) {
      addMessage("notice ended", "The session has ended: the agent ended the conversation. New session (Alt+N) starts another.");
      setEnded(true);
    }
    return focus;
  }

  // A tool that supplies buttons fills them into a RESPONSE_STEP already streamed: read the
  // turn's final trace and redraw those steps (only then; other turns need no request).
  // (The turn's trace_url is not used: it has the prefix only when the server was told it.)
  async function settleSteps(session, turn, steps, nodes) {
    if (!turn.turn || !steps.some((s) => s.type === "ACTION_STEP" && s.source === "buttons")) return steps;
    try {
      const trace = await api("GET", at("v1/sessions/" + session + "/turns/" + turn.turn + "/trace"));
      const final = ((trace || {}).planTrace || {}).steps || [];
      if (final.length !== steps.length) return steps;
      final.forEach((s, i) => {
        if (s.type === "RESPONSE_STEP" && JSON.stringify(s) !== JSON.stringify(steps[i]) && nodes[i]) {
          nodes[i].replaceWith(stepNode(s));
        }
      });
      return final;
    } catch (err) {
      return steps;
    }
  }

  // Why a message cannot be sent now ("empty", "busy", "ended", "no session"), or null.
  function refusal(text) {
    if (!String(text).trim()) return "empty";
    if (S.busy) return "busy";
    if (S.ended) return "ended";
    if (!S.session) return "no session";
    return null;
  }

  // A message the server refused (an HTTP error, an error event, a server not reached): it is
  // not one of the session's turns, and its bubble and heading say so.
  function markNotSent(said, head, text) {
    said.classList.add("unsent");
    said.append(el("small", { class: "unsent-note" }, "not sent"));
    head.classList.add("unsent");
    head.textContent = "Not sent: " + text;
  }

  // `shown`: what the user's bubble says when it differs from what is sent (a button's title;
  // the payload it sends is shown under it, and is what the session and saved chat record).
  // Returns the turn, or null when nothing was sent, the message was refused, or another
  // session started while it ran (the server still runs that turn to its commit; the page
  // stops reading it and draws nothing more of it).
  async function send(text, shown) {
    const why = refusal(text);
    if (why === "no session" && S.agent) banner(S.starting ? "The session is still starting: send again in a moment." : NO_SESSION);
    if (why) return null;
    const session = S.session;
    const mine = { session, controller: new AbortController() };
    const current = () => S.turn === mine;
    S.turn = mine;
    setBusy(true);
    banner("");
    drawStartVariables();  // read-only while the message runs
    const said = shown && shown !== text
      ? addMessage("user", shown, el("small", { class: "sent", title: "what the button sent" }, text))
      : addMessage("user", text);
    // Numbered by the server's answer (turn.turn): until then, the number it would take.
    const head = el("li", { class: "turn-head" }, "Turn " + (S.turns + 1) + ": " + text);
    $("trace").append(head);
    const bubble = addMessage("agent streaming", "");
    const steps = [];
    const nodes = [];
    let turn = null;
    let accepted = false;  // the server took the message and streams its turn
    let focus = null;
    const drawnBefore = S.inputsTurn;  // the last turn drawn whole before this one
    try {
      const response = await reach(at("v1/sessions/" + session + "/messages"), {
        method: "POST",
        headers: headers({ "Content-Type": "application/json", "Accept": "text/event-stream" }),
        body: JSON.stringify({ text }),
        signal: mine.controller.signal,
      });
      if (!response.ok) throw await failure(response);
      accepted = true;
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffered = "";
      for (;;) {
        let chunk;
        try {
          chunk = await reader.read();
        } catch (e) {
          if (!current() || (e && e.name === "AbortError")) throw e;
          throw new ApiFailure(0, "stream_cut", "the connection to the playground server was lost before the turn ended (the browser says: " + e.message + "); the session may still have recorded the turn");
        }
        if (!current()) return null;  // another session started: nothing more is drawn
        if (chunk.done) break;
        buffered += decoder.decode(chunk.value, { stream: true });
        let cut;
        while ((cut = buffered.indexOf("\n\n")) >= 0) {
          const block = buffered.slice(0, cut);
          buffered = buffered.slice(cut + 2);
          let name = "message", data = null;
          for (const line of block.split("\n")) {
            if (line.startsWith("event:")) name = line.slice(6).trim();
            else if (line.startsWith("data:")) data = JSON.parse(line.slice(5));
          }
          if (data === null) continue;
          // One text node per token: `textContent +=` copies the whole reply at each one.
          if (name === "token") { bubble.append(data.text); }
          else if (name === "step") { steps.push(data); nodes.push(...renderSteps([data])); }
          else if (name === "turn") { turn = data; }
          else if (name === "error") { accepted = false; throw new ApiFailure(data.status, data.code, data.message); }
        }
      }
      if (!turn) throw new ApiFailure(0, "stream_closed", "the server closed the stream before the turn ended");
      if (Number.isInteger(turn.turn)) {
        S.turns = turn.turn;
        head.setAttribute("data-turn", turn.turn);
        head.textContent = "Turn " + turn.turn + ": " + text;
      }
      await settleInputs(session, turn, steps, nodes, drawnBefore);
      if (!current()) return null;
      turn.__steps = await settleSteps(session, turn, steps, nodes);
      if (!current()) return null;
      focus = finishTurn(bubble, turn);
      await refreshState(session, turn);
    } catch (err) {
      if (!current()) return null;
      // Steps drawn of a turn that did not end here, or a turn the server may still commit:
      // the next turn's inputs are read again from the stored traces (settleInputs).
      if (accepted || steps.length) S.inputsTurn = -1;
      bubble.remove();
      errorMessage("The message failed", err);
      if (!turn) {
        // A stream cut or closed before its end: the server runs a turn to its commit even
        // when its client goes away, so the session's own count says whether this one was.
        if (accepted) await refreshState(session, null, true);
        else markNotSent(said, head, text);
      }
      if (err.code === "session_not_found" && S.session === session) setSession(null);
      turn = null;
    } finally {
      if (current()) {
        S.turn = null;
        setBusy(false);
        drawStartVariables();  // editable again when the session still has no turn
        markScript();
        (focus || $("input")).focus();
      }
    }
    return turn;
  }

  // ------------------------------------------------------------------ trace pane

  function changes(pre, post) {
    const out = [];
    if (!pre || !post) return out;
    for (const name of Object.keys(post)) {
      if (JSON.stringify(pre[name]) !== JSON.stringify(post[name])) {
        out.push(el("div", { class: "change", "data-variable": name },
          name + ": ", el("span", { class: "before" }, show(pre[name])), " → ",
          el("span", { class: "after" }, show(post[name]))));
      }
    }
    return out;
  }

  function lazyDetails(label, produce) {
    // Built when opened: a 200-step trace stays cheap to draw.
    const d = el("details", {}, el("summary", {}, label));
    d.addEventListener("toggle", () => {
      if (d.open && d.childElementCount === 1) d.append(el("pre", {}, produce()));
    });
    return d;
  }

  function guardOf(node, tool) {
    const table = (S.agent && S.agent.guards) || {};
    return (table[node] || {})[tool] || null;
  }

  const RENDER = {
    NODE_ENTER: (s) => ["entered ", el("b", {}, s.node), s.reason ? " (" + s.reason + ")" : ""],
    TRANSITION_STEP: (s) => [el("b", {}, s.from), " → ", el("b", {}, s.to), s.via ? " via " + s.via : ""],
    HOOK_STEP: (s) => [s.hook + " of " + s.node],
    EVENT_STEP: (s) => {
      const parts = [el("b", {}, s.event), s.tool ? " (" + s.tool + ")" : ""];
      if (s.target) parts.push(" → " + s.target);
      if (s.confirmed !== undefined && s.confirmed !== null) parts.push(s.confirmed ? ": confirmed" : ": declined");
      if (s.reason) parts.push(": " + s.reason);
      if (s.error) parts.push(el("div", { class: "error-text" }, s.error));
      parts.push(lazyDetails("details", () => json(s, 2)));
      return parts;
    },
    BLOCK_STEP: (s) => [s.event + " block ", el("b", {}, s.block), " of " + s.skill, s.step ? " at " + s.step : "", s.next ? " → " + s.next : ""],
    BUDGET_STEP: (s) => [el("span", { class: "error-text" }, "budget: the " + s.scope + " " + s.cap + " cap (" + s.limit + ") would reach " + s.wouldReach + "; " + s.action)],
    KNOWLEDGE_STEP: (s) => ["search ", el("code", {}, s.query || ""), " → " + (s.passages || []).length + " passages",
      lazyDetails("passages", () => json(s.passages, 2))],
    SKILL_STEP: (s) => [s.event + " ", el("b", {}, s.skill), s.kind ? " (" + s.kind + ")" : "", s.by ? " by " + s.by : ""],
    RESPONSE_STEP: (s) => {
      const parts = [el("span", {}, s.text || ""), s.response ? el("span", { class: "muted" }, " " + s.response) : ""];
      if ((s.buttons || []).length) {
        const row = el("div", { class: "io" }, "buttons: ");
        for (const b of s.buttons) row.append(el("span", { class: "chip button-chip", title: "payload: " + (b.payload || b.title) }, b.title));
        parts.push(row);
      }
      if (s.buttonsError) parts.push(el("div", { class: "error-text" }, "buttons: " + s.buttonsError));
      return parts;
    },
    ERROR_STEP: (s) => [el("span", { class: "error-text" }, s.message || "error")],
    REFUSED_STEP: (s) => [el("b", {}, s.name), " refused: ", el("span", { class: "error-text reason" }, s.reason || "")],
    RESOLUTION_STEP: (s) => {
      const parts = [el("b", {}, s.node), " #" + (s.iteration || 1), " offers "];
      for (const t of s.tools || []) parts.push(el("span", { class: "chip tool" }, t));
      if (!(s.tools || []).length) parts.push(el("span", { class: "muted" }, "no tools "));
      for (const t of s.hiddenTools || []) {
        const guard = guardOf(s.node, t);
        parts.push(el("span", { class: "chip hidden-tool", title: guard ? "hidden: " + guard + " is not true" : "hidden by its guard", "data-tool": t },
          t, el("span", { class: "why" }, " hidden")));
        if (guard) parts.push(el("span", { class: "guard" }, "(" + guard + ") "));
      }
      parts.push(instructionsOf(s));
      return parts;
    },
    LLM_STEP: (s) => {
      const out = s.output || {};
      const calls = (out.tool_calls || []).map((c) => c.name + " " + json(c.arguments));
      const parts = ["model (" + (s.node || "") + " #" + (s.iteration || 1) + "): ",
        calls.length ? el("b", {}, calls.join(", ")) : el("span", {}, out.text || "")];
      if (s.error) parts.push(el("div", { class: "error-text" }, s.error));
      const input = fullInput(s.input);
      parts.push(lazyDetails("input", () => json(input, 2)));
      return parts;
    },
    ACTION_STEP: (s) => {
      const parts = [el("b", {}, s.name), " (" + (s.source || "") + (s.target ? ", " + s.target : "") + ")"];
      // ACTION_STEP.stubbed: a stub (--stubs, a conversation file) answered; no code ran.
      if (s.stubbed) parts.push(" ", el("span", { class: "stubbed", title: "a stub answered this call: no code ran" }, "stub"));
      if (s.ranTarget) parts.push(ranTarget(s));
      parts.push(el("div", { class: "io" }, "in: " + json(s.input)));
      if (s.error) parts.push(el("div", { class: "error-text" }, "error: " + s.error));
      else parts.push(el("div", { class: "io" }, "out: " + json(s.output)));
      const printed = printedOf(s.printed);
      if (printed) parts.push(printed);
      return parts;
    },
  };

  // ACTION_STEP.ranTarget: the python:// target that `[actions.targets]` of agentscript.toml
  // ran instead of the agent's own `target` (null when nothing was mapped; absent in traces
  // older than the field).
  function ranTarget(s) {
    return el("div", { class: "ran-target", title: "[actions.targets] in agentscript.toml ran this target instead of the agent's" },
      el("code", {}, s.target || s.name), " → ran ", el("code", {}, s.ranTarget));
  }

  // ACTION_STEP.printed: what the action wrote to stdout/stderr, one box per stream that has
  // text ({"stdout": ..., "stderr": ...}), collapsed under a summary naming the streams.
  function printedOf(printed) {
    if (!printed || typeof printed !== "object") return null;
    const streams = ["stdout", "stderr"].filter((k) => typeof printed[k] === "string" && printed[k] !== "");
    if (!streams.length) return null;
    const d = el("details", { class: "printed" }, el("summary", {}, "printed (" + streams.join(", ") + ")"));
    for (const k of streams) d.append(el("pre", { class: "printed-" + k, "data-stream": k, "aria-label": k }, printed[k]));
    return d;
  }

  // RESOLUTION_STEP.instructionLines: each piece of the instructions with the `if` branches
  // that produced it, outermost first (Agent Script `if`, Mantle `if:` paragraphs; see
  // docs/trace.md). Without them (Mantle's routing prompt) the instructions are one text.
  function branchLabel(b) {
    if (b.taken === "if") return ["if ", el("code", {}, b.condition), " → true"];
    if (b.taken === "else") return ["else (", el("code", {}, b.condition), " → false)"];
    return ["else if ", el("code", {}, b.condition), " → true"];
  }

  function instructionsOf(s) {
    const lines = s.instructionLines;
    const known = (l) => (l.line !== null && l.line !== undefined) || (l.branches || []).length;
    if (!Array.isArray(lines) || !lines.some(known)) {
      return el("pre", { class: "instructions" }, s.transition ? (s.discarded || "") : (s.instructions || ""));
    }
    const list = el("ol", { class: "instructions", "aria-label": "Resolved instructions" });
    for (const line of lines) {
      // Mantle pieces keep the blank lines between paragraphs (they join back with "\n").
      const text = String(line.text || "").replace(/^\n+|\n+$/g, "");
      if (!text && !(line.branches || []).length) continue;
      const item = el("li", { class: "iline", "data-line": line.line },
        el("span", { class: "lineno", title: "source line" }, line.line === null || line.line === undefined ? "" : String(line.line)),
        el("span", { class: "itext" }, text));
      const branches = line.branches || [];
      if (branches.length) {
        const from = el("span", { class: "from" });
        branches.forEach((b, i) => {
          if (i) from.append(el("span", { class: "sep" }, " › "));
          from.append(el("span", { class: "branch taken-" + b.taken.split(" ")[0], "data-taken": b.taken,
            "data-if-line": b.line, title: "the if at line " + b.line + " took its " + b.taken + " branch" }, ...branchLabel(b)));
        });
        item.append(from);
      } else {
        item.classList.add("always");
      }
      list.append(item);
    }
    return list;
  }

  // An LLM_STEP records only the messages added since the session's previous call: the
  // previous call's messages from input.messagesDropped (0 when absent), input.messagesFrom of
  // them, then input.messages (trace_inputs.rebuild_messages). The full messages given those
  // of the previous call (`sent`), or null when they are not known.
  function fullMessages(input, sent) {
    const added = Array.isArray(input.messages) ? input.messages : [];
    const from = input.messagesFrom;
    if (from === null || from === undefined || from === 0) return added;
    const dropped = input.messagesDropped || 0;
    if (!sent || sent.length < dropped + from) return null;
    return sent.slice(dropped, dropped + from).concat(added);
  }

  // The step's input with its messages complete, in step order (S.sent follows the steps).
  // When the page lacks the earlier steps, it shows the new messages and says how many
  // earlier ones it does not show; later steps stay partial until a complete one.
  function fullInput(input) {
    if (!input || typeof input !== "object") return input;
    const messages = fullMessages(input, S.sent);
    S.sent = messages;
    const full = Object.assign({}, input);
    delete full.messagesFrom;
    delete full.messagesDropped;
    if (messages) full.messages = messages;
    else full.earlierMessagesNotShown = input.messagesFrom;
    return full;
  }

  // The full messages of the session's last model call up to turn `last`, rebuilt from its
  // stored traces; null when one cannot be read.
  async function storedInputs(session, last) {
    let sent = null;
    try {
      for (let n = 1; n <= last; n++) {
        const trace = await api("GET", at("v1/sessions/" + session + "/turns/" + n + "/trace"));
        for (const s of ((trace || {}).planTrace || {}).steps || []) {
          if (s.type === "LLM_STEP") sent = fullMessages(s.input || {}, sent);
        }
      }
    } catch (err) {
      return null;
    }
    return sent;
  }

  // A turn that does not follow the last one the page drew whole (a stream cut before its
  // end, a turn sent from elsewhere) was drawn from the wrong previous call: its model inputs
  // are drawn again from the stored traces of the turns before it.
  async function settleInputs(session, turn, steps, nodes, drawnBefore) {
    if (!Number.isInteger(turn.turn)) return;
    if (turn.turn !== drawnBefore + 1) {
      S.sent = await storedInputs(session, turn.turn - 1);
      steps.forEach((s, i) => {
        if (s.type === "LLM_STEP" && nodes[i]) {
          const node = stepNode(s);
          nodes[i].replaceWith(node);
          nodes[i] = node;
        }
      });
    }
    S.inputsTurn = turn.turn;
  }

  function stepNode(s) {
    const render = RENDER[s.type];
    const li = el("li", { class: "step step-" + s.type + (s.error ? " failed" : ""), "data-type": s.type },
      el("span", { class: "kind" }, s.type.replace("_STEP", "").replace("_", " ")));
    if (render) li.append(...render(s));
    else li.append(lazyDetails("details", () => json(s, 2)));
    for (const c of changes(s.preVars, s.postVars)) li.append(c);
    return li;
  }

  function renderSteps(steps) {
    const fragment = document.createDocumentFragment();
    const drawn = [];
    for (const s of steps) {
      const node = stepNode(s);
      drawn.push(node);
      fragment.append(node);
      noteStep(s);
    }
    S.stepCount += steps.length;
    const list = $("trace");
    list.append(fragment);
    list.lastElementChild && list.lastElementChild.scrollIntoView({ block: "end" });
    $("step-count").textContent = S.stepCount + " steps";
    return drawn;
  }

  function noteStep(s) {
    if (s.type === "NODE_ENTER") { S.visited.add(s.node); S.current = s.node; }
    if (s.type === "TRANSITION_STEP") { S.taken.add(s.from + "->" + s.to); S.visited.add(s.to); S.current = s.to; }
    if (s.type === "SKILL_STEP" && s.event === "activated") { S.visited.add(s.skill); S.current = s.skill; }
  }

  // ------------------------------------------------------------------ state pane

  function variableRows() {
    return (S.agent && S.agent.variables) || [];
  }

  function parseValue(type, text) {
    // Text types keep what was typed ("0042" stays text); others read JSON, else text.
    if (/^(string|text|date|datetime|time|id)$/i.test(String(type || ""))) return text;
    if (text.trim() === "") return null;
    try { return JSON.parse(text); } catch (e) { return text; }
  }

  function drawVariables(values, before) {
    const body = $("variables").tBodies[0];
    body.textContent = "";
    const editable = S.turns === 0 && !S.busy;
    for (const v of variableRows()) {
      const value = values[v.name];
      const tags = [v.type, v.linked ? "linked" : null, v.mutable ? null : "read-only"].filter(Boolean).join(", ");
      const nameCell = el("td", {}, v.name, el("span", { class: "tag" }, tags));
      let valueCell;
      if (editable) {
        const input = el("input", {
          "aria-label": v.name, "data-variable": v.name,
          value: value === undefined || value === null ? "" : (typeof value === "string" ? value : JSON.stringify(value)),
        });
        input.addEventListener("change", () => { S.edited[v.name] = parseValue(v.type, input.value); newSession(true); });
        valueCell = el("td", {}, input);
      } else {
        valueCell = el("td", { "data-variable": v.name });
        const changed = before && JSON.stringify(before[v.name]) !== JSON.stringify(value);
        if (changed) valueCell.append(el("span", { class: "prev" }, show(before[v.name])));
        valueCell.append(el("span", { class: "value" }, show(value)));
      }
      const row = el("tr", { "data-variable": v.name }, nameCell, valueCell);
      if (!editable && before && JSON.stringify(before[v.name]) !== JSON.stringify(value)) row.classList.add("changed");
      body.append(row);
    }
    $("vars-note").textContent = editable
      ? "Editable until the first message (a change starts a new session). Text as typed; other types as JSON."
      : "Changed by the last turn: highlighted, with the value before.";
  }

  // Before the first turn: the start-up variables, editable unless a message is running.
  function drawStartVariables() {
    if (S.turns === 0) drawVariables(S.lastValues || S.variables, null);
  }

  function drawWhere(state) {
    const box = $("where");
    box.textContent = "";
    if (S.agent && S.agent.format === "mantle") {
      state.stack = state.stack || [];
      box.append(el("div", {}, "Skill stack (top first):"));
      const list = el("ol", { class: "stack", "aria-label": "Skill stack" });
      for (const frame of state.stack.slice().reverse()) {
        const blocks = (frame.blocks || []).map((b) => "block " + b.block + " at " + (b.step === null || b.step === undefined ? "(not started)" : b.step));
        list.append(el("li", { class: frame.status, "data-skill": frame.skill },
          el("b", {}, frame.skill), " ", el("span", { class: "status" }, frame.status + ", " + frame.kind),
          blocks.length ? el("div", { class: "blocks" }, blocks.join("; ")) : null));
      }
      if (!state.stack.length) list.append(el("li", { class: "muted" }, "no active skill"));
      box.append(list);
      const top = state.stack[state.stack.length - 1];
      S.current = top ? top.skill : null;
    } else {
      box.append("Current node: ", el("span", { class: "node" }, state.node || "(start)"));
      S.current = state.node;
    }
    if (state.pending_confirmation) box.append(el("div", { class: "muted" }, "waiting for a yes/no"));
    if (state.escalated) box.append(el("div", { class: "escalated-state" }, "Escalated to a human agent"));
    if (state.ended) box.append(el("div", { class: "ended-state" }, "Session ended"));
  }

  // The state of `session` (the server's turn count included), drawn only while it is still
  // the page's session; `quiet`: a failure to read it is not said.
  async function refreshState(session, turn, quiet) {
    if (!session) return;
    try {
      const state = await api("GET", at("playground/api/sessions/" + session + "/state"));
      if (S.session !== session) return;
      if (Number.isInteger(state.turns)) S.turns = state.turns;
      const before = S.lastValues;
      S.lastValues = state.variables;
      drawVariables(state.variables, turn ? before : null);
      drawWhere(state);
      if (turn && turn.path) for (const n of turn.path) S.visited.add(n);
      drawGraph();
    } catch (err) {
      if (!quiet && S.session === session) errorMessage("Reading the session state failed", err);
    }
  }

  // ------------------------------------------------------------------ graph pane

  async function loadGraph() {
    S.graph = null;
    try {
      S.graph = await api("GET", at("v1/agents/" + encodeURIComponent(S.agent.name) + "/graph"));
    } catch (err) {
      // Without the graph module: the nodes or skills alone.
      const names = S.agent.nodes || S.agent.skills || [];
      S.graph = { nodes: names.map((n) => ({ id: n, label: n, kind: n === S.agent.start ? "start" : "node" })), edges: [], partial: true };
    }
    drawGraph();
  }

  function layers(graph) {
    const ids = graph.nodes.filter((n) => n.kind !== "step").map((n) => n.id);
    const start = graph.nodes.find((n) => n.kind === "start") || graph.nodes[0];
    const depth = {};
    const queue = [];
    if (start) { depth[start.id] = 0; queue.push(start.id); }
    while (queue.length) {
      const at = queue.shift();
      for (const e of graph.edges) {
        if (e.source === at && depth[e.target] === undefined && ids.includes(e.target)) {
          depth[e.target] = depth[at] + 1; queue.push(e.target);
        }
      }
    }
    const rows = [];
    for (const id of ids) {
      const d = depth[id] === undefined ? (Object.keys(depth).length ? Math.max(...Object.values(depth)) + 1 : 0) : depth[id];
      (rows[d] = rows[d] || []).push(id);
    }
    return rows.filter(Boolean);
  }

  function drawGraph() {
    const box = $("graph");
    box.textContent = "";
    if (!S.graph) return;
    const NS = "http://www.w3.org/2000/svg";
    const rows = layers(S.graph);
    const boxW = 132, boxH = 26, gapY = 52;
    const W = Math.max(380, (Math.max(1, ...rows.map((r) => r.length)) + 1) * (boxW + 14));
    const pos = {};
    rows.forEach((row, r) => row.forEach((id, i) => {
      pos[id] = { x: (W / (row.length + 1)) * (i + 1), y: 20 + r * gapY };
    }));
    const H = 40 + rows.length * gapY;
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    for (const e of S.graph.edges) {
      const a = pos[e.source], b = pos[e.target];
      if (!a || !b || e.source === e.target) continue;
      const line = document.createElementNS(NS, "path");
      line.setAttribute("d", "M" + a.x + "," + (a.y + boxH / 2) + " L" + b.x + "," + (b.y - boxH / 2));
      line.setAttribute("class", "gedge" + (S.taken.has(e.source + "->" + e.target) ? " taken" : ""));
      line.setAttribute("data-edge", e.source + "->" + e.target);
      const title = document.createElementNS(NS, "title");
      title.textContent = e.kind + " via " + e.via + (e.guard ? " when " + e.guard : "");
      line.append(title);
      svg.append(line);
    }
    for (const n of S.graph.nodes) {
      const p = pos[n.id];
      if (!p) continue;
      const g = document.createElementNS(NS, "g");
      const cls = ["gnode"];
      if (S.visited.has(n.id)) cls.push("visited");
      if (S.current === n.id) cls.push("current");
      g.setAttribute("class", cls.join(" "));
      g.setAttribute("data-node", n.id);
      const rect = document.createElementNS(NS, "rect");
      rect.setAttribute("x", p.x - boxW / 2); rect.setAttribute("y", p.y - boxH / 2);
      rect.setAttribute("width", boxW); rect.setAttribute("height", boxH); rect.setAttribute("rx", 5);
      const text = document.createElementNS(NS, "text");
      text.setAttribute("x", p.x); text.setAttribute("y", p.y + 4); text.setAttribute("text-anchor", "middle");
      const label = String(n.label || n.id);
      text.textContent = label.length > 19 ? label.slice(0, 18) + "…" : label;
      const title = document.createElementNS(NS, "title");
      title.textContent = n.id + " (" + n.kind + ")";
      g.append(rect, text, title);
      svg.append(g);
    }
    box.append(svg);
    const path = [...S.visited];
    $("path").textContent = (S.graph.partial ? "Graph module not installed: nodes only. " : "") +
      (path.length ? "Visited: " + path.join(" → ") : "Nothing visited yet.");
  }

  // ------------------------------------------------------------------ sessions and scripts

  function resetPanes() {
    $("messages").textContent = "";
    $("trace").textContent = "";
    setEnded(false);
    S.turns = 0; S.stepCount = 0; S.sent = null; S.inputsTurn = 0; S.visited = new Set(); S.taken = new Set(); S.current = null;
    S.lastValues = null;
    $("step-count").textContent = "";
  }

  // Leaves the page's session: the turn in flight, if any, is no longer read or drawn (its
  // request is aborted; the server still runs that turn to its commit, in the old session).
  function leaveSession() {
    if (S.turn) {
      S.turn.controller.abort();
      S.turn = null;
      setBusy(false);
    }
    setSession(null);
    $("session-id").textContent = "";
  }

  // Starts a session; true once it runs, false when it could not start (the reason is said
  // in the chat) or another one was asked for meanwhile.
  async function newSession(keepScript) {
    if (!S.agent) return false;
    const mine = ++S.starts;
    S.starting = true;
    leaveSession();
    if (!keepScript) S.script = null;
    const body = { variables: Object.assign({}, S.edited) };
    if (S.script) body.conversation = S.script.text;
    resetPanes();
    let created = null;
    try {
      created = await api("POST", at("playground/api/agents/" + encodeURIComponent(S.agent.name) + "/sessions"), body);
    } catch (err) {
      if (mine !== S.starts) return false;
      errorMessage("Starting a session failed", err);
    }
    if (mine !== S.starts) return false;
    S.starting = false;
    if (created) {
      S.variables = created.variables;
      setSession(created.session_id);
      $("session-id").textContent = "session " + S.session.slice(0, 8) + (S.script ? " (replaying " + created.scripted_turns + " turns)" : "");
      for (const m of created.messages) addMessage("agent welcome", m);
      banner("");
      await refreshState(S.session, null);
    } else {
      drawControls();  // the input now says there is no session
    }
    if (mine !== S.starts) return false;
    drawScript();
    $("input").focus();
    return created !== null;
  }

  function drawScript() {
    const box = $("script"), list = $("script-turns");
    box.hidden = !S.script;
    list.textContent = "";
    if (!S.script) { updateScriptButtons(); return; }
    S.script.turns.forEach((t, i) => list.append(el("li", { "data-index": i }, t.user)));
    markScript();
  }

  function markScript() {
    if (!S.script) { updateScriptButtons(); return; }
    [...$("script-turns").children].forEach((li, i) => {
      li.classList.toggle("done", i < S.turns);
      li.classList.toggle("next", i === S.turns);
    });
    updateScriptButtons();
  }

  function updateScriptButtons() {
    const left = S.script && S.turns < S.script.turns.length && S.session && !S.ended;
    $("step").disabled = !left || S.busy;
    $("play").disabled = !left || S.busy;
  }

  async function step() {
    if (!S.script || S.turns >= S.script.turns.length) return null;
    return send(S.script.turns[S.turns].user);
  }

  async function playAll() {
    while (S.script && S.turns < S.script.turns.length) {
      const turn = await step();
      if (!turn) break;
    }
  }

  async function loadConversation(text) {
    try {
      const parsed = await api("POST", at("playground/api/conversations"), { text });
      S.script = { text, turns: parsed.turns };
      S.edited = Object.assign({}, parsed.variables);
      if (await newSession(true)) {
        addMessage("notice", "Loaded a conversation of " + parsed.turns.length + " turns: Next step (Alt+S) sends them one by one; its model moves answer them.");
      } else if (!S.session && !S.starting) {
        S.script = null;  // its session did not start (said above): it is not loaded
        drawScript();
      }
    } catch (err) {
      errorMessage("Loading the conversation failed", err);
    }
  }

  async function download(url, fallbackName) {
    if (!S.session) return;
    try {
      const response = await reach(url, { headers: headers() });
      if (!response.ok) throw await failure(response);
      const disposition = response.headers.get("Content-Disposition") || "";
      const match = /filename="([^"]+)"/.exec(disposition);
      const blob = await response.blob();
      const a = el("a", { href: URL.createObjectURL(blob), download: match ? match[1] : fallbackName });
      document.body.append(a);
      a.click();
      a.remove();
    } catch (err) {
      errorMessage("The download failed", err);
    }
  }

  async function selectAgent(name) {
    leaveSession();  // before the agent changes: the old turn draws nothing with the new one
    S.agent = S.config.agents.find((a) => a.name === name) || S.config.agents[0];
    S.script = null;
    S.edited = {};
    for (const v of S.agent.variables) {
      if (Object.prototype.hasOwnProperty.call(S.config.variables, v.name)) S.edited[v.name] = S.config.variables[v.name];
    }
    await loadGraph();
    await newSession(false);
  }

  // ------------------------------------------------------------------ wiring

  async function start() {
    const started = performance.now();
    drawControls();  // no session yet: Send waits for one
    $("key").value = S.key;
    $("key-box").addEventListener("submit", (e) => e.preventDefault());
    $("key").addEventListener("change", () => { S.key = $("key").value; sessionStorage.setItem("agentscript-key", S.key); init(); });
    $("composer").addEventListener("submit", (e) => {
      e.preventDefault();
      const t = $("input").value;
      // Cleared only when the message goes: typed text is never lost to a refusal.
      if (refusal(t) === null) $("input").value = "";
      send(t);
    });
    $("input").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); }
    });
    $("new-session").addEventListener("click", () => { S.edited = {}; for (const v of variableRows()) if (v.name in S.config.variables) S.edited[v.name] = S.config.variables[v.name]; newSession(false); });
    $("restart").addEventListener("click", () => { S.edited = Object.assign({}, S.variables); newSession(true); });
    $("load").addEventListener("click", () => $("load-file").click());
    $("load-file").addEventListener("change", async () => {
      const file = $("load-file").files[0];
      if (file) await loadConversation(await file.text());
      $("load-file").value = "";
    });
    $("step").addEventListener("click", step);
    $("play").addEventListener("click", playAll);
    $("save").addEventListener("click", () => download(at("playground/api/sessions/" + S.session + "/conversation.yaml"), "conversation.yaml"));
    $("traces").addEventListener("click", () => download(at("playground/api/sessions/" + S.session + "/traces.zip"), "traces.zip"));
    $("agent").addEventListener("change", () => selectAgent($("agent").value));
    $("show-llm").addEventListener("change", (e) => $("trace").parentElement.classList.toggle("hide-llm", !e.target.checked));
    $("show-resolution").addEventListener("change", (e) => $("trace").parentElement.classList.toggle("hide-resolution", !e.target.checked));
    document.addEventListener("keydown", (e) => {
      if (!e.altKey) return;
      // By key position (e.code): Alt+letter types another character on some layouts.
      const keys = { KeyN: "new-session", KeyR: "restart", KeyL: "load", KeyS: "step" };
      const target = keys[e.code];
      if (target && !$(target).disabled) { e.preventDefault(); $(target).click(); }
    });
    await init();
    window.playground.loadMs = performance.now() - started;
    document.body.setAttribute("data-ready", "true");
  }

  async function init() {
    try {
      S.config = await api("GET", at("playground/api/config"));
    } catch (err) {
      banner("The playground cannot start: " + err.message);
      return;
    }
    const select = $("agent");
    select.textContent = "";
    for (const a of S.config.agents) select.append(el("option", { value: a.name }, a.name + " (" + a.format + ")"));
    $("model").textContent = "model: " + (S.config.model || "?") + (S.config.stubs.length ? " · stubs: " + S.config.stubs.join(", ") : "");
    const wanted = new URLSearchParams(location.search).get("agent");
    if (wanted) select.value = wanted;
    await selectAgent(select.value);
  }

  // For tests and the curious: send a message, load a script, draw steps.
  window.playground = { send, step, playAll, loadConversation, renderSteps, state: S, loadMs: null };
  start();
})();
