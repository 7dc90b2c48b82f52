// kiq's dashboard: plain script, no build step, reads only this node's API.
//   /v1/metadata?cluster=true  the cluster map (nodes x partitions per table)
//   /v1/status                 this node's counters; rates are differences between two polls
//   /v1/pipelines              each streaming query's progress, as its driver published it
//   /v1/tables                 whether this cluster serves stock-quotes (then the stock board)
// On a cluster that checks tokens, the page asks for one and sends it as a bearer header.
"use strict";

const POLL_MS = 2000;
const BOARD_POLL_MS = 1000;
const BOARD_SIZE = 16;
const QUOTES = "stock-quotes";

const state = {
  token: sessionStorage.getItem("kiq-token") || "",
  previous: null, // the last /v1/status, for rates
  board: null, // {symbols, rows: Map symbol -> tr, source, timer}
  boardStarting: false,
};

// -- fetching -------------------------------------------------------------------------------

class AuthNeeded extends Error {}

async function api(path) {
  const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
  const resp = await fetch(path, { headers, cache: "no-store" });
  if (resp.status === 401 || resp.status === 403) {
    askToken(resp.status === 401 ? "This cluster checks tokens: paste one with the kiq:admin scope."
      : "That token may not read this (it needs the kiq:admin scope): paste another.");
    throw new AuthNeeded(path);
  }
  if (!resp.ok) throw new Error(path + " answered " + resp.status);
  return resp.json();
}

function askToken(why) {
  document.getElementById("auth-why").textContent = why;
  document.getElementById("auth").hidden = false;
}

document.getElementById("auth").addEventListener("submit", (event) => {
  event.preventDefault();
  state.token = document.getElementById("token").value.trim();
  sessionStorage.setItem("kiq-token", state.token);
  document.getElementById("auth").hidden = true;
  stopBoard();
  refresh();
});

// -- building -------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (name === "class") node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : String(child ?? ""));
  }
  return node;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function num(value, digits) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  return Number(value).toLocaleString("en-US", {
    maximumFractionDigits: digits ?? 0, minimumFractionDigits: digits ?? 0,
  });
}

function ms(value) {
  if (value === null || value === undefined) return "–";
  return value < 10 ? num(value, 2) + " ms" : value < 1000 ? num(value, 0) + " ms"
    : num(value / 1000, 1) + " s";
}

function ago(epochMs) {
  if (!epochMs) return "–";
  const s = Math.max(0, (Date.now() - epochMs) / 1000);
  return s < 60 ? num(s, 0) + " s ago" : num(s / 60, 0) + " min ago";
}

// -- the cluster map ------------------------------------------------------------------------

function role(part, nodeId, reachable) {
  const replica = (part.replicas || []).find((r) => r.node === nodeId);
  let kind = part.active === nodeId ? "active"
    : (part.standbys || []).includes(nodeId) ? "standby" : null;
  if (!kind) return { kind: "none", text: "·", title: "no replica" };
  if (!reachable) return { kind: "unreachable", text: "?", title: kind + ", node not answering" };
  const local = replica && replica.local;
  if (local && local.state === "restoring") kind = "restoring";
  const lag = local ? local.lag : null;
  const letter = { active: "A", standby: "S", restoring: "R" }[kind];
  const title = kind + (local ? `, applied ${local.applied_offset}, lag ${lag}` : "");
  return { kind, text: lag ? letter + " " + lag : letter, title };
}

function renderCluster(meta) {
  document.getElementById("node").textContent =
    `node ${meta.node.id} · ${meta.nodes.length} nodes · view ${meta.view_version}`;
  const reachable = new Set([meta.node.id]);
  for (const table of Object.values(meta.tables)) {
    for (const part of table.partitions) {
      for (const r of part.replicas || []) if (r.reachable) reachable.add(r.node);
    }
  }
  const maps = Object.entries(meta.tables).map(([name, table]) => {
    const head = el("tr", {}, el("th", { class: "node" }, "node \\ partition"),
      ...table.partitions.map((p) => el("th", {}, p.partition)));
    const rows = meta.nodes.map((n) => el("tr", { "data-node": n.id },
      el("th", { class: "node", title: n.url }, n.id),
      ...table.partitions.map((p) => {
        const r = role(p, n.id, reachable.has(n.id));
        return el("td", {}, el("span", {
          class: "cell " + r.kind, title: r.title, "data-partition": p.partition,
          "data-role": r.kind,
        }, r.text));
      })));
    return el("div", { class: "map", "data-table": name },
      el("h3", {}, name, el("span", { class: "muted" }, "  topic " + table.topic)),
      el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows)));
  });
  document.getElementById("cluster").replaceChildren(...maps);
}

