// Tether console: the few things that move by themselves. No framework, no build step.
"use strict";

const csrf = () => document.querySelector('meta[name="csrf-token"]').content;
// crypto.randomUUID needs a secure context; getRandomValues works on plain http too.
const uid = () => Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
// A value someone else wrote, isolated: its direction (a U+202E in a name) stays inside it.
const bdi = (text) => { const element = document.createElement("bdi"); element.textContent = text; return element; };

// -- overview: refresh the counts every few seconds ----------------------------------
function overview() {
  const fields = {
    "count-received": (d) => Math.round(d.today.received),
    "count-replies": (d) => Math.round(d.today.replies),
    "count-retried": (d) => Math.round(d.today.retried),
    "count-dead": (d) => d.dead,
    "count-backlog": (d) => d.backlog,
    "count-waiting": (d) => d.waiting,
    "count-tokens": (d) => Math.round(d.today.tokens),
    "count-cost": (d) => d.today.cost,
    "rate-received": (d) => Math.round(d.last_minute.received),
    "rate-replies": (d) => Math.round(d.last_minute.replies),
  };
  const refresh = async () => {
    try {
      const response = await fetch("/ui/api/overview", { credentials: "same-origin" });
      if (response.status === 401) { location.href = "/ui/login?next=/ui/"; return; }
      const data = await response.json();
      for (const [id, pick] of Object.entries(fields)) {
        document.getElementById(id).textContent = String(pick(data));
      }
    } catch (_error) { /* the gateway is restarting: try again next time */ }
  };
  setInterval(refresh, 2000);
}

// -- live: the server-sent transitions --------------------------------------------------
function live() {
  const list = document.getElementById("live");
  const state = document.getElementById("live-state");
  const source = new EventSource("/ui/api/live");
  source.onopen = () => { state.textContent = "connected"; };
  source.onerror = () => { state.textContent = "reconnecting…"; };
  source.onmessage = (message) => {
    const line = JSON.parse(message.data);
    const item = document.createElement("li");
    const { event, timestamp, level, logger, ...rest } = line;
    item.append(bdi(timestamp || ""), " ", bdi(event));
    for (const [k, v] of Object.entries(rest)) {  // each field on its own: k=<bdi>v</bdi>
      item.append(` ${k}=`, bdi(typeof v === "string" ? v : JSON.stringify(v)));
    }
    item.dataset.event = event;
    list.prepend(item);
    while (list.children.length > 500) list.lastChild.remove();
  };
}

// -- chat: messages wait in localStorage until the gateway has them ----------------------
function chat() {
  const list = document.getElementById("chat");
  const form = document.getElementById("chat-form");
  const input = document.getElementById("chat-text");
  let chatId = localStorage.getItem("tether-chat-id");
  if (!chatId) { chatId = uid(); localStorage.setItem("tether-chat-id", chatId); }
  const pendingKey = `tether-chat-pending-${chatId}`;
  const pending = () => JSON.parse(localStorage.getItem(pendingKey) || "[]");
  const savePending = (items) => localStorage.setItem(pendingKey, JSON.stringify(items));
  // Messages the gateway refused (it said why): kept and shown, never dropped unseen.
  const refusedKey = `tether-chat-refused-${chatId}`;
  const refused = () => JSON.parse(localStorage.getItem(refusedKey) || "[]");
  const saveRefused = (items) => localStorage.setItem(refusedKey, JSON.stringify(items.slice(-50)));
  let stored = [];
  let streaming = [];  // answers being written (previews, not yet in the store)

  const render = () => {
    const known = new Set(stored.map((line) => line.key));
    list.replaceChildren();
    for (const line of stored) {
      const item = document.createElement("li");
      item.className = line.role;
      item.dir = "auto";
      item.dataset.key = line.key;
      item.textContent = line.text;
      list.append(item);
    }
    for (const preview of streaming) {
      const item = document.createElement("li");
      item.className = "agent streaming";
      item.dir = "auto";
      item.dataset.key = preview.key;
      item.textContent = preview.text;
      list.append(item);
    }
    for (const message of pending()) {
      if (known.has(`web:${chatId}:${message.id}`)) continue;
      const item = document.createElement("li");
      item.className = "user pending";
      item.textContent = message.text;
      list.append(item);
    }
    for (const message of refused()) {
      const item = document.createElement("li");
      item.className = "user refused";
      item.dir = "auto";
      const why = document.createElement("span");
      why.className = "why";
      why.textContent = message.error;
      item.append(message.text, why);
      list.append(item);
    }
  };

  const send = async (message) => {
    const response = await fetch("/ui/api/chat/send", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf() },
      body: JSON.stringify({ chat: chatId, id: message.id, text: message.text }),
    });
    if (response.ok) {  // the gateway has it (new, or from an earlier send)
      savePending(pending().filter((item) => item.id !== message.id));
    } else if (response.status === 400 || response.status === 422) {  // it never will: say so
      let error = "not sent";
      try { error = (await response.json()).error || error; } catch (_error) { /* not JSON */ }
      savePending(pending().filter((item) => item.id !== message.id));
      const others = refused().filter((item) => item.id !== message.id);  // said once
      saveRefused([...others, { id: message.id, text: message.text, error }]);
    }
  };

  // One flush at a time: the timer's and a submit's would otherwise both send what is
  // pending, and a refusal would be shown twice.
  let flushing = null;
  const flush = () => {
    flushing ??= (async () => {
      for (const message of pending()) {
        try { await send(message); } catch (_error) { return; }  // offline: keep it for later
      }
    })().finally(() => { flushing = null; });
    return flushing;
  };

  const poll = async () => {
    try {
      const response = await fetch(`/ui/api/chat/log?chat=${encodeURIComponent(chatId)}`, { credentials: "same-origin" });
      if (response.status === 401) { location.href = "/ui/login?next=/ui/chat"; return; }
      if (response.ok) { ({ lines: stored, streaming } = await response.json()); }
    } catch (_error) { /* restarting */ }
    render();
  };

  form.addEventListener("submit", async (submitted) => {
    submitted.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    input.value = "";
    savePending([...pending(), { id: uid(), text }]);
    render();
    await flush();
    await poll();
  });
  flush().then(poll);
  setInterval(async () => { await flush(); await poll(); }, 500);
}

const pages = { overview, live, chat };
const start = pages[document.body.dataset.page];
if (start) start();
