/* veotrace view: the memory timeline of one page, drawn with uPlot from the data embedded beside it.
   Every string from an input is set with textContent (never as markup); the page asks for nothing
   from outside (its Content-Security-Policy forbids it). */
(function () {
  "use strict";
  const COLORS = ["#4e79a7", "#f28e2c", "#e15759", "#76b7b2", "#59a14f", "#edc949", "#af7aa1", "#ff9da7",
                  "#9c755f", "#bab0ab"];
  const OTHER_COLOR = "#c7c7c7";
  const api = window.veotraceView || (window.veotraceView = {lanes: [], timings: {}, errors: []});

  function el(tag, cls, textValue) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (textValue !== undefined && textValue !== null) e.textContent = String(textValue);
    return e;
  }

  function decode(col) {
    if (col === null || col === undefined) return null;
    const raw = atob(col.b);
    const bytes = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    let a;
    if (col.t === "u1") a = bytes;
    else if (col.t === "u4") a = new Uint32Array(bytes.buffer, 0, col.n);
    else a = new Float64Array(bytes.buffer, 0, col.n);
    const q = col.q, o = col.o || 0;
    if (q === 1 && o === 0 && col.t !== "u4") return a;
    const out = new Float64Array(col.n);
    for (let i = 0; i < col.n; i++) out[i] = a[i] * q + o;
    return out;
  }

  function fmtBytes(n) {
    if (n === null || n === undefined || !isFinite(n)) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let v = Math.abs(n), k = 0;
    while (v >= 1024 && k < units.length - 1) { v /= 1024; k++; }
    return (n < 0 ? "-" : "") + (k ? v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2) : String(v)) + " " + units[k];
  }
  function fmtX(lane, x) {
    if (lane.x_unit === "s") return x >= 100 ? x.toFixed(1) + " s" : x.toPrecision(6) + " s";
    return "entry " + Math.round(x).toLocaleString("en");
  }
  function fmtNum(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en"); }

  function lowerBound(arr, v) {
    let lo = 0, hi = arr.length;
    while (lo < hi) { const m = (lo + hi) >> 1; if (arr[m] < v) lo = m + 1; else hi = m; }
    return lo;
  }

  function Lane(root, d, index) {
    const lane = {data: d, index: index};
    const x = decode(d.x), level = decode(d.level), state = decode(d.state);
    const bytes = d.bytes.map(decode), blocks = d.blocks.map(decode), reserved = decode(d.reserved);
    const G = bytes.length, P = x.length, L = d.buckets.length;
    lane.x = x; lane.bytes = bytes; lane.blocks = blocks; lane.reserved = reserved; lane.state = state;
    // a profiler trace's ops: per carried memory event its time, signed bytes and enclosing names' indexes
    const ops = d.ops ? {x: decode(d.ops.x), size: decode(d.ops.size), op: decode(d.ops.op), frame: decode(d.ops.frame),
                         kernel: decode(d.ops.kernel), module: decode(d.ops.module), names: d.ops.names} : null;
    lane.ops = ops;
    function opsAt(xv) {  // the lines of the memory event at or before time xv (the first when before them all)
      if (!ops || !ops.x.length) return [];
      const j = Math.max(0, lowerBound(ops.x, xv + 1e-12) - 1);
      const name = k => (ops[k][j] >= 0 ? ops.names[ops[k][j]] : "(none)");
      const lines = [`memory event at ${fmtX(d, ops.x[j])}: ${ops.size[j] < 0 ? "free" : "alloc"} of ${fmtNum(Math.abs(ops.size[j]))} bytes`,
        `op: ${name("op")}`, `python frame: ${name("frame")}`, `kernel: ${name("kernel")}`];
      if (ops.module[j] >= 0) lines.push(`module: ${name("module")}`);
      return lines;
    }
    lane.opsAt = opsAt;
    const cum = [];  // cumulative bytes, bottom group first
    for (let g = 0; g < G; g++) {
      const c = new Float64Array(P);
      for (let i = 0; i < P; i++) c[i] = bytes[g][i] + (g ? cum[g - 1][i] : 0);
      cum.push(c);
    }
    const byLevel = [];  // per level (0..L: L is every state kept), the points drawn there
    for (let l = 0; l <= L; l++) {
      const idx = [];
      for (let i = 0; i < P; i++) if (level[i] <= l) idx.push(i);
      byLevel.push(Int32Array.from(idx));
    }
    const color = g => (d.groups[g] && d.groups[g].other ? OTHER_COLOR : COLORS[g % COLORS.length]);

    const box = el("section", "vt-lane");
    box.appendChild(el("h3", "vt-title", d.title));
    for (const n of d.notes) box.appendChild(el("p", "vt-note", n));
    const legend = el("ul", "vt-legend");
    for (let g = G - 1; g >= 0; g--) {
      const li = el("li");
      const sw = el("span", "vt-swatch");
      sw.style.background = color(g);
      li.appendChild(sw);
      li.appendChild(el("span", null, d.groups[g].label || d.groups[g].name));
      li.title = d.groups[g].name;  // the whole site on hover (an attribute set as text, never markup)
      legend.appendChild(li);
    }
    if (reserved) {
      const li = el("li"); const sw = el("span", "vt-swatch vt-reserved-swatch"); li.appendChild(sw);
      let most = 0;
      for (const v of reserved) if (v > most) most = v;
      li.appendChild(el("span", null, `reserved (peak ${fmtBytes(most)}; above the live bytes' scale it is clipped)`));
      legend.appendChild(li);
    }
    const tools = el("div", "vt-tools");
    const levelText = el("span", "vt-level");
    const reset = el("button", null, "Whole trace");
    const out = el("button", null, "Zoom out");
    tools.append(reset, out, levelText);
    const chartBox = el("div", "vt-chart");
    const fragBox = el("div", "vt-frag");
    const info = el("pre", "vt-info", "Hover a band for its site and stack; drag to zoom; click a time for its segment map.");
    const mapHead = el("div", "vt-maphead");
    const mapPick = el("div", "vt-mappick");
    const mapCanvas = el("canvas", "vt-map");
    const mapInfo = el("pre", "vt-mapinfo");
    const segBox = el("div", "vt-seglane");
    const stepBar = el("div", "vt-stepbar");
    const tableBox = el("div", "vt-allocs");
    // a lane without maps (no segments or blocks; events without addresses; a CPU lane): no empty map drawn
    if (!d.maps.length) mapCanvas.style.display = mapInfo.style.display = "none";
    box.append(legend, tools, chartBox, fragBox, segBox, info, el("h4", null, "Segment and block map"), mapPick, stepBar,
               mapHead, mapCanvas, mapInfo, tableBox);
    root.appendChild(box);

    const width = () => Math.max(400, chartBox.clientWidth || root.clientWidth || 1000);
    const x0 = x[0], x1 = x[P - 1] > x0 ? x[P - 1] : x0 + 1;
    lane.drawn = {level: null, points: 0};

    function slice(a, b) {
      const px = width();
      let l = L;
      for (let k = 0; k < L; k++) {
        if (d.buckets[k] * (b - a) / (x1 - x0) >= px) { l = k; break; }
      }
      const idx = byLevel[l];
      const xs = new Float64Array(idx.length);
      for (let i = 0; i < idx.length; i++) xs[i] = x[idx[i]];
      let lo = Math.max(0, lowerBound(xs, a) - 1), hi = Math.min(idx.length, lowerBound(xs, b) + 1);
      if (hi <= lo) { lo = 0; hi = idx.length; }
      const pick = idx.subarray(lo, hi);
      const cols = [Array.from(pick, i => x[i])];
      for (let g = G - 1; g >= 0; g--) cols.push(Array.from(pick, i => cum[g][i]));
      if (reserved) cols.push(Array.from(pick, i => reserved[i]));
      lane.drawn = {level: l, levels: L, points: pick.length, from: a, to: b, pick: pick};
      levelText.textContent = (l < L ? `summary level ${l + 1} of ${L} (${fmtNum(d.buckets[l])} buckets over the trace, ` +
        "the highest and lowest state of each)" : "every state kept here (exact near peaks and OOMs; elsewhere the finest summary)") +
        `: ${fmtNum(pick.length)} points`;
      return cols;
    }

    const series = [{label: d.x_unit === "s" ? "seconds" : "entry"}];
    for (let g = G - 1; g >= 0; g--) {
      series.push({label: (d.groups[g].label || d.groups[g].name).slice(0, 80), stroke: color(g), fill: color(g), width: 0, points: {show: false}});
    }
    // reserved bytes hold between the states kept (a step, not a slope: its segments lane is the same)
    if (reserved) series.push({label: "reserved", stroke: "#222", width: 1.5, dash: [6, 3], points: {show: false},
      paths: uPlot.paths.stepped({align: 1})});
    let relevel = false;
    function drawMarks(u) {
      const ctx = u.ctx, top = u.bbox.top, h = u.bbox.height, dpr = devicePixelRatio || 1;
      ctx.save();
      ctx.beginPath(); ctx.rect(u.bbox.left, top, u.bbox.width, h); ctx.clip();
      for (const ph of d.phases) {
        if (ph.depth !== 0) continue;
        const a = u.valToPos(ph.start, "x", true), b = u.valToPos(ph.end, "x", true);
        ctx.fillStyle = "rgba(120,120,200,0.18)";
        ctx.fillRect(a, top, Math.max(1, b - a), 14 * dpr);
        if (b - a > 40 * dpr) { ctx.fillStyle = "#333"; ctx.font = `${10 * dpr}px sans-serif`; ctx.fillText(ph.name.slice(0, 60), a + 2, top + 10 * dpr); }
      }
      let row = 0;  // each mark's label one line lower than the last, so marks close together stay readable
      const line = (v, col, label) => {
        const p = u.valToPos(v, "x", true);
        ctx.strokeStyle = col; ctx.lineWidth = 1.5 * dpr; ctx.setLineDash([]);
        ctx.beginPath(); ctx.moveTo(p, top); ctx.lineTo(p, top + h); ctx.stroke();
        ctx.font = `${10 * dpr}px sans-serif`;
        const w = ctx.measureText(label).width, x = p + 3 + w > u.bbox.left + u.bbox.width ? p - 3 - w : p + 3;
        ctx.fillStyle = col; ctx.fillText(label, x, top + (26 + 12 * (row++ % 6)) * dpr);
      };
      for (const m of d.marks) line(m.x, "#999", m.text.slice(0, 40));
      for (const o of d.ooms) line(o.x, "#d62728", "OOM " + fmtBytes(o.request_bytes));
      for (const p of d.peaks) line(p.x, p.kind === "allocated" ? "#000" : "#555", "peak " + p.kind + " " + fmtBytes(p.bytes));
      ctx.restore();
    }
    const opts = {
      width: width(), height: 320, series: series, legend: {show: false},
      // the live bytes fill the height; reserved bytes far above them (a huge segment) are drawn clipped, said in the info
      scales: {x: {time: false}, y: {range: (u, lo, hi) => {
        let live = 1;
        for (const v of u.data[1] || []) if (v > live) live = v;
        return [0, (hi <= 4 * live ? Math.max(hi, 1) : live) * 1.08];
      }}},
      axes: [{label: d.x_unit === "s" ? "seconds after the first event" : "entry (no times recorded)"},
             {values: (u, vals) => vals.map(fmtBytes), size: 80, label: "bytes"}],
      cursor: {drag: {x: true, y: false}, points: {show: false}},
      hooks: {
        draw: [drawMarks],
        setScale: [(u, key) => {
          if (key !== "x" || relevel) return;
          relevel = true;
          const t = performance.now(), a = u.scales.x.min, b = u.scales.x.max;
          u.setData(slice(a, b), false);
          api.timings.lastRedraw = performance.now() - t;
          relevel = false;
          if (frag) frag.setScale("x", {min: u.scales.x.min, max: u.scales.x.max});
          if (lane.drawSegments) lane.drawSegments();
        }],
        setCursor: [u => hover(u)],
      },
    };
    const u = new uPlot(opts, slice(x0, x1), chartBox);
    lane.chart = u;
    let frag = null;
    if (d.frag && d.frag.x.length) {
      const fx = d.frag.x, fy = d.frag.external_frag.map(v => (v === null ? null : v));
      // the main chart's right edge (its x labels pad it), so the two share their x positions
      const rightPad = () => Math.max(0, width() - (u.bbox.left + u.bbox.width) / (devicePixelRatio || 1));
      frag = new uPlot({width: width(), height: 110, legend: {show: false}, cursor: {show: false},
        padding: [null, () => rightPad(), null, null],
        series: [{}, {label: "external fragmentation", stroke: "#8c564b", width: 1.5, points: {show: false},
          paths: uPlot.paths.stepped({align: 1})}],
        scales: {x: {time: false, range: () => [u.scales.x.min, u.scales.x.max]}, y: {range: [0, 1]}},
        axes: [{show: false}, {label: "external frag", size: 80}]}, [fx, fy], fragBox);
      fragBox.appendChild(el("p", "vt-note", "External fragmentation (1 - largest free / free) at the end of each window."));
    } else {
      fragBox.appendChild(el("p", "vt-note", d.x_unit !== "s" ? "No external fragmentation per window: windows need times." :
        d.maps.length ? "No external fragmentation per window: no reserved segments." :
        "No external fragmentation per window: it needs the segment map (the lane's notes above say why there is none)."));
    }
    lane.frag = frag;
    if (frag) requestAnimationFrame(() => frag.setSize({width: width(), height: 110}));  // once the chart is laid out

    function groupAt(i, yv) {
      for (let g = 0; g < G; g++) if (yv <= cum[g][i] && yv >= (g ? cum[g - 1][i] : 0) && bytes[g][i] > 0) return g;
      return -1;
    }
    lane.groupAt = groupAt;
    function hover(u) {
      if (!lane.drawn.pick || u.cursor.left === undefined || u.cursor.left < 0) return;
      // the drawn point nearest the cursor (found here: uPlot's own index can lag a data swap after a zoom)
      const xs = u.data[0], xv = u.posToVal(u.cursor.left, "x");
      if (!xs.length) {  // zoomed between two kept states: a profiler trace's op there is still known
        const opLines = opsAt(xv);
        if (opLines.length) info.textContent = opLines.join("\n");
        return;
      }
      let ci = Math.min(lowerBound(xs, xv), xs.length - 1);
      if (ci > 0 && xv - xs[ci - 1] < xs[ci] - xv) ci -= 1;
      const i = lane.drawn.pick[ci];
      const yv = u.posToVal(u.cursor.top, "y");
      const g = groupAt(i, yv);
      const lines = [`${fmtX(d, x[i])} (state after entry ${fmtNum(state[i])}): ${fmtBytes(cum[G - 1][i])} live` +
        (reserved ? `, ${fmtBytes(reserved[i])} reserved` : "")];
      if (g >= 0) {
        const grp = d.groups[g];
        lines.push(`${d.group_kind === "site" && !grp.other ? "site" : "group"}: ${grp.name}`);
        lines.push(`${fmtBytes(bytes[g][i])} (${fmtNum(bytes[g][i])} bytes) in ${fmtNum(blocks[g][i])} blocks`);
        if (grp.stack) {
          lines.push(`stack (${grp.user_frames} user frames first, of ${grp.frames}):`);
          for (const f of grp.stack) lines.push(`  ${f[0]}:${f[1]} ${f[2]}${f[3] ? "   (internal)" : ""}`);
        } else if (grp.about) {
          for (const line of grp.about) lines.push(line);
        } else if (grp.other) {
          lines.push("the groups outside the largest ones at the peak, summed");
        }
      }
      for (const line of opsAt(xv)) lines.push(line);
      info.textContent = lines.join("\n");
      lane.hovered = g;
    }

    // segment maps
    const maps = d.maps.map(m => {
      const rows = {};
      for (const k in m.rows) rows[k] = decode(m.rows[k]);
      return Object.assign({}, m, {rows: rows});
    });
    lane.maps = maps;
    lane.shown = null;
    function hexAt(m, offset) {  // an address of a map: its base (a hex string, exact past 2**53) plus an offset
      return "0x" + (BigInt(m.base) + BigInt(Math.round(offset))).toString(16);
    }
    lane.hexAt = hexAt;
    function mapHeadText(m) {
      const mt = m.metrics;
      const exp = mt.expandable_segments ? ` (${fmtNum(mt.expandable_segments)} expandable segment${mt.expandable_segments === 1 ? "" : "s"}` +
        ` drawn whole: ${fmtBytes(mt.unmapped_bytes)} of their span unmapped now)` : "";
      return `${m.label} at ${fmtX(d, m.x)} (state after entry ${fmtNum(m.state)}): ` +
        (mt.reserved_bytes === null ? `no segment events recorded, so nothing is known reserved: the map is the live blocks by address, ` +
          `a gap under ${fmtBytes(mt.max_gap_bytes)} between two of them counted free (fragmentation's rule without segments)` :
          `${fmtBytes(mt.reserved_bytes)} reserved in ${fmtNum(mt.segments)} segment${mt.segments === 1 ? "" : "s"}${exp}`) +
        `, ${fmtBytes(mt.live_bytes)} live in ${fmtNum(mt.live_blocks)} blocks, ` +
        `${fmtBytes(mt.free_bytes)} (${fmtNum(mt.free_bytes)} bytes) free in ${fmtNum(mt.free_blocks)} blocks, largest ${fmtBytes(mt.largest_free_bytes)}, ` +
        `external fragmentation ${mt.external_frag === null ? "–" : mt.external_frag.toFixed(4)}` +
        (m.fragmentation_at ? `  (as: veotrace fragmentation --at ${m.fragmentation_at})` : "") +
        (m.binned ? "; crowded segments drawn as address bins, the smallest as segment bins (exact byte counts)" : "");
    }
    function showMap(k) {
      const m = maps[k];
      lane.shown = k;
      lane.stepped = null;
      lane.shownMap = m;
      mapHead.textContent = mapHeadText(m);
      drawMap(m);
      for (const b of mapPick.children) b.classList.toggle("vt-on", Number(b.dataset.k) === k);
      if (lane.onMap) lane.onMap(k);
    }
    lane.showMap = showMap;
    for (let k = 0; k < maps.length; k++) {
      const b = el("button", null, `${maps[k].label} ${fmtX(d, maps[k].x)}`);
      b.dataset.k = String(k);
      b.addEventListener("click", () => showMap(k));
      mapPick.appendChild(b);
    }
    let layout = [];
    // the units drawn: a plain segment, an expandable segment (its mapped ranges and unmapped spans), a segment bin,
    // or the blocks outside every segment
    function mapUnits(m) {
      const r = m.rows, n = r.kind.length, units = new Map(), unitOfRange = new Map();
      const unit = (key, kind) => {
        if (!units.has(key)) units.set(key, {key: key, kind: kind, lo: Infinity, hi: -Infinity, rows: [], ranges: []});
        return units.get(key);
      };
      const grow = (u, i) => { u.lo = Math.min(u.lo, r.addr[i]); u.hi = Math.max(u.hi, r.addr[i] + r.size[i]); };
      for (let i = 0; i < n; i++) {
        const k = r.kind[i];
        if (k === 0) {
          const u = r.seg[i] >= 0 ? unit("x" + r.seg[i], "expandable") : unit("r" + r.range[i], "segment");
          u.ranges.push(i); grow(u, i); unitOfRange.set(r.range[i], u);
        } else if (k === 4) { const u = unit("x" + r.seg[i], "expandable"); u.rows.push(i); grow(u, i); }
        else if (k === 5) { const u = unit("b" + i, "segbin"); u.rows.push(i); grow(u, i); }
      }
      for (let i = 0; i < n; i++) {
        const k = r.kind[i];
        if (k === 0 || k === 4 || k === 5) continue;
        const u = r.range[i] >= 0 ? unitOfRange.get(r.range[i]) : unit("outside", "outside");
        u.rows.push(i);
        if (r.range[i] < 0) grow(u, i);
      }
      const out = Array.from(units.values());
      for (const u of out) { u.addr = u.lo; u.size = Math.max(0, u.hi - u.lo); }
      return out;
    }
    lane.mapUnits = mapUnits;
    function drawMap(m) {
      const r = m.rows;
      lane.highlighted = null;
      const segs = mapUnits(m);  // the segments drawn with their blocks first (largest first), then the segment bins
      segs.sort((a, b) => (a.kind === "segbin") - (b.kind === "segbin") || b.size - a.size || a.addr - b.addr);
      const W = Math.max(400, mapCanvas.parentNode.clientWidth || 1000), rowH = 14, gap = 4;
      const maxSize = segs.length ? Math.max(segs[0].size, 1) : 1;
      const rowsOut = [];
      let cur = [], used = 0;
      for (const s of segs) {  // pack segments into rows of at most the largest segment's width
        if (cur.length && used + s.size > maxSize) { rowsOut.push(cur); cur = []; used = 0; }
        cur.push(s); used += s.size;
      }
      if (cur.length) rowsOut.push(cur);
      const shown = rowsOut.slice(0, 400);
      const dpr = devicePixelRatio || 1;
      mapCanvas.width = W * dpr; mapCanvas.height = Math.max(1, shown.length * (rowH + gap)) * dpr;
      mapCanvas.style.width = W + "px"; mapCanvas.style.height = shown.length * (rowH + gap) + "px";
      const ctx = mapCanvas.getContext("2d");
      ctx.scale(dpr, dpr);
      const scale = (W - 2) / maxSize;
      layout = [];
      shown.forEach((row, ri) => {
        let off = 0;
        const y = ri * (rowH + gap);
        for (const s of row) {
          const sx = 1 + off * scale, sw = Math.max(1, s.size * scale);
          const at = a => sx + (a - s.addr) * scale;
          ctx.fillStyle = "#f4f4f4";
          if (s.kind === "expandable") for (const i of s.ranges) ctx.fillRect(at(r.addr[i]), y, Math.max(1, r.size[i] * scale), rowH);
          else ctx.fillRect(sx, y, sw, rowH);
          for (const i of s.rows) {
            const bx = at(r.addr[i]), bw = Math.max(0.5, r.size[i] * scale), k = r.kind[i];
            if (k === 1) { ctx.fillStyle = r.group[i] >= 0 ? color(r.group[i]) : "#888"; ctx.fillRect(bx, y, bw, rowH); }
            else if (k === 2) { ctx.fillStyle = "#ffffff"; ctx.fillRect(bx, y + 3, bw, rowH - 6); }
            else if (k === 3 || k === 5) {
              const liveShare = r.size[i] ? r.live[i] / r.size[i] : 0;
              ctx.fillStyle = r.group[i] >= 0 ? color(r.group[i]) : "#888";
              ctx.fillRect(bx, y + rowH * (1 - liveShare), bw, rowH * liveShare);
            } else if (k === 4) {  // unmapped pages of an expandable segment: hatched
              ctx.save(); ctx.beginPath(); ctx.rect(bx, y, bw, rowH); ctx.clip();
              ctx.strokeStyle = "#bbb"; ctx.lineWidth = 1;
              for (let hx = bx - rowH; hx < bx + bw; hx += 6) { ctx.beginPath(); ctx.moveTo(hx, y + rowH); ctx.lineTo(hx + rowH, y); ctx.stroke(); }
              ctx.restore();
            }
          }
          ctx.strokeStyle = "#333"; ctx.lineWidth = 1;
          if (s.kind === "expandable") {
            ctx.setLineDash([3, 2]); ctx.strokeRect(sx, y, sw, rowH); ctx.setLineDash([]);
            for (const i of s.ranges) ctx.strokeRect(at(r.addr[i]), y, Math.max(1, r.size[i] * scale), rowH);
          } else ctx.strokeRect(sx, y, sw, rowH);
          if (lane.highlight !== null && lane.highlight !== undefined && m === lane.highlightMap) {
            for (const i of s.rows) {
              if (r.kind[i] === 1 && r.addr[i] === lane.highlight) {
                ctx.strokeStyle = "#d62728"; ctx.lineWidth = 3;
                ctx.strokeRect(at(r.addr[i]) - 1, y - 1, Math.max(3, r.size[i] * scale) + 2, rowH + 2);
                lane.highlighted = {x: at(r.addr[i]), y: y};
              }
            }
          }
          layout.push({s: s, x: sx, w: sw, y: y, h: rowH});
          off += s.size + 2 / scale;
        }
      });
      if (rowsOut.length > shown.length) mapHead.textContent += `; first ${shown.length} of ${rowsOut.length} rows of segments drawn`;
      mapInfo.textContent = d.group_kind === "site"
        ? "Hover the map: a block's site, a free gap, and which sites pin a segment's free bytes."
        : "Hover the map: a block's address and size, a free gap, a segment's free bytes (" +
          (d.group_kind === "size class" ? "this snapshot recorded no stacks" : "a log records no sites") + ": blocks are coloured by size class).";
      lane.mapLayout = layout;
    }
    function mapHover(ev) {
      const m = lane.shownMap;
      if (!m) return;
      const r = m.rows;
      const rect = mapCanvas.getBoundingClientRect();
      const px = ev.clientX - rect.left, py = ev.clientY - rect.top;
      const hit = layout.find(b => px >= b.x && px <= b.x + b.w && py >= b.y && py <= b.y + b.h);
      if (!hit) return;
      const a = hit.s.addr + (px - hit.x) / (hit.w) * hit.s.size;
      let found = -1;
      for (const i of hit.s.rows) if (a >= r.addr[i] && a < r.addr[i] + r.size[i]) { found = i; if (r.kind[i] !== 2) break; }
      const s = hit.s, lines = [];
      let range = -1;
      if (s.kind === "segment") { range = r.range[s.ranges[0]]; lines.push(`segment ${hexAt(m, s.addr)}: ${fmtBytes(s.size)}`); }
      else if (s.kind === "expandable") {
        let mapped = 0;
        for (const i of s.ranges) { mapped += r.size[i]; if (a >= r.addr[i] && a < r.addr[i] + r.size[i]) range = r.range[i]; }
        lines.push(`expandable segment ${hexAt(m, s.addr)}: ${fmtBytes(mapped)} mapped in ${fmtNum(s.ranges.length)} range` +
          `${s.ranges.length === 1 ? "" : "s"} of the ${fmtBytes(s.size)} its pages were mapped in over the trace`);
      } else if (s.kind === "outside") lines.push("blocks outside every known segment");
      const pin = range >= 0 ? m.pins.find(p => p.range === range) : null;
      if (pin) lines.push(`${fmtBytes(pin.free_bytes)} free here, pinned by ${fmtNum(pin.live_blocks)} live blocks (${fmtBytes(pin.live_bytes)})` +
        (d.group_kind === "site" ? "; most by: " + pin.sites.map(x => d.sites[x]).join("; ") : ""));
      if (found >= 0) {
        const k = r.kind[found];
        if (k === 1) lines.push(`block ${hexAt(m, r.addr[found])}: ${fmtBytes(r.size[found])}` +
          (d.group_kind === "site" ? `; site: ${r.site[found] >= 0 ? d.sites[r.site[found]] : "–"}` :
            r.group[found] >= 0 ? `; ${d.groups[r.group[found]].name}` : ""));
        else if (k === 2) lines.push(`free gap ${hexAt(m, r.addr[found])}: ${fmtBytes(r.size[found])}`);
        else if (k === 3) lines.push(`address bin ${hexAt(m, r.addr[found])} (${fmtBytes(r.size[found])}): ${fmtBytes(r.live[found])} live, ` +
          `${fmtBytes(r.free[found])} free, largest gap ${fmtBytes(r.gap[found])}` + (r.group[found] >= 0 ? `; mostly ${d.groups[r.group[found]].name}` : ""));
        else if (k === 4) lines.push(`unmapped ${hexAt(m, r.addr[found])}: ${fmtBytes(r.size[found])} (pages of this segment mapped at another time)`);
        else if (k === 5) lines.push(`segment bin from ${hexAt(m, r.addr[found])}: ${fmtNum(r.seg[found])} segments, ${fmtBytes(r.size[found])} reserved, ` +
          `${fmtBytes(r.live[found])} live, ${fmtBytes(r.free[found])} free, largest gap ${fmtBytes(r.gap[found])}`);
      }
      mapInfo.textContent = lines.join("\n");
    }
    mapCanvas.addEventListener("mousemove", mapHover);
    if (maps.length) {
      const peak = maps.findIndex(m => m.label.startsWith("peak allocated"));
      showMap(peak >= 0 ? peak : maps.length - 1);
    } else {
      mapHead.textContent = "No segment map: the input records no segments or blocks, or its events no addresses " +
        "(the lane's notes above say which).";
    }
    // click a time (a click without a drag): the nearest instant with a map
    let down = null;
    u.over.addEventListener("mousedown", ev => { down = [ev.clientX, ev.clientY]; });
    u.over.addEventListener("mouseup", ev => {
      if (!down || Math.abs(ev.clientX - down[0]) > 3) return;
      lane.clickAt(u.posToVal(ev.clientX - u.over.getBoundingClientRect().left, "x"));
    });
    // a time inside a step range: the state after its last entry at or before that time, exactly; elsewhere the
    // nearest instant with a map
    lane.clickAt = xv => {
      for (let k = 0; k < lane.steps.length; k++) {
        const st = lane.steps[k], xs = st.x;
        if (xs.length > 1 && xv >= xs[0] && xv <= xs[xs.length - 1]) {
          let i = 0;
          while (i + 1 < xs.length && xs[i + 1] <= xv) i++;
          const metrics = showStep(k, st.w.from_state + i);
          mapHead.textContent = `(the state at ${fmtX(d, xv)}) ` + mapHead.textContent;
          return {step: k, state: st.w.from_state + i, metrics: metrics};
        }
      }
      if (!maps.length) return null;
      let best = 0;
      for (let k = 1; k < maps.length; k++) if (Math.abs(maps[k].x - xv) < Math.abs(maps[best].x - xv)) best = k;
      showMap(best);
      mapHead.textContent = `(nearest instant with a map to ${fmtX(d, xv)}) ` + mapHead.textContent;
      return {map: best};
    };
    reset.addEventListener("click", () => u.setScale("x", {min: x0, max: x1}));
    out.addEventListener("click", () => {
      const a = u.scales.x.min, b = u.scales.x.max, w = (b - a) * 2, c = (a + b) / 2;
      u.setScale("x", {min: Math.max(x0, c - w / 2), max: Math.min(x1, c + w / 2)});
    });
    u.over.addEventListener("wheel", ev => {
      ev.preventDefault();
      const a = u.scales.x.min, b = u.scales.x.max, f = ev.deltaY < 0 ? 0.8 : 1.25;
      const c = u.posToVal(ev.clientX - u.over.getBoundingClientRect().left, "x");
      u.setScale("x", {min: Math.max(x0, c - (c - a) * f), max: Math.min(x1, c + (b - c) * f)});
    }, {passive: false});
    // zoom to [a, b]; resolves with the milliseconds until the next frame is painted
    lane.zoom = (a, b) => new Promise(resolve => {
      const t = performance.now();
      u.setScale("x", {min: a, max: b});
      requestAnimationFrame(() => resolve(performance.now() - t));
    });
    lane.span = [x0, x1];

    // ---- the allocator state at every entry of a step range (around the peak and OOMs, or --from/--to) ----
    const steps = (d.steps || []).map(w => ({w: w, x: decode(w.x), blocks: {addr: decode(w.blocks.addr), size: decode(w.blocks.size),
      group: decode(w.blocks.group)}, ev: {kind: decode(w.events.kind), addr: decode(w.events.addr), size: decode(w.events.size),
      group: decode(w.events.group)}}));
    lane.steps = steps;
    function bisectRight(segs, a) {
      let lo = 0, hi = segs.length;
      while (lo < hi) { const mid = (lo + hi) >> 1; if (segs[mid].start <= a) lo = mid + 1; else hi = mid; }
      return lo;
    }
    function applySegment(segs, code, a, n) {  // frag.state.DeviceState.apply_segment, the same rules
      if (code === 4 || code === 6) {
        const i = bisectRight(segs, a);
        if ((i && segs[i - 1].end > a) || (i < segs.length && segs[i].start < a + n)) return;
        segs.splice(i, 0, {start: a, end: a + n, exp: code === 6});
        if (code === 6) {
          if (i + 1 < segs.length && segs[i + 1].exp && segs[i + 1].start === segs[i].end) segs[i].end = segs.splice(i + 1, 1)[0].end;
          if (i > 0 && segs[i - 1].exp && segs[i - 1].end === segs[i].start) segs[i - 1].end = segs.splice(i, 1)[0].end;
        }
        return;
      }
      const i = bisectRight(segs, a) - 1, seg = i >= 0 ? segs[i] : null;
      if (code === 5) { if (seg && seg.start === a) segs.splice(i, 1); return; }
      if (!seg || a + n > seg.end) return;
      const parts = [{start: seg.start, end: a, exp: true}, {start: a + n, end: seg.end, exp: true}].filter(p => p.end > p.start);
      segs.splice(i, 1, ...parts);
    }
    // the state of step range k after entry `state`: its start with its entries replayed (steps.state_at)
    function stepState(k, state) {
      const st = steps[k], w = st.w;
      const segs = w.segments.map(g => ({start: g[0], end: g[1], exp: g[2]}));
      const blocks = new Map();
      for (let i = 0; i < st.blocks.addr.length; i++) blocks.set(st.blocks.addr[i], [st.blocks.size[i], st.blocks.group[i]]);
      const upto = Math.max(0, Math.min(state, w.to_state) - w.from_state);
      for (let i = 0; i < upto; i++) {
        const kind = st.ev.kind[i], a = st.ev.addr[i], z = st.ev.size[i];
        if (kind === 1) blocks.set(a, [z, st.ev.group[i]]);
        else if (kind === 2) blocks.delete(a);
        else if (kind > 2) applySegment(segs, kind, a, z);
      }
      return {segs: segs, blocks: blocks};
    }
    // a map of that state in the rows the drawing reads (maps.layout's rule: a block reaching past its range's end is outside)
    function stepMap(k, state) {
      const st = steps[k], w = st.w, {segs, blocks} = stepState(k, state);
      const addrs = Array.from(blocks.keys()).sort((p, q) => p - q);
      const rows = {kind: [], range: [], seg: [], addr: [], size: [], group: [], site: [], live: [], free: [], gap: []};
      const push = (kind, range, seg, a, z, g) => {
        rows.kind.push(kind); rows.range.push(range); rows.seg.push(seg); rows.addr.push(a); rows.size.push(z);
        rows.group.push(g); rows.site.push(-1); rows.live.push(-1); rows.free.push(-1); rows.gap.push(-1);
      };
      const ext = w.extents, segOf = segs.map(g => {
        if (!g.exp) return -1;
        for (let e = 0; e < ext.length; e++) if (g.start >= ext[e][0] && g.end <= ext[e][1]) return e;
        return -1;
      });
      segs.forEach((g, r) => push(0, r, segOf[r], g.start, g.end - g.start, -1));
      let live = 0, outside = 0, free = 0, nfree = 0, largest = 0;
      const gap = (a, z, r) => { if (z > 0) { push(2, r, -1, a, z, -1); free += z; nfree++; if (z > largest) largest = z; } };
      if (w.segmented) {
        let cur = -1, prevEnd = 0;
        const lastEnd = segs.map(g => g.start);
        for (const a of addrs) {
          const [z, g] = blocks.get(a);
          live += z;
          const r = bisectRight(segs, a) - 1;
          const inside = r >= 0 && a + z <= segs[r].end;
          if (!inside) { outside++; push(1, -1, -1, a, z, g); continue; }
          push(1, r, -1, a, z, g);
          if (r !== cur) { cur = r; prevEnd = segs[r].start; }
          gap(prevEnd, a - prevEnd, r);
          prevEnd = a + z; lastEnd[r] = prevEnd;
        }
        segs.forEach((g, r) => gap(lastEnd[r], g.end - lastEnd[r], r));
      } else {
        const maxGap = w.max_gap;
        let prev = null;
        for (const a of addrs) {
          const [z, g] = blocks.get(a);
          live += z; push(1, -1, -1, a, z, g);
          if (prev !== null && a > prev && a - prev < maxGap) gap(prev, a - prev, -1);
          prev = a + z;
        }
      }
      const used = new Set(segOf.filter(e => e >= 0));
      let unmapped = 0;
      for (const e of used) {  // the unmapped spans of each expandable segment with pages mapped now
        let at = ext[e][0];
        const mine = segs.filter((g, r) => segOf[r] === e).map(g => [g.start, g.end]).concat([[ext[e][1], ext[e][1]]]);
        for (const [a, b] of mine) { if (a > at) { push(4, -1, e, at, a - at, -1); unmapped += a - at; } at = Math.max(at, b); }
      }
      const reserved = segs.reduce((t, g) => t + g.end - g.start, 0);
      const metrics = {reserved_bytes: w.segmented ? reserved : null, segments: segs.length, live_bytes: live, live_blocks: addrs.length,
        blocks_outside_segments: outside, free_bytes: free, free_blocks: nfree, largest_free_bytes: largest,
        external_frag: free > 0 ? 1 - largest / free : null, max_gap_bytes: w.max_gap};
      if (used.size) { metrics.expandable_segments = used.size; metrics.unmapped_bytes = unmapped; }
      const i = state - w.from_state, what = i > 0 ? stepEvent(k, i - 1) : "the range's start";
      return {label: `${w.label}, step ${fmtNum(i)} of ${fmtNum(w.to_state - w.from_state)}: ${what}`, x: st.x[Math.min(i, st.x.length - 1)],
        state: state, base: w.base, rows: rows, metrics: metrics, pins: [], stepped: true};
    }
    function stepEvent(k, i) {
      const st = steps[k], kind = st.ev.kind[i], a = st.ev.addr[i], z = st.ev.size[i], m = {base: st.w.base};
      const names = {1: "alloc", 2: "free", 4: "segment_alloc", 5: "segment_free", 6: "segment_map", 7: "segment_unmap"};
      if (!names[kind]) return `entry ${fmtNum(st.w.from_state + i)}: nothing the map shows`;
      const g = kind === 1 && st.ev.group[i] >= 0 ? ` (${d.groups[st.ev.group[i]].label || d.groups[st.ev.group[i]].name})` : "";
      return `entry ${fmtNum(st.w.from_state + i)}: ${names[kind]} ${hexAt(m, a)}, ${fmtBytes(z)}${g}`;
    }
    lane.stepMap = stepMap;
    lane.stepped = null;
    function showStep(k, state) {
      const w = steps[k].w;
      state = Math.max(w.from_state, Math.min(w.to_state, state));
      const m = stepMap(k, state);
      lane.stepped = {k: k, state: state, map: m};
      lane.shown = null;
      mapHead.textContent = mapHeadText(m);
      drawMap(m);
      lane.shownMap = m;
      stepText.textContent = `entry ${fmtNum(state)} (${fmtNum(w.from_state)}–${fmtNum(w.to_state)} can be stepped)`;
      for (const b of mapPick.children) b.classList.remove("vt-on");
      return m.metrics;
    }
    lane.step = showStep;
    const stepText = el("span", "vt-level");
    if (steps.length) {
      const pick = el("select");
      steps.forEach((st, k) => { const o = el("option", null, `step near ${st.w.label} (entries ${fmtNum(st.w.from_state)}–${fmtNum(st.w.to_state)})`); o.value = String(k); pick.appendChild(o); });
      const cur = () => (lane.stepped && lane.stepped.k === Number(pick.value) ? lane.stepped.state : steps[Number(pick.value)].w.from_state);
      const go = dlt => () => showStep(Number(pick.value), cur() + dlt);
      const btn = (t, f) => { const b = el("button", null, t); b.addEventListener("click", f); return b; };
      stepBar.append(el("span", null, "Allocator state at every entry: "), pick, btn("◀◀ 10", go(-10)), btn("◀ back", go(-1)),
        btn("forward ▶", go(1)), btn("10 ▶▶", go(10)), stepText);
      pick.addEventListener("change", () => showStep(Number(pick.value), steps[Number(pick.value)].w.from_state));
    }

    // ---- the segments over time: reserved bytes by segment, each shaded by how full it is ----
    const sl = d.segment_lane;
    if (sl && sl.units.length + (sl.other_units ? 1 : 0) > 0) {
      const sx = decode(sl.x), sizes = sl.size.map(decode), lives = sl.live.map(decode);
      const oSize = decode(sl.other_size), oLive = decode(sl.other_live);
      const canvas = el("canvas", "vt-segcanvas");
      segBox.append(canvas, el("p", "vt-note", `Segments over time: reserved bytes by segment (${fmtNum(sl.units.length)} drawn apart` +
        (sl.other_units ? `, ${fmtNum(sl.other_units)} more as one grey band` : "") +
        "), each band from its segment's reservation to its release, darker the fuller it is (live / reserved); an expandable " +
        "segment is one band growing and shrinking in place. The bands add up to the reserved line."));
      const total = new Float64Array(sx.length);
      for (let c = 0; c < sx.length; c++) { let t = oSize[c]; for (const z of sizes) t += z[c]; total[c] = t; }
      let most = 1;
      for (const t of total) if (t > most) most = t;
      lane.segmentTotals = total;
      function drawSegments() {
        const W = width(), H = 110, dpr = devicePixelRatio || 1;
        canvas.width = W * dpr; canvas.height = H * dpr; canvas.style.width = W + "px"; canvas.style.height = H + "px";
        const ctx = canvas.getContext("2d");
        ctx.scale(dpr, dpr);
        const left = u.bbox.left / dpr, bw = u.bbox.width / dpr, a = u.scales.x.min, b = u.scales.x.max;
        const px = v => left + (v - a) / (b - a) * bw;
        for (let c = 0; c < sx.length; c++) {
          const xa = px(sx[c]), xb = c + 1 < sx.length ? px(sx[c + 1]) : left + bw;
          if (xb < left || xa > left + bw) continue;
          let y = H;
          const band = (z, l, base) => {
            if (z <= 0) return;
            const h = z / most * (H - 4), full = Math.max(0, Math.min(1, l / z));
            ctx.fillStyle = base === null ? `rgba(31,119,180,${0.15 + 0.8 * full})` : base;
            ctx.fillRect(Math.max(left, xa), y - h, Math.max(1, Math.min(xb, left + bw) - Math.max(left, xa)), h);
            ctx.strokeStyle = "rgba(255,255,255,0.8)"; ctx.lineWidth = 0.5;
            ctx.beginPath(); ctx.moveTo(Math.max(left, xa), y - h); ctx.lineTo(Math.min(xb, left + bw), y - h); ctx.stroke();
            y -= h;
          };
          for (let k = 0; k < sizes.length; k++) band(sizes[k][c], lives[k][c], null);
          band(oSize[c], oLive[c], "#bbb");
        }
        ctx.fillStyle = "#5c6670"; ctx.font = "10px sans-serif"; ctx.fillText(`reserved, peak ${fmtBytes(most)}`, 4, 12);
      }
      drawSegments();
      requestAnimationFrame(drawSegments);  // again once the chart is laid out (its x labels pad its right edge)
      lane.drawSegments = drawSegments;
      canvas.addEventListener("mousemove", ev => {
        const r = canvas.getBoundingClientRect(), xv = u.posToVal((ev.clientX - r.left) * 1, "x");
        let c = Math.max(0, lowerBound(sx, xv) - (sx[lowerBound(sx, xv)] > xv ? 1 : 0));
        c = Math.min(c, sx.length - 1);
        const H = r.height, yv = (H - (ev.clientY - r.top)) / (H - 4) * most;
        let acc = 0, lines = [`${fmtX(d, sx[c])} (state after entry ${fmtNum(decode(sl.state)[c])}): ${fmtBytes(total[c])} reserved`];
        for (let k = 0; k < sizes.length; k++) {
          acc += sizes[k][c];
          if (yv <= acc && sizes[k][c] > 0) {
            const un = sl.units[k];
            lines.push(`${un.expandable ? "expandable segment" : "segment"} ${un.addr}: ${fmtBytes(sizes[k][c])} reserved, ` +
              `${fmtBytes(lives[k][c])} live (${(100 * lives[k][c] / sizes[k][c]).toFixed(1)}% full); reserved from ` +
              `${fmtX(d, un.first_x)} to ${fmtX(d, un.last_x)} (at the states sampled)`);
            break;
          }
        }
        info.textContent = lines.join("\n");
      });
    }

    // ---- the largest live allocations at the peak, linked to the map ----
    const al = d.allocations;
    if (al && al.rows.length) {
      const peakMap = maps.findIndex(m => m.label.startsWith("peak allocated"));
      tableBox.appendChild(el("h4", null, `The ${fmtNum(al.rows.length)} largest of the ${fmtNum(al.live_blocks)} live allocations at the ` +
        `peak (${fmtBytes(al.live_bytes)} live at ${fmtX(d, al.x)}, state after entry ${fmtNum(al.state)}); click a row for its block in the map`));
      const table = el("table", "vt-table");
      const head = el("tr");
      for (const h of ["#", "size", "requested", "site", "allocated", "freed", "lived"]) head.appendChild(el("th", null, h));
      table.appendChild(head);
      al.rows.forEach((row, i) => {
        const tr = el("tr");
        const lived = row.born_x === null ? "–" : row.died_x === null ? "to the end" : (d.x_unit === "s" ?
          fmtX(d, row.died_x - row.born_x) : `${fmtNum(row.died_state - row.born_state)} entries`);
        const grp = row.group >= 0 ? d.groups[row.group] : null;
        for (const v of [String(i + 1), fmtBytes(row.size), fmtNum(row.requested), (grp && !grp.other && grp.label) || row.site,
          row.born_x === null ? "before the trace" : fmtX(d, row.born_x), row.died_x === null ? "still live at the end" : fmtX(d, row.died_x), lived]) {
          tr.appendChild(el("td", null, v));
        }
        tr.title = row.site;
        tr.addEventListener("click", () => lane.pickAllocation(i));
        table.appendChild(tr);
      });
      tableBox.appendChild(table);
      lane.pickAllocation = i => {
        const row = al.rows[i];
        if (peakMap < 0) return;
        const m = maps[peakMap];
        lane.highlight = Number(BigInt(row.addr) - BigInt(m.base));
        lane.highlightMap = m;
        showMap(peakMap);
        const lines = [`block ${row.addr}: ${fmtBytes(row.size)} (${fmtNum(row.size)} bytes, ${fmtNum(row.requested)} requested)`,
          `site: ${row.site}`, `allocated ${row.born_x === null ? "before the trace" : "at " + fmtX(d, row.born_x) + " (entry " + fmtNum(row.born_state) + ")"}, ` +
          (row.died_x === null ? "still live at the end" : "freed at " + fmtX(d, row.died_x) + " (entry " + fmtNum(row.died_state) + ")")];
        if (row.stack.length) { lines.push("stack (user frames first):"); for (const f of row.stack) lines.push(`  ${f[0]}:${f[1]} ${f[2]}${f[3] ? "   (internal)" : ""}`); }
        mapInfo.textContent = lines.join("\n");
        return lane.highlighted;
      };
    }
    return lane;
  }

  function mount(root, data) {
    for (const n of data.notes) root.appendChild(el("p", "vt-note", n));
    data.lanes.forEach((d, i) => api.lanes.push(Lane(root, d, i)));
  }

  window.addEventListener("error", ev => api.errors.push(String(ev.message)));
  for (const node of document.querySelectorAll("script.vt-data")) {
    const root = document.getElementById(node.dataset.target);
    try {
      mount(root, JSON.parse(node.textContent));
    } catch (e) {
      api.errors.push(String(e && e.stack || e));
      root.appendChild(el("p", "vt-error", "The view could not be drawn: " + e));
      throw e;
    }
  }
  api.timings.firstDraw = performance.now();  // every chart drawn (uPlot draws on creation)
  api.ready = true;
  requestAnimationFrame(() => { api.timings.firstPaint = performance.now(); });  // and on screen
})();
