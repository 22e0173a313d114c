"use strict";
(function () {
  const data = JSON.parse(document.getElementById("run-data").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  const nodes = data.nodes;
  const byId = new Map(nodes.map(n => [n.id, n]));
  const onPath = new Set(data.best_path);
  const fmt = v => (v === null || v === undefined) ? "n/a"
    : (Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0)) ? v.toExponential(3)
    : String(Number(v.toPrecision(5)));
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const sel = (tag, attrs) => {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  };

  // Header and legend.
  const header = document.getElementById("header");
  header.appendChild(el("h1", {}, "Run " + data.run_id));
  const facts = el("div", {class: "facts"});
  const counts = Object.entries(data.status_counts).filter(([, c]) => c > 0)
    .map(([s, c]) => s + " " + c).join(", ");
  const direction = data.maximize ? "higher is better" : "lower is better";
  [["task", "predict " + data.target + " (" + data.task_type + ")"],
   ["metric", data.metric + " (valid, " + direction + ")"],
   ["answer's valid", fmt(data.best_valid) + (data.best ? " (node " + data.best + ")" : "")],
   ["nodes", nodes.length + (counts ? " (" + counts + ")" : "")]].forEach(([k, v]) => {
    const s = el("span", {}, k + ": ");
    s.appendChild(el("b", {}, v));
    facts.appendChild(s);
  });
  header.appendChild(facts);
  // Why the answer is the answer: the run's Selection record (engine/evaluation/selection.py).
  const chosen = data.selection;
  if (chosen) {
    header.appendChild(el("p", {class: "chosen", id: "selection"}, "answer " + chosen.node
      + ", chosen by --select " + chosen.rule + ": " + chosen.reason));
  }
  const legend = document.getElementById("legend");
  for (const [status, colour] of Object.entries(data.colours)) {
    const item = el("span", {class: "item"});
    item.appendChild(el("span", {class: "dot", style: "background:" + colour}));
    item.appendChild(document.createTextNode(status));
    legend.appendChild(item);
  }
  const pathItem = el("span", {class: "item"});
  pathItem.appendChild(el("span", {class: "line", style: "background:#f1c40f"}));
  pathItem.appendChild(document.createTextNode("best path (thick ring: the answer)"));
  legend.appendChild(pathItem);
  legend.appendChild(el("span", {class: "item"},
    "size and label: valid " + data.metric + " (bigger = better)"));

  const tree = document.getElementById("tree");
  if (nodes.length === 0) {
    tree.appendChild(el("div", {class: "empty"}, "No nodes yet: this run has not finished any."));
    return;
  }

  // Layout: leaves on consecutive columns, a parent centred over its children, depth as row.
  // Iterative post-order, so a chain of thousands of improvements cannot overflow the stack.
  const children = new Map();
  const roots = [];
  for (const n of nodes) {
    if (n.parent && byId.has(n.parent)) {
      if (!children.has(n.parent)) children.set(n.parent, []);
      children.get(n.parent).push(n.id);
    } else roots.push(n.id);
  }
  const col = new Map(), row = new Map();
  let nextLeaf = 0;
  const stack = roots.slice().reverse().map(id => [id, 0, false]);
  while (stack.length) {
    const [id, depth, done] = stack.pop();
    const kids = children.get(id) || [];
    if (!done) {
      row.set(id, depth);
      stack.push([id, depth, true]);
      for (let i = kids.length - 1; i >= 0; i--) stack.push([kids[i], depth + 1, false]);
    } else if (kids.length === 0) col.set(id, nextLeaf++);
    else col.set(id, (col.get(kids[0]) + col.get(kids[kids.length - 1])) / 2);
  }
  const DX = 64, DY = 86, PAD = 40;
  const maxRow = Math.max(...row.values());
  const width = PAD * 2 + Math.max(0, nextLeaf - 1) * DX;
  const height = PAD * 2 + maxRow * DY;
  const xy = id => [PAD + col.get(id) * DX, PAD + row.get(id) * DY];

  const scores = nodes.filter(n => n.metric !== null).map(n => n.metric);
  const lo = Math.min(...scores), hi = Math.max(...scores);
  const radius = n => (n.metric === null) ? 7
    : 8 + 10 * (hi > lo ? (n.metric - lo) / (hi - lo) : 1);

  const svg = sel("svg", {width: width, height: height, viewBox: "0 0 " + width + " " + height,
                          id: "tree-svg"});
  const edges = sel("g", {class: "edges"});
  const layer = sel("g", {class: "nodes"});
  svg.appendChild(edges);
  svg.appendChild(layer);
  for (const n of nodes) {
    if (!n.parent || !byId.has(n.parent)) continue;
    const [x1, y1] = xy(n.parent), [x2, y2] = xy(n.id);
    const both = onPath.has(n.id) && onPath.has(n.parent);
    const my = (y1 + y2) / 2;
    edges.appendChild(sel("path", {class: "edge" + (both ? " on-path" : ""),
      d: "M" + x1 + "," + y1 + " C" + x1 + "," + my + " " + x2 + "," + my + " " + x2 + "," + y2}));
  }
  // Best-path nodes last, so their rings are drawn on top.
  const order = nodes.filter(n => !onPath.has(n.id)).concat(nodes.filter(n => onPath.has(n.id)));
  const elements = new Map();
  for (const n of order) {
    const [x, y] = xy(n.id);
    const cls = "node status-" + n.status + (onPath.has(n.id) ? " on-path" : "")
      + (n.id === data.best ? " best" : "");
    const g = sel("g", {class: cls, "data-id": n.id, transform: "translate(" + x + "," + y + ")",
                        tabindex: 0});
    const title = sel("title");
    title.textContent = n.operator + " " + n.id + " · " + n.status
      + (n.metric_raw !== null ? " · valid " + data.metric + " " + fmt(n.metric_raw) : "");
    g.appendChild(title);
    g.appendChild(sel("circle", {r: radius(n), fill: data.colours[n.status] || "#999"}));
    const label = sel("text", {"text-anchor": "middle", y: radius(n) + 12});
    label.textContent = n.metric_raw !== null ? fmt(n.metric_raw) : n.status;
    g.appendChild(label);
    const op = sel("text", {"text-anchor": "middle", y: -radius(n) - 4});
    op.textContent = n.operator;
    g.appendChild(op);
    g.addEventListener("click", () => show(n.id));
    g.addEventListener("keydown", e => { if (e.key === "Enter") show(n.id); });
    layer.appendChild(g);
    elements.set(n.id, g);
  }
  tree.appendChild(svg);

  let scale = 1;
  const zoom = f => {
    scale = f === 0 ? 1 : Math.min(4, Math.max(0.1, scale * f));
    svg.setAttribute("width", width * scale);
    svg.setAttribute("height", height * scale);
  };
  document.getElementById("zoom-in").addEventListener("click", () => zoom(1.25));
  document.getElementById("zoom-out").addEventListener("click", () => zoom(0.8));
  document.getElementById("zoom-fit").addEventListener("click", () => zoom(0));

  // Side panel: everything known about one node, as text (never parsed as HTML).
  const panel = document.getElementById("panel");
  let selected = null;
  function show(id) {
    const n = byId.get(id);
    if (!n) return;
    if (selected) selected.classList.remove("selected");
    selected = elements.get(id);
    selected.classList.add("selected");
    panel.replaceChildren();
    panel.appendChild(el("h2", {}, n.operator + " " + n.id
      + (id === data.best ? " (the answer)" : onPath.has(id) ? " (on the best path)" : "")));
    const dl = el("dl", {id: "node-facts"});
    const add = (k, v) => {
      dl.appendChild(el("dt", {}, k));
      const dd = el("dd");
      if (v instanceof Node) dd.appendChild(v); else dd.textContent = v;
      dl.appendChild(dd);
    };
    add("status", n.status);
    add("valid " + data.metric, fmt(n.metric_raw));
    add("step / depth", n.step + " / " + n.depth);
    if (n.parent && byId.has(n.parent)) {
      const a = el("a", {}, n.parent);
      a.addEventListener("click", () => show(n.parent));
      add("parent", a);
    } else add("parent", "none (root)");
    add("children", String((children.get(id) || []).length));
    add("LLM", n.llm_seconds.toFixed(2) + " s");
    add("exec", n.exec_seconds.toFixed(2) + " s");
    add("queue", n.queue_seconds.toFixed(2) + " s");
    add("tokens", (n.prompt_tokens + n.completion_tokens) + " (" + n.prompt_tokens
      + " prompt, " + n.completion_tokens + " completion)");
    if (n.model) add("model", n.model + (n.temperature !== null ? " @ T=" + n.temperature : ""));
    add("workers", [n.llm_actor, n.executor].filter(Boolean).join(", ") || "none");
    if (chosen && id === chosen.node) add("chosen", "--select " + chosen.rule + ": "
      + chosen.reason);
    else if (chosen && chosen.candidates[id]) add("final selection", chosen.candidates[id]
      + " (not chosen)");
    if (n.cost) add("measured", n.cost);
    if (n.excluded) add("not eligible", n.excluded);
    if (n.flags) add("flags", n.flags);
    panel.appendChild(dl);
    const section = (title, tag, attrs, text) => {
      panel.appendChild(el("h3", {}, title));
      panel.appendChild(el(tag, attrs, text));
    };
    section("Plan", "p", {id: "node-plan"}, n.plan || "(none)");
    if (n.reflection) section("Reflection (before this step)", "p", {id: "node-reflection"},
      n.reflection);
    if (n.hint) section("Asked for", "p", {id: "node-hint"}, n.hint);
    if (n.error) section("Error", "pre", {class: "error", id: "node-error"}, n.error);
    section("Code", "pre", {id: "node-code"}, n.code || "(no code)");
    if (n.stdout) section("Printed (analysis findings)", "pre", {id: "node-stdout"}, n.stdout);
    if (n.stderr) {
      const d = el("details");
      d.appendChild(el("summary", {}, "stderr (tail)"));
      d.appendChild(el("pre", {class: "error"}, n.stderr));
      panel.appendChild(d);
    }
  }
  window.treeml = {show: show, data: data};
})();