// -- this node's figures --------------------------------------------------------------------

// The q quantile (ms) of per-bucket counts over bounds (ms, then +Inf), as the server's.
function quantile(bounds, counts, q) {
  const total = counts.reduce((a, b) => a + b, 0);
  if (!total) return null;
  const rank = q * total;
  let below = 0;
  for (let i = 0; i < counts.length; i++) {
    if (counts[i] && below + counts[i] >= rank) {
      if (i >= bounds.length) return bounds[bounds.length - 1];
      const lower = i > 0 ? bounds[i - 1] : 0;
      return lower + (bounds[i] - lower) * (rank - below) / counts[i];
    }
    below += counts[i];
  }
  return bounds[bounds.length - 1];
}

function renderStatus(status) {
  const before = state.previous;
  const seconds = before ? (status.time_ms - before.time_ms) / 1000 : 0;
  const rate = (now, then) => (seconds > 0 && then !== undefined ? (now - then) / seconds : null);
  fill(document.querySelector("#routes tbody"), Object.entries(status.routes).map(([name, r]) => {
    const old = before && before.routes[name];
    const errors = (s) => Object.entries(s.statuses).filter(([c]) => c >= "500")
      .reduce((a, [, n]) => a + n, 0);
    let p50 = r.p50_ms, p99 = r.p99_ms;
    if (old && r.requests > old.requests) { // over the last interval only
      const counts = r.buckets.map((n, i) => n - old.buckets[i]);
      p50 = quantile(status.bounds_ms, counts, 0.5);
      p99 = quantile(status.bounds_ms, counts, 0.99);
    }
    return el("tr", { "data-route": name }, el("td", {}, name),
      el("td", { class: "num" }, num(rate(r.requests, old && old.requests), 1)),
      el("td", { class: "num" }, num(rate(errors(r), old && errors(old)), 1)),
      el("td", { class: "num" }, ms(p50)), el("td", { class: "num" }, ms(p99)),
      el("td", { class: "num" }, num(r.requests)));
  }));
  fill(document.querySelector("#tables tbody"), Object.entries(status.tables).map(([name, t]) => {
    const old = before && before.tables[name];
    const here = Object.entries(t.replicas).map(([s, n]) => `${n} ${s}`).join(", ") || "none";
    return el("tr", { "data-table": name }, el("td", {}, name), el("td", {}, here),
      el("td", { class: "num" }, num(rate(t.applied, old && old.applied), 1)),
      el("td", { class: "num" }, num(t.max_lag)),
      el("td", { class: "num" }, num(t.dead_letters)));
  }));
  state.previous = status;
}

// -- pipelines ------------------------------------------------------------------------------

// Where a query's rates come from (rates_from): Spark counts a batch when it ends, and a
// Real-Time Mode batch lasts minutes, so kiq counts its input on the Kafka log meanwhile.
const NOT_YET = "not measured yet: Spark counts a batch's rows when it ends, and none has";
const processedKnown = (q) => q.rates_from !== "none" && !(q.rates_from === "kafka" && q.batch < 0);
const inputWhy = (q) => q.rates_from === "none" ? NOT_YET
  : q.rates_from === "kafka" ? "rows arriving on its input topics in the last 30 s, kiq's count"
  : "Spark's, for the last batch";
const processedWhy = (q) => !processedKnown(q) ? NOT_YET
  : q.trigger === "realtime" ? "Spark's, for the last Real-Time Mode batch that ended"
  : "Spark's, for the last batch";

function renderPipelines(answer) {
  const note = document.getElementById("pipelines-note");
  note.textContent = answer.error ? "progress unavailable: " + answer.error
    : answer.queries.length ? "" : "no pipeline has published progress (topic " + answer.topic + ")";
  fill(document.querySelector("#pipelines tbody"), answer.queries.map((q) => {
    const said = q.stale ? "stale?" : q.state;
    const batch = q.trigger === "realtime" ? "real-time" : ms(q.batch_ms);
    return el("tr", { class: q.stale ? "stale" : q.state, "data-query": q.query },
      el("td", {}, q.pipeline), el("td", {}, q.query), el("td", {}, q.trigger),
      el("td", { title: q.error || "" }, said),
      el("td", { class: "num", title: inputWhy(q) },
        q.rates_from === "none" ? "–" : num(q.input_rows_per_s, 1)),
      el("td", { class: "num", title: processedWhy(q) },
        processedKnown(q) ? num(q.processed_rows_per_s, 1) : "–"),
      el("td", { class: "num", title: "batch " + q.batch }, batch),
      el("td", { class: "num", title: "offsets between the last batch's end and the log end" },
        num(q.behind)),
      el("td", { class: "num", title: "published " + q.age_s + " s ago" }, ago(q.reported_ms)));
  }));
}

