// The page of `tether serve`: sessions, the conversation streaming over AG-UI, tool call
// cards, approval cards with the gate's reasons, MCP servers' requests for input.
//
// Every text a model, a tool, a server or a stored session wrote is put on the page as
// text (textContent), never as HTML: a model's <img onerror> is shown, not run. The token
// comes in the URL tether serve printed; it is kept for this tab only and taken out of
// the address bar at once.
"use strict";

const TOKEN_KEY = "tether-token";
const state = {
  token: null,
  sessionId: null,
  running: false,
  decisions: new Map(), // interrupt id -> {status, payload}
  interrupts: [],
};

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key === "class") node.className = value;
    else if (key.startsWith("data-") || key.startsWith("aria-") ||
             ["type", "id", "for", "name", "role", "title", "rows"].includes(key)) {
      node.setAttribute(key, value === true ? "" : String(value));
    } else node[key] = value;
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function newId() {
  const bytes = new Uint8Array(6);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function takeToken() {
  const url = new URL(window.location.href);
  const given = url.searchParams.get("token");
  if (given) {
    sessionStorage.setItem(TOKEN_KEY, given);
    url.searchParams.delete("token");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

async function api(path, body) {
  const init = {headers: {Authorization: `Bearer ${state.token}`}};
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  return fetch(path, init);
}

function showError(text) {
  const node = document.getElementById("error");
  node.textContent = text || "";
  node.hidden = !text;
}

async function errorOf(response) {
  try {
    const data = await response.json();
    return data.error || `HTTP ${response.status}`;
  } catch (e) {
    return `HTTP ${response.status}`;
  }
}

// --- sessions ------------------------------------------------------------------------------

async function loadSessions() {
  const response = await api("/api/sessions");
  if (!response.ok) return showError(await errorOf(response));
  const data = await response.json();
  const list = document.getElementById("sessions");
  list.replaceChildren();
  for (const s of data.sessions) {
    const flags = [s.paused ? "waiting for approval" : null, s.busy ? "running" : null]
      .filter(Boolean).join(", ");
    const button = el("button", {type: "button", "data-session": s.id,
                                 "aria-current": s.id === state.sessionId ? "true" : null},
      el("span", {class: "title", text: s.title || s.id}),
      flags ? el("span", {class: "flags", text: flags}) : null);
    button.addEventListener("click", () => openSession(s.id));
    list.append(el("li", {}, button));
  }
}

function newSession() {
  state.sessionId = null;
  state.interrupts = [];
  state.decisions.clear();
  document.getElementById("conversation").replaceChildren();
  document.getElementById("session-title").textContent = "New session";
  showTaint(null);
  showError("");
  loadSessions();
  document.getElementById("message").focus();
}

async function openSession(id) {
  const response = await api(`/api/sessions/${encodeURIComponent(id)}`);
  if (!response.ok) return showError(await errorOf(response));
  const data = await response.json();
  state.sessionId = id;
  state.decisions.clear();
  document.getElementById("session-title").textContent = data.session.title || id;
  const conversation = document.getElementById("conversation");
  conversation.replaceChildren();
  showError("");
  const cards = new Map();
  for (const m of data.messages) {
    if (m.role === "user") addMessage("user", m.content);
    else if (m.role === "assistant") {
      if (m.content) addMessage("assistant", m.content);
      for (const call of m.toolCalls || []) {
        cards.set(call.id, addToolCard(call.id, call.function.name, call.function.arguments));
      }
    } else if (m.role === "tool") {
      const card = cards.get(m.toolCallId);
      if (card) setResult(card, m.content, m.tether ? (m.tether.error ? "error" : "ok") : "ok");
    }
  }
  showTaint(data.taint);
  showInterrupts(data.interrupts);
  loadSessions();
}

function showTaint(taint) {
  const node = document.getElementById("taint");
  if (!taint) { node.textContent = ""; return; }
  const seen = [taint.private ? "private data" : null, taint.untrusted ? "untrusted text" : null]
    .filter(Boolean);
  node.textContent = seen.length ? `seen: ${seen.join(", ")}` : "seen: nothing private or untrusted";
  node.dataset.private = taint.private;
  node.dataset.untrusted = taint.untrusted;
}

// --- the conversation ---------------------------------------------------------------------

function addMessage(role, text) {
  const node = el("div", {class: `message ${role}`, "data-role": role},
    el("div", {class: "who", text: role === "user" ? "You" : "Assistant"}),
    el("div", {class: "text", text: text || ""}));
  document.getElementById("conversation").append(node);
  node.scrollIntoView({block: "end"});
  return node;
}

function addToolCard(id, name, args) {
  const card = el("div", {class: "tool-call", "data-role": "tool-call", "data-call-id": id},
    el("div", {class: "tool-name", text: name}),
    el("pre", {class: "arguments", text: pretty(args)}),
    el("div", {class: "status", "data-status": "requested", text: "requested"}),
    el("pre", {class: "result", hidden: true}));
  document.getElementById("conversation").append(card);
  return card;
}

function setResult(card, content, status) {
  const statusNode = card.querySelector(".status");
  statusNode.textContent = status;
  statusNode.dataset.status = status;
  const result = card.querySelector(".result");
  result.textContent = content;
  result.hidden = false;
}

function pretty(args) {
  try { return JSON.stringify(JSON.parse(args), null, 2); } catch (e) { return String(args); }
}

function cardOf(callId) {
  for (const card of document.querySelectorAll('[data-role="tool-call"]')) {
    if (card.dataset.callId === callId) return card;
  }
  return null;
}

// --- a run over AG-UI ------------------------------------------------------------------------

async function run(input) {
  state.running = true;
  document.getElementById("send").disabled = true;
  showError("");
  const body = {threadId: state.sessionId, runId: newId(), messages: [], tools: [],
                context: [], state: {}, forwardedProps: {}, ...input};
  let response;
  try {
    response = await api("/agui", body);
  } catch (e) {
    finishRun();
    return showError(`the server did not answer: ${e}`);
  }
  if (!response.ok) {
    finishRun();
    return showError(await errorOf(response));
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const stream = {buffer: "", answer: null, args: new Map()};
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    stream.buffer += decoder.decode(value, {stream: true});
    let cut;
    while ((cut = stream.buffer.indexOf("\n\n")) >= 0) {
      const frame = stream.buffer.slice(0, cut);
      stream.buffer = stream.buffer.slice(cut + 2);
      const data = frame.split("\n").filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).trimStart()).join("\n");
      if (data) onEvent(JSON.parse(data), stream);
    }
  }
  finishRun();
}

function finishRun() {
  state.running = false;
  document.getElementById("send").disabled = false;
  loadSessions();
}

function onEvent(event, stream) {
  switch (event.type) {
    case "TEXT_MESSAGE_START":
      stream.answer = addMessage("assistant", "");
      stream.answer.dataset.streaming = "true";
      break;
    case "TEXT_MESSAGE_CONTENT":
      if (!stream.answer) stream.answer = addMessage("assistant", "");
      stream.answer.querySelector(".text").textContent += event.delta;
      break;
    case "TEXT_MESSAGE_END":
      if (stream.answer) delete stream.answer.dataset.streaming;
      stream.answer = null;
      break;
    case "TOOL_CALL_START":
      stream.args.set(event.toolCallId, "");
      // A resumed run names its paused calls again: their cards are on the page.
      if (!cardOf(event.toolCallId)) addToolCard(event.toolCallId, event.toolCallName, "");
      break;
    case "TOOL_CALL_ARGS": {
      const args = (stream.args.get(event.toolCallId) || "") + event.delta;
      stream.args.set(event.toolCallId, args);
      const card = cardOf(event.toolCallId);
      if (card) card.querySelector(".arguments").textContent = pretty(args);
      break;
    }
    case "TOOL_CALL_RESULT": {
      const card = cardOf(event.toolCallId);
      const meta = (event.metadata && event.metadata.tether) || {};
      if (card) setResult(card, event.content, meta.status || "ok");
      break;
    }
    case "CUSTOM":
      onCustom(event);
      break;
    case "RUN_FINISHED":
      if (event.result && event.result.taint) showTaint(event.result.taint);
      if (event.outcome && event.outcome.type === "interrupt") {
        showInterrupts(event.outcome.interrupts);
      }
      if (event.outcome && event.outcome.type === "cancelled") {
        showError("the run was interrupted");
      }
      break;
    case "RUN_ERROR":
      showError(event.message);
      break;
    default:
      break;
  }
}

function onCustom(event) {
  if (event.name === "tether.taint") showTaint(event.value);
  else if (event.name === "tether.notice") {
    document.getElementById("conversation").append(
      el("div", {class: `notice ${event.value.level}`, "data-role": "notice",
                 text: event.value.message}));
  } else if (event.name === "tether.elicitation") showElicitation(event.value);
  else if (event.name === "tether.elicitation_closed") {
    for (const form of document.querySelectorAll('[data-role="elicitation"]')) {
      if (form.dataset.id === event.value.id) form.remove();
    }
  }
}

// --- approval cards ------------------------------------------------------------------------

const VERDICTS = {
  user: "from your own words",
  trusted: "from a trusted result",
  untrusted: "found only in untrusted text",
  model: "in no text the model saw: the model wrote it",
  default: "the tool's own default",
};

function showInterrupts(interrupts) {
  state.interrupts = interrupts || [];
  state.decisions.clear();
  for (const interrupt of state.interrupts) {
    const view = (interrupt.metadata && interrupt.metadata.tether) || {};
    const call = cardOf(view.call_id);
    if (call) {
      const status = call.querySelector(".status");
      status.textContent = "waiting for approval";
      status.dataset.status = "waiting";
    }
    const card = approvalCard(interrupt, view);
    document.getElementById("conversation").append(card);
    card.scrollIntoView({block: "end"});
  }
}

function approvalCard(interrupt, view) {
  const card = el("div", {class: "approval", "data-role": "approval",
                          "data-interrupt": interrupt.id, "data-call-id": view.call_id},
    el("div", {class: "approval-title"},
      el("strong", {text: "Approval needed: "}), el("span", {text: view.title || view.tool}),
      el("span", {class: "machine", text: ` (${view.tool})`})),
    el("p", {class: "explanation", text: interrupt.message || ""}));
  if (view.mcp) {
    card.append(el("p", {class: "mcp", "data-trusted": view.mcp.trusted,
      text: `MCP server "${view.mcp.server}" (${view.mcp.trusted ? "trusted" : "untrusted"})`}));
  }
  const taint = view.taint || {};
  const seen = [taint.private ? "private data" : null, taint.untrusted ? "untrusted text" : null]
    .filter(Boolean);
  card.append(el("p", {class: "taint",
    text: seen.length ? `This conversation has seen ${seen.join(" and ")}.`
                      : "This conversation has seen nothing private or untrusted."}));
  if (view.capabilities && view.capabilities.length) {
    card.append(el("p", {class: "can", text: `can: ${view.capabilities.join(", ")}`}));
  }
  if (view.values && view.values.length) card.append(valuesTable(view.values));
  if (view.diff) card.append(diffView(view.diff));
  card.append(el("details", {},
    el("summary", {text: "Arguments (exactly as they will run)"}),
    el("pre", {class: "arguments", text: JSON.stringify(view.arguments, null, 2)})));
  const reasonId = `reason-${interrupt.id}`;
  const reason = el("input", {type: "text", id: reasonId, class: "reason"});
  const buttons = el("div", {class: "buttons"});
  const decide = (word) => {
    const payload = {decision: word};
    if (word === "deny" && reason.value.trim()) payload.reason = reason.value.trim();
    state.decisions.set(interrupt.id, {interruptId: interrupt.id, status: "resolved", payload});
    card.dataset.decided = word;
    for (const b of buttons.querySelectorAll("button")) b.disabled = true;
    card.querySelector(".decided").textContent = {allow: "Allowed", allow_session:
      "Allowed for this session", deny: "Denied"}[word];
    sendDecisions();
  };
  const allow = el("button", {type: "button", text: "Allow"});
  allow.addEventListener("click", () => decide("allow"));
  buttons.append(allow);
  if (view.can_cache) {
    const session = el("button", {type: "button", text: "Allow for session"});
    session.addEventListener("click", () => decide("allow_session"));
    buttons.append(session);
  }
  const deny = el("button", {type: "button", class: "deny", text: "Deny"});
  deny.addEventListener("click", () => decide("deny"));
  buttons.append(deny);
  card.append(el("div", {class: "reason-box"},
    el("label", {for: reasonId, text: "Reason (told to the model when you deny)"}), reason),
    buttons, el("div", {class: "decided", "aria-live": "polite"}));
  return card;
}

function valuesTable(values) {
  const table = el("table", {class: "values"},
    el("caption", {text: "Where each value came from"}),
    el("tr", {}, el("th", {text: "argument"}), el("th", {text: "value"}),
       el("th", {text: "came from"})));
  for (const v of values) {
    const sources = v.trusted_sources.length ? v.trusted_sources : v.untrusted_sources;
    table.append(el("tr", {class: `verdict-${v.verdict}`, "data-verdict": v.verdict},
      el("td", {text: v.argument}), el("td", {class: "value", text: v.value}),
      el("td", {text: VERDICTS[v.verdict] + (sources.length && v.verdict !== "user"
                                              ? `: ${sources.join(", ")}` : "")})));
  }
  return table;
}

function diffView(diff) {
  const pre = el("pre", {class: "diff", "aria-label": `changes to ${diff.path}`});
  for (const [op, line] of diff.lines) {
    pre.append(el("span", {class: op === "+" ? "add" : op === "-" ? "del" : "same",
                           text: `${op} ${line}\n`}));
  }
  return el("div", {class: "diff-box"},
    el("div", {text: diff.new_file ? `new file ${diff.path}` : `changes to ${diff.path}`}), pre);
}

function sendDecisions() {
  if (state.decisions.size < state.interrupts.length || state.running) return;
  const resume = state.interrupts.map((i) => state.decisions.get(i.id));
  state.interrupts = [];
  state.decisions.clear();
  run({resume});
}

// --- an MCP server asks for input ------------------------------------------------------------

function showElicitation(request) {
  const form = el("form", {class: "elicitation", "data-role": "elicitation", "data-id": request.id},
    el("p", {class: "asker", text: `The MCP server "${request.server}" (${request.trusted ?
      "trusted" : "untrusted"}) asks:`}),
    el("p", {class: "server-message", text: request.message}));
  if (request.warning) form.append(el("p", {class: "warning", text: request.warning}));
  const inputs = [];
  if (request.mode === "url") {
    form.append(el("p", {text: "It asks you to open this address (tether does not open it):"}),
      el("pre", {class: "url", text: request.url}),
      el("p", {class: "host", text: `host: ${request.host}`}));
  }
  for (const field of request.fields) {
    const id = `field-${request.id}-${field.name}`;
    const input = fieldInput(field, id);
    inputs.push([field, input]);
    form.append(el("label", {for: id, text: (field.title || field.name) +
      (field.required ? " (required)" : "")}), input,
      field.description ? el("small", {text: field.description}) : null);
  }
  const answer = async (action) => {
    const values = {};
    for (const [field, input] of inputs) {
      const value = fieldValue(field, input);
      if (value !== undefined) values[field.name] = value;
    }
    const response = await api(`/api/elicitations/${encodeURIComponent(request.id)}`,
                               {action, values});
    if (!response.ok) showError(await errorOf(response));
    form.remove();
  };
  const accept = el("button", {type: "submit", text: request.mode === "url" ? "I opened it" : "Submit"});
  const decline = el("button", {type: "button", text: "Decline"});
  decline.addEventListener("click", () => answer("decline"));
  form.addEventListener("submit", (e) => { e.preventDefault(); answer("accept"); });
  form.append(el("div", {class: "buttons"}, accept, decline));
  document.getElementById("conversation").append(form);
}

// One input per kind of field: yes or no, one choice, several choices, a number, text.
function fieldInput(field, id) {
  let input;
  if (field.kind === "boolean") input = el("input", {type: "checkbox", id});
  else if (field.kind === "choice" || field.kind === "choices") {
    input = el("select", {id, multiple: field.kind === "choices"});
    if (field.kind === "choice" && !field.required) input.append(el("option", {value: "", text: ""}));
    field.choices.forEach((c, i) => input.append(
      el("option", {value: c, text: field.choice_titles[i] || c})));
  } else {
    input = el("input", {type: field.kind === "string" ? "text" : "number", id});
    if (field.kind === "number") input.step = "any";
  }
  const given = field.default;
  if (given === null || given === undefined) return input;
  if (field.kind === "boolean") input.checked = Boolean(given);
  else if (field.kind === "choices" && Array.isArray(given)) {
    for (const option of input.options) option.selected = given.includes(option.value);
  } else input.value = String(given);
  return input;
}

// The answer of one input, as its field's kind is sent; undefined: left empty.
function fieldValue(field, input) {
  if (field.kind === "boolean") return input.checked;
  if (field.kind === "choices") {
    const picked = Array.from(input.selectedOptions, (o) => o.value);
    return picked.length || field.required ? picked : undefined;
  }
  if (input.value === "") return undefined;
  if (field.kind === "integer") return parseInt(input.value, 10);
  if (field.kind === "number") return Number(input.value);
  return input.value;
}

// --- start ------------------------------------------------------------------------------------

function send(event) {
  event.preventDefault();
  const box = document.getElementById("message");
  const text = box.value;
  if (!text.trim() || state.running) return;
  if (state.interrupts.length) {
    return showError("decide the calls waiting for approval first");
  }
  if (!state.sessionId) {
    state.sessionId = newId();
    document.getElementById("session-title").textContent = text.split("\n")[0].slice(0, 80);
  }
  box.value = "";
  addMessage("user", text);
  run({messages: [{id: newId(), role: "user", content: text}]});
}

function start() {
  state.token = takeToken();
  if (!state.token) {
    document.getElementById("no-token").hidden = false;
    document.getElementById("send").disabled = true;
    return;
  }
  document.getElementById("composer").addEventListener("submit", send);
  document.getElementById("message").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      document.getElementById("composer").requestSubmit();
    }
  });
  document.getElementById("new-session").addEventListener("click", newSession);
  loadSessions();
}

start();
