/* LLM-PowerTrace explorer: page glue around BokehJS (no charting code of its own).
 *
 * Data files are scripts calling LPT.got(key, payload) (browsers refuse fetch() on file://); a
 * pyramid chunk's arrays come as one deflated base64 blob, inflated with DecompressionStream.
 * A run's traces are a pyramid (llm_powertrace_ds/explore/pyramid.py): level 0 holds the raw
 * samples, level k >= 1 the first/second extrema of buckets of bucket_ms[k]; the run page draws the
 * coarsest level whose visible buckets fit MAX_BUCKETS (MAX_SIGNAL_BUCKETS for the small panels of
 * utilisation, clocks, temperature and memory) and loads only the visible chunks.
 * data/site.js (columns, formulas, flags, run count) is on every page; data/catalog.js (the rows,
 * column-wise) only on the catalog and sweep pages. The catalog draws PAGE_ROWS rows at a time and
 * filters and sorts an index of row numbers in memory, never the DOM (10,000 runs stay fast).
 * A run's files are under data/runs/<first 2 hex of its folder's hash>/<folder>/ (catalog.run_dir);
 * run.html?run= takes the folder (the catalog's links) or the run id (looked up in data/catalog.js).
 */
"use strict";

const LPT = (() => {
  const MAX_BUCKETS = 1500;  // power and total: at most 3000 points per line in view
  const MAX_SIGNAL_BUCKETS = 400;  // utilisation, clocks, temperature, memory: the small panels
  const PAGE_ROWS = 100;  // catalog rows drawn at a time
  const FOLDER_RE = /^[A-Za-z0-9_.-]*-[0-9a-f]{8}$/;  // catalog.run_folder: slug-hash8
  const cache = {};
  const pending = {};
  const state = { page: null, level: null, range: null, firstDrawMs: null, draws: 0, marks: {} };
  const mark = (name) => { state.marks[name] = performance.now(); };

  // ---- data loading ---------------------------------------------------------------------------
  function got(key, payload) {
    if (payload && payload.z !== undefined) {  // a pyramid chunk: inflate it first
      unpack(payload).then((chunk) => settle(key, chunk),
        (err) => { const p = pending[key]; if (p) { delete pending[key]; p.reject(err); } });
    } else settle(key, payload);
  }

  function settle(key, payload) {
    cache[key] = payload;
    const p = pending[key];
    if (p) { delete pending[key]; p.resolve(payload); }
  }

  function load(key) {
    if (cache[key]) return Promise.resolve(cache[key]);
    if (pending[key]) return pending[key].promise;
    const entry = {};
    entry.promise = new Promise((resolve, reject) => { entry.resolve = resolve; entry.reject = reject; });
    pending[key] = entry;
    const s = document.createElement("script");
    s.src = "data/runs/" + runDir(key) + ".js";
    s.onload = () => s.remove();
    s.onerror = () => { delete pending[key]; s.remove(); entry.reject(new Error("cannot load " + s.src)); };
    document.head.appendChild(s);
    return entry.promise;
  }

  // catalog.run_dir: "<folder>/<file>" lives in data/runs/<hash's first 2 hex>/<folder>/<file>
  function runDir(key) {
    const folder = key.split("/")[0];
    return folder.slice(-8, -6) + "/" + key;
  }

  function bytes(b64) {
    const bin = atob(b64);
    const u = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i);
    return u;
  }

  // A chunk file's blob (rundata.encode_chunk): deflated, then per array its 4-byte words split
  // into byte planes; times are differences. Inflated by the browser's DecompressionStream, the
  // words are put back together exactly (times and float32 bits, NaN included).
  async function unpack(payload) {
    const stream = new Blob([bytes(payload.z)]).stream().pipeThrough(new DecompressionStream("deflate"));
    const blob = new Uint8Array(await new Response(stream).arrayBuffer());
    const series = {};
    let off = 0;
    for (const [key, name, slot, n, t0] of payload.layout) {
      const words = new Uint8Array(4 * n);
      for (let j = 0; j < 4; j++) {
        const plane = off + j * n;
        for (let i = 0; i < n; i++) words[4 * i + j] = blob[plane + i];
      }
      off += 4 * n;
      let arr;
      if (name === "t") {
        // int32 differences from the chunk's base time, summed in float64 (exact to 2^53 ms):
        // a month-long run never wraps as a 32-bit sum would after 24.8 days
        const d = new Int32Array(words.buffer);
        arr = new Float64Array(n);
        let acc = t0 || 0;
        for (let i = 0; i < n; i++) { acc += d[i]; arr[i] = acc; }
      } else arr = new Float32Array(words.buffer);
      const sig = (series[key] = series[key] || {});
      if (slot < 0) sig[name] = arr;
      else (sig[name] = sig[name] || [])[slot] = arr;
    }
    const chunk = Object.assign({}, payload, { series });
    delete chunk.z; delete chunk.layout;
    return chunk;
  }

  // ---- helpers ----------------------------------------------------------------------------------
  const $ = (tag, attrs, ...kids) => {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v);
    }
    for (const kid of kids) if (kid != null) el.append(kid);
    return el;
  };
  const fmt = (v) => {
    if (v === null || v === undefined) return "—";
    if (Array.isArray(v)) return v.join(", ");
    if (typeof v === "number") {
      if (Number.isInteger(v)) return String(v);
      const a = Math.abs(v);
      return a !== 0 && (a >= 1e6 || a < 1e-3) ? v.toExponential(3) : v.toPrecision(4).replace(/\.?0+$/, "");
    }
    return String(v);
  };
  const params = () => new URLSearchParams(window.location.search);
  const site = () => cache.site;
  let rowsMemo = null;
  // The catalog's rows as objects, rebuilt once from data/catalog.js's columns-wise arrays.
  function catalogRows() {
    if (rowsMemo) return rowsMemo;
    const { names, values } = cache.catalog;
    rowsMemo = values.map((v) => {
      const r = {};
      for (let j = 0; j < names.length; j++) r[names[j]] = v[j];
      return r;
    });
    return rowsMemo;
  }
  const proxyBanner = (what) => $("div", { class: "proxy-banner", role: "alert" },
    "⚠ CPU PROXY — " + what + " MODELLED from CPU activity, NOT measured on a GPU. Never use it as GPU data.");

  // ---- pyramid: which level, which chunks, and the x/y arrays --------------------------------
  function chooseLevel(levels, x0ms, x1ms, maxBuckets = MAX_BUCKETS) {
    const span = Math.max(1, x1ms - x0ms);
    for (let k = 0; k < levels.bucket_ms.length; k++) {
      if (span / levels.bucket_ms[k] <= maxBuckets) return k;
    }
    return levels.bucket_ms.length - 1;
  }

  async function loadRange(meta, level, x0ms, x1ms) {
    const lv = meta.levels;
    const span = lv.chunk_ms[level];
    const c0 = Math.max(0, Math.floor((x0ms - lv.origin_ms) / span));
    const c1 = Math.min(lv.n_chunks[level] - 1, Math.floor((x1ms - lv.origin_ms) / span));
    const keys = [];
    for (let c = c0; c <= c1; c++) keys.push(meta.folder + "/L" + level + "-" + c);
    return Promise.all(keys.map(load));
  }

  // Returns {seriesKey: {signal: {x: Float64Array (s), y: Float32Array}}} for the chunks.
  function decode(meta, chunks, offsetMs) {
    const lv = meta.levels;
    const out = {};
    for (const ch of chunks) {
      for (const [key, sig] of Object.entries(ch.series)) {
        out[key] = out[key] || {};
        if (ch.level === 0) {
          const t = sig.t;
          const x = new Float64Array(t.length);
          for (let i = 0; i < t.length; i++) x[i] = (t[i] - offsetMs) / 1000;
          for (const [s, v] of Object.entries(sig)) {
            if (s === "t") continue;
            (out[key][s] = out[key][s] || []).push({ x, y: v });
          }
        } else {
          const w = lv.bucket_ms[ch.level];
          for (const [s, pair] of Object.entries(sig)) {
            const a = pair[0], b = pair[1];
            const n = a.length;
            const x = new Float64Array(2 * n), y = new Float32Array(2 * n);
            for (let i = 0; i < n; i++) {
              const left = lv.origin_ms + (ch.i0 + i) * w - offsetMs;
              x[2 * i] = (left + w / 4) / 1000; y[2 * i] = a[i];
              x[2 * i + 1] = (left + 3 * w / 4) / 1000; y[2 * i + 1] = b[i];
            }
            (out[key][s] = out[key][s] || []).push({ x, y });
          }
        }
      }
    }
    for (const sigs of Object.values(out)) {
      for (const [s, parts] of Object.entries(sigs)) sigs[s] = concat(parts);
    }
    return out;
  }

  // The part of a decoded series with lo <= x <= hi (x is non-decreasing): a whole chunk can hold
  // far more points than the view needs.
  function clip(d, lo, hi) {
    const x = d.x;
    let a = 0, b = x.length;
    while (a < b) { const m = (a + b) >> 1; if (x[m] < lo) a = m + 1; else b = m; }
    let c = a, e = x.length;
    while (c < e) { const m = (c + e) >> 1; if (x[m] <= hi) c = m + 1; else e = m; }
    return a === 0 && c === x.length ? d : { x: x.subarray(a, c), y: d.y.subarray(a, c) };
  }

  function concat(parts) {
    if (parts.length === 1) return parts[0];
    let n = 0;
    for (const p of parts) n += p.x.length + 1;
    const x = new Float64Array(n), y = new Float32Array(n);
    let o = 0;
    for (const p of parts) {
      x.set(p.x, o); y.set(p.y, o); o += p.x.length;
      x[o] = p.x.length ? p.x[p.x.length - 1] : 0; y[o] = NaN; o += 1;  // break between chunks
    }
    return { x, y };
  }

  // ---- catalog page -------------------------------------------------------------------------------
  function catalogPage(main) {
    const about = site();
    const cols = about.columns;
    const all = catalogRows();
    const filters = {};
    let sortCol = "run_id", sortDir = 1, pageNo = 0;
    let order = [], shown = [];
    const selected = new Set();
    const collator = new Intl.Collator(undefined, { numeric: true });
    const searchKeys = all.map((r) => String(r.run_id).toLowerCase());
    const proxies = all.filter((r) => r.cpu_proxy).length;
    if (proxies) main.append(proxyBanner(proxies + " of " + all.length + " run(s) are cpu_proxy:"));
    const bar = $("div", { class: "filters" });
    const count = $("span", { id: "row-count" });
    const compareBtn = $("button", { id: "compare-button", disabled: "disabled", onclick: () => {
      window.location.href = "compare.html?runs=" + [...selected].map(encodeURIComponent).join(",");
    } }, "compare selected (2–4)");
    const search = $("input", { type: "search", id: "filter-text", placeholder: "run id contains…",
      oninput: () => { pageNo = 0; refilter(); } });
    bar.append(search);
    // a drop-down per axis that varies in this dataset (catalog.py marks them: 2 to 40 values);
    // folded by default, so the table's figures are what the page shows first
    const box = $("div", { class: "filters-fixed" });
    let nFilters = 0;
    for (const c of cols.filter((c) => c.filter)) {
      const values = new Set();
      for (const r of all) {
        const v = r[c.name];
        if (Array.isArray(v)) v.forEach((x) => values.add(String(x)));
        else if (v !== null && v !== undefined) values.add(String(v));
      }
      const sel = $("select", { "data-filter": c.name, title: c.description,
        onchange: (e) => { filters[c.name] = e.target.value; pageNo = 0; refilter(); } },
        $("option", { value: "", text: c.name + ": all" }));
      [...values].sort(collator.compare).forEach((v) => sel.append($("option", { value: v, text: v })));
      box.append(sel);
      nFilters += 1;
    }
    bar.append(count, compareBtn);
    main.append(bar);
    if (nFilters) {
      main.append($("details", { class: "more-filters", id: "filters-box" },
        $("summary", { text: "filter by " + nFilters + " column(s) that vary in this dataset" }), box));
    }
    const prev = $("button", { id: "page-prev", onclick: () => { pageNo -= 1; draw(); } }, "◀ previous");
    const next = $("button", { id: "page-next", onclick: () => { pageNo += 1; draw(); } }, "next ▶");
    const pageInfo = $("span", { id: "page-info" });
    const pager = $("div", { class: "pager" }, prev, pageInfo, next);
    const table = $("table", { id: "catalog" });
    const head = $("tr");
    head.append($("th", { text: "" }));
    for (const c of cols) {
      head.append($("th", { "data-col": c.name, class: "sortable " + c.group,
        title: (c.description || "") + (c.unit ? " [" + c.unit + "]" : "") + " — click to sort",
        onclick: () => { sortDir = sortCol === c.name ? -sortDir : 1; sortCol = c.name; resort(); refilter(); } },
        c.name + (c.unit ? " (" + c.unit + ")" : "")));
    }
    table.append($("thead", {}, head));
    const body = $("tbody");
    table.append(body);
    main.append($("div", { class: "table-wrap" }, table), pager);

    // nulls last in either direction; numbers by value, text in natural order; ties by row
    function resort() {
      const vals = all.map((r) => r[sortCol]);
      order = all.map((_, i) => i);
      order.sort((a, b) => {
        const x = vals[a], y = vals[b];
        if (x === y) return a - b;
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        const d = typeof x === "number" && typeof y === "number" ? x - y : collator.compare(String(x), String(y));
        return d ? sortDir * d : a - b;
      });
    }
    function refilter() {
      const text = search.value.trim().toLowerCase();
      const active = Object.entries(filters).filter(([, want]) => want);
      shown = order.filter((i) => {
        if (text && !searchKeys[i].includes(text)) return false;
        for (const [name, want] of active) {
          const v = all[i][name];
          if (Array.isArray(v) ? !v.map(String).includes(want) : String(v) !== want) return false;
        }
        return true;
      });
      draw();
    }
    function rowOf(r) {
      const tr = $("tr", { "data-run-id": r.run_id, class: r.cpu_proxy ? "proxy" : "" });
      const box = $("input", { type: "checkbox", "data-select": r.folder, onchange: (e) => {
        if (e.target.checked) selected.add(r.folder); else selected.delete(r.folder);
        compareBtn.disabled = selected.size < 2 || selected.size > 4;
      } });
      box.checked = selected.has(r.folder);
      tr.append($("td", {}, box));
      for (const c of cols) {
        if (c.name === "run_id") {
          tr.append($("td", { class: "run-id" },
            $("a", { href: "run.html?run=" + encodeURIComponent(r.folder), text: r.run_id }),
            r.cpu_proxy ? $("span", { class: "proxy-badge", title: about.flags.cpu_proxy }, "CPU PROXY") : null));
        } else if (c.name === "quality_flags") {
          tr.append($("td", {}, ...(r.quality_flags || []).map((f) =>
            $("span", { class: "flag", title: about.flags[f] || "" }, f))));
        } else {
          tr.append($("td", { class: typeof r[c.name] === "number" ? "num" : "" }, fmt(r[c.name])));
        }
      }
      return tr;
    }
    function draw() {
      const pages = Math.max(1, Math.ceil(shown.length / PAGE_ROWS));
      pageNo = Math.min(Math.max(0, pageNo), pages - 1);
      const first = pageNo * PAGE_ROWS;
      const part = shown.slice(first, first + PAGE_ROWS);
      const frag = document.createDocumentFragment();
      for (const i of part) frag.append(rowOf(all[i]));
      body.replaceChildren(frag);
      count.textContent = shown.length + " of " + all.length + " runs";
      pageInfo.textContent = shown.length ? " rows " + (first + 1) + "–" + (first + part.length) +
        " (page " + (pageNo + 1) + " of " + pages + ") " : " no rows ";
      prev.disabled = pageNo === 0;
      next.disabled = pageNo >= pages - 1;
      pager.hidden = pages === 1;
      for (const th of head.querySelectorAll("th[data-col]")) {
        th.classList.toggle("sorted", th.dataset.col === sortCol);
        th.dataset.dir = th.dataset.col === sortCol ? (sortDir > 0 ? "asc" : "desc") : "";
      }
      state.draws += 1;
    }
    resort();
    refilter();
    state.ready = true;
    // the first frame after the rows were drawn (bench/explorer.py reads it)
    requestAnimationFrame(() => setTimeout(() => { state.paintedAtMs = performance.now(); }, 0));
  }

  // ---- BokehJS glue -------------------------------------------------------------------------------
  // Every chart is a BokehJS model (bokeh.min.js + bokeh-api.min.js from the bokeh package). Each
  // data renderer carries tags [role, key] (role: device, total, signal, dots, phase, event,
  // requests, arrivals, compare, sweep) so tests and external checks find it in the document; the
  // shared time range is the model named "time".
  const B = () => window.Bokeh;
  // The pages load BokehJS with `defer`: it is parsed and run after the page, while the page's
  // own data (run description, pyramid chunks) already loads and inflates.
  const library = new Promise((resolve) => {
    if (document.readyState !== "loading") resolve();
    else document.addEventListener("DOMContentLoaded", () => resolve());
  });
  const source = (data) => new (B().ColumnDataSource)({ data });
  const field = (name) => ({ field: name });

  // Resolves once every root of the document has painted (Bokeh's document idle signal).
  function painted(doc) {
    if (!doc || doc.is_idle) return Promise.resolve();
    return new Promise((resolve) => doc.idle.connect(() => resolve()));
  }

  async function showIn(el, model) {
    const view = await B().Plotting.show(model, el);
    mark("shown");
    await painted(model.document);
    return view;
  }

  function figure(opts) {
    return B().Plotting.figure(Object.assign({ height: 120, sizing_mode: "stretch_width",
      tools: "xpan,xwheel_zoom,xbox_zoom,reset,save", active_scroll: "xwheel_zoom",
      min_border_left: 90, min_border_right: 20, output_backend: "canvas" }, opts));
  }

  // The glyph API passes its arguments to the glyph: the renderer's own name and tags are set here.
  function tag(renderer, role, key, name) {
    renderer.setv({ tags: [role, key], name: name || key });
    return renderer;
  }

  function line(fig, role, key, name, colour, width, extra) {
    return tag(fig.line(Object.assign({ x: field("x"), y: field("y"), source: source({ x: [], y: [] }),
      line_color: colour, line_width: width }, extra || {})), role, key, name);
  }

  // Figures stacked in one grid with one merged toolbar; the mouse wheel zooms time.
  function stack(figs) {
    figs.forEach((f) => { f.toolbar.active_scroll = null; });
    const grid = B().Plotting.gridplot(figs.map((f) => [f]), { toolbar_location: "right", merge_tools: true,
      sizing_mode: "stretch_width" });
    const wheel = grid.toolbar.tools.find((t) => (t.tools ? t.tools[0] : t).type === "WheelZoomTool");
    if (wheel) grid.toolbar.active_scroll = wheel;
    return grid;
  }

  // A zoomable series: its line (the dots of its raw samples are drawn by its figure's dots).
  function slot(fig, key, signal, role, name, colour, width, extra) {
    return { key, signal, r: line(fig, role, key, name, colour, width, extra), colours: [colour], rows: [] };
  }

  // A small panel's series: one multi-line, a row per device (fewer renderers to build and lay
  // out than a line each: the panels are most of a run page's first-draw time).
  function panel(fig, signal, devices, label) {
    const keys = devices.map((d) => d.key);
    const colours = devices.map((d) => COLOURS[d.index % COLOURS.length]);
    const r = tag(fig.multi_line({ xs: field("xs"), ys: field("ys"), line_color: field("colour"), line_width: 1,
      source: source({ xs: [], ys: [], key: [], colour: [] }) }), "signal", signal, label);
    return { keys, signal, r, colours, rows: [] };
  }

  // Hovering a line tells whose it is and its value there.
  function lineHover(renderers, unit) {
    return new (B().HoverTool)({ renderers, tooltips: [["", "$name"], ["t", "$x{0.0} s"], ["", "$y{0.0} " + unit]] });
  }

  // One scatter per figure marks every raw sample of its series while they are few enough to see
  // one by one; made with the figure (empty) because adding a renderer to a drawn figure makes
  // Bokeh lay the whole page out again.
  function dotsFor(fig, slots) {
    const r = tag(fig.scatter({ x: field("x"), y: field("y"), color: field("colour"), size: 3,
      source: source({ x: [], y: [], colour: [] }) }), "dots", fig.name);
    return { r, slots };
  }

  function fillDots(d, on) {
    const data = { x: [], y: [], colour: [] };
    if (on) {
      for (const sl of d.slots) {
        sl.rows.forEach((row, i) => row.x.forEach((x, j) => {
          data.x.push(x); data.y.push(row.y[j]); data.colour.push(sl.colours[i]);
        }));
      }
    }
    if (data.x.length || d.r.data_source.get_length()) d.r.data_source.data = data;
  }

  // Fills a slot with the decoded data clipped to [lo, hi]; returns the points it holds.
  function fill(sl, src, lo, hi) {
    const part = (key) => (src[key] && src[key][sl.signal] ? clip(src[key][sl.signal], lo, hi) : { x: [], y: [] });
    sl.rows = (sl.keys || [sl.key]).map(part);
    if (sl.keys) {
      sl.r.data_source.data = { xs: sl.rows.map((d) => d.x), ys: sl.rows.map((d) => d.y), key: sl.keys, colour: sl.colours };
    } else sl.r.data_source.data = { x: sl.rows[0].x, y: sl.rows[0].y };
    return sl.rows.reduce((a, d) => a + d.x.length, 0);
  }

  // ---- run page ---------------------------------------------------------------------------------
  const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22", "#17becf"];
  const PHASE_FILL = { "idle": "#bbbbbb", "warm-up": "#f5d76e", "steady window": "#2ecc71",
    "checkpoint": "#e67e22", "eval": "#9b59b6" };

  // The run page's figures on one shared x range: power (devices + node total), requests,
  // events, then one small panel per auxiliary signal. Returns the grid, the range and the data
  // renderers (slots: a line per device and the total, a multi-line per small panel) that a zoom
  // refills.
  function runFigures(meta, xr) {
    const present = new Set();
    meta.devices.forEach((d) => d.signals.forEach((s) => present.add(s)));
    const figs = [];
    const slots = [];
    const power = figure({ name: "p", x_range: xr, height: 340, y_axis_label: "power (W)" });
    figs.push(power);
    meta.devices.forEach((d, i) => {
      slots.push(slot(power, d.key, "p", "device", d.label, COLOURS[i % COLOURS.length], 1,
        { legend_label: d.label }));
    });
    if (meta.total) {
      slots.push(slot(power, "total", "p", "total", "node total", "#000", 1.6,
        { legend_label: "node total (" + meta.levels.grid_ms / 1000 + " s grid)" }));
    }
    for (const [label, wins] of Object.entries(meta.phases)) {
      if (!PHASE_FILL[label] || wins.length > 60) continue;
      for (const [b, e] of wins) power.add_layout(new (B().BoxAnnotation)({ left: b / 1000, right: e / 1000,
        fill_color: PHASE_FILL[label], fill_alpha: 0.18, line_alpha: 0, level: "underlay" }));
    }
    const legend = power.legend;  // above the chart, not over the lines
    power.center = power.center.filter((m) => m !== legend);
    power.add_layout(legend, "above");
    legend.location = "left";
    legend.orientation = "horizontal";
    legend.click_policy = "hide";
    legend.label_text_font_size = "9pt";
    if (meta.requests) figs.push(requestsFigure(meta.requests, xr));
    power.add_tools(lineHover(slots.map((sl) => sl.r), "W"));
    const dots = [dotsFor(power, slots.slice())];
    const ev = eventsFigure(meta, xr);
    if (ev.fig) figs.push(ev.fig);
    for (const s of ["u", "c", "T", "m"]) {
      if (!present.has(s)) continue;
      const fig = figure({ name: s, x_range: xr, y_axis_label: meta.signals[s].label + " (" + meta.signals[s].unit + ")" });
      const devices = meta.devices.map((d, index) => ({ key: d.key, index, signals: d.signals }))
        .filter((d) => d.signals.includes(s));
      slots.push(panel(fig, s, devices, meta.signals[s].label));
      dots.push(dotsFor(fig, [slots[slots.length - 1]]));
      figs.push(fig);
    }
    figs.forEach((f) => { f.yaxis.axis_label_text_font_size = "10pt"; });
    // one time axis, under the last panel (fewer axes to lay out, as a stacked chart reads)
    figs.slice(0, -1).forEach((f) => { f.xaxis.visible = false; f.min_border_bottom = 4; });
    figs[figs.length - 1].xaxis.axis_label = "time since t0 (s)";
    figs[figs.length - 1].height += 30;
    return { grid: stack(figs), slots, events: ev.slots, dots };
  }

  function requestsFigure(r, xr) {
    const fig = figure({ name: "req", x_range: xr, y_axis_label: "requests in flight" });
    tag(fig.step({ x: field("x"), y: field("y"), mode: "after", line_color: "#16a085",
      source: source({ x: r.t_ms.map((t) => t / 1000), y: r.in_flight }) }), "requests", "in flight");
    const arrivals = tag(fig.scatter({ x: field("x"), y: field("y"), marker: "triangle", size: 7, color: "#c0392b",
      source: source({ x: r.arrivals_ms.map((t) => t / 1000), y: r.arrivals_ms.map(() => 0) }) }), "arrivals", "arrivals");
    fig.add_tools(new (B().HoverTool)({ renderers: [arrivals], tooltips: [["arrival", "@x{0.000} s"]] }));
    return fig;
  }

  // Phase windows as bars and point events as ticks, one row per label (a categorical y axis).
  // Like the power lines they are drawn at the view's resolution (eventsAt); returns the figure
  // and its event slots.
  function eventsFigure(meta, xr) {
    const phases = Object.keys(meta.phases), marks = Object.keys(meta.marks);
    if (!phases.length && !marks.length) return { fig: null, slots: [] };
    const rows = phases.concat(marks.map((l) => l + " ▾"));
    const fig = figure({ name: "ev", x_range: xr, y_range: rows.slice().reverse(), y_axis_label: "events",
      height: Math.max(110, 24 * rows.length + 30) });
    const slots = [];
    for (const label of phases) {
      slots.push({ events: meta.phases[label], phase: true, label, r: tag(fig.hbar({ y: field("y"), left: field("left"),
        right: field("right"), height: 0.6, fill_color: PHASE_FILL[label] || "#5dade2", line_alpha: 0,
        source: source({ y: [], left: [], right: [], text: [] }) }), "phase", label) });
    }
    for (const label of marks) {
      slots.push({ events: meta.marks[label], phase: false, label, r: tag(fig.scatter({ x: field("x"), y: field("y"),
        marker: "dash", angle: Math.PI / 2, size: 12, line_color: "#444",
        source: source({ x: [], y: [], text: [] }) }), "event", label, label + " marks") });
    }
    fig.add_tools(new (B().HoverTool)({ renderers: slots.map((sl) => sl.r),
      tooltips: [["", "@y"], ["t", "$x{0.0} s"], ["", "@{text}"]] }));
    return { fig, slots };
  }

  // An event slot's windows or marks within [lo, hi] ms, at the resolution of bucket ms: windows
  // less than a bucket apart are drawn as one bar and marks within one bucket as one tick (each
  // says how many it stands for), so a 2-hour run's thousands of steps draw as fast as its lines
  // and zooming in shows every one of them.
  function eventsAt(sl, lo, hi, bucket) {
    const at = (p) => (Array.isArray(p) ? p[0] : p);
    if (sl.phase) {
      const out = { y: [], left: [], right: [], text: [] };
      let n = 0;
      for (const [b, e] of sl.events) {
        if (e < lo || b > hi) continue;
        const last = out.right.length - 1;
        if (last >= 0 && b - out.right[last] * 1000 < bucket) { out.right[last] = Math.max(out.right[last], e / 1000); n += 1; }
        else { out.y.push(sl.label); out.left.push(b / 1000); out.right.push(e / 1000); out.text.push(""); n = 1; }
        out.text[out.text.length - 1] = n > 1 ? n + " windows (zoom in to separate them)" : ((e - b) / 1000).toFixed(1) + " s";
      }
      return out;
    }
    const out = { x: [], y: [], text: [] };
    let cell = null, n = 0;
    for (const p of sl.events) {
      const t = at(p);
      if (t < lo || t > hi) continue;
      const c = Math.floor(t / bucket);
      if (c === cell) { n += 1; out.text[out.text.length - 1] = n + " marks (zoom in to separate them)"; continue; }
      cell = c; n = 1;
      out.x.push(t / 1000); out.y.push(sl.label + " ▾"); out.text.push(Array.isArray(p) ? String(p[1]) : sl.label);
    }
    return out;
  }

  // The folder of a run named by its run id (run.html?run=<run_id>): looked up in data/catalog.js,
  // loaded on demand (the run page does not load the catalog otherwise); null when no run has it.
  async function folderOfRunId(runId) {
    if (!cache.catalog) {
      const got = new Promise((resolve) => {
        const s = document.createElement("script");
        s.src = "data/catalog.js";
        s.onload = () => { s.remove(); resolve(); };
        s.onerror = () => { s.remove(); resolve(); };
        document.head.appendChild(s);
      });
      await got;
    }
    if (!cache.catalog) return null;
    const row = catalogRows().find((r) => String(r.run_id) === runId);
    return row ? row.folder : null;
  }

  // A run's meta from ?run=: its folder (catalog links) or its run id (links others write).
  async function runMeta(asked) {
    if (FOLDER_RE.test(asked)) {
      try { return await load(asked + "/meta"); } catch (err) { /* maybe a run id of that shape */ }
    }
    const folder = await folderOfRunId(asked);
    if (!folder) return null;
    try { return await load(folder + "/meta"); } catch (err) { return null; }
  }

  async function runPage(main) {
    const asked = params().get("run");
    const missing = () => {
      main.append($("p", { class: "error", id: "no-run", text: "no run " + asked + " in this dataset" }));
      state.ready = true;
    };
    if (!asked) { missing(); return; }
    const t0 = performance.now();
    mark("start");
    const meta = await runMeta(asked);
    if (!meta) { missing(); return; }
    mark("meta");
    document.title = "LLM-PowerTrace — " + meta.run_id;
    main.append($("h1", { text: meta.run_id }));
    if (meta.cpu_proxy) main.append(proxyBanner("this run's power is"));
    main.append($("p", { class: "subtitle", text: [meta.workload, meta.platform, meta.devices.length + " device(s)",
      "sampler " + meta.sampler, "power field " + meta.power_field].join(" · ") }));
    if (meta.total_note) main.append($("p", { class: "note", text: meta.total_note }));
    const plot = $("div", { id: "run-plot", "data-run-plot": meta.run_id, class: "plot tall" });
    main.append(plot);
    const info = $("div", { class: "level-info", id: "level-info" });
    main.append(info);

    const lv = meta.levels;
    const full = [lv.origin_ms, meta.end_ms];
    let xr = null, grid = null, slots = [], events = [], dots = [];
    let seq = 0;
    const forced = params().get("level");  // ?level=N forces the first draw's level (bench/explorer.py)
    async function draw(x0ms, x1ms, first) {
      const my = ++seq;
      const force = first && forced !== null;
      const level = force
        ? Math.min(lv.bucket_ms.length - 1, Math.max(0, Number(forced))) : chooseLevel(lv, x0ms, x1ms);
      const sigLevel = force ? level : Math.max(level, chooseLevel(lv, x0ms, x1ms, MAX_SIGNAL_BUCKETS));
      const margin = (x1ms - x0ms) * 0.5;
      const [chunks, sigChunks] = await Promise.all([
        loadRange(meta, level, x0ms - margin, x1ms + margin),
        sigLevel === level ? null : loadRange(meta, sigLevel, x0ms - margin, x1ms + margin)]);
      if (my !== seq) return;
      mark("loaded");
      const data = decode(meta, chunks, 0);
      const sigData = sigChunks ? decode(meta, sigChunks, 0) : data;
      mark("decoded");
      if (first) {
        await library;
        mark("library");
        xr = new (B().Range1d)({ name: "time", start: full[0] / 1000, end: full[1] / 1000 });
        ({ grid, slots, events, dots } = runFigures(meta, xr));
        mark("built");
      }
      const lo = (x0ms - margin) / 1000, hi = (x1ms + margin) / 1000;
      // few raw samples in view: mark each one, so the 100 ms ticks themselves are visible
      const few = level === 0 && (x1ms - x0ms) / lv.period_ms <= 600;
      let points = 0;
      for (const sl of slots) points += fill(sl, sl.signal === "p" ? data : sigData, lo, hi);
      for (const d of dots) fillDots(d, few);
      for (const sl of events) sl.r.data_source.data = eventsAt(sl, lo * 1000, hi * 1000, lv.bucket_ms[level]);
      if (first) {
        await showIn(plot, grid);
        state.firstDrawMs = performance.now() - t0;
        state.drawnAtMs = performance.now();  // since navigation start
      }
      state.level = level;
      state.range = [x0ms / 1000, x1ms / 1000];
      state.draws += 1;
      state.points = points;
      plot.dataset.level = String(level);
      plot.dataset.draws = String(state.draws);
      info.textContent = level === 0
        ? "showing raw samples (period " + lv.period_ms + " ms; node total on the " + lv.grid_ms + " ms metrics grid)"
        : "showing min/max per " + lv.bucket_ms[level] / 1000 + " s bucket (peak-preserving); zoom in for raw samples";
    }
    await draw(full[0], full[1], true);
    let timer = null;
    xr.change.connect(() => {
      clearTimeout(timer);
      const x0 = xr.start * 1000, x1 = xr.end * 1000;
      timer = setTimeout(() => draw(x0, x1, false), 60);
    });
    main.append(metricsPanel(meta));
    state.ready = true;
  }

  function metricsPanel(meta) {
    const cat = site();
    const box = $("section", { class: "panel" });
    if (meta.flags.length) {
      box.append($("h2", { text: "quality flags" }));
      const ul = $("ul", { id: "flags" });
      meta.flags.forEach((f) => ul.append($("li", {}, $("code", { text: f.flag }), " — " + f.description)));
      box.append(ul);
    }
    box.append($("h2", { text: "metrics (node total)" }));
    const t = $("table", { id: "metrics" }, $("tr", {}, $("th", { text: "metric" }), $("th", { text: "value" }),
      $("th", { text: "formula" })));
    for (const [name, value] of Object.entries(meta.metrics)) {
      t.append($("tr", { "data-metric": name }, $("td", {}, $("code", { text: name })),
        $("td", { class: "num", text: fmt(value) }), $("td", { class: "formula", text: cat.formulas[name] || "" })));
    }
    box.append(t);
    if (meta.metric_notes.length) {  // why a metric is null or how it was taken: after the values, folded
      const ul = $("ul", { id: "metric-notes" });
      meta.metric_notes.forEach((n) => ul.append($("li", { text: n })));
      box.append($("details", { id: "metric-notes-box" },
        $("summary", { text: "metric notes (" + meta.metric_notes.length + ")" }), ul));
    }
    box.append($("h2", { text: "settings" }));
    const s = $("table", { id: "settings" });
    for (const [k, v] of Object.entries(meta.settings)) if (v !== null) s.append($("tr", {}, $("td", { text: k }), $("td", { text: fmt(v) })));
    box.append(s);
    return box;
  }


  // ---- compare page ---------------------------------------------------------------------------------
  async function comparePage(main) {
    const folders = (params().get("runs") || "").split(",").filter((f) => FOLDER_RE.test(f)).slice(0, 4);
    main.append($("h1", { text: "compare runs" }));
    if (folders.length < 2) {
      main.append($("p", { text: "Pick 2–4 runs in the catalog (tick their boxes, then “compare selected”)." }));
      state.ready = true;
      return;
    }
    const metas = await Promise.all(folders.map((f) => load(f + "/meta")));
    if (metas.some((m) => m.cpu_proxy)) main.append(proxyBanner("at least one of these runs is"));
    main.append($("p", { class: "subtitle", text: "node totals aligned at work start (first warm-up, step, prefill, steady or arrival event): x = t − work start" }));
    const plot = $("div", { id: "compare-plot", "data-compare-plot": metas.map((m) => m.run_id).join(","), class: "plot" });
    main.append(plot);
    const span = (m) => [m.levels.origin_ms - m.work_start_ms, m.end_ms - m.work_start_ms];
    const lo = Math.min(...metas.map((m) => span(m)[0])), hi = Math.max(...metas.map((m) => span(m)[1]));
    await library;
    const xr = new (B().Range1d)({ name: "time", start: lo / 1000, end: hi / 1000 });
    const fig = figure({ name: "compare", x_range: xr, height: 520, x_axis_label: "time since work start (s)",
      y_axis_label: "node total power (W)" });
    const lines = metas.map((m, i) => line(fig, "compare", m.run_id, m.run_id, COLOURS[i % COLOURS.length], 1.3,
      { legend_label: m.run_id + (m.cpu_proxy ? " (CPU PROXY)" : "") }));
    fig.add_tools(lineHover(lines, "W"));
    fig.legend.location = "top_left";
    fig.legend.click_policy = "hide";
    let seq = 0;
    async function draw(x0, x1, first) {
      const my = ++seq;
      const parts = await Promise.all(metas.map(async (m) => {
        const a = x0 + m.work_start_ms, b = x1 + m.work_start_ms;
        const level = chooseLevel(m.levels, a, b);
        const data = decode(m, await loadRange(m, level, a - (b - a) * 0.5, b + (b - a) * 0.5), m.work_start_ms);
        const key = m.total ? "total" : (m.devices[0] || {}).key;
        const d = data[key] && data[key].p;
        return d ? clip(d, (x0 - (x1 - x0) * 0.5) / 1000, (x1 + (x1 - x0) * 0.5) / 1000) : { x: [], y: [] };
      }));
      if (my !== seq) return;
      parts.forEach((p, i) => { lines[i].data_source.data = { x: p.x, y: p.y }; });
      if (first) await showIn(plot, fig);
      state.draws += 1;
      plot.dataset.draws = String(state.draws);
    }
    await draw(lo, hi, true);
    let timer = null;
    xr.change.connect(() => {
      clearTimeout(timer);
      const x0 = xr.start * 1000, x1 = xr.end * 1000;
      timer = setTimeout(() => draw(x0, x1, false), 60);
    });
    const t = $("table", { id: "compare-metrics" });
    t.append($("tr", {}, $("th", { text: "metric" }), ...metas.map((m) => $("th", { text: m.run_id }))));
    const names = site().columns.filter((c) => c.group === "metric").map((c) => c.name);
    for (const n of names) t.append($("tr", {}, $("td", {}, $("code", { text: n })), ...metas.map((m) => $("td", { class: "num", text: fmt(m.metrics[n]) }))));
    main.append($("section", { class: "panel" }, $("h2", { text: "headline metrics" }), t));
    state.ready = true;
  }

  // ---- sweep page --------------------------------------------------------------------------------------
  function sweepPage(main) {
    const cat = Object.assign({}, site(), { rows: catalogRows() });
    main.append($("h1", { text: "sweep: a metric against an axis" }));
    const metricNames = Object.keys(cat.formulas).filter((n) => cat.rows.some((r) => typeof r[n] === "number"))
      .concat(cat.columns.filter((c) => c.group === "metric").map((c) => c.name));
    const metricsSet = [...new Set(metricNames)].filter((n) => cat.rows.some((r) => typeof r[n] === "number"));
    const axes = cat.columns.filter((c) => c.group === "axis" || c.group === "identity").map((c) => c.name)
      .filter((n) => n !== "run_id");
    const q = params();
    const pick = (id, options, chosen) => {
      const sel = $("select", { id, onchange: () => draw() });
      options.forEach((o) => sel.append($("option", { value: o, text: o })));
      if (chosen && options.includes(chosen)) sel.value = chosen;
      return sel;
    };
    const ySel = pick("sweep-metric", metricsSet, q.get("metric") || "energy_per_token_j");
    const xSel = pick("sweep-axis", axes, q.get("axis") || "model_params");
    const cSel = pick("sweep-colour", axes, q.get("colour") || "platform");
    const logX = $("input", { type: "checkbox", id: "sweep-logx", onchange: () => draw() });
    const logY = $("input", { type: "checkbox", id: "sweep-logy", onchange: () => draw() });
    main.append($("div", { class: "filters" }, "y ", ySel, " x ", xSel, " colour ", cSel,
      $("label", {}, logX, " log x"), $("label", {}, logY, " log y")));
    const plot = $("div", { id: "sweep-plot", class: "plot" });
    main.append(plot);
    if (cat.rows.some((r) => r.cpu_proxy)) main.append(proxyBanner("runs marked ◆ are cpu_proxy:"));
    let view = null;
    let seq = 0;
    async function draw() {
      const my = ++seq;
      await library;
      const y = ySel.value, x = xSel.value, c = cSel.value;
      const groups = {};
      for (const r of cat.rows) {
        if (r[x] === null || r[x] === undefined || typeof r[y] !== "number") continue;
        const g = String(r[c]);
        (groups[g] = groups[g] || []).push(r);
      }
      const kept = Object.values(groups).flat();
      // an axis of names (platform, family…) is categorical; numbers keep a linear or log axis
      const factors = kept.some((r) => typeof r[x] !== "number")
        ? [...new Set(kept.map((r) => String(r[x])))].sort((a, b) => a.localeCompare(b, undefined, { numeric: true })) : null;
      const fig = figure({ name: "sweep", height: 520, tools: "pan,wheel_zoom,box_zoom,reset,save", active_scroll: null,
        x_axis_label: x, y_axis_label: y, x_range: factors || undefined,
        x_axis_type: !factors && logX.checked ? "log" : "linear", y_axis_type: logY.checked ? "log" : "linear" });
      const renderers = Object.entries(groups).sort().map(([g, rs], i) => tag(fig.scatter({
        x: field("x"), y: field("y"), marker: field("marker"), size: 10, color: COLOURS[i % COLOURS.length],
        fill_alpha: 0.7, legend_label: c + "=" + g,
        source: source({ x: rs.map((r) => (factors ? String(r[x]) : r[x])), y: rs.map((r) => r[y]),
          run: rs.map((r) => r.run_id + (r.cpu_proxy ? " (CPU PROXY)" : "")),
          marker: rs.map((r) => (r.cpu_proxy ? "diamond" : "circle")) }) }), "sweep", g));
      fig.add_tools(new (B().HoverTool)({ renderers, tooltips: [["run", "@run"], [x, "@x"], [y, "@y"]] }));
      if (renderers.length) fig.legend.location = "top_left";
      if (view) view.remove();
      plot.replaceChildren();
      const shown = await showIn(plot, fig);
      if (my !== seq) { shown.remove(); return; }
      view = shown;
      plot.dataset.traces = String(renderers.length);
      state.draws += 1;
    }
    return draw().then(() => { state.ready = true; });
  }

  // ---- entry ----------------------------------------------------------------------------------------------
  function start() {
    const page = document.body.dataset.page;
    state.page = page;
    const main = document.getElementById("main");
    const about = site();
    document.getElementById("dataset").textContent = "dataset: " + about.dataset + " · " + about.runs + " runs · schema " + about.schema_version;
    const pages = { index: catalogPage, run: runPage, compare: comparePage, sweep: sweepPage };
    Promise.resolve(pages[page](main)).catch((err) => {
      main.append($("p", { class: "error", text: String(err) }));
      console.error(err);
    });
  }

  return { got, load, start, state, chooseLevel };
})();