// -- the stock board --------------------------------------------------------------------------

async function startBoard() {
  const wanted = new URLSearchParams(location.search).get("symbols");
  let symbols = wanted ? wanted.split(",").map((s) => s.trim().toUpperCase()).filter(Boolean) : [];
  if (!symbols.length) {
    const page = await api(`/v1/tables/${QUOTES}/range?limit=${BOARD_SIZE}`);
    symbols = page.items.map((item) => item.key);
  }
  if (!symbols.length) return; // no quote yet: the next refresh tries again
  const rows = new Map(symbols.map((s) => [s, el("tr", { "data-symbol": s }, el("td", {}, s),
    ...Array.from({ length: 6 }, () => el("td", { class: "price" }, "–")))]));
  fill(document.querySelector("#board tbody"), [...rows.values()]);
  document.getElementById("board-section").hidden = false;
  state.board = { symbols, rows, source: null, timer: null };
  const query = encodeURIComponent(symbols.join(","));
  await quotesOnce(query); // the stream says what changes from now on
  if (!state.token && window.EventSource) {
    let heard = false;
    setMode("connecting to the stream…");
    const source = new EventSource(`/v1/stocks/stream?symbols=${query}`);
    source.addEventListener("quote", (event) => {
      heard = true;
      showQuote(JSON.parse(event.data));
    });
    source.onopen = () => { heard = true; setMode("live (server-sent events)"); };
    source.onerror = () => {
      if (!heard && source.readyState === EventSource.CLOSED) pollBoard(query); // no stream here
    };
    state.board.source = source;
  } else {
    pollBoard(query); // EventSource sends no Authorization header
  }
}

function setMode(text) {
  document.getElementById("board-mode").textContent = text;
}

function pollBoard(query) {
  const board = state.board;
  if (board.source) board.source.close();
  board.source = null;
  setMode("polling every " + BOARD_POLL_MS / 1000 + " s");
  const poll = async () => {
    try {
      await quotesOnce(query);
    } catch (error) {
      problem(error);
    }
    if (state.board === board) board.timer = setTimeout(poll, BOARD_POLL_MS);
  };
  poll();
}

async function quotesOnce(query) {
  const answer = await api(`/v1/stocks?symbols=${query}`);
  for (const quote of Object.values(answer.quotes)) showQuote(quote);
}

function stopBoard() {
  if (!state.board) return;
  if (state.board.source) state.board.source.close();
  clearTimeout(state.board.timer);
  state.board = null;
}

function showQuote(quote) {
  const row = state.board && state.board.rows.get(quote.symbol);
  if (!row) return;
  const last = quote.last && quote.last.price;
  const open = quote.day && quote.day.open;
  const change = last && open ? (last - open) / open * 100 : null;
  const cells = row.children;
  const set = (i, text, cls) => {
    const cell = cells[i];
    if (cell.textContent !== text) {
      cell.textContent = text;
      cell.className = "price " + (cls || "");
      void cell.offsetWidth; // restart the flash
      cell.classList.add("flash");
    }
  };
  set(1, num(last, 2));
  set(2, change === null ? "–" : (change >= 0 ? "+" : "") + num(change, 2) + "%",
    change === null ? "" : change >= 0 ? "up" : "down");
  set(3, num(quote.best_bid && quote.best_bid.price, 2));
  set(4, num(quote.best_ask && quote.best_ask.price, 2));
  set(5, num(quote.day && quote.day.volume));
  set(6, quote.updated_at ? new Date(quote.updated_at).toLocaleTimeString() : "–");
}

// -- the loop -------------------------------------------------------------------------------

function problem(error) {
  const box = document.getElementById("problem");
  if (error instanceof AuthNeeded) return;
  box.hidden = !error;
  box.textContent = error ? String(error.message || error) : "";
}

async function refresh() {
  const jobs = [
    api("/v1/metadata?cluster=true").then(renderCluster),
    api("/v1/status").then(renderStatus),
    api("/v1/pipelines").then(renderPipelines),
  ];
  if (!state.board && !state.boardStarting) {
    state.boardStarting = true;
    jobs.push(api("/v1/tables").then((answer) => {
      if (answer.tables.some((t) => t.name === QUOTES)) return startBoard();
      return undefined;
    }).finally(() => { state.boardStarting = false; }));
  }
  const failed = (await Promise.allSettled(jobs)).find((r) => r.status === "rejected");
  problem(failed ? failed.reason : null);
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
}

async function loop() {
  await refresh();
  setTimeout(loop, POLL_MS);
}

loop();
