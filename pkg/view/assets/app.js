// rllm view: runs, metrics, episodes token by token. Plain DOM, every
// text set through textContent; data from the server's /api routes.
"use strict";

const main = document.getElementById("main");
const crumbs = document.getElementById("crumbs");
const live = document.getElementById("live");
let timers = [];
let charts = [];

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of kids.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

async function api(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== "" && v !== undefined && v !== null) q.set(k, v);
  const r = await fetch("/api/" + path + "?" + q.toString(), { credentials: "same-origin" });
  if (!r.ok) throw new Error((await r.text()).trim() || r.statusText);
  return r.json();
}

function fmt(x, d) {
  if (x === null || x === undefined) return "–";
  if (typeof x !== "number") return String(x);
  if (Number.isInteger(x)) return String(x);
  return x.toFixed(d === undefined ? 3 : d);
}

function bytes(n) {
  if (!n) return "";
  if (n < 1e6) return (n / 1e3).toFixed(1) + " kB";
  return (n / 1e6).toFixed(1) + " MB";
}

function route() { return new URLSearchParams(location.hash.replace(/^#/, "")); }
function go(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== undefined && v !== null) q.set(k, v);
  location.hash = q.toString();
}

function clear() {
  timers.forEach(clearInterval);
  timers = [];
  charts.forEach(c => c.u.destroy());
  charts = [];
  main.replaceChildren();
}

window.addEventListener("hashchange", render);
window.addEventListener("load", render);

// shown is the episodes tab on screen: opening another of its episodes
// (a new #ep) redraws the episode only, not the list.
let shown = null;

function listKey(p) {
  const q = new URLSearchParams(p);
  q.delete("ep");
  return q.toString();
}

function render() {
  const p = route();
  if (shown && p.get("ep") !== null && listKey(p) === shown.key) {
    document.querySelectorAll("#ep-list tr.ep").forEach(r => r.classList.toggle("selected", r.dataset.i === p.get("ep")));
    showEpisode(shown.box, shown.id, shown.phase, shown.step, +p.get("ep"), p);
    return;
  }
  shown = null;
  clear();
  if (p.get("run")) return runPage(p);
  return runsPage();
}

// ---------------------------------------------------------------- runs
async function runsPage() {
  crumbs.replaceChildren();
  const box = el("div", { id: "runs-page" });
  main.append(box);
  const draw = async () => {
    let data;
    try { data = await api("runs"); } catch (e) { box.replaceChildren(el("p", { class: "err", text: e.message })); return; }
    live.textContent = "updated " + new Date().toLocaleTimeString();
    // The keys set in the most runs first: those are the runs' real differences.
    const diffKeys = new Map();
    data.runs.forEach(r => Object.entries(r.config_diff || {}).forEach(([k, v]) => diffKeys.set(k, (diffKeys.get(k) || 0) + (v === "" ? 0 : 1))));
    const keys = [...diffKeys.keys()].sort((a, b) => diffKeys.get(b) - diffKeys.get(a) || a.localeCompare(b)).slice(0, 8);
    const checked = new Set([...box.querySelectorAll("input.pick:checked")].map(c => c.value));
    const table = el("table", { id: "runs" },
      el("thead", {}, el("tr", {}, el("th", {}), el("th", { text: "run" }), el("th", { text: "status" }), el("th", { class: "num", text: "steps" }),
        el("th", { class: "num", text: "best val/pass@1" }), el("th", { class: "num", text: "episodes" }), el("th", { text: "updated" }),
        keys.map(k => el("th", { text: k })))),
      el("tbody", {}, data.runs.map(r => el("tr", { class: "run clickable", "data-id": r.id, onclick: (ev) => { if (ev.target.tagName !== "INPUT") go({ run: r.id, tab: r.kind === "eval" ? "eval" : "metrics" }); } },
        el("td", {}, el("input", { type: "checkbox", class: "pick", value: r.id, checked: checked.has(r.id) })),
        el("td", { class: "name", text: r.name }),
        el("td", {}, el("span", { class: "status " + r.status, text: r.status })),
        el("td", { class: "num steps", text: r.kind === "eval" ? "" : (r.steps + (r.total_steps ? " / " + r.total_steps : "")) }),
        el("td", { class: "num", text: r.best_val ? fmt(r.best_val.value) + " @" + r.best_val.step : "" }),
        el("td", { class: "num", text: bytes(r.episode_bytes) }),
        el("td", { class: "muted", text: r.updated ? new Date(r.updated).toLocaleString() : "" }),
        keys.map(k => el("td", { text: (r.config_diff || {})[k] ?? "" }))))));
    const compare = el("button", { id: "compare", onclick: () => {
      const ids = [...box.querySelectorAll("input.pick:checked")].map(c => c.value);
      if (ids.length) go({ run: ids.join(","), tab: "metrics" });
    } }, "Overlay the selected runs' metrics");
    box.replaceChildren(
      el("div", { class: "bar" }, el("span", { class: "muted", text: data.runs.length + " runs under " + data.roots.join(", ") }), compare),
      data.runs.length ? table : el("p", { class: "muted", text: "No run here: give rllm view run directories (trainer.default_local_dir) or folders that hold them." }),
      diffKeys.size ? el("p", { class: "muted", text: "Columns after 'updated' are the configuration keys whose values differ between the runs." }) : null);
  };
  await draw();
  timers.push(setInterval(draw, 5000));
}

// ---------------------------------------------------------------- a run
async function runPage(p) {
  const ids = p.get("run").split(",");
  const tab = p.get("tab") || "metrics";
  crumbs.replaceChildren(el("a", { href: "#", text: "runs" }), " / ", ids.join(" + "));
  const tabs = el("nav", { class: "tabs" },
    ["metrics", "episodes", "eval"].map(t => {
      const q = new URLSearchParams(p); q.set("tab", t); q.delete("ep"); q.delete("task");
      return el("a", { href: "#" + q.toString(), class: t === tab ? "on" : "", id: "tab-" + t, text: t });
    }));
  main.append(tabs);
  const body = el("div");
  main.append(body);
  if (tab === "metrics") return metricsTab(body, ids, p);
  if (tab === "eval") return evalTab(body, ids[0], p);
  if (p.get("task")) return taskTab(body, ids[0], p);
  return episodesTab(body, ids[0], p);
}

// ---------------------------------------------------------------- metrics
const defaultKeys = ["critic/score/mean", "val/pass@1", "actor/pg_loss", "actor/entropy", "response_length/mean", "actor/grad_norm", "batch/solve_partial", "timing_s/step"];
const palette = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#4d7c0f"];

// TensorBoard's smoothing: an exponential moving average, debiased.
function smooth(ys, w) {
  let last = 0, n = 0;
  return ys.map(y => {
    if (y === null || !isFinite(y)) return y;
    last = last * w + (1 - w) * y;
    n++;
    return w === 1 ? y : last / (1 - Math.pow(w, n));
  });
}

async function metricsTab(body, ids, p) {
  const state = ids.map(id => ({ id, rows: [], last: -1, keys: new Set() }));
  const filter = el("input", { id: "metric-filter", type: "search", placeholder: "metrics matching…", value: p.get("keys") || "" });
  const sm = el("input", { id: "smoothing", type: "range", min: "0", max: "0.99", step: "0.01", value: p.get("smooth") || "0.6" });
  const smv = el("span", { text: sm.value });
  const grid = el("div", { id: "charts" });
  body.append(el("div", { class: "bar" }, el("label", {}, "metrics ", filter), el("label", {}, "smoothing ", sm, smv),
    el("span", { class: "legend", text: "drag to zoom, double-click to reset; faint lines are the raw values" })), grid);

  const fetchAll = async () => {
    let changed = false;
    for (const s of state) {
      try {
        const d = await api("metrics", { run: s.id, since: s.last });
        d.keys.forEach(k => s.keys.add(k));
        if (d.last < s.last) { s.rows = []; s.last = -1; changed = true; continue; } // rewritten (a resume)
        if (d.rows.length) { s.rows.push(...d.rows); s.last = d.rows[d.rows.length - 1].step; changed = true; }
      } catch (e) { grid.replaceChildren(el("p", { class: "err", text: e.message })); }
    }
    return changed;
  };
  const chosenKeys = () => {
    const all = new Set(); state.forEach(s => s.keys.forEach(k => all.add(k)));
    const f = filter.value.trim();
    let keys = f ? [...all].filter(k => k.includes(f)) : defaultKeys.filter(k => all.has(k));
    if (!f && keys.length === 0) keys = [...all];
    return keys.sort().slice(0, 24);
  };
  const build = () => {
    charts.forEach(c => c.u.destroy()); charts = []; grid.replaceChildren();
    for (const key of chosenKeys()) {
      const box = el("div", { class: "chart", "data-key": key }, el("h4", { text: key }));
      grid.append(box);
      const series = [{ label: "step" }];
      state.forEach((s, i) => {
        series.push({ label: s.id + " (raw)", stroke: palette[i % palette.length] + "40", width: 1, spanGaps: true, points: { show: false } });
        series.push({ label: s.id, stroke: palette[i % palette.length], width: 2, spanGaps: true, points: { show: false } });
      });
      const u = new uPlot({ width: Math.max(400, box.clientWidth - 12), height: 220, series, scales: { x: { time: false } },
        legend: { live: true }, cursor: { drag: { x: true, y: false } } }, [[]], box);
      charts.push({ key, u, box });
    }
    draw();
  };
  const draw = () => {
    const w = parseFloat(sm.value);
    for (const c of charts) {
      const steps = new Set();
      state.forEach(s => s.rows.forEach(r => { if (c.key in r) steps.add(r.step); }));
      const xs = [...steps].sort((a, b) => a - b);
      const data = [xs];
      let points = 0;
      state.forEach(s => {
        const by = new Map();
        s.rows.forEach(r => { if (c.key in r) by.set(r.step, r[c.key]); });
        const ys = xs.map(x => by.has(x) ? by.get(x) : null);
        points += by.size;
        data.push(ys, smooth(ys, w));
      });
      c.u.setData(data);
      c.box.setAttribute("data-points", String(points));
    }
    live.textContent = "updated " + new Date().toLocaleTimeString();
  };
  filter.addEventListener("input", build);
  sm.addEventListener("input", () => { smv.textContent = sm.value; draw(); });
  await fetchAll();
  build();
  timers.push(setInterval(async () => { if (await fetchAll()) { if (charts.length === 0) build(); else draw(); } }, 2000));
}

// ---------------------------------------------------------------- episodes
async function episodesTab(body, id, p) {
  let steps;
  try { steps = await api("steps", { run: id }); } catch (e) { body.append(el("p", { class: "err", text: e.message })); return; }
  const phases = Object.keys(steps.phases);
  if (!phases.length) { body.append(el("p", { class: "muted", text: "This run keeps no episodes (trainer.episodes.save_freq=-1, or none written yet)." })); return; }
  const phase = p.get("phase") && steps.phases[p.get("phase")] ? p.get("phase") : phases[0];
  const list = steps.phases[phase];
  const step = p.get("step") !== null && list.includes(+p.get("step")) ? +p.get("step") : list[list.length - 1];
  const set = (k, v) => { const q = new URLSearchParams(p); if (v === "" || v === null) q.delete(k); else q.set(k, v); if (k !== "offset" && k !== "ep") q.delete("offset"); if (k !== "ep") q.delete("ep"); location.hash = q.toString(); };
  const phaseSel = el("select", { id: "ep-phase", onchange: e => { const q = new URLSearchParams(p); q.set("phase", e.target.value); q.delete("step"); q.delete("ep"); location.hash = q.toString(); } },
    phases.map(ph => el("option", { value: ph, selected: ph === phase, text: ph })));
  const stepSel = el("select", { id: "ep-step", onchange: e => set("step", e.target.value) },
    list.slice().reverse().map(s => el("option", { value: s, selected: s === step, text: "step " + s })));
  const f = {
    min_reward: el("input", { id: "ep-min-reward", type: "number", step: "any", value: p.get("min_reward") || "" }),
    max_reward: el("input", { id: "ep-max-reward", type: "number", step: "any", value: p.get("max_reward") || "" }),
    min_len: el("input", { id: "ep-min-len", type: "number", value: p.get("min_len") || "" }),
    max_len: el("input", { id: "ep-max-len", type: "number", value: p.get("max_len") || "" }),
    term: el("select", { id: "ep-term" }, el("option", { value: "", text: "any" })),
    source: el("select", { id: "ep-source" }, el("option", { value: "", text: "any" })),
  };
  const apply = el("button", { id: "ep-apply", onclick: () => {
    const q = new URLSearchParams(p);
    for (const [k, e] of Object.entries(f)) { if (e.value === "") q.delete(k); else q.set(k, e.value); }
    q.delete("offset"); q.delete("ep");
    location.hash = q.toString();
  } }, "Filter");
  const count = el("span", { id: "ep-count", class: "muted" });
  const listBox = el("div", { class: "panel", id: "ep-list-box" });
  const epBox = el("div", { class: "panel", id: "episode" }, el("p", { class: "muted", text: "Choose an episode." }));
  body.append(el("div", { class: "bar" }, el("label", {}, "phase ", phaseSel), el("label", {}, stepSel),
    el("label", {}, "reward ≥ ", f.min_reward), el("label", {}, "≤ ", f.max_reward),
    el("label", {}, "termination ", f.term), el("label", {}, "data source ", f.source),
    el("label", {}, "response tokens ≥ ", f.min_len), el("label", {}, "≤ ", f.max_len), apply, count),
    el("div", { class: "split" }, listBox, epBox));
  const offset = +(p.get("offset") || 0);
  let d;
  try {
    d = await api("episodes", { run: id, phase, step, offset, limit: 50, min_reward: p.get("min_reward"), max_reward: p.get("max_reward"),
      term: p.get("term"), source: p.get("source"), min_len: p.get("min_len"), max_len: p.get("max_len") });
  } catch (e) { listBox.append(el("p", { class: "err", text: e.message })); return; }
  for (const [sel, facets, key] of [[f.term, d.terms, "term"], [f.source, d.sources, "source"]]) {
    Object.keys(facets).sort().forEach(v => sel.append(el("option", { value: v, selected: p.get(key) === v, text: (v || "(none)") + " (" + facets[v] + ")" })));
  }
  count.textContent = d.matched + " of " + d.total + " episodes";
  const table = el("table", { id: "ep-list" },
    el("thead", {}, el("tr", {}, ["#", "episode", "reward", "termination", "source", "tokens", "turns"].map(h => el("th", { text: h })))),
    el("tbody", {}, d.episodes.map(e => el("tr", { class: "ep clickable" + (String(e.i) === p.get("ep") ? " selected" : ""), "data-i": e.i, "data-reward": e.reward,
      onclick: () => set("ep", e.i) },
      el("td", { class: "num", text: e.i }), el("td", { text: e.id }),
      el("td", { class: "num reward", text: fmt(e.reward) }),
      el("td", {}, el("span", { class: "badge" + (e.truncated ? " warn" : ""), text: e.term || "–" })),
      el("td", { text: e.source }), el("td", { class: "num", text: e.prompt_tokens + "+" + e.response_tokens }), el("td", { class: "num", text: e.turns })))));
  const pager = el("div", { class: "bar" },
    el("button", { id: "ep-prev", disabled: offset === 0, onclick: () => set("offset", Math.max(0, offset - 50)) }, "◀ previous"),
    el("span", { class: "muted", text: d.matched ? (offset + 1) + "–" + Math.min(offset + 50, d.matched) : "none" }),
    el("button", { id: "ep-next", disabled: offset + 50 >= d.matched, onclick: () => set("offset", offset + 50) }, "next ▶"));
  listBox.append(table, pager);
  if (d.note) listBox.append(el("p", { class: "err", text: d.note }));
  shown = { key: listKey(p), box: epBox, id, phase, step };
  if (p.get("ep") !== null) showEpisode(epBox, id, phase, step, +p.get("ep"), p);
}

function shade(mode, lp, adv, maxAdv) {
  if (mode === "logprob" && lp !== null && lp !== undefined) {
    const prob = Math.exp(lp);
    return "rgba(220,38,38," + (0.85 * (1 - prob)).toFixed(3) + ")";
  }
  if (mode === "advantage" && adv !== null && adv !== undefined && maxAdv > 0) {
    const a = Math.min(1, Math.abs(adv) / maxAdv) * 0.7;
    return adv >= 0 ? "rgba(22,163,74," + a.toFixed(3) + ")" : "rgba(220,38,38," + a.toFixed(3) + ")";
  }
  return "transparent";
}

async function showEpisode(box, id, phase, step, i, p, sample, tokOffset) {
  sample = sample || 0;
  let e;
  try { e = await api("episode", { run: id, phase, step, i, sample, tok_offset: tokOffset || 0, tok_limit: 2000 }); }
  catch (err) { box.replaceChildren(el("p", { class: "err", text: err.message })); return; }
  const mode = p.get("shade") || (e.has_advantages ? "advantage" : "logprob");
  const head = el("div", {},
    el("h3", { id: "ep-title", text: e.id }),
    el("div", {},
      el("span", { class: "badge " + (e.is_correct ? "ok" : ""), text: "reward " + fmt(e.reward) }),
      el("span", { class: "badge", text: e.termination_reason || "–" }),
      e.data_source ? el("span", { class: "badge", text: e.data_source }) : null,
      el("span", { class: "badge", text: phase + " step " + e.step }),
      e.truncated ? el("span", { class: "badge warn", id: "truncated", text: "✂ truncated" }) : null,
      el("a", { href: "#", id: "same-task", onclick: ev => { ev.preventDefault(); const q = new URLSearchParams(p); q.set("task", e.task_id); q.delete("ep"); location.hash = q.toString(); } }, "this task across steps →")),
    e.error ? el("p", { class: "err", text: e.error }) : null);
  const metrics = Object.entries(e.metrics || {});
  const facts = el("table", { class: "kv" }, el("tbody", {},
    el("tr", {}, el("td", { class: "muted", text: "task" }), el("td", { text: e.task_id })),
    (e.trajectories || []).flatMap((t, ti) => (t.steps || []).map((s, si) => el("tr", {}, el("td", { class: "muted", text: (t.name || "trajectory " + ti) + " step " + si }),
      el("td", { text: "reward " + fmt(s.reward) + (s.finish_reason ? " · finish " + s.finish_reason : "") + (s.weight_version ? " · weights " + s.weight_version : "") + (s.done ? " · done" : "") })))),
    metrics.map(([k, v]) => el("tr", {}, el("td", { class: "muted", text: k }), el("td", { text: fmt(v) })))));
  const conv = el("div", { id: "conversation" });
  (e.trajectories || []).forEach((t, ti) => {
    if ((e.trajectories || []).length > 1) conv.append(el("h4", { text: (t.name || "trajectory " + ti) + " · reward " + fmt(t.reward) }));
    (t.conversation || []).forEach(m => conv.append(el("div", { class: "msg " + m.role },
      el("span", { class: "role", text: m.role + (m.name ? " (" + m.name + ")" : "") + (m.clipped ? " · shown in part" : "") }),
      m.reasoning ? el("details", {}, el("summary", { text: "reasoning" }), m.reasoning) : null,
      m.content,
      (m.tool_calls || []).map(tc => el("div", { class: "muted", text: "→ " + tc.function.name + "(" + tc.function.arguments + ")" })))));
    if (!(t.conversation || []).length) (t.steps || []).forEach(s => { if (s.action) conv.append(el("div", { class: "msg assistant" }, el("span", { class: "role", text: "action" }), s.action)); });
  });
  // Tokens.
  const tokBox = el("div", { id: "tokens" });
  const info = el("div", { id: "tokinfo", text: "hover a token" });
  const samples = e.samples || [];
  const s = samples[e.sample] || null;
  const sampleSel = el("select", { id: "tok-sample", onchange: ev => showEpisode(box, id, phase, step, i, p, +ev.target.value) },
    samples.map((x, k) => el("option", { value: k, selected: k === e.sample, text: "sequence " + k + " (" + x.response_len + " tokens" + (x.step >= 0 ? ", turn " + x.step : "") + ")" })));
  const shadeSel = el("select", { id: "tok-shade", onchange: ev => { p.set("shade", ev.target.value); showEpisode(box, id, phase, step, i, p, e.sample, tokOffset); } },
    ["logprob", "advantage", "none"].map(m => el("option", { value: m, selected: m === mode, disabled: m === "advantage" && !e.has_advantages, text: "shade by " + m })));
  if (e.prompt && e.prompt.ids) {
    const pr = el("details", { id: "prompt-tokens" }, el("summary", { text: "prompt: " + s.prompt_len + " tokens" + (e.prompt.offset ? " (the last " + e.prompt.ids.length + " shown)" : "") }));
    e.prompt.text.forEach((t, k) => pr.append(el("span", { class: "tok prompt-tok", title: "prompt token " + e.prompt.ids[k] }, t)));
    tokBox.append(pr);
  }
  if (e.response && e.response.ids) {
    const r = e.response;
    const maxAdv = Math.max(0, ...(r.adv || []).map(a => Math.abs(a || 0)));
    r.ids.forEach((tid, k) => {
      const lp = r.lp[k], adv = r.adv ? r.adv[k] : null, masked = r.mask[k] === 0;
      const span = el("span", { class: "tok" + (masked ? " masked" : ""), "data-id": tid, "data-lp": lp ?? "", "data-adv": adv ?? "", "data-mask": r.mask[k] }, r.text[k]);
      if (!masked) span.style.background = shade(mode, lp, adv, maxAdv);
      const desc = "token " + (r.offset + k) + " · id " + tid + " · " + JSON.stringify(r.text[k]) + (masked ? " · masked (not trained: environment/tool token or filtered)" : "") +
        (lp !== null && lp !== undefined ? " · logprob " + lp.toFixed(4) + " (p " + Math.exp(lp).toFixed(3) + ")" : "") + (adv !== null && adv !== undefined ? " · advantage " + adv.toFixed(4) : "");
      span.title = desc;
      span.addEventListener("mouseenter", () => { info.textContent = desc; });
      tokBox.append(span);
    });
    if (s && s.termination === "max_response_length_exceeded") tokBox.append(el("span", { class: "badge warn", id: "tok-truncated", text: "✂ cut at the response length limit" }));
    const more = r.offset + r.ids.length < s.response_len;
    if (r.offset > 0 || more) tokBox.append(el("div", { class: "bar" },
      el("button", { disabled: r.offset === 0, onclick: () => showEpisode(box, id, phase, step, i, p, e.sample, Math.max(0, r.offset - 2000)) }, "◀ earlier tokens"),
      el("span", { class: "muted", text: "tokens " + r.offset + "–" + (r.offset + r.ids.length) + " of " + s.response_len }),
      el("button", { id: "tok-more", disabled: !more, onclick: () => showEpisode(box, id, phase, step, i, p, e.sample, r.offset + 2000) }, "later tokens ▶")));
  }
  const sampleFacts = s ? el("div", { class: "legend" },
    "reward " + fmt(s.reward) + (e.has_advantages ? " · advantage " + fmt(s.advantage) : "") + (s.masked ? " · masked by a filter" : "") + (s.token_mismatch ? " · token mismatch" : "") +
    (e.has_advantages ? (s.trained ? " · trained" : " · not trained") : "") + " · striped tokens are masked out of the loss") : null;
  box.replaceChildren(head, el("h4", { text: "Conversation" }), conv, el("h4", { text: "Tokens" }),
    el("div", { class: "bar" }, sampleSel, shadeSel), sampleFacts, info, tokBox, el("h4", { text: "Details" }), facts);
}

async function taskTab(body, id, p) {
  const phase = p.get("phase") || "train";
  let d;
  try { d = await api("task", { run: id, phase, task: p.get("task") }); } catch (e) { body.append(el("p", { class: "err", text: e.message })); return; }
  body.append(el("h3", { text: "Task " + d.task + " across " + d.steps + " kept steps (" + phase + ")" }),
    el("table", { id: "task-hits" }, el("thead", {}, el("tr", {}, ["step", "#", "reward", "termination", "tokens", "answer"].map(h => el("th", { text: h })))),
      el("tbody", {}, d.hits.map(h => el("tr", { class: "clickable", onclick: () => { const q = new URLSearchParams(p); q.delete("task"); q.set("step", h.step); q.set("ep", h.i); location.hash = q.toString(); } },
        el("td", { class: "num", text: h.step }), el("td", { class: "num", text: h.i }), el("td", { class: "num", text: fmt(h.reward) }),
        el("td", { text: h.term }), el("td", { class: "num", text: h.response_tokens }), el("td", { class: "msg", text: h.answer || "" }))))));
}

// ---------------------------------------------------------------- eval
async function evalTab(body, id, p) {
  let steps;
  try { steps = await api("steps", { run: id }); } catch (e) { body.append(el("p", { class: "err", text: e.message })); return; }
  const phase = steps.phases.eval ? "eval" : "val";
  const list = steps.phases[phase] || [];
  if (!list.length) { body.append(el("p", { class: "muted", text: "No validation or eval episodes kept." })); return; }
  const step = p.get("step") !== null && list.includes(+p.get("step")) ? +p.get("step") : list[list.length - 1];
  const sel = el("select", { id: "eval-step", onchange: e => { const q = new URLSearchParams(p); q.set("step", e.target.value); location.hash = q.toString(); } },
    list.slice().reverse().map(s => el("option", { value: s, selected: s === step, text: phase === "eval" ? "eval" : "validation at step " + s })));
  const d = await api("passk", { run: id, phase, step });
  const k = d.k;
  body.append(el("div", { class: "bar" }, sel, el("a", { href: "#" + new URLSearchParams({ run: id, tab: "episodes", phase, step }).toString(), text: "their episodes →" })),
    el("table", { id: "passk" }, el("thead", {}, el("tr", {}, ["data source", "tasks", "episodes", "pass@1", "pass@" + k].map(h => el("th", { text: h })))),
      el("tbody", {}, [...d.by_source, d.all].map(r => el("tr", { class: r.source === "all" ? "selected" : "" },
        el("td", { text: r.source }), el("td", { class: "num", text: r.tasks }), el("td", { class: "num", text: r.episodes }),
        el("td", { class: "num", text: fmt(r.pass_at_1) }), el("td", { class: "num", text: fmt(r.pass_at_k) }))))));
}
